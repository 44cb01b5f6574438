//! The worker protocol: everything a trial worker sees and says, each rule written once.
//! docs/worker-protocol.md describes it for the people who write workers; this module is
//! that page as code. Executors build a worker's start from it, the relay of a remote job
//! runs its worker with it, the controller and the dashboard find an attempt's files by it.
//!
//! What a worker sees:
//! - its command line ([`command_line`]): the study's command, then its parameters; a
//!   remote job runs the relay's ([`relay_command`]) around it;
//! - its environment ([`worker_env`]): the study's `trial.env`, then the protocol's
//!   variables ([`PROTOCOL_VARIABLES`]), its model folder ([`OUTPUT_VARIABLES`]) and its GPUs
//!   ([`DEVICE_VARIABLES`]); a study may set none of them ([`is_protocol_variable`]);
//! - its files ([`AttemptFiles`]): stdout, stderr ([`error_log_path`]) and the metrics file,
//!   named after its attempt ([`attempt_stem`]), and its model folder ([`model_folder`],
//!   created by `executor::ModelFolder` with the owner file it must leave), and its
//!   checkpoint folder and the earlier attempt's it resumes from ([`Checkpoints`]);
//! - its stop: SIGTERM, then SIGKILL after the grace period ([`DEFAULT_GRACE_PERIOD`] unless
//!   the study says).
//!
//! What a worker says: `key=value` lines on stdout, split where a line ends
//! ([`LineReader`]) and read by [`LineParser`], and the lines of cloudml-hypertune's metrics
//! file ([`MetricsFileReader`]); both give [`Measurement`]s, of which [`final_value`] picks
//! the trial's value; an error on stderr that says it ran out of device memory
//! ([`out_of_memory_line`]) fails the trial as such.

mod checkpoints;
mod command;
mod env;
mod files;
mod lines;
mod out_of_memory;
mod report;

use std::time::Duration;

pub(crate) use checkpoints::{
    CHECKPOINT_DIR_VARIABLE, CheckpointStart, Checkpoints, RESUME_FROM_VARIABLE, trial_checkpoints,
};
pub(crate) use command::{command_line, relay_command};
pub use env::RELAY_LOG_DIR_VARIABLE;
pub(crate) use env::{
    DEVICE_VARIABLES, GPU_MEMORY_VARIABLE, GPUS_VARIABLE, OUTPUT_DIR_VARIABLE, PROTOCOL_VARIABLES,
    STORAGE_VARIABLE, is_protocol_variable, output_env, protocol_env, worker_env,
};
pub use files::error_log_path;
pub(crate) use files::{AttemptFiles, model_folder};
pub(crate) use lines::LineReader;
pub(crate) use out_of_memory::out_of_memory_line;
pub use report::{LineParser, Measurement, MetricsFileReader, final_value};
pub(crate) use report::{ReportError, check_metric_name};

/// Time between SIGTERM and SIGKILL when a worker is stopped, unless the study file's
/// `trial.grace_period` says otherwise (a relay stops its worker so too).
pub(crate) const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(10);
