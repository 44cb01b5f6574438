//! Maximising the acquisition over a region, the trust region ([`super::trust`]) or, with
//! [16 parameters or more](super::design::WHOLE_CUBE_PARAMETERS), the whole cube: many quasi-random
//! candidates over the region plus perturbations of the best points so far, each rounded to
//! an allowed point before it is scored; then the best few climb: L-BFGS along their
//! continuous coordinates, inside the region, and one discrete step at a time (a categorical
//! changed, an integer moved by one) while a step raises the acquisition, each step refined
//! again. In a study with constraints a region with nothing worth a trial left is searched
//! again as the whole cube ([`propose`]).

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::acquisition::Acquisition;
use super::data::INCUMBENTS;
use super::design::sobol_point;
use super::encoding::Encoding;
use super::trust::Region;
use hptune_gp::{minimize, normal};

/// Quasi-random candidates over the whole cube.
const GLOBAL_CANDIDATES: u64 = 1024;
/// Perturbed copies of each of the best points.
const LOCAL_CANDIDATES: usize = 128;
/// Standard deviation of a perturbation, in unit coordinates.
const LOCAL_SPREAD: f64 = 0.05;
/// Candidates refined by gradient.
const REFINED: usize = 5;
/// Candidates scored in one call of [`Acquisition::score_many`], one chunk per task.
const SCORED_TOGETHER: usize = 256;
/// Candidates scored in full after a screening ([`Acquisition::screen_many`]), the best by it.
const SCREENED: usize = 64;
/// Evaluations of the acquisition per refinement.
const REFINE_EVALUATIONS: u64 = 30;
/// Discrete steps at most in one climb ([`climb`]).
const CLIMB_STEPS: usize = 10;

/// A point of the search, by its unit coordinates, with its score.
#[derive(Debug, Clone)]
struct Scored {
    unit: Vec<f64>,
    score: f64,
}

/// The log acquisition below which a search has found nothing worth a trial: an expected
/// improvement (times the probability of feasibility, where the study has constraints) under
/// a thousandth of the values' standard deviation.
const NEGLIGIBLE: f64 = -6.907_755_278_982_137;

/// The unit point to propose: where the acquisition is highest inside `region`; with
/// `widen`, where the region has nothing worth a trial left ([`NEGLIGIBLE`]: the search there
/// has converged on its incumbent), the better of that and the maximum over the whole cube.
/// The other arguments are [`maximize`]'s.
pub(crate) fn propose(
    encoding: &Encoding<'_>,
    acquisition: &Acquisition<'_>,
    incumbents: &[Vec<f64>],
    region: &Region,
    widen: bool,
    rng: &mut ChaCha8Rng,
    sobol_seed: u64,
) -> Vec<f64> {
    let (unit, score) = maximize(encoding, acquisition, incumbents, region, rng, sobol_seed);
    if !widen || score >= NEGLIGIBLE {
        return unit;
    }
    let whole = Region::whole(encoding.space().dimension());
    let (wide, wide_score) = maximize(encoding, acquisition, incumbents, &whole, rng, sobol_seed);
    if wide_score > score { wide } else { unit }
}

/// The unit point (one coordinate per parameter) inside `region` where the acquisition is
/// highest among the candidates and their refinements. `incumbents` are the unit points of
/// the best observations, best first; `rng` drives the perturbations and `sobol_seed` the
/// quasi-random candidates. Returns the point and its log acquisition.
pub(crate) fn maximize(
    encoding: &Encoding<'_>,
    acquisition: &Acquisition<'_>,
    incumbents: &[Vec<f64>],
    region: &Region,
    rng: &mut ChaCha8Rng,
    sobol_seed: u64,
) -> (Vec<f64>, f64) {
    let dimension = encoding.space().dimension();
    let candidates = candidates(
        encoding,
        incumbents,
        region,
        rng,
        sobol_seed,
        GLOBAL_CANDIDATES,
    );
    let mut scored = screen_all(encoding, acquisition, candidates);
    best_first(&mut scored);
    scored.truncate(REFINED);
    let refined: Vec<Scored> = scored
        .into_par_iter()
        .map(|start| climb(encoding, acquisition, region, start))
        .collect();
    highest(refined)
        .map(|best| (best.unit, best.score))
        .unwrap_or_else(|| (vec![0.5; dimension], f64::NEG_INFINITY))
}

