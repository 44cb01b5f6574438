//! What the search maximises: the expected improvement of one more trial while others are
//! still running, as the greedy step of the batch expected improvement (qEI; Ginsbourger et
//! al., 2010; Wilson et al., 2018). The running trials' values are drawn jointly from the
//! posterior ("fantasies"); for each draw the candidate's value is conditioned on the drawn
//! ones and must beat the best of the known value and the drawn ones; the acquisition is the
//! log of the mean over draws. A candidate is worth little beside a running trial (their
//! values move together) and where a running trial is likely to improve already, so the
//! proposals of a batch spread out without leaving the places the model likes. With no trial
//! running it is the log expected improvement itself ([`hptune_gp::log_ei`]). With constraints,
//! the log probability that the candidate is feasible is added ([`super::feasibility`]); while
//! no trial is feasible there is no improvement to expect, and it is that probability alone.

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};
use rand_chacha::ChaCha8Rng;

use super::feasibility::Feasibility;
use hptune_gp::{
    Gp, GpError, MIN_VARIANCE, Prediction, factor, log_ei, log_ei_with_gradient, normal,
};

/// Joint draws of the running trials' values.
pub(crate) const FANTASIES: usize = 128;

/// The running trials, as the conditioning needs them.
pub(super) struct Running {
    /// Their features.
    points: Vec<Vec<f64>>,
    /// `K⁻¹ k(X, points)` ([`Gp::solve_cross`]).
    solved: DMatrix<f64>,
    /// The Cholesky factor of their posterior covariance.
    covariance: Cholesky<f64, Dyn>,
}

/// One joint draw of the running trials' values.
pub(super) struct Draw {
    /// The drawn values.
    pub values: DVector<f64>,
    /// `Σ⁻¹ (f - μ)`: the drawn values' deviations from the running trials' posterior means,
    /// through the inverse of their posterior covariance `Σ`. A candidate whose covariance
    /// with the running trials is `s` has, given the draw, its mean moved by `s · weights`.
    pub weights: DVector<f64>,
}

impl Running {
    /// The trials running at `points` (features, at least one) under `gp`, and `count` joint
    /// draws of their values from its posterior; an error when their posterior covariance
    /// cannot be factored even with jitter.
    pub(super) fn drawn(
        gp: &Gp,
        points: Vec<Vec<f64>>,
        count: usize,
        rng: &mut ChaCha8Rng,
    ) -> Result<(Self, Vec<Draw>), GpError> {
        let (mean, covariance) = gp.joint(&points);
        let covariance = factor(covariance)?;
        let lower = covariance.l_dirty().lower_triangle();
        let draws = (0..count)
            .map(|_| {
                let deviation = &lower * DVector::from_fn(points.len(), |_, _| normal(rng));
                Draw {
                    values: &mean + &deviation,
                    weights: covariance.solve(&deviation),
                }
            })
            .collect();
        let solved = gp.solve_cross(&points);
        let running = Self {
            points,
            solved,
            covariance,
        };
        Ok((running, draws))
    }

    /// A candidate's variance `σ²` conditioned on the running trials, given its covariances
    /// `s` with them: `σ² - sᵀΣ⁻¹s`, and `Σ⁻¹s`.
    fn condition(&self, variance: f64, cross: &DVector<f64>) -> (f64, DVector<f64>) {
        let solved = self.covariance.solve(cross);
        ((variance - cross.dot(&solved)).max(MIN_VARIANCE), solved)
    }

    /// Each of `points`' posterior mean under `gp`, its variance conditioned on the running
    /// trials, and its covariances with them (given a draw, its mean moves by their dot
    /// product with the draw's weights).
    pub(super) fn beside_many(&self, gp: &Gp, points: &[&[f64]]) -> Vec<(f64, f64, DVector<f64>)> {
        let (predictions, covariances) = gp.predict_many_beside(points, &self.points, &self.solved);
        predictions
            .into_iter()
            .zip(covariances.row_iter())
            .map(|((mean, variance), cross)| {
                let cross = cross.transpose();
                let (variance, _) = self.condition(variance, &cross);
                (mean, variance, cross)
            })
            .collect()
    }

