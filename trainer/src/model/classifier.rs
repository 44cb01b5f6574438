//! BERT plus classification head, with its loss (HF `BertForSequenceClassification`).

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{DType, Int, Tensor, activation::log_softmax, backend::Backend};

use super::bert::{BertModel, BertModelConfig};
use super::head::{ClassificationHead, ClassificationHeadConfig};
use crate::fused::{FusedOps, in_dtype};

/// The classifier's parts.
#[derive(Config, Debug)]
pub struct BertClassifierConfig {
    /// The encoder.
    pub bert: BertModelConfig,
    /// The head.
    pub head: ClassificationHeadConfig,
}

/// A padded batch of tokenised texts on a device.
#[derive(Debug, Clone)]
pub struct ModelInput<B: Backend> {
    /// `[batch, seq]` token ids, padded with the pad id.
    pub input_ids: Tensor<B, 2, Int>,
    /// `[batch, seq]` segment ids (0 for the first text, 1 for the second).
    pub token_type_ids: Tensor<B, 2, Int>,
    /// `[batch, seq]`, 1 for real tokens and 0 for padding.
    pub attention_mask: Tensor<B, 2>,
}

/// BERT with a classification head on its pooled output.
#[derive(Module, Debug)]
pub struct BertClassifier<B: Backend> {
    /// `bert` (keys with the `bert.` prefix, or none in a bare `BertModel` checkpoint).
    pub bert: BertModel<B>,
    /// `classifier` (and the dropout before it).
    pub head: ClassificationHead<B>,
}

impl BertClassifierConfig {
    /// Builds the classifier with freshly initialised weights.
    pub fn init<B: Backend>(&self, device: &B::Device) -> BertClassifier<B> {
        BertClassifier {
            bert: self.bert.init(device),
            head: self.head.init(device),
        }
    }
}

impl<B: FusedOps> BertClassifier<B> {
    /// Computes `[batch, num_labels]` logits.
    pub fn forward(&self, input: ModelInput<B>) -> Tensor<B, 2> {
        let pooled = self
            .bert
            .forward(input.input_ids, input.token_type_ids, input.attention_mask);
        self.head.forward(pooled)
    }
}

/// Mean cross-entropy of `[batch, classes]` logits against `[batch]` class indices, computed
/// in f32 whatever the logits' precision (as under PyTorch's autocast): a half-precision loss
/// would round to 3 digits, and f16 could not hold the loss scale (2^16 > 65504).
pub fn cross_entropy<B: Backend>(logits: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    let picked = log_softmax(in_dtype(logits, DType::F32), 1).gather(1, labels.unsqueeze_dim(1));
    picked.neg().mean()
}
