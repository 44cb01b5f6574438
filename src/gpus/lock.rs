//! Locks per device, shared by every hptune process of the machine, so that two of them
//! never hand out one GPU (or one slot of a shared GPU) at the same time: `flock` on files
//! named by the device in a lock folder. A lock belongs to the open file, which the
//! controller holds and the trial's worker inherits: it lasts while either holds it, whatever
//! kills the controller (the kernel ends the locks of a process that dies), and the
//! controller ends it when the trial ends (a child the worker left running, which holds the
//! file too, does not keep it).
//!
//! A trial that holds whole GPUs locks each device's file (`gpu-<id>.lock`) exclusively. A
//! trial that holds `1/K` of a device ([`LockDir::try_lock_slot`]) locks that file shared (so
//! no whole-GPU trial gets the device while it runs, and it gets no device a whole-GPU trial
//! holds), the file of its share (`gpu-<id>.share-<K>.lock`) shared, and one of the `K` slot
//! files (`gpu-<id>.slot-<j>.lock`) exclusively: at most `K` such trials hold a device. A
//! device holds trials of one share at a time: a trial of `1/K` finds no other share's file
//! held after it has locked its own, else lets go; of two trials of different shares that
//! race, at least one sees the other.
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

use super::{Device, MAX_SHARE};

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

/// How a lock file is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// By this process alone.
    Exclusive,
    /// By this process and any others that hold it shared.
    Shared,
}

/// One of a device's locks, held by this process on its open lock file.
#[derive(Debug)]
pub(crate) struct HeldLock {
    device: Device,
    path: PathBuf,
    hold: Hold,
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
        self.path.join(format!("gpu-{}.lock", file_id(device)))
    }

    /// The file that the trials holding `1/share` of `device` lock shared.
    fn share_file(&self, device: &Device, share: u8) -> PathBuf {
        self.path
            .join(format!("gpu-{}.share-{share}.lock", file_id(device)))
    }

    /// The file of slot `slot` of `device`, which one trial sharing it locks.
    fn slot_file(&self, device: &Device, slot: u8) -> PathBuf {
        self.path
            .join(format!("gpu-{}.slot-{slot}.lock", file_id(device)))
    }

    /// Locks `device` whole for this process: the held lock, or `None` when another process
    /// (or a worker it left running) holds it, whole or a slot of it.
    pub(crate) fn try_lock(&self, device: &Device) -> io::Result<Option<HeldLock>> {
        self.create()?;
        self.try_hold(device, &self.file_of(device), Hold::Exclusive)
    }

    /// Locks a slot of `device` for a trial that holds `1/share` of it: the slot, lowest
    /// free first, and the locks held (those of [`LockDir::try_lock_share`], then the
    /// slot's); `None` when the device is not free for the share or its `share` slots are
    /// taken.
    pub(crate) fn try_lock_slot(
        &self,
        device: &Device,
        share: u8,
    ) -> io::Result<Option<(u8, Vec<HeldLock>)>> {
        let Some(mut held) = self.try_lock_share(device, share)? else {
            return Ok(None);
        };
        for slot in 0..share {
            let path = self.slot_file(device, slot);
            if let Some(lock) = self.try_hold(device, &path, Hold::Exclusive)? {
                held.push(lock);
                return Ok(Some((slot, held)));
            }
        }
        Ok(None)
    }

    /// Locks slot `slot` of `device` (the recorded slot of a trial taken over): `None` when
    /// another open file (its worker's) holds it.
    pub(crate) fn try_lock_slot_at(
        &self,
        device: &Device,
        slot: u8,
    ) -> io::Result<Option<HeldLock>> {
        self.create()?;
        self.try_hold(device, &self.slot_file(device, slot), Hold::Exclusive)
    }

    /// How many of the `share` slots of `device` trials hold now, whichever process runs
    /// them (a slot is looked at by locking it for an instant).
    pub(crate) fn slots_held(&self, device: &Device, share: u8) -> io::Result<usize> {
        self.create()?;
        let mut held = 0;
        for slot in 0..share {
            match self.try_hold(device, &self.slot_file(device, slot), Hold::Exclusive)? {
                Some(probe) => probe.release(),
                None => held += 1,
            }
        }
        Ok(held)
    }

    /// Locks `device` for trials that hold `1/share` of it, without a slot: the device's
    /// file and the share's, both shared; `None` when a whole-GPU trial holds the device or
    /// trials of another share run on it.
    pub(crate) fn try_lock_share(
        &self,
        device: &Device,
        share: u8,
    ) -> io::Result<Option<Vec<HeldLock>>> {
        self.create()?;
        let Some(whole) = self.try_hold(device, &self.file_of(device), Hold::Shared)? else {
            return Ok(None);
        };
        let own = self.share_file(device, share);
        let Some(own) = self.try_hold(device, &own, Hold::Shared)? else {
            return Ok(None);
        };
        // Own share locked first: of two processes of different shares, one sees the other.
        for other in (2..=MAX_SHARE).filter(|k| *k != share) {
            let path = self.share_file(device, other);
            match self.try_hold(device, &path, Hold::Exclusive)? {
                Some(probe) => probe.release(),
                None => return Ok(None),
            }
        }
        Ok(Some(vec![whole, own]))
    }

    /// Locks the file at `path` of `device` as `hold` says: the held lock, or `None` when
    /// another open file holds it in a way that excludes this one.
    fn try_hold(&self, device: &Device, path: &Path, hold: Hold) -> io::Result<Option<HeldLock>> {
        for _ in 0..REPLACED_TRIES {
            let file = open(path)?;
            let locked = match hold {
                Hold::Exclusive => file.try_lock(),
                Hold::Shared => file.try_lock_shared(),
            };
            match locked {
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
                path: path.to_path_buf(),
                hold,
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

/// How the lock files of `device` name it: by its UUID when known, else by its name, with
/// the characters a file name cannot hold replaced.
fn file_id(device: &Device) -> String {
    device
        .uuid
        .as_deref()
        .unwrap_or(&device.name)
        .chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .collect()
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
        dir.create()?;
        Ok(match dir.try_hold(&self.device, &self.path, self.hold)? {
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
            memory: None,
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
