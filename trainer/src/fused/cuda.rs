//! [`FusedOps`] on burn's CUDA backend (and any other [`Fusion`] backend over burn's CubeCL
//! backends): attention's masked softmax and its backward, LayerNorm forward and backward, GELU
//! forward and backward and the AdamW update are the CubeCL kernels of hptune-gpu-kernels, each
//! registered as one op of burn's fusion stream; matrix products, dropout, embeddings and the
//! squared norm stay burn's.

use burn::tensor::TensorData;
use burn::tensor::ops::FloatTensor;
use burn::tensor::ops::FloatTensorOps;
use hptune_gpu_kernels::{AdamW, Fusion, FusionBackend, GpuFusedOps};

use super::layer_norm::{LayerNormGrads, Normalized};
use super::{AdamWStep, FusedOps, Updated};

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

    /// The kernel's gradient factor is `step.grad_scale`, uploaded (a copy to the device, not a
    /// read back from it).
    fn adamw(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        moments: Option<(FloatTensor<Self>, FloatTensor<Self>)>,
        step: &AdamWStep,
    ) -> Updated<Self> {
        let factor = Self::float_from_data(
            TensorData::new(vec![step.grad_scale as f32, 0.0], [2]),
            &Self::float_device(&param),
        );
        let coefficients = AdamW {
            lr: step.lr,
            weight_decay: step.weight_decay,
            beta_1: step.beta_1,
            beta_2: step.beta_2,
            epsilon: step.epsilon,
            corrections: step.bias_corrections(),
        };
        let [param, first, second] =
            <Self as GpuFusedOps>::adamw(param, grad, moments, factor, &coefficients);
        (param, first, second)
    }
}
