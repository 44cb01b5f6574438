//! Stored rows read back into typed records.

use std::collections::BTreeMap;
use std::str::FromStr;

use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::StorageError;
use crate::protocol::Measurement;
use crate::sampler::Observation;
use crate::study::space::{Assignment, Space};
use crate::study::{Goal, Objective};

/// The columns of a trial, in the order [`TrialRecord::from_row`] reads them.
macro_rules! trial_columns {
    () => {
        "id, number, state, params, value, error, worker, log_path, started_at, finished_at, attempt, owner, gpus, gpu_slot, artifact_dir, artifact_removed_at, constraint_values, infeasible, lease_expires_at, lease_seconds, objective_values"
    };
}
pub(crate) use trial_columns;

/// The SQL test of an enqueued trial (see [`TrialRecord::is_enqueued`]), for `concat!`.
macro_rules! enqueued {
    () => {
        "(state = 'pending' AND owner IS NULL AND started_at IS NULL)"
    };
}
pub(crate) use enqueued;

/// The SQL test of a trial handed back (see [`TrialRecord::is_handed_back`]), for `concat!`.
macro_rules! handed_back {
    () => {
        "(state = 'pending' AND owner IS NULL AND started_at IS NOT NULL)"
    };
}
pub(crate) use handed_back;

/// The columns of a study, in the order [`StudyRecord::from_row`] reads them.
macro_rules! study_columns {
    () => {
        "id, name, metric, goal, spec, space, created_at, objectives"
    };
}
pub(crate) use study_columns;

/// The state of a trial: `pending -> running -> succeeded | failed | stopped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialState {
    /// Created, not started.
    Pending,
    /// Its worker is running.
    Running,
    /// Reported a final value.
    Succeeded,
    /// Its worker failed, timed out or reported no usable value.
    Failed,
    /// Stopped by the user or the controller before it finished.
    Stopped,
}

impl TrialState {
    /// Every state, in life order.
    pub(crate) const ALL: [TrialState; 5] = [
        TrialState::Pending,
        TrialState::Running,
        TrialState::Succeeded,
        TrialState::Failed,
        TrialState::Stopped,
    ];

    /// The state as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            TrialState::Pending => "pending",
            TrialState::Running => "running",
            TrialState::Succeeded => "succeeded",
            TrialState::Failed => "failed",
            TrialState::Stopped => "stopped",
        }
    }

    /// Whether the trial is over.
    pub(crate) fn is_finished(self) -> bool {
        matches!(
            self,
            TrialState::Succeeded | TrialState::Failed | TrialState::Stopped
        )
    }
}

impl FromStr for TrialState {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        TrialState::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| {
                format!("'{text}' is not a trial state: use pending, running, succeeded, failed or stopped")
            })
    }
}

/// A study as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyRecord {
    /// Row id.
    pub id: i64,
    /// Unique name.
    pub name: String,
    /// Objective metric (the first objective's, with several).
    pub metric: String,
    /// Objective goal (the first objective's, with several).
    pub goal: Goal,
    /// Every objective, in the study file's order: one (`metric` and `goal`), or 2 to 4
    /// (`objectives:`), with the reference points its last run gave.
    pub objectives: Vec<Objective>,
    /// The study file as last run.
    pub spec: String,
    /// The search space, JSON.
    pub space: String,
    /// When it was created.
    pub created_at: String,
}

