//! The fine-tuning loop: seeded batch order, per-batch padding on a thread of its own, AdamW
//! with the linear schedule, an evaluation reported after every epoch, and checkpoints to
//! resume from.

use std::io::Write;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::tensor::{Tensor, activation::softmax, backend::Backend};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::backend::TrainBackend;
use crate::batch::{BatchOrder, EncodedExample, PaddedBatch, collate, epoch_batches};
use crate::error::{Result, TrainerError};
use crate::host_reads::{self, Tally};
use crate::memory::{MemoryWatch, Moment};
use crate::metrics::EvalMetrics;
use crate::model::dropout;
use crate::model::{BertClassifier, FusedOps, cross_entropy};
use crate::optim::{AdamWSettings, GroupedAdamW, LinearSchedule};
use crate::progress::EpochProgress;
use crate::report::Reporter;
use crate::resume::{Checkpointing, LastEval, Position, Resumed, RngState};

/// The hyperparameters of a run (Hugging Face's defaults where it has one).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TrainSettings {
    /// Peak learning rate.
    pub learning_rate: f64,
    /// Training batch size.
    pub batch_size: usize,
    /// Evaluation batch size.
    pub eval_batch_size: usize,
    /// Passes over the training set.
    pub epochs: usize,
    /// Fraction of all steps spent warming up.
    pub warmup_ratio: f64,
    /// AdamW's settings.
    pub adamw: AdamWSettings,
    /// How the rows are batched each epoch.
    pub batch_order: BatchOrder,
    /// Seed of the batch order (and, set elsewhere, of dropout and the new head).
    pub seed: u64,
}

/// Padded batches prepared ahead of the training step that takes them.
const BATCHES_AHEAD: usize = 2;

/// A fine-tuned model, its last evaluation and what that evaluation took.
#[derive(Debug)]
pub(crate) struct Trained<B: Backend> {
    /// The model after the last epoch.
    pub model: BertClassifier<B>,
    /// Its evaluation after the last epoch.
    pub metrics: EvalMetrics,
    /// Wall-clock milliseconds per evaluation sample of that evaluation (batches built,
    /// forward passes, and the reads of losses and predictions).
    pub eval_ms_per_sample: f64,
}

