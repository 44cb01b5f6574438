//! The commands that read and extend a study: `trial`, `trials`, `best`, `studies`.

use crate::common;

use common::{Scratch, assert_success, expected_loss, stderr, stdout};
use serde_json::Value;

const STUDY: &str = r#"
name: quad
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -2.0, max: 2.0}
  - {id: opt, type: categorical, values: [adam, sgd]}
  - {id: momentum, type: double, min: 0.5, max: 0.9, when: {opt: [sgd]}}
algorithm: random
max_trial_count: 6
parallel_trial_count: 2
seed: 3
trial:
  command: [{worker}]
"#;

fn ran_study() -> (Scratch, String) {
    let scratch = Scratch::new();
    let study = scratch.study("study.yaml", STUDY);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    (scratch, study.display().to_string())
}

fn sorted_values(trials: &[Value]) -> Vec<f64> {
    let mut values: Vec<f64> = trials.iter().filter_map(|t| t["value"].as_f64()).collect();
    values.sort_by(f64::total_cmp);
    values
}

#[test]
fn trials_best_n_lists_the_best_first_in_every_format() {
    let (scratch, _) = ran_study();
    let all = scratch.trials("quad");
    let best = sorted_values(&all);

    let out = scratch.hptune(&["trials", "quad", "--best", "2", "--format", "json"]);
    assert_success(&out);
    let top: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let top_values: Vec<f64> = top.iter().map(|t| t["value"].as_f64().unwrap()).collect();
    assert_eq!(top_values, best[..2]);

    let csv = stdout(&scratch.hptune(&["trials", "quad", "--best", "2", "--format", "csv"]));
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("number,state,loss,x,opt,momentum,error,started_at,finished_at")
    );
    let first: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(first[1], "succeeded");
    assert_eq!(first[2].parse::<f64>().unwrap(), best[0]);
    assert_eq!(lines.count(), 1);

    let table = stdout(&scratch.hptune(&["trials", "quad"]));
    assert!(table.starts_with("trial  state"), "{table}");
    assert_eq!(table.lines().count(), 7, "{table}");

    let failed = scratch.hptune(&["trials", "quad", "--state", "failed", "--format", "json"]);
    assert_eq!(stdout(&failed).trim(), "[]");
}

#[test]
fn best_prints_flags_ready_to_paste_and_json() {
    let (scratch, _) = ran_study();
    let all = scratch.trials("quad");
    let best_value = sorted_values(&all)[0];
    let best = all
        .iter()
        .find(|t| t["value"].as_f64() == Some(best_value))
        .unwrap();

    let json: Value =
        serde_json::from_slice(&scratch.hptune(&["best", "quad", "--format", "json"]).stdout)
            .unwrap();
    assert_eq!(json["number"], best["number"]);
    assert_eq!(json["value"].as_f64(), Some(best_value));
    assert_eq!(json["params"], best["params"]);

    let flags = stdout(&scratch.hptune(&["best", "quad"]));
    let x = best["params"]["x"].as_f64().unwrap();
    let opt = best["params"]["opt"].as_str().unwrap();
    assert!(
        flags.starts_with(&format!("--x={x} --opt={opt}")),
        "{flags}"
    );
    // Pasted after the worker, the flags reproduce the value.
    let rerun = std::process::Command::new(common::worker())
        .args(flags.split_whitespace())
        .output()
        .unwrap();
    assert!(stdout(&rerun).contains(&format!("loss={}", expected_loss(best))));
}

#[test]
fn best_by_model_names_a_succeeded_trial_with_the_model_value() {
    let (scratch, _) = ran_study();
    let all = scratch.trials("quad");
    let json: Value = serde_json::from_slice(
        &scratch
            .hptune(&["best", "quad", "--by", "model", "--format", "json"])
            .stdout,
    )
    .unwrap();
    let trial = all
        .iter()
        .find(|t| t["number"] == json["number"])
        .expect("a trial of the study");
    assert_eq!(trial["state"], "succeeded");
    assert_eq!(json["params"], trial["params"]);
    assert!(json["model_value"].as_f64().unwrap().is_finite(), "{json}");
    let observed: Value = serde_json::from_slice(
        &scratch
            .hptune(&["best", "quad", "--by", "observed", "--format", "json"])
            .stdout,
    )
    .unwrap();
    assert_eq!(observed["model_value"], Value::Null);
}

