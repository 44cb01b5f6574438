//! The workers of a run: launching a trial's worker, recording what it reports as it comes,
//! applying the early-stopping rule to its curve, and settling how it ended (a result, a
//! failure, or another attempt).

use std::path::PathBuf;

use tokio::sync::watch;
use tokio::task::{self, JoinError};

use super::liveness::{attempt_began, running_for};
use super::verdict::{Verdict, curve, trial_end, verdict_on};
use super::{ControllerError, Run, RunEvent, RunObserver, Running};
use crate::executor::{
    FolderOwner, ModelFolder, Start, StopRequest, TrialJob, WorkerEnd, WorkerEvent, WorkerOutcome,
};
use crate::gpus::Lease;
use crate::protocol::{AttemptFiles, Checkpoints, Measurement, command_line, worker_env};
use crate::storage::{NextAttempt, StorageError, TrialRecord, TrialState};
use crate::study::ExecutorSpec;

impl Run<'_> {
    /// Starts the trial's worker (on the devices of `lease`), or adopts it when the trial was
    /// taken over from a controller that is gone (`recovered` holds what that controller had
    /// recorded).
    pub(super) fn launch(
        &mut self,
        mut trial: TrialRecord,
        recovered: Option<Vec<Measurement>>,
        lease: Option<Lease>,
        observer: &mut dyn RunObserver,
    ) {
        let start = match (&recovered, &trial.worker) {
            (None, _) => Start::Fresh,
            (Some(_), Some(handle)) => Start::Adopt(handle.clone()),
            (Some(_), None) => Start::Recover {
                since: attempt_began(&trial),
            },
        };
        let reported = recovered.unwrap_or_default();
        let job = self.job(&trial, start, reported.clone(), lease.as_ref());
        trial.log_path = Some(job.log_path.display().to_string());
        // A trial taken over keeps the folder recorded when its worker started.
        if trial.artifact_dir.is_none() {
            trial.artifact_dir = job
                .output_dir
                .as_ref()
                .map(|folder| folder.path.display().to_string());
        }
        observer.observe(RunEvent::TrialStarted { trial: &trial }, &self.progress());
        let (stop, stop_rx) = watch::channel(StopRequest::Run);
        let executor = self.executor.clone();
        let events = self.events_tx.clone();
        let task = self
            .workers
            .spawn(async move { executor.run(job, events, stop_rx).await });
        self.tasks.insert(task.id(), trial.id);
        self.running.insert(
            trial.id,
            Running {
                trial,
                stop,
                measurements: reported,
                unsaved: Vec::new(),
                lease,
            },
        );
    }

    fn job(
        &self,
        trial: &TrialRecord,
        start: Start,
        reported: Vec<Measurement>,
        lease: Option<&Lease>,
    ) -> TrialJob {
        let study = self.study;
        let files = AttemptFiles::in_dir(
            &self.plan.log_dir.join(&study.name),
            trial.number,
            trial.attempt,
        );
        // A remote worker saves where its engine says; a local one, or a Slurm one on the
        // shared filesystem, in its attempt's folder.
        let path = match (&study.trial.executor, &trial.artifact_dir) {
            (ExecutorSpec::Local | ExecutorSpec::Slurm(_), Some(recorded)) => {
                Some(PathBuf::from(recorded))
            }
            (ExecutorSpec::Local | ExecutorSpec::Slurm(_), None) => Some(
                self.plan
                    .artifacts
                    .attempt_dir(&study.name, trial.number, trial.attempt),
            ),
            _ => None,
        };
        // Beside it, its checkpoints; a remote job's are its engine's.
        let checkpoints = path.is_some().then(|| {
            Checkpoints::of_attempt(
                &self.plan.artifacts.dir,
                &study.name,
                trial.number,
                trial.attempt,
            )
        });
        let output_dir = path.map(|path| ModelFolder {
            path,
            owner: FolderOwner {
                study: self.study_mark.clone(),
                trial: trial.number,
                attempt: trial.attempt,
            },
        });
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
            env: worker_env(
                &study.trial,
                &study.name,
                trial.number,
                trial.attempt,
                &files.metrics,
                output_dir.as_ref().map(|folder| folder.path.as_path()),
                lease,
            ),
            output_dir,
            checkpoints,
            log_path: files.log,
            metrics_path: files.metrics,
            timeout: study
                .trial
                .timeout
                .map(|limit| limit.saturating_sub(running_for(trial))),
            grace_period: study.trial.grace_period,
            metric: study.objective.metric.clone(),
            params: trial.params.clone(),
            attempt: trial.attempt,
            start,
            reported,
            gpu_locks: lease.map(Lease::lock_fds).unwrap_or_default(),
        }
    }

    /// Records what a worker reported. `ended` is the trial whose worker has just ended: its
    /// measurements are kept to be written with its end.
    pub(super) async fn record(
        &mut self,
        event: WorkerEvent,
        ended: Option<i64>,
    ) -> Result<(), StorageError> {
        match event {
            WorkerEvent::Started {
                trial_id,
                handle,
                model,
                resumed_from,
            } => {
                if let Some(r) = self.running.get_mut(&trial_id) {
                    if let Some(dir) = resumed_from {
                        self.storage.set_resumed_from(&r.trial, &dir).await?;
                    }
                    r.trial.worker = Some(handle);
                    if model.is_some() {
                        r.trial.artifact_dir = model;
                    }
                    // At once, so that `hptune trials` shows the worker while it runs (and a
                    // remote job is never submitted again); the end of a worker that has
                    // ended already carries its handle.
                    if ended != Some(trial_id) {
                        self.storage.set_worker(&r.trial).await?;
                    }
                }
            }
            WorkerEvent::Measured {
                trial_id,
                measurement,
                stored,
            } => {
                let Some(r) = self.running.get_mut(&trial_id) else {
                    return Ok(());
                };
                let ending = ended == Some(trial_id);
                if ending && !stored {
                    r.unsaved.push(measurement.clone());
                } else if !stored {
                    self.storage
                        .record_measurement(&r.trial, &measurement)
                        .await?;
                }
                let judge_now = !ending
                    && measurement.step.is_some()
                    && measurement.metric == self.study.objective.metric;
                r.measurements.push(measurement);
                if judge_now {
                    self.apply_stopping_rule(trial_id).await?;
                }
            }
        }
        Ok(())
    }

    /// Asks the study's early-stopping rule about a trial that reported a step, and stops
    /// its worker if the rule says so.
    async fn apply_stopping_rule(&mut self, trial_id: i64) -> Result<(), StorageError> {
        let Some(rule) = self.study.early_stopping else {
            return Ok(());
        };
        if self.early_stops.contains_key(&trial_id) {
            return Ok(());
        }
        let Some(r) = self.running.get(&trial_id) else {
            return Ok(());
        };
        let metric = &self.study.objective.metric;
        let curve = curve(r.trial.number, &r.measurements, metric);
        // The rule reads the other trials' curves from the database: the ends not written
        // yet go first, so that a trial that has just ended counts as finished.
        self.storage.finish_trials(&mut self.ends).await?;
        let others = self.storage.curves(self.study_id, metric).await?;
        if let Some(reason) = rule.judge(self.study.objective.goal, &curve, &others) {
            let _ = r.stop.send(StopRequest::Gracefully);
            self.early_stops.insert(trial_id, reason);
        }
        Ok(())
    }

    /// What the task watching a worker returned, its trial's id found when the task failed.
    pub(super) fn outcome(
        &mut self,
        joined: Result<(task::Id, WorkerOutcome), JoinError>,
    ) -> WorkerOutcome {
        match joined {
            Ok((id, outcome)) => {
                self.tasks.remove(&id);
                outcome
            }
            Err(e) => WorkerOutcome::new(
                self.tasks.remove(&e.id()).unwrap_or_default(),
                WorkerEnd::LaunchFailed(format!("the task watching the worker failed: {e}")),
            ),
        }
    }

    /// Judges how a worker ended: retries the trial, or records its end.
    pub(super) async fn settle(
        &mut self,
        outcome: WorkerOutcome,
        interrupted: bool,
        observer: &mut dyn RunObserver,
    ) -> Result<(), ControllerError> {
        let Some(mut done) = self.running.remove(&outcome.trial_id) else {
            return Ok(());
        };
        // The worker has ended: its devices are free (a retry leases them again).
        self.release(done.lease.take());
        let early_stop = self.early_stops.remove(&outcome.trial_id);
        let (state, value, error) = match verdict_on(
            self.study,
            &done.measurements,
            &outcome,
            early_stop,
            interrupted,
        ) {
            Verdict::Final(state, value, error) => (state, value, error),
            Verdict::Interrupted(reason) => {
                let trial = self
                    .storage
                    .retry(&done.trial, &reason, &done.unsaved, NextAttempt::Later)
                    .await?;
                self.view.update(trial.clone());
                observer.observe(
                    RunEvent::TrialInterrupted { trial: &trial },
                    &self.progress(),
                );
                return Ok(());
            }
            Verdict::Retry(reason) if done.trial.attempt <= self.plan.max_retries => {
                let trial = self
                    .storage
                    .retry(&done.trial, &reason, &done.unsaved, NextAttempt::Now)
                    .await?;
                observer.observe(
                    RunEvent::TrialRetried {
                        trial: &trial,
                        reason: &reason,
                    },
                    &self.progress(),
                );
                self.start(trial, None, observer).await?;
                return Ok(());
            }
            Verdict::Retry(reason) => (
                TrialState::Failed,
                None,
                Some(format!(
                    "{reason}; no retry left (max_retries {})",
                    self.plan.max_retries
                )),
            ),
        };
        // Written with the next claim, or before the loop waits (see `run`).
        let end = trial_end(
            self.study,
            done.trial,
            (state, value, error),
            &done.measurements,
            done.unsaved,
        );
        self.view.update(end.trial.clone());
        observer.observe(
            RunEvent::TrialFinished { trial: &end.trial },
            &self.progress(),
        );
        self.ends.push(end);
        Ok(())
    }
}
