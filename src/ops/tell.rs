//! `hptune tell`: a client's result for a trial it holds (`hptune ask`), judged by the rules
//! of a worker's: a final result ends the trial, an intermediate one renews the lease and
//! goes to the study's early-stopping rule.

use super::{OpsError, find_study, stored_study};
use crate::controller::{ClientVerdict, client_end, early_stop, reclaim_expired_leases};
use crate::protocol::Measurement;
use crate::storage::{Storage, StorageError, StorageUrl, StudyRecord, TrialEnd, TrialRecord, now};
use crate::study::Study;

/// What a client tells of a trial it holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// Values of the study's metrics (the objective, constrained metrics): the final result
    /// without a step, intermediate ones (a learning curve's point) at a step.
    Metrics {
        /// The objective's value (`--value`), in a study of one objective.
        value: Option<f64>,
        /// Values of the study's metrics by name (`--metric`), each once.
        metrics: Vec<(String, f64)>,
        /// The step of intermediate values.
        step: Option<i64>,
    },
    /// The trial failed, for this reason.
    Failed(String),
}

/// What `hptune tell` recorded.
#[derive(Debug, Clone)]
pub struct Told {
    /// The study as stored.
    pub study: StudyRecord,
    /// The trial as it now is.
    pub trial: TrialRecord,
    /// Why the study's early-stopping rule stopped the trial, when it did (then `stopped`).
    pub stop: Option<String>,
}

/// Records `report` for trial `number` of `study` (its name or its study file) in the
/// database at `url`. The trial must be running under a client's lease that has not ended;
/// every refusal records nothing: bad input for an unknown trial, a trial not held by a
/// client or ended already, a metric the study does not have, a non-finite intermediate
/// value, a final result without the objective; a failure when the lease has ended.
pub async fn tell(
    url: &StorageUrl,
    study: &str,
    number: u64,
    report: &Report,
) -> Result<Told, OpsError> {
    let storage = Storage::open(url).await?;
    let told = match Teller::find(&storage, study).await {
        Ok(teller) => teller.tell(&storage, number, report).await,
        Err(e) => Err(e),
    };
    storage.close().await;
    told
}

/// A study found for telling, over many `tell`s (`hptune session`): its record and the
/// study file it was last run with, read once.
pub struct Teller {
    /// The study as stored.
    record: StudyRecord,
    /// Its study file as stored.
    spec: Study,
}

impl Teller {
    /// The study `study` (its name or its study file) of `storage`; an unknown one is bad
    /// input.
    pub async fn find(storage: &Storage, study: &str) -> Result<Self, OpsError> {
        let record = find_study(storage, study).await?;
        let spec = stored_study(&record)?;
        Ok(Self { record, spec })
    }

    /// Records `report` for trial `number`, as [`tell`] does.
    pub async fn tell(
        &self,
        storage: &Storage,
        number: u64,
        report: &Report,
    ) -> Result<Told, OpsError> {
        let Self { record, spec } = self;
        let result = checked(spec, report)?;
        let trial = held_trial(spec, storage, record, number).await?;
        let (trial, stop) = match result {
            Checked::Failed(reason) => {
                let earlier = storage.measurements(trial.id, trial.attempt).await?;
                let verdict = ClientVerdict::Failed(reason.to_string());
                let end = client_end(spec, trial, &earlier, Vec::new(), verdict);
                (finish(storage, end, record).await?, None)
            }
            Checked::Values(values, None) => {
                let reported = measurements(&values, None);
                let mut all = storage.measurements(trial.id, trial.attempt).await?;
                all.extend(reported.iter().cloned());
                let end = client_end(spec, trial, &all, reported, ClientVerdict::Final);
                (finish(storage, end, record).await?, None)
            }
            Checked::Values(values, Some(step)) => {
                let reported = measurements(&values, Some(step));
                let trial = storage
                    .renew_lease(&trial, &reported)
                    .await
                    .map_err(|e| lease_ended(e, record, number))?;
                judge_step(spec, storage, record, trial).await?
            }
        };
        Ok(Told {
            study: record.clone(),
            trial,
            stop,
        })
    }
}

/// A report checked against its study.
enum Checked<'a> {
    /// The trial failed, for this reason.
    Failed(&'a str),
    /// Values by metric, the objective's under its name, at a step for intermediate ones.
    Values(Vec<(String, f64)>, Option<i64>),
}