#[test]
fn a_trial_by_hand_is_checked_against_the_space_and_recorded() {
    let (scratch, study) = ran_study();
    let out = scratch.hptune(&[
        "trial",
        &study,
        "--param",
        "x=0.5",
        "--param",
        "opt=sgd",
        "--param",
        "momentum=0.6",
    ]);
    assert_success(&out);
    assert!(stdout(&out).contains("succeeded"), "{}", stdout(&out));
    let trials = scratch.trials("quad");
    assert_eq!(trials.len(), 7);
    let by_hand = &trials[6];
    assert_eq!(by_hand["number"], 6);
    assert_eq!(by_hand["params"]["momentum"].as_f64(), Some(0.6));
    assert_eq!(by_hand["value"].as_f64(), Some(0.5 * 0.5 + 0.6 * 0.6));

    for (args, expected) in [
        (
            vec!["--param", "x=5", "--param", "opt=adam"],
            "parameter 'x': 5 is not a number in [-2, 2]",
        ),
        (
            vec!["--param", "x=1e300", "--param", "opt=adam"],
            "parameter 'x': 1e300 is not a number in [-2, 2]",
        ),
        (
            vec!["--param", "x=0", "--param", "opt=sgd"],
            "parameter 'momentum' is missing",
        ),
        (
            vec![
                "--param",
                "x=0",
                "--param",
                "opt=adam",
                "--param",
                "momentum=0.6",
            ],
            "parameter 'momentum' is inactive",
        ),
        (
            vec!["--param", "x=0", "--param", "opt=rmsprop"],
            "'rmsprop' is not one of adam, sgd",
        ),
        (
            vec!["--param", "y=1"],
            "unknown parameter 'y' (the study defines: x, opt, momentum)",
        ),
        (vec!["--param", "x"], "'x' is not ID=VALUE"),
    ] {
        let mut full = vec!["trial", study.as_str()];
        full.extend(args);
        let out = scratch.hptune(&full);
        assert_eq!(out.status.code(), Some(2), "{full:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(expected),
            "{full:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(
        scratch.trials("quad").len(),
        7,
        "refused trials are not recorded"
    );
}

#[test]
fn a_failed_trial_by_hand_exits_1() {
    let (scratch, _) = ran_study();
    let failing = scratch.study(
        "failing.yaml",
        &STUDY.replace(
            "command: [{worker}]",
            "command: [{worker}]\n  env: {MODE: fail}",
        ),
    );
    let out = scratch.hptune(&[
        "trial",
        failing.to_str().unwrap(),
        "--param",
        "x=1",
        "--param",
        "opt=adam",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("exited with code 3"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn studies_lists_each_study_with_its_counts_and_best_value() {
    let (scratch, study) = ran_study();
    let out = scratch.hptune(&["studies"]);
    assert_success(&out);
    let text = stdout(&out);
    let line = text.lines().find(|l| l.starts_with("quad")).expect(&text);
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cells[1..7], ["minimize", "loss", "6", "0", "0", "0"]);
    let best = sorted_values(&scratch.trials("quad"))[0];
    let shown: f64 = cells[7].parse().unwrap();
    assert!(
        (shown - best).abs() <= 1e-5 * best.abs(),
        "{shown} vs {best}"
    );
    // A study file may stand for its name.
    assert_eq!(scratch.trials(&study).len(), 6);
}

#[test]
fn reading_an_unknown_study_or_a_missing_database_is_bad_input() {
    let (scratch, _) = ran_study();
    let out = scratch.hptune(&["trials", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no study named 'nope' in this database (studies: quad)"),
        "{}",
        stderr(&out)
    );
    let empty = Scratch::new();
    let out = empty.hptune(&["studies"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no database at"), "{}", stderr(&out));
    assert!(!empty.path("hptune.db").exists());
    let out = empty.hptune(&["--storage", "mysql://db/x", "studies"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_reader_that_stops_early_ends_the_listing_quietly() {
    // `hptune trials STUDY | head -1`: the pipe closes before everything is written.
    let (scratch, _) = ran_study();
    for args in [
        &["trials", "quad", "--format", "json"][..],
        &["trials", "quad", "--format", "csv"],
        &["trials", "quad"],
        &["studies"],
        &["best", "quad", "--format", "json"],
    ] {
        let mut child = scratch
            .command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() && !stderr(&out).contains("panicked"),
            "{args:?}: {:?}\n{}",
            out.status,
            stderr(&out)
        );
    }
}
