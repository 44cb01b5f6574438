//! How a trial worker runs. The controller hands an [`Executor`] a [`TrialJob`] and gets back
//! events while it runs and a [`WorkerOutcome`] at the end. Local processes are
//! [`LocalExecutor`]; Slurm jobs, read through a shared filesystem, are [`SlurmExecutor`];
//! each cloud engine (`vertex.rs`, `kubernetes.rs`, `sagemaker.rs`), and Slurm for jobs that
//! report through the database ([`SlurmEngine`]), is one file implementing `remote::Engine`,
//! driven by [`RemoteExecutor`].

mod follow;
mod local;
mod model_folder;
mod outage;
mod output;
pub mod process;
mod remote;
mod slurm;

use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};

pub use local::LocalExecutor;
pub use model_folder::{FolderError, FolderOwner, ModelFolder, OWNER_FILE, StudyMark, owner_of};
pub use remote::{RemoteError, RemoteExecutor, check_storage, for_study, relay};
pub use slurm::{RELAY_LOG_DIR_VARIABLE, SlurmEngine, SlurmExecutor};

use crate::gpus::Device;
use crate::report::Measurement;
use crate::study::space::{Assignment, Space};
use crate::study::{TemplatePart, TrialTemplate, template_parts};

/// Everything an executor needs to run one trial.
#[derive(Debug, Clone)]
pub struct TrialJob {
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
    pub fn create_output_dir(&self) -> Result<(), String> {
        match &self.output_dir {
            Some(folder) => folder.create().map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

/// How a trial's worker comes to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
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
pub enum WorkerEvent {
    /// The worker started; `handle` finds it again (a pid, a job name).
    Started {
        /// The trial.
        trial_id: i64,
        /// The worker's handle.
        handle: String,
        /// Whether a controller that takes the trial over finds the worker without its
        /// handle (a local process, by its environment). The handle is then written with
        /// the trial's next change (its end, or the next heartbeat) instead of at once,
        /// which saves short trials a database round trip; a remote job's handle is written
        /// before anything else happens, or the job would be submitted again.
        findable_without_handle: bool,
        /// Where the engine keeps the attempt's model (`gs://...`, `s3://...`,
        /// `pvc://...`), recorded with the attempt as a local worker's folder is; `None`
        /// for a local or Slurm worker (its folder is [`TrialJob::output_dir`]) and for a
        /// job whose engine keeps none.
        model: Option<String>,
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
pub enum WorkerEnd {
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
    pub fn is_infrastructure_failure(&self) -> bool {
        match self {
            WorkerEnd::Killed(signal) => {
                matches!(signal.as_str(), "SIGKILL" | "SIGTERM" | "SIGHUP" | "SIGINT")
            }
            WorkerEnd::Vanished | WorkerEnd::Preempted(_) => true,
            _ => false,
        }
    }

    /// The end of a worker killed by signal `signal`, named as `kill -l` names it.
    pub fn killed_by(signal: i32) -> Self {
        WorkerEnd::Killed(
            nix::sys::signal::Signal::try_from(signal)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {signal}")),
        )
    }
}

/// The files one attempt of a trial writes in a log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptFiles {
    /// The worker's stdout (its stderr goes beside it: [`error_log_path`]).
    pub log: PathBuf,
    /// cloudml-hypertune's metrics file.
    pub metrics: PathBuf,
}

impl AttemptFiles {
    /// The files of attempt `attempt` of trial `number` in `dir`: `trial-N.log` and
    /// `trial-N.metrics.jsonl`, with `-attempt-A` after `N` from the second attempt on. Each
    /// attempt's files have names of their own, so that one attempt's output is never taken
    /// for another's.
    pub fn in_dir(dir: &Path, number: u64, attempt: u32) -> Self {
        let stem = attempt_stem(number, attempt);
        Self {
            log: dir.join(format!("{stem}.log")),
            metrics: dir.join(format!("{stem}.metrics.jsonl")),
        }
    }
}

/// The name of an attempt's files and model folder: `trial-N`, with `-attempt-A` after `N`
/// from the second attempt on.
pub fn attempt_stem(number: u64, attempt: u32) -> String {
    match attempt {
        1 => format!("trial-{number}"),
        n => format!("trial-{number}-attempt-{n}"),
    }
}

/// Where a worker's stderr goes, beside its stdout log.
pub fn error_log_path(log_path: &Path) -> PathBuf {
    log_path.with_extension("err")
}

/// The end of one worker.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerOutcome {
    /// The trial.
    pub trial_id: i64,
    /// How it ended.
    pub end: WorkerEnd,
    /// The last line the worker printed, for error messages (none after a clean exit).
    pub last_output: Option<String>,
    /// Why a report of the objective could not be read (`loss=0.5abc`), if one could not:
    /// what a trial that ends without a value failed of.
    pub unreadable: Option<String>,
}

impl WorkerOutcome {
    /// The outcome `end` of the trial's worker, with nothing else known.
    pub fn new(trial_id: i64, end: WorkerEnd) -> Self {
        Self {
            trial_id,
            end,
            last_output: None,
            unreadable: None,
        }
    }

    /// `message`, followed by the worker's last line of output when there is one.
    pub fn with_last_output(&self, message: String) -> String {
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
pub trait Executor: Send + Sync {
    /// Runs `job` to its end. Sends a [`WorkerEvent`] as things happen; stops the worker
    /// as `stop` asks: gracefully (then forcibly after the grace period), or at once.
    async fn run(
        &self,
        job: TrialJob,
        events: mpsc::UnboundedSender<WorkerEvent>,
        stop: watch::Receiver<StopRequest>,
    ) -> WorkerOutcome;
}

/// The worker's command line: the template's command, then its `args` with placeholders
/// filled in (an argument naming an inactive parameter is left out), or else each active
/// parameter as `--<id>=<value>` in the order of the study file.
pub fn command_line(
    template: &TrialTemplate,
    space: &Space,
    study: &str,
    number: u64,
    params: &Assignment,
) -> Vec<String> {
    let mut argv = template.command.clone();
    match &template.args {
        None => argv.extend(
            space
                .parameters()
                .iter()
                .filter_map(|p| params.get(&p.id).map(|value| format!("--{}={value}", p.id))),
        ),
        Some(args) => argv.extend(
            args.iter()
                .filter_map(|arg| fill_template(arg, study, number, params)),
        ),
    }
    argv
}

fn fill_template(template: &str, study: &str, number: u64, params: &Assignment) -> Option<String> {
    // spec.rs has checked every template, so it splits.
    let parts = template_parts(template).ok()?;
    let mut out = String::new();
    for part in parts {
        match part {
            TemplatePart::Text(text) => out.push_str(&text),
            TemplatePart::Placeholder("trial_id") => out.push_str(&number.to_string()),
            TemplatePart::Placeholder("study") => out.push_str(study),
            TemplatePart::Placeholder(id) => out.push_str(&params.get(id)?.to_string()),
        }
    }
    Some(out)
}

/// The study file's own variables, then those of the worker protocol, then the attempt's
/// model folder ([`OUTPUT_VARIABLES`]) when it has one, then the trial's devices
/// ([`DEVICE_VARIABLES`]) when it has GPUs: a worker always sees its own trial (`spec`
/// refuses a `trial.env` that names a protocol or output variable, or a device variable of
/// a study with GPUs).
pub fn worker_env(
    template: &TrialTemplate,
    study: &str,
    number: u64,
    attempt: u32,
    metrics_path: &Path,
    output_dir: Option<&Path>,
    gpus: &[Device],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = template
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.extend(protocol_env(study, number, attempt, metrics_path));
    if let Some(dir) = output_dir {
        let dir = dir.display().to_string();
        env.extend(OUTPUT_VARIABLES.map(|name| (name.to_string(), dir.clone())));
    }
    if !gpus.is_empty() {
        let list = |id: fn(&Device) -> &str| gpus.iter().map(id).collect::<Vec<_>>().join(",");
        let [cuda, hptune] = DEVICE_VARIABLES;
        env.push((cuda.into(), list(Device::cuda_id)));
        env.push((hptune.into(), list(|d| &d.name)));
    }
    env
}

/// The variables that name the folder a worker saves its model to, its attempt's own: as
/// hptune names it, and as Vertex AI does for its tuning trials (so a script written for
/// Vertex AI saves there unchanged).
pub const OUTPUT_VARIABLES: [&str; 2] = ["HPTUNE_OUTPUT_DIR", "AIP_MODEL_DIR"];

/// The variables that give a trial with GPUs its devices, comma-separated: as CUDA names
/// them (UUIDs when known), and as hptune names them (recorded with the attempt).
pub const DEVICE_VARIABLES: [&str; 2] = ["CUDA_VISIBLE_DEVICES", "HPTUNE_GPUS"];

/// The variables of the worker protocol, in the order [`protocol_env`] sets them: study,
/// trial, attempt, metrics file, and cloudml-hypertune's metrics file and trial.
pub const PROTOCOL_VARIABLES: [&str; 6] = [
    "HPTUNE_STUDY",
    "HPTUNE_TRIAL_ID",
    "HPTUNE_ATTEMPT",
    "HPTUNE_METRICS_FILE",
    "CLOUD_ML_HP_METRIC_FILE",
    "CLOUD_ML_TRIAL_ID",
];

/// Whether `name` belongs to the worker protocol, which a study's `trial.env` may not set:
/// one of [`PROTOCOL_VARIABLES`] or [`OUTPUT_VARIABLES`], or any other `HPTUNE_` name
/// (`HPTUNE_STORAGE` of remote jobs, `HPTUNE_GPUS` of trials with GPUs, and those the
/// protocol may add).
pub fn is_protocol_variable(name: &str) -> bool {
    name.starts_with("HPTUNE_")
        || PROTOCOL_VARIABLES.contains(&name)
        || OUTPUT_VARIABLES.contains(&name)
}

/// The variables of the worker protocol, named by [`PROTOCOL_VARIABLES`].
pub fn protocol_env(
    study: &str,
    number: u64,
    attempt: u32,
    metrics_path: &Path,
) -> Vec<(String, String)> {
    let metrics = metrics_path.display().to_string();
    let values = [
        study.to_string(),
        number.to_string(),
        attempt.to_string(),
        metrics.clone(),
        metrics,
        number.to_string(),
    ];
    PROTOCOL_VARIABLES
        .iter()
        .map(|name| name.to_string())
        .zip(values)
        .collect()
}

/// Checks that the worker program can be started: an existing executable file when it is a
/// path, a program on `PATH` otherwise.
pub fn check_program(program: &str) -> Result<(), String> {
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
    use crate::spec::parse;
    use crate::study::space::ParamValue;

    const STUDY: &str = r#"
name: s
objective: {metric: loss, goal: minimize}
parameters:
  - {id: opt, type: categorical, values: [adam, sgd]}
  - {id: momentum, type: double, min: 0.0, max: 1.0, when: {opt: [sgd]}}
  - {id: layers, type: integer, min: 1, max: 4}
algorithm: random
max_trial_count: 1
trial:
  command: [python3, train.py, --fixed]
"#;

    fn params(momentum: Option<f64>) -> Assignment {
        let mut p = Assignment::new();
        p.insert("opt".into(), ParamValue::Str("sgd".into()));
        p.insert("layers".into(), ParamValue::Int(2));
        if let Some(m) = momentum {
            p.insert("momentum".into(), ParamValue::Float(m));
        }
        p
    }

    #[test]
    fn appends_active_parameters_as_flags_in_file_order() {
        let study = parse(Path::new("s.yaml"), STUDY).unwrap();
        let argv = command_line(&study.trial, &study.space, "s", 3, &params(Some(0.5)));
        assert_eq!(
            argv,
            [
                "python3",
                "train.py",
                "--fixed",
                "--opt=sgd",
                "--momentum=0.5",
                "--layers=2"
            ]
        );
    }

    #[test]
    fn fills_the_args_template_and_drops_inactive_arguments() {
        let text = STUDY.replace(
            "--fixed]",
            "--fixed]\n  args: [--optimizer, '{opt}', '--m={momentum}', 'out/{study}/{trial_id}']",
        );
        let study = parse(Path::new("s.yaml"), &text).unwrap();
        let argv = command_line(&study.trial, &study.space, "s", 3, &params(None));
        assert_eq!(
            argv,
            [
                "python3",
                "train.py",
                "--fixed",
                "--optimizer",
                "sgd",
                "out/s/3"
            ]
        );
    }

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