/// A trial as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrialRecord {
    /// Row id.
    #[serde(skip)]
    pub id: i64,
    /// Number within the study, from 0.
    pub number: u64,
    /// Where it is in its life.
    pub state: TrialState,
    /// Its parameters.
    pub params: Assignment,
    /// Final value of the objective.
    pub value: Option<f64>,
    /// Why it failed or was stopped.
    pub error: Option<String>,
    /// The worker's handle (local pid).
    pub worker: Option<String>,
    /// The worker's log file.
    pub log_path: Option<String>,
    /// When its worker started.
    pub started_at: Option<String>,
    /// When it ended.
    pub finished_at: Option<String>,
    /// Its current attempt, from 1: a retry after an infrastructure failure is a new attempt.
    pub attempt: u32,
    /// The controller running it (`host:pid@start`).
    pub owner: Option<String>,
    /// The GPUs of its current attempt, as `HPTUNE_GPUS` names them; empty without GPUs.
    pub gpus: Vec<String>,
    /// The slot of its current attempt on a GPU it shares (`gpus: 1/K`), from 0.
    pub gpu_slot: Option<u32>,
    /// The model folder of its current attempt (`HPTUNE_OUTPUT_DIR`), once its worker started.
    pub artifact_dir: Option<String>,
    /// When hptune removed its attempts' model folders (`artifacts.keep_best`).
    pub artifact_removed_at: Option<String>,
    /// The final values it reported of the study's constrained metrics.
    pub constraint_values: BTreeMap<String, f64>,
    /// Why it is infeasible (it broke a constraint, or failed with `failed_as_infeasible`);
    /// `None` when it is feasible. An infeasible trial is never the best.
    pub infeasible: Option<String>,
    /// When the lease of the ask/tell client holding it ends (`hptune ask`); `None` for a
    /// controller's trial, kept alive by heartbeats instead.
    pub lease_expires_at: Option<String>,
    /// The length of that lease in seconds, for which each intermediate result renews it.
    pub lease_seconds: Option<u64>,
    /// Its final value of every objective of a study with several, in the study's order
    /// (the first is `value`); empty with one objective, or when it has none.
    #[serde(skip)]
    pub objective_values: Vec<f64>,
}

#[cfg(test)]
impl TrialRecord {
    /// Trial `number` (row id `100 + number`), running its first attempt, nothing else
    /// recorded: the start of the records unit tests build.
    pub(crate) fn for_test(number: u64) -> Self {
        TrialRecord {
            id: number as i64 + 100,
            number,
            state: TrialState::Running,
            params: Default::default(),
            value: None,
            error: None,
            worker: None,
            log_path: None,
            started_at: None,
            finished_at: None,
            attempt: 1,
            owner: None,
            gpus: Vec::new(),
            gpu_slot: None,
            artifact_dir: None,
            artifact_removed_at: None,
            constraint_values: BTreeMap::new(),
            infeasible: None,
            lease_expires_at: None,
            lease_seconds: None,
            objective_values: Vec::new(),
        }
    }

    /// Trial `number` in `state` with `value`, as [`TrialRecord::for_test`] otherwise.
    pub(crate) fn in_state(number: u64, state: TrialState, value: Option<f64>) -> Self {
        TrialRecord {
            state,
            value,
            ..TrialRecord::for_test(number)
        }
    }
}

/// A study with its trial counts and best value.
#[derive(Debug, Clone, PartialEq)]
pub struct StudySummary {
    /// The study.
    pub study: StudyRecord,
    /// Trials by state, in the order of [`TrialState::ALL`].
    pub counts: [usize; 5],
    /// The best value so far; `None` for a study of several objectives, which has a front
    /// rather than a best value.
    pub best: Option<f64>,
}

impl StudySummary {
    /// Summarises `trials` of `study`.
    pub(crate) fn new(study: StudyRecord, trials: &[TrialRecord]) -> Self {
        let mut counts = [0; 5];
        for trial in trials {
            counts[TrialState::ALL
                .iter()
                .position(|s| *s == trial.state)
                .unwrap_or(0)] += 1;
        }
        let best = match study.objectives.len() {
            1 => super::best_trial(trials, study.goal).and_then(TrialRecord::result),
            _ => None,
        };
        Self {
            study,
            counts,
            best,
        }
    }

    /// Number of trials in `state`.
    pub fn count(&self, state: TrialState) -> usize {
        TrialState::ALL
            .iter()
            .position(|s| *s == state)
            .map_or(0, |i| self.counts[i])
    }
}

pub(super) fn corrupt(e: sqlx::Error) -> StorageError {
    StorageError::Corrupt(e.to_string())
}

impl StudyRecord {
    pub(super) fn from_row(row: &AnyRow) -> Result<Self, StorageError> {
        let goal: String = row.try_get("goal").map_err(corrupt)?;
        let metric: String = row.try_get("metric").map_err(corrupt)?;
        let goal =
            Goal::parse(&goal).ok_or_else(|| StorageError::Corrupt(format!("goal '{goal}'")))?;
        let objectives = match json_column(row, "objectives", "objectives")? {
            Some(several) => several,
            None => vec![Objective {
                metric: metric.clone(),
                goal,
                reference_point: None,
            }],
        };
        Ok(Self {
            id: row.try_get("id").map_err(corrupt)?,
            name: row.try_get("name").map_err(corrupt)?,
            metric,
            goal,
            objectives,
            spec: row.try_get("spec").map_err(corrupt)?,
            space: row.try_get("space").map_err(corrupt)?,
            created_at: row.try_get("created_at").map_err(corrupt)?,
        })
    }

