//! The log of the expected hypervolume improvement (LogEHVI) of a point whose objectives
//! have independent Gaussian posteriors, exact, in closed form (Emmerich et al., 2006; Yang
//! et al., 2019; the log form of Ament et al., 2023). Every objective is maximised.
//!
//! The region a new value `y` can add to the hypervolume is the part of `[r, ∞)` (`r` the
//! reference point) that no known point dominates. [`Boxes`] splits it into disjoint boxes
//! `[l, u)` (`u` may be infinite), so the improvement is `Σ_k Π_j (min(y_j, u_kj) - l_kj)⁺`
//! and, the objectives being independent, its expectation is `Σ_k Π_j (ψ_j(l_kj) - ψ_j(u_kj))`
//! with `ψ(a) = E[(y - a)⁺] = σ h((μ - a)/σ)`, the expected improvement over `a`. Each factor
//! is taken in log space from `log ψ` (finite far in the tail, [`super::log_ei`]), so the
//! acquisition neither underflows nor loses its gradient far from the front. With one
//! objective there is one box, `[max, ∞)`, and LogEHVI is log EI.

use super::log_ei::log_h;
use super::model::Prediction;

/// One objective's side of a box, by index into [`Boxes::bounds`]: its lower bound, and its
/// upper bound (`None`: unbounded).
type Band = (usize, Option<usize>);

/// Above this sum of the boxes' scaled terms, [`Boxes`] sums them as plain numbers: a term
/// that underflowed is then below 1e-100 of the sum.
const PLAIN_SUM_FLOOR: f64 = 1e-200;

/// The region not dominated by a set of points and above a reference point, split into
/// disjoint boxes.
///
/// Boxes share their sides: with three objectives a front of `n` points makes `O(n²)` boxes
/// from `O(n)` distinct sides per objective. Each side's factor is computed once per
/// evaluation, and the boxes' terms are summed as products of those factors each scaled by
/// its objective's largest, in log space only when that sum underflows (far from the front).
#[derive(Debug, Clone, PartialEq)]
pub struct Boxes {
    /// Per objective, the distinct coordinates the boxes' bounds take.
    bounds: Vec<Vec<f64>>,
    /// Per objective, the distinct sides the boxes take.
    bands: Vec<Vec<Band>>,
    /// The boxes: per objective, an index into that objective's [`Boxes::bands`].
    boxes: Vec<Vec<usize>>,
}

impl Boxes {
    /// The region of `[reference, ∞)` that no point of `points` (each as long as `reference`,
    /// maximised; dominated points and points not above the reference change nothing)
    /// dominates: one box with one objective, `n + 1` with two for `n` points of the front,
    /// `O(n²)` with three. Splits by slabs along the last objective, each slab the region of
    /// one objective fewer left free by the points above it.
    pub fn new(points: &[Vec<f64>], reference: &[f64]) -> Self {
        let above: Vec<&[f64]> = points
            .iter()
            .map(Vec::as_slice)
            .filter(|p| p.iter().zip(reference).all(|(v, r)| v > r))
            .collect();
        let mut raw = Vec::new();
        split(
            &above,
            reference,
            reference.len(),
            &mut Vec::new(),
            &mut raw,
        );
        let objectives = reference.len();
        // Index the bounds, then the sides.
        let bounds: Vec<Vec<f64>> = (0..objectives)
            .map(|j| {
                let mut values: Vec<f64> = raw.iter().map(|b: &Vec<(f64, f64)>| b[j].0).collect();
                values.extend(raw.iter().map(|b| b[j].1).filter(|u| u.is_finite()));
                values.sort_by(f64::total_cmp);
                values.dedup();
                values
            })
            .collect();
        let index = |j: usize, v: f64| bounds[j].partition_point(|&b| b < v);
        let sides: Vec<Vec<Band>> = raw
            .iter()
            .map(|b| {
                b.iter()
                    .enumerate()
                    .map(|(j, &(l, u))| (index(j, l), u.is_finite().then(|| index(j, u))))
                    .collect()
            })
            .collect();
        let bands: Vec<Vec<Band>> = (0..objectives)
            .map(|j| {
                let mut distinct: Vec<Band> = sides.iter().map(|b| b[j]).collect();
                distinct.sort_unstable();
                distinct.dedup();
                distinct
            })
            .collect();
        let boxes = sides
            .iter()
            .map(|b| {
                b.iter()
                    .enumerate()
                    .map(|(j, side)| {
                        bands[j]
                            .binary_search(side)
                            .expect("every side is among the distinct sides")
                    })
                    .collect()
            })
            .collect();
        Self {
            bounds,
            bands,
            boxes,
        }
    }

    /// How many boxes the region is split into.
    pub fn len(&self) -> usize {
        self.boxes.len()
    }

