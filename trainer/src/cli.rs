//! Command-line flags. Every hyperparameter flag also accepts its snake_case spelling, since
//! the controller passes parameters as `--<id>=<value>` with ids like `learning_rate`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::backend::{CpuBackend, Precision};
use crate::batch::BatchOrder;
use crate::data::Column;
use crate::kernel_cache::AutotuneLevel;
use crate::metrics::Metric;

/// hptune's trial worker: fine-tunes a BERT-family checkpoint for text classification and
/// reports `step=N accuracy=… macro_f1=… mcc=… loss=…` lines on stdout (the hptune worker
/// protocol), plus the metrics file named by HPTUNE_METRICS_FILE / CLOUD_ML_HP_METRIC_FILE.
#[derive(Debug, Parser)]
#[command(
    name = "hptune-trainer",
    version,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// `predict`, `serve`, `warm-cache`, or nothing to train.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Training flags (when no subcommand is given).
    #[command(flatten)]
    pub train: Option<TrainArgs>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Classify texts with a fine-tuned model; prints a JSON array of {text, label, probabilities}.
    Predict(PredictArgs),
    /// Serve a fine-tuned model over HTTP: Vertex AI's and SageMaker's prediction and health
    /// routes on one port.
    Serve(ServeArgs),
    /// Compile and autotune the GPU kernels of one training step and one evaluation at these
    /// shapes into the kernel cache, so that the trials of a study that follow start warm (on
    /// the CPU, which caches nothing, it runs the step and says so); prints one line.
    WarmCache(WarmCacheArgs),
}

