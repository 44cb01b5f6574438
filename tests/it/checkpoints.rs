//! Checkpoints through the worker protocol: a trial whose worker is killed from outside is
//! retried, its next attempt resumes from the checkpoint the first one left
//! (`HPTUNE_RESUME_FROM`), and the trial keeps one learning curve; with hptune-trainer as the
//! worker, the resumed trial ends as an uninterrupted one does.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{Scratch, assert_success, tiny, trainer};

/// The study: one trial of `checkpointed.sh`, 10 steps, a checkpoint every 2 steps, its first
/// attempt SIGKILLed after step 6 (60%), before that step's checkpoint.
fn killed_at_60_percent(scratch: &Scratch) -> PathBuf {
    let worker =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workers/checkpointed.sh");
    scratch.study(
        "resumed.yaml",
        &format!(
            "name: resumed
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x, type: discrete, values: [0.5]}}
max_trial_count: 1
trial:
  command: [sh, '{}']
  env: {{STEPS: '10', CHECKPOINT_EVERY: '2', KILL_AT: '6', STARTS: starts.txt}}
",
            worker.display()
        ),
    )
}

#[test]
fn a_worker_killed_at_60_percent_resumes_from_its_last_checkpoint_and_keeps_one_curve() {
    let scratch = Scratch::new();
    let study = killed_at_60_percent(&scratch);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));

    // The second attempt started after the first one's last checkpoint (step 4): the steps
    // trained again (5 and 6) are one checkpoint interval.
    let starts = std::fs::read_to_string(scratch.path("starts.txt")).unwrap();
    assert_eq!(starts, "0 1 1\n0 2 5\n");
    let trials = scratch.trials("resumed");
    assert_eq!(trials[0]["state"], "succeeded", "{trials:?}");
    assert_eq!(trials[0]["attempt"], 2);
    assert_eq!(trials[0]["value"], 0.35);
    let resumed = &trials[0]["resumed"][0];
    assert_eq!(resumed["attempt"], 2, "{trials:?}");
    assert_eq!(resumed["at_step"], 5);
    let first = scratch.path("hptune-artifacts/resumed/trial-0/checkpoints");
    assert_eq!(
        Path::new(resumed["from"].as_str().unwrap()),
        first,
        "the first attempt's folder"
    );
    assert_eq!(std::fs::read_to_string(first.join("step")).unwrap(), "4\n");
    let second = scratch.path("hptune-artifacts/resumed/trial-0-attempt-2/checkpoints");
    assert_eq!(
        std::fs::read_to_string(second.join("step")).unwrap(),
        "10\n"
    );
    let table = scratch.hptune(&["trials", "resumed"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("attempt 2 at step 5"),
        "{table:?}"
    );

    // Each attempt's measurements are kept as reported ...
    let rows = scratch.query(
        "SELECT attempt, step FROM measurements WHERE step IS NOT NULL ORDER BY attempt, step",
    );
    let steps: Vec<(i64, i64)> = rows
        .iter()
        .map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap()))
        .collect();
    let expected: Vec<(i64, i64)> = (1..=6)
        .map(|s| (1, s))
        .chain((5..=10).map(|s| (2, s)))
        .collect();
    assert_eq!(steps, expected);
    // ... and the trial's curve takes each step once: ten points, one line.
    let path = curve_of_trial_0(&scratch, "resumed");
    assert_eq!(path.matches(['M', 'L']).count(), 10, "{path}");
}

