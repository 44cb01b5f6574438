//! The parameters a user gave by hand (`hptune trial --param ...`), proposed once.

use super::{ProposalContext, Sampler, SamplerError};
use crate::study::space::Assignment;

/// Proposes one given assignment, then nothing.
#[derive(Debug, Clone)]
pub(crate) struct ManualSampler {
    params: Option<Assignment>,
}

impl ManualSampler {
    /// A sampler that proposes `params` once.
    pub(crate) fn new(params: Assignment) -> Self {
        Self {
            params: Some(params),
        }
    }
}

impl Sampler for ManualSampler {
    fn propose(
        &mut self,
        _context: &ProposalContext<'_>,
    ) -> Result<Option<Assignment>, SamplerError> {
        Ok(self.params.take())
    }
}