/// Flags of a training run.
#[derive(Debug, Args, Clone)]
pub struct TrainArgs {
    /// Checkpoint folder (config.json, model.safetensors, tokenizer.json or vocab.txt), or a hub
    /// id (ORG/NAME) from the Hugging Face cache, downloaded into it when absent.
    #[arg(long, env = "HPTUNE_TRAINER_MODEL")]
    pub model: String,
    /// Training data: .csv, .tsv/.txt or .jsonl.
    #[arg(long)]
    pub train: PathBuf,
    /// Evaluation data; without it, --eval-split of the training data is held out (stratified).
    #[arg(long)]
    pub eval: Option<PathBuf>,
    /// Text column: header name or 0-based index [default: sentence, text or sentence1; 0 without header].
    #[arg(long, alias = "text_column")]
    pub text_column: Option<Column>,
    /// Second text column of sentence-pair tasks [default: sentence2 when the text is sentence1].
    #[arg(long, alias = "text_pair_column")]
    pub text_pair_column: Option<Column>,
    /// Label column: header name or 0-based index [default: label; 1 without header].
    #[arg(long, alias = "label_column")]
    pub label_column: Option<Column>,
    /// CSV/TSV files have no header row (columns by index, e.g. CoLA's raw files).
    #[arg(long, alias = "no_header")]
    pub no_header: bool,
    /// The objective: the metric reported first on the final line and in the metrics file.
    #[arg(long, value_enum, default_value = "accuracy")]
    pub metric: Metric,
    /// Re-initialise checkpoint tensors whose shape differs from the model's (e.g. a head with
    /// another number of labels) instead of stopping, as transformers' `ignore_mismatched_sizes`.
    #[arg(long, alias = "ignore_mismatched_sizes")]
    pub ignore_mismatched_sizes: bool,
    /// Folder to write the fine-tuned checkpoint to (weights, config, tokenizer, labels);
    /// under hptune, the trial attempt's own folder (HPTUNE_OUTPUT_DIR, as Vertex AI's
    /// AIP_MODEL_DIR) unless the flag is given.
    #[arg(long, alias = "output_dir", env = "HPTUNE_OUTPUT_DIR")]
    pub output_dir: Option<PathBuf>,
    /// Folder to write checkpoints into (the model, the optimiser's state, the position in the
    /// data and the generators', atomically, keeping the last two): at each epoch's end and
    /// every --checkpoint-every steps; a restarted run resumes from its newest [default:
    /// HPTUNE_CHECKPOINT_DIR, this attempt's folder under hptune].
    #[arg(long, alias = "checkpoint_dir", env = crate::resume::CHECKPOINT_DIR_ENV)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Folder of checkpoints to resume from (its newest usable one, or --checkpoint-dir's when
    /// newer) [default: HPTUNE_RESUME_FROM, the previous attempt's folder when hptune retries
    /// a trial].
    #[arg(long, alias = "resume_from", env = crate::resume::RESUME_FROM_ENV)]
    pub resume_from: Option<PathBuf>,
    /// Also write a checkpoint every N optimiser steps (needs a checkpoint folder).
    #[arg(long, alias = "checkpoint_every")]
    pub checkpoint_every: Option<usize>,
    /// cpu, cuda or cuda:N (cuda needs the `cuda` build feature).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// burn CPU backend (those compiled in: flex by default; ndarray, candle by feature).
    #[arg(long, alias = "cpu_backend", value_enum, default_value = "flex")]
    pub cpu_backend: CpuBackend,
    /// Float type of weights, activations and products: bf16 and f16 on CUDA only (the
    /// optimiser keeps f32 master weights and moments); the CPU computes in f32.
    #[arg(long, value_enum, default_value = "f32")]
    pub precision: Precision,
    /// How hard cubecl searches for the fastest GPU kernel of each new shape (CUDA only;
    /// results are kept in the kernel cache).
    #[arg(long, value_enum, default_value = "balanced")]
    pub autotune: AutotuneLevel,
    /// The most device memory the run may hold, e.g. 16GiB, 512MiB or bytes; over it the run
    /// stops with an out-of-memory error [default: HPTUNE_GPU_MEMORY, set by hptune when
    /// trials share a GPU]. The CPU has no device memory: there the cap does not apply.
    #[arg(long, alias = "gpu_memory", value_parser = hptune_memory_size::parse)]
    pub gpu_memory: Option<u64>,
    /// Keep only the bottom N encoder layers of the checkpoint (at most its num_hidden_layers):
    /// a smaller, faster model [default: all of them].
    #[arg(long, alias = "num_layers")]
    pub num_layers: Option<usize>,
    /// How rows are batched each epoch: shuffled; length-grouped (shuffled, then sorted by
    /// length within mega-batches of up to 50 batches, fewer on small data, as transformers'
    /// group_by_length: less padding); sequential (the file's order, unshuffled).
    #[arg(long, alias = "batch_order", value_enum, default_value = "shuffled")]
    pub batch_order: BatchOrder,
    /// Peak learning rate of AdamW.
    #[arg(long, alias = "learning_rate", default_value_t = 5e-5)]
    pub learning_rate: f64,
    /// Training batch size.
    #[arg(long, alias = "batch_size", default_value_t = 8)]
    pub batch_size: usize,
    /// Evaluation batch size.
    #[arg(long, alias = "eval_batch_size", default_value_t = 64)]
    pub eval_batch_size: usize,
    /// Passes over the training data.
    #[arg(long, default_value_t = 3)]
    pub epochs: usize,
    /// Fraction of the steps spent on linear warmup.
    #[arg(long, alias = "warmup_ratio", default_value_t = 0.0)]
    pub warmup_ratio: f64,
    /// AdamW's decoupled weight decay (not applied to biases and LayerNorm).
    #[arg(long, alias = "weight_decay", default_value_t = 0.0)]
    pub weight_decay: f64,
    /// Dropout of hidden states, attention and the head [default: the checkpoint's config.json].
    #[arg(long)]
    pub dropout: Option<f64>,
    /// Maximal global gradient norm (0 turns clipping off).
    #[arg(long, alias = "max_grad_norm", default_value_t = 1.0)]
    pub max_grad_norm: f64,
    /// AdamW's epsilon.
    #[arg(long, alias = "adam_epsilon", default_value_t = 1e-8)]
    pub adam_epsilon: f64,
    /// Maximal tokens per text (pair), special tokens included; longer texts are truncated.
    #[arg(
        long,
        alias = "max_seq_len",
        alias = "max-seq-length",
        alias = "max_seq_length",
        alias = "max-len",
        alias = "max_len",
        default_value_t = 128
    )]
    pub max_seq_len: usize,
    /// Seed of shuffling, dropout and the new head's initialisation.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Use only the first N training rows.
    #[arg(long, alias = "max_train_samples")]
    pub max_train_samples: Option<usize>,
    /// Use only the first N evaluation rows.
    #[arg(long, alias = "max_eval_samples")]
    pub max_eval_samples: Option<usize>,
    /// Fraction of the training data held out for evaluation when --eval is not given.
    #[arg(long, alias = "eval_split", default_value_t = 0.1)]
    pub eval_split: f64,
}

