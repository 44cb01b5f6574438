//! A folder of training checkpoints: each written atomically (a temporary file, fsync, rename,
//! fsync of the folder) with a SHA-256 checksum of its contents checked on load, the last
//! [`KEEP`] kept.
//!
//! A file is [`MAGIC`], the 32-byte SHA-256 of the rest, then the rest (the payload: see
//! `snapshot.rs`). It is named `step-NNNNNNNN.ckpt` after the optimiser steps done when it
//! was written; a write in progress is `step-NNNNNNNN.ckpt.tmp`, removed when the write fails
//! (and, left by a killed process, when the folder is next opened for writing).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Result, TrainerError};

/// The first bytes of every checkpoint file (format version 1).
const MAGIC: &[u8; 8] = b"HPTCKPT1";
/// Checkpoints kept in a folder: the newest and the one before, to fall back to.
pub(crate) const KEEP: usize = 2;
/// The extension of a finished checkpoint file.
const EXTENSION: &str = ".ckpt";
/// The extension of a checkpoint being written.
const TEMPORARY: &str = ".ckpt.tmp";

/// A checkpoint file found in a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The optimiser steps done when it was written.
    pub(crate) step: usize,
    /// The file.
    pub(crate) path: PathBuf,
}

/// The checkpoint files of `dir`, newest (most steps) first; none when the folder does not
/// exist.
pub(crate) fn list(dir: &Path) -> Result<Vec<Found>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(TrainerError::io(dir, "listing checkpoints", e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| TrainerError::io(dir, "listing checkpoints", e))?;
        let name = entry.file_name();
        let step = name
            .to_str()
            .and_then(|n| n.strip_prefix("step-")?.strip_suffix(EXTENSION))
            .and_then(|digits| digits.parse().ok());
        if let Some(step) = step {
            found.push(Found {
                step,
                path: entry.path(),
            });
        }
    }
    found.sort_by_key(|f| std::cmp::Reverse(f.step));
    Ok(found)
}

/// The file name of the checkpoint written after `step` optimiser steps.
fn file_name(step: usize) -> String {
    format!("step-{step:08}{EXTENSION}")
}

/// Reads a checkpoint file and checks it: its payload, or why it is unusable (unreadable,
/// not a checkpoint, or a checksum that does not match: written partly, or damaged since).
pub(crate) fn read(path: &Path) -> std::result::Result<Vec<u8>, String> {
    let mut bytes = std::fs::read(path).map_err(|e| format!("unreadable: {e}"))?;
    let header = MAGIC.len() + 32;
    if bytes.len() < header || &bytes[..MAGIC.len()] != MAGIC {
        return Err(format!(
            "not a checkpoint of this format (it does not start with {})",
            String::from_utf8_lossy(MAGIC)
        ));
    }
    let stored = &bytes[MAGIC.len()..header];
    if Sha256::digest(&bytes[header..]).as_slice() != stored {
        return Err(format!(
            "its SHA-256 checksum does not match its {} bytes",
            bytes.len()
        ));
    }
    Ok(bytes.split_off(header))
}

/// The folder a run writes its checkpoints into.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    dir: PathBuf,
}

impl Store {
    /// Opens (creating it when needed) the folder `dir`, removing the temporary files of
    /// writes a killed process left there.
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| TrainerError::io(dir, "creating the checkpoint folder", e))?;
        let entries =
            std::fs::read_dir(dir).map_err(|e| TrainerError::io(dir, "listing checkpoints", e))?;
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().ends_with(TEMPORARY) {
                let path = entry.path();
                std::fs::remove_file(&path)
                    .map_err(|e| TrainerError::io(path, "removing an unfinished checkpoint", e))?;
            }
        }
        Ok(Store {
            dir: dir.to_path_buf(),
        })
    }

    /// The folder.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `payload` as the checkpoint of `step` atomically, then removes all but the
    /// newest [`KEEP`]; returns its path. When the write fails (a full disk), the partial
    /// file is removed and every older checkpoint is left as it was.
    pub(crate) fn write(&self, step: usize, payload: &[u8]) -> Result<PathBuf> {
        let path = self.dir.join(file_name(step));
        let temporary = self.dir.join(format!("{}.tmp", file_name(step)));
        let checksum = Sha256::digest(payload);
        let written = File::create(&temporary).and_then(|mut file| {
            file.write_all(MAGIC)?;
            file.write_all(&checksum)?;
            file.write_all(payload)?;
            file.sync_all()
        });
        if let Err(e) = written {
            // Best effort: the error that matters is the write's.
            let _ = std::fs::remove_file(&temporary);
            return Err(TrainerError::io(
                temporary,
                "writing a checkpoint (the older ones are kept)",
                e,
            ));
        }
        std::fs::rename(&temporary, &path)
            .map_err(|e| TrainerError::io(&path, "renaming a written checkpoint into place", e))?;
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|e| TrainerError::io(&self.dir, "syncing the checkpoint folder", e))?;
        for old in list(&self.dir)?.into_iter().skip(KEEP) {
            std::fs::remove_file(&old.path)
                .map_err(|e| TrainerError::io(&old.path, "removing an old checkpoint", e))?;
        }
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_two_are_kept_and_read_back_intact() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for step in [10, 20, 30] {
            store
                .write(step, format!("state {step}").as_bytes())
                .unwrap();
        }
        let found = list(dir.path()).unwrap();
        assert_eq!(
            found.iter().map(|f| f.step).collect::<Vec<_>>(),
            [30, 20],
            "{found:?}"
        );
        assert_eq!(read(&found[0].path).unwrap(), b"state 30");
        assert_eq!(
            found[1].path.file_name().unwrap(),
            "step-00000020.ckpt",
            "named after its step"
        );
    }

    #[test]
    fn a_damaged_or_cut_file_fails_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::open(dir.path())
            .unwrap()
            .write(5, &[7u8; 1000])
            .unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[500] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(read(&path).unwrap_err().contains("checksum"));
        std::fs::write(&path, &bytes[..20]).unwrap();
        assert!(read(&path).unwrap_err().contains("not a checkpoint"));
    }

    #[test]
    fn opening_removes_what_a_killed_write_left() {
        let dir = tempfile::tempdir().unwrap();
        let left = dir.path().join("step-00000040.ckpt.tmp");
        std::fs::write(&left, b"half").unwrap();
        Store::open(dir.path()).unwrap();
        assert!(!left.exists());
        assert!(list(dir.path()).unwrap().is_empty());
    }
}
