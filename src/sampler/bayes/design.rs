//! The space-filling start of a study: points of an Owen-scrambled Sobol sequence, seeded by
//! the study, one per trial number, so that the design fills the cube evenly whatever order
//! parallel trials finish in. The size of the space also decides how far the search looks
//! ([`MANY_PARAMETERS`]).

use crate::study::space::Space;

/// From this many parameters on, a study affords few trials per parameter and its values
/// spread mostly with the objective's trend over the space: the expected improvement is
/// maximised over the whole cube, not a trust region (whose box of side 0.8 is 1 % of the
/// cube in 20 dimensions), and the values are warped only where some are outliers
/// ([`has_outliers`](crate::gp::has_outliers)), since compressing the far values of a skewed spread flattens that
/// trend. Measured in 20 to 50 dimensions, where every function does as well as or better
/// than with the trust region and the warp (Ackley, a 30-parameter mixed space; Levy by far);
/// in 2-6 dimensions those two win (docs/bayes.md), and no benchmark lies between. Parameters
/// are counted as the space declares them, conditional ones included.
pub(crate) const MANY_PARAMETERS: usize = 10;

/// Whether `space` has [`MANY_PARAMETERS`] or more.
pub(crate) fn has_many_parameters(space: &Space) -> bool {
    space.dimension() >= MANY_PARAMETERS
}

/// Number of design trials before the model proposes: `2D + 1` for `D` parameters, at least
/// 5 (a model of fewer points mostly echoes its prior) and at most 20 (past that, a model
/// spends trials better than a design).
pub(crate) fn initial_design_size(dimension: usize) -> u64 {
    (2 * dimension as u64 + 1).clamp(5, 20)
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
    fn design_size_grows_with_dimension_within_bounds() {
        assert_eq!(initial_design_size(1), 5);
        assert_eq!(initial_design_size(2), 5);
        assert_eq!(initial_design_size(6), 13);
        assert_eq!(initial_design_size(300), 20);
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
