//! Word, position and token-type embeddings, summed and normalised (HF `BertEmbeddings`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Initializer};
use burn::tensor::{Int, Tensor, backend::Backend};

use super::dropout::{Dropout, DropoutConfig};
use super::layer_norm::LayerNorm;
use crate::fused::{FusedOps, embedding};

/// Sizes of the embedding tables.
#[derive(Config, Debug)]
pub struct EmbeddingsConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Length of the position table.
    pub max_position_embeddings: usize,
    /// Number of token types.
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Dropout after the LayerNorm.
    pub dropout: f64,
    /// Standard deviation of the initial weights.
    pub initializer_range: f64,
}

/// The embedding layer: `LayerNorm(word + position + token_type)` then dropout.
#[derive(Module, Debug)]
pub struct Embeddings<B: Backend> {
    /// `embeddings.word_embeddings`.
    pub word_embeddings: Embedding<B>,
    /// `embeddings.position_embeddings`.
    pub position_embeddings: Embedding<B>,
    /// `embeddings.token_type_embeddings`.
    pub token_type_embeddings: Embedding<B>,
    /// `embeddings.LayerNorm`.
    pub layer_norm: LayerNorm<B>,
    dropout: Dropout,
}

impl EmbeddingsConfig {
    /// Builds the layer with freshly initialised tables.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Embeddings<B> {
        let table = |n: usize| {
            EmbeddingConfig::new(n, self.hidden_size)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: self.initializer_range,
                })
                .init(device)
        };
        Embeddings {
            word_embeddings: table(self.vocab_size),
            position_embeddings: table(self.max_position_embeddings),
            token_type_embeddings: table(self.type_vocab_size),
            layer_norm: LayerNorm::new(self.hidden_size, self.layer_norm_eps, device),
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }
}

impl<B: FusedOps> Embeddings<B> {
    /// Embeds `[batch, seq]` token ids and token types into `[batch, seq, hidden]`.
    pub fn forward(
        &self,
        input_ids: Tensor<B, 2, Int>,
        token_type_ids: Tensor<B, 2, Int>,
    ) -> Tensor<B, 3> {
        let [_, seq_len] = input_ids.dims();
        let device = input_ids.device();
        let positions = Tensor::<B, 1, Int>::arange(0..seq_len as i64, &device).unsqueeze::<2>();
        let lookup = |table: &Embedding<B>, ids| embedding(table.weight.val(), ids);
        let summed = lookup(&self.word_embeddings, input_ids)
            + lookup(&self.position_embeddings, positions)
            + lookup(&self.token_type_embeddings, token_type_ids);
        self.dropout.forward(self.layer_norm.forward(summed))
    }
}
