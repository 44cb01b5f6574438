//! Where burn's GPU backend keeps what it learns about the GPU between runs: cubecl's autotune
//! results (which kernel is fastest for each shape) and its compiled kernels (PTX).
//!
//! cubecl's default puts them in the `target/` folder of the nearest Cargo project above the
//! working directory, else in `~/.cache/cubecl`: trials of a study started in different
//! folders would each tune afresh, paying minutes on a new GPU every time. The trainer points
//! both at one folder per user instead, [`dir`], so that the first run on a machine tunes and
//! every later trial, of any study, finds the results.

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

/// Points cubecl's autotune and compilation caches at [`dir`] (before the first GPU work of
/// the process; later calls do nothing) and logs the folder and whether it is warm. A folder
/// that cannot be created (a read-only home on a compute node) is warned about and cubecl's
/// default kept: the cache saves time, training does not need it.
#[cfg(feature = "cuda")]
pub fn configure() {
    use burn::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig, cache::CacheConfig};

    static CONFIGURED: std::sync::Once = std::sync::Once::new();
    let Some(dir) = dir() else {
        tracing::warn!(
            "neither {ENV} nor HOME is set: cubecl caches its kernels in its default folder"
        );
        return;
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(
            "cannot create the kernel cache folder {}: {e}; cubecl caches its kernels in its default folder",
            dir.display()
        );
        return;
    }
    CONFIGURED.call_once(|| {
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        config.autotune.cache = CacheConfig::File(dir.clone());
        config.compilation.cache = Some(CacheConfig::File(dir.clone()));
        CubeClRuntimeConfig::set(config);
    });
    match files(&dir) {
        0 => tracing::info!(
            "kernel cache {} is empty: this run autotunes and compiles every kernel (minutes on a new GPU) and stores them for later runs",
            dir.display()
        ),
        n => tracing::info!(
            "kernel cache {}: {n} files of earlier runs (autotune results and compiled kernels)",
            dir.display()
        ),
    }
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
}
