//! Trial workers as local processes.
//!
//! A worker is started from an argv (never a shell string) in a process group of its own, so
//! that a terminal's Ctrl-C reaches the controller only and stopping a worker reaches
//! whatever it started. Its stdout and stderr go straight to files, not through the
//! controller: a worker outlives a controller that is killed, and the next controller adopts
//! it by its pid and start time and goes on reading its files. The stdout file and the metrics
//! file are read for measurements as they grow (`output.rs`).

use std::fs::File;
use std::os::fd::RawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

use super::follow::{Worker, follow, hurried};
use super::output::{Output, wrote_output};
use super::process::{ProcessId, find_by_environment};
use super::{Executor, Start, StopRequest, TrialJob, WorkerEnd, WorkerEvent, WorkerOutcome};
use crate::protocol::{
    CHECKPOINT_DIR_VARIABLE, GPU_MEMORY_VARIABLE, GPUS_VARIABLE, PROTOCOL_VARIABLES,
    RESUME_FROM_VARIABLE, STORAGE_VARIABLE, error_log_path,
};

/// How often an adopted worker is looked at.
const POLL: Duration = Duration::from_millis(200);

/// Runs workers as local processes.
#[derive(Debug, Clone, Default)]
pub(crate) struct LocalExecutor;

#[async_trait]
impl Executor for LocalExecutor {
    async fn run(
        &self,
        job: TrialJob,
        events: mpsc::UnboundedSender<WorkerEvent>,
        stop: watch::Receiver<StopRequest>,
    ) -> WorkerOutcome {
        let trial_id = job.trial_id;
        let started = match &job.start {
            Start::Adopt(handle) => LocalWorker::adopt(handle),
            Start::Recover { since } => match unrecorded_worker(&job) {
                Some(handle) => LocalWorker::adopt(&handle),
                None if wrote_output(&job, *since) => Ok(LocalWorker::ended_unwatched()),
                None => LocalWorker::start(&job),
            },
            Start::Fresh => LocalWorker::start(&job),
        };
        match started {
            Ok(mut worker) => {
                if let Some(id) = worker.id {
                    let _ = events.send(WorkerEvent::Started {
                        trial_id,
                        handle: format!("pid:{id}"),
                        model: None,
                        resumed_from: worker.resumed_from.take(),
                    });
                }
                let output = Output::new(&job, events);
                follow(&mut worker, output, &job, stop).await
            }
            Err(message) => WorkerOutcome::new(trial_id, WorkerEnd::LaunchFailed(message)),
        }
    }
}

/// The process a worker is: our child, one adopted from a controller that is gone, or one
/// that a controller now gone started and that ended while no controller watched it.
enum Process {
    Child(Child),
    Adopted(ProcessId),
    EndedUnwatched,
}

/// A worker process.
struct LocalWorker {
    process: Process,
    /// The leader of the worker's process group; `None` once it is known to be gone.
    id: Option<ProcessId>,
    /// The checkpoint folder the worker was started to resume from (`HPTUNE_RESUME_FROM`);
    /// `None` for a worker that starts afresh, or that was not started here.
    resumed_from: Option<String>,
}

impl LocalWorker {
    fn start(job: &TrialJob) -> Result<Self, String> {
        if let Some(dir) = job.log_path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the log directory {}: {e}", dir.display()))?;
        }
        job.create_output_dir()?;
        let checkpoints = job.prepare_checkpoints()?;
        // A metrics file left by an earlier attempt must not be read as this one's.
        let _ = std::fs::remove_file(&job.metrics_path);
        let create = |path: &Path| {
            File::create(path)
                .map_err(|e| format!("cannot create the log file {}: {e}", path.display()))
        };
        let stdout = create(&job.log_path)?;
        let stderr = create(&error_log_path(&job.log_path))?;
        let (program, args) = job
            .argv
            .split_first()
            .ok_or_else(|| "the command is empty".to_string())?;
        let mut command = Command::new(program);
        command
            .args(args)
            // The controller's pool is not the worker's devices: a trial with GPUs gets its
            // own below (job.env), a trial without gets none; nor the controller's cap.
            .env_remove(GPUS_VARIABLE)
            .env_remove(GPU_MEMORY_VARIABLE)
            // Nor the checkpoints of the controller's own attempt, when it runs in one (a
            // relay's): a worker resumes only from what its own attempt is given.
            .env_remove(CHECKPOINT_DIR_VARIABLE)
            .env_remove(RESUME_FROM_VARIABLE)
            .envs(job.env.iter().chain(&checkpoints.env).map(|(k, v)| (k, v)))
            // The database URL may hold a password, and workers never write the database.
            .env_remove(STORAGE_VARIABLE)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        if !job.gpu_locks.is_empty() {
            let locks = job.gpu_locks.clone();
            // SAFETY: the closure runs in the child between fork and exec, and only calls
            // fcntl, which is async-signal-safe, on descriptors the controller holds open
            // until the worker has ended; it allocates nothing.
            unsafe {
                command.pre_exec(move || inherit(&locks));
            }
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start '{program}': {e}"))?;
        let pid = child
            .id()
            .ok_or("the worker exited before it could be watched")? as i32;
        let id = ProcessId::of(pid).unwrap_or(ProcessId { pid, start: 0 });
        Ok(Self {
            process: Process::Child(child),
            id: Some(id),
            resumed_from: checkpoints
                .resumed_from
                .map(|dir| dir.display().to_string()),
        })
    }

