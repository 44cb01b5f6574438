//! Early stopping: rules that look at the intermediate measurements (learning curves) of the
//! study's trials and say when a running trial is not worth finishing.
//!
//! - **median** (Vertex AI's and SageMaker's rule): at step `s >= min_steps`, stop a trial
//!   whose best value so far is worse than the median of the running averages up to `s` of
//!   the succeeded trials that reached `s`; at least `min_trials` of them are needed.
//! - **asha** (asynchronous successive halving, as Optuna's pruner applies it): rungs at steps
//!   `min_resource · reduction_factor^k`. When a trial reaches a rung, it is compared with
//!   every trial that reached that rung before it (finished or running) by its value at the
//!   rung; it goes on only if it is among the best `max(1, ⌊n / reduction_factor⌋)` of those
//!   `n` trials.

use crate::study::Goal;
use hptune_gp::median as median_of;

/// A trial's learning curve: (step, objective value), by increasing step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Curve {
    /// The trial's number.
    pub number: u64,
    /// Its measurements of the objective that have a step.
    pub points: Vec<(i64, f64)>,
    /// Whether it succeeded (the median rule compares with succeeded trials only).
    pub succeeded: bool,
}

impl Curve {
    /// The step of its last value.
    pub(crate) fn last_step(&self) -> Option<i64> {
        self.points.last().map(|p| p.0)
    }

    /// The latest value at or before `step`.
    pub(crate) fn value_at(&self, step: i64) -> Option<f64> {
        self.points
            .iter()
            .take_while(|(s, _)| *s <= step)
            .last()
            .map(|p| p.1)
    }

    fn running_average(&self, step: i64) -> Option<f64> {
        let upto: Vec<f64> = self
            .points
            .iter()
            .take_while(|(s, _)| *s <= step)
            .map(|p| p.1)
            .collect();
        (!upto.is_empty()).then(|| upto.iter().sum::<f64>() / upto.len() as f64)
    }
}

/// Whether the Bayesian sampler models the learning curves ASHA judges
/// (`early_stopping.fidelity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurveModel {
    /// A model of (configuration, resource) fed by every intermediate value
    /// (`sampler::bayes::fidelity`); the default.
    Fidelity,
    /// The model of the final values alone, a stopped trial at the worst value.
    Off,
}

/// An early-stopping rule and its settings, as the study file gives them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StoppingRule {
    /// The median rule.
    Median {
        /// No trial is stopped before this step.
        min_steps: i64,
        /// Succeeded trials needed at a step before the rule applies there.
        min_trials: usize,
    },
    /// Asynchronous successive halving.
    Asha {
        /// The step of the first rung.
        min_resource: i64,
        /// The factor between rungs, and the share of trials kept at each (1 in it).
        reduction_factor: f64,
        /// The step at which curves end, where the Bayesian sampler's model proposes; the
        /// largest step reported so far when absent.
        max_resource: Option<i64>,
        /// Whether the Bayesian sampler models the curves.
        curves: CurveModel,
    },
}

impl StoppingRule {
    /// Why `trial` should stop now, given the other trials of the study (finished or
    /// running), or `None` to let it go on.
    pub(crate) fn judge(&self, goal: Goal, trial: &Curve, others: &[Curve]) -> Option<String> {
        match *self {
            StoppingRule::Median {
                min_steps,
                min_trials,
            } => median(goal, trial, others, min_steps, min_trials),
            StoppingRule::Asha {
                min_resource,
                reduction_factor,
                ..
            } => asha(goal, trial, others, min_resource, reduction_factor),
        }
    }
}

fn median(
    goal: Goal,
    trial: &Curve,
    others: &[Curve],
    min_steps: i64,
    min_trials: usize,
) -> Option<String> {
    let step = trial.last_step()?;
    if step < min_steps {
        return None;
    }
    let best = trial
        .points
        .iter()
        .map(|p| p.1)
        .reduce(|a, b| if goal.better(b, a) { b } else { a })?;
    let averages: Vec<f64> = others
        .iter()
        .filter(|o| o.succeeded && o.number != trial.number && o.last_step() >= Some(step))
        .filter_map(|o| o.running_average(step))
        .collect();
    if averages.len() < min_trials.max(1) {
        return None;
    }
    let n = averages.len();
    let median = median_of(averages)?;
    goal.better(median, best).then(|| {
        format!(
            "early-stopped by the median rule at step {step}: its best value {best} is worse than the median {median} of {n} succeeded trials"
        )
    })
}

