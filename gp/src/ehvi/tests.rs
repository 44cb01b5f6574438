use super::*;
use crate::log_ei::log_ei;
use crate::random::{normal, stream};

/// The improvement of `y` counted cell by cell: unit cells of the integer lattice inside
/// `[reference, y)` that no point dominates (every coordinate an integer).
fn counted(points: &[Vec<f64>], reference: &[f64], y: &[f64]) -> f64 {
    let m = reference.len();
    let ranges: Vec<std::ops::Range<i64>> = (0..m)
        .map(|j| reference[j] as i64..y[j].max(reference[j]) as i64)
        .collect();
    let mut cells = vec![Vec::new()];
    for range in &ranges {
        cells = cells
            .into_iter()
            .flat_map(|c: Vec<i64>| {
                range.clone().map(move |v| {
                    let mut c = c.clone();
                    c.push(v);
                    c
                })
            })
            .collect();
    }
    // A cell [c, c + 1) is dominated when some point is at or above its upper corner.
    cells
        .iter()
        .filter(|c| {
            !points
                .iter()
                .any(|p| p.iter().zip(c.iter()).all(|(v, &ci)| *v >= (ci + 1) as f64))
        })
        .count() as f64
}

/// The Monte-Carlo mean of the improvement of independent Gaussian objectives, and its
/// standard error.
fn monte_carlo(boxes: &Boxes, predictions: &[(f64, f64)], draws: usize) -> (f64, f64) {
    let mut rng = stream(11, 0);
    let (mut sum, mut squares) = (0.0, 0.0);
    for _ in 0..draws {
        let y: Vec<f64> = predictions
            .iter()
            .map(|(m, v)| m + v.sqrt() * normal(&mut rng))
            .collect();
        let i = boxes.improvement(&y);
        sum += i;
        squares += i * i;
    }
    let mean = sum / draws as f64;
    let error = ((squares / draws as f64 - mean * mean) / draws as f64).sqrt();
    (mean, error)
}

fn front_2d() -> Vec<Vec<f64>> {
    // A front of four, a dominated point and one below the reference.
    vec![
        vec![1.0, 6.0],
        vec![3.0, 5.0],
        vec![4.0, 2.0],
        vec![6.0, 1.0],
        vec![2.0, 2.0],
        vec![7.0, -1.0],
    ]
}

fn front_3d() -> Vec<Vec<f64>> {
    vec![
        vec![5.0, 1.0, 1.0],
        vec![1.0, 5.0, 2.0],
        vec![2.0, 2.0, 4.0],
        vec![3.0, 3.0, 2.0],
        vec![1.0, 1.0, 1.0],
        vec![4.0, 1.0, 3.0],
    ]
}

#[test]
fn the_improvement_is_the_volume_no_point_dominates_below_the_new_one() {
    let reference2 = [0.0, 0.0];
    let boxes = Boxes::new(&front_2d(), &reference2);
    assert_eq!(boxes.len(), 5, "four points of the front, five boxes");
    let reference3 = [0.0, 0.0, 0.0];
    let boxes3 = Boxes::new(&front_3d(), &reference3);
    for a in 0..8 {
        for b in 0..8 {
            let y = [f64::from(a), f64::from(b)];
            assert_eq!(
                boxes.improvement(&y),
                counted(&front_2d(), &reference2, &y),
                "{y:?}"
            );
            for c in [0, 2, 3, 5] {
                let y = [f64::from(a), f64::from(b), f64::from(c)];
                assert_eq!(
                    boxes3.improvement(&y),
                    counted(&front_3d(), &reference3, &y),
                    "{y:?}"
                );
            }
        }
    }
}

#[test]
fn with_one_objective_it_is_log_ei_over_the_best() {
    let boxes = Boxes::new(&[vec![0.3], vec![1.2], vec![-0.4]], &[-3.0]);
    assert_eq!(boxes.len(), 1);
    for (mean, variance) in [(0.5, 0.2), (1.2, 1e-3), (-20.0, 0.5), (3.0, 2.0)] {
        let ours = boxes.log_expected_improvement(&[(mean, variance)]);
        let ei = log_ei(mean, variance, 1.2);
        assert!((ours - ei).abs() < 1e-12, "{mean}: {ours} vs {ei}");
    }
}

#[test]
fn it_agrees_with_monte_carlo_in_two_and_three_objectives() {
    // Each: the known points, the reference, the candidate's (mean, variance) per objective.
    type Case = (Vec<Vec<f64>>, Vec<f64>, Vec<(f64, f64)>);
    let cases: [Case; 4] = [
        (front_2d(), vec![0.0, 0.0], vec![(3.5, 1.0), (4.0, 2.0)]),
        (front_2d(), vec![-1.0, 0.5], vec![(2.0, 0.3), (2.5, 0.5)]),
        (
            front_3d(),
            vec![0.0, 0.0, 0.0],
            vec![(3.0, 1.0), (2.5, 1.5), (2.5, 0.8)],
        ),
        (
            front_3d(),
            vec![0.5, 0.0, -1.0],
            vec![(2.0, 0.2), (4.0, 0.5), (1.0, 2.0)],
        ),
    ];
    for (points, reference, predictions) in cases {
        let boxes = Boxes::new(&points, &reference);
        let ours = boxes.log_expected_improvement(&predictions).exp();
        let (estimate, error) = monte_carlo(&boxes, &predictions, 400_000);
        assert!(
            (ours - estimate).abs() < 4.0 * error,
            "{predictions:?}: {ours} vs {estimate} ± {error}"
        );
    }
}

