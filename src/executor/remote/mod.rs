//! Trial workers as jobs that report through the database, whatever the engine: the cloud
//! engines', and Slurm's with `report: database` (`slurm/relayed.rs`).
//!
//! Each trial attempt is one job whose container runs `hptune relay ... -- <the worker's
//! command line>`. The relay starts the worker in the container as the local executor would,
//! and writes its measurements and heartbeats into the study's PostgreSQL database. This
//! executor submits the job through an [`Engine`], polls the engine for the job's state and
//! the database for the attempt's new measurements, cancels the job when the trial is
//! stopped or times out, and turns what it sees into [`WorkerEvent`]s and a
//! [`WorkerOutcome`].

mod credentials;
mod http;
mod kubernetes;
pub mod relay;
mod sagemaker;
mod vertex;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};

use crate::executor::outage::Outage;
use crate::executor::{
    Executor, LocalExecutor, SlurmEngine, SlurmExecutor, Start, StopRequest, TrialJob, WorkerEnd,
    WorkerEvent, WorkerOutcome,
};
use crate::protocol::{
    Checkpoints, STORAGE_VARIABLE, is_protocol_variable, output_env, relay_command,
};
use crate::storage::{Storage, StorageUrl};
use crate::study::{ExecutorSpec, SlurmReport};
pub(crate) use http::RemoteError;

/// The state of a job as its engine reports it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum JobState {
    /// Accepted, not running yet.
    Queued,
    /// Running.
    Running,
    /// Its container exited 0.
    Succeeded,
    /// It failed; the engine's reason.
    Failed(String),
    /// Its machine was taken away; the engine's reason.
    Preempted(String),
    /// It was cancelled by someone other than this controller.
    Cancelled(String),
    /// The engine no longer knows it (a Kubernetes Job deleted after its TTL, or by hand):
    /// how it ended is lost, and the trial is judged by what its relay recorded.
    Gone,
}

/// What a job runs: the container's command line and environment, and a name for it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Container {
    /// A name for the job, unique enough for the engines that need one.
    pub name: String,
    /// `hptune relay ... -- <worker argv>`.
    pub command: Vec<String>,
    /// The study file's `trial.env`.
    pub env: Vec<(String, String)>,
    /// The storage URL, password included: `HPTUNE_STORAGE` of an engine that takes no
    /// reference to a secret (or of a study that names none).
    pub storage_url: String,
    /// Where the engine keeps the job's model ([`ModelOutput::location`]).
    pub model: Option<String>,
}

/// Where a job's worker saves its model.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ModelOutput {
    /// Where the engine keeps the model, as its users name it (`gs://...`, `s3://...`,
    /// `pvc://...`): recorded with the attempt, printed by `hptune best --artifact`.
    pub location: String,
    /// The variables that tell the worker in the container where to write it.
    pub env: Vec<(String, String)>,
}

impl ModelOutput {
    /// Both of the protocol's output variables naming `dir`, a folder inside the container.
    pub(crate) fn in_container(location: String, dir: &str) -> Self {
        Self {
            location,
            env: output_env(dir),
        }
    }
}

impl Container {
    /// The environment with `HPTUNE_STORAGE` holding the storage URL itself.
    pub(super) fn env_with_storage_url(&self) -> impl Iterator<Item = (&str, &str)> {
        self.env
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .chain([(STORAGE_VARIABLE, self.storage_url.as_str())])
    }

    /// The environment as `[{"name": ..., "value": ...}]`, as Vertex and Kubernetes take it,
    /// ending with `storage`, the entry of `HPTUNE_STORAGE`.
    pub(super) fn env_entries(&self, storage: serde_json::Value) -> Vec<serde_json::Value> {
        self.env
            .iter()
            .map(|(name, value)| serde_json::json!({"name": name, "value": value}))
            .chain([storage])
            .collect()
    }

