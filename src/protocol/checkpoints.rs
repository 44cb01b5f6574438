//! An attempt's checkpoints: the folder its worker writes them into
//! (`HPTUNE_CHECKPOINT_DIR`), and the folder of an earlier attempt of its trial that it
//! resumes from (`HPTUNE_RESUME_FROM`). Which folder to resume from is settled where the
//! worker starts (the controller's machine, the filesystem a Slurm cluster shares, the
//! relay's container), since only there can its files be seen.

use std::path::{Path, PathBuf};

use super::files::model_folder;

/// The variable that names the folder an attempt writes its checkpoints into, its own.
pub(crate) const CHECKPOINT_DIR_VARIABLE: &str = "HPTUNE_CHECKPOINT_DIR";

/// The variable that names the checkpoint folder of an earlier attempt of the trial, set
/// only when that folder has files in it: the worker resumes from it.
pub(crate) const RESUME_FROM_VARIABLE: &str = "HPTUNE_RESUME_FROM";

/// The checkpoint folder's name in an attempt's model folder.
const CHECKPOINT_FOLDER: &str = "checkpoints";

/// The checkpoint folder that every attempt of trial `number` of `study` shares, below an
/// engine's store that keeps it between jobs (SageMaker's `CheckpointConfig`):
/// `<study>/trial-N/checkpoints`.
pub(crate) fn trial_checkpoints(study: &str, number: u64) -> String {
    format!("{}/{CHECKPOINT_FOLDER}", model_folder(study, number, 1))
}

/// Where an attempt writes its checkpoints, and where it may resume from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoints {
    /// The attempt's own folder, created before its worker starts.
    pub dir: PathBuf,
    /// The folders it may resume from, in the order they are tried (the newest attempt's
    /// first): the first that has files in it is the one.
    pub resume_from: Vec<PathBuf>,
}

/// What the worker of an attempt starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckpointStart {
    /// [`CHECKPOINT_DIR_VARIABLE`], and [`RESUME_FROM_VARIABLE`] when it resumes.
    pub env: Vec<(String, String)>,
    /// The folder it resumes from, if any.
    pub resumed_from: Option<PathBuf>,
}

impl Checkpoints {
    /// The checkpoint folders of attempt `attempt` of trial `number` of `study` under `root`
    /// (a folder of models: the artifacts folder, a volume's mount, a bucket through
    /// Cloud Storage FUSE): `<root>/<study>/trial-N[-attempt-K]/checkpoints`, each in its
    /// attempt's model folder; it may resume from any earlier attempt's, newest first.
    pub(crate) fn of_attempt(root: &Path, study: &str, number: u64, attempt: u32) -> Self {
        let folder = |k| {
            root.join(model_folder(study, number, k))
                .join(CHECKPOINT_FOLDER)
        };
        Self {
            dir: folder(attempt),
            resume_from: (1..attempt).rev().map(folder).collect(),
        }
    }

    /// One folder that every attempt writes into and resumes from, one the engine keeps
    /// between jobs (SageMaker's `/opt/ml/checkpoints`, restored from its
    /// `CheckpointConfig`): a job the engine restarted resumes as a retried one does.
    pub(crate) fn kept_by_engine(dir: &str) -> Self {
        Self {
            dir: PathBuf::from(dir),
            resume_from: vec![PathBuf::from(dir)],
        }
    }

    /// Creates the attempt's folder, and settles the folder it resumes from: the first of
    /// [`Checkpoints::resume_from`] with files in it.
    pub(crate) fn prepare(&self) -> Result<CheckpointStart, String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            format!(
                "cannot create the checkpoint folder {}: {e}",
                self.dir.display()
            )
        })?;
        let resumed_from = self.resume_from.iter().find(|dir| has_files(dir)).cloned();
        let mut env = vec![(
            CHECKPOINT_DIR_VARIABLE.to_string(),
            self.dir.display().to_string(),
        )];
        if let Some(dir) = &resumed_from {
            env.push((RESUME_FROM_VARIABLE.to_string(), dir.display().to_string()));
        }
        Ok(CheckpointStart { env, resumed_from })
    }
}

/// Whether `dir` is a folder with something in it.
fn has_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_resumes_from_the_newest_earlier_folder_with_files() {
        let root = tempfile::tempdir().unwrap();
        let third = Checkpoints::of_attempt(root.path(), "s", 4, 3);
        assert_eq!(
            third.dir,
            root.path().join("s/trial-4-attempt-3/checkpoints")
        );
        assert_eq!(
            third.resume_from,
            [
                root.path().join("s/trial-4-attempt-2/checkpoints"),
                root.path().join("s/trial-4/checkpoints"),
            ]
        );
        // No earlier folder with files: the worker starts afresh.
        std::fs::create_dir_all(&third.resume_from[0]).unwrap();
        let fresh = third.prepare().unwrap();
        assert!(third.dir.is_dir());
        assert_eq!(fresh.resumed_from, None);
        assert_eq!(
            fresh.env,
            [(
                CHECKPOINT_DIR_VARIABLE.to_string(),
                third.dir.display().to_string()
            )]
        );
        // The first attempt left a checkpoint, the second none (killed before its first).
        std::fs::create_dir_all(&third.resume_from[1]).unwrap();
        std::fs::write(third.resume_from[1].join("step-40"), "40").unwrap();
        let resumed = third.prepare().unwrap();
        assert_eq!(resumed.resumed_from.as_ref(), Some(&third.resume_from[1]));
        assert_eq!(
            resumed.env[1],
            (
                RESUME_FROM_VARIABLE.to_string(),
                third.resume_from[1].display().to_string()
            )
        );
        assert!(
            Checkpoints::of_attempt(root.path(), "s", 4, 1)
                .resume_from
                .is_empty()
        );
        assert_eq!(trial_checkpoints("s", 4), "s/trial-4/checkpoints");
    }
}
