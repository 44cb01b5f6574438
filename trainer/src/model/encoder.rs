//! One transformer encoder layer: attention then the GELU feed-forward (HF `BertLayer`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::{Tensor, backend::Backend};

use super::attention::{Attention, AttentionConfig};
use super::dense::dense;
use super::dropout::{Dropout, DropoutConfig};
use super::init::linear;
use super::layer_norm::LayerNorm;
use crate::fused::{FusedOps, gelu};

/// Sizes and dropout of one encoder layer.
#[derive(Config, Debug)]
pub struct EncoderLayerConfig {
    /// The attention block.
    pub attention: AttentionConfig,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
}

/// The feed-forward expansion with GELU (HF `BertIntermediate`, key `intermediate`).
#[derive(Module, Debug)]
pub struct Intermediate<B: Backend> {
    /// `intermediate.dense`.
    pub dense: Linear<B>,
}

/// The feed-forward contraction, dropout, residual and LayerNorm (HF `BertOutput`).
#[derive(Module, Debug)]
pub struct Output<B: Backend> {
    /// `output.dense`.
    pub dense: Linear<B>,
    /// `output.LayerNorm`.
    pub layer_norm: LayerNorm<B>,
    dropout: Dropout,
}

/// One encoder layer (key `encoder.layer.N`).
#[derive(Module, Debug)]
pub struct EncoderLayer<B: Backend> {
    /// `attention`.
    pub attention: Attention<B>,
    /// `intermediate`.
    pub intermediate: Intermediate<B>,
    /// `output`.
    pub output: Output<B>,
}

impl EncoderLayerConfig {
    /// Builds the layer with freshly initialised weights.
    pub fn init<B: Backend>(&self, device: &B::Device) -> EncoderLayer<B> {
        let a = &self.attention;
        EncoderLayer {
            attention: a.init(device),
            intermediate: Intermediate {
                dense: linear(
                    a.hidden_size,
                    self.intermediate_size,
                    a.initializer_range,
                    device,
                ),
            },
            output: Output {
                dense: linear(
                    self.intermediate_size,
                    a.hidden_size,
                    a.initializer_range,
                    device,
                ),
                layer_norm: LayerNorm::new(a.hidden_size, a.layer_norm_eps, device),
                dropout: DropoutConfig::new(a.hidden_dropout).init(),
            },
        }
    }
}

impl<B: FusedOps> EncoderLayer<B> {
    /// Transforms `[batch, seq, hidden]` states; see [`super::SelfAttention::forward`] for the mask.
    pub fn forward(&self, hidden: Tensor<B, 3>, mask_bias: Tensor<B, 4>) -> Tensor<B, 3> {
        let attended = self.attention.forward(hidden, mask_bias);
        let expanded = gelu(dense(&self.intermediate.dense, attended.clone()));
        let contracted = self
            .output
            .dropout
            .forward(dense(&self.output.dense, expanded));
        self.output.layer_norm.forward(contracted + attended)
    }
}