    /// The posterior at features `x` under `gp`, with its gradient, ready to be conditioned
    /// on each draw ([`Beside::given`]).
    pub(super) fn beside(&self, gp: &Gp, x: &[f64]) -> Beside {
        let prediction = gp.predict_with_gradient(x);
        let (cross, cross_gradients) =
            gp.cross_covariance_with_gradient(x, &self.points, &self.solved);
        let (variance, solved) = self.condition(prediction.variance, &cross);
        let mut beside = Beside {
            variance_gradient: Vec::new(),
            prediction,
            cross,
            cross_gradients,
            variance,
        };
        beside.variance_gradient =
            beside.along(&solved, -2.0, &beside.prediction.variance_gradient);
        beside
    }
}

/// The posterior at a point beside the running trials, with its gradient.
pub(super) struct Beside {
    prediction: Prediction,
    /// Its covariances with the running trials, and their gradients.
    cross: DVector<f64>,
    cross_gradients: Vec<Vec<f64>>,
    /// Its variance conditioned on the running trials, and the gradient of that.
    variance: f64,
    variance_gradient: Vec<f64>,
}

impl Beside {
    /// `base + scale Σ_j weights_j ∂s_j`, `s` the covariances with the running trials.
    fn along(&self, weights: &DVector<f64>, scale: f64, base: &[f64]) -> Vec<f64> {
        let mut gradient = base.to_vec();
        for (w, g) in weights.iter().zip(&self.cross_gradients) {
            for (out, d) in gradient.iter_mut().zip(g) {
                *out += scale * w * d;
            }
        }
        gradient
    }

    /// The prediction given a draw of weights `weights`. Conditioned on the running trials,
    /// the variance is `σ² - sᵀΣ⁻¹s`, whose gradient is `∂σ² - 2 Σ_j (Σ⁻¹s)_j ∂s_j`; the mean
    /// `μ + s·w`, whose gradient is `∂μ + Σ_j w_j ∂s_j`.
    pub(super) fn given(&self, weights: &DVector<f64>) -> Prediction {
        Prediction {
            mean: self.prediction.mean + self.cross.dot(weights),
            variance: self.variance,
            mean_gradient: self.along(weights, 1.0, &self.prediction.mean_gradient),
            variance_gradient: self.variance_gradient.clone(),
        }
    }
}

/// One draw of the running trials' values, as the expected improvement needs it.
struct Fantasy {
    /// The draw's [`Draw::weights`].
    weights: DVector<f64>,
    /// The value to beat: the best of the known value and the drawn ones.
    best: f64,
}

/// The log of what a trial at a point is expected to improve, as [`Acquisition`] weighs it.
pub(crate) trait Improvement: Sync {
    /// The log improvement at each of `points` (features).
    fn log_many(&self, points: &[&[f64]]) -> Vec<f64>;
    /// A cheaper estimate of [`Improvement::log_many`], by which a search chooses the
    /// candidates it scores in full; `None` where there is none.
    fn screen_many(&self, _points: &[&[f64]]) -> Option<Vec<f64>> {
        None
    }
    /// The log improvement at features `x`, and its gradient by them.
    fn log_with_gradient(&self, x: &[f64]) -> (f64, Vec<f64>);
}

/// What the search maximises: the log of a trial's expected improvement (of one objective,
/// or of the hypervolume of several), plus the log probability that it is feasible where the
/// study has constraints.
pub(crate) struct Acquisition<'a> {
    improvement: Box<dyn Improvement + 'a>,
    feasibility: Option<&'a Feasibility>,
}

/// The expected improvement of a trial at a point, given the finished trials (the model)
/// and the running ones (drawn).
struct ExpectedImprovement<'a> {
    gp: &'a Gp,
    running: Option<Running>,
    /// Empty when there is no incumbent to improve on.
    fantasies: Vec<Fantasy>,
}