#[test]
fn far_from_the_front_it_stays_finite_and_rises_towards_it() {
    let boxes = Boxes::new(&front_3d(), &[0.0, 0.0, 0.0]);
    let mut last = f64::NEG_INFINITY;
    for mean in [-200.0, -60.0, -30.0, -10.0, 0.0] {
        let log = boxes.log_expected_improvement(&[(mean, 0.5), (mean, 0.5), (mean, 0.5)]);
        assert!(log.is_finite() && log > last, "{mean}: {log}");
        last = log;
    }
}

#[test]
fn the_gradient_matches_finite_differences_near_and_far() {
    // Each objective's mean and variance are linear in the point x: μ_j = a_j·x + shift.
    let a = [[0.8, -0.3], [-0.5, 0.6], [0.2, 0.9]];
    let b = [[0.05, 0.02], [0.01, 0.04], [0.03, -0.01]];
    let at = |x: &[f64], shift: f64| -> Vec<Prediction> {
        (0..3)
            .map(|j| Prediction {
                mean: 2.0 + a[j][0] * x[0] + a[j][1] * x[1] + shift,
                variance: 0.2 + b[j][0] * x[0] + b[j][1] * x[1],
                mean_gradient: a[j].to_vec(),
                variance_gradient: b[j].to_vec(),
            })
            .collect()
    };
    for (boxes, shift) in [
        (Boxes::new(&front_3d(), &[0.0, 0.0, 0.0]), 0.0),
        (Boxes::new(&front_3d(), &[0.0, 0.0, 0.0]), -4.0),
        (Boxes::new(&front_3d(), &[0.0, 0.0, 0.0]), -40.0),
        (Boxes::new(&sphere_front(), &[-1.1, -1.1, -1.1]), -2.5),
        (Boxes::new(&sphere_front(), &[-1.1, -1.1, -1.1]), -40.0),
    ] {
        let x = [0.4, 0.7];
        let value = |x: &[f64]| {
            let p: Vec<(f64, f64)> = at(x, shift).iter().map(|p| (p.mean, p.variance)).collect();
            boxes.log_expected_improvement(&p)
        };
        let (log, gradient) = boxes.log_expected_improvement_with_gradient(&at(&x, shift));
        assert!((log - value(&x)).abs() < 1e-12);
        for (d, analytic) in gradient.iter().enumerate() {
            let numeric = crate::central_difference(value, &x, d);
            assert!(
                (numeric - analytic).abs() < 1e-5 * (1.0 + numeric.abs()),
                "shift {shift}, d {d}: {numeric} vs {analytic}"
            );
        }
    }
}

/// Forty points on the sphere of radius 1 around the origin in three objectives, each
/// coordinate negative: a front whose region splits into 861 boxes.
fn sphere_front() -> Vec<Vec<f64>> {
    let mut rng = stream(5, 0);
    (0..40)
        .map(|_| {
            let v: Vec<f64> = (0..3).map(|_| normal(&mut rng).abs()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            v.iter().map(|x| -x / norm).collect()
        })
        .collect()
}

/// `log E[improvement]` box by box: each box's log, the sum of its objectives' `log (ψ(l) -
/// ψ(u))` with `log ψ` from [`log_ei`], then the log of the sum of their exponentials.
fn box_by_box(boxes: &Boxes, predictions: &[(f64, f64)]) -> f64 {
    let logs: Vec<f64> = boxes
        .boxes
        .iter()
        .map(|b| {
            b.iter()
                .zip(predictions)
                .enumerate()
                .map(|(j, (&side, &(mean, variance)))| {
                    let (l, u) = boxes.bands[j][side];
                    let lower = log_ei(mean, variance, boxes.bounds[j][l]);
                    u.map_or(lower, |u| {
                        let upper = log_ei(mean, variance, boxes.bounds[j][u]);
                        lower + (-(upper - lower).exp()).ln_1p()
                    })
                })
                .sum()
        })
        .collect();
    let peak = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    peak + logs.iter().map(|l| (l - peak).exp()).sum::<f64>().ln()
}

#[test]
fn on_a_front_of_forty_points_it_is_the_sum_of_its_boxes_near_and_far() {
    let boxes = Boxes::new(&sphere_front(), &[-1.1, -1.1, -1.1]);
    assert_eq!(boxes.len(), 861);
    // The last two are far enough that every box's term underflows.
    for (mean, variance) in [
        (-0.5, 0.05),
        (-0.6, 0.3),
        (-2.0, 0.1),
        (-30.0, 0.5),
        (-200.0, 0.5),
        (-5.0, 1e-3),
    ] {
        let predictions = [
            (mean, variance),
            (mean + 0.1, variance),
            (mean, 2.0 * variance),
        ];
        let ours = boxes.log_expected_improvement(&predictions);
        let reference = box_by_box(&boxes, &predictions);
        assert!(
            (ours - reference).abs() < 1e-12 * reference.abs().max(1.0),
            "{mean}, {variance}: {ours} vs {reference}"
        );
    }
}
