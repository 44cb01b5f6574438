//! The kernels, in CubeCL: each a `#[cube(launch)]` function generic over the runtime by its
//! `launch::<R>`, on contiguous `f32` tensors.
//!
//! The row kernels (LayerNorm, softmax) give each row of a `[rows, width]` view one cube of
//! [`BLOCK`] units: each unit strides over the row, and the cube's sums and maxima are trees in
//! shared memory. The cube of row `r` is the `r`-th of the launch (`CUBE_POS`, over a grid
//! that can be two-dimensional when there are more rows than one axis takes).

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

/// Units of a row kernel's cube (a power of two: the reductions halve it).
pub(crate) const BLOCK: usize = 128;

/// The sum (`max` false) or the maximum (`max` true) over the cube's units of each unit's
/// `value`, returned to every unit.
#[cube]
fn cube_reduce(value: f32, shared: &mut SharedMemory<f32>, #[comptime] max: bool) -> f32 {
    let unit = UNIT_POS as usize;
    shared[unit] = value;
    sync_cube();
    // A runtime variable: `BLOCK / 2` alone is a comptime constant, which the loop cannot halve
    // (CubeCL panics while expanding the kernel, and the launch writes nothing).
    let mut stride = (BLOCK / 2).runtime();
    while stride > 0 {
        if unit < stride {
            let other = shared[unit + stride];
            if max {
                shared[unit] = f32::max(shared[unit], other);
            } else {
                shared[unit] += other;
            }
        }
        sync_cube();
        stride /= 2;
    }
    let total = shared[0];
    sync_cube();
    total
}

/// LayerNorm of each row of `input` (`[rows, width]`): `output = n * gamma + beta` with
/// `n = (x - mean) * r`, `r = 1 / sqrt(var + epsilon)`; `n` and `r` (`[rows, 1]`) are kept for
/// the backward pass.
#[cube(launch)]
pub(crate) fn layer_norm(
    input: &Tensor<f32>,
    gamma: &Tensor<f32>,
    beta: &Tensor<f32>,
    output: &mut Tensor<f32>,
    normalized: &mut Tensor<f32>,
    inv_std: &mut Tensor<f32>,
    rows: usize,
    width: usize,
    epsilon: f32,
) {
    let row = CUBE_POS;
    if row >= rows {
        terminate!();
    }
    let start = row * width;
    let unit = UNIT_POS as usize;
    let mut shared = SharedMemory::<f32>::new(BLOCK);
    let mut sum = 0.0f32;
    let mut i = unit;
    while i < width {
        sum += input[start + i];
        i += BLOCK;
    }
    let mean = cube_reduce(sum, &mut shared, false) / f32::cast_from(width);
    let mut squares = 0.0f32;
    let mut j = unit;
    while j < width {
        let centered = input[start + j] - mean;
        squares += centered * centered;
        j += BLOCK;
    }
    let variance = cube_reduce(squares, &mut shared, false) / f32::cast_from(width);
    let r = 1.0f32 / f32::sqrt(variance + epsilon);
    let mut k = unit;
    while k < width {
        let n = (input[start + k] - mean) * r;
        normalized[start + k] = n;
        output[start + k] = n * gamma[k] + beta[k];
        k += BLOCK;
    }
    if unit == 0 {
        inv_std[row] = r;
    }
}

