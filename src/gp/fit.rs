//! Hyperparameters by maximum a posteriori: the log marginal likelihood of the data plus
//! priors, maximised by L-BFGS from a few starts in log space.
//!
//! Each length scale `ℓ` (in unit coordinates) has the log prior `-(ℓ² + ℓ⁻²) / 10`, the one
//! of Optuna's GPSampler: symmetric in `log ℓ` around `ℓ = 1`, the width of the cube, with
//! tails that fall doubly exponentially. A log-normal prior has heavy tails in `log ℓ`: with
//! a few dozen points a fit could then buy a better likelihood with one absurdly short length
//! scale (explaining one outlier, such as the lucky point on a rugged function) or absurdly
//! long ones (a flat model that sees the ripples as noise); this prior prices both out
//! (`ℓ = 0.1` costs 10 nats) while leaving `0.3 ≤ ℓ ≤ 3` nearly free.
use std::f64::consts::{LN_2, PI};

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use super::lbfgs::minimize;
use super::model::{GpError, Hyperparameters, factor, inverse_from_factor};

/// Noise variance always present (in standardised units), to keep the matrix well
/// conditioned; the fitted noise comes on top. It is small, as it sets how finely the model
/// resolves values near the optimum: values are standardised over the whole history, so on a
/// function with a wide range (Branin spans 0.4 to 300) a floor of 1e-6 (a standard deviation
/// of 1e-3) hid differences below 0.05. When the matrix is too ill-conditioned for this floor,
/// the Cholesky factor's jitter retries take over.
pub(super) const NOISE_FLOOR: f64 = 1e-9;
/// Mean and standard deviation of the prior of the log signal variance.
const SIGNAL_PRIOR: (f64, f64) = (0.0, 1.5);
/// Mean and standard deviation of the prior of the log fitted noise variance.
const NOISE_PRIOR: (f64, f64) = (-6.0, 2.5);
/// Weight of the length-scale prior: `log p(ℓ) = -WEIGHT (ℓ² + ℓ⁻²)`.
const LENGTH_PRIOR_WEIGHT: f64 = 0.1;
/// Evaluations of the posterior per start of a full fit.
const MAX_EVALUATIONS: u64 = 60;
/// Evaluations of a refit from a previous fit: it starts near the optimum, and 6 gave the
/// same regret as 12 over 60 seeds of Levy and Ackley and 10 of the smooth functions, in half
/// the time (docs/bayes.md).
const REFIT_EVALUATIONS: u64 = 6;
/// Bounds of each log length scale: 0.01 to 100 in unit coordinates.
const LOG_LENGTH_BOUNDS: (f64, f64) = (-4.6, 4.6);
/// Bounds of the log signal variance.
const LOG_SIGNAL_BOUNDS: (f64, f64) = (-7.0, 7.0);
/// Bounds of the log fitted noise variance.
const LOG_NOISE_BOUNDS: (f64, f64) = (-16.0, 1.0);

/// The log prior of a length scale `ℓ = exp(t)`, without its constant, and its derivative
/// by `t`: `-w (e^{2t} + e^{-2t})`.
fn length_prior(t: f64) -> (f64, f64) {
    let (up, down) = ((2.0 * t).exp(), (-2.0 * t).exp());
    (
        -LENGTH_PRIOR_WEIGHT * (up + down),
        -2.0 * LENGTH_PRIOR_WEIGHT * (up - down),
    )
}

/// Which length scale each feature takes: one per parameter. A numeric parameter's feature
/// has its own; the one-hot features of a categorical share the categorical's, each
/// difference counted half, so that two different values are at squared distance `1/ℓ²`:
/// the Hamming distance Optuna's GPSampler gives categoricals, with one hyperparameter per
/// categorical rather than one per value (fewer to fit from few trials). A categorical that
/// is inactive (every feature 0) is at half that distance from each of its values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LengthSharing {
    /// Per feature: its parameter and the weight of its squared difference.
    features: Vec<(usize, f64)>,
    /// Number of length scales fitted.
    parameters: usize,
}

