//! Watching a worker whose output is in files the controller can read (a local process, a
//! Slurm job on a shared filesystem) until it ends: its files are read as they grow, and it is
//! stopped when the trial times out or the controller asks.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use super::output::{Output, last_output, out_of_memory};
use super::{StopRequest, TrialJob, WorkerEnd, WorkerOutcome};

/// How often the output and metrics files are read.
const POLL: Duration = Duration::from_millis(200);

/// A worker that runs somewhere, seen from the controller.
#[async_trait]
pub(super) trait Worker: Send {
    /// Waits for the worker to end. The future is kept between reads of the files, so a
    /// worker that is polled may sleep between its polls.
    async fn wait(&mut self) -> WorkerEnd;

    /// Stops the worker: gracefully, forcibly once `grace` has passed or as soon as `stop`
    /// says [`StopRequest::Now`].
    async fn terminate(&mut self, grace: Duration, stop: &mut watch::Receiver<StopRequest>);

    /// Why the worker has not started yet (a job its scheduler still holds), if it has not.
    async fn never_started(&mut self) -> Option<String> {
        None
    }

    /// Ends whatever the worker left behind once it ended.
    async fn clean_up(&mut self) {}
}

/// Reads `output` until `worker` ends, stopping it on timeout or when `stop` asks to.
pub(super) async fn follow(
    worker: &mut dyn Worker,
    mut output: Output,
    job: &TrialJob,
    mut stop: watch::Receiver<StopRequest>,
) -> WorkerOutcome {
    let deadline = job.timeout.map(|t| Instant::now() + t);
    // The first read is one period in: a worker that ends sooner is read once, at its end.
    let mut poll = tokio::time::interval_at(Instant::now() + POLL, POLL);
    let mut stop_open = true;
    let end = {
        let ended = worker.wait();
        tokio::pin!(ended);
        loop {
            tokio::select! {
                end = &mut ended => break end,
                _ = poll.tick() => output.read(job),
                _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    break WorkerEnd::TimedOut(job.timeout.unwrap_or_default());
                }
                changed = stop.changed(), if stop_open => {
                    if changed.is_err() {
                        stop_open = false;
                    } else if *stop.borrow() != StopRequest::Run {
                        break WorkerEnd::Stopped;
                    }
                }
            }
        }
    };
    let end = match end {
        WorkerEnd::TimedOut(after) => match worker.never_started().await {
            Some(why) => WorkerEnd::TimedOutBeforeStart { after, why },
            None => end,
        },
        end => end,
    };
    if matches!(
        end,
        WorkerEnd::TimedOut(_) | WorkerEnd::TimedOutBeforeStart { .. } | WorkerEnd::Stopped
    ) {
        worker.terminate(job.grace_period, &mut stop).await;
    }
    worker.clean_up().await;
    output.finish(job);
    WorkerOutcome {
        last_output: last_output(job, &end),
        out_of_memory: out_of_memory(job, &end),
        unreadable: output.take_unreadable(),
        ..WorkerOutcome::new(job.trial_id, end)
    }
}

/// Waits until `stop` says [`StopRequest::Now`]; forever if it never can.
pub(super) async fn hurried(stop: &mut watch::Receiver<StopRequest>) {
    if stop.wait_for(|s| *s == StopRequest::Now).await.is_err() {
        std::future::pending::<()>().await;
    }
}
