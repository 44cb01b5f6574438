//! What a user sees while a study runs: a progress bar on a terminal, one line per finished
//! trial otherwise (CI logs, pipes).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::table::{printable, short};
use hptune::controller::{Best, Progress, RunEvent, RunObserver};
use hptune::storage::{TrialRecord, TrialState};
use hptune::study::Study;

/// Shows the events of a running study on stderr.
pub struct Display {
    bar: Option<ProgressBar>,
    /// The study's objectives' metrics, in order.
    metrics: Vec<String>,
}

impl Display {
    /// A display for `study`: a bar if stderr is a terminal.
    pub fn new(study: &Study) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = match study.budget.max_trial_count {
                Some(n) => ProgressBar::new(n),
                None => ProgressBar::no_length(),
            };
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {prefix} [{bar:30}] {pos}/{len} trials, {elapsed} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(study.name.clone());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Self {
            bar,
            metrics: study.objectives().map(|o| o.metric.clone()).collect(),
        }
    }

    /// Removes the bar before the final table is printed.
    pub fn clear(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// Shows a line, its control characters escaped: it may hold what a worker printed.
    fn line(&self, text: String) {
        let text = printable(&text);
        match &self.bar {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }

    fn finished(&self, trial: &TrialRecord) -> String {
        match (trial.state, trial.value) {
            (TrialState::Succeeded, Some(value)) => {
                // With several objectives, each one's value; else the trial's value.
                let values = match trial.objective_values.as_slice() {
                    [] => std::slice::from_ref(&value),
                    several => several,
                };
                let shown: Vec<String> = self
                    .metrics
                    .iter()
                    .zip(values)
                    .map(|(metric, v)| format!("{metric}={}", short(*v)))
                    .collect();
                format!("trial {} succeeded: {}", trial.number, shown.join(" "))
            }
            (state, _) => format!(
                "trial {} {}: {}",
                trial.number,
                state.as_str(),
                trial.error.as_deref().unwrap_or("no reason recorded")
            ),
        }
    }
}

fn counts(progress: &Progress) -> String {
    let best = match progress.best {
        Some(Best::Trial { number, value }) => format!(", best {} (trial {number})", short(value)),
        Some(Best::Front {
            trials,
            hypervolume,
        }) => format!(", front of {trials} (hypervolume {})", short(hypervolume)),
        None => String::new(),
    };
    let limit = progress
        .limited_by_gpus
        .map(|gpus| {
            format!(
                " (limited by {gpus} GPU{})",
                if gpus == 1 { "" } else { "s" }
            )
        })
        .unwrap_or_default();
    let queued = match progress.queued {
        0 => String::new(),
        n => format!(", {n} queued"),
    };
    format!(
        "{} running{limit}{queued}, {} failed{best}",
        progress.running, progress.failed
    )
}

impl RunObserver for Display {
    fn observe(&mut self, event: RunEvent<'_>, progress: &Progress) {
        if let Some(bar) = &self.bar {
            bar.set_position(progress.done() as u64);
            bar.set_message(counts(progress));
        }
        match event {
            RunEvent::Resumed { finished, adopted } => {
                let adopted = if adopted > 0 {
                    format!(
                        "; taking over {adopted} trials left unfinished by a controller that is gone or was interrupted"
                    )
                } else {
                    String::new()
                };
                self.line(format!(
                    "continuing the study: {finished} trials already recorded{adopted}"
                ));
            }
            RunEvent::TrialRetried { trial, reason } => {
                self.line(format!(
                    "trial {} runs again (attempt {}): {reason}",
                    trial.number, trial.attempt
                ));
            }
            RunEvent::TrialInterrupted { trial } => {
                self.line(format!(
                    "trial {} interrupted: it runs again (attempt {}) when the study is run again",
                    trial.number, trial.attempt
                ));
            }
            RunEvent::TrialStarted { trial } => {
                tracing::debug!(number = trial.number, params = ?trial.params, "trial started");
            }
            RunEvent::TrialFinished { trial } => {
                let text = self.finished(trial);
                if self.bar.is_some() {
                    if trial.state != TrialState::Succeeded {
                        self.line(text);
                    }
                } else {
                    let of = progress.budget.map(|n| format!("/{n}")).unwrap_or_default();
                    self.line(format!(
                        "{text} [{}{of} done, {}]",
                        progress.done(),
                        counts(progress)
                    ));
                }
            }
            RunEvent::WaitingForGpus => self.line(
                "waiting for GPUs: the free devices of the pool are locked by another process"
                    .into(),
            ),
            RunEvent::Stopping { now: false } => self.line(
                "interrupted: stopping running workers (Ctrl-C again to kill them at once; run the same command to continue)"
                    .into(),
            ),
            RunEvent::Stopping { now: true } => {
                self.line("interrupted again: killing running workers".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_say_what_limits_the_running_trials() {
        let mut progress = Progress {
            budget: Some(12),
            succeeded: 3,
            failed: 1,
            stopped: 0,
            running: 1,
            queued: 0,
            best: Some(Best::Trial {
                number: 2,
                value: 0.5,
            }),
            limited_by_gpus: Some(1),
        };
        assert_eq!(
            counts(&progress),
            "1 running (limited by 1 GPU), 1 failed, best 0.5 (trial 2)"
        );
        progress.limited_by_gpus = Some(4);
        assert!(counts(&progress).starts_with("1 running (limited by 4 GPUs), "));
        progress.limited_by_gpus = None;
        assert!(counts(&progress).starts_with("1 running, 1 failed"));
        progress.queued = 2998;
        assert!(counts(&progress).starts_with("1 running, 2998 queued, 1 failed"));
        // Several objectives: the front's size and hypervolume, not one objective's best.
        progress.best = Some(Best::Front {
            trials: 7,
            hypervolume: 0.734,
        });
        assert_eq!(
            counts(&progress),
            "1 running, 2998 queued, 1 failed, front of 7 (hypervolume 0.734)"
        );
    }
}
