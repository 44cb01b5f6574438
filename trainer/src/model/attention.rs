//! Multi-head self-attention and its output projection (HF `BertAttention`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::{Tensor, backend::Backend};

use super::dense::dense;
use super::dropout::{Dropout, DropoutConfig};
use super::init::linear;
use super::layer_norm::LayerNorm;
use crate::fused::{FusedOps, masked_softmax, matmul, matmul_like};

/// Sizes and dropout of one attention block.
#[derive(Config, Debug)]
pub struct AttentionConfig {
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Number of heads; divides `hidden_size`.
    pub num_attention_heads: usize,
    /// Dropout on the attention probabilities.
    pub attention_dropout: f64,
    /// Dropout on the projected output.
    pub hidden_dropout: f64,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Standard deviation of the initial weights.
    pub initializer_range: f64,
}

/// Scaled dot-product attention over all heads (HF `BertSelfAttention`, key `attention.self`).
#[derive(Module, Debug)]
pub struct SelfAttention<B: Backend> {
    /// `attention.self.query`.
    pub query: Linear<B>,
    /// `attention.self.key`.
    pub key: Linear<B>,
    /// `attention.self.value`.
    pub value: Linear<B>,
    dropout: Dropout,
    num_heads: usize,
}

/// Projection, dropout, residual and LayerNorm after attention (HF `BertSelfOutput`).
#[derive(Module, Debug)]
pub struct AttentionOutput<B: Backend> {
    /// `attention.output.dense`.
    pub dense: Linear<B>,
    /// `attention.output.LayerNorm`.
    pub layer_norm: LayerNorm<B>,
    dropout: Dropout,
}

/// Self-attention followed by its output block (HF `BertAttention`).
#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    /// `attention.self`.
    pub self_attention: SelfAttention<B>,
    /// `attention.output`.
    pub output: AttentionOutput<B>,
}

impl AttentionConfig {
    /// Builds the block with freshly initialised weights.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Attention<B> {
        let h = self.hidden_size;
        let dense = || linear(h, h, self.initializer_range, device);
        Attention {
            self_attention: SelfAttention {
                query: dense(),
                key: dense(),
                value: dense(),
                dropout: DropoutConfig::new(self.attention_dropout).init(),
                num_heads: self.num_attention_heads,
            },
            output: AttentionOutput {
                dense: dense(),
                layer_norm: LayerNorm::new(h, self.layer_norm_eps, device),
                dropout: DropoutConfig::new(self.hidden_dropout).init(),
            },
        }
    }
}

impl<B: FusedOps> SelfAttention<B> {
    /// Attends `[batch, seq, hidden]` states to each other; `mask_bias` is `[batch, 1, 1, seq]`,
    /// 0 for real tokens and a large negative number for padding.
    pub fn forward(&self, hidden: Tensor<B, 3>, mask_bias: Tensor<B, 4>) -> Tensor<B, 3> {
        let [batch, seq, width] = hidden.dims();
        let head_dim = width / self.num_heads;
        let heads = |t: Tensor<B, 3>| {
            t.reshape([batch, seq, self.num_heads, head_dim])
                .swap_dims(1, 2)
        };
        // Scaling the contiguous [batch, seq, hidden] projection is cheaper than scaling the
        // [batch, heads, seq, seq] scores, and equal up to rounding.
        let scale = 1.0 / (head_dim as f64).sqrt();
        let query = heads(dense(&self.query, hidden.clone()).mul_scalar(scale));
        let key = heads(dense(&self.key, hidden.clone()));
        let value = heads(dense(&self.value, hidden));

        let scores = matmul(query, key.transpose());
        let probs = self.dropout.forward(masked_softmax(scores, mask_bias));
        // The context laid out as the values, [batch, seq, heads, head_dim] in memory: the
        // heads merge back into [batch, seq, width] without a copy.
        matmul_like(probs, value.clone(), value)
            .swap_dims(1, 2)
            .reshape([batch, seq, width])
    }
}

impl<B: FusedOps> AttentionOutput<B> {
    /// Projects the attention result and adds it to the block's input.
    pub fn forward(&self, attended: Tensor<B, 3>, input: Tensor<B, 3>) -> Tensor<B, 3> {
        let projected = self.dropout.forward(dense(&self.dense, attended));
        self.layer_norm.forward(projected + input)
    }
}

impl<B: FusedOps> Attention<B> {
    /// Self-attention with residual connection and LayerNorm.
    pub fn forward(&self, hidden: Tensor<B, 3>, mask_bias: Tensor<B, 4>) -> Tensor<B, 3> {
        let attended = self.self_attention.forward(hidden.clone(), mask_bias);
        self.output.forward(attended, hidden)
    }
}
