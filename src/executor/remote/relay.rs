//! The relay: what runs inside a remote trial job (`hptune relay ... -- <worker argv>`).
//!
//! It starts the worker as the local executor does (same process group handling, same
//! reading of stdout lines and the metrics file), and writes what the worker reports into
//! the rows of its trial attempt in the study's PostgreSQL database: each measurement as it
//! comes, a heartbeat every few seconds, and the worker's last line of output when it fails.
//! The controller reads them back; the job's own state (from the engine) says how it ended,
//! and the relay exits with the worker's exit code so that the engine reports it.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::executor::{
    Executor, LocalExecutor, Start, StopRequest, TrialJob, WorkerEnd, WorkerEvent, WorkerOutcome,
};
use crate::protocol::{
    AttemptFiles, Checkpoints, DEFAULT_GRACE_PERIOD, Measurement, ReportError, final_value,
    protocol_env,
};
use crate::storage::{Storage, StorageError, TrialRecord, TrialState};
use crate::study::space::Assignment;

/// How often the relay tells the database that its attempt is alive.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// The trial attempt a relay runs, and its worker.
#[derive(Debug, Clone)]
pub struct RelayJob {
    /// The study's name.
    pub study: String,
    /// The trial's number.
    pub number: u64,
    /// The attempt this job is.
    pub attempt: u32,
    /// The study's objective metric.
    pub metric: String,
    /// The worker's command line.
    pub argv: Vec<String>,
    /// Where the worker's output and metrics files go.
    pub log_dir: PathBuf,
    /// The attempt's checkpoint folder in the job, if its engine gives one.
    pub checkpoint_dir: Option<PathBuf>,
    /// The checkpoint folders the worker may resume from, newest first: the first with
    /// files in it is the one.
    pub resume_from: Vec<PathBuf>,
}

/// Why the relay could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The database failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The attempt is not one to run: no such trial, or the attempt is over.
    #[error("{0}")]
    NotRunning(String),
}

/// How the worker ended, as the relay reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayEnd {
    /// The relay's exit code: the worker's, `128 + signal` for a signal, 1 otherwise.
    pub exit_code: u8,
    /// Why the trial failed, when it did.
    pub failure: Option<String>,
    /// What the controller is told with the job's failure (recorded with the attempt): the
    /// worker's last line of output, or the relay's reason when it has none or exited 0.
    pub last_output: Option<String>,
    /// The worker's stdout and stderr files.
    pub log_path: PathBuf,
}

