use super::*;
use crate::sampler::Observation;
use crate::study::space::{Condition, Domain, ParamValue, Parameter, Scale, Space, categorical};
use crate::study::{Bound, Constraint, Constraints, Goal};

fn double(id: &str) -> Parameter {
    crate::study::space::unit_double(id)
}

fn square() -> Space {
    Space::new(vec![double("a"), double("b")])
}

fn x(assignment: &Assignment, id: &str) -> f64 {
    assignment[id].as_f64().unwrap()
}

fn propose(
    sampler: &mut BayesSampler,
    space: &Space,
    history: &[Observation],
    running: &[Assignment],
) -> Assignment {
    propose_under(sampler, space, history, running, &Constraints::default())
}

fn propose_under(
    sampler: &mut BayesSampler,
    space: &Space,
    history: &[Observation],
    running: &[Assignment],
    constraints: &Constraints,
) -> Assignment {
    let context = context(space, &[Goal::Minimize], history, running, constraints);
    let proposal = sampler.propose(&context).unwrap().unwrap();
    space.check(&proposal).unwrap();
    proposal
}

/// The context of the next proposal in `space` for `goals` (the first is `goal`), after
/// `history`, with `running` trials, each in a slot of its own.
pub(super) fn context<'a>(
    space: &'a Space,
    goals: &'a [Goal],
    history: &'a [Observation],
    running: &'a [Assignment],
    constraints: &'a Constraints,
) -> ProposalContext<'a> {
    ProposalContext {
        space,
        goal: goals[0],
        goals,
        constraints,
        number: (history.len() + running.len()) as u64,
        history,
        prior: &[],
        running,
        parallel: running.len() + 1,
        curves: &[],
    }
}

/// Runs `trials` sequential trials of `objective` (None: the trial fails).
fn run(
    space: &Space,
    seed: u64,
    trials: usize,
    objective: impl Fn(&Assignment) -> Option<f64>,
) -> Vec<Observation> {
    run_with(&mut BayesSampler::new(seed), space, trials, objective)
}

fn run_with(
    sampler: &mut BayesSampler,
    space: &Space,
    trials: usize,
    objective: impl Fn(&Assignment) -> Option<f64>,
) -> Vec<Observation> {
    let mut history = Vec::new();
    for number in 0..trials as u64 {
        let params = propose(sampler, space, &history, &[]);
        let value = objective(&params);
        history.push(Observation {
            number,
            params,
            value,
            ..Observation::unconstrained()
        });
    }
    history
}

fn bowl(p: &Assignment) -> Option<f64> {
    Some((x(p, "a") - 0.3).powi(2) + (x(p, "b") - 0.7).powi(2))
}

#[test]
fn the_model_finds_the_bottom_of_a_bowl_that_random_search_misses() {
    let history = run(&square(), 1, 25, bowl);
    let best = history
        .iter()
        .filter_map(|o| o.value)
        .fold(f64::MAX, f64::min);
    // 25 uniform points get within about 1e-2 of the minimum, in expectation.
    assert!(best < 1e-4, "best {best}");
}

#[test]
fn in_the_middle_a_proposal_stays_in_the_trust_region() {
    // A bowl in a corner of 12 dimensions: after the design, the model's trend points to
    // the corner, further from the best design point than the trust region reaches. With the
    // whole cube (16 parameters or more; 10 or more before the middle had rules of its own)
    // the proposal moved more than 0.4 from the incumbent in some coordinate.
    let space = Space::new((0..12).map(|i| double(&format!("x{i}"))).collect());
    let corner = |p: &Assignment| -> Option<f64> {
        Some(
            (0..12)
                .map(|i| (x(p, &format!("x{i}")) - 1.0).powi(2))
                .sum(),
        )
    };
    let design = initial_design_size(12, None) as usize;
    let mut sampler = BayesSampler::new(3);
    let history = run_with(&mut sampler, &space, design, corner);
    let incumbent = history
        .iter()
        .min_by(|a, b| a.value.unwrap().total_cmp(&b.value.unwrap()))
        .unwrap();
    let proposal = propose(&mut sampler, &space, &history, &[]);
    let reach = (0..12)
        .map(|i| (x(&proposal, &format!("x{i}")) - x(&incumbent.params, &format!("x{i}"))).abs())
        .fold(0.0, f64::max);
    // A fresh trust region reaches 0.4 from its centre.
    assert!(
        reach <= 0.4 + 1e-9,
        "the proposal moved {reach} from the incumbent"
    );
    assert!(
        corner(&proposal) < incumbent.value,
        "and towards the corner"
    );
}