/// Checks `report` against the study, before anything is read or recorded.
fn checked<'a>(study: &Study, report: &'a Report) -> Result<Checked<'a>, OpsError> {
    let bad = |message: String| Err(OpsError::BadInput(message));
    let (value, metrics, step) = match report {
        Report::Failed(reason) if reason.trim().is_empty() => {
            return bad("--fail: give the reason the trial failed".into());
        }
        Report::Failed(reason) => return Ok(Checked::Failed(reason)),
        Report::Metrics {
            value,
            metrics,
            step,
        } => (value, metrics, *step),
    };
    let objective = &study.objective.metric;
    let objectives: Vec<&str> = study.objectives().map(|o| o.metric.as_str()).collect();
    if value.is_some() && study.has_several_objectives() {
        return bad(format!(
            "--value stands for a study's one objective: study '{}' has {} ({}); give each as {}",
            study.name,
            objectives.len(),
            objectives.join(", "),
            metric_flags(&objectives)
        ));
    }
    let values: Vec<(String, f64)> = value
        .map(|v| (objective.clone(), v))
        .into_iter()
        .chain(metrics.iter().cloned())
        .collect();
    let known: Vec<&str> = objectives
        .iter()
        .copied()
        .chain(study.constraints.bounds.iter().map(|c| c.metric.as_str()))
        .collect();
    for (i, (metric, value)) in values.iter().enumerate() {
        if !known.contains(&metric.as_str()) {
            return bad(format!(
                "--metric {metric}: study '{}' has no metric '{metric}' (its metrics: {})",
                study.name,
                known.join(", ")
            ));
        }
        if values[..i].iter().any(|(m, _)| m == metric) {
            return bad(format!(
                "{metric} is given twice (--value stands for the objective, {objective})"
            ));
        }
        if let Some(step) = step
            && !value.is_finite()
        {
            return bad(format!(
                "{metric}={value} at step {step}: an intermediate value must be a finite number (--fail ends the trial with a reason)"
            ));
        }
    }
    let missing: Vec<&str> = objectives
        .iter()
        .copied()
        .filter(|o| !values.iter().any(|(m, _)| m == o))
        .collect();
    if values.is_empty() || (step.is_none() && !missing.is_empty()) {
        let what = match study.has_several_objectives() {
            true => format!("every objective: give {} too", metric_flags(&missing)),
            false => format!("the objective: --value V or {}", metric_flags(&objectives)),
        };
        return bad(format!(
            "a final result needs {what} (with --step S, the values are intermediate ones)"
        ));
    }
    Ok(Checked::Values(values, step))
}

/// `--metric M=V` for each of `metrics`.
fn metric_flags(metrics: &[&str]) -> String {
    let flags: Vec<String> = metrics.iter().map(|m| format!("--metric {m}=V")).collect();
    flags.join(" ")
}

/// Trial `number` of the study, running under a client's lease that has not ended; the
/// study's trials whose lease has ended are taken back first.
async fn held_trial(
    study: &Study,
    storage: &Storage,
    record: &StudyRecord,
    number: u64,
) -> Result<TrialRecord, OpsError> {
    let trial = storage.trial(record.id, number).await?;
    let at = now();
    let ended = trial.as_ref().is_some_and(|t| {
        !t.state.is_finished()
            && t.lease_expires_at
                .as_deref()
                .is_some_and(|e| e < at.as_str())
    });
    reclaim_expired_leases(study, storage, record.id).await?;
    let name = &record.name;
    let Some(trial) = trial else {
        return Err(OpsError::BadInput(format!(
            "study '{name}' has no trial {number}"
        )));
    };
    if ended || trial.is_handed_back() {
        return Err(lease_ended(StorageError::TakenOver, record, number));
    }
    let state = trial.state.as_str();
    let not_held = match &trial.owner {
        _ if trial.state.is_finished() => {
            format!("it has ended already ({state}): a trial is told one final result")
        }
        _ if trial.is_enqueued() => "it is enqueued: `hptune ask` claims it first".into(),
        Some(owner) if trial.lease_expires_at.is_none() => {
            format!("a controller runs it ({owner}): its worker reports its results")
        }
        _ => return Ok(trial),
    };
    Err(OpsError::BadInput(format!(
        "trial {number} of study '{name}' is not held by a client: {not_held}"
    )))
}

/// The failure of a tell whose lease ended before it was recorded (`e`, the refusal of a
/// trial no longer the client's); any other error as it is.
fn lease_ended(e: StorageError, record: &StudyRecord, number: u64) -> OpsError {
    match e {
        StorageError::TakenOver => OpsError::Failed(format!(
            "the lease of trial {number} of study '{}' has ended: the trial went back to the study (it waits for its next attempt, or runs it), and this result is not recorded",
            record.name
        )),
        e => e.into(),
    }
}

/// `values` as measurements, at `step`.
fn measurements(values: &[(String, f64)], step: Option<i64>) -> Vec<Measurement> {
    values
        .iter()
        .map(|(metric, value)| Measurement {
            step,
            metric: metric.clone(),
            value: *value,
        })
        .collect()
}

/// Writes `end`; returns the trial as it ended.
async fn finish(
    storage: &Storage,
    end: TrialEnd,
    record: &StudyRecord,
) -> Result<TrialRecord, OpsError> {
    let trial = end.trial.clone();
    storage
        .finish_trials(&mut vec![end])
        .await
        .map_err(|e| lease_ended(e, record, trial.number))?;
    Ok(trial)
}

/// Asks the study's early-stopping rule about `trial`, which has just recorded an
/// intermediate value, and ends it `stopped` if the rule says so; returns the trial as it now
/// is and the rule's reason.
async fn judge_step(
    study: &Study,
    storage: &Storage,
    record: &StudyRecord,
    trial: TrialRecord,
) -> Result<(TrialRecord, Option<String>), OpsError> {
    if study.early_stopping.is_none() {
        return Ok((trial, None));
    }
    let all = storage.measurements(trial.id, trial.attempt).await?;
    let curves = storage.curves(record.id, &study.objective.metric).await?;
    let Some(reason) = early_stop(study, trial.number, &all, &curves) else {
        return Ok((trial, None));
    };
    let end = client_end(
        study,
        trial,
        &all,
        Vec::new(),
        ClientVerdict::Stopped(reason.clone()),
    );
    Ok((finish(storage, end, record).await?, Some(reason)))
}
