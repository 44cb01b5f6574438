//! A study's prior: the finished trials of its `warm_start` study, mapped into its space and
//! judged by its own constraints, for the sampler's model from the first trial on.

use std::collections::BTreeMap;

use crate::sampler::Observation;
use crate::storage::{Storage, StorageError, StudyRecord, TrialRecord, TrialState};
use crate::study::{Mapping, Outside, Study, WarmStartError};

/// Why the `warm_start` study cannot inform this study. Each but `Storage` is bad input,
/// said of the field of `warm_start` at fault.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PriorError {
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
pub(crate) async fn warm_start_prior(
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
    let describe = |objectives: &mut dyn Iterator<Item = &crate::study::Objective>| {
        let each: Vec<String> = objectives
            .map(|o| format!("{}s {}", o.goal.as_str(), o.metric))
            .collect();
        each.join(", ")
    };
    if !study.keeps_objectives(&record.objectives) {
        return Err(PriorError::OtherObjective {
            there: describe(&mut record.objectives.iter()),
            here: describe(&mut study.objectives()),
            name: record.name,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::Goal;
    use crate::study::space::ParamValue;

    fn study() -> Study {
        let yaml = "name: warm\nmax_trial_count: 2\nobjective: {metric: loss, goal: minimize}\nparameters:\n  - {id: x, type: double, min: 0, max: 1}\nwarm_start: {study: earlier}\nconstraints: [{metric: peak, max: 1}]\ntrial: {command: [w]}\n";
        crate::spec::parse(std::path::Path::new("warm.yaml"), yaml).unwrap()
    }

    fn record(study: &Study) -> StudyRecord {
        StudyRecord {
            id: 1,
            name: "earlier".into(),
            metric: "loss".into(),
            goal: Goal::Minimize,
            objectives: vec![crate::study::Objective {
                metric: "loss".into(),
                goal: Goal::Minimize,
                reference_point: None,
            }],
            spec: String::new(),
            space: serde_json::to_string(&study.space).unwrap(),
            created_at: String::new(),
        }
    }

    /// A succeeded trial of the other study at `x` that reported `peak`.
    fn trial(number: u64, x: f64, peak: Option<f64>) -> TrialRecord {
        let mut trial = TrialRecord::in_state(number, TrialState::Succeeded, Some(0.1));
        trial.params.insert("x".into(), ParamValue::Float(x));
        trial
            .constraint_values
            .extend(peak.map(|p| ("peak".to_string(), p)));
        trial
    }

    #[test]
    fn the_prior_is_judged_by_this_studys_constraints_and_leaves_out_what_lies_outside() {
        let study = study();
        let record = record(&study);
        let other = record.space().unwrap();
        let mapping = study
            .warm_start
            .as_ref()
            .unwrap()
            .mapping(&study.space, &other)
            .unwrap();
        let mut judged_there = trial(1, 0.2, Some(0.5));
        judged_there.infeasible = Some("peak 0.5 > 0.1".into());
        let trials = [
            trial(0, 0.5, Some(2.0)),
            judged_there,
            trial(2, 5.0, Some(0.5)),
            TrialRecord::for_test(3),
        ];
        let prior = prior_of(&study, &record, &trials, &mapping).unwrap();
        let seen: Vec<(u64, bool)> = prior.iter().map(|o| (o.number, o.feasible)).collect();
        assert_eq!(seen, [(0, false), (1, true)]);

        let unbounded = [trial(0, 0.5, None)];
        let refused = prior_of(&study, &record, &unbounded, &mapping).unwrap_err();
        assert!(
            matches!(&refused, PriorError::Unrecorded { metric, .. } if metric == "peak"),
            "{refused}"
        );
        let outside = [trial(0, 5.0, Some(0.5))];
        let refused = prior_of(&study, &record, &outside, &mapping).unwrap_err();
        assert!(
            refused.to_string().starts_with(
                "warm_start: none of the 1 finished trials of study 'earlier' lies in this study's space (outside by x: 1; e.g. x: "
            ),
            "{refused}"
        );
    }
}
