//! hptune-trainer's integration tests, one module per subject, in one test binary: the
//! library is linked once, not once per file. Run one subject with
//! `cargo test -p hptune-trainer --test it MODULE::` (e.g. `--test it parity::`).
//!
//! The tests share one process and run in parallel threads: a test that changes state of
//! the whole process (burn's default float type of the CPU device) runs in a process of its
//! own ([`common::runs_in_own_process`]).

#[cfg(feature = "flex")]
mod common;

mod binary;
mod checkpoints;
mod costs;
mod data_formats;
mod device_work;
mod f16_loss_scaling;
mod half_precision;
mod kernel_cache;
mod loading;
mod parity;
mod serve;
