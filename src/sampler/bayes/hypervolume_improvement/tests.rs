use super::*;
use crate::sampler::bayes::acquisition::Acquisition;
use hptune_gp::{Hyperparameters, central_difference, factor, normal, stream};

/// A model of `y` at three points of the square.
fn model(y: [f64; 3], length: f64) -> Gp {
    let x = vec![vec![0.1, 0.2], vec![0.5, 0.5], vec![0.9, 0.7]];
    let hyper = Hyperparameters {
        length_scales: vec![length, 0.4],
        signal_variance: 1.0,
        noise_variance: 1e-6,
    };
    Gp::new(x, &y, &hyper).unwrap()
}

#[test]
fn with_one_objective_it_is_the_expected_improvement_running_trials_and_all() {
    let models = [model([0.0, 2.0, -1.0], 0.3)];
    let points: [&[f64]; 3] = [&[0.6, 0.45], &[0.2, 0.8], &[0.45, 0.3]];
    for running in [vec![], vec![vec![0.55, 0.5], vec![0.3, 0.35]]] {
        // The same stream draws the same values for both.
        let single = Acquisition::new(
            &models[0],
            Some(2.0),
            running.clone(),
            &mut stream(4, 0),
            None,
        )
        .unwrap();
        let count = super::super::acquisition::FANTASIES;
        let several = HypervolumeImprovement::new(
            &models,
            vec![vec![2.0], vec![1.5]],
            &[-100.0],
            running,
            count,
            &mut stream(4, 0),
        )
        .unwrap();
        let ours = several.log_many(&points);
        for (x, (a, b)) in points
            .iter()
            .zip(single.score_many(&points).iter().zip(&ours))
        {
            assert!((a - b).abs() < 1e-12, "{x:?}: {a} vs {b}");
            let (value, gradient) = several.log_with_gradient(x);
            let (expected, expected_gradient) = single.score_with_gradient(x);
            assert!((value - expected).abs() < 1e-12);
            for (g, e) in gradient.iter().zip(&expected_gradient) {
                assert!((g - e).abs() < 1e-9 * (1.0 + e.abs()), "{g} vs {e}");
            }
        }
    }
}

#[test]
fn it_agrees_with_a_brute_force_estimate_of_the_improvement_beside_a_running_trial() {
    // Two objectives; a front of two points; a trial runs near the candidate. Brute force:
    // draw both values of each objective jointly and count the hypervolume the candidate adds
    // to the front and the running trial's drawn point.
    let models = [model([0.0, 1.0, -1.0], 0.3), model([1.0, 0.5, 0.2], 0.5)];
    let front = vec![vec![1.0, 0.5], vec![0.0, 1.0]];
    let reference = [-2.0, -1.0];
    let (running, candidate) = (vec![0.55, 0.5], vec![0.62, 0.5]);
    let joint: Vec<_> = models
        .iter()
        .map(|m| {
            let (mean, covariance) = m.joint(&[running.clone(), candidate.clone()]);
            (mean, factor(covariance).unwrap().l_dirty().lower_triangle())
        })
        .collect();
    let mut rng = stream(3, 0);
    let draws = 200_000;
    let total: f64 = (0..draws)
        .map(|_| {
            let f: Vec<_> = joint
                .iter()
                .map(|(mean, lower)| mean + lower * DVector::from_fn(2, |_, _| normal(&mut rng)))
                .collect();
            let mut points = front.clone();
            points.push(vec![f[0][0], f[1][0]]);
            Boxes::new(&points, &reference).improvement(&[f[0][1], f[1][1]])
        })
        .sum();
    let brute_force = (total / draws as f64).ln();
    // Ours from 256 streams of 32 draws each: their mean is within about 0.02 (in log) of
    // the exact value; ignoring the running trial is 0.1 or more above it (below).
    let mean_of_streams = (0..256)
        .map(|n| {
            let improvement = HypervolumeImprovement::new(
                &models,
                front.clone(),
                &reference,
                vec![running.clone()],
                FANTASIES,
                &mut stream(2, n),
            )
            .unwrap();
            improvement.log_many(&[&candidate])[0].exp()
        })
        .sum::<f64>()
        / 256.0;
    let ours = mean_of_streams.ln();
    assert!((ours - brute_force).abs() < 0.05, "{ours} vs {brute_force}");
    // Without the running trial the candidate looks worth more.
    let alone =
        HypervolumeImprovement::new(&models, front, &reference, vec![], 1, &mut stream(2, 0))
            .unwrap();
    assert!(alone.log_many(&[&candidate])[0] > brute_force + 0.1);
}

