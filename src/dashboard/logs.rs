//! The end of a trial's logs: the worker's stdout and stderr files, as the controller named
//! them (a relative path is read from the dashboard's working directory).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::executor::{AttemptFiles, error_log_path};

/// How much of the end of each log the trial page shows.
const TAIL_BYTES: u64 = 16 * 1024;

/// The end of one log file.
pub struct LogTail {
    /// The file.
    pub path: PathBuf,
    /// Its last lines, or why they cannot be read.
    pub text: Result<String, String>,
    /// Whether the file holds more than is shown.
    pub cut: bool,
}

/// The tails of the stdout and stderr logs of attempt `attempt` of trial `number`, whose
/// current attempt's log is `log_path`.
pub fn tails(log_path: &str, number: u64, attempt: u32) -> Vec<LogTail> {
    let current = Path::new(log_path);
    let stdout = current
        .parent()
        .map(|dir| AttemptFiles::in_dir(dir, number, attempt).log)
        .unwrap_or_else(|| current.to_path_buf());
    let stderr = error_log_path(&stdout);
    [stdout, stderr].into_iter().map(tail).collect()
}

fn tail(path: PathBuf) -> LogTail {
    let read = || -> std::io::Result<(String, bool)> {
        let mut file = std::fs::File::open(&path)?;
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
    };
    match read() {
        Ok((text, cut)) => LogTail {
            path,
            text: Ok(text),
            cut,
        },
        Err(e) => LogTail {
            text: Err(match e.kind() {
                std::io::ErrorKind::NotFound => "no such file here (the dashboard reads logs on its own machine, relative paths from its directory)".into(),
                _ => e.to_string(),
            }),
            path,
            cut: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_is_the_end_of_the_file_from_a_line_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("trial-3.log");
        let lines: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, &lines).unwrap();
        let tails = tails(&log.display().to_string(), 3, 1);
        let text = tails[0].text.as_ref().unwrap();
        assert!(tails[0].cut);
        assert!(
            text.starts_with("line ") && text.ends_with("line 4999\n"),
            "{text}"
        );
        assert!(tails[1].text.as_ref().unwrap_err().contains("no such file"));
        // An earlier attempt's log has its own name.
        assert!(tails_path(&log, 3, 2).ends_with("trial-3-attempt-2.log"));
    }

    fn tails_path(log: &Path, number: u64, attempt: u32) -> PathBuf {
        tails(&log.display().to_string(), number, attempt)
            .remove(0)
            .path
    }
}
