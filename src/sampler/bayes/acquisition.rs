//! What the search maximises: the expected improvement of one more trial while others are
//! still running, as the greedy step of the batch expected improvement (qEI; Ginsbourger et
//! al., 2010; Wilson et al., 2018). The running trials' values are drawn jointly from the
//! posterior ("fantasies"); for each draw the candidate's value is conditioned on the drawn
//! ones and must beat the best of the known value and the drawn ones; the acquisition is the
//! log of the mean over draws. A candidate is worth little beside a running trial (their
//! values move together) and where a running trial is likely to improve already, so the
//! proposals of a batch spread out without leaving the places the model likes. With no trial
//! running it is the log expected improvement itself ([`crate::gp::log_ei`]). With constraints,
//! the log probability that the candidate is feasible is added ([`super::feasibility`]); while
//! no trial is feasible there is no improvement to expect, and it is that probability alone.

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};
use rand_chacha::ChaCha8Rng;

use super::feasibility::Feasibility;
use crate::gp::{
    Gp, GpError, MIN_VARIANCE, Prediction, factor, log_ei, log_ei_with_gradient, normal,
};

/// Joint draws of the running trials' values.
pub(crate) const FANTASIES: usize = 128;

/// One joint draw of the running trials' values.
struct Fantasy {
    /// `Σ⁻¹ (f - μ)`: the drawn values' deviations from the running trials' posterior means,
    /// through the inverse of their posterior covariance `Σ`. A candidate whose covariance
    /// with the running trials is `s` has, given the draw, its mean moved by `s · weights`.
    weights: DVector<f64>,
    /// The value to beat: the best of the known value and the drawn ones.
    best: f64,
}

/// The running trials, as the conditioning needs them.
struct Running {
    /// Their features.
    points: Vec<Vec<f64>>,
    /// `K⁻¹ k(X, points)` ([`Gp::solve_cross`]).
    solved: DMatrix<f64>,
    /// The Cholesky factor of their posterior covariance.
    covariance: Cholesky<f64, Dyn>,
}

impl Running {
    /// A candidate's variance `σ²` conditioned on the running trials, given its covariances
    /// `s` with them: `σ² - sᵀΣ⁻¹s`, and `Σ⁻¹s`.
    fn condition(&self, variance: f64, cross: &DVector<f64>) -> (f64, DVector<f64>) {
        let solved = self.covariance.solve(cross);
        ((variance - cross.dot(&solved)).max(MIN_VARIANCE), solved)
    }
}

/// The expected improvement of a trial at a point, given the finished trials (the model)
/// and the running ones (drawn).
pub(crate) struct Acquisition<'a> {
    gp: &'a Gp,
    running: Option<Running>,
    /// Empty when there is no incumbent to improve on.
    fantasies: Vec<Fantasy>,
    feasibility: Option<&'a Feasibility>,
}

impl<'a> Acquisition<'a> {
    /// The acquisition of `gp` (the model of the finished trials) over `best` (standardised,
    /// maximisation; `None` while no trial is feasible), with the trials running at `running`
    /// (features) drawn from `rng`, weighted by `feasibility` where the study has constraints;
    /// an error when the running trials' posterior covariance cannot be factored even with
    /// jitter.
    pub(crate) fn new(
        gp: &'a Gp,
        best: Option<f64>,
        running: Vec<Vec<f64>>,
        rng: &mut ChaCha8Rng,
        feasibility: Option<&'a Feasibility>,
    ) -> Result<Self, GpError> {
        let Some(best) = best else {
            return Ok(Self {
                gp,
                running: None,
                fantasies: Vec::new(),
                feasibility,
            });
        };
        if running.is_empty() {
            let fantasies = vec![Fantasy {
                weights: DVector::zeros(0),
                best,
            }];
            return Ok(Self {
                gp,
                running: None,
                fantasies,
                feasibility,
            });
        }
        let (mean, covariance) = gp.joint(&running);
        let covariance = factor(covariance)?;
        let lower = covariance.l_dirty().lower_triangle();
        let fantasies = (0..FANTASIES)
            .map(|_| {
                let deviation = &lower * DVector::from_fn(running.len(), |_, _| normal(rng));
                let best = (&mean + &deviation).max().max(best);
                let weights = covariance.solve(&deviation);
                Fantasy { weights, best }
            })
            .collect();
        let solved = gp.solve_cross(&running);
        let running = Running {
            points: running,
            solved,
            covariance,
        };
        Ok(Self {
            gp,
            running: Some(running),
            fantasies,
            feasibility,
        })
    }

    /// The acquisition at features `x`.
    pub(crate) fn score(&self, x: &[f64]) -> f64 {
        self.score_many(&[x])[0]
    }

