//! Hugging Face checkpoint folders: their weights file, building the classifier from them, and
//! writing a fine-tuned one back in the same layout.

use std::path::{Path, PathBuf};

use burn::tensor::backend::Backend;

use crate::checkpoint::{LoadReport, load_weights, save_safetensors};
use crate::config::BertConfig;
use crate::data::LabelMap;
use crate::error::{Result, TrainerError};
use crate::model::{
    BertClassifier, BertClassifierConfig, BertModelConfig, ClassificationHeadConfig,
};
use crate::tokenize::TextTokenizer;

/// The weights files a checkpoint folder may hold, preferred first.
pub const WEIGHT_FILES: &[&str] = &["model.safetensors", "pytorch_model.bin"];

/// Files copied from the source checkpoint next to the fine-tuned weights.
const TOKENIZER_FILES: &[&str] = &[
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
];

/// The weights file of a checkpoint folder: `model.safetensors`, else `pytorch_model.bin`.
pub fn weights_file(dir: &Path) -> Result<PathBuf> {
    for name in WEIGHT_FILES {
        let path = dir.join(name);
        if path.is_file() {
            return Ok(path);
        }
    }
    let sharded = if dir.join("model.safetensors.index.json").is_file()
        || dir.join("pytorch_model.bin.index.json").is_file()
    {
        " (sharded checkpoints are not supported: save the model as one file)"
    } else {
        ""
    };
    Err(TrainerError::ModelNotFound(format!(
        "{}: neither {} in the folder{sharded}",
        dir.display(),
        WEIGHT_FILES.join(" nor ")
    )))
}

/// Builds the classifier described by `config` with `num_labels` classes and loads the
/// checkpoint's weights into it (the head starts new when the checkpoint has none; with
/// `ignore_mismatched_sizes`, also when it has one of another shape).
pub fn load_classifier<B: Backend>(
    dir: &Path,
    config: &BertConfig,
    num_labels: usize,
    dropout: Option<f64>,
    ignore_mismatched_sizes: bool,
    device: &B::Device,
) -> Result<(BertClassifier<B>, LoadReport)> {
    let model = classifier_config(config, num_labels, dropout).init::<B>(device);
    let (model, report) = load_weights(model, &weights_file(dir)?, ignore_mismatched_sizes)?;
    if !report.mismatched.is_empty() {
        tracing::warn!(
            "re-initialised because the checkpoint's shape differs (--ignore-mismatched-sizes): {}",
            report.mismatched.join("; ")
        );
    }
    if !report.newly_initialised.is_empty() {
        tracing::info!(
            "new (randomly initialised) weights: {}",
            report.newly_initialised.join(", ")
        );
    }
    if !report.unused.is_empty() {
        tracing::debug!("checkpoint tensors not used: {}", report.unused.join(", "));
    }
    Ok((model, report))
}

/// The module configuration for a checkpoint and a number of classes.
pub fn classifier_config(
    config: &BertConfig,
    num_labels: usize,
    dropout: Option<f64>,
) -> BertClassifierConfig {
    BertClassifierConfig {
        bert: BertModelConfig::from_hf(config, dropout),
        head: ClassificationHeadConfig {
            hidden_size: config.hidden_size,
            num_labels,
            dropout: dropout.unwrap_or(config.classifier_dropout_prob()),
            initializer_range: config.initializer_range,
        },
    }
}

/// Writes a fine-tuned classifier as a Hugging Face checkpoint folder: `model.safetensors`,
/// `config.json` (with `id2label`/`label2id`), the tokenizer files and `labels.json`.
pub fn save_checkpoint<B: Backend>(
    dir: &Path,
    model: &BertClassifier<B>,
    config: &BertConfig,
    labels: &LabelMap,
    tokenizer: &TextTokenizer,
    source_dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| TrainerError::io(dir, "creating", e))?;
    save_safetensors(model, &dir.join("model.safetensors"))?;
    let mut config = config.clone();
    config.id2label = Some(labels.id2label());
    config.label2id = Some(
        labels
            .names()
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect(),
    );
    config.extra.insert(
        "architectures".to_string(),
        serde_json::json!(["BertForSequenceClassification"]),
    );
    write_json(&dir.join("config.json"), &config)?;
    write_json(&dir.join("labels.json"), &labels.names())?;
    tokenizer.save(dir)?;
    for name in TOKENIZER_FILES {
        let source = source_dir.join(name);
        if source.is_file() && source_dir != dir {
            std::fs::copy(&source, dir.join(name))
                .map_err(|e| TrainerError::io(&source, "copying", e))?;
        }
    }
    Ok(())
}

/// The label map of a fine-tuned checkpoint (from `config.json`'s `id2label`).
pub fn saved_labels(dir: &Path, config: &BertConfig) -> Result<LabelMap> {
    let id2label = config.id2label.as_ref().ok_or_else(|| TrainerError::Config {
        path: dir.join("config.json"),
        message: "no id2label: this is not a fine-tuned classifier; train one with --output-dir first".to_string(),
    })?;
    let mut names = vec![None; id2label.len()];
    for (index, name) in id2label {
        let slot = index
            .parse::<usize>()
            .ok()
            .and_then(|i| names.get_mut(i))
            .ok_or_else(|| TrainerError::Config {
                path: dir.join("config.json"),
                message: format!(
                    "id2label has key \"{index}\"; keys must be 0..{}",
                    id2label.len()
                ),
            })?;
        *slot = Some(name.clone());
    }
    Ok(LabelMap::from_names(names.into_iter().flatten().collect()))
}

fn write_json<T: serde::Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| TrainerError::Json {
        path: path.to_path_buf(),
        line: 0,
        message: e.to_string(),
    })?;
    std::fs::write(path, text + "\n").map_err(|e| TrainerError::io(path, "writing", e))
}
