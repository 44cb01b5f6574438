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
mod leases;
mod liveness;
mod steps;
mod verdict;
mod warm_start;
mod workers;

pub(crate) use artifacts::{ArtifactPlan, is_remote};
use events::BestSoFar;
pub use events::{Best, Progress, RunEvent, RunObserver};
pub(crate) use leases::{ClientVerdict, client_end, early_stop, reclaim_expired_leases};
pub(crate) use warm_start::{PriorError, warm_start_prior};

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::{self, JoinSet};

use crate::executor::process::controller_id;
use crate::executor::{Executor, StopRequest, StudyMark, WorkerEvent, WorkerOutcome};
use crate::gpus::{GpuPlan, GpuPool, Lease};
use crate::protocol::Measurement;
use crate::sampler::{
    Observation, ProposalContext, Sampler, SamplerError, TrialCurve, reads_curves,
};
use crate::storage::{
    ClaimError, ClaimRules, Queue, Storage, StorageError, StudyRecord, StudyView, TrialEnd,
    TrialRecord,
};
use crate::study::space::Assignment;
use crate::study::stopping::Curve;
use crate::study::{Budget, Study};
use devices::{GPU_POLL, LEASE_CHECK, Waiting};
use steps::Phase;

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
    pub(crate) artifacts: ArtifactPlan,
    /// Whether the study's enqueued trials run (first); a trial run by hand runs only its
    /// own parameters.
    pub(crate) queue: Queue,
    /// Finished trials of the study's `warm_start` study, for the sampler's model.
    pub prior: Vec<Observation>,
}

impl Plan {
    /// The limits a study file sets.
    pub(crate) fn for_study(study: &Study, log_dir: &Path) -> Self {
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
    /// The best trial or front the progress shows, kept until another trial ends.
    best: BestSoFar,
}

/// Runs (or continues) `study` until its plan says to stop.
pub(crate) async fn run(
    study: &Study,
    storage: &Storage,
    executor: Arc<dyn Executor>,
    sampler: &mut dyn Sampler,
    plan: &Plan,
    observer: &mut dyn RunObserver,
    interrupt: watch::Receiver<StopRequest>,
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
        best: BestSoFar::default(),
    };
    run.resume(observer).await?;
    let mut phase = Phase::at_start(*interrupt.borrow());
    // `None` once the sender is gone: no request can come any more.
    let mut interrupt = Some(interrupt);
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    // How often to look whether devices that other processes hold are free.
    let mut gpu_poll = tokio::time::interval(GPU_POLL);
    gpu_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut lease_check = tokio::time::interval(LEASE_CHECK);
    lease_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        phase = run.fill_slots(phase, sampler, observer).await?;
        run.write_ends().await?;
        let waits_for_gpus = run.waits_for_gpus(phase);
        if run.running.is_empty() && !waits_for_gpus {
            if run.adopt_before_leaving(phase, observer).await? {
                continue;
            }
            break;
        }
        tokio::select! {
            // In this order: the user's interrupt first, so that workers that end without
            // pause (and the claims that replace them) never hold it back; a worker's end
            // next, so that its last measurements, still in the channel, are written with its
            // end in one round trip rather than one by one; events last, so that a worker
            // reporting without pause holds back neither the heartbeat nor an interrupt.
            biased;
            request = next_request(&mut interrupt), if interrupt.is_some() && phase.urgency() != StopRequest::Now => {
                match request {
                    Some(request) => phase = run.stop(request, phase, observer).await?,
                    None => interrupt = None,
                }
            }
            Some(joined) = run.workers.join_next_with_id() => {
                run.handle_ends(joined, &mut events, phase, observer).await?;
            }
            _ = heartbeat.tick() => run.beat(phase, observer).await?,
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
    run.summarise(record, phase).await
}

/// What a claim asks `sampler` for `study`: the parameters of trial `number`, given the
/// claim's view (its finished trials; as running, its unfinished ones and the trials the claim
/// took before `number`), the warm-start `prior`, `parallel` trials run at once, and the
/// learning `curves` read for it ([`read_curves`]).
pub(crate) fn proposer<'a>(
    study: &'a Study,
    prior: &'a [Observation],
    parallel: usize,
    sampler: &'a mut dyn Sampler,
    curves: &'a [Curve],
) -> impl FnMut(u64, &StudyView, &[Assignment]) -> Result<Option<Assignment>, SamplerError> + 'a {
    let goals: Vec<_> = study.objectives().map(|o| o.goal).collect();
    move |number, view, claimed| {
        let mut running = view.unfinished_params();
        running.extend_from_slice(claimed);
        let curves: Vec<TrialCurve> = curves
            .iter()
            .filter_map(|c| {
                Some(TrialCurve {
                    number: c.number,
                    params: view.trial(c.number)?.params.clone(),
                    points: c.points.clone(),
                })
            })
            .collect();
        sampler.propose(&ProposalContext {
            space: &study.space,
            goal: study.objective.goal,
            goals: &goals,
            constraints: &study.constraints,
            number,
            history: view.history(),
            prior,
            running: &running,
            parallel,
            curves: &curves,
        })
    }
}

/// The learning curves of the study's trials where its sampler models them
/// ([`reads_curves`]); none otherwise.
pub(crate) async fn read_curves(
    study: &Study,
    storage: &Storage,
    study_id: i64,
) -> Result<Vec<Curve>, StorageError> {
    match reads_curves(study) {
        true => storage.curves(study_id, &study.objective.metric).await,
        false => Ok(Vec::new()),
    }
}

/// The user's next request to stop; `None` when the sender is gone.
async fn next_request(interrupt: &mut Option<watch::Receiver<StopRequest>>) -> Option<StopRequest> {
    let interrupt = interrupt.as_mut()?;
    interrupt.changed().await.ok()?;
    Some(*interrupt.borrow())
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
            ..Progress::of(
                self.study,
                &self.view,
                self.plan.budget.max_trial_count,
                &self.best,
            )
        }
    }
}