/// `a + b <= limit`, reported as the metric `sum`.
fn sum_at_most(limit: f64) -> Constraints {
    Constraints {
        bounds: vec![Constraint {
            metric: "sum".into(),
            bound: Bound::Max(limit),
        }],
        failed_as_infeasible: false,
    }
}

/// The bowl, and `a + b` for [`sum_at_most`].
fn bowl_and_sum(p: &Assignment) -> (Option<f64>, f64) {
    (bowl(p), x(p, "a") + x(p, "b"))
}

/// Runs `trials` sequential trials on the square under `constraints` (one bound), each
/// `measure`d as its value and its constrained metric's.
fn run_constrained(
    seed: u64,
    trials: usize,
    constraints: &Constraints,
    measure: impl Fn(&Assignment) -> (Option<f64>, f64),
) -> Vec<Observation> {
    let (space, mut sampler) = (square(), BayesSampler::new(seed));
    let metric = &constraints.bounds[0].metric;
    let mut history = Vec::new();
    for number in 0..trials as u64 {
        let params = propose_under(&mut sampler, &space, &history, &[], constraints);
        let (value, constrained) = measure(&params);
        let values = [(metric.clone(), constrained)].into();
        history.push(Observation {
            number,
            value,
            values: Vec::new(),
            feasible: constraints.judge(false, &values).is_none(),
            constraint_values: values,
            params,
        });
    }
    history
}

#[test]
fn under_a_constraint_the_model_finds_the_best_feasible_point() {
    // The bowl's bottom (0.3, 0.7) breaks a + b <= 0.8; the best feasible point is its
    // projection on the bound, (0.2, 0.6), at 0.02.
    let history = run_constrained(1, 30, &sum_at_most(0.8), bowl_and_sum);
    let best = history
        .iter()
        .filter(|o| o.feasible)
        .filter_map(|o| o.value)
        .fold(f64::MAX, f64::min);
    assert!(best < 0.02 + 1e-3, "best feasible {best}");
    let model = &history[initial_design_size(2, None) as usize..];
    let infeasible = model.iter().filter(|o| !o.feasible).count();
    assert!(
        infeasible * 2 <= model.len(),
        "{infeasible} of {} model proposals infeasible",
        model.len()
    );
}

#[test]
fn on_gardners_constrained_sine_the_search_leaves_a_local_minimum_for_the_optimum() {
    // cos(2 x1) cos(x2) + sin(x1) with cos(x1 + x2) <= 0.5 over [0, 6]² (Gardner et al.,
    // 2014), as unit coordinates: optimum -2 at (3π/2, 0), in a strip cut off by an
    // infeasible band from the valley's other end, the local minimum -1.96017 at
    // (3π/2, 6). With this seed the region converged there (and before, on the local
    // minimum -1.123 at (6, π)) and stayed.
    let constraints = Constraints {
        bounds: vec![Constraint {
            metric: "c".into(),
            bound: Bound::Max(0.5),
        }],
        failed_as_infeasible: false,
    };
    let history = run_constrained(1, 50, &constraints, |p| {
        let (x1, x2) = (6.0 * x(p, "a"), 6.0 * x(p, "b"));
        (
            Some((2.0 * x1).cos() * x2.cos() + x1.sin()),
            (x1 + x2).cos(),
        )
    });
    let best = history
        .iter()
        .filter(|o| o.feasible)
        .filter_map(|o| o.value)
        .fold(f64::MAX, f64::min);
    assert!(best < -1.99, "best feasible {best}");
}

