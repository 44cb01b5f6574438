//! PED-ANOVA (Watanabe, Bansal and Hutter, "PED-ANOVA: Efficiently Quantifying
//! Hyperparameter Importance in Arbitrary Subspaces", IJCAI 2023), computed as Optuna's
//! `PedAnovaImportanceEvaluator` (Optuna 5) computes it, so that the two rank a study's
//! parameters alike (`bench/importance.py` checks it).
//!
//! A parameter matters when the values it takes in the best trials (the top 10%) are
//! distributed differently from the values it takes in all trials. Each distribution is a
//! Parzen estimator over a grid of the parameter's values (50 points of its scale, or each
//! integer or choice), with Scott's bandwidth and a wide prior kernel; the importance is the
//! Pearson divergence of the two densities, `Σ p_all(x) (p_top(x) / p_all(x) - 1)²`, times
//! the squared share of top trials. The goal's direction decides which trials are the top
//! ones. A conditional parameter is judged as conditional PED-ANOVA (Optuna's, KDD 2026)
//! judges it: on the trials where it is active, weighted by how many of the top and of all
//! trials those are; the trials where it is inactive add nothing.

use crate::study::Goal;
use crate::study::space::{Assignment, Domain, ParamValue, Parameter, Scale};

/// The share of trials that are the top ones.
const TOP_QUANTILE: f64 = 0.1;
/// The fewest trials a parameter must be active in to be judged.
const MIN_ACTIVE_TRIALS: usize = 2;
/// Grid points of a continuous parameter.
const GRID_STEPS: usize = 50;
/// The prior kernel's weight, against one per trial.
const PRIOR_WEIGHT: f64 = 1.0;
/// Added to each density so that the ratio is defined everywhere.
const EPSILON: f64 = 1e-12;

/// How much one parameter matters.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Importance {
    /// The parameter's id.
    pub parameter: String,
    /// Its PED-ANOVA importance (0: none; not normalised).
    pub value: f64,
}

/// The importance of each parameter of `parameters` over `trials` (each finished trial's
/// parameters and objective value), most important first.
pub(crate) fn ped_anova(
    parameters: &[Parameter],
    goal: Goal,
    trials: &[(&Assignment, f64)],
) -> Vec<Importance> {
    let mut importances: Vec<Importance> = parameters
        .iter()
        .map(|p| Importance {
            parameter: p.id.clone(),
            value: importance_of(p, goal, trials),
        })
        .collect();
    importances.sort_by(|a, b| b.value.total_cmp(&a.value));
    importances
}

/// The importance of one parameter.
fn importance_of(parameter: &Parameter, goal: Goal, trials: &[(&Assignment, f64)]) -> f64 {
    let Some(grid) = Grid::of(&parameter.domain) else {
        return 0.0;
    };
    // Each trial's cell (`None` where the parameter is inactive) and loss (lower is better).
    let judged: Vec<(Option<usize>, f64)> = trials
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(params, v)| {
            let cell = params.get(&parameter.id).and_then(|value| grid.cell(value));
            let loss = match goal {
                Goal::Minimize => *v,
                Goal::Maximize => -*v,
            };
            (cell, loss)
        })
        .collect();
    if judged.len() <= 1 {
        return 0.0;
    }
    let losses: Vec<f64> = judged.iter().map(|(_, loss)| *loss).collect();
    let cutoff = top_cutoff(&losses);
    let mut all = vec![0.0; grid.steps];
    let mut top = vec![0.0; grid.steps];
    for (cell, loss) in &judged {
        if let Some(cell) = cell {
            all[*cell] += 1.0;
            if *loss <= cutoff {
                top[*cell] += 1.0;
            }
        }
    }
    let (active, top_active): (f64, f64) = (all.iter().sum(), top.iter().sum());
    if active < MIN_ACTIVE_TRIALS as f64 || top_active == 0.0 {
        return 0.0;
    }
    let divergence = pearson_divergence(&grid.density(&top), &grid.density(&all));
    // (top / all)² · (top_active / top)² / (active / all): the squared share of top trials,
    // for a parameter active in the active trials' share of the study.
    divergence * top_active * top_active / (judged.len() as f64 * active)
}

/// The loss at or below which a trial is a top one: the `TOP_QUANTILE` quantile of the
/// losses (the inverted empirical distribution: the `⌈0.1 n⌉`-th lowest).
fn top_cutoff(losses: &[f64]) -> f64 {
    let mut sorted = losses.to_vec();
    sorted.sort_by(f64::total_cmp);
    let index = ((TOP_QUANTILE * sorted.len() as f64).ceil() as usize).saturating_sub(1);
    sorted[index]
}

/// `Σ q(x) (p(x) / q(x) - 1)²` over the grid, each density shifted by [`EPSILON`].
fn pearson_divergence(p: &[f64], q: &[f64]) -> f64 {
    p.iter()
        .zip(q)
        .map(|(p, q)| {
            let (p, q) = (p + EPSILON, q + EPSILON);
            q * (p / q - 1.0).powi(2)
        })
        .sum()
}

/// The points a parameter's values are counted on.
struct Grid {
    steps: usize,
    kind: GridKind,
}

enum GridKind {
    /// Numbers on a scale between two ends: a value's place is its unit coordinate.
    Scaled { scale: Scale, low: f64, high: f64 },
    /// An ordered list of numbers: a value's place is its index over the last index.
    Listed(Vec<f64>),
    /// Unordered: one cell per choice.
    Choices(Vec<String>),
}

