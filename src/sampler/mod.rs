//! Samplers propose the parameters of the next trial. Each algorithm is one file that
//! implements [`Sampler`]; the controller knows only the trait.

pub(crate) mod bayes;
mod grid;
mod manual;
mod random;
mod timed;

pub use bayes::BayesSampler;
pub(crate) use grid::GridSampler;
pub(crate) use manual::ManualSampler;
pub(crate) use random::RandomSampler;
pub(crate) use timed::Timed;

use std::collections::BTreeMap;

use crate::study::space::{Assignment, Space};
use crate::study::{Algorithm, Constraints, Goal, Study};

/// A finished trial, as samplers see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// The trial's number in its study.
    pub number: u64,
    /// Its parameters.
    pub params: Assignment,
    /// Its final value; `None` when it failed or was stopped before reporting one.
    pub value: Option<f64>,
    /// Its final value of every objective of a study with several, in the study's order
    /// (the first is `value`); empty with one objective, or when it has no result.
    pub values: Vec<f64>,
    /// Whether it kept the study's constraints (see [`crate::study::Constraints::judge`]).
    pub feasible: bool,
    /// The final values it reported of the constrained metrics.
    pub constraint_values: BTreeMap<String, f64>,
}

#[cfg(test)]
impl Observation {
    /// Trial 0, no parameters, failed, feasible: the start of the observations tests build.
    pub(crate) fn unconstrained() -> Self {
        Self {
            number: 0,
            params: Assignment::default(),
            value: None,
            values: Vec::new(),
            feasible: true,
            constraint_values: BTreeMap::new(),
        }
    }
}

/// A trial's learning curve with its parameters, as a multi-fidelity model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialCurve {
    /// The trial's number in its study.
    pub number: u64,
    /// Its parameters.
    pub params: Assignment,
    /// Its values of the objective that have a step, by increasing step.
    pub points: Vec<(i64, f64)>,
}

/// What a sampler may look at to propose trial `number`.
#[derive(Debug, Clone, Copy)]
pub struct ProposalContext<'a> {
    /// The search space.
    pub space: &'a Space,
    /// Whether larger or smaller values are better (of the first objective, with several).
    pub goal: Goal,
    /// Every objective's goal, in the study's order (the first is `goal`): one for a study
    /// of one objective.
    pub goals: &'a [Goal],
    /// The bounds on the trials' other metrics.
    pub constraints: &'a Constraints,
    /// The number the proposed trial will get.
    pub number: u64,
    /// Every finished trial of the study, in number order.
    pub history: &'a [Observation],
    /// Finished trials of another study, mapped into this study's space (`warm_start`): they
    /// inform a model, and count toward nothing.
    pub prior: &'a [Observation],
    /// The parameters of the trials still running.
    pub running: &'a [Assignment],
    /// The learning curves of the study's trials, finished or running, by number; read only
    /// where the sampler models them ([`reads_curves`]), empty otherwise.
    pub curves: &'a [TrialCurve],
    /// How many trials the study runs at once (its `parallel_trial_count`): the proposals go
    /// in batches of this many.
    pub parallel: usize,
}

/// Why a sampler could not propose.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the {algorithm} sampler failed: {message}")]
pub struct SamplerError {
    /// Which sampler.
    pub algorithm: &'static str,
    /// What went wrong.
    pub message: String,
}

/// Proposes trials. Given the same study (seed included) and the same history, a sampler
/// proposes the same parameters.
pub trait Sampler: Send {
    /// The parameters of the next trial, or `None` when the search space is exhausted.
    fn propose(
        &mut self,
        context: &ProposalContext<'_>,
    ) -> Result<Option<Assignment>, SamplerError>;

    /// Whether proposals read the finished trials ([`ProposalContext::history`]); a caller
    /// may give a sampler that does not an empty history rather than read the trials.
    fn reads_history(&self) -> bool {
        true
    }
}

/// The sampler a study asks for; each proposal's duration is logged at debug level.
pub fn for_study(study: &Study) -> Result<Box<dyn Sampler>, SamplerError> {
    let (name, sampler): (&'static str, Box<dyn Sampler>) = match study.algorithm {
        Algorithm::Random => ("random", Box::new(RandomSampler::new(study.seed))),
        Algorithm::Grid => (
            "grid",
            Box::new(GridSampler::new(&study.space).map_err(|e| SamplerError {
                algorithm: "grid",
                message: e.to_string(),
            })?),
        ),
        Algorithm::Bayesian => {
            let references = study.objectives().map(|o| o.reference_point).collect();
            let sampler = BayesSampler::new(study.seed)
                .with_reference_point(references)
                .with_budget(study.budget.max_trial_count)
                .with_fidelity(bayes::fidelity::settings(study));
            ("bayesian", Box::new(sampler))
        }
    };
    Ok(Box::new(Timed::new(name, sampler)))
}

/// Whether the sampler of `study` models learning curves: the controller then reads them from
/// storage before each proposal ([`ProposalContext::curves`]).
pub(crate) fn reads_curves(study: &Study) -> bool {
    study.algorithm == Algorithm::Bayesian && bayes::fidelity::settings(study).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bayes::design::sobol_point;

    /// The proposal for trial 10 of a Bayesian study of 10 parameters with `max_trial_count`
    /// given, after 10 trials, and the design's point for that trial.
    fn eleventh_of(max_trial_count: u64) -> (Assignment, Assignment) {
        let parameters: String = (0..10)
            .map(|i| format!("  - {{id: x{i}, type: double, min: 0, max: 1}}\n"))
            .collect();
        let yaml = format!(
            "name: s\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n{parameters}\
             max_trial_count: {max_trial_count}\nseed: 7\ntrial: {{command: [w]}}\n"
        );
        let study = crate::spec::parse(std::path::Path::new("s.yaml"), &yaml).unwrap();
        let history: Vec<Observation> = (0..10)
            .map(|number| {
                let params = study.space.from_unit(&sobol_point(number, 10, study.seed));
                let value = params.values().map(|v| v.as_f64().unwrap()).sum();
                Observation {
                    number,
                    params,
                    value: Some(value),
                    ..Observation::unconstrained()
                }
            })
            .collect();
        let context = ProposalContext {
            space: &study.space,
            goal: Goal::Minimize,
            goals: &[Goal::Minimize],
            constraints: &Constraints::default(),
            number: 10,
            history: &history,
            prior: &[],
            running: &[],
            curves: &[],
            parallel: 1,
        };
        let proposal = for_study(&study)
            .unwrap()
            .propose(&context)
            .unwrap()
            .unwrap();
        let design = study.space.from_unit(&sobol_point(10, 10, study.seed));
        (proposal, design)
    }

    #[test]
    fn the_bayesian_sampler_sizes_its_design_by_the_studys_budget() {
        // 10 parameters: a design of 13 trials, but of 10 (a fifth) in a study of 50.
        let (proposal, design) = eleventh_of(100);
        assert_eq!(proposal, design);
        let (proposal, design) = eleventh_of(50);
        assert_ne!(proposal, design, "trial 10 of 50 comes from the model");
    }
}