/// The path (`d`) of trial 0's line in `hptune plot STUDY --kind intermediate`.
fn curve_of_trial_0(scratch: &Scratch, study: &str) -> String {
    let figure = scratch.path("curve.svg");
    assert_success(&scratch.hptune(&[
        "plot",
        study,
        "--kind",
        "intermediate",
        "--out",
        figure.to_str().unwrap(),
    ]));
    let svg = std::fs::read_to_string(&figure).unwrap();
    svg.split(r#"<g data-trial="0"><path class="curve succeeded" d=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("trial 0's curve")
        .to_string()
}

#[test]
fn a_trial_retried_without_a_checkpoint_starts_afresh() {
    let scratch = Scratch::new();
    let text = std::fs::read_to_string(killed_at_60_percent(&scratch))
        .unwrap()
        .replace("CHECKPOINT_EVERY: '2'", "CHECKPOINT_EVERY: '100'");
    let study = scratch.study("afresh.yaml", &text);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let starts = std::fs::read_to_string(scratch.path("starts.txt")).unwrap();
    assert_eq!(
        starts, "0 1 1\n0 2 1\n",
        "no checkpoint: no HPTUNE_RESUME_FROM"
    );
    let trials = scratch.trials("resumed");
    assert_eq!(trials[0]["state"], "succeeded");
    assert!(trials[0].get("resumed").is_none(), "{trials:?}");
}

/// On the project's Slurm cluster: a job requeued by Slurm (`scontrol requeue`, as a
/// preemption does) after it wrote a checkpoint is cancelled, and its trial's next attempt,
/// a job of its own, resumes from that checkpoint on the filesystem the cluster shares.
#[test]
fn a_requeued_slurm_job_s_trial_resumes_from_its_checkpoint() {
    let _cluster = crate::common::slurm_shared();
    if crate::common::test_slurm().is_none() {
        return;
    }
    let scratch = Scratch::new();
    let text = std::fs::read_to_string(killed_at_60_percent(&scratch))
        .unwrap()
        .replace("KILL_AT: '6'", "SLEEP: '0.5'")
        .replace("STEPS: '10'", "STEPS: '12'")
        .replace("CHECKPOINT_EVERY: '2'", "CHECKPOINT_EVERY: '1'")
        .replace("name: resumed", "name: requeued-resumes")
        + "  executor: {kind: slurm, poll_interval: 200ms}\n";
    let study = scratch.study("slurm.yaml", &text);
    let mut run = started_run(&scratch, &study);
    let checkpoint = scratch.path("hptune-artifacts/requeued-resumes/trial-0/checkpoints/step");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !checkpoint.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint in a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let job = scratch.query("SELECT worker FROM trials")[0][0]
        .as_str()
        .and_then(|w| w.strip_prefix("slurm:"))
        .expect("the job's id")
        .to_string();
    let requeue = std::process::Command::new("scontrol")
        .args(["requeue", &job])
        .status()
        .unwrap();
    assert!(requeue.success());
    assert!(run.wait().unwrap().success());

    let trials = scratch.trials("requeued-resumes");
    assert_eq!(trials[0]["state"], "succeeded", "{trials:?}");
    assert_eq!(trials[0]["attempt"], 2);
    let starts = std::fs::read_to_string(scratch.path("starts.txt")).unwrap();
    let second: i64 = starts
        .lines()
        .nth(1)
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(second > 1, "the second attempt resumed: {starts}");
    assert_eq!(trials[0]["resumed"][0]["at_step"], second, "{trials:?}");
}

/// Preemptions are infrastructure failures: three trials each killed from outside once, with
/// `max_failed_trial_count: 1`, are retried and the study completes.
#[test]
fn preempted_trials_are_retried_and_never_count_as_failed() {
    let scratch = Scratch::new();
    let text = std::fs::read_to_string(killed_at_60_percent(&scratch))
        .unwrap()
        .replace("values: [0.5]", "values: [0.125, 0.25, 0.5]")
        .replace(
            "max_trial_count: 1",
            "max_trial_count: 3\nmax_failed_trial_count: 1",
        );
    let study = scratch.study("three.yaml", &text);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let trials = scratch.trials("resumed");
    assert_eq!(trials.len(), 3);
    for trial in &trials {
        assert_eq!(trial["state"], "succeeded", "{trial}");
        assert_eq!(trial["attempt"], 2, "{trial}");
        assert_eq!(trial["resumed"][0]["at_step"], 5, "{trial}");
    }
}

/// `hptune run STUDY`, started in the background, its output discarded.
fn started_run(scratch: &Scratch, study: &Path) -> std::process::Child {
    scratch
        .command(&["run", study.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Optimiser steps of the trainer's study below: 48 rows, batches of one, 10 epochs.
const TRAINER_STEPS: usize = 480;
/// Its `--checkpoint-every`.
const TRAINER_EVERY: usize = 10;

/// A study `name` of one hptune-trainer trial on the tiny BERT (the settings of the trainer's
/// own checkpoint test: dropout and a shuffled order, which a resumed run must repeat), a
/// checkpoint every [`TRAINER_EVERY`] steps, one retry.
fn trainer_study(scratch: &Scratch, name: &str) -> PathBuf {
    let data = tiny("data");
    scratch.study(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}
objective: {{metric: accuracy, goal: maximize}}
parameters:
  - {{id: learning_rate, type: discrete, values: [0.003]}}
max_trial_count: 1
max_retries: 1
trial:
  command: ['{}', --model, '{}', --train, '{}', --eval, '{}', --batch-size, '1', --epochs, '10',
    --seed, '7', --dropout, '0.1', --warmup-ratio, '0.1', --weight-decay, '0.01',
    --checkpoint-every, '{TRAINER_EVERY}']
",
            trainer().display(),
            tiny("tiny-bert").display(),
            data.join("train.tsv").display(),
            data.join("eval.tsv").display(),
        ),
    )
}

/// The steps of the checkpoint files (`step-NNNNNNNN.ckpt`) in `dir`, newest first.
fn checkpoint_steps(dir: &Path) -> Vec<usize> {
    let mut steps: Vec<usize> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("step-")?
                .strip_suffix(".ckpt")?
                .parse()
                .ok()
        })
        .collect();
    steps.sort_unstable_by(|a, b| b.cmp(a));
    steps
}