impl LengthSharing {
    /// Features that take their parameter's length scale (`features[d] = (parameter,
    /// weight)`, parameters numbered from 0 in order), their squared differences weighted.
    pub(crate) fn new(features: Vec<(usize, f64)>) -> Self {
        debug_assert!(features.iter().all(|&(_, weight)| weight > 0.0));
        let parameters = features.iter().map(|&(p, _)| p + 1).max().unwrap_or(0);
        Self {
            features,
            parameters,
        }
    }

    /// One length scale per feature.
    #[cfg(test)]
    pub(crate) fn per_feature(width: usize) -> Self {
        Self::new((0..width).map(|d| (d, 1.0)).collect())
    }

    /// The length scale of each feature from those of the parameters.
    fn of_features(&self, per_parameter: &[f64]) -> Vec<f64> {
        self.features
            .iter()
            .map(|&(p, weight)| per_parameter[p] / weight.sqrt())
            .collect()
    }

    /// The length scale of each parameter from those of its features.
    fn of_parameters(&self, per_feature: &[f64]) -> Vec<f64> {
        let mut lengths = vec![1.0; self.parameters];
        for (&(p, weight), l) in self.features.iter().zip(per_feature) {
            lengths[p] = l * weight.sqrt();
        }
        lengths
    }
}

/// Hyperparameters in the log space the optimiser works in:
/// `[log ℓ_1 .. log ℓ_P, log s², log (noise - floor)]`, one length scale per parameter
/// ([`LengthSharing`]; the caller spreads them over the features).
fn unpack(theta: &[f64]) -> Hyperparameters {
    let d = theta.len() - 2;
    Hyperparameters {
        length_scales: theta[..d].iter().map(|t| t.exp()).collect(),
        signal_variance: theta[d].exp(),
        noise_variance: NOISE_FLOOR + theta[d + 1].exp(),
    }
}

/// `log N(t; mean, sd²)` without its constant, and its derivative.
fn log_normal_prior(t: f64, (mean, sd): (f64, f64)) -> (f64, f64) {
    let z = (t - mean) / sd;
    (-0.5 * z * z, -z / sd)
}

/// The squared difference of every pair of points `(i, j)`, `j < i`, along every length
/// scale: all that an evaluation of the posterior needs of the points, computed once per fit.
pub(super) struct PairDifferences {
    points: usize,
    /// `squared[l][p]`: the weighted sum of `(x_i,d - x_j,d)²` over the features `d` of length
    /// scale `l` for the `p`-th pair, pairs in the order of [`PairDifferences::pairs`].
    squared: Vec<Vec<f64>>,
}

impl PairDifferences {
    /// The differences of the points `x` (at least one), their features' length scales
    /// shared as `sharing` says.
    pub(super) fn new(x: &[Vec<f64>], sharing: &LengthSharing) -> Self {
        let points = x.len();
        let pairs = points * points.saturating_sub(1) / 2;
        let mut squared = vec![vec![0.0; pairs]; sharing.parameters];
        for (d, &(p, weight)) in sharing.features.iter().enumerate() {
            for (sum, (i, j)) in squared[p].iter_mut().zip(Self::pairs_of(points)) {
                *sum += weight * (x[i][d] - x[j][d]).powi(2);
            }
        }
        Self { points, squared }
    }

    /// The pairs `(i, j)`, `j < i`, row by row.
    fn pairs(&self) -> impl Iterator<Item = (usize, usize)> + use<> {
        Self::pairs_of(self.points)
    }

    fn pairs_of(points: usize) -> impl Iterator<Item = (usize, usize)> {
        (1..points).flat_map(|i| (0..i).map(move |j| (i, j)))
    }
}

