//! Training checkpoints, to resume a run that was stopped (a preempted trial, a killed
//! process) where it stood: the model, AdamW's moments and counts, f16's loss scale, the
//! schedule's position, the batch-order generator and the position in the epoch's batches,
//! dropout's stream and the last evaluation ([`snapshot`]), written atomically with a checksum
//! into a folder that keeps the last two ([`store`]).
//!
//! A run given a checkpoint folder (`--checkpoint-dir`, `HPTUNE_CHECKPOINT_DIR`) writes one at
//! each epoch's end (after its evaluation is reported) and every `--checkpoint-every` steps,
//! the file on a thread of its own while training goes on.
//! On start it resumes from the newest usable checkpoint of that folder (a restarted process)
//! and of `--resume-from` / `HPTUNE_RESUME_FROM` (the previous attempt's folder), falling
//! back to an older one when the newest is damaged.

mod snapshot;
mod store;

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use rand_chacha::ChaCha8Rng;

use crate::backend::TrainBackend;
use crate::error::{Result, TrainerError};
use crate::model::BertClassifier;
use crate::optim::GroupedAdamW;
use snapshot::Snapshot;
pub(crate) use snapshot::{LastEval, Position, RngState};
use store::Store;

/// Environment variable naming the folder to write checkpoints into (this attempt's).
pub(crate) const CHECKPOINT_DIR_ENV: &str = "HPTUNE_CHECKPOINT_DIR";
/// Environment variable naming a folder of checkpoints to resume from (a previous attempt's).
pub(crate) const RESUME_FROM_ENV: &str = "HPTUNE_RESUME_FROM";

/// Where a run writes its checkpoints, how often, and where it may resume from.
#[derive(Debug)]
pub(crate) struct Checkpointing {
    store: Option<Store>,
    resume_from: Option<PathBuf>,
    every: Option<usize>,
    /// The settings that decide the run's numbers: a checkpoint of a run with others is refused.
    run: serde_json::Value,
    /// The write in progress, on a thread of its own: its file's path, or why it failed.
    writing: Option<JoinHandle<Result<PathBuf>>>,
}

/// `path` unless it is empty (an empty variable counts as unset).
fn given(path: Option<&Path>) -> Option<&Path> {
    path.filter(|p| !p.as_os_str().is_empty())
}

/// A run resumed from a checkpoint: where it stood.
#[derive(Debug)]
pub(crate) struct Resumed {
    /// The position it goes on from.
    pub(crate) position: Position,
    /// The batch-order generator before the batches of `position.epoch` were drawn.
    pub(crate) batch_rng: ChaCha8Rng,
}

impl Checkpointing {
    /// Checkpoints into `dir` (created when absent; the temporary files of a killed write
    /// removed) at each epoch's end and every `every` steps, resuming from the newest usable
    /// checkpoint of `dir` or `resume_from`; `run` holds the settings a checkpoint must have
    /// been written with. An empty path counts as none.
    pub(crate) fn new(
        dir: Option<&Path>,
        resume_from: Option<&Path>,
        every: Option<usize>,
        run: serde_json::Value,
    ) -> Result<Self> {
        let dir = given(dir);
        if every == Some(0) {
            return Err(TrainerError::InvalidArgument {
                flag: "checkpoint-every",
                message: "must be at least 1".to_string(),
            });
        }
        if every.is_some() && dir.is_none() {
            return Err(TrainerError::InvalidArgument {
                flag: "checkpoint-every",
                message: format!(
                    "needs a folder to write checkpoints into: --checkpoint-dir or {CHECKPOINT_DIR_ENV}"
                ),
            });
        }
        Ok(Checkpointing {
            store: dir.map(Store::open).transpose()?,
            resume_from: given(resume_from).map(Path::to_path_buf),
            every,
            run,
            writing: None,
        })
    }

    /// No checkpoints written, none resumed from.
    pub(crate) fn off() -> Self {
        Checkpointing {
            store: None,
            resume_from: None,
            every: None,
            run: serde_json::Value::Null,
            writing: None,
        }
    }

    /// Whether a checkpoint is due after optimiser step `step` (by `--checkpoint-every`; the
    /// epochs' ends are the caller's).
    pub(crate) fn due(&self, step: usize) -> bool {
        self.store.is_some() && self.every.is_some_and(|every| step.is_multiple_of(every))
    }