/// A child process of `parent` (from `/proc`), if it has one.
fn child_of(parent: u32) -> Option<nix::unistd::Pid> {
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == parent).then(|| nix::unistd::Pid::from_raw(pid))
    })
}

/// The objective's intermediate values of study `name`'s trial 0, as (attempt, step, value).
fn accuracy_curve(scratch: &Scratch, name: &str) -> Vec<(i64, i64, f64)> {
    scratch
        .query(&format!(
            "SELECT m.attempt, m.step, m.value FROM measurements m
             JOIN trials t ON t.id = m.trial_id JOIN studies s ON s.id = t.study_id
             WHERE s.name = '{name}' AND t.number = 0 AND m.step IS NOT NULL
               AND m.metric = 'accuracy'
             ORDER BY m.attempt, m.step"
        ))
        .iter()
        .map(|r| {
            (
                r[0].as_i64().unwrap(),
                r[1].as_i64().unwrap(),
                r[2].as_f64().unwrap(),
            )
        })
        .collect()
}

/// Issue #38 end to end, through the binaries: hptune-trainer run by `hptune run`,
/// SIGKILLed from outside once it has written a checkpoint at 60 % of its steps, is retried
/// by the controller, and its second attempt resumes from the first one's checkpoint
/// (`HPTUNE_RESUME_FROM`) to the same value, curve and weights as an uninterrupted study of
/// the same seed.
#[test]
fn hptune_trainer_killed_at_60_percent_is_resumed_by_the_controller_to_the_uninterrupted_result() {
    let scratch = Scratch::new();
    let study = trainer_study(&scratch, "killed");
    let mut run = started_run(&scratch, &study);
    let first = scratch.path("hptune-artifacts/killed/trial-0/checkpoints");
    let controller = run.id();
    let started = Instant::now();
    let mut waited = || {
        assert!(
            run.try_wait().unwrap().is_none(),
            "the study ended before its checkpoint at 60 %"
        );
        assert!(started.elapsed() < Duration::from_secs(300));
        std::thread::sleep(Duration::from_millis(1));
    };
    // The worker's process id (the controller's child), known before the watch, so the kill
    // follows the checkpoint at once.
    let pid = loop {
        match child_of(controller) {
            Some(pid) => break pid,
            None => waited(),
        }
    };
    let seen = loop {
        match checkpoint_steps(&first).first() {
            Some(&step) if step >= TRAINER_STEPS * 6 / 10 => break step,
            _ => waited(),
        }
    };
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(run.wait().unwrap().success());
    assert!(
        seen < TRAINER_STEPS,
        "killed at {seen} of {TRAINER_STEPS} steps"
    );
    // Killed before its next checkpoint: it trained fewer than an interval past `seen`
    // (and whatever it trained while that checkpoint's file was written).
    assert_eq!(checkpoint_steps(&first)[0], seen);

    // The controller retried it once; the second attempt was given the first one's folder
    // and resumed from its newest checkpoint: it trains again only the steps the first
    // attempt did after that checkpoint, before its next one (one interval at most).
    let trials = scratch.trials("killed");
    assert_eq!(trials[0]["state"], "succeeded", "{trials:?}");
    assert_eq!(trials[0]["attempt"], 2, "{trials:?}");
    let resumed = &trials[0]["resumed"][0];
    assert_eq!(resumed["attempt"], 2, "{trials:?}");
    assert_eq!(Path::new(resumed["from"].as_str().unwrap()), first);
    let epoch = seen / (TRAINER_STEPS / 10);
    assert_eq!(resumed["at_step"], epoch + 1, "{trials:?}");
    let log =
        std::fs::read_to_string(scratch.path(trials[0]["log_path"].as_str().unwrap())).unwrap();
    assert_eq!(
        log.lines().next(),
        Some(format!("hptune: resumed step={epoch} training_step={seen}").as_str()),
        "{log}"
    );
    let second = scratch.path("hptune-artifacts/killed/trial-0-attempt-2/checkpoints");
    assert_eq!(
        checkpoint_steps(&second),
        [TRAINER_STEPS, TRAINER_STEPS - TRAINER_EVERY]
    );

    // The same study uninterrupted: the same final value, the same curve, the same weights.
    let reference = trainer_study(&scratch, "uninterrupted");
    assert_success(&scratch.hptune(&["run", reference.to_str().unwrap()]));
    let expected = scratch.trials("uninterrupted");
    assert_eq!(expected[0]["attempt"], 1);
    assert!(expected[0]["value"].is_f64(), "{expected:?}");
    assert_eq!(trials[0]["value"], expected[0]["value"]);
    let model = |study: &str, attempt: &str| {
        std::fs::read(scratch.path(&format!(
            "hptune-artifacts/{study}/trial-0{attempt}/model.safetensors"
        )))
        .unwrap()
    };
    assert!(
        model("killed", "-attempt-2") == model("uninterrupted", ""),
        "the resumed trial's weights differ from the uninterrupted one's"
    );

    // One curve: the first attempt's epochs up to the checkpoint's, the second's after it,
    // ten values in all, each the uninterrupted run's.
    let curve = accuracy_curve(&scratch, "killed");
    let reference_curve = accuracy_curve(&scratch, "uninterrupted");
    assert_eq!(reference_curve.len(), 10, "{reference_curve:?}");
    let second_attempt: Vec<&(i64, i64, f64)> = curve.iter().filter(|m| m.0 == 2).collect();
    assert_eq!(
        second_attempt.iter().map(|m| m.1).collect::<Vec<_>>(),
        (epoch as i64 + 1..=10).collect::<Vec<_>>()
    );
    for &(_, step, value) in &curve {
        assert_eq!(
            value,
            reference_curve[step as usize - 1].2,
            "step {step}: {curve:?}"
        );
    }
    let path = curve_of_trial_0(&scratch, "killed");
    assert_eq!(path.matches(['M', 'L']).count(), 10, "{path}");
    assert_eq!(path, curve_of_trial_0(&scratch, "uninterrupted"));
}
