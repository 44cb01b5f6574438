//! Dynamic loss scaling for f16 training, as PyTorch's `torch.amp.GradScaler` does it with its
//! defaults.
//!
//! f16's smallest subnormal is 6e-8, so gradients below it (common in the lower layers of a
//! fine-tuned BERT) become zero. The loss is multiplied by the scale before the backward pass,
//! which lifts every gradient by the same factor, and the optimiser divides it out again in f32.
//! A scale too large overflows some gradient to infinity (or NaN): that step is skipped and the
//! scale halved; after [`GROWTH_INTERVAL`] steps in a row without overflow it is doubled, so the
//! scale stays near the largest that does not overflow.

/// The scale of the first step (GradScaler's `init_scale`).
pub(crate) const INITIAL_SCALE: f32 = 65536.0;
/// Steps in a row with finite gradients after which the scale doubles (`growth_interval`).
pub(crate) const GROWTH_INTERVAL: u32 = 2000;
/// The factor of the scale after `GROWTH_INTERVAL` good steps (`growth_factor`).
const GROWTH_FACTOR: f32 = 2.0;
/// The factor of the scale after a step with an infinite or NaN gradient (`backoff_factor`).
const BACKOFF_FACTOR: f32 = 0.5;

/// The same rule for a scale kept on the device (see [`crate::fused::StepDecision`]).
pub(crate) const SCALE_RULE: ScaleRule = ScaleRule {
    growth_interval: GROWTH_INTERVAL,
    growth: GROWTH_FACTOR,
    backoff: BACKOFF_FACTOR,
};

use crate::fused::ScaleRule;

/// The current loss scale and the count of skipped steps.
#[derive(Debug, Clone, PartialEq)]
pub struct DynamicLossScale {
    scale: f32,
    good_steps: u32,
    skipped: u64,
}

impl Default for DynamicLossScale {
    fn default() -> Self {
        DynamicLossScale {
            scale: INITIAL_SCALE,
            good_steps: 0,
            skipped: 0,
        }
    }
}

impl DynamicLossScale {
    /// The factor to multiply the loss by before the backward pass.
    pub fn scale(&self) -> f64 {
        f64::from(self.scale)
    }

    /// Optimiser steps skipped so far because a gradient was infinite or NaN.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The state of a scale kept on the device: `[scale, finite steps in a row, steps
    /// skipped]` (see [`ScaleRule`]).
    pub(crate) fn state(&self) -> [f32; 3] {
        [self.scale, self.good_steps as f32, self.skipped as f32]
    }

    /// The scale of a state read back from the device (see [`Self::state`]).
    pub(crate) fn from_state([scale, good_steps, skipped]: [f32; 3]) -> Self {
        DynamicLossScale {
            scale,
            good_steps: good_steps as u32,
            skipped: skipped as u64,
        }
    }

    /// Records whether the gradients of the step taken at [`Self::scale`] were all finite and
    /// sets the scale of the next step (GradScaler's `update`, i.e. `_amp_update_scale_`): a
    /// step with a non-finite gradient halves the scale, the growth interval's good step in a
    /// row doubles it, unless the doubled scale would be infinite in f32.
    pub fn update(&mut self, gradients_finite: bool) {
        if !gradients_finite {
            self.scale *= BACKOFF_FACTOR;
            self.good_steps = 0;
            self.skipped += 1;
            return;
        }
        self.good_steps += 1;
        if self.good_steps == GROWTH_INTERVAL {
            let grown = self.scale * GROWTH_FACTOR;
            if grown.is_finite() {
                self.scale = grown;
            }
            self.good_steps = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[value, times]` pairs expanded to the sequence of values.
    fn expand<T: Clone>(runs: Vec<(T, usize)>) -> Vec<T> {
        runs.into_iter()
            .flat_map(|(value, times)| std::iter::repeat_n(value, times))
            .collect()
    }

    #[derive(serde::Deserialize)]
    struct GradScalerRun {
        initial_scale: f32,
        growth_interval: u32,
        steps: usize,
        non_finite_steps: Vec<usize>,
        scale_after_step: Vec<(f32, usize)>,
        applied: Vec<(bool, usize)>,
    }

    #[test]
    fn the_scale_follows_pytorchs_grad_scaler_over_a_scripted_run_of_overflows() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/grad_scaler.json"
        );
        let run: GradScalerRun =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(run.initial_scale, INITIAL_SCALE);
        assert_eq!(run.growth_interval, GROWTH_INTERVAL);
        let expected_scales = expand(run.scale_after_step);
        let expected_applied = expand(run.applied);
        assert_eq!(expected_scales.len(), run.steps);
        let mut scale = DynamicLossScale::default();
        for step in 0..run.steps {
            let finite = !run.non_finite_steps.contains(&step);
            assert_eq!(
                finite, expected_applied[step],
                "GradScaler applied the update of step {step} exactly when its gradient was finite"
            );
            scale.update(finite);
            assert_eq!(scale.scale() as f32, expected_scales[step], "step {step}");
        }
        assert_eq!(scale.skipped(), run.non_finite_steps.len() as u64);
    }

    #[test]
    fn the_scale_stops_growing_below_f32s_infinity() {
        let mut scale = DynamicLossScale {
            scale: 2f32.powi(127),
            ..DynamicLossScale::default()
        };
        for _ in 0..GROWTH_INTERVAL {
            scale.update(true);
        }
        assert_eq!(scale.scale(), 2f64.powi(127));
        scale.update(false);
        assert_eq!(scale.scale(), 2f64.powi(126));
    }
}
