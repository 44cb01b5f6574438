//! The Bayesian sampler's time per proposal in long studies, without running the trials: it
//! feeds the sampler (the code `hptune run` calls) N finished trials in 6 dimensions (D with
//! `--dimension=D`) and times the proposals of trials N-2 to N+2, as `bench/bayes.py
//! --timing-at` does from a real Hartmann6 study's log, in a fraction of the time.
//!
//! ```text
//! cargo run --release --example proposal_time -- [--dimension=D] [N ...]
//!     (default: 6 dimensions; 100 500 1000 2000 5000 trials)
//! cargo run --release --example proposal_time -- --curves [N ...]   (default: 50 100 150)
//! ```
//!
//! The trials are synthetic, shaped like those of a search that has converged: a quarter
//! uniform over the cube, the rest Gaussian around the minimum of a rippled bowl with a spread
//! that shrinks from 0.2 to 0.01 over the study. The sampler runs the proposal of trial N-3 first
//! (untimed), so that it holds the fit of the last checkpoint, as in a running study.
//!
//! With `--curves` the study is `bench/multifidelity.py`'s shape (4 parameters, ASHA with
//! rungs at steps 1, 3, 9 and 27, the sampler modelling the learning curves): of every 27
//! trials 18 stopped at step 1, 6 at step 3, 2 at step 9 and one ran to step 27, and 3 more run,
//! 1 to 5 steps along, while each proposal is made.

use std::path::Path;
use std::time::Instant;

use hptune::sampler::{Observation, ProposalContext, TrialCurve};
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

/// The step where trial `k` of the `--curves` study ended: of every 27 trials, 18 at step 1,
/// 6 at step 3, 2 at step 9 and one at step 27.
fn last_step(k: usize) -> i64 {
    match k % 27 {
        0 => 27,
        1 | 2 => 9,
        3..=8 => 3,
        _ => 1,
    }
}

/// The loss of the `--curves` study at `step`: it falls from 2 towards the rippled bowl's
/// value, faster where `x3` is small.
fn curve_loss(x: &[f64], step: i64) -> f64 {
    let last = objective(&[x[0], x[1], x[2], x[3], MINIMUM[4], MINIMUM[5]]);
    let rate = 0.25 + (1.0 - x[2]).powi(2);
    last + (2.0 - last) * (-rate * step as f64).exp()
}

/// The values of `x1` to `x4`.
fn first_four(params: &Assignment) -> Vec<f64> {
    (1..=4)
        .map(|i| match params[&format!("x{i}")] {
            ParamValue::Float(v) => v,
            ref other => panic!("x{i} is {other:?}, not a float"),
        })
        .collect()
}

/// A trial's learning curve up to step `upto`.
fn curve(trial: &Observation, upto: i64) -> TrialCurve {
    let x = first_four(&trial.params);
    TrialCurve {
        number: trial.number,
        params: trial.params.clone(),
        points: (1..=upto).map(|s| (s, curve_loss(&x, s))).collect(),
    }
}

/// How many points the model reads from a curve that reached `last`: rungs 1, 3, 9, 27 up to
/// it, and `last` itself.
fn model_points(last: i64) -> usize {
    [1, 3, 9, 27].iter().filter(|&&r| r < last).count() + 1
}

/// The study file of `dimension` parameters, ASHA's block where `curves` says.
fn study(dimension: usize, curves: bool) -> hptune::study::Study {
    let parameters: String = (1..=dimension)
        .map(|i| format!("  - {{id: x{i}, type: double, min: 0.0, max: 1.0}}\n"))
        .collect();
    let asha = match curves {
        true => {
            "early_stopping: {rule: asha, min_resource: 1, reduction_factor: 3, max_resource: 27}\n"
        }
        false => "",
    };
    let text = format!(
        "name: proposal-time\nobjective: {{metric: loss, goal: minimize}}\n\
         max_trial_count: 10000\nparameters:\n{parameters}{asha}trial: {{command: [\"true\"]}}\n"
    );
    hptune::spec::parse(Path::new("proposal-time.yaml"), &text).expect("the study file")
}

fn main() {
    let (flags, counts): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a.starts_with("--"));
    let (curves, dimension) = match flags.as_slice() {
        [] => (false, 6),
        [flag] if flag == "--curves" => (true, 6),
        [flag] => (
            false,
            flag.strip_prefix("--dimension=")
                .and_then(|d| d.parse().ok())
                .expect("the flags are --dimension=D and --curves (4 parameters), one of them"),
        ),
        _ => panic!("the flags are --dimension=D and --curves (4 parameters), one of them"),
    };
    let sizes: Vec<usize> = counts
        .iter()
        .map(|a| a.parse().expect("each argument is a trial count"))
        .collect();
    let sizes = match (sizes.is_empty(), curves) {
        (false, _) => sizes,
        (true, false) => vec![100, 500, 1000, 2000, 5000],
        (true, true) => vec![50, 100, 150],
    };
    let study = study(if curves { 4 } else { dimension }, curves);
    println!(
        "| trials | curve points | wall time, median of trials N-2..N+2 | slowest of them | CPU time, median |"
    );
    println!("|---|---|---|---|---|");
    for n in sizes {
        let mut all = history(n + 6, dimension);
        if curves {
            for trial in &mut all {
                let x = first_four(&trial.params);
                let last = last_step(trial.number as usize);
                trial.params.retain(|id, _| id.as_str() <= "x4");
                trial.value = (last == 27).then(|| curve_loss(&x, 27));
            }
        }
        let mut sampler = hptune::sampler::for_study(&study).expect("a sampler");
        let mut points = 0;
        let mut propose = |length: usize| {
            // Trials `length..length + 3` run, 1 to 5 steps along.
            let running: Vec<Assignment> = match curves {
                true => all[length..length + 3]
                    .iter()
                    .map(|t| t.params.clone())
                    .collect(),
                false => Vec::new(),
            };
            let read: Vec<TrialCurve> = match curves {
                true => all[..length + 3]
                    .iter()
                    .enumerate()
                    .map(|(k, t)| match k.checked_sub(length) {
                        Some(r) => curve(t, (r + length % 3 + 1) as i64),
                        None => curve(t, last_step(k)),
                    })
                    .collect(),
                false => Vec::new(),
            };
            points = read
                .iter()
                .map(|c| model_points(c.points.len() as i64))
                .sum::<usize>();
            let (start, cpu) = (Instant::now(), cpu_millis());
            sampler
                .propose(&ProposalContext {
                    space: &study.space,
                    goal: Goal::Minimize,
                    goals: &[Goal::Minimize],
                    constraints: &study.constraints,
                    number: (length + running.len()) as u64,
                    history: &all[..length],
                    prior: &[],
                    running: &running,
                    parallel: 1,
                    curves: &read,
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
            "| {n} | {points} | {:.1} ms | {:.1} ms | {:.1} ms |",
            wall[2], wall[4], cpu[2]
        );
    }
}
