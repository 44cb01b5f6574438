//! hptune: a hyperparameter-tuning orchestrator.
//!
//! A study file ([`spec`]) defines a search [`space`]; a [`sampler`] proposes trials; the
//! [`controller`] runs them as trial workers through an [`executor`], reads what they report
//! ([`report`]), stops unpromising trials early ([`stopping`]) and records everything in
//! [`storage`].

pub mod controller;
pub mod executor;
pub mod report;
pub mod sampler;
pub mod space;
pub mod spec;
pub mod stopping;
pub mod storage;