    /// Its search space, as its last run stored it.
    pub fn space(&self) -> Result<Space, StorageError> {
        serde_json::from_str(&self.space).map_err(|e| {
            StorageError::Corrupt(format!("the search space of study '{}': {e}", self.name))
        })
    }
}

impl TrialRecord {
    /// Where its current attempt runs or ran, as `hptune trials` shows it: its GPUs (`0,1`),
    /// and its slot on a GPU it shares (`0 slot 2`).
    pub fn placement(&self) -> String {
        crate::gpus::placement(&self.gpus.join(","), self.gpu_slot)
    }

    /// Whether it waits to run first, enqueued (`pending` with no owner and never started;
    /// a trial handed back by an interrupted controller has started); in SQL, `enqueued!()`.
    pub(crate) fn is_enqueued(&self) -> bool {
        self.state == TrialState::Pending && self.owner.is_none() && self.started_at.is_none()
    }

    /// Whether its next attempt waits, handed back (`pending` with no owner, started before:
    /// a lease ended, or a controller was interrupted); in SQL, `handed_back!()`.
    pub fn is_handed_back(&self) -> bool {
        self.state == TrialState::Pending && self.owner.is_none() && self.started_at.is_some()
    }

    /// The trial as a sampler sees it once it has ended (its value only if it succeeded);
    /// `None` while it has not ended.
    pub(crate) fn observation(&self) -> Option<Observation> {
        self.state.is_finished().then(|| Observation {
            number: self.number,
            params: self.params.clone(),
            value: self.value.filter(|_| self.state == TrialState::Succeeded),
            values: match self.state {
                TrialState::Succeeded => self.objective_values.clone(),
                _ => Vec::new(),
            },
            feasible: self.infeasible.is_none(),
            constraint_values: self.constraint_values.clone(),
        })
    }

    pub(super) fn from_row(row: &AnyRow) -> Result<Self, StorageError> {
        let state: String = row.try_get("state").map_err(corrupt)?;
        let params: String = row.try_get("params").map_err(corrupt)?;
        let number: i64 = row.try_get("number").map_err(corrupt)?;
        Ok(Self {
            id: row.try_get("id").map_err(corrupt)?,
            number: number as u64,
            state: state.parse().map_err(StorageError::Corrupt)?,
            params: serde_json::from_str(&params)
                .map_err(|e| StorageError::Corrupt(format!("parameters {params}: {e}")))?,
            value: row.try_get("value").map_err(corrupt)?,
            error: row.try_get("error").map_err(corrupt)?,
            worker: row.try_get("worker").map_err(corrupt)?,
            log_path: row.try_get("log_path").map_err(corrupt)?,
            started_at: row.try_get("started_at").map_err(corrupt)?,
            finished_at: row.try_get("finished_at").map_err(corrupt)?,
            attempt: row
                .try_get::<i64, _>("attempt")
                .map_err(corrupt)?
                .try_into()
                .map_err(|_| StorageError::Corrupt("attempt out of range".into()))?,
            owner: row.try_get("owner").map_err(corrupt)?,
            gpus: row
                .try_get::<Option<String>, _>("gpus")
                .map_err(corrupt)?
                .map(|list| list.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
            gpu_slot: slot(row)?,
            artifact_dir: row.try_get("artifact_dir").map_err(corrupt)?,
            artifact_removed_at: row.try_get("artifact_removed_at").map_err(corrupt)?,
            constraint_values: json_column(row, "constraint_values", "constraint values")?
                .unwrap_or_default(),
            infeasible: row.try_get("infeasible").map_err(corrupt)?,
            lease_expires_at: row.try_get("lease_expires_at").map_err(corrupt)?,
            lease_seconds: row
                .try_get::<Option<i64>, _>("lease_seconds")
                .map_err(corrupt)?
                .map(|s| s.max(0) as u64),
            objective_values: json_column(row, "objective_values", "objective values")?
                .unwrap_or_default(),
        })
    }
}

/// The JSON text of `column` read into `T`; `None` where it is NULL. `what` names it in the
/// error of a value that does not read.
fn json_column<T: serde::de::DeserializeOwned>(
    row: &AnyRow,
    column: &str,
    what: &str,
) -> Result<Option<T>, StorageError> {
    let text: Option<String> = row.try_get(column).map_err(corrupt)?;
    text.map(|text| {
        serde_json::from_str(&text)
            .map_err(|e| StorageError::Corrupt(format!("{what} {text}: {e}")))
    })
    .transpose()
}

pub(super) fn measurement_from_row(row: &AnyRow) -> Result<Measurement, StorageError> {
    Ok(Measurement {
        step: row.try_get("step").map_err(corrupt)?,
        metric: row.try_get("metric").map_err(corrupt)?,
        value: row.try_get("value").map_err(corrupt)?,
    })
}

/// One attempt of a trial as stored: a retry after an infrastructure failure is a new one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct AttemptRecord {
    /// The trial's number.
    pub number: u64,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The worker's handle (local pid, job name).
    pub worker: Option<String>,
    /// The controller that ran it.
    pub owner: Option<String>,
    /// When it started.
    pub started_at: String,
    /// When it ended, if it has.
    pub finished_at: Option<String>,
    /// How it ended: succeeded, failed, stopped or retried.
    pub outcome: Option<String>,
    /// Why it failed, was stopped or retried.
    pub error: Option<String>,
    /// The worker's last line of output, as a relay recorded it.
    pub last_output: Option<String>,
    /// The GPUs it ran on, as its worker's HPTUNE_GPUS named them (comma-separated).
    pub gpus: Option<String>,
    /// Its slot on the GPU it shared (`gpus: 1/K`), from 0.
    pub gpu_slot: Option<u32>,
}

