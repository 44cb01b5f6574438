//! The Gaussian-process posterior: given training points, standardised values and
//! hyperparameters, the mean and variance of the latent function anywhere, with gradients.

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};

use super::kernel::Matern52;

/// Jitter added to the diagonal on the first retry of a failed Cholesky, relative to the
/// diagonal's mean; each further retry multiplies it by ten.
const FIRST_JITTER: f64 = 1e-10;
/// Retries before giving up on a matrix.
const JITTER_RETRIES: usize = 8;

/// Why a model could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum GpError {
    /// The covariance matrix stayed indefinite even with the largest jitter.
    #[error("the covariance matrix of {size} points is not positive definite, even with jitter")]
    NotPositiveDefinite {
        /// Its size.
        size: usize,
    },
    /// A hyperparameter or a value is NaN or infinite.
    #[error("non-finite {0}")]
    NonFinite(&'static str),
    /// There is no training point.
    #[error("no training point")]
    Empty,
}

/// The hyperparameters of the model, in natural units (standardised outputs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hyperparameters {
    /// One length scale per feature.
    pub length_scales: Vec<f64>,
    /// Signal variance `s²`.
    pub signal_variance: f64,
    /// Observation noise variance.
    pub noise_variance: f64,
}

impl Hyperparameters {
    /// The kernel these hyperparameters define.
    pub(crate) fn kernel(&self) -> Matern52 {
        Matern52::new(&self.length_scales, self.signal_variance)
    }
}

/// `K + noise·I` over the training points.
pub(super) fn covariance(kernel: &Matern52, x: &[Vec<f64>], noise: f64) -> DMatrix<f64> {
    let n = x.len();
    let mut k = DMatrix::zeros(n, n);
    for i in 0..n {
        k[(i, i)] = kernel.variance() + noise;
        for j in 0..i {
            let v = kernel.value(&x[i], &x[j]);
            k[(i, j)] = v;
            k[(j, i)] = v;
        }
    }
    k
}

/// The Cholesky factor of `k`, adding growing jitter to the diagonal until it exists.
pub(crate) fn factor(mut k: DMatrix<f64>) -> Result<Cholesky<f64, Dyn>, GpError> {
    let n = k.nrows();
    if k.iter().any(|v| !v.is_finite()) {
        return Err(GpError::NonFinite("covariance"));
    }
    let scale = (k.trace() / n.max(1) as f64).max(f64::MIN_POSITIVE);
    let mut added = 0.0;
    for attempt in 0..=JITTER_RETRIES {
        if let Some(cholesky) = Cholesky::new(k.clone()) {
            return Ok(cholesky);
        }
        let jitter = scale * FIRST_JITTER * 10f64.powi(attempt as i32);
        for i in 0..n {
            k[(i, i)] += jitter - added;
        }
        added = jitter;
    }
    Err(GpError::NotPositiveDefinite { size: n })
}

/// Below this order [`inverse_factor_transposed`] substitutes; above it, it splits.
const SUBSTITUTED: usize = 32;

/// `L⁻ᵀ`, where `L` is the lower triangle of `lower` (its upper triangle is not read). With
/// `L = [A 0; B C]`, `L⁻ᵀ = [A⁻ᵀ  -A⁻ᵀ Bᵀ C⁻ᵀ; 0  C⁻ᵀ]`: the halves recursively, the corner
/// by two matrix products, so that most of the work is matrix products.
pub(super) fn inverse_factor_transposed(lower: &DMatrix<f64>) -> DMatrix<f64> {
    let n = lower.nrows();
    if n <= SUBSTITUTED {
        return substituted_inverse_factor_transposed(lower);
    }
    let h = n / 2;
    let first = inverse_factor_transposed(&lower.view((0, 0), (h, h)).into_owned());
    let second = inverse_factor_transposed(&lower.view((h, h), (n - h, n - h)).into_owned());
    let corner = -(&first * (lower.view((h, 0), (n - h, h)).transpose() * &second));
    let mut result = DMatrix::zeros(n, n);
    result.view_mut((0, 0), (h, h)).copy_from(&first);
    result.view_mut((h, h), (n - h, n - h)).copy_from(&second);
    result.view_mut((0, h), (h, n - h)).copy_from(&corner);
    result
}

