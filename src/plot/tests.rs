use super::*;
use crate::storage::{AttemptRecord, StudyRecord};
use crate::study::space::{Domain, Parameter, Scale};
use crate::study::stopping::Curve;

fn study(parameters: Vec<Parameter>) -> StudyRecord {
    StudyRecord {
        id: 1,
        name: "s".into(),
        metric: "loss".into(),
        goal: Goal::Minimize,
        objectives: vec![crate::study::Objective {
            metric: "loss".into(),
            goal: Goal::Minimize,
            reference_point: None,
        }],
        spec: String::new(),
        space: serde_json::to_string(&Space::new(parameters)).unwrap(),
        created_at: "2026-01-01T00:00:00.000Z".into(),
    }
}

fn double(id: &str, scale: Scale) -> Parameter {
    Parameter {
        id: id.into(),
        domain: Domain::Double {
            min: 1e-3,
            max: 1.0,
            scale,
            grid_points: None,
        },
        condition: None,
    }
}

fn trial(number: u64, state: TrialState, value: Option<f64>) -> TrialRecord {
    let x = (number as f64 + 1.0) / 40.0;
    TrialRecord {
        state,
        value,
        params: [
            ("x".to_string(), ParamValue::Float(x)),
            ("y".to_string(), ParamValue::Float(0.5)),
        ]
        .into(),
        started_at: Some(format!("2026-01-01T00:00:{:02}.000Z", number)),
        finished_at: Some(format!("2026-01-01T00:00:{:02}.500Z", number)),
        error: (state == TrialState::Failed).then(|| "exit 3: ValueError".into()),
        ..TrialRecord::for_test(number)
    }
}

fn follower(trials: Vec<TrialRecord>) -> StudyFollower {
    follower_on_gpus(trials, |_| None)
}

