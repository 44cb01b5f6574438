use super::grid::too_many_points;
use super::*;

fn double(min: f64, max: f64, scale: Scale) -> Domain {
    Domain::Double {
        min,
        max,
        scale,
        grid_points: None,
    }
}

fn param(id: &str, domain: Domain) -> Parameter {
    Parameter {
        id: id.into(),
        domain,
        condition: None,
    }
}

#[test]
fn log_scale_maps_decades_evenly() {
    let d = double(1e-5, 1e-3, Scale::Log);
    assert!((d.value_at(0.5).as_f64().unwrap() - 1e-4).abs() < 1e-12);
    assert!((d.to_unit(&ParamValue::Float(1e-4)).unwrap() - 0.5).abs() < 1e-12);
}

#[test]
fn reverse_log_is_dense_near_the_maximum() {
    let d = double(0.9, 0.999, Scale::ReverseLog);
    assert_eq!(d.value_at(0.0).as_f64(), Some(0.9));
    assert!((d.value_at(1.0).as_f64().unwrap() - 0.999).abs() < 1e-12);
    let mid = d.value_at(0.5).as_f64().unwrap();
    assert!(mid > (0.9 + 0.999) / 2.0, "{mid}");
    for u in [0.1, 0.37, 0.8] {
        let x = d.value_at(u);
        assert!((d.to_unit(&x).unwrap() - u).abs() < 1e-9);
    }
}

#[test]
fn integers_get_equal_shares_of_the_unit_interval() {
    let d = Domain::Integer {
        min: 1,
        max: 4,
        scale: Scale::Linear,
        grid_points: None,
    };
    let mut counts = [0; 4];
    for i in 0..4000 {
        let ParamValue::Int(v) = d.value_at((i as f64 + 0.5) / 4000.0) else {
            panic!()
        };
        counts[(v - 1) as usize] += 1;
    }
    assert_eq!(counts, [1000; 4]);
}

#[test]
fn discrete_values_snap_to_the_nearest_in_their_scale() {
    let d = Domain::Discrete {
        values: vec![8.0, 16.0, 32.0],
        scale: Scale::Log,
    };
    assert_eq!(d.value_at(0.5), ParamValue::Float(16.0));
    assert_eq!(d.value_at(0.7), ParamValue::Float(16.0));
    assert_eq!(d.value_at(0.8), ParamValue::Float(32.0));
    assert_eq!(d.value_at(0.0), ParamValue::Float(8.0));
}

#[test]
fn neighbours_are_one_step_away() {
    let categorical = Domain::Categorical {
        values: vec!["adam".into(), "sgd".into(), "lamb".into()],
    };
    let text = |s: &str| ParamValue::Str(s.into());
    assert_eq!(
        categorical.neighbours(&text("sgd")),
        vec![text("adam"), text("lamb")]
    );
    assert!(categorical.neighbours(&text("rmsprop")).is_empty());
    let integer = Domain::Integer {
        min: 1,
        max: 4,
        scale: Scale::Log,
        grid_points: None,
    };
    assert_eq!(
        integer.neighbours(&ParamValue::Int(2)),
        vec![ParamValue::Int(1), ParamValue::Int(3)]
    );
    assert_eq!(
        integer.neighbours(&ParamValue::Int(4)),
        vec![ParamValue::Int(3)]
    );
    assert!(integer.neighbours(&ParamValue::Int(9)).is_empty());
    let discrete = Domain::Discrete {
        values: vec![8.0, 16.0, 32.0],
        scale: Scale::Log,
    };
    assert_eq!(
        discrete.neighbours(&ParamValue::Float(8.0)),
        vec![ParamValue::Float(16.0)]
    );
    assert_eq!(
        discrete.neighbours(&ParamValue::Float(16.0)),
        vec![ParamValue::Float(8.0), ParamValue::Float(32.0)]
    );
    assert!(discrete.neighbours(&ParamValue::Float(12.0)).is_empty());
    assert!(
        double(0.0, 1.0, Scale::Linear)
            .neighbours(&ParamValue::Float(0.5))
            .is_empty()
    );
}

#[test]
fn categoricals_split_the_interval_into_slices() {
    let d = Domain::Categorical {
        values: vec!["a".into(), "b".into(), "c".into()],
    };
    assert_eq!(d.value_at(0.0), ParamValue::Str("a".into()));
    assert_eq!(d.value_at(0.5), ParamValue::Str("b".into()));
    assert_eq!(d.value_at(1.0), ParamValue::Str("c".into()));
    assert_eq!(d.to_unit(&ParamValue::Str("c".into())), Some(2.5 / 3.0));
}

fn conditional_space() -> Space {
    let mut momentum = param("momentum", double(0.0, 0.9, Scale::Linear));
    momentum.condition = Some(Condition {
        requires: [("optimizer".to_string(), vec![ParamValue::Str("sgd".into())])].into(),
    });
    if let Domain::Double { grid_points, .. } = &mut momentum.domain {
        *grid_points = Some(2);
    }
    Space::new(vec![
        param(
            "optimizer",
            Domain::Categorical {
                values: vec!["adam".into(), "sgd".into()],
            },
        ),
        momentum,
    ])
}

#[test]
fn inactive_parameters_are_absent() {
    let space = conditional_space();
    let adam = space.from_unit(&[0.1, 0.5]);
    assert_eq!(adam.len(), 1);
    let sgd = space.from_unit(&[0.9, 0.5]);
    assert_eq!(sgd.get("momentum"), Some(&ParamValue::Float(0.45)));
}

