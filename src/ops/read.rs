//! `hptune studies`, `trials` and `best`: what the database holds, read without writing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{OpsError, find_study, stored_study};
use crate::controller::is_remote;
use crate::sampler::bayes::believed_best;
use crate::storage::{
    Storage, StorageUrl, StudyRecord, StudySummary, TrialRecord, TrialState, best_trial,
    front_numbers, goals, pareto_front, ranked_first, ranking,
};
use crate::study::pareto;

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

/// The trials of a study, as `hptune trials` lists them.
#[derive(Debug, Clone)]
pub struct TrialList {
    /// The study.
    pub study: StudyRecord,
    /// The trials listed.
    pub trials: Vec<TrialRecord>,
    /// The numbers of the trials on the study's Pareto front, of all its trials whichever
    /// are listed; empty for a study of one objective.
    pub front: BTreeSet<u64>,
    /// The attempts of its trials that resumed from a checkpoint.
    pub resumed: Resumptions,
}

/// The trials of `study` (its name or its study file) in the database at `url`: those in
/// `state` if given, the `best` best succeeded ones, best first, if given (with several
/// objectives, by Pareto rank: see [`ranked_first`]); by number else; with the attempts of
/// theirs that resumed from a checkpoint.
pub async fn trials(
    url: &StorageUrl,
    study: &str,
    best: Option<usize>,
    state: Option<TrialState>,
) -> Result<TrialList, OpsError> {
    let storage = Storage::open_read_only(url).await?;
    let record = find_study(&storage, study).await?;
    let mut trials = storage.trials(record.id).await?;
    let front = front_numbers(&trials, &record);
    if let Some(state) = state {
        trials.retain(|t| t.state == state);
    }
    if let Some(n) = best {
        trials = ranked_first(&trials, &record, n);
    }
    let mut resumed = Resumptions::new();
    for attempt in storage.resumed_attempts(record.id).await? {
        resumed.entry(attempt.number).or_default().push(Resumption {
            attempt: attempt.attempt,
            at_step: attempt.resumed_at,
            from: attempt.resumed_from.unwrap_or_default(),
        });
    }
    Ok(TrialList {
        study: record,
        trials,
        front,
        resumed,
    })
}

/// What `hptune best` answers: the best trial of a study of one objective, the Pareto set of
/// a study of several.
#[derive(Debug, Clone)]
pub enum Chosen {
    /// The best trial.
    Best(Box<Best>),
    /// The trials no other beats on every objective.
    Front(Box<Front>),
}

/// The Pareto set of a study of several objectives, and the hypervolume it dominates.
#[derive(Debug, Clone)]
pub struct Front {
    /// The study.
    pub study: StudyRecord,
    /// The trials on the front, the best value of the first objective first (equal ones by
    /// number).
    pub trials: Vec<TrialRecord>,
    /// The hypervolume's corner, one value per objective: the study's `reference_point`
    /// where it gives one, else derived from its feasible results (`None`: it has none).
    pub reference_point: Option<Vec<f64>>,
    /// The hypervolume of the front up to the reference point.
    pub hypervolume: Option<f64>,
}

