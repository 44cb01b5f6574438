//! The trust region: a box around the best point where the acquisition is maximised, whose
//! side grows after repeated improvements and shrinks after repeated failures (TuRBO,
//! Eriksson et al., 2019), counted in batches of the trials run at once. At its largest it
//! spans most of the space around the incumbent, and the search is nearly global; when the model's proposals keep
//! missing, it shrinks around the incumbent, so the search turns local where a global model
//! of a rugged function misleads it. A box that has shrunk to nothing is reset, which
//! restarts the search from a wide region.
//!
//! The side is a function of the history alone (the trials in number order after the
//! design), so the same history gives the same region, also after a restart.

use super::design::is_middle;
use super::encoding::Encoding;

/// The side of a fresh region, in unit coordinates.
const INITIAL: f64 = 0.8;
/// The largest side, TuRBO's: it covers the whole cube from a centre within 0.3 of the cube's
/// middle in every coordinate, and reaches 0.8 past a centre nearer a bound.
const MAX: f64 = 1.6;
/// Below this side the region is reset to [`INITIAL`].
const MIN: f64 = 0.5f64 * 0.5 * 0.5 * 0.5 * 0.5 * 0.5 * 0.5;
/// Consecutive improvements that double the side.
const SUCCESSES: usize = 3;
/// An improvement must beat the best value by this fraction of its magnitude.
const MARGIN: f64 = 1e-3;

/// Failed trials in a row that halve the side in the middle ([`is_middle`]): with 10 to 15
/// parameters and tens of trials, `max(4, D)` failures would let the region halve three or
/// four times in a study, and the search would hardly turn local.
const MIDDLE_FAILURES: usize = 6;

/// Consecutive failed batches of `batch` trials that halve the side in `dimension`
/// dimensions with a study's `budget`: `⌈max(4, D) / batch⌉`, so that about `max(4, D)` trials
/// fail in a row; `⌈6 / batch⌉` in the middle ([`MIDDLE_FAILURES`]).
fn failure_tolerance(dimension: usize, budget: Option<u64>, batch: usize) -> usize {
    match is_middle(dimension, budget) {
        true => MIDDLE_FAILURES,
        false => dimension.max(4),
    }
    .div_ceil(batch)
}

/// The side of the region after `values` (larger is better; `None` for a failed trial), in
/// trial order, of which the first `design` are the initial design. The trials go in batches
/// of `batch` (the number of trials run at once) by their number (their index in `values`):
/// trials `b·batch` to `(b + 1)·batch - 1` make batch `b`, as the controller starts trials
/// of equal length, and the trials of a batch after the design count as one step. A batch
/// succeeds when one of its trials beats the best value of the trials before the batch, the
/// best known when it was proposed. `dimension` and `budget` (the study's trial budget,
/// `None`: no limit) set how many failures halve the side ([`failure_tolerance`]).
pub(crate) fn side(
    values: &[Option<f64>],
    design: usize,
    dimension: usize,
    budget: Option<u64>,
    batch: usize,
) -> f64 {
    let batch = batch.max(1);
    let split = design.min(values.len());
    // known[i]: the best of the first i values.
    let known: Vec<Option<f64>> = std::iter::once(None)
        .chain(values.iter().scan(None, |best: &mut Option<f64>, v| {
            *best = v.iter().copied().chain(*best).reduce(f64::max);
            Some(*best)
        }))
        .collect();
    let improves = |i: usize| {
        values[i].is_some_and(|v| known[i - i % batch].is_none_or(|b| v > b + MARGIN * b.abs()))
    };
    let tolerance = failure_tolerance(dimension, budget, batch);
    let (mut side, mut successes, mut failures) = (INITIAL, 0, 0);
    let trials: Vec<usize> = (split..values.len()).collect();
    for chunk in trials.chunk_by(|a, b| a / batch == b / batch) {
        if chunk.iter().any(|&i| improves(i)) {
            successes += 1;
            failures = 0;
        } else {
            failures += 1;
            successes = 0;
        }
        if successes == SUCCESSES {
            side = (2.0 * side).min(MAX);
            successes = 0;
        }
        if failures == tolerance {
            side /= 2.0;
            failures = 0;
        }
        if side < MIN {
            side = INITIAL;
        }
    }
    side
}

/// A box of unit coordinates, one interval per parameter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Region {
    /// Lower ends.
    pub lower: Vec<f64>,
    /// Upper ends.
    pub upper: Vec<f64>,
}

impl Region {
    /// The box of side `side` centred on `center`, cut to the unit cube; a categorical
    /// parameter keeps its whole range, as no value is nearer to another.
    pub(crate) fn around(encoding: &Encoding<'_>, center: &[f64], side: f64) -> Self {
        let (lower, upper) = center
            .iter()
            .enumerate()
            .map(|(p, &c)| {
                if encoding.is_ordered(p) {
                    ((c - side / 2.0).max(0.0), (c + side / 2.0).min(1.0))
                } else {
                    (0.0, 1.0)
                }
            })
            .unzip();
        Self { lower, upper }
    }

    /// The whole unit cube of `dimension` parameters.
    pub(crate) fn whole(dimension: usize) -> Self {
        Self {
            lower: vec![0.0; dimension],
            upper: vec![1.0; dimension],
        }
    }

    /// The point at relative position `t ∈ [0, 1]^D` in the box.
    pub(crate) fn at(&self, t: &[f64]) -> Vec<f64> {
        t.iter()
            .zip(self.lower.iter().zip(&self.upper))
            .map(|(t, (lo, hi))| lo + t * (hi - lo))
            .collect()
    }

