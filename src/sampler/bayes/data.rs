//! The finished trials as the model sees them: features, standardised values warped where
//! the model allows it (larger is better, failed trials at the worst value), the incumbents.

use super::design::{HEAVY_TAIL_POWER, warps_only_heavy_tails, warps_only_outliers};
use super::encoding::Encoding;
use crate::sampler::Observation;
use crate::study::Goal;
use crate::study::space::Space;
use hptune_gp::{YeoJohnson, has_outliers};

/// The most finished trials the model is fitted on: past it, the ones nearest the best point
/// are kept, which bounds the time of a proposal (cubic in this number) and makes the model
/// local where the search has converged.
pub(super) const MAX_MODEL_POINTS: usize = 128;
/// How many of the best trials are incumbents: the search starts from each of them.
pub(super) const INCUMBENTS: usize = 3;

/// Which of a model's values are warped ([`OutputMap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Warping {
    /// Wherever the fitted warp is not the identity: a model of one objective fits skewed
    /// values better warped, and where its expected improvement is highest does not depend on
    /// the units.
    Fitted,
    /// Only a heavy tail: where some values are outliers ([`has_outliers`]) or the fitted
    /// power is at least [`HEAVY_TAIL_POWER`]; with 8 or 9 numeric parameters and a long
    /// budget ([`warps_only_heavy_tails`]).
    HeavyTails,
    /// Only where some values are outliers: with many parameters ([`warps_only_outliers`]).
    Outliers,
    /// Never: with several objectives the sampler improves the hypervolume in the models'
    /// units, which is the study's own (up to one factor for every volume) only where each
    /// model's values are an affine map of the trials'.
    Never,
}

impl Warping {
    /// The warping of the model of one objective of a study over `space` with a trial
    /// budget of `budget` (`None`: no limit).
    pub(super) fn of(space: &Space, budget: Option<u64>) -> Self {
        if warps_only_outliers(space) {
            Self::Outliers
        } else if warps_only_heavy_tails(space, budget) {
            Self::HeavyTails
        } else {
            Self::Fitted
        }
    }
}

/// The finished trials as the model sees them.
pub(super) struct TrainingData {
    /// Features.
    pub x: Vec<Vec<f64>>,
    /// The model's values: standardised, warped as [`TrainingData::warping`] allows, larger
    /// is better; failed trials at the worst value.
    pub y: Vec<f64>,
    /// The map from a trial's value to the model's and back.
    pub output: OutputMap,
    /// Unit points of the best trials, best first: the best feasible ones, or where none is
    /// feasible the best of the others.
    pub incumbents: Vec<Vec<f64>>,
    /// Features of the best feasible trials (those of `incumbents`); empty when no trial is
    /// feasible.
    pub feasible_incumbents: Vec<Vec<f64>>,
    /// Every trial's value in history order, larger is better; `None` where it failed or is
    /// infeasible (it improves on nothing).
    pub values: Vec<Option<f64>>,
    /// Whether the values may be warped, as the data was made.
    pub warping: Warping,
}

impl TrainingData {
    /// `None` when no trial has a value yet.
    pub(super) fn new(
        encoding: &Encoding<'_>,
        goal: Goal,
        warping: Warping,
        history: &[Observation],
    ) -> Option<Self> {
        let values: Vec<Option<f64>> = history
            .iter()
            .map(|o| {
                o.value
                    .map(|v| goal_sign(goal) * v)
                    .filter(|v| v.is_finite())
            })
            .collect();
        let worst = values.iter().flatten().copied().reduce(f64::min)?;
        let raw: Vec<f64> = values.iter().map(|v| v.unwrap_or(worst)).collect();
        // Outliers are among the values trials gave: the failed trials, all at the worst
        // value, would make a pile that puts every other value far out.
        let outliers = || has_outliers(values.iter().flatten().copied().collect());
        let output = match warping {
            Warping::Fitted => OutputMap::fitted(goal, &raw, true),
            Warping::HeavyTails => {
                let warped = OutputMap::fitted(goal, &raw, true);
                match outliers() || warped.warp().power() >= HEAVY_TAIL_POWER {
                    true => warped,
                    false => OutputMap::fitted(goal, &raw, false),
                }
            }
            Warping::Outliers => OutputMap::fitted(goal, &raw, outliers()),
            Warping::Never => OutputMap::fitted(goal, &raw, false),
        };
        let y: Vec<f64> = raw.iter().map(|&v| output.warped(v)).collect();
        let x: Vec<Vec<f64>> = history.iter().map(|o| encoding.encode(&o.params)).collect();

        // Succeeded trials, feasible ones first, best first; ties by trial order.
        let mut ranked: Vec<usize> = (0..history.len())
            .filter(|&i| values[i].is_some())
            .collect();
        ranked.sort_by(|&a, &b| {
            let feasible = |i: usize| history[i].feasible;
            feasible(b).cmp(&feasible(a)).then(y[b].total_cmp(&y[a]))
        });
        let best: Vec<usize> = ranked.iter().take(INCUMBENTS).copied().collect();
        let incumbents = best
            .iter()
            .map(|&i| encoding.unit(&history[i].params))
            .collect();
        let feasible_incumbents = best
            .iter()
            .filter(|&&i| history[i].feasible)
            .map(|&i| x[i].clone())
            .collect();
        let center = x[ranked[0]].clone();
        let (x, y) = nearest(x, y, &center, MAX_MODEL_POINTS);
        let values = values
            .iter()
            .zip(history)
            .map(|(v, o)| v.filter(|_| o.feasible))
            .collect();
        Some(Self {
            x,
            y,
            output,
            incumbents,
            feasible_incumbents,
            values,
            warping,
        })
    }
}