#[test]
fn with_no_feasible_trial_yet_the_proposal_goes_where_feasibility_is_likely() {
    // Only the corner a + b <= 0.3 is feasible, far from the bowl's bottom, and the
    // design misses it.
    let history = run_constrained(2, 10, &sum_at_most(0.3), bowl_and_sum);
    let design = initial_design_size(2, None) as usize;
    assert!(history[..design].iter().all(|o| !o.feasible));
    let first = history.iter().position(|o| o.feasible);
    assert!(
        first.is_some_and(|n| n < 10),
        "no feasible trial in {:?}",
        history
            .iter()
            .map(|o| &o.constraint_values)
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_warm_start_skips_the_design_and_proposes_from_the_other_studys_trials() {
    let space = square();
    // Eight trials of another study: the design and three model proposals, one near the
    // bottom.
    let prior = run(&space, 7, 8, bowl);
    let constraints = Constraints::default();
    let context = |prior| ProposalContext {
        space: &space,
        goal: Goal::Minimize,
        goals: &[Goal::Minimize],
        constraints: &constraints,
        number: 0,
        history: &[],
        prior,
        running: &[],
        parallel: 1,
        curves: &[],
    };
    let mut sampler = BayesSampler::new(3);
    let cold = sampler.propose(&context(&[])).unwrap().unwrap();
    let warm = sampler.propose(&context(&prior)).unwrap().unwrap();
    assert_eq!(cold, sampler.design(&context(&[])));
    let best = prior
        .iter()
        .filter_map(|o| o.value)
        .fold(f64::MAX, f64::min);
    // The warm start's first trial is the model's, near the bottom the other study found
    // (within 0.02 of it), where the cold start's (the centre of the square, 0.08) is not.
    let (warm, cold) = (bowl(&warm).unwrap(), bowl(&cold).unwrap());
    assert!(
        warm < best + 0.02 && warm < cold / 4.0,
        "warm {warm}, best before {best}, cold {cold}"
    );
}

#[test]
fn same_seed_and_history_give_the_same_proposal() {
    let space = square();
    let history = run(&space, 5, 8, bowl);
    let again = run(&space, 5, 8, bowl);
    assert_eq!(history, again);
    let fresh = propose(&mut BayesSampler::new(5), &space, &history, &[]);
    let other = propose(&mut BayesSampler::new(6), &space, &history, &[]);
    assert_eq!(
        fresh,
        propose(&mut BayesSampler::new(5), &space, &history, &[])
    );
    assert_ne!(fresh, other);
}

#[test]
fn a_restarted_sampler_proposes_what_the_running_one_would() {
    // The running sampler has cached fits along the way; a fresh one has none.
    let space = square();
    let mut running = BayesSampler::new(8);
    let history = run_with(&mut running, &space, 18, bowl);
    assert_eq!(
        propose(&mut running, &space, &history, &[]),
        propose(&mut BayesSampler::new(8), &space, &history, &[])
    );
}

#[test]
fn the_proposal_does_not_depend_on_the_number_of_cores() {
    // The full fit's starts, the scoring of candidates and their refinement run on
    // rayon's threads.
    let space = square();
    let history = run(&space, 6, 14, bowl);
    let running = [propose(&mut BayesSampler::new(6), &space, &history, &[])];
    let on = |threads| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let alone = propose(&mut BayesSampler::new(6), &space, &history, &[]);
            let beside = propose(&mut BayesSampler::new(6), &space, &history, &running);
            (alone, beside)
        })
    };
    assert_eq!(on(1), on(3));
}

#[test]
fn running_trials_push_the_next_proposal_elsewhere() {
    let space = square();
    let history = run(&space, 2, 10, bowl);
    let mut sampler = BayesSampler::new(2);
    let first = propose(&mut sampler, &space, &history, &[]);
    let second = propose(&mut sampler, &space, &history, std::slice::from_ref(&first));
    let distance = ((x(&first, "a") - x(&second, "a")).powi(2)
        + (x(&first, "b") - x(&second, "b")).powi(2))
    .sqrt();
    assert!(distance > 1e-3, "{first:?} then {second:?}");
}

