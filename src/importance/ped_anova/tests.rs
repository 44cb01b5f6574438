use super::*;
use crate::study::space::Scale;

fn double(id: &str) -> Parameter {
    Parameter {
        id: id.into(),
        domain: Domain::Double {
            min: 0.0,
            max: 1.0,
            scale: Scale::Linear,
            grid_points: None,
        },
        condition: None,
    }
}

fn choice(id: &str) -> Parameter {
    Parameter {
        id: id.into(),
        domain: Domain::Categorical {
            values: vec!["a".into(), "b".into()],
        },
        condition: None,
    }
}

#[test]
fn a_choice_whose_top_trials_all_took_one_value_has_the_closed_form_importance() {
    // Trials 0-4 took "a" and are the best (minimised values 0..4); 5-9 took "b". The top
    // trials are 0 and 1 (the two lowest: 10% of 10 is 1, at least 2). Top density:
    // 2/3 * [3/4, 1/4] + 1/3 * [1/2, 1/2] = [2/3, 1/3]; all trials: [1/2, 1/2].
    // Divergence: 1/2 (4/3 - 1)² + 1/2 (2/3 - 1)² = 1/9; share of top trials 2/10.
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
        (importance[0].value - 0.2 / 9.0).abs() < 1e-9,
        "{importance:?}"
    );
    // Maximising turns the top trials to 8 and 9, both "b": the same divergence, mirrored.
    let importance = ped_anova(&[choice("c")], Goal::Maximize, &trials);
    assert!(
        (importance[0].value - 0.2 / 9.0).abs() < 1e-9,
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
    let trials = [(&one, 1.0), (&one, 2.0)];
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
