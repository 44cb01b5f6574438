//! [`FusedOps`] on burn's CUDA backend (and any other [`Fusion`] backend over burn's CubeCL
//! backends): attention's masked softmax and its backward, LayerNorm forward and backward, GELU
//! forward and backward, and the optimiser's step decided on the device (the gradient factor,
//! f16's loss scale and AdamW) are the CubeCL kernels of hptune-gpu-kernels, each registered as
//! one op of burn's fusion stream; matrix products, dropout, embeddings and the squared norm
//! stay burn's.

use burn::tensor::ops::FloatTensor;
use hptune_gpu_kernels::{self as kernels, Fusion, FusionBackend, GpuFusedOps};

use super::layer_norm::{LayerNormGrads, Normalized};
use super::{AdamWRates, FusedOps, GradFactor, ScaleRule, StepDecision, UpdatedOnDevice};

impl<B: FusionBackend + GpuFusedOps> FusedOps for Fusion<B> {
    fn masked_softmax(scores: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        <Self as GpuFusedOps>::masked_softmax(scores, bias)
    }

    fn softmax_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        <Self as GpuFusedOps>::softmax_backward(output, grad)
    }

    fn layer_norm_rows(
        rows: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> Normalized<Self> {
        let [output, normalized, inv_std] =
            <Self as GpuFusedOps>::layer_norm_rows(rows, gamma, beta, epsilon);
        (output, normalized, inv_std)
    }

    fn layer_norm_rows_backward(
        grad: FloatTensor<Self>,
        normalized: FloatTensor<Self>,
        inv_std: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> LayerNormGrads<Self> {
        let [input_grad, gamma_grad, beta_grad] =
            <Self as GpuFusedOps>::layer_norm_rows_backward(grad, normalized, inv_std, gamma);
        (input_grad, gamma_grad, beta_grad)
    }

    fn gelu_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        <Self as GpuFusedOps>::gelu_erf(tensor)
    }

    fn gelu_erf_backward(input: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        <Self as GpuFusedOps>::gelu_erf_backward(input, grad)
    }

    const STEP_DECISION: StepDecision = StepDecision::Device;

    fn grad_factor(
        squared_sum: FloatTensor<Self>,
        max_norm: f64,
        loss_scale: Option<(FloatTensor<Self>, ScaleRule)>,
    ) -> GradFactor<Self> {
        let loss_scale = loss_scale.map(|(state, rule)| {
            let rule = kernels::ScaleRule {
                growth_interval: rule.growth_interval,
                growth: rule.growth,
                backoff: rule.backoff,
            };
            (state, rule)
        });
        <Self as GpuFusedOps>::grad_factor(squared_sum, max_norm, loss_scale)
    }

    fn adamw_on_device(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        state: Option<[FloatTensor<Self>; 3]>,
        factor: FloatTensor<Self>,
        rates: &AdamWRates,
    ) -> UpdatedOnDevice<Self> {
        let rates = kernels::AdamW {
            lr: rates.lr,
            weight_decay: rates.weight_decay,
            beta_1: rates.beta_1,
            beta_2: rates.beta_2,
            epsilon: rates.epsilon,
        };
        <Self as GpuFusedOps>::adamw(param, grad, state, factor, &rates)
    }
}
