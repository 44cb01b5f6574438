//! How a trial worker runs. The controller hands an [`Executor`] a [`TrialJob`] and gets back
//! events while it runs and a [`WorkerOutcome`] at the end. Local processes are
//! [`LocalExecutor`]; Slurm jobs, read through a shared filesystem, are [`SlurmExecutor`];
//! each cloud engine (`vertex.rs`, `kubernetes.rs`, `sagemaker.rs`), and Slurm for jobs that
//! report through the database ([`SlurmEngine`]), is one file implementing `remote::Engine`,
//! driven by [`RemoteExecutor`].
//!
//! What a worker is given and how what it reports is read (its command line, environment,
//! files and report lines) is the [`crate::protocol`]'s; an executor decides only where and
//! how the worker runs.

mod follow;
mod local;
mod model_folder;
mod outage;
mod output;
pub(crate) mod process;
mod remote;
mod slurm;

use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};

pub(crate) use local::LocalExecutor;
pub(crate) use model_folder::{FolderOwner, ModelFolder, StudyMark, owner_of};
pub use remote::relay;
pub(crate) use remote::{check_storage, for_study};
pub(crate) use slurm::{SlurmEngine, SlurmExecutor};

use crate::protocol::{CheckpointStart, Checkpoints, Measurement};
use crate::study::space::Assignment;

/// Everything an executor needs to run one trial.
#[derive(Debug, Clone)]
pub(crate) struct TrialJob {
    /// The study's name.
    pub study: String,
    /// The trial's number in its study.
    pub number: u64,
    /// The trial's row id, echoed in events.
    pub trial_id: i64,
    /// Program and arguments, parameters included.
    pub argv: Vec<String>,
    /// Environment of the worker protocol and of the study file.
    pub env: Vec<(String, String)>,
    /// Where the worker's stdout and stderr go.
    pub log_path: PathBuf,
    /// Where the worker may write cloudml-hypertune's metrics file.
    pub metrics_path: PathBuf,
    /// The attempt's model folder (`HPTUNE_OUTPUT_DIR`), created before a local or Slurm
    /// worker starts; `None` for a remote worker, which saves where its engine says.
    pub output_dir: Option<ModelFolder>,
    /// The attempt's checkpoint folder and the earlier ones it may resume from, for a
    /// worker that starts here (local, Slurm, a relay's); `None` for a remote job, whose
    /// relay is told its engine's folders.
    pub checkpoints: Option<Checkpoints>,
    /// Wall-clock limit.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL.
    pub grace_period: Duration,
    /// The objective metric, to recognise measurement lines.
    pub metric: String,
    /// How the worker comes to run: started now, or taken over from a controller that is
    /// gone.
    pub start: Start,
    /// The trial's parameters (the command line holds them too).
    pub params: Assignment,
    /// The attempt (1, then 2, 3 ... after infrastructure failures).
    pub attempt: u32,
    /// Measurements already recorded for this attempt, not to be sent again.
    pub reported: Vec<Measurement>,
    /// The open lock files of the trial's GPUs, which a local worker inherits (see
    /// [`crate::gpus::Lease::lock_fds`]); empty for a trial without GPUs.
    pub gpu_locks: Vec<RawFd>,
}

impl TrialJob {
    /// Creates the attempt's model folder, if it has one, before its worker starts: the
    /// attempt's own, never one that another created ([`ModelFolder::create`]).
    pub(crate) fn create_output_dir(&self) -> Result<(), String> {
        match &self.output_dir {
            Some(folder) => folder.create().map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// Creates the attempt's checkpoint folder, if it has one, and settles the earlier one
    /// its worker resumes from ([`Checkpoints::prepare`]), just before the worker starts.
    pub(crate) fn prepare_checkpoints(&self) -> Result<CheckpointStart, String> {
        match &self.checkpoints {
            Some(checkpoints) => checkpoints.prepare(),
            None => Ok(CheckpointStart {
                env: Vec::new(),
                resumed_from: None,
            }),
        }
    }
}

/// How a trial's worker comes to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// Start it: the attempt is new.
    Fresh,
    /// Watch the worker of this handle, started by a controller that is gone.
    Adopt(String),
    /// A controller that is gone may have started this attempt's worker without recording
    /// its handle; the attempt began at `since`. Look for that worker, or for the output it
    /// left (files written since then), before starting one, so that an attempt never runs
    /// twice.
    Recover {
        /// When the attempt began.
        since: SystemTime,
    },
}

/// What happens while a worker runs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WorkerEvent {
    /// The worker started; `handle` finds it again (a pid, a job name).
    Started {
        /// The trial.
        trial_id: i64,
        /// The worker's handle.
        handle: String,
        /// Where the engine keeps the attempt's model (`gs://...`, `s3://...`,
        /// `pvc://...`), recorded with the attempt as a local worker's folder is; `None`
        /// for a local or Slurm worker (its folder is [`TrialJob::output_dir`]) and for a
        /// job whose engine keeps none.
        model: Option<String>,
        /// The checkpoint folder of an earlier attempt the worker resumes from
        /// (`HPTUNE_RESUME_FROM`), when it was started here and given one; a remote job's
        /// relay records its own.
        resumed_from: Option<String>,
    },
    /// The worker reported a measurement (each one once, whichever way it came).
    Measured {
        /// The trial.
        trial_id: i64,
        /// What it reported.
        measurement: Measurement,
        /// Whether it is in the database already (written by a remote job's relay).
        stored: bool,
    },
}

