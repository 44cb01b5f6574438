//! `hptune run` and `hptune trial`: the study made ready and run ([`ops::prepare_study`],
//! [`ops::prepare_trial`]) under a display and the signals, then the result shown.

use std::path::Path;
use std::process::ExitCode;

use tokio::sync::watch;

use hptune::controller::{RunSummary, StudyEnd};
use hptune::executor::StopRequest;
use hptune::ops::{self, Prepared, Resumptions, WorkerOptions};
use hptune::storage::{StorageUrl, TrialState, front_numbers, ranked_first};

use super::progress::Display;
use super::table::printable;
use super::{Failure, show};

/// Exit code of a study stopped by Ctrl-C or SIGTERM.
const INTERRUPTED: u8 = 130;

/// How many of the best trials are shown when a study ends.
const TOP_TRIALS: usize = 5;

/// Runs or continues the study of `path`.
pub async fn run_study(
    path: &Path,
    url: &StorageUrl,
    options: WorkerOptions,
    keep: &[u64],
) -> Result<ExitCode, Failure> {
    let prepared = ops::prepare_study(path, url, &options, keep).await?;
    let summary = supervise(prepared).await?;
    Ok(print_end(&summary))
}

/// Runs one trial of the study of `path` with the parameters given by hand.
pub async fn run_trial(
    path: &Path,
    url: &StorageUrl,
    pairs: &[(String, String)],
    options: WorkerOptions,
) -> Result<ExitCode, Failure> {
    let prepared = ops::prepare_trial(path, url, &options, pairs).await?;
    let summary = supervise(prepared).await?;
    let trial = summary
        .trials
        .iter()
        .max_by_key(|t| t.number)
        .ok_or_else(|| Failure::Other("the trial was not recorded".into()))?;
    show::print_trials(
        std::slice::from_ref(trial),
        &summary.study,
        &front_numbers(&summary.trials, &summary.study),
        &Resumptions::new(),
        super::TrialsFormat::Table,
    )?;
    Ok(match (trial.state, &summary.end) {
        (_, StudyEnd::Interrupted) => ExitCode::from(INTERRUPTED),
        (TrialState::Succeeded, _) => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}

/// Says which GPUs the trials share, then runs the controller with a display, stopping
/// workers on Ctrl-C or SIGTERM.
async fn supervise(prepared: Prepared) -> Result<RunSummary, Failure> {
    if let Some(gpus) = &prepared.plan.gpus {
        let at_once = gpus
            .trials_at_once()
            .min(prepared.plan.parallel_trial_count);
        eprintln!(
            "GPUs {} (from {}), {} per trial: at most {at_once} trial{} at once",
            gpus.names(),
            gpus.source,
            gpus.share,
            if at_once == 1 { "" } else { "s" }
        );
        for line in [gpus.memory_caps(), gpus.isolation()].into_iter().flatten() {
            eprintln!("{line}");
        }
    }
    let (interrupt_tx, interrupt) = watch::channel(StopRequest::Run);
    let signals = tokio::spawn(async move {
        wait_for_signal().await;
        let _ = interrupt_tx.send(StopRequest::Gracefully);
        wait_for_signal().await;
        let _ = interrupt_tx.send(StopRequest::Now);
    });
    let mut display = Display::new(&prepared.study);
    let result = prepared.run(&mut display, interrupt).await;
    signals.abort();
    display.clear();
    Ok(result?)
}

pub(super) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Prints the best trials (with several objectives, by Pareto rank, the front first) and why
/// the study ended; returns the exit code.
fn print_end(summary: &RunSummary) -> ExitCode {
    let study = &summary.study;
    let best = ranked_first(&summary.trials, study, TOP_TRIALS);
    let front = front_numbers(&summary.trials, study);
    if !best.is_empty()
        && let Err(e) = show::print_trials(
            &best,
            study,
            &front,
            &Resumptions::new(),
            super::TrialsFormat::Table,
        )
    {
        eprintln!("error: {e}");
    }
    let name = &summary.study.name;
    let total = summary.trials.len();
    match &summary.end {
        StudyEnd::BudgetSpent | StudyEnd::Exhausted => {
            let what = if summary.end == StudyEnd::Exhausted {
                "every grid point was tried"
            } else {
                "the trial budget is spent"
            };
            eprintln!("study '{name}' is complete: {total} trials, {what}");
            ExitCode::SUCCESS
        }
        StudyEnd::TooManyFailures { failed, last_error } => {
            eprintln!(
                "error: study '{name}' stopped: {failed} trials failed (max_failed_trial_count); last error: {}",
                printable(last_error.as_deref().unwrap_or("unknown"))
            );
            eprintln!(
                "fix what the last error names, raise max_failed_trial_count, and run the same command to continue"
            );
            ExitCode::from(1)
        }
        StudyEnd::Interrupted => {
            eprintln!(
                "study '{name}' interrupted after {total} trials: run the same command to continue"
            );
            ExitCode::from(INTERRUPTED)
        }
    }
}
