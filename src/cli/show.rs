//! `hptune studies`, `trials` and `best`: read the database and print.

use std::io::{ErrorKind, Write};
use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use hptune::controller::is_remote;
use hptune::sampler::bayes::believed_best;
use hptune::spec;
use hptune::storage::{Storage, StudyRecord, TrialRecord, TrialState, best_first, best_trial};
use hptune::study::space::{ParamValue, Space};

use super::table;
use super::{BestBy, BestFormat, Failure, TrialsFormat};

/// Longest error shown in a table cell; JSON and CSV carry it whole.
const ERROR_CELL: usize = 100;

/// Prints every study with its trials by state and best value.
pub async fn studies(storage: &Storage) -> Result<ExitCode, Failure> {
    let summaries = storage.list_studies().await?;
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            let mut row = vec![
                s.study.name.clone(),
                format!("{} {}", s.study.goal.as_str(), s.study.metric),
            ];
            row.extend(
                [
                    TrialState::Succeeded,
                    TrialState::Failed,
                    TrialState::Stopped,
                    TrialState::Running,
                ]
                .iter()
                .map(|state| s.count(*state).to_string()),
            );
            row.push(s.best.map(table::short).unwrap_or_default());
            row
        })
        .collect();
    output(&table::render(
        &[
            "study",
            "objective",
            "succeeded",
            "failed",
            "stopped",
            "running",
            "best",
        ],
        &rows,
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the trials of a study, filtered.
pub async fn trials(
    storage: &Storage,
    study: &str,
    best: Option<usize>,
    state: Option<TrialState>,
    format: TrialsFormat,
) -> Result<ExitCode, Failure> {
    let record = find(storage, study).await?;
    let mut trials = storage.trials(record.id).await?;
    if let Some(state) = state {
        trials.retain(|t| t.state == state);
    }
    if let Some(n) = best {
        trials = best_first(&trials, record.goal, n);
    }
    print_trials(&trials, &record, format)?;
    Ok(ExitCode::SUCCESS)
}

/// The best trial of a study, by what was observed or by what the model believes, with the
/// model's value of it in the second case; a study without a succeeded trial is a failure.
async fn find_best(
    storage: &Storage,
    study: &str,
    by: BestBy,
) -> Result<(StudyRecord, TrialRecord, Option<f64>), Failure> {
    let record = find(storage, study).await?;
    let trials = storage.trials(record.id).await?;
    let (trial, model_value) = match by {
        BestBy::Observed => (best_trial(&trials, record.goal), None),
        BestBy::Model => {
            let history: Vec<_> = trials.iter().filter_map(TrialRecord::observation).collect();
            let believed =
                believed_best(&stored_space(&record)?, record.goal, &history).map_err(|e| {
                    Failure::Other(format!(
                        "the model of study '{}' cannot be fitted: {e}",
                        record.name
                    ))
                })?;
            match believed {
                Some(b) => (trials.iter().find(|t| t.number == b.number), Some(b.value)),
                None => (None, None),
            }
        }
    };
    match trial {
        Some(trial) => Ok((record, trial.clone(), model_value)),
        None => Err(Failure::Other(format!(
            "study '{}' has no succeeded feasible trial yet",
            record.name
        ))),
    }
}

/// Prints the folder of the best trial's model.
pub async fn best_artifact(
    storage: &Storage,
    study: &str,
    by: BestBy,
) -> Result<ExitCode, Failure> {
    let (record, trial, _) = find_best(storage, study, by).await?;
    let number = trial.number;
    let Some(dir) = trial.artifact_dir else {
        return Err(Failure::Other(format!(
            "study '{}': the best trial, {number}, has no model recorded (it ran without one: a Vertex AI study without base_output_dir, a Kubernetes one without artifacts_volume, or an hptune before model folders)",
            record.name
        )));
    };
    if let Some(at) = trial.artifact_removed_at {
        return Err(Failure::Other(format!(
            "study '{}': the model of the best trial, {number}, was removed at {at} ({dir})",
            record.name
        )));
    }
    if !is_remote(&dir) && !Path::new(&dir).is_dir() {
        return Err(Failure::Other(format!(
            "study '{}': the model of the best trial, {number}, is missing: {dir} is not a folder of this machine (removed or moved outside hptune, or written on another machine)",
            record.name
        )));
    }
    output(&format!("{dir}\n"))?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the best trial's parameters: the best observed, or the one the model believes best.
pub async fn best(
    storage: &Storage,
    study: &str,
    format: BestFormat,
    by: BestBy,
) -> Result<ExitCode, Failure> {
    let (record, trial, model_value) = find_best(storage, study, by).await?;
    match format {
        BestFormat::Flags => {
            let space = stored_space(&record)?;
            let flags: Vec<String> = space
                .parameters()
                .iter()
                .filter_map(|p| trial.params.get(&p.id).map(|v| format!("--{}={v}", p.id)))
                .collect();
            output(&format!("{}\n", flags.join(" ")))?;
        }
        BestFormat::Json => {
            let mut out = json!({
                "study": record.name,
                "number": trial.number,
                "metric": record.metric,
                "value": trial.value,
                "params": trial.params,
                "artifact": trial.artifact_removed_at.is_none().then_some(&trial.artifact_dir),
            });
            if let Some(v) = model_value {
                out["model_value"] = json!(v);
            }
            output(&format!(
                "{}\n",
                serde_json::to_string_pretty(&out).expect("JSON serialises")
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints trials in a format.
pub fn print_trials(
    trials: &[TrialRecord],
    study: &StudyRecord,
    format: TrialsFormat,
) -> Result<(), Failure> {
    let space = stored_space(study)?;
    let ids: Vec<&str> = space.parameters().iter().map(|p| p.id.as_str()).collect();
    let value = |t: &TrialRecord| t.value.map(|v| v.to_string()).unwrap_or_default();
    let param =
        |t: &TrialRecord, id: &str| t.params.get(id).map(|v| v.to_string()).unwrap_or_default();
    // The devices of a study's trials, shown only for a study with GPUs.
    let gpus = trials.iter().any(|t| !t.gpus.is_empty());
    let with_gpus = |row: &mut Vec<String>, t: &TrialRecord| {
        if gpus {
            row.push(t.gpus.join(","));
        }
    };
    match format {
        TrialsFormat::Json => {
            output(&format!(
                "{}\n",
                serde_json::to_string_pretty(trials).expect("JSON serialises")
            ))?;
        }
        TrialsFormat::Csv => {
            let mut header = vec!["number", "state", study.metric.as_str()];
            header.extend(&ids);
            header.extend(["error", "started_at", "finished_at"]);
            if gpus {
                header.push("gpus");
            }
            let rows: Vec<Vec<String>> = trials
                .iter()
                .map(|t| {
                    let mut row = vec![t.number.to_string(), state_cell(t), value(t)];
                    row.extend(ids.iter().map(|id| param(t, id)));
                    row.push(error_cell(t));
                    row.push(t.started_at.clone().unwrap_or_default());
                    row.push(t.finished_at.clone().unwrap_or_default());
                    with_gpus(&mut row, t);
                    row
                })
                .collect();
            output(&table::csv(&header, &rows))?;
        }
        TrialsFormat::Table => {
            let rows: Vec<Vec<String>> = trials
                .iter()
                .map(|t| {
                    let params: Vec<String> = ids
                        .iter()
                        .filter_map(|id| {
                            t.params.get(*id).map(|v| match v {
                                ParamValue::Float(x) => format!("{id}={}", table::short(*x)),
                                other => format!("{id}={other}"),
                            })
                        })
                        .collect();
                    let mut row = vec![
                        t.number.to_string(),
                        state_cell(t),
                        t.value.map(table::short).unwrap_or_default(),
                        params.join(" "),
                        shorten(&error_cell(t)),
                    ];
                    with_gpus(&mut row, t);
                    row
                })
                .collect();
            let mut header = vec!["trial", "state", &study.metric, "parameters", "error"];
            if gpus {
                header.push("gpus");
            }
            output(&table::render(&header, &rows))?;
        }
    }
    Ok(())
}

/// A trial's state as listed: `infeasible` added where it broke a constraint.
fn state_cell(trial: &TrialRecord) -> String {
    match trial.infeasible {
        Some(_) => format!("{} (infeasible)", trial.state.as_str()),
        None => trial.state.as_str().into(),
    }
}

/// A trial's error as listed, with why it is infeasible.
fn error_cell(trial: &TrialRecord) -> String {
    [trial.infeasible.as_deref(), trial.error.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
}

/// Writes a listing to standard output. A reader that has seen enough and closed the pipe
/// (`hptune trials STUDY | head`) ends it quietly, as the shell's own tools do.
fn output(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(Failure::Other(format!(
            "cannot write to standard output: {e}"
        ))),
        _ => Ok(()),
    }
}

fn shorten(text: &str) -> String {
    if text.chars().count() <= ERROR_CELL {
        return text.to_string();
    }
    let cut: String = text.chars().take(ERROR_CELL - 1).collect();
    format!("{cut}…")
}

/// The space stored with the study, as its last run wrote it.
pub(super) fn stored_space(study: &StudyRecord) -> Result<Space, Failure> {
    serde_json::from_str(&study.space).map_err(|e| {
        Failure::Other(format!(
            "the stored search space of study '{}' does not read back: {e}",
            study.name
        ))
    })
}

/// Whether `path` names a study file rather than a study.
pub(super) fn is_study_file(path: &Path) -> bool {
    path.is_file() && path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// The study named `name`, or the study of the study file `name`.
pub(super) async fn find(storage: &Storage, name: &str) -> Result<StudyRecord, Failure> {
    let path = Path::new(name);
    let name = if is_study_file(path) {
        spec::load_name(path)?
    } else {
        name.to_string()
    };
    if let Some(record) = storage.find_study(&name).await? {
        return Ok(record);
    }
    let known: Vec<String> = storage
        .list_studies()
        .await?
        .into_iter()
        .map(|s| s.study.name)
        .collect();
    Err(Failure::BadInput(format!(
        "no study named '{name}' in this database (studies: {})",
        if known.is_empty() {
            "none".into()
        } else {
            known.join(", ")
        }
    )))
}