/// The columns of an attempt joined with its trial, in the order
/// [`AttemptRecord::from_row`] reads them.
macro_rules! attempt_columns {
    () => {
        "t.number, a.attempt, a.worker, a.owner, a.started_at, a.finished_at, a.outcome, a.error, a.last_output, a.gpus, a.gpu_slot"
    };
}
pub(crate) use attempt_columns;

impl AttemptRecord {
    pub(super) fn from_row(row: &AnyRow) -> Result<Self, StorageError> {
        let number: i64 = row.try_get("number").map_err(corrupt)?;
        let attempt: i64 = row.try_get("attempt").map_err(corrupt)?;
        Ok(Self {
            number: number as u64,
            attempt: attempt
                .try_into()
                .map_err(|_| StorageError::Corrupt("attempt out of range".into()))?,
            worker: row.try_get("worker").map_err(corrupt)?,
            owner: row.try_get("owner").map_err(corrupt)?,
            started_at: row.try_get("started_at").map_err(corrupt)?,
            finished_at: row.try_get("finished_at").map_err(corrupt)?,
            outcome: row.try_get("outcome").map_err(corrupt)?,
            error: row.try_get("error").map_err(corrupt)?,
            last_output: row.try_get("last_output").map_err(corrupt)?,
            gpus: row.try_get("gpus").map_err(corrupt)?,
            gpu_slot: slot(row)?,
        })
    }
}

/// The `gpu_slot` of a trial's or an attempt's row.
fn slot(row: &AnyRow) -> Result<Option<u32>, StorageError> {
    row.try_get::<Option<i64>, _>("gpu_slot")
        .map_err(corrupt)?
        .map(|slot| {
            u32::try_from(slot).map_err(|_| StorageError::Corrupt("gpu_slot out of range".into()))
        })
        .transpose()
}

/// One measurement as stored, with the attempt that reported it and when.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct MeasurementRecord {
    /// The attempt that reported it.
    pub attempt: u32,
    /// Training step or epoch; `None` for a final report.
    pub step: Option<i64>,
    /// The metric's tag.
    pub metric: String,
    /// The value.
    pub value: f64,
    /// When it was recorded.
    pub recorded_at: String,
}

/// A study with what its list shows: trials by state, best value, last activity; counted by
/// the database, so that the list costs no trial rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StudyOverview {
    /// The study.
    pub study: StudyRecord,
    /// Trials by state, in the order of [`TrialState::ALL`].
    pub counts: [usize; 5],
    /// The best value of a succeeded trial.
    pub best: Option<f64>,
    /// When a trial of the study last started or ended (or was created).
    pub last_activity: Option<String>,
}

impl StudyOverview {
    /// Number of trials in `state`.
    pub(crate) fn count(&self, state: TrialState) -> usize {
        TrialState::ALL
            .iter()
            .position(|s| *s == state)
            .map_or(0, |i| self.counts[i])
    }

    /// Number of trials.
    pub(crate) fn total(&self) -> usize {
        self.counts.iter().sum()
    }
}
