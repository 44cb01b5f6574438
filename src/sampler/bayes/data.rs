//! The finished trials as the model sees them: features, standardised and warped values
//! (larger is better, failed trials at the worst value), the incumbents.

use super::encoding::Encoding;
use super::search;
use super::warp::YeoJohnson;
use crate::sampler::Observation;
use crate::study::Goal;

/// The most finished trials the model is fitted on: past it, the ones nearest the best point
/// are kept, which bounds the time of a proposal (cubic in this number) and makes the model
/// local where the search has converged.
pub const MAX_MODEL_POINTS: usize = 128;

/// The finished trials as the model sees them.
pub struct TrainingData {
    /// Features.
    pub x: Vec<Vec<f64>>,
    /// The model's values: standardised and warped, larger is better; failed trials at the
    /// worst value.
    pub y: Vec<f64>,
    /// The map from a trial's value to the model's and back.
    pub output: OutputMap,
    /// Unit points of the best trials, best first: the best feasible ones, or where none is
    /// feasible the best of the others.
    pub incumbents: Vec<Vec<f64>>,
    /// Features of the best feasible trials (those of `incumbents`); empty when no trial is
    /// feasible.
    pub feasible_incumbents: Vec<Vec<f64>>,
    /// Every trial's value in history order, larger is better; `None` where it failed or is
    /// infeasible (it improves on nothing).
    pub values: Vec<Option<f64>>,
}

impl TrainingData {
    /// `None` when no trial has a value yet.
    pub fn new(encoding: &Encoding<'_>, goal: Goal, history: &[Observation]) -> Option<Self> {
        let values: Vec<Option<f64>> = history
            .iter()
            .map(|o| {
                o.value
                    .map(|v| goal_sign(goal) * v)
                    .filter(|v| v.is_finite())
            })
            .collect();
        let worst = values.iter().flatten().copied().reduce(f64::min)?;
        let raw: Vec<f64> = values.iter().map(|v| v.unwrap_or(worst)).collect();
        let output = OutputMap::fitted(goal, &raw);
        let y: Vec<f64> = raw.iter().map(|&v| output.warped(v)).collect();
        let x: Vec<Vec<f64>> = history.iter().map(|o| encoding.encode(&o.params)).collect();

        // Succeeded trials, feasible ones first, best first; ties by trial order.
        let mut ranked: Vec<usize> = (0..history.len())
            .filter(|&i| values[i].is_some())
            .collect();
        ranked.sort_by(|&a, &b| {
            let feasible = |i: usize| history[i].feasible;
            feasible(b).cmp(&feasible(a)).then(y[b].total_cmp(&y[a]))
        });
        let best: Vec<usize> = ranked.iter().take(search::INCUMBENTS).copied().collect();
        let incumbents = best
            .iter()
            .map(|&i| encoding.unit(&history[i].params))
            .collect();
        let feasible_incumbents = best
            .iter()
            .filter(|&&i| history[i].feasible)
            .map(|&i| x[i].clone())
            .collect();
        let center = x[ranked[0]].clone();
        let (x, y) = nearest(x, y, &center, MAX_MODEL_POINTS);
        let values = values
            .iter()
            .zip(history)
            .map(|(v, o)| v.filter(|_| o.feasible))
            .collect();
        Some(Self {
            x,
            y,
            output,
            incumbents,
            feasible_incumbents,
            values,
        })
    }
}

/// `1` when larger is better, `-1` when smaller is.
fn goal_sign(goal: Goal) -> f64 {
    match goal {
        Goal::Maximize => 1.0,
        Goal::Minimize => -1.0,
    }
}

/// The mean and the spread (1 where the values are constant) of `values`.
pub(super) fn moments(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = values.clone().count() as f64;
    let mean = values.clone().sum::<f64>() / n;
    let spread = (values.map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    let scale = if spread > 1e-12 * mean.abs().max(1.0) {
        spread
    } else {
        1.0
    };
    (mean, scale)
}

/// The map from a trial's value to the model's: larger made better, standardised (mean 0,
/// variance 1), warped by a Yeo-Johnson transform fitted to the standardised values, and
/// standardised again. Each step is monotone increasing, so the order of the trials is kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutputMap {
    sign: f64,
    mean: f64,
    scale: f64,
    warp: YeoJohnson,
    warped_mean: f64,
    warped_scale: f64,
}

impl OutputMap {
    /// The map fitted to the values `raw` (larger is better, at least one).
    fn fitted(goal: Goal, raw: &[f64]) -> Self {
        let (mean, scale) = moments(raw.iter().copied());
        let standardised: Vec<f64> = raw.iter().map(|v| (v - mean) / scale).collect();
        let warp = YeoJohnson::fitted(&standardised);
        let (warped_mean, warped_scale) = moments(standardised.iter().map(|&v| warp.apply(v)));
        Self {
            sign: goal_sign(goal),
            mean,
            scale,
            warp,
            warped_mean,
            warped_scale,
        }
    }

    /// The model's value for `signed`, a value made larger-is-better.
    fn warped(&self, signed: f64) -> f64 {
        (self.warp.apply((signed - self.mean) / self.scale) - self.warped_mean) / self.warped_scale
    }

    /// The warp of the standardised values.
    pub fn warp(&self) -> YeoJohnson {
        self.warp
    }

    /// The trial's value, in the metric's units, whose model value is `z`.
    pub fn value(&self, z: f64) -> f64 {
        let standardised = self.warp.inverse(z * self.warped_scale + self.warped_mean);
        self.sign * (standardised * self.scale + self.mean)
    }
}

/// At most `keep` of the points `x` with their values `y`, the nearest to `center`.
pub(super) fn nearest(
    x: Vec<Vec<f64>>,
    y: Vec<f64>,
    center: &[f64],
    keep: usize,
) -> (Vec<Vec<f64>>, Vec<f64>) {
    if x.len() <= keep {
        return (x, y);
    }
    let distance =
        |p: &[f64]| -> f64 { p.iter().zip(center).map(|(a, b)| (a - b) * (a - b)).sum() };
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| distance(&x[a]).total_cmp(&distance(&x[b])));
    order.truncate(keep);
    order.sort_unstable();
    (
        order.iter().map(|&i| x[i].clone()).collect(),
        order.iter().map(|&i| y[i]).collect(),
    )
}
