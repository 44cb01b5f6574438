//! Device memory: the cap a trial is given when it shares its GPU with others
//! (`--gpu-memory`, else `HPTUNE_GPU_MEMORY`), kept by checking the memory pool after every
//! training step and evaluation, and the peak reported at the end.
//!
//! burn 0.21's CUDA backend (cubecl 0.10) allocates through a memory pool that has no limit of
//! its own and never gives its pages back during a run: what it has reserved after a step is
//! the most it has held so far, so checking it after each step sees every excess, at the
//! latest one step after it happened. On the CPU there is no device memory: the cap does not
//! apply (the log says so) and the peak reported is the process's resident set.

use std::any::Any;

use crate::error::{Result, TrainerError};

/// The variable in which the controller gives a worker its device-memory cap, in bytes.
pub(crate) const ENV: &str = "HPTUNE_GPU_MEMORY";

/// Formats bytes for people: `16.00 GiB (17179869184 bytes)`.
pub(crate) fn describe_bytes(bytes: u64) -> String {
    const GIB: f64 = 1073741824.0;
    const MIB: f64 = 1048576.0;
    let value = bytes as f64;
    if value >= GIB {
        format!("{:.2} GiB ({bytes} bytes)", value / GIB)
    } else {
        format!("{:.1} MiB ({bytes} bytes)", value / MIB)
    }
}

/// Where a cap came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CapSource {
    /// The `--gpu-memory` flag.
    Flag,
    /// The `HPTUNE_GPU_MEMORY` variable, set by the controller.
    Environment,
}

impl std::fmt::Display for CapSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CapSource::Flag => f.write_str("--gpu-memory"),
            CapSource::Environment => f.write_str(ENV),
        }
    }
}

/// A device-memory cap in bytes and where it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemoryCap {
    /// The most bytes the trainer's memory pool may hold.
    pub bytes: u64,
    /// The flag or the variable.
    pub source: CapSource,
}

impl MemoryCap {
    /// The cap of a run: `--gpu-memory` (already parsed) when given, else `HPTUNE_GPU_MEMORY`
    /// (a bad value of which is an error naming the variable), else none.
    pub(crate) fn resolve(flag: Option<u64>) -> Result<Option<MemoryCap>> {
        if let Some(bytes) = flag {
            return Ok(Some(MemoryCap {
                bytes,
                source: CapSource::Flag,
            }));
        }
        let Some(value) = std::env::var_os(ENV) else {
            return Ok(None);
        };
        let value = value.to_string_lossy();
        hptune_memory_size::parse(&value)
            .map(|bytes| {
                Some(MemoryCap {
                    bytes,
                    source: CapSource::Environment,
                })
            })
            .map_err(|error| TrainerError::InvalidEnvironment {
                variable: ENV,
                message: error.to_string(),
            })
    }
}

/// The peak memory of a run, by what could be measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeakMemory {
    /// The most the device's memory pool held (GPU backends).
    Device(u64),
    /// The process's peak resident set (the CPU backends, whose tensors are in host memory).
    ProcessRss(u64),
}

impl PeakMemory {
    /// The protocol's key and value: `peak_memory_bytes` or `peak_rss_bytes`.
    pub(crate) fn key_value(&self) -> (&'static str, u64) {
        match *self {
            PeakMemory::Device(bytes) => ("peak_memory_bytes", bytes),
            PeakMemory::ProcessRss(bytes) => ("peak_rss_bytes", bytes),
        }
    }
}

/// The process's peak resident set in bytes, from `getrusage`.
pub(crate) fn peak_rss() -> u64 {
    // SAFETY: getrusage only writes the struct it is given, which is zeroed and of its type.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    // Linux reports kibibytes.
    u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024
}

/// The bytes the memory pool of `device` holds (reserved pages, not only live tensors), on a
/// GPU backend; `None` on the CPU backends.
pub(crate) fn device_reserved(device: &dyn Any) -> Option<u64> {
    #[cfg(feature = "cuda")]
    if let Some(device) = device.downcast_ref::<burn::backend::cuda::CudaDevice>() {
        use burn::cubecl::Runtime;
        let client = burn::cubecl::cuda::CudaRuntime::client(device);
        return client.memory_usage().ok().map(|usage| usage.bytes_reserved);
    }
    let _ = device;
    None
}

/// When the memory was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moment {
    /// After this training step (1-based, counted over the run).
    TrainingStep(usize),
    /// After the evaluation of this epoch (1-based).
    Evaluation(usize),
}

