//! The space-filling start of a study: the centre of the space ([`design_point`]), then points of
//! an Owen-scrambled Sobol sequence, seeded by the study, one per trial number, so that the design
//! fills the cube evenly whatever order parallel trials finish in. The size of the space also
//! decides how far the search looks and how the values are warped: below [`MANY_PARAMETERS`] as in
//! 2-6 dimensions, from [`WHOLE_CUBE_PARAMETERS`] as in 20-50, and the middle between them by rules
//! of its own ([`is_middle`]), whose design a study's trial budget may shorten and which a short
//! budget extends down to 8 parameters. Parameters are counted as the space declares them,
//! conditional ones included.

use super::encoding::Encoding;
use crate::study::space::{Domain, Space};

/// From this many parameters on, a study affords few trials per parameter and its values
/// spread mostly with the objective's trend over the space: they are warped only where some
/// are outliers ([`has_outliers`](hptune_gp::has_outliers)), since compressing the far values
/// of a skewed spread flattens that trend. Measured in 20 to 50 dimensions (Levy by far) and
/// in 10 to 15, where the warp beside the trust region helped Rosenbrock but cost Ackley and
/// left the mixed space a categorical from its optimum (docs/bayes.md); in 2-6 dimensions the
/// warp wins.
pub(crate) const MANY_PARAMETERS: usize = 10;

/// From this many parameters on, a space with a categorical parameter is warped only where
/// its values have outliers, as with [`MANY_PARAMETERS`]. Measured at 8, 100 trials, 30 seeds:
/// the warp fitted to every value left the mixed space (doubles whose best value a categorical
/// moves) one categorical from its optimum in most seeds, and without it most runs reach the
/// optimum; on the numeric functions at 8 the warp still helps Rosenbrock, so they keep it.
/// Below 8 it is kept: on the 3-D mixed space the runs without it were level within the
/// seeds' spread (docs/bayes.md).
pub(crate) const MANY_PARAMETERS_WITH_CATEGORICALS: usize = 8;

/// The fitted warp's power from which the values of a study of
/// [`MANY_PARAMETERS_WITH_CATEGORICALS`] to [`MANY_PARAMETERS`] numeric parameters with a long
/// budget are warped (or where some are outliers): a heavy tail, as Rosenbrock's values have
/// (their power passes 3 by trial 50 of 100 at 8 parameters), not a bowl's mild skew (the
/// off-centre Rastrigin's, Ackley's and Styblinski-Tang's stay below 2.7), whose far values
/// carry the trend the model follows. Measured at 8 parameters, 100 trials, 30 seeds: the
/// off-centre Rastrigin lower (-0.07 ± 0.03 sequentially in paired mean log10), the other
/// functions level; at 9 Rastrigin lower as well but Styblinski-Tang higher (+0.10 ± 0.06);
/// with a short budget the middle keeps every warp, as a mild one helps Rosenbrock's first
/// 50 trials (docs/bayes.md).
pub(crate) const HEAVY_TAIL_POWER: f64 = 3.0;

/// From this many parameters on, the expected improvement is maximised over the whole cube,
/// not a trust region (whose box of side 0.8 is 1 % of the cube in 20 dimensions): measured
/// in 20 to 50 dimensions, where every function does as well as or better than with the
/// trust region. In 10 to 15 dimensions the trust region wins (Rosenbrock, Styblinski-Tang,
/// Rastrigin; docs/bayes.md); nothing lies between 15 and 20.
pub(crate) const WHOLE_CUBE_PARAMETERS: usize = 16;

/// The design of a study in the middle ([`is_middle`]): 13 trials, against `2D + 1` below
/// (5 to 19) and 20 above. There the trust region, not the design, explores: a smaller
/// design leaves it more trials within a fine-tuning study's budget of 50 to 100.
const MIDDLE_DESIGN: u64 = 13;

/// In the middle, a study with a trial budget spends at most one trial in this many on its
/// design: 10 of 50, still 13 from 65. At 50 trials (30 seeds) the three more guided trials
/// lowered the regret of the mixed space at 10 parameters and of every function at 15, and
/// left the rest level within the spread (docs/bayes.md).
const BUDGET_PER_DESIGN_TRIAL: u64 = 5;

/// The fewest design trials: a model of fewer points mostly echoes its prior.
const MIN_DESIGN: u64 = 5;

/// Whether the values of a study over `space` are warped only where some are outliers:
/// with [`MANY_PARAMETERS`] or more, or [`MANY_PARAMETERS_WITH_CATEGORICALS`] or more of which
/// one is categorical.
pub(crate) fn warps_only_outliers(space: &Space) -> bool {
    let has_categorical = space
        .parameters()
        .iter()
        .any(|p| matches!(p.domain, Domain::Categorical { .. }));
    let many = match has_categorical {
        true => MANY_PARAMETERS_WITH_CATEGORICALS,
        false => MANY_PARAMETERS,
    };
    space.dimension() >= many
}

