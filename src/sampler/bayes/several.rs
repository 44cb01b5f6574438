//! Proposals for a study of several objectives. Each objective gets a model of its own, fitted
//! as one objective's is but never warped ([`TrainingData`], [`Anchors`]). With two or three
//! objectives the search maximises the expected hypervolume improvement
//! ([`HypervolumeImprovement`]) over the front of the models' posterior means at the finished
//! feasible trials, above a reference point in the models' units (the study's mapped there
//! where given, else the nadir of that front, less the trials on it by a lead within their
//! model's noise, widened by a tenth of the means' range, that range taken where each
//! objective's means are warped towards symmetry: [`reference_point`]),
//! weighted by the probability of feasibility where the study has constraints. With four,
//! whose boxes grow as the cube of the front, each proposal draws fresh weights and minimises
//! their augmented Chebyshev scalarisation of the objectives as one objective (ParEGO;
//! Knowles, 2006). Neither has a trust region: the front spans the space, and a box around one
//! of its trials would search one part of it.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::acquisition::Acquisition;
use super::anchor::Anchors;
use super::data::{INCUMBENTS, TrainingData, Warping};
use super::encoding::Encoding;
use super::feasibility::Feasibility;
use super::hypervolume_improvement::{FANTASIES, HypervolumeImprovement};
use super::search::propose;
use super::trust::Region;
use crate::sampler::{Observation, ProposalContext};
use crate::study::{Goal, pareto};
use hptune_gp::{Gp, GpError, YeoJohnson, stream};

/// The most objectives whose hypervolume improvement is computed; past it, scalarisations.
pub(super) const MAX_EXACT: usize = 3;
/// The weight of the sum beside the largest weighted objective in a scalarisation (ParEGO's
/// `ρ`): it breaks the ties of the largest among trials that differ on the other objectives.
const AUGMENTATION: f64 = 0.05;
/// Salts the seed of the scalarisations' weights, a stream apart from the proposal's.
const WEIGHT_STREAM: u64 = 0x5CA1_A815_A710_0F00;

/// The models of the objectives of a study of several, and their fits kept between
/// proposals.
#[derive(Debug, Clone, Default)]
pub(super) struct Several {
    anchors: Vec<Anchors>,
}

/// The history as one objective sees it: every trial with `values[objective]` as its value.
fn of_objective(history: &[Observation], objective: usize) -> Vec<Observation> {
    history
        .iter()
        .map(|o| Observation {
            value: o.values.get(objective).copied(),
            ..o.clone()
        })
        .collect()
}

/// The finished trials whose every objective has a finite value and that kept the
/// constraints: those a front is made of.
fn results(history: &[Observation], objectives: usize) -> Vec<&Observation> {
    history
        .iter()
        .filter(|o| {
            o.feasible && o.values.len() == objectives && o.values.iter().all(|v| v.is_finite())
        })
        .collect()
}

/// The sampler's reference point in the models' units, from `means` (the posterior means at
/// the finished feasible trials, maximised, a value per objective), `given` (a reference
/// value per objective where the study gives one) and `noise` (each model's, the tolerance of
/// [`pareto::reference_near_front`], taken as it is in the warped units). The rule runs where
/// each objective's values are warped towards symmetry (`symmetric`: Yeo-Johnson, fitted as
/// one objective's model is), so that its margin, a tenth of the values' range, is not set by
/// a few trials far worse than the rest; the point is mapped back, an objective whose warp
/// cannot reach it (bounded on one side) taking the rule's point in the models' own units.
fn reference_point(
    means: &[Vec<f64>],
    symmetric: &[YeoJohnson],
    given: &[Option<f64>],
    noise: &[f64],
) -> Option<Vec<f64>> {
    let maximised = vec![Goal::Maximize; symmetric.len()];
    let warped: Vec<Vec<f64>> = means
        .iter()
        .map(|m| m.iter().zip(symmetric).map(|(v, w)| w.apply(*v)).collect())
        .collect();
    let warped_given: Vec<Option<f64>> = given
        .iter()
        .zip(symmetric)
        .map(|(g, w)| g.map(|g| w.apply(g)))
        .collect();
    let at: Vec<&[f64]> = warped.iter().map(Vec::as_slice).collect();
    let reference = pareto::reference_near_front(&at, &maximised, &warped_given, noise)?;
    let mapped: Vec<f64> = reference
        .iter()
        .zip(symmetric)
        .map(|(z, w)| w.inverse(*z))
        .collect();
    if mapped.iter().all(|r| r.is_finite()) {
        return Some(mapped);
    }
    let at: Vec<&[f64]> = means.iter().map(Vec::as_slice).collect();
    let plain = pareto::reference_near_front(&at, &maximised, given, noise)?;
    Some(
        mapped
            .into_iter()
            .zip(plain)
            .map(|(r, plain)| if r.is_finite() { r } else { plain })
            .collect(),
    )
}