/// The input gradient of [`layer_norm`] for each row: with `g = dy * gamma`,
/// `dx = r * (g - mean(g) - n * mean(g * n))`.
#[cube(launch)]
pub(crate) fn layer_norm_backward(
    grad: &Tensor<f32>,
    normalized: &Tensor<f32>,
    inv_std: &Tensor<f32>,
    gamma: &Tensor<f32>,
    input_grad: &mut Tensor<f32>,
    rows: usize,
    width: usize,
) {
    let row = CUBE_POS;
    if row >= rows {
        terminate!();
    }
    let start = row * width;
    let unit = UNIT_POS as usize;
    let mut shared = SharedMemory::<f32>::new(BLOCK);
    let mut sum_g = 0.0f32;
    let mut sum_gn = 0.0f32;
    let mut i = unit;
    while i < width {
        let g = grad[start + i] * gamma[i];
        sum_g += g;
        sum_gn += g * normalized[start + i];
        i += BLOCK;
    }
    let count = f32::cast_from(width);
    let mean_g = cube_reduce(sum_g, &mut shared, false) / count;
    let mean_gn = cube_reduce(sum_gn, &mut shared, false) / count;
    let r = inv_std[row];
    let mut k = unit;
    while k < width {
        let n = normalized[start + k];
        let g = grad[start + k] * gamma[k];
        input_grad[start + k] = r * (g - mean_g - n * mean_gn);
        k += BLOCK;
    }
}

/// LayerNorm's parameter gradients, one unit per column: `dgamma = sum(dy * n)` and
/// `dbeta = sum(dy)` over the rows.
#[cube(launch)]
pub(crate) fn layer_norm_parameter_grads(
    grad: &Tensor<f32>,
    normalized: &Tensor<f32>,
    gamma_grad: &mut Tensor<f32>,
    beta_grad: &mut Tensor<f32>,
    rows: usize,
    width: usize,
) {
    let column = ABSOLUTE_POS;
    if column >= width {
        terminate!();
    }
    let mut dgamma = 0.0f32;
    let mut dbeta = 0.0f32;
    for row in 0..rows {
        let at = row * width + column;
        dgamma += grad[at] * normalized[at];
        dbeta += grad[at];
    }
    gamma_grad[column] = dgamma;
    beta_grad[column] = dbeta;
}

/// Softmax of each row of `scores + bias`; `bias` has a row for each `rows_per_bias` rows of
/// `scores` (attention's padding mask: one row per sequence, for all its heads and queries).
#[cube(launch)]
pub(crate) fn masked_softmax(
    scores: &Tensor<f32>,
    bias: &Tensor<f32>,
    output: &mut Tensor<f32>,
    rows: usize,
    width: usize,
    rows_per_bias: usize,
) {
    let row = CUBE_POS;
    if row >= rows {
        terminate!();
    }
    let start = row * width;
    let bias_start = (row / rows_per_bias) * width;
    let unit = UNIT_POS as usize;
    let mut shared = SharedMemory::<f32>::new(BLOCK);
    // The lowest finite value, not -inf: WGSL has no literal for infinities or NaN. A row of
    // -inf still gets NaN (`exp(-inf) = 0` everywhere, `0 / 0`), as burn's softmax does.
    let mut max = f32::min_value();
    let mut i = unit;
    while i < width {
        max = f32::max(max, scores[start + i] + bias[bias_start + i]);
        i += BLOCK;
    }
    let row_max = cube_reduce(max, &mut shared, true);
    let mut sum = 0.0f32;
    let mut j = unit;
    while j < width {
        let e = f32::exp(scores[start + j] + bias[bias_start + j] - row_max);
        output[start + j] = e;
        sum += e;
        j += BLOCK;
    }
    let scale = 1.0f32 / cube_reduce(sum, &mut shared, false);
    let mut k = unit;
    while k < width {
        output[start + k] = output[start + k] * scale;
        k += BLOCK;
    }
}

/// The gradient of a softmax over each row from its output `y` and the output's gradient `g`:
/// `y * (g - sum(g * y))`.
#[cube(launch)]
pub(crate) fn softmax_backward(
    output: &Tensor<f32>,
    grad: &Tensor<f32>,
    input_grad: &mut Tensor<f32>,
    rows: usize,
    width: usize,
) {
    let row = CUBE_POS;
    if row >= rows {
        terminate!();
    }
    let start = row * width;
    let unit = UNIT_POS as usize;
    let mut shared = SharedMemory::<f32>::new(BLOCK);
    let mut dot = 0.0f32;
    let mut i = unit;
    while i < width {
        dot += grad[start + i] * output[start + i];
        i += BLOCK;
    }
    let total = cube_reduce(dot, &mut shared, false);
    let mut k = unit;
    while k < width {
        let y = output[start + k];
        input_grad[start + k] = y * (grad[start + k] - total);
        k += BLOCK;
    }
}

