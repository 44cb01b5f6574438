//! What a GPU run depends on, checked through the binary on the CPU: the host reads of a
//! training step (the log under target `hptune_trainer::host_reads`) and `warm-cache`.
#![cfg(feature = "flex")]

use crate::common::fixtures;
use std::process::{Command, Output};

fn run(args: &[&str], log: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hptune-trainer"))
        .args(args)
        .env("HPTUNE_TRAINER_LOG", log)
        .env_remove("HPTUNE_METRICS_FILE")
        .env_remove("CLOUD_ML_HP_METRIC_FILE")
        .env_remove("HPTUNE_OUTPUT_DIR")
        .output()
        .unwrap()
}

/// Trains the tiny test model on the fixture's data with `extra` flags.
fn train(extra: &[&str], log: &str) -> Output {
    let model = fixtures().join("tiny-bert");
    let data = fixtures().join("data");
    let mut args = vec![
        "--model".to_string(),
        model.display().to_string(),
        "--train".to_string(),
        data.join("train.tsv").display().to_string(),
        "--eval".to_string(),
        data.join("eval.tsv").display().to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    run(&args.iter().map(String::as_str).collect::<Vec<_>>(), log)
}

/// `warm-cache` of the tiny test model with `extra` flags.
fn warm_cache(extra: &[&str], log: &str) -> Output {
    let model = fixtures().join("tiny-bert");
    let mut args = vec!["warm-cache", "--model", model.to_str().unwrap()];
    args.extend_from_slice(extra);
    run(&args, log)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `(what, reads, steps)` of each `WHAT: N host reads in M steps` line.
fn tallies(log: &str) -> Vec<(String, u64, u64)> {
    log.lines()
        .filter_map(|line| {
            let (head, rest) = line.split_once(" host reads in ")?;
            let (what, reads) = head.rsplit_once(": ")?;
            let what = what.rsplit_once("epoch ").map(|(_, w)| w)?;
            let steps = rest.split_whitespace().next()?;
            Some((
                format!("epoch {what}"),
                reads.parse().ok()?,
                steps.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn training_steps_read_the_loss_only_when_it_is_reported_and_evaluation_reads_twice() {
    let output = train(
        &["--batch-size", "4", "--epochs", "2"],
        "info,hptune_trainer::host_reads=debug",
    );
    let log = text(&output.stderr);
    assert!(output.status.success(), "{log}");
    let tallies = tallies(&log);
    assert_eq!(tallies.len(), 4, "{log}");
    for (what, reads, steps) in &tallies {
        if what.ends_with("training") {
            // 48 rows in batches of 4. On the CPU the optimiser reads the gradient norm once a
            // step (on a GPU it decides on the device: see optim.rs's tests); the loss is read
            // at the first and last batch, and once more per 10 s of a slow epoch. A second
            // read per step (the loss's, say) would make it 24 or more.
            assert_eq!(*steps, 12, "{what}");
            assert!(
                (12 + 2..12 + 6).contains(reads),
                "{what}: {reads} reads\n{log}"
            );
        } else {
            assert!(what.ends_with("evaluation"), "{what}");
            // Losses and predictions of every batch, read once each.
            assert_eq!((*reads, *steps), (2, 1), "{what}");
        }
    }
    // The first batch's report says how long the first step took.
    assert!(log.contains("epoch 1/2: batch 1/12 after "), "{log}");
}

#[test]
fn host_reads_are_not_logged_at_the_default_level() {
    let output = train(&["--epochs", "1"], "info");
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(tallies(&text(&output.stderr)).is_empty());
}

#[test]
fn warm_cache_on_the_cpu_runs_a_step_and_says_there_is_nothing_to_cache() {
    let output = warm_cache(
        &[
            "--device",
            "cpu",
            "--seq",
            "16",
            "--batch",
            "4",
            "--eval-batch-size",
            "8",
        ],
        "info,hptune_trainer::host_reads=debug",
    );
    let log = text(&output.stderr);
    assert!(output.status.success(), "{log}");
    let out = text(&output.stdout);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with(
            "warm-cache: one training step of 4 x 16 tokens and one evaluation of 8 x 16 tokens in "
        ),
        "{out}"
    );
    assert!(
        out.trim_end()
            .ends_with("the CPU has no kernel cache, nothing to warm"),
        "{out}"
    );
    // The step ran: one training step (its gradient norm and its loss read), one evaluation
    // batch.
    assert_eq!(
        tallies(&log),
        [
            ("epoch 1/1 training".to_string(), 2, 1),
            ("epoch 1/1 evaluation".to_string(), 2, 1)
        ],
        "{log}"
    );
}

#[test]
fn warm_cache_refuses_a_sequence_longer_than_the_models_positions() {
    let output = warm_cache(&["--device", "cpu", "--seq", "65"], "info");
    assert_eq!(output.status.code(), Some(2));
    let message = text(&output.stderr);
    assert!(
        message.contains("--seq: 65 is longer than the model's 64 positions"),
        "{message}"
    );
    assert!(output.stdout.is_empty());
}

#[cfg(not(feature = "cuda"))]
#[test]
fn warm_cache_on_cuda_without_the_cuda_build_says_how_to_build_it() {
    let output = warm_cache(&[], "info");
    assert_eq!(output.status.code(), Some(2));
    let message = text(&output.stderr);
    assert!(message.contains("--features cuda"), "{message}");
}
