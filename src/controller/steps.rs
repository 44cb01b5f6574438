//! The steps of a study's loop ([`super::run`]), each over the one [`Phase`] the loop is in:
//! resume what earlier runs left, fill the free slots, write the ends, handle a worker's
//! end, beat the heart, stop when the user asks, adopt before leaving, summarise.

use tokio::sync::mpsc;
use tokio::task::{self, JoinError};

use super::liveness::is_orphan;
use super::{
    ControllerError, Run, RunEvent, RunObserver, RunSummary, StudyEnd, proposer, read_curves,
    reclaim_expired_leases,
};
use crate::executor::{StopRequest, WorkerEvent, WorkerOutcome};
use crate::sampler::Sampler;
use crate::storage::{
    Claim, Enqueue, Holder, Queue, StorageError, StudyRecord, TrialRecord, TrialState,
};

/// Where the loop of a study stands: whether it starts new trials, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// New trials are claimed whenever a slot is free.
    Claiming,
    /// New trials wait for GPUs of the pool that other processes hold.
    WaitingForGpus,
    /// The sampler has nothing left to propose: no new trial starts, the running ones end.
    Exhausted,
    /// `max_failed_trial_count` trials failed: no new trial starts, the running ones end.
    TooManyFailures,
    /// The user asked to stop, with this urgency: the workers are being stopped and their
    /// trials handed back.
    Stopping(StopRequest),
}

impl Phase {
    /// The phase a loop starts in when the user's request is `request`.
    pub(super) fn at_start(request: StopRequest) -> Self {
        match request {
            StopRequest::Run => Phase::Claiming,
            urgent => Phase::Stopping(urgent),
        }
    }

    /// How urgently the user asked to stop (`Run`: not at all).
    pub(super) fn urgency(self) -> StopRequest {
        match self {
            Phase::Stopping(request) => request,
            _ => StopRequest::Run,
        }
    }

    /// Whether the user asked to stop.
    fn is_stopping(self) -> bool {
        matches!(self, Phase::Stopping(_))
    }
}

