//! `hptune relay`: the command of a remote trial job's container.

use std::process::ExitCode;

use tokio::sync::watch;

use hptune::executor::relay::{RelayError, RelayJob, relay as run_relay};
use hptune::protocol::error_log_path;
use hptune::storage::{Storage, StorageUrl};

use super::Failure;
use super::run::wait_for_signal;

/// Runs the worker of `job`, relaying its measurements into the storage at `url`; exits
/// with the worker's exit code. The worker's output is copied to the relay's own stdout and
/// stderr at its end, where the engine's logs show it.
pub async fn relay(url: &StorageUrl, job: &RelayJob) -> Result<ExitCode, Failure> {
    if !matches!(url, StorageUrl::Postgres(_)) {
        return Err(Failure::BadInput(format!(
            "the relay writes to PostgreSQL (HPTUNE_STORAGE=postgres://...), not {url}: a remote job cannot reach the controller's SQLite file"
        )));
    }
    let storage = Storage::open(url).await?;
    let (stop_tx, stop) = watch::channel(false);
    let signals = tokio::spawn(async move {
        wait_for_signal().await;
        let _ = stop_tx.send(true);
    });
    let result = run_relay(&storage, job, stop).await;
    signals.abort();
    storage.close().await;
    let end = result.map_err(|e| match e {
        RelayError::NotRunning(message) => Failure::BadInput(message),
        RelayError::Storage(e) => e.into(),
    })?;
    copy_to(&end.log_path, &mut std::io::stdout());
    copy_to(&error_log_path(&end.log_path), &mut std::io::stderr());
    if let Some(failure) = &end.failure {
        eprintln!(
            "hptune relay: trial {} attempt {}: {failure}",
            job.number, job.attempt
        );
    }
    Ok(ExitCode::from(end.exit_code))
}

fn copy_to(path: &std::path::Path, out: &mut dyn std::io::Write) {
    if let Ok(mut file) = std::fs::File::open(path) {
        let _ = std::io::copy(&mut file, out);
    }
}