/// How a worker ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WorkerEnd {
    /// It exited by itself with this code.
    Exited(i32),
    /// It was killed by a signal nobody here sent.
    Killed(String),
    /// It ran past the timeout and was terminated.
    TimedOut(Duration),
    /// The timeout passed before it even started (its job held in a queue), and it was
    /// cancelled.
    TimedOutBeforeStart {
        /// The timeout.
        after: Duration,
        /// Why it had not started, as its scheduler says.
        why: String,
    },
    /// The controller asked it to stop, and it did.
    Stopped,
    /// It could not be started.
    LaunchFailed(String),
    /// An adopted worker ended (its exit status went to the controller that started it), or a
    /// remote job is no more (deleted after its TTL): how it ended is lost.
    Vanished,
    /// A remote job failed; the engine's reason.
    JobFailed(String),
    /// A remote job's machine was taken away (preempted, evicted, out of capacity).
    Preempted(String),
}

impl WorkerEnd {
    /// Whether the end says nothing of the worker's own code: it was killed from outside
    /// (preempted, out of memory, a controller gone with it). Such a trial is retried.
    pub(crate) fn is_infrastructure_failure(&self) -> bool {
        match self {
            WorkerEnd::Killed(signal) => {
                matches!(signal.as_str(), "SIGKILL" | "SIGTERM" | "SIGHUP" | "SIGINT")
            }
            WorkerEnd::Vanished | WorkerEnd::Preempted(_) => true,
            _ => false,
        }
    }

    /// The end of a worker killed by signal `signal`, named as `kill -l` names it.
    pub(crate) fn killed_by(signal: i32) -> Self {
        WorkerEnd::Killed(
            nix::sys::signal::Signal::try_from(signal)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {signal}")),
        )
    }
}

/// The end of one worker.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WorkerOutcome {
    /// The trial.
    pub trial_id: i64,
    /// How it ended.
    pub end: WorkerEnd,
    /// The last line the worker printed, for error messages (none after a clean exit).
    pub last_output: Option<String>,
    /// The line of its stderr that says the worker ran out of device memory, if one does
    /// (none after a clean exit).
    pub out_of_memory: Option<String>,
    /// Why a report of the objective could not be read (`loss=0.5abc`), if one could not:
    /// what a trial that ends without a value failed of.
    pub unreadable: Option<String>,
}

impl WorkerOutcome {
    /// The outcome `end` of the trial's worker, with nothing else known.
    pub(crate) fn new(trial_id: i64, end: WorkerEnd) -> Self {
        Self {
            trial_id,
            end,
            last_output: None,
            out_of_memory: None,
            unreadable: None,
        }
    }

    /// `message`, followed by the worker's last line of output when there is one.
    pub(crate) fn with_last_output(&self, message: String) -> String {
        match &self.last_output {
            Some(line) => format!("{message} (last output: {line})"),
            None => message,
        }
    }
}

/// What the controller asks of a running worker, in increasing urgency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum StopRequest {
    /// Let it run.
    #[default]
    Run,
    /// Stop it gracefully: SIGTERM (or the engine's cancel), SIGKILL after the grace period.
    Gracefully,
    /// Stop it now, without waiting out the grace period (a second Ctrl-C).
    Now,
}

/// Runs trial workers somewhere.
#[async_trait]
pub(crate) trait Executor: Send + Sync {
    /// Runs `job` to its end. Sends a [`WorkerEvent`] as things happen; stops the worker
    /// as `stop` asks: gracefully (then forcibly after the grace period), or at once.
    async fn run(
        &self,
        job: TrialJob,
        events: mpsc::UnboundedSender<WorkerEvent>,
        stop: watch::Receiver<StopRequest>,
    ) -> WorkerOutcome;
}

/// Checks that the worker program can be started: an existing executable file when it is a
/// path, a program on `PATH` otherwise.
pub(crate) fn check_program(program: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = Path::new(program);
        if executable(path) {
            return Ok(());
        }
        return Err(if path.exists() {
            format!("'{program}' is not an executable file")
        } else {
            format!(
                "'{program}' does not exist (relative paths start from the directory hptune runs in)"
            )
        });
    }
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))));
    if found {
        Ok(())
    } else {
        Err(format!("'{program}' is not a program on PATH"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_the_program_before_any_trial() {
        assert!(check_program("sh").is_ok());
        assert!(check_program("no-such-program-hptune").is_err());
        assert!(
            check_program("./no/such/file")
                .unwrap_err()
                .contains("does not exist")
        );
    }
}
