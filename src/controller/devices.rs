//! The loop's part in handing out GPUs (`trial.resources.gpus`): a trial's worker starts only
//! on devices of its own, recorded with its attempt before it starts; a trial taken over from
//! a controller that is gone keeps the devices recorded with it; a trial that finds no free
//! devices waits for them, ahead of new trials; the locks of running trials' devices are
//! checked while they run.

use std::time::Duration;

use super::{ControllerError, Run, RunEvent, RunObserver};
use crate::gpus::Lease;
use crate::protocol::Measurement;
use crate::storage::{NextAttempt, StorageError, TrialRecord, TrialState};

/// How often a controller waiting for GPUs locked by other processes looks again.
pub(super) const GPU_POLL: Duration = Duration::from_secs(1);

/// How often a controller checks that the locks of its running trials' devices still keep
/// other processes off them (their files removed or replaced).
pub(super) const LEASE_CHECK: Duration = Duration::from_secs(1);

/// A trial of this controller whose worker waits for free GPUs.
pub(super) struct Waiting {
    trial: TrialRecord,
    /// What a controller that is gone recorded, for a trial taken over.
    recovered: Option<Vec<Measurement>>,
}

impl Run<'_> {
    /// Starts (or adopts, with `recovered`) the trial's worker: at once without GPUs, or on
    /// the devices a controller that is gone recorded with it, or on free devices recorded
    /// first, or else once devices are free.
    pub(super) async fn start(
        &mut self,
        trial: TrialRecord,
        recovered: Option<Vec<Measurement>>,
        observer: &mut dyn RunObserver,
    ) -> Result<(), ControllerError> {
        let Some(pool) = &mut self.gpus else {
            self.launch(trial, recovered, None, observer);
            return Ok(());
        };
        if recovered.is_some() && !trial.gpus.is_empty() {
            // Recorded before its worker started: the worker may be running on them.
            let lease = pool.keep(&trial.gpus, trial.gpu_slot);
            self.launch(trial, recovered, Some(lease), observer);
            return Ok(());
        }
        match pool.acquire().map_err(ControllerError::Gpus)? {
            Some(lease) => self.launch_on(trial, recovered, lease, observer).await,
            None => {
                self.waiting.push_back(Waiting { trial, recovered });
                Ok(())
            }
        }
    }

    /// Records `lease`'s devices (and slot) with the trial's attempt, then starts its worker on them.
    pub(super) async fn launch_on(
        &mut self,
        mut trial: TrialRecord,
        recovered: Option<Vec<Measurement>>,
        lease: Lease,
        observer: &mut dyn RunObserver,
    ) -> Result<(), ControllerError> {
        let names = lease.names();
        let slot = lease.slot().map(u32::from);
        if let Err(e) = self.storage.set_gpus(&trial, &names, slot).await {
            self.release(Some(lease));
            return Err(e.into());
        }
        trial.gpus = names;
        trial.gpu_slot = slot;
        self.launch(trial, recovered, Some(lease), observer);
        Ok(())
    }

    /// Leases for up to `wanted` new trials, each from devices free now.
    pub(super) fn leases(&mut self, wanted: usize) -> Result<Vec<Lease>, ControllerError> {
        let mut leases = Vec::new();
        if let Some(pool) = &mut self.gpus {
            while leases.len() < wanted {
                match pool.acquire().map_err(ControllerError::Gpus)? {
                    Some(lease) => leases.push(lease),
                    None => break,
                }
            }
        }
        Ok(leases)
    }

    /// Gives a trial's devices back to the pool.
    pub(super) fn release(&mut self, lease: Option<Lease>) {
        if let (Some(pool), Some(lease)) = (&mut self.gpus, lease) {
            pool.release(lease);
        }
    }

    /// Checks the locks of the running trials' devices, taking again those whose files were
    /// removed or replaced.
    pub(super) fn check_leases(&mut self) {
        if let Some(pool) = &self.gpus {
            for lease in self.running.values_mut().filter_map(|r| r.lease.as_mut()) {
                pool.check(lease);
            }
        }
    }

    /// Starts the waiting trials that free devices allow, first come first served.
    pub(super) async fn start_waiting(
        &mut self,
        observer: &mut dyn RunObserver,
    ) -> Result<(), ControllerError> {
        while !self.waiting.is_empty() {
            let Some(lease) = self.leases(1)?.pop() else {
                break;
            };
            let Waiting { trial, recovered } = self.waiting.pop_front().expect("not empty");
            self.launch_on(trial, recovered, lease, observer).await?;
        }
        Ok(())
    }

    /// Hands the waiting trials back when the user stops the study: each waits as `pending`
    /// for the next run, as the trials whose workers were stopped.
    pub(super) async fn hand_back_waiting(
        &mut self,
        observer: &mut dyn RunObserver,
    ) -> Result<(), StorageError> {
        while let Some(Waiting { trial, .. }) = self.waiting.pop_front() {
            let reason = "the study was stopped while the trial waited for GPUs";
            let trial = self
                .storage
                .retry(&trial, reason, &[], NextAttempt::Later)
                .await?;
            self.view.update(trial.clone());
            observer.observe(
                RunEvent::TrialInterrupted { trial: &trial },
                &self.progress(),
            );
        }
        Ok(())
    }

    /// Whether new trials wait for devices that other processes hold: none could be leased,
    /// the study still has trials to run, and this controller's trials leave room for one.
    pub(super) fn blocked_by_others(&self) -> bool {
        let Some(pool) = &self.gpus else {
            return false;
        };
        let view = &self.view;
        let trials: usize = TrialState::ALL.iter().map(|s| view.count(*s)).sum();
        let budget = &self.plan.budget;
        let budget_left = budget.has_room(trials);
        let failures_left = !budget.too_many_failures(view.count(TrialState::Failed));
        budget_left && failures_left && pool.has_room()
    }
}
