//! `algorithm: bayesian` end to end: the real binary, the Gaussian-process sampler proposing
//! through the controller with parallel trials, a worker process per trial.

mod common;

use common::{Scratch, assert_success};

const BAYESIAN: &str = r#"
name: bowl
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 1.5}
  - {id: y, type: double, min: -1.0, max: 2.0}
algorithm: bayesian
max_trial_count: 16
parallel_trial_count: 2
seed: 4
trial:
  command: [{worker}]
"#;

#[test]
fn bayesian_study_improves_on_its_design_with_parallel_trials() {
    let scratch = Scratch::new();
    let study = scratch.study("study.yaml", BAYESIAN);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let trials = scratch.trials("bowl");
    assert_eq!(trials.len(), 16);
    let values: Vec<f64> = trials
        .iter()
        .map(|t| {
            assert_eq!(t["state"], "succeeded", "{t}");
            t["value"].as_f64().unwrap()
        })
        .collect();
    // The first 5 trials are the space-filling design (2 parameters); the model's trials must
    // find the bottom of the bowl x² + y², which no design point is near.
    let design = values[..5].iter().copied().fold(f64::MAX, f64::min);
    let model = values[5..].iter().copied().fold(f64::MAX, f64::min);
    assert!(
        model < 1e-2 && model < design,
        "design {design}, model {model}"
    );
}

/// The example worker `examples/objective.rs`, which `cargo test` builds beside the tests.
fn objective_example() -> std::path::PathBuf {
    let deps = std::env::current_exe().expect("the test's path");
    let path = deps
        .parent()
        .and_then(|p| p.parent())
        .expect("target/<profile>/deps")
        .join("examples/objective");
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test`, which builds the examples",
        path.display()
    );
    path
}

#[test]
fn parallel_trials_that_end_in_turn_give_the_same_study_twice() {
    // With `--in-order` the workers end one at a time in number order, each proposal after
    // the first four made beside exactly three running trials: the run does not depend on
    // the controller's speed, so two runs propose the same trials (the benchmark's `async`
    // mode rests on this).
    let run = || {
        let scratch = Scratch::new();
        let marks = scratch.path("marks");
        std::fs::create_dir(&marks).unwrap();
        let study = format!(
            r#"
name: levy
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x1, type: double, min: -10.0, max: 10.0}}
  - {{id: x2, type: double, min: -10.0, max: 10.0}}
algorithm: bayesian
max_trial_count: 14
parallel_trial_count: 4
seed: 3
trial:
  command: [{}, --function, levy, --in-order, {}, --running, 4, --trials, 14]
"#,
            objective_example().display(),
            marks.display()
        );
        let path = scratch.study("study.yaml", &study);
        let out = scratch
            .command(&["run", path.to_str().unwrap()])
            .env("RUST_LOG", "hptune::sampler=debug")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert_success(&out);
        let running: Vec<String> = common::stderr(&out)
            .lines()
            .filter(|l| l.contains("proposed"))
            .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("running=")))
            .map(str::to_string)
            .collect();
        let trials = scratch.trials("levy");
        assert_eq!(trials.len(), 14);
        assert!(
            trials.iter().all(|t| t["state"] == "succeeded"),
            "{trials:?}"
        );
        let params: Vec<String> = trials.iter().map(|t| t["params"].to_string()).collect();
        (params, running)
    };
    let (first, running) = run();
    let expected: Vec<String> = (0..14).map(|n| format!("running={}", n.min(3))).collect();
    assert_eq!(
        running, expected,
        "the running trials seen by each proposal"
    );
    let (second, _) = run();
    assert_eq!(first, second);
}
