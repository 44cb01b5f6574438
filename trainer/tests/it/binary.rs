//! The `hptune-trainer` binary run as the controller and a user run it: the protocol lines,
//! the metrics file, the saved checkpoint and `predict` on it, and errors.
#![cfg(feature = "flex")]

use crate::common::fixtures;
use std::process::{Command, Output};

/// The trainer binary, without the controller's variables of the test's own environment.
pub(crate) fn trainer() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hptune-trainer"));
    command.env_remove("HPTUNE_METRICS_FILE");
    command.env_remove("CLOUD_ML_HP_METRIC_FILE");
    command.env_remove("HPTUNE_OUTPUT_DIR");
    command.env_remove("HPTUNE_GPU_MEMORY");
    command.env_remove("HPTUNE_CHECKPOINT_DIR");
    command.env_remove("HPTUNE_RESUME_FROM");
    command
}

/// The process's stdout.
pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The process's stderr.
pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The protocol lines of `output` without what the machine's speed and memory decide (the
/// final line's `eval_ms_per_sample` and peak memory): what a seed repeats.
pub(crate) fn measurements(output: &Output) -> String {
    let machine_dependent = [
        "eval_ms_per_sample=",
        "peak_rss_bytes=",
        "peak_memory_bytes=",
    ];
    stdout(output)
        .lines()
        .map(|line| {
            let pairs = line.split_whitespace();
            let kept = pairs.filter(|pair| !machine_dependent.iter().any(|k| pair.starts_with(k)));
            kept.collect::<Vec<_>>().join(" ") + "\n"
        })
        .collect()
}

/// Checks that the run succeeded and that its log (stderr) says `text`.
pub(crate) fn assert_success_logging(output: &Output, text: &str) {
    assert!(output.status.success(), "stderr: {}", stderr(output));
    assert!(stderr(output).contains(text), "{}", stderr(output));
}

/// Checks that the run was refused as bad input: exit status 2, one line on stderr saying
/// `text`, nothing on stdout.
pub(crate) fn assert_refused(output: &Output, text: &str) {
    assert_eq!(output.status.code(), Some(2), "{}", stderr(output));
    let message = stderr(output);
    assert_eq!(message.trim().lines().count(), 1, "{message}");
    assert!(message.contains(text), "{message}");
    assert!(stdout(output).is_empty());
}

