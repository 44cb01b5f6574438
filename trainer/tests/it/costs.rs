//! What a run costs, on its final protocol line (the parameter count, the evaluation's
//! milliseconds per sample, the peak memory), each against a figure measured apart; the
//! smaller models of `--num-layers`; the device-memory cap's flag and variable.
#![cfg(feature = "flex")]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::binary::{assert_refused, assert_success_logging, stderr, stdout, trainer, value};
use crate::common::fixtures;

/// The parameters of transformers' `BertForSequenceClassification` in closed form: the
/// embeddings (words, positions, token types, LayerNorm), per encoder layer the attention's
/// four projections, the feed-forward pair and two LayerNorms, the pooler, the classifier.
fn bert_classifier_parameters(config: &serde_json::Value, layers: usize, labels: usize) -> usize {
    let get = |key: &str| config[key].as_u64().unwrap() as usize;
    let (h, i) = (get("hidden_size"), get("intermediate_size"));
    let embeddings =
        (get("vocab_size") + get("max_position_embeddings") + get("type_vocab_size")) * h + 2 * h;
    let layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * (2 * h);
    embeddings + layers * layer + (h * h + h) + (h * labels + labels)
}

fn tiny_config() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("tiny-bert/config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_closed_form_gives_transformers_count_for_minilm_and_the_tiny_model() {
    // transformers 4.46's `sum(p.numel() for p in model.parameters())` of
    // `BertForSequenceClassification`: all-MiniLM-L6-v2 with 2 labels, the tiny test model
    // with 3 labels and its 2 layers, then 1.
    let minilm = serde_json::json!({
        "vocab_size": 30522, "hidden_size": 384, "intermediate_size": 1536,
        "max_position_embeddings": 512, "type_vocab_size": 2
    });
    assert_eq!(bert_classifier_parameters(&minilm, 6, 2), 22_713_986);
    assert_eq!(bert_classifier_parameters(&tiny_config(), 2, 3), 22_243);
    assert_eq!(bert_classifier_parameters(&tiny_config(), 1, 3), 13_699);
}

/// A training run of the tiny model on the fixture data with `extra` flags: its final line,
/// the whole run's wall-clock milliseconds, and the peak resident set the kernel counted for
/// the process (`wait4`'s `ru_maxrss`).
fn run_measured(extra: &[&str]) -> (String, f64, u64) {
    let data = fixtures().join("data");
    let started = Instant::now();
    // Reaped below by wait4, which gives its resource usage; std's wait would not.
    #[allow(clippy::zombie_processes)]
    let mut child = trainer()
        .args(["--model", fixtures().join("tiny-bert").to_str().unwrap()])
        .args(["--train", data.join("train.tsv").to_str().unwrap()])
        .args(["--eval", data.join("eval.tsv").to_str().unwrap()])
        .args(["--epochs", "2"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut status = 0;
    // SAFETY: rusage is a plain C struct that wait4 fills; the pid is our own child's, not yet
    // reaped (std's `Child` only reaps in `wait`, never called here).
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let pid = libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage);
        assert_eq!(pid, child.id() as libc::pid_t);
        usage
    };
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{out}"
    );
    let last = out.lines().last().expect("a final line").to_string();
    (last, wall_ms, usage.ru_maxrss as u64 * 1024)
}

#[test]
fn the_final_line_reports_parameters_eval_time_per_sample_and_peak_resident_set() {
    let (last, wall_ms, maxrss) = run_measured(&["--learning-rate", "0.003"]);
    assert!(last.starts_with("accuracy="), "{last}");
    assert_eq!(
        value(&last, "parameters") as usize,
        bert_classifier_parameters(&tiny_config(), 2, 3),
        "{last}"
    );
    // The 12 evaluation rows' time is a part of the run's.
    let per_sample = value(&last, "eval_ms_per_sample");
    assert!(
        per_sample > 0.0 && per_sample * 12.0 < wall_ms,
        "{last}, run {wall_ms} ms"
    );
    // The CPU names its peak as the process's resident set: the kernel's figure, read
    // before the process exits, so at most the kernel's peak and close to it.
    assert!(!last.contains("peak_memory_bytes"), "{last}");
    let rss = value(&last, "peak_rss_bytes") as u64;
    assert!(
        rss <= maxrss && rss as f64 >= 0.9 * maxrss as f64,
        "{rss} against {maxrss}"
    );
}

