//! A head start end to end: `initial_trials` in the study file and `hptune enqueue`, run
//! first and once each by two controllers started together on one database, then the
//! sampler's proposals; bad configurations refused with exit 2 naming the parameter; a
//! queue of thousands run by workers that end at once, stopped by a signal at once.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Scratch, assert_exit_says, assert_success, stdout};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

fn study(max_trial_count: u32) -> String {
    format!(
        r#"
name: head-start
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x, type: double, min: -2.0, max: 2.0}}
  - {{id: layers, type: integer, min: 1, max: 4}}
algorithm: bayesian
max_trial_count: {max_trial_count}
parallel_trial_count: 2
seed: 1
initial_trials: [{{x: 0.5, layers: 2}}, {{x: -1.5, layers: 4}}]
trial:
  command: [{{worker}}]
  env: {{SLEEP: "0.3"}}
"#
    )
}

fn point(trial: &Value) -> (f64, i64) {
    (
        trial["params"]["x"].as_f64().unwrap(),
        trial["params"]["layers"].as_i64().unwrap(),
    )
}

#[test]
fn enqueued_configurations_run_first_and_once_with_two_controllers_on_sqlite() {
    run_first_and_once(&Scratch::new());
}

#[test]
fn enqueued_configurations_run_first_and_once_with_two_controllers_on_postgres() {
    if let Some(scratch) = Scratch::on_postgres_without("head-start") {
        run_first_and_once(&scratch);
    }
}