    /// `unit` moved into the box.
    pub(crate) fn clamp(&self, unit: &mut [f64]) {
        for (u, (lo, hi)) in unit.iter_mut().zip(self.lower.iter().zip(&self.upper)) {
            *u = u.clamp(*lo, *hi);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::{Space, categorical, unit_double};

    #[test]
    fn improvements_double_the_side_and_failures_halve_it() {
        let design = vec![Some(1.0); 5];
        let with = |tail: &[Option<f64>]| [design.clone(), tail.to_vec()].concat();
        assert_eq!(side(&design, 5, 2, None, 1), INITIAL);
        let rising: Vec<_> = (2..=4).map(|v| Some(v as f64)).collect();
        assert_eq!(side(&with(&rising), 5, 2, None, 1), 2.0 * INITIAL);
        let six: Vec<_> = (2..=7).map(|v| Some(v as f64)).collect();
        assert_eq!(side(&with(&six), 5, 2, None, 1), MAX);
        // Four non-improvements (a tiny gain, an equal value, a failure, a worse value).
        let flat = [Some(1.0 + 1e-9), Some(1.0), None, Some(-1.0)];
        assert_eq!(side(&with(&flat), 5, 2, None, 1), INITIAL / 2.0);
        assert_eq!(side(&with(&flat[..3]), 5, 2, None, 1), INITIAL);
        // In 6 dimensions it takes 6 failures, in 12 (the middle) 6 too, in 16 sixteen; in 8,
        // eight, or 6 in a study of fewer than 80 trials (the middle too).
        assert_eq!(side(&with(&flat), 5, 6, None, 1), INITIAL);
        assert_eq!(failure_tolerance(12, None, 1), 6);
        assert_eq!(failure_tolerance(16, None, 1), 16);
        assert_eq!(failure_tolerance(12, None, 4), 2);
        assert_eq!(failure_tolerance(8, None, 1), 8);
        assert_eq!(failure_tolerance(8, Some(80), 1), 8);
        assert_eq!(failure_tolerance(8, Some(79), 1), 6);
        // An improvement breaks a run of failures.
        let broken = [None, None, None, Some(5.0), None, None, None];
        assert_eq!(side(&with(&broken), 5, 2, None, 1), INITIAL);
    }

    #[test]
    fn in_batches_one_improvement_makes_a_success_and_failures_count_per_batch() {
        let mut values = vec![Some(1.0); 4];
        // Three batches of 4, each with one improvement among three misses.
        for v in [2.0, 3.0, 4.0] {
            values.extend([None, Some(0.0), Some(v), Some(0.5)]);
        }
        assert_eq!(side(&values, 4, 2, None, 4), 2.0 * INITIAL);
        assert_eq!(side(&values, 4, 2, None, 1), INITIAL);
        // max(4, 6) = 6 failed trials: two batches of 4 (the second one incomplete).
        let mut failing = vec![Some(1.0); 4];
        failing.extend([None; 5]);
        assert_eq!(side(&failing, 4, 6, None, 4), INITIAL / 2.0);
        assert_eq!(side(&failing[..8], 4, 6, None, 4), INITIAL);
    }

    #[test]
    fn a_trial_is_judged_against_the_best_value_before_its_batch() {
        let mut values = vec![Some(1.0); 4];
        // In batches of 2, trial 5 was proposed while trial 4 (3.0) was running: its 2.0
        // beats the 1.0 known then, and so on.
        values.extend([Some(3.0), Some(2.0), None, Some(4.0), Some(5.0), None]);
        assert_eq!(side(&values, 4, 2, None, 2), 2.0 * INITIAL);
        // One at a time, trial 5 knew of the 3.0 and failed.
        assert_eq!(side(&values, 4, 2, None, 1), INITIAL);
    }

    #[test]
    fn batches_follow_trial_numbers_not_the_end_of_the_design() {
        // A design of 5 in batches of 4: trials 5-7 end batch 1, trial 8 starts batch 2, and
        // each failed batch halves the side in 2 dimensions.
        let mut values = vec![Some(1.0); 5];
        values.extend([None; 3]);
        assert_eq!(side(&values, 5, 2, None, 4), INITIAL / 2.0);
        values.push(None);
        assert_eq!(side(&values, 5, 2, None, 4), INITIAL / 4.0);
    }

    #[test]
    fn a_region_that_shrinks_to_nothing_is_reset() {
        let mut values = vec![Some(0.0); 5];
        // 7 halvings of 4 failures bring 0.8 below MIN; one more failure-run halves again.
        values.extend(std::iter::repeat_n(None, 4 * 7));
        assert_eq!(side(&values, 5, 2, None, 1), INITIAL);
        values.extend(std::iter::repeat_n(None, 4));
        assert_eq!(side(&values, 5, 2, None, 1), INITIAL / 2.0);
    }

    #[test]
    fn the_box_is_cut_to_the_cube_and_leaves_categoricals_whole() {
        let space = Space::new(vec![unit_double("a"), categorical("c", &["x", "y"])]);
        let encoding = Encoding::new(&space);
        let region = Region::around(&encoding, &[0.9, 0.25], 0.4);
        assert!((region.lower[0] - 0.7).abs() < 1e-12 && region.upper[0] == 1.0);
        assert_eq!((region.lower[1], region.upper[1]), (0.0, 1.0));
        let mut point = vec![0.2, 0.6];
        region.clamp(&mut point);
        assert!((point[0] - 0.7).abs() < 1e-12 && point[1] == 0.6);
        assert!((region.at(&[0.5, 0.5])[0] - 0.85).abs() < 1e-12);
    }
}