/// `1 / sqrt(2)`.
const FRAC_1_SQRT_2: f32 = core::f32::consts::FRAC_1_SQRT_2;
/// `1 / sqrt(2 pi)`.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// GELU in its erf form, element by element: `x * (1 + erf(x / sqrt 2)) / 2`.
#[cube(launch)]
pub(crate) fn gelu(input: &Tensor<f32>, output: &mut Tensor<f32>) {
    let at = ABSOLUTE_POS;
    if at >= input.len() {
        terminate!();
    }
    let x = input[at];
    output[at] = x * 0.5f32 * (1.0f32 + Erf::erf(x * FRAC_1_SQRT_2));
}

/// The gradient of [`gelu`] at `input` times `grad`:
/// `grad * ((1 + erf(x / sqrt 2)) / 2 + x * exp(-x² / 2) / sqrt(2 pi))`.
#[cube(launch)]
pub(crate) fn gelu_backward(input: &Tensor<f32>, grad: &Tensor<f32>, output: &mut Tensor<f32>) {
    let at = ABSOLUTE_POS;
    if at >= input.len() {
        terminate!();
    }
    let x = input[at];
    let cdf = 0.5f32 * (1.0f32 + Erf::erf(x * FRAC_1_SQRT_2));
    let pdf = f32::exp(-0.5f32 * x * x) * FRAC_1_SQRT_2PI;
    output[at] = grad[at] * (cdf + x * pdf);
}

/// Writes the gradient factor of an update from the squared sum of all gradients `total` (of
/// the loss times `loss_scale`): `factor[0]` is global-norm clipping's factor divided by
/// `loss_scale` (`max_norm` 0: no clipping), NaN when a gradient is not finite (the update is
/// skipped), and `factor[1]` the norm before clipping, unscaled. Returns whether the gradients
/// were finite.
#[cube]
fn write_grad_factor(total: f32, loss_scale: f32, max_norm: f32, factor: &mut Tensor<f32>) -> bool {
    let norm = f32::sqrt(total) / loss_scale;
    let mut clip = 1.0f32;
    if max_norm > 0.0f32 {
        clip = f32::min(max_norm / (norm + 1.0e-6f32), 1.0f32);
    }
    let mut scale = clip / loss_scale;
    let finite = !(f32::is_nan(norm) || f32::is_inf(norm));
    if !finite {
        // NaN from the norm's bits with the quiet-NaN pattern set: WGSL has no NaN literal
        // (nor a constant expression giving one), and arithmetic such as `inf * 0` may be
        // folded to 0 by the driver.
        scale = f32::reinterpret(u32::reinterpret(norm) | 0x7fc0_0000u32);
    }
    factor[0] = scale;
    factor[1] = norm;
    finite
}

/// The gradient factor of an update without loss scaling, in one unit (see
/// [`write_grad_factor`]).
#[cube(launch)]
pub(crate) fn grad_factor(total: &Tensor<f32>, factor: &mut Tensor<f32>, max_norm: f32) {
    if ABSOLUTE_POS == 0 {
        write_grad_factor(total[0], 1.0f32, max_norm, factor);
    }
}

