//! `hptune studies`, `trials` and `best`: what [`hptune::ops`] reads, printed.

use std::collections::BTreeSet;
use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use serde_json::json;

use hptune::ops::{self, Best, BestBy, Chosen, Front, Resumption, Resumptions, TrialList};
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
            let objectives: Vec<String> = s
                .study
                .objectives
                .iter()
                .map(|o| format!("{} {}", o.goal.as_str(), o.metric))
                .collect();
            let mut row = vec![s.study.name.clone(), objectives.join(", ")];
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
    let TrialList {
        study,
        trials,
        front,
        resumed,
    } = ops::trials(url, study, best, state).await?;
    print_trials(&trials, &study, &front, &resumed, format)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the folder of the best trial's model, or of trial `number`.
pub async fn best_artifact(
    url: &StorageUrl,
    study: &str,
    by: BestBy,
    number: Option<u64>,
) -> Result<ExitCode, Failure> {
    let dir = ops::best_artifact(url, study, by, number).await?;
    output(&format!("{dir}\n"))?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the best trial's parameters: the best observed, or the one the model believes best;
/// with several objectives, those of each trial on the Pareto front.
pub async fn best(
    url: &StorageUrl,
    study: &str,
    format: BestFormat,
    by: BestBy,
) -> Result<ExitCode, Failure> {
    let chosen = ops::best(url, study, by).await?;
    let text = match (format, &chosen) {
        (BestFormat::Json, _) => pretty(&best_json(chosen)),
        (BestFormat::Flags, Chosen::Best(best)) => {
            format!("{}\n", flags(&best.study, &best.trial)?)
        }
        (BestFormat::Flags, Chosen::Front(front)) => {
            let lines: Vec<String> = front
                .trials
                .iter()
                .map(|t| flags(&front.study, t))
                .collect::<Result<_, _>>()?;
            format!("{}\n", lines.join("\n"))
        }
    };
    output(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// What `best --format json` prints: the best trial (`number`, `value`, `params`, ...), or
/// for a study of several objectives its Pareto set (the objectives, the reference point, the
/// hypervolume and the trials on the front).
pub fn best_json(chosen: Chosen) -> serde_json::Value {
    let Best {
        study: record,
        trial,
        model_value,
    } = match chosen {
        Chosen::Best(best) => *best,
        Chosen::Front(front) => return front_json(&front),
    };
    let mut out = json!({
        "study": record.name,
        "number": trial.number,
        "metric": record.metric,
        "value": trial.value,
        "params": trial.params,
        "artifact": artifact(&trial),
    });
    if let Some(v) = model_value {
        out["model_value"] = json!(v);
    }
    out
}

/// The Pareto set of a study of several objectives as `best --format json` prints it.
fn front_json(front: &Front) -> serde_json::Value {
    let record = &front.study;
    let trials: Vec<serde_json::Value> = front
        .trials
        .iter()
        .map(|t| {
            json!({
                "number": t.number,
                "values": values_by_metric(record, t),
                "params": t.params,
                "artifact": artifact(t),
            })
        })
        .collect();
    json!({
        "study": record.name,
        "objectives": record.objectives,
        "reference_point": front.reference_point,
        "hypervolume": front.hypervolume,
        "front": trials,
    })
}

/// A trial's model folder as `best --format json` shows it: `null` once removed.
fn artifact(trial: &TrialRecord) -> Option<&String> {
    trial
        .artifact_removed_at
        .is_none()
        .then_some(trial.artifact_dir.as_ref())
        .flatten()
}

/// `value` as indented JSON, with a final newline.
fn pretty(value: &serde_json::Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(value).expect("JSON serialises")
    )
}

/// Each objective's value of `trial` (a study of several objectives), by metric.
fn values_by_metric(study: &StudyRecord, trial: &TrialRecord) -> serde_json::Value {
    study
        .objectives
        .iter()
        .zip(objective_values(study, trial))
        .map(|(o, v)| (o.metric.clone(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// `trial`'s value of each of `study`'s objectives, in order: its `value` with one objective.
fn objective_values(study: &StudyRecord, trial: &TrialRecord) -> Vec<Option<f64>> {
    match study.objectives.len() {
        1 => vec![trial.value],
        n => (0..n)
            .map(|i| trial.objective_values.get(i).copied())
            .collect(),
    }
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

/// Prints trials in a format; with several objectives, each objective's value and whether
/// the trial is on the study's Pareto front (its number in `front`).
pub fn print_trials(
    trials: &[TrialRecord],
    study: &StudyRecord,
    front: &BTreeSet<u64>,
    resumed: &Resumptions,
    format: TrialsFormat,
) -> Result<(), Failure> {
    let space = study.space()?;
    let ids: Vec<&str> = space.parameters().iter().map(|p| p.id.as_str()).collect();
    let metrics: Vec<&str> = study.objectives.iter().map(|o| o.metric.as_str()).collect();
    let several = metrics.len() > 1;
    let param =
        |t: &TrialRecord, id: &str| t.params.get(id).map(|v| v.to_string()).unwrap_or_default();
    // The value cells of a trial, one per objective, each written by `write`; then, with
    // several objectives, whether it is on the front.
    let values = |t: &TrialRecord, write: fn(f64) -> String| {
        let mut cells: Vec<String> = objective_values(study, t)
            .into_iter()
            .map(|v| v.map(write).unwrap_or_default())
            .collect();
        if several {
            cells.push(if front.contains(&t.number) { "yes" } else { "" }.into());
        }
        cells
    };
    let mut value_header = metrics.clone();
    if several {
        value_header.push("front");
    }
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
        TrialsFormat::Json => output(&pretty(&trials_list_json(trials, study, front, resumed)))?,
        TrialsFormat::Csv => {
            let mut header = vec!["number", "state"];
            header.extend(&value_header);
            header.extend(&ids);
            header.extend(["error", "started_at", "finished_at"]);
            header.extend(extra_headers());
            let rows: Vec<Vec<String>> = trials
                .iter()
                .map(|t| {
                    let mut row = vec![t.number.to_string(), state_cell(t)];
                    row.extend(values(t, |v| v.to_string()));
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
                    let mut row = vec![t.number.to_string(), state_cell(t)];
                    row.extend(values(t, table::short));
                    row.push(params.join(" "));
                    row.push(shorten(&error_cell(t)));
                    with_extra_cells(&mut row, t);
                    row
                })
                .collect();
            let mut header = vec!["trial", "state"];
            header.extend(&value_header);
            header.extend(["parameters", "error"]);
            header.extend(extra_headers());
            output(&table::render(&header, &rows))?;
        }
    }
    Ok(())
}

/// What `trials --format json` prints of `list`: an array of its trials, each with its
/// objectives' values and whether it is on the Pareto front when the study has several, and
/// the attempts that resumed from a checkpoint.
pub fn trials_json(list: &TrialList) -> serde_json::Value {
    trials_list_json(&list.trials, &list.study, &list.front, &list.resumed)
}

/// [`trials_json`] of its parts.
fn trials_list_json(
    trials: &[TrialRecord],
    study: &StudyRecord,
    front: &BTreeSet<u64>,
    resumed: &Resumptions,
) -> serde_json::Value {
    let mut list = json!(trials);
    for (t, out) in trials.iter().zip(list.as_array_mut().into_iter().flatten()) {
        if study.objectives.len() > 1 {
            out["values"] = values_by_metric(study, t);
            out["on_front"] = json!(front.contains(&t.number));
        }
        if let Some(attempts) = resumed.get(&t.number) {
            out["resumed"] = json!(attempts);
        }
    }
    list
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