/// [`inverse_factor_transposed`] by forward substitution of the identity's rows, every row at
/// once, each step an update of one whole column by another. `L⁻ᵀ` is upper triangular, so
/// only the first `j + 1` rows of column `j` are updated.
fn substituted_inverse_factor_transposed(lower: &DMatrix<f64>) -> DMatrix<f64> {
    let n = lower.nrows();
    // Row i of L, contiguous: column i of Lᵀ.
    let upper = lower.transpose();
    let mut result = DMatrix::identity(n, n);
    let data = result.as_mut_slice();
    for i in 0..n {
        let (done, rest) = data.split_at_mut(i * n);
        let target = &mut rest[..n];
        let row = &upper.as_slice()[i * n..i * n + i];
        for (j, (source, l)) in done.chunks_exact(n).zip(row).enumerate() {
            for (t, s) in target[..=j].iter_mut().zip(&source[..=j]) {
                *t -= l * s;
            }
        }
        let diagonal = upper[(i, i)];
        for t in target[..=i].iter_mut() {
            *t /= diagonal;
        }
    }
    result
}

/// `A⁻¹ = L⁻ᵀ L⁻¹` for `A = L Lᵀ`, where `L` is the lower triangle of `lower`: by one matrix
/// product of [`inverse_factor_transposed`].
pub(super) fn inverse_from_factor(lower: &DMatrix<f64>) -> DMatrix<f64> {
    let inverse_transposed = inverse_factor_transposed(lower);
    &inverse_transposed * inverse_transposed.transpose()
}

/// The posterior mean and variance at one point, and their gradients by its features.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prediction {
    /// Posterior mean.
    pub mean: f64,
    /// Posterior variance of the latent function (without the noise).
    pub variance: f64,
    /// `∂mean/∂x`.
    pub mean_gradient: Vec<f64>,
    /// `∂variance/∂x`.
    pub variance_gradient: Vec<f64>,
}

/// A Gaussian process conditioned on training data.
#[derive(Debug, Clone)]
pub(crate) struct Gp {
    x: Vec<Vec<f64>>,
    kernel: Matern52,
    cholesky: Cholesky<f64, Dyn>,
    /// `L⁻ᵀ` of the Cholesky factor `L`: the posterior variances of many points come from one
    /// matrix product with it.
    inverse_factor_transposed: DMatrix<f64>,
    alpha: DVector<f64>,
    /// The largest posterior mean at the training points ([`Gp::best_mean`]).
    best_mean: f64,
}

/// The smallest posterior variance reported, so that `sqrt` and divisions stay finite.
pub(crate) const MIN_VARIANCE: f64 = 1e-12;

impl Gp {
    /// Conditions the prior of `hyper` on values `y` at points `x`.
    pub(crate) fn new(
        x: Vec<Vec<f64>>,
        y: &[f64],
        hyper: &Hyperparameters,
    ) -> Result<Self, GpError> {
        if x.is_empty() {
            return Err(GpError::Empty);
        }
        if y.iter().any(|v| !v.is_finite()) {
            return Err(GpError::NonFinite("value"));
        }
        let kernel = hyper.kernel();
        let mut k = covariance(&kernel, &x, hyper.noise_variance);
        let cholesky = factor(k.clone())?;
        let alpha = cholesky.solve(&DVector::from_column_slice(y));
        let inverse_factor_transposed = inverse_factor_transposed(cholesky.l_dirty());
        // The posterior means at the training points are k(X, X) α, from the covariance
        // already computed: its diagonal without the noise is the signal variance.
        k.fill_diagonal(kernel.variance());
        let best_mean = (&k * &alpha).max();
        Ok(Self {
            x,
            kernel,
            cholesky,
            inverse_factor_transposed,
            alpha,
            best_mean,
        })
    }

    /// `k(X, points)`: one column per point, one row per training point.
    fn kernel_columns(&self, points: &[Vec<f64>]) -> DMatrix<f64> {
        DMatrix::from_fn(self.x.len(), points.len(), |i, j| {
            self.kernel.value(&self.x[i], &points[j])
        })
    }

    /// `k(X, x)` and the kernel's slope at each training point (for gradients by `x`), from
    /// one exponential each.
    fn cross_and_slopes(&self, x: &[f64]) -> (DVector<f64>, Vec<f64>) {
        let (values, slopes): (Vec<f64>, Vec<f64>) = self
            .x
            .iter()
            .map(|p| self.kernel.value_and_slope(self.kernel.distance(x, p)))
            .unzip();
        (DVector::from_vec(values), slopes)
    }

