//! `warm_start: {study: NAME}` end to end: a study informed by another's finished trials
//! proposes from them at once, and they count toward nothing of its own.

mod common;

use common::{Scratch, assert_exit_says, assert_success};

fn study(name: &str, trials: u32, extra: &str) -> String {
    format!(
        r#"
name: {name}
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x, type: double, min: -2.0, max: 1.5}}
  - {{id: y, type: double, min: -1.0, max: 2.0}}
algorithm: bayesian
max_trial_count: {trials}
seed: 5
trial:
  command: [{{worker}}]
{extra}
"#
    )
}

fn first_loss(scratch: &Scratch, name: &str) -> f64 {
    let trials = scratch.trials(name);
    assert_eq!(trials.len(), 2, "the budget is this study's own");
    trials[0]["value"].as_f64().unwrap()
}

#[test]
fn a_warm_started_study_begins_where_the_other_ended() {
    let scratch = Scratch::new();
    let earlier = scratch.study("earlier.yaml", &study("earlier", 16, ""));
    assert_success(&scratch.hptune(&["run", earlier.to_str().unwrap()]));
    let warm = scratch.study(
        "warm.yaml",
        &study("warm", 2, "warm_start: {study: earlier}"),
    );
    assert_success(&scratch.hptune(&["run", warm.to_str().unwrap()]));
    let cold = scratch.study("cold.yaml", &study("cold", 2, ""));
    assert_success(&scratch.hptune(&["run", cold.to_str().unwrap()]));
    // x² + y², minimum 0: the warm study's first trial comes from the model of the earlier
    // study's 16, the cold one's is a design point.
    let (warm, cold) = (first_loss(&scratch, "warm"), first_loss(&scratch, "cold"));
    assert!(warm < 0.05 && warm < cold, "warm {warm}, cold {cold}");
}

#[test]
fn a_warm_start_from_a_missing_or_different_study_is_refused() {
    let scratch = Scratch::new();
    let file = scratch.study(
        "warm.yaml",
        &study("warm", 2, "warm_start: {study: nonesuch}"),
    );
    let out = scratch.hptune(&["run", file.to_str().unwrap()]);
    assert_exit_says(
        &out,
        2,
        "warm.yaml: warm_start.study: no study named 'nonesuch'",
    );
    let other = scratch.study(
        "other.yaml",
        &study("other", 1, "").replace("goal: minimize", "goal: maximize"),
    );
    assert_success(&scratch.hptune(&["run", other.to_str().unwrap()]));
    let file = scratch.study("warm.yaml", &study("warm", 2, "warm_start: {study: other}"));
    let out = scratch.hptune(&["run", file.to_str().unwrap()]);
    assert_exit_says(&out, 2, "warm_start.study: study 'other' maximizes loss");
    // Its feasibility is judged by this study's bounds, on values the other one recorded.
    let earlier = scratch.study("earlier.yaml", &study("earlier", 1, ""));
    assert_success(&scratch.hptune(&["run", earlier.to_str().unwrap()]));
    let file = scratch.study(
        "bounded.yaml",
        &study(
            "bounded",
            2,
            "warm_start: {study: earlier}\nconstraints: [{metric: peak, max: 1}]",
        ),
    );
    let out = scratch.hptune(&["run", file.to_str().unwrap()]);
    assert_exit_says(
        &out,
        2,
        "warm_start.study: study 'earlier' recorded no peak for its trials",
    );
    let file = scratch.study("self.yaml", &study("warm", 2, "warm_start: {study: warm}"));
    let out = scratch.hptune(&["run", file.to_str().unwrap()]);
    assert_exit_says(&out, 2, "warm_start.study: names this study itself");
}
