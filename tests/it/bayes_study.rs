//! `algorithm: bayesian` end to end: the real binary, the Gaussian-process sampler proposing
//! through the controller with parallel trials, a worker process per trial.

use crate::common;

use common::{Scratch, assert_success, objective_example};

const BAYESIAN: &str = r#"
name: bowl
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 1.5}
  - {id: y, type: double, min: -1.0, max: 2.0}
algorithm: bayesian
max_trial_count: 16
parallel_trial_count: 2
seed: 4
trial:
  command: [{worker}]
"#;

#[test]
fn bayesian_study_improves_on_its_design_with_parallel_trials() {
    let scratch = Scratch::new();
    let study = scratch.study("study.yaml", BAYESIAN);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let trials = scratch.trials("bowl");
    assert_eq!(trials.len(), 16);
    let values: Vec<f64> = trials
        .iter()
        .map(|t| {
            assert_eq!(t["state"], "succeeded", "{t}");
            t["value"].as_f64().unwrap()
        })
        .collect();
    // The first 5 trials are the space-filling design (2 parameters); the model's trials must
    // find the bottom of the bowl x² + y², which no design point is near.
    let design = values[..5].iter().copied().fold(f64::MAX, f64::min);
    let model = values[5..].iter().copied().fold(f64::MAX, f64::min);
    assert!(
        model < 1e-2 && model < design,
        "design {design}, model {model}"
    );
}

#[test]
fn the_first_trial_of_a_bayesian_study_is_the_middle_of_each_ordered_parameter() {
    // The design starts at the centre of the space, in each parameter's scale: a linear
    // double at the middle of its bounds, a log-scale one at their geometric mean, an integer
    // at its middle value; a categorical has no middle and takes the design's value.
    let scratch = Scratch::new();
    let study = scratch.study(
        "study.yaml",
        r#"
name: centre
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 6.0}
  - {id: lr, type: double, min: 1.0e-5, max: 1.0e-1, scale: log}
  - {id: layers, type: integer, min: 2, max: 6}
  - {id: act, type: categorical, values: [relu, tanh, gelu]}
algorithm: bayesian
max_trial_count: 2
seed: 3
trial:
  command: [{worker}]
"#,
    );
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let trials = scratch.trials("centre");
    let first = &trials[0]["params"];
    assert_eq!(first["x"].as_f64(), Some(2.0), "{first}");
    let lr = first["lr"].as_f64().unwrap();
    assert!((lr / 1e-3 - 1.0).abs() < 1e-9, "{first}");
    assert_eq!(first["layers"].as_i64(), Some(4), "{first}");
    assert!(["relu", "tanh", "gelu"].contains(&first["act"].as_str().unwrap()));
    let second = &trials[1]["params"];
    assert_ne!(
        second["x"], first["x"],
        "the second trial is the Sobol sequence's: {second}"
    );
}

#[test]
fn parallel_trials_that_end_in_turn_give_the_same_study_twice() {
    // With `--in-order` the workers end one at a time in number order, each proposal after
    // the first four made beside exactly three running trials: the run does not depend on
    // the controller's speed, so two runs propose the same trials (the benchmark's `async`
    // mode rests on this). Noisy, as the benchmark's `branin-noisy`: each run's `--in-order`
    // folder is a new one, and the noise must not follow it.
    let run = || {
        let scratch = Scratch::new();
        let marks = scratch.path("marks");
        std::fs::create_dir(&marks).unwrap();
        let study = format!(
            r#"
name: levy
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x1, type: double, min: -10.0, max: 10.0}}
  - {{id: x2, type: double, min: -10.0, max: 10.0}}
algorithm: bayesian
max_trial_count: 14
parallel_trial_count: 4
seed: 3
trial:
  command: [{}, --function, levy, --noise, 0.5, --noise-seed, 2, --in-order, {}, --running, 4, --trials, 14]
"#,
            objective_example().display(),
            marks.display()
        );
        let path = scratch.study("study.yaml", &study);
        let out = scratch
            .command(&["run", path.to_str().unwrap()])
            .env("RUST_LOG", "hptune::sampler=debug")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert_success(&out);
        let running: Vec<String> = common::stderr(&out)
            .lines()
            .filter(|l| l.contains("proposed"))
            .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("running=")))
            .map(str::to_string)
            .collect();
        let trials = scratch.trials("levy");
        assert_eq!(trials.len(), 14);
        assert!(
            trials.iter().all(|t| t["state"] == "succeeded"),
            "{trials:?}"
        );
        let params: Vec<String> = trials.iter().map(|t| t["params"].to_string()).collect();
        (params, running)
    };
    let (first, running) = run();
    let expected: Vec<String> = (0..14).map(|n| format!("running={}", n.min(3))).collect();
    assert_eq!(
        running, expected,
        "the running trials seen by each proposal"
    );
    let (second, _) = run();
    assert_eq!(first, second);
}

