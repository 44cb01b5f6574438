//! The finished trials as the model sees them: features, standardised values (larger is
//! better, failed trials at the worst value), the incumbents.

use super::encoding::Encoding;
use super::search;
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
    /// Standardised values, larger is better; failed trials at the worst value.
    pub y: Vec<f64>,
    /// Unit points of the best trials, best first.
    pub incumbents: Vec<Vec<f64>>,
    /// Every trial's value in history order, larger is better; `None` where it failed.
    pub values: Vec<Option<f64>>,
}

impl TrainingData {
    /// `None` when no trial has a value yet.
    pub fn new(encoding: &Encoding<'_>, goal: Goal, history: &[Observation]) -> Option<Self> {
        let sign = match goal {
            Goal::Maximize => 1.0,
            Goal::Minimize => -1.0,
        };
        let values: Vec<Option<f64>> = history
            .iter()
            .map(|o| o.value.map(|v| sign * v).filter(|v| v.is_finite()))
            .collect();
        let worst = values.iter().flatten().copied().reduce(f64::min)?;
        let raw: Vec<f64> = values.iter().map(|v| v.unwrap_or(worst)).collect();
        let mean = raw.iter().sum::<f64>() / raw.len() as f64;
        let spread =
            (raw.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / raw.len() as f64).sqrt();
        let scale = if spread > 1e-12 * mean.abs().max(1.0) {
            spread
        } else {
            1.0
        };
        let y: Vec<f64> = raw.iter().map(|v| (v - mean) / scale).collect();
        let x: Vec<Vec<f64>> = history.iter().map(|o| encoding.encode(&o.params)).collect();

        // Succeeded trials, best first; ties by trial order.
        let mut ranked: Vec<usize> = (0..history.len())
            .filter(|&i| values[i].is_some())
            .collect();
        ranked.sort_by(|&a, &b| y[b].total_cmp(&y[a]));
        let incumbents = ranked
            .iter()
            .take(search::INCUMBENTS)
            .map(|&i| encoding.unit(&history[i].params))
            .collect();
        let (x, y) = nearest(x, y, ranked[0], MAX_MODEL_POINTS);
        Some(Self {
            x,
            y,
            incumbents,
            values,
        })
    }
}

/// At most `keep` of the points, the nearest to point `center` (itself included).
fn nearest(x: Vec<Vec<f64>>, y: Vec<f64>, center: usize, keep: usize) -> (Vec<Vec<f64>>, Vec<f64>) {
    if x.len() <= keep {
        return (x, y);
    }
    let distance = |p: &[f64]| -> f64 {
        p.iter()
            .zip(&x[center])
            .map(|(a, b)| (a - b) * (a - b))
            .sum()
    };
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| distance(&x[a]).total_cmp(&distance(&x[b])));
    order.truncate(keep);
    order.sort_unstable();
    (
        order.iter().map(|&i| x[i].clone()).collect(),
        order.iter().map(|&i| y[i]).collect(),
    )
}
