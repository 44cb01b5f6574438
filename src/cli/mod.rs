//! Commands of the `hptune` binary: each file declares one command's work; this one holds the
//! flags and the mapping of failures to exit codes.

mod ask;
mod dashboard;
mod enqueue;
mod plot;
mod progress;
mod relay;
mod run;
mod session;
mod show;
mod table;

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Parser, Subcommand, ValueEnum};

use hptune::controller::ControllerError;
use hptune::ops::{BestBy, OpsError, Report, WorkerOptions};
use hptune::spec::SpecError;
use hptune::storage::{DEFAULT_STORAGE, StorageError, StorageUrl, TrialState};
use hptune::study::ExecutorKind;

/// Where the workers' log and metrics files go, one folder per study, unless `--log-dir`
/// says otherwise.
const DEFAULT_LOG_DIR: &str = "hptune-logs";

/// The exit code of `tell --step` when the study's early-stopping rule stopped the trial.
pub const EXIT_STOPPED: u8 = 3;

/// The exit code of `ask` when clients hold as many trials as the study runs at once.
pub const EXIT_ALL_LEASED: u8 = 4;

/// The exit code of `ask` when the study gives no more trials: its budget is spent, too many
/// trials failed, or the grid is exhausted.
pub const EXIT_NONE_LEFT: u8 = 5;

