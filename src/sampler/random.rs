//! Random search: each trial an independent uniform draw in the unit cube.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{ProposalContext, Sampler, SamplerError};
use crate::study::space::Assignment;

/// Draws trial `n` from a random stream of its own, derived from the seed and `n`: the
/// proposals do not depend on the order in which parallel trials finish, and a rerun of a
/// study proposes what the first run would have.
#[derive(Debug, Clone)]
pub(crate) struct RandomSampler {
    seed: u64,
}

impl RandomSampler {
    /// A sampler with this seed.
    pub(crate) fn new(seed: u64) -> Self {
        Self { seed }
    }
}

impl Sampler for RandomSampler {
    fn propose(
        &mut self,
        context: &ProposalContext<'_>,
    ) -> Result<Option<Assignment>, SamplerError> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(context.number);
        let unit: Vec<f64> = (0..context.space.dimension())
            .map(|_| rng.random::<f64>())
            .collect();
        Ok(Some(context.space.from_unit(&unit)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::Goal;
    use crate::study::space::Space;

    fn space() -> Space {
        Space::new(vec![crate::study::space::unit_double("x")])
    }

    fn propose(sampler: &mut RandomSampler, space: &Space, number: u64) -> Assignment {
        let context = ProposalContext {
            space,
            goal: Goal::Minimize,
            goals: &[Goal::Minimize],
            constraints: &Default::default(),
            number,
            history: &[],
            prior: &[],
            running: &[],
            parallel: 1,
        };
        sampler.propose(&context).unwrap().unwrap()
    }

    #[test]
    fn same_seed_and_number_give_the_same_point() {
        let space = space();
        let a = propose(&mut RandomSampler::new(7), &space, 3);
        let b = propose(&mut RandomSampler::new(7), &space, 3);
        let c = propose(&mut RandomSampler::new(8), &space, 3);
        let d = propose(&mut RandomSampler::new(7), &space, 4);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn draws_cover_the_interval_uniformly() {
        let space = space();
        let mut sampler = RandomSampler::new(1);
        let mut bins = [0u32; 10];
        for n in 0..10_000 {
            let x = propose(&mut sampler, &space, n)["x"].as_f64().unwrap();
            bins[((x * 10.0) as usize).min(9)] += 1;
        }
        assert!(bins.iter().all(|&b| (900..1100).contains(&b)), "{bins:?}");
    }
}
