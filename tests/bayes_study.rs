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
