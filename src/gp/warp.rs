//! The output warp: a Yeo-Johnson power transform of the standardised values, its power
//! chosen from the data by maximum likelihood (as HEBO does), so that a few values far out in
//! one tail (a diverging run's loss, a function spanning orders of magnitude) do not flatten
//! the model of the rest. The warp is monotone increasing, so the best point is the same
//! before and after it, and the expected improvement is computed in the warped space.
//! [`has_outliers`] tells a few values far out from a spread that is merely skewed.

use crate::stats::median;

/// The interval searched for the power.
const POWER_BOUNDS: (f64, f64) = (-2.0, 4.0);
/// The gain in log likelihood over the identity (power 1) a fitted power must show to be
/// used: the 95 % quantile of χ²₁ over two, a likelihood-ratio test at 5 %. Values that look
/// Gaussian keep the identity, and with it the model of today's well-scaled functions.
const MIN_GAIN: f64 = 1.92;
/// How far from the median a value must lie, in robust standard deviations (1.4826 median
/// absolute deviations), to be an outlier ([`has_outliers`]).
const OUTLIER_DEVIATIONS: f64 = 20.0;
/// A normal distribution's standard deviation over its median absolute deviation.
const MAD_TO_SD: f64 = 1.482_602_218_505_602;
/// Golden-section steps: the interval shrinks by 0.618 each, to about 1e-8 of its width.
const STEPS: usize = 40;

/// The Yeo-Johnson transform with power `λ`: `((y + 1)^λ - 1) / λ` for `y ≥ 0` and
/// `-((1 - y)^(2 - λ) - 1) / (2 - λ)` for `y < 0` (the logarithms at `λ = 0` and `λ = 2`).
/// `λ = 1` is the identity; `λ > 1` compresses the lower tail, `λ < 1` the upper one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct YeoJohnson {
    power: f64,
}

/// `((1 + y)^p - 1) / p` for `y ≥ 0`, `ln(1 + y)` at `p = 0`.
fn power_branch(y: f64, p: f64) -> f64 {
    if p.abs() < 1e-12 {
        y.ln_1p()
    } else {
        (p * y.ln_1p()).exp_m1() / p
    }
}

/// The inverse of [`power_branch`] for its value `z`.
fn inverse_power_branch(z: f64, p: f64) -> f64 {
    if p.abs() < 1e-12 {
        z.exp_m1()
    } else {
        ((p * z).ln_1p() / p).exp_m1()
    }
}

impl YeoJohnson {
    /// The transform with this power.
    pub(crate) fn new(power: f64) -> Self {
        Self { power }
    }

    /// The identity.
    pub(crate) fn identity() -> Self {
        Self::new(1.0)
    }

    /// The transform for values `y`: the power of largest [`log_likelihood`] in
    /// [-2, 4], or the identity unless that power beats it by a likelihood-ratio test.
    pub(crate) fn fitted(y: &[f64]) -> Self {
        let likelihood = |p: f64| log_likelihood(y, p);
        let identity = likelihood(1.0);
        if !identity.is_finite() {
            return Self::identity();
        }
        let power = golden_section_maximum(likelihood, POWER_BOUNDS);
        if likelihood(power) - identity > MIN_GAIN {
            Self::new(power)
        } else {
            Self::identity()
        }
    }

    /// Its power `λ`.
    pub(crate) fn power(&self) -> f64 {
        self.power
    }

    /// The warped value of `y`.
    pub(crate) fn apply(&self, y: f64) -> f64 {
        if y >= 0.0 {
            power_branch(y, self.power)
        } else {
            -power_branch(-y, 2.0 - self.power)
        }
    }

    /// The value whose warped value is `z` (the warp's range is bounded on one side for
    /// `λ` outside [0, 2]; beyond that bound the result is infinite).
    pub(crate) fn inverse(&self, z: f64) -> f64 {
        if z >= 0.0 {
            inverse_power_branch(z, self.power)
        } else {
            -inverse_power_branch(-z, 2.0 - self.power)
        }
    }

