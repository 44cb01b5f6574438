//! The service that runs the jobs not answering (Slurm's controller restarting or failing
//! over, a cloud engine's API down): its answers fail for a while, and the jobs run on. hptune
//! asks again, less and less often, for as long as the study's `outage_limit` allows, and only
//! then gives a job up.

use std::time::{Duration, Instant};

/// The longest wait between two tries while the controller does not answer.
const LONGEST_WAIT: Duration = Duration::from_secs(30);

/// An outage of the jobs' service as one job's watcher sees it: since when its answers fail,
/// and how long to wait before the next try.
#[derive(Debug, Clone)]
pub(super) struct Outage {
    /// How long the service may fail to answer before the job is given up.
    limit: Duration,
    /// The first wait after a failure.
    first_wait: Duration,
    /// When the failures in a row began; `None` while the service answers.
    began: Option<Instant>,
    /// The wait before the next try.
    wait: Duration,
}

impl Outage {
    /// No outage yet: one may last `limit`, its tries `first_wait` apart at first, then
    /// twice as far apart each time, up to [`LONGEST_WAIT`].
    pub(super) fn new(limit: Duration, first_wait: Duration) -> Self {
        Self {
            limit,
            first_wait,
            began: None,
            wait: first_wait,
        }
    }

    /// The service answered: the outage, if there was one, is over.
    pub(super) fn answered(&mut self) {
        if let Some(began) = self.began.take() {
            tracing::info!(
                "the jobs' service answers again, after {}",
                humantime::format_duration(round(began.elapsed()))
            );
        }
        self.wait = self.first_wait;
    }

    /// The service did not answer: how long to wait before trying again, or `None` once it
    /// has not answered for longer than the limit.
    pub(super) fn failed(&mut self) -> Option<Duration> {
        let began = *self.began.get_or_insert_with(Instant::now);
        if began.elapsed() > self.limit {
            return None;
        }
        let wait = self.wait;
        self.wait = (self.wait * 2).min(LONGEST_WAIT);
        Some(wait)
    }

    /// The message of a job given up after `service` failed to answer with `error`.
    pub(super) fn given_up(&self, service: &str, error: &str) -> String {
        format!(
            "{service} has not answered for {} (trial.executor.outage_limit): {error}",
            humantime::format_duration(round(self.limit))
        )
    }
}

/// `duration` to the second.
fn round(duration: Duration) -> Duration {
    Duration::from_secs(duration.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tries_grow_apart_and_start_again_after_an_answer() {
        let mut outage = Outage::new(Duration::from_secs(3600), Duration::from_secs(5));
        let waits: Vec<u64> = (0..6).map(|_| outage.failed().unwrap().as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 30, 30, 30]);
        outage.answered();
        assert_eq!(outage.failed(), Some(Duration::from_secs(5)));
        assert!(outage.given_up("Slurm's controller", "boom").contains("1h"));
    }

    #[test]
    fn a_job_is_given_up_once_the_limit_has_passed() {
        let mut outage = Outage::new(Duration::ZERO, Duration::from_secs(5));
        outage.began = Some(Instant::now() - Duration::from_secs(1));
        assert_eq!(outage.failed(), None);
    }
}
