//! The trials' model folders, end to end: each attempt saves into its own folder
//! (`HPTUNE_OUTPUT_DIR`, `AIP_MODEL_DIR`), `artifacts.keep_best` removes the models of the
//! trials outside the best (never a pinned one), the rows say so, `hptune best --artifact`
//! names the best model, and `hptune-trainer serve` on it answers as `predict` does.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::{Scratch, Serving, assert_success, stdout, test_postgres, tiny, trainer, unique_name};
use serde_json::{Value, json};

/// A worker that saves a "model" (the folder it was given, as each variable names it) and
/// then reports as the quadratic test worker.
const SAVING_WORKER: &str = r#"[sh, -c, 'printf "%s %s" "$HPTUNE_OUTPUT_DIR" "$AIP_MODEL_DIR" > "$HPTUNE_OUTPUT_DIR/model.txt" && exec "$0" "$@"', "{worker}"]"#;

fn saving_study(name: &str) -> String {
    format!(
        "name: {name}\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n  - {{id: x, type: double, min: -2, max: 2}}\nalgorithm: random\nseed: 3\nmax_trial_count: 5\nparallel_trial_count: 2\nartifacts: {{keep_best: 1}}\ntrial:\n  command: {SAVING_WORKER}\n"
    )
}

/// The trials' rows as `hptune trials --format json` prints them, by number.
fn by_number(scratch: &Scratch, study: &str) -> Vec<Value> {
    let mut trials = scratch.trials(study);
    trials.sort_by_key(|t| t["number"].as_u64());
    trials
}

fn pinned_trial_and_the_best_keep_their_models(scratch: &Scratch) {
    let name = unique_name("keep");
    let study = scratch.study("keep.yaml", &saving_study(&name));
    let models = scratch.path("models");
    let out = scratch.hptune(&[
        "run",
        study.to_str().unwrap(),
        "--artifacts-dir",
        models.to_str().unwrap(),
        "--keep",
        "0",
    ]);
    assert_success(&out);
    let trials = by_number(scratch, &name);
    assert_eq!(trials.len(), 5);
    // The best trial, as `hptune best` names it.
    let printed = scratch.hptune(&["best", &name, "--format", "json"]);
    assert_success(&printed);
    let best_json: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let best = best_json["number"].as_u64().unwrap();
    for trial in &trials {
        let number = trial["number"].as_u64().unwrap();
        let dir = models.join(&name).join(format!("trial-{number}"));
        assert_eq!(
            trial["artifact_dir"],
            json!(dir.display().to_string()),
            "{trial}"
        );
        let kept = number == best || number == 0;
        if kept {
            assert_eq!(trial["artifact_removed_at"], Value::Null, "{trial}");
            // Both variables named the attempt's own folder.
            let saved = std::fs::read_to_string(dir.join("model.txt")).unwrap();
            assert_eq!(saved, format!("{0} {0}", dir.display()));
        } else {
            assert!(
                trial["artifact_removed_at"].is_string(),
                "the row says it was removed: {trial}"
            );
            assert!(!dir.exists(), "{} is removed", dir.display());
        }
    }
    // The attempts' rows keep the folder and its removal too.
    let attempts = scratch.query(&format!(
        "SELECT a.artifact_dir, a.artifact_removed_at FROM attempts a JOIN trials t ON t.id = a.trial_id
         JOIN studies s ON s.id = t.study_id WHERE s.name = '{name}' ORDER BY t.number"
    ));
    assert_eq!(attempts.len(), 5);
    assert_eq!(
        attempts.iter().filter(|row| row[1].is_null()).count(),
        if best == 0 { 1 } else { 2 }
    );
    let printed = scratch.hptune(&["best", &name, "--artifact"]);
    assert_success(&printed);
    let expected = models.join(&name).join(format!("trial-{best}"));
    assert_eq!(stdout(&printed).trim(), expected.display().to_string());
    assert_eq!(best_json["artifact"], json!(expected.display().to_string()));
}

#[test]
fn keep_best_removes_the_other_models_and_spares_the_best_and_the_pinned() {
    pinned_trial_and_the_best_keep_their_models(&Scratch::new());
}

#[test]
fn keep_best_on_postgres() {
    let Some(url) = test_postgres() else { return };
    pinned_trial_and_the_best_keep_their_models(&Scratch::on_postgres(&url));
}

