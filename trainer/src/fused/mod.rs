//! The model's heavy ops as single autodiff ops with hand-written gradients: matrix products,
//! attention's masked softmax, LayerNorm, GELU, dropout and embedding lookups; and the
//! optimiser's passes over the parameters (AdamW, the gradients' squared norm).
//!
//! burn 0.21 differentiates `softmax` and `layer_norm` as compositions of element-wise ops and
//! reductions, whose gradients are broadcast views that burn-flex walks with its scalar strided
//! fallback, and every op of a composition writes a new tensor. [`FusedOps`] gives the model
//! one op for each: on a backend that records gradients ([`Autodiff`], whatever its inner
//! backend) the op keeps what its backward needs and computes the gradient directly, with the
//! inner backend's ops; on the inner backends themselves (evaluation, prediction) it is the
//! backend's own. Those are burn's ops (or compositions of them), except on burn-flex, where
//! each has a kernel of its own (`kernels.rs`; matrix products by the system's BLAS,
//! [`crate::blas`]), and on burn's CUDA backend, where the masked softmax, LayerNorm, GELU
//! (each with its backward pass) and AdamW are CubeCL kernels (`cuda.rs`; the kernels are
//! hptune-gpu-kernels', in `gpu-kernels/`). The
//! gradients are computed on `[rows, width]` views (see `rows.rs`).

mod adamw;
#[cfg(feature = "cuda")]
mod cuda;
mod device_step;
mod dropout;
mod embedding;
mod gelu;
#[cfg(feature = "flex")]
mod kernels;
mod layer_norm;
pub mod mask;
mod matmul;
#[cfg(feature = "flex")]
mod output;
mod rows;
mod softmax;
mod squared_sum;
mod unary;

pub use adamw::{AdamWRates, AdamWStep, Updated};
pub use device_step::{GradFactor, ScaleRule, StepDecision, UpdatedOnDevice};

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{
    DType, FloatDType, Int, Tensor, TensorMetadata, TensorPrimitive, backend::Backend,
};

/// A backend with the model's fused ops; the default methods are burn's.
pub trait FusedOps: Backend {
    /// Softmax of `scores + bias` over the last dimension, `bias` broadcast to `scores`
    /// (attention's padding mask: `[batch, 1, 1, seq]` against `[batch, heads, seq, seq]`).
    fn masked_softmax(scores: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        let last = scores.rank() - 1;
        Self::softmax(Self::float_add(scores, bias), last)
    }

