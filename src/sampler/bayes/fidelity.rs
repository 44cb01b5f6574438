//! Multi-fidelity Bayesian optimisation: where ASHA stops trials on their learning curves, a
//! Gaussian process over (configuration, resource) fitted to every intermediate value the
//! trials reported, and each new configuration where the expected improvement *at the largest
//! resource* is highest.
//!
//! The resource is the worker's `step`, one more input of the model: its unit coordinate is
//! `ln(step) / ln(max_resource)`, the coordinate of a log-scale parameter over
//! `[1, max_resource]`, so a curve's early steps are as far apart in the model as its late
//! ones are close. Each trial, finished, stopped or running, enters at the rungs of ASHA it
//! reached (`min_resource · reduction_factor^k`) and at its last step, with its latest value at
//! or before each; a succeeded trial's final value stands at its last step (at
//! `max_resource` when it reported no step), a trial that failed or was stopped before any
//! step at `max_resource` with the worst value. The search of [`propose`] then runs over the
//! space with the resource pinned at `max_resource`; the incumbent is the best posterior mean
//! at `max_resource` over the configurations tried, and the trials running are drawn there.
//! The hyperparameters are refitted from the fit at the last checkpoint of the history
//! ([`Anchors`]), fitted to the finished trials' curves alone. See `docs/bayes.md`.

use std::collections::{BTreeMap, BTreeSet};

use super::acquisition::Acquisition;
use super::anchor::Anchors;
use super::data::{INCUMBENTS, MAX_MODEL_POINTS, OutputMap, goal_sign, nearest};
use super::design::warps_only_outliers;
use super::encoding::Encoding;
use super::search::propose;
use super::trust::Region;
use crate::sampler::{Observation, ProposalContext, TrialCurve};
use crate::study::space::{Assignment, Domain, ParamValue, Parameter, Scale, Space};
use crate::study::stopping::{CurveModel, StoppingRule, rung_steps};
use crate::study::{Goal, Study};
use hptune_gp::{Gp, GpError, has_outliers, stream};

/// The id of the resource in the model's space: not a valid parameter id, so it cannot
/// collide with one.
const RESOURCE: &str = "(resource)";

/// The most points the model is fitted on: past it, the points nearest the best one (in
/// features, the resource's included) are kept. Several per trial, so twice the one-fidelity
/// model's bound.
pub(crate) const MAX_FIDELITY_POINTS: usize = 2 * MAX_MODEL_POINTS;

/// ASHA's rungs as the model reads curves at them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rungs {
    /// The step of the first rung.
    pub min_resource: i64,
    /// The factor between rungs.
    pub reduction_factor: f64,
    /// The step where curves end; the largest step reported so far when `None`.
    pub max_resource: Option<i64>,
}

impl Rungs {
    /// The rungs' steps up to `last`, then `last` itself.
    fn steps_upto(&self, last: i64) -> Vec<i64> {
        let mut steps = rung_steps(self.min_resource, self.reduction_factor, last);
        if steps.last() != Some(&last) {
            steps.push(last);
        }
        steps.dedup();
        steps
    }
}

/// The rungs the Bayesian sampler of `study` models curves at: where it stops trials by ASHA,
/// has no constraints (their model is of final values) and leaves `fidelity` on.
pub(crate) fn settings(study: &Study) -> Option<Rungs> {
    match study.early_stopping? {
        StoppingRule::Asha {
            min_resource,
            reduction_factor,
            max_resource,
            curves: CurveModel::Fidelity,
        } if study.constraints.is_empty() => Some(Rungs {
            min_resource,
            reduction_factor,
            max_resource,
        }),
        _ => None,
    }
}

/// One value of a learning curve: a trial's parameters at a resource.
#[derive(Debug, Clone, PartialEq)]
struct Point {
    params: Assignment,
    step: i64,
    /// Larger is better; `None` for a trial that failed with nothing reported.
    value: Option<f64>,
}