/// Tune the hyperparameters of training jobs: Bayesian, random or grid search over parallel
/// trial workers, every trial recorded in a database.
#[derive(Debug, Parser)]
#[command(name = "hptune", version)]
pub struct Cli {
    /// Database URL: sqlite://PATH (created if missing) or postgres://USER:PASSWORD@HOST/DB.
    // The variable's value is not shown in --help: it may hold the database password.
    #[arg(
        long,
        global = true,
        env = "HPTUNE_STORAGE",
        hide_env_values = true,
        default_value = DEFAULT_STORAGE
    )]
    storage: String,
    /// More log output (-v: debug, -vv: trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run (or continue) a study until its budget is spent.
    Run {
        /// The study file.
        study: PathBuf,
        #[command(flatten)]
        workers: WorkerArgs,
        /// Keep trial N's model whatever its rank (with artifacts.keep_best); repeat or
        /// separate with commas. The pin is stored with the study, for later runs too (on a
        /// study whose budget is spent, the run only records it).
        #[arg(long, value_name = "N", value_delimiter = ',')]
        keep: Vec<u64>,
    },
    /// List studies: trials by state and best value.
    Studies,
    /// List the trials of a study.
    Trials {
        /// The study's name, or its study file.
        study: String,
        /// Only the N best succeeded trials, best first.
        #[arg(long, value_name = "N")]
        best: Option<usize>,
        /// Only trials in this state.
        #[arg(long, value_parser = parse_state)]
        state: Option<TrialState>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = TrialsFormat::Table)]
        format: TrialsFormat,
    },
    /// Print the best trial's parameters (with several objectives, those of the trials on
    /// the Pareto front).
    Best {
        /// The study's name, or its study file.
        study: String,
        /// flags: ready to paste after the worker's command; json: number, value, params.
        #[arg(long, value_enum, default_value_t = BestFormat::Flags)]
        format: BestFormat,
        /// Print the folder of the best trial's model instead (fails when it was not kept).
        #[arg(long, conflicts_with = "format")]
        artifact: bool,
        /// With --artifact: the model of trial N instead of the best one's (a study of
        /// several objectives has no single best: pick one from its front).
        #[arg(long, value_name = "N", requires = "artifact")]
        trial: Option<u64>,
        /// observed: the best value reported; model: the best posterior mean of the
        /// Bayesian sampler's model fitted to the trials (for noisy metrics).
        #[arg(long, value_enum, default_value_t = BestBy::Observed)]
        by: BestBy,
    },
    /// Serve a read-only web dashboard of the database's studies, updated as they run.
    Dashboard {
        /// The address to listen on; other than a loopback one, it needs --token.
        #[arg(long, default_value = "127.0.0.1")]
        host: IpAddr,
        /// The port (0: any free one; the address is printed).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// A secret every request must carry (`?token=` once in a browser, or
        /// `Authorization: Bearer`).
        #[arg(long, env = "HPTUNE_DASHBOARD_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// A name the dashboard answers to besides IP addresses and localhost (repeatable):
        /// the name of this machine or of a proxy in front of it. Other names are refused,
        /// so that no other site can point its name at the dashboard (DNS rebinding).
        #[arg(long = "allow-host", value_name = "NAME")]
        allow_host: Vec<hptune::dashboard::HostName>,
        /// Read timeout, connection cap and shutdown grace period.
        #[command(flatten)]
        limits: hptune_http::Limits,
    },
    /// Draw one figure of a study into an SVG or HTML file.
    Plot {
        /// The study's name, or its study file.
        study: String,
        /// The figure.
        #[arg(long, value_parser = parse_kind)]
        kind: hptune::plot::Kind,
        /// The file to write: .svg, .png or .html.
        #[arg(long)]
        out: PathBuf,
        /// The history's horizontal axis.
        #[arg(long, value_enum, default_value_t = HistoryBy::Number)]
        by: HistoryBy,
    },
    /// Run one trial by hand with the given hyperparameters, recorded in the study.
    Trial {
        /// The study file.
        study: PathBuf,
        /// A hyperparameter, as ID=VALUE; every active parameter needs one.
        #[arg(long = "param", value_name = "ID=VALUE", value_parser = parse_param)]
        params: Vec<(String, String)>,
        #[command(flatten)]
        workers: WorkerArgs,
    },
    /// Enqueue a configuration to run before the sampler's next proposal (counted against
    /// the budget; run once, whichever controller of the study takes it).
    Enqueue {
        /// The study's name, or its study file (which creates the study if it is new).
        study: String,
        /// A hyperparameter, as ID=VALUE; every active parameter needs one.
        #[arg(long = "param", value_name = "ID=VALUE", value_parser = parse_param)]
        params: Vec<(String, String)>,
    },
    /// Claim trials for a program that runs them itself, each held under a lease until it
    /// is told a result (see docs/ask-tell.md); creates the study if it is new.
    Ask {
        /// The study file.
        study: PathBuf,
        /// How many trials to claim (fewer when the budget or the parallel slots run out).
        #[arg(long, value_name = "N", default_value_t = 1)]
        count: usize,
        /// How long a trial is held without a result before it goes back to the study
        /// (renewed by each `tell --step`): 30s, 10m, 1h, ...
        #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
        lease: Duration,
        /// text: a line per trial, its number and its parameters as flags; json: an array of
        /// the trials as `trials --format json` prints them, with `lease_expires_at`.
        #[arg(long, value_enum, default_value_t = ClientFormat::Text)]
        format: ClientFormat,
    },
    /// Answer a client's requests (ask, tell, best, trials), one JSON line each on standard
    /// input and output, until standard input ends: the commands without a process each
    /// (see docs/ask-tell.md).
    Session {
        /// The study file.
        study: PathBuf,
    },
    /// Tell the result of a trial claimed by `ask`: final, intermediate (--step: exits 3 when
    /// the study's early-stopping rule stops the trial), or a failure.
    #[command(group(ArgGroup::new("result").required(true).multiple(true).args(["value", "metrics", "fail"])))]
    Tell {
        /// The study's name, or its study file.
        study: String,
        /// The trial's number.
        trial: u64,
        /// The objective's value.
        #[arg(long, value_name = "V", allow_negative_numbers = true)]
        value: Option<f64>,
        /// A metric of the study (the objective or a constrained metric) as NAME=V; repeatable.
        #[arg(long = "metric", value_name = "NAME=V", value_parser = parse_metric)]
        metrics: Vec<(String, f64)>,
        /// The values are intermediate ones, at this step (renews the lease).
        #[arg(long, value_name = "S", allow_negative_numbers = true)]
        step: Option<i64>,
        /// The trial failed, for this reason.
        #[arg(long, value_name = "REASON", conflicts_with_all = ["value", "metrics", "step"])]
        fail: Option<String>,
        /// text: the trial's state (and why it was stopped); json: `stop`, `reason` and the
        /// trial as `trials --format json` prints it.
        #[arg(long, value_enum, default_value_t = ClientFormat::Text)]
        format: ClientFormat,
    },
    /// Inside a remote trial job: run the worker and write what it reports into the
    /// storage (HPTUNE_STORAGE, PostgreSQL). Started by the remote executors.
    #[command(hide = true)]
    Relay {
        /// The study's name.
        #[arg(long)]
        study: String,
        /// The trial's number.
        #[arg(long)]
        trial: u64,
        /// The attempt this job runs.
        #[arg(long)]
        attempt: u32,
        /// The study's objective metric.
        #[arg(long)]
        metric: String,
        /// Directory of the worker's log and metrics file (a Slurm job's script sets
        /// HPTUNE_RELAY_LOG_DIR to a folder of its own on its node).
        #[arg(long, env = hptune::protocol::RELAY_LOG_DIR_VARIABLE, default_value = DEFAULT_LOG_DIR)]
        log_dir: PathBuf,
        /// The attempt's checkpoint folder in the job (the worker's HPTUNE_CHECKPOINT_DIR).
        #[arg(long)]
        checkpoint_dir: Option<PathBuf>,
        /// A checkpoint folder of an earlier attempt to resume from, the first one given that
        /// has files in it (the worker's HPTUNE_RESUME_FROM); repeated, newest first.
        #[arg(long, requires = "checkpoint_dir")]
        resume_from: Vec<PathBuf>,
        /// The worker's command line.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// Where the workers of `run` and `trial` run, and where their files go.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Directory of the workers' logs and metrics files.
    #[arg(long, default_value = DEFAULT_LOG_DIR)]
    pub log_dir: PathBuf,
    /// Run the trials here (local) or as jobs of this engine instead of the study's
    /// executor; an engine other than local needs its block in the study file.
    #[arg(long, value_parser = parse_executor)]
    pub executor: Option<ExecutorKind>,
    #[command(flatten)]
    pub gpus: GpusArg,
    #[command(flatten)]
    pub artifacts: ArtifactsArg,
}

