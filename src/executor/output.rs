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

use super::{TrialJob, WorkerEnd, WorkerEvent, error_log_path};
use crate::report::{LineParser, Measurement, MetricsFileReader};

/// What is read of one attempt's worker: its stdout and its metrics file.
pub(super) struct Output {
    stdout: Tail,
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
            stdout: Tail::default(),
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

/// The longest line read, in bytes: of a longer line, the first `MAX_LINE` bytes are parsed
/// and the rest is skipped, so that a worker's output costs the controller no more memory
/// whatever it prints (docs/worker-protocol.md).
const MAX_LINE: usize = 64 * 1024;
/// How much of a growing file is read at a time.
const CHUNK: usize = 64 * 1024;

/// Reads a growing file line by line, `CHUNK` bytes at a time. A line ends at `\n` or at a
/// lone `\r` (a progress bar redrawn in place prints many of those and no `\n`).
#[derive(Debug, Default)]
struct Tail {
    offset: u64,
    /// The line read so far, up to `MAX_LINE` bytes.
    partial: Vec<u8>,
    /// Whether the last line read ended at `\r`: a `\n` right after it ends no other line.
    after_cr: bool,
    /// The buffer reads go into, kept between reads.
    chunk: Vec<u8>,
}

impl Tail {
    /// Gives `line` each complete line added since the last call, in order.
    fn read_new(&mut self, path: &Path, mut line: impl FnMut(&str)) {
        let Ok(mut file) = File::open(path) else {
            return;
        };
        let grown = file.metadata().is_ok_and(|m| m.len() > self.offset);
        if !grown || file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut chunk = std::mem::take(&mut self.chunk);
        chunk.resize(CHUNK, 0);
        while let Ok(read @ 1..) = file.read(&mut chunk) {
            self.offset += read as u64;
            self.split(&chunk[..read], &mut line);
        }
        self.chunk = chunk;
    }

    /// Adds `bytes` to the line read so far, giving `line` each line they complete.
    fn split(&mut self, bytes: &[u8], line: &mut impl FnMut(&str)) {
        for piece in bytes.split_inclusive(|b| matches!(b, b'\n' | b'\r')) {
            let (text, ended) = match piece.split_last() {
                Some((b'\n' | b'\r', text)) => (text, true),
                _ => (piece, false),
            };
            let crlf = std::mem::replace(&mut self.after_cr, piece.ends_with(b"\r"));
            if crlf && piece == b"\n" {
                continue;
            }
            let room = MAX_LINE - self.partial.len();
            self.partial
                .extend_from_slice(&text[..text.len().min(room)]);
            if ended {
                line(&String::from_utf8_lossy(&self.partial));
                self.partial.clear();
            }
        }
    }

    /// A last line without its line break, once the writer is gone.
    fn rest(&mut self) -> Option<String> {
        let rest = String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned();
        (!rest.trim().is_empty()).then_some(rest)
    }
}

/// The last line the worker printed, for the message of an end other than a clean exit: on
/// stderr, where errors go, or else on stdout.
pub(super) fn last_output(job: &TrialJob, end: &WorkerEnd) -> Option<String> {
    if *end == WorkerEnd::Exited(0) {
        return None;
    }
    last_line(&error_log_path(&job.log_path)).or_else(|| last_line(&job.log_path))
}

/// The last non-blank line of a file.
fn last_line(path: &Path) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    let from = size.saturating_sub(4096);
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    String::from_utf8_lossy(&tail)
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines `tail` reads from `path` now.
    fn lines(tail: &mut Tail, path: &Path) -> Vec<String> {
        let mut lines = Vec::new();
        tail.read_new(path, |line| lines.push(line.to_string()));
        lines
    }

    #[test]
    fn tail_gives_each_complete_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut tail = Tail::default();
        assert!(lines(&mut tail, &path).is_empty());
        std::fs::write(&path, "a=1\nb=").unwrap();
        assert_eq!(lines(&mut tail, &path), ["a=1"]);
        std::fs::write(&path, "a=1\nb=2\r\n\nc").unwrap();
        assert_eq!(lines(&mut tail, &path), ["b=2", ""]);
        assert_eq!(tail.rest().as_deref(), Some("c"));
    }

    /// A progress bar redrawn with `\r` ends a line at each redraw: its text is not kept
    /// until a `\n` that may never come.
    #[test]
    fn tail_ends_a_line_at_a_lone_carriage_return() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::write(&path, "10%\r20%\rstep=1 loss=0.5\r").unwrap();
        let mut tail = Tail::default();
        assert_eq!(lines(&mut tail, &path), ["10%", "20%", "step=1 loss=0.5"]);
        assert_eq!(tail.rest(), None);
        // A `\r\n` split between two reads is one line end.
        std::fs::write(&path, "10%\r20%\rstep=1 loss=0.5\r\nloss=0.25\n").unwrap();
        assert_eq!(lines(&mut tail, &path), ["loss=0.25"]);
    }

    /// A 100 MB line without a line break (a sparse file: written in no time) is read in
    /// chunks into a buffer of at most `MAX_LINE` bytes; the line is cut to its first
    /// `MAX_LINE` bytes, which are parsed, and the lines after it are read as usual.
    #[test]
    fn tail_keeps_a_bounded_prefix_of_a_huge_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut file = File::create(&path).unwrap();
        std::io::Write::write_all(&mut file, b"step=7 loss=0.25 ").unwrap();
        let huge = 100 << 20;
        file.set_len(huge).unwrap();
        let mut tail = Tail::default();
        assert!(lines(&mut tail, &path).is_empty());
        assert_eq!(tail.partial.len(), MAX_LINE);
        assert!(tail.partial.capacity() <= 2 * MAX_LINE);
        file.seek(SeekFrom::End(0)).unwrap();
        std::io::Write::write_all(&mut file, b"\nloss=0.5\n").unwrap();
        let read = lines(&mut tail, &path);
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].len(), MAX_LINE);
        assert_eq!(read[1], "loss=0.5");
        assert!(tail.partial.capacity() <= 2 * MAX_LINE);
        let parser = LineParser::new("loss");
        let step = |line: &str| parser.parse(line).first().and_then(|m| m.step);
        assert_eq!(step(&read[0]), Some(7));
    }

    #[test]
    fn last_line_skips_blank_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("err");
        std::fs::write(&path, "one\nTraceback: boom\n\n").unwrap();
        assert_eq!(last_line(&path).as_deref(), Some("Traceback: boom"));
        assert_eq!(last_line(&dir.path().join("none")), None);
    }
}