    /// The gradient of a softmax over the last dimension, from its `output` and the output's
    /// `grad`: `y * (g - sum(g * y))`.
    fn softmax_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        softmax::softmax_backward::<Self>(output, grad)
    }

    /// LayerNorm over the last dimension: `(x - mean) / sqrt(var + epsilon) * gamma + beta`.
    fn layer_norm_last(
        tensor: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        let shape = tensor.shape();
        let rows = rows::as_rows::<Self>(tensor);
        let (output, _, _) = Self::layer_norm_rows(rows, gamma, beta, epsilon);
        Self::float_reshape(output, shape)
    }

    /// LayerNorm of `[rows, width]`, with what its backward pass needs (see `layer_norm.rs`).
    fn layer_norm_rows(
        rows: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> layer_norm::Normalized<Self> {
        layer_norm::layer_norm_rows::<Self>(rows, gamma, beta, epsilon)
    }

    /// The gradients of [`FusedOps::layer_norm_rows`] from its output's `grad` and what it
    /// kept.
    fn layer_norm_rows_backward(
        grad: FloatTensor<Self>,
        normalized: FloatTensor<Self>,
        inv_std: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> layer_norm::LayerNormGrads<Self> {
        layer_norm::layer_norm_rows_backward::<Self>(grad, normalized, inv_std, gamma)
    }

    /// The matrix product over the last two dimensions, batch dimensions equal; laid out in
    /// memory as `like` (a tensor of the product's shape) where the backend can, row-major
    /// otherwise.
    fn matmul(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        _like: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        Self::float_matmul(lhs, rhs)
    }

    /// Dropout with the keep-mask of `(seed, call)` (see [`mask`]): each
    /// element zeroed with probability `prob`, the others scaled by `1 / (1 - prob)`. The same
    /// arguments give the same mask, so applied to a gradient it is the op's backward pass.
    fn dropout(tensor: FloatTensor<Self>, prob: f64, seed: u64, call: u64) -> FloatTensor<Self> {
        mask::composed::<Self>(tensor, prob, seed, call)
    }

    /// One AdamW update of `param` from its gradient and its moments (`None` before the first
    /// step): the new parameter and moments (see `adamw.rs`).
    fn adamw(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        moments: Option<(FloatTensor<Self>, FloatTensor<Self>)>,
        step: &AdamWStep,
    ) -> Updated<Self> {
        adamw::adamw::<Self>(param, grad, moments, step)
    }

    /// Where the optimiser decides each step's gradient factor on this backend: on the host
    /// from the norm read back ([`FusedOps::adamw`], the default), or on the device
    /// ([`FusedOps::grad_factor`] and [`FusedOps::adamw_on_device`]).
    const STEP_DECISION: StepDecision = StepDecision::Host;

    /// From the squared sum of all gradients (one element), the factor of every gradient in
    /// the update, decided on the device (see `device_step.rs`): global-norm clipping's to
    /// `max_norm` (0: none) divided by the loss scale of `loss_scale`'s state, NaN when a
    /// gradient is not finite; and the scale's next state.
    fn grad_factor(
        squared_sum: FloatTensor<Self>,
        max_norm: f64,
        loss_scale: Option<(FloatTensor<Self>, ScaleRule)>,
    ) -> GradFactor<Self> {
        device_step::grad_factor::<Self>(squared_sum, max_norm, loss_scale)
    }

    /// One AdamW update of `param` with the factor of [`FusedOps::grad_factor`] (NaN: the
    /// update is skipped) from its moments and count of updates (`None` before the first):
    /// the new parameter, moments and count, all on the device.
    fn adamw_on_device(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        state: Option<[FloatTensor<Self>; 3]>,
        factor: FloatTensor<Self>,
        rates: &AdamWRates,
    ) -> UpdatedOnDevice<Self> {
        device_step::adamw::<Self>(param, grad, state, factor, rates)
    }

    /// GELU in its erf form: `x * (1 + erf(x / sqrt 2)) / 2`.
    fn gelu_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::gelu(tensor)
    }

    /// The sum of the squares of `tensor`'s elements, as a one-element tensor (no gradient).
    fn squared_sum(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        squared_sum::composed::<Self>(tensor)
    }

    /// The rows of the table `weights` at `indices`: `[batch, seq]` into `[batch, seq, width]`.
    fn embedding_lookup(weights: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> {
        Self::embedding(weights, indices)
    }

    /// The gradient of the table `weights` from the gradient `grad` of its rows at `indices`.
    fn embedding_grad(
        weights: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::embedding_backward(weights, grad, indices)
    }

    /// The gradient of [`FusedOps::gelu_erf`] at `input`, times `grad`.
    fn gelu_erf_backward(input: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::gelu_backward(input, grad)
    }
}

impl<B: FusedOps, C: CheckpointStrategy> FusedOps for Autodiff<B, C> {
    fn masked_softmax(scores: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        softmax::masked_softmax::<B, C>(scores, bias)
    }

    fn layer_norm_last(
        tensor: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        layer_norm::layer_norm_last::<B, C>(tensor, gamma, beta, epsilon)
    }

    fn matmul(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        like: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        matmul::matmul::<B, C>(lhs, rhs, like)
    }

    fn dropout(tensor: FloatTensor<Self>, prob: f64, seed: u64, call: u64) -> FloatTensor<Self> {
        dropout::dropout::<B, C>(tensor, prob, seed, call)
    }

    fn gelu_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        gelu::gelu::<B, C>(tensor)
    }

    fn embedding_lookup(weights: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> {
        embedding::embedding::<B, C>(weights, indices)
    }
}

#[cfg(feature = "flex")]
impl FusedOps for burn::backend::Flex {
    fn masked_softmax(scores: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        softmax::flex::masked_softmax(scores, bias)
    }

    fn softmax_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        softmax::flex::softmax_backward(output, grad)
    }

    fn layer_norm_rows(
        rows: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> layer_norm::Normalized<Self> {
        layer_norm::flex::layer_norm_rows(rows, gamma, beta, epsilon)
    }

    fn layer_norm_rows_backward(
        grad: FloatTensor<Self>,
        normalized: FloatTensor<Self>,
        inv_std: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> layer_norm::LayerNormGrads<Self> {
        layer_norm::flex::layer_norm_rows_backward(grad, normalized, inv_std, gamma)
    }

    fn matmul(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        like: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        matmul::flex::matmul(lhs, rhs, like)
    }

    fn dropout(tensor: FloatTensor<Self>, prob: f64, seed: u64, call: u64) -> FloatTensor<Self> {
        dropout::flex::dropout(tensor, prob, seed, call)
    }

    fn adamw(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        moments: Option<(FloatTensor<Self>, FloatTensor<Self>)>,
        step: &AdamWStep,
    ) -> Updated<Self> {
        adamw::flex::adamw(param, grad, moments, step)
    }

    fn gelu_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        gelu::flex::gelu(tensor)
    }

    fn gelu_erf_backward(input: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        gelu::flex::gelu_backward(input, grad)
    }

    fn squared_sum(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        squared_sum::flex::squared_sum(tensor)
    }

    fn embedding_grad(
        weights: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        embedding::flex::embedding_grad(weights, grad, indices)
    }
}
#[cfg(feature = "ndarray")]
impl FusedOps for burn::backend::NdArray {}
#[cfg(feature = "candle")]
impl FusedOps for burn::backend::Candle {}

/// `tensor` in `dtype` (no op when it is in it already).
pub(crate) fn in_dtype<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    dtype: DType,
) -> Tensor<B, D> {
    match tensor.dtype() == dtype {
        true => tensor,
        false => tensor.cast(FloatDType::from(dtype)),
    }
}

