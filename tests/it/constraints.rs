//! `constraints` and `failed_as_infeasible` end to end: the real binary, a worker that reports
//! a constrained metric beside the objective, the trials recorded as infeasible and never
//! named best, on SQLite and (with `HPTUNE_TEST_POSTGRES`) PostgreSQL.

use crate::common;

use common::dashboard::Dashboard;
use common::{Scratch, assert_exit_says, assert_success, stdout};
use serde_json::Value;

/// loss = (x - 1)², peak memory 8 + 10 x GB: the unconstrained bottom (x = 1) needs 18 GB.
/// Above x = 1.5 the worker crashes (an out-of-memory crash).
const WORKER: &str = r#"#!/bin/sh
for arg in "$@"; do case "$arg" in --x=*) x=${arg#*=};; esac; done
if awk -v x="$x" 'BEGIN { exit !(x > 1.5) }'; then echo "CUDA out of memory" >&2; exit 3; fi
awk -v x="$x" 'BEGIN { printf "loss=%.17g peak_memory_gb=%.17g\n", (x - 1) ^ 2, 8 + 10 * x }'
"#;

fn study(worker: &str, extra: &str) -> String {
    format!(
        r#"
name: memory
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x, type: double, min: 0.0, max: 2.0}}
algorithm: bayesian
max_trial_count: 14
max_failed_trial_count: 14
seed: 3
trial:
  command: [sh, {worker}]
{extra}
"#
    )
}

fn memory(trial: &Value) -> f64 {
    8.0 + 10.0 * trial["params"]["x"].as_f64().unwrap()
}

