//! Reading what a worker writes to its files: its stdout, read line by line as it grows, and
//! cloudml-hypertune's metrics file, each measurement sent to the controller once. Local
//! workers and Slurm jobs (whose files are on a filesystem shared with the controller) are
//! read alike.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;

use super::{TrialJob, WorkerEnd, WorkerEvent};
use crate::protocol::{
    LineParser, LineReader, Measurement, MetricsFileReader, error_log_path, out_of_memory_line,
};

/// What is read of one attempt's worker: its stdout and its metrics file.
pub(super) struct Output {
    stdout: LineReader,
    lines: LineParser,
    metrics_file: MetricsFileReader,
    reported: Reported,
}

impl Output {
    /// A reader of `job`'s files that sends what they report to `events`, leaving out what
    /// was recorded before (an adopted worker's files hold it too).
    pub(super) fn new(job: &TrialJob, events: mpsc::UnboundedSender<WorkerEvent>) -> Self {
        let seen = job
            .reported
            .iter()
            .map(|m| (m.step, m.metric.clone(), m.value.to_bits()))
            .collect();
        Self {
            stdout: LineReader::default(),
            lines: LineParser::new(&job.metric),
            metrics_file: MetricsFileReader::new(),
            reported: Reported {
                seen,
                events,
                trial_id: job.trial_id,
                number: job.number,
                unreadable: None,
            },
        }
    }

    /// Reads what the worker added to its stdout and its metrics file.
    pub(super) fn read(&mut self, job: &TrialJob) {
        let Self {
            stdout,
            lines,
            reported,
            ..
        } = self;
        stdout.read_new(&job.log_path, |line| reported.line(lines, line));
        self.reported
            .emit(self.metrics_file.read_new(&job.metrics_path));
    }

    /// Reads what is left once the worker is gone, a last line without its line break
    /// included.
    pub(super) fn finish(&mut self, job: &TrialJob) {
        self.read(job);
        if let Some(rest) = self.stdout.rest() {
            self.reported.line(&self.lines, &rest);
        }
    }

    /// Why a report of the objective could not be read, if one could not (said once).
    pub(super) fn take_unreadable(&mut self) -> Option<String> {
        self.reported.unreadable.take()
    }
}

/// The measurements sent to the controller.
struct Reported {
    seen: HashSet<(Option<i64>, String, u64)>,
    events: mpsc::UnboundedSender<WorkerEvent>,
    trial_id: i64,
    number: u64,
    /// The first report of the objective whose value is not a number, said once.
    unreadable: Option<String>,
}

impl Reported {
    /// Sends the measurements of a line of stdout. Warns (once) of a line that gives the
    /// objective a value that is not a number: it reports nothing, and the trial may fail
    /// for want of a value.
    fn line(&mut self, parser: &LineParser, line: &str) {
        let measurements = parser.parse(line);
        if measurements.is_empty()
            && self.unreadable.is_none()
            && let Some(problem) = parser.unreadable(line)
        {
            tracing::warn!("trial {}: {problem}", self.number);
            self.unreadable = Some(problem.to_string());
        }
        self.emit(measurements);
    }

    /// Sends each measurement once: a worker may report the same value both ways, and an
    /// adopted worker's file holds what was recorded before.
    fn emit(&mut self, measurements: Vec<Measurement>) {
        for measurement in measurements {
            let key = (
                measurement.step,
                measurement.metric.clone(),
                measurement.value.to_bits(),
            );
            if self.seen.insert(key) {
                let _ = self.events.send(WorkerEvent::Measured {
                    trial_id: self.trial_id,
                    measurement,
                    stored: false,
                });
            }
        }
    }
}

/// Whether this attempt's worker was started by a controller now gone: the controller
/// creates the attempt's log file just before it starts the worker, so a log file written
/// since the attempt began (`since`, less a second for the file system's coarse clock) is
/// that worker's. The log file of an earlier attempt has another name.
pub(super) fn wrote_output(job: &TrialJob, since: SystemTime) -> bool {
    let since = since.checked_sub(Duration::from_secs(1)).unwrap_or(since);
    std::fs::metadata(&job.log_path)
        .and_then(|m| m.modified())
        .is_ok_and(|modified| modified >= since)
}

/// The last line the worker printed, for the message of an end other than a clean exit: on
/// stderr, where errors go, or else on stdout.
pub(super) fn last_output(job: &TrialJob, end: &WorkerEnd) -> Option<String> {
    if *end == WorkerEnd::Exited(0) {
        return None;
    }
    last_line(&error_log_path(&job.log_path)).or_else(|| last_line(&job.log_path))
}

/// The line of the worker's stderr that says it ran out of device memory, for an end other
/// than a clean exit.
pub(super) fn out_of_memory(job: &TrialJob, end: &WorkerEnd) -> Option<String> {
    if *end == WorkerEnd::Exited(0) {
        return None;
    }
    out_of_memory_line(&tail(&error_log_path(&job.log_path), 16 << 10)?)
}

/// The last `bytes` of a file, as text.
fn tail(path: &Path, bytes: u64) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(size.saturating_sub(bytes)))
        .ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    Some(String::from_utf8_lossy(&tail).into_owned())
}

/// The last non-blank line of a file.
fn last_line(path: &Path) -> Option<String> {
    tail(path, 4096)?
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_line_skips_blank_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("err");
        std::fs::write(&path, "one\nTraceback: boom\n\n").unwrap();
        assert_eq!(last_line(&path).as_deref(), Some("Traceback: boom"));
        assert_eq!(last_line(&dir.path().join("none")), None);
    }
}
