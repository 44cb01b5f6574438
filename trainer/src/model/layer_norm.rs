//! LayerNorm over the last dimension (HF `LayerNorm`), computed by the fused op of
//! [`super::fused`]. Its parameters are named like burn's `LayerNorm`'s, `gamma` and `beta`,
//! so that checkpoint keys map the same way (see [`crate::checkpoint::keymap`]).

use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::{Tensor, backend::Backend};

use crate::fused::{FusedOps, layer_norm};

/// `(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last dimension.
#[derive(Module, Debug)]
pub struct LayerNorm<B: Backend> {
    /// The scale (`weight` in Hugging Face checkpoints).
    pub gamma: Param<Tensor<B, 1>>,
    /// The shift (`bias`).
    pub beta: Param<Tensor<B, 1>>,
    epsilon: f64,
}

impl<B: Backend> LayerNorm<B> {
    /// A LayerNorm of `width` features, initialised to the identity (scale 1, shift 0).
    pub fn new(width: usize, epsilon: f64, device: &B::Device) -> Self {
        LayerNorm {
            gamma: Initializer::Ones.init([width], device),
            beta: Initializer::Zeros.init([width], device),
            epsilon,
        }
    }
}

impl<B: FusedOps> LayerNorm<B> {
    /// Normalises `[..., width]` states over their last dimension.
    pub fn forward<const D: usize>(&self, input: Tensor<B, D>) -> Tensor<B, D> {
        layer_norm(input, self.gamma.val(), self.beta.val(), self.epsilon)
    }
}