/// The worker's noise is fixed by the function, the seed and the parameters alone: the same
/// evaluation gives the same value whatever its `--in-order` folder, steps or metric name, and
/// another seed or another point gives another draw.
#[test]
fn the_objective_noise_follows_the_evaluation_not_the_run() {
    let scratch = Scratch::new();
    let loss = |extra: &[&str]| {
        let out = std::process::Command::new(objective_example())
            .args(["--function", "branin", "--x1=2.5", "--x2=7.5"])
            .args(["--noise", "1"])
            .args(extra)
            .env("HPTUNE_TRIAL_ID", "0")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let last = text.lines().last().unwrap().to_string();
        let (_, value) = last.split_once('=').unwrap();
        value.parse::<f64>().unwrap()
    };
    let in_order = |folder: &str| {
        let dir = scratch.path(folder);
        std::fs::create_dir(&dir).unwrap();
        loss(&[
            "--noise-seed",
            "7",
            "--in-order",
            dir.to_str().unwrap(),
            "--running",
            "1",
            "--trials",
            "1",
        ])
    };
    let plain = loss(&["--noise-seed", "7"]);
    assert_eq!(in_order("first"), plain);
    assert_eq!(in_order("second"), plain);
    let reported_otherwise = loss(&["--noise-seed", "7", "--steps", "3", "--metric", "l"]);
    assert_eq!(reported_otherwise, plain);
    // The last of two flags wins: no noise.
    let clean = loss(&["--noise", "0", "--noise-seed", "7"]);
    assert!((plain - clean).abs() > 1e-6, "no noise: {plain}");
    assert_ne!(loss(&["--noise-seed", "8"]), plain);
}

/// The objective example's output for `function` at `point` (`(i, value)`: `--x{i}=value`),
/// with `changes` made to it.
fn evaluate(
    function: &str,
    point: &[(usize, String)],
    changes: &[(usize, &str)],
) -> std::process::Output {
    let args = point.iter().map(|(i, v)| {
        let v = changes
            .iter()
            .find(|c| c.0 == *i)
            .map_or(v.as_str(), |c| c.1);
        format!("--x{i}={v}")
    });
    std::process::Command::new(objective_example())
        .args(["--function", function])
        .args(args)
        .output()
        .unwrap()
}

/// The `loss` an objective's successful run reports.
fn loss_of(out: std::process::Output) -> f64 {
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    text.trim()
        .strip_prefix("loss=")
        .unwrap()
        .parse::<f64>()
        .unwrap()
}

/// The benchmark's functions of 8-15 parameters at their stated minima (0): Rosenbrock at
/// x = 1, Rastrigin at x = 0, and the mixed space of 10 parameters (6 doubles, 2 integers, 2
/// categoricals) at its optimum and one categorical away from it.
#[test]
fn the_middle_objectives_have_their_stated_minima() {
    let at = |v: &str| (1..=10).map(|i| (i, v.to_string())).collect::<Vec<_>>();
    assert!(loss_of(evaluate("rosenbrock", &at("1"), &[])).abs() < 1e-12);
    assert!(loss_of(evaluate("rastrigin", &at("0"), &[])).abs() < 1e-12);
    assert!((loss_of(evaluate("rastrigin", &at("0"), &[(3, "1")])) - 1.0).abs() < 1e-9);
    // Doubles x1..x6 (x1 and x2 moved by categoricals x9 and x10 at their best values a and
    // b), integers x7 and x8 best at 2 and 3.
    let target = |i: usize, k: usize| 0.15 + 0.7 * ((3 * k + i) % 7) as f64 / 6.0;
    let mut optimum: Vec<(usize, String)> = (0..6)
        .map(|i| (1 + i, target(i, usize::from(i < 2) * i).to_string()))
        .collect();
    optimum.extend([
        (7, "2".into()),
        (8, "3".into()),
        (9, "a".into()),
        (10, "b".into()),
    ]);
    assert!(loss_of(evaluate("mixed-many", &optimum, &[])).abs() < 1e-12);
    // x9 from a to c: two steps (0.4), and x1's best value moves from 0.15 to 0.85.
    let expected = 0.4 + 4.0 * (target(0, 0) - target(0, 2)).powi(2);
    let moved = loss_of(evaluate("mixed-many", &optimum, &[(9, "c")]));
    assert!(
        (moved - expected).abs() < 1e-9,
        "{moved} against {expected}"
    );
}