impl std::fmt::Display for Moment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Moment::TrainingStep(step) => write!(f, "training step {step}"),
            Moment::Evaluation(epoch) => write!(f, "the evaluation of epoch {epoch}"),
        }
    }
}

/// Keeps a run's device memory under its cap and its peak: [`MemoryWatch::check`] after every
/// training step and evaluation.
#[derive(Debug, Clone)]
pub(crate) struct MemoryWatch {
    cap: Option<MemoryCap>,
    on_device: bool,
    peak: u64,
}

impl MemoryWatch {
    /// A watch of `device`'s memory with `cap`; on the CPU it logs that the cap does not apply.
    pub(crate) fn new(cap: Option<MemoryCap>, device: &dyn Any) -> Self {
        let on_device = device_reserved(device).is_some();
        match cap {
            Some(cap) if on_device => tracing::info!(
                "device memory cap {} ({}): the run stops if its memory pool holds more",
                describe_bytes(cap.bytes),
                cap.source
            ),
            Some(cap) => tracing::info!(
                "device memory cap {} ({}) does not apply on the CPU: its tensors are in host memory",
                describe_bytes(cap.bytes),
                cap.source
            ),
            None => {}
        }
        MemoryWatch {
            cap,
            on_device,
            peak: 0,
        }
    }

    /// Reads the device's memory after `moment`; an error when it is over the cap.
    pub(crate) fn check(&mut self, device: &dyn Any, moment: Moment) -> Result<()> {
        match device_reserved(device) {
            Some(reserved) => self.record(reserved, moment),
            None => Ok(()),
        }
    }

    /// Records `reserved` bytes held after `moment`: the peak, and the cap's verdict.
    pub(crate) fn record(&mut self, reserved: u64, moment: Moment) -> Result<()> {
        self.peak = self.peak.max(reserved);
        match self.cap {
            Some(cap) if self.on_device && reserved > cap.bytes => Err(TrainerError::OutOfMemory {
                usage: describe_bytes(reserved),
                cap: describe_bytes(cap.bytes),
                given_by: cap.source.to_string(),
                moment: moment.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// The run's peak so far: the device pool's on a GPU, the process's resident set on the CPU.
    pub(crate) fn peak(&self) -> PeakMemory {
        if self.on_device {
            PeakMemory::Device(self.peak)
        } else {
            PeakMemory::ProcessRss(peak_rss())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch as on a GPU, without one.
    fn device_watch(cap: Option<u64>) -> MemoryWatch {
        MemoryWatch {
            cap: cap.map(|bytes| MemoryCap {
                bytes,
                source: CapSource::Environment,
            }),
            on_device: true,
            peak: 0,
        }
    }

    #[test]
    fn a_pool_over_the_cap_ends_the_run_naming_cap_usage_and_source() {
        let mut watch = device_watch(Some(1 << 30));
        watch.record(600 << 20, Moment::TrainingStep(1)).unwrap();
        watch.record(1 << 30, Moment::TrainingStep(2)).unwrap();
        let error = watch
            .record((1 << 30) + 1, Moment::TrainingStep(3))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "out of memory after training step 3: the device memory pool holds 1.00 GiB (1073741825 bytes), over the cap of 1.00 GiB (1073741824 bytes) given by HPTUNE_GPU_MEMORY"
        );
        assert_eq!(watch.peak(), PeakMemory::Device((1 << 30) + 1));
    }

    #[test]
    fn without_a_cap_the_watch_only_keeps_the_peak() {
        let mut watch = device_watch(None);
        for reserved in [5, 90, 40] {
            watch.record(reserved << 30, Moment::Evaluation(1)).unwrap();
        }
        assert_eq!(watch.peak().key_value(), ("peak_memory_bytes", 90 << 30));
    }

    #[test]
    fn on_the_cpu_the_cap_does_not_apply_and_the_peak_is_the_resident_set() {
        let cap = Some(MemoryCap {
            bytes: 1,
            source: CapSource::Flag,
        });
        let mut watch = MemoryWatch::new(cap, &());
        watch.check(&(), Moment::TrainingStep(1)).unwrap();
        watch.record(u64::MAX, Moment::TrainingStep(2)).unwrap();
        let (key, bytes) = watch.peak().key_value();
        assert_eq!(key, "peak_rss_bytes");
        // This test process holds at least its own binary's pages.
        assert!(bytes > 1 << 20, "{bytes}");
    }
}