    /// `d apply / dy`, its Jacobian: `(1 + |y|)^(±(λ - 1))`.
    pub(crate) fn derivative(&self, y: f64) -> f64 {
        (y.signum() * (self.power - 1.0) * y.abs().ln_1p()).exp()
    }
}

/// Whether some value of `y` lies more than [`OUTLIER_DEVIATIONS`] robust standard deviations
/// from their median: a few values far out, such as a diverging run's loss or a function
/// spanning orders of magnitude, rather than a skewed spread (the values of a bowl in many
/// dimensions, most trials far from its bottom), whose far values carry the bowl's slope.
/// Where more than half the values are equal, any other value is far out.
pub(crate) fn has_outliers(y: Vec<f64>) -> bool {
    let Some(center) = median(y.clone()) else {
        return false;
    };
    let deviations: Vec<f64> = y.into_iter().map(|v| (v - center).abs()).collect();
    let farthest = deviations.iter().copied().fold(0.0, f64::max);
    let spread = median(deviations).unwrap_or(0.0) * MAD_TO_SD;
    farthest > OUTLIER_DEVIATIONS * spread
}

/// The log likelihood of values `y` under a Gaussian of the warped values with the mean and
/// variance that fit them best, with the log Jacobian of the warp: what the power maximises
/// (scipy's `yeojohnson_llf`).
pub(super) fn log_likelihood(y: &[f64], power: f64) -> f64 {
    let warp = YeoJohnson::new(power);
    let n = y.len() as f64;
    let z: Vec<f64> = y.iter().map(|&v| warp.apply(v)).collect();
    let mean = z.iter().sum::<f64>() / n;
    let variance = z.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    let log_jacobian: f64 = y.iter().map(|&v| warp.derivative(v).ln()).sum();
    -0.5 * n * variance.ln() + log_jacobian
}

/// The maximum of `f` on `[lo, hi]` by golden-section search (for a unimodal `f`).
fn golden_section_maximum(f: impl Fn(f64) -> f64, (mut lo, mut hi): (f64, f64)) -> f64 {
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let mut a = hi - ratio * (hi - lo);
    let mut b = lo + ratio * (hi - lo);
    let (mut fa, mut fb) = (f(a), f(b));
    for _ in 0..STEPS {
        // A NaN counts as lower than anything.
        if fa.total_cmp(&fb).is_ge() && !fa.is_nan() {
            hi = b;
            (b, fb) = (a, fa);
            a = hi - ratio * (hi - lo);
            fa = f(a);
        } else {
            lo = a;
            (a, fa) = (b, fb);
            b = lo + ratio * (hi - lo);
            fb = f(b);
        }
    }
    (lo + hi) / 2.0
}

#[cfg(test)]
mod tests {
    use super::super::central_difference;
    use super::super::random::{normal, stream};
    use super::*;

    const POWERS: [f64; 7] = [-1.5, 0.0, 0.5, 1.0, 1.7, 2.0, 3.0];
    const VALUES: [f64; 8] = [-7.0, -1.0, -0.3, 0.0, 1e-9, 0.4, 2.0, 12.0];

    #[test]
    fn the_inverse_undoes_the_warp() {
        for power in POWERS {
            let warp = YeoJohnson::new(power);
            for y in VALUES {
                let back = warp.inverse(warp.apply(y));
                assert!(
                    (back - y).abs() < 1e-9 * (1.0 + y.abs()),
                    "λ {power}: {y} -> {back}"
                );
            }
        }
    }

    #[test]
    fn the_jacobian_matches_finite_differences() {
        for power in POWERS {
            let warp = YeoJohnson::new(power);
            for y in VALUES.iter().filter(|y| y.abs() > 1e-3) {
                let numeric = central_difference(|v| warp.apply(v[0]), &[*y], 0);
                let analytic = warp.derivative(*y);
                assert!(
                    (numeric - analytic).abs() < 1e-6 * (1.0 + analytic),
                    "λ {power} at {y}: {numeric} vs {analytic}"
                );
            }
        }
    }

