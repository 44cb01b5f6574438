//! The loop of a study: claim a trial (numbered and proposed under the study's lock) ->
//! launch its worker -> record what it reports -> judge how it ended -> retry it after an
//! infrastructure failure -> stop when the budget is spent, the grid is exhausted, too many
//! trials failed, or the user asked.
//!
//! Executors send events over a channel and the loop records each one as it comes, so every
//! state change is committed when it happens. Trials left running by a controller that is
//! gone are adopted: a live worker is watched again, a dead one is judged by what it
//! reported, or retried.

mod artifacts;
mod devices;
mod events;
mod liveness;
mod verdict;
mod workers;

pub use artifacts::{ArtifactPlan, DEFAULT_ARTIFACTS_DIR, doomed, is_remote};
pub use events::{Progress, RunEvent, RunObserver};

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::{self, JoinSet};

use crate::executor::process::controller_id;
use crate::executor::{Executor, StopRequest, StudyMark, WorkerEvent, WorkerOutcome};
use crate::gpus::{GpuPlan, GpuPool, Lease};
use crate::report::Measurement;
use crate::sampler::{Observation, ProposalContext, Sampler, SamplerError};
use crate::storage::{
    Claim, ClaimError, ClaimRules, Enqueue, Queue, Storage, StorageError, StudyRecord, StudyView,
    TrialEnd, TrialRecord, TrialState,
};
use crate::study::space::Assignment;
use crate::study::{Budget, Study};
use devices::{GPU_POLL, LEASE_CHECK, Waiting};
use liveness::is_orphan;

/// How often a controller tells the database that its trials are alive.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// Why a study could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The database failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The sampler failed.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    /// A GPU's lock could not be taken (the lock folder cannot be written).
    #[error("GPU locks: {0}")]
    Gpus(std::io::Error),
}

impl From<ClaimError<SamplerError>> for ControllerError {
    fn from(e: ClaimError<SamplerError>) -> Self {
        match e {
            ClaimError::Storage(e) => ControllerError::Storage(e),
            ClaimError::Proposal(e) => ControllerError::Sampler(e),
        }
    }
}

/// Limits of one run of the loop.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Trials in all, counting those of earlier runs, and failed trials allowed.
    pub budget: Budget,
    /// Trials this controller runs at once.
    pub parallel_trial_count: usize,
    /// Further attempts of a trial whose worker was killed from outside.
    pub max_retries: u32,
    /// Directory of the workers' log and metrics files.
    pub log_dir: PathBuf,
    /// The GPUs the trials get, for a study with `trial.resources.gpus`.
    pub gpus: Option<GpuPlan>,
    /// Where the trials' models go and which are kept.
    pub artifacts: ArtifactPlan,
    /// Whether the study's enqueued trials run (first); a trial run by hand runs only its
    /// own parameters.
    pub queue: Queue,
    /// Finished trials of the study's `warm_start` study, for the sampler's model.
    pub prior: Vec<Observation>,
}

impl Plan {
    /// The limits a study file sets.
    pub fn for_study(study: &Study, log_dir: &Path) -> Self {
        Self {
            budget: study.budget,
            parallel_trial_count: study.parallel_trial_count,
            max_retries: study.max_retries,
            log_dir: log_dir.to_path_buf(),
            gpus: None,
            artifacts: ArtifactPlan::for_study(study, log_dir),
            queue: Queue::RunFirst,
            prior: Vec::new(),
        }
    }

    fn claim_rules(&self) -> ClaimRules {
        ClaimRules {
            budget: self.budget,
            queue: self.queue,
        }
    }
}

/// Why the loop ended.
#[derive(Debug, Clone, PartialEq)]
pub enum StudyEnd {
    /// `max_trial_count` trials exist and this controller's are finished.
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

/// A trial whose worker this controller watches.
struct Running {
    trial: TrialRecord,
    stop: watch::Sender<StopRequest>,
    measurements: Vec<Measurement>,
    /// Whether the worker's handle (and log path) is known here but not yet written.
    handle_unsaved: bool,
    /// Measurements of the worker that ended, to be written with the trial's end.
    unsaved: Vec<Measurement>,
    /// The GPUs it holds.
    lease: Option<Lease>,
}

/// The state of one run of the loop.
struct Run<'a> {
    study: &'a Study,
    storage: &'a Storage,
    executor: Arc<dyn Executor>,
    plan: &'a Plan,
    study_id: i64,
    /// The study as its model folders name it.
    study_mark: StudyMark,
    owner: String,
    view: StudyView,
    events_tx: mpsc::UnboundedSender<WorkerEvent>,
    workers: JoinSet<WorkerOutcome>,
    tasks: HashMap<task::Id, i64>,
    running: HashMap<i64, Running>,
    /// Trials being stopped by the early-stopping rule, and why.
    early_stops: HashMap<i64, String>,
    /// Ends of trials, in the view already, to be written with the next claim (one call to
    /// the database for both) or before the loop waits again.
    ends: Vec<TrialEnd>,
    /// The GPUs of a study with `trial.resources.gpus`, and which of them the trials hold.
    gpus: Option<GpuPool>,
    /// Trials of this controller waiting for free GPUs, in order.
    waiting: VecDeque<Waiting>,
    /// How many trials of the view had ended when models were last removed (`keep_best`):
    /// the models to remove change only when another trial ends.
    ended_at_pruning: usize,
}

