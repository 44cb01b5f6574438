//! Where burn's GPU backend keeps what it learns about the GPU between runs: cubecl's autotune
//! results (which kernel is fastest for each shape) and its compiled kernels (PTX).
//!
//! cubecl's default puts them in the `target/` folder of the nearest Cargo project above the
//! working directory, else in `~/.cache/cubecl`: trials of a study started in different
//! folders would each tune afresh, paying minutes on a new GPU every time. The trainer points
//! both at one folder per user instead, [`dir`], so that the first run on a machine tunes and
//! every later trial, of any study, finds the results.
//!
//! cubecl names its files by kernel and by its own version, not by the GPU they were made for:
//! its autotune results sit under the device's index (`cuda:0`) and its PTX under `cuda/`. A
//! folder shared by machines of two GPU models (a home on a cluster's shared file system)
//! would hand one model the other's timings and code. So each GPU model gets a sub-folder of
//! its own, named by [`device_key`] from what the CUDA driver reports: the model's name and
//! its compute capability.
//!
//! Trainers that start together on a cold folder (trials packed on one GPU) would each compile
//! and autotune every kernel at once. [`warm_once`] lets the first of them run the warm-up
//! (one training step and one evaluation at the run's shapes) under an exclusive `flock` on
//! the folder while the others wait; they then find the folder warm for those shapes (a
//! marker file, written atomically) and load what the first one stored. cubecl appends its
//! own entries under a lock file of its own and refuses a key another process has just added.

use std::fs::File;
use std::path::{Path, PathBuf};

/// The variable that names the folder.
pub const ENV: &str = "HPTUNE_KERNEL_CACHE";

/// The cache folder: `$HPTUNE_KERNEL_CACHE`, else `$XDG_CACHE_HOME/hptune/kernels`, else
/// `~/.cache/hptune/kernels` (`None` without any of these variables).
pub fn dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    var(ENV).map(PathBuf::from).or_else(|| {
        var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|home| Path::new(&home).join(".cache")))
            .map(|cache| cache.join("hptune").join("kernels"))
    })
}

/// How many files the cache holds (0 when the folder does not exist).
pub fn files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => files(&entry.path()),
            Ok(_) => 1,
            Err(_) => 0,
        })
        .sum()
}

/// The sub-folder of [`dir`] for one GPU model: its name as the driver reports it, lowercased
/// with runs of other characters than letters and digits turned into one `-`, and its compute
/// capability, e.g. `nvidia-h100-80gb-hbm3-sm90` for an H100 SXM.
pub fn device_key(name: &str, major: i32, minor: i32) -> String {
    let mut key = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            key.push(c.to_ascii_lowercase());
        } else if !key.is_empty() && !key.ends_with('-') {
            key.push('-');
        }
    }
    if !key.is_empty() && !key.ends_with('-') {
        key.push('-');
    }
    format!("{key}sm{major}{minor}")
}

/// The lock file of a GPU model's folder, held by the trainer that warms it.
const LOCK_FILE: &str = ".hptune-warm-up.lock";

/// The folder, under a GPU model's folder, of the markers of the shapes already warmed.
const WARM_MARKERS: &str = "hptune-warm";

/// An exclusive `flock` on a cache folder, held while one trainer compiles its warm-up's
/// kernels; released when dropped, or by the kernel when the process dies.
#[derive(Debug)]
pub(crate) struct WarmUpLock {
    dir: PathBuf,
    _file: File,
}

impl WarmUpLock {
    /// Takes the folder's lock, waiting (and saying so in the log) while another process
    /// holds it.
    pub(crate) fn acquire(dir: &Path) -> std::io::Result<WarmUpLock> {
        let path = dir.join(LOCK_FILE);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                tracing::info!(
                    "another trainer is warming the kernel cache {}: waiting for it, to load its kernels rather than compile them again",
                    dir.display()
                );
                file.lock()?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        Ok(WarmUpLock {
            dir: dir.to_path_buf(),
            _file: file,
        })
    }

