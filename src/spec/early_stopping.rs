//! The `early_stopping` block: the rule and its settings.

use super::Checker;
use super::raw::RawEarlyStopping;
use crate::study::stopping::StoppingRule;

impl Checker {
    /// Checks the `early_stopping` block.
    pub(super) fn early_stopping(&mut self, raw: &RawEarlyStopping) -> Option<StoppingRule> {
        let field = "early_stopping";
        let (median, asha) = match raw.rule.as_str() {
            "median" => (true, false),
            "asha" => (false, true),
            other => {
                self.report(
                    format!("{field}.rule"),
                    format!("'{other}' is not a stopping rule: use median or asha"),
                );
                return None;
            }
        };
        let mut ok = true;
        for (name, present, allowed) in [
            ("min_steps", raw.min_steps.is_some(), median),
            ("min_trials", raw.min_trials.is_some(), median),
            ("min_resource", raw.min_resource.is_some(), asha),
            ("reduction_factor", raw.reduction_factor.is_some(), asha),
        ] {
            if present && !allowed {
                self.report(
                    format!("{field}.{name}"),
                    format!("does not apply to the {} rule", raw.rule),
                );
                ok = false;
            }
        }
        if median {
            let min_steps =
                self.at_least("early_stopping.min_steps", raw.min_steps.unwrap_or(1), 1);
            let min_trials =
                self.at_least("early_stopping.min_trials", raw.min_trials.unwrap_or(3), 1);
            return Some(StoppingRule::Median {
                min_steps: min_steps.filter(|_| ok)?,
                min_trials: min_trials? as usize,
            });
        }
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
        Some(StoppingRule::Asha {
            min_resource: min_resource.filter(|_| ok)?,
            reduction_factor,
        })
    }
}
