//! The `f32` loops behind burn-flex's GELU, masked softmax, dropout, LayerNorm, AdamW and the
//! gradients' squared norm (`gelu.rs`, `softmax.rs`, `dropout.rs`, `layer_norm.rs`, `adamw.rs`,
//! `squared_sum.rs`).
//!
//! Each loop is straight-line arithmetic that the compiler vectorises, compiled twice: for
//! AVX-512 (16 lanes), chosen at run time when the CPU has it, and for the target's baseline
//! (4 lanes on x86-64). Each call splits its work over rayon's threads (burn-flex's pool). The exponential
//! is computed here too: libm's `expf` is a call per element, which stops vectorisation.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::mask::{CHUNK, GAMMA, chunk_key, keep_threshold, mix};

/// An output element: each kernel writes every element of its outputs without reading them
/// first, so outputs are not zeroed before (for a tensor of a training step, zeroing is a pass
/// over its memory as long as the kernel's own; see `output.rs`).
pub(super) type Uninit = MaybeUninit<f32>;

/// `slice` as the values written to it.
///
/// # Safety
/// Every element must have been written.
#[inline(always)]
unsafe fn assume_written(slice: &mut [Uninit]) -> &mut [f32] {
    // SAFETY: MaybeUninit<f32> has f32's layout, and the caller vouches for the values.
    unsafe { &mut *(slice as *mut [Uninit] as *mut [f32]) }
}

