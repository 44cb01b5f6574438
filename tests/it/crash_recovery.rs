//! A controller killed at any moment loses nothing: SIGKILL `hptune run` at random moments
//! (seeded), start it again, and at the end check every invariant of the study.

use crate::common;

use std::collections::HashSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Scratch, assert_success, expected_loss, stderr};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

const TRIALS: usize = 40;
const ROUNDS: usize = 20;

const STUDY: &str = r#"
name: {name}
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 2.0}
  - {id: y, type: double, min: -2.0, max: 2.0}
algorithm: random
max_trial_count: 40
parallel_trial_count: 3
max_retries: 5
seed: 5
trial:
  command: [{worker}]
  env: {SLEEP: '0.6'}
"#;

fn worker_is_alive(handle: &str) -> bool {
    let Some((pid, start)) = handle
        .trim_start_matches("pid:")
        .split_once('@')
        .and_then(|(p, s)| Some((p.parse::<i32>().ok()?, s.to_string())))
    else {
        return false;
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split(' ').collect())
        .unwrap_or_default();
    kill(Pid::from_raw(pid), None).is_ok()
        && fields.first() != Some(&"Z")
        && fields.get(19) == Some(&start.as_str())
}

#[test]
fn a_controller_killed_at_random_moments_loses_no_trial_on_sqlite() {
    controller_killed_at_random_moments(&Scratch::new());
}

#[test]
fn a_controller_killed_at_random_moments_loses_no_trial_on_postgres() {
    if let Some(url) = common::test_postgres() {
        controller_killed_at_random_moments(&Scratch::on_postgres(&url));
    }
}

/// SIGKILLs `hptune run` ROUNDS times at seeded random moments, then lets it finish, and
/// checks the study.
fn controller_killed_at_random_moments(scratch: &Scratch) {
    let name = common::unique_name("crash");
    let study = scratch.study("study.yaml", &STUDY.replace("{name}", &name));
    let path = study.to_str().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(2026);
    let mut kills = 0;
    for _ in 0..ROUNDS {
        let mut child = scratch
            .command(&["run", path])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(50..600)));
        if child.try_wait().unwrap().is_none() {
            kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
            kills += 1;
        }
        child.wait().unwrap();
    }
    assert!(
        kills == ROUNDS,
        "only {kills} of {ROUNDS} rounds killed a running controller"
    );

    // The last run finishes the study.
    let deadline = Instant::now() + Duration::from_secs(120);
    let out = scratch.hptune(&["run", path]);
    assert_success(&out);
    assert!(Instant::now() < deadline);

    let trials = scratch.trials(&name);
    assert_eq!(trials.len(), TRIALS, "{}", stderr(&out));
    let numbers: HashSet<u64> = trials
        .iter()
        .map(|t| t["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (0..TRIALS as u64).collect());
    for trial in &trials {
        assert_eq!(trial["state"], "succeeded", "{trial}");
        assert!((trial["value"].as_f64().unwrap() - expected_loss(trial)).abs() < 1e-9);
    }
    // Every finished trial has its final measurement, from its last attempt, once.
    let study_id = scratch.query(&format!("SELECT id FROM studies WHERE name = '{name}'"))[0][0]
        .as_i64()
        .unwrap();
    let finals = scratch.query(&format!(
        "SELECT t.number, COUNT(*) FROM trials t JOIN measurements m ON m.trial_id = t.id AND m.attempt = t.attempt
         WHERE t.study_id = {study_id} AND m.step IS NULL AND m.metric = 'loss' GROUP BY t.number ORDER BY t.number"
    ));
    assert_eq!(finals.len(), TRIALS);
    assert!(finals.iter().all(|row| row[1] == 1), "{finals:?}");
    // Every attempt ended, and no worker of any attempt still runs.
    let of_study = format!("SELECT id FROM trials WHERE study_id = {study_id}");
    let open = scratch.query(&format!(
        "SELECT COUNT(*) FROM attempts WHERE finished_at IS NULL AND trial_id IN ({of_study})"
    ));
    assert_eq!(open[0][0], Value::from(0));
    for row in scratch.query(&format!(
        "SELECT worker FROM attempts WHERE worker IS NOT NULL AND trial_id IN ({of_study})"
    )) {
        let handle = row[0].as_str().unwrap();
        assert!(
            !worker_is_alive(handle),
            "worker {handle} outlived its study"
        );
    }
    let attempts = scratch.query(&format!(
        "SELECT COUNT(*) FROM attempts WHERE trial_id IN ({of_study})"
    ));
    eprintln!(
        "{kills} controllers killed; {TRIALS} trials in {} attempts",
        attempts[0][0]
    );
}

/// Rounds of the crash window test, and how many run at once.
const WINDOW_ROUNDS: u64 = 50;
const WINDOW_THREADS: u64 = 5;

const WINDOW_STUDY: &str = r#"
name: {name}
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 2.0}
algorithm: random
max_trial_count: 2
parallel_trial_count: 2
seed: {seed}
trial:
  command: [{worker}]
  env: {SLEEP: '{sleep}', STARTS: '{starts}'}
