//! hptune-trainer: fine-tunes BERT-family text classifiers with burn and reports metrics by
//! hptune's worker protocol.
//!
//! The parts, each in its own module: [`config`] (the checkpoint's config.json), [`model`]
//! (the network), [`fused`] (its heavy ops and the optimiser's as single ops, with their kernels), [`checkpoint`] (safetensors in and out, with the key map), [`tokenize`],
//! [`data`] (files and labels), [`batch`] (batch order and padding), [`optim`] (AdamW groups, clipping,
//! schedule), [`loss_scale`] (f16's dynamic loss scale), [`train`] (the loop and evaluation), [`resume`] (training checkpoints: written, and resumed from), [`metrics`], [`report`] (the protocol),
//! [`backend`] (device and precision choice), [`kernel_cache`] (where GPU kernels are cached), [`memory`] (the device-memory cap and peak), [`host_reads`] (device-to-host reads, counted), [`warm`] (`warm-cache`: one step's kernels compiled ahead), [`blas`] (the system's BLAS for CPU products), [`hub`] (hub ids: cache and download), [`pretrained`]
//! (checkpoint folders) and [`run`] (the commands).

#![warn(unreachable_pub)]

pub mod backend;
pub mod batch;
mod blas;
pub mod checkpoint;
mod classify;
pub mod cli;
pub mod config;
pub mod data;
mod error;
pub mod fused;
pub mod host_reads;
mod hub;
pub mod kernel_cache;
mod loss_scale;
mod memory;
mod metrics;
pub mod model;
pub mod optim;
pub mod pretrained;
mod progress;
mod report;
mod resume;
pub mod run;
pub mod serve;
pub mod tokenize;
mod train;
pub mod warm;

pub use error::{Result, TrainerError};
