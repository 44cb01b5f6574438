//! The end of a trial's logs: the worker's stdout and stderr files, as the controller named
//! them (a relative path is read from the dashboard's working directory).
//!
//! A worker writes these files, so they are read as untrusted: opened without blocking
//! (`O_NONBLOCK`: a named pipe in a log's place opens at once instead of waiting for a
//! writer), shown only when the opened file is a regular one, and read off the runtime's
//! thread within [`READ_LIMIT`] (a stuck network filesystem makes a page say so, not hang
//! the dashboard).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::protocol::{AttemptFiles, error_log_path};

/// How much of the end of each log the trial page shows.
const TAIL_BYTES: u64 = 16 * 1024;

/// How long the logs of one trial page may take to read, all of them together.
const READ_LIMIT: Duration = Duration::from_secs(2);

/// The end of one log file.
pub(super) struct LogTail {
    /// The file.
    pub path: PathBuf,
    /// Its last lines, or why they are not shown.
    pub text: Result<String, String>,
    /// Whether the file holds more than is shown.
    pub cut: bool,
}

/// How many logs an attempt has: its stdout and its stderr.
const LOGS_PER_ATTEMPT: usize = 2;

/// The tails of the logs of each of the attempts `attempts` of trial `number`, whose current
/// attempt's log is `log_path`, all read side by side within [`READ_LIMIT`].
pub(super) async fn attempt_tails(
    log_path: &str,
    number: u64,
    attempts: &[u32],
) -> Vec<(u32, Vec<LogTail>)> {
    let paths = attempts
        .iter()
        .flat_map(|attempt| files(log_path, number, *attempt))
        .collect();
    let mut tails = tails(paths).await.into_iter();
    attempts
        .iter()
        .map(|attempt| (*attempt, tails.by_ref().take(LOGS_PER_ATTEMPT).collect()))
        .collect()
}

/// The files of the stdout and stderr logs of attempt `attempt` of trial `number`, whose
/// current attempt's log is `log_path`.
fn files(log_path: &str, number: u64, attempt: u32) -> [PathBuf; LOGS_PER_ATTEMPT] {
    let current = Path::new(log_path);
    let stdout = current
        .parent()
        .map(|dir| AttemptFiles::in_dir(dir, number, attempt).log)
        .unwrap_or_else(|| current.to_path_buf());
    let stderr = error_log_path(&stdout);
    [stdout, stderr]
}

/// The tails of `paths`, in order, each read on tokio's blocking threads, side by side; a
/// file not read within [`READ_LIMIT`] is said to be too slow.
async fn tails(paths: Vec<PathBuf>) -> Vec<LogTail> {
    let deadline = tokio::time::Instant::now() + READ_LIMIT;
    let reads: Vec<_> = paths
        .into_iter()
        .map(|path| {
            let read = tokio::task::spawn_blocking({
                let path = path.clone();
                move || tail(&path)
            });
            (path, read)
        })
        .collect();
    let mut tails = Vec::with_capacity(reads.len());
    for (path, read) in reads {
        let (text, cut) = match tokio::time::timeout_at(deadline, read).await {
            Ok(Ok(Ok((text, cut)))) => (Ok(text), cut),
            Ok(Ok(Err(why))) => (Err(why), false),
            Ok(Err(e)) => (Err(format!("reading it failed: {e}")), false),
            Err(_) => (
                Err(format!(
                    "not shown: reading it took longer than {} s (a slow or stuck filesystem?)",
                    READ_LIMIT.as_secs()
                )),
                false,
            ),
        };
        tails.push(LogTail { path, text, cut });
    }
    tails
}

/// The last lines of the log at `path` and whether there is more before them, or why they
/// are not shown. Blocking: a slow filesystem blocks it.
fn tail(path: &Path) -> Result<(String, bool), String> {
    let mut file = open_regular(path)?;
    read_tail(&mut file).map_err(|e| format!("cannot read it: {e}"))
}

/// The last lines of `file` from a line start, and whether there is more before them.
fn read_tail(file: &mut File) -> std::io::Result<(String, bool)> {
    let length = file.metadata()?.len();
    let start = length.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(TAIL_BYTES).read_to_end(&mut bytes)?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if start > 0
        && let Some(newline) = text.find('\n')
    {
        text.drain(..=newline);
    }
    Ok((text, start > 0))
}

/// The file at `path`, opened without waiting for anything, if it is a regular file: its
/// kind is read from the opened descriptor, so what is read is what was checked.
fn open_regular(path: &Path) -> Result<File, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "no such file here (the dashboard reads logs on its own machine, relative paths from its directory)".to_string(),
            _ => format!("cannot open it: {e}"),
        })?;
    let kind = file
        .metadata()
        .map_err(|e| format!("cannot read what it is: {e}"))?
        .file_type();
    let other = if kind.is_file() {
        return Ok(file);
    } else if kind.is_dir() {
        "a folder"
    } else if kind.is_fifo() {
        "a named pipe"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "something else"
    };
    Err(format!(
        "not shown: it is {other}, not a regular file (a worker's log is a file)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tail_is_the_end_of_the_file_from_a_line_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("trial-3.log");
        let lines: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, &lines).unwrap();
        let mut attempts = attempt_tails(&log.display().to_string(), 3, &[1]).await;
        let (attempt, tails) = attempts.remove(0);
        assert_eq!(attempt, 1);
        let text = tails[0].text.as_ref().unwrap();
        assert!(tails[0].cut);
        assert!(
            text.starts_with("line ") && text.ends_with("line 4999\n"),
            "{text}"
        );
        assert!(tails[1].text.as_ref().unwrap_err().contains("no such file"));
        // An earlier attempt's log has its own name.
        let [earlier, _] = files(&log.display().to_string(), 3, 2);
        assert!(earlier.ends_with("trial-3-attempt-2.log"));
    }

    #[tokio::test]
    async fn what_is_not_a_regular_file_is_said_not_shown() {
        let dir = tempfile::tempdir().unwrap();
        let tails = tails(vec![dir.path().to_path_buf(), "/dev/zero".into()]).await;
        for (tail, kind) in tails.iter().zip(["a folder", "a device"]) {
            let why = tail.text.as_ref().unwrap_err();
            assert!(
                why.contains(kind) && why.contains("not a regular file"),
                "{why}"
            );
        }
    }
}
