//! Trial workers as child processes of the controller.
//!
//! Each worker is started from an argv (never a shell string) in a process group of its own,
//! so that a terminal's Ctrl-C reaches the controller only and stopping a worker reaches
//! whatever it started. Its stdout and stderr are copied line by line to its log file; stdout
//! lines and the metrics file are read for measurements as they come.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Split};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};

use super::{Executor, TrialJob, WorkerEnd, WorkerEvent, WorkerOutcome};
use crate::report::{LineParser, Measurement, MetricsFileReader};

/// How often the metrics file is read while a worker runs.
const METRICS_POLL: Duration = Duration::from_millis(500);
/// How long output is still read after the worker exited (a grandchild may hold the pipe).
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Runs workers as local processes.
#[derive(Debug, Clone, Default)]
pub struct LocalExecutor;

#[async_trait]
impl Executor for LocalExecutor {
    async fn run(
        &self,
        job: TrialJob,
        events: mpsc::UnboundedSender<WorkerEvent>,
        stop: watch::Receiver<bool>,
    ) -> WorkerOutcome {
        let trial_id = job.trial_id;
        let (end, last_output) = match Worker::start(&job, events) {
            Ok(worker) => worker.watch(&job, stop).await,
            Err(message) => (WorkerEnd::LaunchFailed(message), None),
        };
        WorkerOutcome {
            trial_id,
            end,
            last_output,
        }
    }
}

type Lines<R> = Split<BufReader<R>>;

/// A started worker and what is read from it.
struct Worker {
    child: Child,
    group: Pid,
    stdout: Option<Lines<ChildStdout>>,
    stderr: Option<Lines<ChildStderr>>,
    log: Option<File>,
    lines: LineParser,
    metrics_file: MetricsFileReader,
    seen: HashSet<(Option<i64>, String, u64)>,
    events: mpsc::UnboundedSender<WorkerEvent>,
    trial_id: i64,
    last_stdout: Option<String>,
    last_stderr: Option<String>,
}

impl Worker {
    fn start(job: &TrialJob, events: mpsc::UnboundedSender<WorkerEvent>) -> Result<Self, String> {
        if let Some(dir) = job.log_path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the log directory {}: {e}", dir.display()))?;
        }
        // A metrics file left by an earlier attempt must not be read as this one's.
        let _ = std::fs::remove_file(&job.metrics_path);
        let log = File::create(&job.log_path)
            .map_err(|e| format!("cannot create the log file {}: {e}", job.log_path.display()))?;
        let (program, args) = job
            .argv
            .split_first()
            .ok_or_else(|| "the command is empty".to_string())?;
        let mut child = Command::new(program)
            .args(args)
            .envs(job.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start '{program}': {e}"))?;
        let pid = child
            .id()
            .ok_or("the worker exited before it could be watched")?;
        let _ = events.send(WorkerEvent::Started {
            trial_id: job.trial_id,
            handle: format!("pid:{pid}"),
        });
        Ok(Self {
            stdout: child.stdout.take().map(|s| BufReader::new(s).split(b'\n')),
            stderr: child.stderr.take().map(|s| BufReader::new(s).split(b'\n')),
            child,
            group: Pid::from_raw(pid as i32),
            log: Some(log),
            lines: LineParser::new(&job.metric),
            metrics_file: MetricsFileReader::new(),
            seen: HashSet::new(),
            events,
            trial_id: job.trial_id,
            last_stdout: None,
            last_stderr: None,
        })
    }

    /// Reads output and measurements until the worker ends, stopping it on timeout or when
    /// asked to.
    async fn watch(
        mut self,
        job: &TrialJob,
        mut stop: watch::Receiver<bool>,
    ) -> (WorkerEnd, Option<String>) {
        let deadline = job.timeout.map(|t| Instant::now() + t);
        let mut poll = tokio::time::interval(METRICS_POLL);
        let mut stop_open = true;
        let reason = loop {
            tokio::select! {
                status = self.child.wait() => {
                    let end = exit_end(status);
                    self.finish(job).await;
                    return (end, self.last_output());
                }
                line = next_line(&mut self.stdout) => self.take_line(line, true),
                line = next_line(&mut self.stderr) => self.take_line(line, false),
                _ = poll.tick() => self.read_metrics_file(&job.metrics_path),
                _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    break WorkerEnd::TimedOut(job.timeout.unwrap_or_default());
                }
                changed = stop.changed(), if stop_open => {
                    if changed.is_err() {
                        stop_open = false;
                    } else if *stop.borrow() {
                        break WorkerEnd::Stopped;
                    }
                }
            }
        };
        self.terminate(job.grace_period).await;
        self.finish(job).await;
        (reason, self.last_output())
    }

    /// The last line on stderr, where errors go, or else on stdout.
    fn last_output(&mut self) -> Option<String> {
        self.last_stderr.take().or(self.last_stdout.take())
    }

    /// SIGTERM to the worker's group, then SIGKILL after the grace period.
    async fn terminate(&mut self, grace: Duration) {
        let _ = killpg(self.group, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        loop {
            tokio::select! {
                _ = self.child.wait() => return,
                line = next_line(&mut self.stdout) => self.take_line(line, true),
                line = next_line(&mut self.stderr) => self.take_line(line, false),
                _ = sleep_until(deadline) => break,
            }
        }
        let _ = killpg(self.group, Signal::SIGKILL);
        let _ = self.child.wait().await;
    }

    /// Reads what is left of the output and the metrics file, and ends whatever the worker
    /// left running in its group.
    async fn finish(&mut self, job: &TrialJob) {
        let deadline = Instant::now() + DRAIN_LIMIT;
        while self.stdout.is_some() || self.stderr.is_some() {
            tokio::select! {
                line = next_line(&mut self.stdout) => self.take_line(line, true),
                line = next_line(&mut self.stderr) => self.take_line(line, false),
                _ = sleep_until(deadline) => break,
            }
        }
        let _ = killpg(self.group, Signal::SIGKILL);
        self.read_metrics_file(&job.metrics_path);
        if let Some(mut log) = self.log.take() {
            let _ = log.flush();
        }
    }

    fn take_line(&mut self, line: Option<Vec<u8>>, from_stdout: bool) {
        let Some(bytes) = line else {
            if from_stdout {
                self.stdout = None;
            } else {
                self.stderr = None;
            }
            return;
        };
        if let Some(log) = &mut self.log {
            let _ = log.write_all(&bytes).and_then(|_| log.write_all(b"\n"));
        }
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim_end_matches('\r');
        if !text.trim().is_empty() {
            let last = if from_stdout {
                &mut self.last_stdout
            } else {
                &mut self.last_stderr
            };
            *last = Some(text.trim().to_string());
        }
        if from_stdout {
            let measurements = self.lines.parse(text);
            self.emit(measurements);
        }
    }

    fn read_metrics_file(&mut self, path: &Path) {
        let measurements = self.metrics_file.read_new(path);
        self.emit(measurements);
    }

    /// Sends each measurement once: a worker may report the same value both ways.
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
                });
            }
        }
    }
}

/// The next line of a stream, or `None` at its end; pends forever once the stream is gone,
/// so that `select!` ignores it.
async fn next_line<R: tokio::io::AsyncRead + Unpin>(
    lines: &mut Option<Lines<R>>,
) -> Option<Vec<u8>> {
    match lines {
        Some(reader) => reader.next_segment().await.ok().flatten(),
        None => std::future::pending().await,
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
