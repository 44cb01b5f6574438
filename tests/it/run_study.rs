//! `hptune run` end to end: the real binary on real study files, a real worker process per
//! trial, and the SQLite database checked afterwards.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{Scratch, assert_success, expected_loss, states, stderr};
use serde_json::Value;

const RANDOM: &str = r#"
name: quad
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 2.0}
  - {id: lr, type: double, min: 1.0e-4, max: 1.0e-1, scale: log}
  - {id: layers, type: integer, min: 1, max: 4}
  - {id: batch, type: discrete, values: [8, 16, 32]}
algorithm: random
max_trial_count: 8
parallel_trial_count: 2
seed: 11
trial:
  command: [{worker}]
"#;

#[test]
fn random_study_records_every_trial_with_the_value_its_worker_reported() {
    let scratch = Scratch::new();
    let study = scratch.study("study.yaml", RANDOM);
    let out = scratch.hptune(&["run", study.to_str().unwrap()]);
    assert_success(&out);
    assert!(
        stderr(&out).contains("study 'quad' is complete: 8 trials"),
        "{}",
        stderr(&out)
    );

    let trials = scratch.trials("quad");
    assert_eq!(trials.len(), 8);
    let numbers: Vec<u64> = trials
        .iter()
        .map(|t| t["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (0..8).collect::<Vec<_>>());
    for trial in &trials {
        assert_eq!(trial["state"], "succeeded", "{trial}");
        let value = trial["value"].as_f64().unwrap();
        assert!((value - expected_loss(trial)).abs() < 1e-9, "{trial}");
        let params = trial["params"].as_object().unwrap();
        let x = params["x"].as_f64().unwrap();
        assert!((-2.0..=2.0).contains(&x));
        let lr = params["lr"].as_f64().unwrap();
        assert!((1e-4..=1e-1).contains(&lr));
        assert!(params["layers"].is_i64());
        assert!([8.0, 16.0, 32.0].contains(&params["batch"].as_f64().unwrap()));
        assert!(trial["started_at"].is_string() && trial["finished_at"].is_string());
        assert!(trial["error"].is_null());
    }

    // The database holds the intermediate and final measurements of each trial.
    let rows = scratch.query(
        "SELECT t.number, m.step, m.metric, m.value FROM measurements m JOIN trials t ON t.id = m.trial_id
         WHERE t.number = 0 ORDER BY m.id",
    );
    let first_value = trials[0]["value"].as_f64().unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0][1], Value::from(1));
    assert_eq!(rows[0][2], "loss");
    assert!((rows[0][3].as_f64().unwrap() - (first_value + 1.0)).abs() < 1e-9);
    assert_eq!(rows[1][2], "lr");
    assert_eq!(rows[2][1], Value::Null);
    assert_eq!(rows[2][3].as_f64().unwrap(), first_value);
    let stored = scratch.query("SELECT name, metric, goal FROM studies");
    assert_eq!(
        stored,
        vec![vec![Value::from("quad"), "loss".into(), "minimize".into()]]
    );
    let logs = scratch.query("SELECT log_path, worker FROM trials WHERE number = 3");
    let log = std::fs::read_to_string(scratch.path(logs[0][0].as_str().unwrap())).unwrap();
    assert!(log.contains("starting trial 3 of quad"), "{log}");
    assert!(logs[0][1].as_str().unwrap().starts_with("pid:"));
}

#[test]
fn the_same_seed_proposes_the_same_trials_and_another_seed_does_not() {
    let params = |seed: u64| -> Vec<Value> {
        let scratch = Scratch::new();
        let text = RANDOM.replace("seed: 11", &format!("seed: {seed}"));
        let study = scratch.study("study.yaml", &text);
        assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
        scratch
            .trials("quad")
            .into_iter()
            .map(|t| t["params"].clone())
            .collect()
    };
    let first = params(11);
    assert_eq!(first, params(11));
    assert_ne!(first, params(12));
}