    /// Whether the region is empty (never, above a finite reference point).
    pub fn is_empty(&self) -> bool {
        self.boxes.is_empty()
    }

    /// The hypervolume a point at `y` would add: the volume of the region's part below `y`.
    pub fn improvement(&self, y: &[f64]) -> f64 {
        self.boxes
            .iter()
            .map(|b| {
                b.iter()
                    .enumerate()
                    .map(|(j, &side)| {
                        let (l, u) = self.bands[j][side];
                        let upper = u.map_or(y[j], |u| y[j].min(self.bounds[j][u]));
                        (upper - self.bounds[j][l]).max(0.0)
                    })
                    .product::<f64>()
            })
            .sum()
    }

    /// `log E[improvement]` of a point whose objectives are independent Gaussians of these
    /// `(mean, variance)`.
    pub fn log_expected_improvement(&self, predictions: &[(f64, f64)]) -> f64 {
        let factors: Vec<Vec<Factor>> = predictions
            .iter()
            .enumerate()
            .map(|(j, &(mean, variance))| self.factors(j, mean, variance))
            .collect();
        self.log_sum(&factors, false).0
    }

    /// `log E[improvement]` at predictions of the objectives at a point, with the gradient
    /// by the point's features.
    pub fn log_expected_improvement_with_gradient(
        &self,
        predictions: &[Prediction],
    ) -> (f64, Vec<f64>) {
        let factors: Vec<Vec<Factor>> = predictions
            .iter()
            .enumerate()
            .map(|(j, p)| self.factors(j, p.mean, p.variance))
            .collect();
        let (value, shares) = self.log_sum(&factors, true);
        let features = predictions.first().map_or(0, |p| p.mean_gradient.len());
        let mut gradient = vec![0.0; features];
        for ((factors, shares), p) in factors.iter().zip(&shares).zip(predictions) {
            // d log Σ = Σ_k share_k Σ_j d log factor_kj, gathered per side.
            let (by_mean, by_variance) = factors
                .iter()
                .zip(shares)
                .fold((0.0, 0.0), |(m, v), (f, share)| {
                    (m + share * f.by_mean, v + share * f.by_variance)
                });
            for ((out, dm), dv) in gradient
                .iter_mut()
                .zip(&p.mean_gradient)
                .zip(&p.variance_gradient)
            {
                *out += by_mean * dm + by_variance * dv;
            }
        }
        (value, gradient)
    }

    /// Objective `j`'s factor of each of its sides, for a prediction of `(mean, variance)`.
    fn factors(&self, j: usize, mean: f64, variance: f64) -> Vec<Factor> {
        let sigma = variance.sqrt();
        let log_sigma = sigma.ln();
        let tails: Vec<Tail> = self.bounds[j]
            .iter()
            .map(|&a| Tail::new(mean, sigma, log_sigma, a))
            .collect();
        self.bands[j]
            .iter()
            .map(|&(l, u)| Factor::new(&tails, l, u))
            .collect()
    }

    /// `log Σ_k Π_j factor_kj` over the boxes, `factors` per objective and side; with
    /// `shares`, also per objective and side the share of the sum of the boxes with that side
    /// (otherwise no shares).
    fn log_sum(&self, factors: &[Vec<Factor>], shares: bool) -> (f64, Vec<Vec<f64>>) {
        let mut gathered: Vec<Vec<f64>> = if shares {
            factors.iter().map(|f| vec![0.0; f.len()]).collect()
        } else {
            Vec::new()
        };
        let peaks: Vec<f64> = factors
            .iter()
            .map(|f| f.iter().map(|f| f.log).fold(f64::NEG_INFINITY, f64::max))
            .collect();
        if peaks.contains(&f64::NEG_INFINITY) {
            return (f64::NEG_INFINITY, gathered);
        }
        let scaled: Vec<Vec<f64>> = factors
            .iter()
            .zip(&peaks)
            .map(|(f, peak)| f.iter().map(|f| (f.log - peak).exp()).collect())
            .collect();
        let terms: Vec<f64> = self
            .boxes
            .iter()
            .map(|b| b.iter().zip(&scaled).map(|(&side, s)| s[side]).product())
            .collect();
        let sum: f64 = terms.iter().sum();
        // The terms, and their sum.
        let (value, terms, total) = if sum >= PLAIN_SUM_FLOOR {
            (peaks.iter().sum::<f64>() + sum.ln(), terms, sum)
        } else {
            // Far from the front every box's term underflows: sum their logs.
            let logs: Vec<f64> = self
                .boxes
                .iter()
                .map(|b| b.iter().zip(factors).map(|(&side, f)| f[side].log).sum())
                .collect();
            let (value, shares) = log_sum_exp(&logs);
            (value, shares, 1.0)
        };
        if shares {
            for (b, term) in self.boxes.iter().zip(&terms) {
                for (gathered, &side) in gathered.iter_mut().zip(b) {
                    gathered[side] += term / total;
                }
            }
        }
        (value, gathered)
    }
}

