//! `hptune run` and `hptune trial`: run workers under the controller, then show the result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use tokio::sync::watch;

use hptune::controller::{self, ArtifactPlan, Plan, RunSummary, StudyEnd};
use hptune::executor::{Executor, StopRequest, check_program, check_storage, for_study};
use hptune::gpus::{self, DEFAULT_LOCK_DIR, GpuPlan, LockDir};
use hptune::sampler::{self, ManualSampler, Observation};
use hptune::spec;
use hptune::storage::{Queue, Storage, StorageUrl, TrialState, best_first};
use hptune::study::{Budget, ExecutorKind, ExecutorSpec, Outside, Study};

use super::progress::Display;
use super::table::printable;
use super::{ArtifactsArg, Failure, GpusArg, WorkerArgs, show};

/// Exit code of a study stopped by Ctrl-C or SIGTERM.
const INTERRUPTED: u8 = 130;

/// How many of the best trials are shown when a study ends.
const TOP_TRIALS: usize = 5;

/// Runs or continues the study of `path`, through `executor_kind` (`--executor`) instead of
/// the study's executor when it is given.
pub async fn run_study(
    path: &Path,
    url: &StorageUrl,
    workers: &WorkerArgs,
    keep: &[u64],
) -> Result<ExitCode, Failure> {
    let log_dir = workers.log_dir.as_path();
    let study = load_checked(path, url, workers.executor)?;
    let mut sampler = sampler::for_study(&study)
        .map_err(|e| Failure::BadInput(format!("{}: {e}", path.display())))?;
    let mut artifacts = artifact_plan(&study, log_dir, &workers.artifacts)?;
    artifacts.pinned.extend(keep);
    let gpus = gpu_plan(&study, &workers.gpus, path)?;
    let storage = Storage::open(url).await?;
    let plan = Plan {
        gpus,
        artifacts,
        prior: warm_start(&study, &storage, path).await?,
        ..Plan::for_study(&study, log_dir)
    };
    let executor = executor(&study, &storage, url, path)?;
    let summary = supervise(&study, &storage, executor, sampler.as_mut(), &plan).await?;
    storage.close().await;
    Ok(print_end(&summary))
}