impl Front {
    /// The front of `trials`, the trials of the study of several objectives `study`.
    pub(crate) fn of(study: StudyRecord, trials: &[TrialRecord]) -> Self {
        let goals = goals(&study.objectives);
        let mut on: Vec<TrialRecord> = pareto_front(trials, &study.objectives)
            .into_iter()
            .cloned()
            .collect();
        on.sort_by(|a, b| {
            let first = |t: &TrialRecord| (t.number, t.objective_values[0]);
            ranking(study.goal, first(a), first(b))
        });
        let results: Vec<&[f64]> = trials
            .iter()
            .filter_map(|t| t.results(goals.len()))
            .collect();
        let given: Vec<Option<f64>> = study.objectives.iter().map(|o| o.reference_point).collect();
        let reference_point = pareto::reference_point(&results, &goals, &given);
        let points: Vec<&[f64]> = on.iter().map(|t| t.objective_values.as_slice()).collect();
        let hypervolume = reference_point
            .as_ref()
            .map(|r| pareto::hypervolume(&points, &goals, r));
        Self {
            study,
            trials: on,
            reference_point,
            hypervolume,
        }
    }
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
/// was observed or by what the model believes; with several objectives, its Pareto set (by
/// what was observed only). A study without a succeeded feasible trial is a failure.
pub async fn best(url: &StorageUrl, study: &str, by: BestBy) -> Result<Chosen, OpsError> {
    let storage = Storage::open_read_only(url).await?;
    let record = find_study(&storage, study).await?;
    let trials = storage.trials(record.id).await?;
    let none_yet = |record: &StudyRecord| {
        OpsError::Failed(format!(
            "study '{}' has no succeeded feasible trial yet",
            record.name
        ))
    };
    if record.objectives.len() > 1 {
        if by == BestBy::Model {
            return Err(OpsError::BadInput(format!(
                "--by model needs a study of one objective: study '{}' has several, and its answer is the front of what was observed",
                record.name
            )));
        }
        let front = Front::of(record, &trials);
        if front.trials.is_empty() {
            return Err(none_yet(&front.study));
        }
        return Ok(Chosen::Front(Box::new(front)));
    }
    let (trial, model_value) = match by {
        BestBy::Observed => (best_trial(&trials, record.goal), None),
        BestBy::Model => {
            let history: Vec<_> = trials.iter().filter_map(TrialRecord::observation).collect();
            let study = stored_study(&record)?;
            let budget = study.budget.max_trial_count;
            let believed =
                believed_best(&study.space, budget, record.goal, &history).map_err(|e| {
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
        Some(trial) => Ok(Chosen::Best(Box::new(Best {
            trial: trial.clone(),
            study: record,
            model_value,
        }))),
        None => Err(none_yet(&record)),
    }
}

/// The folder (or, for a remote job, the URL) of the model of `study`'s best trial, or of
/// trial `number` when given (a study of several objectives has no single best: it needs
/// one); a failure when it was not kept, was removed, or is not on this machine.
pub async fn best_artifact(
    url: &StorageUrl,
    study: &str,
    by: BestBy,
    number: Option<u64>,
) -> Result<String, OpsError> {
    let (record, trial, what) = match number {
        Some(number) => {
            let storage = Storage::open_read_only(url).await?;
            let record = find_study(&storage, study).await?;
            let trial = storage
                .trials(record.id)
                .await?
                .into_iter()
                .find(|t| t.number == number)
                .ok_or_else(|| {
                    OpsError::BadInput(format!("study '{}' has no trial {number}", record.name))
                })?;
            (record, trial, format!("trial {number}"))
        }
        None => match best(url, study, by).await? {
            Chosen::Best(best) => {
                let Best { study, trial, .. } = *best;
                let what = format!("the best trial, {}", trial.number);
                (study, trial, what)
            }
            Chosen::Front(front) => {
                let numbers: Vec<String> =
                    front.trials.iter().map(|t| t.number.to_string()).collect();
                return Err(OpsError::BadInput(format!(
                    "study '{}' has several objectives, so no single best model: give --trial N, one of its front (trials {})",
                    front.study.name,
                    numbers.join(", ")
                )));
            }
        },
    };
    let Some(dir) = trial.artifact_dir else {
        return Err(OpsError::Failed(format!(
            "study '{}': {what} has no model recorded (it ran without one: a Vertex AI study without base_output_dir, a Kubernetes one without artifacts_volume, or an hptune before model folders)",
            record.name
        )));
    };
    if let Some(at) = trial.artifact_removed_at {
        return Err(OpsError::Failed(format!(
            "study '{}': the model of {what} was removed at {at} ({dir})",
            record.name
        )));
    }
    if !is_remote(&dir) && !Path::new(&dir).is_dir() {
        return Err(OpsError::Failed(format!(
            "study '{}': the model of {what} is missing: {dir} is not a folder of this machine (removed or moved outside hptune, or written on another machine)",
            record.name
        )));
    }
    Ok(dir)
}
