//! Several objectives end to end: the real binary, a worker that reports an accuracy and a
//! latency to trade against each other, the Pareto front in `trials` and `best` (table,
//! flags, JSON), `keep_best` keeping the front's models, on SQLite and (with
//! `HPTUNE_TEST_POSTGRES`) PostgreSQL; and every bad input refused with exit 2.

use crate::common;

use common::{Scratch, assert_exit_says, assert_success, stderr, stdout};
use serde_json::Value;

/// accuracy = x, latency_ms = 10 x² + 5 y, memory_gb = 10 y: accuracy costs latency, and y
/// only costs. Above x = 0.9 the worker reports no latency (the trial fails); above y = 0.8
/// it breaks the memory constraint (the trial is infeasible).
const WORKER: &str = r#"#!/bin/sh
for arg in "$@"; do case "$arg" in --x=*) x=${arg#*=};; --y=*) y=${arg#*=};; esac; done
if awk -v x="$x" 'BEGIN { exit !(x > 0.9) }'; then echo "accuracy=$x"; exit 0; fi
awk -v x="$x" -v y="$y" 'BEGIN { printf "accuracy=%.17g latency_ms=%.17g memory_gb=%.17g\n", x, 10 * x * x + 5 * y, 10 * y }'
"#;

const TRIALS: usize = 16;

fn study(name: &str, worker: &str, objectives: &str) -> String {
    format!(
        r#"
name: {name}
objectives: {objectives}
parameters:
  - {{id: x, type: double, min: 0.0, max: 1.0}}
  - {{id: y, type: double, min: 0.0, max: 1.0}}
constraints: [{{metric: memory_gb, max: 8}}]
algorithm: random
max_trial_count: {TRIALS}
max_failed_trial_count: {TRIALS}
parallel_trial_count: 2
seed: 11
artifacts: {{keep_best: 1}}
trial:
  command: [sh, {worker}]
"#
    )
}

const TWO: &str = "[{metric: accuracy, goal: maximize}, {metric: latency_ms, goal: minimize}]";

fn number(t: &Value) -> u64 {
    t["number"].as_u64().unwrap()
}

/// (accuracy, latency) of a trial that succeeded and kept the constraint.
fn result(t: &Value) -> Option<(f64, f64)> {
    (t["state"] == "succeeded" && t["infeasible"].is_null()).then(|| {
        let values = &t["values"];
        (
            values["accuracy"].as_f64().unwrap(),
            values["latency_ms"].as_f64().unwrap(),
        )
    })
}

fn two_objectives_end_to_end(scratch: &Scratch, name: &str) {
    let worker = scratch.path("worker.sh");
    std::fs::write(&worker, WORKER).unwrap();
    let worker = worker.to_str().unwrap();
    let file = scratch.study("two.yaml", &study(name, worker, TWO));
    let file = file.to_str().unwrap();
    let run = scratch.hptune(&["run", file]);
    assert_success(&run);
    let trials = scratch.trials(name);
    assert_eq!(trials.len(), TRIALS);
    let x = |t: &Value| t["params"]["x"].as_f64().unwrap();
    let y = |t: &Value| t["params"]["y"].as_f64().unwrap();
    for t in &trials {
        if x(t) > 0.9 {
            assert_eq!(t["state"], "failed", "{t}");
            let error = t["error"].as_str().unwrap();
            assert!(
                error.contains("never reported 'latency_ms'")
                    && error.contains("needs a final value of each: accuracy, latency_ms"),
                "{error}"
            );
            assert_eq!(t["on_front"], false);
            continue;
        }
        assert_eq!(t["state"], "succeeded", "{t}");
        assert_eq!(t["infeasible"].is_null(), y(t) <= 0.8, "{t}");
        let latency = 10.0 * x(t) * x(t) + 5.0 * y(t);
        assert!((t["values"]["latency_ms"].as_f64().unwrap() - latency).abs() < 1e-9);
        assert_eq!(
            t["values"]["accuracy"], t["value"],
            "the value is the first objective's"
        );
    }
    // The front, computed here pair by pair: the results no other result beats on both.
    let results: Vec<(u64, (f64, f64))> = trials
        .iter()
        .filter_map(|t| Some((number(t), result(t)?)))
        .collect();
    let dominated = |(a, l): (f64, f64)| {
        results
            .iter()
            .any(|&(_, (b, m))| b >= a && m <= l && (b > a || m < l))
    };
    let front: Vec<u64> = results
        .iter()
        .filter(|&&(_, r)| !dominated(r))
        .map(|&(n, _)| n)
        .collect();
    assert!(
        front.len() >= 2 && front.len() < results.len(),
        "{front:?} of {results:?}"
    );
    // The run's last progress shows the whole front, not the one of an earlier trial.
    let said = format!("{}{}", stdout(&run), stderr(&run));
    let last = said.rsplit("front of ").next().unwrap();
    assert!(
        last.starts_with(&format!("{} (hypervolume", front.len())),
        "{said}"
    );
    let marked: Vec<u64> = trials
        .iter()
        .filter(|t| t["on_front"] == true)
        .map(number)
        .collect();
    assert_eq!(marked, front);
    // keep_best: 1 keeps the models of the whole front, and only those.
    for t in trials.iter().filter(|t| t["artifact_dir"].is_string()) {
        let kept = t["artifact_removed_at"].is_null();
        assert_eq!(kept, front.contains(&number(t)), "{t}");
    }

    // `best`: the Pareto set, the first objective's best first.
    let out = scratch.hptune(&["best", name, "--format", "json"]);
    assert_success(&out);
    let best: Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed: Vec<u64> = best["front"]
        .as_array()
        .unwrap()
        .iter()
        .map(number)
        .collect();
    let mut by_accuracy: Vec<(u64, (f64, f64))> = results
        .iter()
        .filter(|(n, _)| front.contains(n))
        .copied()
        .collect();
    by_accuracy.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
    assert_eq!(
        listed,
        by_accuracy.iter().map(|(n, _)| *n).collect::<Vec<_>>()
    );
    assert_eq!(best["objectives"][1]["metric"], "latency_ms");
    // The derived reference point: the worst feasible result widened by a tenth of the range.
    let (accuracies, latencies): (Vec<f64>, Vec<f64>) = results.iter().map(|(_, r)| *r).unzip();
    let span = |v: &[f64]| {
        let (lo, hi) = (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        );
        (lo, hi, hi - lo)
    };
    let (lowest_accuracy, _, accuracy_range) = span(&accuracies);
    let (_, highest_latency, latency_range) = span(&latencies);
    let reference = [
        lowest_accuracy - 0.1 * accuracy_range,
        highest_latency + 0.1 * latency_range,
    ];
    for (i, r) in reference.iter().enumerate() {
        let got = best["reference_point"][i].as_f64().unwrap();
        assert!((got - r).abs() < 1e-9, "{got} != {r}");
    }
    // The hypervolume of the front: the staircase its points make up to the reference.
    // Best accuracy first, latencies fall along the front: each point adds the strip
    // between its latency and the one before it.
    let mut area = 0.0;
    for (i, (_, (a, l))) in by_accuracy.iter().enumerate() {
        let next_latency = match i {
            0 => reference[1],
            _ => by_accuracy[i - 1].1.1,
        };
        area += (a - reference[0]) * (next_latency - l);
    }
    let hypervolume = best["hypervolume"].as_f64().unwrap();
    assert!((hypervolume - area).abs() < 1e-9, "{hypervolume} != {area}");

    let out = scratch.hptune(&["best", name]);
    assert_success(&out);
    let lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), front.len(), "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("--x=") && l.contains(" --y=")),
        "{lines:?}"
    );

    // `trials`: a column per objective and the front marked.
    let out = scratch.hptune(&["trials", name]);
    assert_success(&out);
    let table = stdout(&out);
    let header = table.lines().next().unwrap();
    for column in ["accuracy", "latency_ms", "front"] {
        assert!(header.contains(column), "{header}");
    }
    assert_eq!(table.matches(" yes ").count(), front.len(), "{table}");

    // `studies`: every objective, and no single best value.
    let out = scratch.hptune(&["studies"]);
    assert_success(&out);
    let listed = stdout(&out);
    let row = listed.lines().find(|l| l.starts_with(name)).unwrap();
    let row: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(row[1], "maximize accuracy, minimize latency_ms", "{listed}");
    assert_eq!(row.len(), 6, "no best column: {listed}");

    // A model: only by the trial's number.
    let out = scratch.hptune(&["best", name, "--artifact"]);
    assert_exit_says(
        &out,
        2,
        "has several objectives, so no single best model: give --trial N",
    );
    let out = scratch.hptune(&["best", name, "--artifact", "--trial", &front[0].to_string()]);
    assert_success(&out);
    assert!(std::path::Path::new(stdout(&out).trim()).is_dir());
    let out = scratch.hptune(&["best", name, "--by", "model"]);
    assert_exit_says(&out, 2, "--by model needs a study of one objective");

    // The objectives are fixed at creation.
    let swapped = "[{metric: latency_ms, goal: minimize}, {metric: accuracy, goal: maximize}]";
    let changed = scratch.study("changed.yaml", &study(name, worker, swapped));
    let out = scratch.hptune(&["run", changed.to_str().unwrap()]);
    assert_exit_says(
        &out,
        2,
        "with objective maximize accuracy, minimize latency_ms: keep the objectives as they were",
    );
}