/// `key=value` pairs of a protocol line.
fn pairs(line: &str) -> Vec<(String, f64)> {
    line.split_whitespace()
        .map(|pair| {
            let (key, value) = pair.split_once('=').expect("key=value");
            (key.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

/// The value of `key` in a protocol line.
pub(crate) fn value(line: &str, key: &str) -> f64 {
    pairs(line)
        .into_iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
        .1
}

#[test]
fn training_reports_each_epoch_and_a_final_line_and_the_saved_model_predicts_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    let metrics_file = dir.path().join("metrics.jsonl");
    let data = fixtures().join("data");
    let output = trainer()
        .args(["--model", fixtures().join("tiny-bert").to_str().unwrap()])
        .args(["--train", data.join("train.tsv").to_str().unwrap()])
        .args(["--eval", data.join("eval.tsv").to_str().unwrap()])
        // Both spellings, as the controller passes `--<id>=<value>`.
        .arg("--learning_rate=0.003")
        .arg("--batch-size=8")
        .arg("--epochs=2")
        .arg("--warmup_ratio=0.1")
        .arg("--weight-decay=0.01")
        .arg("--metric=macro_f1")
        .args(["--output-dir", out.to_str().unwrap()])
        .env("HPTUNE_METRICS_FILE", &metrics_file)
        .env("HPTUNE_TRIAL_ID", "12")
        .output()
        .unwrap();
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        3,
        "stdout must hold only protocol lines: {text}"
    );
    for (i, line) in lines[..2].iter().enumerate() {
        assert_eq!(value(line, "step"), (i + 1) as f64);
        for key in ["loss", "accuracy", "macro_f1", "mcc"] {
            assert!(value(line, key).is_finite(), "{key} in {line}");
        }
    }
    let last = lines[2];
    assert!(last.starts_with("macro_f1="), "objective first: {last}");
    assert!(!last.contains("step="));
    assert_eq!(value(last, "accuracy"), value(lines[1], "accuracy"));
    let accuracy = value(last, "accuracy");
    assert!((0.0..=1.0).contains(&accuracy));

    let file = std::fs::read_to_string(&metrics_file).unwrap();
    let records: Vec<serde_json::Value> = file
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0]["global_step"], "1");
    assert_eq!(records[0]["trial"], "12");
    assert!(
        records[0]["macro_f1"]
            .as_str()
            .unwrap()
            .parse::<f64>()
            .is_ok()
    );

    for name in [
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "labels.json",
    ] {
        assert!(out.join(name).is_file(), "{name} saved");
    }
    let labels: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(out.join("labels.json")).unwrap()).unwrap();
    assert_eq!(labels, ["neg", "neu", "pos"]);

    // Predicting the eval texts with the saved model gives the accuracy reported in training.
    let eval = std::fs::read_to_string(data.join("eval.tsv")).unwrap();
    let rows: Vec<(&str, &str)> = eval
        .lines()
        .skip(1)
        .map(|l| l.split_once('\t').unwrap())
        .collect();
    let texts = dir.path().join("texts.txt");
    std::fs::write(
        &texts,
        rows.iter().map(|r| r.0).collect::<Vec<_>>().join("\n"),
    )
    .unwrap();
    let output = trainer()
        .args(["predict", "--model-dir", out.to_str().unwrap()])
        .args(["--file", texts.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let predictions: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(predictions.len(), rows.len());
    let mut correct = 0;
    for (prediction, (text, gold)) in predictions.iter().zip(&rows) {
        assert_eq!(prediction["text"], *text);
        let probabilities = prediction["probabilities"].as_object().unwrap();
        assert_eq!(probabilities.len(), 3);
        let sum: f64 = probabilities.values().map(|p| p.as_f64().unwrap()).sum();
        assert!((sum - 1.0).abs() < 1e-4);
        correct += usize::from(prediction["label"] == *gold);
    }
    let predicted_accuracy = correct as f64 / rows.len() as f64;
    assert!(
        (predicted_accuracy - accuracy).abs() < 1e-6,
        "predict gives {predicted_accuracy}, training reported {accuracy}"
    );
}

#[test]
fn same_seed_gives_the_same_measurements() {
    let data = fixtures().join("data");
    let run = || {
        let output = trainer()
            .args(["--model", fixtures().join("tiny-bert").to_str().unwrap()])
            .args(["--train", data.join("train.tsv").to_str().unwrap()])
            .args(["--epochs", "1", "--seed", "5", "--dropout", "0.1"])
            .output()
            .unwrap();
        assert!(output.status.success(), "stderr: {}", stderr(&output));
        measurements(&output)
    };
    assert_eq!(run(), run());
}

#[test]
fn a_bad_flag_value_exits_non_zero_with_one_line_naming_the_flag() {
    let output = trainer()
        .args(["--model", fixtures().join("tiny-bert").to_str().unwrap()])
        .args([
            "--train",
            fixtures().join("data/train.tsv").to_str().unwrap(),
        ])
        .arg("--learning-rate=-1")
        .output()
        .unwrap();
    assert_refused(&output, "--learning-rate: must be a positive number");
}

#[test]
fn a_bad_data_row_fails_the_run_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train.tsv");
    std::fs::write(&train, "sentence\tlabel\ngood\tpos\nbad\n").unwrap();
    let output = trainer()
        .args(["--model", fixtures().join("tiny-bert").to_str().unwrap()])
        .args(["--train", train.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("train.tsv:3:"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn half_precision_on_the_cpu_is_refused_naming_the_flag() {
    for precision in ["bf16", "f16"] {
        let output = trainer()
            .args(["--model", fixtures().join("tiny-bert").to_str().unwrap()])
            .args([
                "--train",
                fixtures().join("data/train.tsv").to_str().unwrap(),
            ])
            .args(["--precision", precision])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{precision}");
        let message = stderr(&output);
        assert_eq!(message.trim().lines().count(), 1, "{message}");
        assert!(
            message.contains(&format!(
                "--precision: {precision} runs on CUDA only (--device cuda)"
            )),
            "{message}"
        );
        assert!(stdout(&output).is_empty());
    }
}

#[test]
fn batch_orders_give_other_batches_each_repeatable_by_its_seed_and_the_log_names_the_precision() {
    let data = fixtures().join("data");
    let run = |order: &str| {
        let output = trainer()
            .args(["--model", fixtures().join("tiny-bert").to_str().unwrap()])
            .args(["--train", data.join("train.tsv").to_str().unwrap()])
            .args(["--eval", data.join("eval.tsv").to_str().unwrap()])
            .args(["--epochs", "2", "--batch-size", "4", "--seed", "3"])
            .args(["--learning-rate", "0.003", "--precision", "f32"])
            .args(["--batch-order", order])
            .output()
            .unwrap();
        assert_success_logging(&output, "device cpu, precision f32");
        measurements(&output)
    };
    let grouped = run("length-grouped");
    assert_eq!(grouped, run("length-grouped"));
    let others = [run("shuffled"), run("sequential")];
    assert!(others.iter().all(|other| *other != grouped), "{others:?}");
    assert_ne!(others[0], others[1]);
}
