//! The BERT encoder: embeddings, N encoder layers and the tanh pooler (HF `BertModel`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::{Int, Tensor, activation::tanh, backend::Backend};

use super::attention::AttentionConfig;
use super::embeddings::{Embeddings, EmbeddingsConfig};
use super::encoder::{EncoderLayer, EncoderLayerConfig};
use super::fused::FusedOps;
use super::init::linear;
use crate::config::BertConfig;

/// The encoder's parts, derived from a checkpoint's `config.json`.
#[derive(Config, Debug)]
pub struct BertModelConfig {
    /// The embedding layer.
    pub embeddings: EmbeddingsConfig,
    /// Every encoder layer (all alike).
    pub layer: EncoderLayerConfig,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
}

/// `tanh(dense(h[CLS]))`, the sentence representation (HF `BertPooler`, key `pooler`).
#[derive(Module, Debug)]
pub struct Pooler<B: Backend> {
    /// `pooler.dense`.
    pub dense: Linear<B>,
}

/// The stack of encoder layers (key `encoder`).
#[derive(Module, Debug)]
pub struct Encoder<B: Backend> {
    /// `encoder.layer.N`.
    pub layer: Vec<EncoderLayer<B>>,
}

/// The BERT encoder with its pooler.
#[derive(Module, Debug)]
pub struct BertModel<B: Backend> {
    /// `embeddings`.
    pub embeddings: Embeddings<B>,
    /// `encoder`.
    pub encoder: Encoder<B>,
    /// `pooler`.
    pub pooler: Pooler<B>,
}

impl BertModelConfig {
    /// Derives the module sizes from `config.json`, with `dropout` (if given) replacing both of
    /// its dropout probabilities.
    pub fn from_hf(config: &BertConfig, dropout: Option<f64>) -> Self {
        let hidden_dropout = dropout.unwrap_or(config.hidden_dropout_prob);
        let attention_dropout = dropout.unwrap_or(config.attention_probs_dropout_prob);
        BertModelConfig {
            embeddings: EmbeddingsConfig {
                vocab_size: config.vocab_size,
                hidden_size: config.hidden_size,
                max_position_embeddings: config.max_position_embeddings,
                type_vocab_size: config.type_vocab_size,
                layer_norm_eps: config.layer_norm_eps,
                dropout: hidden_dropout,
                initializer_range: config.initializer_range,
            },
            layer: EncoderLayerConfig {
                attention: AttentionConfig {
                    hidden_size: config.hidden_size,
                    num_attention_heads: config.num_attention_heads,
                    attention_dropout,
                    hidden_dropout,
                    layer_norm_eps: config.layer_norm_eps,
                    initializer_range: config.initializer_range,
                },
                intermediate_size: config.intermediate_size,
            },
            num_hidden_layers: config.num_hidden_layers,
        }
    }

    /// Builds the encoder with freshly initialised weights.
    pub fn init<B: Backend>(&self, device: &B::Device) -> BertModel<B> {
        let hidden = self.embeddings.hidden_size;
        BertModel {
            embeddings: self.embeddings.init(device),
            encoder: Encoder {
                layer: (0..self.num_hidden_layers)
                    .map(|_| self.layer.init(device))
                    .collect(),
            },
            pooler: Pooler {
                dense: linear(hidden, hidden, self.embeddings.initializer_range, device),
            },
        }
    }
}

impl<B: FusedOps> BertModel<B> {
    /// Encodes a padded batch; returns the pooled `[batch, hidden]` representation.
    ///
    /// `attention_mask` is `[batch, seq]` with 1 for real tokens and 0 for padding.
    pub fn forward(
        &self,
        input_ids: Tensor<B, 2, Int>,
        token_type_ids: Tensor<B, 2, Int>,
        attention_mask: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let [batch, seq] = input_ids.dims();
        // Hugging Face adds the smallest f32 to the scores of padding positions.
        let mask_bias = (attention_mask.neg() + 1.0)
            .mul_scalar(f32::MIN)
            .reshape([batch, 1, 1, seq]);
        let mut hidden = self.embeddings.forward(input_ids, token_type_ids);
        for layer in &self.encoder.layer {
            hidden = layer.forward(hidden, mask_bias.clone());
        }
        let [_, _, width] = hidden.dims();
        let cls = hidden
            .slice([0..batch, 0..1, 0..width])
            .reshape([batch, width]);
        tanh(self.pooler.dense.forward(cls))
    }
}
