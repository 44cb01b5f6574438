//! The environment of the protocol: each variable a worker (or a relay) is given, named once,
//! and the worker's environment built from them.

use std::path::Path;

use crate::gpus::{Device, Lease};
use crate::study::TrialTemplate;

/// The variables of the worker protocol, in the order [`protocol_env`] sets them: study,
/// trial, attempt, metrics file, and cloudml-hypertune's metrics file and trial.
pub(crate) const PROTOCOL_VARIABLES: [&str; 6] = [
    "HPTUNE_STUDY",
    "HPTUNE_TRIAL_ID",
    "HPTUNE_ATTEMPT",
    "HPTUNE_METRICS_FILE",
    "CLOUD_ML_HP_METRIC_FILE",
    "CLOUD_ML_TRIAL_ID",
];

/// The variable that names the folder a worker saves its model to, its attempt's own.
pub(crate) const OUTPUT_DIR_VARIABLE: &str = "HPTUNE_OUTPUT_DIR";

/// The variable that Vertex AI gives its tuning trials for the same folder (so a script
/// written for Vertex AI saves there unchanged).
pub(crate) const VERTEX_MODEL_DIR_VARIABLE: &str = "AIP_MODEL_DIR";

/// The variables that name the folder a worker saves its model to: as hptune names it, and
/// as Vertex AI does.
pub(crate) const OUTPUT_VARIABLES: [&str; 2] = [OUTPUT_DIR_VARIABLE, VERTEX_MODEL_DIR_VARIABLE];

/// The variable that lists a trial's devices as CUDA names them (UUIDs when known).
pub(crate) const CUDA_DEVICES_VARIABLE: &str = "CUDA_VISIBLE_DEVICES";

/// The variable that lists a trial's devices as hptune names them (recorded with the
/// attempt); never passed on to a worker of a trial without GPUs.
pub(crate) const GPUS_VARIABLE: &str = "HPTUNE_GPUS";

/// The variable that gives a trial with a memory cap (its own, or its share of a device) the
/// cap, in bytes: a worker that is not isolated by MPS keeps to it itself.
pub(crate) const GPU_MEMORY_VARIABLE: &str = "HPTUNE_GPU_MEMORY";

/// The variable by which MPS caps a trial's device memory (`0=<MiB>M`: the first device
/// the trial sees).
pub(crate) const MPS_MEMORY_VARIABLE: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";

/// The variable by which MPS gives a trial its share of the device's compute, in percent.
pub(crate) const MPS_THREADS_VARIABLE: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";

/// The variables that give a trial with GPUs its devices, its cap and its share of them: as
/// CUDA names the devices, as hptune does, its cap in bytes, and MPS's limits.
pub(crate) const DEVICE_VARIABLES: [&str; 5] = [
    CUDA_DEVICES_VARIABLE,
    GPUS_VARIABLE,
    GPU_MEMORY_VARIABLE,
    MPS_MEMORY_VARIABLE,
    MPS_THREADS_VARIABLE,
];

/// The variable that gives a relay (in a remote job) its storage URL; never passed on to a
/// worker, which never needs the database.
pub(crate) const STORAGE_VARIABLE: &str = "HPTUNE_STORAGE";

/// The variable that names the folder, on the job's node, of the relay's files (the
/// worker's log and metrics file) in a Slurm job that reports through the database.
pub const RELAY_LOG_DIR_VARIABLE: &str = "HPTUNE_RELAY_LOG_DIR";

/// Whether `name` belongs to the worker protocol, which a study's `trial.env` may not set:
/// one of [`PROTOCOL_VARIABLES`] or [`OUTPUT_VARIABLES`], or any other `HPTUNE_` name
/// ([`STORAGE_VARIABLE`], [`GPUS_VARIABLE`], and those the protocol may add).
pub(crate) fn is_protocol_variable(name: &str) -> bool {
    name.starts_with("HPTUNE_")
        || PROTOCOL_VARIABLES.contains(&name)
        || OUTPUT_VARIABLES.contains(&name)
}

/// The variables of the worker protocol, named by [`PROTOCOL_VARIABLES`].
pub(crate) fn protocol_env(
    study: &str,
    number: u64,
    attempt: u32,
    metrics_path: &Path,
) -> Vec<(String, String)> {
    let metrics = metrics_path.display().to_string();
    let values = [
        study.to_string(),
        number.to_string(),
        attempt.to_string(),
        metrics.clone(),
        metrics,
        number.to_string(),
    ];
    PROTOCOL_VARIABLES
        .iter()
        .map(|name| name.to_string())
        .zip(values)
        .collect()
}

/// The study file's own variables, then those of the worker protocol, then the attempt's
/// model folder ([`OUTPUT_VARIABLES`]) when it has one, then the trial's devices
/// ([`DEVICE_VARIABLES`]) when it has GPUs, with its memory cap when it has one and MPS's
/// limits under MPS: a worker always sees its own trial (`spec`
/// refuses a `trial.env` that names a protocol or output variable, or a device variable of
/// a study with GPUs).
pub(crate) fn worker_env(
    template: &TrialTemplate,
    study: &str,
    number: u64,
    attempt: u32,
    metrics_path: &Path,
    output_dir: Option<&Path>,
    gpus: Option<&Lease>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = template
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.extend(protocol_env(study, number, attempt, metrics_path));
    if let Some(dir) = output_dir {
        env.extend(output_env(&dir.display().to_string()));
    }
    if let Some(lease) = gpus {
        env.extend(device_env(lease));
    }
    env
}

/// The [`DEVICE_VARIABLES`] of a trial's `lease`: its devices, its memory cap when it has
/// one, and MPS's limits when it runs under MPS.
fn device_env(lease: &Lease) -> Vec<(String, String)> {
    let devices = lease.devices();
    let list = |id: fn(&Device) -> &str| devices.iter().map(id).collect::<Vec<_>>().join(",");
    let mut env = vec![
        (CUDA_DEVICES_VARIABLE.into(), list(Device::cuda_id)),
        (GPUS_VARIABLE.into(), list(|d| &d.name)),
    ];
    if let Some(cap) = lease.memory_cap() {
        env.push((GPU_MEMORY_VARIABLE.into(), cap.to_string()));
    }
    if let Some(threads) = lease.mps_threads() {
        if let Some(cap) = lease.memory_cap() {
            env.push((MPS_MEMORY_VARIABLE.into(), format!("0={}M", cap >> 20)));
        }
        env.push((MPS_THREADS_VARIABLE.into(), threads.to_string()));
    }
    env
}

/// Both [`OUTPUT_VARIABLES`] naming `dir`, the folder the worker saves its model to.
pub(crate) fn output_env(dir: &str) -> Vec<(String, String)> {
    OUTPUT_VARIABLES
        .iter()
        .map(|name| (name.to_string(), dir.to_string()))
        .collect()
}