/// The unit points `units` with their acquisition, in their order: scored in chunks of
/// [`SCORED_TOGETHER`] on every core.
fn score_all(
    encoding: &Encoding<'_>,
    acquisition: &Acquisition<'_>,
    units: Vec<Vec<f64>>,
) -> Vec<Scored> {
    let scores = chunked(encoding, &units, |features| {
        Some(acquisition.score_many(features))
    })
    .unwrap_or_default();
    with_scores(units, scores)
}

/// The unit points `units`, or where the acquisition has a cheaper estimate
/// ([`Acquisition::screen_many`]) the [`SCREENED`] best of them by it, with their acquisition.
fn screen_all(
    encoding: &Encoding<'_>,
    acquisition: &Acquisition<'_>,
    units: Vec<Vec<f64>>,
) -> Vec<Scored> {
    let Some(screens) = chunked(encoding, &units, |features| {
        acquisition.screen_many(features)
    }) else {
        return score_all(encoding, acquisition, units);
    };
    let mut screened = with_scores(units, screens);
    best_first(&mut screened);
    screened.truncate(SCREENED);
    score_all(
        encoding,
        acquisition,
        screened.into_iter().map(|s| s.unit).collect(),
    )
}

/// `score` of the features of `units`, in chunks of [`SCORED_TOGETHER`] on every core, in
/// their order; `None` where `score` has none.
fn chunked(
    encoding: &Encoding<'_>,
    units: &[Vec<f64>],
    score: impl Fn(&[Vec<f64>]) -> Option<Vec<f64>> + Sync,
) -> Option<Vec<f64>> {
    let chunks: Option<Vec<Vec<f64>>> = units
        .par_chunks(SCORED_TOGETHER)
        .map(|chunk| {
            let features: Vec<Vec<f64>> = chunk.iter().map(|u| encoding.at(u).1).collect();
            score(&features)
        })
        .collect();
    chunks.map(|chunks| chunks.concat())
}

/// `units` paired with `scores`, in order.
fn with_scores(units: Vec<Vec<f64>>, scores: Vec<f64>) -> Vec<Scored> {
    units
        .into_iter()
        .zip(scores)
        .map(|(unit, score)| Scored { unit, score })
        .collect()
}

/// Sorts `points` by score, highest first, in a stable, total order: ties keep the order of
/// generation, so the result is repeatable.
fn best_first(points: &mut [Scored]) {
    points.sort_by(|a, b| b.score.total_cmp(&a.score));
}

/// The point of highest score, the first of equal ones; a NaN score never wins.
fn highest(points: impl IntoIterator<Item = Scored>) -> Option<Scored> {
    points
        .into_iter()
        .reduce(|best, next| if next.score > best.score { next } else { best })
}

/// Unit points inside `region` for the parameters of `encoding`: `global` scrambled-Sobol
/// points over it (from `sobol_seed`), then perturbations of each of the best `incumbents`
/// (drawn from `rng`), moved into it: a moved ordered coordinate by a Gaussian step, a moved
/// categorical to a value drawn afresh (no value of it is nearer than another).
pub(crate) fn candidates(
    encoding: &Encoding<'_>,
    incumbents: &[Vec<f64>],
    region: &Region,
    rng: &mut ChaCha8Rng,
    sobol_seed: u64,
    global: u64,
) -> Vec<Vec<f64>> {
    let dimension = encoding.space().dimension();
    let mut candidates: Vec<Vec<f64>> = (0..global)
        .map(|i| region.at(&sobol_point(i, dimension, sobol_seed)))
        .collect();
    // Each perturbation moves about min(D, 4) coordinates, so that in many dimensions the
    // local candidates stay local.
    let move_probability = (4.0 / dimension.max(1) as f64).min(1.0);
    for incumbent in incumbents.iter().take(INCUMBENTS) {
        for _ in 0..LOCAL_CANDIDATES {
            let mut unit = incumbent.clone();
            for (index, u) in unit.iter_mut().enumerate() {
                if rng.random::<f64>() < move_probability {
                    *u = match encoding.is_ordered(index) {
                        true => *u + LOCAL_SPREAD * normal(rng),
                        false => rng.random(),
                    };
                }
            }
            region.clamp(&mut unit);
            candidates.push(unit);
        }
    }
    candidates
}

