//! A Gaussian-process model of a function over the unit cube, the mathematics the samplers
//! build on: the Matern-5/2 kernel with one length scale per parameter, hyperparameters by
//! maximum a posteriori fitted with L-BFGS ([`fit`], [`refit`]), the posterior with its
//! gradients ([`Gp`]), the log expected improvement ([`log_ei`]) and the log expected
//! hypervolume improvement of several objectives ([`Boxes`]) and a power transform of
//! the values ([`YeoJohnson`]). It knows nothing of studies, spaces or trials: a caller
//! encodes its points as features in `[0, 1]` and its values as numbers, larger is better.
//! The Bayesian sampler (`sampler::bayes`) decides what to fit and where to look with it; the
//! same model names the trial it believes best (`hptune best --by model`). See
//! `docs/bayes.md`. A crate of its own so that its tests build without the rest of hptune
//! (bench/RESULTS.md: 3x faster from an edit to its tests run).

#![warn(unreachable_pub)]

mod ehvi;
mod fit;
mod kernel;
mod lbfgs;
mod log_ei;
mod model;
mod random;
mod stats;
mod warp;

pub use ehvi::Boxes;
pub use fit::{LengthSharing, fit, refit};
pub use lbfgs::minimize;
pub use log_ei::{log_cdf, log_ei, log_ei_with_gradient};
pub use model::{Gp, GpError, Hyperparameters, MIN_VARIANCE, Prediction, factor};
pub use random::{normal, stream};
pub use stats::median;
pub use warp::{YeoJohnson, has_outliers};

/// The central finite difference of `f` at `x` along coordinate `d`, for tests of gradients
/// (this crate's and those of the samplers built on it).
#[doc(hidden)]
pub fn central_difference(f: impl Fn(&[f64]) -> f64, x: &[f64], d: usize) -> f64 {
    let h = 1e-6;
    let (mut up, mut down) = (x.to_vec(), x.to_vec());
    up[d] += h;
    down[d] -= h;
    (f(&up) - f(&down)) / (2.0 * h)
}