impl<'a> Acquisition<'a> {
    /// The acquisition of `improvement`, weighted by `feasibility` where the study has
    /// constraints.
    pub(crate) fn of(
        improvement: impl Improvement + 'a,
        feasibility: Option<&'a Feasibility>,
    ) -> Self {
        Self {
            improvement: Box::new(improvement),
            feasibility,
        }
    }

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
        let improvement = ExpectedImprovement::new(gp, best, running, rng)?;
        Ok(Self::of(improvement, feasibility))
    }

    /// The acquisition at features `x`.
    pub(crate) fn score(&self, x: &[f64]) -> f64 {
        self.score_many(&[x])[0]
    }

    /// The acquisition at each of `points` (features), computed together.
    pub(crate) fn score_many<P: AsRef<[f64]>>(&self, points: &[P]) -> Vec<f64> {
        let points: Vec<&[f64]> = points.iter().map(AsRef::as_ref).collect();
        let scores = self.improvement.log_many(&points);
        self.weighted(&points, scores)
    }

    /// A cheaper estimate of [`Acquisition::score_many`] at each of `points`, where the
    /// improvement has one ([`Improvement::screen_many`]).
    pub(crate) fn screen_many<P: AsRef<[f64]>>(&self, points: &[P]) -> Option<Vec<f64>> {
        let points: Vec<&[f64]> = points.iter().map(AsRef::as_ref).collect();
        let scores = self.improvement.screen_many(&points)?;
        Some(self.weighted(&points, scores))
    }

    /// `scores`, the log improvement at `points`, plus the log probability that each is
    /// feasible where the study has constraints.
    fn weighted(&self, points: &[&[f64]], mut scores: Vec<f64>) -> Vec<f64> {
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
        let (mut score, mut gradient) = self.improvement.log_with_gradient(x);
        if let Some(feasibility) = self.feasibility {
            let (log_p, log_p_gradient) = feasibility.log_probability_with_gradient(x);
            score += log_p;
            for (out, d) in gradient.iter_mut().zip(log_p_gradient) {
                *out += d;
            }
        }
        (score, gradient)
    }
}

impl<'a> ExpectedImprovement<'a> {
    /// As [`Acquisition::new`], without constraints.
    fn new(
        gp: &'a Gp,
        best: Option<f64>,
        running: Vec<Vec<f64>>,
        rng: &mut ChaCha8Rng,
    ) -> Result<Self, GpError> {
        let Some(best) = best else {
            return Ok(Self {
                gp,
                running: None,
                fantasies: Vec::new(),
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
            });
        }
        let (running, draws) = Running::drawn(gp, running, FANTASIES, rng)?;
        let fantasies = draws
            .into_iter()
            .map(|d| Fantasy {
                best: d.values.max().max(best),
                weights: d.weights,
            })
            .collect();
        Ok(Self {
            gp,
            running: Some(running),
            fantasies,
        })
    }
}

impl Improvement for ExpectedImprovement<'_> {
    /// The log expected improvement at each of `points`; 0 without an incumbent.
    fn log_many(&self, points: &[&[f64]]) -> Vec<f64> {
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
        running
            .beside_many(self.gp, points)
            .into_iter()
            .map(|(mean, variance, cross)| {
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
    fn log_with_gradient(&self, x: &[f64]) -> (f64, Vec<f64>) {
        if self.fantasies.is_empty() {
            return (0.0, vec![0.0; x.len()]);
        }
        let Some(running) = &self.running else {
            let prediction = self.gp.predict_with_gradient(x);
            return log_ei_with_gradient(&prediction, self.fantasies[0].best);
        };
        let beside = running.beside(self.gp, x);
        let scored: Vec<(f64, Vec<f64>)> = self
            .fantasies
            .iter()
            .map(|f| log_ei_with_gradient(&beside.given(&f.weights), f.best))
            .collect();
        mean_of_logs(&scored, x.len())
    }
}

/// `log(mean(exp(logs)))` without overflow, and each term's share of the mean (the weights
/// of the gradient of the log of a mean).
pub(super) fn log_mean_exp(logs: &[f64]) -> (f64, Vec<f64>) {
    let peak = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let terms: Vec<f64> = logs.iter().map(|l| (l - peak).exp()).collect();
    let sum: f64 = terms.iter().sum();
    let value = peak + (sum / logs.len() as f64).ln();
    (value, terms.iter().map(|t| t / sum).collect())
}

/// The log of the mean of the exponentials of `scored`'s logs, with its gradient from theirs
/// (each `width` long).
pub(super) fn mean_of_logs(scored: &[(f64, Vec<f64>)], width: usize) -> (f64, Vec<f64>) {
    let logs: Vec<f64> = scored.iter().map(|(l, _)| *l).collect();
    let (value, shares) = log_mean_exp(&logs);
    let mut gradient = vec![0.0; width];
    for ((_, g), share) in scored.iter().zip(shares) {
        for (out, d) in gradient.iter_mut().zip(g) {
            *out += share * d;
        }
    }
    (value, gradient)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hptune_gp::{Hyperparameters, central_difference, stream};

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
