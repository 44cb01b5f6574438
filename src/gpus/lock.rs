//! A lock per device, shared by every hptune process of the machine, so that two of them
//! never hand out one GPU at the same time: `flock` on a file named by the device in a lock
//! folder. The lock belongs to the open file, which the controller holds and the trial's
//! worker inherits: it lasts while either holds it, whatever kills the controller, and the
//! controller ends it when the trial ends (a child the worker left running, which holds the
//! file too, does not keep it).
//!
//! The folder is `/run/lock` by default, which is emptied at boot only: an age-based cleaner
//! of `/tmp` (`systemd-tmpfiles`, `tmpreaper`) would remove the files of a study that runs for
//! weeks, as `flock` never touches their times. A lock is taken only on the file its path
//! names at that moment, and a held lock whose file vanished or was replaced is found
//! ([`HeldLock::check`]) and taken again.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::Device;

/// The lock folder when `HPTUNE_GPU_LOCKS` does not name one: one for the whole machine, as
/// its GPUs are, whoever runs hptune; out of reach of age-based cleaners.
pub(crate) const DEFAULT_LOCK_DIR: &str = "/run/lock/hptune-gpu-locks";

/// How many times a lock is tried again when its file is replaced while it is being taken.
const REPLACED_TRIES: usize = 3;

/// The folder of the devices' lock files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockDir {
    path: PathBuf,
}

/// A device's lock, held by this process on its open lock file.
#[derive(Debug)]
pub(crate) struct HeldLock {
    device: Device,
    path: PathBuf,
    file: File,
    /// Whether its file was found replaced by one that another process holds.
    lost: bool,
}

/// What a check of a held lock found changed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LockChange {
    /// Its file had vanished or been replaced, and the lock is now held on the file there.
    Retaken,
    /// Its file had vanished or been replaced, and another process holds the lock on the
    /// file there: that process may hand the device out.
    Lost,
}

impl LockDir {
    /// The lock folder at `path` (created when first used).
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
        }
    }

    /// The lock file of `device`: named by its UUID when known (the same GPU whatever index
    /// a process gives it), else by its name.
    fn file_of(&self, device: &Device) -> PathBuf {
        let id: String = device
            .uuid
            .as_deref()
            .unwrap_or(&device.name)
            .chars()
            .map(|c| match c {
                'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
                _ => '_',
            })
            .collect();
        self.path.join(format!("gpu-{id}.lock"))
    }

    /// Locks `device` for this process: the held lock, or `None` when another process
    /// (or a worker it left running) holds it.
    pub(crate) fn try_lock(&self, device: &Device) -> io::Result<Option<HeldLock>> {
        self.create()?;
        let path = self.file_of(device);
        for _ in 0..REPLACED_TRIES {
            let file = open(&path)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Ok(None),
                Err(TryLockError::Error(e)) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("locking {}: {e}", path.display()),
                    ));
                }
            }
            let lock = HeldLock {
                device: device.clone(),
                path: path.clone(),
                file,
                lost: false,
            };
            // Removed since it was opened: another process may have locked the new file.
            if lock.is_current()? {
                return Ok(Some(lock));
            }
        }
        Err(io::Error::other(format!(
            "{}: the lock file is replaced as fast as it is locked",
            path.display()
        )))
    }

    /// Creates the folder, open to every user (with the sticky bit, as `/tmp`) when this
    /// process makes it.
    fn create(&self) -> io::Result<()> {
        if self.path.is_dir() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.path)
            .and_then(|()| {
                std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o1777))
            })
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "the GPU lock folder {}: {e} (HPTUNE_GPU_LOCKS names another: one that \
                         every user of these GPUs can write and no cleaner empties)",
                        self.path.display()
                    ),
                )
            })
    }
}

/// Opens (creating it) the lock file at `path`.
fn open(path: &Path) -> io::Result<File> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o666)
        .open(path)
    {
        // Another user's lock file: a read-only file locks as well.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => File::open(path),
        opened => opened,
    }
    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

impl HeldLock {
    /// The device locked.
    pub(crate) fn device(&self) -> &Device {
        &self.device
    }

