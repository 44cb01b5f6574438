//! An optimiser step decided on the device, as PyTorch's fused AdamW with `GradScaler` decides
//! it: the factor of the gradients (global-norm clipping, f16's loss scale divided out, NaN to
//! skip a step whose gradients are not finite), the loss scale's next state and each
//! parameter's count of updates stay tensors, so that the step reads nothing back to the host.
//!
//! Composed of burn's ops here (the default of [`super::FusedOps::grad_factor`] and
//! [`super::FusedOps::adamw_on_device`]); one kernel each on burn's CUDA backend (`cuda.rs`).
//! The bias corrections are computed from the count in f32, as PyTorch's fused AdamW does.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, Tensor, TensorMetadata, TensorPrimitive};

use super::AdamWRates;

/// Where an optimiser step decides the factor of its gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepDecision {
    /// On the host, from the gradient norm read back: one read per step, and the update's
    /// coefficients are f64's (the CPU backends, where a read costs nothing).
    Host,
    /// On the device ([`super::FusedOps::grad_factor`], [`super::FusedOps::adamw_on_device`]):
    /// no read (the GPU backends, where a read stalls the queue).
    Device,
}

/// How f16's dynamic loss scale changes after each step (PyTorch's `GradScaler`). On the
/// device the scale's state is a three-element `f32` tensor: `[scale, finite steps in a row,
/// steps skipped]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleRule {
    /// Finite steps in a row after which the scale grows (`growth_interval`).
    pub growth_interval: u32,
    /// The scale's factor when it grows (`growth_factor`).
    pub growth: f32,
    /// The scale's factor after a step with a non-finite gradient (`backoff_factor`).
    pub backoff: f32,
}

/// The two-element factor `[factor of every gradient, or NaN to skip; norm before clipping]`
/// and, with a loss scale, the scale's next state.
pub type GradFactor<B> = (FloatTensor<B>, Option<FloatTensor<B>>);

/// The updated parameter, moments and one-element count of updates.
pub type UpdatedOnDevice<B> = [FloatTensor<B>; 4];

/// A rank-1 tensor of the primitive `tensor`.
fn vector<B: Backend>(tensor: FloatTensor<B>) -> Tensor<B, 1> {
    Tensor::from_primitive(TensorPrimitive::Float(tensor))
}

/// The factor of an update from the squared sum of all gradients (of the loss times the
/// scale of `loss_scale`'s state, if any), and the scale's next state.
pub(super) fn grad_factor<B: Backend>(
    squared_sum: FloatTensor<B>,
    max_norm: f64,
    loss_scale: Option<(FloatTensor<B>, ScaleRule)>,
) -> GradFactor<B> {
    let total = vector::<B>(squared_sum);
    let state = loss_scale.map(|(state, rule)| (vector::<B>(state), rule));
    let scale = match &state {
        Some((state, _)) => state.clone().slice(0..1),
        None => total.ones_like(),
    };
    let norm = total.sqrt() / scale.clone();
    let finite = norm.clone().is_finite();
    // torch.nn.utils.clip_grad_norm_: max / (norm + 1e-6) when that is below 1.
    let clip = match max_norm > 0.0 {
        true => (norm.clone().add_scalar(1e-6).recip() * max_norm).clamp_max(1.0),
        false => norm.ones_like(),
    };
    let factor = (clip / scale).mask_fill(finite.clone().bool_not(), f32::NAN);
    let factor = Tensor::cat(vec![factor, norm], 0).into_primitive().tensor();
    let next = state.map(|(state, rule)| {
        let [scale, run, skipped] = [0usize, 1, 2].map(|i| state.clone().slice(i..i + 1));
        let finite_steps = finite.clone().float();
        // A step with a non-finite gradient ends the run.
        let run = (run + 1.0) * finite_steps.clone();
        let grow = run.clone().equal_elem(rule.growth_interval as f32);
        let grown = scale.clone() * rule.growth;
        let grows = grow.clone().bool_and(grown.clone().is_finite());
        let next_scale = scale
            .clone()
            .mask_where(grows, grown)
            .mask_where(finite.bool_not(), scale * rule.backoff);
        let skipped = skipped - finite_steps + 1.0;
        Tensor::cat(vec![next_scale, run.mask_fill(grow, 0.0), skipped], 0)
            .into_primitive()
            .tensor()
    });
    (factor, next)
}

/// One AdamW update of `param` from its gradient and its state (moments and count of updates;
/// `None` before the first), the gradient times `factor[0]`, NaN skipping it (see the module
/// documentation).
pub(super) fn adamw<B: Backend>(
    param: FloatTensor<B>,
    grad: FloatTensor<B>,
    state: Option<[FloatTensor<B>; 3]>,
    factor: FloatTensor<B>,
    rates: &AdamWRates,
) -> UpdatedOnDevice<B> {
    let shape = param.shape();
    let n = shape.num_elements();
    let flat = |tensor: FloatTensor<B>| vector::<B>(B::float_reshape(tensor, Shape::new([n])));
    let (param, grad) = (flat(param), flat(grad));
    let factor = vector::<B>(factor).slice(0..1);
    let skip = factor.clone().is_nan();
    let (moments, steps) = match state {
        Some([m, v, steps]) => ((flat(m), flat(v)), vector::<B>(steps)),
        None => (
            (param.zeros_like(), param.zeros_like()),
            Tensor::zeros([1], &param.device()),
        ),
    };
    let g = grad * factor.clone();
    let m = moments.0.clone() * rates.beta_1 + g.clone() * (1.0 - rates.beta_1);
    let v = moments.1.clone() * rates.beta_2 + g.clone() * g * (1.0 - rates.beta_2);
    let time = steps.clone() + 1.0;
    let correction = |beta: f64| -time.ones_like().mul_scalar(beta).powf(time.clone()) + 1.0;
    let m_hat = m.clone() / correction(rates.beta_1);
    let v_hat = v.clone() / correction(rates.beta_2);
    let update = m_hat / (v_hat.sqrt() + rates.epsilon) * rates.lr;
    let updated = param.clone() * (1.0 - rates.lr * rates.weight_decay) - update;
    // The skip on every element, materialised (a broadcast view of a mask is not read as one
    // by every backend).
    let skipped = (param.zeros_like() + factor.clone()).is_nan();
    let keep = |new: Tensor<B, 1>, old: Tensor<B, 1>| {
        let kept = new.mask_where(skipped.clone(), old);
        B::float_reshape(kept.into_primitive().tensor(), shape.clone())
    };
    let steps = steps + skip.bool_not().float();
    [
        keep(updated, param),
        keep(m, moments.0),
        keep(v, moments.1),
        steps.into_primitive().tensor(),
    ]
}
