//! hptune's integration tests, one module per subject, in one test binary: `common` and the
//! library are compiled and linked once, not once per file. Run one subject with
//! `cargo test --test it MODULE::` (e.g. `cargo test --test it slurm_faults::`).
//!
//! The tests share one process and run in parallel threads: none may set the process's
//! environment or working directory (each command gets its own), and tests that take a
//! shared resource away from the others say so through [`common`] (the Slurm cluster:
//! [`common::slurm_shared`], [`common::slurm_alone`]).

mod common;

mod artifacts;
mod ask_tell;
mod bad_studies;
mod bayes_study;
mod commands;
mod concurrent_controllers;
mod constraints;
mod crash_recovery;
mod dashboard;
mod dashboard_http;
mod dockerfile;
mod early_stopping;
mod enqueue;
mod example_studies;
mod gpus;
mod large_studies;
mod objectives;
mod packing;
mod parsers_never_panic;
mod plot_files;
mod remote_executors;
mod run_study;
mod slurm_executor;
mod slurm_faults;
mod storage_urls;
mod warm_start;
mod worker_output;
