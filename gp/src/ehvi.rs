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

/// A box of the non-dominated region, by index into [`Boxes::bounds`] per objective: its
/// lower bound, and its upper bound (`None`: unbounded).
type Bounds = Vec<(usize, Option<usize>)>;

/// The region not dominated by a set of points and above a reference point, split into
/// disjoint boxes.
#[derive(Debug, Clone, PartialEq)]
pub struct Boxes {
    /// Per objective, the distinct coordinates the boxes' bounds take.
    bounds: Vec<Vec<f64>>,
    /// The boxes.
    boxes: Vec<Bounds>,
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
        // Index the bounds.
        let bounds: Vec<Vec<f64>> = (0..reference.len())
            .map(|j| {
                let mut values: Vec<f64> = raw.iter().map(|b: &Vec<(f64, f64)>| b[j].0).collect();
                values.extend(raw.iter().map(|b| b[j].1).filter(|u| u.is_finite()));
                values.sort_by(f64::total_cmp);
                values.dedup();
                values
            })
            .collect();
        let index = |j: usize, v: f64| bounds[j].partition_point(|&b| b < v);
        let boxes = raw
            .iter()
            .map(|b| {
                b.iter()
                    .enumerate()
                    .map(|(j, &(l, u))| (index(j, l), u.is_finite().then(|| index(j, u))))
                    .collect()
            })
            .collect();
        Self { bounds, boxes }
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
                    .map(|(j, &(l, u))| {
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
        let tails: Vec<Vec<Tail>> = predictions
            .iter()
            .zip(&self.bounds)
            .map(|(&(mean, variance), bounds)| {
                bounds
                    .iter()
                    .map(|&a| Tail::new(mean, variance, a))
                    .collect()
            })
            .collect();
        let logs: Vec<f64> = self
            .boxes
            .iter()
            .map(|b| {
                b.iter()
                    .enumerate()
                    .map(|(j, &(l, u))| band(&tails[j], l, u).0)
                    .sum()
            })
            .collect();
        log_sum_exp(&logs).0
    }

    /// `log E[improvement]` at predictions of the objectives at a point, with the gradient
    /// by the point's features.
    pub fn log_expected_improvement_with_gradient(
        &self,
        predictions: &[Prediction],
    ) -> (f64, Vec<f64>) {
        let tails: Vec<Vec<Tail>> = predictions
            .iter()
            .zip(&self.bounds)
            .map(|(p, bounds)| {
                bounds
                    .iter()
                    .map(|&a| Tail::new(p.mean, p.variance, a))
                    .collect()
            })
            .collect();
        let objectives = predictions.len();
        // Per box: its log, and the derivatives of its log by each objective's mean and
        // variance.
        let mut logs = Vec::with_capacity(self.boxes.len());
        let mut derivatives = Vec::with_capacity(self.boxes.len());
        for b in &self.boxes {
            let mut log = 0.0;
            let mut d = Vec::with_capacity(objectives);
            for (j, &(l, u)) in b.iter().enumerate() {
                let (value, by_mean, by_variance) = band(&tails[j], l, u);
                log += value;
                d.push((by_mean, by_variance));
            }
            logs.push(log);
            derivatives.push(d);
        }
        let (value, shares) = log_sum_exp(&logs);
        let features = predictions.first().map_or(0, |p| p.mean_gradient.len());
        let mut gradient = vec![0.0; features];
        for (share, d) in shares.iter().zip(&derivatives) {
            for ((by_mean, by_variance), p) in d.iter().zip(predictions) {
                for ((out, dm), dv) in gradient
                    .iter_mut()
                    .zip(&p.mean_gradient)
                    .zip(&p.variance_gradient)
                {
                    *out += share * (by_mean * dm + by_variance * dv);
                }
            }
        }
        (value, gradient)
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
    fn new(mean: f64, variance: f64, a: f64) -> Self {
        let sigma = variance.sqrt();
        let (log_h, cdf_over_h, pdf_over_h) = log_h((mean - a) / sigma);
        // dψ/dμ = Φ, dψ/dσ = φ, dσ/dvar = 1/(2σ); ψ = σh.
        Self {
            log: log_h + sigma.ln(),
            by_mean: cdf_over_h / sigma,
            by_variance: pdf_over_h / (2.0 * variance),
        }
    }
}

/// `log (ψ(l) - ψ(u))`, the log of one objective's factor of a box (`u` `None`: ψ(∞) = 0),
/// with its derivatives by the mean and the variance.
fn band(tails: &[Tail], l: usize, u: Option<usize>) -> (f64, f64, f64) {
    let lower = tails[l];
    let Some(u) = u else {
        return (lower.log, lower.by_mean, lower.by_variance);
    };
    let upper = tails[u];
    // ψ(l) - ψ(u) = ψ(l) (1 - e^Δ), Δ = log ψ(u) - log ψ(l) < 0.
    let delta = (upper.log - lower.log).min(-f64::MIN_POSITIVE);
    let ratio = delta.exp();
    let log = lower.log + log1mexp(delta);
    // d log(ψl - ψu) = (ψl dlogψl - ψu dlogψu) / (ψl - ψu).
    let combine = |dl: f64, du: f64| (dl - ratio * du) / (1.0 - ratio);
    (
        log,
        combine(lower.by_mean, upper.by_mean),
        combine(lower.by_variance, upper.by_variance),
    )
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
