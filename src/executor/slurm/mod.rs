//! Trial workers as Slurm jobs: one batch job per trial attempt.
//!
//! The usual HPC cluster shares a filesystem between the machine the controller runs on and
//! the compute nodes, and [`SlurmExecutor`] relies on it (`report: files`): a job's stdout,
//! stderr and metrics file go to the attempt's files in the study's log folder, which the
//! controller reads as it reads a local worker's (`output.rs`), and the job writes its
//! worker's exit status there too. Workers never touch the database, so the default SQLite
//! file works. Where the nodes share no filesystem with the controller (`report: database`),
//! [`SlurmEngine`] makes Slurm an engine of the remote executor instead: the job runs
//! `hptune relay`, which writes the worker's measurements into the study's PostgreSQL
//! database.
//!
//! The job's id is recorded with the attempt before anything else happens; a controller that
//! takes the study over adopts the job by that id, once Slurm says the job of that id is
//! still the one hptune named. A job requeued by Slurm (preempted, its node lost) is
//! cancelled and its trial retried as a new attempt, so that one attempt is one job. While
//! Slurm's controller does not answer, the job is followed through its exit status file and
//! Slurm asked again, less often each time, for the study's `outage_limit`.

mod commands;
mod relayed;
mod script;

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};

use self::commands::{Status, exit_status_file};
use self::script::{JobFiles, job_name, job_script, sbatch_args};
use super::follow::{Worker, follow, hurried};
use super::outage::Outage;
use super::output::{Output, wrote_output};
use super::{
    Executor, Start, StopRequest, TrialJob, WorkerEnd, WorkerEvent, WorkerOutcome, check_program,
};
use crate::protocol::error_log_path;
use crate::study::SlurmSpec;
pub(crate) use relayed::SlurmEngine;

/// How often the exit status file of a running job is looked for.
const EXIT_STATUS_POLL: Duration = Duration::from_millis(200);
/// How often Slurm is asked whether a cancelled job, or one whose worker was killed, has
/// ended.
const ENDING_POLL: Duration = Duration::from_millis(500);
/// How long Slurm is given to end a job whose worker was killed, and say why.
const SLURM_VERDICT: Duration = Duration::from_secs(30);

/// Who does not answer in an outage: the service behind `scontrol`.
const SLURM_CONTROLLER: &str = "Slurm's controller";

/// Runs workers as Slurm jobs on a cluster whose filesystem this machine shares.
#[derive(Debug, Clone)]
pub(crate) struct SlurmExecutor {
    spec: SlurmSpec,
}

impl SlurmExecutor {
    /// An executor for jobs of `spec`, once Slurm's commands are found and the partition
    /// exists.
    pub(crate) fn new(spec: &SlurmSpec) -> Result<Self, String> {
        check_cluster(spec)?;
        Ok(Self { spec: spec.clone() })
    }

    /// Submits the job of `job`: writes its script, then `sbatch`. Returns the job, and the
    /// checkpoint folder its worker resumes from, if any.
    async fn submit(&self, job: &TrialJob) -> Result<(SlurmJob, Option<String>), String> {
        let absolute = |path: &std::path::Path| {
            std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))
        };
        let log_path = absolute(&job.log_path)?;
        let files = JobFiles::of(&log_path);
        if let Some(dir) = log_path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the log directory {}: {e}", dir.display()))?;
        }
        job.create_output_dir()?;
        // Settled here, on the filesystem the cluster shares: the job runs with its result.
        let checkpoints = job.prepare_checkpoints()?;
        let mut job = job.clone();
        job.env.extend(checkpoints.env);
        // The files of an earlier try of this attempt must not be read as this one's.
        for stale in [
            &log_path,
            &error_log_path(&log_path),
            &job.metrics_path,
            &files.exit_status,
        ] {
            let _ = std::fs::remove_file(stale);
        }
        std::fs::write(&files.script, job_script(&job, &files)?).map_err(|e| {
            format!(
                "cannot write the job script {}: {e}",
                files.script.display()
            )
        })?;
        let work_dir = std::env::current_dir()
            .map_err(|e| format!("cannot tell the directory hptune runs in: {e}"))?;
        let args = sbatch_args(&self.spec, &job, Some(&log_path), &files.script, &work_dir)?;
        let id = commands::submit(&args, None).await?;
        let resumed_from = checkpoints
            .resumed_from
            .map(|dir| dir.display().to_string());
        Ok((SlurmJob::new(id, &job, &self.spec), resumed_from))
    }

    /// The job of an attempt that a controller now gone submitted without recording its id:
    /// found by its name and log path; or, when Slurm no longer knows it, the job that ended
    /// unwatched if it wrote its files since the attempt began; or none.
    async fn recover(
        &self,
        job: &TrialJob,
        since: std::time::SystemTime,
    ) -> Result<Option<SlurmJob>, String> {
        let log_path = std::path::absolute(&job.log_path).unwrap_or(job.log_path.clone());
        let script = JobFiles::of(&log_path).script;
        if let Some(id) = commands::find(&job_name(job), &script).await? {
            return Ok(Some(SlurmJob::new(id, job, &self.spec)));
        }
        Ok(wrote_output(job, since).then(|| SlurmJob::ended_unwatched(job, &self.spec)))
    }
}

