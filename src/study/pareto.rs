//! Several objectives at once: which trials no other beats on every objective (the Pareto
//! front), non-dominated sorting, the hypervolume a front dominates, and the reference point
//! that bounds it. No I/O: points in, indices and numbers out.
//!
//! A point is one trial's values, one per objective, in the study's order; each objective has
//! its [`Goal`]. Inside this module every point is turned so that every objective is
//! minimised (a maximised value negated), so one rule serves all goals.

use super::Goal;

/// The share of each objective's range by which the derived reference point lies past the
/// worst feasible value (BoTorch's `infer_reference_point` uses the same 10%): the extreme
/// trials of the front then add volume of their own.
const REFERENCE_MARGIN: f64 = 0.1;

/// `values` turned so that every objective is minimised.
fn minimised(values: &[f64], goals: &[Goal]) -> Vec<f64> {
    values
        .iter()
        .zip(goals)
        .map(|(&v, goal)| match goal {
            Goal::Minimize => v,
            Goal::Maximize => -v,
        })
        .collect()
}

/// Whether `a` dominates `b`, both already minimised: no worse on any objective and better
/// on one. Equal points do not dominate each other.
fn dominates_minimised(a: &[f64], b: &[f64]) -> bool {
    clearly_dominates(a, b, &[])
}

/// Whether `values` is a point of `goals`' space: one finite value per objective.
fn is_point(values: &[f64], goals: &[Goal]) -> bool {
    values.len() == goals.len() && values.iter().all(|v| v.is_finite())
}

/// Sorts `points` into fronts (Deb's fast non-dominated sorting): the first holds the indices
/// of the points nothing dominates, each next one those that only points of earlier fronts
/// dominate; each front in index order. A point that is not one finite value per objective
/// is in no front. Points equal to each other share a front.
pub(crate) fn non_dominated_sort(points: &[&[f64]], goals: &[Goal]) -> Vec<Vec<usize>> {
    let kept: Vec<usize> = (0..points.len())
        .filter(|&i| is_point(points[i], goals))
        .collect();
    let turned: Vec<Vec<f64>> = kept.iter().map(|&i| minimised(points[i], goals)).collect();
    // For each kept point: how many dominate it, and which it dominates.
    let mut dominated_by = vec![0usize; kept.len()];
    let mut dominated: Vec<Vec<usize>> = vec![Vec::new(); kept.len()];
    for a in 0..kept.len() {
        for b in a + 1..kept.len() {
            if dominates_minimised(&turned[a], &turned[b]) {
                dominated[a].push(b);
                dominated_by[b] += 1;
            } else if dominates_minimised(&turned[b], &turned[a]) {
                dominated[b].push(a);
                dominated_by[a] += 1;
            }
        }
    }
    let mut fronts = Vec::new();
    let mut current: Vec<usize> = (0..kept.len()).filter(|&k| dominated_by[k] == 0).collect();
    while !current.is_empty() {
        let mut next = Vec::new();
        for &k in &current {
            for &d in &dominated[k] {
                dominated_by[d] -= 1;
                if dominated_by[d] == 0 {
                    next.push(d);
                }
            }
        }
        fronts.push(current.iter().map(|&k| kept[k]).collect());
        next.sort_unstable();
        current = next;
    }
    fronts
}

/// The indices, in order, of the `items` on the Pareto front: those with values (`values`
/// gives `None` for an item that is no result: a failed, stopped or infeasible trial), one
/// finite value per objective (an item with a NaN is left out), that no other such item
/// dominates. Items with equal values are on the front together or not at all. One pass,
/// each item against the front so far ([`RunningFront`]): O(n f) for n items and a front of
/// f, so that a running study's progress can ask after every trial.
pub(crate) fn front<T>(
    items: &[T],
    goals: &[Goal],
    values: impl Fn(&T) -> Option<&[f64]>,
) -> Vec<usize> {
    let mut front = RunningFront::new(goals);
    for (i, item) in items.iter().enumerate() {
        if let Some(point) = values(item) {
            front.add(i, point);
        }
    }
    front.into_tags()
}