    /// Whether a warm-up of the shapes named `key` has completed in this folder.
    pub(crate) fn is_warm(&self, key: &str) -> bool {
        self.dir.join(WARM_MARKERS).join(key).is_file()
    }

    /// Records that the warm-up of the shapes named `key` has completed: a marker written to
    /// a temporary file and renamed into place, so that it is whole or absent.
    pub(crate) fn mark_warm(&self, key: &str) -> std::io::Result<()> {
        let markers = self.dir.join(WARM_MARKERS);
        std::fs::create_dir_all(&markers)?;
        let temporary = markers.join(format!(".{key}.{}.tmp", std::process::id()));
        std::fs::write(&temporary, format!("{key}\n"))?;
        std::fs::rename(&temporary, markers.join(key))
    }
}

/// What [`warm_once`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmUp {
    /// This process ran the warm-up and marked the folder warm.
    Ran,
    /// Another process had warmed the folder for these shapes: nothing ran.
    AlreadyWarm,
    /// The folder's lock could not be taken (the log says why): nothing ran.
    Unlocked,
}

/// Runs `warm` (the warm-up of the shapes named `key`) unless the folder `dir` is already warm
/// for them, holding the folder's lock meanwhile, so that of the trainers that start together
/// one compiles and the others wait and then load. A lock that cannot be taken is warned about
/// and the warm-up skipped: the cache saves time, training does not need it.
pub fn warm_once<E>(
    dir: &Path,
    key: &str,
    warm: impl FnOnce() -> Result<(), E>,
) -> Result<WarmUp, E> {
    let lock = match WarmUpLock::acquire(dir) {
        Ok(lock) => lock,
        Err(e) => {
            tracing::warn!(
                "cannot lock the kernel cache {} ({e}): no warm-up, each trainer compiles what it meets",
                dir.display()
            );
            return Ok(WarmUp::Unlocked);
        }
    };
    if lock.is_warm(key) {
        tracing::info!(
            "kernel cache {} is warm for {key}: loading its kernels",
            dir.display()
        );
        return Ok(WarmUp::AlreadyWarm);
    }
    warm()?;
    if let Err(e) = lock.mark_warm(key) {
        tracing::warn!(
            "cannot mark the kernel cache {} warm for {key} ({e}): the next trainer warms it again",
            dir.display()
        );
    }
    Ok(WarmUp::Ran)
}

/// How hard cubecl searches for the fastest kernel of each shape the first time it meets it
/// (cubecl's autotune levels; the search's results are what the cache keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AutotuneLevel {
    /// The fewest candidates: the shortest cold start.
    Minimal,
    /// cubecl's default.
    #[default]
    Balanced,
    /// More candidates.
    Extensive,
    /// Every candidate: the longest cold start.
    Full,
}

/// The folder [`configure`] pointed cubecl's caches at, once it has.
static ACTIVE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The GPU model's cache folder in use by this process: `None` before [`configure`], on the
/// CPU, or when no folder could be used.
pub fn active() -> Option<&'static Path> {
    ACTIVE.get().map(PathBuf::as_path)
}

/// The name and compute capability (major, minor) of CUDA device `index`, from the driver.
#[cfg(feature = "cuda")]
fn describe(index: usize) -> std::result::Result<(String, i32, i32), String> {
    use cudarc::driver::result;
    use cudarc::driver::sys::CUdevice_attribute;

    let failed = |e: cudarc::driver::DriverError| format!("{e:?}");
    result::init().map_err(failed)?;
    let ordinal = i32::try_from(index).map_err(|e| e.to_string())?;
    let device = result::device::get(ordinal).map_err(failed)?;
    let name = result::device::get_name(device).map_err(failed)?;
    // SAFETY: `device` is a handle the driver just returned, and both attributes are integers.
    let (major, minor) = unsafe {
        (
            result::device::get_attribute(
                device,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            )
            .map_err(failed)?,
            result::device::get_attribute(
                device,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            )
            .map_err(failed)?,
        )
    };
    Ok((name, major, minor))
}