/// Fine-tunes `model` on `train`, evaluating on `eval` after each epoch and reporting each
/// evaluation through `reporter`; `memory` checks the device's memory after every training
/// step and evaluation (the run stops over its cap). `checkpoints` says where checkpoints are
/// written (every `--checkpoint-every` steps and at each epoch's end, after its report; the
/// last one is on disk when this returns) and
/// which one the run resumes from: then it goes on from that checkpoint's step exactly as the
/// run that wrote it would have gone on (the same batches, dropout masks and rates).
#[allow(clippy::too_many_arguments)] // the run's parts, each of a different kind
pub(crate) fn fine_tune<B: TrainBackend, W: Write>(
    model: BertClassifier<B>,
    train: &[EncodedExample],
    eval: &[EncodedExample],
    settings: &TrainSettings,
    num_classes: usize,
    pad_id: u32,
    device: &B::Device,
    reporter: &mut Reporter<W>,
    memory: &mut MemoryWatch,
    checkpoints: &mut Checkpointing,
) -> Result<Trained<B>> {
    let batches_per_epoch = train.len().div_ceil(settings.batch_size);
    let total_steps = batches_per_epoch * settings.epochs;
    let schedule = LinearSchedule {
        peak: settings.learning_rate,
        warmup_steps: (settings.warmup_ratio * total_steps as f64).ceil() as usize,
        total_steps,
    };
    let mut optimizer = GroupedAdamW::new(&model, settings.adamw);
    let (mut model, resumed) = checkpoints.resume(model, &mut optimizer)?;
    let (mut rng, mut step, first_epoch, mut skip, mut last) = match resumed {
        Some(Resumed {
            position,
            batch_rng,
        }) => {
            dropout::resume_calls(position.dropout_calls);
            let reported = position.last_eval.map_or(0, |last| last.epoch);
            reporter.report_resumed(reported, position.step)?;
            let last = position.last_eval;
            (
                batch_rng,
                position.step,
                position.epoch,
                position.batches_done,
                last,
            )
        }
        None => (ChaCha8Rng::seed_from_u64(settings.seed), 0, 1, 0, None),
    };
    let lengths: Vec<usize> = train.iter().map(|e| e.ids.len()).collect();
    for epoch in first_epoch..=settings.epochs {
        let epoch_rng = RngState::of(&rng);
        let batches = epoch_batches(
            &lengths,
            settings.batch_size,
            settings.batch_order,
            &mut rng,
        );
        let mut progress = EpochProgress::start(epoch, settings.epochs, batches_per_epoch);
        let reads = Tally::start();
        let done_before = std::mem::take(&mut skip);
        // Padding runs on a thread of its own, a few batches ahead of the training step; when
        // the step stops early (an error), the dropped receiver ends that thread.
        model = std::thread::scope(|scope| -> Result<BertClassifier<B>> {
            let mut model = model;
            let (sender, receiver) = std::sync::mpsc::sync_channel(BATCHES_AHEAD);
            let batches = &batches[done_before.min(batches.len())..];
            scope.spawn(move || {
                for batch in batches {
                    let items: Vec<&EncodedExample> = batch.iter().map(|&i| &train[i]).collect();
                    if sender.send(PaddedBatch::pad(&items, pad_id)).is_err() {
                        break;
                    }
                }
            });
            let mut losses = PendingLosses::default();
            for (index, padded) in receiver.into_iter().enumerate() {
                let index = done_before + index;
                let rows = padded.batch;
                let (input, labels) = padded.to_device::<B>(device);
                let loss = cross_entropy(model.forward(input), labels);
                step += 1;
                losses.push(loss.clone().inner(), step);
                // The schedule advances on a skipped f16 step too, as it does in PyTorch's
                // loop (`scaler.step(optimizer)`, then `scheduler.step()`).
                let grads = optimizer.scale_loss(loss).backward();
                model = optimizer.step(schedule.rate(step - 1), model, grads)?.0;
                memory.check(device, Moment::TrainingStep(step))?;
                progress.batch_done(index + 1, rows, || losses.read(epoch))?;
                // The epoch's last batch is followed by the epoch's own checkpoint.
                if index + 1 < batches_per_epoch && checkpoints.due(step) {
                    let position = Position {
                        step,
                        epoch,
                        batches_done: index + 1,
                        batch_rng: epoch_rng.clone(),
                        dropout_calls: dropout::calls(),
                        last_eval: last,
                    };
                    checkpoints.save(&model, &optimizer, &position)?;
                }
            }
            Ok(model)
        })?;
        let throughput = progress.finish();
        reads.log(
            &format!("epoch {epoch}/{} training", settings.epochs),
            batches_per_epoch,
        );
        let reads = Tally::start();
        let started = Instant::now();
        let metrics = evaluate(
            &model.valid(),
            eval,
            settings.eval_batch_size,
            num_classes,
            pad_id,
            device,
        )?;
        let eval_ms_per_sample = started.elapsed().as_secs_f64() * 1e3 / eval.len().max(1) as f64;
        memory.check(device, Moment::Evaluation(epoch))?;
        reads.log(
            &format!("epoch {epoch}/{} evaluation", settings.epochs),
            eval.len().div_ceil(settings.eval_batch_size),
        );
        tracing::info!(
            "epoch {epoch}/{}: {throughput:.1} training samples/s; eval loss {:.4}, accuracy {:.4}",
            settings.epochs,
            metrics.loss,
            metrics.accuracy
        );
        if let Some(scale) = optimizer.loss_scale()? {
            tracing::info!(
                "epoch {epoch}/{}: f16 loss scale {}, {} of {step} steps so far skipped for infinite or NaN gradients",
                settings.epochs,
                scale.scale(),
                scale.skipped()
            );
        }
        reporter.report_step(epoch, &metrics)?;
        last = Some(LastEval {
            epoch,
            metrics,
            eval_ms_per_sample,
        });
        let position = Position {
            step,
            epoch: epoch + 1,
            batches_done: 0,
            batch_rng: RngState::of(&rng),
            dropout_calls: dropout::calls(),
            last_eval: last,
        };
        checkpoints.save(&model, &optimizer, &position)?;
    }
    checkpoints.finish()?;
    let last = last.ok_or(TrainerError::InvalidArgument {
        flag: "epochs",
        message: "must be at least 1".to_string(),
    })?;
    Ok(Trained {
        model,
        metrics: last.metrics,
        eval_ms_per_sample: last.eval_ms_per_sample,
    })
}

