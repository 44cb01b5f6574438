//! Where `--model` can come from, driven through the binary: a `pytorch_model.bin` folder (an
//! error), a hub id in the Hugging Face cache, a hub id downloaded from an endpoint, an
//! unreachable endpoint, and a checkpoint whose head has another number of labels than the data.
#![cfg(feature = "flex")]

use crate::binary;
use crate::common::fixtures;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The trainer for one epoch, kept away from any real hub or cache.
fn trainer(model: &str, home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hptune-trainer"));
    command
        .args(["--model", model])
        .args(["--epochs", "1", "--seed", "3", "--learning-rate", "0.003"])
        .env("HF_HOME", home)
        .env("HF_ENDPOINT", "http://127.0.0.1:1")
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HPTUNE_METRICS_FILE")
        .env_remove("CLOUD_ML_HP_METRIC_FILE");
    command
}

/// The trainer on the fixture data.
fn train(model: &str, home: &Path) -> Command {
    let data = fixtures().join("data");
    let mut command = trainer(model, home);
    command
        .args(["--train", data.join("train.tsv").to_str().unwrap()])
        .args(["--eval", data.join("eval.tsv").to_str().unwrap()]);
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The one error line of a failed run (logs may come before it).
fn error_line(output: &Output) -> String {
    let text = stderr(output);
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hptune-trainer: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{text}");
    errors[0].to_string()
}

/// The protocol lines of a successful run.
/// The run's protocol lines, but the machine-dependent figures ([`binary::measurements`]).
fn measurements(output: Output) -> String {
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let text = binary::measurements(&output);
    assert_eq!(text.lines().count(), 2, "{text}");
    text
}

fn tiny_bert() -> String {
    fixtures().join("tiny-bert").to_str().unwrap().to_string()
}

#[test]
fn a_pytorch_model_bin_is_an_error_naming_the_file_and_how_to_convert_it() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "vocab.txt"] {
        std::fs::copy(
            fixtures().join("tiny-bert").join(name),
            dir.path().join(name),
        )
        .unwrap();
    }
    std::fs::write(dir.path().join("pytorch_model.bin"), b"PK\x03\x04").unwrap();
    let output = train(dir.path().to_str().unwrap(), home.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let message = error_line(&output);
    assert!(
        message.contains(dir.path().join("pytorch_model.bin").to_str().unwrap()),
        "{message}"
    );
    assert!(message.contains("safe_serialization=True"), "{message}");
}

/// A hub cache as huggingface_hub writes it: blobs, a snapshot of relative symlinks to them,
/// and `refs/main` naming the snapshot; plus an older, incomplete snapshot sorted before it.
fn fake_cache(home: &Path, id: &str) -> PathBuf {
    let repo = home
        .join("hub")
        .join(format!("models--{}", id.replace('/', "--")));
    let commit = "9f2c4e1d0b7a6c5e4d3c2b1a0f9e8d7c6b5a4f3e";
    let snapshot = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    for (i, name) in ["config.json", "model.safetensors", "vocab.txt"]
        .iter()
        .enumerate()
    {
        let blob = format!("blob{i}");
        std::fs::copy(
            fixtures().join("tiny-bert").join(name),
            repo.join("blobs").join(&blob),
        )
        .unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{blob}"), snapshot.join(name)).unwrap();
    }
    let stale = repo
        .join("snapshots")
        .join("0000000000000000000000000000000000000000");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::copy(
        fixtures().join("tiny-bert/config.json"),
        stale.join("config.json"),
    )
    .unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    snapshot
}

#[test]
fn a_hub_id_is_found_in_the_hugging_face_cache_at_the_revision_of_refs_main() {
    let home = tempfile::tempdir().unwrap();
    fake_cache(home.path(), "hptune-test/tiny-bert");
    let cached = measurements(
        train("hptune-test/tiny-bert", home.path())
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap(),
    );
    let local = measurements(train(&tiny_bert(), home.path()).output().unwrap());
    assert_eq!(cached, local);
}