/// Softmax of `scores + bias` over the last dimension, through [`FusedOps::masked_softmax`]; the
/// bias is a constant (no gradient flows to it). Computed in f32 for half-precision scores, as
/// under PyTorch's autocast, and returned in their precision.
pub fn masked_softmax<B: FusedOps, const D: usize>(
    scores: Tensor<B, D>,
    bias: Tensor<B, D>,
) -> Tensor<B, D> {
    let dtype = scores.dtype();
    let probs = Tensor::from_primitive(TensorPrimitive::Float(B::masked_softmax(
        in_dtype(scores, DType::F32).into_primitive().tensor(),
        in_dtype(bias, DType::F32).into_primitive().tensor(),
    )));
    in_dtype(probs, dtype)
}

/// `lhs · rhs` over the last two dimensions, through [`FusedOps::matmul`] when the batch
/// dimensions are equal (burn's broadcasting matmul otherwise).
pub fn matmul<B: FusedOps, const D: usize>(lhs: Tensor<B, D>, rhs: Tensor<B, D>) -> Tensor<B, D> {
    product(lhs, rhs, None)
}

/// [`matmul`] laid out in memory as `like`, a tensor of the product's shape, where the backend
/// can: attention's context, of the shape of its values, keeps their layout.
pub fn matmul_like<B: FusedOps, const D: usize>(
    lhs: Tensor<B, D>,
    rhs: Tensor<B, D>,
    like: Tensor<B, D>,
) -> Tensor<B, D> {
    product(lhs, rhs, Some(like))
}