    /// The entry of `HPTUNE_STORAGE` holding the storage URL itself.
    pub(super) fn storage_url_entry(&self) -> serde_json::Value {
        serde_json::json!({"name": STORAGE_VARIABLE, "value": self.storage_url})
    }
}

/// One engine's API: submit, look at, and cancel a job.
#[async_trait]
pub(super) trait Engine: Send + Sync {
    /// Submits the job of a trial attempt; returns its handle (the engine's name of the job).
    async fn submit(&self, job: &TrialJob, container: &Container) -> Result<String, RemoteError>;
    /// The job's state now.
    async fn state(&self, handle: &str) -> Result<JobState, RemoteError>;
    /// Asks the engine to stop the job (and delete it, where that is how jobs stop).
    async fn cancel(&self, handle: &str) -> Result<(), RemoteError>;
    /// Where the job named `name` of `job` saves its model; `None` when the study gives
    /// the engine no place for models.
    fn model_output(&self, job: &TrialJob, name: &str) -> Option<ModelOutput>;
    /// Where the job of `job` writes its checkpoints and may resume from, as the job sees
    /// them; `None` when the study gives the engine no place for them.
    fn checkpoints(&self, job: &TrialJob) -> Option<Checkpoints>;
}

/// Runs trials as jobs of an [`Engine`], their measurements relayed through the database.
pub(crate) struct RemoteExecutor {
    engine: Box<dyn Engine>,
    storage: Storage,
    storage_url: String,
    poll_interval: Duration,
    /// How long the engine may fail to answer before a job is given up.
    outage_limit: Duration,
}

/// Checks that the jobs of an executor that report through the database can reach it:
/// PostgreSQL, not a SQLite file on the controller's machine. Local workers, and Slurm jobs
/// that report through files, are read by the controller and need no storage of their own.
pub(crate) fn check_storage(executor: &ExecutorSpec, url: &StorageUrl) -> Result<(), String> {
    if matches!(url, StorageUrl::Postgres(_)) {
        return Ok(());
    }
    let needs =
        "a PostgreSQL storage that its jobs can reach (--storage postgres://... or HPTUNE_STORAGE)";
    match executor {
        ExecutorSpec::Local => Ok(()),
        ExecutorSpec::Slurm(spec) => match spec.report {
            SlurmReport::Files => Ok(()),
            SlurmReport::Database => Err(format!(
                "trial.executor.report: database needs {needs}; {url} is a file on this machine (report: files reads the jobs' output through the filesystem the cluster shares, and works with it)"
            )),
        },
        _ => Err(format!(
            "trial.executor.kind: the {} executor needs {needs}; {url} is a file on this machine",
            executor.kind().as_str()
        )),
    }
}

/// The executor of a study: local processes, Slurm jobs (read through files, or relayed
/// through the database), or jobs of the cloud engine its file names (the storage was checked
/// by [`check_storage`]). An error names the field of the study file it is about.
pub(crate) fn for_study(
    executor: &ExecutorSpec,
    storage: &Storage,
    url: &StorageUrl,
) -> Result<Arc<dyn Executor>, String> {
    let remote = |poll_interval: Duration, outage_limit: Duration, engine: Box<dyn Engine>| {
        Arc::new(RemoteExecutor {
            engine,
            storage: storage.clone(),
            storage_url: url.secret_url(),
            poll_interval,
            outage_limit,
        })
    };
    let error = |e: RemoteError| format!("trial.executor: {e}");
    Ok(match executor {
        ExecutorSpec::Local => Arc::new(LocalExecutor),
        ExecutorSpec::Vertex(spec) => remote(
            spec.remote.poll_interval,
            spec.remote.outage_limit,
            Box::new(vertex::Vertex::new(spec).map_err(error)?),
        ),
        ExecutorSpec::Kubernetes(spec) => remote(
            spec.remote.poll_interval,
            spec.remote.outage_limit,
            Box::new(kubernetes::Kubernetes::new(spec).map_err(error)?),
        ),
        ExecutorSpec::SageMaker(spec) => remote(
            spec.remote.poll_interval,
            spec.remote.outage_limit,
            Box::new(sagemaker::SageMaker::new(spec).map_err(error)?),
        ),
        ExecutorSpec::Slurm(spec) => match spec.report {
            SlurmReport::Files => Arc::new(SlurmExecutor::new(spec)?),
            SlurmReport::Database => remote(
                spec.poll_interval,
                spec.outage_limit,
                Box::new(SlurmEngine::new(spec)?),
            ),
        },
    })
}