/// Flags of `warm-cache`: the shapes of the trials to come.
#[derive(Debug, Args, Clone)]
pub struct WarmCacheArgs {
    /// Checkpoint folder or hub id, as for training (only its config.json is read).
    #[arg(long, env = "HPTUNE_TRAINER_MODEL")]
    pub model: String,
    /// Tokens per text of the trials (their --max-seq-len).
    #[arg(
        long,
        alias = "max-seq-len",
        alias = "max_seq_len",
        default_value_t = 128
    )]
    pub seq: usize,
    /// Training batch size of the trials (their --batch-size).
    #[arg(long, alias = "batch-size", alias = "batch_size", default_value_t = 8)]
    pub batch: usize,
    /// Evaluation batch size of the trials (their --eval-batch-size).
    #[arg(long, alias = "eval_batch_size", default_value_t = 64)]
    pub eval_batch_size: usize,
    /// Classes of the trials' data (the head's width).
    #[arg(long, alias = "num_labels", default_value_t = 2)]
    pub num_labels: usize,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cuda")]
    pub device: String,
    /// burn CPU backend, when --device is cpu.
    #[arg(long, alias = "cpu_backend", value_enum, default_value = "flex")]
    pub cpu_backend: CpuBackend,
    /// Float type of the trials (their --precision).
    #[arg(long, value_enum, default_value = "f32")]
    pub precision: Precision,
    /// cubecl's autotune level of the trials (their --autotune).
    #[arg(long, value_enum, default_value = "balanced")]
    pub autotune: AutotuneLevel,
}

/// Flags of `predict`.
#[derive(Debug, Args, Clone)]
pub struct PredictArgs {
    /// A folder written by --output-dir.
    #[arg(long, alias = "model_dir")]
    pub model_dir: PathBuf,
    /// A file with one text per line (instead of, or besides, TEXT arguments).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Where and how the model runs.
    #[command(flatten)]
    pub inference: InferenceArgs,
    /// Batch size.
    #[arg(long, alias = "batch_size", default_value_t = 32)]
    pub batch_size: usize,
    /// Texts to classify.
    pub texts: Vec<String>,
}

/// Flags of `serve`.
#[derive(Debug, Args, Clone)]
pub struct ServeArgs {
    /// A folder written by --output-dir [default: SageMaker's /opt/ml/model].
    #[arg(
        long,
        alias = "model_dir",
        env = "HPTUNE_MODEL_DIR",
        default_value = "/opt/ml/model"
    )]
    pub model_dir: PathBuf,
    /// Address to listen on: every interface by default, as Vertex AI and SageMaker
    /// containers must. The server has no authentication: outside such a container, give
    /// 127.0.0.1 or put it behind something that checks who calls.
    #[arg(long, default_value = "0.0.0.0")]
    pub host: String,
    /// Port [default: AIP_HTTP_PORT, else SAGEMAKER_BIND_TO_PORT, else 8080].
    #[arg(long)]
    pub port: Option<u16>,
    /// Where and how the model runs.
    #[command(flatten)]
    pub inference: InferenceArgs,
    /// The most inputs classified in one forward pass, from one request or several.
    #[arg(long, alias = "max_batch_size", default_value_t = 32)]
    pub max_batch_size: usize,
    /// How long a request waits for others to share its forward pass (0: only those queued
    /// while the model was busy).
    #[arg(long, alias = "max_batch_wait_ms", default_value_t = 0)]
    pub max_batch_wait_ms: u64,
    /// The largest request body, in bytes (larger ones get 413).
    #[arg(long, alias = "max_body_bytes", default_value_t = 5 << 20)]
    pub max_body_bytes: usize,
    /// The most inputs in one request (more get 400).
    #[arg(long, alias = "max_instances", default_value_t = 1024)]
    pub max_instances: usize,
    /// The most inputs waiting for the model, from every request; a request that would
    /// queue more gets 503 with Retry-After.
    #[arg(long, alias = "max_queued_inputs", default_value_t = 4096)]
    pub max_queued_inputs: usize,
    /// Read timeout, connection cap and shutdown grace period.
    #[command(flatten)]
    pub http: hptune_http::Limits,
}

/// Where and how a saved model classifies: the flags `predict` and `serve` share.
#[derive(Debug, Args, Clone)]
pub struct InferenceArgs {
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// burn CPU backend.
    #[arg(long, alias = "cpu_backend", value_enum, default_value = "flex")]
    pub cpu_backend: CpuBackend,
    /// Maximal tokens per text (pair), special tokens included; longer texts are truncated.
    #[arg(long, alias = "max_seq_len", default_value_t = 128)]
    pub max_seq_len: usize,
}
