//! `hptune run` and `hptune trial`: a study made ready to run under the controller (the
//! study file checked, its GPUs, model folders and prior found, its storage and executor
//! open), then run.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use super::OpsError;
use crate::controller::{
    self, ArtifactPlan, Plan, PriorError, RunObserver, RunSummary, warm_start_prior,
};
use crate::executor::{Executor, StopRequest, check_program, check_storage, for_study};
use crate::gpus::{self, GpuPlan, Mps, Share, format_bytes};
use crate::sampler::{self, ManualSampler, Sampler};
use crate::spec;
use crate::storage::{Queue, Storage, StorageUrl};
use crate::study::{Budget, ExecutorKind, ExecutorSpec, Study};

/// Where the workers of `run` and `trial` run, and where their files go.
#[derive(Debug, Clone, Default)]
pub struct WorkerOptions {
    /// Directory of the workers' logs and metrics files.
    pub log_dir: PathBuf,
    /// The engine the trials run on instead of the study's executor (`--executor`).
    pub executor: Option<ExecutorKind>,
    /// The GPUs trials get (`--gpus`), instead of those found.
    pub gpus: Option<String>,
    /// Folder of the trials' model folders (`--artifacts-dir`), instead of the study's.
    pub artifacts_dir: Option<PathBuf>,
}

/// A study ready to run: nothing of this run is recorded yet.
pub struct Prepared {
    /// The study, as its file and the flags make it.
    pub study: Study,
    /// The limits, devices, model folders and prior of the run.
    pub plan: Plan,
    storage: Storage,
    executor: Arc<dyn Executor>,
    sampler: Box<dyn Sampler>,
    /// The MPS control daemon the trials sharing devices use, stopped with the run if it
    /// started it.
    mps: Option<Mps>,
}

impl Prepared {
    /// Runs the controller to the end of the study (or of the trial), telling `observer`
    /// what happens and stopping its workers as `interrupt` asks.
    pub async fn run(
        mut self,
        observer: &mut dyn RunObserver,
        interrupt: watch::Receiver<StopRequest>,
    ) -> Result<RunSummary, OpsError> {
        let summary = controller::run(
            &self.study,
            &self.storage,
            self.executor,
            self.sampler.as_mut(),
            &self.plan,
            observer,
            interrupt,
        )
        .await;
        self.storage.close().await;
        drop(self.mps);
        Ok(summary?)
    }
}

/// Makes the study of `path` ready to run or continue until its budget is spent, through
/// `options.executor` instead of the study's executor when it is given, its trials `keep`
/// pinned (their models kept whatever their rank).
pub async fn prepare_study(
    path: &Path,
    url: &StorageUrl,
    options: &WorkerOptions,
    keep: &[u64],
) -> Result<Prepared, OpsError> {
    let study = load_checked(path, url, options.executor)?;
    let sampler = sampler::for_study(&study)
        .map_err(|e| OpsError::BadInput(format!("{}: {e}", path.display())))?;
    let mut artifacts = artifact_plan(&study, options)?;
    artifacts.pinned.extend(keep);
    let (gpus, mps) = gpu_plan(&study, options, path)?;
    let storage = Storage::open(url).await?;
    let prior = warm_start_prior(&study, &storage)
        .await
        .map_err(|e| refused_warm_start(path, e))?;
    let plan = Plan {
        gpus,
        artifacts,
        prior,
        ..Plan::for_study(&study, &options.log_dir)
    };
    let executor = executor(&study, &storage, url, path)?;
    Ok(Prepared {
        study,
        plan,
        storage,
        executor,
        sampler,
        mps,
    })
}

/// Makes one trial of the study of `path`, with the parameters `pairs` given by hand
/// (`ID=VALUE`), ready to run.
pub async fn prepare_trial(
    path: &Path,
    url: &StorageUrl,
    options: &WorkerOptions,
    pairs: &[(String, String)],
) -> Result<Prepared, OpsError> {
    let study = load_checked(path, url, options.executor)?;
    let params = study
        .space
        .parse_assignment(pairs)
        .map_err(|e| OpsError::BadInput(format!("--param: {e}")))?;
    let (gpus, mps) = gpu_plan(&study, options, path)?;
    let storage = Storage::open(url).await?;
    let executor = executor(&study, &storage, url, path)?;
    let plan = Plan {
        budget: Budget::UNLIMITED,
        parallel_trial_count: 1,
        max_retries: study.max_retries,
        log_dir: options.log_dir.clone(),
        gpus,
        artifacts: artifact_plan(&study, options)?,
        queue: Queue::Leave,
        prior: Vec::new(),
    };
    Ok(Prepared {
        study,
        plan,
        storage,
        executor,
        sampler: Box::new(ManualSampler::new(params)),
        mps,
    })
}

/// A refused `warm_start` of the study file `path`: bad input, said of the file.
pub(super) fn refused_warm_start(path: &Path, e: PriorError) -> OpsError {
    match e {
        PriorError::Storage(e) => OpsError::Storage(e),
        e => OpsError::BadInput(format!("{}: {e}", path.display())),
    }
}

