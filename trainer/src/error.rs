//! The trainer's error type: every failure says what is wrong, where, and what would be right.

use std::path::PathBuf;

/// Everything that can go wrong in the trainer, from reading files to training.
#[derive(Debug, thiserror::Error)]
pub enum TrainerError {
    /// A file could not be read or written.
    #[error("{path}: {action} failed: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What was being done, e.g. "reading".
        action: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A JSON file (config.json, label map, JSON lines) is malformed.
    #[error("{path}:{line}: invalid JSON: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line (1 for whole-file documents when serde gives none).
        line: usize,
        /// serde_json's message.
        message: String,
    },

    /// The model's config.json lacks a field or holds one this trainer cannot use.
    #[error("{path}: {message}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong and what would be right.
        message: String,
    },

    /// The model folder (or hub id) does not hold a usable checkpoint.
    #[error("{0}")]
    ModelNotFound(String),

    /// A checkpoint tensor is missing.
    #[error(
        "{path}: tensor `{tensor}` is missing (expected shape {expected:?}); the checkpoint has {available} tensors, e.g. {example}"
    )]
    MissingTensor {
        /// The weights file.
        path: PathBuf,
        /// The Hugging Face key that was looked for.
        tensor: String,
        /// The shape the model needs.
        expected: Vec<usize>,
        /// How many tensors the file has.
        available: usize,
        /// One key the file does have, to show its naming.
        example: String,
    },

    /// A checkpoint tensor has the wrong shape for the model that config.json describes.
    #[error(
        "{path}: tensor `{tensor}` has shape {found:?} but the model built from config.json needs {expected:?}{hint}"
    )]
    ShapeMismatch {
        /// The weights file.
        path: PathBuf,
        /// The Hugging Face key.
        tensor: String,
        /// The shape in the file.
        found: Vec<usize>,
        /// The shape the model needs.
        expected: Vec<usize>,
        /// What to do about it, when there is something ("" otherwise).
        hint: &'static str,
    },

    /// A checkpoint tensor cannot be read (bad file, unsupported dtype).
    #[error("{path}: tensor `{tensor}`: {message}")]
    BadTensor {
        /// The weights file.
        path: PathBuf,
        /// The Hugging Face key ("" when the whole file is unreadable).
        tensor: String,
        /// What is wrong and what would be right.
        message: String,
    },

    /// The tokenizer files are missing or unusable.
    #[error("{path}: tokenizer: {message}")]
    Tokenizer {
        /// tokenizer.json or vocab.txt.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },

    /// A data row is unusable (missing text, unknown label, bad column).
    #[error("{path}:{line}: {message}")]
    Data {
        /// The data file.
        path: PathBuf,
        /// 1-based line of the row.
        line: usize,
        /// What is wrong and what would be right.
        message: String,
    },

    /// A flag's value is unusable.
    #[error("--{flag}: {message}")]
    InvalidArgument {
        /// The flag, without dashes.
        flag: &'static str,
        /// What is wrong and what would be right.
        message: String,
    },

    /// Training produced a non-finite loss.
    #[error(
        "epoch {epoch}, step {step}: the training loss is {value}; lower --learning-rate or raise --warmup-ratio"
    )]
    Diverged {
        /// 1-based epoch.
        epoch: usize,
        /// 1-based optimiser step within the run.
        step: usize,
        /// The loss value.
        value: f64,
    },

    /// An environment variable's value is unusable.
    #[error("{variable}: {message}")]
    InvalidEnvironment {
        /// The variable.
        variable: &'static str,
        /// What is wrong and what would be right.
        message: String,
    },

    /// The device's memory pool grew over the run's cap (`--gpu-memory`, `HPTUNE_GPU_MEMORY`).
    #[error(
        "out of memory after {moment}: the device memory pool holds {usage}, over the cap of {cap} given by {given_by}"
    )]
    OutOfMemory {
        /// When it was seen (after which step or evaluation).
        moment: String,
        /// The pool's bytes, for people.
        usage: String,
        /// The cap's bytes, for people.
        cap: String,
        /// The flag or variable that gave the cap.
        given_by: String,
    },

    /// A training checkpoint that is intact but cannot be resumed from by this run.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// What does not fit and what would.
        message: String,
    },

    /// The backend failed to hand back a result.
    #[error("backend: {0}")]
    Backend(String),

    /// The requested device is not compiled into this binary or not present.
    #[error("--device {device}: {message}")]
    Device {
        /// The device as given.
        device: String,
        /// What is wrong and what would be right.
        message: String,
    },
}

/// The trainer's result type.
pub type Result<T, E = TrainerError> = std::result::Result<T, E>;

impl TrainerError {
    /// The process exit code for this error: 2 for bad input (flags, files, data), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            TrainerError::Io { .. }
            | TrainerError::Diverged { .. }
            | TrainerError::OutOfMemory { .. }
            | TrainerError::Backend(_) => 1,
            _ => 2,
        }
    }

    /// Wraps an I/O error with the path and the action that failed.
    pub fn io(path: impl Into<PathBuf>, action: &'static str, source: std::io::Error) -> Self {
        TrainerError::Io {
            path: path.into(),
            action,
            source,
        }
    }
}
