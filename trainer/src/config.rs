//! The model's `config.json`, as Hugging Face writes it for BERT-family checkpoints.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainerError};

/// The architecture fields of a BERT `config.json` that the model needs.
///
/// Unknown fields are kept in `extra` so that a saved checkpoint's config round-trips.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BertConfig {
    /// Size of the WordPiece vocabulary.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Number of attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Activation of the feed-forward layer; only `gelu` (erf) is supported.
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    /// Dropout on hidden states.
    #[serde(default = "default_dropout")]
    pub hidden_dropout_prob: f64,
    /// Dropout on attention probabilities.
    #[serde(default = "default_dropout")]
    pub attention_probs_dropout_prob: f64,
    /// Dropout before the classifier; `hidden_dropout_prob` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classifier_dropout: Option<f64>,
    /// Length of the position table.
    pub max_position_embeddings: usize,
    /// Number of token types (segments).
    #[serde(default = "default_type_vocab_size")]
    pub type_vocab_size: usize,
    /// Epsilon of every LayerNorm.
    #[serde(default = "default_layer_norm_eps")]
    pub layer_norm_eps: f64,
    /// Id of the padding token.
    #[serde(default)]
    pub pad_token_id: u32,
    /// Standard deviation of the initialiser for new weights (the head).
    #[serde(default = "default_initializer_range")]
    pub initializer_range: f64,
    /// Class index to name, written by fine-tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id2label: Option<std::collections::BTreeMap<String, String>>,
    /// Class name to index, written by fine-tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label2id: Option<std::collections::BTreeMap<String, usize>>,
    /// Every other field, kept as it was.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

fn default_hidden_act() -> String {
    "gelu".to_string()
}
fn default_dropout() -> f64 {
    0.1
}
fn default_type_vocab_size() -> usize {
    2
}
fn default_layer_norm_eps() -> f64 {
    1e-12
}
fn default_initializer_range() -> f64 {
    0.02
}

impl BertConfig {
    /// Reads and validates a `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|e| TrainerError::io(path, "reading", e))?;
        let config: BertConfig = serde_json::from_str(&text).map_err(|e| TrainerError::Json {
            path: path.to_path_buf(),
            line: e.line(),
            message: e.to_string(),
        })?;
        config.validate(path)?;
        Ok(config)
    }

    /// Checks the fields that the model relies on.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let fail = |message: String| {
            Err(TrainerError::Config {
                path: path.to_path_buf(),
                message,
            })
        };
        if let Some(model_type) = self.extra.get("model_type").and_then(|v| v.as_str())
            && !matches!(model_type, "bert" | "distilbert-bert")
        {
            return fail(format!(
                "model_type is \"{model_type}\"; hptune-trainer supports BERT-family checkpoints (model_type \"bert\")"
            ));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return fail(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.hidden_act != "gelu" {
            return fail(format!(
                "hidden_act is \"{}\"; only \"gelu\" is supported",
                self.hidden_act
            ));
        }
        for (name, p) in [
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            (
                "attention_probs_dropout_prob",
                self.attention_probs_dropout_prob,
            ),
            ("classifier_dropout", self.classifier_dropout_prob()),
        ] {
            if !(0.0..1.0).contains(&p) {
                return fail(format!("{name} is {p}; it must be in [0, 1)"));
            }
        }
        if self.vocab_size == 0 || self.max_position_embeddings == 0 || self.type_vocab_size == 0 {
            return fail(
                "vocab_size, max_position_embeddings and type_vocab_size must be positive"
                    .to_string(),
            );
        }
        Ok(())
    }

    /// Dropout before the classifier, as Hugging Face chooses it.
    pub fn classifier_dropout_prob(&self) -> f64 {
        self.classifier_dropout.unwrap_or(self.hidden_dropout_prob)
    }
}
