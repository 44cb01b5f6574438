//! The probability that a trial at a point is feasible: one Gaussian process per constraint,
//! fitted to the slack of the constraint's metric (how far inside its bound each trial's
//! value is), and for `failed_as_infeasible` one more fitted to whether trials ran (+1) or
//! failed (-1). The constraints are taken as independent, so the log probability is the
//! sum over them of `log Φ((μ - t)/σ)`, `t` the slack 0 in the model's units: the
//! probability of feasibility of Gardner et al. (2014), as Optuna's GPSampler and BoTorch's
//! constrained expected improvement have it. The acquisition adds it to the log expected
//! improvement ([`super::acquisition`]).

use super::data::{MAX_MODEL_POINTS, moments, nearest};
use super::encoding::Encoding;
use crate::sampler::Observation;
use crate::study::Constraints;
use hptune_gp::{Gp, GpError, LengthSharing, Prediction, fit, log_cdf};

/// The model of one constraint's slack, standardised.
struct SlackModel {
    gp: Gp,
    /// The slack 0 (the bound) in the model's units.
    threshold: f64,
}

impl SlackModel {
    /// The model of `slacks` at points `x`, the nearest [`MAX_MODEL_POINTS`] to `center`, the
    /// features' length scales shared as `sharing` says; `None` without points or when no
    /// hyperparameters fit.
    fn fitted(
        x: Vec<Vec<f64>>,
        slacks: Vec<f64>,
        center: &[f64],
        sharing: &LengthSharing,
    ) -> Result<Option<Self>, GpError> {
        if x.is_empty() {
            return Ok(None);
        }
        let (x, slacks) = nearest(x, slacks, center, MAX_MODEL_POINTS);
        let (mean, scale) = moments(slacks.iter().copied());
        let y: Vec<f64> = slacks.iter().map(|s| (s - mean) / scale).collect();
        let Some(hyper) = fit(&x, &y, sharing) else {
            return Ok(None);
        };
        Ok(Some(Self {
            gp: Gp::new(x, &y, &hyper)?,
            threshold: -mean / scale,
        }))
    }

    /// `log P(slack ≥ 0)` at a prediction `(mean, variance)`.
    fn log_probability(&self, mean: f64, variance: f64) -> f64 {
        log_cdf((mean - self.threshold) / variance.sqrt()).0
    }
}

/// The probability that a trial at a point keeps every constraint.
pub(crate) struct Feasibility {
    models: Vec<SlackModel>,
}

impl Feasibility {
    /// The model of `constraints` over the finished trials `history`, its slack models each
    /// fitted on the points nearest `center` (features); `None` when there is nothing to
    /// model: no constraint, or no trial that reported a constrained metric or failed.
    pub(crate) fn fitted(
        encoding: &Encoding<'_>,
        constraints: &Constraints,
        history: &[Observation],
        center: &[f64],
    ) -> Result<Option<Self>, GpError> {
        let sharing = encoding.length_sharing();
        let mut models = Vec::new();
        for constraint in &constraints.bounds {
            let (x, slacks) = history
                .iter()
                .filter_map(|o| {
                    let value = o.constraint_values.get(&constraint.metric)?;
                    Some((encoding.encode(&o.params), constraint.slack(*value)))
                })
                .unzip();
            models.extend(SlackModel::fitted(x, slacks, center, &sharing)?);
        }
        if constraints.failed_as_infeasible {
            // Ran: +1; failed (no value and infeasible): -1; stopped trials say nothing.
            let (x, ran): (Vec<Vec<f64>>, Vec<f64>) = history
                .iter()
                .filter(|o| o.value.is_some() || !o.feasible)
                .map(|o| {
                    let ran = if o.value.is_some() { 1.0 } else { -1.0 };
                    (encoding.encode(&o.params), ran)
                })
                .unzip();
            // Until a trial has failed there is nothing to learn.
            if ran.contains(&-1.0) {
                models.extend(SlackModel::fitted(x, ran, center, &sharing)?);
            }
        }
        Ok((!models.is_empty()).then_some(Self { models }))
    }