/// Points cubecl's autotune and compilation caches at CUDA device `index`'s model folder under
/// [`dir`], with autotune level `autotune` (before the first GPU work of the process; later
/// calls do nothing), and logs the folder and whether it is warm. A folder that cannot be
/// created (a read-only home on a compute node), or a device the driver cannot describe, is
/// warned about and cubecl's default folder kept: the cache saves time, training does not need it.
#[cfg(feature = "cuda")]
pub fn configure(index: usize, autotune: AutotuneLevel) {
    use burn::cubecl::config::{
        CubeClRuntimeConfig, RuntimeConfig, autotune::AutotuneLevel as Level, cache::CacheConfig,
    };

    static CONFIGURED: std::sync::Once = std::sync::Once::new();
    CONFIGURED.call_once(|| {
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        config.autotune.level = match autotune {
            AutotuneLevel::Minimal => Level::Minimal,
            AutotuneLevel::Balanced => Level::Balanced,
            AutotuneLevel::Extensive => Level::Extensive,
            AutotuneLevel::Full => Level::Full,
        };
        tracing::info!("cubecl autotune level {:?}", config.autotune.level);
        if let Some(dir) = model_folder(index) {
            config.autotune.cache = CacheConfig::File(dir.clone());
            config.compilation.cache = Some(CacheConfig::File(dir.clone()));
            let _ = ACTIVE.set(dir);
        }
        CubeClRuntimeConfig::set(config);
    });
}

/// Device `index`'s folder under [`dir`], created; `None` (with a warning) when there is none.
#[cfg(feature = "cuda")]
fn model_folder(index: usize) -> Option<PathBuf> {
    let Some(dir) = dir() else {
        tracing::warn!(
            "neither {ENV} nor HOME is set: cubecl caches its kernels in its default folder"
        );
        return None;
    };
    let (name, major, minor) = describe(index)
        .map_err(|e| {
            tracing::warn!(
                "cannot ask the CUDA driver which GPU cuda:{index} is ({e}): cubecl caches its kernels in its default folder"
            )
        })
        .ok()?;
    let dir = dir.join(device_key(&name, major, minor));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(
            "cannot create the kernel cache folder {}: {e}; cubecl caches its kernels in its default folder",
            dir.display()
        );
        return None;
    }
    match files(&dir) {
        0 => tracing::info!(
            "kernel cache {} ({name}, compute capability {major}.{minor}) is empty: this run autotunes and compiles every kernel (minutes on a new GPU) and stores them for later runs",
            dir.display()
        ),
        n => tracing::info!(
            "kernel cache {} ({name}, compute capability {major}.{minor}): {n} files of earlier runs (autotune results and compiled kernels)",
            dir.display()
        ),
    }
    Some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_in_nested_folders() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(files(&root.path().join("absent")), 0);
        std::fs::create_dir_all(root.path().join("autotune/0")).unwrap();
        std::fs::write(root.path().join("autotune/0/matmul.json"), "{}").unwrap();
        std::fs::write(root.path().join("ptx.bin"), "").unwrap();
        assert_eq!(files(root.path()), 2);
    }

    #[test]
    fn each_gpu_model_and_compute_capability_has_its_own_folder() {
        assert_eq!(
            device_key("NVIDIA H100 80GB HBM3", 9, 0),
            "nvidia-h100-80gb-hbm3-sm90"
        );
        assert_eq!(device_key("NVIDIA H200", 9, 0), "nvidia-h200-sm90");
        assert_eq!(
            device_key("  NVIDIA A100-SXM4-40GB ", 8, 0),
            "nvidia-a100-sxm4-40gb-sm80"
        );
        // The same name with another capability (a MIG slice, a future part) differs too.
        assert_ne!(device_key("GPU", 8, 6), device_key("GPU", 8, 9));
        assert_eq!(device_key("", 7, 5), "sm75");
        // No path separators or dots reach the folder name.
        assert_eq!(device_key("../x/y.z", 9, 0), "x-y-z-sm90");
    }
}