/// A Pareto front built one point at a time, each point with a tag (a trial's index or
/// number): a point joins unless a point on the front dominates it, and the points it
/// dominates leave (whatever they dominated, it does too), so the front after n points is
/// [`front`]'s of those n, found in O(f) per point.
pub(crate) struct RunningFront<'g, T> {
    /// The objectives' goals.
    goals: &'g [Goal],
    /// The tag and the minimised values of each point on the front, in the order they came.
    on: Vec<(T, Vec<f64>)>,
}

impl<'g, T> RunningFront<'g, T> {
    /// An empty front of `goals`.
    pub(crate) fn new(goals: &'g [Goal]) -> Self {
        Self {
            goals,
            on: Vec::new(),
        }
    }

    /// Offers `values`, tagged `tag`: whether it joined the front. A point that is not one
    /// finite value per objective does not.
    pub(crate) fn add(&mut self, tag: T, values: &[f64]) -> bool {
        if !is_point(values, self.goals) {
            return false;
        }
        let point = minimised(values, self.goals);
        if self.on.iter().any(|(_, f)| dominates_minimised(f, &point)) {
            return false;
        }
        self.on.retain(|(_, f)| !dominates_minimised(&point, f));
        self.on.push((tag, point));
        true
    }

    /// The hypervolume of the points on the front up to `reference`, as [`hypervolume`].
    pub(crate) fn hypervolume(&self, reference: &[f64]) -> f64 {
        minimised_hypervolume(
            self.on.iter().map(|(_, p)| p.clone()),
            self.goals,
            reference,
        )
    }

    /// The tags of the points on the front, in the order they came.
    pub(crate) fn into_tags(self) -> Vec<T> {
        self.on.into_iter().map(|(tag, _)| tag).collect()
    }
}

/// The hypervolume of a [`RunningFront`] up to a fixed reference point, kept as points are
/// offered: with two objectives a point that joins adds the area [`area_added`] finds, in
/// O(f) for a front of f (a study of 10,000 trials all on the front takes 10,000 of them, not
/// 10,000 sorts of the front); with more the front's volume is measured again.
pub(crate) struct RunningHypervolume<'g, T> {
    front: RunningFront<'g, T>,
    /// As given, in the objectives' own directions.
    reference: Vec<f64>,
    /// With two objectives and a reference that is a point, that reference minimised: the
    /// volume then grows by [`area_added`].
    minimised_2d: Option<Vec<f64>>,
    volume: f64,
}

impl<'g, T> RunningHypervolume<'g, T> {
    /// An empty front of `goals`, its volume measured up to `reference` (as [`hypervolume`]'s:
    /// one finite value per objective, else the volume stays 0).
    pub(crate) fn new(goals: &'g [Goal], reference: &[f64]) -> Self {
        let two = goals.len() == 2 && is_point(reference, goals);
        Self {
            front: RunningFront::new(goals),
            reference: reference.to_vec(),
            minimised_2d: two.then(|| minimised(reference, goals)),
            volume: 0.0,
        }
    }

    /// Offers `values`, tagged `tag`, as [`RunningFront::add`]: whether it joined the front.
    pub(crate) fn add(&mut self, tag: T, values: &[f64]) -> bool {
        let goals = self.front.goals;
        let added = match &self.minimised_2d {
            Some(reference) if is_point(values, goals) => area_added(
                &minimised(values, goals),
                self.front.on.iter().map(|(_, p)| p.as_slice()),
                reference,
            ),
            _ => 0.0,
        };
        if !self.front.add(tag, values) {
            return false;
        }
        self.volume = match self.minimised_2d {
            Some(_) => self.volume + added,
            None => self.front.hypervolume(&self.reference),
        };
        true
    }

    /// The hypervolume of the front so far.
    pub(crate) fn volume(&self) -> f64 {
        self.volume
    }
}

