//! What workers print, however much or however oddly, is recorded and costs the controller
//! bounded memory: a burst of step lines is stored whole (and a rerun goes on), a line of
//! hundreds of megabytes without a break is cut, a value that is not a number is named, and
//! a terminal's control sequences are shown escaped, never obeyed.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::{Scratch, assert_success, expected_loss, states, stderr};
use serde_json::Value;

const STUDY: &str = r#"
name: {name}
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 2.0}
algorithm: random
max_trial_count: {trials}
seed: 3
trial:
  command: [{worker}]
  env: {env}
"#;

/// Writes the study `name` of `trials` trials whose worker runs with `env` (YAML flow map).
fn study(scratch: &Scratch, name: &str, trials: u64, env: &str) -> String {
    let text = STUDY
        .replace("{name}", name)
        .replace("{trials}", &trials.to_string())
        .replace("{env}", env);
    let path = scratch.study(&format!("{name}.yaml"), &text);
    path.to_str().unwrap().to_string()
}

/// (stored measurements, of which with a step) of each trial of the study, by number.
fn measurement_counts(scratch: &Scratch, name: &str) -> Vec<Vec<Value>> {
    scratch.query(&format!(
        "SELECT COUNT(*), COUNT(m.step) FROM measurements m JOIN trials t ON t.id = m.trial_id
         JOIN studies s ON s.id = t.study_id WHERE s.name = '{name}' GROUP BY t.number
         ORDER BY t.number"
    ))
}

/// No line of the controller's log is long: a slow statement is shown by its start only.
fn assert_log_lines_are_short(out: &std::process::Output) {
    let log = stderr(out);
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(
        longest <= 400,
        "a log line of {longest} bytes:\n{log:.2000}"
    );
}

const STEPS: i64 = 30_000;

/// A worker printing 30,000 step lines at once and exiting leaves them all to its trial's
/// end: they are stored with it, the trial succeeds, and a rerun runs another such trial.
fn a_burst_of_step_lines_is_stored_with_the_trials_end(scratch: &Scratch) {
    let name = common::unique_name("burst");
    let env = format!("{{MODE: burst, STEPS: '{STEPS}'}}");
    for trials in [1, 2] {
        let out = scratch.hptune(&["run", &study(scratch, &name, trials, &env)]);
        assert_success(&out);
        assert_log_lines_are_short(&out);
    }
    let trials = scratch.trials(&name);
    assert_eq!(states(&trials), ["succeeded", "succeeded"]);
    for trial in &trials {
        let value = trial["value"].as_f64().unwrap();
        assert!((value - expected_loss(trial)).abs() < 1e-9, "{trial}");
    }
    let each = vec![Value::from(STEPS + 1), Value::from(STEPS)];
    assert_eq!(
        measurement_counts(scratch, &name),
        [each.clone(), each],
        "every step line and the final value, of both trials"
    );
}

#[test]
fn a_burst_of_step_lines_is_stored_with_the_trials_end_on_sqlite() {
    a_burst_of_step_lines_is_stored_with_the_trials_end(&Scratch::new());
}

#[test]
fn a_burst_of_step_lines_is_stored_with_the_trials_end_on_postgres() {
    if let Some(url) = common::test_postgres() {
        a_burst_of_step_lines_is_stored_with_the_trials_end(&Scratch::on_postgres(&url));
    }
}

/// The peak resident memory (VmHWM) of a running process, in KiB.
fn peak_memory_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A worker prints a step line that goes on for 200 MB without a line break (then, a second
/// later, its final value): the controller reads it in bounded chunks and keeps the line's
/// start, whose step is recorded. Its peak memory is read while the worker sleeps, after
/// the long line was read (VmHWM only grows).
#[test]
fn a_line_of_200_megabytes_leaves_the_controllers_memory_bounded() {
    let scratch = Scratch::new();
    let env = "{MODE: flood, FLOOD_BYTES: '200000000'}";
    let mut child = scratch
        .command(&["run", &study(&scratch, "flood", 1, env)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        peak = peak_memory_kib(child.id()).unwrap_or(0).max(peak);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(child.wait().unwrap().success());
    assert!(peak > 0, "the controller's memory was read");
    assert!(peak < 64 * 1024, "the controller's peak memory: {peak} KiB");
    let trials = scratch.trials("flood");
    assert_eq!(states(&trials), ["succeeded"]);
    let steps = scratch.query("SELECT step, value FROM measurements ORDER BY id");
    let loss = expected_loss(&trials[0]);
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[0][0], Value::from(1));
    assert!((steps[0][1].as_f64().unwrap() - (loss + 1.0)).abs() < 1e-9);
}

/// A worker that prints `loss=0.5abc` is told that the value is not a number, with the text
/// it printed; the trial fails for want of a value.
#[test]
fn an_objective_value_that_is_not_a_number_is_named() {
    let scratch = Scratch::new();
    let out = scratch.hptune(&["run", &study(&scratch, "garbled", 1, "{MODE: garbled}")]);
    assert!(
        stderr(&out).contains("trial 0: the worker reported loss=0.5abc, which is not a number"),
        "{}",
        stderr(&out)
    );
    let trials = scratch.trials("garbled");
    assert_eq!(states(&trials), ["failed"]);
    assert_eq!(
        trials[0]["error"],
        "the worker reported loss=0.5abc, which is not a number"
    );
}

/// A worker's error line and a categorical value holding a terminal's control sequences
/// (window title, screen clear, an OSC-8 link) are shown escaped by `run` (its progress and
/// end lines) and `trials` (its table); CSV and JSON keep them as they are.
#[test]
fn control_sequences_from_workers_are_shown_escaped() {
    let scratch = Scratch::new();
    let text = r#"
name: escapes
objective: {metric: loss, goal: minimize}
parameters:
  - {id: c, type: categorical, values: ["\e]8;;http://evil.example\e\\click\e]8;;\e\\"]}
algorithm: random
max_trial_count: 1
trial:
  command: [sh, -c, 'printf "\033]0;pwned\007\033[2Jboom\n" >&2; exit 3']
"#;
    let path = scratch.study("escapes.yaml", text);
    let out = scratch.hptune(&["run", path.to_str().unwrap()]);
    let raw = |text: &str| text.contains(['\u{1b}', '\u{7}']);
    let (said, printed) = (stderr(&out), common::stdout(&out));
    assert!(!raw(&said) && !raw(&printed), "{said:?}\n{printed:?}");
    assert!(said.contains(r"\u{1b}]0;pwned\u{7}\u{1b}[2Jboom"), "{said}");
    let out = scratch.hptune(&["trials", "escapes"]);
    assert_success(&out);
    let table = common::stdout(&out);
    assert!(!raw(&table), "{table:?}");
    assert!(table.contains(r"\u{1b}]0;pwned"), "{table}");
    assert!(
        table.contains(r"c=\u{1b}]8;;http://evil.example\u{1b}\click"),
        "{table}"
    );
    let out = scratch.hptune(&["trials", "escapes", "--format", "csv"]);
    assert!(common::stdout(&out).contains("\u{1b}]0;pwned\u{7}"));
    let trials = scratch.trials("escapes");
    assert_eq!(
        trials[0]["params"]["c"],
        "\u{1b}]8;;http://evil.example\u{1b}\\click\u{1b}]8;;\u{1b}\\"
    );
}
