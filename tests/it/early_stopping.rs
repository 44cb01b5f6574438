//! Early stopping end to end: workers report scripted learning curves, one trial at a time,
//! and each rule stops exactly the trials computed by hand (in the comments).

use crate::common;

use std::path::Path;

use common::{Scratch, assert_success, states};
use serde_json::Value;

/// Runs a grid study `curves` over `q` = 1..=curves.len(), trial `q-1` reporting
/// `curves[q-1]`.
pub(crate) fn run_curves(rule: &str, curves: &[&[f64]]) -> (Scratch, Vec<Value>) {
    let scratch = Scratch::new();
    let dir = scratch.path("curves");
    std::fs::create_dir(&dir).unwrap();
    for (i, curve) in curves.iter().enumerate() {
        let text: String = curve.iter().map(|v| format!("{v}\n")).collect();
        std::fs::write(dir.join(format!("curve-{}.txt", i + 1)), text).unwrap();
    }
    let values: Vec<String> = (1..=curves.len()).map(|q| q.to_string()).collect();
    let worker = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workers/curve.sh");
    let study = scratch.study(
        "study.yaml",
        &format!(
            r#"
name: curves
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: q, type: discrete, values: [{}]}}
algorithm: grid
parallel_trial_count: 1
early_stopping: {rule}
trial:
  command: [{}]
  env: {{CURVE_DIR: '{}', STEP_SLEEP: '0.5'}}
"#,
            values.join(", "),
            worker.display(),
            dir.display()
        ),
    );
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let trials = scratch.trials("curves");
    (scratch, trials)
}

/// The steps each trial reported, and the worker-steps the stopped ones did not run.
fn steps_run(scratch: &Scratch, curves: &[&[f64]]) -> (Vec<i64>, usize) {
    let rows = scratch.query(
        "SELECT t.number, MAX(m.step) FROM trials t JOIN measurements m ON m.trial_id = t.id
         WHERE m.step IS NOT NULL GROUP BY t.number ORDER BY t.number",
    );
    let steps: Vec<i64> = rows.iter().map(|r| r[1].as_i64().unwrap()).collect();
    let saved = curves
        .iter()
        .zip(&steps)
        .map(|(c, s)| c.len() - *s as usize)
        .sum();
    (steps, saved)
}

#[test]
fn the_median_rule_stops_the_trials_worse_than_the_median() {
    let curves: [&[f64]; 5] = [
        &[1.0, 0.8, 0.6, 0.5],
        // Only one succeeded trial so far (min_trials 2): it runs to the end.
        &[0.9, 0.7, 0.5, 0.4],
        // Step 1: best 2.0 against the median of 1.0 and 0.9 (0.95): stopped.
        &[2.0, 1.9, 1.8, 1.7],
        // Step 1: 0.93 beats 0.95; step 2: 0.5 beats the median of 0.9, 0.8: runs to the end.
        &[0.93, 0.5, 0.3, 0.2],
        // Step 2: best 0.8 against the median of 0.9, 0.8, 0.715 (0.8): not worse, goes on.
        // Step 3: best 0.8 against the median of 0.8, 0.7, 0.577 (0.7): stopped.
        &[0.8, 0.9, 1.0, 1.1],
    ];
    let (scratch, trials) = run_curves("{rule: median, min_steps: 1, min_trials: 2}", &curves);
    assert_eq!(
        states(&trials),
        ["succeeded", "succeeded", "stopped", "succeeded", "stopped"]
    );
    assert!(
        trials[2]["error"]
            .as_str()
            .unwrap()
            .contains("median rule at step 1")
    );
    assert!(
        trials[4]["error"]
            .as_str()
            .unwrap()
            .contains("median rule at step 3")
    );
    // A stopped trial keeps its last measurement as its value.
    assert_eq!(trials[2]["value"].as_f64(), Some(2.0));
    let (steps, saved) = steps_run(&scratch, &curves);
    // The worker may report one more step while it is being stopped.
    assert!(
        (1..=2).contains(&steps[2]) && (3..=4).contains(&steps[4]),
        "{steps:?}"
    );
    eprintln!("median rule: steps run {steps:?}, {saved} worker-steps saved of 20");
}

/// ASHA with rungs at steps 1, 2 and 4, half the trials going on at each.
pub(crate) const ASHA: &str = "{rule: asha, min_resource: 1, reduction_factor: 2}";

/// Curves whose fate under [`ASHA`] is computed by hand.
pub(crate) const ASHA_CURVES: [&[f64]; 5] = [
    // Alone at every rung (steps 1, 2, 4): runs to the end.
    &[1.0, 0.8, 0.7, 0.6],
    // Rung 0: best of {1.0, 0.9}; rung 1: 0.85 behind 0.8 (keep 1 of 2): stopped.
    &[0.9, 0.85, 0.8, 0.75],
    // Rung 0: 1.2, keep 1 of 3: stopped.
    &[1.2, 0.5, 0.4, 0.3],
    // Rung 0: best 2 of 4; rung 1: best of {0.8, 0.85, 0.6}; rung 2: best of {0.6, 0.45}.
    &[0.7, 0.6, 0.5, 0.45],
    // Rung 0: 0.95 is third of {1.0, 0.9, 1.2, 0.7, 0.95}, keep 2: stopped.
    &[0.95, 0.9, 0.2, 0.1],
];

#[test]
fn asha_stops_the_trials_outside_the_best_share_of_each_rung() {
    let curves = ASHA_CURVES;
    let (scratch, trials) = run_curves(ASHA, &curves);
    assert_eq!(
        states(&trials),
        ["succeeded", "stopped", "stopped", "succeeded", "stopped"]
    );
    assert!(
        trials[1]["error"]
            .as_str()
            .unwrap()
            .contains("ASHA at rung 1 (step 2)")
    );
    assert!(trials[4]["error"].as_str().unwrap().contains("best 2 of 5"));
    let (steps, saved) = steps_run(&scratch, &curves);
    eprintln!("ASHA: steps run {steps:?}, {saved} worker-steps saved of 20");
}
