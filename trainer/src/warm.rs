//! `warm-cache`: one training step and one evaluation at a study's shapes, run once per machine
//! before the study's trials start, so that cubecl compiles and autotunes their kernels once
//! into the kernel cache ([`crate::kernel_cache`]) instead of in every trial that starts at the
//! same time on an empty cache.
//!
//! The step is the trials' own: [`fine_tune`] for one epoch of one batch of `batch` texts of
//! `seq` tokens, then an evaluation of one batch of `eval_batch_size` texts, on a model built
//! from the checkpoint's config.json (random weights: the kernels depend on shapes, not values).
//! A training run on a GPU runs the same warm-up first when no trainer has warmed the cache
//! for its shapes ([`warm_before_training`]), one trainer at a time.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::backend::{BackendTask, DeviceChoice, Precision, TrainBackend, dispatch};
use crate::batch::{BatchOrder, EncodedExample};
use crate::cli::WarmCacheArgs;
use crate::config::BertConfig;
use crate::error::{Result, TrainerError};
use crate::hub::resolve_model_dir;
use crate::kernel_cache::{self, AutotuneLevel};
use crate::memory::MemoryWatch;
use crate::metrics::Metric;
use crate::optim::AdamWSettings;
use crate::pretrained::classifier_config;
use crate::report::Reporter;
use crate::resume::Checkpointing;
use crate::train::{TrainSettings, fine_tune};

/// What a `warm-cache` run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Warmed {
    /// The arguments' shapes, for the summary.
    pub batch: usize,
    /// Tokens per text.
    pub seq: usize,
    /// Evaluation batch size.
    pub eval_batch_size: usize,
    /// Seconds the step and the evaluation took, compilation and autotuning included.
    pub seconds: f64,
    /// Where the kernels went.
    pub stored: Stored,
}

/// Where the kernels of a `warm-cache` run went.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// The CPU backends compile nothing ahead: there is no cache to fill.
    NoCache,
    /// A GPU run whose cache folder could not be used (the log says why).
    Unavailable,
    /// The GPU model's cache folder, and its files before and after.
    Folder {
        /// The folder.
        path: PathBuf,
        /// Files before the run.
        before: usize,
        /// Files after it.
        after: usize,
    },
}

impl std::fmt::Display for Warmed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "one training step of {} x {} tokens and one evaluation of {} x {} tokens in {:.1} s: ",
            self.batch, self.seq, self.eval_batch_size, self.seq, self.seconds
        )?;
        match &self.stored {
            Stored::NoCache => f.write_str("the CPU has no kernel cache, nothing to warm"),
            Stored::Unavailable => f.write_str(
                "no kernel cache folder could be used (see the warning above), nothing stored",
            ),
            Stored::Folder {
                path,
                before,
                after,
            } => write!(
                f,
                "kernel cache {} warm, {before} -> {after} files",
                path.display()
            ),
        }
    }
}

/// Runs one training step and one evaluation at the arguments' shapes on their device.
pub fn warm_cache(args: &WarmCacheArgs) -> Result<Warmed> {
    let bad = |flag, message: &str| {
        Err(TrainerError::InvalidArgument {
            flag,
            message: message.to_string(),
        })
    };
    if args.seq < 2 {
        return bad("seq", "must be at least 2 (the special tokens)");
    }
    if args.batch == 0 {
        return bad("batch", "must be at least 1");
    }
    if args.eval_batch_size == 0 {
        return bad("eval-batch-size", "must be at least 1");
    }
    let device: DeviceChoice = args.device.parse()?;
    dispatch(
        device,
        args.cpu_backend,
        args.precision,
        args.autotune,
        WarmTask { args, device },
    )
}

struct WarmTask<'a> {
    args: &'a WarmCacheArgs,
    device: DeviceChoice,
}

/// `rows` texts of exactly `seq` tokens (ids spread over the vocabulary), labels 0 and 1 in turn.
fn synthetic_rows(rows: usize, seq: usize, vocab_size: usize) -> Vec<EncodedExample> {
    (0..rows)
        .map(|row| EncodedExample {
            ids: (0..seq)
                .map(|i| ((row * 7919 + i * 31) % vocab_size) as u32)
                .collect(),
            type_ids: vec![0; seq],
            label: row % 2,
        })
        .collect()
}

/// The shapes a warm-up compiles kernels for: the model's, the batches', the precision and
/// the autotune level.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WarmShapes<'a> {
    /// The model's architecture (its encoder layers as trained).
    pub(crate) config: &'a BertConfig,
    /// Classes of the head.
    pub(crate) num_labels: usize,
    /// Training batch size.
    pub(crate) batch: usize,
    /// Tokens per text.
    pub(crate) seq: usize,
    /// Evaluation batch size.
    pub(crate) eval_batch_size: usize,
    /// Float type.
    pub(crate) precision: Precision,
    /// cubecl's autotune level.
    pub(crate) autotune: AutotuneLevel,
}

impl WarmShapes<'_> {
    /// A file name that tells these shapes apart from others:
    /// `h384-l6-a12-i1536-v30522-p512-c2-b32-s128-e64-f32-balanced`.
    pub(crate) fn key(&self) -> String {
        let c = self.config;
        format!(
            "h{}-l{}-a{}-i{}-v{}-p{}-c{}-b{}-s{}-e{}-{}-{}",
            c.hidden_size,
            c.num_hidden_layers,
            c.num_attention_heads,
            c.intermediate_size,
            c.vocab_size,
            c.max_position_embeddings,
            self.num_labels,
            self.batch,
            self.seq,
            self.eval_batch_size,
            self.precision,
            format!("{:?}", self.autotune).to_lowercase()
        )
    }
}

