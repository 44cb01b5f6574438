//! `warm_start: {study: NAME}` end to end: a study informed by another's finished trials
//! proposes from them at once, and they count toward nothing of its own.

use crate::common;

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

/// A study of `x`, `y` and what `parameters` adds, whose worker also gets `--z=0.3` when
/// `static_z` (the test worker adds the square of every number it is given).
fn changed(name: &str, trials: u32, parameters: &str, extra: &str) -> String {
    format!(
        r#"
name: {name}
objective: {{metric: loss, goal: minimize}}
parameters:
{parameters}
algorithm: bayesian
max_trial_count: {trials}
seed: 5
trial:
  command: [{{worker}}, --z=0.3]
{extra}
"#
    )
}

/// The earlier study: `x`, `y` and `w` tuned, `z` fixed at 0.3 in its command.
const EARLIER: &str = "  - {id: x, type: double, min: -2.0, max: 1.5}
  - {id: y, type: double, min: -1.0, max: 2.0}
  - {id: w, type: double, min: -0.5, max: 0.5}";

/// This study: `x` narrowed, `y` widened, `w` fixed (dropped), `z` tuned (added).
const CHANGED: &str = "  - {id: x, type: double, min: -1.0, max: 1.0}
  - {id: y, type: double, min: -3.0, max: 3.0}
  - {id: z, type: double, min: -1.0, max: 2.0}";

/// How many of the study's trials lie near the earlier study's best (x and y near 0), and
/// its lowest loss.
fn near_the_best(scratch: &Scratch, name: &str) -> (usize, f64) {
    let trials = scratch.trials(name);
    assert_eq!(trials.len(), 5, "the budget is this study's own");
    let near = trials
        .iter()
        .filter(|t| {
            ["x", "y"]
                .iter()
                .all(|id| t["params"][id].as_f64().unwrap().abs() < 0.3)
        })
        .count();
    let lowest = trials
        .iter()
        .map(|t| t["value"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    (near, lowest)
}

#[test]
fn a_warm_start_over_a_changed_space_maps_the_other_studys_trials_into_it() {
    let scratch = Scratch::new();
    let earlier = scratch.study("earlier.yaml", &changed("earlier", 16, EARLIER, ""));
    assert_success(&scratch.hptune(&["run", earlier.to_str().unwrap()]));
    // This study's worker gets z from the study, not from its command.
    let changed =
        |name: &str, extra: &str| changed(name, 5, CHANGED, extra).replace(", --z=0.3", "");
    let warm = scratch.study(
        "warm.yaml",
        &changed("warm", "warm_start: {study: earlier, values: {z: 0.3}}"),
    );
    let out = scratch.hptune(&["run", warm.to_str().unwrap()]);
    assert_success(&out);
    // The trials whose x lies outside [-1, 1] are left out, and said to be.
    let message = common::stderr(&out);
    assert!(
        message.contains("of the 16 finished trials of study 'earlier' lie outside this study's space and do not inform it (outside by x: "),
        "{message}"
    );
    let cold = scratch.study("cold.yaml", &changed("cold", ""));
    assert_success(&scratch.hptune(&["run", cold.to_str().unwrap()]));
    // x² + y² + z² (+ w² in the earlier study): the warm study's proposals come from a model
    // that knows x and y near 0 are good and explore z there; the cold one's are design
    // points spread over the cube.
    let (warm_near, warm_lowest) = near_the_best(&scratch, "warm");
    let (cold_near, cold_lowest) = near_the_best(&scratch, "cold");
    assert!(
        warm_near >= 3 && cold_near <= 1 && warm_lowest < 0.05 && warm_lowest < cold_lowest,
        "near the best: warm {warm_near} of 5, cold {cold_near}; lowest loss: warm \
         {warm_lowest}, cold {cold_lowest}"
    );
}

#[test]
fn a_warm_start_whose_trials_cannot_carry_over_is_refused_and_records_nothing() {
    let scratch = Scratch::new();
    let earlier = scratch.study("earlier.yaml", &changed("earlier", 3, EARLIER, ""));
    assert_success(&scratch.hptune(&["run", earlier.to_str().unwrap()]));
    let categorical_x = CHANGED.replace(
        "{id: x, type: double, min: -1.0, max: 1.0}",
        "{id: x, type: categorical, values: [a, b]}",
    );
    let far_x = CHANGED.replace("min: -1.0, max: 1.0", "min: 5.0, max: 6.0");
    for (parameters, block, expected) in [
        (
            categorical_x.as_str(),
            "{study: earlier, values: {z: 0.3}}",
            "warm.yaml: warm_start: parameter 'x' is categorical here and double in study 'earlier': its values do not carry over",
        ),
        (
            CHANGED,
            "{study: earlier}",
            "warm.yaml: warm_start: parameter 'z' is not in study 'earlier', whose trials ran with some value of it: give that value as warm_start.values.z",
        ),
        (
            CHANGED,
            "{study: earlier, values: {z: 0.3, y: 1}}",
            "warm.yaml: warm_start: values.y: study 'earlier' tuned y itself",
        ),
        (
            far_x.as_str(),
            "{study: earlier, values: {z: 0.3}}",
            "warm.yaml: warm_start: none of the 3 finished trials of study 'earlier' lies in this study's space (outside by x: 3; e.g. x: ",
        ),
        (
            CHANGED,
            "{study: earlier, values: {z: 0.3, q: 1}}",
            "warm_start.values.q: is not a parameter of this study",
        ),
        (
            CHANGED,
            "{study: earlier, values: {z: 7}}",
            "warm_start.values.z: 7 is not a number in [-1, 2]",
        ),
    ] {
        let file = scratch.study(
            "warm.yaml",
            &changed("warm", 2, parameters, &format!("warm_start: {block}")),
        );
        assert_exit_says(
            &scratch.hptune(&["run", file.to_str().unwrap()]),
            2,
            expected,
        );
        let out = scratch.hptune(&["trials", "warm"]);
        assert_exit_says(&out, 2, "no study named 'warm'");
    }
}