/// A follower of `trials`, each with one attempt, on the GPUs (and slot) `device` gives it.
fn follower_on_gpus(
    trials: Vec<TrialRecord>,
    device: impl Fn(u64) -> Option<(&'static str, Option<u32>)>,
) -> StudyFollower {
    let attempts = trials
        .iter()
        .map(|t| AttemptRecord {
            number: t.number,
            attempt: 1,
            worker: Some("pid:1".into()),
            owner: None,
            started_at: t.started_at.clone().unwrap(),
            finished_at: t.finished_at.clone(),
            outcome: Some(t.state.as_str().into()),
            error: t.error.clone(),
            last_output: None,
            gpus: device(t.number).map(|(gpus, _)| gpus.into()),
            gpu_slot: device(t.number).and_then(|(_, slot)| slot),
            resumed_from: None,
            resumed_at: None,
        })
        .collect();
    let curves = trials
        .iter()
        .map(|t| Curve {
            number: t.number,
            points: vec![(1, 2.0), (2, 1.0)],
            succeeded: t.state == TrialState::Succeeded,
        })
        .collect();
    StudyFollower::for_test(
        study(vec![double("x", Scale::Log), double("y", Scale::Linear)]),
        trials,
        attempts,
        curves,
    )
}

/// The trials' points (the legend's circles have no trial).
fn points(svg: &str) -> usize {
    svg.split("<circle")
        .skip(1)
        .filter(|c| c.split('>').next().unwrap().contains("data-trial"))
        .count()
}

#[test]
fn the_history_has_one_point_per_trial_with_a_value_and_marks_failures() {
    let mut trials: Vec<TrialRecord> = (0..6)
        .map(|n| trial(n, TrialState::Succeeded, Some(6.0 - n as f64)))
        .collect();
    trials.push(trial(6, TrialState::Failed, None));
    trials.push(trial(7, TrialState::Stopped, Some(9.0)));
    trials.push(trial(8, TrialState::Running, None));
    let follower = follower(trials);
    let data = StudyData::new(&follower).unwrap();
    for by in [HistoryX::Number, HistoryX::Time] {
        let svg = history::draw(&data, by);
        assert_eq!(points(&svg), 7, "{svg}");
        assert_eq!(svg.matches("class=\"fail-mark\"").count(), 1);
        assert!(!svg.contains("NaN"), "{svg}");
    }
}

#[test]
fn every_figure_of_an_empty_or_failed_study_says_why_it_is_empty() {
    for trials in [vec![], vec![trial(0, TrialState::Failed, None)]] {
        let follower = follower(trials);
        let data = StudyData::new(&follower).unwrap();
        for kind in [
            Kind::History,
            Kind::Parallel,
            Kind::Importance,
            Kind::Slice,
            Kind::Contour,
            Kind::Edf,
        ] {
            let svg = draw(kind, &data, &Options::default());
            assert!(svg.contains("class=\"empty\""), "{kind:?}: {svg}");
            assert!(!svg.contains("NaN"), "{kind:?}: {svg}");
        }
    }
}

#[test]
fn every_figure_draws_a_study_with_results() {
    let trials: Vec<TrialRecord> = (0..12)
        .map(|n| trial(n, TrialState::Succeeded, Some((n as f64 - 4.0).powi(2))))
        .collect();
    let follower = follower(trials);
    let data = StudyData::new(&follower).unwrap();
    for kind in Kind::ALL
        .into_iter()
        .filter(|k| !k.needs_several_objectives())
    {
        let svg = draw(kind, &data, &Options::default());
        assert!(!svg.contains("class=\"empty\""), "{kind:?}: {svg}");
        assert!(
            !svg.contains("NaN") && !svg.contains("inf"),
            "{kind:?}: {svg}"
        );
        assert!(
            svg.starts_with("<svg") && svg.ends_with("</svg>"),
            "{kind:?}"
        );
        let width = if kind.is_wide() {
            svg::WIDE
        } else {
            svg::NARROW
        };
        assert!(svg.contains(&format!("viewBox=\"0 0 {width} ")), "{kind:?}");
    }
    // Parallel coordinates: one line per trial; the timeline: one bar per attempt.
    assert_eq!(
        draw(Kind::Parallel, &data, &Options::default())
            .matches("class=\"pc-line")
            .count(),
        12
    );
    assert_eq!(
        draw(Kind::Timeline, &data, &Options::default())
            .matches("class=\"span ")
            .count(),
        12
    );
    // The log-scaled parameter's axis is labelled in powers of ten.
    assert!(draw(Kind::Parallel, &data, &Options::default()).contains(">0.01<"));
}

#[test]
fn thinning_keeps_what_matters_and_about_the_most_asked() {
    assert_eq!(thin(5, 10, |_| false), [true; 5]);
    let mask = thin(10_000, 100, |i| i % 1000 == 7);
    assert!((0..10_000).filter(|i| i % 1000 == 7).all(|i| mask[i]));
    let drawn = mask.iter().filter(|d| **d).count();
    assert!((90..=110).contains(&drawn), "{drawn}");
}

#[test]
fn a_large_study_draws_at_most_the_most_marks_and_says_so() {
    let trials: Vec<TrialRecord> = (0..3 * MOST_MARKS as u64)
        .map(|n| trial(n % 60, TrialState::Succeeded, Some((n % 97) as f64)))
        .enumerate()
        .map(|(i, t)| TrialRecord {
            number: i as u64,
            ..t
        })
        .collect();
    let follower = follower(trials);
    let data = StudyData::new(&follower).unwrap();
    for kind in [
        Kind::History,
        Kind::Parallel,
        Kind::Slice,
        Kind::Contour,
        Kind::Timeline,
    ] {
        let svg = draw(kind, &data, &Options::default());
        let marks = svg.matches("data-trial=").count();
        assert!(marks <= 2 * MOST_MARKS + 10, "{kind:?}: {marks}");
        assert!(svg.contains(" drawn: "), "{kind:?}");
    }
}

#[test]
fn standalone_files_carry_their_styles() {
    let svg = standalone_svg(&svg::message("x"));
    assert!(svg.starts_with("<svg") && svg.contains("<style>svg.figure"));
    assert!(standalone_html("a <b>", "<svg></svg>").contains("<title>a &lt;b&gt;</title>"));
    assert_eq!("edf".parse::<Kind>(), Ok(Kind::Edf));
    assert!(
        "pie"
            .parse::<Kind>()
            .unwrap_err()
            .contains("history, intermediate")
    );
}

#[test]
fn parallel_coordinates_place_categories_in_their_slots_and_inactive_parameters_below() {
    let optimizer = Parameter {
        id: "opt".into(),
        domain: Domain::Categorical {
            values: vec!["adam".into(), "sgd".into()],
        },
        condition: None,
    };
    // Momentum only matters, and is only sampled, with SGD.
    let momentum = Parameter {
        condition: Some(crate::study::space::Condition {
            requires: [("opt".to_string(), vec![ParamValue::Str("sgd".into())])].into(),
        }),
        ..double("momentum", Scale::Linear)
    };
    let trials: Vec<TrialRecord> = (0..6)
        .map(|n| {
            let sgd = n % 2 == 1;
            let mut params: crate::study::space::Assignment = [(
                "opt".to_string(),
                ParamValue::Str(if sgd { "sgd" } else { "adam" }.into()),
            )]
            .into();
            if sgd {
                params.insert("momentum".into(), ParamValue::Float(0.5));
            }
            TrialRecord {
                params,
                ..TrialRecord::in_state(n, TrialState::Succeeded, Some(n as f64))
            }
        })
        .collect();
    let follower = StudyFollower::for_test(
        study(vec![optimizer, momentum]),
        trials,
        Vec::new(),
        Vec::new(),
    );
    let svg = draw(
        Kind::Parallel,
        &StudyData::new(&follower).unwrap(),
        &Options::default(),
    );
    // Each line: the optimizer's axis (x 70), momentum's, the objective's.
    let lines: Vec<&str> = svg
        .split("<path class=\"pc-line")
        .skip(1)
        .map(|line| {
            line.split(" d=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(lines.len(), 6, "{svg}");
    // Categories sit in the middle of their slots: adam at a quarter, sgd at three quarters
    // of the axis (from y 320 up to 44); an inactive momentum goes below the axis (y 352).
    let adam = lines
        .iter()
        .filter(|d| d.starts_with("M70.0,251.0L"))
        .count();
    let sgd = lines
        .iter()
        .filter(|d| d.starts_with("M70.0,113.0L"))
        .count();
    assert_eq!((adam, sgd), (3, 3), "{lines:?}");
    for d in &lines {
        let inactive = d.contains(",352.0L");
        assert_eq!(inactive, d.starts_with("M70.0,251.0L"), "{d}");
    }
    assert!(svg.contains(">adam<") && svg.contains(">sgd<") && svg.contains(">inactive<"));
}

#[test]
fn the_timeline_of_gpu_trials_has_a_row_per_device_and_slot() {
    // Six trials on a quarter of GPU 0 or 1 (slots 0 and 1 of each, one after another), and
    // one on GPUs 2 and 3 whole.
    let trials: Vec<TrialRecord> = (0..7)
        .map(|n| trial(n, TrialState::Succeeded, Some(n as f64)))
        .collect();
    let follower = follower_on_gpus(trials, |n| match n {
        6 => Some(("2,3", None)),
        n => Some((["0", "1"][n as usize % 2], Some((n as u32 / 2) % 2))),
    });
    let data = StudyData::new(&follower).unwrap();
    let svg = draw(Kind::Timeline, &data, &Options::default());
    let labels: Vec<&str> = svg
        .split("class=\"tick\"")
        .skip(1)
        .filter_map(|s| s.split('>').nth(1)?.split('<').next())
        .filter(|l| l.starts_with("GPU") || l.starts_with("slot"))
        .collect();
    assert_eq!(
        labels,
        ["GPU 0·1", "GPU 0·2", "GPU 1·1", "GPU 1·2", "GPUs 2,3"]
    );
    assert!(svg.contains("on GPU 1, slot 2"), "{svg}");
    // Trials 0 and 4 share GPU 0's first slot: their bars are on one row.
    let row_of = |n: u64| {
        let bar = svg.split(&format!("data-trial=\"{n}\"")).nth(1).unwrap();
        bar.split("y=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(row_of(0), row_of(4));
    assert_ne!(row_of(0), row_of(2));
}

/// A study of accuracy (maximised) against milliseconds (minimised), with `reference` as
/// its reference point (each `None`: derived), and its trials: `(state, values, feasible)`.
fn two_objectives(
    reference: [Option<f64>; 2],
    trials: &[(TrialState, Vec<f64>, bool)],
) -> StudyFollower {
    let objective = |metric: &str, goal, reference_point| crate::study::Objective {
        metric: metric.into(),
        goal,
        reference_point,
    };
    let study = StudyRecord {
        metric: "accuracy".into(),
        goal: Goal::Maximize,
        objectives: vec![
            objective("accuracy", Goal::Maximize, reference[0]),
            objective("ms", Goal::Minimize, reference[1]),
        ],
        ..study(vec![double("x", Scale::Log)])
    };
    let trials = trials
        .iter()
        .enumerate()
        .map(|(n, (state, values, feasible))| TrialRecord {
            objective_values: values.clone(),
            infeasible: (!feasible).then(|| "ms above 1.5".into()),
            ..trial(n as u64, *state, values.first().copied())
        })
        .collect();
    StudyFollower::for_test(study, trials, Vec::new(), Vec::new())
}

/// The trials of the front tests: on the front 0, 2, 6 (equal to 0) and 7; 1 dominated; 4
/// infeasible (it would dominate all); 3 failed and 5 with a NaN, neither drawn.
fn front_trials() -> Vec<(TrialState, Vec<f64>, bool)> {
    use TrialState::{Failed, Succeeded};
    vec![
        (Succeeded, vec![0.8, 5.0], true),
        (Succeeded, vec![0.7, 6.0], true),
        (Succeeded, vec![0.9, 9.0], true),
        (Failed, vec![], true),
        (Succeeded, vec![0.95, 1.0], false),
        (Succeeded, vec![f64::NAN, 3.0], true),
        (Succeeded, vec![0.8, 5.0], true),
        (Succeeded, vec![0.6, 2.0], true),
    ]
}

/// The trials drawn with `class`, by number.
fn drawn_as(svg: &str, class: &str) -> Vec<u64> {
    svg.split(&format!("<circle class=\"{class}\" data-trial=\""))
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn the_front_is_the_feasible_trials_nothing_dominates_and_ties_share_it() {
    let follower = two_objectives([None, None], &front_trials());
    let data = StudyData::new(&follower).unwrap();
    let front = front::Front::of(&data).unwrap();
    let numbers = |standing| -> Vec<u64> {
        front
            .outcomes
            .iter()
            .filter(|o| o.standing == standing)
            .map(|o| o.trial.number)
            .collect()
    };
    assert_eq!(numbers(front::Standing::Front), [0, 2, 6, 7]);
    assert_eq!(numbers(front::Standing::Dominated), [1]);
    assert_eq!(numbers(front::Standing::Infeasible), [4]);
    // Derived from the feasible results: the worst of each widened by a tenth of its range.
    let expected = [0.6 - 0.03, 9.0 + 0.7];
    for (got, want) in front.reference.iter().zip(expected) {
        assert!((got - want).abs() < 1e-12, "{:?}", front.reference);
    }
    // Three boxes up to (0.57, 9.7), their union by hand: 0.33 x 0.7 + 0.23 x 4 + 0.03 x 3.
    let history = front.hypervolume_history();
    let steps: Vec<(u64, f64)> = vec![
        (0, 0.23 * 4.7),
        (1, 0.23 * 4.7),
        (2, 0.23 * 4.7 + 0.1 * 0.7),
        (4, 0.23 * 4.7 + 0.1 * 0.7),
        (6, 0.23 * 4.7 + 0.1 * 0.7),
        (7, 0.33 * 0.7 + 0.23 * 4.0 + 0.03 * 3.0),
    ];
    assert_eq!(history.len(), steps.len(), "{history:?}");
    for ((number, got), (want_number, want)) in history.iter().zip(&steps) {
        assert_eq!(number, want_number);
        assert!((got - want).abs() < 1e-9, "{history:?}");
    }
    assert!((front.hypervolume() - steps[5].1).abs() < 1e-9);
    assert_eq!(
        front_summary(&follower).map(|s| s.trials),
        Some(vec![0, 2, 6, 7]),
        "the dashboard's card"
    );
}

#[test]
fn the_front_figures_draw_each_trial_where_it_stands_and_the_growth_of_the_hypervolume() {
    let follower = two_objectives([Some(0.5), Some(10.0)], &front_trials());
    let data = StudyData::new(&follower).unwrap();
    let pareto = draw(Kind::Pareto, &data, &Options::default());
    assert_eq!(drawn_as(&pareto, "pt dominated"), [1]);
    assert_eq!(drawn_as(&pareto, "pt infeasible"), [4]);
    let mut front = drawn_as(&pareto, "pt front");
    front.sort();
    assert_eq!(front, [0, 2, 6, 7]);
    assert!(
        pareto.contains("reference point: accuracy 0.5, ms 10"),
        "{pareto}"
    );
    let hypervolume = draw(Kind::Hypervolume, &data, &Options::default());
    // A point where it grew (trials 0, 2 and 7), none where it stayed.
    assert_eq!(
        drawn_as(&hypervolume, "pt front"),
        [0, 2, 7],
        "{hypervolume}"
    );
    assert!(hypervolume.contains("against the reference point accuracy 0.5, ms 10"));
    for svg in [&pareto, &hypervolume] {
        let numbers = svg.replace("infeasible", "");
        assert!(
            !numbers.contains("NaN") && !numbers.contains("inf"),
            "{svg}"
        );
    }
}

#[test]
fn the_front_figures_of_one_objective_or_of_no_result_say_why_they_are_empty() {
    let one = follower(vec![trial(0, TrialState::Succeeded, Some(1.0))]);
    let failed = two_objectives([None, None], &[(TrialState::Failed, vec![], true)]);
    for (follower, why) in [(one, "has one objective (loss)"), (failed, "1 failed")] {
        let data = StudyData::new(&follower).unwrap();
        for kind in [Kind::Pareto, Kind::Hypervolume] {
            let svg = draw(kind, &data, &Options::default());
            assert!(
                svg.contains("class=\"empty\"") && svg.contains(why),
                "{kind:?}: {svg}"
            );
        }
    }
    assert_eq!(front_summary(&follower(Vec::new())), None);
}
