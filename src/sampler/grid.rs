//! Grid search: every point of the grid once, in the stable order of [`Space::grid`].

use super::{ProposalContext, Sampler, SamplerError};
use crate::study::space::{Assignment, Space, SpaceError, same_point};

/// Proposes the first grid point that no finished or running trial has taken.
#[derive(Debug, Clone)]
pub(crate) struct GridSampler {
    points: Vec<Assignment>,
}

impl GridSampler {
    /// Enumerates the grid of `space`.
    pub(crate) fn new(space: &Space) -> Result<Self, SpaceError> {
        Ok(Self {
            points: space.grid()?,
        })
    }
}

impl Sampler for GridSampler {
    fn propose(
        &mut self,
        context: &ProposalContext<'_>,
    ) -> Result<Option<Assignment>, SamplerError> {
        let taken = |point: &Assignment| {
            context.history.iter().any(|o| same_point(&o.params, point))
                || context.running.iter().any(|r| same_point(r, point))
        };
        Ok(self.points.iter().find(|p| !taken(p)).cloned())
    }
}