/// Runs one trial of the study of `path` with the parameters given by hand.
pub async fn run_trial(
    path: &Path,
    url: &StorageUrl,
    pairs: &[(String, String)],
    workers: &WorkerArgs,
) -> Result<ExitCode, Failure> {
    let log_dir = workers.log_dir.as_path();
    let study = load_checked(path, url, workers.executor)?;
    let params = study
        .space
        .parse_assignment(pairs)
        .map_err(|e| Failure::BadInput(format!("--param: {e}")))?;
    let gpus = gpu_plan(&study, &workers.gpus, path)?;
    let storage = Storage::open(url).await?;
    let executor = executor(&study, &storage, url, path)?;
    let plan = Plan {
        budget: Budget::UNLIMITED,
        parallel_trial_count: 1,
        max_retries: study.max_retries,
        log_dir: log_dir.to_path_buf(),
        gpus,
        artifacts: artifact_plan(&study, log_dir, &workers.artifacts)?,
        queue: Queue::Leave,
        prior: Vec::new(),
    };
    let mut sampler = ManualSampler::new(params);
    let summary = supervise(&study, &storage, executor, &mut sampler, &plan).await?;
    storage.close().await;
    let trial = summary
        .trials
        .iter()
        .max_by_key(|t| t.number)
        .ok_or_else(|| Failure::Other("the trial was not recorded".into()))?;
    show::print_trials(
        std::slice::from_ref(trial),
        &summary.study,
        super::TrialsFormat::Table,
    )?;
    Ok(match (trial.state, &summary.end) {
        (_, StudyEnd::Interrupted) => ExitCode::from(INTERRUPTED),
        (TrialState::Succeeded, _) => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}

/// The finished trials of the study's `warm_start` study, mapped into its space (those that
/// lie outside it left out, with a warning); none without one. The other study must exist,
/// optimise the same metric the same way, give each parameter both tune the same type, and
/// have some trial in this space if it has finished any.
async fn warm_start(
    study: &Study,
    storage: &Storage,
    path: &Path,
) -> Result<Vec<Observation>, Failure> {
    let Some(warm) = &study.warm_start else {
        return Ok(Vec::new());
    };
    let name = &warm.study;
    let bad = |field: &str, message: String| {
        Failure::BadInput(format!("{}: warm_start{field}: {message}", path.display()))
    };
    let record = storage.find_study(name).await?.ok_or_else(|| {
        bad(
            ".study",
            format!("no study named '{name}' in this database"),
        )
    })?;
    if record.metric != study.objective.metric || record.goal != study.objective.goal {
        return Err(bad(
            ".study",
            format!(
                "study '{name}' {}s {}, this one {}s {}: their values do not compare",
                record.goal.as_str(),
                record.metric,
                study.objective.goal.as_str(),
                study.objective.metric
            ),
        ));
    }
    let other = show::stored_space(&record)?;
    let mapping = warm
        .mapping(&study.space, &other)
        .map_err(|e| bad("", e.to_string()))?;
    let trials = storage.trials(record.id).await?;
    // Feasibility is this study's: its bounds judge the other study's recorded values, which
    // must hold each metric this study bounds.
    let recorded = |metric: &str| {
        trials
            .iter()
            .any(|t| t.constraint_values.contains_key(metric))
    };
    if let Some(missing) = study
        .constraints
        .bounds
        .iter()
        .find(|c| !recorded(&c.metric))
    {
        return Err(bad(
            ".study",
            format!(
                "study '{name}' recorded no {} for its trials, which constraints bound here",
                missing.metric
            ),
        ));
    }
    let (mut prior, mut outside) = (Vec::new(), Vec::new());
    for trial in &trials {
        let Some(mut observation) = trial.observation() else {
            continue;
        };
        match mapping
            .map(&observation.params)
            .map_err(|e| bad("", e.to_string()))?
        {
            Ok(params) => {
                let failed = trial.state == TrialState::Failed;
                observation.params = params;
                observation.feasible = study
                    .constraints
                    .judge(failed, &observation.constraint_values)
                    .is_none();
                prior.push(observation);
            }
            Err(o) => outside.push(o),
        }
    }
    if !outside.is_empty() {
        let finished = prior.len() + outside.len();
        let by_parameter = outside_by_parameter(&outside);
        if prior.is_empty() {
            return Err(bad(
                "",
                format!(
                    "none of the {finished} finished trials of study '{name}' lies in this \
                     study's space (outside by {by_parameter}; e.g. {}: {})",
                    outside[0].parameter, outside[0].why
                ),
            ));
        }
        tracing::warn!(
            "warm_start: {} of the {finished} finished trials of study '{name}' lie outside \
             this study's space and do not inform it (outside by {by_parameter})",
            outside.len()
        );
    }
    Ok(prior)
}

/// How many trials lie outside the space by each parameter: `x: 3, optimizer: 1`.
fn outside_by_parameter(outside: &[Outside]) -> String {
    let mut counts = BTreeMap::<&str, usize>::new();
    for o in outside {
        *counts.entry(&o.parameter).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(id, n)| format!("{id}: {n}")).collect();
    counts.join(", ")
}

/// Reads the study file and checks what can be checked before anything runs: a local
/// worker's program, a remote executor's storage. `executor` (`--executor`) replaces the
/// study's executor: local always, another engine if the file configures it.
fn load_checked(
    path: &Path,
    url: &StorageUrl,
    executor: Option<ExecutorKind>,
) -> Result<Study, Failure> {
    let mut study = spec::load(path)?;
    let bad = |message: String| Failure::BadInput(format!("{}: {message}", path.display()));
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
    if study.trial.executor == ExecutorSpec::Local {
        check_program(&study.trial.command[0])
            .map_err(|message| bad(format!("trial.command[0]: {message}")))?;
    }
    check_storage(&study.trial.executor, url).map_err(bad)?;
    Ok(study)
}

/// Where the trials' models go: `--artifacts-dir`, else the study's, else beside the logs; as
/// an absolute path, which the rows record and `hptune best --artifact` prints.
fn artifact_plan(
    study: &Study,
    log_dir: &Path,
    given: &ArtifactsArg,
) -> Result<ArtifactPlan, Failure> {
    let mut plan = ArtifactPlan::for_study(study, log_dir);
    if let Some(dir) = &given.dir {
        plan.dir = dir.clone();
    }
    plan.dir = std::path::absolute(&plan.dir)
        .map_err(|e| Failure::BadInput(format!("--artifacts-dir {}: {e}", plan.dir.display())))?;
    Ok(plan)
}

/// The GPUs of a study with `trial.resources.gpus`: the devices given, else the controller's
/// `CUDA_VISIBLE_DEVICES`, else those `nvidia-smi -L` lists; too few is bad input, found
/// before anything is recorded. A study without GPUs looks for none.
fn gpu_plan(study: &Study, given: &GpusArg, path: &Path) -> Result<Option<GpuPlan>, Failure> {
    let Some(per_trial) = study.trial.gpus else {
        return Ok(None);
    };
    let asks = format!(
        "{}: trial.resources.gpus: the study asks for {per_trial} GPU{} per trial",
        path.display(),
        if per_trial.get() == 1 { "" } else { "s" }
    );
    let hint = "give the devices with --gpus 0,1,2,3 (or HPTUNE_GPUS)";
    let cuda_visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let found = gpus::find(given.list.as_deref(), cuda_visible.as_deref())
        .map_err(|e| Failure::BadInput(format!("{asks}, but {e}; {hint}")))?;
    let count = found.devices.len();
    let names: Vec<&str> = found.devices.iter().map(|d| d.name.as_str()).collect();
    let names = names.join(",");
    if count < per_trial.get() {
        let listed = match count {
            0 => "none".to_string(),
            _ => format!("{count} ({names})"),
        };
        return Err(Failure::BadInput(format!(
            "{asks}, but {} gives {listed}; {hint}",
            found.source
        )));
    }
    let locks = std::env::var_os("HPTUNE_GPU_LOCKS")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_LOCK_DIR), PathBuf::from);
    let plan = GpuPlan {
        per_trial,
        devices: found.devices,
        locks: LockDir::new(&locks),
    };
    let at_once = plan.trials_at_once().min(study.parallel_trial_count);
    eprintln!(
        "GPUs {names} (from {}), {per_trial} per trial: at most {at_once} trial{} at once",
        found.source,
        if at_once == 1 { "" } else { "s" }
    );
    Ok(Some(plan))
}

