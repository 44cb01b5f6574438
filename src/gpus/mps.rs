//! NVIDIA MPS (Multi-Process Service) for trials sharing a device: with its control daemon
//! running, each trial gets a hard cap on its device memory and a share of the device's
//! compute (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`). hptune
//! uses a daemon that runs, or starts one (`nvidia-cuda-mps-control -d`) and stops it
//! (`quit`) when the run ends.

use std::fmt;
use std::io::Write;
use std::process::{Command, Stdio};

/// The program that starts, asks and stops the MPS control daemon.
const CONTROL: &str = "nvidia-cuda-mps-control";

/// How the trials of a study are kept apart on their devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isolation {
    /// Each trial holds whole devices alone.
    Alone,
    /// Trials share devices under MPS, which enforces each one's memory cap; `started`: this
    /// run started the daemon (and stops it at its end).
    Mps {
        /// Whether this run started the daemon.
        started: bool,
    },
    /// Trials time-share their devices: each worker is told its cap (`HPTUNE_GPU_MEMORY`)
    /// and keeps to it itself (`hptune-trainer` does).
    TimeShared,
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isolation::Alone => "none needed (each trial alone on its devices)",
            Isolation::Mps { started: true } => {
                "NVIDIA MPS (control daemon started by hptune, stopped at the end): memory caps enforced"
            }
            Isolation::Mps { started: false } => {
                "NVIDIA MPS (the running control daemon): memory caps enforced"
            }
            Isolation::TimeShared => {
                "time-sharing (no MPS): each worker is told its cap in HPTUNE_GPU_MEMORY and keeps to it itself"
            }
        })
    }
}

/// The MPS control daemon this run uses; stopped when dropped if this run started it.
#[derive(Debug)]
pub(crate) struct Mps {
    started: bool,
}

impl Mps {
    /// Finds a running control daemon, else starts one: `None` when MPS is not there (no
    /// `nvidia-cuda-mps-control`, or a daemon that does not start).
    pub(crate) fn find_or_start() -> Option<Mps> {
        if ask("get_server_list").is_ok() {
            return Some(Mps { started: false });
        }
        let started = Command::new(CONTROL)
            .arg("-d")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match started {
            Ok(status) if status.success() => Some(Mps { started: true }),
            Ok(status) => {
                tracing::warn!("{CONTROL} -d failed ({status}): trials time-share their devices");
                None
            }
            Err(_) => None,
        }
    }

    /// The isolation the daemon gives.
    pub(crate) fn isolation(&self) -> Isolation {
        Isolation::Mps {
            started: self.started,
        }
    }
}

impl Drop for Mps {
    fn drop(&mut self) {
        if self.started
            && let Err(e) = ask("quit")
        {
            tracing::warn!("stopping the MPS control daemon: {e}");
        }
    }
}

/// Sends `command` to the control daemon (on the standard input of `nvidia-cuda-mps-control`,
/// as it reads them); an error when it cannot run or says the daemon is not there.
fn ask(command: &str) -> Result<(), String> {
    let mut child = Command::new(CONTROL)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{CONTROL}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A daemon that is not there may end the program before it reads.
        let _ = writeln!(stdin, "{command}");
    }
    let status = child.wait().map_err(|e| format!("{CONTROL}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("echo {command} | {CONTROL} failed ({status})"))
    }
}