/// ASHA's cut at one rung: of the values of the `n` trials that reached it, the best `keep`
/// go on, down to `cutoff`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RungCut {
    /// How many go on.
    pub keep: usize,
    /// How many reached the rung.
    pub n: usize,
    /// The worst value that goes on.
    pub cutoff: f64,
}

impl RungCut {
    /// The cut of `values` (at least one) when 1 in `factor` goes on.
    pub(crate) fn of(goal: Goal, mut values: Vec<f64>, factor: f64) -> Self {
        let n = values.len();
        let keep = ((n as f64 / factor).floor() as usize).max(1);
        values.sort_by(|a, b| match goal {
            Goal::Maximize => b.total_cmp(a),
            Goal::Minimize => a.total_cmp(b),
        });
        RungCut {
            keep,
            n,
            cutoff: values[keep - 1],
        }
    }
}

/// The words that begin ASHA's reason for stopping a trial, before the rung's index.
const ASHA_STOPPED: &str = "early-stopped by ASHA at rung ";

/// The index of the rung where ASHA stopped a trial, read from the `reason` it gave; `None`
/// for a reason of another rule.
pub(crate) fn asha_stopped_at(reason: &str) -> Option<usize> {
    reason
        .strip_prefix(ASHA_STOPPED)?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

/// The steps of ASHA's rungs up to `last`: `min_resource · factor^k`, rounded down.
pub(crate) fn rung_steps(min_resource: i64, factor: f64, last: i64) -> Vec<i64> {
    let mut steps = Vec::new();
    let mut rung = min_resource.max(1) as f64;
    while rung <= last as f64 {
        steps.push(rung.floor() as i64);
        rung *= factor;
    }
    steps
}

/// The values at `step` of the `curves` that reached it.
pub(crate) fn values_at<'a>(curves: impl IntoIterator<Item = &'a Curve>, step: i64) -> Vec<f64> {
    curves
        .into_iter()
        .filter(|c| c.last_step() >= Some(step))
        .filter_map(|c| c.value_at(step))
        .collect()
}

