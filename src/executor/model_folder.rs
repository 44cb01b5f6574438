//! An attempt's model folder (`HPTUNE_OUTPUT_DIR`) and the file inside it that says whose it
//! is. The folder is created by its attempt, never taken over: a folder of that name that
//! exists already is another's (a study of the same name in another database, a study deleted
//! and created again) unless its owner file names this very attempt, made by an earlier try
//! of it. `keep_best` removes only folders whose owner file names the trial it removes.
//!
//! The folder appears with its owner file in it or not at all: it is made under a hidden
//! staging name (`.trial-N.<pid>-<nanoseconds>`), the owner file written and synced, then
//! renamed into place without replacing anything. A controller killed half-way leaves a
//! hidden staging folder, never a model folder without its owner, which no try of the attempt
//! could tell from another's.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file in a model folder that names the attempt that created it.
pub(crate) const OWNER_FILE: &str = ".hptune-owner.json";

/// A study as its model folders name it: its name, and its row's id and creation time, which
/// tell it from a study of the same name in another database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StudyMark {
    /// The study's name.
    pub name: String,
    /// Its row id.
    pub id: i64,
    /// When its row was created.
    pub created_at: String,
}

/// Whose a model folder is: an attempt of a trial of a study.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FolderOwner {
    /// The study.
    pub study: StudyMark,
    /// The trial's number.
    pub trial: u64,
    /// The attempt.
    pub attempt: u32,
}

/// An attempt's model folder: where it is, and the attempt it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelFolder {
    /// The folder.
    pub path: PathBuf,
    /// The attempt it is for.
    pub owner: FolderOwner,
}

/// Why an attempt's model folder cannot be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FolderError {
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
    pub(crate) fn create(&self) -> Result<(), FolderError> {
        let create_error = |source| FolderError::Create {
            path: self.path.clone(),
            source,
        };
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(create_error)?;
        }
        if !self.path.exists() {
            let staging = self.staging_with_owner().map_err(create_error)?;
            match rename_no_replace(&staging, &self.path) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&staging);
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(create_error(e));
                    }
                }
            }
        }
        self.check_existing()
    }

    /// A new staging folder beside the model folder, holding the synced owner file.
    fn staging_with_owner(&self) -> io::Result<PathBuf> {
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let staging = self
            .path
            .with_file_name(format!(".{name}.{}-{nanos}", std::process::id()));
        std::fs::create_dir(&staging)?;
        let text = serde_json::to_string(&self.owner).expect("an owner serialises");
        let mut file = std::fs::File::create(staging.join(OWNER_FILE))?;
        std::io::Write::write_all(&mut file, text.as_bytes())?;
        file.sync_all()?;
        Ok(staging)
    }

    /// The folder exists: it is this attempt's if its owner file says so.
    fn check_existing(&self) -> Result<(), FolderError> {
        match owner_of(&self.path) {
            Ok(owner) if owner == self.owner => Ok(()),
            Ok(owner) => Err(FolderError::NotOurs {
                path: self.path.clone(),
                found: format!("it is {}", owner.describe()),
            }),
            Err(found) => Err(FolderError::NotOurs {
                path: self.path.clone(),
                found,
            }),
        }
    }
}

/// Renames the folder `from` to `to`, failing with `AlreadyExists` where `to` exists (a plain
/// rename would replace an empty folder there).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
        // A filesystem without RENAME_NOREPLACE (older NFS).
        Err(nix::errno::Errno::EINVAL) => rename_unless_there(from, to),
        done => done.map_err(io::Error::from),
    }
}

/// Renames the folder `from` to `to`, failing with `AlreadyExists` where `to` exists.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    rename_unless_there(from, to)
}

/// The rename of a system without an atomic no-replace: `to` checked first.
fn rename_unless_there(from: &Path, to: &Path) -> io::Result<()> {
    if to.exists() {
        return Err(io::ErrorKind::AlreadyExists.into());
    }
    std::fs::rename(from, to)
}

impl FolderOwner {
    /// Says whose it is: `trial 3 (attempt 1) of study 's' (id 1, created ...)`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "trial {} (attempt {}) of study '{}' (id {}, created {})",
            self.trial, self.attempt, self.study.name, self.study.id, self.study.created_at
        )
    }

    /// Whether it is an attempt of trial `number` of `study`.
    pub(crate) fn is_of_trial(&self, study: &StudyMark, number: u64) -> bool {
        self.study == *study && self.trial == number
    }
}

/// Whose the model folder at `path` is, as its owner file says; an error says why that
/// cannot be told (no owner file: a folder hptune did not create).
pub(crate) fn owner_of(path: &Path) -> Result<FolderOwner, String> {
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
    fn a_folder_appears_with_its_owner_file_and_no_staging_folder_is_left() {
        let root = tempfile::tempdir().unwrap();
        let mine = folder(root.path(), 1, 1);
        // What a try killed before its rename leaves: a staging folder, its owner file half
        // written.
        let parent = mine.path.parent().unwrap();
        std::fs::create_dir_all(parent.join(".trial-0.1-2")).unwrap();
        std::fs::write(parent.join(".trial-0.1-2").join(OWNER_FILE), "{").unwrap();
        mine.create().unwrap();
        assert_eq!(owner_of(&mine.path).unwrap(), mine.owner);
        let mut names: Vec<String> = std::fs::read_dir(parent)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [".trial-0.1-2", "trial-0"]);
    }

    #[test]
    fn an_empty_folder_in_the_way_is_not_replaced() {
        let root = tempfile::tempdir().unwrap();
        let mine = folder(root.path(), 1, 1);
        std::fs::create_dir_all(&mine.path).unwrap();
        let other = root.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let refused = rename_no_replace(&other, &mine.path).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::AlreadyExists);
        assert!(mine.create().is_err());
        assert!(std::fs::read_dir(&mine.path).unwrap().next().is_none());
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