/// Whether the values of a study over `space` with a trial budget of `budget` (`None`: no
/// limit) are warped only for a heavy tail ([`HEAVY_TAIL_POWER`]): from
/// [`MANY_PARAMETERS_WITH_CATEGORICALS`] numeric parameters with a budget that does not put
/// them in the middle ([`is_middle`]), below where only outliers are ([`warps_only_outliers`]).
pub(crate) fn warps_only_heavy_tails(space: &Space, budget: Option<u64>) -> bool {
    let dimension = space.dimension();
    !warps_only_outliers(space)
        && dimension >= MANY_PARAMETERS_WITH_CATEGORICALS
        && !is_middle(dimension, budget)
}

/// Whether a study of `dimension` parameters searches the whole cube
/// ([`WHOLE_CUBE_PARAMETERS`] or more) rather than a trust region.
pub(crate) fn searches_whole_cube(dimension: usize) -> bool {
    dimension >= WHOLE_CUBE_PARAMETERS
}

/// A study with fewer trials than this per parameter has a short budget
/// ([`SHORT_BUDGET_MIDDLE`]).
const SHORT_BUDGET_TRIALS_PER_PARAMETER: u64 = 10;

/// From this many parameters on, a study with a short budget (fewer than
/// [`SHORT_BUDGET_TRIALS_PER_PARAMETER`] trials per parameter: under 80 at 8) follows the
/// middle's rules below [`MANY_PARAMETERS`] too. Measured at 8 parameters over 30 seeds: at
/// 50 trials they were lower or level on all five functions of the benchmark's middle, in
/// both modes; at 100 they cost Ackley, as they do at 10-15 (docs/bayes.md).
const SHORT_BUDGET_MIDDLE: usize = 8;

/// Whether a study of `dimension` parameters and `budget` trials (`None`: no limit) is in the
/// middle: from [`MANY_PARAMETERS`] to below [`WHOLE_CUBE_PARAMETERS`] (10 to 15), a
/// fine-tuning study's size, given tens of trials, or from [`SHORT_BUDGET_MIDDLE`] with a
/// short budget. Its design is [`MIDDLE_DESIGN`] trials at most, and its trust region halves
/// after fewer failures ([`trust`](super::trust)).
pub(crate) fn is_middle(dimension: usize, budget: Option<u64>) -> bool {
    let short = budget.is_some_and(|b| b < SHORT_BUDGET_TRIALS_PER_PARAMETER * dimension as u64);
    match dimension {
        d if d >= WHOLE_CUBE_PARAMETERS => false,
        d if d >= MANY_PARAMETERS => true,
        d => d >= SHORT_BUDGET_MIDDLE && short,
    }
}

/// Number of design trials before the model proposes, for `dimension` parameters and a
/// study of `budget` trials (`None`: no limit): `2D + 1`, at least [`MIN_DESIGN`] and at most
/// 20 (past that, a model spends trials better than a design); in the middle
/// ([`is_middle`]) [`MIDDLE_DESIGN`], or a [share](BUDGET_PER_DESIGN_TRIAL) of the budget
/// where that is fewer (at least [`MIN_DESIGN`]).
pub(crate) fn initial_design_size(dimension: usize, budget: Option<u64>) -> u64 {
    match (is_middle(dimension, budget), budget) {
        (true, Some(budget)) => MIDDLE_DESIGN
            .min(budget / BUDGET_PER_DESIGN_TRIAL)
            .max(MIN_DESIGN),
        (true, None) => MIDDLE_DESIGN,
        (false, _) => (2 * dimension as u64 + 1).clamp(MIN_DESIGN, 20),
    }
}

/// The design's point for trial `index` of a study over `encoding`'s space, in unit
/// coordinates: Sobol point `index` ([`sobol_point`]), but for trial 0 every ordered parameter
/// at the middle of its range in its scale (a log-scale learning rate at the geometric mean of
/// its bounds). The centre is the start CMA-ES takes and Vizier's GP bandit seeds a study
/// with: for an optimum at any point `p`, a point `u` drawn uniformly lies farther from it
/// than the centre `c` by `D/12` in expected squared distance (`E|u - p|² = |c - p|² + D/12`),
/// and in many dimensions every point of a design lies near that expectation. A categorical
/// has no middle: it keeps the Sobol point's value.
pub(crate) fn design_point(index: u64, encoding: &Encoding<'_>, seed: u64) -> Vec<f64> {
    let mut unit = sobol_point(index, encoding.space().dimension(), seed);
    if index == 0 {
        for (parameter, u) in unit.iter_mut().enumerate() {
            if encoding.is_ordered(parameter) {
                *u = 0.5;
            }
        }
    }
    unit
}

/// Dimensions of one scrambled Sobol sequence; further dimensions reuse them with another
/// seed.
const SOBOL_DIMENSIONS: usize = 256;

