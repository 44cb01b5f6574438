//! `hptune studies`, `trials` and `best`: what [`hptune::ops`] reads, printed.

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use serde_json::json;

use hptune::ops::{self, Best, BestBy, Resumption, Resumptions};
use hptune::storage::{StorageUrl, StudyRecord, TrialRecord, TrialState};
use hptune::study::space::ParamValue;

use super::table;
use super::{BestFormat, Failure, TrialsFormat};

/// Longest error shown in a table cell; JSON and CSV carry it whole.
const ERROR_CELL: usize = 100;

/// Prints every study with its trials by state and best value.
pub async fn studies(url: &StorageUrl) -> Result<ExitCode, Failure> {
    let summaries = ops::studies(url).await?;
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
    url: &StorageUrl,
    study: &str,
    best: Option<usize>,
    state: Option<TrialState>,
    format: TrialsFormat,
) -> Result<ExitCode, Failure> {
    let (record, trials, resumed) = ops::trials(url, study, best, state).await?;
    print_trials(&trials, &record, &resumed, format)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the folder of the best trial's model.
pub async fn best_artifact(url: &StorageUrl, study: &str, by: BestBy) -> Result<ExitCode, Failure> {
    let dir = ops::best_artifact(url, study, by).await?;
    output(&format!("{dir}\n"))?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the best trial's parameters: the best observed, or the one the model believes best.
pub async fn best(
    url: &StorageUrl,
    study: &str,
    format: BestFormat,
    by: BestBy,
) -> Result<ExitCode, Failure> {
    let Best {
        study: record,
        trial,
        model_value,
    } = ops::best(url, study, by).await?;
    match format {
        BestFormat::Flags => output(&format!("{}\n", flags(&record, &trial)?))?,
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

/// The trial's parameters as the worker's flags (`--id=value`), in the space's order.
pub fn flags(study: &StudyRecord, trial: &TrialRecord) -> Result<String, Failure> {
    let space = study.space()?;
    let flags: Vec<String> = space
        .parameters()
        .iter()
        .filter_map(|p| trial.params.get(&p.id).map(|v| format!("--{}={v}", p.id)))
        .collect();
    Ok(flags.join(" "))
}

/// Prints trials in a format.
pub fn print_trials(
    trials: &[TrialRecord],
    study: &StudyRecord,
    resumed: &Resumptions,
    format: TrialsFormat,
) -> Result<(), Failure> {
    let space = study.space()?;
    let ids: Vec<&str> = space.parameters().iter().map(|p| p.id.as_str()).collect();
    let value = |t: &TrialRecord| t.value.map(|v| v.to_string()).unwrap_or_default();
    let param =
        |t: &TrialRecord, id: &str| t.params.get(id).map(|v| v.to_string()).unwrap_or_default();
    // The devices of a study's trials, shown only for a study with GPUs; then the attempts
    // that resumed from a checkpoint, shown only when some did.
    let gpus = trials.iter().any(|t| !t.gpus.is_empty());
    let with_extra_cells = |row: &mut Vec<String>, t: &TrialRecord| {
        if gpus {
            row.push(t.placement());
        }
        if !resumed.is_empty() {
            row.push(resumed_cell(resumed.get(&t.number)));
        }
    };
    let extra_headers = || {
        let mut header = Vec::new();
        if gpus {
            header.push("gpus");
        }
        if !resumed.is_empty() {
            header.push("resumed");
        }
        header
    };
    match format {
        TrialsFormat::Json => {
            let mut list = json!(trials);
            for (trial, value) in trials.iter().zip(list.as_array_mut().into_iter().flatten()) {
                if let Some(attempts) = resumed.get(&trial.number) {
                    value["resumed"] = json!(attempts);
                }
            }
            output(&format!(
                "{}\n",
                serde_json::to_string_pretty(&list).expect("JSON serialises")
            ))?;
        }
        TrialsFormat::Csv => {
            let mut header = vec!["number", "state", study.metric.as_str()];
            header.extend(&ids);
            header.extend(["error", "started_at", "finished_at"]);
            header.extend(extra_headers());
            let rows: Vec<Vec<String>> = trials
                .iter()
                .map(|t| {
                    let mut row = vec![t.number.to_string(), state_cell(t), value(t)];
                    row.extend(ids.iter().map(|id| param(t, id)));
                    row.push(error_cell(t));
                    row.push(t.started_at.clone().unwrap_or_default());
                    row.push(t.finished_at.clone().unwrap_or_default());
                    with_extra_cells(&mut row, t);
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
                    with_extra_cells(&mut row, t);
                    row
                })
                .collect();
            let mut header = vec!["trial", "state", &study.metric, "parameters", "error"];
            header.extend(extra_headers());
            output(&table::render(&header, &rows))?;
        }
    }
    Ok(())
}

/// A trial's resumed attempts as listed: "attempt 2 at step 41".
fn resumed_cell(attempts: Option<&Vec<Resumption>>) -> String {
    let described: Vec<String> = attempts
        .into_iter()
        .flatten()
        .map(|r| match r.at_step {
            Some(step) => format!("attempt {} at step {step}", r.attempt),
            None => format!("attempt {}", r.attempt),
        })
        .collect();
    described.join("; ")
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
pub fn output(text: &str) -> Result<(), Failure> {
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
