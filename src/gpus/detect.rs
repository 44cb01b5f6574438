//! Which GPUs this process may hand out: the list given (`--gpus`, `HPTUNE_GPUS`), else
//! `CUDA_VISIBLE_DEVICES`, else the GPUs `nvidia-smi -L` lists.

use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{DEFAULT_LOCK_DIR, Device, GpuPlan, Isolation, LockDir, Share, device_memory};

/// How long `nvidia-smi -L` may take: it hangs with a driver that does.
pub(super) const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the devices of a pool came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `--gpus` or `HPTUNE_GPUS`.
    Given,
    /// The `CUDA_VISIBLE_DEVICES` of the controller.
    CudaVisibleDevices,
    /// `nvidia-smi -L`.
    NvidiaSmi,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Given => "--gpus",
            Source::CudaVisibleDevices => "CUDA_VISIBLE_DEVICES",
            Source::NvidiaSmi => "nvidia-smi -L",
        })
    }
}

/// The devices found, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The devices, in the order given or listed.
    pub devices: Vec<Device>,
    /// Where they came from.
    pub source: Source,
}

/// Why a study's trials cannot have the GPUs they ask for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Shortage {
    /// No list could be read: a list given by hand is wrong, or `nvidia-smi` failed.
    #[error("{0}")]
    NotFound(String),
    /// Fewer devices than one trial holds.
    #[error("{from} gives {}", listed(devices))]
    TooFew {
        /// Where the devices came from.
        from: Source,
        /// The devices found.
        devices: Vec<Device>,
    },
}

/// The devices of a study whose trials hold `share` each, their memory capped at
/// `memory_cap`, found as [`find`] does (with the controller's `CUDA_VISIBLE_DEVICES`),
/// locked in the folder `HPTUNE_GPU_LOCKS` names, else [`DEFAULT_LOCK_DIR`]; too few to run
/// one trial is a [`Shortage`]. The devices' memory is asked of `nvidia-smi` when trials
/// share them or have a cap; the isolation is `Alone` for whole devices, else `TimeShared`
/// (the caller may find MPS).
pub(crate) fn plan(
    share: Share,
    memory_cap: Option<u64>,
    given: Option<&str>,
) -> Result<GpuPlan, Shortage> {
    let cuda_visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let mut found = find(given, cuda_visible.as_deref()).map_err(Shortage::NotFound)?;
    let needed = match share {
        Share::Whole(n) => n,
        Share::Fraction(_) => NonZeroUsize::MIN,
    };
    if found.devices.len() < needed.get() {
        return Err(Shortage::TooFew {
            from: found.source,
            devices: found.devices,
        });
    }
    let isolation = match share {
        Share::Whole(_) => Isolation::Alone,
        Share::Fraction(_) => Isolation::TimeShared,
    };
    if (isolation == Isolation::TimeShared || memory_cap.is_some())
        && let Err(e) = device_memory(&mut found.devices)
    {
        tracing::debug!("the devices' memory is not known: {e}");
    }
    let locks = std::env::var_os("HPTUNE_GPU_LOCKS")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_LOCK_DIR), PathBuf::from);
    Ok(GpuPlan {
        share,
        memory_cap,
        devices: found.devices,
        source: found.source,
        locks: LockDir::new(&locks),
        isolation,
    })
}

/// The devices' names, as given: `0,1,2,3`.
pub(super) fn names(devices: &[Device]) -> String {
    let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    names.join(",")
}

/// How many devices were found, and which: `none`, `2 (0,1)`.
fn listed(devices: &[Device]) -> String {
    match devices.len() {
        0 => "none".to_string(),
        count => format!("{count} ({})", names(devices)),
    }
}

/// Finds the devices of the pool: `given` (the value of `--gpus` or `HPTUNE_GPUS`) if any,
/// else `cuda_visible` (the controller's `CUDA_VISIBLE_DEVICES`) if set, else the GPUs that
/// `nvidia-smi -L` lists. An error says what is wrong with a list given by hand, or why
/// nothing was found.
pub(crate) fn find(given: Option<&str>, cuda_visible: Option<&str>) -> Result<Found, String> {
    if let Some(text) = given {
        return Ok(Found {
            devices: parse_list(text).map_err(|e| format!("--gpus (or HPTUNE_GPUS): {e}"))?,
            source: Source::Given,
        });
    }
    if let Some(text) = cuda_visible {
        // CUDA reads the list up to its first negative entry (`-1` hides every device).
        let visible: Vec<&str> = text
            .split(',')
            .take_while(|entry| !entry.trim().starts_with('-'))
            .collect();
        return Ok(Found {
            devices: parse_list(&visible.join(","))
                .map_err(|e| format!("CUDA_VISIBLE_DEVICES: {e}"))?,
            source: Source::CudaVisibleDevices,
        });
    }
    let mut nvidia_smi = Command::new("nvidia-smi");
    nvidia_smi.arg("-L");
    let out = output_within(&mut nvidia_smi, NVIDIA_SMI_TIMEOUT)
        .map_err(|e| format!("nvidia-smi -L {e}"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said
            .lines()
            .chain(std::str::from_utf8(&out.stdout).unwrap_or_default().lines());
        let first = said
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no output");
        return Err(format!("nvidia-smi -L failed ({}): {first}", out.status));
    }
    Ok(Found {
        devices: parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout)),
        source: Source::NvidiaSmi,
    })
}