impl From<WorkerArgs> for WorkerOptions {
    fn from(args: WorkerArgs) -> Self {
        WorkerOptions {
            log_dir: args.log_dir,
            executor: args.executor,
            gpus: args.gpus.list,
            artifacts_dir: args.artifacts.dir,
        }
    }
}

/// The devices of a study with `trial.resources.gpus`.
#[derive(Debug, clap::Args)]
pub struct GpusArg {
    /// The GPUs trials get (with trial.resources.gpus): indices or UUIDs, e.g. 0,1,2,3.
    /// Default: CUDA_VISIBLE_DEVICES if set, else the GPUs `nvidia-smi -L` lists.
    #[arg(long = "gpus", env = "HPTUNE_GPUS", value_name = "LIST")]
    pub list: Option<String>,
}

/// Where the trials' models go.
#[derive(Debug, clap::Args)]
pub struct ArtifactsArg {
    /// Folder of the trials' model folders, one per attempt: DIR/STUDY/trial-N (the study's
    /// artifacts.dir, else hptune-artifacts beside the log folder).
    #[arg(long = "artifacts-dir", value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// How `trials` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TrialsFormat {
    /// Aligned columns.
    Table,
    /// One JSON array.
    Json,
    /// Comma-separated values with a header, one column per parameter.
    Csv,
}

/// How `ask` and `tell` print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClientFormat {
    /// Lines for people and shell scripts.
    Text,
    /// JSON for programs.
    Json,
}

/// What the history figure's horizontal axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HistoryBy {
    /// Trial numbers.
    Number,
    /// Time since the first trial started.
    Time,
}

impl From<HistoryBy> for hptune::plot::HistoryX {
    fn from(by: HistoryBy) -> Self {
        match by {
            HistoryBy::Number => hptune::plot::HistoryX::Number,
            HistoryBy::Time => hptune::plot::HistoryX::Time,
        }
    }
}

/// How `best` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BestFormat {
    /// `--id=value` flags.
    Flags,
    /// A JSON object.
    Json,
}

fn parse_executor(text: &str) -> Result<ExecutorKind, String> {
    ExecutorKind::parse(text)
        .ok_or_else(|| format!("'{text}' is not an executor: use {}", ExecutorKind::NAMES))
}

fn parse_kind(text: &str) -> Result<hptune::plot::Kind, String> {
    text.parse()
}

fn parse_state(text: &str) -> Result<TrialState, String> {
    text.parse()
}

fn parse_param(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((id, value)) if !id.is_empty() => Ok((id.to_string(), value.to_string())),
        _ => Err(format!("'{text}' is not ID=VALUE")),
    }
}

fn parse_metric(text: &str) -> Result<(String, f64), String> {
    let (metric, value) = parse_param(text).map_err(|_| format!("'{text}' is not NAME=V"))?;
    let value = value
        .trim()
        .parse()
        .map_err(|_| format!("'{text}': '{value}' is not a number"))?;
    Ok((metric, value))
}