impl Grid {
    /// The grid of a domain; `None` for a domain of a single value, which cannot matter.
    fn of(domain: &Domain) -> Option<Self> {
        let (steps, kind) = match domain.clone() {
            Domain::Double {
                min, max, scale, ..
            } => (
                GRID_STEPS,
                GridKind::Scaled {
                    scale,
                    low: min,
                    high: max,
                },
            ),
            Domain::Integer {
                min, max, scale, ..
            } => {
                let count = (max - min + 1) as f64;
                let steps = match scale {
                    Scale::Linear => count,
                    _ => count.log2().ceil() + 1.0,
                };
                (
                    (steps as usize).min(GRID_STEPS),
                    GridKind::Scaled {
                        scale,
                        low: min as f64,
                        high: max as f64,
                    },
                )
            }
            Domain::Discrete { values, .. } => {
                (values.len().min(GRID_STEPS), GridKind::Listed(values))
            }
            Domain::Categorical { values } => (values.len(), GridKind::Choices(values)),
        };
        (steps > 1).then_some(Grid { steps, kind })
    }

    /// The cell of `value`: for an ordered grid, the first point at or above
    /// `place - step / 2`.
    fn cell(&self, value: &ParamValue) -> Option<usize> {
        let last = (self.steps - 1) as f64;
        let place = match (&self.kind, value) {
            (GridKind::Choices(choices), ParamValue::Str(s)) => {
                return choices.iter().position(|c| c == s);
            }
            (GridKind::Choices(_), _) | (_, ParamValue::Str(_)) => return None,
            (GridKind::Scaled { scale, low, high }, v) => scale.to_unit(v.as_f64()?, *low, *high),
            (GridKind::Listed(values), v) => {
                let x = v.as_f64()?;
                let index = values.iter().position(|w| *w == x)?;
                index as f64 / (values.len() - 1) as f64
            }
        };
        Some((place * last - 0.5).ceil().clamp(0.0, last) as usize)
    }

    /// The Parzen estimator's density over the grid from the `counts` of each cell.
    fn density(&self, counts: &[f64]) -> Vec<f64> {
        match self.kind {
            GridKind::Scaled { .. } | GridKind::Listed(_) => ordered_density(counts),
            GridKind::Choices(_) => choice_density(counts),
        }
    }
}

/// One normal kernel per occupied cell (weighted by its count) with Scott's bandwidth, and a
/// prior kernel as wide as the grid at its centre, each truncated to the grid and
/// discretised on its cells.
fn ordered_density(counts: &[f64]) -> Vec<f64> {
    let steps = counts.len();
    let n: f64 = counts.iter().sum();
    let occupied: Vec<(f64, f64)> = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0.0)
        .map(|(i, c)| (i as f64, *c))
        .collect();
    let mean = occupied.iter().map(|(x, c)| x * c).sum::<f64>() / n;
    let spread = occupied
        .iter()
        .map(|(x, c)| (x - mean).powi(2) * c)
        .sum::<f64>();
    let std = (spread / (n - 1.0).max(1.0)).sqrt();
    let cumulative: Vec<f64> = occupied
        .iter()
        .scan(0.0, |sum, (_, c)| {
            *sum += c;
            Some(*sum)
        })
        .collect();
    let quarter = (n as u64 / 4) as f64;
    let three_quarters = (n as u64 * 3 / 4) as f64;
    let q25 = cumulative.partition_point(|c| *c < quarter);
    let q75 = cumulative.partition_point(|c| *c <= three_quarters);
    let last = occupied.len() - 1;
    let iqr = occupied[q75.min(last)].0 - occupied[q25.min(last)].0;
    let scott = 1.059 * (iqr / 1.34).min(std) * n.powf(-0.2);
    let sigma = scott.max(0.5 / 1.64);
    let high = (steps - 1) as f64;
    let mut kernels: Vec<(f64, f64, f64)> = occupied.iter().map(|(x, c)| (*x, sigma, *c)).collect();
    kernels.push((0.5 * high, high + 1.0, PRIOR_WEIGHT));
    let total: f64 = kernels.iter().map(|k| k.2).sum();
    (0..steps)
        .map(|cell| {
            let x = cell as f64;
            kernels
                .iter()
                .map(|(mu, sigma, weight)| {
                    let mass = gauss_mass((x - 0.5 - mu) / sigma, (x + 0.5 - mu) / sigma);
                    let accepted = gauss_mass((-0.5 - mu) / sigma, (high + 0.5 - mu) / sigma);
                    weight / total * mass / accepted
                })
                .sum()
        })
        .collect()
}

/// One kernel per chosen value (weighted by its count) that puts most of its mass on that
/// value and spreads the prior's share over all, and a uniform prior kernel.
fn choice_density(counts: &[f64]) -> Vec<f64> {
    let k = counts.len() as f64;
    let chosen = counts.iter().filter(|c| **c > 0.0).count() as f64;
    let n: f64 = counts.iter().sum();
    let fill = PRIOR_WEIGHT / (chosen + 1.0);
    let row_total = 1.0 + k * fill;
    let total = n + PRIOR_WEIGHT;
    counts
        .iter()
        .map(|c| {
            // Every chosen value's kernel gives this value `fill`; its own kernel 1 more.
            let from_kernels = (n * fill + c) / row_total;
            (from_kernels + PRIOR_WEIGHT / k) / total
        })
        .collect()
}

/// The standard normal's mass between `a` and `b`, accurate in both tails.
fn gauss_mass(a: f64, b: f64) -> f64 {
    let cdf = |z: f64| 0.5 * libm::erfc(-z / std::f64::consts::SQRT_2);
    if a > 0.0 {
        cdf(-a) - cdf(-b)
    } else {
        cdf(b) - cdf(a)
    }
}

#[cfg(test)]
mod tests;