#[test]
fn an_unreachable_hub_is_an_error_naming_where_to_put_the_files() {
    let home = tempfile::tempdir().unwrap();
    let output = train("hptune-test/absent", home.path()).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let message = error_line(&output);
    assert!(message.contains("http://127.0.0.1:1"), "{message}");
    let folder = home
        .path()
        .join("hub/models--hptune-test--absent/snapshots/manual");
    assert!(
        message.contains(folder.to_str().unwrap()),
        "{message} should name {}",
        folder.display()
    );
    assert!(message.contains("config.json"), "{message}");
    assert!(message.contains("fetch-model.sh"), "{message}");

    let offline = train("hptune-test/absent", home.path())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert_eq!(offline.status.code(), Some(2));
    assert!(
        stderr(&offline).contains("HF_HUB_OFFLINE"),
        "{}",
        stderr(&offline)
    );
}

/// Serves the hub's API and file routes for one repository from the tiny-bert fixture; returns
/// the endpoint URL.
fn fake_hub(id: &'static str, sha: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            let mut header = String::new();
            while reader.read_line(&mut header).unwrap() > 2 {
                header.clear();
            }
            let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
            let files = ["config.json", "model.safetensors", "vocab.txt"];
            let body = if path == format!("/api/models/{id}/revision/main") {
                let siblings: Vec<_> = files
                    .iter()
                    .chain(&["README.md"])
                    .map(|f| serde_json::json!({ "rfilename": f }))
                    .collect();
                Some(
                    serde_json::to_vec(&serde_json::json!({"sha": sha, "siblings": siblings}))
                        .unwrap(),
                )
            } else {
                files
                    .iter()
                    .find(|f| path == format!("/{id}/resolve/{sha}/{f}"))
                    .map(|f| std::fs::read(fixtures().join("tiny-bert").join(f)).unwrap())
            };
            let (status, body) = match body {
                Some(body) => ("200 OK", body),
                None => ("404 Not Found", b"not found".to_vec()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(&body).unwrap();
        }
    });
    endpoint
}

#[test]
fn a_hub_id_missing_from_the_cache_is_downloaded_into_it() {
    let home = tempfile::tempdir().unwrap();
    let sha = "1234567890abcdef1234567890abcdef12345678";
    let endpoint = fake_hub("hptune-test/tiny-bert", sha);
    let downloaded = measurements(
        train("hptune-test/tiny-bert", home.path())
            .env("HF_ENDPOINT", &endpoint)
            .output()
            .unwrap(),
    );
    let repo = home.path().join("hub/models--hptune-test--tiny-bert");
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        sha
    );
    for name in ["config.json", "model.safetensors", "vocab.txt"] {
        assert_eq!(
            std::fs::read(repo.join("snapshots").join(sha).join(name)).unwrap(),
            std::fs::read(fixtures().join("tiny-bert").join(name)).unwrap(),
            "{name}"
        );
    }
    let local = measurements(train(&tiny_bert(), home.path()).output().unwrap());
    assert_eq!(downloaded, local);
    // The second run finds the cache and needs no hub (the endpoint is unreachable again).
    let again = measurements(
        train("hptune-test/tiny-bert", home.path())
            .output()
            .unwrap(),
    );
    assert_eq!(again, local);
}

#[test]
fn a_head_with_another_number_of_labels_stops_unless_told_to_start_a_new_one() {
    let home = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    // Two of the fixture's three classes: the checkpoint's classifier has 3 outputs.
    let train_rows = std::fs::read_to_string(fixtures().join("data/train.tsv")).unwrap();
    let two_classes: Vec<&str> = train_rows
        .lines()
        .filter(|l| !l.ends_with("\tneu"))
        .collect();
    let path = data.path().join("train.tsv");
    std::fs::write(&path, two_classes.join("\n")).unwrap();
    let output = trainer(&tiny_bert(), home.path())
        .args(["--train", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    for needle in [
        "classifier.weight",
        "[3, 32]",
        "[2, 32]",
        "--ignore-mismatched-sizes",
    ] {
        assert!(message.contains(needle), "{needle} in {message}");
    }

    let output = trainer(&tiny_bert(), home.path())
        .args(["--train", path.to_str().unwrap()])
        .arg("--ignore-mismatched-sizes")
        .output()
        .unwrap();
    let message = stderr(&output);
    measurements(output);
    assert!(message.contains("re-initialised"), "{message}");
    assert!(
        message.contains("classifier.weight: stored [3, 32], model [2, 32]"),
        "{message}"
    );
    assert!(
        message.contains("classifier.bias: stored [3], model [2]"),
        "{message}"
    );
}