/// Climbs the acquisition from `start`: [`refine`]d along its continuous coordinates, then
/// moved to the best of its [`Encoding::neighbours`] inside `region` and refined again, for
/// as long as a step raises the score (at most [`CLIMB_STEPS`]). Gradients cannot move a
/// categorical or an integer, and random candidates change many of them at once: without
/// these steps a point whose doubles are right and one categorical wrong is rarely proposed
/// (Optuna's GPSampler likewise alternates gradient steps with a sweep of discrete values).
fn climb(
    encoding: &Encoding<'_>,
    acquisition: &Acquisition<'_>,
    region: &Region,
    start: Scored,
) -> Scored {
    let mut best = refine(encoding, acquisition, region, start);
    for _ in 0..CLIMB_STEPS {
        // A neighbour's coordinate is the centre of its value's slice; moved into the region,
        // it is kept where it still gives that value (the region may reach into the slice
        // without covering its centre).
        let here = encoding.space().from_unit(&best.unit);
        let neighbours: Vec<Vec<f64>> = encoding
            .neighbours(&best.unit)
            .into_iter()
            .filter_map(|mut unit| {
                region.clamp(&mut unit);
                (encoding.space().from_unit(&unit) != here).then_some(unit)
            })
            .collect();
        match highest(score_all(encoding, acquisition, neighbours)) {
            Some(step) if step.score > best.score => {
                best = refine(encoding, acquisition, region, step);
            }
            _ => break,
        }
    }
    best
}