/// `fn NAME(ARGS) BODY`, with `BODY` compiled for AVX-512 (F and DQ: dropout's generator
/// multiplies 64-bit lanes) and used when the CPU has it.
macro_rules! with_avx512 {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$doc])*
        fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512dq")]
                fn avx512($($arg: $ty),*) {
                    body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                {
                    // SAFETY: the CPU has the feature `avx512` is compiled for.
                    return unsafe { avx512($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

/// `exp(x)` for `x <= 0`, relative error below 3e-7: `x = k ln 2 + r` with `|r| <= ln 2 / 2`,
/// `exp(r)` by its Taylor polynomial of degree 6, and `2^k` put in the exponent bits. `k` is
/// rounded by adding and subtracting 1.5 * 2^23, and read from the sum's low bits.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0;
    // Below -87, exp(x) is under f32's smallest normal number (and 2^k would not fit the
    // exponent bits): it is taken as 0.
    const LOWEST: f32 = -87.0;
    // ln 2 in two parts (Cody and Waite): `k * LN2_HIGH` is exact, so `r` keeps its digits.
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    let small = x < LOWEST;
    let x = x.max(LOWEST);
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let k = shifted - ROUND;
    // Wrapping: an overflow check (on in the dev profile) would be a branch per element,
    // which stops vectorisation; `k` is within [-126, 0] here.
    let k_bits = (shifted.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = (x - k * LN2_HIGH) - k * LN2_LOW;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let value = p * f32::from_bits((k_bits.wrapping_add(127) << 23) as u32);
    if small { 0.0 } else { value }
}

/// `Phi(x) = (1 + erf(x / sqrt 2)) / 2` and `phi(x) = exp(-x^2 / 2) / sqrt(2 pi)`, from one
/// exponential, erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7, the
/// approximation of PyTorch's vectorised CPU kernel).
#[inline(always)]
fn cdf_and_pdf(x: f32) -> (f32, f32) {
    // The published constants, digits as printed (more than f32 holds).
    #[allow(clippy::excessive_precision)]
    const P: f32 = 0.327_591_1;
    #[allow(clippy::excessive_precision)]
    const A: [f32; 5] = [
        0.254_829_592,
        -0.284_496_736,
        1.421_413_741,
        -1.453_152_027,
        1.061_405_429,
    ];
    let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let gauss = exp_nonpositive(-z * z);
    let t = 1.0 / (1.0 + P * z);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let erf = (1.0 - poly * gauss).copysign(x);
    let inv_sqrt_2pi = 0.5 * std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2;
    (0.5 * (1.0 + erf), inv_sqrt_2pi * gauss)
}

with_avx512! {
    /// GELU of each element.
    fn gelu_loop(input: &[f32], output: &mut [Uninit]) {
        for (y, &x) in output.iter_mut().zip(input) {
            y.write(x * cdf_and_pdf(x).0);
        }
    }
}

with_avx512! {
    /// GELU's derivative at each element of `input`, times `grad`.
    fn gelu_grad_loop(input: &[f32], grad: &[f32], output: &mut [Uninit]) {
        for ((y, &x), &g) in output.iter_mut().zip(input).zip(grad) {
            let (cdf, pdf) = cdf_and_pdf(x);
            y.write(g * (cdf + x * pdf));
        }
    }
}

with_avx512! {
    /// `softmax(x + bias)` of each row of `width` (a multiple of it) in `x`; row `r` takes
    /// row `r / rows_per_bias` of `bias`.
    fn masked_softmax_loop(
        x: &[f32],
        bias: &[f32],
        width: usize,
        rows_per_bias: usize,
        first_row: usize,
        output: &mut [Uninit],
    ) {
        for (i, (x, y)) in x.chunks(width).zip(output.chunks_mut(width)).enumerate() {
            let b = (first_row + i) / rows_per_bias;
            let bias = &bias[b * width..(b + 1) * width];
            for ((y, &x), &b) in y.iter_mut().zip(x).zip(bias) {
                y.write(x + b);
            }
            // SAFETY: the loop above wrote every element of the row.
            let y = unsafe { assume_written(y) };
            let max = y.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            for y in y.iter_mut() {
                *y = exp_nonpositive(*y - max);
            }
            let scale = 1.0 / y.iter().sum::<f32>();
            for y in y.iter_mut() {
                *y *= scale;
            }
        }
    }
}

with_avx512! {
    /// The softmax's gradient `y * (g - sum(g * y))` of each row of `width` in `output` (`y`),
    /// `grad` (`g`) and `input_grad`.
    fn softmax_grad_loop(output: &[f32], grad: &[f32], width: usize, input_grad: &mut [Uninit]) {
        let rows = output.chunks(width).zip(grad.chunks(width));
        for ((y, g), dx) in rows.zip(input_grad.chunks_mut(width)) {
            let dot: f32 = y.iter().zip(g).map(|(y, g)| y * g).sum();
            for ((dx, &y), &g) in dx.iter_mut().zip(y).zip(g) {
                dx.write(y * (g - dot));
            }
        }
    }
}

with_avx512! {
    /// LayerNorm of each row of `x` (rows of `gamma.len()`): `output`, the normalized rows
    /// `normalized` and each row's `1 / sqrt(var + epsilon)` in `inv_std`.
    fn layer_norm_loop(
        x: &[f32],
        gamma: &[f32],
        beta: &[f32],
        epsilon: f32,
        output: &mut [Uninit],
        normalized: &mut [Uninit],
        inv_std: &mut [Uninit],
    ) {
        let width = gamma.len();
        let rows = x.chunks(width).zip(output.chunks_mut(width)).zip(normalized.chunks_mut(width));
        for (((x, y), n), r) in rows.zip(inv_std.iter_mut()) {
            let mean = x.iter().sum::<f32>() / width as f32;
            let var = x.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / width as f32;
            let inv = 1.0 / (var + epsilon).sqrt();
            r.write(inv);
            for ((((y, n), &x), &g), &b) in y.iter_mut().zip(n.iter_mut()).zip(x).zip(gamma).zip(beta) {
                let normal = (x - mean) * inv;
                n.write(normal);
                y.write(normal * g + b);
            }
        }
    }
}

with_avx512! {
    /// LayerNorm's input gradient of each row (see `layer_norm.rs`), from the output's
    /// gradient `dy`, the normalized rows `n` and `r`, with `gamma`; adds the rows'
    /// contributions to `gamma_grad` (`dy * n`) and `beta_grad` (`dy`).
    fn layer_norm_grad_loop(
        dy: &[f32],
        n: &[f32],
        r: &[f32],
        gamma: &[f32],
        input_grad: &mut [Uninit],
        gamma_grad: &mut [f32],
        beta_grad: &mut [f32],
    ) {
        let width = gamma.len();
        let rows = dy.chunks(width).zip(n.chunks(width)).zip(input_grad.chunks_mut(width));
        for (((dy, n), dx), &r) in rows.zip(r) {
            let (mut mean_g, mut mean_gn) = (0.0f32, 0.0f32);
            for (((&dy, &n), &g), (dg, db)) in dy.iter().zip(n).zip(gamma).zip(gamma_grad.iter_mut().zip(beta_grad.iter_mut())) {
                mean_g += dy * g;
                mean_gn += dy * g * n;
                *dg += dy * n;
                *db += dy;
            }
            let (mean_g, mean_gn) = (mean_g / width as f32, mean_gn / width as f32);
            for (((dx, &dy), &n), &g) in dx.iter_mut().zip(dy).zip(n).zip(gamma) {
                dx.write(r * (dy * g - mean_g - n * mean_gn));
            }
        }
    }
}

/// The per-element constants of one AdamW update (see `adamw.rs`).
pub(super) struct AdamWCoefficients {
    /// The gradient's factor (clipping).
    pub grad_scale: f32,
    /// First-moment decay.
    pub beta_1: f32,
    /// Second-moment decay.
    pub beta_2: f32,
    /// `lr / (1 - b1^t)`.
    pub step_size: f32,
    /// `1 / sqrt(1 - b2^t)`.
    pub inv_sqrt_correction_2: f32,
    /// Added to the denominator.
    pub epsilon: f32,
    /// `1 - lr wd`.
    pub decay: f32,
}

/// One AdamW update of one element: the new parameter and moments.
#[inline(always)]
fn adamw_element(p: f32, g: f32, m: f32, v: f32, c: &AdamWCoefficients) -> (f32, f32, f32) {
    let g = g * c.grad_scale;
    let m = c.beta_1 * m + (1.0 - c.beta_1) * g;
    let v = c.beta_2 * v + (1.0 - c.beta_2) * g * g;
    let denominator = v.sqrt() * c.inv_sqrt_correction_2 + c.epsilon;
    (p * c.decay - c.step_size * m / denominator, m, v)
}

with_avx512! {
    /// One AdamW update of each element; `moments` are the previous ones (zero when `None`).
    fn adamw_loop(
        p: &[f32],
        g: &[f32],
        moments: Option<(&[f32], &[f32])>,
        c: &AdamWCoefficients,
        p_new: &mut [Uninit],
        m_new: &mut [Uninit],
        v_new: &mut [Uninit],
    ) {
        let outputs = p_new.iter_mut().zip(m_new.iter_mut()).zip(v_new.iter_mut());
        match moments {
            Some((m, v)) => {
                for ((((pn, mn), vn), (&p, &g)), (&m, &v)) in outputs.zip(p.iter().zip(g)).zip(m.iter().zip(v)) {
                    let (p, m, v) = adamw_element(p, g, m, v, c);
                    pn.write(p);
                    mn.write(m);
                    vn.write(v);
                }
            }
            None => {
                for (((pn, mn), vn), (&p, &g)) in outputs.zip(p.iter().zip(g)) {
                    let (p, m, v) = adamw_element(p, g, 0.0, 0.0, c);
                    pn.write(p);
                    mn.write(m);
                    vn.write(v);
                }
            }
        }
    }
}

with_avx512! {
    /// One AdamW update of each element in place: `p`, `m` and `v` become the new ones.
    fn adamw_in_place_loop(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], c: &AdamWCoefficients) {
        for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            (*p, *m, *v) = adamw_element(*p, g, *m, *v, c);
        }
    }
}

/// Pairs of elements whose random words [`dropout_loop`] draws at a time.
const WORDS: usize = 128;

with_avx512! {
    /// Dropout of `input` (chunk `chunk` of a mask, or its start) into `output`: elements `2j`
    /// and `2j + 1` are kept, times `scale`, when the low and the high half of the `j`-th
    /// SplitMix64 word from `key` are below `threshold` (as `random_bits` draws them). The
    /// words of a block are drawn first and applied after: two loops that vectorise.
    fn dropout_loop(input: &[f32], output: &mut [Uninit], key: u64, threshold: i32, scale: f32) {
        let mut halves = [0i32; 2 * WORDS];
        for (block, (y, x)) in output.chunks_mut(2 * WORDS).zip(input.chunks(2 * WORDS)).enumerate() {
            let first = (block * WORDS) as u64 + 1;
            for (j, pair) in halves.chunks_exact_mut(2).enumerate() {
                let word = mix(key.wrapping_add((first + j as u64).wrapping_mul(GAMMA)));
                pair[0] = word as i32;
                pair[1] = (word >> 32) as i32;
            }
            for ((y, &x), &half) in y.iter_mut().zip(x).zip(&halves) {
                y.write(if half < threshold { x * scale } else { 0.0 });
            }
        }
    }
}

/// Dropout of `input` with the mask of `(seed, call)` into `output` (as long), its chunks
/// spread over rayon's threads. `prob` is in `(0, 1]`: the threshold of 0 would not fit an i32.
pub(super) fn dropout(input: &[f32], output: &mut [Uninit], prob: f64, seed: u64, call: u64) {
    let threshold = keep_threshold(prob) as i32;
    let scale = if prob < 1.0 {
        (1.0 / (1.0 - prob)) as f32
    } else {
        0.0
    };
    output
        .par_chunks_mut(CHUNK)
        .zip(input.par_chunks(CHUNK))
        .enumerate()
        .for_each(|(chunk, (y, x))| {
            dropout_loop(x, y, chunk_key(seed, call, chunk), threshold, scale)
        });
}

/// Runs `run(first_row, rows of a, rows of b, rows of output)` on the two halves of the rows of
/// `width`, one per task of `rayon::join` (rayon's threads, burn-flex's pool: no thread is
/// started per call).
fn on_two_halves(
    a: &[f32],
    b: &[f32],
    width: usize,
    output: &mut [Uninit],
    run: impl Fn(usize, &[f32], &[f32], &mut [Uninit]) + Sync,
) {
    let rows = a.len() / width.max(1);
    let mid = (rows / 2) * width;
    let (a_low, a_high) = a.split_at(mid);
    let (out_low, out_high) = output.split_at_mut(mid);
    let (b_low, b_high) = if b.is_empty() {
        (b, b)
    } else {
        b.split_at(mid)
    };
    rayon::join(
        || run(0, a_low, b_low, out_low),
        || run(rows / 2, a_high, b_high, out_high),
    );
}

/// GELU of each element of `input`, into `output` (as long).
pub(super) fn gelu(input: &[f32], output: &mut [Uninit]) {
    on_two_halves(input, &[], 1, output, |_, x, _, y| gelu_loop(x, y));
}

/// GELU's derivative at each element of `input` times `grad`, into `output` (all as long).
pub(super) fn gelu_grad(input: &[f32], grad: &[f32], output: &mut [Uninit]) {
    on_two_halves(input, grad, 1, output, |_, x, g, y| gelu_grad_loop(x, g, y));
}

/// `softmax(x + bias)` over rows of `width`: `x` holds `bias.len() / width` groups of rows,
/// group `i` biased by row `i` of `bias` (a padding mask per sequence, shared by its heads).
pub(super) fn masked_softmax(x: &[f32], bias: &[f32], width: usize, output: &mut [Uninit]) {
    let rows_per_bias = x.len() / bias.len();
    on_two_halves(x, &[], width, output, |first_row, x, _, y| {
        masked_softmax_loop(x, bias, width, rows_per_bias, first_row, y)
    });
}

/// The gradient of a softmax over rows of `width`, from its `output` and the output's `grad`,
/// into `input_grad` (all as long).
pub(super) fn softmax_grad(output: &[f32], grad: &[f32], width: usize, input_grad: &mut [Uninit]) {
    on_two_halves(output, grad, width, input_grad, |_, y, g, dx| {
        softmax_grad_loop(y, g, width, dx)
    });
}

/// Rows of a LayerNorm that one task of rayon's takes.
const LAYER_NORM_ROWS: usize = 64;

/// LayerNorm of the rows of `x` (of `gamma.len()`), into `output` and `normalized` (as long)
/// and `inv_std` (one per row), on rayon's threads.
pub(super) fn layer_norm(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    epsilon: f32,
    output: &mut [Uninit],
    normalized: &mut [Uninit],
    inv_std: &mut [Uninit],
) {
    let block = LAYER_NORM_ROWS * gamma.len();
    x.par_chunks(block)
        .zip(output.par_chunks_mut(block))
        .zip(normalized.par_chunks_mut(block))
        .zip(inv_std.par_chunks_mut(LAYER_NORM_ROWS))
        .for_each(|(((x, y), n), r)| layer_norm_loop(x, gamma, beta, epsilon, y, n, r));
}

/// LayerNorm's gradients: the input's into `input_grad` (as long as `dy`), and those of gamma
/// and beta (summed over the rows), returned; on rayon's threads, each summing its rows.
pub(super) fn layer_norm_grad(
    dy: &[f32],
    n: &[f32],
    r: &[f32],
    gamma: &[f32],
    input_grad: &mut [Uninit],
) -> (Vec<f32>, Vec<f32>) {
    let width = gamma.len();
    let block = LAYER_NORM_ROWS * width;
    let zeros = || (vec![0.0f32; width], vec![0.0f32; width]);
    dy.par_chunks(block)
        .zip(n.par_chunks(block))
        .zip(r.par_chunks(LAYER_NORM_ROWS))
        .zip(input_grad.par_chunks_mut(block))
        .fold(zeros, |(mut dg, mut db), (((dy, n), r), dx)| {
            layer_norm_grad_loop(dy, n, r, gamma, dx, &mut dg, &mut db);
            (dg, db)
        })
        .reduce(zeros, |(mut dg, mut db), (dg2, db2)| {
            dg.iter_mut().zip(dg2).for_each(|(a, b)| *a += b);
            db.iter_mut().zip(db2).for_each(|(a, b)| *a += b);
            (dg, db)
        })
}

/// Elements that one task of rayon's sums in [`squared_sum`].
const SUM_ELEMENTS: usize = 1 << 15;

/// Independent partial sums of [`squared_sum_loop`], so that the compiler vectorises it.
const SUM_LANES: usize = 16;

with_avx512! {
    /// The sum of the squares of `values` into `total`: `SUM_LANES` partial sums in `f32`
    /// (a task's `SUM_ELEMENTS / SUM_LANES` squares each), added up in `f64`.
    fn squared_sum_loop(values: &[f32], total: &mut f64) {
        let mut lanes = [0.0f32; SUM_LANES];
        let blocks = values.chunks_exact(SUM_LANES);
        let tail = blocks.remainder();
        for block in blocks {
            for (lane, &x) in lanes.iter_mut().zip(block) {
                *lane += x * x;
            }
        }
        *total = lanes.iter().map(|&x| f64::from(x)).sum::<f64>()
            + tail.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>();
    }
}

/// The sum of the squares of `values`, on rayon's threads.
pub(super) fn squared_sum(values: &[f32]) -> f64 {
    values
        .par_chunks(SUM_ELEMENTS)
        .map(|chunk| {
            let mut total = 0.0;
            squared_sum_loop(chunk, &mut total);
            total
        })
        .sum()
}

/// Parameters of an AdamW update that one task of rayon's takes.
const ADAMW_ELEMENTS: usize = 1 << 15;

/// One AdamW update of every element of `p` into `p_new`, `m_new` and `v_new` (all as long),
/// on rayon's threads.
pub(super) fn adamw(
    p: &[f32],
    g: &[f32],
    moments: Option<(&[f32], &[f32])>,
    c: &AdamWCoefficients,
    p_new: &mut [Uninit],
    m_new: &mut [Uninit],
    v_new: &mut [Uninit],
) {
    let outputs = p_new
        .par_chunks_mut(ADAMW_ELEMENTS)
        .zip(m_new.par_chunks_mut(ADAMW_ELEMENTS))
        .zip(v_new.par_chunks_mut(ADAMW_ELEMENTS))
        .enumerate();
    outputs.for_each(|(i, ((pn, mn), vn))| {
        let range = i * ADAMW_ELEMENTS..(i * ADAMW_ELEMENTS + pn.len());
        let moments = moments.map(|(m, v)| (&m[range.clone()], &v[range.clone()]));
        adamw_loop(&p[range.clone()], &g[range], moments, c, pn, mn, vn);
    });
}

/// [`adamw`] overwriting the parameter and its moments (all as long as `g`), on rayon's
/// threads: no new memory, which for MiniLM's 22 million parameters is 260 MB of fresh pages a
/// step (their page faults cost as much as the update).
pub(super) fn adamw_in_place(
    p: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    c: &AdamWCoefficients,
) {
    p.par_chunks_mut(ADAMW_ELEMENTS)
        .zip(g.par_chunks(ADAMW_ELEMENTS))
        .zip(m.par_chunks_mut(ADAMW_ELEMENTS))
        .zip(v.par_chunks_mut(ADAMW_ELEMENTS))
        .for_each(|(((p, g), m), v)| adamw_in_place_loop(p, g, m, v, c));
}

#[cfg(test)]
mod tests {
    use super::exp_nonpositive;

    #[test]
    fn the_exponential_is_within_3e_7_of_std() {
        for i in 0..=100_000 {
            let x = -90.0 * i as f32 / 100_000.0;
            let (ours, std) = (exp_nonpositive(x), x.exp());
            let close = (ours - std).abs() <= 3e-7 * std;
            let flushed = x < -87.0 && ours == 0.0;
            assert!(close || flushed, "exp({x}): {ours} vs {std}");
        }
    }
}
