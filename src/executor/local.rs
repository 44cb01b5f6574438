//! Trial workers as local processes.
//!
//! A worker is started from an argv (never a shell string) in a process group of its own, so
//! that a terminal's Ctrl-C reaches the controller only and stopping a worker reaches
//! whatever it started. Its stdout and stderr go straight to files, not through the
//! controller: a worker outlives a controller that is killed, and the next controller adopts
//! it by its pid and start time and goes on reading its files. The stdout file and the metrics
//! file are read for measurements as they grow.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::RawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};

use super::process::{ProcessId, find_by_environment};
use super::{
    Executor, PROTOCOL_VARIABLES, Start, StopRequest, TrialJob, WorkerEnd, WorkerEvent,
    WorkerOutcome, error_log_path,
};
use crate::report::{LineParser, Measurement, MetricsFileReader};

/// How often the output and metrics files are read, and an adopted worker looked at.
const POLL: Duration = Duration::from_millis(200);

/// Runs workers as local processes.
#[derive(Debug, Clone, Default)]
pub struct LocalExecutor;

#[async_trait]
impl Executor for LocalExecutor {
    async fn run(
        &self,
        job: TrialJob,
        events: mpsc::UnboundedSender<WorkerEvent>,
        stop: watch::Receiver<StopRequest>,
    ) -> WorkerOutcome {
        let trial_id = job.trial_id;
        let started = match &job.start {
            Start::Adopt(handle) => Worker::adopt(&job, handle, events),
            Start::Recover { since } => match unrecorded_worker(&job) {
                Some(handle) => Worker::adopt(&job, &handle, events),
                None if wrote_output(&job, *since) => Ok(Worker::ended_unwatched(&job, events)),
                None => Worker::start(&job, events),
            },
            Start::Fresh => Worker::start(&job, events),
        };
        match started {
            Ok(worker) => worker.watch(&job, stop).await,
            Err(message) => WorkerOutcome::new(trial_id, WorkerEnd::LaunchFailed(message)),
        }
    }
}

/// The process a worker is: our child, one adopted from a controller that is gone, or one
/// that a controller now gone started and that ended while no controller watched it.
enum Process {
    Child(Child),
    Adopted(ProcessId),
    EndedUnwatched,
}

/// A running worker and what is read from it.
struct Worker {
    process: Process,
    /// The leader of the worker's process group; `None` once it is known to be gone.
    id: Option<ProcessId>,
    stdout: Tail,
    lines: LineParser,
    metrics_file: MetricsFileReader,
    reported: Reported,
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

impl Worker {
    fn start(job: &TrialJob, events: mpsc::UnboundedSender<WorkerEvent>) -> Result<Self, String> {
        if let Some(dir) = job.log_path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the log directory {}: {e}", dir.display()))?;
        }
        if let Some(dir) = &job.output_dir {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the model folder {}: {e}", dir.display()))?;
        }
        // A metrics file left by an earlier attempt must not be read as this one's.
        let _ = std::fs::remove_file(&job.metrics_path);
        let create = |path: &Path| {
            File::create(path)
                .map_err(|e| format!("cannot create the log file {}: {e}", path.display()))
        };
        let stdout = create(&job.log_path)?;
        let stderr = create(&error_log_path(&job.log_path))?;
        let (program, args) = job
            .argv
            .split_first()
            .ok_or_else(|| "the command is empty".to_string())?;
        let mut command = Command::new(program);
        command
            .args(args)
            // The controller's pool is not the worker's devices: a trial with GPUs gets its
            // own below (job.env), a trial without gets none.
            .env_remove("HPTUNE_GPUS")
            .envs(job.env.iter().map(|(k, v)| (k, v)))
            // The database URL may hold a password, and workers never write the database.
            .env_remove("HPTUNE_STORAGE")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        if !job.gpu_locks.is_empty() {
            let locks = job.gpu_locks.clone();
            // SAFETY: the closure runs in the child between fork and exec, and only calls
            // fcntl, which is async-signal-safe, on descriptors the controller holds open
            // until the worker has ended; it allocates nothing.
            unsafe {
                command.pre_exec(move || inherit(&locks));
            }
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start '{program}': {e}"))?;
        let pid = child
            .id()
            .ok_or("the worker exited before it could be watched")? as i32;
        let id = ProcessId::of(pid).unwrap_or(ProcessId { pid, start: 0 });
        Ok(Self::new(job, Process::Child(child), Some(id), events))
    }

    fn adopt(
        job: &TrialJob,
        handle: &str,
        events: mpsc::UnboundedSender<WorkerEvent>,
    ) -> Result<Self, String> {
        let id = handle
            .strip_prefix("pid:")
            .and_then(ProcessId::parse)
            .ok_or_else(|| format!("'{handle}' is not the handle of a local worker"))?;
        Ok(Self::new(job, Process::Adopted(id), Some(id), events))
    }

    /// The worker of an attempt that a controller now gone started, and that ended before
    /// another controller could watch it: it is judged by the files it wrote.
    fn ended_unwatched(job: &TrialJob, events: mpsc::UnboundedSender<WorkerEvent>) -> Self {
        Self::new(job, Process::EndedUnwatched, None, events)
    }

