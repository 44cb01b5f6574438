//! Several `hptune run` processes on one study cooperate: each trial number is taken once,
//! the budget is shared exactly, and no "database is locked" reaches the user.

mod common;

use std::collections::HashSet;
use std::process::Stdio;

use common::{Scratch, stderr};

const STUDY: &str = r#"
name: {name}
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 2.0}
  - {id: n, type: integer, min: 1, max: 100}
algorithm: random
max_trial_count: 200
parallel_trial_count: 2
seed: 9
trial:
  command: [{worker}]
"#;

/// Runs 4 controllers on one study of 200 trials and checks every invariant.
fn four_controllers_run_exactly_the_budget(scratch: &Scratch) {
    let name = common::unique_name("shared");
    let study = scratch.study("study.yaml", &STUDY.replace("{name}", &name));
    let children: Vec<_> = (0..4)
        .map(|_| {
            scratch
                .command(&["run", study.to_str().unwrap()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert!(out.status.success(), "exit {:?}: {err}", out.status.code());
        assert!(!err.contains("error"), "{err}");
        assert!(!err.contains("locked"), "{err}");
    }
    let trials = scratch.trials(&name);
    assert_eq!(trials.len(), 200);
    let numbers: HashSet<u64> = trials
        .iter()
        .map(|t| t["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers.len(), 200);
    assert!(trials.iter().all(|t| t["state"] == "succeeded"));
    let owners: HashSet<&str> = trials
        .iter()
        .map(|t| t["owner"].as_str().unwrap())
        .collect();
    assert!(owners.len() > 1, "one controller ran every trial");
    // Random proposals depend on the trial number only: the same as one controller's.
    let single = Scratch::new();
    let alone = single.study("study.yaml", &STUDY.replace("{name}", &name));
    assert!(
        single
            .hptune(&["run", alone.to_str().unwrap()])
            .status
            .success()
    );
    let params =
        |t: &[serde_json::Value]| t.iter().map(|t| t["params"].clone()).collect::<Vec<_>>();
    assert_eq!(params(&trials), params(&single.trials(&name)));
}

#[test]
fn four_controllers_on_one_sqlite_study_run_exactly_its_budget() {
    four_controllers_run_exactly_the_budget(&Scratch::new());
}

#[test]
fn four_controllers_on_one_postgres_study_run_exactly_its_budget() {
    if let Some(url) = common::test_postgres() {
        four_controllers_run_exactly_the_budget(&Scratch::on_postgres(&url));
    }
}

#[test]
fn a_running_controller_takes_over_the_trials_of_one_that_died() {
    let scratch = Scratch::new();
    let name = common::unique_name("takeover");
    let text = STUDY
        .replace("{name}", &name)
        .replace("max_trial_count: 200", "max_trial_count: 6")
        .replace(
            "command: [{worker}]",
            "command: [{worker}]\n  env: {SLEEP: '2'}",
        );
    let study = scratch.study("study.yaml", &text);
    let path = study.to_str().unwrap();
    let spawn = || {
        scratch
            .command(&["run", path])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut doomed = spawn();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let survivor = spawn();
    std::thread::sleep(std::time::Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(doomed.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    doomed.wait().unwrap();
    let out = survivor.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = scratch.trials(&name);
    assert_eq!(trials.len(), 6);
    assert!(
        trials.iter().all(|t| t["state"] == "succeeded"),
        "{trials:?}"
    );
    let owners: HashSet<&str> = trials
        .iter()
        .map(|t| t["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners.len(), 1, "the survivor owns every trial in the end");
    assert!(stderr(&out).contains("succeeded"), "{}", stderr(&out));
}

/// A controller stopped (SIGSTOP) while a controller on another machine takes its trial over
/// and ends it: when it runs again, the database refuses its end of the trial, and it says so
/// and exits non-zero instead of printing a result the study does not hold.
fn a_stale_controller_whose_trial_was_taken_over_says_so(scratch: &Scratch) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    use std::time::{Duration, Instant};

    let name = common::unique_name("stale");
    let text = STUDY
        .replace("{name}", &name)
        .replace("max_trial_count: 200", "max_trial_count: 1")
        .replace("parallel_trial_count: 2", "parallel_trial_count: 1")
        .replace(
            "command: [{worker}]",
            "command: [{worker}]\n  env: {SLEEP: '2'}",
        );
    let study = scratch.study("study.yaml", &text);
    let path = study.to_str().unwrap();
    let stale = scratch
        .command(&["run", path])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !scratch
        .path(&format!("hptune-logs/{name}/trial-0.log"))
        .exists()
    {
        assert!(Instant::now() < deadline, "the worker did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = Pid::from_raw(stale.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    // What a controller of another machine sees once the stopped one's heartbeats are stale.
    scratch.execute(&format!(
        "UPDATE trials SET owner = 'elsewhere:1@1', heartbeat_at = '2000-01-01T00:00:00.000Z'
         WHERE study_id = (SELECT id FROM studies WHERE name = '{name}')"
    ));
    let taker = scratch.hptune(&["run", path]);
    common::assert_success(&taker);
    let trials = scratch.trials(&name);
    assert_eq!(trials[0]["state"], "succeeded", "{}", stderr(&taker));
    let taker_id = trials[0]["owner"].as_str().unwrap().to_string();

    kill(pid, Signal::SIGCONT).unwrap();
    let out = stale.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("taken over by another controller"), "{err}");
    assert!(!err.contains("is complete"), "{err}");
    let trials = scratch.trials(&name);
    assert_eq!(trials.len(), 1);
    assert_eq!(trials[0]["state"], "succeeded");
    assert_eq!(trials[0]["owner"], taker_id.as_str());
}

#[test]
fn a_stale_controller_whose_trial_was_taken_over_says_so_on_sqlite() {
    a_stale_controller_whose_trial_was_taken_over_says_so(&Scratch::new());
}

#[test]
fn a_stale_controller_whose_trial_was_taken_over_says_so_on_postgres() {
    if let Some(url) = common::test_postgres() {
        a_stale_controller_whose_trial_was_taken_over_says_so(&Scratch::on_postgres(&url));
    }
}
