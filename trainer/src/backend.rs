//! Choosing the burn backend at run time from `--device` (and `--cpu-backend`).

use std::str::FromStr;

use burn::backend::Autodiff;
use burn::tensor::backend::AutodiffBackend;

use crate::error::{Result, TrainerError};
use crate::kernel_cache::AutotuneLevel;
use crate::model::FusedOps;

/// Where to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The CPU, with all cores.
    Cpu,
    /// The CUDA GPU of this index (`cuda` feature).
    Cuda(usize),
}

impl FromStr for DeviceChoice {
    type Err = TrainerError;
    fn from_str(s: &str) -> Result<Self> {
        let bad = |message: String| TrainerError::Device {
            device: s.to_string(),
            message,
        };
        match s {
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" | "gpu" => Ok(DeviceChoice::Cuda(0)),
            _ => match s.strip_prefix("cuda:") {
                Some(index) => index.parse().map(DeviceChoice::Cuda).map_err(|_| {
                    bad(format!(
                        "\"{index}\" is not a GPU index; use cuda:0, cuda:1, ..."
                    ))
                }),
                None => Err(bad("use cpu, cuda or cuda:N".to_string())),
            },
        }
    }
}

/// burn's CPU backends that this binary was built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CpuBackend {
    /// burn-flex (the default build's backend).
    #[default]
    Flex,
    /// burn-ndarray (`ndarray` feature).
    Ndarray,
    /// burn-candle's CPU backend (`candle` feature).
    Candle,
}

/// The float type of weights, activations, products and gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Precision {
    /// 32-bit floats (every device).
    #[default]
    F32,
    /// bfloat16 (CUDA): f32's range, 8 bits of mantissa.
    Bf16,
    /// IEEE half precision (CUDA): 11 bits of mantissa, range up to 65504.
    F16,
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        })
    }
}

/// A backend the model trains on: it records gradients, and it and its inner backend (for
/// evaluation) have the model's fused ops.
pub trait TrainBackend: AutodiffBackend<InnerBackend: FusedOps> + FusedOps {}

impl<B: AutodiffBackend<InnerBackend: FusedOps> + FusedOps> TrainBackend for B {}

/// Work that runs on whichever backend is chosen at run time.
pub trait BackendTask {
    /// What the work returns.
    type Output;
    /// Runs the work on training backend `B` and its device.
    fn run<B: TrainBackend>(self, device: B::Device) -> Result<Self::Output>;
}

/// Makes glibc keep freed blocks of up to 32 MiB for the next allocations, instead of mapping
/// each block over 128 KiB afresh and returning it when freed: a training step allocates and
/// frees the same tensors again and again, and every fresh page costs a page fault and the
/// kernel's zeroing (6 % of a MiniLM step on the CPU). The process keeps its peak memory.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before the training threads
    // allocate, and an out-of-range value is refused (returns 0), not applied.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

/// Runs `task` on the backend for `device` (and, on the CPU, `cpu`) computing in `precision`;
/// on a GPU, cubecl autotunes at level `autotune` (the CPU backends do not autotune).
///
/// The CPU backends compute in f32 only: another precision there is an error rather than a
/// silent f32 run, so that a study never compares runs that did not do what they said.
pub fn dispatch<T: BackendTask>(
    device: DeviceChoice,
    cpu: CpuBackend,
    precision: Precision,
    #[cfg_attr(not(feature = "cuda"), expect(unused_variables))] autotune: AutotuneLevel,
    task: T,
) -> Result<T::Output> {
    let device_name = match device {
        DeviceChoice::Cpu => "cpu".to_string(),
        DeviceChoice::Cuda(i) => format!("cuda:{i}"),
    };
    let missing = |what: &str, feature: &str| TrainerError::Device {
        device: device_name.clone(),
        message: format!(
            "{what} is not compiled into this binary; rebuild with `cargo build --release -p hptune-trainer --features {feature}`"
        ),
    };
    if device == DeviceChoice::Cpu && precision != Precision::F32 {
        return Err(TrainerError::InvalidArgument {
            flag: "precision",
            message: format!(
                "{precision} runs on CUDA only (--device cuda); the CPU backends compute in f32, so use --precision f32 there"
            ),
        });
    }
    tracing::info!("device {device_name}, precision {precision}");
    // Dropout masks come from our host generator on the CPU, from the backend on a GPU.
    crate::model::dropout::use_host_masks(device == DeviceChoice::Cpu);
    if device == DeviceChoice::Cpu {
        keep_freed_memory();
        // Opened now, so that the log says at the start which library multiplies.
        crate::blas::Cblas::get();
    }
    match (device, cpu) {
        #[cfg(feature = "cuda")]
        (DeviceChoice::Cuda(index), _) => {
            crate::kernel_cache::configure(index, autotune);
            let device = burn::backend::cuda::CudaDevice::new(index);
            match precision {
                Precision::F32 => task.run::<Autodiff<burn::backend::Cuda<f32>>>(device),
                Precision::Bf16 => task.run::<Autodiff<burn::backend::Cuda<half::bf16>>>(device),
                Precision::F16 => task.run::<Autodiff<burn::backend::Cuda<half::f16>>>(device),
            }
        }
        #[cfg(not(feature = "cuda"))]
        (DeviceChoice::Cuda(_), _) => Err(missing("CUDA", "cuda")),
        #[cfg(feature = "flex")]
        (DeviceChoice::Cpu, CpuBackend::Flex) => {
            task.run::<Autodiff<burn::backend::Flex>>(Default::default())
        }
        #[cfg(not(feature = "flex"))]
        (DeviceChoice::Cpu, CpuBackend::Flex) => Err(missing("burn-flex", "flex")),
        #[cfg(feature = "ndarray")]
        (DeviceChoice::Cpu, CpuBackend::Ndarray) => {
            task.run::<Autodiff<burn::backend::NdArray>>(Default::default())
        }
        #[cfg(not(feature = "ndarray"))]
        (DeviceChoice::Cpu, CpuBackend::Ndarray) => Err(missing("burn-ndarray", "ndarray")),
        #[cfg(feature = "candle")]
        (DeviceChoice::Cpu, CpuBackend::Candle) => {
            task.run::<Autodiff<burn::backend::Candle>>(Default::default())
        }
        #[cfg(not(feature = "candle"))]
        (DeviceChoice::Cpu, CpuBackend::Candle) => Err(missing("burn-candle", "candle")),
    }
}