impl Several {
    /// The unit point to propose from `history` (the `warm_start` study's trials, then the
    /// study's), with the study's `references` (a given reference point per objective);
    /// `None` while some objective has no value yet.
    pub(super) fn proposal(
        &mut self,
        seed: u64,
        context: &ProposalContext<'_>,
        encoding: &Encoding<'_>,
        history: &[Observation],
        references: &[Option<f64>],
    ) -> Result<Option<Vec<f64>>, GpError> {
        let goals = context.goals;
        self.anchors.resize_with(goals.len(), Anchors::default);
        let mut models = Vec::with_capacity(goals.len());
        let mut maps = Vec::with_capacity(goals.len());
        let mut noise = Vec::with_capacity(goals.len());
        let mut symmetric = Vec::with_capacity(goals.len());
        for (j, &goal) in goals.iter().enumerate() {
            let own = of_objective(history, j);
            let Some(data) = TrainingData::new(encoding, goal, Warping::Never, &own) else {
                return Ok(None);
            };
            let hyper = self.anchors[j]
                .hyperparameters(encoding, goal, &own, &data)
                .ok_or(GpError::NotPositiveDefinite { size: data.x.len() })?;
            maps.push(data.output);
            noise.push(hyper.noise_variance.sqrt());
            symmetric.push(YeoJohnson::fitted(&data.y));
            models.push(Gp::new(data.x, &data.y, &hyper)?);
        }
        let results = results(history, goals.len());
        let points: Vec<Vec<f64>> = results.iter().map(|o| encoding.encode(&o.params)).collect();
        let mut rng = stream(seed, context.number);
        let sobol_seed = seed ^ context.number.wrapping_mul(0xD134_2543_DE82_EF95);
        // The front of the posterior means, maximised in every model's units.
        let means: Vec<Vec<f64>> = {
            let by_model: Vec<Vec<(f64, f64)>> =
                models.iter().map(|m| m.predict_many(&points)).collect();
            (0..points.len())
                .map(|i| by_model.iter().map(|p| p[i].0).collect())
                .collect()
        };
        let maximised = vec![Goal::Maximize; goals.len()];
        let front = pareto::front(&means, &maximised, |m| Some(m.as_slice()));
        // Incumbents (where the local candidates start): trials of the front, drawn.
        let mut incumbents: Vec<Vec<f64>> = front
            .iter()
            .map(|&i| encoding.unit(&results[i].params))
            .collect();
        for k in (1..incumbents.len()).rev() {
            incumbents.swap(k, rng.random_range(0..=k));
        }
        incumbents.truncate(INCUMBENTS);
        // The constraints' models keep the trials nearest a trial of the front, or while no
        // trial is feasible, the first.
        let center = match front.first() {
            Some(&i) => points[i].clone(),
            None => encoding.encode(&history[0].params),
        };
        let feasibility = Feasibility::fitted(encoding, context.constraints, history, &center)?;
        let running = context.running.iter().map(|r| encoding.encode(r)).collect();
        // The reference point in the models' units: a given one mapped there, else the nadir of
        // the front of the means widened by a tenth of the means' range (warped towards
        // symmetry: reference_point), so that the front the improvement is measured from and
        // its corner come from the same values; a trial on that front by a lead within its
        // model's noise does not set the nadir.
        let given: Vec<Option<f64>> = references
            .iter()
            .zip(&maps)
            .map(|(r, map)| r.map(|r| map.model_value(r)))
            .collect();
        let reference = reference_point(&means, &symmetric, &given, &noise);
        let acquisition = match reference {
            // While no trial is feasible there is no front to improve: feasibility alone.
            Some(reference) if !front.is_empty() => {
                let front = front.iter().map(|&i| means[i].clone()).collect();
                let improvement = HypervolumeImprovement::new(
                    &models, front, &reference, running, FANTASIES, &mut rng,
                )?;
                Acquisition::of(improvement, feasibility.as_ref())
            }
            _ => Acquisition::new(&models[0], None, running, &mut rng, feasibility.as_ref())?,
        };
        let whole = Region::whole(context.space.dimension());
        Ok(Some(propose(
            encoding,
            &acquisition,
            &incumbents,
            &whole,
            false,
            &mut rng,
            sobol_seed,
        )))
    }
}

/// `history` with each trial's value the augmented Chebyshev scalarisation of its objectives
/// (`max_j w_j f_j + ρ Σ_j w_j f_j`, each objective minimised and scaled to [0, 1] over the
/// trials' values, `ρ` [`AUGMENTATION`]) under weights drawn uniformly from the simplex for
/// trial `number`; smaller is better. A trial without every objective's value has none.
pub(super) fn scalarised(
    history: &[Observation],
    goals: &[Goal],
    seed: u64,
    number: u64,
) -> Vec<Observation> {
    let mut rng: ChaCha8Rng = stream(seed ^ WEIGHT_STREAM, number);
    let raw: Vec<f64> = goals
        .iter()
        .map(|_| -(1.0 - rng.random::<f64>()).ln())
        .collect();
    let total: f64 = raw.iter().sum();
    let weights: Vec<f64> = raw.iter().map(|w| w / total).collect();
    let minimised = |o: &Observation| -> Option<Vec<f64>> {
        let all = o.values.len() == goals.len() && o.values.iter().all(|v| v.is_finite());
        all.then(|| {
            o.values
                .iter()
                .zip(goals)
                .map(|(v, g)| match g {
                    Goal::Minimize => *v,
                    Goal::Maximize => -v,
                })
                .collect()
        })
    };
    let points: Vec<Option<Vec<f64>>> = history.iter().map(minimised).collect();
    let bounds: Vec<(f64, f64)> = (0..goals.len())
        .map(|j| {
            let column = points.iter().flatten().map(|p| p[j]);
            let low = column.clone().fold(f64::INFINITY, f64::min);
            let high = column.fold(f64::NEG_INFINITY, f64::max);
            (low, (high - low).max(f64::MIN_POSITIVE))
        })
        .collect();
    history
        .iter()
        .zip(&points)
        .map(|(o, point)| {
            let value = point.as_ref().map(|p| {
                let scaled = p
                    .iter()
                    .zip(&bounds)
                    .zip(&weights)
                    .map(|((v, (low, range)), w)| w * (v - low) / range);
                let (largest, sum) =
                    scaled.fold((f64::NEG_INFINITY, 0.0), |(m, s), v| (m.max(v), s + v));
                largest + AUGMENTATION * sum
            });
            Observation { value, ..o.clone() }
        })
        .collect()
}

#[cfg(test)]
mod tests;