/// Pins are kept with the study: the pin given to one run protects its trial's model in the
/// next run, which names none, and a pin given after the fact, to a run of a study whose
/// budget is spent, protects a trial that a later run creates; a pin of a model removed
/// already says so.
fn pins_outlive_their_run(scratch: &Scratch) {
    let name = unique_name("pins");
    let models = scratch.path("models");
    let run = |budget: u64, keep: Option<&str>| {
        let text = saving_study(&name)
            .replace("max_trial_count: 5", &format!("max_trial_count: {budget}"));
        let study = scratch.study("pins.yaml", &text);
        let mut args = vec![
            "run",
            study.to_str().unwrap(),
            "--artifacts-dir",
            models.to_str().unwrap(),
        ];
        args.extend(keep.map(|k| ["--keep", k]).into_iter().flatten());
        scratch.hptune(&args)
    };
    assert_success(&run(3, Some("0")));
    let removed = by_number(scratch, &name)
        .into_iter()
        .find(|t| t["artifact_removed_at"].is_string())
        .expect("keep_best 1 removed a model of the first 3 trials");
    let late = removed["number"].as_u64().unwrap().to_string();
    // After the fact: the budget is spent, so the run records the pins and ends.
    let out = run(3, Some(&format!("{late},4")));
    assert_success(&out);
    let warning = format!("trial {late}: pinned, but its model");
    assert!(
        common::stderr(&out).contains(&warning),
        "{}",
        common::stderr(&out)
    );
    // Resumed with a larger budget and no pin: trials 0 and 4 keep their models.
    assert_success(&run(6, None));
    let trials = by_number(scratch, &name);
    assert_eq!(trials.len(), 6);
    let printed = scratch.hptune(&["best", &name, "--format", "json"]);
    assert_success(&printed);
    let best = serde_json::from_slice::<Value>(&printed.stdout).unwrap()["number"]
        .as_u64()
        .unwrap();
    assert!(![0, 4].contains(&best), "the pins must matter: {best}");
    for trial in &trials {
        let number = trial["number"].as_u64().unwrap();
        let dir = models.join(&name).join(format!("trial-{number}"));
        match [0, 4, best].contains(&number) {
            true => assert!(dir.join("model.txt").is_file(), "{trial}"),
            false => assert!(
                !dir.exists() && trial["artifact_removed_at"].is_string(),
                "{trial}"
            ),
        }
    }
    let pinned = scratch.query(&format!(
        "SELECT p.number FROM pinned_models p JOIN studies s ON s.id = p.study_id
         WHERE s.name = '{name}' ORDER BY p.number"
    ));
    let late: u64 = late.parse().unwrap();
    assert_eq!(pinned, [[json!(0)], [json!(late)], [json!(4)]]);
}

#[test]
fn pins_are_kept_with_the_study_in_sqlite_and_postgres() {
    pins_outlive_their_run(&Scratch::new());
    if let Some(url) = test_postgres() {
        pins_outlive_their_run(&Scratch::on_postgres(&url));
    }
}