/// The points the model is fitted on: each curve at its rungs and last step, a succeeded
/// trial's final value at its last step, and the trials of `history` without a curve at
/// `top`, the largest resource.
fn points(
    rungs: &Rungs,
    goal: Goal,
    history: &[Observation],
    curves: &[TrialCurve],
    top: i64,
) -> Vec<Point> {
    let sign = goal_sign(goal);
    let finals: BTreeMap<u64, Option<f64>> = history.iter().map(|o| (o.number, o.value)).collect();
    let mut points = Vec::new();
    for curve in curves.iter().filter(|c| !c.points.is_empty()) {
        let last = curve.points[curve.points.len() - 1].0;
        for step in rungs.steps_upto(last) {
            let at = curve.points.iter().take_while(|(s, _)| *s <= step).last();
            let reported = at.map(|p| p.1);
            let value = match finals.get(&curve.number) {
                Some(Some(final_value)) if step == last => Some(*final_value),
                _ => reported,
            };
            points.push(Point {
                params: curve.params.clone(),
                step: step.max(1),
                value: value.map(|v| sign * v),
            });
        }
    }
    let with_curve: Vec<u64> = curves
        .iter()
        .filter(|c| !c.points.is_empty())
        .map(|c| c.number)
        .collect();
    for observation in history.iter().filter(|o| !with_curve.contains(&o.number)) {
        points.push(Point {
            params: observation.params.clone(),
            step: top,
            value: observation.value.map(|v| sign * v),
        });
    }
    points.retain(|p| p.value.is_none_or(f64::is_finite));
    points
}

/// The model's space: the study's, then the resource, log-scaled over `[1, top]`.
fn with_resource(space: &Space, top: i64) -> Space {
    let mut parameters = space.parameters().to_vec();
    parameters.push(Parameter {
        id: RESOURCE.into(),
        domain: Domain::Double {
            min: 1.0,
            max: top as f64,
            scale: Scale::Log,
            grid_points: None,
        },
        condition: None,
    });
    Space::new(parameters)
}

/// `params` at resource `step`.
fn at_step(params: &Assignment, step: i64) -> Assignment {
    let mut at = params.clone();
    at.insert(RESOURCE.into(), ParamValue::Float(step as f64));
    at
}

/// The model's training data: features and standardised values of the points (at most
/// [`MAX_FIDELITY_POINTS`], those nearest the best point moved to the top resource), and the
/// configurations tried, each once, in the order of their first point.
struct CurveData {
    x: Vec<Vec<f64>>,
    y: Vec<f64>,
    configurations: Vec<Assignment>,
}

impl CurveData {
    /// The data of the trials of `history` and the curves in `curves` for a proposal in
    /// `context`, encoded by `encoding` (the resource's coordinate over `[1, top]`); `None`
    /// while no point has a value.
    fn new(
        rungs: &Rungs,
        context: &ProposalContext<'_>,
        encoding: &Encoding<'_>,
        history: &[Observation],
        curves: &[TrialCurve],
        top: i64,
    ) -> Option<Self> {
        let points = points(rungs, context.goal, history, curves, top);
        let worst = points.iter().filter_map(|p| p.value).reduce(f64::min)?;
        let raw: Vec<f64> = points.iter().map(|p| p.value.unwrap_or(worst)).collect();
        let may_warp = !warps_only_outliers(context.space)
            || has_outliers(points.iter().filter_map(|p| p.value).collect());
        let output = OutputMap::fitted(context.goal, &raw, may_warp);
        let y: Vec<f64> = raw.iter().map(|&v| output.warped(v)).collect();
        let x: Vec<Vec<f64>> = points
            .iter()
            .map(|p| encoding.encode(&at_step(&p.params, p.step)))
            .collect();
        let mut configurations: Vec<Assignment> = Vec::new();
        for point in &points {
            if !configurations.contains(&point.params) {
                configurations.push(point.params.clone());
            }
        }
        let best_point = (0..points.len())
            .max_by(|&a, &b| y[a].total_cmp(&y[b]).then(b.cmp(&a)))
            .expect("a point has a value");
        let center = encoding.encode(&at_step(&points[best_point].params, top));
        let (x, y) = nearest(x, y, &center, MAX_FIDELITY_POINTS);
        Some(Self {
            x,
            y,
            configurations,
        })
    }
}

