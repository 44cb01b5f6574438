//! The BERT encoder: embeddings, N encoder layers and the tanh pooler (HF `BertModel`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::{FloatDType, Int, Tensor, activation::tanh, backend::Backend};

use super::attention::AttentionConfig;
use super::embeddings::{Embeddings, EmbeddingsConfig};
use super::encoder::{EncoderLayer, EncoderLayerConfig};
use super::init::linear;
use crate::config::BertConfig;
use crate::fused::FusedOps;

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
        let mask_bias = mask_bias(attention_mask).reshape([batch, 1, 1, seq]);
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

/// What the attention scores of each position get added: 0 for tokens, the most negative
/// finite number of the mask's float type for padding (Hugging Face's `torch.finfo(dtype).min`;
/// in bf16 or f16, f32's would round to minus infinity, and `0 * -inf` is NaN).
pub fn mask_bias<B: Backend>(attention_mask: Tensor<B, 2>) -> Tensor<B, 2> {
    let smallest = FloatDType::from(attention_mask.dtype()).finfo().min;
    (attention_mask.neg() + 1.0).mul_scalar(smallest)
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::{DType, Tensor, TensorData};

    use super::mask_bias;

    #[test]
    fn the_padding_bias_is_finite_and_tokens_get_zero_in_every_precision() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let mask = TensorData::new(vec![1.0f32, 1.0, 0.0], [1, 3]);
            let mask = Tensor::<Flex, 2>::from_data(mask, (&Default::default(), dtype));
            let bias: Vec<f32> = mask_bias(mask)
                .into_data()
                .convert::<f32>()
                .to_vec()
                .unwrap();
            assert_eq!(&bias[..2], &[0.0, 0.0], "{dtype:?}");
            assert!(
                bias[2].is_finite() && bias[2] < -6e4,
                "{dtype:?}: {}",
                bias[2]
            );
        }
    }
}