/// The training losses of the steps since the loss was last read, kept on the device.
struct PendingLosses<B: Backend> {
    losses: Vec<Tensor<B, 1>>,
    /// The step of the last loss pushed.
    last_step: usize,
}

impl<B: Backend> Default for PendingLosses<B> {
    fn default() -> Self {
        PendingLosses {
            losses: Vec::new(),
            last_step: 0,
        }
    }
}

impl<B: Backend> PendingLosses<B> {
    /// Keeps the loss of training step `step`.
    fn push(&mut self, loss: Tensor<B, 1>, step: usize) {
        self.losses.push(loss);
        self.last_step = step;
    }

    /// Reads the kept losses in one read and forgets them; returns the last one, or
    /// [`TrainerError::Diverged`] naming the first step of epoch `epoch` whose loss is not finite.
    fn read(&mut self, epoch: usize) -> Result<f64> {
        let kept = std::mem::take(&mut self.losses);
        let first_step = self.last_step + 1 - kept.len();
        let values = host_reads::read::<f64, _, 1, _>(Tensor::cat(kept, 0), "the training loss")?;
        if let Some((offset, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(TrainerError::Diverged {
                epoch,
                step: first_step + offset,
                value,
            });
        }
        values.last().copied().ok_or_else(|| {
            TrainerError::Backend("no training loss to read: no step ran".to_string())
        })
    }
}

/// Loss, accuracy, macro-F1 and MCC of `model` on `data`.
pub(crate) fn evaluate<B: FusedOps>(
    model: &BertClassifier<B>,
    data: &[EncodedExample],
    batch_size: usize,
    num_classes: usize,
    pad_id: u32,
    device: &B::Device,
) -> Result<EvalMetrics> {
    // Batches of similar lengths waste less work on padding; the order does not change metrics.
    let mut order: Vec<usize> = (0..data.len()).collect();
    order.sort_by_key(|&i| data[i].ids.len());
    let mut predicted = Vec::with_capacity(data.len());
    let mut gold = Vec::with_capacity(data.len());
    // Losses and predictions stay on the device until the last batch: two reads in all.
    let mut losses = Vec::new();
    let mut argmaxes = Vec::new();
    let mut rows = Vec::new();
    for chunk in order.chunks(batch_size.max(1)) {
        let items: Vec<&EncodedExample> = chunk.iter().map(|&i| &data[i]).collect();
        let (input, labels) = collate::<B>(&items, pad_id, device);
        let logits = model.forward(input);
        losses.push(cross_entropy(logits.clone(), labels));
        argmaxes.push(logits.argmax(1));
        rows.push(items.len());
        gold.extend(items.iter().map(|e| e.label));
    }
    let mut loss_sum = 0.0;
    if !losses.is_empty() {
        let losses =
            host_reads::read::<f64, _, 1, _>(Tensor::cat(losses, 0), "the evaluation loss")?;
        loss_sum = losses
            .iter()
            .zip(&rows)
            .map(|(loss, &n)| loss * n as f64)
            .sum();
        let argmax = host_reads::read::<i64, _, 2, _>(Tensor::cat(argmaxes, 0), "predictions")?;
        predicted.extend(argmax.into_iter().map(|p| p as usize));
    }
    Ok(EvalMetrics::compute(
        &predicted,
        &gold,
        num_classes,
        loss_sum,
    ))
}

/// Class probabilities `[batch][class]` for already encoded texts.
pub(crate) fn predict_probabilities<B: FusedOps>(
    model: &BertClassifier<B>,
    data: &[EncodedExample],
    batch_size: usize,
    pad_id: u32,
    device: &B::Device,
) -> Result<Vec<Vec<f32>>> {
    let mut out = Vec::with_capacity(data.len());
    for chunk in data.chunks(batch_size.max(1)) {
        let items: Vec<&EncodedExample> = chunk.iter().collect();
        let (input, _) = collate::<B>(&items, pad_id, device);
        let probs: Tensor<B, 2> = softmax(model.forward(input), 1);
        let [rows, classes] = probs.dims();
        let values = host_reads::read::<f32, _, 2, _>(probs, "probabilities")?;
        out.extend((0..rows).map(|r| values[r * classes..(r + 1) * classes].to_vec()));
    }
    Ok(out)
}