/// The model of a study's learning curves: ASHA's rungs, and the hyperparameters of recent
/// fits, which the next proposals start from.
#[derive(Debug, Clone)]
pub(crate) struct Curves {
    rungs: Rungs,
    /// Fitted to the finished trials' points at checkpoints of their count, as the model of
    /// final values is ([`Anchors`]).
    anchors: Anchors,
}

impl Curves {
    /// The model of the curves read at `rungs`.
    pub(super) fn new(rungs: Rungs) -> Self {
        Self {
            rungs,
            anchors: Anchors::default(),
        }
    }

    /// The unit point (one coordinate per parameter of the study's space) the model proposes
    /// for `context` (its `prior` is in `history`, before the study's trials); `None` while no
    /// trial has a value.
    pub(super) fn proposal(
        &mut self,
        seed: u64,
        context: &ProposalContext<'_>,
        history: &[Observation],
    ) -> Result<Option<Vec<f64>>, GpError> {
        let rungs = &self.rungs;
        let reported = context
            .curves
            .iter()
            .filter_map(|c| c.points.last())
            .map(|p| p.0);
        let top = rungs
            .max_resource
            .or_else(|| reported.max())
            .unwrap_or(1)
            .max(rungs.min_resource)
            .max(2);
        let space = with_resource(context.space, top);
        let encoding = Encoding::new(&space);
        let Some(data) = CurveData::new(rungs, context, &encoding, history, context.curves, top)
        else {
            return Ok(None);
        };
        // The anchors are fitted to the finished trials' curves alone, which do not change:
        // the fit then depends on the history and its curves, as a resumed study reads them.
        let data_of = |earlier: &[Observation]| {
            let numbers: BTreeSet<u64> = earlier.iter().map(|o| o.number).collect();
            let theirs: Vec<TrialCurve> = context
                .curves
                .iter()
                .filter(|c| numbers.contains(&c.number))
                .cloned()
                .collect();
            CurveData::new(rungs, context, &encoding, earlier, &theirs, top).map(|d| (d.x, d.y))
        };
        let hyper = self
            .anchors
            .fitted(
                &encoding.length_sharing(),
                history,
                (&data.x, &data.y),
                data_of,
            )
            .ok_or(GpError::NotPositiveDefinite { size: data.x.len() })?;
        let gp = Gp::new(data.x, &data.y, &hyper)?;
        // The incumbents: the configurations whose posterior mean at the top is best.
        let at_top: Vec<Vec<f64>> = data
            .configurations
            .iter()
            .map(|c| encoding.encode(&at_step(c, top)))
            .collect();
        let means: Vec<f64> = gp.predict_many(&at_top).into_iter().map(|p| p.0).collect();
        let mut ranked: Vec<usize> = (0..data.configurations.len()).collect();
        ranked.sort_by(|&a, &b| means[b].total_cmp(&means[a]).then(a.cmp(&b)));
        let incumbents: Vec<Vec<f64>> = ranked
            .iter()
            .take(INCUMBENTS)
            .map(|&i| encoding.unit(&at_step(&data.configurations[i], top)))
            .collect();
        let best = means[ranked[0]];
        let running = context
            .running
            .iter()
            .map(|r| encoding.encode(&at_step(r, top)))
            .collect();
        let mut rng = stream(seed, context.number);
        let sobol_seed = seed ^ context.number.wrapping_mul(0xD134_2543_DE82_EF95);
        let acquisition = Acquisition::new(&gp, Some(best), running, &mut rng, None)?;
        // The whole space of configurations, at the top resource.
        let mut region = Region::whole(space.dimension());
        let resource = space.dimension() - 1;
        region.lower[resource] = 1.0;
        let unit = propose(
            &encoding,
            &acquisition,
            &incumbents,
            &region,
            false,
            &mut rng,
            sobol_seed,
        );
        Ok(Some(unit[..resource].to_vec()))
    }
}

#[cfg(test)]
mod tests;
