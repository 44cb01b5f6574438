//! Human progress on stderr: a bar per epoch on a terminal, periodic log lines otherwise.

use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// Progress of one epoch.
pub struct EpochProgress {
    bar: Option<ProgressBar>,
    epoch: usize,
    epochs: usize,
    total_batches: usize,
    samples: usize,
    started: Instant,
    last_log: Instant,
}

impl EpochProgress {
    /// Starts showing epoch `epoch` of `epochs`, made of `total_batches` batches.
    pub fn start(epoch: usize, epochs: usize, total_batches: usize) -> Self {
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
            last_log: Instant::now(),
        }
    }

    /// Records a finished batch of `samples` examples with this training loss.
    pub fn batch_done(&mut self, batch: usize, samples: usize, loss: f64) {
        self.samples += samples;
        let rate = self.samples as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        match &self.bar {
            Some(bar) => {
                bar.set_message(format!("{rate:.1} samples/s, loss {loss:.4}"));
                bar.set_position(batch as u64);
            }
            None if self.last_log.elapsed().as_secs() >= 10 || batch == self.total_batches => {
                self.last_log = Instant::now();
                tracing::info!(
                    "epoch {}/{}: batch {batch}/{}, {rate:.1} samples/s, loss {loss:.4}",
                    self.epoch,
                    self.epochs,
                    self.total_batches
                );
            }
            None => {}
        }
    }

    /// Ends the epoch's display; returns its training throughput in samples per second.
    pub fn finish(self) -> f64 {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
        self.samples as f64 / self.started.elapsed().as_secs_f64().max(1e-9)
    }
}