#[test]
fn two_objectives_on_sqlite() {
    two_objectives_end_to_end(&Scratch::new(), "tradeoff");
}

#[test]
fn two_objectives_on_postgres() {
    if let Some(scratch) = Scratch::on_postgres_without("tradeoff-pg") {
        two_objectives_end_to_end(&scratch, "tradeoff-pg");
    }
}

#[test]
fn bad_objectives_exit_2_with_where_and_what() {
    let scratch = Scratch::new();
    let cases = [
        (
            "[{metric: a, goal: maximize}, {metric: a, goal: minimize}]",
            "objectives[1].metric: 'a' is listed twice",
        ),
        (
            "[{metric: a, goal: maximize}, {metric: memory_gb, goal: minimize}]",
            "objectives[1].metric: 'memory_gb' is also constraints[0]",
        ),
        (
            "[{metric: a, goal: maximize}]",
            "objectives: lists 1 objective: give 2 to 4",
        ),
        (
            "[{metric: a, goal: maximize}, {metric: b, goal: maximize}, {metric: c, goal: maximize}, {metric: d, goal: maximize}, {metric: e, goal: maximize}]",
            "objectives: lists 5 objectives: give 2 to 4",
        ),
    ];
    for (objectives, expected) in cases {
        let file = scratch.study("bad.yaml", &study("bad", "w.sh", objectives));
        let out = scratch.hptune(&["run", file.to_str().unwrap()]);
        let message = assert_exit_says(&out, 2, expected);
        assert!(message.contains("bad.yaml:3:"), "{message}");
    }
    let both = study("bad", "w.sh", TWO).replace(
        "objectives:",
        "objective: {metric: a, goal: maximize}\nobjectives:",
    );
    let file = scratch.study("bad.yaml", &both);
    let out = scratch.hptune(&["run", file.to_str().unwrap()]);
    assert_exit_says(
        &out,
        2,
        "give `objective` (one metric) or `objectives` (2 to 4), not both",
    );
}
