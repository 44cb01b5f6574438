//! The two commands as library functions: `train` (the trial worker) and `predict`.

use burn::module::{AutodiffModule, Module};

use crate::backend::{BackendTask, DeviceChoice, Precision, TrainBackend, dispatch};
use crate::batch::{EncodedExample, encode_all};
use crate::classify::{Classifier, TextInput};
use crate::cli::{PredictArgs, TrainArgs};
use crate::config::BertConfig;
use crate::data::{ColumnSpec, LabelMap, read_examples, stratified_split};
use crate::error::{Result, TrainerError};
use crate::hub::resolve_model_dir;
use crate::kernel_cache::AutotuneLevel;
use crate::memory::{MemoryCap, MemoryWatch};
use crate::metrics::EvalMetrics;
use crate::optim::AdamWSettings;
use crate::pretrained::{load_classifier, save_checkpoint};
use crate::report::{Reporter, RunCosts};
use crate::resume::Checkpointing;
use crate::tokenize::TextTokenizer;
use crate::train::{TrainSettings, Trained, fine_tune};
use crate::warm::{WarmShapes, warm_before_training};

/// One prediction as printed by `predict`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Prediction {
    /// The input text.
    pub text: String,
    /// The most probable class.
    pub label: String,
    /// Probability of every class, by name.
    pub probabilities: std::collections::BTreeMap<String, f32>,
}

/// Trains as the flags say, reporting on stdout and the metrics file; returns the final metrics.
pub fn train(args: &TrainArgs) -> Result<EvalMetrics> {
    validate(args)?;
    let cap = MemoryCap::resolve(args.gpu_memory)?;
    let device: DeviceChoice = args.device.parse()?;
    dispatch(
        device,
        args.cpu_backend,
        args.precision,
        args.autotune,
        TrainTask { args, cap },
    )
}

/// Classifies texts with a fine-tuned checkpoint folder.
pub fn predict(args: &PredictArgs) -> Result<Vec<Prediction>> {
    let device: DeviceChoice = args.inference.device.parse()?;
    dispatch(
        device,
        args.inference.cpu_backend,
        Precision::F32,
        AutotuneLevel::default(),
        PredictTask(args),
    )
}

fn validate(args: &TrainArgs) -> Result<()> {
    let bad = |flag, message: &str| {
        Err(TrainerError::InvalidArgument {
            flag,
            message: message.to_string(),
        })
    };
    if !(args.learning_rate > 0.0 && args.learning_rate.is_finite()) {
        return bad("learning-rate", "must be a positive number");
    }
    if args.batch_size == 0 {
        return bad("batch-size", "must be at least 1");
    }
    if args.eval_batch_size == 0 {
        return bad("eval-batch-size", "must be at least 1");
    }
    if args.epochs == 0 {
        return bad("epochs", "must be at least 1");
    }
    if !(0.0..=1.0).contains(&args.warmup_ratio) {
        return bad("warmup-ratio", "must be in [0, 1]");
    }
    if !(args.weight_decay >= 0.0 && args.weight_decay.is_finite()) {
        return bad("weight-decay", "must be 0 or more");
    }
    if args.dropout.is_some_and(|d| !(0.0..1.0).contains(&d)) {
        return bad("dropout", "must be in [0, 1)");
    }
    if args.max_grad_norm.is_nan() || args.max_grad_norm < 0.0 {
        return bad("max-grad-norm", "must be 0 (off) or more");
    }
    if args.eval.is_none() && !(args.eval_split > 0.0 && args.eval_split < 1.0) {
        return bad("eval-split", "must be in (0, 1) when --eval is not given");
    }
    if args.num_layers == Some(0) {
        return bad("num-layers", "must be at least 1");
    }
    Ok(())
}

