//! Human progress on stderr: a bar per epoch on a terminal, periodic log lines otherwise.
//!
//! The training loss is shown only when a report is due (the first and last batch of an epoch,
//! then every second on the bar, every 10 s in the log): reading it from a GPU stops the
//! device's queue, so the loop reads it only when it is shown.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::error::Result;

/// How often the bar shows a new loss.
const BAR_EVERY: Duration = Duration::from_secs(1);
/// How often a log line reports the loss when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Progress of one epoch.
pub(crate) struct EpochProgress {
    bar: Option<ProgressBar>,
    epoch: usize,
    epochs: usize,
    total_batches: usize,
    samples: usize,
    started: Instant,
    last_report: Instant,
}

impl EpochProgress {
    /// Starts showing epoch `epoch` of `epochs`, made of `total_batches` batches.
    pub(crate) fn start(epoch: usize, epochs: usize, total_batches: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total_batches as u64);
            let style = ProgressStyle::with_template(
                "epoch {prefix} [{bar:30}] {pos}/{len} batches, {msg} ({elapsed} < {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(format!("{epoch}/{epochs}"));
            bar
        });
        EpochProgress {
            bar,
            epoch,
            epochs,
            total_batches,
            samples: 0,
            started: Instant::now(),
            last_report: Instant::now(),
        }
    }

    /// Whether batch `batch` (1-based) shows the loss.
    fn due(&self, batch: usize) -> bool {
        let every = if self.bar.is_some() {
            BAR_EVERY
        } else {
            LOG_EVERY
        };
        batch == 1 || batch == self.total_batches || self.last_report.elapsed() >= every
    }

    /// Records a finished batch of `samples` examples; when a report is due, shows the training
    /// loss that `loss` reads (its error, a diverged run say, is returned).
    pub(crate) fn batch_done(
        &mut self,
        batch: usize,
        samples: usize,
        loss: impl FnOnce() -> Result<f64>,
    ) -> Result<()> {
        self.samples += samples;
        if let Some(bar) = &self.bar {
            bar.set_position(batch as u64);
        }
        if !self.due(batch) {
            return Ok(());
        }
        let loss = loss()?;
        self.last_report = Instant::now();
        let elapsed = self.started.elapsed().as_secs_f64();
        let rate = self.samples as f64 / elapsed.max(1e-9);
        match &self.bar {
            Some(bar) => bar.set_message(format!("{rate:.1} samples/s, loss {loss:.4}")),
            None => tracing::info!(
                "epoch {}/{}: batch {batch}/{} after {elapsed:.2} s, {rate:.1} samples/s, loss {loss:.4}",
                self.epoch,
                self.epochs,
                self.total_batches
            ),
        }
        Ok(())
    }

    /// Ends the epoch's display; returns its training throughput in samples per second.
    pub(crate) fn finish(self) -> f64 {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
        self.samples as f64 / self.started.elapsed().as_secs_f64().max(1e-9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TrainerError;

    #[test]
    fn the_loss_is_read_at_the_first_and_last_batch_only_when_batches_are_quick() {
        let mut progress = EpochProgress::start(1, 1, 5);
        let mut read = Vec::new();
        for batch in 1..=5 {
            progress
                .batch_done(batch, 2, || {
                    read.push(batch);
                    Ok(0.5)
                })
                .unwrap();
        }
        assert_eq!(read, [1, 5]);
        assert!(progress.finish() > 0.0);
    }

    #[test]
    fn an_error_of_the_loss_read_is_returned() {
        let mut progress = EpochProgress::start(1, 1, 3);
        let error = progress
            .batch_done(1, 2, || Err(TrainerError::Backend("lost".to_string())))
            .unwrap_err();
        assert!(error.to_string().contains("lost"), "{error}");
    }
}