#[test]
fn grid_search_tries_every_point_once_and_stops_when_exhausted() {
    let scratch = Scratch::new();
    let study = scratch.study(
        "grid.yaml",
        r#"
name: grid
objective: {metric: loss, goal: minimize}
parameters:
  - {id: layers, type: integer, min: 1, max: 3}
  - {id: act, type: categorical, values: [relu, gelu]}
  - {id: dropout, type: double, min: 0.0, max: 0.5, grid_points: 2}
algorithm: grid
parallel_trial_count: 3
trial:
  command: [{worker}]
"#,
    );
    let out = scratch.hptune(&["run", study.to_str().unwrap()]);
    assert_success(&out);
    assert!(
        stderr(&out).contains("every grid point was tried"),
        "{}",
        stderr(&out)
    );
    let trials = scratch.trials("grid");
    assert_eq!(trials.len(), 12);
    let points: HashSet<String> = trials.iter().map(|t| t["params"].to_string()).collect();
    assert_eq!(points.len(), 12, "a grid point was tried twice");
    for layers in 1..=3 {
        for act in ["relu", "gelu"] {
            for dropout in [0.0, 0.5] {
                let found = trials.iter().any(|t| {
                    t["params"]["layers"] == layers
                        && t["params"]["act"] == act
                        && t["params"]["dropout"].as_f64() == Some(dropout)
                });
                assert!(found, "missing layers={layers} act={act} dropout={dropout}");
            }
        }
    }
    // A rerun finds nothing left to try.
    let again = scratch.hptune(&["run", study.to_str().unwrap()]);
    assert_success(&again);
    assert_eq!(scratch.trials("grid").len(), 12);
}

#[test]
fn inactive_conditional_parameters_are_neither_recorded_nor_passed() {
    let scratch = Scratch::new();
    let trace = scratch.path("trace");
    let study = scratch.study(
        "cond.yaml",
        &format!(
            r#"
name: cond
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: optimizer, type: categorical, values: [adam, sgd]}}
  - {{id: momentum, type: double, min: 0.5, max: 0.99, when: {{optimizer: [sgd]}}}}
  - {{id: lr, type: double, min: 0.001, max: 0.1, scale: log}}
algorithm: random
max_trial_count: 16
parallel_trial_count: 4
trial:
  command: [{{worker}}]
  env: {{TRACE: "{}"}}
"#,
            trace.display()
        ),
    );
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let trials = scratch.trials("cond");
    assert_eq!(trials.len(), 16);
    let traces = std::fs::read_to_string(&trace).unwrap();
    let mut saw = HashSet::new();
    for trial in &trials {
        let params = trial["params"].as_object().unwrap();
        let optimizer = params["optimizer"].as_str().unwrap();
        saw.insert(optimizer.to_string());
        assert_eq!(
            params.contains_key("momentum"),
            optimizer == "sgd",
            "{trial}"
        );
        let line = traces
            .lines()
            .find(|l| l.split(' ').next() == Some(&trial["number"].to_string()))
            .unwrap();
        assert_eq!(line.contains("--momentum="), optimizer == "sgd", "{line}");
        assert!(line.contains(&format!("--optimizer={optimizer}")), "{line}");
    }
    assert_eq!(saw.len(), 2, "16 draws should take both branches");
}