/// The study's executor, with its engine's credentials.
fn executor(
    study: &Study,
    storage: &Storage,
    url: &StorageUrl,
    path: &Path,
) -> Result<Arc<dyn Executor>, Failure> {
    for_study(&study.trial.executor, storage, url)
        .map_err(|message| Failure::BadInput(format!("{}: {message}", path.display())))
}

/// Runs the controller with a display, stopping workers on Ctrl-C or SIGTERM.
async fn supervise(
    study: &Study,
    storage: &Storage,
    executor: Arc<dyn Executor>,
    sampler: &mut dyn sampler::Sampler,
    plan: &Plan,
) -> Result<RunSummary, Failure> {
    let (interrupt_tx, interrupt) = watch::channel(StopRequest::Run);
    let signals = tokio::spawn(async move {
        wait_for_signal().await;
        let _ = interrupt_tx.send(StopRequest::Gracefully);
        wait_for_signal().await;
        let _ = interrupt_tx.send(StopRequest::Now);
    });
    let mut display = Display::new(study);
    let result = controller::run(
        study,
        storage,
        executor,
        sampler,
        plan,
        &mut display,
        interrupt,
    )
    .await;
    signals.abort();
    display.clear();
    Ok(result?)
}

pub(super) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Prints the best trials and why the study ended; returns the exit code.
fn print_end(summary: &RunSummary) -> ExitCode {
    let best = best_first(&summary.trials, summary.study.goal, TOP_TRIALS);
    if !best.is_empty()
        && let Err(e) = show::print_trials(&best, &summary.study, super::TrialsFormat::Table)
    {
        eprintln!("error: {e}");
    }
    let name = &summary.study.name;
    let total = summary.trials.len();
    match &summary.end {
        StudyEnd::BudgetSpent | StudyEnd::Exhausted => {
            let what = if summary.end == StudyEnd::Exhausted {
                "every grid point was tried"
            } else {
                "the trial budget is spent"
            };
            eprintln!("study '{name}' is complete: {total} trials, {what}");
            ExitCode::SUCCESS
        }
        StudyEnd::TooManyFailures { failed, last_error } => {
            eprintln!(
                "error: study '{name}' stopped: {failed} trials failed (max_failed_trial_count); last error: {}",
                printable(last_error.as_deref().unwrap_or("unknown"))
            );
            eprintln!(
                "fix the worker, raise max_failed_trial_count, and run the same command to continue"
            );
            ExitCode::from(1)
        }
        StudyEnd::Interrupted => {
            eprintln!(
                "study '{name}' interrupted after {total} trials: run the same command to continue"
            );
            ExitCode::from(INTERRUPTED)
        }
    }
}