/// Runs the worker of `job` and relays what it reports until it ends, or until `stop`
/// turns true (the job is cancelled: SIGTERM to the relay).
pub async fn relay(
    storage: &Storage,
    job: &RelayJob,
    stop: watch::Receiver<bool>,
) -> Result<RelayEnd, RelayError> {
    let trial = running_attempt(storage, job).await?;
    let files = AttemptFiles::in_dir(&job.log_dir, job.number, job.attempt);
    let worker = TrialJob {
        study: job.study.clone(),
        number: job.number,
        trial_id: trial.id,
        argv: job.argv.clone(),
        env: protocol_env(&job.study, job.number, job.attempt, &files.metrics),
        log_path: files.log,
        metrics_path: files.metrics,
        timeout: None,
        grace_period: DEFAULT_GRACE_PERIOD,
        metric: job.metric.clone(),
        params: Assignment::new(),
        attempt: job.attempt,
        start: Start::Fresh,
        reported: Vec::new(),
        gpu_locks: Vec::new(),
        output_dir: None,
        checkpoints: job.checkpoint_dir.clone().map(|dir| Checkpoints {
            dir,
            resume_from: job.resume_from.clone(),
        }),
    };
    let log_path = worker.log_path.clone();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (halt, halted) = watch::channel(StopRequest::Run);
    let mut running =
        tokio::spawn(async move { LocalExecutor.run(worker, events_tx, halted).await });
    let mut stop = stop;
    let mut stop_open = true;
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    let mut measurements = Vec::new();
    let mut failed: Option<StorageError> = None;
    let outcome = loop {
        tokio::select! {
            Some(event) = events.recv() => {
                if let Err(e) = record(storage, &trial, event, &mut measurements).await {
                    let _ = halt.send(StopRequest::Gracefully);
                    failed.get_or_insert(e);
                }
            }
            _ = heartbeat.tick() => {
                if let Err(e) = storage.attempt_heartbeat(&trial, None).await {
                    tracing::warn!("{e}");
                }
            }
            changed = stop.changed(), if stop_open => {
                if changed.is_err() {
                    stop_open = false;
                } else if *stop.borrow() {
                    let _ = halt.send(StopRequest::Gracefully);
                }
            }
            joined = &mut running => break joined.map_err(|e| {
                RelayError::NotRunning(format!("the task running the worker failed: {e}"))
            })?,
        }
    };
    while let Ok(event) = events.try_recv() {
        if let Err(e) = record(storage, &trial, event, &mut measurements).await {
            failed.get_or_insert(e);
        }
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    let end = relay_end(&outcome, &measurements, &job.metric, log_path);
    storage
        .attempt_heartbeat(&trial, end.last_output.as_deref())
        .await?;
    Ok(end)
}

/// The trial, if `job`'s attempt is its current one and still running.
async fn running_attempt(storage: &Storage, job: &RelayJob) -> Result<TrialRecord, RelayError> {
    let trial = storage
        .trial_by_number(&job.study, job.number)
        .await?
        .ok_or_else(|| {
            RelayError::NotRunning(format!(
                "study '{}' has no trial {} in this database",
                job.study, job.number
            ))
        })?;
    if trial.attempt != job.attempt || trial.state != TrialState::Running {
        return Err(RelayError::NotRunning(format!(
            "trial {} of study '{}' is {} at attempt {}: attempt {} is over, its worker is not started",
            job.number,
            job.study,
            trial.state.as_str(),
            trial.attempt,
            job.attempt
        )));
    }
    Ok(trial)
}

/// Records a measurement of the worker, and the checkpoint folder it resumed from (the
/// controller records the handle of the job, not the relay's pid).
async fn record(
    storage: &Storage,
    trial: &TrialRecord,
    event: WorkerEvent,
    measurements: &mut Vec<Measurement>,
) -> Result<(), StorageError> {
    match event {
        WorkerEvent::Measured { measurement, .. } => {
            storage.record_measurement(trial, &measurement).await?;
            measurements.push(measurement);
        }
        WorkerEvent::Started {
            resumed_from: Some(dir),
            ..
        } => storage.set_resumed_from(trial, &dir).await?,
        WorkerEvent::Started { .. } => {}
    }
    Ok(())
}

/// The relay's exit code and the trial's failure, from how the worker ended and what it
/// reported. A worker that exits 0 having reported a NaN objective fails: the database keeps
/// finite values only, so the relay says it with its exit code and the recorded failure.
fn relay_end(
    outcome: &WorkerOutcome,
    measurements: &[Measurement],
    metric: &str,
    log_path: PathBuf,
) -> RelayEnd {
    let with_output = |message: String| outcome.with_last_output(message);
    let (exit_code, failure) = match &outcome.end {
        WorkerEnd::Exited(0) => match final_value(measurements, metric) {
            Err(e @ ReportError::NotFinite { .. }) => {
                let reason = e.to_string();
                return RelayEnd {
                    exit_code: 1,
                    failure: Some(reason.clone()),
                    last_output: Some(reason),
                    log_path,
                };
            }
            _ => (0, None),
        },
        WorkerEnd::Exited(code) => (
            u8::try_from(*code).unwrap_or(1),
            Some(with_output(format!("the worker exited with code {code}"))),
        ),
        WorkerEnd::Killed(signal) => (
            128u8.saturating_add(signal_number(signal)),
            Some(with_output(format!("the worker was killed by {signal}"))),
        ),
        WorkerEnd::Stopped => (143, Some("the worker was stopped".into())),
        WorkerEnd::LaunchFailed(message) => (127, Some(message.clone())),
        // A local worker watched from its start ends in none of the other ways.
        other => (1, Some(format!("the worker ended unexpectedly: {other:?}"))),
    };
    RelayEnd {
        exit_code,
        last_output: failure
            .as_ref()
            .and(outcome.last_output.clone())
            .or(failure.clone()),
        failure,
        log_path,
    }
}

fn signal_number(name: &str) -> u8 {
    name.parse::<nix::sys::signal::Signal>()
        .map_or(0, |s| s as i32 as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(end: WorkerEnd) -> WorkerOutcome {
        WorkerOutcome {
            last_output: Some("Traceback: boom".into()),
            ..WorkerOutcome::new(1, end)
        }
    }

    #[test]
    fn exit_codes_follow_the_worker() {
        let ok = [Measurement {
            step: None,
            metric: "loss".into(),
            value: 0.5,
        }];
        let end = |e| relay_end(&outcome(e), &ok, "loss", PathBuf::new());
        assert_eq!(end(WorkerEnd::Exited(0)).exit_code, 0);
        let failed = end(WorkerEnd::Exited(3));
        assert_eq!(failed.exit_code, 3);
        assert_eq!(
            failed.failure.as_deref(),
            Some("the worker exited with code 3 (last output: Traceback: boom)")
        );
        assert_eq!(failed.last_output.as_deref(), Some("Traceback: boom"));
        assert_eq!(end(WorkerEnd::Killed("SIGKILL".into())).exit_code, 137);
    }

    #[test]
    fn a_nan_objective_fails_the_relay() {
        let nan = [Measurement {
            step: Some(2),
            metric: "loss".into(),
            value: f64::NAN,
        }];
        let end = relay_end(&outcome(WorkerEnd::Exited(0)), &nan, "loss", PathBuf::new());
        assert_eq!(end.exit_code, 1);
        assert_eq!(
            end.failure.as_deref(),
            Some("the worker reported loss=NaN at step 2")
        );
        assert_eq!(end.last_output, end.failure);
    }
}