#[test]
fn parallel_trials_overlap_but_never_exceed_the_limit() {
    let scratch = Scratch::new();
    let trace = scratch.path("trace");
    let text = RANDOM
        .replace("max_trial_count: 8", "max_trial_count: 9")
        .replace("parallel_trial_count: 2", "parallel_trial_count: 3")
        .replace(
            "command: [{worker}]",
            &format!(
                "command: [{{worker}}]\n  env: {{SLEEP: '0.4', TRACE: '{}'}}",
                trace.display()
            ),
        );
    let study = scratch.study("par.yaml", &text);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let intervals: Vec<(f64, f64)> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[1].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect();
    assert_eq!(intervals.len(), 9);
    let most = intervals
        .iter()
        .map(|(start, _)| {
            intervals
                .iter()
                .filter(|(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap();
    assert!(most > 1, "trials never overlapped: {intervals:?}");
    assert!(
        most <= 3,
        "{most} trials ran at once with parallel_trial_count 3"
    );
}

/// Runs a study of at most 6 trials, one at a time, stopping after 2 failures; `env` is the
/// worker's environment as a YAML mapping.
fn failing_study(scratch: &Scratch, env: &str, extra: &str) -> (std::process::Output, Vec<Value>) {
    let text = RANDOM
        .replace(
            "max_trial_count: 8",
            "max_trial_count: 6\nmax_failed_trial_count: 2",
        )
        .replace("parallel_trial_count: 2", "parallel_trial_count: 1")
        .replace(
            "command: [{worker}]",
            &format!("command: [{{worker}}]\n  env: {env}\n{extra}"),
        );
    let study = scratch.study("fail.yaml", &text);
    let out = scratch.hptune(&["run", study.to_str().unwrap()]);
    (out, scratch.trials("quad"))
}

#[test]
fn a_failing_worker_fails_its_trial_and_the_study_stops_at_max_failed_trial_count() {
    let scratch = Scratch::new();
    let (out, trials) = failing_study(&scratch, "{MODE: fail}", "");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("2 trials failed"), "{}", stderr(&out));
    // The hint names what to do whatever failed: the worker, or hptune's start of the trial
    // (its model folder, its executor).
    assert!(
        stderr(&out).contains(
            "fix what the last error names, raise max_failed_trial_count, and run the same \
             command to continue"
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(states(&trials), ["failed", "failed"]);
    let error = trials[0]["error"].as_str().unwrap();
    assert!(error.contains("exited with code 3"), "{error}");
    assert!(error.contains("ValueError: bad things happened"), "{error}");
}

#[test]
fn a_worker_reporting_nan_fails_its_trial() {
    let scratch = Scratch::new();
    let (_, trials) = failing_study(&scratch, "{MODE: nan}", "");
    assert_eq!(states(&trials), ["failed", "failed"]);
    let error = trials[0]["error"].as_str().unwrap();
    assert_eq!(error, "the worker reported loss=NaN at step 2");
    // The finite measurement before it is kept.
    let rows = scratch.query("SELECT step, value FROM measurements ORDER BY id LIMIT 1");
    assert_eq!(rows, vec![vec![Value::from(1), Value::from(0.5)]]);
}

#[test]
fn a_worker_that_never_reports_fails_its_trial() {
    let scratch = Scratch::new();
    let (_, trials) = failing_study(&scratch, "{MODE: silent}", "");
    assert_eq!(states(&trials), ["failed", "failed"]);
    let error = trials[0]["error"].as_str().unwrap();
    assert!(error.contains("never reported 'loss'"), "{error}");
}

#[test]
fn a_worker_past_its_timeout_is_terminated_and_fails() {
    let scratch = Scratch::new();
    let started = Instant::now();
    let (out, trials) = failing_study(
        &scratch,
        "{SLEEP: '30'}",
        "  timeout: 1s\n  grace_period: 1s",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(states(&trials), ["failed", "failed"]);
    let error = trials[0]["error"].as_str().unwrap();
    assert!(error.contains("timed out after 1s"), "{error}");
}

#[test]
fn the_metrics_file_of_cloudml_hypertune_is_read() {
    let scratch = Scratch::new();
    let text = RANDOM.replace(
        "command: [{worker}]",
        "command: [{worker}]\n  env: {MODE: file}",
    );
    let study = scratch.study("file.yaml", &text);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let trials = scratch.trials("quad");
    assert_eq!(trials.len(), 8);
    for trial in &trials {
        assert_eq!(trial["state"], "succeeded");
        assert!((trial["value"].as_f64().unwrap() - expected_loss(trial)).abs() < 1e-9);
    }
    let steps = scratch.query(
        "SELECT m.step FROM measurements m JOIN trials t ON t.id = m.trial_id WHERE t.number = 0 ORDER BY m.step",
    );
    assert_eq!(steps, vec![vec![Value::from(1)], vec![Value::from(2)]]);
}

#[test]
fn a_rerun_continues_the_study_and_keeps_finished_trials() {
    let scratch = Scratch::new();
    let first = RANDOM.replace("max_trial_count: 8", "max_trial_count: 4");
    let study = scratch.study("study.yaml", &first);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let before = scratch.trials("quad");
    assert_eq!(before.len(), 4);

    // The same budget again: nothing to do.
    let again = scratch.hptune(&["run", study.to_str().unwrap()]);
    assert_success(&again);
    assert!(
        stderr(&again).contains("4 trials already recorded"),
        "{}",
        stderr(&again)
    );
    assert_eq!(scratch.trials("quad"), before);

    // A larger budget: only the missing trials run, and they are those a single run of 6
    // would have proposed.
    scratch.study(
        "study.yaml",
        &RANDOM.replace("max_trial_count: 8", "max_trial_count: 6"),
    );
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let after = scratch.trials("quad");
    assert_eq!(after.len(), 6);
    assert_eq!(&after[..4], &before[..]);

    let fresh = Scratch::new();
    let study6 = fresh.study(
        "study.yaml",
        &RANDOM.replace("max_trial_count: 8", "max_trial_count: 6"),
    );
    assert_success(&fresh.hptune(&["run", study6.to_str().unwrap()]));
    let params = |t: &[Value]| t.iter().map(|t| t["params"].clone()).collect::<Vec<_>>();
    assert_eq!(params(&after), params(&fresh.trials("quad")));
}

#[test]
fn a_rerun_with_a_changed_search_space_is_refused() {
    let scratch = Scratch::new();
    let study = scratch.study(
        "study.yaml",
        &RANDOM.replace("max_trial_count: 8", "max_trial_count: 2"),
    );
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    scratch.study(
        "study.yaml",
        &RANDOM
            .replace("max_trial_count: 8", "max_trial_count: 2")
            .replace("max: 2.0}", "max: 3.0}"),
    );
    let out = scratch.hptune(&["run", study.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("different search space"),
        "{}",
        stderr(&out)
    );
    assert_eq!(scratch.trials("quad").len(), 2);
}

/// `hptune run` of the study `text` (study.yaml in `scratch`), started in the background, its
/// stderr kept for when it ends.
fn started_run(scratch: &Scratch, text: &str) -> std::process::Child {
    let study = scratch.study("study.yaml", text);
    scratch
        .command(&["run", study.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs two workers of `env` with a grace period of `grace`, sends hptune `interrupts`
/// SIGINTs once both run, and checks that it exits 130 with both trials `pending` (to run
/// again) and both workers gone; returns how long it took to end after the first SIGINT.
fn interrupt_a_study(env: &str, grace: &str, interrupts: usize) -> Duration {
    let scratch = Scratch::new();
    let text = RANDOM
        .replace("max_trial_count: 8", "max_trial_count: 4")
        .replace(
            "command: [{worker}]",
            &format!("command: [{{worker}}]\n  env: {env}\n  grace_period: {grace}"),
        );
    let child = started_run(&scratch, &text);
    // Wait until both trials run, their workers' handles written as they started.
    let deadline = Instant::now() + Duration::from_secs(20);
    // The database may exist before its tables do: a failing query means "not yet".
    while !scratch.path("hptune.db").exists()
        || scratch
            .try_query("SELECT COUNT(*) FROM trials WHERE state = 'running' AND worker IS NOT NULL")
            .ok()
            .and_then(|rows| rows.first().and_then(|r| r[0].as_i64()))
            != Some(2)
    {
        assert!(Instant::now() < deadline, "the workers did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    for _ in 0..interrupts {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(500));
    }
    let out = child.wait_with_output().unwrap();
    let took = started.elapsed();
    // The interrupted attempts recorded their workers.
    let pids: Vec<i32> = scratch
        .query("SELECT worker FROM attempts WHERE outcome = 'retried'")
        .iter()
        .map(|r| {
            r[0].as_str()
                .unwrap()
                .trim_start_matches("pid:")
                .split('@')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(pids.len(), 2);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("run the same command to continue"),
        "{}",
        stderr(&out)
    );
    let trials = scratch.trials("quad");
    assert_eq!(states(&trials), ["pending", "pending"]);
    for pid in pids {
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        assert!(!alive, "worker {pid} still runs");
    }
    took
}

/// `trials` names a running trial's worker while it runs: its handle is written as the worker
/// starts, not with the next heartbeat (the first after the start comes 10 s after the run
/// began), and it names the worker's own process.
#[test]
fn trials_names_the_worker_of_a_running_trial_as_it_starts() {
    let scratch = Scratch::new();
    let text = RANDOM
        .replace("max_trial_count: 8", "max_trial_count: 1")
        .replace("parallel_trial_count: 2", "parallel_trial_count: 1")
        .replace(
            "command: [{worker}]",
            "command: [{worker}]\n  env: {SLEEP: '60'}",
        );
    let child = started_run(&scratch, &text);
    // The trial as `trials --format json` shows it, once the database has it.
    let trial = || {
        let out = scratch.hptune(&["trials", "quad", "--format", "json"]);
        let trials: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        trials.into_iter().next()
    };
    // The running trial's worker, as soon as it is shown, or what went wrong.
    let shown_worker = || -> Result<String, String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while trial().is_none_or(|t| t["state"] != "running") {
            if Instant::now() > deadline {
                return Err("the trial did not start".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let shown = trial().unwrap();
            match shown["worker"].as_str() {
                Some(handle) if shown["state"] == "running" => return Ok(handle.to_string()),
                _ if Instant::now() > deadline => {
                    return Err(format!("a running trial without its worker: {shown}"));
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    };
    let handle = shown_worker();
    // The worker the handle names, read before the run is stopped.
    let command_line = handle.as_ref().ok().and_then(|handle| {
        let pid = handle.strip_prefix("pid:")?.split('@').next()?;
        std::fs::read(format!("/proc/{pid}/cmdline")).ok()
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let handle = handle.unwrap();
    let command_line = String::from_utf8_lossy(command_line.as_deref().unwrap_or_default());
    assert!(
        command_line.contains("quadratic.sh"),
        "{handle} is not the worker: '{command_line}'"
    );
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
}

/// Trials stopped by Ctrl-C are run again by the next run, as their second attempt, and
/// use no more of the budget than once.
#[test]
fn trials_interrupted_by_ctrl_c_run_again_when_the_study_is_run_again() {
    let scratch = Scratch::new();
    let text = RANDOM
        .replace("max_trial_count: 8", "max_trial_count: 2")
        .replace(
            "command: [{worker}]",
            "command: [{worker}]
  env: {SLEEP: '30'}",
        );
    let study = scratch.study("study.yaml", &text);
    let path = study.to_str().unwrap();
    let child = scratch.command(&["run", path]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(0..2).all(|n| {
        scratch
            .path(&format!("hptune-logs/quad/trial-{n}.log"))
            .exists()
    }) {
        assert!(Instant::now() < deadline, "the workers did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert_eq!(states(&scratch.trials("quad")), ["pending", "pending"]);

    let study = scratch.study("study.yaml", &text.replace("SLEEP: '30'", "SLEEP: '0'"));
    let out = scratch.hptune(&["run", study.to_str().unwrap()]);
    assert_success(&out);
    assert!(
        stderr(&out).contains("taking over 2 trials"),
        "{}",
        stderr(&out)
    );
    let trials = scratch.trials("quad");
    assert_eq!(states(&trials), ["succeeded", "succeeded"]);
    let attempts =
        scratch.query("SELECT attempt, outcome FROM attempts ORDER BY trial_id, attempt");
    let outcomes: Vec<(i64, &str)> = attempts
        .iter()
        .map(|r| (r[0].as_i64().unwrap(), r[1].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            (1, "retried"),
            (2, "succeeded"),
            (1, "retried"),
            (2, "succeeded")
        ]
    );
}

#[test]
fn ctrl_c_stops_running_workers_and_records_them_as_stopped() {
    let took = interrupt_a_study("{SLEEP: '30'}", "5s", 1);
    assert!(
        took < Duration::from_secs(10),
        "sh stops on SIGTERM at once"
    );
}

#[test]
fn a_second_ctrl_c_kills_workers_that_ignore_sigterm_without_waiting_out_the_grace_period() {
    let took = interrupt_a_study("{SLEEP: '30', MODE: stubborn}", "10m", 2);
    assert!(
        took < Duration::from_secs(25),
        "the workers were not killed at the second Ctrl-C: it took {took:?}"
    );
}

#[test]
fn a_missing_worker_program_is_refused_before_any_trial() {
    let scratch = Scratch::new();
    let study = scratch.study(
        "study.yaml",
        &RANDOM.replace("command: [{worker}]", "command: [./no-such-worker, --x]"),
    );
    let out = scratch.hptune(&["run", study.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("trial.command[0]: './no-such-worker' does not exist"),
        "{}",
        stderr(&out)
    );
    assert!(!scratch.path("hptune.db").exists());
}

#[test]
fn a_worker_killed_from_outside_is_retried_and_every_attempt_recorded() {
    let scratch = Scratch::new();
    let text = RANDOM
        .replace("max_trial_count: 8", "max_trial_count: 3\nmax_retries: 1")
        .replace(
            "command: [{worker}]",
            "command: [{worker}]\n  env: {MODE: killed-once}",
        );
    let study = scratch.study("study.yaml", &text);
    let out = scratch.hptune(&["run", study.to_str().unwrap()]);
    assert_success(&out);
    assert!(
        stderr(&out).contains("runs again (attempt 2): the worker was killed by SIGKILL"),
        "{}",
        stderr(&out)
    );
    let trials = scratch.trials("quad");
    assert_eq!(states(&trials), ["succeeded"; 3]);
    assert!(trials.iter().all(|t| t["attempt"] == 2));
    let attempts =
        scratch.query("SELECT attempt, outcome, error FROM attempts ORDER BY trial_id, attempt");
    assert_eq!(attempts.len(), 6);
    assert_eq!(attempts[0][1], "retried");
    assert!(attempts[0][2].as_str().unwrap().contains("SIGKILL"));
    assert_eq!(attempts[1][1], "succeeded");

    // With no retry left, the trial fails; a crash of the worker's own code is never retried.
    for (mode, expected) in [
        ("killed-once", "no retry left (max_retries 0)"),
        ("segfault", "killed by SIGSEGV"),
    ] {
        let scratch = Scratch::new();
        let text = RANDOM
            .replace("max_trial_count: 8", "max_trial_count: 1\nmax_retries: 0")
            .replace(
                "command: [{worker}]",
                &format!("command: [{{worker}}]\n  env: {{MODE: {mode}}}"),
            );
        let study = scratch.study("study.yaml", &text);
        scratch.hptune(&["run", study.to_str().unwrap()]);
        let trials = scratch.trials("quad");
        assert_eq!(states(&trials), ["failed"]);
        assert!(
            trials[0]["error"].as_str().unwrap().contains(expected),
            "{}",
            trials[0]
        );
        assert_eq!(trials[0]["attempt"], 1);
    }
}
