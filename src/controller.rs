//! The loop of a study: ask the sampler -> launch the worker -> watch it -> record what it
//! reports -> stop when the budget is spent, the grid is exhausted, too many trials failed,
//! or the user asked.
//!
//! The controller is the only writer of the database: executors send events over a channel
//! and the loop records each one as it comes, so every state change is committed when it
//! happens.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::executor::{
    Executor, TrialJob, WorkerEnd, WorkerEvent, WorkerOutcome, command_line, worker_env,
};
use crate::report::{self, Measurement};
use crate::sampler::{Observation, ProposalContext, Sampler, SamplerError};
use crate::space::Assignment;
use crate::spec::Study;
use crate::storage::{Storage, StorageError, StudyRecord, TrialRecord, TrialState};

/// Why a study could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The database failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The sampler failed.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
}

/// Limits of one run of the loop.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Trials in all, counting those of earlier runs; `None`: until the sampler is exhausted.
    pub max_trial_count: Option<u64>,
    /// Trials running at once.
    pub parallel_trial_count: usize,
    /// Failed trials (of all runs) after which no new trial starts.
    pub max_failed_trial_count: u64,
    /// Directory of the workers' log and metrics files.
    pub log_dir: PathBuf,
}

impl Plan {
    /// The limits a study file sets.
    pub fn for_study(study: &Study, log_dir: &Path) -> Self {
        Self {
            max_trial_count: study.max_trial_count,
            parallel_trial_count: study.parallel_trial_count,
            max_failed_trial_count: study.max_failed_trial_count,
            log_dir: log_dir.to_path_buf(),
        }
    }
}

/// Counts of a study while it runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Trials in all, when known.
    pub budget: Option<u64>,
    /// Succeeded trials.
    pub succeeded: usize,
    /// Failed trials.
    pub failed: usize,
    /// Stopped trials.
    pub stopped: usize,
    /// Running trials.
    pub running: usize,
    /// Number and value of the best trial so far.
    pub best: Option<(u64, f64)>,
}

impl Progress {
    /// Finished trials.
    pub fn done(&self) -> usize {
        self.succeeded + self.failed + self.stopped
    }
}

/// What the loop tells whoever shows it to a user.
#[derive(Debug, Clone)]
pub enum RunEvent<'a> {
    /// The study exists already: its finished trials count, and `abandoned` trials that an
    /// earlier controller left running were marked stopped.
    Resumed {
        /// Finished trials of earlier runs.
        finished: usize,
        /// Trials found still running and marked stopped.
        abandoned: u64,
    },
    /// A trial's worker is starting.
    TrialStarted {
        /// The trial.
        trial: &'a TrialRecord,
    },
    /// A trial ended.
    TrialFinished {
        /// The trial in its final state.
        trial: &'a TrialRecord,
    },
    /// The user asked to stop; running workers are being stopped.
    Stopping,
}

/// Shows a running study (a progress bar, log lines, nothing).
pub trait RunObserver {
    /// Called on each event, with the counts after it.
    fn observe(&mut self, event: RunEvent<'_>, progress: &Progress);
}

/// Why the loop ended.
#[derive(Debug, Clone, PartialEq)]
pub enum StudyEnd {
    /// `max_trial_count` trials are finished.
    BudgetSpent,
    /// The sampler has nothing left to propose (every grid point was tried).
    Exhausted,
    /// `max_failed_trial_count` trials failed.
    TooManyFailures {
        /// How many failed.
        failed: usize,
        /// The last failure's reason.
        last_error: Option<String>,
    },
    /// The user stopped the study.
    Interrupted,
}

/// The end of a run: why it ended, and every trial of the study.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The study as stored.
    pub study: StudyRecord,
    /// Why the loop ended.
    pub end: StudyEnd,
    /// Every trial of the study, by number.
    pub trials: Vec<TrialRecord>,
}

/// A trial whose worker is running.
struct Running {
    trial: TrialRecord,
    stop: watch::Sender<bool>,
    measurements: Vec<Measurement>,
}