/// Runs `command` to its end and returns what it printed, or kills it after `timeout`.
pub(super) fn output_within(command: &mut Command, timeout: Duration) -> Result<Output, String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run ({e})"))?;
    let deadline = Instant::now() + timeout;
    let failed = |e: std::io::Error| format!("failed ({e})");
    while child.try_wait().map_err(failed)?.is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("did not answer within {} s", timeout.as_secs_f64()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().map_err(failed)
}

/// Reads a list of devices as `CUDA_VISIBLE_DEVICES` writes them: indices or UUIDs
/// (`GPU-…`, `MIG-…`), separated by commas. An empty list is no device.
fn parse_list(text: &str) -> Result<Vec<Device>, String> {
    let mut devices: Vec<Device> = Vec::new();
    if text.trim().is_empty() {
        return Ok(devices);
    }
    for entry in text.split(',').map(str::trim) {
        let valid = !entry.is_empty()
            && entry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/'));
        if !valid {
            return Err(format!(
                "'{}' is not a device: give indices or UUIDs separated by commas, e.g. 0,1,2,3",
                entry.escape_debug()
            ));
        }
        if devices.iter().any(|d| d.name == entry) {
            return Err(format!("device {entry} is listed twice"));
        }
        let uuid = (entry.starts_with("GPU-") || entry.starts_with("MIG-")).then(|| entry.into());
        devices.push(Device {
            name: entry.to_string(),
            uuid,
            memory: None,
        });
    }
    Ok(devices)
}

/// Reads the output of `nvidia-smi -L`: one `GPU <index>: <model> (UUID: GPU-…)` line per GPU
/// (the MIG instances listed under a GPU are not devices of the pool; name them with
/// `--gpus` to use them).
fn parse_nvidia_smi(output: &str) -> Vec<Device> {
    output
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("GPU ")?;
            let (index, rest) = rest.split_once(':')?;
            let index: u32 = index.trim().parse().ok()?;
            let uuid = rest
                .rsplit_once("(UUID:")
                .and_then(|(_, tail)| tail.split_once(')'))
                .map(|(uuid, _)| uuid.trim().to_string())
                .filter(|uuid| !uuid.is_empty());
            Some(Device {
                name: index.to_string(),
                uuid,
                memory: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_few_devices_for_one_trial_are_a_shortage_that_lists_them() {
        let two = Share::Whole(NonZeroUsize::new(2).unwrap());
        let short = plan(two, None, Some("3")).unwrap_err();
        assert_eq!(short.to_string(), "--gpus gives 1 (3)");
        assert_eq!(
            plan(two, None, Some("")).unwrap_err().to_string(),
            "--gpus gives none"
        );
        let plan = plan(two, None, Some("0,GPU-1")).unwrap();
        assert_eq!(
            (plan.names(), plan.source),
            ("0,GPU-1".into(), Source::Given)
        );
        assert_eq!(plan.trials_at_once(), 1);
    }

    #[test]
    fn reads_the_gpus_nvidia_smi_lists_and_skips_their_mig_instances() {
        let output = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a4f8c2e-9d3b-4e2a-8f1c-0123456789ab)\n\
                      GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n  \
                      MIG 1g.5gb      Device  0: (UUID: MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee)\n\
                      No devices were found\n";
        let devices = parse_nvidia_smi(output);
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0].name, "0");
        assert_eq!(
            devices[0].uuid.as_deref(),
            Some("GPU-5a4f8c2e-9d3b-4e2a-8f1c-0123456789ab")
        );
        assert_eq!(devices[1].name, "1");
        assert!(parse_nvidia_smi("No devices were found\n").is_empty());
    }

    #[test]
    fn reads_a_list_of_indices_or_uuids_and_refuses_a_malformed_one() {
        let devices = parse_list(" 0, 2,GPU-abc").unwrap();
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["0", "2", "GPU-abc"]);
        assert_eq!(devices[2].uuid.as_deref(), Some("GPU-abc"));
        assert!(parse_list("").unwrap().is_empty());
        assert!(
            parse_list("0,,1")
                .unwrap_err()
                .contains("'' is not a device")
        );
        assert!(parse_list("0,0").unwrap_err().contains("listed twice"));
        assert!(
            parse_list("0;1")
                .unwrap_err()
                .contains("'0;1' is not a device")
        );
    }

    #[test]
    fn a_listing_that_hangs_is_given_up() {
        let mut sleep = Command::new("sleep");
        sleep.arg("10");
        let error = output_within(&mut sleep, Duration::from_millis(100)).unwrap_err();
        assert_eq!(error, "did not answer within 0.1 s");
        let mut echo = Command::new("echo");
        echo.arg("GPU 0: A (UUID: GPU-1)");
        let out = output_within(&mut echo, Duration::from_secs(10)).unwrap();
        assert_eq!(
            parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout)).len(),
            1
        );
    }

    #[test]
    fn a_given_list_comes_before_cuda_visible_devices() {
        let found = find(Some("3"), Some("0,1")).unwrap();
        assert_eq!((found.devices.len(), found.source), (1, Source::Given));
        let found = find(None, Some("0,1,-1,2")).unwrap();
        assert_eq!(found.source, Source::CudaVisibleDevices);
        assert_eq!(found.devices.len(), 2);
        assert!(find(None, Some("-1")).unwrap().devices.is_empty());
    }
}
