//! Dropout whose keep-mask is drawn on the host by our own seeded generator, in place of
//! `burn::nn::Dropout`.
//!
//! burn's dropout asks the backend for a Bernoulli tensor; burn-flex draws it one element at a
//! time from one global generator behind a lock, which took about a fifth of a profiled CPU
//! training step (docs/trainer.md, "How it is built"). Here the mask comes from SplitMix64
//! streams, in fixed chunks of [`CHUNK`] elements ([`crate::fused::mask`]), through
//! [`FusedOps::dropout`]: on burn-flex
//! one pass that draws the words and applies them (and the same pass on the gradient
//! backward, the mask drawn again rather than kept); elsewhere the words are filled on the
//! host on two threads and applied with burn's tensor operations.
//!
//! Each mask is a function of (seed, call number, chunk) only, so a run is reproducible for a
//! given seed whatever the thread timing: [`seed`] sets the seed and restarts the call count
//! (the trainer calls it with `--seed` before training), and every training-mode forward pass
//! of any [`Dropout`] takes the next call number of this process. A checkpoint keeps the count
//! ([`calls`]), and a resumed run goes on from it ([`resume_calls`]): its masks are the ones the
//! uninterrupted run would have drawn.
//!
//! On a GPU, drawing on the host and copying the mask would be slower than the backend's own
//! generator, so [`crate::backend::dispatch`] calls [`use_host_masks`]`(false)` for
//! `--device cuda` and burn's own Bernoulli sampling is used there.
//!
//! As with burn's, dropout only acts when the backend records gradients (training); evaluation
//! and prediction run on the inner backend and pass the input through.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Distribution, Tensor};

#[cfg(doc)]
use crate::fused::mask::CHUNK;
use crate::fused::{self, FusedOps};

static SEED: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);
static HOST_MASKS: AtomicBool = AtomicBool::new(true);

/// Seeds the dropout masks of this process and restarts their call count.
pub fn seed(seed: u64) {
    SEED.store(seed, Ordering::SeqCst);
    CALLS.store(0, Ordering::SeqCst);
}

/// The training-mode dropout calls made since [`seed`] (or set by [`resume_calls`]): where
/// the masks' stream stands, for a checkpoint.
pub fn calls() -> u64 {
    CALLS.load(Ordering::SeqCst)
}

/// Sets the count of calls made to `calls` (a checkpoint's [`calls`]), so that the masks go on
/// where that run's stood; the seed stays [`seed`]'s.
pub fn resume_calls(calls: u64) {
    CALLS.store(calls, Ordering::SeqCst);
}

/// Chooses where masks come from: our host generator (`true`, the default, for CPU backends)
/// or the backend's own Bernoulli sampling (`false`, for GPUs).
pub fn use_host_masks(host: bool) {
    HOST_MASKS.store(host, Ordering::SeqCst);
}

/// Configuration of a [`Dropout`].
#[derive(Config, Debug)]
pub struct DropoutConfig {
    /// Probability of zeroing each element in training, in `[0, 1]`.
    pub prob: f64,
}

impl DropoutConfig {
    /// Builds the module; panics if the probability is outside `[0, 1]`.
    pub fn init(&self) -> Dropout {
        assert!(
            (0.0..=1.0).contains(&self.prob),
            "dropout probability must be in [0, 1], got {}",
            self.prob
        );
        Dropout { prob: self.prob }
    }
}

/// Zeroes each element with probability `prob` in training and scales the kept ones by
/// `1 / (1 - prob)`; the identity in evaluation (see the module documentation).
#[derive(Module, Clone, Debug)]
pub struct Dropout {
    prob: f64,
}

impl Dropout {
    /// Applies dropout to `input` if its backend records gradients, else returns it unchanged.
    pub fn forward<B: FusedOps, const D: usize>(&self, input: Tensor<B, D>) -> Tensor<B, D> {
        if !B::ad_enabled(&input.device()) || self.prob == 0.0 {
            return input;
        }
        if !HOST_MASKS.load(Ordering::SeqCst) {
            let keep = 1.0 - self.prob;
            let random = input.random_like(Distribution::Bernoulli(keep));
            return input * random * (1.0 / keep);
        }
        let call = CALLS.fetch_add(1, Ordering::SeqCst);
        fused::dropout(input, self.prob, SEED.load(Ordering::SeqCst), call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::backend::Backend;

    type Train = Autodiff<Flex>;

    fn ones<B: Backend>(n: usize) -> Tensor<B, 2> {
        Tensor::ones([n, 1000], &Default::default())
    }

    fn values<B: Backend>(t: Tensor<B, 2>) -> Vec<f32> {
        t.into_data().to_vec::<f32>().unwrap()
    }

    #[test]
    fn p_zero_and_eval_are_the_identity() {
        let input = ones::<Train>(64);
        let out = DropoutConfig::new(0.0).init().forward(input.clone());
        assert_eq!(out.into_data(), input.into_data());
        let input = ones::<Flex>(64);
        let out = DropoutConfig::new(0.5).init().forward(input.clone());
        assert_eq!(out.into_data(), input.into_data());
    }

    #[test]
    fn successive_training_calls_draw_different_masks() {
        let dropout = DropoutConfig::new(0.5).init();
        let first = values(dropout.forward(ones::<Train>(64)));
        let second = values(dropout.forward(ones::<Train>(64)));
        assert_ne!(first, second);
        assert!(first.iter().all(|&v| v == 0.0 || v == 2.0));
    }
}