fn run_first_and_once(scratch: &Scratch) {
    let file = scratch.study("study.yaml", &study(8));
    let file = file.to_str().unwrap();
    // Before the study has run: the study file creates it, its initial trials enqueued first.
    let out = scratch.hptune(&["enqueue", file, "--param", "x=1.25", "--param", "layers=3"]);
    assert_success(&out);
    assert!(
        stdout(&out).contains("enqueued trial 2"),
        "{}",
        stdout(&out)
    );
    // Two controllers started together.
    let controllers: Vec<_> = (0..2)
        .map(|_| {
            scratch
                .command(&["run", file])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut controller in controllers {
        assert!(controller.wait().unwrap().success());
    }
    let trials = scratch.trials("head-start");
    assert_eq!(trials.len(), 8, "the budget counts the enqueued trials");
    let first: Vec<(f64, i64)> = trials[..3].iter().map(point).collect();
    assert_eq!(first, [(0.5, 2), (-1.5, 4), (1.25, 3)]);
    for t in &trials {
        assert_eq!(t["state"], "succeeded", "{t}");
        let runs = trials.iter().filter(|u| point(u) == point(t)).count();
        assert_eq!(runs, 1, "{t} ran {runs} times");
    }
    let attempts = scratch.query(
        "SELECT COUNT(*) FROM attempts a JOIN trials t ON a.trial_id = t.id \
         JOIN studies s ON t.study_id = s.id WHERE s.name = 'head-start'",
    );
    assert_eq!(attempts[0][0].as_i64(), Some(8), "one attempt per trial");
    // Run again with a larger budget: the study file's initial trials are not enqueued again,
    // and one enqueued by name runs next.
    let file = scratch.study("study.yaml", &study(10));
    let file = file.to_str().unwrap();
    let out = scratch.hptune(&[
        "enqueue",
        "head-start",
        "--param",
        "x=-0.25",
        "--param",
        "layers=1",
    ]);
    assert_success(&out);
    assert!(
        stdout(&out).contains("enqueued trial 8"),
        "{}",
        stdout(&out)
    );
    assert_success(&scratch.hptune(&["run", file]));
    let trials = scratch.trials("head-start");
    assert_eq!(trials.len(), 10);
    assert_eq!(point(&trials[8]), (-0.25, 1));
    assert_eq!(trials.iter().filter(|t| point(t) == (0.5, 2)).count(), 1);
}

#[test]
fn a_bad_configuration_is_refused_naming_its_parameter() {
    let scratch = Scratch::new();
    let file = scratch.study("study.yaml", &study(8));
    let file = file.to_str().unwrap();
    for (params, expected) in [
        (
            vec!["x=9", "layers=2"],
            "--param: parameter 'x': 9 is not a number in [-2, 2]",
        ),
        (vec!["x=0", "layers=2.5"], "parameter 'layers'"),
        (vec!["x=0"], "parameter 'layers' is missing"),
        (
            vec!["x=0", "layers=1", "depth=3"],
            "unknown parameter 'depth'",
        ),
        (
            vec!["x=0", "layers=1", "x=1"],
            "--param: parameter 'x' is given twice (x=0 and x=1)",
        ),
    ] {
        let mut args = vec!["enqueue", file];
        for p in &params {
            args.extend(["--param", p]);
        }
        assert_exit_says(&scratch.hptune(&args), 2, expected);
    }
    let out = scratch.hptune(&["enqueue", "nonesuch", "--param", "x=0"]);
    assert_exit_says(&out, 2, "no study named 'nonesuch'");
    // The refusals recorded nothing, not even the study.
    let out = scratch.hptune(&["trials", "head-start"]);
    assert_exit_says(&out, 2, "no study named 'head-start'");
    // A bad initial trial is a bad study file.
    let bad = scratch.study(
        "bad.yaml",
        &study(8).replace("{x: -1.5, layers: 4}", "{x: -1.5, layers: 7}"),
    );
    let out = scratch.hptune(&["run", bad.to_str().unwrap()]);
    assert_exit_says(
        &out,
        2,
        "initial_trials[1]: parameter 'layers': 7 is not an integer",
    );
}

/// A study of `queue` enqueued configurations whose workers end at once, four at a time.
fn long_queue(name: &str, queue: usize) -> String {
    let mut text = format!(
        "name: {name}\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n  - {{id: x, type: double, min: 0, max: 1}}\nalgorithm: random\nmax_trial_count: {queue}\nparallel_trial_count: 4\ntrial:\n  command: [echo, 'loss=1']\ninitial_trials:\n"
    );
    for i in 0..queue {
        text.push_str(&format!("  - {{x: {}}}\n", i as f64 / queue as f64));
    }
    text
}

/// How the test stops the controller.
enum Stop {
    /// A signal sent once some trials have ended.
    Signal(Signal),
    /// `timeout -s SIGNAL SECONDS hptune run ...`.
    Timeout(&'static str, &'static str),
}

/// Runs a study `name` of `queue` enqueued trials and stops it as `stop` says: the
/// controller must exit with the interrupted exit code, most of the queue still waiting, and
/// its progress lines must count the waiting trials as queued, not running.
fn stop_a_long_queue(scratch: &Scratch, name: &str, queue: usize, stop: Stop) {
    let file = scratch.study("queue.yaml", &long_queue(name, queue));
    let log = std::fs::File::create(scratch.path("run.err")).unwrap();
    let run = ["run", file.to_str().unwrap()];
    let mut command = match stop {
        Stop::Signal(_) => scratch.command(&run),
        Stop::Timeout(signal, after) => {
            let mut command = std::process::Command::new("timeout");
            command
                .args(["--preserve-status", "-s", signal, after])
                .arg(env!("CARGO_BIN_EXE_hptune"))
                .args(run)
                .current_dir(scratch.dir.path())
                .env("HPTUNE_STORAGE", scratch.storage())
                .env_remove("RUST_LOG");
            command
        }
    };
    let mut child = command.stdout(Stdio::null()).stderr(log).spawn().unwrap();
    let count = |state: &str| {
        let sql = format!(
            "SELECT COUNT(*) FROM trials t JOIN studies s ON t.study_id = s.id \
             WHERE s.name = '{name}' AND t.state = '{state}'"
        );
        // The database may exist before its tables do: a failing query counts nothing.
        scratch
            .try_query(&sql)
            .ok()
            .and_then(|rows| rows.first().and_then(|r| r[0].as_i64()))
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    if let Stop::Signal(signal) = stop {
        while count("succeeded") < 20 {
            assert!(Instant::now() < deadline, "no trial ended");
            std::thread::sleep(Duration::from_millis(50));
        }
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    }
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "the controller did not stop ({} trials ended)",
                count("succeeded")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let said = std::fs::read_to_string(scratch.path("run.err")).unwrap();
    let tail: String = said.lines().rev().take(5).collect::<Vec<_>>().join("\n");
    assert_eq!(status.code(), Some(130), "{tail}");
    let queued = count("pending") as usize;
    assert!(queued > queue / 2, "{queued} still queued: {tail}");
    // Each finished trial's line counts the study: four at most run, the rest wait.
    let lines: Vec<&str> = said.lines().filter(|l| l.contains(" done, ")).collect();
    for line in &lines {
        let running: usize = line
            .split(" done, ")
            .nth(1)
            .and_then(|counts| counts.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no running count in {line}"));
        assert!(running <= 4, "{line}");
        assert!(line.contains(" queued, "), "{line}");
    }
}

#[test]
fn a_signal_stops_a_long_queue_of_instant_trials_at_once_on_sqlite() {
    stop_a_long_queue(
        &Scratch::new(),
        "queue",
        3000,
        Stop::Signal(Signal::SIGTERM),
    );
}

#[test]
fn timeout_stops_a_long_queue_of_instant_trials_with_sigint() {
    // Long enough that the queue outlasts the timeout on any machine.
    stop_a_long_queue(&Scratch::new(), "queue", 10_000, Stop::Timeout("INT", "4"));
}

#[test]
fn a_signal_stops_a_long_queue_of_instant_trials_at_once_on_postgres() {
    let name = "long-queue";
    if let Some(scratch) = Scratch::on_postgres_without(name) {
        stop_a_long_queue(&scratch, name, 3000, Stop::Signal(Signal::SIGTERM));
    }
}
