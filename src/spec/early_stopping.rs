//! The `early_stopping` block: the rule and its settings, each rule's fields one struct of
//! `raw.rs`.

use super::raw::{RawAsha, RawMedian, RawRule};
use super::{Checker, block};
use crate::study::stopping::{CurveModel, StoppingRule};

/// Where the block stands in the study file.
const PATH: [&str; 1] = ["early_stopping"];

impl Checker<'_> {
    /// Checks the `early_stopping` block.
    pub(super) fn early_stopping(&mut self, raw: &RawRule) -> Option<StoppingRule> {
        let median = block::fields::<RawMedian>();
        let asha = block::fields::<RawAsha>();
        let own = match raw.rule.as_str() {
            "median" => median,
            "asha" => asha,
            other => {
                self.report(
                    "early_stopping.rule",
                    format!("'{other}' is not a stopping rule: use median or asha"),
                );
                return None;
            }
        };
        let every = [median, asha].concat();
        let variant = format!("the {} rule", raw.rule);
        let fields_ok = self.variant_fields(&PATH, "rule", own, &every, &variant);
        let rule = if raw.rule == "median" {
            let raw = self.block(&PATH)?;
            self.median(raw)
        } else {
            let raw = self.block(&PATH)?;
            self.asha(raw)
        };
        rule.filter(|_| fields_ok)
    }

    fn median(&mut self, raw: RawMedian) -> Option<StoppingRule> {
        let min_steps = self.at_least("early_stopping.min_steps", raw.min_steps.unwrap_or(1), 1);
        let min_trials = self.at_least("early_stopping.min_trials", raw.min_trials.unwrap_or(3), 1);
        Some(StoppingRule::Median {
            min_steps: min_steps?,
            min_trials: min_trials? as usize,
        })
    }

    fn asha(&mut self, raw: RawAsha) -> Option<StoppingRule> {
        let min_resource = self.at_least(
            "early_stopping.min_resource",
            raw.min_resource.unwrap_or(1),
            1,
        );
        let reduction_factor = raw.reduction_factor.unwrap_or(3.0);
        if !(reduction_factor > 1.0 && reduction_factor.is_finite()) {
            self.report(
                "early_stopping.reduction_factor",
                format!("must be a number > 1, got {reduction_factor}"),
            );
            return None;
        }
        let max_resource = match raw.max_resource {
            Some(max) => Some(self.at_least(
                "early_stopping.max_resource",
                max,
                min_resource.unwrap_or(1),
            )?),
            None => None,
        };
        let curves = match raw.fidelity.as_deref() {
            None | Some("model") => CurveModel::Fidelity,
            Some("off") => CurveModel::Off,
            Some(other) => {
                self.report(
                    "early_stopping.fidelity",
                    format!("'{other}' is not a fidelity setting: use model or off"),
                );
                return None;
            }
        };
        Some(StoppingRule::Asha {
            min_resource: min_resource?,
            reduction_factor,
            max_resource,
            curves,
        })
    }
}
