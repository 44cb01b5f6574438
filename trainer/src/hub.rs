//! `--model` as a Hugging Face hub id (`ORG/NAME`): found in the hub cache as `huggingface_hub`
//! lays it out (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`, then
//! `models--ORG--NAME/snapshots/REV/`, REV from `refs/main`), or downloaded into it from
//! `$HF_ENDPOINT` (default `https://huggingface.co`) unless `HF_HUB_OFFLINE` is set.
//!
//! Downloads run `curl`: every HTTP client crate in reach (ureq, reqwest) changes the features
//! of crates that burn is built with, which rebuilds burn.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Result, TrainerError};

/// The revision a hub id without one resolves to.
const REVISION: &str = "main";
/// Files fetched when the repository has them; config.json, one weights file and one
/// tokenizer file are required.
const OPTIONAL_FILES: &[&str] = &["tokenizer_config.json", "special_tokens_map.json"];
/// The weights file that is fetched (the only format read).
const WEIGHTS: &str = "model.safetensors";
/// Tokenizer files; every one the repository has is fetched.
const TOKENIZER_FILES: &[&str] = &["tokenizer.json", "vocab.txt"];

/// Finds the checkpoint folder for `--model`: a local folder, or a hub id from the cache,
/// downloaded into the cache first when it is not there.
pub(crate) fn resolve_model_dir(model: &str) -> Result<PathBuf> {
    let local = PathBuf::from(model);
    if local.is_dir() {
        return Ok(local);
    }
    if !is_hub_id(model) {
        return Err(TrainerError::ModelNotFound(format!(
            "--model {model}: no such folder (and not a hub id of the form ORG/NAME)"
        )));
    }
    let repo = hub_cache()?.join(format!("models--{}", model.replace('/', "--")));
    if let Some(snapshot) = cached_snapshot(&repo) {
        return Ok(snapshot);
    }
    let put_here = repo.join("snapshots").join("manual");
    let instructions = format!(
        "put config.json, model.safetensors and tokenizer.json (or vocab.txt) \
         in {} (or in any folder, and pass that folder as --model; scripts/fetch-model.sh does this \
         for all-MiniLM-L6-v2)",
        put_here.display()
    );
    if offline() {
        return Err(TrainerError::ModelNotFound(format!(
            "--model {model}: no such folder, not in the Hugging Face cache, and HF_HUB_OFFLINE is set; {instructions}"
        )));
    }
    let endpoint = std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| "https://huggingface.co".to_string());
    let endpoint = endpoint.trim_end_matches('/');
    download(model, endpoint, &repo).map_err(|failure| {
        TrainerError::ModelNotFound(format!(
            "--model {model}: no such folder, not in the Hugging Face cache, and downloading it \
             from {endpoint} failed: {failure}; {instructions}"
        ))
    })
}

fn is_hub_id(model: &str) -> bool {
    let mut parts = model.split('/');
    let valid = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
    };
    valid(parts.next()) && valid(parts.next()) && parts.next().is_none()
}

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// The hub cache folder, as `huggingface_hub` chooses it.
fn hub_cache() -> Result<PathBuf> {
    std::env::var_os("HF_HUB_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HF_HOME").map(|h| PathBuf::from(h).join("hub")))
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub"))
        })
        .ok_or_else(|| {
            TrainerError::ModelNotFound(
                "no Hugging Face cache: set HF_HOME (or HOME), or pass a local folder as --model"
                    .to_string(),
            )
        })
}

