//! hptune-trainer's fused ops on GPUs: LayerNorm, attention's masked softmax and GELU forward
//! and backward, the gradient factor of global-norm clipping and f16's loss scale, and the
//! AdamW update, each one CubeCL kernel (`kernels.rs`) generic over the runtime.
//!
//! [`GpuFusedOps`] is implemented for burn's CubeCL backends ([`CubeBackend`], any runtime: CUDA
//! in the trainer, wgpu in the tests), where each op launches its kernel, and for burn's
//! [`Fusion`] over them (`fusion.rs`), where each op is registered as one custom op of the
//! fusion stream and launches when the stream runs. Tensors of another precision than `f32`
//! are cast to `f32` and back around the kernels.

mod fusion;
mod kernels;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, Shape, TensorMetadata};
use burn_cubecl::cubecl::calculate_cube_count_elemwise;
use burn_cubecl::cubecl::prelude::{CubeCount, CubeDim};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::{empty_device_dtype, zeros_client};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

pub use burn_fusion::{Fusion, FusionBackend};

/// The scalars of one AdamW update (PyTorch's `torch.optim.AdamW`):
/// `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g²`,
/// `p = p (1 - lr wd) - lr (m / c1) / (sqrt(v / c2) + eps)`, `g` the gradient times the factor
/// of [`GpuFusedOps::grad_factor`], and the bias corrections `c1 = 1 - b1^t`, `c2 = 1 - b2^t`
/// computed on the device from the parameter's count of updates `t`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamW {
    /// The learning rate.
    pub lr: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// First-moment decay.
    pub beta_1: f64,
    /// Second-moment decay.
    pub beta_2: f64,
    /// Added to the denominator.
    pub epsilon: f64,
}

/// How f16's dynamic loss scale changes after each step (PyTorch's `GradScaler`), for
/// [`GpuFusedOps::grad_factor`]. The scale's state is a three-element `f32` tensor:
/// `[scale, finite steps in a row, steps skipped]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleRule {
    /// Finite steps in a row after which the scale grows (`growth_interval`).
    pub growth_interval: u32,
    /// The scale's factor when it grows (`growth_factor`).
    pub growth: f32,
    /// The scale's factor after a step with a non-finite gradient (`backoff_factor`).
    pub backoff: f32,
}

