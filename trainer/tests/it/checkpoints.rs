//! Checkpoints through the binary: a run SIGKILLed at about 60 % and resumed ends with the
//! same report and the same weights, bit for bit, as the run that was not stopped; a damaged
//! newest checkpoint falls back to the one before; a write that fails (a full disk) fails the
//! run with its reason and leaves the older checkpoints as they were.
#![cfg(feature = "flex")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::binary::{measurements, stderr, stdout, trainer};
use crate::common::fixtures;

/// Batches of one row: 48 steps an epoch, 480 in all.
const STEPS: usize = 480;
/// `--checkpoint-every`.
const EVERY: usize = 10;

/// The trainer on the test data with dropout and a shuffled order (what a resumed run must
/// repeat), saving its model to `out`.
fn run(out: &Path) -> Command {
    let data = fixtures().join("data");
    let mut command = trainer();
    command
        .args(["--model", fixtures().join("tiny-bert").to_str().unwrap()])
        .args(["--train", data.join("train.tsv").to_str().unwrap()])
        .args(["--eval", data.join("eval.tsv").to_str().unwrap()])
        .args(["--batch-size", "1", "--epochs", "10", "--seed", "7"])
        .args(["--dropout", "0.1", "--learning-rate", "0.003"])
        .args(["--warmup-ratio", "0.1", "--weight-decay", "0.01"])
        .args(["--output-dir", out.to_str().unwrap()]);
    command
}

/// The protocol lines and the saved weights of the run that is not stopped (no checkpoints).
fn uninterrupted() -> &'static (String, Vec<u8>) {
    static RUN: OnceLock<(String, Vec<u8>)> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let output = run(dir.path()).output().unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        (
            measurements(&output),
            std::fs::read(dir.path().join("model.safetensors")).unwrap(),
        )
    })
}

/// The steps of the checkpoint files of `dir`, newest first.
fn checkpoint_steps(dir: &Path) -> Vec<usize> {
    let mut steps: Vec<usize> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| {
                    let name = e.ok()?.file_name().into_string().ok()?;
                    name.strip_prefix("step-")?
                        .strip_suffix(".ckpt")?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    steps.sort_unstable_by(|a, b| b.cmp(a));
    steps
}

/// The checkpoint file of `step` in `dir`.
fn checkpoint(dir: &Path, step: usize) -> PathBuf {
    dir.join(format!("step-{step:08}.ckpt"))
}

/// Starts a checkpointing run into `dir` (given by HPTUNE_CHECKPOINT_DIR, as hptune gives it)
/// and SIGKILLs it once it has written the checkpoint of step `at` or a later one; returns
/// what it printed.
fn run_killed_after(dir: &Path, out: &Path, at: usize) -> Output {
    let mut child = run(out)
        .env("HPTUNE_CHECKPOINT_DIR", dir)
        .args(["--checkpoint-every", &EVERY.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while checkpoint_steps(dir).first().is_none_or(|&step| step < at) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before its checkpoint of step {at}"
        );
        assert!(started.elapsed() < Duration::from_secs(300));
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&output.status),
        Some(9),
        "killed before its end: {}",
        stderr(&output)
    );
    output
}

/// The `training_step` of the run's `hptune: resumed` line (its first).
fn resumed_step(output: &Output) -> usize {
    let text = stdout(output);
    let line = text.lines().next().unwrap_or_default();
    assert!(line.starts_with("hptune: resumed step="), "{text}");
    line.split_once("training_step=")
        .unwrap()
        .1
        .parse()
        .unwrap()
}

/// Checks that a resumed run reported what the uninterrupted one did after the resumed
/// epoch, and saved the same weights, bit for bit.
fn assert_same_as_uninterrupted(resumed: &Output, out: &Path) {
    assert!(resumed.status.success(), "{}", stderr(resumed));
    let (expected, weights) = uninterrupted();
    let lines = measurements(resumed);
    let after_resumed_line = lines.split_once('\n').unwrap().1;
    assert!(
        expected.ends_with(after_resumed_line) && after_resumed_line.contains("parameters="),
        "resumed: {after_resumed_line}\nuninterrupted: {expected}"
    );
    let saved = std::fs::read(out.join("model.safetensors")).unwrap();
    assert!(saved == *weights, "the resumed run's weights differ");
}