impl Run<'_> {
    /// Takes up what earlier runs left: enqueues the study file's configurations to run
    /// first (the first time it runs with them), reads the study, keeps the best models, and
    /// adopts the trials of a controller that is gone.
    pub(super) async fn resume(
        &mut self,
        observer: &mut dyn RunObserver,
    ) -> Result<(), ControllerError> {
        if self.plan.queue == Queue::RunFirst {
            self.storage
                .enqueue(self.study_id, &self.study.initial_trials, Enqueue::Initial)
                .await?;
        }
        self.storage.refresh(&mut self.view).await?;
        self.pin_models().await?;
        let adopted = self.take_orphans().await?;
        let finished = self.view.trials().filter(|t| t.state.is_finished()).count();
        if finished > 0 || !adopted.is_empty() {
            observer.observe(
                RunEvent::Resumed {
                    finished,
                    adopted: adopted.len(),
                },
                &self.progress(),
            );
        }
        self.adopt(adopted, observer).await
    }

    /// Fills the free slots: starts the trials waiting for devices that are free now, then
    /// claims new trials (as many as there are free devices for, with GPUs) until the slots
    /// are full or a claim says why no more start. Returns the phase after it.
    pub(super) async fn fill_slots(
        &mut self,
        phase: Phase,
        sampler: &mut dyn Sampler,
        observer: &mut dyn RunObserver,
    ) -> Result<Phase, ControllerError> {
        if phase.is_stopping() {
            return Ok(phase);
        }
        self.start_waiting(observer).await?;
        let was_waiting = phase == Phase::WaitingForGpus;
        let mut phase = match phase {
            Phase::WaitingForGpus => Phase::Claiming,
            other => other,
        };
        let (study, plan) = (self.study, self.plan);
        while phase == Phase::Claiming
            && self.running.len() + self.waiting.len() < plan.parallel_trial_count
        {
            let curves = read_curves(study, self.storage, self.study_id).await?;
            let propose = proposer(
                study,
                &plan.prior,
                plan.parallel_trial_count,
                &mut *sampler,
                &curves,
            );
            let mut slots = plan.parallel_trial_count - self.running.len() - self.waiting.len();
            // With GPUs, as many trials as there are free devices for.
            let mut leases = self.leases(slots)?.into_iter();
            if self.gpus.is_some() {
                slots = leases.len();
                if slots == 0 {
                    if self.blocked_by_others() {
                        phase = Phase::WaitingForGpus;
                    }
                    break;
                }
            }
            let claims = self
                .storage
                .claim_trials(
                    &mut self.view,
                    plan.claim_rules(),
                    Holder::controller(&self.owner),
                    slots,
                    &mut self.ends,
                    propose,
                )
                .await?;
            // A claim that started no trial comes last and says why.
            let all_started = matches!(claims.last(), Some(Claim::Started(_)));
            for claim in claims {
                match claim {
                    Claim::Started(trial) => match leases.next() {
                        Some(lease) => self.launch_on(*trial, None, lease, observer).await?,
                        None => self.launch(*trial, None, None, observer),
                    },
                    Claim::BudgetSpent | Claim::AllLeased => {}
                    Claim::Exhausted => phase = Phase::Exhausted,
                    Claim::TooManyFailures => phase = Phase::TooManyFailures,
                }
            }
            for unused in leases {
                self.release(Some(unused));
            }
            if !all_started {
                break;
            }
        }
        if phase == Phase::WaitingForGpus && !was_waiting {
            observer.observe(RunEvent::WaitingForGpus, &self.progress());
        }
        Ok(phase)
    }

    /// Writes the ends no claim took, before the loop waits or leaves; then the models that
    /// can no longer be among the best go.
    pub(super) async fn write_ends(&mut self) -> Result<(), StorageError> {
        self.storage.finish_trials(&mut self.ends).await?;
        self.prune_artifacts().await
    }

    /// Whether new trials wait for devices: for GPUs that other processes hold, or trials of
    /// this controller for free ones.
    pub(super) fn waits_for_gpus(&self, phase: Phase) -> bool {
        phase == Phase::WaitingForGpus || (!phase.is_stopping() && !self.waiting.is_empty())
    }

    /// Once no worker is left to watch: adopts what a controller that died meanwhile left
    /// running, or, stopped by the user, hands back a trial retried while its workers
    /// stopped. Returns whether there are workers to watch again.
    pub(super) async fn adopt_before_leaving(
        &mut self,
        phase: Phase,
        observer: &mut dyn RunObserver,
    ) -> Result<bool, ControllerError> {
        if phase.is_stopping() {
            self.hand_back_waiting(observer).await?;
            return Ok(false);
        }
        let orphans = self.take_orphans().await?;
        if orphans.is_empty() {
            return Ok(false);
        }
        self.adopt(orphans, observer).await?;
        Ok(true)
    }

    /// Takes the user's `request` to stop, if more urgent than the phase's: stops the
    /// workers and hands back the trials waiting for devices. Returns the phase after it.
    pub(super) async fn stop(
        &mut self,
        request: StopRequest,
        phase: Phase,
        observer: &mut dyn RunObserver,
    ) -> Result<Phase, ControllerError> {
        if request <= phase.urgency() {
            return Ok(phase);
        }
        let now = request == StopRequest::Now;
        observer.observe(RunEvent::Stopping { now }, &self.progress());
        for r in self.running.values() {
            let _ = r.stop.send(request);
        }
        self.hand_back_waiting(observer).await?;
        Ok(Phase::Stopping(request))
    }

    /// Handles a worker's end, `joined`, and every other worker that has ended by now: each
    /// is recorded before the next proposal (trials of equal length end together, and a
    /// proposal made while the others' results wait unread would treat them as still
    /// running), each after the `events` its worker sent before it ended.
    pub(super) async fn handle_ends(
        &mut self,
        joined: Result<(task::Id, WorkerOutcome), JoinError>,
        events: &mut mpsc::UnboundedReceiver<WorkerEvent>,
        phase: Phase,
        observer: &mut dyn RunObserver,
    ) -> Result<(), ControllerError> {
        let mut next = Some(joined);
        while let Some(joined) = next {
            let outcome = self.outcome(joined);
            while let Ok(event) = events.try_recv() {
                self.record(event, Some(outcome.trial_id)).await?;
            }
            self.settle(outcome, phase.is_stopping(), observer).await?;
            next = self.workers.try_join_next_with_id();
        }
        Ok(())
    }

    /// Tells the database that this controller's trials are alive, and adopts the trials of a controller of the study that died meanwhile.
    pub(super) async fn beat(
        &mut self,
        phase: Phase,
        observer: &mut dyn RunObserver,
    ) -> Result<(), ControllerError> {
        // Fewer rows than running workers: another controller took some over while this one
        // was stopped, and watches their workers now.
        if self.storage.heartbeat(&self.owner).await? < self.running.len() as u64 {
            return Err(StorageError::TakenOver.into());
        }
        if !phase.is_stopping() {
            let orphans = self.take_orphans().await?;
            self.adopt(orphans, observer).await?;
        }
        Ok(())
    }

    /// Takes back the trials whose client's lease has ended, then takes over the trials of
    /// controllers that are gone and those handed back.
    async fn take_orphans(&self) -> Result<Vec<TrialRecord>, StorageError> {
        reclaim_expired_leases(self.study, self.storage, self.study_id).await?;
        self.storage
            .adopt_orphans(self.study_id, &self.owner, is_orphan)
            .await
    }

    /// Why the loop ended, in `phase`, and every trial of the study `record`, read again.
    pub(super) async fn summarise(
        mut self,
        record: StudyRecord,
        phase: Phase,
    ) -> Result<RunSummary, ControllerError> {
        self.storage.refresh(&mut self.view).await?;
        let trials: Vec<_> = self.view.trials().cloned().collect();
        let failed = self.progress().failed;
        let end = match phase {
            Phase::Stopping(_) => StudyEnd::Interrupted,
            _ if phase == Phase::TooManyFailures || self.plan.budget.too_many_failures(failed) => {
                StudyEnd::TooManyFailures {
                    failed,
                    last_error: trials
                        .iter()
                        .filter(|t| t.state == TrialState::Failed)
                        .max_by_key(|t| t.finished_at.clone())
                        .and_then(|t| t.error.clone()),
                }
            }
            Phase::Exhausted => StudyEnd::Exhausted,
            _ => StudyEnd::BudgetSpent,
        };
        Ok(RunSummary {
            study: record,
            end,
            trials,
        })
    }
}