    /// The open lock file's descriptor, for a worker to inherit.
    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Whether the lock's file is still the one its path names: not removed (by hand, or by a
    /// cleaner) nor replaced.
    fn is_current(&self) -> io::Result<bool> {
        let held = self.file.metadata()?;
        match std::fs::metadata(&self.path) {
            Ok(named) => Ok(named.dev() == held.dev() && named.ino() == held.ino()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("{}: {e}", self.path.display()),
            )),
        }
    }

    /// Checks that the lock still keeps other processes off the device: that its file is
    /// still the one its path names, else takes the lock again on the file now there (the
    /// old file, which the trial's worker may hold too, no longer keeps anyone off). Returns
    /// what changed since the last check: `None` when the lock is held as it was, or is
    /// still lost.
    pub(crate) fn check(&mut self, dir: &LockDir) -> io::Result<Option<LockChange>> {
        if self.is_current()? {
            return Ok(None);
        }
        Ok(match dir.try_lock(&self.device)? {
            Some(lock) => {
                *self = lock;
                Some(LockChange::Retaken)
            }
            None if self.lost => None,
            None => {
                self.lost = true;
                Some(LockChange::Lost)
            }
        })
    }

    /// Ends the lock, for every process that holds its file: the trial has ended, and a
    /// child its worker left running (which inherited the file) does not keep the device.
    pub(crate) fn release(self) {
        if let Err(e) = self.file.unlock() {
            tracing::warn!(
                "GPU {}: unlocking {}: {e}",
                self.device.name,
                self.path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(name: &str, uuid: Option<&str>) -> Device {
        Device {
            name: name.into(),
            uuid: uuid.map(Into::into),
        }
    }

    #[test]
    fn a_device_locked_by_one_open_file_is_refused_to_another_until_it_closes() {
        let dir = tempfile::tempdir().unwrap();
        let locks = LockDir::new(&dir.path().join("locks"));
        let gpu = device("0", Some("GPU-1234"));
        let held = locks.try_lock(&gpu).unwrap().expect("a free device locks");
        assert!(locks.try_lock(&gpu).unwrap().is_none(), "a held device");
        assert!(locks.try_lock(&device("1", None)).unwrap().is_some());
        drop(held);
        assert!(locks.try_lock(&gpu).unwrap().is_some(), "released on close");
    }

    #[test]
    fn a_released_lock_is_free_although_another_descriptor_of_its_file_stays_open() {
        let dir = tempfile::tempdir().unwrap();
        let locks = LockDir::new(dir.path());
        let gpu = device("0", None);
        let held = locks.try_lock(&gpu).unwrap().unwrap();
        // What a worker's detached child keeps: a duplicate of the descriptor.
        let inherited = held.file.try_clone().unwrap();
        held.release();
        assert!(locks.try_lock(&gpu).unwrap().is_some(), "{inherited:?}");
    }

    #[test]
    fn a_held_lock_whose_file_was_removed_is_taken_again_on_the_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let locks = LockDir::new(&dir.path().join("locks"));
        let gpu = device("0", None);
        let mut held = locks.try_lock(&gpu).unwrap().unwrap();
        assert_eq!(held.check(&locks).unwrap(), None, "held as it was");
        std::fs::remove_dir_all(dir.path().join("locks")).unwrap();
        assert_eq!(held.check(&locks).unwrap(), Some(LockChange::Retaken));
        assert!(locks.try_lock(&gpu).unwrap().is_none(), "locked again");
        // Removed again, and locked by another process before this one looks.
        std::fs::remove_dir_all(dir.path().join("locks")).unwrap();
        let other = locks.try_lock(&gpu).unwrap().unwrap();
        assert_eq!(held.check(&locks).unwrap(), Some(LockChange::Lost));
        assert_eq!(held.check(&locks).unwrap(), None, "said once");
        drop(other);
        assert_eq!(held.check(&locks).unwrap(), Some(LockChange::Retaken));
    }

    #[test]
    fn a_lock_file_is_named_by_the_uuid_when_known_and_holds_no_path() {
        let locks = LockDir::new(Path::new("/locks"));
        assert_eq!(
            locks.file_of(&device("0", Some("GPU-ab12"))),
            Path::new("/locks/gpu-GPU-ab12.lock")
        );
        assert_eq!(
            locks.file_of(&device("MIG-GPU-x/1/0", None)),
            Path::new("/locks/gpu-MIG-GPU-x_1_0.lock")
        );
    }
}