/// Runs (or continues) `study` until its plan says to stop.
pub async fn run(
    study: &Study,
    storage: &Storage,
    executor: Arc<dyn Executor>,
    sampler: &mut dyn Sampler,
    plan: &Plan,
    observer: &mut dyn RunObserver,
    mut interrupt: watch::Receiver<bool>,
) -> Result<RunSummary, ControllerError> {
    let record = storage.ensure_study(study).await?;
    let abandoned = storage.stop_abandoned(record.id).await?;
    let mut finished = storage.trials(record.id).await?;
    let mut progress = Progress {
        budget: plan.max_trial_count,
        ..Progress::default()
    };
    for trial in &finished {
        count(&mut progress, trial, study);
    }
    if !finished.is_empty() {
        observer.observe(
            RunEvent::Resumed {
                finished: finished.len(),
                abandoned,
            },
            &progress,
        );
    }

    let (events_tx, mut events) = mpsc::unbounded_channel();
    let mut workers: JoinSet<WorkerOutcome> = JoinSet::new();
    let mut tasks: HashMap<tokio::task::Id, i64> = HashMap::new();
    let mut running: HashMap<i64, Running> = HashMap::new();
    let mut exhausted = false;
    let mut interrupted = *interrupt.borrow();
    let mut interrupt_open = true;

    loop {
        while !interrupted
            && !exhausted
            && running.len() < plan.parallel_trial_count
            && (progress.failed as u64) < plan.max_failed_trial_count
            && plan
                .max_trial_count
                .is_none_or(|max| ((finished.len() + running.len()) as u64) < max)
        {
            let running_params: Vec<Assignment> =
                running.values().map(|r| r.trial.params.clone()).collect();
            let history = observations(&finished);
            let context = ProposalContext {
                space: &study.space,
                goal: study.objective.goal,
                number: (finished.len() + running.len()) as u64,
                history: &history,
                running: &running_params,
            };
            let Some(params) = sampler.propose(&context)? else {
                exhausted = true;
                break;
            };
            let mut trial = storage.start_trial(record.id, &params).await?;
            let job = job(study, plan, &trial);
            trial.log_path = Some(job.log_path.display().to_string());
            progress.running += 1;
            observer.observe(RunEvent::TrialStarted { trial: &trial }, &progress);
            let (stop_tx, stop_rx) = watch::channel(false);
            let executor = executor.clone();
            let events_tx = events_tx.clone();
            let task = workers.spawn(async move { executor.run(job, events_tx, stop_rx).await });
            tasks.insert(task.id(), trial.id);
            running.insert(
                trial.id,
                Running {
                    trial,
                    stop: stop_tx,
                    measurements: Vec::new(),
                },
            );
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            Some(event) = events.recv() => record_event(storage, &mut running, event).await?,
            Some(joined) = workers.join_next_with_id() => {
                let outcome = match joined {
                    Ok((id, outcome)) => {
                        tasks.remove(&id);
                        outcome
                    }
                    Err(e) => WorkerOutcome {
                        trial_id: tasks.remove(&e.id()).unwrap_or_default(),
                        end: WorkerEnd::LaunchFailed(format!("the task watching the worker failed: {e}")),
                        last_output: None,
                    },
                };
                // Events the worker sent before it ended come first.
                while let Ok(event) = events.try_recv() {
                    record_event(storage, &mut running, event).await?;
                }
                let Some(done) = running.remove(&outcome.trial_id) else { continue };
                let trial = finish(storage, study, done, &outcome).await?;
                progress.running -= 1;
                count(&mut progress, &trial, study);
                observer.observe(RunEvent::TrialFinished { trial: &trial }, &progress);
                finished.push(trial);
            }
            changed = interrupt.changed(), if interrupt_open && !interrupted => {
                if changed.is_err() {
                    interrupt_open = false;
                } else if *interrupt.borrow() {
                    interrupted = true;
                    observer.observe(RunEvent::Stopping, &progress);
                    for r in running.values() {
                        let _ = r.stop.send(true);
                    }
                }
            }
        }
    }

    finished.sort_by_key(|t| t.number);
    let end = if interrupted {
        StudyEnd::Interrupted
    } else if (progress.failed as u64) >= plan.max_failed_trial_count {
        StudyEnd::TooManyFailures {
            failed: progress.failed,
            last_error: finished
                .iter()
                .filter(|t| t.state == TrialState::Failed)
                .max_by_key(|t| t.finished_at.clone())
                .and_then(|t| t.error.clone()),
        }
    } else if exhausted {
        StudyEnd::Exhausted
    } else {
        StudyEnd::BudgetSpent
    };
    Ok(RunSummary {
        study: record,
        end,
        trials: finished,
    })
}