    fn adopt(handle: &str) -> Result<Self, String> {
        let id = handle
            .strip_prefix("pid:")
            .and_then(ProcessId::parse)
            .ok_or_else(|| format!("'{handle}' is not the handle of a local worker"))?;
        Ok(Self {
            process: Process::Adopted(id),
            id: Some(id),
            resumed_from: None,
        })
    }

    /// The worker of an attempt that a controller now gone started, and that ended before
    /// another controller could watch it: it is judged by the files it wrote.
    fn ended_unwatched() -> Self {
        Self {
            process: Process::EndedUnwatched,
            id: None,
            resumed_from: None,
        }
    }

    /// The worker's process group, to signal.
    fn group(&self) -> Option<Pid> {
        self.id.map(|id| Pid::from_raw(id.pid))
    }
}

#[async_trait]
impl Worker for LocalWorker {
    async fn wait(&mut self) -> WorkerEnd {
        match &mut self.process {
            Process::Child(child) => exit_end(child.wait().await),
            Process::Adopted(id) => {
                while id.is_alive() {
                    tokio::time::sleep(POLL).await;
                }
                WorkerEnd::Vanished
            }
            Process::EndedUnwatched => WorkerEnd::Vanished,
        }
    }

    /// SIGTERM to the worker's group, then SIGKILL after the grace period, or as soon as
    /// the controller asks for the stop to happen now.
    async fn terminate(&mut self, grace: Duration, stop: &mut watch::Receiver<StopRequest>) {
        let Some(group) = self.group() else {
            return;
        };
        if *stop.borrow() != StopRequest::Now {
            let _ = killpg(group, Signal::SIGTERM);
            tokio::select! {
                _ = tokio::time::timeout(grace, self.wait()) => {}
                _ = hurried(stop) => {}
            }
        }
        let _ = killpg(group, Signal::SIGKILL);
        let _ = tokio::time::timeout(grace, self.wait()).await;
    }

    /// Ends whatever the worker left running in its group.
    async fn clean_up(&mut self) {
        if let Some(group) = self.group() {
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// The handle of a worker of this attempt that runs although no controller recorded it.
fn unrecorded_worker(job: &TrialJob) -> Option<String> {
    let vars: Vec<(&str, &str)> = job
        .env
        .iter()
        // The trial's own variables; its devices are not what finds it.
        .filter(|(k, _)| PROTOCOL_VARIABLES.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    find_by_environment(&vars).map(|id| format!("pid:{id}"))
}

fn exit_end(status: std::io::Result<ExitStatus>) -> WorkerEnd {
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => WorkerEnd::Exited(code),
            (None, Some(signal)) => WorkerEnd::killed_by(signal),
            (None, None) => WorkerEnd::Killed("an unknown signal".into()),
        },
        Err(e) => WorkerEnd::LaunchFailed(format!("lost track of the worker: {e}")),
    }
}

/// Lets the worker inherit the lock files of its GPUs (their descriptors are opened
/// close-on-exec, as every file of the controller): its devices stay locked while it runs,
/// also after its controller is killed.
fn inherit(locks: &[RawFd]) -> std::io::Result<()> {
    for fd in locks {
        // SAFETY: fcntl on an open descriptor, changing only its close-on-exec flag.
        if unsafe { nix::libc::fcntl(*fd, nix::libc::F_SETFD, 0) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
