//! Bayesian optimisation: a Gaussian-process model of the objective over the unit cube of the
//! space, and each trial where the expected improvement over the best value is highest.
//!
//! The first trials follow a space-filling design ([`design`]); after that every proposal
//! comes from the model ([`hptune_gp`]): features of each finished trial ([`encoding`]),
//! hyperparameters fitted by maximum a posteriori ([`fit`](hptune_gp::fit)), the posterior
//! ([`Gp`]), and log expected improvement ([`log_ei`](hptune_gp::log_ei)) maximised over a
//! trust region around the best point ([`trust`])
//! that shrinks while proposals fail to improve ([`search`]). Trials still running are drawn
//! from the posterior, and the improvement must beat the values drawn for them as well
//! ([`acquisition`]), so that parallel proposals spread out. Failed trials count as the worst
//! value seen, so the model steers away from where trials fail. Where the study has
//! constraints, the expected improvement over the best feasible trial is weighted by the
//! probability of feasibility ([`feasibility`]), and a region that has converged is left for
//! the whole space. The values are warped by a power transform fitted to them, so that a few
//! huge ones do not flatten the model. With [many parameters](design::warps_only_outliers)
//! (10, or 8 of which one is categorical) only values far out are warped, with 8 or 9 in a
//! study of 10 trials per parameter or more [only a heavy tail](design::warps_only_heavy_tails),
//! and from [16](design::WHOLE_CUBE_PARAMETERS) the search spans the whole space; between
//! them, with 10 to 15, or 8 and 9 in a study of fewer than 10 trials per parameter ([the
//! middle](design::is_middle)), the design is smaller (a fifth of the study's trial budget at
//! most) and the trust region turns local sooner. The same model names the trial it believes
//! best ([`believed_best`]). See `docs/bayes.md`.

pub(crate) mod acquisition;
mod anchor;
mod believed;
mod data;
pub(crate) mod design;
pub(crate) mod encoding;
pub(crate) mod feasibility;
pub(crate) mod fidelity;
pub(crate) mod hypervolume_improvement;
pub(crate) mod search;
mod several;
pub(crate) mod trust;

pub(crate) use believed::believed_best;

use super::{Observation, ProposalContext, Sampler, SamplerError};
use crate::study::Goal;
use crate::study::space::Assignment;
use acquisition::Acquisition;
use anchor::Anchors;
use data::{TrainingData, Warping};
use design::{design_point, initial_design_size, searches_whole_cube};
use encoding::Encoding;
use feasibility::Feasibility;
use fidelity::{Curves, Rungs};
use hptune_gp::{Gp, GpError, stream};
use search::propose;
use several::{MAX_EXACT, Several, scalarised};
use trust::Region;

/// Proposes trials by Bayesian optimisation with a Gaussian process. Given the same seed and
/// history it proposes the same point: every random choice comes from a stream derived from
/// the seed and the trial's number.
#[derive(Debug, Clone)]
pub struct BayesSampler {
    seed: u64,
    anchors: Anchors,
    /// The model of the study's learning curves, where ASHA stops its trials ([`fidelity`]).
    fidelity: Option<Curves>,
    /// The models of a study of several objectives.
    several: Several,
    /// The reference point the study gives, per objective (`None`: derived from the trials).
    references: Vec<Option<f64>>,
    /// The study's trial budget (`max_trial_count`), where it has one.
    budget: Option<u64>,
}

