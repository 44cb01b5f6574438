//! Slurm as an [`Engine`] of the remote executor: for a study whose Slurm jobs report through
//! the database (`report: database`), where the compute nodes do not share a filesystem with
//! the controller. Each job runs `hptune relay ... -- <worker argv>` as a cloud job's
//! container does; the remote executor polls Slurm through this engine, and the database for
//! the measurements the relay writes.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::commands::{self, Status};
use super::script::{JobFiles, relay_script, sbatch_args};
use super::{check_cluster, job_id};
use crate::executor::remote::{Container, Engine, JobState, ModelOutput, RemoteError};
use crate::executor::{TrialJob, WorkerEnd};
use crate::protocol::Checkpoints;
use crate::study::SlurmSpec;

/// Submits, watches and cancels the Slurm jobs of trials that report through the database.
#[derive(Debug, Clone)]
pub(crate) struct SlurmEngine {
    spec: SlurmSpec,
}

impl SlurmEngine {
    /// An engine for jobs of `spec`, once Slurm's commands are found and the partition exists.
    pub(crate) fn new(spec: &SlurmSpec) -> Result<Self, String> {
        check_cluster(spec)?;
        Ok(Self { spec: spec.clone() })
    }
}

#[async_trait]
impl Engine for SlurmEngine {
    /// Writes the job's script beside the attempt's log (`sbatch` reads it on this machine
    /// and keeps a copy), then submits it; the job's output goes to its node's `/tmp`.
    async fn submit(&self, job: &TrialJob, container: &Container) -> Result<String, RemoteError> {
        let failed = |e: String| RemoteError::Command(e);
        let script = std::path::absolute(JobFiles::of(&job.log_path).script)
            .map_err(|e| failed(format!("{}: {e}", job.log_path.display())))?;
        if let Some(dir) = script.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                failed(format!(
                    "cannot create the log directory {}: {e}",
                    dir.display()
                ))
            })?;
        }
        let text = relay_script(job, &container.command, &container.env).map_err(failed)?;
        std::fs::write(&script, text).map_err(|e| {
            failed(format!(
                "cannot write the job script {}: {e}",
                script.display()
            ))
        })?;
        let work_dir = std::env::current_dir()
            .map_err(|e| failed(format!("cannot tell the directory hptune runs in: {e}")))?;
        let args = sbatch_args(&self.spec, job, None, &script, &work_dir).map_err(failed)?;
        let id = commands::submit(&args, Some(&container.storage_url))
            .await
            .map_err(failed)?;
        Ok(format!("slurm:{id}"))
    }

    /// The job's state from Slurm. A job Slurm requeued is cancelled and taken as preempted:
    /// its attempt is over, and the trial runs again as a new one.
    async fn state(&self, handle: &str) -> Result<JobState, RemoteError> {
        let id = job_id(handle).map_err(RemoteError::Command)?;
        let status = commands::status(id, None::<&Path>)
            .await
            .map_err(RemoteError::Command)?;
        Ok(match status {
            Status::Pending(_) => JobState::Queued,
            Status::Active => JobState::Running,
            Status::Requeued(reason) => {
                self.cancel(handle).await?;
                JobState::Preempted(reason)
            }
            Status::Ended(end) => job_state(end),
        })
    }

    async fn cancel(&self, handle: &str) -> Result<(), RemoteError> {
        let id = job_id(handle).map_err(RemoteError::Command)?;
        commands::cancel(id, false)
            .await
            .map_err(RemoteError::Command)
    }

    /// The attempt's model folder as an absolute path, so that a job on a node without the
    /// controller's working directory still writes it where the study's artifacts dir says
    /// (a filesystem the compute nodes share, e.g. the cluster's scratch).
    fn model_output(&self, job: &TrialJob, _name: &str) -> Option<ModelOutput> {
        let dir = std::path::absolute(&job.output_dir.as_ref()?.path).ok()?;
        let dir = dir.display().to_string();
        Some(ModelOutput::in_container(dir.clone(), &dir))
    }

    /// The attempt's checkpoint folders as absolute paths, on the filesystem the cluster
    /// shares, as its model folder.
    fn checkpoints(&self, job: &TrialJob) -> Option<Checkpoints> {
        let checkpoints = job.checkpoints.as_ref()?;
        let absolute = |dir: &PathBuf| std::path::absolute(dir).ok();
        Some(Checkpoints {
            dir: absolute(&checkpoints.dir)?,
            resume_from: checkpoints
                .resume_from
                .iter()
                .map(absolute)
                .collect::<Option<_>>()?,
        })
    }
}

/// The state of a job that ended this way; the relay's exit code is its worker's.
fn job_state(end: WorkerEnd) -> JobState {
    match end {
        WorkerEnd::Exited(0) => JobState::Succeeded,
        WorkerEnd::Exited(code) => JobState::Failed(format!("the job exited with code {code}")),
        // Killed from outside (SIGKILL of a cgroup's memory limit, a node going down): retried,
        // as a worker that reports through files would be.
        ref killed @ WorkerEnd::Killed(ref signal) => {
            let reason = format!("the job was killed by {signal}");
            match killed.is_infrastructure_failure() {
                true => JobState::Preempted(reason),
                false => JobState::Failed(reason),
            }
        }
        WorkerEnd::Preempted(reason) => JobState::Preempted(reason),
        WorkerEnd::JobFailed(reason) => JobState::Failed(reason),
        WorkerEnd::Vanished => JobState::Gone,
        other => JobState::Failed(format!("the job ended unexpectedly: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_end_of_a_job_is_a_state_of_the_remote_executor() {
        assert_eq!(job_state(WorkerEnd::Exited(0)), JobState::Succeeded);
        assert_eq!(
            job_state(WorkerEnd::Exited(3)),
            JobState::Failed("the job exited with code 3".into())
        );
        assert_eq!(
            job_state(WorkerEnd::killed_by(9)),
            JobState::Preempted("the job was killed by SIGKILL".into())
        );
        assert_eq!(
            job_state(WorkerEnd::killed_by(11)),
            JobState::Failed("the job was killed by SIGSEGV".into())
        );
        assert_eq!(
            job_state(WorkerEnd::JobFailed("it ran out of memory".into())),
            JobState::Failed("it ran out of memory".into())
        );
        assert_eq!(
            job_state(WorkerEnd::Preempted("its node failed".into())),
            JobState::Preempted("its node failed".into())
        );
        assert_eq!(job_state(WorkerEnd::Vanished), JobState::Gone);
    }
}
