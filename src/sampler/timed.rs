//! A sampler that logs how long each proposal took, for `bench/` and for users who wonder
//! where the time of a study goes (`RUST_LOG=hptune::sampler=debug`).

use std::time::Instant;

use super::{ProposalContext, Sampler, SamplerError};
use crate::study::space::Assignment;

/// Wraps a sampler and logs the duration of each of its proposals at debug level.
pub(crate) struct Timed {
    algorithm: &'static str,
    inner: Box<dyn Sampler>,
}

impl Timed {
    /// Wraps `inner`, named `algorithm` in the log.
    pub(crate) fn new(algorithm: &'static str, inner: Box<dyn Sampler>) -> Self {
        Self { algorithm, inner }
    }
}

impl Sampler for Timed {
    fn propose(
        &mut self,
        context: &ProposalContext<'_>,
    ) -> Result<Option<Assignment>, SamplerError> {
        let start = Instant::now();
        let proposal = self.inner.propose(context);
        tracing::debug!(
            target: "hptune::sampler",
            trial = context.number,
            history = context.history.len(),
            running = context.running.len(),
            algorithm = self.algorithm,
            micros = start.elapsed().as_micros() as u64,
            "proposed"
        );
        proposal
    }

    fn reads_history(&self) -> bool {
        self.inner.reads_history()
    }
}