#[test]
fn fewer_layers_keep_the_bottom_ones_and_the_saved_model_has_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    // A rate so small that no weight moves: the saved layer is the checkpoint's own.
    let (last, _, _) = run_measured(&[
        "--num-layers",
        "1",
        "--max-len",
        "16",
        "--learning-rate",
        "1e-30",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        value(&last, "parameters") as usize,
        bert_classifier_parameters(&tiny_config(), 1, 3),
        "{last}"
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(saved["num_hidden_layers"], 1);
    let source = std::fs::read(fixtures().join("tiny-bert/model.safetensors")).unwrap();
    let source = safetensors::SafeTensors::deserialize(&source).unwrap();
    let written = std::fs::read(out.join("model.safetensors")).unwrap();
    let written = safetensors::SafeTensors::deserialize(&written).unwrap();
    let key = |layer: usize| format!("bert.encoder.layer.{layer}.attention.self.query.weight");
    assert_eq!(
        written.tensor(&key(0)).unwrap().data(),
        source.tensor(&key(0)).unwrap().data()
    );
    assert_ne!(
        source.tensor(&key(0)).unwrap().data(),
        source.tensor(&key(1)).unwrap().data()
    );
    assert!(written.tensor(&key(1)).is_err(), "only one layer is saved");
    let output = trainer()
        .args([
            "predict",
            "--model-dir",
            out.to_str().unwrap(),
            "a fine day",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
}

fn tiny_run(extra: &[&str]) -> Command {
    let mut command = trainer();
    command
        .args(["--model", fixtures().join("tiny-bert").to_str().unwrap()])
        .args([
            "--train",
            fixtures().join("data/train.tsv").to_str().unwrap(),
        ])
        .args(["--epochs", "1"])
        .args(extra);
    command
}

#[test]
fn more_layers_than_the_model_has_are_refused_naming_the_flag() {
    for (layers, message) in [
        (
            "3",
            "--num-layers: 3 is more than the model's 2 encoder layers (num_hidden_layers); give at most 2",
        ),
        ("0", "--num-layers: must be at least 1"),
    ] {
        let output = tiny_run(&["--num-layers", layers]).output().unwrap();
        // The model's layers are known once its config is read, after the first log lines.
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(message), "{}", stderr(&output));
        assert!(stdout(&output).is_empty());
    }
}

#[test]
fn bad_memory_caps_exit_2_naming_the_flag_or_the_variable() {
    let output = tiny_run(&["--gpu-memory", "lots"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--gpu-memory"),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("'lots' is not a memory size"),
        "{}",
        stderr(&output)
    );

    let output = tiny_run(&[])
        .env("HPTUNE_GPU_MEMORY", "0")
        .output()
        .unwrap();
    assert_refused(
        &output,
        "HPTUNE_GPU_MEMORY: '0' is less than one byte: a memory size is at least 1B",
    );
}

#[test]
fn on_the_cpu_the_log_says_the_cap_does_not_apply_the_flag_winning_over_the_variable() {
    let output = tiny_run(&["--gpu-memory", "16GiB"])
        .env("HPTUNE_GPU_MEMORY", "not even a size")
        .output()
        .unwrap();
    assert_success_logging(
        &output,
        "device memory cap 16.00 GiB (17179869184 bytes) (--gpu-memory) does not apply on the CPU",
    );
    let output = tiny_run(&[])
        .env("HPTUNE_GPU_MEMORY", "1048576")
        .output()
        .unwrap();
    assert_success_logging(
        &output,
        "device memory cap 1.0 MiB (1048576 bytes) (HPTUNE_GPU_MEMORY) does not apply on the CPU",
    );
}