#[async_trait]
impl Executor for SlurmExecutor {
    async fn run(
        &self,
        job: TrialJob,
        events: mpsc::UnboundedSender<WorkerEvent>,
        stop: watch::Receiver<StopRequest>,
    ) -> WorkerOutcome {
        let found = |job| (job, None);
        let started = match &job.start {
            Start::Adopt(handle) => SlurmJob::adopt(handle, &job, &self.spec).await.map(found),
            Start::Recover { since } => match self.recover(&job, *since).await {
                Ok(Some(job)) => Ok(found(job)),
                Ok(None) => self.submit(&job).await,
                Err(e) => Err(e),
            },
            Start::Fresh => self.submit(&job).await,
        };
        let (mut slurm_job, resumed_from) = match started {
            Ok(slurm_job) => slurm_job,
            Err(message) => {
                return WorkerOutcome::new(job.trial_id, WorkerEnd::LaunchFailed(message));
            }
        };
        if let Some(id) = slurm_job.id {
            let _ = events.send(WorkerEvent::Started {
                trial_id: job.trial_id,
                handle: format!("slurm:{id}"),
                model: None,
                resumed_from,
            });
        }
        let output = Output::new(&job, events);
        follow(&mut slurm_job, output, &job, stop).await
    }
}

/// Checks, before any job is submitted, that Slurm's commands are here and that the cluster
/// has the partition of `spec`; an error names the field of the study file it is about.
fn check_cluster(spec: &SlurmSpec) -> Result<(), String> {
    check_program("sbatch").map_err(|e| {
        format!("trial.executor.kind: the slurm executor submits jobs with sbatch, but {e}: run hptune on a machine of the cluster")
    })?;
    if let Some(partition) = &spec.partition {
        commands::check_partition(partition)
            .map_err(|e| format!("trial.executor.partition: {e}"))?;
    }
    Ok(())
}

/// The id of the Slurm job whose recorded handle is `handle` (`slurm:ID`).
fn job_id(handle: &str) -> Result<u64, String> {
    handle
        .strip_prefix("slurm:")
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| format!("'{handle}' is not the handle of a Slurm job"))
}

/// One attempt's Slurm job, seen from the controller.
struct SlurmJob {
    /// The job's id; `None` for a job that ended unwatched and that Slurm has forgotten.
    id: Option<u64>,
    files: JobFiles,
    poll_interval: Duration,
    /// How long Slurm's controller may fail to answer before the job is given up.
    outage_limit: Duration,
}

impl SlurmJob {
    fn new(id: u64, job: &TrialJob, spec: &SlurmSpec) -> Self {
        Self {
            id: Some(id),
            ..Self::ended_unwatched(job, spec)
        }
    }

    /// The job of `handle`, recorded with the attempt by a controller now gone, once Slurm
    /// says it is still the job hptune named for the attempt: after Slurm has forgotten it,
    /// its id may be another job's, which is neither watched nor cancelled. Slurm's
    /// controller is asked again while it does not answer, for the outage limit.
    async fn adopt(handle: &str, job: &TrialJob, spec: &SlurmSpec) -> Result<Self, String> {
        let id = job_id(handle)?;
        let mut outage = Outage::new(spec.outage_limit, spec.poll_interval);
        let shown = loop {
            match commands::show_job(id).await {
                Ok(shown) => break shown,
                Err(e) => match outage.failed() {
                    Some(wait) => {
                        tracing::warn!("Slurm job {id}: {e}");
                        tokio::time::sleep(wait).await;
                    }
                    None => return Err(outage.given_up(SLURM_CONTROLLER, &e)),
                },
            }
        };
        let name = job_name(job);
        match shown {
            Some(shown) if !shown.is(&name) => {
                tracing::warn!(
                    "the Slurm job {id} is now '{}' of {}, not hptune's {name}: the attempt is judged by its files",
                    shown.field("JobName"),
                    shown.field("UserId"),
                );
                Ok(Self::ended_unwatched(job, spec))
            }
            _ => Ok(Self::new(id, job, spec)),
        }
    }

    /// The job of an attempt that ended while no controller watched it, and that Slurm no
    /// longer knows: it is judged by the files it wrote.
    fn ended_unwatched(job: &TrialJob, spec: &SlurmSpec) -> Self {
        Self {
            id: None,
            files: JobFiles::of(&job.log_path),
            poll_interval: spec.poll_interval,
            outage_limit: spec.outage_limit,
        }
    }