/// `1` when larger is better, `-1` when smaller is.
pub(super) fn goal_sign(goal: Goal) -> f64 {
    match goal {
        Goal::Maximize => 1.0,
        Goal::Minimize => -1.0,
    }
}

/// The mean and the spread (1 where the values are constant) of `values`.
pub(super) fn moments(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = values.clone().count() as f64;
    let mean = values.clone().sum::<f64>() / n;
    let spread = (values.map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    let scale = if spread > 1e-12 * mean.abs().max(1.0) {
        spread
    } else {
        1.0
    };
    (mean, scale)
}

/// The map from a trial's value to the model's: larger made better, standardised (mean 0,
/// variance 1), warped by a Yeo-Johnson transform fitted to the standardised values, and
/// standardised again. Each step is monotone increasing, so the order of the trials is kept.
/// With many parameters ([`warps_only_outliers`]) the warp is fitted only where some value a
/// trial gave is an outlier ([`has_outliers`]); otherwise it is the identity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct OutputMap {
    sign: f64,
    mean: f64,
    scale: f64,
    warp: YeoJohnson,
    warped_mean: f64,
    warped_scale: f64,
}

impl OutputMap {
    /// The map fitted to the values `raw` (larger is better, at least one); the warp is the
    /// identity unless `may_warp`.
    pub(super) fn fitted(goal: Goal, raw: &[f64], may_warp: bool) -> Self {
        let (mean, scale) = moments(raw.iter().copied());
        let standardised: Vec<f64> = raw.iter().map(|v| (v - mean) / scale).collect();
        let warp = match may_warp {
            true => YeoJohnson::fitted(&standardised),
            false => YeoJohnson::identity(),
        };
        let (warped_mean, warped_scale) = moments(standardised.iter().map(|&v| warp.apply(v)));
        Self {
            sign: goal_sign(goal),
            mean,
            scale,
            warp,
            warped_mean,
            warped_scale,
        }
    }

    /// The model's value for `signed`, a value made larger-is-better.
    pub(super) fn warped(&self, signed: f64) -> f64 {
        (self.warp.apply((signed - self.mean) / self.scale) - self.warped_mean) / self.warped_scale
    }

    /// The model's value for `value`, a trial's value in the metric's units.
    pub(super) fn model_value(&self, value: f64) -> f64 {
        self.warped(self.sign * value)
    }

    /// The warp of the standardised values.
    pub(super) fn warp(&self) -> YeoJohnson {
        self.warp
    }

    /// The trial's value, in the metric's units, whose model value is `z`.
    pub(super) fn value(&self, z: f64) -> f64 {
        let standardised = self.warp.inverse(z * self.warped_scale + self.warped_mean);
        self.sign * (standardised * self.scale + self.mean)
    }
}