    /// Writes a checkpoint of `model` and `optimizer` at `position`, when the run has a
    /// checkpoint folder. The state is read to the host here; the file is written on a thread
    /// of its own while training goes on, after the previous write has ended: a write that
    /// failed fails the run here, at the next checkpoint, or at [`Self::finish`].
    pub(crate) fn save<B: TrainBackend>(
        &mut self,
        model: &BertClassifier<B>,
        optimizer: &GroupedAdamW<B>,
        position: &Position,
    ) -> Result<()> {
        self.finish()?;
        let Some(store) = &self.store else {
            return Ok(());
        };
        let payload = snapshot::encode(model, optimizer, position, &self.run)?;
        let (store, step) = (store.clone(), position.step);
        self.writing = Some(std::thread::spawn(move || store.write(step, &payload)));
        Ok(())
    }

    /// Waits for the checkpoint being written, if any: an error when its write failed.
    pub(crate) fn finish(&mut self) -> Result<()> {
        let Some(writing) = self.writing.take() else {
            return Ok(());
        };
        let path = writing.join().map_err(|_| {
            TrainerError::Backend("the thread writing a checkpoint panicked".to_string())
        })??;
        tracing::debug!("checkpoint written to {}", path.display());
        Ok(())
    }

    /// Resumes from the newest usable checkpoint of the run's folder and of `--resume-from`
    /// (the run's own first when both have one of the same step): its parameters into `model`,
    /// its moments and loss scale into `optimizer`, and where it stood. A checkpoint that
    /// cannot be read or fails its checksum is skipped for the one before, saying so; one
    /// written with other settings, or for another model, is an error. A checkpoint resumed
    /// from another folder is also written into the run's own, so that a later attempt can
    /// resume from it even if this one stops before its first checkpoint.
    pub(crate) fn resume<B: TrainBackend>(
        &self,
        model: BertClassifier<B>,
        optimizer: &mut GroupedAdamW<B>,
    ) -> Result<(BertClassifier<B>, Option<Resumed>)> {
        let own = self.store.as_ref().map(Store::dir);
        let mut found = match own {
            Some(dir) => store::list(dir)?,
            None => Vec::new(),
        };
        if let Some(from) = self
            .resume_from
            .as_deref()
            .filter(|&from| Some(from) != own)
        {
            found.extend(store::list(from)?);
        }
        // Stable: of two checkpoints of the same step, the run's own comes first.
        found.sort_by_key(|f| std::cmp::Reverse(f.step));
        for (index, candidate) in found.iter().enumerate() {
            let decoded = store::read(&candidate.path)
                .and_then(|payload| Snapshot::decode(&payload).map(|s| (payload, s)));
            let (payload, snapshot) = match decoded {
                Ok(decoded) => decoded,
                Err(reason) => {
                    let next = match found.get(index + 1) {
                        Some(next) => format!("falling back to {}", next.path.display()),
                        None => "no older checkpoint: training from the start".to_string(),
                    };
                    tracing::warn!(
                        "checkpoint {} is unusable ({reason}); {next}",
                        candidate.path.display()
                    );
                    continue;
                }
            };
            self.check_run(&candidate.path, snapshot.run())?;
            let position = snapshot.position().clone();
            let batch_rng = snapshot.batch_rng();
            let model = snapshot.apply(model, optimizer, &candidate.path)?;
            if let Some(store) = &self.store
                && candidate.path.parent() != Some(store.dir())
            {
                store.write(position.step, &payload)?;
            }
            tracing::info!(
                "resumed from {}: {} optimiser steps done, epoch {} at batch {}",
                candidate.path.display(),
                position.step,
                position.epoch,
                position.batches_done
            );
            return Ok((
                model,
                Some(Resumed {
                    position,
                    batch_rng,
                }),
            ));
        }
        Ok((model, None))
    }

    /// Refuses a checkpoint written by a run with other settings than this one's.
    fn check_run(&self, path: &Path, theirs: &serde_json::Value) -> Result<()> {
        if theirs == &self.run {
            return Ok(());
        }
        let differences: Vec<String> = match (theirs, &self.run) {
            (serde_json::Value::Object(theirs), serde_json::Value::Object(ours)) => {
                let keys: std::collections::BTreeSet<&String> =
                    theirs.keys().chain(ours.keys()).collect();
                let show = |value: Option<&serde_json::Value>| {
                    value.map_or("nothing".to_string(), ToString::to_string)
                };
                keys.into_iter()
                    .filter(|key| theirs.get(*key) != ours.get(*key))
                    .map(|key| {
                        format!(
                            "{key} {} there, {} here",
                            show(theirs.get(key)),
                            show(ours.get(key))
                        )
                    })
                    .collect()
            }
            _ => vec![format!("{theirs} there, {} here", self.run)],
        };
        Err(TrainerError::Checkpoint {
            path: path.to_path_buf(),
            message: format!(
                "written by a run with other settings ({}); resume with the same ones, or give another checkpoint folder",
                differences.join(", ")
            ),
        })
    }
}