/// Climbs the acquisition from `start` along its continuous coordinates, inside `region`.
fn refine(
    encoding: &Encoding<'_>,
    acquisition: &Acquisition<'_>,
    region: &Region,
    start: Scored,
) -> Scored {
    let (assignment, features) = encoding.at(&start.unit);
    let moving = encoding.continuous(&assignment);
    if moving.is_empty() {
        return start;
    }
    let from: Vec<f64> = moving.iter().map(|&(p, _)| start.unit[p]).collect();
    let objective = |u: &[f64]| {
        let mut x = features.clone();
        for (&(_, f), ui) in moving.iter().zip(u) {
            x[f] = *ui;
        }
        let (value, gradient) = acquisition.score_with_gradient(&x);
        Some((-value, moving.iter().map(|&(_, f)| -gradient[f]).collect()))
    };
    let lower: Vec<f64> = moving.iter().map(|&(p, _)| region.lower[p]).collect();
    let upper: Vec<f64> = moving.iter().map(|&(p, _)| region.upper[p]).collect();
    let Some((u, _)) = minimize(objective, &from, &lower, &upper, REFINE_EVALUATIONS) else {
        return start;
    };
    let mut unit = start.unit.clone();
    for (&(p, _), ui) in moving.iter().zip(&u) {
        unit[p] = *ui;
    }
    // Scored again through the space, in case a moved value changes which parameters are
    // active.
    let (_, features) = encoding.at(&unit);
    let score = acquisition.score(&features);
    if score > start.score {
        Scored { unit, score }
    } else {
        start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::{Domain, ParamValue, Parameter, Space, categorical, unit_double};
    use hptune_gp::{Gp, Hyperparameters, stream};

    /// A GP of `y` at `x` with these length scales, unit signal variance and `noise`.
    fn model(x: Vec<Vec<f64>>, y: &[f64], length_scales: Vec<f64>, noise: f64) -> Gp {
        let hyper = Hyperparameters {
            length_scales,
            signal_variance: 1.0,
            noise_variance: noise,
        };
        Gp::new(x, y, &hyper).unwrap()
    }

    /// The expected improvement of `gp` over its best posterior mean, no trial running.
    fn expected_improvement(gp: &Gp) -> Acquisition<'_> {
        Acquisition::new(
            gp,
            Some(gp.best_mean()),
            Vec::new(),
            &mut stream(0, 0),
            None,
        )
        .unwrap()
    }

    #[test]
    fn the_climb_changes_categoricals_one_at_a_time_where_gradients_cannot() {
        // Eight switches and a double; the value falls by one for each switch off its
        // target ("on" for the even ones) and is flat in the double.
        let switch = |i: usize| categorical(&format!("s{i}"), &["on", "off"]);
        let mut parameters: Vec<Parameter> = (0..8).map(switch).collect();
        parameters.push(unit_double("x"));
        let space = Space::new(parameters);
        let encoding = Encoding::new(&space);
        let target = |i: usize| if i.is_multiple_of(2) { "on" } else { "off" };
        let misses = |u: &[f64]| {
            let assignment = space.from_unit(u);
            (0..8)
                .filter(|&i| assignment[&format!("s{i}")] != ParamValue::Str(target(i).into()))
                .count()
        };
        let units: Vec<Vec<f64>> = (0..64).map(|i| sobol_point(i, 9, 3)).collect();
        let x: Vec<Vec<f64>> = units.iter().map(|u| encoding.at(u).1).collect();
        let y: Vec<f64> = units.iter().map(|u| -(misses(u) as f64)).collect();
        let gp = model(x, &y, vec![1.5; encoding.width()], 1e-6);
        let acquisition = expected_improvement(&gp);
        // Every switch on target but s0 and s3.
        let on = 0.25;
        let off = 0.75;
        let mut start: Vec<f64> = (0..8)
            .map(|i: usize| if i.is_multiple_of(2) { on } else { off })
            .collect();
        start[0] = off;
        start[3] = on;
        start.push(0.5);
        assert_eq!(misses(&start), 2);
        let score = acquisition.score(&encoding.at(&start).1);
        let whole = Region::whole(9);
        let refined = refine(
            &encoding,
            &acquisition,
            &whole,
            Scored {
                unit: start.clone(),
                score,
            },
        );
        assert_eq!(misses(&refined.unit), 2, "gradients move the double only");
        let climbed = climb(
            &encoding,
            &acquisition,
            &whole,
            Scored { unit: start, score },
        );
        assert_eq!(
            misses(&climbed.unit),
            0,
            "{:?}",
            space.from_unit(&climbed.unit)
        );
        assert!(climbed.score > refined.score);
    }

    #[test]
    fn the_climb_steps_to_an_integer_whose_slice_the_region_only_reaches_into() {
        let space = Space::new(vec![Parameter {
            id: "layers".into(),
            domain: Domain::Integer {
                min: 1,
                max: 5,
                scale: crate::study::space::Scale::Linear,
                grid_points: None,
            },
            condition: None,
        }]);
        let encoding = Encoding::new(&space);
        // Values rising with the integer, observed at 1..4: 5 looks best.
        let units: Vec<Vec<f64>> = (1..=4).map(|v| vec![(v as f64 - 0.5) / 5.0]).collect();
        let x: Vec<Vec<f64>> = units.iter().map(|u| encoding.at(u).1).collect();
        let y: Vec<f64> = (1..=4).map(|v| v as f64).collect();
        let gp = model(x, &y, vec![1.0], 1e-6);
        let acquisition = expected_improvement(&gp);
        // Around 4 (centre 0.7): the region reaches into 5's slice [0.8, 1] but not its
        // centre 0.9.
        let region = Region {
            lower: vec![0.55],
            upper: vec![0.85],
        };
        let start = vec![0.7];
        let score = acquisition.score(&encoding.at(&start).1);
        let climbed = climb(
            &encoding,
            &acquisition,
            &region,
            Scored { unit: start, score },
        );
        assert_eq!(space.from_unit(&climbed.unit)["layers"], ParamValue::Int(5));
        assert!(
            (0.55..=0.85).contains(&climbed.unit[0]),
            "{:?}",
            climbed.unit
        );
    }

    #[test]
    fn a_converged_region_is_left_for_the_cube_only_when_widening() {
        let space = Space::new(vec![unit_double("a"), unit_double("b")]);
        let encoding = Encoding::new(&space);
        // A peak at (0.1, 0.1), sampled densely around it, and three poor points far away:
        // the model knows the peak's neighbourhood and little of the middle of the cube.
        let mut x: Vec<Vec<f64>> = (0..25)
            .map(|i| vec![0.05 + 0.025 * (i % 5) as f64, 0.05 + 0.025 * (i / 5) as f64])
            .collect();
        x.extend([vec![0.9, 0.9], vec![0.5, 0.95], vec![0.95, 0.5]]);
        let y: Vec<f64> = x
            .iter()
            .map(|p| match p[0] + p[1] > 1.0 {
                true => -1.0,
                false => -50.0 * ((p[0] - 0.1).powi(2) + (p[1] - 0.1).powi(2)),
            })
            .collect();
        let gp = model(x, &y, vec![0.3, 0.3], 1e-8);
        let acquisition = expected_improvement(&gp);
        let tiny = Region {
            lower: vec![0.09, 0.09],
            upper: vec![0.11, 0.11],
        };
        let incumbents = [vec![0.1, 0.1]];
        let inside = |u: &[f64]| u.iter().all(|v| (0.09..=0.11).contains(v));
        let (_, score) = maximize(
            &encoding,
            &acquisition,
            &incumbents,
            &tiny,
            &mut stream(1, 0),
            7,
        );
        assert!(score < NEGLIGIBLE, "the region is exhausted: {score}");
        let run = |region: &Region, widen| {
            propose(
                &encoding,
                &acquisition,
                &incumbents,
                region,
                widen,
                &mut stream(1, 0),
                7,
            )
        };
        assert!(inside(&run(&tiny, false)));
        let wide = run(&tiny, true);
        assert!(!inside(&wide), "{wide:?}");
        let (_, wide_score) = maximize(
            &encoding,
            &acquisition,
            &incumbents,
            &Region::whole(2),
            &mut stream(1, 0),
            7,
        );
        assert!(wide_score > NEGLIGIBLE, "{wide_score}");
        // A region with improvement left to expect is searched alone, widening or not.
        let half = Region {
            lower: vec![0.0, 0.0],
            upper: vec![0.6, 0.6],
        };
        assert_eq!(run(&half, true), run(&half, false));
    }

    #[test]
    fn the_proposal_stays_inside_the_region_even_when_the_acquisition_peaks_outside() {
        let space = Space::new(vec![unit_double("a"), unit_double("b")]);
        let encoding = Encoding::new(&space);
        // Values rise towards (1, 1); the region is a small box near the origin.
        let x: Vec<Vec<f64>> = (0..9)
            .map(|i| vec![(i % 3) as f64 / 2.0, (i / 3) as f64 / 2.0])
            .collect();
        let y: Vec<f64> = x.iter().map(|p| p[0] + p[1] - 1.0).collect();
        let gp = model(x, &y, vec![0.5, 0.5], 1e-6);
        let acquisition =
            Acquisition::new(&gp, Some(1.0), Vec::new(), &mut stream(0, 0), None).unwrap();
        let region = Region {
            lower: vec![0.1, 0.2],
            upper: vec![0.3, 0.25],
        };
        let everywhere = Region {
            lower: vec![0.0; 2],
            upper: vec![1.0; 2],
        };
        let incumbents = [vec![0.2, 0.22]];
        let within = maximize(
            &encoding,
            &acquisition,
            &incumbents,
            &region,
            &mut stream(1, 0),
            7,
        )
        .0;
        assert!(
            (0.1..=0.3).contains(&within[0]) && (0.2..=0.25).contains(&within[1]),
            "{within:?}"
        );
        // The upper corner of the box is the best point of the region; the whole cube's is
        // far beyond it.
        assert!(within[0] > 0.29 && within[1] > 0.24, "{within:?}");
        let free = maximize(
            &encoding,
            &acquisition,
            &incumbents,
            &everywhere,
            &mut stream(1, 0),
            7,
        )
        .0;
        assert!(free[0] + free[1] > 1.5, "{free:?}");
    }
}
