//! `hptune studies`, `trials` and `best`: what the database holds, read without writing.

use std::collections::BTreeMap;
use std::path::Path;

use super::{OpsError, find_study};
use crate::controller::is_remote;
use crate::sampler::bayes::believed_best;
use crate::storage::{
    Storage, StorageUrl, StudyRecord, StudySummary, TrialRecord, TrialState, best_first, best_trial,
};

/// Every study of the database at `url`, with its trials by state and best value.
pub async fn studies(url: &StorageUrl) -> Result<Vec<StudySummary>, OpsError> {
    let storage = Storage::open_read_only(url).await?;
    Ok(storage.list_studies().await?)
}

/// An attempt of a trial that resumed from an earlier attempt's checkpoint.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Resumption {
    /// The attempt.
    pub attempt: u32,
    /// The step it resumed at: the first step it reported (`None` before it reports one).
    pub at_step: Option<i64>,
    /// The checkpoint folder it resumed from.
    pub from: String,
}

/// The resumed attempts of a study's trials, by trial number.
pub type Resumptions = BTreeMap<u64, Vec<Resumption>>;

/// The trials of `study` (its name or its study file) in the database at `url`: those in
/// `state` if given, the `best` best succeeded ones, best first, if given; by number else;
/// with the attempts of theirs that resumed from a checkpoint.
pub async fn trials(
    url: &StorageUrl,
    study: &str,
    best: Option<usize>,
    state: Option<TrialState>,
) -> Result<(StudyRecord, Vec<TrialRecord>, Resumptions), OpsError> {
    let storage = Storage::open_read_only(url).await?;
    let record = find_study(&storage, study).await?;
    let mut trials = storage.trials(record.id).await?;
    if let Some(state) = state {
        trials.retain(|t| t.state == state);
    }
    if let Some(n) = best {
        trials = best_first(&trials, record.goal, n);
    }
    let mut resumed = Resumptions::new();
    for attempt in storage.resumed_attempts(record.id).await? {
        resumed.entry(attempt.number).or_default().push(Resumption {
            attempt: attempt.attempt,
            at_step: attempt.resumed_at,
            from: attempt.resumed_from.unwrap_or_default(),
        });
    }
    Ok((record, trials, resumed))
}

/// Which trial is the best.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BestBy {
    /// The succeeded trial with the best reported value.
    Observed,
    /// The succeeded trial whose value the model fitted to all trials believes best.
    Model,
}

/// The best trial of a study.
#[derive(Debug, Clone)]
pub struct Best {
    /// The study.
    pub study: StudyRecord,
    /// The trial.
    pub trial: TrialRecord,
    /// The model's value of it, when it was chosen by the model.
    pub model_value: Option<f64>,
}

/// The best trial of `study` (its name or its study file) in the database at `url`, by what
/// was observed or by what the model believes; a study without a succeeded feasible trial is
/// a failure.
pub async fn best(url: &StorageUrl, study: &str, by: BestBy) -> Result<Best, OpsError> {
    let storage = Storage::open_read_only(url).await?;
    let record = find_study(&storage, study).await?;
    let trials = storage.trials(record.id).await?;
    let (trial, model_value) = match by {
        BestBy::Observed => (best_trial(&trials, record.goal), None),
        BestBy::Model => {
            let history: Vec<_> = trials.iter().filter_map(TrialRecord::observation).collect();
            let believed = believed_best(&record.space()?, record.goal, &history).map_err(|e| {
                OpsError::Failed(format!(
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
        Some(trial) => Ok(Best {
            trial: trial.clone(),
            study: record,
            model_value,
        }),
        None => Err(OpsError::Failed(format!(
            "study '{}' has no succeeded feasible trial yet",
            record.name
        ))),
    }
}

/// The folder (or, for a remote job, the URL) of the model of `study`'s best trial; a
/// failure when it was not kept, was removed, or is not on this machine.
pub async fn best_artifact(url: &StorageUrl, study: &str, by: BestBy) -> Result<String, OpsError> {
    let Best {
        study: record,
        trial,
        ..
    } = best(url, study, by).await?;
    let number = trial.number;
    let Some(dir) = trial.artifact_dir else {
        return Err(OpsError::Failed(format!(
            "study '{}': the best trial, {number}, has no model recorded (it ran without one: a Vertex AI study without base_output_dir, a Kubernetes one without artifacts_volume, or an hptune before model folders)",
            record.name
        )));
    };
    if let Some(at) = trial.artifact_removed_at {
        return Err(OpsError::Failed(format!(
            "study '{}': the model of the best trial, {number}, was removed at {at} ({dir})",
            record.name
        )));
    }
    if !is_remote(&dir) && !Path::new(&dir).is_dir() {
        return Err(OpsError::Failed(format!(
            "study '{}': the model of the best trial, {number}, is missing: {dir} is not a folder of this machine (removed or moved outside hptune, or written on another machine)",
            record.name
        )));
    }
    Ok(dir)
}
