//! Constraints (`constraints`, `failed_as_infeasible`): bounds on metrics the trials report
//! beside the objective (`peak_memory_gb <= 16`). A trial that breaks one is infeasible: it
//! is kept and shown, and never the best.

use std::collections::BTreeMap;

/// Which side of its bound a metric must stay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Bound {
    /// At most this value (`max`).
    Max(f64),
    /// At least this value (`min`).
    Min(f64),
}

/// A bound a reported metric must keep.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Constraint {
    /// The metric's tag, as workers report it.
    pub metric: String,
    /// Its bound.
    pub bound: Bound,
}

impl Constraint {
    /// How far `value` is inside the bound: zero or more where it keeps it, negative where
    /// it breaks it.
    pub(crate) fn slack(&self, value: f64) -> f64 {
        match self.bound {
            Bound::Max(max) => max - value,
            Bound::Min(min) => value - min,
        }
    }

    /// The bound as the study file writes it (`peak_memory_gb <= 16`).
    pub(crate) fn describe(&self) -> String {
        match self.bound {
            Bound::Max(max) => format!("{} <= {max}", self.metric),
            Bound::Min(min) => format!("{} >= {min}", self.metric),
        }
    }
}

/// A study's constraints.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Constraints {
    /// The bounds, in the study file's order.
    pub(crate) bounds: Vec<Constraint>,
    /// Whether a failed trial is infeasible (`failed_as_infeasible`: out-of-memory crashes).
    pub failed_as_infeasible: bool,
}

impl Constraints {
    /// Whether the study has anything to judge.
    pub(crate) fn is_empty(&self) -> bool {
        self.bounds.is_empty() && !self.failed_as_infeasible
    }

    /// The values `reported` (each metric's final value) of the constrained metrics.
    pub(crate) fn values(&self, reported: impl Fn(&str) -> Option<f64>) -> BTreeMap<String, f64> {
        self.bounds
            .iter()
            .filter_map(|c| Some((c.metric.clone(), reported(&c.metric)?)))
            .collect()
    }

    /// Why a trial that ended with `values` (its constrained metrics' final values) is
    /// infeasible, or `None` when it is feasible. A trial that `failed` is infeasible with
    /// `failed_as_infeasible` and is otherwise judged by nothing (it has no result); one that
    /// ran and did not report a constrained metric is infeasible, as it cannot be shown to
    /// keep the bound.
    pub(crate) fn judge(&self, failed: bool, values: &BTreeMap<String, f64>) -> Option<String> {
        self.judge_with(failed, values, |metric| format!("reported no {metric}"))
    }

    /// [`Constraints::judge`], with `unreported(metric)` saying why a constrained metric has
    /// no value (never reported, or reported as NaN).
    pub(crate) fn judge_with(
        &self,
        failed: bool,
        values: &BTreeMap<String, f64>,
        unreported: impl Fn(&str) -> String,
    ) -> Option<String> {
        if failed {
            return self
                .failed_as_infeasible
                .then(|| "the trial failed (failed_as_infeasible)".to_string());
        }
        let broken: Vec<String> = self
            .bounds
            .iter()
            .filter_map(|c| match values.get(&c.metric) {
                None => Some(format!("{} ({})", unreported(&c.metric), c.describe())),
                Some(&v) if c.slack(v) < 0.0 => {
                    Some(format!("{} = {v} breaks {}", c.metric, c.describe()))
                }
                Some(_) => None,
            })
            .collect();
        (!broken.is_empty()).then(|| broken.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constraints() -> Constraints {
        Constraints {
            bounds: vec![
                Constraint {
                    metric: "memory".into(),
                    bound: Bound::Max(16.0),
                },
                Constraint {
                    metric: "throughput".into(),
                    bound: Bound::Min(100.0),
                },
            ],
            failed_as_infeasible: false,
        }
    }

    fn values(memory: f64, throughput: f64) -> BTreeMap<String, f64> {
        [("memory".into(), memory), ("throughput".into(), throughput)].into()
    }

    #[test]
    fn a_trial_on_its_bounds_is_feasible_and_one_past_them_is_not() {
        let c = constraints();
        assert_eq!(c.judge(false, &values(16.0, 100.0)), None);
        assert_eq!(
            c.judge(false, &values(16.5, 99.0)).unwrap(),
            "memory = 16.5 breaks memory <= 16; throughput = 99 breaks throughput >= 100"
        );
        let silent: BTreeMap<String, f64> = [("memory".into(), 3.0)].into();
        assert_eq!(
            c.judge(false, &silent).unwrap(),
            "reported no throughput (throughput >= 100)"
        );
    }

    #[test]
    fn a_failed_trial_is_infeasible_only_when_the_study_says_so() {
        let mut c = constraints();
        assert_eq!(c.judge(true, &BTreeMap::new()), None);
        c.failed_as_infeasible = true;
        assert!(c.judge(true, &BTreeMap::new()).is_some());
    }

    #[test]
    fn only_the_constrained_metrics_are_kept() {
        let reported = |m: &str| match m {
            "memory" => Some(3.0),
            "accuracy" => Some(0.9),
            _ => None,
        };
        assert_eq!(
            constraints().values(reported),
            BTreeMap::from([("memory".to_string(), 3.0)])
        );
    }
}