#[test]
fn best_artifact_says_why_when_there_is_no_model() {
    let scratch = Scratch::new();
    let name = unique_name("gone");
    // keep_best 1 and every trial but one removed: the best's model stays; a study whose
    // best trial's model was removed by hand in the rows says so.
    let study = scratch.study("gone.yaml", &saving_study(&name));
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    // Removed outside hptune: the rows say it is there, the folder is not.
    let printed = scratch.hptune(&["best", &name, "--artifact"]);
    assert_success(&printed);
    let best = stdout(&printed).trim().to_string();
    std::fs::remove_dir_all(&best).unwrap();
    let out = scratch.hptune(&["best", &name, "--artifact"]);
    let message = common::assert_exit_says(&out, 1, "the model of the best trial");
    assert!(
        message.contains(&format!("is missing: {best} is not a folder")),
        "{message}"
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    scratch.execute("UPDATE trials SET artifact_removed_at = '2026-01-01T00:00:00Z'");
    let out = scratch.hptune(&["best", &name, "--artifact"]);
    let message = common::assert_exit_says(&out, 1, "was removed at 2026-01-01T00:00:00Z");
    assert!(message.contains("the model of the best trial"), "{message}");
    // The default folder is beside the logs, in the working directory.
    assert!(scratch.path("hptune-artifacts").join(&name).is_dir());
}

/// A study of `goal` whose worker saves `owner` as its "model", then reports as the quadratic
/// test worker; three trials one at a time, the best one kept.
fn owned_study(name: &str, goal: &str, owner: &str) -> String {
    format!(
        "name: {name}\nobjective: {{metric: loss, goal: {goal}}}\nparameters:\n  - {{id: x, type: double, min: -2, max: 2}}\nalgorithm: random\nseed: 3\nmax_trial_count: 3\nartifacts: {{keep_best: 1}}\ntrial:\n  command: [sh, -c, 'printf %s \"$OWNER\" > \"$HPTUNE_OUTPUT_DIR/model.txt\" && exec \"$0\" \"$@\"', \"{{worker}}\"]\n  env: {{OWNER: {owner}}}\n"
    )
}

/// Two databases in one folder, each with a study of one name (`hptune.db` and another, one
/// `hptune-artifacts/<study>/`): the second study never writes into the first's model folders
/// nor removes them, its trials saying why they cannot have them, and the first's best model
/// stays where `best --artifact` says.
#[test]
fn a_study_of_another_database_never_writes_into_nor_removes_a_models_folder() {
    let scratch = Scratch::new();
    let name = unique_name("twin");
    let first = scratch.study("first.yaml", &owned_study(&name, "minimize", "first"));
    assert_success(&scratch.hptune(&["run", first.to_str().unwrap()]));
    let printed = scratch.hptune(&["best", &name, "--artifact"]);
    assert_success(&printed);
    let best = PathBuf::from(stdout(&printed).trim());
    assert_eq!(
        std::fs::read_to_string(best.join("model.txt")).unwrap(),
        "first"
    );

    // The opposite goal: its best would be the first's worst, and the first's best its own
    // to remove.
    let second = scratch.study("second.yaml", &owned_study(&name, "maximize", "second"));
    let other_database = format!("sqlite://{}", scratch.path("other.db").display());
    let in_other = |args: &[&str]| {
        scratch
            .command(args)
            .env("HPTUNE_STORAGE", &other_database)
            .output()
            .unwrap()
    };
    let run = in_other(&["run", second.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(best.join("model.txt"))
            .ok()
            .as_deref(),
        Some("first"),
        "the first study's best model is its own and still there"
    );
    // The trial whose folder the first study kept fails, saying whose the folder is; the
    // others' folders were removed by the first study's keep_best, so they make their own.
    let listed = in_other(&["trials", &name, "--format", "json"]);
    assert_success(&listed);
    let trials: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(trials.len(), 3, "{trials:?}");
    let best_dir = json!(best.display().to_string());
    for trial in &trials {
        if trial["artifact_dir"] != best_dir {
            assert_eq!(trial["state"], "succeeded", "{trial}");
            continue;
        }
        assert_eq!(trial["state"], "failed", "{trial}");
        let error = trial["error"].as_str().unwrap();
        assert!(
            error.contains("exists and was not created by this attempt")
                && error.contains(&format!("of study '{name}' (id 1, created")),
            "{error}"
        );
    }
    // Its keep_best leaves the folder of its failed trial alone.
    let said = common::stderr(&run);
    assert!(
        said.contains(&format!("left {} alone", best.display())),
        "{said}"
    );
    let printed = scratch.hptune(&["best", &name, "--artifact"]);
    assert_success(&printed);
    assert_eq!(PathBuf::from(stdout(&printed).trim()), best);
}

#[tokio::test]
async fn the_best_of_a_tiny_bert_study_is_kept_and_served_as_predict_classifies() {
    let scratch = Scratch::new();
    let trainer = trainer();
    let name = unique_name("tiny");
    let data = tiny("data");
    let text = format!(
        "name: {name}\nobjective: {{metric: accuracy, goal: maximize}}\nparameters:\n  - {{id: learning_rate, type: double, min: 1.0e-4, max: 1.0e-2, scale: log}}\nalgorithm: random\nseed: 11\nmax_trial_count: 5\nartifacts: {{keep_best: 2}}\ntrial:\n  command: [{}, --model, {}, --train, {}, --eval, {}, --epochs, '1']\n",
        trainer.display(),
        tiny("tiny-bert").display(),
        data.join("train.tsv").display(),
        data.join("eval.tsv").display(),
    );
    let study = scratch.study("tiny.yaml", &text);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    let trials = by_number(&scratch, &name);
    assert_eq!(trials.len(), 5);
    let mut ranked: Vec<&Value> = trials.iter().collect();
    ranked.sort_by(|a, b| {
        b["value"]
            .as_f64()
            .unwrap()
            .total_cmp(&a["value"].as_f64().unwrap())
            .then(a["number"].as_u64().cmp(&b["number"].as_u64()))
    });
    for (rank, trial) in ranked.iter().enumerate() {
        let dir = PathBuf::from(trial["artifact_dir"].as_str().unwrap());
        match rank < 2 {
            true => assert!(
                dir.join("model.safetensors").is_file(),
                "the best two keep their models: {trial}"
            ),
            false => {
                assert!(!dir.exists(), "{trial}");
                assert!(trial["artifact_removed_at"].is_string(), "{trial}");
            }
        }
    }
    let printed = scratch.hptune(&["best", &name, "--artifact"]);
    assert_success(&printed);
    let best = PathBuf::from(stdout(&printed).trim());
    assert_eq!(best.to_str(), ranked[0]["artifact_dir"].as_str());

    let texts = ["desperate not nobody", "cat the weather mat on on weather"];
    let predicted = Command::new(&trainer)
        .args(["predict", "--model-dir", best.to_str().unwrap()])
        .args(texts)
        .output()
        .unwrap();
    assert_success(&predicted);
    let expected: Vec<Value> = serde_json::from_slice(&predicted.stdout).unwrap();

    let mut serve = Command::new(&trainer);
    serve.args(["serve", "--model-dir", best.to_str().unwrap()]);
    let serving = Serving::start(serve).await;
    for route in ["/invocations", "/predict"] {
        let predictions = serving.predictions(route, &texts).await;
        assert_eq!(predictions.len(), expected.len(), "{route}");
        for (got, want) in predictions.iter().zip(&expected) {
            assert_eq!(got["label"], want["label"], "{route}");
            let label = got["label"].as_str().unwrap();
            let want = want["probabilities"][label].as_f64().unwrap();
            assert!(
                (got["score"].as_f64().unwrap() - want).abs() < 1e-5,
                "{route}: {got}"
            );
        }
    }
}