/// The negative log posterior of `theta` given values `y` at the points of `pairs`, and its
/// gradient.
pub(super) fn negative_log_posterior(
    theta: &[f64],
    pairs: &PairDifferences,
    y: &[f64],
) -> Result<(f64, Vec<f64>), GpError> {
    if theta.iter().any(|t| !t.is_finite()) {
        return Err(GpError::NonFinite("hyperparameter"));
    }
    let n = pairs.points;
    let d = theta.len() - 2;
    let hyper = unpack(theta);
    let kernel = hyper.kernel();
    let inverse_squared_lengths: Vec<f64> =
        hyper.length_scales.iter().map(|l| 1.0 / (l * l)).collect();
    // Each pair's scaled squared distance r², feature by feature in long contiguous runs; then
    // its covariance and kernel slope from one square root and one exponential.
    let mut squared_distances = vec![0.0; n * n.saturating_sub(1) / 2];
    for (w, squared) in inverse_squared_lengths.iter().zip(&pairs.squared) {
        for (r2, s) in squared_distances.iter_mut().zip(squared) {
            *r2 += w * s;
        }
    }
    let values_and_slopes: Vec<(f64, f64)> = squared_distances
        .iter()
        .map(|r2| kernel.value_and_slope(r2.sqrt()))
        .collect();
    let mut k = DMatrix::from_diagonal_element(n, n, kernel.variance() + hyper.noise_variance);
    for ((i, j), &(value, _)) in pairs.pairs().zip(&values_and_slopes) {
        k[(i, j)] = value;
        k[(j, i)] = value;
    }
    let cholesky = factor(k)?;
    let y = DVector::from_column_slice(y);
    let alpha = cholesky.solve(&y);
    let log_det: f64 = 2.0
        * cholesky
            .l_dirty()
            .diagonal()
            .iter()
            .map(|v| v.ln())
            .sum::<f64>();
    let log_likelihood = -0.5 * y.dot(&alpha) - 0.5 * log_det - 0.5 * n as f64 * (2.0 * PI).ln();

    // d log p / dθ = ½ tr(W dK/dθ), W = ααᵀ - K⁻¹, W and dK/dθ symmetric: the sum over the
    // pairs j < i, plus half the diagonal's. By a log length scale, dk/d log ℓ_p =
    // slope(r) S_p / ℓ_p², S_p the weighted squared difference of the pair over the features
    // of ℓ_p (`PairDifferences::squared`; r² = Σ_p S_p / ℓ_p²) and slope that of
    // `Matern52::value_and_slope`; by the log signal variance, k itself.
    let w = &alpha * alpha.transpose() - inverse_from_factor(cholesky.l_dirty());
    let mut weighted_slopes = Vec::with_capacity(values_and_slopes.len());
    let mut gradient = vec![0.0; d + 2];
    for ((i, j), &(value, slope)) in pairs.pairs().zip(&values_and_slopes) {
        // W[(j, i)] = W[(i, j)], and column i is contiguous.
        let wij = w[(j, i)];
        weighted_slopes.push(wij * slope);
        gradient[d] += wij * value;
    }
    for ((g, squared), w) in gradient[..d]
        .iter_mut()
        .zip(&pairs.squared)
        .zip(&inverse_squared_lengths)
    {
        *g = w * weighted_slopes
            .iter()
            .zip(squared)
            .map(|(a, b)| a * b)
            .sum::<f64>();
    }
    let trace = w.trace();
    gradient[d] += 0.5 * kernel.variance() * trace;
    gradient[d + 1] = 0.5 * (hyper.noise_variance - NOISE_FLOOR) * trace;

    let mut log_prior = 0.0;
    for (t, g) in theta[..d].iter().zip(gradient.iter_mut()) {
        let (p, dp) = length_prior(*t);
        log_prior += p;
        *g += dp;
    }
    for (index, prior) in [(d, SIGNAL_PRIOR), (d + 1, NOISE_PRIOR)] {
        let (p, dp) = log_normal_prior(theta[index], prior);
        log_prior += p;
        gradient[index] += dp;
    }
    let value = -(log_likelihood + log_prior);
    Ok((value, gradient.into_iter().map(|g| -g).collect()))
}

/// The starts of the search: the prior's mode (`ℓ = 1`), and a shorter-scale, noisier guess
/// that catches wiggly functions the mode would miss.
fn starts(dimension: usize) -> [Vec<f64>; 2] {
    let at = |length: f64, noise: f64| {
        let mut theta = vec![length; dimension];
        theta.push(SIGNAL_PRIOR.0);
        theta.push(noise);
        theta
    };
    [at(0.0, NOISE_PRIOR.0), at(-LN_2 - 0.5, -3.0)]
}