/// The gradient factor of an update whose loss was multiplied by f16's dynamic loss scale
/// (see [`write_grad_factor`]), and the scale's next state, in one unit. A state is
/// `[scale, finite steps in a row, steps skipped]`; as PyTorch's `GradScaler.update`: a
/// non-finite gradient multiplies the scale by `rule.backoff` and ends the run, the run's
/// `rule.growth_interval`-th finite step multiplies it by `rule.growth` (unless that overflows
/// f32) and starts a new run.
#[cube(launch)]
pub(crate) fn grad_factor_scaled(
    total: &Tensor<f32>,
    scale: &Tensor<f32>,
    factor: &mut Tensor<f32>,
    next_scale: &mut Tensor<f32>,
    max_norm: f32,
    rule: ScaleRuleArgs,
) {
    if ABSOLUTE_POS == 0 {
        let current = scale[0];
        let skipped = scale[2];
        if write_grad_factor(total[0], current, max_norm, factor) {
            let mut next = current;
            let mut run = scale[1] + 1.0f32;
            if run == rule.growth_interval {
                let grown = current * rule.growth;
                if !f32::is_inf(grown) {
                    next = grown;
                }
                run = 0.0f32;
            }
            next_scale[0] = next;
            next_scale[1] = run;
            next_scale[2] = skipped;
        } else {
            next_scale[0] = current * rule.backoff;
            next_scale[1] = 0.0f32;
            next_scale[2] = skipped + 1.0f32;
        }
    }
}

/// How [`grad_factor_scaled`] changes the loss scale.
#[derive(CubeType, CubeLaunch, Clone, Copy, Debug)]
pub(crate) struct ScaleRuleArgs {
    /// Finite steps in a row after which the scale grows.
    pub growth_interval: f32,
    /// The scale's factor when it grows.
    pub growth: f32,
    /// The scale's factor after a non-finite gradient.
    pub backoff: f32,
}

/// One AdamW update of `param` and its moments, in place, with the gradient times `factor[0]`
/// (from [`grad_factor`]) and the bias corrections of update number `steps[0] + 1`;
/// `next_steps[0]` gets the count of updates after this one. A NaN factor skips the update:
/// nothing is written but the count, unchanged, and (`first`) zero moments. `first`: the
/// moments are zero before this step (their buffers are written, not read). Launched with at
/// least one unit, which writes the count.
#[cube(launch)]
pub(crate) fn adamw(
    param: &mut Tensor<f32>,
    grad: &Tensor<f32>,
    first_moment: &mut Tensor<f32>,
    second_moment: &mut Tensor<f32>,
    factor: &Tensor<f32>,
    steps: &Tensor<f32>,
    next_steps: &mut Tensor<f32>,
    coefficients: AdamWArgs,
    #[comptime] first: bool,
) {
    let at = ABSOLUTE_POS;
    let scale = factor[0];
    let skip = f32::is_nan(scale);
    if at == 0 {
        next_steps[0] = steps[0] + select(skip, 0.0f32, 1.0f32);
    }
    if at >= param.len() {
        terminate!();
    }
    if skip {
        if first {
            first_moment[at] = 0.0f32;
            second_moment[at] = 0.0f32;
        }
        terminate!();
    }
    let g = grad[at] * scale;
    let mut m = (1.0f32 - coefficients.beta_1) * g;
    let mut v = (1.0f32 - coefficients.beta_2) * g * g;
    if !first {
        m += coefficients.beta_1 * first_moment[at];
        v += coefficients.beta_2 * second_moment[at];
    }
    first_moment[at] = m;
    second_moment[at] = v;
    // In f32, as PyTorch's fused AdamW computes them from its step count on the device.
    let time = steps[0] + 1.0f32;
    let correction_1 = 1.0f32 - f32::powf(coefficients.beta_1, time);
    let correction_2 = 1.0f32 - f32::powf(coefficients.beta_2, time);
    let m_hat = m / correction_1;
    let v_hat = v / correction_2;
    let update = coefficients.lr * m_hat / (f32::sqrt(v_hat) + coefficients.epsilon);
    param[at] = param[at] * coefficients.decay - update;
}

/// The scalars of [`adamw`].
#[derive(CubeType, CubeLaunch, Clone, Copy, Debug)]
pub(crate) struct AdamWArgs {
    /// The learning rate.
    pub lr: f32,
    /// `1 - lr * weight_decay`.
    pub decay: f32,
    /// First-moment decay.
    pub beta_1: f32,
    /// Second-moment decay.
    pub beta_2: f32,
    /// Added to the denominator.
    pub epsilon: f32,
}
