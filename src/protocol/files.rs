//! The names of an attempt's files: its logs and metrics file in the study's log folder,
//! and its model folder in the study's artifacts folder (or its engine's bucket).

use std::path::{Path, PathBuf};

/// The files one attempt of a trial writes in a log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttemptFiles {
    /// The worker's stdout (its stderr goes beside it: [`error_log_path`]).
    pub log: PathBuf,
    /// cloudml-hypertune's metrics file.
    pub metrics: PathBuf,
}

impl AttemptFiles {
    /// The files of attempt `attempt` of trial `number` in `dir`: `trial-N.log` and
    /// `trial-N.metrics.jsonl`, with `-attempt-A` after `N` from the second attempt on. Each
    /// attempt's files have names of their own, so that one attempt's output is never taken
    /// for another's.
    pub(crate) fn in_dir(dir: &Path, number: u64, attempt: u32) -> Self {
        let stem = attempt_stem(number, attempt);
        Self {
            log: dir.join(format!("{stem}.log")),
            metrics: dir.join(format!("{stem}.metrics.jsonl")),
        }
    }
}

/// The name of an attempt's files and model folder: `trial-N`, with `-attempt-A` after `N`
/// from the second attempt on.
pub(crate) fn attempt_stem(number: u64, attempt: u32) -> String {
    match attempt {
        1 => format!("trial-{number}"),
        n => format!("trial-{number}-attempt-{n}"),
    }
}

/// Where a worker's stderr goes, beside its stdout log.
pub fn error_log_path(log_path: &Path) -> PathBuf {
    log_path.with_extension("err")
}

/// The model folder of attempt `attempt` of trial `number` of `study`, below the folder of
/// the studies' models (a local folder, a bucket, a volume): `<study>/trial-N`, with
/// `-attempt-A` from the second attempt on, as Vertex AI's tuning jobs give each trial a
/// folder under the study's.
pub(crate) fn model_folder(study: &str, number: u64, attempt: u32) -> String {
    format!("{study}/{}", attempt_stem(number, attempt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attempt_has_files_and_a_model_folder_of_its_own() {
        let first = AttemptFiles::in_dir(Path::new("logs/s"), 3, 1);
        assert_eq!(first.log, Path::new("logs/s/trial-3.log"));
        assert_eq!(first.metrics, Path::new("logs/s/trial-3.metrics.jsonl"));
        assert_eq!(error_log_path(&first.log), Path::new("logs/s/trial-3.err"));
        let second = AttemptFiles::in_dir(Path::new("logs/s"), 3, 2);
        assert_eq!(second.log, Path::new("logs/s/trial-3-attempt-2.log"));
        assert_eq!(model_folder("s", 3, 1), "s/trial-3");
        assert_eq!(model_folder("s", 3, 2), "s/trial-3-attempt-2");
    }
}
