//! The serving path of the `Dockerfile`'s image, without building the image (no container
//! engine runs here): its final stage is read as Docker runs it. SageMaker starts a serving
//! container as `docker run IMAGE serve`, and Vertex AI with the model's container command
//! (`--container-command serve`); both must reach `hptune-trainer serve`. The stage's own
//! `RUN` that writes `/usr/local/bin/serve` is run here, into a folder standing for
//! `/usr/local/bin`, beside the real `hptune-trainer`, and the command is run from there.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{Serving, assert_success, tiny, trainer};

/// The Dockerfile's instructions after its last `FROM` (the image that runs), as (keyword,
/// arguments), continuation lines joined and comments left out.
fn final_stage() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile"))
        .expect("the Dockerfile");
    let mut instructions: Vec<(String, String)> = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(start) => pending.push_str(start),
            None => {
                pending.push_str(line);
                let (keyword, arguments) = pending.split_once(' ').unwrap_or((&pending, ""));
                instructions.push((keyword.to_uppercase(), arguments.trim().to_string()));
                pending.clear();
            }
        }
    }
    let last_from = instructions
        .iter()
        .rposition(|(keyword, _)| keyword == "FROM")
        .expect("a FROM");
    instructions.split_off(last_from + 1)
}

#[tokio::test]
async fn docker_run_image_serve_reaches_hptune_trainer_serve() {
    let stage = final_stage();
    let find = |keyword: &str, part: &str| {
        stage
            .iter()
            .find(|(k, arguments)| k == keyword && arguments.contains(part))
            .map(|(_, arguments)| arguments.clone())
    };
    // No ENTRYPOINT: `docker run IMAGE serve` runs `serve` instead of CMD, found on PATH.
    assert!(
        !stage.iter().any(|(k, _)| k == "ENTRYPOINT"),
        "an ENTRYPOINT would take `serve` as its argument: {stage:?}"
    );
    let copy = find("COPY", "hptune-trainer").expect("the stage copies hptune-trainer");
    assert!(copy.ends_with(" /usr/local/bin/"), "{copy}");
    assert_eq!(find("EXPOSE", "8080").as_deref(), Some("8080"));

    let bin = tempfile::tempdir().unwrap();
    let bin_dir = bin.path().display().to_string();
    let writes_serve = find("RUN", "/usr/local/bin/serve").expect("a RUN writing serve");
    let here = writes_serve.replace("/usr/local/bin", &bin_dir);
    assert_success(&Command::new("sh").args(["-c", &here]).output().unwrap());
    std::os::unix::fs::symlink(trainer(), bin.path().join("hptune-trainer")).unwrap();
    let path = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let serve = |args: &[&str]| {
        let mut command = Command::new("serve");
        command
            .args(args)
            .env("PATH", &path)
            .env_remove("HPTUNE_MODEL_DIR")
            .env_remove("AIP_HTTP_PORT")
            .env_remove("SAGEMAKER_BIND_TO_PORT");
        command
    };

    // SageMaker's command as it is: the model from /opt/ml/model, absent on this machine, so
    // the server's own error names it.
    if !Path::new("/opt/ml/model").exists() {
        let out = serve(&[]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("/opt/ml/model"), "{stderr}");
    }

    // With a model, on SageMaker's port variable: both services' routes answer.
    let serving =
        Serving::start(serve(&["--model-dir", tiny("tiny-bert").to_str().unwrap()])).await;
    for route in ["/invocations", "/predict"] {
        let predictions = serving.predictions(route, &["a fine film"]).await;
        assert_eq!(predictions.len(), 1, "{route}: {predictions:?}");
        assert!(
            predictions[0]["label"].is_string(),
            "{route}: {predictions:?}"
        );
    }
}