/// Keeps the bottom `num_layers` encoder layers of the checkpoint `config` describes (its
/// other layers' weights are then left unread); more layers than it has is an error.
fn keep_bottom_layers(config: &mut BertConfig, num_layers: Option<usize>) -> Result<()> {
    let Some(keep) = num_layers else {
        return Ok(());
    };
    let all = config.num_hidden_layers;
    if keep > all {
        return Err(TrainerError::InvalidArgument {
            flag: "num-layers",
            message: format!(
                "{keep} is more than the model's {all} encoder layers (num_hidden_layers); give at most {all}"
            ),
        });
    }
    tracing::info!("keeping the bottom {keep} of the model's {all} encoder layers");
    config.num_hidden_layers = keep;
    Ok(())
}

/// Reads, labels and tokenises the data sets.
struct Prepared {
    labels: LabelMap,
    train: Vec<EncodedExample>,
    eval: Vec<EncodedExample>,
}

fn prepare(args: &TrainArgs, tokenizer: &TextTokenizer) -> Result<Prepared> {
    let spec = ColumnSpec {
        text: args.text_column.clone(),
        pair: args.text_pair_column.clone(),
        label: args.label_column.clone(),
        header: !args.no_header,
    };
    let mut raw_train = read_examples(&args.train, &spec)?;
    if let Some(n) = args.max_train_samples {
        raw_train.truncate(n);
    }
    let labels = LabelMap::from_examples(&raw_train);
    if labels.len() < 2 {
        return Err(TrainerError::Data {
            path: args.train.clone(),
            line: 0,
            message: format!(
                "the training rows have {} distinct label(s) {:?}; a classifier needs at least 2",
                labels.len(),
                labels.names()
            ),
        });
    }
    let train = labels.apply(&args.train, raw_train)?;
    let (train, eval) = match &args.eval {
        Some(path) => {
            let mut raw_eval = read_examples(path, &spec)?;
            if let Some(n) = args.max_eval_samples {
                raw_eval.truncate(n);
            }
            (train, labels.apply(path, raw_eval)?)
        }
        None => stratified_split(train, args.eval_split, args.seed),
    };
    tracing::info!(
        "{} training and {} evaluation examples, {} classes {:?}",
        train.len(),
        eval.len(),
        labels.len(),
        labels.names()
    );
    Ok(Prepared {
        train: encode_all(tokenizer, &train)?,
        eval: encode_all(tokenizer, &eval)?,
        labels,
    })
}

struct TrainTask<'a> {
    args: &'a TrainArgs,
    cap: Option<MemoryCap>,
}

