//! The Bayesian sampler's time per proposal in long studies, without running the trials: it
//! feeds the sampler (the code `hptune run` calls) N finished trials in 6 dimensions (D with
//! `--dimension=D`) and times the proposals of trials N-2 to N+2, as `bench/bayes.py
//! --timing-at` does from a real Hartmann6 study's log, in a fraction of the time.
//!
//! ```text
//! cargo run --release --example proposal_time -- [--dimension=D] [N ...]
//!     (default: 6 dimensions; 100 500 1000 2000 5000 trials)
//! ```
//!
//! The trials are synthetic, shaped like those of a search that has converged: a quarter
//! uniform over the cube, the rest Gaussian around the minimum of a rippled bowl with a spread
//! that shrinks from 0.2 to 0.01 over the study. The sampler runs the proposal of trial N-3 first
//! (untimed), so that it holds the fit of the last checkpoint, as in a running study.

use std::path::Path;
use std::time::Instant;

use hptune::sampler::{BayesSampler, Observation, ProposalContext, Sampler};
use hptune::study::Goal;
use hptune::study::space::{Assignment, ParamValue};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The centre of the trials, where the objective is lowest (repeated past 6 dimensions).
const MINIMUM: [f64; 6] = [0.2, 0.15, 0.48, 0.28, 0.31, 0.66];

/// The centre's coordinates in `dimension` dimensions.
fn minimum(dimension: usize) -> impl Iterator<Item = f64> {
    MINIMUM.into_iter().cycle().take(dimension)
}

/// A rippled bowl: the squared distance to [`MINIMUM`] plus ripples of a tenth of its scale.
fn objective(x: &[f64]) -> f64 {
    x.iter()
        .zip(minimum(x.len()))
        .map(|(x, m)| (x - m).powi(2) + 0.01 * (1.0 - (40.0 * (x - m)).cos()))
        .sum()
}

/// `n` finished trials in `dimension` dimensions shaped like a converged search's (see the
/// module's documentation).
fn history(n: usize, dimension: usize) -> Vec<Observation> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    (0..n)
        .map(|k| {
            let spread = 0.2 * (0.05f64).powf(k as f64 / n as f64);
            let x: Vec<f64> = minimum(dimension)
                .map(|m| {
                    if k < 20 || rng.random::<f64>() < 0.25 {
                        rng.random::<f64>()
                    } else {
                        // Box-Muller.
                        let (u, v): (f64, f64) = (rng.random(), rng.random());
                        let z = (-2.0 * u.max(f64::MIN_POSITIVE).ln()).sqrt()
                            * (std::f64::consts::TAU * v).cos();
                        (m + spread * z).clamp(0.0, 1.0)
                    }
                })
                .collect();
            let params: Assignment = x
                .iter()
                .enumerate()
                .map(|(i, &v)| (format!("x{}", i + 1), ParamValue::Float(v)))
                .collect();
            Observation {
                number: k as u64,
                params,
                value: Some(objective(&x)),
                values: Vec::new(),
                feasible: true,
                constraint_values: Default::default(),
            }
        })
        .collect()
}

/// The CPU time this process's threads have run, in milliseconds (Linux: the sum of
/// `/proc/self/task/*/schedstat`); on a shared machine it is the cost of a proposal where the
/// wall time also counts the waits for a core.
fn cpu_millis() -> f64 {
    let tasks = std::fs::read_dir("/proc/self/task").expect("Linux's /proc/self/task");
    let nanos: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    nanos as f64 / 1e6
}

fn main() {
    let (flags, counts): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a.starts_with("--"));
    let dimension: usize = match flags.as_slice() {
        [] => 6,
        [flag] => flag
            .strip_prefix("--dimension=")
            .and_then(|d| d.parse().ok())
            .expect("the one flag is --dimension=D"),
        _ => panic!("the one flag is --dimension=D"),
    };
    let sizes: Vec<usize> = counts
        .iter()
        .map(|a| a.parse().expect("each argument is a trial count"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![100, 500, 1000, 2000, 5000]
    } else {
        sizes
    };
    let parameters: String = (1..=dimension)
        .map(|i| format!("  - {{id: x{i}, type: double, min: 0.0, max: 1.0}}\n"))
        .collect();
    let text = format!(
        "name: proposal-time\nobjective: {{metric: loss, goal: minimize}}\n\
         max_trial_count: 10000\nparameters:\n{parameters}trial: {{command: [\"true\"]}}\n"
    );
    let study =
        hptune::spec::parse(Path::new("proposal-time.yaml"), &text).expect("the study file");
    println!(
        "| trials | wall time, median of trials N-2..N+2 | slowest of them | CPU time, median |"
    );
    println!("|---|---|---|---|");
    for n in sizes {
        let all = history(n + 3, dimension);
        let mut sampler = BayesSampler::new(0);
        let mut propose = |length: usize| {
            let (start, cpu) = (Instant::now(), cpu_millis());
            sampler
                .propose(&ProposalContext {
                    space: &study.space,
                    goal: Goal::Minimize,
                    goals: &[Goal::Minimize],
                    constraints: &study.constraints,
                    number: length as u64,
                    history: &all[..length],
                    prior: &[],
                    running: &[],
                    parallel: 1,
                    curves: &[],
                })
                .expect("a proposal");
            (start.elapsed().as_secs_f64() * 1000.0, cpu_millis() - cpu)
        };
        propose(n.saturating_sub(3));
        let (mut wall, mut cpu): (Vec<f64>, Vec<f64>) =
            (n.saturating_sub(2)..=n + 2).map(&mut propose).unzip();
        wall.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        println!(
            "| {n} | {:.1} ms | {:.1} ms | {:.1} ms |",
            wall[2], wall[4], cpu[2]
        );
    }
}
