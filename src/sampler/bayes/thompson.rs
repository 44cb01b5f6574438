//! Thompson sampling: one draw of the objective from the joint posterior over a set of
//! candidate points, and the candidate where that draw is highest (as TuRBO proposes the
//! points of a batch). Unlike the expected improvement of a model that already believes the
//! running trials, each draw is another plausible objective, so proposals made while others
//! are running spread over the places that could be best instead of avoiding one another.

use nalgebra::DVector;
use rand_chacha::ChaCha8Rng;

use super::encoding::Encoding;
use super::gp::{Gp, GpError, factor};
use super::search::{candidates, normal};
use super::trust::Region;

/// Quasi-random candidates over the region; the perturbations of the best points come on
/// top. The cost of a draw is cubic in the number of candidates.
const GLOBAL_CANDIDATES: u64 = 256;

/// The unit point inside `region` where one posterior draw of `gp` is highest, among
/// quasi-random candidates over the region (from `sobol_seed`) and perturbations of the best
/// points `incumbents` (from `rng`, which also drives the draw).
pub fn propose(
    encoding: &Encoding<'_>,
    gp: &Gp,
    incumbents: &[Vec<f64>],
    region: &Region,
    rng: &mut ChaCha8Rng,
    sobol_seed: u64,
) -> Result<Vec<f64>, GpError> {
    let dimension = encoding.space().dimension();
    let units = candidates(
        dimension,
        incumbents,
        region,
        rng,
        sobol_seed,
        GLOBAL_CANDIDATES,
    );
    let features: Vec<Vec<f64>> = units.iter().map(|u| encoding.at(u).1).collect();
    let best = argmax_of_draw(gp, &features, rng)?;
    Ok(units[best].clone())
}

/// The index of the highest value of one joint posterior draw of `gp` at `points`
/// (features), or an error when the posterior covariance cannot be factored even with jitter.
pub fn argmax_of_draw(
    gp: &Gp,
    points: &[Vec<f64>],
    rng: &mut ChaCha8Rng,
) -> Result<usize, GpError> {
    if points.is_empty() {
        return Err(GpError::Empty);
    }
    let (mean, covariance) = gp.joint(points);
    let cholesky = factor(covariance)?;
    let noise = DVector::from_fn(points.len(), |_, _| normal(rng));
    let draw = mean + cholesky.l_dirty().lower_triangle() * noise;
    Ok(draw
        .iter()
        .enumerate()
        .reduce(|best, next| if next.1 > best.1 { next } else { best })
        .map_or(0, |(i, _)| i))
}

#[cfg(test)]
mod tests {
    use super::super::gp::Hyperparameters;
    use super::super::search::stream;
    use super::*;

    fn gp() -> Gp {
        let x = vec![vec![0.1], vec![0.5], vec![0.9]];
        let hyper = Hyperparameters {
            length_scales: vec![0.2],
            signal_variance: 1.0,
            noise_variance: 1e-6,
        };
        Gp::new(x, &[0.0, 2.0, -1.0], &hyper).unwrap()
    }

    fn grid(n: usize) -> Vec<Vec<f64>> {
        (0..n).map(|i| vec![i as f64 / (n - 1) as f64]).collect()
    }

    #[test]
    fn the_same_stream_gives_the_same_draw_and_others_differ() {
        let (gp, points) = (gp(), grid(41));
        let draw = |stream_number| argmax_of_draw(&gp, &points, &mut stream(3, stream_number));
        assert_eq!(draw(7), draw(7));
        let picks: std::collections::BTreeSet<usize> = (0..40).map(|n| draw(n).unwrap()).collect();
        assert!(picks.len() > 1, "{picks:?}");
    }

    #[test]
    fn draws_pick_near_the_best_point_more_often_than_elsewhere() {
        let (gp, points) = (gp(), grid(41));
        let near = (0..100)
            .map(|n| argmax_of_draw(&gp, &points, &mut stream(1, n)).unwrap())
            .filter(|&i| (points[i][0] - 0.5).abs() <= 0.2)
            .count();
        assert!(near > 60, "{near} of 100 near the best point");
    }

    #[test]
    fn the_joint_posterior_agrees_with_pointwise_predictions() {
        let (gp, points) = (gp(), grid(5));
        let (mean, covariance) = gp.joint(&points);
        assert_eq!((mean.len(), covariance.shape()), (5, (5, 5)));
        for (i, p) in points.iter().enumerate() {
            let (m, v) = gp.predict(p);
            assert!((mean[i] - m).abs() < 1e-10);
            assert!((covariance[(i, i)].max(1e-12) - v).abs() < 1e-9);
        }
        assert!((&covariance - covariance.transpose()).amax() < 1e-12);
    }

    #[test]
    fn the_proposal_is_a_candidate_inside_the_region_and_repeatable() {
        let space = crate::space::Space::new(vec![crate::space::unit_double("a")]);
        let encoding = Encoding::new(&space);
        let region = Region {
            lower: vec![0.3],
            upper: vec![0.6],
        };
        let pick = |n| {
            propose(
                &encoding,
                &gp(),
                &[vec![0.5]],
                &region,
                &mut stream(4, n),
                9,
            )
        };
        let unit = pick(0).unwrap();
        assert!((0.3..=0.6).contains(&unit[0]), "{unit:?}");
        assert_eq!(pick(0), Ok(unit));
    }

    #[test]
    fn no_point_is_an_error_not_a_panic() {
        assert_eq!(
            argmax_of_draw(&gp(), &[], &mut stream(0, 0)),
            Err(GpError::Empty)
        );
    }
}