    /// The largest posterior mean at the training points: the best value the model believes
    /// has been reached, which is the incumbent of the expected improvement when values are
    /// noisy ("plug-in", Picheny et al., 2013). Without noise it is the best value observed;
    /// with noise it discounts a value that stands out by luck.
    pub(crate) fn best_mean(&self) -> f64 {
        self.best_mean
    }

    /// Posterior mean and variance at `x`.
    #[cfg(test)]
    pub(crate) fn predict(&self, x: &[f64]) -> (f64, f64) {
        self.predict_many(&[x])[0]
    }

    /// Posterior mean and variance at each of `points`, computed together: the variances by
    /// one matrix product with `L⁻ᵀ` instead of one triangular solve per point.
    pub(crate) fn predict_many<P: AsRef<[f64]>>(&self, points: &[P]) -> Vec<(f64, f64)> {
        self.predict_many_beside(points, &[], &DMatrix::zeros(self.x.len(), 0))
            .0
    }

    /// [`Gp::predict_many`], and the posterior covariance of each of `points` with each of
    /// `others` (one row per point), given `solved = self.solve_cross(others)`: both come
    /// from the same kernel values between the points and the training points.
    pub(crate) fn predict_many_beside<P: AsRef<[f64]>>(
        &self,
        points: &[P],
        others: &[Vec<f64>],
        solved: &DMatrix<f64>,
    ) -> (Vec<(f64, f64)>, DMatrix<f64>) {
        // cross[(c, i)] = k(points[c], x_i); the rows of cross L⁻ᵀ are L⁻¹ k(X, points[c]),
        // whose squared norm is the variance the training points explain.
        let cross = DMatrix::from_fn(points.len(), self.x.len(), |c, i| {
            self.kernel.value(points[c].as_ref(), &self.x[i])
        });
        let means = &cross * &self.alpha;
        let mut covariances = DMatrix::from_fn(points.len(), others.len(), |c, j| {
            self.kernel.value(points[c].as_ref(), &others[j])
        });
        covariances.gemm(-1.0, &cross, solved, 1.0);
        let whitened = &cross * &self.inverse_factor_transposed;
        let mut explained = vec![0.0; points.len()];
        for column in whitened.column_iter() {
            for (e, v) in explained.iter_mut().zip(column.iter()) {
                *e += v * v;
            }
        }
        let predictions = means
            .iter()
            .zip(explained)
            .map(|(&mean, e)| (mean, (self.kernel.variance() - e).max(MIN_VARIANCE)))
            .collect();
        (predictions, covariances)
    }

    /// The joint posterior of the latent function at `points`: its mean vector and its
    /// covariance matrix.
    pub(crate) fn joint(&self, points: &[Vec<f64>]) -> (DVector<f64>, DMatrix<f64>) {
        let cross = self.kernel_columns(points);
        let mean = cross.tr_mul(&self.alpha);
        let mut v = cross;
        self.cholesky
            .l_dirty()
            .solve_lower_triangular_unchecked_mut(&mut v);
        let covariance = covariance(&self.kernel, points, 0.0) - v.tr_mul(&v);
        (mean, covariance)
    }

    /// `K⁻¹ k(X, p)` for each of `points` (one column each), where `X` are the training
    /// points: what the covariances with them need ([`Gp::predict_many_beside`],
    /// [`Gp::cross_covariance_with_gradient`]).
    pub(crate) fn solve_cross(&self, points: &[Vec<f64>]) -> DMatrix<f64> {
        let cross = self.kernel_columns(points);
        self.cholesky.solve(&cross)
    }

    /// The posterior covariance of the latent function at `x` with its value at each of
    /// `points`, given `solved = self.solve_cross(points)`, and the gradient of each
    /// covariance by `x` (one vector per point).
    pub(crate) fn cross_covariance_with_gradient(
        &self,
        x: &[f64],
        points: &[Vec<f64>],
        solved: &DMatrix<f64>,
    ) -> (DVector<f64>, Vec<Vec<f64>>) {
        let (prior, slopes) = self.cross_and_slopes(x);
        let mut covariance = DVector::zeros(points.len());
        let mut gradients = Vec::with_capacity(points.len());
        for ((p, column), c) in points
            .iter()
            .zip(solved.column_iter())
            .zip(covariance.iter_mut())
        {
            let (value, slope) = self.kernel.value_and_slope(self.kernel.distance(x, p));
            *c = value - prior.dot(&column);
            let mut g = vec![0.0; x.len()];
            self.kernel.add_gradient(x, p, slope, 1.0, &mut g);
            for ((training, slope), weight) in self.x.iter().zip(&slopes).zip(column.iter()) {
                self.kernel
                    .add_gradient(x, training, *slope, -weight, &mut g);
            }
            gradients.push(g);
        }
        (covariance, gradients)
    }