/// Point `index` of the sequence for `seed`, in `[0, 1)^dimension`.
pub(crate) fn sobol_point(index: u64, dimension: usize, seed: u64) -> Vec<f64> {
    // sobol_burley indexes with u32: later points wrap, which is still a fine spread.
    let index = (index % (1 << 32)) as u32;
    (0..dimension)
        .map(|d| {
            let block = (d / SOBOL_DIMENSIONS) as u64;
            let mixed = seed ^ (seed >> 32) ^ block.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            sobol_burley::sample(index, (d % SOBOL_DIMENSIONS) as u32, mixed as u32) as f64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_design_point_is_the_centre_of_the_ordered_parameters_and_the_rest_sobols() {
        use crate::study::space::{categorical, unit_double};
        let space = Space::new(vec![
            unit_double("x"),
            categorical("c", &["a", "b", "c"]),
            unit_double("y"),
        ]);
        let encoding = Encoding::new(&space);
        let sobol = sobol_point(0, 3, 7);
        assert_eq!(design_point(0, &encoding, 7), vec![0.5, sobol[1], 0.5]);
        for index in 1..20 {
            assert_eq!(design_point(index, &encoding, 7), sobol_point(index, 3, 7));
        }
    }

    #[test]
    fn design_size_grows_with_dimension_within_bounds_outside_the_middle() {
        for budget in [None, Some(10), Some(50), Some(1000)] {
            assert_eq!(initial_design_size(1, budget), 5);
            assert_eq!(initial_design_size(2, budget), 5);
            assert_eq!(initial_design_size(6, budget), 13);
            assert_eq!(initial_design_size(16, budget), 20);
            assert_eq!(initial_design_size(300, budget), 20);
        }
        // 8 and 9 parameters with a short budget are the middle (below).
        assert_eq!(initial_design_size(9, None), 19);
        assert_eq!(initial_design_size(9, Some(1000)), 19);
    }

    #[test]
    fn the_middle_runs_from_ten_to_fifteen_parameters_with_a_design_of_thirteen() {
        for budget in [None, Some(50), Some(1000)] {
            assert!(is_middle(10, budget) && is_middle(15, budget) && !is_middle(16, budget));
        }
        assert!(!is_middle(9, None) && !is_middle(9, Some(90)) && !is_middle(16, Some(50)));
        assert_eq!(initial_design_size(10, None), MIDDLE_DESIGN);
        assert_eq!(initial_design_size(15, None), MIDDLE_DESIGN);
        assert!(!searches_whole_cube(15) && searches_whole_cube(16));
    }

    #[test]
    fn from_eight_parameters_a_short_budget_is_the_middle() {
        // Fewer than 10 trials per parameter.
        assert!(is_middle(8, Some(79)) && is_middle(9, Some(89)) && is_middle(8, Some(1)));
        assert!(!is_middle(8, Some(80)) && !is_middle(9, Some(90)) && !is_middle(8, None));
        assert!(
            !is_middle(7, Some(10)),
            "below 8 the budget changes nothing"
        );
        assert_eq!(initial_design_size(8, Some(50)), 10);
        assert_eq!(initial_design_size(9, Some(75)), MIDDLE_DESIGN);
        assert_eq!(initial_design_size(8, Some(100)), 17);
        assert_eq!(initial_design_size(7, Some(50)), 15);
    }

    #[test]
    fn in_the_middle_the_design_takes_at_most_a_fifth_of_the_budget() {
        for dimension in [10, 12, 15] {
            assert_eq!(initial_design_size(dimension, Some(100)), MIDDLE_DESIGN);
            assert_eq!(initial_design_size(dimension, Some(65)), MIDDLE_DESIGN);
            assert_eq!(initial_design_size(dimension, Some(64)), 12);
            assert_eq!(initial_design_size(dimension, Some(50)), 10);
            assert_eq!(initial_design_size(dimension, Some(30)), 6);
            assert_eq!(initial_design_size(dimension, Some(10)), MIN_DESIGN);
            assert_eq!(initial_design_size(dimension, Some(1)), MIN_DESIGN);
        }
    }

    #[test]
    fn sixteen_points_fill_each_sixteenth_of_every_axis_once() {
        let points: Vec<Vec<f64>> = (0..16).map(|i| sobol_point(i, 3, 42)).collect();
        for d in 0..3 {
            let mut cells: Vec<usize> = points.iter().map(|p| (p[d] * 16.0) as usize).collect();
            cells.sort();
            assert_eq!(cells, (0..16).collect::<Vec<_>>(), "axis {d}");
        }
    }

    #[test]
    fn the_seed_changes_the_points_and_fixes_them() {
        assert_eq!(sobol_point(3, 4, 1), sobol_point(3, 4, 1));
        assert_ne!(sobol_point(3, 4, 1), sobol_point(3, 4, 2));
        assert!(
            sobol_point(5, 600, 9)
                .iter()
                .all(|u| (0.0..1.0).contains(u))
        );
    }
}