/// The area `point` adds to what `front` dominates below `reference`, two objectives, all
/// minimised, no point of `front` dominating `point`: the strip between `point`'s second
/// value and the front's staircase, from `point`'s first value to where a point of the front
/// lies below its second value (or to the reference), stepping down at each point of the
/// front it dominates. O(f + k log k) for a front of f of which it dominates k.
fn area_added<'p>(point: &[f64], front: impl Iterator<Item = &'p [f64]>, reference: &[f64]) -> f64 {
    let (x, y) = (point[0], point[1]);
    if x >= reference[0] || y >= reference[1] {
        return 0.0;
    }
    // The staircase's height at `x`, where the strip ends, and its steps in between.
    let (mut height, mut end) = (reference[1], reference[0]);
    let mut steps = Vec::new();
    for q in front {
        if q[0] <= x {
            height = height.min(q[1]);
        } else if q[1] < y {
            end = end.min(q[0]);
        } else {
            steps.push((q[0], q[1]));
        }
    }
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut area = 0.0;
    let mut from = x;
    for (step, below) in steps.into_iter().take_while(|s| s.0 < end) {
        area += (step - from) * (height - y).max(0.0);
        (from, height) = (step, height.min(below));
    }
    area + (end - from) * (height - y).max(0.0)
}

/// The reference point of the hypervolume of `points` under `goals`: each objective's
/// `given` value where the study gives one, else the worst value among `points` (the
/// feasible results) widened by 10% of their range on that objective (by 10% of the value's
/// size, at least 0.1, when all are equal); `None` when an objective has no given value and
/// no point to derive one from. Points that are not one finite value per objective are
/// ignored.
pub(crate) fn reference_point(
    points: &[&[f64]],
    goals: &[Goal],
    given: &[Option<f64>],
) -> Option<Vec<f64>> {
    let points = kept_minimised(points, goals);
    widened(&points, goals, given, |j| largest(points.iter(), j))
}

/// The reference point the Bayesian sampler improves a front above (it passes the models'
/// posterior means at the feasible trials, in the models' units, and each model's noise as
/// `tolerance`): each objective's `given` value where there is one, else the worst value
/// among the front of `points` (its nadir) widened by the margin [`reference_point`] adds,
/// 10% of all the points' range on that objective. It lies between the front and
/// [`reference_point`]'s corner of the same points (on it where a point worst on every
/// objective is on the front): that corner lies as far past the front as the worst points
/// do, and the expected improvement above it weighs widening the front over moving it
/// forward. The nadir leaves out the points of the front that another betters by more than
/// `tolerance` on one objective while trailing by at most `tolerance` on every other
/// ([`clearly_dominates`]): a point on the front only by a lead within the noise, however bad
/// its other values, would otherwise set the corner, and the improvement past the front's
/// end would then be weighed by its whole distance to that point. `None` as for
/// [`reference_point`].
pub(crate) fn reference_near_front(
    points: &[&[f64]],
    goals: &[Goal],
    given: &[Option<f64>],
    tolerance: &[f64],
) -> Option<Vec<f64>> {
    let points = kept_minimised(points, goals);
    let on = front(&points, &vec![Goal::Minimize; goals.len()], |p| {
        Some(p.as_slice())
    });
    let clear: Vec<usize> = on
        .iter()
        .copied()
        .filter(|&p| {
            !on.iter()
                .any(|&q| clearly_dominates(&points[q], &points[p], tolerance))
        })
        .collect();
    // With three or more objectives the relation may cycle and leave no point: then the
    // whole front.
    let nadir = if clear.is_empty() { on } else { clear };
    widened(&points, goals, given, |j| {
        largest(nadir.iter().map(|&i| &points[i]), j)
    })
}

