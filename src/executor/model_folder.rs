//! An attempt's model folder (`HPTUNE_OUTPUT_DIR`) and the file inside it that says whose it
//! is. The folder is created by its attempt, never taken over: a folder of that name that
//! exists already is another's (a study of the same name in another database, a study deleted
//! and created again) unless its owner file names this very attempt, made by an earlier try
//! of it. `keep_best` removes only folders whose owner file names the trial it removes.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file in a model folder that names the attempt that created it.
pub const OWNER_FILE: &str = ".hptune-owner.json";

/// A study as its model folders name it: its name, and its row's id and creation time, which
/// tell it from a study of the same name in another database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StudyMark {
    /// The study's name.
    pub name: String,
    /// Its row id.
    pub id: i64,
    /// When its row was created.
    pub created_at: String,
}

/// Whose a model folder is: an attempt of a trial of a study.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FolderOwner {
    /// The study.
    pub study: StudyMark,
    /// The trial's number.
    pub trial: u64,
    /// The attempt.
    pub attempt: u32,
}

/// An attempt's model folder: where it is, and the attempt it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFolder {
    /// The folder.
    pub path: PathBuf,
    /// The attempt it is for.
    pub owner: FolderOwner,
}

/// Why an attempt's model folder cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// The folder or its owner file cannot be written.
    #[error("cannot create the model folder {}: {source}", path.display())]
    Create {
        /// The folder.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The folder exists and is not this attempt's.
    #[error(
        "the model folder {} exists and was not created by this attempt ({found}): hptune \
         never writes into a folder it did not create; move it away, or give this study its \
         own artifacts.dir (--artifacts-dir)",
        path.display()
    )]
    NotOurs {
        /// The folder.
        path: PathBuf,
        /// Whose it is, as far as can be told.
        found: String,
    },
}

impl ModelFolder {
    /// Creates the folder, and the owner file in it, before its attempt's worker starts; a
    /// folder this attempt created already (an earlier try of it) is used again, any other
    /// is refused.
    pub fn create(&self) -> Result<(), FolderError> {
        let create_error = |source| FolderError::Create {
            path: self.path.clone(),
            source,
        };
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(create_error)?;
        }
        match std::fs::create_dir(&self.path) {
            Ok(()) => {
                let text = serde_json::to_string(&self.owner).expect("an owner serialises");
                std::fs::write(self.path.join(OWNER_FILE), text).map_err(create_error)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match owner_of(&self.path) {
                Ok(owner) if owner == self.owner => Ok(()),
                Ok(owner) => Err(FolderError::NotOurs {
                    path: self.path.clone(),
                    found: format!("it is {}", owner.describe()),
                }),
                Err(found) => Err(FolderError::NotOurs {
                    path: self.path.clone(),
                    found,
                }),
            },
            Err(e) => Err(create_error(e)),
        }
    }
}

impl FolderOwner {
    /// Says whose it is: `trial 3 (attempt 1) of study 's' (id 1, created ...)`.
    pub fn describe(&self) -> String {
        format!(
            "trial {} (attempt {}) of study '{}' (id {}, created {})",
            self.trial, self.attempt, self.study.name, self.study.id, self.study.created_at
        )
    }

    /// Whether it is an attempt of trial `number` of `study`.
    pub fn is_of_trial(&self, study: &StudyMark, number: u64) -> bool {
        self.study == *study && self.trial == number
    }
}

/// Whose the model folder at `path` is, as its owner file says; an error says why that
/// cannot be told (no owner file: a folder hptune did not create).
pub fn owner_of(path: &Path) -> Result<FolderOwner, String> {
    let file = path.join(OWNER_FILE);
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("it holds no {OWNER_FILE}"));
        }
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(root: &Path, database: i64, attempt: u32) -> ModelFolder {
        ModelFolder {
            path: root.join("s").join("trial-0"),
            owner: FolderOwner {
                study: StudyMark {
                    name: "s".into(),
                    id: 1,
                    created_at: format!("2026-01-0{database}T00:00:00.000Z"),
                },
                trial: 0,
                attempt,
            },
        }
    }

    #[test]
    fn a_folder_is_created_once_by_its_attempt_and_refused_to_any_other() {
        let root = tempfile::tempdir().unwrap();
        let mine = folder(root.path(), 1, 1);
        mine.create().unwrap();
        mine.create()
            .expect("an earlier try of the attempt made it");
        assert_eq!(owner_of(&mine.path).unwrap(), mine.owner);
        let other_study = folder(root.path(), 2, 1).create().unwrap_err();
        assert!(
            matches!(&other_study, FolderError::NotOurs { found, .. }
                if found.contains("it is trial 0 (attempt 1) of study 's' (id 1, created 2026-01-01")),
            "{other_study}"
        );
        assert!(
            folder(root.path(), 1, 2).create().is_err(),
            "another attempt"
        );
        assert!(mine.owner.is_of_trial(&mine.owner.study, 0));
        assert!(
            !mine
                .owner
                .is_of_trial(&folder(root.path(), 2, 1).owner.study, 0)
        );
    }

    #[test]
    fn a_folder_hptune_did_not_create_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let mine = folder(root.path(), 1, 1);
        std::fs::create_dir_all(&mine.path).unwrap();
        let refused = mine.create().unwrap_err().to_string();
        assert!(
            refused.contains("it holds no .hptune-owner.json"),
            "{refused}"
        );
        assert!(
            !mine.path.join(OWNER_FILE).exists(),
            "nothing written into it"
        );
    }
}
