//! `constraints` and `failed_as_infeasible`: bounds on the metrics trials report.

use super::Checker;
use super::raw::RawConstraint;
use crate::study::{Bound, Constraint, Constraints};

impl Checker<'_> {
    /// Checks `constraints`: each names a metric and exactly one finite bound, `max` or
    /// `min` (a range is two constraints).
    pub(super) fn constraints(
        &mut self,
        raw: Option<Vec<RawConstraint>>,
        failed_as_infeasible: Option<bool>,
    ) -> Option<Constraints> {
        let mut bounds = Vec::new();
        let mut ok = true;
        for (i, c) in raw.into_iter().flatten().enumerate() {
            let field = format!("constraints[{i}]");
            ok &= self.metric(&field, &c.metric);
            let bound = match (c.max, c.min) {
                (Some(max), None) => Some(("max", max.as_f64(), Bound::Max(max.as_f64()))),
                (None, Some(min)) => Some(("min", min.as_f64(), Bound::Min(min.as_f64()))),
                (None, None) => {
                    self.report(&field, "needs a bound: `max` or `min`");
                    None
                }
                (Some(_), Some(_)) => {
                    self.report(
                        &field,
                        "has both `max` and `min`: give one bound (a range is two constraints)",
                    );
                    None
                }
            };
            match bound {
                Some((name, value, _)) if !value.is_finite() => {
                    self.report(
                        format!("{field}.{name}"),
                        format!("must be a finite number, got {value}"),
                    );
                    ok = false;
                }
                Some((_, _, bound)) => bounds.push(Constraint {
                    metric: c.metric,
                    bound,
                }),
                None => ok = false,
            }
        }
        ok.then_some(Constraints {
            bounds,
            failed_as_infeasible: failed_as_infeasible.unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::spec::parse;
    use crate::study::{Bound, Constraints};

    const STUDY: &str = "name: s\nobjective: {metric: accuracy, goal: maximize}\nparameters:\n  - {id: x, type: double, min: 0, max: 1}\nmax_trial_count: 3\ntrial:\n  command: [w]\n";

    fn constraints(block: &str) -> Result<Constraints, String> {
        parse(Path::new("s.yaml"), &format!("{STUDY}{block}\n"))
            .map(|study| study.constraints)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn bounds_read_in_order_with_failed_as_infeasible() {
        let read = constraints(
            "constraints: [{metric: peak_memory_gb, max: 16}, {metric: throughput, min: 1.5e2}]\nfailed_as_infeasible: true",
        )
        .unwrap();
        assert_eq!(read.bounds[0].metric, "peak_memory_gb");
        assert_eq!(read.bounds[0].bound, Bound::Max(16.0));
        assert_eq!(read.bounds[1].bound, Bound::Min(150.0));
        assert!(read.failed_as_infeasible);
        assert_eq!(constraints("").unwrap(), Constraints::default());
    }

    #[test]
    fn bad_constraints_name_their_field_and_line() {
        for (block, expected) in [
            (
                "constraints: [{metric: m}]",
                "s.yaml:8:15: constraints[0]: needs a bound",
            ),
            (
                "constraints: [{metric: m, max: 1, min: 0}]",
                "constraints[0]: has both `max` and `min`",
            ),
            (
                "constraints: [{metric: '', max: 1}]",
                "constraints[0].metric: must not be empty",
            ),
            (
                "constraints: [{metric: m, max: .nan}]",
                "constraints[0].max: must be a finite number",
            ),
            (
                "constraints: [{metric: m, below: 1}]",
                "unknown field `below`",
            ),
            ("constraints: [{metric: m, max: big}]", "constraints[0].max"),
            ("failed_as_infeasible: maybe", "failed_as_infeasible"),
        ] {
            let error = constraints(block).unwrap_err();
            assert!(error.contains(expected), "{block}: {error}");
        }
    }
}