#[test]
fn a_run_killed_at_60_percent_resumes_from_its_last_checkpoint_to_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("attempt-1"), dir.path().join("attempt-2"));
    let killed = run_killed_after(&first, &dir.path().join("model-1"), STEPS * 6 / 10);
    // What the killed attempt left: its last two checkpoints (three when the kill came
    // between a new one's rename and the removal of the oldest), at most an interval apart;
    // the epochs it reported agree with the uninterrupted run's.
    let left = checkpoint_steps(&first);
    assert!((2..=3).contains(&left.len()), "{left:?}");
    assert!(left[0] - left[1] <= EVERY, "{left:?}");
    assert!(left[0] >= STEPS * 6 / 10 && left[0] < STEPS, "{left:?}");
    assert!(uninterrupted().0.starts_with(&measurements(&killed)));

    // The next attempt, as hptune starts it: its own folder, and the previous one's to resume
    // from. It trains again at most the steps since that checkpoint (under one interval).
    let out = dir.path().join("model-2");
    let resumed = run(&out)
        .env("HPTUNE_CHECKPOINT_DIR", &second)
        .env("HPTUNE_RESUME_FROM", &first)
        .args(["--checkpoint-every", &EVERY.to_string()])
        .output()
        .unwrap();
    assert_same_as_uninterrupted(&resumed, &out);
    assert_eq!(resumed_step(&resumed), left[0]);
    // Its line says the last epoch reported before the checkpoint, and the steps done.
    let line = stdout(&resumed).lines().next().unwrap().to_string();
    let epoch = left[0] / 48;
    assert_eq!(
        line,
        format!("hptune: resumed step={epoch} training_step={}", left[0])
    );
    assert_eq!(checkpoint_steps(&second), [STEPS, 470]);
}

#[test]
fn a_damaged_newest_checkpoint_falls_back_to_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("checkpoints");
    let out = dir.path().join("model");
    // A run to its end writes the checkpoints of the last epoch's end and the one before.
    let complete = run(&out)
        .env("HPTUNE_CHECKPOINT_DIR", &folder)
        .args(["--checkpoint-every", &EVERY.to_string()])
        .output()
        .unwrap();
    assert!(complete.status.success(), "{}", stderr(&complete));
    assert_eq!(
        measurements(&complete),
        uninterrupted().0,
        "checkpoints change nothing"
    );
    assert_eq!(checkpoint_steps(&folder), [STEPS, 470]);
    // One bit of the newest flipped, in the middle of its tensors: the restarted run says so,
    // resumes from step 470 and ends as the uninterrupted run did.
    let newest = checkpoint(&folder, STEPS);
    let mut bytes = std::fs::read(&newest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&newest, &bytes).unwrap();
    let resumed = run(&out)
        .env("HPTUNE_CHECKPOINT_DIR", &folder)
        .args(["--checkpoint-every", &EVERY.to_string()])
        .output()
        .unwrap();
    let log = stderr(&resumed);
    assert!(
        log.contains("step-00000480.ckpt is unusable (its SHA-256 checksum does not match")
            && log.contains("falling back to")
            && log.contains("step-00000470.ckpt"),
        "{log}"
    );
    assert_eq!(resumed_step(&resumed), 470);
    assert_same_as_uninterrupted(&resumed, &out);
}

#[test]
fn a_full_disk_fails_the_run_with_its_reason_and_keeps_the_older_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("checkpoints");
    run_killed_after(&folder, &dir.path().join("model"), STEPS / 4);
    let kept: Vec<(PathBuf, Vec<u8>)> = checkpoint_steps(&folder)
        .into_iter()
        .map(|step| checkpoint(&folder, step))
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    let kept_steps = checkpoint_steps(&folder);
    assert!((2..=3).contains(&kept.len()), "{kept_steps:?}");
    // The restarted run may write files of 128 blocks at most (64 KiB for dash's ulimit,
    // 128 KiB for bash's; a checkpoint is 270 KB), with SIGXFSZ ignored so that a longer
    // write fails with EFBIG, as it fails with ENOSPC on a full disk: it resumes, and its next
    // checkpoint cannot be written.
    let mut plain = run(&dir.path().join("model"));
    plain
        .env("HPTUNE_CHECKPOINT_DIR", &folder)
        .args(["--checkpoint-every", &EVERY.to_string()]);
    let mut limited = Command::new("sh");
    limited
        .args(["-c", "trap '' XFSZ; ulimit -f 128; exec \"$0\" \"$@\""])
        .arg(plain.get_program())
        .args(plain.get_args());
    for (key, value) in plain.get_envs() {
        match value {
            Some(value) => limited.env(key, value),
            None => limited.env_remove(key),
        };
    }
    let wrapped = limited.output().unwrap();
    assert_eq!(wrapped.status.code(), Some(1), "{}", stderr(&wrapped));
    let message = stderr(&wrapped);
    let last = message.trim().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("hptune-trainer: error: ")
            && last
                .contains("writing a checkpoint (the older ones are kept) failed: File too large"),
        "{message}"
    );
    assert_eq!(resumed_step(&wrapped), kept_steps[0]);
    for (path, bytes) in &kept {
        assert!(
            std::fs::read(path).unwrap() == *bytes,
            "{} changed",
            path.display()
        );
    }
    let names: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names.len(),
        kept.len(),
        "nothing but the checkpoints: {names:?}"
    );
}