#[test]
fn grid_enumerates_conditional_branches_once() {
    let grid = conditional_space().grid().unwrap();
    let shown: Vec<String> = grid
        .iter()
        .map(|p| serde_json::to_string(p).unwrap())
        .collect();
    assert_eq!(
        shown,
        [
            r#"{"optimizer":"adam"}"#,
            r#"{"momentum":0.0,"optimizer":"sgd"}"#,
            r#"{"momentum":0.9,"optimizer":"sgd"}"#,
        ]
    );
}

fn integers(id: &str, max: i64) -> Parameter {
    param(
        id,
        Domain::Integer {
            min: 1,
            max,
            scale: Scale::Linear,
            grid_points: None,
        },
    )
}

#[test]
fn grid_size_counts_the_points_of_the_grid() {
    assert_eq!(conditional_space().grid_size(), Ok(3));
    let mut first = integers("first", 1000);
    first.condition = conditional_space().parameters[1].condition.clone();
    let mut second = integers("second", 1000);
    second.condition = Some(Condition {
        requires: [(
            "optimizer".to_string(),
            vec![ParamValue::Str("adam".into())],
        )]
        .into(),
    });
    // 2 x 1000 x 1000 as a product, but each branch has only one of the two.
    let space = Space::new(vec![
        conditional_space().parameters[0].clone(),
        first,
        second,
    ]);
    assert_eq!(space.grid_size(), Ok(2000));
    assert_eq!(space.grid().unwrap().len(), 2000);
}

#[test]
fn a_grid_past_the_limit_is_refused_by_its_size_alone() {
    // 1000^7 = 10^21 points; counting them must not build any.
    let space = Space::new((0..7).map(|i| integers(&format!("p{i}"), 1000)).collect());
    assert_eq!(space.grid_size(), Err(too_many_points()));
    assert_eq!(space.grid().unwrap_err(), too_many_points());
    let mut huge = integers("huge", 10);
    huge.domain = Domain::Integer {
        min: 1,
        max: 10,
        scale: Scale::Linear,
        grid_points: Some(usize::MAX),
    };
    assert_eq!(Space::new(vec![huge]).grid_size(), Err(too_many_points()));
}

#[test]
fn grid_refuses_a_double_without_grid_points() {
    let space = Space::new(vec![param("x", double(0.0, 1.0, Scale::Linear))]);
    let err = space.grid().unwrap_err().to_string();
    assert!(err.contains("grid_points"), "{err}");
}

#[test]
fn check_reports_missing_inactive_and_out_of_range_values() {
    let space = conditional_space();
    let parse = |pairs: &[(&str, &str)]| {
        let pairs: Vec<_> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        space.parse_assignment(&pairs)
    };
    assert!(parse(&[("optimizer", "adam")]).is_ok());
    assert_eq!(
        parse(&[("optimizer", "sgd")]).unwrap_err(),
        SpaceError::Missing("momentum".into())
    );
    assert_eq!(
        parse(&[("optimizer", "adam"), ("momentum", "0.5")]).unwrap_err(),
        SpaceError::Inactive("momentum".into())
    );
    let err = parse(&[("optimizer", "sgd"), ("momentum", "2")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a number in [0, 0.9]"), "{err}");
    let err = parse(&[("lr", "1")]).unwrap_err().to_string();
    assert!(err.contains("unknown parameter 'lr'"), "{err}");
}

#[test]
fn an_out_of_range_value_is_written_with_its_digits_not_its_zeros() {
    let space = Space::new(vec![param("decay", double(1e-12, 1e-2, Scale::Log))]);
    let err = space
        .parse_assignment(&[("decay".to_string(), "1e-300".to_string())])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("1e-300 is not a number in [1e-12, 0.01]"),
        "{err}"
    );
    // A number given where an integer or a categorical belongs, as a client's JSON can.
    let layers = integers("layers", 4).domain;
    assert_eq!(
        layers.check(&ParamValue::Float(1e300)).unwrap_err(),
        "1e300 is not an integer in [1, 4]"
    );
}

#[test]
fn point_keys_are_equal_when_the_points_are_the_same() {
    let point = |values: &[(&str, ParamValue)]| -> Assignment {
        values
            .iter()
            .map(|(id, v)| (id.to_string(), v.clone()))
            .collect()
    };
    let same = |a: &Assignment, b: &Assignment| PointKey::of(a) == PointKey::of(b);
    let int = point(&[("n", ParamValue::Int(16)), ("x", ParamValue::Float(-0.0))]);
    let float = point(&[
        ("n", ParamValue::Float(16.0)),
        ("x", ParamValue::Float(0.0)),
    ]);
    assert!(same(&int, &float));
    let text = point(&[
        ("n", ParamValue::Str("16".into())),
        ("x", ParamValue::Float(0.0)),
    ]);
    assert!(!same(&int, &text));
    let other_id = point(&[("m", ParamValue::Int(16)), ("x", ParamValue::Float(0.0))]);
    assert!(!same(&int, &other_id));
    assert!(!same(&int, &point(&[("n", ParamValue::Int(16))])));
    // A NaN is the same as no value: its point is no point, not even itself.
    assert_eq!(
        PointKey::of(&point(&[("x", ParamValue::Float(f64::NAN))])),
        None
    );
}