/// The fused ops of hptune-trainer on a GPU backend, each one kernel.
pub trait GpuFusedOps: Backend {
    /// Softmax of `scores + bias` over the last dimension; `bias` is `scores`' shape with
    /// leading dimensions kept and the ones before the last set to 1 (attention's padding mask:
    /// `[batch, 1, 1, seq]` against `[batch, heads, seq, seq]`).
    fn masked_softmax(scores: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self>;

    /// The gradient of a softmax over the last dimension from its `output` and the output's
    /// `grad`: `y * (g - sum(g * y))`.
    fn softmax_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;

    /// LayerNorm of `[rows, width]`: the output, the normalised rows `n` and `r = 1 /
    /// sqrt(var + epsilon)` as `[rows, 1]`.
    fn layer_norm_rows(
        rows: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3];

    /// The gradients of the input, `gamma` and `beta` of [`GpuFusedOps::layer_norm_rows`] from
    /// its output's `grad` and what it kept.
    fn layer_norm_rows_backward(
        grad: FloatTensor<Self>,
        normalized: FloatTensor<Self>,
        inv_std: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3];

    /// GELU in its erf form: `x * (1 + erf(x / sqrt 2)) / 2`.
    fn gelu_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self>;

    /// The gradient of [`GpuFusedOps::gelu`] at `input`, times `grad`.
    fn gelu_erf_backward(input: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;

    /// From the squared sum of all gradients (a one-element tensor, as the loss scale leaves
    /// them), a two-element tensor on the device: the factor of every gradient in the update
    /// (global-norm clipping's to `max_norm`, 0 for none, divided by the loss scale; NaN when a
    /// gradient is not finite, and then [`GpuFusedOps::adamw`] skips the update) and the
    /// global norm before clipping. With `loss_scale`, the loss was multiplied by the scale
    /// of that state (see [`ScaleRule`]), and its state after this step comes back too. No
    /// value is read back to the host.
    fn grad_factor(
        squared_sum: FloatTensor<Self>,
        max_norm: f64,
        loss_scale: Option<(FloatTensor<Self>, ScaleRule)>,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>);

    /// One AdamW update of `param` from its gradient and its state (the moments and the
    /// one-element count of updates so far; `None` before the first step), the gradient
    /// times `factor[0]` (see [`GpuFusedOps::grad_factor`]; NaN skips the update): the new
    /// parameter, moments and count, written in place where the inputs are not shared.
    fn adamw(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        state: Option<[FloatTensor<Self>; 3]>,
        factor: FloatTensor<Self>,
        step: &AdamW,
    ) -> [FloatTensor<Self>; 4];
}

impl<R, F, I, BT> GpuFusedOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn masked_softmax(scores: CubeTensor<R>, bias: CubeTensor<R>) -> CubeTensor<R> {
        let (dtype, shape) = (scores.dtype, scores.shape());
        let (scores, bias) = (f32_contiguous(scores), f32_contiguous(bias));
        let (rows, width) = rows_of(&shape);
        let bias_rows = bias.shape().num_elements() / width.max(1);
        assert!(
            bias.shape()[bias.shape().num_dims() - 1] == width
                && (rows * width == 0 || (bias_rows > 0 && rows % bias_rows == 0)),
            "masked_softmax: bias {:?} does not broadcast to scores {shape:?}",
            bias.shape()
        );
        let output = empty_f32(&scores, shape);
        if rows * width > 0 {
            kernels::masked_softmax::launch::<R>(
                &scores.client,
                row_cubes(rows),
                CubeDim::new_1d(kernels::BLOCK as u32),
                scores.clone().into_tensor_arg(),
                bias.into_tensor_arg(),
                output.clone().into_tensor_arg(),
                rows,
                width,
                rows / bias_rows,
            );
        }
        in_dtype(output, dtype)
    }

    fn softmax_backward(output: CubeTensor<R>, grad: CubeTensor<R>) -> CubeTensor<R> {
        let (dtype, shape) = (output.dtype, output.shape());
        let (output, grad) = (f32_contiguous(output), f32_contiguous(grad));
        let (rows, width) = rows_of(&shape);
        let input_grad = empty_f32(&output, shape);
        if rows * width > 0 {
            kernels::softmax_backward::launch::<R>(
                &output.client,
                row_cubes(rows),
                CubeDim::new_1d(kernels::BLOCK as u32),
                output.clone().into_tensor_arg(),
                grad.into_tensor_arg(),
                input_grad.clone().into_tensor_arg(),
                rows,
                width,
            );
        }
        in_dtype(input_grad, dtype)
    }

    fn layer_norm_rows(
        rows: CubeTensor<R>,
        gamma: CubeTensor<R>,
        beta: CubeTensor<R>,
        epsilon: f64,
    ) -> [CubeTensor<R>; 3] {
        let (dtype, shape) = (rows.dtype, rows.shape());
        let [input, gamma, beta] = [rows, gamma, beta].map(f32_contiguous);
        let (count, width) = rows_of(&shape);
        let output = empty_f32(&input, shape.clone());
        let normalized = empty_f32(&input, shape);
        let inv_std = empty_f32(&input, Shape::new([count, 1]));
        if count * width > 0 {
            kernels::layer_norm::launch::<R>(
                &input.client,
                row_cubes(count),
                CubeDim::new_1d(kernels::BLOCK as u32),
                input.clone().into_tensor_arg(),
                gamma.into_tensor_arg(),
                beta.into_tensor_arg(),
                output.clone().into_tensor_arg(),
                normalized.clone().into_tensor_arg(),
                inv_std.clone().into_tensor_arg(),
                count,
                width,
                epsilon as f32,
            );
        }
        [output, normalized, inv_std].map(|tensor| in_dtype(tensor, dtype))
    }

    fn layer_norm_rows_backward(
        grad: CubeTensor<R>,
        normalized: CubeTensor<R>,
        inv_std: CubeTensor<R>,
        gamma: CubeTensor<R>,
    ) -> [CubeTensor<R>; 3] {
        let (dtype, shape) = (grad.dtype, grad.shape());
        let [grad, normalized, inv_std, gamma] =
            [grad, normalized, inv_std, gamma].map(f32_contiguous);
        let (rows, width) = rows_of(&shape);
        let input_grad = empty_f32(&grad, shape);
        let client = grad.client.clone();
        // Zeroed: with no rows, the parameter gradients are sums of nothing.
        let [gamma_grad, beta_grad] = [(); 2].map(|()| {
            zeros_client(
                client.clone(),
                grad.device.clone(),
                Shape::new([width]),
                DType::F32,
            )
        });
        if rows * width > 0 {
            kernels::layer_norm_backward::launch::<R>(
                &client,
                row_cubes(rows),
                CubeDim::new_1d(kernels::BLOCK as u32),
                grad.clone().into_tensor_arg(),
                normalized.clone().into_tensor_arg(),
                inv_std.into_tensor_arg(),
                gamma.into_tensor_arg(),
                input_grad.clone().into_tensor_arg(),
                rows,
                width,
            );
            let cube_dim = CubeDim::new(&client, width);
            kernels::layer_norm_parameter_grads::launch::<R>(
                &client,
                calculate_cube_count_elemwise(&client, width, cube_dim),
                cube_dim,
                grad.into_tensor_arg(),
                normalized.into_tensor_arg(),
                gamma_grad.clone().into_tensor_arg(),
                beta_grad.clone().into_tensor_arg(),
                rows,
                width,
            );
        }
        [input_grad, gamma_grad, beta_grad].map(|tensor| in_dtype(tensor, dtype))
    }

    fn gelu_erf(tensor: CubeTensor<R>) -> CubeTensor<R> {
        let (dtype, shape) = (tensor.dtype, tensor.shape());
        let input = f32_contiguous(tensor);
        let output = empty_f32(&input, shape);
        let (client, n) = (input.client.clone(), input.shape().num_elements());
        if n > 0 {
            let cube_dim = CubeDim::new(&client, n);
            kernels::gelu::launch::<R>(
                &client,
                calculate_cube_count_elemwise(&client, n, cube_dim),
                cube_dim,
                input.into_tensor_arg(),
                output.clone().into_tensor_arg(),
            );
        }
        in_dtype(output, dtype)
    }

    fn gelu_erf_backward(input: CubeTensor<R>, grad: CubeTensor<R>) -> CubeTensor<R> {
        let (dtype, shape) = (grad.dtype, grad.shape());
        let (input, grad) = (f32_contiguous(input), f32_contiguous(grad));
        let output = empty_f32(&input, shape);
        let (client, n) = (input.client.clone(), input.shape().num_elements());
        if n > 0 {
            let cube_dim = CubeDim::new(&client, n);
            kernels::gelu_backward::launch::<R>(
                &client,
                calculate_cube_count_elemwise(&client, n, cube_dim),
                cube_dim,
                input.into_tensor_arg(),
                grad.into_tensor_arg(),
                output.clone().into_tensor_arg(),
            );
        }
        in_dtype(output, dtype)
    }

    fn grad_factor(
        squared_sum: CubeTensor<R>,
        max_norm: f64,
        loss_scale: Option<(CubeTensor<R>, ScaleRule)>,
    ) -> (CubeTensor<R>, Option<CubeTensor<R>>) {
        let total = f32_contiguous(squared_sum);
        let factor = empty_f32(&total, Shape::new([2]));
        let (client, one) = (total.client.clone(), CubeCount::Static(1, 1, 1));
        let Some((scale, rule)) = loss_scale else {
            kernels::grad_factor::launch::<R>(
                &client,
                one,
                CubeDim::new_1d(1),
                total.into_tensor_arg(),
                factor.clone().into_tensor_arg(),
                max_norm as f32,
            );
            return (factor, None);
        };
        let scale = f32_contiguous(scale);
        let next_scale = empty_f32(&total, Shape::new([3]));
        kernels::grad_factor_scaled::launch::<R>(
            &client,
            one,
            CubeDim::new_1d(1),
            total.into_tensor_arg(),
            scale.into_tensor_arg(),
            factor.clone().into_tensor_arg(),
            next_scale.clone().into_tensor_arg(),
            max_norm as f32,
            kernels::ScaleRuleArgsLaunch::new(
                rule.growth_interval as f32,
                rule.growth,
                rule.backoff,
            ),
        );
        (factor, Some(next_scale))
    }

    fn adamw(
        param: CubeTensor<R>,
        grad: CubeTensor<R>,
        state: Option<[CubeTensor<R>; 3]>,
        factor: CubeTensor<R>,
        step: &AdamW,
    ) -> [CubeTensor<R>; 4] {
        let (dtype, shape) = (param.dtype, param.shape());
        let param = owned_f32(param);
        let first = state.is_none();
        let [m, v, steps] = match state {
            Some([m, v, steps]) => [owned_f32(m), owned_f32(v), f32_contiguous(steps)],
            None => [
                empty_f32(&param, shape.clone()),
                empty_f32(&param, shape),
                zeros_client(
                    param.client.clone(),
                    param.device.clone(),
                    Shape::new([1]),
                    DType::F32,
                ),
            ],
        };
        let next_steps = empty_f32(&param, Shape::new([1]));
        let (grad, factor) = (f32_contiguous(grad), f32_contiguous(factor));
        // At least one unit: it writes the count.
        let (client, n) = (param.client.clone(), param.shape().num_elements().max(1));
        let cube_dim = CubeDim::new(&client, n);
        kernels::adamw::launch::<R>(
            &client,
            calculate_cube_count_elemwise(&client, n, cube_dim),
            cube_dim,
            param.clone().into_tensor_arg(),
            grad.into_tensor_arg(),
            m.clone().into_tensor_arg(),
            v.clone().into_tensor_arg(),
            factor.into_tensor_arg(),
            steps.into_tensor_arg(),
            next_steps.clone().into_tensor_arg(),
            kernels::AdamWArgsLaunch::new(
                step.lr as f32,
                (1.0 - step.lr * step.weight_decay) as f32,
                step.beta_1 as f32,
                step.beta_2 as f32,
                step.epsilon as f32,
            ),
            first,
        );
        [in_dtype(param, dtype), m, v, next_steps]
    }
}

/// `[..., width]` as `(rows, width)`.
fn rows_of(shape: &Shape) -> (usize, usize) {
    let width = shape[shape.num_dims() - 1];
    (shape.num_elements() / width.max(1), width)
}

/// One cube per row: along x up to the axis' limit, then along y (the kernels' `CUBE_POS`
/// counts them all and skips those past the last row).
fn row_cubes(rows: usize) -> CubeCount {
    const AXIS: usize = 65_535;
    let x = rows.min(AXIS);
    CubeCount::Static(x as u32, rows.div_ceil(AXIS) as u32, 1)
}

/// `tensor` as a contiguous `f32` tensor.
fn f32_contiguous<R: CubeRuntime>(tensor: CubeTensor<R>) -> CubeTensor<R> {
    into_contiguous(in_dtype(tensor, DType::F32))
}

/// `tensor` as a contiguous `f32` tensor that no other handle shares (copied if it is), for
/// a kernel to write in place.
fn owned_f32<R: CubeRuntime>(tensor: CubeTensor<R>) -> CubeTensor<R> {
    let tensor = f32_contiguous(tensor);
    match tensor.can_mut() {
        true => tensor,
        false => tensor.copy(),
    }
}

/// A new contiguous `f32` tensor of `shape` on `like`'s device, its values not yet written.
fn empty_f32<R: CubeRuntime>(like: &CubeTensor<R>, shape: Shape) -> CubeTensor<R> {
    empty_device_dtype(like.client.clone(), like.device.clone(), shape, DType::F32)
}

/// `tensor` in `dtype` (itself when it is in it already).
fn in_dtype<R: CubeRuntime>(tensor: CubeTensor<R>, dtype: DType) -> CubeTensor<R> {
    match tensor.dtype == dtype {
        true => tensor,
        false => burn_cubecl::kernel::cast(tensor, dtype),
    }
}
