//! A fine-tuned classifier loaded from a folder written by `--output-dir`, ready to classify:
//! what `predict` and `serve` share, so that both give the same numbers.

use std::path::Path;

use crate::batch::EncodedExample;
use crate::config::BertConfig;
use crate::data::LabelMap;
use crate::error::{Result, TrainerError};
use crate::model::{BertClassifier, FusedOps};
use crate::pretrained::{load_classifier, saved_labels};
use crate::tokenize::TextTokenizer;
use crate::train::predict_probabilities;

/// One input: a text, or a text pair of a sentence-pair task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextInput {
    /// The (first) text.
    pub text: String,
    /// The second text of a pair.
    pub pair: Option<String>,
}

/// A fine-tuned classifier on a device, with its tokenizer and label names.
pub(crate) struct Classifier<B: FusedOps> {
    model: BertClassifier<B>,
    tokenizer: TextTokenizer,
    labels: LabelMap,
    device: B::Device,
}

impl<B: FusedOps> Classifier<B> {
    /// Loads the model of `dir` (a folder written by `--output-dir`) onto `device`; texts are
    /// truncated to `max_seq_len` tokens (at most the model's position limit), special tokens
    /// included.
    pub(crate) fn load(dir: &Path, max_seq_len: usize, device: B::Device) -> Result<Self> {
        let config = BertConfig::from_file(&dir.join("config.json"))?;
        let labels = saved_labels(dir, &config)?;
        let tokenizer =
            TextTokenizer::from_dir(dir, max_seq_len.min(config.max_position_embeddings))?;
        let (model, report) =
            load_classifier::<B>(dir, &config, labels.len(), Some(0.0), false, &device)?;
        if !report.newly_initialised.is_empty() {
            return Err(TrainerError::ModelNotFound(format!(
                "{}: the checkpoint lacks {}; give a folder written by --output-dir",
                dir.display(),
                report.newly_initialised.join(", ")
            )));
        }
        Ok(Self {
            model,
            tokenizer,
            labels,
            device,
        })
    }

    /// The class names, by class index.
    pub(crate) fn labels(&self) -> &[String] {
        self.labels.names()
    }

    /// The probability of every class for each input, `batch_size` inputs to a forward pass.
    pub(crate) fn probabilities(
        &self,
        inputs: &[TextInput],
        batch_size: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let encoded: Vec<EncodedExample> = inputs
            .iter()
            .map(|input| {
                let e = self.tokenizer.encode(&input.text, input.pair.as_deref())?;
                Ok(EncodedExample {
                    ids: e.ids,
                    type_ids: e.type_ids,
                    label: 0,
                })
            })
            .collect::<Result<_>>()?;
        predict_probabilities(
            &self.model,
            &encoded,
            batch_size,
            self.tokenizer.pad_id(),
            &self.device,
        )
    }
}