/// At most `keep` of the points `x` with their values `y`, the nearest to `center`.
pub(super) fn nearest(
    x: Vec<Vec<f64>>,
    y: Vec<f64>,
    center: &[f64],
    keep: usize,
) -> (Vec<Vec<f64>>, Vec<f64>) {
    if x.len() <= keep {
        return (x, y);
    }
    let distance =
        |p: &[f64]| -> f64 { p.iter().zip(center).map(|(a, b)| (a - b) * (a - b)).sum() };
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| distance(&x[a]).total_cmp(&distance(&x[b])));
    order.truncate(keep);
    order.sort_unstable();
    (
        order.iter().map(|&i| x[i].clone()).collect(),
        order.iter().map(|&i| y[i]).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::{Assignment, ParamValue, Space, categorical, unit_double};

    /// `n` points on a 2-D grid of 37 × 37 (not repeating for n < 1,369), in a scrambled order.
    fn scattered(n: usize) -> Vec<Vec<f64>> {
        (0..n)
            .map(|i| {
                let k = i * 409 % 1369;
                vec![(k % 37) as f64 / 36.0, (k / 37) as f64 / 36.0]
            })
            .collect()
    }

    fn squared_distance(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(a, b)| (a - b) * (a - b)).sum()
    }

    #[test]
    fn at_most_keep_points_are_all_kept_in_their_order() {
        let x = scattered(10);
        let y: Vec<f64> = (0..10).map(f64::from).collect();
        assert_eq!(nearest(x.clone(), y.clone(), &x[3], 10), (x, y));
    }

    #[test]
    fn past_keep_the_points_nearest_the_center_are_kept_in_history_order() {
        let x = scattered(500);
        // Each point's value names it.
        let y: Vec<f64> = (0..500).map(f64::from).collect();
        let center = 321;
        let (kept_x, kept_y) = nearest(x.clone(), y, &x[center], 128);
        assert_eq!((kept_x.len(), kept_y.len()), (128, 128));
        let kept: Vec<usize> = kept_y.iter().map(|&v| v as usize).collect();
        assert!(kept.contains(&center), "the center itself is kept");
        assert!(kept.windows(2).all(|w| w[0] < w[1]), "in history order");
        for (i, point) in kept.iter().zip(&kept_x) {
            assert_eq!(point, &x[*i], "each point keeps its value");
        }
        let farthest_kept = kept
            .iter()
            .map(|&i| squared_distance(&x[i], &x[center]))
            .fold(0.0, f64::max);
        let nearest_dropped = (0..500)
            .filter(|i| !kept.contains(i))
            .map(|i| squared_distance(&x[i], &x[center]))
            .fold(f64::MAX, f64::min);
        assert!(farthest_kept <= nearest_dropped);
    }

    #[test]
    fn points_at_equal_distances_are_kept_earliest_first() {
        // The center and eight copies of one point, then eight of another at the same
        // distance: which copies are kept depends on their order alone.
        let mut x = vec![vec![0.5, 0.5]];
        x.extend(std::iter::repeat_n(vec![0.5, 0.7], 8));
        x.extend(std::iter::repeat_n(vec![0.5, 0.3], 8));
        let y: Vec<f64> = (0..17).map(f64::from).collect();
        let center = x[0].clone();
        let (_, kept) = nearest(x, y, &center, 5);
        assert_eq!(kept, vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn the_warp_narrows_to_heavy_tails_then_outliers_and_is_off_with_several_objectives() {
        // The same 60 values, a bowl's (skewed: most trials far from its bottom), in 2 to 12
        // dimensions, also with categoricals (many from 8 then); then with one diverging
        // trial, and with 80 more trials that failed.
        // Parameters x0..x{D-1}, doubles but for `categoricals` of them (the last), of three
        // values.
        let history = |dimension: usize, categoricals: usize, values: &[Option<f64>]| {
            values
                .iter()
                .enumerate()
                .map(|(n, &value)| Observation {
                    number: n as u64,
                    params: (0..dimension)
                        .map(|d| {
                            let value = match d + categoricals >= dimension {
                                true => ParamValue::Str(["a", "b", "c"][n % 3].to_string()),
                                false => ParamValue::Float((n * (d + 3) % 61) as f64 / 60.0),
                            };
                            (format!("x{d}"), value)
                        })
                        .collect(),
                    value,
                    ..Observation::unconstrained()
                })
                .collect::<Vec<Observation>>()
        };
        // The fitted power of the model of `values` over `dimension` parameters, `categoricals`
        // of them categorical, warped as `warping` says for that space.
        let power_of = |dimension: usize,
                        categoricals,
                        values: &[Option<f64>],
                        warping: fn(&Space) -> Warping| {
            let space = Space::new(
                (0..dimension)
                    .map(|d| match d + categoricals >= dimension {
                        true => categorical(&format!("x{d}"), &["a", "b", "c"]),
                        false => unit_double(&format!("x{d}")),
                    })
                    .collect(),
            );
            let encoding = Encoding::new(&space);
            let data = TrainingData::new(
                &encoding,
                Goal::Minimize,
                warping(&space),
                &history(dimension, categoricals, values),
            );
            data.unwrap().output.warp().power()
        };
        // One objective without a trial budget, with a short one (50 trials), several.
        let long: fn(&Space) -> Warping = |space| Warping::of(space, None);
        let short: fn(&Space) -> Warping = |space| Warping::of(space, Some(50));
        let several: fn(&Space) -> Warping = |_| Warping::Never;
        let bowl: Vec<Option<f64>> = (0..60).map(|n| Some(f64::from(n).powi(2))).collect();
        // A heavy tail without outliers: values growing exponentially away from the best.
        let heavy: Vec<Option<f64>> = (0..60).map(|n| Some((f64::from(n) / 9.0).exp())).collect();
        assert!(!has_outliers(heavy.iter().flatten().copied().collect()));
        assert!(power_of(8, 0, &heavy, long) >= HEAVY_TAIL_POWER);
        let mut diverged = bowl.clone();
        diverged[40] = Some(1e7);
        // Failed trials count at the worst value, more than half of them at one value: they
        // do not make the others outliers.
        let mut failing = bowl.clone();
        failing.extend([None; 80]);
        type Case<'a> = (
            usize,
            usize,
            &'a [Option<f64>],
            fn(&Space) -> Warping,
            bool,
            &'a str,
        );
        #[rustfmt::skip]
        let cases: [Case; 17] = [
            ( 2, 0, &bowl,     long,    true,  "in 2 dimensions the skew is warped"),
            ( 7, 0, &bowl,     long,    true,  "and in 7"),
            ( 9, 0, &bowl,     short,   true,  "and in 8-9 with a short budget (the middle)"),
            ( 8, 0, &bowl,     long,    false, "with a long one, in 8-9 a mild skew is the trend"),
            ( 9, 0, &bowl,     long,    false, "with a long one, in 8-9 a mild skew is the trend"),
            (10, 0, &bowl,     long,    false, "from 10 on it is the trend"),
            (12, 0, &bowl,     long,    false, "from 10 on it is the trend"),
            ( 8, 0, &heavy,    long,    true,  "a heavy tail is warped in 8-9 with a long budget"),
            (10, 0, &heavy,    long,    false, "from 10 only outliers are"),
            ( 7, 1, &bowl,     long,    true,  "7 with a categorical are warped"),
            ( 8, 1, &bowl,     long,    false, "from 8 with a categorical, only outliers"),
            ( 8, 1, &heavy,    long,    false, "from 8 with a categorical, only outliers"),
            ( 9, 3, &bowl,     long,    false, "from 8 with a categorical, only outliers"),
            ( 8, 0, &diverged, long,    true,  "a diverging run is warped in any dimension"),
            (12, 0, &diverged, long,    true,  "a diverging run is warped in any dimension"),
            (12, 0, &failing,  long,    false, "failures are not values far out"),
            ( 2, 0, &diverged, several, false, "the models of several objectives never are"),
        ];
        for (dimension, categoricals, values, warping, warped, what) in cases {
            let power = power_of(dimension, categoricals, values, warping);
            assert_eq!(
                power != 1.0,
                warped,
                "{what}: {dimension} parameters, {categoricals} categorical, power {power}"
            );
        }
    }

    #[test]
    fn a_long_history_is_modelled_by_the_points_nearest_its_best_trial() {
        let space = Space::new(vec![unit_double("a"), unit_double("b")]);
        let encoding = Encoding::new(&space);
        let points = scattered(400);
        // A bowl whose bottom is trial 100's point; trial 7 fails.
        let best = points[100].clone();
        let history: Vec<Observation> = points
            .iter()
            .enumerate()
            .map(|(n, p)| Observation {
                number: n as u64,
                params: Assignment::from([
                    ("a".to_string(), ParamValue::Float(p[0])),
                    ("b".to_string(), ParamValue::Float(p[1])),
                ]),
                value: (n != 7).then(|| squared_distance(p, &best)),
                ..Observation::unconstrained()
            })
            .collect();
        let data = TrainingData::new(&encoding, Goal::Minimize, Warping::Fitted, &history).unwrap();
        assert_eq!(
            (data.x.len(), data.y.len()),
            (MAX_MODEL_POINTS, MAX_MODEL_POINTS)
        );
        assert_eq!(data.values.len(), 400, "the trust region sees every trial");
        assert_eq!(data.incumbents[0], best);
        let mut by_distance = points.clone();
        by_distance
            .sort_by(|a, b| squared_distance(a, &best).total_cmp(&squared_distance(b, &best)));
        for point in &data.x {
            assert!(by_distance[..MAX_MODEL_POINTS].contains(point), "{point:?}");
        }
    }
}