#[test]
fn proposals_beside_running_trials_are_repeatable() {
    let space = square();
    // Trial 11, proposed while trial 10 runs: its running trial's value is drawn.
    let history = run(&space, 2, 10, bowl);
    let running = [propose(&mut BayesSampler::new(2), &space, &history, &[])];
    let again = |seed| propose(&mut BayesSampler::new(seed), &space, &history, &running);
    assert_eq!(again(2), again(2));
    assert_ne!(again(2), again(3));
}

#[test]
fn failed_trials_steer_proposals_away_from_where_they_fail() {
    let fails_left = |p: &Assignment| {
        (x(p, "a") >= 0.5).then(|| (x(p, "a") - 0.6).powi(2) + (x(p, "b") - 0.5).powi(2))
    };
    let history = run(&square(), 3, 30, fails_left);
    let model = &history[initial_design_size(2, None) as usize..];
    let failed = model.iter().filter(|o| o.value.is_none()).count();
    assert!(
        failed * 5 <= model.len(),
        "{failed} of {} failed",
        model.len()
    );
}

#[test]
fn degenerate_histories_give_valid_proposals() {
    let space = square();
    let mut sampler = BayesSampler::new(4);
    let at = |number, a, b, value| Observation {
        number,
        params: [
            ("a".to_string(), ParamValue::Float(a)),
            ("b".to_string(), ParamValue::Float(b)),
        ]
        .into(),
        value,
        ..Observation::unconstrained()
    };
    // All failed; one observation; the same point twice with different values;
    // constant values; huge values.
    let cases: Vec<Vec<Observation>> = vec![
        (0..8).map(|n| at(n, 0.1, 0.2, None)).collect(),
        (0..8)
            .map(|n| at(n, 0.1, 0.2, (n == 3).then_some(1.0)))
            .collect(),
        (0..8)
            .map(|n| at(n, 0.5, 0.5, Some(n as f64 % 2.0)))
            .collect(),
        (0..8)
            .map(|n| at(n, n as f64 / 8.0, 0.5, Some(2.0)))
            .collect(),
        (0..8)
            .map(|n| at(n, n as f64 / 8.0, 0.1, Some(1e300 * n as f64)))
            .collect(),
    ];
    for history in cases {
        propose(&mut sampler, &space, &history, &[]);
    }
}

#[test]
fn mixed_and_conditional_spaces_get_valid_proposals() {
    let mut momentum = double("momentum");
    momentum.condition = Some(Condition {
        requires: [("optimizer".to_string(), vec![ParamValue::Str("sgd".into())])].into(),
    });
    let space = Space::new(vec![
        categorical("optimizer", &["adam", "sgd"]),
        categorical("only", &["one"]),
        Parameter {
            id: "layers".into(),
            domain: Domain::Integer {
                min: 2,
                max: 2,
                scale: Scale::Linear,
                grid_points: None,
            },
            condition: None,
        },
        Parameter {
            id: "batch".into(),
            domain: Domain::Discrete {
                values: vec![8.0, 16.0, 32.0],
                scale: Scale::Log,
            },
            condition: None,
        },
        momentum,
    ]);
    // Best with sgd, momentum 0.9, batch 16.
    let history = run(&space, 9, 30, |p| {
        let sgd = p["optimizer"] == ParamValue::Str("sgd".into());
        let momentum = p
            .get("momentum")
            .and_then(ParamValue::as_f64)
            .unwrap_or(0.0);
        let batch = p["batch"].as_f64().unwrap();
        Some(if sgd { (momentum - 0.9).powi(2) } else { 0.5 } + (batch / 16.0).ln().abs())
    });
    let best = history
        .iter()
        .filter_map(|o| o.value)
        .fold(f64::MAX, f64::min);
    assert!(best < 1e-3, "best {best}");
}
