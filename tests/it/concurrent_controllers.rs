//! Several `hptune run` processes on one study cooperate: each trial number is taken once,
//! the budget is shared exactly, and no "database is locked" reaches the user.

use crate::common;

use std::collections::HashSet;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Scratch, stderr};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

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

/// A controller stopped (SIGSTOP) while a controller of another machine takes its trial over.
struct Stale {
    name: String,
    path: String,
    starts: std::path::PathBuf,
}

/// Starts a study of one trial of a worker that sleeps `sleep` seconds, stops its controller
/// once the worker runs, and makes its trial look like one whose controller's heartbeats
/// stopped on another machine; returns the study and the stopped controller.
fn stop_a_controller(scratch: &Scratch, sleep: &str) -> (Stale, Child) {
    let name = common::unique_name("stale");
    let starts = scratch.path("starts");
    let text = STUDY
        .replace("{name}", &name)
        .replace("max_trial_count: 200", "max_trial_count: 1")
        .replace("parallel_trial_count: 2", "parallel_trial_count: 1")
        .replace(
            "command: [{worker}]",
            &format!(
                "command: [{{worker}}]\n  env: {{SLEEP: '{sleep}', STARTS: '{}'}}",
                starts.display()
            ),
        );
    let path = scratch.study("study.yaml", &text).display().to_string();
    let stopped = scratch
        .command(&["run", &path])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the worker starts", || starts.exists());
    stop_between_transactions(scratch, &stopped, &name);
    scratch.execute(&format!(
        "UPDATE trials SET owner = 'elsewhere:1@1', heartbeat_at = '2000-01-01T00:00:00.000Z'
         WHERE study_id = (SELECT id FROM studies WHERE name = '{name}')"
    ));
    (Stale { name, path, starts }, stopped)
}

/// Stops `child` where it holds no lock on the study: SIGSTOP lands anywhere, and a
/// controller stopped inside a transaction would keep the study locked from the one that is
/// to take its trial over (for as long as it stays stopped).
fn stop_between_transactions(scratch: &Scratch, child: &Child, name: &str) {
    loop {
        signal(child, Signal::SIGSTOP);
        if scratch.study_is_unlocked(name) {
            return;
        }
        signal(child, Signal::SIGCONT);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, signal: Signal) {
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
}

/// The stale controller, run again, says that its trials were taken over and exits 1,
/// printing no end of the study.
fn assert_it_says_so(stopped: Child) {
    signal(&stopped, Signal::SIGCONT);
    let out = stopped.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("taken over by another controller"), "{err}");
    assert!(!err.contains("is complete"), "{err}");
}

/// The other controller ran the trial to its end, its worker started once.
fn assert_the_taker_ran_it_once(scratch: &Scratch, stale: &Stale, taker: &Output) {
    common::assert_success(taker);
    let trials = scratch.trials(&stale.name);
    assert_eq!(trials.len(), 1);
    assert_eq!(trials[0]["state"], "succeeded", "{}", stderr(taker));
    assert_ne!(trials[0]["owner"], "elsewhere:1@1");
    let started = std::fs::read_to_string(&stale.starts).unwrap();
    assert_eq!(started.lines().count(), 1, "{started}");
}

/// Its worker ended while it was stopped, and the other controller recorded the trial: the
/// database refuses its end of the trial.
fn a_stale_controller_whose_trial_ended_elsewhere_says_so(scratch: &Scratch) {
    let (stale, stopped) = stop_a_controller(scratch, "2");
    let taker = scratch.hptune(&["run", &stale.path]);
    assert_the_taker_ran_it_once(scratch, &stale, &taker);
    assert_it_says_so(stopped);
    assert_the_taker_ran_it_once(scratch, &stale, &taker);
}

/// Its worker still runs, watched by the other controller: its next heartbeat finds that the
/// database no longer holds the trial as its own.
fn a_stale_controller_whose_trial_runs_elsewhere_says_so(scratch: &Scratch) {
    let (stale, stopped) = stop_a_controller(scratch, "20");
    let taker = scratch
        .command(&["run", &stale.path])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let owner = format!(
        "SELECT owner FROM trials WHERE study_id = (SELECT id FROM studies WHERE name = '{}')",
        stale.name
    );
    wait_until("the trial is taken over", || {
        scratch.query(&owner)[0][0] != "elsewhere:1@1"
    });
    assert_it_says_so(stopped);
    let taker = taker.wait_with_output().unwrap();
    assert_the_taker_ran_it_once(scratch, &stale, &taker);
}

#[test]
fn a_stale_controller_whose_trial_ended_elsewhere_says_so_on_sqlite() {
    a_stale_controller_whose_trial_ended_elsewhere_says_so(&Scratch::new());
}

#[test]
fn a_stale_controller_whose_trial_ended_elsewhere_says_so_on_postgres() {
    if let Some(url) = common::test_postgres() {
        a_stale_controller_whose_trial_ended_elsewhere_says_so(&Scratch::on_postgres(&url));
    }
}

#[test]
fn a_stale_controller_whose_trial_runs_elsewhere_says_so_on_sqlite() {
    a_stale_controller_whose_trial_runs_elsewhere_says_so(&Scratch::new());
}

#[test]
fn a_stale_controller_whose_trial_runs_elsewhere_says_so_on_postgres() {
    if let Some(url) = common::test_postgres() {
        a_stale_controller_whose_trial_runs_elsewhere_says_so(&Scratch::on_postgres(&url));
    }
}