    /// Cancels the job (`now`: SIGKILL at once), saying why it could not be.
    async fn cancel(&self, now: bool) {
        if let Some(id) = self.id
            && let Err(e) = commands::cancel(id, now).await
        {
            tracing::warn!("cannot cancel the Slurm job {id}: {e}");
        }
    }
}

impl SlurmJob {
    /// Asks Slurm how job `id` is every `interval` until it has ended; a job Slurm requeued
    /// is cancelled and taken as preempted. While Slurm's controller does not answer, it is
    /// asked again, less often each time; past the outage limit, the job is cancelled and
    /// taken as preempted: its trial runs again, the outage not counted against it.
    async fn poll_slurm(&self, id: u64, interval: Duration) -> WorkerEnd {
        let mut outage = Outage::new(self.outage_limit, interval);
        loop {
            let wait = match commands::status(id, Some(&self.files.exit_status)).await {
                Ok(Status::Active | Status::Pending(_)) => {
                    outage.answered();
                    interval
                }
                Ok(Status::Ended(end)) => return end,
                Ok(Status::Requeued(reason)) => return self.requeued(reason).await,
                Err(e) => {
                    tracing::warn!("Slurm job {id}: {e}");
                    match outage.failed() {
                        Some(wait) => wait,
                        None => {
                            self.cancel(false).await;
                            return WorkerEnd::Preempted(outage.given_up(SLURM_CONTROLLER, &e));
                        }
                    }
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Cancels a job that Slurm requeued: run again, it would write over this attempt's
    /// files. The trial runs again as a new attempt instead, as after a preemption.
    async fn requeued(&self, reason: String) -> WorkerEnd {
        self.cancel(false).await;
        WorkerEnd::Preempted(reason)
    }

    /// Waits for the exit status the job script writes when the worker ends: on the shared
    /// filesystem, it is seen long before Slurm's next poll says the job has ended.
    async fn exit_status(&self) -> WorkerEnd {
        loop {
            if let Some(end) = exit_status_file(&self.files.exit_status) {
                return end;
            }
            tokio::time::sleep(EXIT_STATUS_POLL).await;
        }
    }
}

#[async_trait]
impl Worker for SlurmJob {
    /// The worker's end, from its exit status file or from Slurm, whichever says it first.
    async fn wait(&mut self) -> WorkerEnd {
        let Some(id) = self.id else {
            return exit_status_file(&self.files.exit_status).unwrap_or(WorkerEnd::Vanished);
        };
        tokio::select! {
            end = self.exit_status() => match end {
                // Killed by Slurm itself (its memory limit, a preemption, a requeue, its time
                // limit, someone's scancel) or by anyone else: Slurm says which once the job
                // has ended, and its reason is the one that counts.
                WorkerEnd::Killed(_) => {
                    match tokio::time::timeout(SLURM_VERDICT, self.poll_slurm(id, ENDING_POLL)).await {
                        Ok(slurm @ (WorkerEnd::JobFailed(_) | WorkerEnd::Preempted(_))) => slurm,
                        _ => end,
                    }
                }
                // A worker that ended by itself while Slurm requeued its job (one that caught
                // the signal) ends as the requeue says.
                _ => match commands::status(id, Some(&self.files.exit_status)).await {
                    Ok(Status::Requeued(reason)) => self.requeued(reason).await,
                    _ => end,
                },
            },
            end = self.poll_slurm(id, self.poll_interval) => end,
        }
    }

    /// Slurm's reason for holding the job, where it is still pending.
    async fn never_started(&mut self) -> Option<String> {
        match commands::status(self.id?, None).await {
            Ok(Status::Pending(reason)) => Some(format!("Slurm kept its job pending ({reason})")),
            _ => None,
        }
    }

    /// `scancel` (Slurm sends SIGTERM, then SIGKILL after the cluster's `KillWait`); if the
    /// job is still there after the grace period, or the controller asks for the stop to
    /// happen now, SIGKILL through `scancel` too. Returns once Slurm says the job has ended
    /// (so that it is gone when the trial's end is recorded), or after a further grace
    /// period.
    async fn terminate(&mut self, grace: Duration, stop: &mut watch::Receiver<StopRequest>) {
        let Some(id) = self.id else {
            return;
        };
        let now = *stop.borrow() == StopRequest::Now;
        self.cancel(false).await;
        if !now {
            tokio::select! {
                ended = tokio::time::timeout(grace, self.poll_slurm(id, ENDING_POLL)) => {
                    if ended.is_ok() {
                        return;
                    }
                }
                _ = hurried(stop) => {}
            }
        }
        self.cancel(true).await;
        let _ = tokio::time::timeout(grace, self.poll_slurm(id, ENDING_POLL)).await;
    }
}
