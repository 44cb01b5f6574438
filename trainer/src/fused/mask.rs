//! The keep-masks of dropout: random words from SplitMix64 streams, in fixed chunks of
//! [`CHUNK`] elements, each a function of (seed, call number, chunk) only, so a run is
//! reproducible for a given seed whatever the thread timing (see [`crate::model::dropout`] for
//! where the seed and the call numbers come from). The burn-flex kernel (`kernels.rs`) draws the
//! same words inside its pass; [`composed`] draws them on the host for the other backends.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Int, Shape, Tensor, TensorData, TensorMetadata, TensorPrimitive};

/// Elements drawn from one SplitMix64 stream; masks are split into chunks of this size.
pub const CHUNK: usize = 1 << 16;

/// Threads that fill one mask (when it has more than one chunk).
const THREADS: usize = 2;

/// [`apply`] on a tensor primitive of any rank: the default of [`FusedOps::dropout`].
pub(crate) fn composed<B: Backend>(
    tensor: FloatTensor<B>,
    prob: f64,
    seed: u64,
    call: u64,
) -> FloatTensor<B> {
    let shape = tensor.shape();
    let flat = B::float_reshape(tensor, Shape::new([shape.num_elements()]));
    let flat = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(flat));
    let dropped = apply(flat, prob, seed, call).into_primitive().tensor();
    B::float_reshape(dropped, shape)
}

/// The keep threshold for `prob`: a random word (uniform over i32) keeps its element when it
/// is below it, which happens with probability `1 - prob`.
pub(crate) fn keep_threshold(prob: f64) -> i64 {
    ((1.0 - prob) * 4_294_967_296.0 - 2_147_483_648.0) as i64
}

/// Dropout with the mask of call `call` under `seed`, whatever the backend (burn-flex has a
/// one-pass kernel instead: `dropout.rs`).
///
/// The host only fills random 32-bit words (see [`random_bits`]); the comparison with the keep
/// threshold, the zeroing and the scaling are tensor ops.
fn apply<B: Backend, const D: usize>(
    input: Tensor<B, D>,
    prob: f64,
    seed: u64,
    call: u64,
) -> Tensor<B, D> {
    if prob >= 1.0 {
        return input.mul_scalar(0.0);
    }
    if prob <= 0.0 {
        // (The threshold, 2^31, would not fit the i32 words it is compared with.)
        return input;
    }
    let keep = 1.0 - prob;
    let dims = input.dims();
    let bits = random_bits(seed, call, dims.iter().product());
    let bits = Tensor::<B, D, Int>::from_data(TensorData::new(bits, dims), &input.device());
    let dropped = bits.greater_equal_elem(keep_threshold(prob));
    input.mask_fill(dropped, 0.0).mul_scalar(1.0 / keep)
}

/// `len` uniformly random words for call `call` under `seed`: chunk `i` (of [`CHUNK`] words)
/// is the SplitMix64 sequence started from a key mixed from (seed, call, i), and the chunks
/// are filled on two threads.
///
/// SplitMix64 rather than a generator from `rand`: those are generic code that this crate
/// instantiates, and the workspace's debug profile (which the trainer binary is built with)
/// leaves this crate unoptimised, where ChaCha8 took about 50 ns a word; SplitMix64 is a
/// handful of integer operations, statistically sound for masks (it passes BigCrush).
pub fn random_bits(seed: u64, call: u64, len: usize) -> Vec<i32> {
    let mut words = vec![0i32; len];
    let fill = |first_chunk: usize, part: &mut [i32]| {
        for (i, out) in part.chunks_mut(CHUNK).enumerate() {
            let mut state = chunk_key(seed, call, first_chunk + i);
            for pair in out.chunks_mut(2) {
                state = state.wrapping_add(GAMMA);
                let z = mix(state);
                pair[0] = z as i32;
                if let Some(second) = pair.get_mut(1) {
                    *second = (z >> 32) as i32;
                }
            }
        }
    };
    let chunks = len.div_ceil(CHUNK);
    if chunks <= 1 {
        fill(0, &mut words);
    } else {
        let per_thread = chunks.div_ceil(THREADS);
        std::thread::scope(|s| {
            for (t, part) in words.chunks_mut(per_thread * CHUNK).enumerate() {
                let fill = &fill;
                s.spawn(move || fill(t * per_thread, part));
            }
        });
    }
    words
}

/// The SplitMix64 state that chunk `chunk` of call `call`'s mask starts from.
pub(crate) fn chunk_key(seed: u64, call: u64, chunk: usize) -> u64 {
    mix(seed ^ mix(call ^ mix(chunk as u64)))
}

/// SplitMix64's increment (the golden ratio in 64 bits).
pub(crate) const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function.
#[inline(always)]
pub(crate) fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    fn ones<B: Backend>(n: usize) -> Tensor<B, 2> {
        Tensor::ones([n, 1000], &Default::default())
    }

    fn values<B: Backend>(t: Tensor<B, 2>) -> Vec<f32> {
        t.into_data().to_vec::<f32>().unwrap()
    }

    #[test]
    fn keep_rate_is_one_minus_p_and_kept_values_are_scaled() {
        let (p, n) = (0.1, 1_000_000);
        let out = values(apply(ones::<Flex>(n / 1000), p, 7, 0));
        let scale = (1.0 / (1.0 - p)) as f32;
        assert!(out.iter().all(|&v| v == 0.0 || (v - scale).abs() < 1e-6));
        let kept = out.iter().filter(|&&v| v != 0.0).count() as f64;
        // Binomial(n, 0.9): sd = 300; allow 6 sd.
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (kept - n as f64 * (1.0 - p)).abs() < 6.0 * sd,
            "kept {kept}"
        );
    }

    #[test]
    fn same_seed_and_call_give_the_same_mask_and_others_differ() {
        let mask = |seed, call| values(apply(ones::<Flex>(200), 0.5, seed, call));
        let a = mask(1, 3);
        assert_eq!(a, mask(1, 3));
        assert_ne!(a, mask(1, 4));
        assert_ne!(a, mask(2, 3));
        // Chunks draw from different streams.
        assert_ne!(a[..CHUNK], a[CHUNK..2 * CHUNK]);
    }

    #[test]
    fn p_one_drops_everything() {
        assert!(
            values(apply(ones::<Flex>(10), 1.0, 0, 0))
                .iter()
                .all(|&v| v == 0.0)
        );
    }
}