    #[test]
    fn warp_and_likelihood_match_scipy() {
        // scipy.stats.yeojohnson(y, λ) and yeojohnson_llf(λ, y), scipy 1.17.1.
        let y = [-2.0, -0.5, 0.0, 0.3, 1.0, 4.0, 9.0];
        let warped_at_half = [
            -2.797434948471088,
            -0.5580782047249224,
            0.0,
            0.280350850198276,
            0.8284271247461901,
            2.472135954999579,
            4.324555320336759,
        ];
        let warp = YeoJohnson::new(0.5);
        for (v, expected) in y.iter().zip(warped_at_half) {
            assert!((warp.apply(*v) - expected).abs() < 1e-12, "{v}");
        }
        for (power, expected) in [(0.5, -6.862542678433965), (1.7, -13.822259178020742)] {
            let got = log_likelihood(&y, power);
            assert!(
                (got - expected).abs() < 1e-9,
                "λ {power}: {got} vs {expected}"
            );
        }
        // scipy.stats.yeojohnson_normmax(y).
        let fitted = golden_section_maximum(|p| log_likelihood(&y, p), POWER_BOUNDS);
        assert!((fitted - 0.417241670610204).abs() < 1e-6, "{fitted}");
    }

    fn standardised(y: Vec<f64>) -> Vec<f64> {
        let n = y.len() as f64;
        let mean = y.iter().sum::<f64>() / n;
        let sd = (y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
        y.into_iter().map(|v| (v - mean) / sd).collect()
    }

    #[test]
    fn lognormal_values_are_warped_and_gaussian_ones_are_not() {
        let mut rng = stream(11, 0);
        let gaussian: Vec<f64> = (0..60).map(|_| normal(&mut rng)).collect();
        // Losses spanning orders of magnitude, maximised: the negated lognormal.
        let lognormal: Vec<f64> = gaussian.iter().map(|z| -(2.0 * z).exp()).collect();
        let heavy = YeoJohnson::fitted(&standardised(lognormal));
        assert!(heavy.power() > 1.5, "{heavy:?}");
        for seed in 0..20 {
            let mut rng = stream(seed, 1);
            let gaussian: Vec<f64> = (0..60).map(|_| normal(&mut rng)).collect();
            let warp = YeoJohnson::fitted(&standardised(gaussian));
            assert!((warp.power() - 1.0).abs() < 0.35, "seed {seed}: {warp:?}");
        }
    }

    #[test]
    fn outliers_are_values_far_out_not_a_skewed_spread() {
        // 0..=99: the farthest lies 49.5 from the median 49.5, the spread is 25 × 1.4826.
        let even: Vec<f64> = (0..100).map(f64::from).collect();
        assert_eq!(median(even.clone()), Some(49.5));
        assert!(!has_outliers(even.clone()));
        // The squares, a bowl's values: skewed, the farthest 9801 - 2450.5 = 7350.5 from the
        // median, 2.3 robust deviations (MAD 2144).
        let squares: Vec<f64> = even.iter().map(|v| v * v).collect();
        assert!(!has_outliers(squares));
        // One diverging run among them.
        let mut diverged = even.clone();
        diverged[17] = 1e4;
        assert!(has_outliers(diverged));
        // Just inside and just outside 20 robust deviations of 0..=100 (median 50, MAD 25).
        let mut edge: Vec<f64> = (0..=100).map(f64::from).collect();
        edge[100] = 50.0 + 20.0 * 25.0 * MAD_TO_SD * 0.999;
        assert!(!has_outliers(edge.clone()));
        edge[100] = 50.0 + 20.0 * 25.0 * MAD_TO_SD * 1.001;
        assert!(has_outliers(edge));
        // Losses spanning orders of magnitude (a lognormal).
        let mut rng = stream(11, 0);
        let lognormal: Vec<f64> = (0..60).map(|_| (3.0 * normal(&mut rng)).exp()).collect();
        assert!(has_outliers(lognormal));
        // More than half equal: any other value is far out; all equal or none: no outlier.
        assert!(has_outliers(vec![1.0, 1.0, 1.0, 1.0, 2.0]));
        assert!(!has_outliers(vec![1.0; 5]));
        assert!(!has_outliers(Vec::new()));
    }

    #[test]
    fn constant_values_keep_the_identity() {
        assert_eq!(YeoJohnson::fitted(&[0.0; 5]), YeoJohnson::identity());
    }
}