/// The snapshot that `refs/main` names, else any complete snapshot (by name, for a stable
/// choice); a snapshot counts when it has config.json.
fn cached_snapshot(repo: &Path) -> Option<PathBuf> {
    let snapshots = repo.join("snapshots");
    let complete = |p: &Path| p.join("config.json").is_file();
    if let Ok(revision) = std::fs::read_to_string(repo.join("refs").join(REVISION)) {
        let pinned = snapshots.join(revision.trim());
        if complete(&pinned) {
            return Some(pinned);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| complete(p))
        .collect();
    found.sort();
    found.into_iter().next()
}

/// Why a download failed, in words.
type Failure = String;

/// Downloads the checkpoint's files into `repo/snapshots/COMMIT/` and points `refs/main` at
/// it; returns the snapshot folder.
fn download(id: &str, endpoint: &str, repo: &Path) -> std::result::Result<PathBuf, Failure> {
    let info_url = format!("{endpoint}/api/models/{id}/revision/{REVISION}");
    let info: RepoInfo = serde_json::from_slice(&curl(&info_url, None)?)
        .map_err(|e| format!("{info_url}: unexpected answer: {e}"))?;
    let files = choose_files(
        &info
            .siblings
            .iter()
            .map(|s| s.rfilename.as_str())
            .collect::<Vec<_>>(),
    )?;
    let snapshot = repo.join("snapshots").join(&info.sha);
    std::fs::create_dir_all(&snapshot)
        .map_err(|e| format!("creating {}: {e}", snapshot.display()))?;
    for file in files {
        let target = snapshot.join(file);
        if target.is_file() {
            continue;
        }
        let url = format!("{endpoint}/{id}/resolve/{}/{file}", info.sha);
        tracing::info!("downloading {url}");
        let partial = snapshot.join(format!("{file}.incomplete"));
        curl(&url, Some(&partial))?;
        std::fs::rename(&partial, &target)
            .map_err(|e| format!("writing {}: {e}", target.display()))?;
    }
    let refs = repo.join("refs");
    std::fs::create_dir_all(&refs)
        .and_then(|()| std::fs::write(refs.join(REVISION), &info.sha))
        .map_err(|e| format!("writing {}: {e}", refs.join(REVISION).display()))?;
    Ok(snapshot)
}

/// GETs `url` with curl (following redirects, failing on HTTP errors, with `HF_TOKEN` as a
/// bearer token when set), into `to` or, without it, returning the body.
fn curl(url: &str, to: Option<&Path>) -> std::result::Result<Vec<u8>, Failure> {
    let mut command = Command::new("curl");
    command.args(["--silent", "--show-error", "--fail", "--location"]);
    command.args(["--connect-timeout", "15", "--retry", "2"]);
    command.args([
        "--user-agent",
        concat!("hptune-trainer/", env!("CARGO_PKG_VERSION")),
    ]);
    if let Some(token) = std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty()) {
        command.args(["--header", &format!("Authorization: Bearer {token}")]);
    }
    if let Some(to) = to {
        command.arg("--output").arg(to);
    }
    let output = command
        .arg(url)
        .output()
        .map_err(|e| format!("cannot run curl, which downloads from the hub ({e})"))?;
    if !output.status.success() {
        let message = String::from_utf8_lossy(&output.stderr);
        return Err(format!("{url}: {}", message.trim()));
    }
    Ok(output.stdout)
}

/// The answer of `/api/models/ID/revision/REV`, as far as it is needed.
#[derive(serde::Deserialize)]
struct RepoInfo {
    /// The commit the revision points at.
    sha: String,
    /// The repository's files.
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(serde::Deserialize)]
struct Sibling {
    rfilename: String,
}

/// The files to fetch from a repository holding `available`.
fn choose_files(available: &[&str]) -> std::result::Result<Vec<&'static str>, Failure> {
    let has = |name: &str| available.contains(&name);
    if !has("config.json") {
        return Err("the repository has no config.json".to_string());
    }
    if !has(WEIGHTS) {
        return Err(format!(
            "the repository has no {WEIGHTS} (pytorch_model.bin, sharded and TensorFlow \
             checkpoints are not read)"
        ));
    }
    let tokenizer: Vec<&str> = TOKENIZER_FILES.iter().copied().filter(|t| has(t)).collect();
    if tokenizer.is_empty() {
        return Err(format!(
            "the repository has none of {}",
            TOKENIZER_FILES.join(", ")
        ));
    }
    let mut files = vec!["config.json", WEIGHTS];
    files.extend(tokenizer);
    files.extend(OPTIONAL_FILES.iter().copied().filter(|f| has(f)));
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_org_slash_name() {
        assert!(is_hub_id("sentence-transformers/all-MiniLM-L6-v2"));
        assert!(is_hub_id("google/bert_uncased_L-2_H-128_A-2"));
        assert!(!is_hub_id("bert-base-uncased"));
        assert!(!is_hub_id("models/a/b"));
        assert!(!is_hub_id("../x"));
        assert!(!is_hub_id("/abs/path"));
    }

    #[test]
    fn files_are_chosen_like_from_pretrained_does() {
        let files = choose_files(&[
            "config.json",
            "pytorch_model.bin",
            "model.safetensors",
            "vocab.txt",
            "tokenizer.json",
            "README.md",
            "tokenizer_config.json",
        ])
        .unwrap();
        assert_eq!(
            files,
            [
                "config.json",
                "model.safetensors",
                "tokenizer.json",
                "vocab.txt",
                "tokenizer_config.json"
            ]
        );
        let error = choose_files(&["config.json", "pytorch_model.bin", "vocab.txt"]).unwrap_err();
        assert!(error.contains("no model.safetensors"), "{error}");
        let error = choose_files(&["config.json", "model.safetensors"]).unwrap_err();
        assert!(error.contains("tokenizer.json, vocab.txt"), "{error}");
        assert!(
            choose_files(&["model.safetensors"])
                .unwrap_err()
                .contains("config.json")
        );
    }
}