    /// The acquisition at each of `points` (features), computed together.
    pub(crate) fn score_many<P: AsRef<[f64]>>(&self, points: &[P]) -> Vec<f64> {
        let mut scores = self.improvement_many(points);
        if let Some(feasibility) = self.feasibility {
            for (score, log_p) in scores
                .iter_mut()
                .zip(feasibility.log_probability_many(points))
            {
                *score += log_p;
            }
        }
        scores
    }

    /// The acquisition at features `x`, and its gradient by them.
    pub(crate) fn score_with_gradient(&self, x: &[f64]) -> (f64, Vec<f64>) {
        let (mut score, mut gradient) = self.improvement_with_gradient(x);
        if let Some(feasibility) = self.feasibility {
            let (log_p, log_p_gradient) = feasibility.log_probability_with_gradient(x);
            score += log_p;
            for (out, d) in gradient.iter_mut().zip(log_p_gradient) {
                *out += d;
            }
        }
        (score, gradient)
    }

    /// The log expected improvement at each of `points`; 0 without an incumbent.
    fn improvement_many<P: AsRef<[f64]>>(&self, points: &[P]) -> Vec<f64> {
        if self.fantasies.is_empty() {
            return vec![0.0; points.len()];
        }
        let Some(running) = &self.running else {
            let best = self.fantasies[0].best;
            return self
                .gp
                .predict_many(points)
                .into_iter()
                .map(|(mean, variance)| log_ei(mean, variance, best))
                .collect();
        };
        let (predictions, covariances) =
            self.gp
                .predict_many_beside(points, &running.points, &running.solved);
        predictions
            .into_iter()
            .zip(covariances.row_iter())
            .map(|((mean, variance), cross)| {
                let cross = cross.transpose();
                let (variance, _) = running.condition(variance, &cross);
                let logs: Vec<f64> = self
                    .fantasies
                    .iter()
                    .map(|f| log_ei(mean + cross.dot(&f.weights), variance, f.best))
                    .collect();
                log_mean_exp(&logs).0
            })
            .collect()
    }

    /// The log expected improvement at features `x`, and its gradient by them; 0 without an
    /// incumbent.
    fn improvement_with_gradient(&self, x: &[f64]) -> (f64, Vec<f64>) {
        if self.fantasies.is_empty() {
            return (0.0, vec![0.0; x.len()]);
        }
        let prediction = self.gp.predict_with_gradient(x);
        let Some(running) = &self.running else {
            return log_ei_with_gradient(&prediction, self.fantasies[0].best);
        };
        let (cross, cross_gradients) =
            self.gp
                .cross_covariance_with_gradient(x, &running.points, &running.solved);
        // Conditioned on the running trials: variance σ² - sᵀΣ⁻¹s, whose gradient is
        // ∂σ² - 2 Σ_j (Σ⁻¹s)_j ∂s_j; mean μ + s·w, whose gradient is ∂μ + Σ_j w_j ∂s_j.
        let along = |weights: &DVector<f64>, scale: f64, base: &[f64]| {
            let mut gradient = base.to_vec();
            for (w, g) in weights.iter().zip(&cross_gradients) {
                for (out, d) in gradient.iter_mut().zip(g) {
                    *out += scale * w * d;
                }
            }
            gradient
        };
        let (variance, solved) = running.condition(prediction.variance, &cross);
        let variance_gradient = along(&solved, -2.0, &prediction.variance_gradient);
        let scored: Vec<(f64, Vec<f64>)> = self
            .fantasies
            .iter()
            .map(|f| {
                let conditioned = Prediction {
                    mean: prediction.mean + cross.dot(&f.weights),
                    variance,
                    mean_gradient: along(&f.weights, 1.0, &prediction.mean_gradient),
                    variance_gradient: variance_gradient.clone(),
                };
                log_ei_with_gradient(&conditioned, f.best)
            })
            .collect();
        let logs: Vec<f64> = scored.iter().map(|(l, _)| *l).collect();
        let (value, shares) = log_mean_exp(&logs);
        let mut gradient = vec![0.0; x.len()];
        for ((_, g), share) in scored.iter().zip(shares) {
            for (out, d) in gradient.iter_mut().zip(g) {
                *out += share * d;
            }
        }
        (value, gradient)
    }
}

