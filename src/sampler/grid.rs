//! Grid search: every point of the grid once, in the stable order of [`Space::grid`].

use super::{ProposalContext, Sampler, SamplerError};
use std::collections::HashSet;

use crate::study::space::{Assignment, PointKey, Space, SpaceError};

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
        // One pass over the trials, then one look-up per point: a grid study's proposal
        // costs its trials and points added, not multiplied.
        let taken: HashSet<PointKey> = (context.history.iter().map(|o| &o.params))
            .chain(context.running)
            .filter_map(PointKey::of)
            .collect();
        Ok(self
            .points
            .iter()
            .find(|p| PointKey::of(p).is_none_or(|key| !taken.contains(&key)))
            .cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::Observation;
    use crate::study::Goal;
    use crate::study::space::{Domain, ParamValue, Parameter, Scale};

    /// `k` an integer from 0 to 2, `c` one of `a` and `b`: six points.
    fn space() -> Space {
        let parameter = |id: &str, domain| Parameter {
            id: id.into(),
            domain,
            condition: None,
        };
        Space::new(vec![
            parameter(
                "k",
                Domain::Integer {
                    min: 0,
                    max: 2,
                    scale: Scale::Linear,
                    grid_points: None,
                },
            ),
            parameter(
                "c",
                Domain::Categorical {
                    values: vec!["a".into(), "b".into()],
                },
            ),
        ])
    }

    /// The grid sampler's proposal after the finished trials `finished` with `running`.
    fn propose(finished: &[Assignment], running: &[Assignment]) -> Option<Assignment> {
        let space = space();
        let history: Vec<Observation> = finished
            .iter()
            .zip(0..)
            .map(|(params, number)| Observation {
                number,
                params: params.clone(),
                ..Observation::unconstrained()
            })
            .collect();
        let context = ProposalContext {
            space: &space,
            goal: Goal::Minimize,
            goals: &[Goal::Minimize],
            constraints: &Default::default(),
            number: (finished.len() + running.len()) as u64,
            history: &history,
            prior: &[],
            running,
            parallel: 1,
            curves: &[],
        };
        GridSampler::new(&space).unwrap().propose(&context).unwrap()
    }

    #[test]
    fn proposes_the_first_point_that_no_finished_or_running_trial_took() {
        let grid = space().grid().unwrap();
        assert_eq!(grid.len(), 6);
        assert_eq!(propose(&[], &[]), Some(grid[0].clone()));
        // Points taken out of order (an enqueued trial's), finished or running.
        let taken = [grid[0].clone(), grid[2].clone()];
        assert_eq!(propose(&taken, &[grid[1].clone()]), Some(grid[3].clone()));
        // An integer read back as a double takes its point; a point off the grid takes none.
        let with_k = |point: &Assignment, k: ParamValue| {
            let mut point = point.clone();
            point.insert("k".into(), k);
            point
        };
        let as_double = with_k(&grid[0], ParamValue::Float(grid[0]["k"].as_f64().unwrap()));
        let off_grid = with_k(&grid[1], ParamValue::Int(7));
        assert_eq!(propose(&[as_double, off_grid], &[]), Some(grid[1].clone()));
        // Every point taken: the grid is done.
        assert_eq!(propose(&grid, &[]), None);
        assert_eq!(propose(&grid[..3], &grid[3..]), None);
    }
}