fn count(progress: &mut Progress, trial: &TrialRecord, study: &Study) {
    match trial.state {
        TrialState::Succeeded => progress.succeeded += 1,
        TrialState::Failed => progress.failed += 1,
        TrialState::Stopped => progress.stopped += 1,
        TrialState::Pending | TrialState::Running => {}
    }
    if let (TrialState::Succeeded, Some(value)) = (trial.state, trial.value) {
        if progress
            .best
            .is_none_or(|(_, best)| study.objective.goal.better(value, best))
        {
            progress.best = Some((trial.number, value));
        }
    }
}

fn observations(finished: &[TrialRecord]) -> Vec<Observation> {
    finished
        .iter()
        .map(|t| Observation {
            number: t.number,
            params: t.params.clone(),
            value: t.value.filter(|_| t.state == TrialState::Succeeded),
        })
        .collect()
}

fn job(study: &Study, plan: &Plan, trial: &TrialRecord) -> TrialJob {
    let dir = plan.log_dir.join(&study.name);
    let metrics_path = dir.join(format!("trial-{}.metrics.jsonl", trial.number));
    TrialJob {
        study: study.name.clone(),
        number: trial.number,
        trial_id: trial.id,
        argv: command_line(
            &study.trial,
            &study.space,
            &study.name,
            trial.number,
            &trial.params,
        ),
        env: worker_env(&study.trial, &study.name, trial.number, &metrics_path),
        log_path: dir.join(format!("trial-{}.log", trial.number)),
        metrics_path,
        timeout: study.trial.timeout,
        grace_period: study.trial.grace_period,
        metric: study.objective.metric.clone(),
    }
}

async fn record_event(
    storage: &Storage,
    running: &mut HashMap<i64, Running>,
    event: WorkerEvent,
) -> Result<(), StorageError> {
    match event {
        WorkerEvent::Started { trial_id, handle } => {
            if let Some(r) = running.get_mut(&trial_id) {
                let log = r.trial.log_path.clone().unwrap_or_default();
                storage.set_worker(trial_id, &handle, &log).await?;
                r.trial.worker = Some(handle);
            }
        }
        WorkerEvent::Measured {
            trial_id,
            measurement,
        } => {
            if let Some(r) = running.get_mut(&trial_id) {
                storage.record_measurement(trial_id, &measurement).await?;
                r.measurements.push(measurement);
            }
        }
    }
    Ok(())
}

/// Decides how a trial ended and records it.
async fn finish(
    storage: &Storage,
    study: &Study,
    done: Running,
    outcome: &WorkerOutcome,
) -> Result<TrialRecord, StorageError> {
    let (state, value, error) = judge(study, &done.measurements, outcome);
    let mut trial = done.trial;
    trial.finished_at = Some(
        storage
            .finish_trial(trial.id, state, value, error.as_deref())
            .await?,
    );
    trial.state = state;
    trial.value = value;
    trial.error = error;
    Ok(trial)
}

fn judge(
    study: &Study,
    measurements: &[Measurement],
    outcome: &WorkerOutcome,
) -> (TrialState, Option<f64>, Option<String>) {
    let metric = &study.objective.metric;
    let with_output = |message: String| match &outcome.last_output {
        Some(line) => format!("{message} (last output: {line})"),
        None => message,
    };
    let partial = report::final_value(measurements, metric)
        .ok()
        .filter(|v| v.is_finite());
    match &outcome.end {
        WorkerEnd::Exited(0) => match report::final_value(measurements, metric) {
            Ok(value) => (TrialState::Succeeded, Some(value), None),
            Err(e) => (TrialState::Failed, None, Some(e.to_string())),
        },
        WorkerEnd::Exited(code) => (
            TrialState::Failed,
            None,
            Some(with_output(format!("the worker exited with code {code}"))),
        ),
        WorkerEnd::Killed(signal) => (
            TrialState::Failed,
            None,
            Some(with_output(format!("the worker was killed by {signal}"))),
        ),
        WorkerEnd::TimedOut(limit) => (
            TrialState::Failed,
            None,
            Some(format!(
                "timed out after {} (trial.timeout) and was terminated",
                humantime::format_duration(*limit)
            )),
        ),
        WorkerEnd::Stopped => (
            TrialState::Stopped,
            partial,
            Some("stopped: the study was interrupted".into()),
        ),
        WorkerEnd::LaunchFailed(message) => (TrialState::Failed, None, Some(message.clone())),
    }
}