/// `log(mean(exp(logs)))` without overflow, and each term's share of the mean (the weights
/// of the gradient of the log of a mean).
fn log_mean_exp(logs: &[f64]) -> (f64, Vec<f64>) {
    let peak = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let terms: Vec<f64> = logs.iter().map(|l| (l - peak).exp()).collect();
    let sum: f64 = terms.iter().sum();
    let value = peak + (sum / logs.len() as f64).ln();
    (value, terms.iter().map(|t| t / sum).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gp::{Hyperparameters, central_difference, stream};

    /// A model of three points on a line, the best at 0.5.
    fn gp() -> Gp {
        let x = vec![vec![0.1, 0.2], vec![0.5, 0.5], vec![0.9, 0.7]];
        let hyper = Hyperparameters {
            length_scales: vec![0.3, 0.4],
            signal_variance: 1.0,
            noise_variance: 1e-6,
        };
        Gp::new(x, &[0.0, 2.0, -1.0], &hyper).unwrap()
    }

    #[test]
    fn with_no_running_trial_it_is_the_log_expected_improvement() {
        let gp = gp();
        let acquisition =
            Acquisition::new(&gp, Some(2.0), Vec::new(), &mut stream(1, 0), None).unwrap();
        let x = [0.6, 0.45];
        let (mean, variance) = gp.predict(&x);
        assert_eq!(acquisition.score(&x), log_ei(mean, variance, 2.0));
        assert_eq!(
            acquisition.score_with_gradient(&x),
            log_ei_with_gradient(&gp.predict_with_gradient(&x), 2.0)
        );
    }

    #[test]
    fn it_agrees_with_a_brute_force_estimate_of_the_improvement_over_the_running_trial() {
        // A trial runs beside the best point, where it is likely to improve; the candidate is
        // near it. Brute force: draw both values jointly and average the candidate's
        // improvement over the best of the known value and the running trial's.
        let gp = gp();
        let (running, candidate) = (vec![0.55, 0.5], vec![0.6, 0.55]);
        let (mean, covariance) = gp.joint(&[running.clone(), candidate.clone()]);
        let lower = factor(covariance).unwrap().l_dirty().lower_triangle();
        let mut rng = stream(3, 0);
        let draws = 1_000_000;
        let total: f64 = (0..draws)
            .map(|_| {
                let f = &mean + &lower * DVector::from_fn(2, |_, _| normal(&mut rng));
                (f[1] - f[0].max(2.0)).max(0.0)
            })
            .sum();
        let brute_force = (total / draws as f64).ln();
        // Ours from 64 streams of 128 fantasies each: one stream's estimate varies by about
        // 0.3 (in log) from stream to stream, their mean by a eighth of that.
        let mean_of_streams = (0..64)
            .map(|n| {
                let acquisition = Acquisition::new(
                    &gp,
                    Some(2.0),
                    vec![running.clone()],
                    &mut stream(2, n),
                    None,
                )
                .unwrap();
                acquisition.score(&candidate).exp()
            })
            .sum::<f64>()
            / 64.0;
        let ours = mean_of_streams.ln();
        assert!((ours - brute_force).abs() < 0.1, "{ours} vs {brute_force}");
        // The plain expected improvement ignores that the running trial may win already.
        let (m, v) = gp.predict(&candidate);
        assert!(log_ei(m, v, 2.0) > brute_force + 0.5);
    }

    #[test]
    fn the_gradient_matches_finite_differences_with_running_trials() {
        let gp = gp();
        let running = vec![vec![0.55, 0.5], vec![0.3, 0.35]];
        let acquisition =
            Acquisition::new(&gp, Some(2.0), running, &mut stream(4, 0), None).unwrap();
        for x in [[0.6, 0.45], [0.2, 0.8], [0.45, 0.3]] {
            let (value, gradient) = acquisition.score_with_gradient(&x);
            assert!((value - acquisition.score(&x)).abs() < 1e-12);
            for (d, analytic) in gradient.iter().enumerate() {
                let numeric = central_difference(|x| acquisition.score(x), &x, d);
                assert!(
                    (numeric - analytic).abs() < 1e-5 * (1.0 + numeric.abs()),
                    "{x:?}, {d}: {numeric} vs {analytic}"
                );
            }
        }
    }

    #[test]
    fn the_same_stream_draws_the_same_fantasies() {
        let gp = gp();
        let at = |number| {
            Acquisition::new(
                &gp,
                Some(2.0),
                vec![vec![0.55, 0.5]],
                &mut stream(5, number),
                None,
            )
            .unwrap()
            .score(&[0.6, 0.55])
        };
        assert_eq!(at(1), at(1));
        assert_ne!(at(1), at(2));
    }

    #[test]
    fn the_log_of_a_mean_of_exponentials_stays_finite() {
        let (value, shares) = log_mean_exp(&[-1000.0, -1000.0 + 2f64.ln()]);
        assert!((value - (-1000.0 + 1.5f64.ln())).abs() < 1e-12);
        assert!((shares[0] - 1.0 / 3.0).abs() < 1e-12 && (shares[1] - 2.0 / 3.0).abs() < 1e-12);
    }
}
