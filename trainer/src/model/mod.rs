//! The BERT encoder and its classification head, mirroring Hugging Face's
//! `BertForSequenceClassification` module for module so that checkpoint keys map one to one
//! (see [`crate::checkpoint::keymap`]).

pub mod attention;
pub mod bert;
pub mod classifier;
mod dense;
pub mod dropout;
pub mod embeddings;
pub mod encoder;
pub mod head;
mod init;
pub mod layer_norm;

pub use crate::fused::FusedOps;
pub use attention::{Attention, AttentionConfig, AttentionOutput, SelfAttention};
pub use bert::{BertModel, BertModelConfig, Encoder, Pooler};
pub use classifier::{BertClassifier, BertClassifierConfig, ModelInput, cross_entropy};
pub use embeddings::{Embeddings, EmbeddingsConfig};
pub use encoder::{EncoderLayer, EncoderLayerConfig, Intermediate, Output};
pub use head::{ClassificationHead, ClassificationHeadConfig};
pub use layer_norm::LayerNorm;