impl RemoteExecutor {
    /// What the job of `job` runs.
    fn container(&self, job: &TrialJob) -> Container {
        let checkpoints = self.engine.checkpoints(job);
        let command = relay_command(
            &job.study,
            job.number,
            job.attempt,
            &job.metric,
            checkpoints.as_ref(),
            &job.argv,
        );
        let name = job_name(&job.study, job.number, job.attempt);
        let model = self.engine.model_output(job, &name);
        let env = job
            .env
            .iter()
            // The relay sets the protocol's variables itself inside the job; the storage
            // URL goes as the engine decides (`Container::storage_url`).
            .filter(|(k, _)| !is_protocol_variable(k))
            .cloned()
            .chain(model.iter().flat_map(|m| m.env.iter().cloned()))
            .collect();
        Container {
            name,
            command,
            env,
            storage_url: self.storage_url.clone(),
            model: model.map(|m| m.location),
        }
    }

    /// Sends the attempt's measurements recorded since the last call (`seen` of them were
    /// sent before).
    async fn relay_measurements(
        &self,
        job: &TrialJob,
        seen: &mut usize,
        events: &mpsc::UnboundedSender<WorkerEvent>,
    ) {
        match self.storage.measurements(job.trial_id, job.attempt).await {
            Ok(all) => {
                for measurement in all.into_iter().skip(*seen) {
                    *seen += 1;
                    let _ = events.send(WorkerEvent::Measured {
                        trial_id: job.trial_id,
                        measurement,
                        stored: true,
                    });
                }
            }
            Err(e) => tracing::warn!("trial {}: {e}", job.number),
        }
    }

    /// Polls the job until it ends, the deadline passes or the trial is stopped.
    async fn watch(
        &self,
        job: &TrialJob,
        handle: &str,
        events: &mpsc::UnboundedSender<WorkerEvent>,
        mut stop: watch::Receiver<StopRequest>,
    ) -> WorkerEnd {
        let deadline = job.timeout.map(|t| Instant::now() + t);
        let mut poll = tokio::time::interval(self.poll_interval);
        let mut seen = job.reported.len();
        let mut outage = Outage::new(self.outage_limit, self.poll_interval);
        let mut next_ask = Instant::now();
        let mut stop_open = true;
        let end = loop {
            tokio::select! {
                _ = poll.tick() => {
                    self.relay_measurements(job, &mut seen, events).await;
                    if Instant::now() < next_ask {
                        continue;
                    }
                    let state = match self.engine.state(handle).await {
                        Ok(state) => state,
                        // The engine's outage is not the job's: it is asked again, less often
                        // each time; past the limit the job is cancelled and its trial runs
                        // again, as after a preemption.
                        Err(e) => match outage.failed() {
                            Some(wait) => {
                                tracing::warn!("trial {}: job {handle}: {e}", job.number);
                                next_ask = Instant::now() + wait;
                                continue;
                            }
                            None => {
                                self.cancel(job, handle).await;
                                break WorkerEnd::Preempted(outage.given_up(&format!("the engine of job {handle}"), &e.to_string()));
                            }
                        },
                    };
                    outage.answered();
                    match state {
                        JobState::Queued | JobState::Running => {}
                        JobState::Succeeded => break WorkerEnd::Exited(0),
                        JobState::Failed(reason) => break WorkerEnd::JobFailed(reason),
                        JobState::Preempted(reason) => break WorkerEnd::Preempted(reason),
                        JobState::Cancelled(reason) => break WorkerEnd::JobFailed(reason),
                        JobState::Gone => break WorkerEnd::Vanished,
                    }
                }
                _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    self.cancel(job, handle).await;
                    break WorkerEnd::TimedOut(job.timeout.unwrap_or_default());
                }
                changed = stop.changed(), if stop_open => {
                    if changed.is_err() {
                        stop_open = false;
                    } else if *stop.borrow() != StopRequest::Run {
                        self.cancel(job, handle).await;
                        break WorkerEnd::Stopped;
                    }
                }
            }
        };
        self.relay_measurements(job, &mut seen, events).await;
        end
    }

    async fn cancel(&self, job: &TrialJob, handle: &str) {
        if let Err(e) = self.engine.cancel(handle).await {
            tracing::warn!("trial {}: cannot cancel job {handle}: {e}", job.number);
        }
    }
}

