//! hptune: a hyperparameter-tuning orchestrator.
//!
//! A study file ([`spec`]) is read into a [`study`]: its objective, search space
//! ([`study::space`]) and trial template; a [`sampler`] proposes trials; the [`controller`]
//! runs them as trial workers through an [`executor`] (local ones on GPUs of their own,
//! [`gpus`]), reads what they report (the worker [`protocol`]),
//! stops unpromising trials early ([`study::stopping`]) and records everything in
//! [`storage`]. Inside a remote job, the relay ([`executor::relay`]) runs the worker and
//! writes what it reports into the storage. The [`dashboard`] and [`plot`] show studies as
//! figures; [`importance`] says which parameters matter; [`stats`] holds the summary
//! statistics they share. [`ops`] is what each command of the binary does, over all of these.

#![warn(unreachable_pub)]

pub mod controller;
pub mod dashboard;
pub mod executor;
mod gp;
mod gpus;
mod importance;
pub mod ops;
pub mod plot;
pub mod protocol;
pub mod sampler;
pub mod spec;
mod stats;
pub mod storage;
pub mod study;