/// Appends to `out` the boxes of the region of `[reference, ∞)` in the first `objectives`
/// objectives not dominated by `points` (every one above the reference), each box completed
/// by `suffix` (the bounds of the objectives after them, innermost last).
fn split(
    points: &[&[f64]],
    reference: &[f64],
    objectives: usize,
    suffix: &mut Vec<(f64, f64)>,
    out: &mut Vec<Vec<(f64, f64)>>,
) {
    let last = objectives - 1;
    let mut levels: Vec<f64> = points.iter().map(|p| p[last]).collect();
    levels.sort_by(|a, b| b.total_cmp(a));
    levels.dedup();
    if last == 0 {
        // One objective: free above the best of them.
        let lower = levels.first().copied().unwrap_or(reference[0]);
        let mut b = vec![(lower, f64::INFINITY)];
        b.extend(suffix.iter().rev());
        out.push(b);
        return;
    }
    // Slabs of the last objective from the top down: in `[next, top)` the points that can
    // dominate are those at `top` or above.
    let mut top = f64::INFINITY;
    for next in levels
        .iter()
        .copied()
        .chain(std::iter::once(reference[last]))
    {
        let dominating: Vec<&[f64]> = points.iter().copied().filter(|p| p[last] >= top).collect();
        suffix.push((next, top));
        split(&dominating, reference, last, suffix, out);
        suffix.pop();
        top = next;
    }
}

/// `log ψ(a)` of one objective at one bound `a`, `ψ(a) = E[(y - a)⁺]`, with its derivatives
/// by the mean and the variance.
#[derive(Debug, Clone, Copy)]
struct Tail {
    log: f64,
    by_mean: f64,
    by_variance: f64,
}

impl Tail {
    fn new(mean: f64, sigma: f64, log_sigma: f64, a: f64) -> Self {
        let (log_h, cdf_over_h, pdf_over_h) = log_h((mean - a) / sigma);
        // dψ/dμ = Φ, dψ/dσ = φ, dσ/dvar = 1/(2σ); ψ = σh.
        Self {
            log: log_h + log_sigma,
            by_mean: cdf_over_h / sigma,
            by_variance: pdf_over_h / (2.0 * sigma * sigma),
        }
    }
}

/// One objective's factor of a box, `ψ(l) - ψ(u)` (`u` unbounded: ψ(∞) = 0), as its log and
/// the derivatives of its log by the mean and the variance.
#[derive(Debug, Clone, Copy)]
struct Factor {
    log: f64,
    by_mean: f64,
    by_variance: f64,
}

impl Factor {
    fn new(tails: &[Tail], l: usize, u: Option<usize>) -> Self {
        let lower = tails[l];
        let Some(u) = u else {
            return Self {
                log: lower.log,
                by_mean: lower.by_mean,
                by_variance: lower.by_variance,
            };
        };
        let upper = tails[u];
        // ψ(l) - ψ(u) = ψ(l) (1 - e^Δ), Δ = log ψ(u) - log ψ(l) < 0.
        let delta = (upper.log - lower.log).min(-f64::MIN_POSITIVE);
        let ratio = delta.exp();
        // d log(ψl - ψu) = (ψl dlogψl - ψu dlogψu) / (ψl - ψu).
        let combine = |dl: f64, du: f64| (dl - ratio * du) / (1.0 - ratio);
        Self {
            log: lower.log + log1mexp(delta),
            by_mean: combine(lower.by_mean, upper.by_mean),
            by_variance: combine(lower.by_variance, upper.by_variance),
        }
    }
}

/// `log(1 - e^x)` for `x < 0`, accurate at both ends (Mächler, 2012).
fn log1mexp(x: f64) -> f64 {
    if x > -std::f64::consts::LN_2 {
        (-x.exp_m1()).ln()
    } else {
        (-x.exp()).ln_1p()
    }
}

/// `log Σ exp(logs)` without overflow, and each term's share of the sum.
fn log_sum_exp(logs: &[f64]) -> (f64, Vec<f64>) {
    let peak = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if peak == f64::NEG_INFINITY {
        return (peak, vec![0.0; logs.len()]);
    }
    let terms: Vec<f64> = logs.iter().map(|l| (l - peak).exp()).collect();
    let sum: f64 = terms.iter().sum();
    (peak + sum.ln(), terms.iter().map(|t| t / sum).collect())
}

#[cfg(test)]
mod tests;
