//! Checkpoints through the worker protocol: a trial whose worker is killed from outside is
//! retried, its next attempt resumes from the checkpoint the first one left
//! (`HPTUNE_RESUME_FROM`), and the trial keeps one learning curve.

use std::path::Path;

use crate::common::{Scratch, assert_success};

/// The study: one trial of `checkpointed.sh`, 10 steps, a checkpoint every 2 steps, its first
/// attempt SIGKILLed after step 6 (60%), before that step's checkpoint.
fn killed_at_60_percent(scratch: &Scratch) -> std::path::PathBuf {
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
    let figure = scratch.path("curve.svg");
    assert_success(&scratch.hptune(&[
        "plot",
        "resumed",
        "--kind",
        "intermediate",
        "--out",
        figure.to_str().unwrap(),
    ]));
    let svg = std::fs::read_to_string(&figure).unwrap();
    let path = svg
        .split(r#"<g data-trial="0"><path class="curve succeeded" d=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("trial 0's curve");
    assert_eq!(path.matches(['M', 'L']).count(), 10, "{path}");
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
    let mut run = scratch
        .command(&["run", study.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
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
