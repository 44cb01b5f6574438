//! `initial_trials`: the configurations run first, in order, before the sampler proposes.

use std::collections::BTreeMap;

use super::Checker;
use super::raw::Scalar;
use crate::study::space::{Assignment, Space};

impl Checker<'_> {
    /// Checks `initial_trials`: each a value for every active parameter of `space` (none
    /// for an inactive one), in its domain, and no more of them than the study's budget
    /// (`max_trial_count`, where it is known). Unchecked while the space itself is broken.
    pub(super) fn initial_trials(
        &mut self,
        raw: Option<Vec<BTreeMap<String, Scalar>>>,
        space: Option<&Space>,
        max_trial_count: Option<u64>,
    ) -> Option<Vec<Assignment>> {
        let raw = raw.unwrap_or_default();
        if let Some(budget) = max_trial_count.filter(|&budget| raw.len() as u64 > budget) {
            self.report(
                "initial_trials",
                format!(
                    "{} configurations, more than max_trial_count ({budget}): they count \
                     against it",
                    raw.len()
                ),
            );
            return None;
        }
        let space = match space {
            Some(space) => space,
            None => return raw.is_empty().then(Vec::new),
        };
        let (count, mut trials) = (raw.len(), Vec::with_capacity(raw.len()));
        for (i, configuration) in raw.into_iter().enumerate() {
            let pairs: Vec<(String, String)> = configuration
                .into_iter()
                .map(|(id, value)| (id, value.as_text()))
                .collect();
            match space.parse_assignment(&pairs) {
                Ok(assignment) => trials.push(assignment),
                Err(e) => self.report(format!("initial_trials[{i}]"), e.to_string()),
            }
        }
        (trials.len() == count).then_some(trials)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::spec::parse;

    const STUDY: &str = "name: s\nobjective: {metric: accuracy, goal: maximize}\nparameters:\n  - {id: x, type: double, min: 0, max: 1}\nmax_trial_count: 3\ntrial:\n  command: [w]\n";

    #[test]
    fn initial_trials_are_checked_against_the_space() {
        let study = |block: &str| {
            parse(Path::new("s.yaml"), &format!("{STUDY}{block}\n")).map_err(|e| e.to_string())
        };
        let read = study("initial_trials: [{x: 0.25}, {x: 1}]").unwrap();
        let xs: Vec<f64> = read
            .initial_trials
            .iter()
            .map(|t| t["x"].as_f64().unwrap())
            .collect();
        assert_eq!(xs, [0.25, 1.0]);
        for (block, expected) in [
            (
                "initial_trials: [{x: 2}]",
                "initial_trials[0]: parameter 'x': 2 is not a number in [0, 1]",
            ),
            (
                "initial_trials: [{x: 0.5}, {y: 1}]",
                "initial_trials[1]: unknown parameter 'y'",
            ),
            (
                "initial_trials: [{}]",
                "initial_trials[0]: parameter 'x' is missing",
            ),
            (
                "initial_trials: [{x: fast}]",
                "initial_trials[0]: parameter 'x': 'fast'",
            ),
            (
                "initial_trials: [{x: 0}, {x: 0.5}, {x: 1}, {x: 0.25}]",
                "initial_trials: 4 configurations, more than max_trial_count (3)",
            ),
        ] {
            let error = study(block).unwrap_err();
            assert!(error.contains(expected), "{block}: {error}");
        }
    }
}
