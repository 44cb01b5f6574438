//! The expected hypervolume improvement of a trial, for studies of several objectives: one
//! model per objective, each objective's posterior taken as independent of the others, and
//! the log of the expected gain in the volume the front dominates above the reference point
//! ([`hptune_gp::Boxes`], exact, in closed form). The front is that of the models' posterior
//! means at the finished trials, not of their observed values, so that noise does not put a
//! lucky trial on it (as the single objective's incumbent is the best posterior mean).
//!
//! Trials still running count as they do for one objective ([`super::acquisition`]): their
//! values are drawn jointly from each objective's posterior, the candidate's posterior is
//! conditioned on each draw, and the drawn values join the front; the acquisition is the log
//! of the mean over draws.

use nalgebra::DVector;
use rand_chacha::ChaCha8Rng;

use super::acquisition::{Improvement, Running, log_mean_exp, mean_of_logs};
use hptune_gp::{Boxes, Gp, GpError};

/// Joint draws of the running trials' values, fewer than one objective's
/// ([`super::acquisition::FANTASIES`]): each draw has a front of its own, and each of its
/// boxes is scored at every candidate.
pub(crate) const FANTASIES: usize = 32;

/// The draws a search's screening of its candidates averages over
/// ([`Improvement::screen_many`]): the first of the [`FANTASIES`], an eighth of the cost.
const SCREENING_FANTASIES: usize = 4;

/// One draw of the running trials' values of every objective.
struct Fantasy {
    /// The region the draw's front (the known one and the drawn values) leaves free.
    boxes: Boxes,
    /// Per objective, the draw's [`super::acquisition::Draw::weights`].
    weights: Vec<DVector<f64>>,
}

/// The expected hypervolume improvement of a trial at a point, given the finished trials
/// (one model per objective) and the running ones (drawn).
pub(crate) struct HypervolumeImprovement<'a> {
    models: &'a [Gp],
    /// Per objective; empty when no trial runs.
    running: Vec<Running>,
    /// One, without draws, when no trial runs.
    fantasies: Vec<Fantasy>,
}

impl<'a> HypervolumeImprovement<'a> {
    /// The improvement over `front` (the known points, one value per objective in its
    /// model's units, maximised) above `reference`, under `models` (one per objective), with
    /// the trials running at `running` (features) drawn `count` times from `rng`; an error
    /// when the running trials' posterior covariance cannot be factored even with jitter.
    pub(crate) fn new(
        models: &'a [Gp],
        front: Vec<Vec<f64>>,
        reference: &[f64],
        running: Vec<Vec<f64>>,
        count: usize,
        rng: &mut ChaCha8Rng,
    ) -> Result<Self, GpError> {
        if running.is_empty() {
            let fantasies = vec![Fantasy {
                boxes: Boxes::new(&front, reference),
                weights: Vec::new(),
            }];
            return Ok(Self {
                models,
                running: Vec::new(),
                fantasies,
            });
        }
        let mut conditioned = Vec::new();
        let mut draws = Vec::new();
        for model in models {
            let (r, d) = Running::drawn(model, running.clone(), count, rng)?;
            conditioned.push(r);
            draws.push(d);
        }
        let fantasies = (0..count)
            .map(|f| {
                let mut points = front.clone();
                points.extend(
                    (0..running.len())
                        .map(|i| draws.iter().map(|d| d[f].values[i]).collect::<Vec<f64>>()),
                );
                Fantasy {
                    boxes: Boxes::new(&points, reference),
                    weights: draws.iter().map(|d| d[f].weights.clone()).collect(),
                }
            })
            .collect();
        Ok(Self {
            models,
            running: conditioned,
            fantasies,
        })
    }
}

impl HypervolumeImprovement<'_> {
    /// The log improvement at each of `points`, averaged over `fantasies` (some of
    /// [`HypervolumeImprovement::fantasies`]) when trials run.
    fn log_many_over(&self, points: &[&[f64]], fantasies: &[Fantasy]) -> Vec<f64> {
        if self.running.is_empty() {
            let predictions: Vec<Vec<(f64, f64)>> =
                self.models.iter().map(|m| m.predict_many(points)).collect();
            let boxes = &self.fantasies[0].boxes;
            return (0..points.len())
                .map(|i| {
                    let at: Vec<(f64, f64)> = predictions.iter().map(|p| p[i]).collect();
                    boxes.log_expected_improvement(&at)
                })
                .collect();
        }
        let beside: Vec<_> = self
            .models
            .iter()
            .zip(&self.running)
            .map(|(m, r)| r.beside_many(m, points))
            .collect();
        (0..points.len())
            .map(|i| {
                let logs: Vec<f64> = fantasies
                    .iter()
                    .map(|f| {
                        let at: Vec<(f64, f64)> = beside
                            .iter()
                            .zip(&f.weights)
                            .map(|(b, w)| (b[i].0 + b[i].2.dot(w), b[i].1))
                            .collect();
                        f.boxes.log_expected_improvement(&at)
                    })
                    .collect();
                log_mean_exp(&logs).0
            })
            .collect()
    }
}

impl Improvement for HypervolumeImprovement<'_> {
    fn log_many(&self, points: &[&[f64]]) -> Vec<f64> {
        self.log_many_over(points, &self.fantasies)
    }

    /// With trials running, the mean over the first [`SCREENING_FANTASIES`] draws.
    fn screen_many(&self, points: &[&[f64]]) -> Option<Vec<f64>> {
        (self.fantasies.len() > SCREENING_FANTASIES)
            .then(|| self.log_many_over(points, &self.fantasies[..SCREENING_FANTASIES]))
    }

    fn log_with_gradient(&self, x: &[f64]) -> (f64, Vec<f64>) {
        if self.running.is_empty() {
            let predictions: Vec<_> = self
                .models
                .iter()
                .map(|m| m.predict_with_gradient(x))
                .collect();
            return self.fantasies[0]
                .boxes
                .log_expected_improvement_with_gradient(&predictions);
        }
        let beside: Vec<_> = self
            .models
            .iter()
            .zip(&self.running)
            .map(|(m, r)| r.beside(m, x))
            .collect();
        let scored: Vec<(f64, Vec<f64>)> = self
            .fantasies
            .iter()
            .map(|f| {
                let at: Vec<_> = beside
                    .iter()
                    .zip(&f.weights)
                    .map(|(b, w)| b.given(w))
                    .collect();
                f.boxes.log_expected_improvement_with_gradient(&at)
            })
            .collect();
        mean_of_logs(&scored, x.len())
    }
}

#[cfg(test)]
mod tests;
