//! A study with several objectives as its front figures see it: each succeeded trial's
//! values of every objective and where it stands (on the front, dominated, infeasible), and
//! the reference point of the hypervolume. Which trials are on the front, the reference point
//! and the hypervolume come from [`crate::study::pareto`]; this only gathers them.

use super::axis::format_number;
use super::svg;
use super::{StudyData, tip_with};
use crate::storage::{TrialRecord, TrialState};
use crate::study::{Goal, pareto};

/// Where a trial stands among the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// No feasible trial is better in one objective and as good in the others.
    Front,
    /// Another feasible trial is.
    Dominated,
    /// It broke a constraint: it is never on the front.
    Infeasible,
}

/// A succeeded trial with a finite value of every objective.
pub(super) struct Outcome<'a> {
    /// The trial.
    pub trial: &'a TrialRecord,
    /// Its value of each objective, in the study's order.
    pub values: Vec<f64>,
    /// Where it stands.
    pub standing: Standing,
}

/// The trials of a study with several objectives, for its front figures.
pub(super) struct Front<'a> {
    /// The objectives: metric and goal, in the study's order.
    pub objectives: Vec<(String, Goal)>,
    /// The succeeded trials with a value of every objective, by number.
    pub outcomes: Vec<Outcome<'a>>,
    /// The hypervolume's reference point: the study's, or the one derived from its trials.
    pub reference: Vec<f64>,
}

impl<'a> Front<'a> {
    /// The front of the study `data` shows, or the figure that says why there is none: a
    /// study of one objective, or no result to place the reference point by.
    pub(super) fn of(data: &StudyData<'a>) -> Result<Self, String> {
        let study = &data.follower.study;
        let count = study.objectives.len();
        if count < 2 {
            return Err(svg::message(&format!(
                "This study has one objective ({}): the Pareto front needs several (`objectives:` in the study file).",
                study.metric
            )));
        }
        let goals: Vec<Goal> = study.objectives.iter().map(|o| o.goal).collect();
        let trials: Vec<&'a TrialRecord> = data
            .follower
            .trials()
            .filter(|t| t.state == TrialState::Succeeded)
            .filter(|t| t.objective_values.len() == count)
            .filter(|t| t.objective_values.iter().all(|v| v.is_finite()))
            .collect();
        let results: Vec<&[f64]> = trials.iter().filter_map(|t| t.results(count)).collect();
        let given: Vec<Option<f64>> = study.objectives.iter().map(|o| o.reference_point).collect();
        let Some(reference) = pareto::reference_point(&results, &goals, &given) else {
            return Err(data.nothing_to_draw());
        };
        let mut on_front = vec![false; trials.len()];
        for i in pareto::front(&trials, &goals, |t| t.results(count)) {
            on_front[i] = true;
        }
        let outcomes = trials
            .into_iter()
            .zip(on_front)
            .map(|(trial, front)| Outcome {
                trial,
                values: trial.objective_values.clone(),
                standing: match (front, trial.result()) {
                    (true, _) => Standing::Front,
                    (false, Some(_)) => Standing::Dominated,
                    (false, None) => Standing::Infeasible,
                },
            })
            .collect();
        Ok(Front {
            objectives: study
                .objectives
                .iter()
                .map(|o| (o.metric.clone(), o.goal))
                .collect(),
            outcomes,
            reference,
        })
    }

    /// Values of the objectives in words: `accuracy 0.91, latency_ms 3.2`.
    pub(super) fn values_text(&self, values: &[f64]) -> String {
        self.objectives
            .iter()
            .zip(values)
            .map(|((metric, _), v)| format!("{metric} {}", format_number(*v)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A trial's tooltip: its number, where it stands, its values and its parameters.
    pub(super) fn tip(&self, outcome: &Outcome) -> String {
        let standing = match outcome.standing {
            Standing::Front => "on the front",
            Standing::Dominated => "dominated",
            Standing::Infeasible => "infeasible",
        };
        tip_with(
            outcome.trial,
            &format!("{standing} · {}", self.values_text(&outcome.values)),
        )
    }

    /// The goals of the objectives, in order.
    fn goals(&self) -> Vec<Goal> {
        self.objectives.iter().map(|(_, goal)| *goal).collect()
    }

    /// The trials on the front.
    pub(super) fn on_front(&self) -> impl Iterator<Item = &Outcome<'a>> {
        self.outcomes
            .iter()
            .filter(|o| o.standing == Standing::Front)
    }

    /// The hypervolume of the front against [`Front::reference`].
    pub(super) fn hypervolume(&self) -> f64 {
        let points: Vec<&[f64]> = self.on_front().map(|o| o.values.as_slice()).collect();
        pareto::hypervolume(&points, &self.goals(), &self.reference)
    }

    /// After each trial, by number: the hypervolume of the front of the feasible trials up
    /// to it, against [`Front::reference`] (the same point throughout, so that the steps
    /// compare).
    pub(super) fn hypervolume_history(&self) -> Vec<(u64, f64)> {
        let goals = self.goals();
        let mut front = pareto::RunningHypervolume::new(&goals, &self.reference);
        let mut history = Vec::with_capacity(self.outcomes.len());
        for outcome in &self.outcomes {
            if outcome.standing != Standing::Infeasible {
                front.add(outcome.trial.number, &outcome.values);
            }
            history.push((outcome.trial.number, front.volume()));
        }
        history
    }
}