    /// `log P(feasible)` at each of `points` (features).
    pub(crate) fn log_probability_many<P: AsRef<[f64]>>(&self, points: &[P]) -> Vec<f64> {
        let mut total = vec![0.0; points.len()];
        for model in &self.models {
            for (sum, (mean, variance)) in total.iter_mut().zip(model.gp.predict_many(points)) {
                *sum += model.log_probability(mean, variance);
            }
        }
        total
    }

    /// `log P(feasible)` at features `x`, and its gradient by them.
    pub(crate) fn log_probability_with_gradient(&self, x: &[f64]) -> (f64, Vec<f64>) {
        let mut gradient = vec![0.0; x.len()];
        let mut total = 0.0;
        for model in &self.models {
            let Prediction {
                mean,
                variance,
                mean_gradient,
                variance_gradient,
            } = model.gp.predict_with_gradient(x);
            let sigma = variance.sqrt();
            let z = (mean - model.threshold) / sigma;
            let (log_p, ratio) = log_cdf(z);
            total += log_p;
            // z = (μ - t)/σ: dz = dμ/σ - z dvar/(2 var).
            for ((out, dm), dv) in gradient
                .iter_mut()
                .zip(&mean_gradient)
                .zip(&variance_gradient)
            {
                *out += ratio * (dm / sigma - z * dv / (2.0 * variance));
            }
        }
        (total, gradient)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::study::space::{Assignment, ParamValue, Space, unit_double};
    use crate::study::{Bound, Constraint};
    use hptune_gp::{Hyperparameters, central_difference};

    fn cdf(z: f64) -> f64 {
        0.5 * libm::erfc(-z / std::f64::consts::SQRT_2)
    }

    #[test]
    fn the_probability_is_phi_of_the_bound_less_the_mean_over_sigma() {
        // One observation at x0 of a slack (max - value) standardised as (s - m)/c to y0: the
        // posterior is closed-form, μ'(x) = k(x, x0) y0 / (k(x0, x0) + noise) and
        // σ'²(x) = k(x, x) - k(x, x0)² / (k(x0, x0) + noise); in the value's units
        // μ = max - (c μ' + m), σ = c σ', and P(value ≤ max) = Φ((max - μ)/σ).
        let hyper = Hyperparameters {
            length_scales: vec![0.4],
            signal_variance: 1.3,
            noise_variance: 0.01,
        };
        let kernel = hyper.kernel();
        let (x0, y0, max, m, c) = (vec![0.3], -0.8, 16.0, 0.5, 2.0);
        let feasibility = Feasibility {
            models: vec![SlackModel {
                gp: Gp::new(vec![x0.clone()], &[y0], &hyper).unwrap(),
                threshold: -m / c,
            }],
        };
        for x in [0.3, 0.5, 0.9, 2.5] {
            let k = kernel.value(&[x], &x0);
            let k0 = kernel.value(&x0, &x0);
            let mean = max - (c * k * y0 / (k0 + 0.01) + m);
            let sigma = c * (k0 - k * k / (k0 + 0.01)).sqrt();
            let expected = cdf((max - mean) / sigma);
            let ours = feasibility.log_probability_many(&[[x]])[0].exp();
            assert!(
                (ours - expected).abs() < 1e-12,
                "x={x}: {ours} vs {expected}"
            );
        }
    }

    #[test]
    fn independent_constraints_multiply_and_the_gradient_matches_finite_differences() {
        let hyper = Hyperparameters {
            length_scales: vec![0.3, 0.5],
            signal_variance: 1.0,
            noise_variance: 1e-4,
        };
        let x = vec![vec![0.1, 0.2], vec![0.5, 0.5], vec![0.9, 0.7]];
        let model = |y: &[f64], threshold| SlackModel {
            gp: Gp::new(x.clone(), y, &hyper).unwrap(),
            threshold,
        };
        let both = Feasibility {
            models: vec![
                model(&[1.0, -0.5, 0.3], 0.2),
                model(&[-1.0, 0.4, 0.8], -0.1),
            ],
        };
        let first = Feasibility {
            models: vec![model(&[1.0, -0.5, 0.3], 0.2)],
        };
        let second = Feasibility {
            models: vec![model(&[-1.0, 0.4, 0.8], -0.1)],
        };
        for point in [[0.4, 0.45], [0.2, 0.9], [0.95, 0.1]] {
            let sum =
                first.log_probability_many(&[point])[0] + second.log_probability_many(&[point])[0];
            let (value, gradient) = both.log_probability_with_gradient(&point);
            assert!((value - sum).abs() < 1e-12);
            for (d, analytic) in gradient.iter().enumerate() {
                let numeric = central_difference(|p| both.log_probability_many(&[p])[0], &point, d);
                assert!(
                    (numeric - analytic).abs() < 1e-5 * (1.0 + numeric.abs()),
                    "{point:?}, {d}: {numeric} vs {analytic}"
                );
            }
        }
    }

    fn observation(number: u64, a: f64, memory: Option<f64>, ran: bool) -> Observation {
        Observation {
            number,
            params: Assignment::from([("a".to_string(), ParamValue::Float(a))]),
            value: ran.then_some(a),
            values: Vec::new(),
            feasible: ran && memory.is_none_or(|m| m <= 16.0),
            constraint_values: memory
                .map(|m| BTreeMap::from([("memory".to_string(), m)]))
                .unwrap_or_default(),
        }
    }

    #[test]
    fn fitted_to_a_history_it_believes_feasible_where_the_metric_stayed_low() {
        // Memory grows with a and crosses 16 at a = 0.5.
        let space = Space::new(vec![unit_double("a")]);
        let encoding = Encoding::new(&space);
        let history: Vec<Observation> = (0..12u32)
            .map(|n| {
                let a = f64::from(n) / 11.0;
                observation(u64::from(n), a, Some(32.0 * a), true)
            })
            .collect();
        let constraints = Constraints {
            bounds: vec![Constraint {
                metric: "memory".into(),
                bound: Bound::Max(16.0),
            }],
            failed_as_infeasible: false,
        };
        let feasibility = Feasibility::fitted(&encoding, &constraints, &history, &[0.0])
            .unwrap()
            .unwrap();
        let p = |a: f64| feasibility.log_probability_many(&[[a]])[0].exp();
        assert!(p(0.1) > 0.99 && p(0.9) < 0.01, "{} {}", p(0.1), p(0.9));
        assert!((p(0.5) - 0.5).abs() < 0.1, "{}", p(0.5));
    }

    #[test]
    fn failures_are_modelled_only_when_they_are_infeasible_and_some_happened() {
        let space = Space::new(vec![unit_double("a")]);
        let encoding = Encoding::new(&space);
        // Trials fail for a > 0.6.
        let history: Vec<Observation> = (0..10u32)
            .map(|n| {
                let a = f64::from(n) / 9.0;
                observation(u64::from(n), a, None, a <= 0.6)
            })
            .collect();
        let mut constraints = Constraints::default();
        assert!(
            Feasibility::fitted(&encoding, &constraints, &history, &[0.0])
                .unwrap()
                .is_none()
        );
        constraints.failed_as_infeasible = true;
        let ran_everywhere: Vec<Observation> = history
            .iter()
            .map(|o| observation(o.number, 0.1, None, true))
            .collect();
        assert!(
            Feasibility::fitted(&encoding, &constraints, &ran_everywhere, &[0.0])
                .unwrap()
                .is_none()
        );
        let feasibility = Feasibility::fitted(&encoding, &constraints, &history, &[0.0])
            .unwrap()
            .unwrap();
        let p = |a: f64| feasibility.log_probability_many(&[[a]])[0].exp();
        assert!(p(0.2) > 0.9 && p(0.95) < 0.1, "{} {}", p(0.2), p(0.95));
    }
}