/// One training step and one evaluation at `shapes` on `device`, on a model of random weights
/// (the kernels depend on shapes, not values); returns the seconds they took.
pub(crate) fn warm_step<B: TrainBackend>(shapes: &WarmShapes, device: &B::Device) -> Result<f64> {
    let vocab = shapes.config.vocab_size;
    let model = classifier_config(shapes.config, shapes.num_labels, None).init::<B>(device);
    let train = synthetic_rows(shapes.batch, shapes.seq, vocab);
    let eval = synthetic_rows(shapes.eval_batch_size, shapes.seq, vocab);
    let settings = TrainSettings {
        learning_rate: 5e-5,
        batch_size: shapes.batch,
        eval_batch_size: shapes.eval_batch_size,
        epochs: 1,
        warmup_ratio: 0.0,
        adamw: AdamWSettings {
            max_grad_norm: Some(1.0),
            ..AdamWSettings::default()
        },
        batch_order: BatchOrder::Sequential,
        seed: 0,
    };
    let mut reporter = Reporter::new(std::io::sink(), Metric::Accuracy, None, String::new());
    let mut memory = MemoryWatch::new(None, device);
    let started = Instant::now();
    fine_tune(
        model,
        &train,
        &eval,
        &settings,
        shapes.num_labels,
        0,
        device,
        &mut reporter,
        &mut memory,
        &mut Checkpointing::off(),
    )?;
    Ok(started.elapsed().as_secs_f64())
}

/// Before a training run on a GPU: warms the kernel cache for the run's shapes unless a trainer
/// already has, one trainer at a time ([`kernel_cache::warm_once`]), so that trials starting
/// together compile each kernel once. Nothing to do on the CPU, which caches no kernels.
pub(crate) fn warm_before_training<B: TrainBackend>(
    shapes: &WarmShapes,
    device: &B::Device,
) -> Result<()> {
    let Some(dir) = kernel_cache::active() else {
        return Ok(());
    };
    let key = shapes.key();
    let ran = kernel_cache::warm_once(dir, &key, || {
        warm_step::<B>(shapes, device).map(|seconds| {
            tracing::info!(
                "warmed the kernel cache {} for {key} in {seconds:.1} s",
                dir.display()
            )
        })
    })?;
    tracing::debug!("kernel cache warm-up: {ran:?}");
    Ok(())
}

impl BackendTask for WarmTask<'_> {
    type Output = Warmed;

    fn run<B: TrainBackend>(self, device: B::Device) -> Result<Warmed> {
        let args = self.args;
        let dir = resolve_model_dir(&args.model)?;
        let config = BertConfig::from_file(&dir.join("config.json"))?;
        if args.seq > config.max_position_embeddings {
            return Err(TrainerError::InvalidArgument {
                flag: "seq",
                message: format!(
                    "{} is longer than the model's {} positions (max_position_embeddings)",
                    args.seq, config.max_position_embeddings
                ),
            });
        }
        let shapes = WarmShapes {
            config: &config,
            num_labels: args.num_labels,
            batch: args.batch,
            seq: args.seq,
            eval_batch_size: args.eval_batch_size,
            precision: args.precision,
            autotune: args.autotune,
        };
        let cache = kernel_cache::active().map(Path::to_path_buf);
        // Trainers starting meanwhile wait for this warm-up, then load what it stores.
        let lock = cache.as_deref().and_then(|path| {
            kernel_cache::WarmUpLock::acquire(path)
                .map_err(|e| tracing::warn!("cannot lock the kernel cache {}: {e}", path.display()))
                .ok()
        });
        let before = cache.as_deref().map_or(0, kernel_cache::files);
        let seconds = warm_step::<B>(&shapes, &device)?;
        if let Some(lock) = &lock
            && let Err(e) = lock.mark_warm(&shapes.key())
        {
            tracing::warn!(
                "cannot mark the kernel cache warm for {}: {e}",
                shapes.key()
            );
        }
        let stored = match (self.device, cache) {
            (DeviceChoice::Cpu, _) => Stored::NoCache,
            (DeviceChoice::Cuda(_), None) => Stored::Unavailable,
            (DeviceChoice::Cuda(_), Some(path)) => Stored::Folder {
                after: kernel_cache::files(&path),
                path,
                before,
            },
        };
        Ok(Warmed {
            batch: args.batch,
            seq: args.seq,
            eval_batch_size: args.eval_batch_size,
            seconds,
            stored,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_rows_have_the_shape_asked_and_ids_inside_the_vocabulary() {
        let rows = synthetic_rows(5, 7, 30);
        assert_eq!(rows.len(), 5);
        assert!(
            rows.iter()
                .all(|r| r.ids.len() == 7 && r.type_ids.len() == 7)
        );
        assert!(rows.iter().flat_map(|r| &r.ids).all(|&id| id < 30));
        assert_eq!(
            rows.iter().map(|r| r.label).collect::<Vec<_>>(),
            [0, 1, 0, 1, 0]
        );
    }

    #[test]
    fn the_summary_says_where_the_kernels_went() {
        let mut warmed = Warmed {
            batch: 32,
            seq: 128,
            eval_batch_size: 64,
            seconds: 12.34,
            stored: Stored::NoCache,
        };
        assert_eq!(
            warmed.to_string(),
            "one training step of 32 x 128 tokens and one evaluation of 64 x 128 tokens in 12.3 s: the CPU has no kernel cache, nothing to warm"
        );
        warmed.stored = Stored::Folder {
            path: PathBuf::from("cache/nvidia-h200-sm90"),
            before: 0,
            after: 412,
        };
        assert!(
            warmed
                .to_string()
                .ends_with("kernel cache cache/nvidia-h200-sm90 warm, 0 -> 412 files"),
            "{warmed}"
        );
    }
}