/// Reads the study file of a run, which starts workers, and checks what can be checked
/// before anything runs ([`workers_checked`]); a study file without `trial:` is refused.
fn load_checked(
    path: &Path,
    url: &StorageUrl,
    executor: Option<ExecutorKind>,
) -> Result<Study, OpsError> {
    let study = spec::load(path)?;
    if !study.trial.has_worker() {
        return Err(OpsError::BadInput(format!(
            "{}: no `trial:` block: `hptune run` starts each trial's worker with trial.command (a study without one is run by `hptune ask`/`tell` clients alone)",
            path.display()
        )));
    }
    workers_checked(study, path, url, executor)
}

/// Checks what can be checked of the workers of `study` (read from `path`) before anything
/// runs: a local worker's program, a remote executor's storage. `executor` (`--executor`)
/// replaces the study's executor: local always, another engine if the file configures it.
pub(super) fn workers_checked(
    mut study: Study,
    path: &Path,
    url: &StorageUrl,
    executor: Option<ExecutorKind>,
) -> Result<Study, OpsError> {
    let bad = |message: String| OpsError::BadInput(format!("{}: {message}", path.display()));
    match executor {
        Some(ExecutorKind::Local) => study.trial.executor = ExecutorSpec::Local,
        Some(kind) if kind != study.trial.executor.kind() => {
            return Err(bad(format!(
                "--executor {}: trial.executor configures {}; write a block with kind: {} and its fields to run the trial there",
                kind.as_str(),
                study.trial.executor.kind().as_str(),
                kind.as_str()
            )));
        }
        _ => {}
    }
    if let (ExecutorSpec::Local, Some(command)) = (&study.trial.executor, &study.trial.command) {
        check_program(command.program())
            .map_err(|message| bad(format!("trial.command[0]: {message}")))?;
    }
    check_storage(&study.trial.executor, url).map_err(bad)?;
    Ok(study)
}

/// Where the trials' models go: `--artifacts-dir`, else the study's, else beside the logs; as
/// an absolute path, which the rows record and `hptune best --artifact` prints.
fn artifact_plan(study: &Study, options: &WorkerOptions) -> Result<ArtifactPlan, OpsError> {
    let mut plan = ArtifactPlan::for_study(study, &options.log_dir);
    if let Some(dir) = &options.artifacts_dir {
        plan.dir = dir.clone();
    }
    plan.dir = std::path::absolute(&plan.dir)
        .map_err(|e| OpsError::BadInput(format!("--artifacts-dir {}: {e}", plan.dir.display())))?;
    Ok(plan)
}

/// The GPUs of a study with `trial.resources.gpus` ([`gpus::plan`]), and for trials sharing
/// devices the MPS control daemon found or started; too few devices, or a memory cap above a
/// device's memory, is bad input, found before anything is recorded. A study without GPUs
/// looks for none.
fn gpu_plan(
    study: &Study,
    options: &WorkerOptions,
    path: &Path,
) -> Result<(Option<GpuPlan>, Option<Mps>), OpsError> {
    let Some(share) = study.trial.gpus else {
        return Ok((None, None));
    };
    let cap = study.trial.gpu_memory;
    let mut plan = gpus::plan(share, cap, options.gpus.as_deref()).map_err(|e| {
        let asks = match share {
            Share::Whole(n) if n.get() == 1 => "1 GPU".to_string(),
            Share::Whole(n) => format!("{n} GPUs"),
            Share::Fraction(k) => format!("1/{k} of a GPU"),
        };
        OpsError::BadInput(format!(
            "{}: trial.resources.gpus: the study asks for {asks} per trial, but {e}; give the devices with --gpus 0,1,2,3 (or HPTUNE_GPUS)",
            path.display(),
        ))
    })?;
    if let Some(cap) = cap
        && let Some((device, memory)) = plan
            .devices
            .iter()
            .find_map(|d| d.memory.filter(|m| *m < cap).map(|m| (d, m)))
    {
        return Err(OpsError::BadInput(format!(
            "{}: trial.resources.gpu_memory: {} is more than GPU {} has ({}); give at most its memory",
            path.display(),
            format_bytes(cap),
            device.name,
            format_bytes(memory),
        )));
    }
    let mps = match share {
        Share::Fraction(_) => Mps::find_or_start(),
        Share::Whole(_) => None,
    };
    if let Some(mps) = &mps {
        plan.isolation = mps.isolation();
    }
    Ok((Some(plan), mps))
}

/// The study's executor, with its engine's credentials.
fn executor(
    study: &Study,
    storage: &Storage,
    url: &StorageUrl,
    path: &Path,
) -> Result<Arc<dyn Executor>, OpsError> {
    for_study(&study.trial.executor, storage, url)
        .map_err(|message| OpsError::BadInput(format!("{}: {message}", path.display())))
}