/// Whether `a` betters `b` (both minimised) by more than `tolerance` on some objective and
/// trails it by at most `tolerance` on every objective; a missing tolerance is 0, and with
/// none this is [`dominates_minimised`].
fn clearly_dominates(a: &[f64], b: &[f64], tolerance: &[f64]) -> bool {
    let within = |j: usize| tolerance.get(j).copied().unwrap_or(0.0);
    (0..a.len()).all(|j| a[j] <= b[j] + within(j)) && (0..a.len()).any(|j| a[j] < b[j] - within(j))
}

/// The points that are one finite value per objective, minimised.
fn kept_minimised(points: &[&[f64]], goals: &[Goal]) -> Vec<Vec<f64>> {
    points
        .iter()
        .filter(|p| is_point(p, goals))
        .map(|p| minimised(p, goals))
        .collect()
}

/// The largest value on objective `j` of the minimised `points`; `None` without points.
fn largest<'a>(points: impl Iterator<Item = &'a Vec<f64>>, j: usize) -> Option<f64> {
    points.map(|p| p[j]).reduce(f64::max)
}

/// Each objective's `given` value, else `base(j)` (a minimised value) widened by
/// [`REFERENCE_MARGIN`] of the minimised `points`' range on it (of the worst value's size,
/// at least 1, when all are equal), turned back to `goals`; `None` where an objective has
/// neither.
fn widened(
    points: &[Vec<f64>],
    goals: &[Goal],
    given: &[Option<f64>],
    base: impl Fn(usize) -> Option<f64>,
) -> Option<Vec<f64>> {
    goals
        .iter()
        .enumerate()
        .map(|(j, goal)| {
            if let Some(value) = given.get(j).copied().flatten() {
                return Some(value);
            }
            let worst = largest(points.iter(), j)?;
            let best = points.iter().map(|p| p[j]).fold(worst, f64::min);
            let range = worst - best;
            let margin = match range > 0.0 {
                true => REFERENCE_MARGIN * range,
                false => REFERENCE_MARGIN * worst.abs().max(1.0),
            };
            let corner = base(j)? + margin;
            Some(match goal {
                Goal::Minimize => corner,
                Goal::Maximize => -corner,
            })
        })
        .collect()
}

/// The hypervolume of `points` under `goals`: the measure of the region between them and the
/// `reference` point that some point dominates. Points that do not beat the reference on
/// every objective add nothing; points that are not one finite value per objective are
/// ignored. Exact: a sweep in two dimensions, slices along the last objective above that
/// (the hypervolume by slicing objectives, HSO; O(n^(d-1) log n) for n points, enough for
/// the fronts of studies with up to 4 objectives).
pub(crate) fn hypervolume(points: &[&[f64]], goals: &[Goal], reference: &[f64]) -> f64 {
    let points = points
        .iter()
        .filter(|p| is_point(p, goals))
        .map(|p| minimised(p, goals));
    minimised_hypervolume(points, goals, reference)
}

/// [`hypervolume`] of `points` minimised already, each one finite value per objective.
fn minimised_hypervolume(
    points: impl Iterator<Item = Vec<f64>>,
    goals: &[Goal],
    reference: &[f64],
) -> f64 {
    if reference.len() != goals.len() || reference.iter().any(|r| !r.is_finite()) {
        return 0.0;
    }
    let reference = minimised(reference, goals);
    let inside: Vec<Vec<f64>> = points
        .filter(|p| p.iter().zip(&reference).all(|(x, r)| x < r))
        .collect();
    volume(inside, &reference)
}