fn asha(
    goal: Goal,
    trial: &Curve,
    others: &[Curve],
    min_resource: i64,
    factor: f64,
) -> Option<String> {
    let step = trial.last_step()?;
    for (index, at) in rung_steps(min_resource, factor, step)
        .into_iter()
        .enumerate()
    {
        let mine = trial.value_at(at)?;
        let mut values = values_at(others.iter().filter(|o| o.number != trial.number), at);
        values.push(mine);
        let RungCut { keep, n, cutoff } = RungCut::of(goal, values, factor);
        if goal.better(cutoff, mine) {
            return Some(format!(
                "{ASHA_STOPPED}{index} (step {at}): {mine} is not among the best {keep} of {n} trials (the cutoff is {cutoff})"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(number: u64, values: &[f64], succeeded: bool) -> Curve {
        Curve {
            number,
            points: values
                .iter()
                .enumerate()
                .map(|(i, v)| (i as i64 + 1, *v))
                .collect(),
            succeeded,
        }
    }

    const MEDIAN: StoppingRule = StoppingRule::Median {
        min_steps: 1,
        min_trials: 2,
    };

    #[test]
    fn median_rule_stops_a_trial_worse_than_the_median_of_running_averages() {
        let others = [
            curve(0, &[1.0, 0.8, 0.6, 0.5], true),
            curve(1, &[0.9, 0.7, 0.5, 0.4], true),
            curve(3, &[0.93, 0.5, 0.3, 0.2], true),
        ];
        // Averages at step 3: 0.8, 0.7, 0.5767 -> median 0.7; its best 0.8 is worse.
        let late = curve(4, &[0.8, 0.9, 1.0], false);
        let reason = MEDIAN.judge(Goal::Minimize, &late, &others).unwrap();
        assert!(reason.contains("at step 3"), "{reason}");
        assert!(reason.contains("median 0.7"), "{reason}");
        // At step 2 the median of 0.9, 0.8, 0.715 is 0.8: not worse, it goes on.
        let early = curve(4, &[0.8, 0.9], false);
        assert_eq!(MEDIAN.judge(Goal::Minimize, &early, &others), None);
    }

    #[test]
    fn median_rule_waits_for_enough_succeeded_trials_and_min_steps() {
        let others = [curve(0, &[1.0], true), curve(1, &[0.1], false)];
        assert_eq!(
            MEDIAN.judge(Goal::Minimize, &curve(2, &[5.0], false), &others),
            None
        );
        let late_start = StoppingRule::Median {
            min_steps: 2,
            min_trials: 1,
        };
        assert_eq!(
            late_start.judge(Goal::Minimize, &curve(2, &[5.0], false), &others),
            None
        );
        assert!(
            late_start
                .judge(
                    Goal::Minimize,
                    &curve(2, &[5.0, 5.0], false),
                    &[curve(0, &[1.0, 1.0], true)]
                )
                .is_some()
        );
    }

    #[test]
    fn median_rule_follows_the_goal() {
        let others = [curve(0, &[0.5], true), curve(1, &[0.7], true)];
        let trial = curve(2, &[0.55], false);
        assert!(MEDIAN.judge(Goal::Maximize, &trial, &others).is_some());
        assert!(MEDIAN.judge(Goal::Minimize, &trial, &others).is_none());
    }

    const ASHA: StoppingRule = StoppingRule::Asha {
        min_resource: 1,
        reduction_factor: 2.0,
        max_resource: None,
        curves: CurveModel::Fidelity,
    };

    #[test]
    fn asha_keeps_the_best_share_at_each_rung() {
        let q1 = curve(0, &[1.0, 0.8, 0.7, 0.6], true);
        let q2 = curve(1, &[0.9, 0.85], false);
        // Rung 0 (step 1): {1.0, 0.9} keeps 1: 0.9 goes on; rung 1 (step 2): {0.8, 0.85}: stop.
        assert_eq!(
            ASHA.judge(
                Goal::Minimize,
                &curve(1, &[0.9], false),
                std::slice::from_ref(&q1)
            ),
            None
        );
        let reason = ASHA
            .judge(Goal::Minimize, &q2, std::slice::from_ref(&q1))
            .unwrap();
        assert!(reason.contains("rung 1 (step 2)"), "{reason}");
        // Rung 0 with 4 trials keeps 2: 0.7 is the best, 0.95 among five is third.
        let q3 = curve(2, &[1.2], false);
        let q4 = curve(3, &[0.7, 0.6, 0.5, 0.45], true);
        assert_eq!(
            ASHA.judge(
                Goal::Minimize,
                &curve(3, &[0.7], false),
                &[q1.clone(), q2.clone(), q3.clone()]
            ),
            None
        );
        let q5 = curve(4, &[0.95], false);
        let reason = ASHA.judge(Goal::Minimize, &q5, &[q1, q2, q3, q4]).unwrap();
        assert!(reason.contains("best 2 of 5"), "{reason}");
        // The second best of 0.7, 0.9, 0.95, 1.0, 1.2 is where the cut falls.
        assert!(reason.ends_with("(the cutoff is 0.9)"), "{reason}");
        assert_eq!(asha_stopped_at(&reason), Some(0));
        assert_eq!(
            asha_stopped_at("early-stopped by the median rule at step 3"),
            None
        );
    }

    #[test]
    fn asha_lets_the_first_trial_through_every_rung() {
        let alone = curve(0, &[3.0, 2.0, 1.0, 0.5, 0.4, 0.3, 0.2, 0.1], false);
        assert_eq!(ASHA.judge(Goal::Maximize, &alone, &[]), None);
    }
}