    /// Posterior mean and variance at `x`, with their gradients.
    pub(crate) fn predict_with_gradient(&self, x: &[f64]) -> Prediction {
        let (k, slopes) = self.cross_and_slopes(x);
        let mean = k.dot(&self.alpha);
        let w = self.cholesky.solve(&k);
        let variance = (self.kernel.variance() - k.dot(&w)).max(MIN_VARIANCE);
        let mut mean_gradient = vec![0.0; x.len()];
        let mut variance_gradient = vec![0.0; x.len()];
        for (i, (p, slope)) in self.x.iter().zip(&slopes).enumerate() {
            self.kernel
                .add_gradient(x, p, *slope, self.alpha[i], &mut mean_gradient);
            self.kernel
                .add_gradient(x, p, *slope, -2.0 * w[i], &mut variance_gradient);
        }
        Prediction {
            mean,
            variance,
            mean_gradient,
            variance_gradient,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::central_difference;
    use super::*;

    #[derive(serde::Deserialize)]
    struct Fixture {
        x: Vec<Vec<f64>>,
        y: Vec<f64>,
        test: Vec<Vec<f64>>,
        length_scales: Vec<f64>,
        signal_variance: f64,
        noise_variance: f64,
        mean: Vec<f64>,
        variance: Vec<f64>,
    }

    fn fixture() -> (Fixture, Gp) {
        let f: Fixture = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/gp_posterior.json"
        )))
        .unwrap();
        let hyper = Hyperparameters {
            length_scales: f.length_scales.clone(),
            signal_variance: f.signal_variance,
            noise_variance: f.noise_variance,
        };
        let gp = Gp::new(f.x.clone(), &f.y, &hyper).unwrap();
        (f, gp)
    }

    #[test]
    fn posterior_matches_the_numpy_fixture() {
        let (f, gp) = fixture();
        for ((point, mean), variance) in f.test.iter().zip(&f.mean).zip(&f.variance) {
            let (m, v) = gp.predict(point);
            assert!((m - mean).abs() < 1e-10, "{point:?}: mean {m} vs {mean}");
            assert!(
                (v - variance).abs() < 1e-10,
                "{point:?}: variance {v} vs {variance}"
            );
            let p = gp.predict_with_gradient(point);
            assert!((p.mean - m).abs() < 1e-12 && (p.variance - v).abs() < 1e-10);
        }
    }

    #[test]
    fn posterior_gradients_match_finite_differences() {
        let (_, gp) = fixture();
        let x = [0.47, 0.61];
        let p = gp.predict_with_gradient(&x);
        for d in 0..2 {
            let mean = central_difference(|x| gp.predict(x).0, &x, d);
            let variance = central_difference(|x| gp.predict(x).1, &x, d);
            assert!((mean - p.mean_gradient[d]).abs() < 1e-6);
            assert!((variance - p.variance_gradient[d]).abs() < 1e-6);
        }
    }

    #[test]
    fn cross_covariances_agree_with_the_joint_posterior_and_their_gradients_with_differences() {
        let (_, gp) = fixture();
        let points = vec![vec![0.2, 0.9], vec![0.55, 0.4]];
        let solved = gp.solve_cross(&points);
        let x = [0.47, 0.61];
        let (cross, gradients) = gp.cross_covariance_with_gradient(&x, &points, &solved);
        let (_, rows) = gp.predict_many_beside(&[x], &points, &solved);
        let (_, joint) = gp.joint(&[points[0].clone(), points[1].clone(), x.to_vec()]);
        for j in 0..2 {
            assert!((cross[j] - joint[(2, j)]).abs() < 1e-12);
            assert!((rows[(0, j)] - joint[(2, j)]).abs() < 1e-12);
            for (d, analytic) in gradients[j].iter().enumerate() {
                let numeric = central_difference(
                    |x| gp.predict_many_beside(&[x], &points, &solved).1[(0, j)],
                    &x,
                    d,
                );
                assert!(
                    (numeric - analytic).abs() < 1e-6,
                    "{j}, {d}: {numeric} vs {analytic}"
                );
            }
        }
    }

    #[test]
    fn the_factors_inverse_and_the_inverse_agree_with_nalgebras() {
        let (f, _) = fixture();
        let hyper = Hyperparameters {
            length_scales: f.length_scales.clone(),
            signal_variance: f.signal_variance,
            noise_variance: f.noise_variance,
        };
        let k = covariance(&hyper.kernel(), &f.x, hyper.noise_variance);
        let cholesky = factor(k.clone()).unwrap();
        let lower = cholesky.l();
        let inverse_transposed = inverse_factor_transposed(cholesky.l_dirty());
        let identity = DMatrix::identity(k.nrows(), k.nrows());
        assert!((&lower * inverse_transposed.transpose() - &identity).amax() < 1e-9);
        assert_eq!(
            inverse_transposed.lower_triangle(),
            DMatrix::from_diagonal(&inverse_transposed.diagonal())
        );
        let inverse = inverse_from_factor(cholesky.l_dirty());
        assert!((&inverse - cholesky.inverse()).amax() < 1e-8 * inverse.amax());
        assert!((&k * &inverse - identity).amax() < 1e-8);
    }

    #[test]
    fn the_factors_inverse_splits_large_factors_and_agrees_with_substitution() {
        // 100 points split twice (100 → 50 → 25); the upper triangle holds garbage, as the
        // Cholesky factor's does.
        let n = 100;
        let mut lower = DMatrix::from_fn(n, n, |i, j| match i.cmp(&j) {
            std::cmp::Ordering::Greater => ((i * 7 + j * 3) % 13) as f64 / 13.0 - 0.5,
            std::cmp::Ordering::Equal => 1.0 + (i % 5) as f64,
            std::cmp::Ordering::Less => f64::NAN,
        });
        let split = inverse_factor_transposed(&lower);
        let substituted = substituted_inverse_factor_transposed(&lower);
        lower.fill_upper_triangle(0.0, 1);
        let identity = DMatrix::identity(n, n);
        assert!((&lower * split.transpose() - &identity).amax() < 1e-9);
        assert!((&split - &substituted).amax() < 1e-9 * substituted.amax());
        assert_eq!(
            split.lower_triangle(),
            DMatrix::from_diagonal(&split.diagonal())
        );
    }

    #[test]
    fn the_best_mean_is_the_best_value_without_noise_and_below_it_with_noise() {
        let x = vec![vec![0.1], vec![0.5], vec![0.9]];
        let y = [0.0, 2.0, -1.0];
        let at = |noise_variance| {
            let hyper = Hyperparameters {
                length_scales: vec![0.3],
                signal_variance: 1.0,
                noise_variance,
            };
            Gp::new(x.clone(), &y, &hyper).unwrap().best_mean()
        };
        assert!((at(1e-10) - 2.0).abs() < 1e-6);
        // With noise variance 1, the single point at 0.5 is shrunk towards the prior mean 0.
        let noisy = at(1.0);
        assert!(noisy > 0.5 && noisy < 1.5, "{noisy}");
    }

    #[test]
    fn duplicate_points_without_noise_are_factored_with_jitter() {
        let hyper = Hyperparameters {
            length_scales: vec![0.5],
            signal_variance: 1.0,
            noise_variance: 0.0,
        };
        let gp = Gp::new(vec![vec![0.2]; 3], &[1.0, 1.0, 1.0], &hyper).unwrap();
        let (mean, variance) = gp.predict(&[0.2]);
        assert!(
            (mean - 1.0).abs() < 1e-3 && variance >= 0.0,
            "{mean} {variance}"
        );
    }

    #[test]
    fn non_finite_inputs_are_errors_not_panics() {
        let hyper = Hyperparameters {
            length_scales: vec![f64::NAN],
            signal_variance: 1.0,
            noise_variance: 0.0,
        };
        assert_eq!(
            Gp::new(vec![vec![0.2], vec![0.3]], &[1.0, 0.0], &hyper).unwrap_err(),
            GpError::NonFinite("covariance")
        );
        let ok = Hyperparameters {
            length_scales: vec![0.5],
            ..hyper
        };
        assert_eq!(Gp::new(vec![], &[], &ok).unwrap_err(), GpError::Empty);
        assert!(Gp::new(vec![vec![0.2]], &[f64::INFINITY], &ok).is_err());
    }
}