/// Fits hyperparameters to standardised values `y` at points `x` (at least one point), the
/// features' length scales shared as `sharing` says, from the starts of [`starts`]; `None`
/// when no start gives a finite posterior.
pub(crate) fn fit(x: &[Vec<f64>], y: &[f64], sharing: &LengthSharing) -> Option<Hyperparameters> {
    if x.first()?.len() != sharing.features.len() {
        return None;
    }
    search(x, y, sharing, &starts(sharing.parameters), MAX_EVALUATIONS)
}

/// Fits hyperparameters from one start, the fit of a little less data, with few
/// evaluations: the hyperparameters move little when a few points are added.
pub(crate) fn refit(
    x: &[Vec<f64>],
    y: &[f64],
    sharing: &LengthSharing,
    start: &Hyperparameters,
) -> Option<Hyperparameters> {
    let width = x.first()?.len();
    if width != sharing.features.len() || width != start.length_scales.len() {
        return None;
    }
    let clamp = |t: f64, (lo, hi): (f64, f64)| t.clamp(lo, hi);
    let mut theta: Vec<f64> = sharing
        .of_parameters(&start.length_scales)
        .iter()
        .map(|l| clamp(l.ln(), LOG_LENGTH_BOUNDS))
        .collect();
    theta.push(clamp(start.signal_variance.ln(), LOG_SIGNAL_BOUNDS));
    let noise = (start.noise_variance - NOISE_FLOOR)
        .max(f64::MIN_POSITIVE)
        .ln();
    theta.push(clamp(noise, LOG_NOISE_BOUNDS));
    search(x, y, sharing, &[theta], REFIT_EVALUATIONS)
}

/// The best of L-BFGS runs from `starts` inside the bounds.
fn search(
    x: &[Vec<f64>],
    y: &[f64],
    sharing: &LengthSharing,
    starts: &[Vec<f64>],
    max_evaluations: u64,
) -> Option<Hyperparameters> {
    let dimension = sharing.parameters;
    let pairs = PairDifferences::new(x, sharing);
    let objective = |theta: &[f64]| negative_log_posterior(theta, &pairs, y).ok();
    let bound = |which: fn((f64, f64)) -> f64| -> Vec<f64> {
        let mut b = vec![which(LOG_LENGTH_BOUNDS); dimension];
        b.push(which(LOG_SIGNAL_BOUNDS));
        b.push(which(LOG_NOISE_BOUNDS));
        b
    };
    let (lower, upper) = (bound(|b| b.0), bound(|b| b.1));
    // The starts run on every core; the first of equal optima wins, as in sequence.
    let optima: Vec<_> = starts
        .par_iter()
        .map(|start| minimize(objective, start, &lower, &upper, max_evaluations))
        .collect();
    optima
        .into_iter()
        .flatten()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(theta, _)| {
            let fitted = unpack(&theta);
            Hyperparameters {
                length_scales: sharing.of_features(&fitted.length_scales),
                ..fitted
            }
        })
}

#[cfg(test)]
mod tests {
    use super::super::model::covariance;
    use super::super::random::{normal, stream};
    use super::*;
    use rand::Rng;

    #[test]
    fn gradient_matches_finite_differences() {
        // A double, then a categorical of two values, one-hot, sharing one length scale.
        let x: Vec<Vec<f64>> = (0..7)
            .map(|i| {
                let on = (i % 3 == 0) as u8 as f64;
                vec![(i as f64 * 0.37) % 1.0, on, 1.0 - on]
            })
            .collect();
        let y: Vec<f64> = x.iter().map(|p| (3.0 * p[0]).sin() + p[1]).collect();
        let theta = [-0.7, 0.2, 0.3, -4.0];
        let sharing = LengthSharing::new(vec![(0, 1.0), (1, 0.5), (1, 0.5)]);
        let pairs = PairDifferences::new(&x, &sharing);
        let (_, gradient) = negative_log_posterior(&theta, &pairs, &y).unwrap();
        for (i, analytic) in gradient.iter().enumerate() {
            let value = |t: &[f64]| negative_log_posterior(t, &pairs, &y).unwrap().0;
            let numeric = super::super::central_difference(value, &theta, i);
            assert!(
                (numeric - analytic).abs() < 1e-5 * (1.0 + numeric.abs()),
                "θ{i}: {numeric} vs {analytic}"
            );
        }
    }