/// Runs (or continues) `study` until its plan says to stop.
pub async fn run(
    study: &Study,
    storage: &Storage,
    executor: Arc<dyn Executor>,
    sampler: &mut dyn Sampler,
    plan: &Plan,
    observer: &mut dyn RunObserver,
    mut interrupt: watch::Receiver<StopRequest>,
) -> Result<RunSummary, ControllerError> {
    let record = storage.ensure_study(study).await?;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let mut run = Run {
        study,
        storage,
        executor,
        plan,
        study_id: record.id,
        study_mark: StudyMark {
            name: record.name.clone(),
            id: record.id,
            created_at: record.created_at.clone(),
        },
        owner: controller_id(),
        view: StudyView::new(record.id, study.objective.goal),
        events_tx,
        workers: JoinSet::new(),
        tasks: HashMap::new(),
        running: HashMap::new(),
        early_stops: HashMap::new(),
        ends: Vec::new(),
        gpus: plan.gpus.clone().map(GpuPool::new),
        waiting: VecDeque::new(),
        ended_at_pruning: 0,
    };
    // The study file's configurations to run first, the first time it runs with them.
    if plan.queue == Queue::RunFirst {
        storage
            .enqueue(record.id, &study.initial_trials, Enqueue::Initial)
            .await?;
    }
    storage.refresh(&mut run.view).await?;
    run.pin_models().await?;
    let adopted = storage
        .adopt_orphans(record.id, &run.owner, is_orphan)
        .await?;
    let finished = run.view.trials().filter(|t| t.state.is_finished()).count();
    if finished > 0 || !adopted.is_empty() {
        observer.observe(
            RunEvent::Resumed {
                finished,
                adopted: adopted.len(),
            },
            &run.progress(),
        );
    }
    run.adopt(adopted, observer).await?;

    let mut exhausted = false;
    let mut failures = false;
    // How urgently the user asked to stop: Run until the first Ctrl-C, Now after the second.
    let mut urgency = *interrupt.borrow();
    let mut interrupted = urgency != StopRequest::Run;
    let mut interrupt_open = true;
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    // Whether new trials wait for GPUs that other processes hold, and how often to look.
    let mut blocked = false;
    let mut gpu_poll = tokio::time::interval(GPU_POLL);
    gpu_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut lease_check = tokio::time::interval(LEASE_CHECK);
    lease_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if !interrupted {
            run.start_waiting(observer).await?;
        }
        let was_blocked = std::mem::take(&mut blocked);
        'claiming: while !interrupted
            && !exhausted
            && !failures
            && run.running.len() + run.waiting.len() < plan.parallel_trial_count
        {
            let propose = |number, view: &StudyView, claimed: &[Assignment]| {
                let mut running = view.unfinished_params();
                running.extend_from_slice(claimed);
                sampler.propose(&ProposalContext {
                    space: &study.space,
                    goal: study.objective.goal,
                    constraints: &study.constraints,
                    number,
                    history: view.history(),
                    prior: &plan.prior,
                    running: &running,
                    parallel: plan.parallel_trial_count,
                })
            };
            let mut slots = plan.parallel_trial_count - run.running.len() - run.waiting.len();
            // With GPUs, as many trials as there are free devices for.
            let mut leases = run.leases(slots)?.into_iter();
            if run.gpus.is_some() {
                slots = leases.len();
                if slots == 0 {
                    blocked = run.blocked_by_others();
                    break 'claiming;
                }
            }
            let claims = storage
                .claim_trials(
                    &mut run.view,
                    plan.claim_rules(),
                    &run.owner,
                    slots,
                    &mut run.ends,
                    propose,
                )
                .await?;
            let mut more = true;
            for claim in claims {
                match claim {
                    Claim::Started(trial) => match leases.next() {
                        Some(lease) => run.launch_on(*trial, None, lease, observer).await?,
                        None => run.launch(*trial, None, None, observer),
                    },
                    Claim::BudgetSpent => more = false,
                    Claim::Exhausted => {
                        exhausted = true;
                        more = false;
                    }
                    Claim::TooManyFailures => {
                        failures = true;
                        more = false;
                    }
                }
            }
            for unused in leases {
                run.release(Some(unused));
            }
            if !more {
                break 'claiming;
            }
        }
        if blocked && !was_blocked {
            observer.observe(RunEvent::WaitingForGpus, &run.progress());
        }
        // The ends no claim took are written before the loop waits or leaves; then the
        // models that can no longer be among the best go.
        storage.finish_trials(&mut run.ends).await?;
        run.prune_artifacts().await?;
        let waits_for_gpus = !interrupted && (blocked || !run.waiting.is_empty());
        if run.running.is_empty() && !waits_for_gpus {
            // Before leaving, adopt what a controller that died meanwhile left running; or,
            // stopped by the user, hand back a trial retried while its workers stopped.
            let orphans = match interrupted {
                true => {
                    run.hand_back_waiting(observer).await?;
                    Vec::new()
                }
                false => {
                    storage
                        .adopt_orphans(run.study_id, &run.owner, is_orphan)
                        .await?
                }
            };
            if orphans.is_empty() {
                break;
            }
            run.adopt(orphans, observer).await?;
            continue;
        }
        tokio::select! {
            // In this order: the user's interrupt first, so that workers that end without
            // pause (and the claims that replace them) never hold it back; a worker's end
            // next, so that its last measurements, still in the channel, are written with its
            // end in one round trip (below) rather than one by one; events last, so that a
            // worker reporting without pause holds back neither the heartbeat nor an
            // interrupt.
            biased;
            changed = interrupt.changed(), if interrupt_open && urgency != StopRequest::Now => {
                let request = *interrupt.borrow();
                if changed.is_err() {
                    interrupt_open = false;
                } else if request > urgency {
                    urgency = request;
                    interrupted = true;
                    observer.observe(RunEvent::Stopping { now: request == StopRequest::Now }, &run.progress());
                    for r in run.running.values() {
                        let _ = r.stop.send(request);
                    }
                    run.hand_back_waiting(observer).await?;
                }
            }
            Some(joined) = run.workers.join_next_with_id() => {
                // Every worker that has ended by now is recorded before the next proposal:
                // trials of equal length end together, and a proposal made while the others'
                // results wait unread would treat them as still running.
                let mut next = Some(joined);
                while let Some(joined) = next {
                    let outcome = run.outcome(joined);
                    // Events the worker sent before it ended come first.
                    while let Ok(event) = events.try_recv() {
                        run.record(event, Some(outcome.trial_id)).await?;
                    }
                    run.settle(outcome, interrupted, observer).await?;
                    next = run.workers.try_join_next_with_id();
                }
            }
            _ = heartbeat.tick() => {
                // Fewer rows than running workers: another controller took some over while
                // this one was stopped, and watches their workers now.
                if storage.heartbeat(&run.owner).await? < run.running.len() as u64 {
                    return Err(StorageError::TakenOver.into());
                }
                run.save_handles().await?;
                // A controller of the same study may have died meanwhile.
                if !interrupted {
                    let orphans = storage.adopt_orphans(run.study_id, &run.owner, is_orphan).await?;
                    run.adopt(orphans, observer).await?;
                }
            }
            // Devices that other processes hold may be free now; so may the study's budget
            // (spent by other controllers of the study).
            _ = gpu_poll.tick(), if waits_for_gpus => {
                storage.refresh(&mut run.view).await?;
            }
            _ = lease_check.tick(), if run.gpus.is_some() && !run.running.is_empty() => {
                run.check_leases();
            }
            Some(event) = events.recv() => run.record(event, None).await?,
        }
    }

    storage.refresh(&mut run.view).await?;
    let trials: Vec<TrialRecord> = run.view.trials().cloned().collect();
    let progress = run.progress();
    let end = if interrupted {
        StudyEnd::Interrupted
    } else if failures || plan.budget.too_many_failures(progress.failed) {
        StudyEnd::TooManyFailures {
            failed: progress.failed,
            last_error: trials
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
        trials,
    })
}

impl Run<'_> {
    /// Adopts the trials of a controller that is gone (or was interrupted): launches each with
    /// what that controller recorded.
    async fn adopt(
        &mut self,
        trials: Vec<TrialRecord>,
        observer: &mut dyn RunObserver,
    ) -> Result<(), ControllerError> {
        for trial in trials {
            let reported = self.storage.measurements(trial.id, trial.attempt).await?;
            self.start(trial, Some(reported), observer).await?;
        }
        Ok(())
    }

    fn progress(&self) -> Progress {
        let gpus = self.gpus.as_ref().map(GpuPool::plan);
        Progress {
            limited_by_gpus: gpus
                .filter(|gpus| gpus.trials_at_once() < self.plan.parallel_trial_count)
                .map(|gpus| gpus.devices.len()),
            ..Progress::of(&self.view, self.plan.budget.max_trial_count)
        }
    }
}