fn constrained_study_never_names_an_infeasible_trial_best(scratch: &Scratch) {
    let worker = scratch.path("worker.sh");
    std::fs::write(&worker, WORKER).unwrap();
    let text = study(
        worker.to_str().unwrap(),
        "constraints: [{metric: peak_memory_gb, max: 16}]\nfailed_as_infeasible: true",
    );
    let file = scratch.study("memory.yaml", &text);
    assert_success(&scratch.hptune(&["run", file.to_str().unwrap()]));
    let trials = scratch.trials("memory");
    assert_eq!(trials.len(), 14);
    for t in &trials {
        let broke = memory(t) > 16.0;
        let failed = t["state"] == "failed";
        assert_eq!(
            !t["infeasible"].is_null(),
            broke || failed,
            "memory {}: {t}",
            memory(t)
        );
        if !failed {
            let recorded = t["constraint_values"]["peak_memory_gb"].as_f64().unwrap();
            assert!((recorded - memory(t)).abs() < 1e-9, "{t}");
        }
    }
    let succeeded: Vec<&Value> = trials
        .iter()
        .filter(|t| t["state"] == "succeeded")
        .collect();
    let lowest = |feasible: bool| {
        succeeded
            .iter()
            .filter(|t| t["infeasible"].is_null() == feasible)
            .min_by(|a, b| {
                a["value"]
                    .as_f64()
                    .unwrap()
                    .total_cmp(&b["value"].as_f64().unwrap())
            })
            .copied()
    };
    // The lowest loss of all is an infeasible trial's: the constraint decides the best.
    let (feasible, infeasible) = (lowest(true).unwrap(), lowest(false).unwrap());
    assert!(infeasible["value"].as_f64() < feasible["value"].as_f64());
    // The model steers to the bound (x = 0.8, loss 0.04) and mostly keeps it.
    assert!(feasible["value"].as_f64().unwrap() < 0.06, "{feasible}");
    let model_infeasible = trials[5..]
        .iter()
        .filter(|t| !t["infeasible"].is_null())
        .count();
    assert!(model_infeasible <= 5, "{model_infeasible} of 9 infeasible");
    for by in ["observed", "model"] {
        let out = scratch.hptune(&["best", "memory", "--format", "json", "--by", by]);
        assert_success(&out);
        let best: Value = serde_json::from_slice(&out.stdout).unwrap();
        let number = best["number"].as_u64().unwrap();
        let trial = &trials[number as usize];
        assert!(trial["infeasible"].is_null(), "best by {by}: {trial}");
        if by == "observed" {
            assert_eq!(best["number"], feasible["number"]);
        }
    }
    // The dashboard marks the infeasible trials, and its history figure draws them apart,
    // its best-so-far line never through them.
    let infeasible_succeeded = succeeded
        .iter()
        .filter(|t| !t["infeasible"].is_null())
        .count();
    let dashboard = Dashboard::start(scratch, &[]);
    let changes = dashboard.get("/api/studies/memory/changes?since=0", &[]);
    assert_eq!(changes.status, 200, "{}", changes.body);
    let shown: Value = serde_json::from_str(&changes.body).unwrap();
    let rows = shown["trials"].as_array().unwrap();
    assert_eq!(rows.len(), trials.len());
    for row in rows {
        let trial = &trials[row["number"].as_u64().unwrap() as usize];
        assert_eq!(row["infeasible"], trial["infeasible"], "{row}");
    }
    let history = dashboard.get("/studies/memory/figures/history", &[]);
    assert_eq!(history.status, 200, "{}", history.body);
    assert_eq!(
        history.body.matches("class=\"pt infeasible\"").count(),
        infeasible_succeeded,
        "{}",
        history.body
    );
    // The line ends at the height of the best feasible trial's point.
    let line_end = history
        .body
        .split("class=\"best-line\" d=\"")
        .nth(1)
        .and_then(|d| d.split('"').next()?.rsplit(',').next())
        .expect("a best-so-far line");
    let best_point = format!(
        "class=\"pt ok\" data-trial=\"{}\" cx=\"",
        feasible["number"]
    );
    let best_y = history
        .body
        .split(&best_point)
        .nth(1)
        .and_then(|rest| rest.split("cy=\"").nth(1)?.split('"').next())
        .expect("the best feasible trial's point");
    assert_eq!(line_end, best_y, "{}", history.body);
    let listing = stdout(&scratch.hptune(&["trials", "memory"]));
    assert!(listing.contains("succeeded (infeasible)"), "{listing}");
    assert!(listing.contains("breaks peak_memory_gb <= 16"), "{listing}");
    assert!(listing.contains("failed (infeasible)"), "{listing}");
    let studies = stdout(&scratch.hptune(&["studies"]));
    let best_value = feasible["value"].as_f64().unwrap();
    let shown = format!("{}", best_value);
    assert!(
        studies.contains(&shown[..shown.len().min(6)]),
        "{studies} lacks {shown}"
    );
}

#[test]
fn constrained_study_on_sqlite() {
    constrained_study_never_names_an_infeasible_trial_best(&Scratch::new());
}

#[test]
fn constrained_study_on_postgres() {
    if let Some(scratch) = Scratch::on_postgres_without("memory") {
        constrained_study_never_names_an_infeasible_trial_best(&scratch);
    }
}

#[test]
fn a_bad_constraint_is_refused_with_exit_2_naming_its_field() {
    let scratch = Scratch::new();
    for (extra, expected) in [
        (
            "constraints: [{metric: peak_memory_gb}]",
            "constraints[0]: needs a bound",
        ),
        (
            "constraints: [{metric: peak_memory_gb, max: 16, min: 1}]",
            "constraints[0]: has both",
        ),
        (
            "constraints: [{metric: m, max: 1}, {metric: '', min: 0}]",
            "constraints[1].metric: must not be empty",
        ),
        ("failed_as_infeasible: 3", "failed_as_infeasible"),
    ] {
        let file = scratch.study("bad.yaml", &study("w.sh", extra));
        let out = scratch.hptune(&["run", file.to_str().unwrap()]);
        assert_exit_says(&out, 2, expected);
        assert!(
            stderr_names_the_file(&out),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn stderr_names_the_file(out: &std::process::Output) -> bool {
    String::from_utf8_lossy(&out.stderr).contains("bad.yaml:")
}
