use super::*;
use crate::study::space::Scale;

use crate::study::space::{categorical, unit_double as double};

fn choice(id: &str) -> Parameter {
    categorical(id, &["a", "b"])
}

#[test]
fn a_choice_whose_top_trial_took_one_value_has_the_closed_form_importance() {
    // Trials 0-4 took "a" and 5-9 took "b"; minimised values 0..9, so the top 10% is trial 0.
    // Top density: 1/2 * [3/4, 1/4] + 1/2 * [1/2, 1/2] = [5/8, 3/8]; all trials: [1/2, 1/2].
    // Divergence: 1/2 (5/4 - 1)² + 1/2 (3/4 - 1)² = 1/16; squared share of top trials 1/100.
    let params: Vec<Assignment> = (0..10)
        .map(|i| {
            [(
                "c".to_string(),
                ParamValue::Str(if i < 5 { "a" } else { "b" }.into()),
            )]
            .into()
        })
        .collect();
    let trials: Vec<(&Assignment, f64)> =
        params.iter().zip(0..).map(|(p, i)| (p, i as f64)).collect();
    let importance = ped_anova(&[choice("c")], Goal::Minimize, &trials);
    assert!(
        (importance[0].value - 0.01 / 16.0).abs() < 1e-12,
        "{importance:?}"
    );
    // Maximising makes trial 9, a "b", the top one: the same divergence, mirrored.
    let importance = ped_anova(&[choice("c")], Goal::Maximize, &trials);
    assert!(
        (importance[0].value - 0.01 / 16.0).abs() < 1e-12,
        "{importance:?}"
    );
}

#[test]
fn a_conditional_parameter_counts_by_the_share_of_trials_where_it_is_active() {
    // "c" is active in trials 0-4 only (values 0..9 minimised, the top trial is 0, active):
    // within them the top trial took "a", the others "a" twice and "b" twice.
    let params: Vec<Assignment> = (0..10)
        .map(|i| match i {
            0..=2 => [("c".to_string(), ParamValue::Str("a".into()))].into(),
            3 | 4 => [("c".to_string(), ParamValue::Str("b".into()))].into(),
            _ => Assignment::new(),
        })
        .collect();
    let trials: Vec<(&Assignment, f64)> =
        params.iter().zip(0..).map(|(p, i)| (p, i as f64)).collect();
    // Top density [5/8, 3/8]; active trials: 3/5 * [0.8, 0.2] + 2/5 * [0.2, 0.8] + 1/6 prior
    // mixed as (3 * [0.8, 0.2] + 2 * [0.2, 0.8] + [0.5, 0.5]) / 6 = [3.3, 2.7] / 6.
    let (p_top, p_all) = ([0.625, 0.375], [3.3 / 6.0, 2.7 / 6.0]);
    let divergence: f64 = (0..2)
        .map(|i| p_all[i] * (p_top[i] / p_all[i] - 1.0_f64).powi(2))
        .sum();
    // Weight: 1 top trial of 1 is active, 5 of 10 trials are: 1² / (10 · 5).
    let importance = ped_anova(&[choice("c")], Goal::Minimize, &trials);
    assert!(
        (importance[0].value - divergence / 50.0).abs() < 1e-12,
        "{importance:?}"
    );
}

#[test]
fn densities_are_distributions_over_the_grid() {
    for counts in [
        vec![0.0, 3.0, 0.0, 1.0, 0.0],
        vec![5.0; 5],
        vec![0.0, 0.0, 0.0, 0.0, 1.0],
    ] {
        let p = ordered_density(&counts);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12, "{p:?}");
        let q = choice_density(&counts);
        assert!((q.iter().sum::<f64>() - 1.0).abs() < 1e-12, "{q:?}");
    }
    // The densest cell is the one with most trials.
    let p = ordered_density(&[0.0, 3.0, 0.0, 1.0, 0.0]);
    let top = p
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap()
        .0;
    assert_eq!(top, 1);
}

#[test]
fn when_the_top_trials_are_all_the_trials_nothing_matters() {
    // Equal values: every trial is a top one, so both densities are the same.
    let params: Vec<Assignment> = (0..20)
        .map(|i| [("x".to_string(), ParamValue::Float(i as f64 / 19.0))].into())
        .collect();
    let trials: Vec<(&Assignment, f64)> = params.iter().map(|p| (p, 1.0)).collect();
    let importance = ped_anova(&[double("x")], Goal::Minimize, &trials);
    assert!(importance[0].value.abs() < 1e-9, "{importance:?}");
}

#[test]
fn the_parameter_that_drives_the_objective_ranks_first() {
    // loss = (x - 0.3)², y irrelevant, on a 13 x 13 lattice of (x, y).
    let params: Vec<Assignment> = (0..169)
        .map(|i| {
            let (x, y) = ((i % 13) as f64 / 12.0, (i / 13) as f64 / 12.0);
            [
                ("x".to_string(), ParamValue::Float(x)),
                ("y".to_string(), ParamValue::Float(y)),
            ]
            .into()
        })
        .collect();
    let trials: Vec<(&Assignment, f64)> = params
        .iter()
        .map(|p| (p, (p["x"].as_f64().unwrap() - 0.3).powi(2)))
        .collect();
    let importance = ped_anova(&[double("y"), double("x")], Goal::Minimize, &trials);
    assert_eq!(importance[0].parameter, "x", "{importance:?}");
    assert!(
        importance[0].value > 10.0 * importance[1].value,
        "{importance:?}"
    );
}

#[test]
fn too_few_trials_or_a_single_value_give_no_importance() {
    let one: Assignment = [("x".to_string(), ParamValue::Float(0.5))].into();
    let trials = [(&one, 1.0)];
    assert_eq!(
        ped_anova(&[double("x")], Goal::Minimize, &trials)[0].value,
        0.0
    );
    let fixed = Parameter {
        id: "k".into(),
        domain: Domain::Integer {
            min: 3,
            max: 3,
            scale: Scale::Linear,
            grid_points: None,
        },
        condition: None,
    };
    assert_eq!(ped_anova(&[fixed], Goal::Minimize, &[])[0].value, 0.0);
}
