use super::*;
use crate::sampler::Sampler;
use crate::sampler::bayes::BayesSampler;
use crate::sampler::bayes::tests::context;
use crate::study::Constraints;
use crate::study::space::{Assignment, ParamValue, Space, unit_double};
use hptune_gp::YeoJohnson;

/// A trial at `(a, b)` with these objectives' values.
fn trial(number: u64, a: f64, b: f64, values: Vec<f64>) -> Observation {
    Observation {
        number,
        params: Assignment::from([
            ("a".to_string(), ParamValue::Float(a)),
            ("b".to_string(), ParamValue::Float(b)),
        ]),
        value: values.first().copied(),
        values,
        ..Observation::unconstrained()
    }
}

/// Objectives whose front is `b = 0`: `a + b²`, `1 - a + b²` and, past two, more of the kind.
fn objectives(a: f64, b: f64, count: usize) -> Vec<f64> {
    let mut values = vec![
        a + b * b,
        1.0 - a + b * b,
        (a - 0.5).abs() + b * b,
        a * a + b,
    ];
    values.truncate(count);
    values
}

/// A history of 20 trials on a scrambled grid of the square.
fn history(count: usize) -> Vec<Observation> {
    (0..20u32)
        .map(|n| {
            let (a, b) = (f64::from(n * 7 % 20) / 19.0, f64::from(n * 13 % 20) / 19.0);
            trial(u64::from(n), a, b, objectives(a, b, count))
        })
        .collect()
}

fn propose(goals: &[Goal], history: &[Observation], running: &[Assignment]) -> Assignment {
    let space = Space::new(vec![unit_double("a"), unit_double("b")]);
    let constraints = Constraints::default();
    let context = context(&space, goals, history, running, &constraints);
    BayesSampler::new(7).propose(&context).unwrap().unwrap()
}

#[test]
fn proposals_go_to_the_front_by_hypervolume_and_towards_it_by_scalarisation() {
    for count in [2, 3, 4] {
        let goals = vec![Goal::Minimize; count];
        let proposal = propose(&goals, &history(count), &[]);
        let b = proposal["b"].as_f64().unwrap();
        // A scalarisation's expected improvement, of one weighting, may still explore (this
        // one proposes b = 0.31); the hypervolume's goes to the front or beside it, b² within
        // a few hundredths of objectives that span about 1 (b = 0.2 with 3 objectives).
        let limit = if count <= MAX_EXACT { 0.25 } else { 0.5 };
        assert!(b < limit, "{count} objectives: {proposal:?}");
        assert_eq!(
            proposal,
            propose(&goals, &history(count), &[]),
            "repeatable"
        );
    }
}

#[test]
fn a_running_trial_pushes_the_next_proposal_elsewhere() {
    let goals = [Goal::Minimize, Goal::Minimize];
    let first = propose(&goals, &history(2), &[]);
    let second = propose(&goals, &history(2), std::slice::from_ref(&first));
    let distance = (first["a"].as_f64().unwrap() - second["a"].as_f64().unwrap()).abs();
    assert!(distance > 0.05, "{first:?} then {second:?}");
}

#[test]
fn a_scalarisation_is_monotone_and_its_weights_are_fresh_for_each_trial() {
    let mut history = history(3);
    history.push(Observation {
        number: 20,
        ..Observation::unconstrained()
    });
    let goals = [Goal::Minimize, Goal::Maximize, Goal::Minimize];
    let scalar = |number| -> Vec<Option<f64>> {
        scalarised(&history, &goals, 1, number)
            .iter()
            .map(|o| o.value)
            .collect()
    };
    let values = scalar(30);
    assert_eq!(values[20], None, "a failed trial has no value");
    for (o, v) in history.iter().zip(&values).take(20) {
        let v = v.unwrap();
        assert!((0.0..=1.0 + AUGMENTATION).contains(&v), "{v}");
        // A trial that dominates another (its first and third smaller, its second larger)
        // scalarises lower.
        for (p, w) in history.iter().zip(&values).take(20) {
            let dominates =
                o.values[0] < p.values[0] && o.values[1] > p.values[1] && o.values[2] < p.values[2];
            assert!(!dominates || v < w.unwrap(), "{o:?} {p:?}");
        }
    }
    assert_eq!(values, scalar(30));
    assert_ne!(values, scalar(31));
}

#[test]
fn a_few_trials_far_worse_than_the_rest_do_not_set_the_reference_points_margin() {
    // Model values (maximised, standardised): 30 trials on the front a + b = 1 and two far
    // behind it on the second objective.
    let mut values: Vec<Vec<f64>> = (0..30)
        .map(|i| {
            let a = f64::from(i) / 29.0;
            vec![-a, -(1.0 - a)]
        })
        .collect();
    values.extend([vec![-0.5, -40.0], vec![-0.6, -35.0]]);
    let standardised: Vec<Vec<f64>> = {
        let columns: Vec<(f64, f64)> = (0..2)
            .map(|j| {
                let n = values.len() as f64;
                let mean = values.iter().map(|v| v[j]).sum::<f64>() / n;
                let spread = (values.iter().map(|v| (v[j] - mean).powi(2)).sum::<f64>() / n).sqrt();
                (mean, spread)
            })
            .collect();
        values
            .iter()
            .map(|v| {
                v.iter()
                    .zip(&columns)
                    .map(|(x, (m, s))| (x - m) / s)
                    .collect()
            })
            .collect()
    };
    let symmetric: Vec<YeoJohnson> = (0..2)
        .map(|j| YeoJohnson::fitted(&standardised.iter().map(|v| v[j]).collect::<Vec<_>>()))
        .collect();
    let none = [None, None];
    let ours = reference_point(&standardised, &symmetric, &none, &[0.0, 0.0]).unwrap();
    let at: Vec<&[f64]> = standardised.iter().map(Vec::as_slice).collect();
    let maximised = [Goal::Maximize, Goal::Maximize];
    let plain = pareto::reference_near_front(&at, &maximised, &none, &[0.0, 0.0]).unwrap();
    // The front's nadir on the second objective, and the margins past it.
    let nadir = standardised[..30]
        .iter()
        .map(|v| v[1])
        .fold(f64::INFINITY, f64::min);
    let (ours_margin, plain_margin) = (nadir - ours[1], nadir - plain[1]);
    assert!(
        ours_margin > 0.0 && ours_margin < plain_margin / 3.0,
        "margin {ours_margin} against {plain_margin} without the warp"
    );
    // A given value stays as given.
    let given = [Some(-0.5), None];
    let ours = reference_point(&standardised, &symmetric, &given, &[0.0, 0.0]).unwrap();
    assert!((ours[0] + 0.5).abs() < 1e-12, "{ours:?}");
}
