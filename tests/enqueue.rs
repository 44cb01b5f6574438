//! A head start end to end: `initial_trials` in the study file and `hptune enqueue`, run
//! first and once each by two controllers started together on one database, then the
//! sampler's proposals; bad configurations refused with exit 2 naming the parameter.

mod common;

use std::process::Stdio;

use common::{Scratch, assert_exit_says, assert_success, stdout};
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