"#;

#[test]
fn a_controller_killed_before_it_records_its_workers_starts_no_attempt_twice_on_sqlite() {
    controller_killed_in_the_first_second(Scratch::new);
}

#[test]
fn a_controller_killed_before_it_records_its_workers_starts_no_attempt_twice_on_postgres() {
    if let Some(url) = common::test_postgres() {
        controller_killed_in_the_first_second(|| Scratch::on_postgres(&url));
    }
}

/// The window before a controller records its workers' handles: WINDOW_ROUNDS seeded rounds,
/// each a study of two trials of 1-3 s whose controller is SIGKILLed within the first second,
/// then run again after a random delay (its workers still running, or already ended). Each
/// round ends with both trials succeeded with their right value, and each attempt started at
/// most once (the workers log their starts), the last one exactly once.
fn controller_killed_in_the_first_second(scratch: impl Fn() -> Scratch + Sync) {
    std::thread::scope(|threads| {
        for thread in 0..WINDOW_THREADS {
            let scratch = &scratch;
            threads.spawn(move || {
                for round in (thread..WINDOW_ROUNDS).step_by(WINDOW_THREADS as usize) {
                    kill_in_the_first_second(&scratch(), round);
                }
            });
        }
    });
}

fn kill_in_the_first_second(scratch: &Scratch, round: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(round);
    let name = common::unique_name(&format!("window{round}"));
    let starts = scratch.path("starts");
    let text = WINDOW_STUDY
        .replace("{name}", &name)
        .replace("{seed}", &round.to_string())
        .replace("{sleep}", &format!("{:.2}", rng.random_range(1.0..3.0)))
        .replace("{starts}", starts.to_str().unwrap());
    let study = scratch.study("study.yaml", &text);
    let path = study.to_str().unwrap();
    let mut child = scratch
        .command(&["run", path])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(rng.random_range(0..1200)));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(rng.random_range(0..4000)));
    let out = scratch.hptune(&["run", path]);
    assert_success(&out);

    let context = format!("round {round}: {}", stderr(&out));
    let trials = scratch.trials(&name);
    assert_eq!(trials.len(), 2, "{context}");
    for trial in &trials {
        assert_eq!(trial["state"], "succeeded", "{context}: {trial}");
        assert!(
            (trial["value"].as_f64().unwrap() - expected_loss(trial)).abs() < 1e-9,
            "{context}: {trial}"
        );
    }
    let started = std::fs::read_to_string(&starts).unwrap_or_default();
    let of_study = format!("study_id = (SELECT id FROM studies WHERE name = '{name}')");
    let attempts = scratch.query(&format!(
        "SELECT number, attempt FROM trials WHERE {of_study}"
    ));
    for row in attempts {
        let (number, last) = (row[0].as_i64().unwrap(), row[1].as_i64().unwrap());
        for attempt in 1..=last {
            let times = started
                .lines()
                .filter(|l| *l == format!("{name} {number} {attempt}"))
                .count();
            assert!(
                times <= 1 && (attempt < last || times == 1),
                "{context}: attempt {attempt} of trial {number} (the last is {last}) started {times} times:\n{started}"
            );
        }
    }
    let finals = scratch.query(&format!(
        "SELECT COUNT(*) FROM trials t JOIN measurements m ON m.trial_id = t.id AND m.attempt = t.attempt
         WHERE t.{of_study} AND m.step IS NULL AND m.metric = 'loss'"
    ));
    assert_eq!(finals[0][0], Value::from(2), "{context}");
}
