//! A lock per device, shared by every hptune process of the machine, so that two of them
//! never hand out one GPU at the same time: `flock` on a file named by the device in a lock
//! folder. The lock belongs to the open file, which the controller holds and the trial's
//! worker inherits: it dies with the last of them, whatever kills them, and a controller that
//! is killed leaves its workers' devices locked until they end.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::Device;

/// The lock folder when `HPTUNE_GPU_LOCKS` does not name one: one for the whole machine, as
/// its GPUs are, whoever runs hptune.
pub const DEFAULT_LOCK_DIR: &str = "/tmp/hptune-gpu-locks";

/// The folder of the devices' lock files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockDir {
    path: PathBuf,
}

impl LockDir {
    /// The lock folder at `path` (created when first used).
    pub fn new(path: &Path) -> Self {
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

    /// Locks `device` for this process: the open lock file, or `None` when another process
    /// (or a worker it left running) holds it.
    pub fn try_lock(&self, device: &Device) -> io::Result<Option<File>> {
        self.create()?;
        let path = self.file_of(device);
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o666)
            .open(&path)
        {
            // Another user's lock file: a read-only file locks as well.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => File::open(&path),
            opened => opened,
        }
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(io::Error::new(
                e.kind(),
                format!("locking {}: {e}", path.display()),
            )),
        }
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
                    format!("the GPU lock folder {}: {e}", self.path.display()),
                )
            })
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
