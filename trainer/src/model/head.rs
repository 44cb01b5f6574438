//! Dropout and a linear layer over the pooled representation (key `classifier`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::{Tensor, backend::Backend};

use super::dropout::{Dropout, DropoutConfig};
use super::init::linear;
use crate::fused::FusedOps;

/// Size and dropout of the classification head.
#[derive(Config, Debug)]
pub struct ClassificationHeadConfig {
    /// Width of the pooled representation.
    pub hidden_size: usize,
    /// Number of classes.
    pub num_labels: usize,
    /// Dropout before the linear layer.
    pub dropout: f64,
    /// Standard deviation of the initial weights.
    pub initializer_range: f64,
}

/// The head of `BertForSequenceClassification`: `classifier(dropout(pooled))`.
#[derive(Module, Debug)]
pub struct ClassificationHead<B: Backend> {
    dropout: Dropout,
    /// `classifier`.
    pub classifier: Linear<B>,
}

impl ClassificationHeadConfig {
    /// Builds a new, randomly initialised head.
    pub fn init<B: Backend>(&self, device: &B::Device) -> ClassificationHead<B> {
        ClassificationHead {
            dropout: DropoutConfig::new(self.dropout).init(),
            classifier: linear(
                self.hidden_size,
                self.num_labels,
                self.initializer_range,
                device,
            ),
        }
    }
}

impl<B: FusedOps> ClassificationHead<B> {
    /// Maps `[batch, hidden]` to `[batch, num_labels]` logits.
    pub fn forward(&self, pooled: Tensor<B, 2>) -> Tensor<B, 2> {
        self.classifier.forward(self.dropout.forward(pooled))
    }
}