impl BackendTask for TrainTask<'_> {
    type Output = EvalMetrics;

    fn run<B: TrainBackend>(self, device: B::Device) -> Result<EvalMetrics> {
        let args = self.args;
        let dir = resolve_model_dir(&args.model)?;
        let mut config = BertConfig::from_file(&dir.join("config.json"))?;
        keep_bottom_layers(&mut config, args.num_layers)?;
        let seq = args.max_seq_len.min(config.max_position_embeddings);
        let tokenizer = TextTokenizer::from_dir(&dir, seq)?;
        let data = prepare(args, &tokenizer)?;
        // Before any other GPU work: the kernel caches are read when the device is first used.
        warm_before_training::<B>(
            &WarmShapes {
                config: &config,
                num_labels: data.labels.len(),
                batch: args.batch_size,
                seq,
                eval_batch_size: args.eval_batch_size,
                precision: args.precision,
                autotune: args.autotune,
            },
            &device,
        )?;
        B::seed(&device, args.seed);
        crate::model::dropout::seed(args.seed);
        let (model, _) = load_classifier::<B>(
            &dir,
            &config,
            data.labels.len(),
            args.dropout,
            args.ignore_mismatched_sizes,
            &device,
        )?;
        let settings = TrainSettings {
            learning_rate: args.learning_rate,
            batch_size: args.batch_size,
            eval_batch_size: args.eval_batch_size,
            epochs: args.epochs,
            warmup_ratio: args.warmup_ratio,
            adamw: AdamWSettings {
                weight_decay: args.weight_decay,
                epsilon: args.adam_epsilon,
                max_grad_norm: Some(args.max_grad_norm),
                ..AdamWSettings::default()
            },
            batch_order: args.batch_order,
            seed: args.seed,
        };
        let mut checkpoints = Checkpointing::new(
            args.checkpoint_dir.as_deref(),
            args.resume_from.as_deref(),
            args.checkpoint_every,
            run_settings(args, data.train.len(), data.labels.len()),
        )?;
        let mut reporter = Reporter::from_env(args.metric);
        let mut memory = MemoryWatch::new(self.cap, &device);
        let Trained {
            model,
            metrics,
            eval_ms_per_sample,
        } = fine_tune(
            model,
            &data.train,
            &data.eval,
            &settings,
            data.labels.len(),
            tokenizer.pad_id(),
            &device,
            &mut reporter,
            &mut memory,
            &mut checkpoints,
        )?;
        if let Some(out) = &args.output_dir {
            save_checkpoint(
                &out.clone(),
                &model.valid(),
                &config,
                &data.labels,
                &tokenizer,
                &dir,
            )?;
            tracing::info!("saved the fine-tuned model to {}", out.display());
        }
        let costs = RunCosts {
            parameters: model.num_params(),
            eval_ms_per_sample,
            peak_memory: memory.peak(),
        };
        reporter.report_final(&metrics, &costs)?;
        Ok(metrics)
    }
}

/// The settings that decide a run's numbers, as a checkpoint records them: a run resumes only
/// from a checkpoint written with the same ones.
fn run_settings(args: &TrainArgs, train_rows: usize, num_labels: usize) -> serde_json::Value {
    serde_json::json!({
        "model": args.model,
        "num_layers": args.num_layers,
        "train_rows": train_rows,
        "num_labels": num_labels,
        "max_seq_len": args.max_seq_len,
        "precision": format!("{:?}", args.precision),
        "batch_order": format!("{:?}", args.batch_order),
        "learning_rate": args.learning_rate,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "warmup_ratio": args.warmup_ratio,
        "weight_decay": args.weight_decay,
        "dropout": args.dropout,
        "max_grad_norm": args.max_grad_norm,
        "adam_epsilon": args.adam_epsilon,
        "seed": args.seed,
    })
}

struct PredictTask<'a>(&'a PredictArgs);

impl BackendTask for PredictTask<'_> {
    type Output = Vec<Prediction>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Result<Vec<Prediction>> {
        let args = self.0;
        let texts = collect_texts(args)?;
        let classifier = Classifier::<B::InnerBackend>::load(
            &args.model_dir,
            args.inference.max_seq_len,
            device,
        )?;
        let inputs: Vec<TextInput> = texts
            .iter()
            .map(|text| TextInput {
                text: text.clone(),
                pair: None,
            })
            .collect();
        let probabilities = classifier.probabilities(&inputs, args.batch_size)?;
        let labels = classifier.labels();
        Ok(texts
            .into_iter()
            .zip(probabilities)
            .map(|(text, probs)| {
                let best = probs
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map_or(0, |(i, _)| i);
                Prediction {
                    text,
                    label: labels[best].clone(),
                    probabilities: labels.iter().cloned().zip(probs).collect(),
                }
            })
            .collect())
    }
}

fn collect_texts(args: &PredictArgs) -> Result<Vec<String>> {
    let mut texts = args.texts.clone();
    if let Some(path) = &args.file {
        let content =
            std::fs::read_to_string(path).map_err(|e| TrainerError::io(path, "reading", e))?;
        texts.extend(
            content
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string),
        );
    }
    if texts.is_empty() {
        return Err(TrainerError::InvalidArgument {
            flag: "file",
            message: "no texts to classify: give TEXT arguments or --file".to_string(),
        });
    }
    Ok(texts)
}
