//! Dropout whose keep-mask is drawn on the host by our own seeded generator, in place of
//! `burn::nn::Dropout`.
//!
//! burn's dropout asks the backend for a Bernoulli tensor; burn-flex draws it one element at a
//! time from one global generator behind a lock, which took about a fifth of a CPU training
//! step. Here the mask is filled on the host from ChaCha8 streams, in fixed chunks of
//! [`CHUNK`] elements spread over two threads, and multiplied into the input.
//!
//! Each mask is a function of (seed, call number, chunk) only, so a run is reproducible for a
//! given seed whatever the thread timing: [`seed`] sets the seed and restarts the call count
//! (the trainer calls it with `--seed` before training), and every training-mode forward pass
//! of any [`Dropout`] takes the next call number of this process.
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
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor, TensorData};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Elements drawn from one ChaCha8 stream; masks are split into chunks of this size.
pub const CHUNK: usize = 1 << 16;

/// Threads that fill one mask (when it has more than one chunk).
const THREADS: usize = 2;

static SEED: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);
static HOST_MASKS: AtomicBool = AtomicBool::new(true);

/// Seeds the dropout masks of this process and restarts their call count.
pub fn seed(seed: u64) {
    SEED.store(seed, Ordering::SeqCst);
    CALLS.store(0, Ordering::SeqCst);
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
    pub fn forward<B: Backend, const D: usize>(&self, input: Tensor<B, D>) -> Tensor<B, D> {
        let device = input.device();
        if !B::ad_enabled(&device) || self.prob == 0.0 {
            return input;
        }
        if !HOST_MASKS.load(Ordering::SeqCst) {
            let keep = 1.0 - self.prob;
            let random = input.random_like(Distribution::Bernoulli(keep));
            return input * random * (1.0 / keep);
        }
        let call = CALLS.fetch_add(1, Ordering::SeqCst);
        let dims = input.dims();
        let values = keep_mask(
            self.prob,
            SEED.load(Ordering::SeqCst),
            call,
            dims.iter().product(),
        );
        input * Tensor::from_data(TensorData::new(values, dims), &device)
    }
}

/// The mask of call `call` under `seed`: `len` values, each `1 / (1 - prob)` with probability
/// `1 - prob` and 0 otherwise (all 0 when `prob` is 1).
pub fn keep_mask(prob: f64, seed: u64, call: u64, len: usize) -> Vec<f32> {
    let keep = 1.0 - prob;
    let scale = if keep > 0.0 { (1.0 / keep) as f32 } else { 0.0 };
    // A uniform u32 `u` keeps its element when `u < threshold`, i.e. with probability `keep`.
    let threshold = (keep * 4_294_967_296.0) as u64;
    let mut values = vec![0.0f32; len];
    let fill = |first_chunk: usize, part: &mut [f32]| {
        let mut bits = vec![0u32; CHUNK];
        for (i, out) in part.chunks_mut(CHUNK).enumerate() {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&seed.to_le_bytes());
            key[8..16].copy_from_slice(&call.to_le_bytes());
            key[16..24].copy_from_slice(&((first_chunk + i) as u64).to_le_bytes());
            let words = &mut bits[..out.len()];
            ChaCha8Rng::from_seed(key).fill_bytes(bytes_of(words));
            for (v, &u) in out.iter_mut().zip(words.iter()) {
                *v = if u64::from(u) < threshold { scale } else { 0.0 };
            }
        }
    };
    let chunks = len.div_ceil(CHUNK);
    if chunks <= 1 {
        fill(0, &mut values);
    } else {
        let per_thread = chunks.div_ceil(THREADS);
        std::thread::scope(|s| {
            for (t, part) in values.chunks_mut(per_thread * CHUNK).enumerate() {
                let fill = &fill;
                s.spawn(move || fill(t * per_thread, part));
            }
        });
    }
    values
}

/// The bytes of `words`, for filling them from a generator in one call.
fn bytes_of(words: &mut [u32]) -> &mut [u8] {
    let len = std::mem::size_of_val(words);
    // SAFETY: any byte pattern is a valid u32, u8 has alignment 1, and the slice covers
    // exactly the memory of `words`, which it borrows mutably.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};

    #[test]
    fn keep_rate_is_one_minus_p_and_kept_values_are_scaled() {
        let (p, n) = (0.1, 1_000_000);
        let mask = keep_mask(p, 7, 0, n);
        let scale = (1.0 / (1.0 - p)) as f32;
        assert!(mask.iter().all(|&v| v == 0.0 || v == scale));
        let kept = mask.iter().filter(|&&v| v != 0.0).count() as f64;
        // Binomial(n, 0.9): sd = 300; allow 6 sd.
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!((kept - n as f64 * (1.0 - p)).abs() < 6.0 * sd, "kept {kept}");
    }

    #[test]
    fn same_seed_and_call_give_the_same_mask_and_others_differ() {
        let n = 3 * CHUNK + 5;
        let a = keep_mask(0.5, 1, 3, n);
        assert_eq!(a, keep_mask(0.5, 1, 3, n));
        assert_ne!(a, keep_mask(0.5, 1, 4, n));
        assert_ne!(a, keep_mask(0.5, 2, 3, n));
        // Chunks draw from different streams.
        assert_ne!(a[..CHUNK], a[CHUNK..2 * CHUNK]);
    }

    #[test]
    fn p_one_drops_everything() {
        assert!(keep_mask(1.0, 0, 0, 1000).iter().all(|&v| v == 0.0));
    }

    type Train = Autodiff<Flex>;

    fn ones<B: Backend>() -> Tensor<B, 2> {
        Tensor::ones([64, 100], &Default::default())
    }

    #[test]
    fn p_zero_and_eval_are_the_identity() {
        let input = ones::<Train>();
        let out = DropoutConfig::new(0.0).init().forward(input.clone());
        assert_eq!(out.into_data(), input.into_data());
        let input = ones::<Flex>();
        let out = DropoutConfig::new(0.5).init().forward(input.clone());
        assert_eq!(out.into_data(), input.into_data());
    }

    #[test]
    fn successive_training_calls_draw_different_masks() {
        let dropout = DropoutConfig::new(0.5).init();
        let first = dropout.forward(ones::<Train>()).into_data();
        let second = dropout.forward(ones::<Train>()).into_data();
        assert_ne!(first, second);
        let values = first.to_vec::<f32>().unwrap();
        assert!(values.iter().all(|&v| v == 0.0 || v == 2.0));
    }
}