/// The volume `points` (minimised, each beating `reference` everywhere) dominate below
/// `reference`.
fn volume(mut points: Vec<Vec<f64>>, reference: &[f64]) -> f64 {
    let d = reference.len();
    if points.is_empty() {
        return 0.0;
    }
    match d {
        1 => reference[0] - points.iter().map(|p| p[0]).fold(f64::INFINITY, f64::min),
        2 => {
            // By the first objective, then the second: each point below the lowest second
            // value so far adds the strip it uncovers.
            points.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
            let mut lowest = reference[1];
            let mut area = 0.0;
            for p in &points {
                if p[1] < lowest {
                    area += (reference[0] - p[0]) * (lowest - p[1]);
                    lowest = p[1];
                }
            }
            area
        }
        _ => {
            // Slices along the last objective: between the last values of two successive
            // points, the points below the slice dominate a (d-1)-dimensional volume.
            points.sort_by(|a, b| a[d - 1].total_cmp(&b[d - 1]));
            let mut total = 0.0;
            let mut below: Vec<Vec<f64>> = Vec::with_capacity(points.len());
            for (i, p) in points.iter().enumerate() {
                let projected = p[..d - 1].to_vec();
                if !below
                    .iter()
                    .any(|q| q.iter().zip(&projected).all(|(x, y)| x <= y))
                {
                    below.retain(|q| !projected.iter().zip(q).all(|(x, y)| x <= y));
                    below.push(projected);
                }
                let top = points.get(i + 1).map_or(reference[d - 1], |n| n[d - 1]);
                if top > p[d - 1] {
                    total += volume(below.clone(), &reference[..d - 1]) * (top - p[d - 1]);
                }
            }
            total
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    const MIN2: [Goal; 2] = [Goal::Minimize, Goal::Minimize];

    /// `d` goals, minimised on even objectives and maximised on odd ones.
    fn alternating_goals(d: usize) -> Vec<Goal> {
        (0..d)
            .map(|j| match j % 2 {
                0 => Goal::Minimize,
                _ => Goal::Maximize,
            })
            .collect()
    }

    fn refs(points: &[Vec<f64>]) -> Vec<&[f64]> {
        points.iter().map(Vec::as_slice).collect()
    }

    #[test]
    fn a_point_dominates_only_when_no_worse_anywhere_and_better_somewhere() {
        let goals = [Goal::Maximize, Goal::Minimize];
        let dominates = |a: &[f64], b: &[f64]| {
            dominates_minimised(&minimised(a, &goals), &minimised(b, &goals))
        };
        assert!(dominates(&[0.9, 10.0], &[0.8, 10.0]));
        assert!(!dominates(&[0.9, 10.0], &[0.9, 10.0]));
        assert!(!dominates(&[0.9, 12.0], &[0.8, 10.0]));
        assert!(dominates(&[0.8, 9.0], &[0.8, 10.0]));
    }

    #[test]
    fn the_fronts_of_a_full_grid_are_its_diagonals() {
        // On the grid {0..n-1}^d, minimised, (a, b, ...) is in front a + b + ...: it is
        // dominated by the points one step lower on one axis, and by nothing else of its sum.
        for d in [2usize, 3] {
            let n: usize = 4;
            let points: Vec<Vec<f64>> = (0..n.pow(d as u32))
                .map(|k| (0..d).map(|j| ((k / n.pow(j as u32)) % n) as f64).collect())
                .collect();
            let goals = vec![Goal::Minimize; d];
            let fronts = non_dominated_sort(&refs(&points), &goals);
            assert_eq!(fronts.len(), d * (n - 1) + 1);
            for (rank, front) in fronts.iter().enumerate() {
                for &i in front {
                    assert_eq!(
                        points[i].iter().sum::<f64>() as usize,
                        rank,
                        "{:?}",
                        points[i]
                    );
                }
            }
            assert_eq!(fronts.iter().map(Vec::len).sum::<usize>(), points.len());
        }
    }

    #[test]
    fn a_maximised_objective_is_sorted_the_other_way() {
        let points = vec![
            vec![0.9, 5.0],
            vec![0.8, 4.0],
            vec![0.7, 6.0],
            vec![0.9, 5.0],
        ];
        let fronts = non_dominated_sort(&refs(&points), &[Goal::Maximize, Goal::Minimize]);
        assert_eq!(fronts, vec![vec![0, 1, 3], vec![2]]);
    }

    #[test]
    fn the_front_keeps_ties_and_leaves_out_nan_and_non_results() {
        // (number, values): None is a failed or infeasible trial.
        let trials: Vec<(u64, Option<Vec<f64>>)> = vec![
            (0, Some(vec![1.0, 3.0])),
            (1, Some(vec![1.0, 3.0])), // a tie with trial 0: both on the front
            (2, Some(vec![2.0, 2.0])), // on the front
            (3, Some(vec![f64::NAN, 0.0])), // NaN: never on it, and dominates nothing
            (4, None),                 // failed
            (5, Some(vec![0.5])),      // reported one objective of two
            (6, Some(vec![2.0, 3.0])), // dominated by 0 and 2
            (7, Some(vec![3.0, f64::INFINITY])), // not finite
        ];
        let on = front(&trials, &MIN2, |t| t.1.as_deref());
        let numbers: Vec<u64> = on.iter().map(|&i| trials[i].0).collect();
        assert_eq!(numbers, vec![0, 1, 2]);
        assert!(front(&trials[4..5], &MIN2, |t| t.1.as_deref()).is_empty());
    }

    #[test]
    fn the_front_in_one_pass_is_the_first_front_of_the_non_dominated_sort() {
        // Small integer values, so that many points tie on some objective or on all.
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for d in [2usize, 3, 4] {
            let goals = alternating_goals(d);
            for n in [1usize, 6, 40] {
                let points: Vec<Vec<f64>> = (0..n)
                    .map(|_| (0..d).map(|_| rng.random_range(0..5) as f64).collect())
                    .collect();
                let sorted = non_dominated_sort(&refs(&points), &goals);
                let on = front(&points, &goals, |p| Some(p.as_slice()));
                assert_eq!(on, sorted[0], "d = {d}, points {points:?}");
            }
        }
    }

    #[test]
    fn the_two_dimensional_hypervolume_of_a_linear_front_has_its_closed_form() {
        // m + 1 points evenly on x + y = 1, reference (1, 1): the staircase under them has
        // area (m - 1) / (2m).
        for m in [1usize, 2, 5, 40] {
            let points: Vec<Vec<f64>> = (0..=m)
                .map(|i| vec![i as f64 / m as f64, 1.0 - i as f64 / m as f64])
                .collect();
            let hv = hypervolume(&refs(&points), &MIN2, &[1.0, 1.0]);
            let expected = (m as f64 - 1.0) / (2.0 * m as f64);
            assert!((hv - expected).abs() < 1e-12, "m = {m}: {hv} != {expected}");
        }
    }

    #[test]
    fn the_running_hypervolume_is_that_of_the_points_so_far_after_each_one() {
        // Integer values from a small range, so that points tie, repeat, fall outside the
        // reference and dominate runs of the front; a NaN now and then.
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for d in [2usize, 3] {
            let goals = alternating_goals(d);
            let reference: Vec<f64> = goals
                .iter()
                .map(|g| match g {
                    Goal::Minimize => 8.0,
                    Goal::Maximize => 1.0,
                })
                .collect();
            for _ in 0..20 {
                let mut running = RunningHypervolume::new(&goals, &reference);
                let mut so_far: Vec<Vec<f64>> = Vec::new();
                for i in 0..60 {
                    let point: Vec<f64> = (0..d)
                        .map(|_| match rng.random_range(0..40) {
                            0 => f64::NAN,
                            v => f64::from(v % 10),
                        })
                        .collect();
                    running.add(i, &point);
                    so_far.push(point);
                    let expected = hypervolume(&refs(&so_far), &goals, &reference);
                    assert!(
                        (running.volume() - expected).abs() < 1e-9 * expected.max(1.0),
                        "d = {d}, after {so_far:?}: {} != {expected}",
                        running.volume()
                    );
                }
            }
        }
        // A reference that is not a point: no volume.
        let mut running = RunningHypervolume::new(&MIN2, &[1.0, f64::NAN]);
        assert!(running.add(0, &[0.5, 0.5]));
        assert_eq!(running.volume(), 0.0);
    }

    #[test]
    fn the_hypervolume_of_one_point_is_its_box_whatever_the_goals() {
        let goals = [Goal::Maximize, Goal::Minimize, Goal::Maximize];
        let hv = hypervolume(&[&[0.9, 2.0, 5.0]], &goals, &[0.5, 10.0, 1.0]);
        assert!((hv - 0.4 * 8.0 * 4.0).abs() < 1e-12);
        // Dominated and outside points add nothing.
        let points = [[0.9, 2.0, 5.0], [0.8, 3.0, 4.0], [0.95, 11.0, 9.0]];
        let points: Vec<&[f64]> = points.iter().map(|p| p.as_slice()).collect();
        assert!((hypervolume(&points, &goals, &[0.5, 10.0, 1.0]) - 12.8).abs() < 1e-12);
    }

    /// The hypervolume of integer points below an integer reference, by counting the unit
    /// cells some point dominates.
    fn counted(points: &[Vec<f64>], reference: usize) -> f64 {
        let d = points[0].len();
        let cells = reference.pow(d as u32);
        (0..cells)
            .filter(|&k| {
                let cell: Vec<f64> = (0..d)
                    .map(|j| ((k / reference.pow(j as u32)) % reference) as f64)
                    .collect();
                points
                    .iter()
                    .any(|p| p.iter().zip(&cell).all(|(x, c)| x <= c))
            })
            .count() as f64
    }

    #[test]
    fn the_hypervolume_in_three_and_four_dimensions_matches_a_count_of_grid_cells() {
        let mut rng = ChaCha8Rng::seed_from_u64(35);
        for (d, side) in [(3usize, 12usize), (4, 7)] {
            for round in 0..20 {
                let n = 1 + round % 9;
                let points: Vec<Vec<f64>> = (0..n)
                    .map(|_| (0..d).map(|_| rng.random_range(0..side) as f64).collect())
                    .collect();
                let goals = vec![Goal::Minimize; d];
                let hv = hypervolume(&refs(&points), &goals, &vec![side as f64; d]);
                assert_eq!(hv, counted(&points, side), "d = {d}, points {points:?}");
            }
        }
    }

    #[test]
    fn the_derived_reference_lies_past_the_worst_value_by_a_tenth_of_the_range() {
        let goals = [Goal::Maximize, Goal::Minimize];
        let points = [[0.9, 10.0], [0.7, 30.0], [f64::NAN, 99.0]];
        let points: Vec<&[f64]> = points.iter().map(|p| p.as_slice()).collect();
        let r = reference_point(&points, &goals, &[None, None]).unwrap();
        assert!(
            (r[0] - 0.68).abs() < 1e-12 && (r[1] - 32.0).abs() < 1e-12,
            "{r:?}"
        );
        // A given value is kept; a single value is widened by a tenth of its size.
        let r = reference_point(&points[..1], &goals, &[Some(0.5), None]).unwrap();
        assert_eq!(r, vec![0.5, 11.0]);
        assert_eq!(reference_point(&[], &goals, &[Some(0.5), None]), None);
        assert_eq!(
            reference_point(&[], &goals, &[Some(0.5), Some(40.0)]),
            Some(vec![0.5, 40.0])
        );
    }

    #[test]
    fn the_samplers_reference_lies_past_the_fronts_nadir_by_a_tenth_of_all_the_range() {
        // Minimised: the front is the first three (nadir (1, 1)); the fourth, dominated,
        // widens the ranges to 2 and 3. A maximised objective is turned back.
        let goals = [Goal::Maximize, Goal::Minimize];
        let points = [
            [0.0, 1.0],
            [-1.0, 0.0],
            [-0.5, 0.5],
            [-2.0, 3.0],
            [f64::NAN, 9.0],
        ];
        let points: Vec<&[f64]> = points.iter().map(|p| p.as_slice()).collect();
        let r = reference_near_front(&points, &goals, &[None, None], &[]).unwrap();
        assert!(
            (r[0] + 1.2).abs() < 1e-12 && (r[1] - 1.3).abs() < 1e-12,
            "{r:?}"
        );
        // The study's corner is past the worst trial: (-2.2, 3.3).
        let corner = reference_point(&points, &goals, &[None, None]).unwrap();
        assert!(
            (corner[0] + 2.2).abs() < 1e-12 && (corner[1] - 3.3).abs() < 1e-12,
            "{corner:?}"
        );
    }

    #[test]
    fn the_samplers_reference_is_the_studys_corner_when_the_worst_trials_are_on_the_front() {
        let points = [[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]];
        let points: Vec<&[f64]> = points.iter().map(|p| p.as_slice()).collect();
        assert_eq!(
            reference_near_front(&points, &MIN2, &[None, None], &[]),
            reference_point(&points, &MIN2, &[None, None])
        );
        // One trial: its values widened by a tenth of their size, at least 0.1.
        assert_eq!(
            reference_near_front(&[&[0.5, 30.0]], &MIN2, &[None, None], &[]),
            Some(vec![0.6, 33.0])
        );
    }

    #[test]
    fn the_samplers_reference_is_never_past_the_studys_corner_nor_before_the_nadir() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for d in [2usize, 3, 4] {
            let goals = alternating_goals(d);
            for n in [1usize, 5, 30] {
                let points: Vec<Vec<f64>> = (0..n)
                    .map(|_| (0..d).map(|_| rng.random_range(-3.0..3.0)).collect())
                    .collect();
                let none = vec![None; d];
                let near = reference_near_front(&refs(&points), &goals, &none, &[]).unwrap();
                let corner = reference_point(&refs(&points), &goals, &none).unwrap();
                let near = minimised(&near, &goals);
                let corner = minimised(&corner, &goals);
                for &i in &front(&points, &goals, |p| Some(p.as_slice())) {
                    let p = minimised(&points[i], &goals);
                    for j in 0..d {
                        assert!(p[j] < near[j] && near[j] <= corner[j], "{points:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_front_point_that_leads_by_less_than_the_tolerance_does_not_set_the_samplers_reference() {
        // Minimised, as noisy ZDT1's posterior means: the first leads the second on the first
        // objective by 0.02, within its tolerance of 0.05, and is 7 worse on the second; the
        // nadir is then that of the other three, (1, 1), widened by a tenth of the range.
        let points = [[0.0, 8.0], [0.02, 1.0], [0.5, 0.3], [1.0, 0.0]];
        let points: Vec<&[f64]> = points.iter().map(|p| p.as_slice()).collect();
        let r = reference_near_front(&points, &MIN2, &[None, None], &[0.05, 0.05]).unwrap();
        assert!(
            (r[0] - 1.1).abs() < 1e-12 && (r[1] - 1.8).abs() < 1e-12,
            "{r:?}"
        );
        // A lead beyond the tolerance keeps it: the nadir's second value is its 8.
        let r = reference_near_front(&points, &MIN2, &[None, None], &[0.01, 0.01]).unwrap();
        assert!((r[1] - 8.8).abs() < 1e-12, "{r:?}");
        // Without a tolerance, the plain front's nadir.
        let r = reference_near_front(&points, &MIN2, &[None, None], &[]).unwrap();
        assert!((r[1] - 8.8).abs() < 1e-12, "{r:?}");
    }

    #[test]
    fn a_given_reference_wins_over_the_samplers_rule() {
        let points = [[0.0, 1.0], [1.0, 0.0], [4.0, 4.0]];
        let points: Vec<&[f64]> = points.iter().map(|p| p.as_slice()).collect();
        let r = reference_near_front(&points, &MIN2, &[Some(10.0), None], &[]).unwrap();
        assert!(r[0] == 10.0 && (r[1] - 1.4).abs() < 1e-12, "{r:?}");
        assert_eq!(
            reference_near_front(&[], &MIN2, &[Some(0.5), None], &[]),
            None
        );
        assert_eq!(
            reference_near_front(&[], &MIN2, &[Some(0.5), Some(40.0)], &[]),
            Some(vec![0.5, 40.0])
        );
    }
}