    fn new(
        job: &TrialJob,
        process: Process,
        id: Option<ProcessId>,
        events: mpsc::UnboundedSender<WorkerEvent>,
    ) -> Self {
        if let Some(id) = id {
            let _ = events.send(WorkerEvent::Started {
                trial_id: job.trial_id,
                handle: format!("pid:{id}"),
                findable_without_handle: true,
            });
        }
        let seen = job
            .reported
            .iter()
            .map(|m| (m.step, m.metric.clone(), m.value.to_bits()))
            .collect();
        Self {
            process,
            id,
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

    /// Reads measurements until the worker ends, stopping it on timeout or when asked to.
    async fn watch(
        mut self,
        job: &TrialJob,
        mut stop: watch::Receiver<StopRequest>,
    ) -> WorkerOutcome {
        let deadline = job.timeout.map(|t| Instant::now() + t);
        // The first read is one period in: a worker that ends sooner is read once, at its end.
        let mut poll = tokio::time::interval_at(Instant::now() + POLL, POLL);
        let mut stop_open = true;
        let end = loop {
            tokio::select! {
                end = wait(&mut self.process) => break end,
                _ = poll.tick() => self.read(job),
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
        };
        if matches!(end, WorkerEnd::TimedOut(_) | WorkerEnd::Stopped) {
            self.terminate(job.grace_period, &mut stop).await;
        }
        self.finish(job);
        WorkerOutcome {
            last_output: last_output(job, &end),
            unreadable: self.reported.unreadable.take(),
            ..WorkerOutcome::new(job.trial_id, end)
        }
    }

    /// SIGTERM to the worker's group, then SIGKILL after the grace period, or as soon as
    /// the controller asks for the stop to happen now.
    async fn terminate(&mut self, grace: Duration, stop: &mut watch::Receiver<StopRequest>) {
        let Some(group) = self.group() else {
            return;
        };
        if *stop.borrow() != StopRequest::Now {
            let _ = killpg(group, Signal::SIGTERM);
            let hurried = async {
                if stop.wait_for(|s| *s == StopRequest::Now).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                _ = tokio::time::timeout(grace, wait(&mut self.process)) => {}
                _ = hurried => {}
            }
        }
        let _ = killpg(group, Signal::SIGKILL);
        let _ = tokio::time::timeout(grace, wait(&mut self.process)).await;
    }

    /// Reads what is left, and ends whatever the worker left running in its group.
    fn finish(&mut self, job: &TrialJob) {
        if let Some(group) = self.group() {
            let _ = killpg(group, Signal::SIGKILL);
        }
        self.read(job);
        if let Some(rest) = self.stdout.rest() {
            self.reported.line(&self.lines, &rest);
        }
    }

    /// The worker's process group, to signal.
    fn group(&self) -> Option<Pid> {
        self.id.map(|id| Pid::from_raw(id.pid))
    }

    /// Reads what the worker added to its stdout and its metrics file.
    fn read(&mut self, job: &TrialJob) {
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

/// The handle of a worker of this attempt that runs although no controller recorded it.
fn unrecorded_worker(job: &TrialJob) -> Option<String> {
    let vars: Vec<(&str, &str)> = job
        .env
        .iter()
        // The trial's own variables; its devices are not what finds it.
        .filter(|(k, _)| PROTOCOL_VARIABLES.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    find_by_environment(&vars).map(|id| format!("pid:{id}"))
}

/// Whether this attempt's worker was started by a controller now gone: the controller
/// creates the attempt's log file just before it starts the worker, so a log file written
/// since the attempt began (`since`, less a second for the file system's coarse clock) is
/// that worker's. The log file of an earlier attempt has another name.
fn wrote_output(job: &TrialJob, since: SystemTime) -> bool {
    let since = since.checked_sub(Duration::from_secs(1)).unwrap_or(since);
    std::fs::metadata(&job.log_path)
        .and_then(|m| m.modified())
        .is_ok_and(|modified| modified >= since)
}

/// Waits for the worker to end.
async fn wait(process: &mut Process) -> WorkerEnd {
    match process {
        Process::Child(child) => exit_end(child.wait().await),
        Process::Adopted(id) => {
            while id.is_alive() {
                tokio::time::sleep(POLL).await;
            }
            WorkerEnd::Vanished
        }
        Process::EndedUnwatched => WorkerEnd::Vanished,
    }
}

fn exit_end(status: std::io::Result<ExitStatus>) -> WorkerEnd {
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => WorkerEnd::Exited(code),
            (None, Some(signal)) => WorkerEnd::Killed(
                Signal::try_from(signal)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {signal}")),
            ),
            (None, None) => WorkerEnd::Killed("an unknown signal".into()),
        },
        Err(e) => WorkerEnd::LaunchFailed(format!("lost track of the worker: {e}")),
    }
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
fn last_output(job: &TrialJob, end: &WorkerEnd) -> Option<String> {
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

/// Lets the worker inherit the lock files of its GPUs (their descriptors are opened
/// close-on-exec, as every file of the controller): its devices stay locked while it runs,
/// also after its controller is killed.
fn inherit(locks: &[RawFd]) -> std::io::Result<()> {
    for fd in locks {
        // SAFETY: fcntl on an open descriptor, changing only its close-on-exec flag.
        if unsafe { nix::libc::fcntl(*fd, nix::libc::F_SETFD, 0) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
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
