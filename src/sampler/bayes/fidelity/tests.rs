use super::*;
use crate::sampler::bayes::BayesSampler;
use crate::sampler::{Observation, Sampler};
use crate::study::Constraints;
use crate::study::space::unit_double;

const RUNGS: Rungs = Rungs {
    min_resource: 1,
    reduction_factor: 3.0,
    max_resource: Some(27),
};

fn at(x: f64) -> Assignment {
    Assignment::from([("x".to_string(), ParamValue::Float(x))])
}

fn curve(number: u64, x: f64, points: Vec<(i64, f64)>) -> TrialCurve {
    TrialCurve {
        number,
        params: at(x),
        points,
    }
}

fn observation(number: u64, x: f64, value: Option<f64>) -> Observation {
    Observation {
        number,
        params: at(x),
        value,
        ..Observation::unconstrained()
    }
}

#[test]
fn a_curve_is_read_at_the_rungs_it_reached_and_at_its_last_step() {
    assert_eq!(RUNGS.steps_upto(27), [1, 3, 9, 27]);
    assert_eq!(RUNGS.steps_upto(10), [1, 3, 9, 10]);
    assert_eq!(RUNGS.steps_upto(2), [1, 2]);
    let halves = Rungs {
        min_resource: 2,
        reduction_factor: 2.5,
        max_resource: None,
    };
    // 2, 5, 12.5 -> 12.
    assert_eq!(halves.steps_upto(13), [2, 5, 12, 13]);
}

#[test]
fn stopped_trials_enter_at_the_resource_they_reached_and_finals_at_their_last_step() {
    let curves = [
        // Stopped at step 4: its values at rungs 1 and 3 and at step 4, none the worst.
        curve(0, 0.1, vec![(1, 5.0), (2, 4.0), (3, 3.5), (4, 3.4)]),
        // Succeeded: its final value (a test loss) stands at its last step.
        curve(1, 0.2, vec![(1, 4.0), (3, 2.0), (9, 1.5)]),
        // Running: its values so far.
        curve(3, 0.4, vec![(1, 6.0)]),
    ];
    let history = [
        observation(0, 0.1, None),
        observation(1, 0.2, Some(1.2)),
        // Succeeded with no step reported: at the top. Failed with nothing: the worst.
        observation(2, 0.3, Some(2.5)),
        observation(4, 0.5, None),
    ];
    let got: Vec<(f64, i64, Option<f64>)> = points(&RUNGS, Goal::Minimize, &history, &curves, 27)
        .iter()
        .map(|p| (p.params["x"].as_f64().unwrap(), p.step, p.value))
        .collect();
    assert_eq!(
        got,
        [
            (0.1, 1, Some(-5.0)),
            (0.1, 3, Some(-3.5)),
            (0.1, 4, Some(-3.4)),
            (0.2, 1, Some(-4.0)),
            (0.2, 3, Some(-2.0)),
            (0.2, 9, Some(-1.2)),
            (0.4, 1, Some(-6.0)),
            (0.3, 27, Some(-2.5)),
            (0.5, 27, None),
        ]
    );
}

/// A learning curve whose early ranks mislead: at step `r` the loss is the final one,
/// `(x - 0.8)²`, plus `0.6 x / r`, so after one step the best `x` is 0.3, at the end 0.79.
fn crossing(x: f64, r: i64) -> f64 {
    (x - 0.8).powi(2) + 0.6 * x / r as f64
}

/// Fifteen trials on a grid of `x`: those with `x` below 0.45 ran to step 27, the others
/// were stopped at step 1 or 3, where they looked worse.
fn crossing_study() -> (Vec<Observation>, Vec<TrialCurve>) {
    let mut history = Vec::new();
    let mut curves = Vec::new();
    for n in 0..15u64 {
        let x = n as f64 / 14.0;
        let last = match x {
            x if x < 0.45 => 27,
            _ if n % 2 == 0 => 3,
            _ => 1,
        };
        let points: Vec<(i64, f64)> = (1..=last).map(|r| (r, crossing(x, r))).collect();
        let value = (last == 27).then(|| crossing(x, 27));
        history.push(observation(n, x, value));
        curves.push(curve(n, x, points));
    }
    (history, curves)
}

/// The proposal of `sampler` after the trials of `history`, while the others of `curves` run.
fn propose_with(sampler: &mut BayesSampler, history: &[Observation], curves: &[TrialCurve]) -> f64 {
    let space = Space::new(vec![unit_double("x")]);
    let running: Vec<Assignment> = curves
        .iter()
        .filter(|c| history.iter().all(|o| o.number != c.number))
        .map(|c| c.params.clone())
        .collect();
    let context = ProposalContext {
        space: &space,
        goal: Goal::Minimize,
        goals: &[Goal::Minimize],
        constraints: &Constraints::default(),
        number: curves.len().max(history.len()) as u64,
        history,
        prior: &[],
        running: &running,
        parallel: 1,
        curves,
    };
    let proposal = sampler.propose(&context).unwrap().unwrap();
    proposal["x"].as_f64().unwrap()
}

#[test]
fn the_model_proposes_where_curves_end_best_not_where_they_start_best() {
    let (history, curves) = crossing_study();
    let mut model = BayesSampler::new(4).with_fidelity(Some(RUNGS));
    let x = propose_with(&mut model, &history, &curves);
    // Past the best finished trial (0.43), towards the optimum of the final loss, 0.79;
    // early values alone point to 0.3.
    assert!(x >= 0.55, "proposed x = {x}");
    // The model of final values, the stopped trials at the worst value, stays by the best
    // finished trial.
    let finals = propose_with(&mut BayesSampler::new(4), &history, &curves);
    assert!(finals < 0.45, "proposed x = {finals}");
}

#[test]
fn the_same_history_and_curves_give_the_same_proposal() {
    // A resumed study rereads its curves from storage: the same trials, the same proposal.
    let (history, curves) = crossing_study();
    let first = propose_with(
        &mut BayesSampler::new(9).with_fidelity(Some(RUNGS)),
        &history,
        &curves,
    );
    let reread = propose_with(
        &mut BayesSampler::new(9).with_fidelity(Some(RUNGS)),
        &history,
        &curves,
    );
    assert_eq!(first, reread);
}

#[test]
fn fits_reused_from_a_checkpoint_give_what_a_fresh_sampler_proposes() {
    // Trials 0-12 finished, 13 and 14 running, 3 and 9 steps along.
    let (history, mut curves) = crossing_study();
    curves[13].points.truncate(3);
    curves[14].points.truncate(9);
    let mut warm = BayesSampler::new(9).with_fidelity(Some(RUNGS));
    // Its proposal after 11 trials fits the model of the first 10 (a checkpoint) in full ...
    propose_with(&mut warm, &history[..11], &curves[..11]);
    let anchors = |sampler: &BayesSampler| sampler.fidelity.as_ref().unwrap().anchors.len();
    assert_eq!(anchors(&warm), 1);
    // ... and the one after 13, with two trials running, starts from that fit.
    let after = propose_with(&mut warm, &history[..13], &curves);
    assert_eq!(anchors(&warm), 1, "the fit at 10 served again");
    // A resumed study: the same curves reread, no fit held.
    let fresh = propose_with(
        &mut BayesSampler::new(9).with_fidelity(Some(RUNGS)),
        &history[..13],
        &curves,
    );
    assert_eq!(after, fresh);
}