/// A failure that ends the command, with its exit code.
#[derive(Debug)]
pub enum Failure {
    /// Bad input: a study file, a flag, a study name (exit 2).
    BadInput(String),
    /// Anything else (exit 1).
    Other(String),
    /// `ask`: clients hold as many trials as the study runs at once ([`EXIT_ALL_LEASED`]).
    AllLeased(String),
    /// `ask`: the study gives no more trials ([`EXIT_NONE_LEFT`]).
    NoneLeft(String),
}

impl Failure {
    /// The process exit code.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code())
    }

    /// The exit code as a number (a session's answers carry it).
    pub fn code(&self) -> u8 {
        match self {
            Failure::BadInput(_) => 2,
            Failure::Other(_) => 1,
            Failure::AllLeased(_) => EXIT_ALL_LEASED,
            Failure::NoneLeft(_) => EXIT_NONE_LEFT,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::BadInput(m)
            | Failure::Other(m)
            | Failure::AllLeased(m)
            | Failure::NoneLeft(m) => f.write_str(m),
        }
    }
}

impl From<SpecError> for Failure {
    fn from(e: SpecError) -> Self {
        Failure::BadInput(e.to_string())
    }
}

impl From<StorageError> for Failure {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::BadUrl(_)
            | StorageError::Missing(_)
            | StorageError::SpaceChanged(_)
            | StorageError::ObjectiveChanged { .. } => Failure::BadInput(e.to_string()),
            _ => Failure::Other(e.to_string()),
        }
    }
}

impl From<OpsError> for Failure {
    fn from(e: OpsError) -> Self {
        match e {
            OpsError::BadInput(m) => Failure::BadInput(m),
            OpsError::Spec(e) => e.into(),
            OpsError::Storage(e) => e.into(),
            OpsError::Controller(e) => e.into(),
            OpsError::Failed(m) => Failure::Other(m),
            OpsError::AllLeased(m) => Failure::AllLeased(m),
            OpsError::NoneLeft(m) => Failure::NoneLeft(m),
        }
    }
}

impl From<ControllerError> for Failure {
    fn from(e: ControllerError) -> Self {
        match e {
            ControllerError::Storage(e) => e.into(),
            ControllerError::Sampler(e) => Failure::BadInput(e.to_string()),
            ControllerError::Gpus(_) => Failure::Other(e.to_string()),
        }
    }
}

/// Sets up log output on stderr: warnings, or more with `-v`; `RUST_LOG` overrides.
pub fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

/// Runs the command; `Ok` carries the exit code of a command that ran to its end.
pub async fn execute(cli: Cli) -> Result<ExitCode, Failure> {
    let url = StorageUrl::parse(&cli.storage)?;
    match cli.command {
        Command::Run {
            study,
            workers,
            keep,
        } => run::run_study(&study, &url, workers.into(), &keep).await,
        Command::Trial {
            study,
            params,
            workers,
        } => run::run_trial(&study, &url, &params, workers.into()).await,
        Command::Enqueue { study, params } => enqueue::enqueue(&url, &study, &params).await,
        Command::Ask {
            study,
            count,
            lease,
            format,
        } => ask::ask(&study, &url, count, lease, format).await,
        Command::Session { study } => session::session(&study, &url).await,
        Command::Tell {
            study,
            trial,
            value,
            metrics,
            step,
            fail,
            format,
        } => {
            let report = match fail {
                Some(reason) => Report::Failed(reason),
                None => Report::Metrics {
                    value,
                    metrics,
                    step,
                },
            };
            ask::tell(&url, &study, trial, &report, format).await
        }
        Command::Relay {
            study,
            trial,
            attempt,
            metric,
            log_dir,
            checkpoint_dir,
            resume_from,
            command,
        } => {
            let job = hptune::executor::relay::RelayJob {
                study,
                number: trial,
                attempt,
                metric,
                argv: command,
                log_dir,
                checkpoint_dir,
                resume_from,
            };
            relay::relay(&url, &job).await
        }
        Command::Studies => show::studies(&url).await,
        Command::Trials {
            study,
            best,
            state,
            format,
        } => show::trials(&url, &study, best, state, format).await,
        Command::Dashboard {
            host,
            port,
            token,
            allow_host,
            limits,
        } => dashboard::dashboard(&url, host, port, token, allow_host, &limits).await,
        Command::Plot {
            study,
            kind,
            out,
            by,
        } => plot::plot(&url, &study, kind, by.into(), &out).await,
        Command::Best {
            study,
            format,
            artifact,
            trial,
            by,
        } => match artifact {
            true => show::best_artifact(&url, &study, by, trial).await,
            false => show::best(&url, &study, format, by).await,
        },
    }
}