#[async_trait]
impl Executor for RemoteExecutor {
    async fn run(
        &self,
        job: TrialJob,
        events: mpsc::UnboundedSender<WorkerEvent>,
        stop: watch::Receiver<StopRequest>,
    ) -> WorkerOutcome {
        let outcome = |end| WorkerOutcome::new(job.trial_id, end);
        // An adopted job's model was recorded with its handle.
        let (handle, model) = match &job.start {
            Start::Adopt(handle) => (handle.clone(), None),
            // A job submitted by a controller that died before it recorded the job's name
            // cannot be found: the attempt is submitted again.
            Start::Fresh | Start::Recover { .. } => {
                let container = self.container(&job);
                match self.engine.submit(&job, &container).await {
                    Ok(handle) => (handle, container.model),
                    Err(e) => {
                        return outcome(WorkerEnd::LaunchFailed(format!(
                            "cannot submit the job: {e}"
                        )));
                    }
                }
            }
        };
        note_where_the_output_is(&job, &handle);
        let _ = events.send(WorkerEvent::Started {
            trial_id: job.trial_id,
            handle: handle.clone(),
            model,
            resumed_from: None,
        });
        let end = self.watch(&job, &handle, &events, stop).await;
        let last_output = match end {
            WorkerEnd::JobFailed(_) => self
                .storage
                .attempt_last_output(job.trial_id, job.attempt)
                .await
                .ok()
                .flatten(),
            _ => None,
        };
        WorkerOutcome {
            last_output,
            ..outcome(end)
        }
    }
}

/// Writes, where a local worker's output would be, where this job's output is instead: the
/// relay copies the worker's output to the job's own, which the engine keeps.
fn note_where_the_output_is(job: &TrialJob, handle: &str) {
    let note = format!(
        "trial {} attempt {} runs as the job {handle}: its output is in the engine's logs of that job\n",
        job.number, job.attempt
    );
    let written = job
        .log_path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&job.log_path, note));
    if let Err(e) = written {
        tracing::warn!("cannot write {}: {e}", job.log_path.display());
    }
}

/// A job name from the study, trial and attempt, with a random suffix (a study of the same
/// name in another database must not collide): lower-case letters, digits and `-`, at most 63
/// characters, starting with a letter, as Kubernetes and SageMaker want.
pub(super) fn job_name(study: &str, number: u64, attempt: u32) -> String {
    let suffix = format!(
        "-{number}-{attempt}-{:05x}",
        rand::random::<u32>() & 0xfffff
    );
    let mut stem: String = study
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    stem.truncate(63 - "hptune-".len() - suffix.len());
    let stem = stem.trim_matches('-');
    format!("hptune-{stem}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_suit_kubernetes_and_sagemaker() {
        let name = job_name(
            "My Study_v2.long-name-that-goes-on-and-on-and-on-and-on",
            12,
            3,
        );
        assert!(name.len() <= 63, "{name}");
        assert!(name.starts_with("hptune-my-study-v2-long"), "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{name}"
        );
        assert!(name.contains("-12-3-"), "{name}");
        assert_ne!(job_name("s", 1, 1), job_name("s", 1, 1));
    }
}