    #[test]
    fn shared_length_scales_put_two_values_of_a_categorical_at_distance_one_over_l() {
        let sharing = LengthSharing::new(vec![(0, 1.0), (1, 0.5), (1, 0.5), (1, 0.5)]);
        let features = sharing.of_features(&[0.3, 2.0]);
        let kernel = Hyperparameters {
            length_scales: features.clone(),
            signal_variance: 1.0,
            noise_variance: 0.0,
        }
        .kernel();
        // Values 0 and 2 of the categorical, the double equal: r = 1 / 2.
        let r = kernel.distance(&[0.5, 1.0, 0.0, 0.0], &[0.5, 0.0, 0.0, 1.0]);
        assert!((r - 0.5).abs() < 1e-12, "{r}");
        assert_eq!(sharing.of_parameters(&features), vec![0.3, 2.0]);
        // The squared differences summed per parameter, as the kernel weighs them.
        let pairs = PairDifferences::new(
            &[vec![0.5, 1.0, 0.0, 0.0], vec![0.1, 0.0, 0.0, 1.0]],
            &sharing,
        );
        assert!((pairs.squared[0][0] - 0.16).abs() < 1e-12);
        assert_eq!(pairs.squared[1], vec![1.0]);
    }

    #[test]
    fn the_length_prior_peaks_at_one_and_is_symmetric_in_log_scale() {
        assert_eq!(length_prior(0.0), (-0.2, 0.0));
        // ℓ = 0.1 and ℓ = 10: -0.1 (100 + 0.01).
        let (short, slope_short) = length_prior(0.1f64.ln());
        let (long, slope_long) = length_prior(10f64.ln());
        assert!((short - -10.001).abs() < 1e-9 && (long - short).abs() < 1e-9);
        assert!((slope_short + slope_long).abs() < 1e-9 && slope_short > 0.0);
        let numeric = super::super::central_difference(|t| length_prior(t[0]).0, &[0.7], 0);
        assert!((numeric - length_prior(0.7).1).abs() < 1e-6);
    }

    #[test]
    fn fit_recovers_the_length_scales_of_a_sampled_gp() {
        // 120 points of one draw of a GP with ℓ = (0.2, 0.8), s² = 1, small noise.
        let mut rng = stream(3, 0);
        let x: Vec<Vec<f64>> = (0..120)
            .map(|_| vec![rng.random::<f64>(), rng.random::<f64>()])
            .collect();
        let truth = Hyperparameters {
            length_scales: vec![0.2, 0.8],
            signal_variance: 1.0,
            noise_variance: 1e-4,
        };
        let cholesky = factor(covariance(&truth.kernel(), &x, truth.noise_variance)).unwrap();
        let z = DVector::from_iterator(x.len(), (0..x.len()).map(|_| normal(&mut rng)));
        let y: Vec<f64> = (cholesky.l() * z).iter().copied().collect();
        let fitted = fit(&x, &y, &LengthSharing::per_feature(2)).unwrap();
        let [l0, l1] = fitted.length_scales[..] else {
            panic!()
        };
        assert!((0.14..0.28).contains(&l0), "{fitted:?}");
        assert!((0.5..1.3).contains(&l1), "{fitted:?}");
        assert!(fitted.noise_variance < 1e-2, "{fitted:?}");
    }

    #[test]
    fn a_single_point_or_duplicates_give_finite_hyperparameters() {
        let one = fit(&[vec![0.5]], &[0.0], &LengthSharing::per_feature(1)).unwrap();
        assert!(one.length_scales[0].is_finite() && one.noise_variance > 0.0);
        let same = vec![vec![0.3, 0.3]; 4];
        let fitted = fit(
            &same,
            &[1.0, -1.0, 1.0, -1.0],
            &LengthSharing::per_feature(2),
        )
        .unwrap();
        assert!(fitted.noise_variance > 0.1, "{fitted:?}");
    }
}