#[test]
fn the_gradient_matches_finite_differences_with_running_trials() {
    let models = [model([0.0, 1.0, -1.0], 0.3), model([1.0, 0.5, 0.2], 0.5)];
    let improvement = HypervolumeImprovement::new(
        &models,
        vec![vec![1.0, 0.5], vec![0.0, 1.0]],
        &[-2.0, -1.0],
        vec![vec![0.55, 0.5], vec![0.3, 0.35]],
        FANTASIES,
        &mut stream(4, 0),
    )
    .unwrap();
    for x in [[0.6, 0.45], [0.2, 0.8], [0.45, 0.3]] {
        let (value, gradient) = improvement.log_with_gradient(&x);
        assert!((value - improvement.log_many(&[&x])[0]).abs() < 1e-12);
        for (d, analytic) in gradient.iter().enumerate() {
            let numeric = central_difference(|x| improvement.log_many(&[x])[0], &x, d);
            assert!(
                (numeric - analytic).abs() < 1e-5 * (1.0 + numeric.abs()),
                "{x:?}, {d}: {numeric} vs {analytic}"
            );
        }
    }
}

#[test]
fn the_screening_keeps_candidates_near_the_best_and_is_made_only_beside_running_trials() {
    let models = [model([0.0, 1.0, -1.0], 0.3), model([1.0, 0.5, 0.2], 0.5)];
    let front = vec![vec![1.0, 0.5], vec![0.0, 1.0]];
    let reference = [-2.0, -1.0];
    let grid: Vec<Vec<f64>> = (0..40)
        .flat_map(|i| (0..40).map(move |j| vec![f64::from(i) / 39.0, f64::from(j) / 39.0]))
        .collect();
    let points: Vec<&[f64]> = grid.iter().map(Vec::as_slice).collect();
    let alone = HypervolumeImprovement::new(
        &models,
        front.clone(),
        &reference,
        vec![],
        1,
        &mut stream(4, 0),
    )
    .unwrap();
    assert!(alone.screen_many(&points).is_none());
    // Three trials run beside three finished ones, so that the draws disagree most; the
    // search scores in full the 64 candidates best by the screening.
    let mut same = 0;
    for seed in 0..8 {
        let improvement = HypervolumeImprovement::new(
            &models,
            front.clone(),
            &reference,
            vec![vec![0.55, 0.5], vec![0.3, 0.35], vec![0.8, 0.9]],
            FANTASIES,
            &mut stream(seed, 0),
        )
        .unwrap();
        let full = improvement.log_many(&points);
        let screened = improvement.screen_many(&points).unwrap();
        let mut order: Vec<usize> = (0..points.len()).collect();
        order.sort_by(|&a, &b| screened[b].total_cmp(&screened[a]));
        let best = full.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let kept = order[..64]
            .iter()
            .map(|&i| full[i])
            .fold(f64::NEG_INFINITY, f64::max);
        // On 3 of these 8 seeds the best of all is not among them, 0.05-0.23 above their best.
        assert!(best - kept < 0.25, "seed {seed}: {kept} against {best}");
        same += usize::from(kept == best);
    }
    assert!(same >= 5, "the best candidate kept on {same} of 8 seeds");
}
