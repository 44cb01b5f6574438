//! A study's prior: the finished trials of its `warm_start` study, mapped into its space and
//! judged by its own constraints, for the sampler's model from the first trial on.

use std::collections::BTreeMap;

use crate::sampler::Observation;
use crate::storage::{Storage, StorageError, StudyRecord, TrialRecord, TrialState};
use crate::study::{Mapping, Outside, Study, WarmStartError};

/// Why the `warm_start` study cannot inform this study. Each but `Storage` is bad input,
/// said of the field of `warm_start` at fault.
#[derive(Debug, thiserror::Error)]
pub enum PriorError {
    /// Reading the other study failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// No study of that name in the database.
    #[error("warm_start.study: no study named '{0}' in this database")]
    NoStudy(String),
    /// The other study optimises another metric, or the other way.
    #[error(
        "warm_start.study: study '{name}' {there}, this one {here}: their values do not compare"
    )]
    OtherObjective {
        /// The other study.
        name: String,
        /// Its objective, as `minimizes loss`.
        there: String,
        /// This study's objective, likewise.
        here: String,
    },
    /// This study bounds a metric the other study's trials never reported.
    #[error(
        "warm_start.study: study '{name}' recorded no {metric} for its trials, which constraints bound here"
    )]
    Unrecorded {
        /// The other study.
        name: String,
        /// The metric.
        metric: String,
    },
    /// The other study's trials do not map into this study's space.
    #[error("warm_start: {0}")]
    Mapping(#[from] WarmStartError),
    /// The other study finished trials, none of which lies in this study's space.
    #[error(
        "warm_start: none of the {finished} finished trials of study '{name}' lies in this study's space (outside by {by_parameter}; e.g. {}: {})",
        example.parameter,
        example.why
    )]
    NoneInside {
        /// The other study.
        name: String,
        /// How many trials it finished.
        finished: usize,
        /// How many lie outside by each parameter (`x: 3, optimizer: 1`).
        by_parameter: String,
        /// The first trial's reason.
        example: Outside,
    },
}

/// The finished trials of `study`'s `warm_start` study, mapped into its space (those that lie
/// outside it left out, with a warning); none without one. The other study must exist,
/// optimise the same metric the same way, give each parameter both tune the same type, and
/// have some trial in this space if it has finished any.
pub async fn warm_start_prior(
    study: &Study,
    storage: &Storage,
) -> Result<Vec<Observation>, PriorError> {
    let Some(warm) = &study.warm_start else {
        return Ok(Vec::new());
    };
    let record = storage
        .find_study(&warm.study)
        .await?
        .ok_or_else(|| PriorError::NoStudy(warm.study.clone()))?;
    let objective = |goal: crate::study::Goal, metric: &str| format!("{}s {metric}", goal.as_str());
    if record.metric != study.objective.metric || record.goal != study.objective.goal {
        return Err(PriorError::OtherObjective {
            name: record.name,
            there: objective(record.goal, &record.metric),
            here: objective(study.objective.goal, &study.objective.metric),
        });
    }
    let other = record.space()?;
    let mapping = warm.mapping(&study.space, &other)?;
    let trials = storage.trials(record.id).await?;
    prior_of(study, &record, &trials, &mapping)
}

/// The prior `trials` of the study `record` give `study` through `mapping`. Feasibility is
/// this study's: its bounds judge the other study's recorded values, which must hold each
/// metric this study bounds.
fn prior_of(
    study: &Study,
    record: &StudyRecord,
    trials: &[TrialRecord],
    mapping: &Mapping<'_>,
) -> Result<Vec<Observation>, PriorError> {
    let recorded = |metric: &str| {
        trials
            .iter()
            .any(|t| t.constraint_values.contains_key(metric))
    };
    if let Some(missing) = study
        .constraints
        .bounds
        .iter()
        .find(|c| !recorded(&c.metric))
    {
        return Err(PriorError::Unrecorded {
            name: record.name.clone(),
            metric: missing.metric.clone(),
        });
    }
    let (mut prior, mut outside) = (Vec::new(), Vec::new());
    for trial in trials {
        let Some(mut observation) = trial.observation() else {
            continue;
        };
        match mapping.map(&observation.params)? {
            Ok(params) => {
                let failed = trial.state == TrialState::Failed;
                observation.params = params;
                observation.feasible = study
                    .constraints
                    .judge(failed, &observation.constraint_values)
                    .is_none();
                prior.push(observation);
            }
            Err(o) => outside.push(o),
        }
    }
    if outside.is_empty() {
        return Ok(prior);
    }
    let finished = prior.len() + outside.len();
    let by_parameter = outside_by_parameter(&outside);
    if prior.is_empty() {
        return Err(PriorError::NoneInside {
            name: record.name.clone(),
            finished,
            by_parameter,
            example: outside.swap_remove(0),
        });
    }
    tracing::warn!(
        "warm_start: {} of the {finished} finished trials of study '{}' lie outside this \
         study's space and do not inform it (outside by {by_parameter})",
        outside.len(),
        record.name
    );
    Ok(prior)
}

/// How many trials lie outside the space by each parameter: `x: 3, optimizer: 1`.
fn outside_by_parameter(outside: &[Outside]) -> String {
    let mut counts = BTreeMap::<&str, usize>::new();
    for o in outside {
        *counts.entry(&o.parameter).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(id, n)| format!("{id}: {n}")).collect();
    counts.join(", ")
}