impl BayesSampler {
    /// A sampler with this seed.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            anchors: Anchors::default(),
            fidelity: None,
            several: Several::default(),
            references: Vec::new(),
            budget: None,
        }
    }

    /// This sampler, modelling the learning curves at `rungs` where given
    /// ([`fidelity::settings`]).
    pub(crate) fn with_fidelity(self, rungs: Option<Rungs>) -> Self {
        Self {
            fidelity: rungs.map(Curves::new),
            ..self
        }
    }

    /// The sampler with the reference point of the hypervolume a study of several objectives
    /// gives, per objective (`None`: derived from the trials).
    pub(crate) fn with_reference_point(mut self, references: Vec<Option<f64>>) -> Self {
        self.references = references;
        self
    }

    /// The sampler for a study of `budget` trials in all (`max_trial_count`; `None`: no
    /// limit).
    pub(crate) fn with_budget(self, budget: Option<u64>) -> Self {
        Self { budget, ..self }
    }

    /// The design's point for trial `number`.
    fn design(&self, context: &ProposalContext<'_>) -> Assignment {
        let unit = design_point(context.number, &Encoding::new(context.space), self.seed);
        context.space.from_unit(&unit)
    }

    /// The design's point, where the model could not be built (`error`), with a warning.
    fn fallback(&self, context: &ProposalContext<'_>, error: GpError) -> Assignment {
        tracing::warn!(
            trial = context.number,
            %error,
            "the Gaussian process could not be fitted; proposing a design point instead"
        );
        self.design(context)
    }

    /// The model's proposal for one objective, as unit coordinates, from `history`; `None`
    /// while no trial has a value.
    fn one_objective(
        &mut self,
        context: &ProposalContext<'_>,
        encoding: &Encoding<'_>,
        history: &[Observation],
    ) -> Result<Option<Vec<f64>>, GpError> {
        match TrainingData::new(
            encoding,
            context.goal,
            Warping::of(context.space, self.budget),
            history,
        ) {
            Some(data) => self
                .model_proposal(context, encoding, history, data)
                .map(Some),
            None => Ok(None),
        }
    }

    /// The model's proposal, as unit coordinates, from `history` (the `warm_start` study's
    /// trials, then the study's).
    fn model_proposal(
        &mut self,
        context: &ProposalContext<'_>,
        encoding: &Encoding<'_>,
        history: &[Observation],
        data: TrainingData,
    ) -> Result<Vec<f64>, GpError> {
        let hyper = self
            .anchors
            .hyperparameters(encoding, context.goal, history, &data)
            .ok_or(GpError::NotPositiveDefinite { size: data.x.len() })?;
        tracing::debug!(
            trial = context.number,
            warp_power = data.output.warp().power(),
            "model fitted"
        );
        let gp = Gp::new(data.x, &data.y, &hyper)?;
        let center = encoding.at(&data.incumbents[0]).1;
        let feasibility = Feasibility::fitted(encoding, context.constraints, history, &center)?;
        // The incumbent: the best posterior mean at the trials, the feasible ones where the
        // study has constraints; none while no trial is feasible.
        let best = match context.constraints.is_empty() {
            true => Some(gp.best_mean()),
            false => gp
                .predict_many(&data.feasible_incumbents)
                .into_iter()
                .map(|(mean, _)| mean)
                .reduce(f64::max),
        };
        let dimension = context.space.dimension();
        let design = initial_design_size(dimension, self.budget) as usize;
        // The trust region counts batches of as many trials as the study runs at once, by
        // trial number, not by the count of trials running now: that count depends on which
        // trials happened to have ended when the controller proposed. While no trial is
        // feasible the search for a feasible one spans the space, as it always does with many
        // parameters.
        let incumbent = &data.incumbents[0];
        let local = best.is_some() && !searches_whole_cube(dimension);
        let region = match local {
            true => {
                let batch = context.parallel.max(1);
                let side = trust::side(&data.values, design, dimension, self.budget, batch);
                Region::around(encoding, incumbent, side)
            }
            false => Region::whole(incumbent.len()),
        };
        let mut rng = stream(self.seed, context.number);
        let sobol_seed = self.seed ^ context.number.wrapping_mul(0xD134_2543_DE82_EF95);
        let running = context.running.iter().map(|r| encoding.encode(r)).collect();
        let acquisition = Acquisition::new(&gp, best, running, &mut rng, feasibility.as_ref())?;
        // Only a region around a feasible incumbent is widened: otherwise the search already
        // spans the cube.
        let widen = local && !context.constraints.is_empty();
        Ok(propose(
            encoding,
            &acquisition,
            &data.incumbents,
            &region,
            widen,
            &mut rng,
            sobol_seed,
        ))
    }
}

impl Sampler for BayesSampler {
    fn propose(
        &mut self,
        context: &ProposalContext<'_>,
    ) -> Result<Option<Assignment>, SamplerError> {
        let encoding = Encoding::new(context.space);
        // A warm start's trials come first and stand in for the design.
        let combined: Vec<Observation>;
        let history = match context.prior {
            [] => context.history,
            prior => {
                combined = prior.iter().chain(context.history).cloned().collect();
                &combined
            }
        };
        let known = context.number + context.prior.len() as u64;
        if known < initial_design_size(context.space.dimension(), self.budget) {
            return Ok(Some(self.design(context)));
        }
        // Under ASHA, the model of the learning curves (one objective: early stopping is refused
        // with several); else, with several objectives, the hypervolume's improvement for up to
        // MAX_EXACT, a scalarisation drawn afresh as one objective past that.
        let proposal = match (&mut self.fidelity, context.goals.len()) {
            (Some(curves), _) => curves.proposal(self.seed, context, history),
            (None, 0 | 1) => self.one_objective(context, &encoding, history),
            (None, n) if n <= MAX_EXACT => {
                self.several
                    .proposal(self.seed, context, &encoding, history, &self.references)
            }
            (None, _) => {
                let scalar = scalarised(history, context.goals, self.seed, context.number);
                let one = ProposalContext {
                    goal: Goal::Minimize,
                    goals: &[Goal::Minimize],
                    ..*context
                };
                self.one_objective(&one, &encoding, &scalar)
            }
        };
        Ok(Some(match proposal {
            Ok(Some(unit)) => context.space.from_unit(&unit),
            Ok(None) => self.design(context),
            Err(error) => self.fallback(context, error),
        }))
    }
}

#[cfg(test)]
mod tests;
