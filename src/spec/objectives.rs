//! `objective` (one metric) or `objectives` (2 to 4, traded against each other), each with
//! its goal, and with several a `reference_point` for the hypervolume.

use super::Checker;
use super::raw::{RawObjective, RawStudy};
use crate::study::{Goal, Objective};

/// The fewest objectives `objectives:` takes (one is `objective:`).
const FEWEST_OBJECTIVES: usize = 2;
/// The most objectives `objectives:` takes: the exact hypervolume's cost grows with the
/// power of the number of objectives, and a front of five or more is mostly the whole study.
const MOST_OBJECTIVES: usize = 4;

impl Checker<'_> {
    /// Checks `objective` or `objectives` (exactly one of them): the study's first objective
    /// and the further ones (none with `objective`). With several: no metric twice, none
    /// also a constraint, and no early stopping.
    pub(super) fn objectives(&mut self, raw: &RawStudy) -> Option<(Objective, Vec<Objective>)> {
        match (&raw.objective, &raw.objectives) {
            (Some(one), None) => {
                if one.reference_point.is_some() {
                    self.report(
                        "objective.reference_point",
                        "applies only to `objectives:` (the corner of the hypervolume of several objectives)",
                    );
                }
                let objective = self.objective("objective", one)?;
                Some((objective, Vec::new()))
            }
            (None, Some(several)) => self.several(raw, several),
            (Some(_), Some(_)) => {
                self.report(
                    "objectives",
                    "give `objective` (one metric) or `objectives` (2 to 4), not both",
                );
                None
            }
            (None, None) => {
                self.report(
                    "",
                    "missing field `objective`: give `objective` (one metric) or `objectives` (2 to 4)",
                );
                None
            }
        }
    }

    /// Checks `objectives:`, a list of several.
    fn several(
        &mut self,
        raw: &RawStudy,
        several: &[RawObjective],
    ) -> Option<(Objective, Vec<Objective>)> {
        let count = several.len();
        if !(FEWEST_OBJECTIVES..=MOST_OBJECTIVES).contains(&count) {
            self.report(
                "objectives",
                format!(
                    "lists {count} objective{}: give {FEWEST_OBJECTIVES} to {MOST_OBJECTIVES} (or `objective:` for one)",
                    if count == 1 { "" } else { "s" }
                ),
            );
        }
        if raw.early_stopping.is_some() {
            self.report(
                "early_stopping",
                "does not apply to several objectives: a trial poor on one objective early may end on the front through another, so no rule on one of them (or on dominance at a step) can stop it safely; remove `early_stopping`",
            );
        }
        let mut objectives = Vec::with_capacity(count);
        let mut ok = true;
        for (i, one) in several.iter().enumerate() {
            let field = format!("objectives[{i}]");
            if let Some(first) = several[..i].iter().position(|o| o.metric == one.metric) {
                self.report(
                    format!("{field}.metric"),
                    format!(
                        "'{}' is listed twice (objectives[{first}] too): each objective is a different metric",
                        one.metric
                    ),
                );
                ok = false;
            }
            let constrained = raw
                .constraints
                .iter()
                .flatten()
                .position(|c| c.metric == one.metric);
            if let Some(c) = constrained {
                self.report(
                    format!("{field}.metric"),
                    format!(
                        "'{}' is also constraints[{c}]: a metric is either optimised (an objective) or bounded (a constraint), not both",
                        one.metric
                    ),
                );
                ok = false;
            }
            match self.objective(&field, one) {
                Some(objective) => objectives.push(objective),
                None => ok = false,
            }
        }
        if !ok || !(FEWEST_OBJECTIVES..=MOST_OBJECTIVES).contains(&count) {
            return None;
        }
        let first = objectives.remove(0);
        Some((first, objectives))
    }

    /// Checks one objective at `field`: its metric, its goal, its reference point.
    fn objective(&mut self, field: &str, raw: &RawObjective) -> Option<Objective> {
        let mut ok = self.metric(field, &raw.metric);
        let goal = Goal::parse(&raw.goal);
        if goal.is_none() {
            self.report(
                format!("{field}.goal"),
                format!("'{}' is not a goal: use maximize or minimize", raw.goal),
            );
        }
        let reference_point = raw.reference_point.map(|n| n.as_f64());
        if let Some(value) = reference_point.filter(|v| !v.is_finite()) {
            self.report(
                format!("{field}.reference_point"),
                format!("must be a finite number, got {value}"),
            );
            ok = false;
        }
        ok.then_some(Objective {
            metric: raw.metric.clone(),
            goal: goal?,
            reference_point,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::spec::parse;
    use crate::study::{Goal, Study};

    const REST: &str = "parameters:\n  - {id: x, type: double, min: 0, max: 1}\nmax_trial_count: 3\ntrial:\n  command: [w]\n";

    fn study(head: &str) -> Result<Study, String> {
        parse(Path::new("s.yaml"), &format!("name: s\n{head}\n{REST}")).map_err(|e| e.to_string())
    }

    #[test]
    fn several_objectives_are_read_in_order_with_their_reference_points() {
        let s = study(
            "objectives:\n  - {metric: accuracy, goal: maximize, reference_point: 0.5}\n  - {metric: latency_ms, goal: minimize}",
        )
        .unwrap();
        assert!(s.has_several_objectives());
        let read: Vec<(&str, Goal, Option<f64>)> = s
            .objectives()
            .map(|o| (o.metric.as_str(), o.goal, o.reference_point))
            .collect();
        assert_eq!(
            read,
            vec![
                ("accuracy", Goal::Maximize, Some(0.5)),
                ("latency_ms", Goal::Minimize, None)
            ]
        );
        let one = study("objective: {metric: loss, goal: minimize}").unwrap();
        assert!(!one.has_several_objectives());
        assert_eq!(one.objectives().count(), 1);
    }

    #[test]
    fn bad_objectives_are_refused_with_where_and_why() {
        let two = "objectives: [{metric: a, goal: maximize}, {metric: b, goal: minimize}]";
        let cases = [
            (
                format!("objective: {{metric: a, goal: maximize}}\n{two}"),
                "s.yaml:3:13: objectives: give `objective` (one metric) or `objectives` (2 to 4), not both",
            ),
            (
                String::new(),
                "s.yaml: missing field `objective`: give `objective` (one metric) or `objectives` (2 to 4)",
            ),
            (
                "objectives: [{metric: a, goal: maximize}]".into(),
                "s.yaml:2:13: objectives: lists 1 objective: give 2 to 4 (or `objective:` for one)",
            ),
            (
                "objectives: [{metric: a, goal: maximize}, {metric: b, goal: minimize}, {metric: c, goal: minimize}, {metric: d, goal: minimize}, {metric: e, goal: minimize}]".into(),
                "s.yaml:2:13: objectives: lists 5 objectives: give 2 to 4 (or `objective:` for one)",
            ),
            (
                "objectives: [{metric: a, goal: maximize}, {metric: a, goal: minimize}]".into(),
                "s.yaml:2:52: objectives[1].metric: 'a' is listed twice (objectives[0] too): each objective is a different metric",
            ),
            (
                format!("{two}\nconstraints: [{{metric: b, max: 3}}]"),
                "s.yaml:2:52: objectives[1].metric: 'b' is also constraints[0]: a metric is either optimised (an objective) or bounded (a constraint), not both",
            ),
            (
                "objectives: [{metric: a, goal: maximize, reference_point: .nan}, {metric: b, goal: up}]".into(),
                "s.yaml:2:59: objectives[0].reference_point: must be a finite number, got NaN",
            ),
            (
                "objective: {metric: a, goal: maximize, reference_point: 1}".into(),
                "s.yaml:2:57: objective.reference_point: applies only to `objectives:` (the corner of the hypervolume of several objectives)",
            ),
            (
                format!("{two}\nearly_stopping: {{rule: median}}"),
                "s.yaml:3:17: early_stopping: does not apply to several objectives",
            ),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .map(|(head, expected)| (study(head).unwrap_err(), expected))
            .filter(|(error, expected)| !error.starts_with(*expected))
            .map(|(error, expected)| format!("expected {expected}\n     got {error}"))
            .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