/// The benchmark's 30-parameter mixed function at its stated minimum (0), one categorical
/// away from it (its cost, 0.2 a step, and the move of its double's best value), and with a
/// value its categorical does not have (an error naming the flag).
#[test]
fn the_mixed_30_objective_has_its_stated_minimum_and_names_a_bad_value() {
    let mut optimum: Vec<(usize, String)> = Vec::new();
    for i in 0..10 {
        let values = if i < 5 { 3 } else { 4 };
        let k = i % values;
        optimum.push((21 + i, ["a", "b", "c", "d"][k].to_string()));
        let target = 0.15 + 0.7 * ((3 * k + i) % 7) as f64 / 6.0;
        optimum.push((1 + i, target.to_string()));
    }
    for j in 0..5 {
        optimum.push((11 + j, 10f64.powf(-3.0 + 0.5 * j as f64).to_string()));
        optimum.push((16 + j, (2 + j).to_string()));
    }
    let run = |changes: &[(usize, &str)]| evaluate("mixed-30", &optimum, changes);
    let loss = |changes: &[(usize, &str)]| loss_of(run(changes));
    assert!(loss(&[]).abs() < 1e-12, "{}", loss(&[]));
    // x21 (i = 0) from a to b: one step (0.2), and x1's best value moves from 0.15 to 0.5.
    let expected = 0.2 + 4.0 * (0.15f64 - 0.5).powi(2);
    assert!((loss(&[(21, "b")]) - expected).abs() < 1e-9);
    let bad = run(&[(22, "d")]);
    assert_eq!(bad.status.code(), Some(2));
    let message = String::from_utf8(bad.stderr).unwrap();
    assert!(message.contains("--x22: 'd'"), "{message}");
}

#[test]
fn a_resumed_multi_fidelity_study_proposes_what_one_run_would_have() {
    // Bayesian + ASHA: the model reads every trial's curve from storage before each proposal,
    // so a study stopped after 7 trials and run again proposes its 8th and 9th as one run of
    // 9 does. One trial at a time, and steps slow enough that a stopped worker reports no
    // step past the one it was stopped at: the curves do not depend on timing.
    let study = |count: u32| {
        format!(
            r#"
name: curves
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x1, type: double, min: -5.0, max: 10.0}}
  - {{id: x2, type: double, min: 0.0, max: 15.0}}
algorithm: bayesian
max_trial_count: {count}
parallel_trial_count: 1
seed: 5
early_stopping: {{rule: asha, min_resource: 1, reduction_factor: 3, max_resource: 9}}
trial:
  command: [{}, --function, branin, --steps, "9", --sleep-ms, "300"]
"#,
            objective_example().display()
        )
    };
    let run = |counts: &[u32]| {
        let scratch = Scratch::new();
        for &count in counts {
            let path = scratch.study("study.yaml", &study(count));
            assert_success(&scratch.hptune(&["run", path.to_str().unwrap()]));
        }
        scratch.trials("curves")
    };
    let whole = run(&[9]);
    let resumed = run(&[7, 9]);
    assert!(
        whole.iter().any(|t| t["state"] == "stopped"),
        "ASHA stopped a trial: {whole:?}"
    );
    let params = |trials: &[serde_json::Value]| -> Vec<String> {
        trials.iter().map(|t| t["params"].to_string()).collect()
    };
    assert_eq!(params(&whole), params(&resumed));
}