fn product<B: FusedOps, const D: usize>(
    lhs: Tensor<B, D>,
    rhs: Tensor<B, D>,
    like: Option<Tensor<B, D>>,
) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(B::matmul(
        lhs.into_primitive().tensor(),
        rhs.into_primitive().tensor(),
        like.map(|tensor| tensor.into_primitive().tensor()),
    )))
}

/// Dropout of `tensor` with the mask of `(seed, call)`, through [`FusedOps::dropout`].
pub fn dropout<B: FusedOps, const D: usize>(
    tensor: Tensor<B, D>,
    prob: f64,
    seed: u64,
    call: u64,
) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(B::dropout(
        tensor.into_primitive().tensor(),
        prob,
        seed,
        call,
    )))
}

/// The rows of the table `weights` at `indices` (`[batch, seq]` into `[batch, seq, width]`),
/// through [`FusedOps::embedding_lookup`].
pub fn embedding<B: FusedOps>(weights: Tensor<B, 2>, indices: Tensor<B, 2, Int>) -> Tensor<B, 3> {
    Tensor::from_primitive(TensorPrimitive::Float(B::embedding_lookup(
        weights.into_primitive().tensor(),
        indices.into_primitive(),
    )))
}

/// GELU (erf form) of `tensor`, through [`FusedOps::gelu_erf`].
pub fn gelu<B: FusedOps, const D: usize>(tensor: Tensor<B, D>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(B::gelu_erf(
        tensor.into_primitive().tensor(),
    )))
}

/// LayerNorm of `tensor` over its last dimension, through [`FusedOps::layer_norm_last`].
/// Computed in f32 for a half-precision `tensor`, as under PyTorch's autocast, and returned in
/// its precision.
pub fn layer_norm<B: FusedOps, const D: usize>(
    tensor: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    epsilon: f64,
) -> Tensor<B, D> {
    let dtype = tensor.dtype();
    let normalised = Tensor::from_primitive(TensorPrimitive::Float(B::layer_norm_last(
        in_dtype(tensor, DType::F32).into_primitive().tensor(),
        in_dtype(gamma, DType::F32).into_primitive().tensor(),
        in_dtype(beta, DType::F32).into_primitive().tensor(),
        epsilon,
    )));
    in_dtype(normalised, dtype)
}

#[cfg(test)]
mod test_util {
    use burn::tensor::backend::{AutodiffBackend, Backend};
    use burn::tensor::{Tensor, TensorData};

    /// A deterministic tensor of values in (-1, 1), different for each `seed`.
    pub(super) fn sample<B: Backend, const D: usize>(shape: [usize; D], seed: u64) -> Tensor<B, D> {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|i| ((i as f64 + 1.0) * (seed as f64 * 0.7548776662 + 0.5698402910)).sin() as f32)
            .collect();
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    /// `f(x)` and the gradient at `x` of `sum(f(x) * w)`, `w` a [`sample`] of `f(x)`'s shape
    /// (weights, so that every output element's gradient counts), under burn's autodiff.
    pub(super) fn value_and_grad<B: AutodiffBackend, const D: usize>(
        x: Tensor<B, D>,
        f: impl FnOnce(Tensor<B, D>) -> Tensor<B, D>,
    ) -> (Vec<f32>, Vec<f32>) {
        let x = x.require_grad();
        let y = f(x.clone());
        let weights = sample::<B, D>(y.dims(), 2);
        let grads = (y.clone() * weights).sum().backward();
        let grad = x.grad(&grads).unwrap();
        (
            y.into_data().to_vec().unwrap(),
            grad.into_data().to_vec().unwrap(),
        )
    }

    /// Asserts `|a - b| <= tolerance * (1 + |b|)` element by element.
    pub(super) fn assert_close(actual: &[f32], expected: &[f32], tolerance: f32) {
        assert_eq!(actual.len(), expected.len());
        for (i, (a, b)) in actual.iter().zip(expected).enumerate() {
            assert!(
                (a - b).abs() <= tolerance * (1.0 + b.abs()),
                "element {i}: {a} vs {b}"
            );
        }
    }
}
