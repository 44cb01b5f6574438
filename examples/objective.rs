//! A trial worker that computes a known test function instead of training a model, so that
//! studies run in seconds and their optimum is known.
//!
//! ```text
//! objective --function branin --x1=2.5 --x2=7.5 [--metric loss] [--steps N] [--sleep-ms M]
//!           [--noise SD --noise-seed S] [--in-order DIR --running Q --trials N]
//! ```
//!
//! It reports like a training job: with `--steps N`, N intermediate lines
//! `step=<i> loss=<value>` whose value falls towards the final one, then `loss=<value>`.
//! Functions (all minimised): `branin` (x1 in [-5, 10], x2 in [0, 15], minimum 0.397887),
//! `hartmann6` (x1..x6 in [0, 1], minimum -3.32237), `levy` and `ackley` (any number of
//! coordinates x1..xd; minimum 0 at x = 1 and x = 0), and `mixed`, a mixed space like a
//! training job's: `--x1` a learning rate (log scale, in [1e-4, 1]), `--x2` an integer
//! (1..8), `--x3` a categorical (`relu`, `tanh`, `sigmoid`); minimum 0 at
//! (10^-2.5, 5, relu). Badly scaled ones, their values spanning orders of magnitude:
//! `goldstein-price` (x1, x2 in [-2, 2], minimum 3), `six-hump-camel` (x1 in [-3, 3], x2 in
//! [-2, 2], minimum -1.0316285) and `styblinski-tang` (x1..xd in [-5, 5], minimum
//! -39.1661657 d). `mixed-30`, a 30-parameter mixed space: `--x1`..`--x10` doubles in
//! [0, 1], `--x11`..`--x15` doubles on a log scale in [1e-4, 1], `--x16`..`--x20` integers in
//! 1..8, and `--x21`..`--x30` categoricals (`a`, `b`, `c` for x21..x25; `a`, `b`, `c`, `d` for
//! x26..x30), each of which sets the best value of one of x1..x10 as well as adding its own
//! cost; minimum 0 at the point `mixed_30` describes. `rosenbrock` and `rastrigin` (any number
//! of coordinates; minimum 0 at x = 1 and x = 0), and `mixed-many`, a mixed space of any size
//! `D` (`--x1`..`--xD`): `D - 2⌊D/4⌋` doubles in [0, 1], then `⌊D/4⌋` integers in 1..8, then
//! `⌊D/4⌋` categoricals (`a`..`d`), each of which moves the best value of one double
//! (minimum 0: [`mixed_many`]).
//!
//! Constrained ones report a second metric, `constraint`, on the final line
//! (`loss=<value> constraint=<c>`), feasible where `c` is at most a bound: `gardner`, the
//! constrained sine of Gardner et al. (2014), `cos(2 x1) cos(x2) + sin(x1)` over [0, 6]² with
//! `c = cos(x1) cos(x2) - sin(x1) sin(x2) <= 0.5` (minimum -2 at (3π/2, 0)), and
//! `branin-constrained`, Branin with `c = (x1 - 2.5)² + (x2 - 7.5)² <= 50` (minimum
//! 0.397887 at (π, 2.275)).
//!
//! With `--noise SD --noise-seed S`, Gaussian noise of standard deviation SD is added to the
//! value (not to the intermediate ones): a draw fixed by what names the evaluation (the
//! function, SD, the seed and the parameters `--x1`, `--x2`, ...), not by how the worker
//! reports or ends (`--metric`, `--steps`, `--sleep-ms`, `--in-order DIR`, `--running`,
//! `--trials`), so that the same proposals give the same values and a run repeats.
//!
//! With `--in-order DIR`, the trials of a study with `parallel_trial_count: Q` end one at a
//! time in number order, each once the next `Q - 1` trials have started: every proposal after
//! the first `Q` is made with exactly `Q - 1` trials running, as when trials of unequal length
//! end at different times, whatever the speed of the controller. Trial `k` (from
//! `HPTUNE_TRIAL_ID`) marks its start and its end with files in `DIR`, and waits for trial
//! `k - 1` to have ended and trial `k + Q - 1` (if the study has one: `--trials N`) to have
//! started; after a minute it stops waiting, so that a failed neighbour does not hang a study.

use std::collections::BTreeMap;
use std::f64::consts::PI;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("objective: {message}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let flags = parse_flags(std::env::args().skip(1))?;
    let get = |name: &str| flags.get(name).map(String::as_str);
    let function = get("function").ok_or("--function is required")?;
    let metric = get("metric").unwrap_or("loss");
    let steps: u32 = number(get("steps").unwrap_or("0"), "steps")?;
    let sleep = Duration::from_millis(number(get("sleep-ms").unwrap_or("0"), "sleep-ms")?);
    let value = match function {
        "branin" => branin(&coordinates(&flags)?)?,
        "hartmann6" => hartmann6(&coordinates(&flags)?)?,
        "levy" => levy(&coordinates(&flags)?),
        "ackley" => ackley(&coordinates(&flags)?),
        "mixed" => mixed(&flags)?,
        "mixed-30" => mixed_30(&flags)?,
        "mixed-many" => mixed_many(&flags)?,
        "rosenbrock" => rosenbrock(&coordinates(&flags)?),
        "rastrigin" => rastrigin(&coordinates(&flags)?),
        "goldstein-price" => goldstein_price(&coordinates(&flags)?)?,
        "six-hump-camel" => six_hump_camel(&coordinates(&flags)?)?,
        "styblinski-tang" => styblinski_tang(&coordinates(&flags)?),
        "gardner" => gardner(&coordinates(&flags)?)?,
        "branin-constrained" => branin(&coordinates(&flags)?)?,
        other => {
            return Err(format!(
                "unknown --function {other}: use branin, hartmann6, levy, ackley, mixed, \
                 mixed-30, mixed-many, rosenbrock, rastrigin, goldstein-price, \
                 six-hump-camel, styblinski-tang, gardner or branin-constrained"
            ));
        }
    };
    let constraint = match function {
        "gardner" => Some(gardner_constraint(&coordinates(&flags)?)?),
        "branin-constrained" => Some(branin_disk(&coordinates(&flags)?)?),
        _ => None,
    };
    let report = |value: f64| match constraint {
        Some(c) => println!("{metric}={value} constraint={c}"),
        None => println!("{metric}={value}"),
    };
    let value = match get("noise") {
        Some(sd) => {
            let seed: u64 = number(get("noise-seed").unwrap_or("0"), "noise-seed")?;
            value + number::<f64>(sd, "noise")? * standard_normal(seed, &flags)
        }
        None => value,
    };
    for step in 1..=steps {
        std::thread::sleep(sleep);
        let excess = (steps - step + 1) as f64 / steps as f64;
        println!(
            "step={step} {metric}={}",
            value + excess.abs() * (1.0 + value.abs())
        );
    }
    std::thread::sleep(sleep);
    match get("in-order") {
        Some(dir) => {
            let running: u64 = number(get("running").unwrap_or("1"), "running")?;
            let trials: u64 = number(get("trials").ok_or("--in-order needs --trials")?, "trials")?;
            end_in_order(Path::new(dir), running, trials, || report(value))
        }
        None => {
            report(value);
            Ok(())
        }
    }
}

/// Runs `report` when this trial's turn to end has come (see the module's documentation),
/// then marks the trial ended.
fn end_in_order(
    dir: &Path,
    running: u64,
    trials: u64,
    report: impl FnOnce(),
) -> Result<(), String> {
    let trial: u64 = number(
        &std::env::var("HPTUNE_TRIAL_ID").map_err(|_| "--in-order needs HPTUNE_TRIAL_ID")?,
        "HPTUNE_TRIAL_ID",
    )?;
    let mark = |event: &str, k: u64| dir.join(format!("{event}-{k}"));
    let touch = |path: std::path::PathBuf| {
        std::fs::write(&path, b"").map_err(|e| format!("{}: {e}", path.display()))
    };
    touch(mark("started", trial))?;
    let last_started = trial + running.max(1) - 1;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline
        && !((trial == 0 || mark("ended", trial - 1).exists())
            && (last_started >= trials || mark("started", last_started).exists()))
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    report();
    touch(mark("ended", trial))
}

/// `--name=value` and `--name value` pairs.
fn parse_flags(args: impl Iterator<Item = String>) -> Result<BTreeMap<String, String>, String> {
    let mut flags = BTreeMap::new();
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let name = arg
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument '{arg}': flags are --name=value"))?;
        let (name, value) = match name.split_once('=') {
            Some((name, value)) => (name.to_string(), value.to_string()),
            None => (
                name.to_string(),
                args.next()
                    .ok_or_else(|| format!("--{name} needs a value"))?,
            ),
        };
        flags.insert(name, value);
    }
    Ok(flags)
}

fn number<T: std::str::FromStr>(text: &str, name: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("--{name}: '{text}' is not a number"))
}

/// x1, x2, ... in order; stops at the first missing index.
fn coordinates(flags: &BTreeMap<String, String>) -> Result<Vec<f64>, String> {
    let mut x = Vec::new();
    while let Some(text) = flags.get(&format!("x{}", x.len() + 1)) {
        x.push(number(text, &format!("x{}", x.len() + 1))?);
    }
    if x.is_empty() {
        return Err("no coordinates: pass --x1=<value> (and --x2, ...)".into());
    }
    Ok(x)
}

fn branin(x: &[f64]) -> Result<f64, String> {
    let (x1, x2) = pair("branin", x)?;
    let b = 5.1 / (4.0 * PI * PI);
    let c = 5.0 / PI;
    let t = 1.0 / (8.0 * PI);
    Ok((x2 - b * x1 * x1 + c * x1 - 6.0).powi(2) + 10.0 * (1.0 - t) * x1.cos() + 10.0)
}

fn gardner(x: &[f64]) -> Result<f64, String> {
    let (x1, x2) = pair("gardner", x)?;
    Ok((2.0 * x1).cos() * x2.cos() + x1.sin())
}

/// Gardner's constraint, feasible at most 0.5.
fn gardner_constraint(x: &[f64]) -> Result<f64, String> {
    let (x1, x2) = pair("gardner", x)?;
    Ok(x1.cos() * x2.cos() - x1.sin() * x2.sin())
}

/// The constrained Branin's disk, feasible at most 50.
fn branin_disk(x: &[f64]) -> Result<f64, String> {
    let (x1, x2) = pair("branin-constrained", x)?;
    Ok((x1 - 2.5).powi(2) + (x2 - 7.5).powi(2))
}

fn hartmann6(x: &[f64]) -> Result<f64, String> {
    if x.len() != 6 {
        return Err(format!(
            "hartmann6 takes x1..x6, got {} coordinates",
            x.len()
        ));
    }
    const ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
    const A: [[f64; 6]; 4] = [
        [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
        [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
        [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
        [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
    ];
    const P: [[f64; 6]; 4] = [
        [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
        [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
        [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
        [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
    ];
    Ok(-(0..4)
        .map(|i| {
            let inner: f64 = (0..6).map(|j| A[i][j] * (x[j] - P[i][j]).powi(2)).sum();
            ALPHA[i] * (-inner).exp()
        })
        .sum::<f64>())
}

fn levy(x: &[f64]) -> f64 {
    let w: Vec<f64> = x.iter().map(|xi| 1.0 + (xi - 1.0) / 4.0).collect();
    let d = w.len();
    let middle: f64 = w[..d - 1]
        .iter()
        .map(|wi| (wi - 1.0).powi(2) * (1.0 + 10.0 * (PI * wi + 1.0).sin().powi(2)))
        .sum();
    (PI * w[0]).sin().powi(2)
        + middle
        + (w[d - 1] - 1.0).powi(2) * (1.0 + (2.0 * PI * w[d - 1]).sin().powi(2))
}

fn ackley(x: &[f64]) -> f64 {
    let d = x.len() as f64;
    let squares = x.iter().map(|v| v * v).sum::<f64>() / d;
    let cosines = x.iter().map(|v| (2.0 * PI * v).cos()).sum::<f64>() / d;
    -20.0 * (-0.2 * squares.sqrt()).exp() - cosines.exp() + 20.0 + std::f64::consts::E
}

/// A learning rate whose best value depends on the activation, a layer count, and the
/// activation itself.
fn mixed(flags: &BTreeMap<String, String>) -> Result<f64, String> {
    let get = |name: &str| {
        flags
            .get(name)
            .ok_or_else(|| format!("mixed takes --x1, --x2 and --x3; --{name} is missing"))
    };
    let rate: f64 = number(get("x1")?, "x1")?;
    let layers: f64 = number(get("x2")?, "x2")?;
    let (best_log_rate, penalty) = match get("x3")?.as_str() {
        "relu" => (-2.5, 0.0),
        "tanh" => (-2.0, 0.3),
        "sigmoid" => (-1.5, 0.6),
        other => return Err(format!("--x3: '{other}' is not relu, tanh or sigmoid")),
    };
    if rate <= 0.0 {
        return Err(format!("--x1: {rate} is not a positive learning rate"));
    }
    Ok(0.5 * (rate.log10() - best_log_rate).powi(2) + 0.05 * (layers - 5.0).powi(2) + penalty)
}

/// The best value of double `x{1+i}` when categorical `x{21+i}` has its `k`-th value.
fn mixed_30_target(i: usize, k: usize) -> f64 {
    0.15 + 0.7 * ((3 * k + i) % 7) as f64 / 6.0
}

/// 30 parameters of four kinds whose categoricals interact with doubles: each categorical
/// adds a cost (0 for its best value, rising by 0.2 per step away from it) and moves the best
/// value of one double, as an optimizer's choice moves the best learning rate. The minimum,
/// 0: categorical `x{21+i}` at its value number `i mod n` (from 0; `n` its number of values,
/// 3 for i < 5, else 4), each double `x{1+i}` at the target that value sets
/// ([`mixed_30_target`]), `log10 x{11+j} = -3 + j/2` and `x{16+j} = 2 + j` for j in 0..5.
fn mixed_30(flags: &BTreeMap<String, String>) -> Result<f64, String> {
    let get = |i: usize| {
        flags
            .get(&format!("x{i}"))
            .ok_or_else(|| format!("mixed-30 takes --x1..--x30; --x{i} is missing"))
    };
    let mut total = 0.0;
    for i in 0..10 {
        let values = if i < 5 { 3 } else { 4 };
        let text = get(21 + i)?;
        let k = ["a", "b", "c", "d"][..values]
            .iter()
            .position(|v| v == text)
            .ok_or_else(|| {
                format!(
                    "--x{}: '{text}' is not one of the first {values} of a, b, c, d",
                    21 + i
                )
            })?;
        let best = i % values;
        let steps = (k + values - best) % values;
        let x: f64 = number(get(1 + i)?, &format!("x{}", 1 + i))?;
        total += 0.2 * steps as f64 + 4.0 * (x - mixed_30_target(i, k)).powi(2);
    }
    for j in 0..5 {
        let rate: f64 = number(get(11 + j)?, &format!("x{}", 11 + j))?;
        if rate <= 0.0 {
            return Err(format!("--x{}: {rate} is not positive", 11 + j));
        }
        total += 0.5 * (rate.log10() - (-3.0 + 0.5 * j as f64)).powi(2);
        let count: f64 = number(get(16 + j)?, &format!("x{}", 16 + j))?;
        total += 0.05 * (count - (2.0 + j as f64)).powi(2);
    }
    Ok(total)
}

/// `D` parameters of three kinds (`--x1`..`--xD`): with `k = ⌊D/4⌋`,
/// doubles `x1..x{D-2k}` in [0, 1], integers `x{D-2k+1}..x{D-k}` in 1..8 and categoricals
/// `x{D-k+1}..xD` of values `a`..`d`. Categorical `j` adds 0.2 per step its value is away from
/// value `j mod 4` and sets the best value of double `j` ([`mixed_30_target`]); the other
/// doubles' best values are fixed, and integer `j` is best at `2 + j mod 6`. Minimum 0.
fn mixed_many(flags: &BTreeMap<String, String>) -> Result<f64, String> {
    let dimension = (1..)
        .take_while(|i| flags.contains_key(&format!("x{i}")))
        .count();
    let kinds = dimension / 4;
    let doubles = dimension - 2 * kinds;
    let get = |i: usize| {
        flags
            .get(&format!("x{i}"))
            .ok_or_else(|| format!("mixed-many takes --x1..--x{dimension}; --x{i} is missing"))
    };
    let mut targets: Vec<f64> = (0..doubles).map(|i| mixed_30_target(i, 0)).collect();
    let mut total = 0.0;
    for (j, target) in targets.iter_mut().enumerate().take(kinds) {
        let text = get(doubles + kinds + 1 + j)?;
        let k = ["a", "b", "c", "d"]
            .iter()
            .position(|v| v == text)
            .ok_or_else(|| {
                format!(
                    "--x{}: '{text}' is not a, b, c or d",
                    doubles + kinds + 1 + j
                )
            })?;
        total += 0.2 * ((k + 4 - j % 4) % 4) as f64;
        *target = mixed_30_target(j, k);
        let count: f64 = number(get(doubles + 1 + j)?, &format!("x{}", doubles + 1 + j))?;
        total += 0.05 * (count - (2 + j % 6) as f64).powi(2);
    }
    for (i, target) in targets.iter().enumerate() {
        let x: f64 = number(get(1 + i)?, &format!("x{}", 1 + i))?;
        total += 4.0 * (x - target).powi(2);
    }
    Ok(total)
}

/// A standard normal draw fixed by `seed` and the flags that name the evaluation
/// ([`names_the_evaluation`]; Box-Muller of two hashed uniforms).
fn standard_normal(seed: u64, flags: &BTreeMap<String, String>) -> f64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let evaluation: BTreeMap<&String, &String> = flags
        .iter()
        .filter(|(name, _)| names_the_evaluation(name))
        .collect();
    let uniform = |stream: u64| {
        let mut hasher = DefaultHasher::new();
        (seed, stream, &evaluation).hash(&mut hasher);
        // 53 random bits in (0, 1].
        ((hasher.finish() >> 11) + 1) as f64 / (1u64 << 53) as f64
    };
    (-2.0 * uniform(0).ln()).sqrt() * (2.0 * PI * uniform(1)).cos()
}

/// Whether flag `name` says what is evaluated (the function, the noise, a parameter `x<i>`)
/// rather than how the worker reports or ends: `--in-order`'s folder, a fresh one each run,
/// made the noise of a study's asynchronous runs differ from run to run.
fn names_the_evaluation(name: &str) -> bool {
    matches!(name, "function" | "noise" | "noise-seed")
        || name
            .strip_prefix('x')
            .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// Two coordinates, or an error naming the function.
fn pair(name: &str, x: &[f64]) -> Result<(f64, f64), String> {
    match x {
        [x1, x2] => Ok((*x1, *x2)),
        _ => Err(format!(
            "{name} takes x1 and x2, got {} coordinates",
            x.len()
        )),
    }
}

fn goldstein_price(x: &[f64]) -> Result<f64, String> {
    let (x1, x2) = pair("goldstein-price", x)?;
    let a = 1.0
        + (x1 + x2 + 1.0).powi(2)
            * (19.0 - 14.0 * x1 + 3.0 * x1 * x1 - 14.0 * x2 + 6.0 * x1 * x2 + 3.0 * x2 * x2);
    let b = 30.0
        + (2.0 * x1 - 3.0 * x2).powi(2)
            * (18.0 - 32.0 * x1 + 12.0 * x1 * x1 + 48.0 * x2 - 36.0 * x1 * x2 + 27.0 * x2 * x2);
    Ok(a * b)
}

fn six_hump_camel(x: &[f64]) -> Result<f64, String> {
    let (x1, x2) = pair("six-hump-camel", x)?;
    Ok((4.0 - 2.1 * x1 * x1 + x1.powi(4) / 3.0) * x1 * x1
        + x1 * x2
        + (-4.0 + 4.0 * x2 * x2) * x2 * x2)
}

fn styblinski_tang(x: &[f64]) -> f64 {
    0.5 * x
        .iter()
        .map(|v| v.powi(4) - 16.0 * v * v + 5.0 * v)
        .sum::<f64>()
}

fn rosenbrock(x: &[f64]) -> f64 {
    x.windows(2)
        .map(|w| 100.0 * (w[1] - w[0] * w[0]).powi(2) + (1.0 - w[0]).powi(2))
        .sum()
}

fn rastrigin(x: &[f64]) -> f64 {
    x.iter()
        .map(|v| v * v - 10.0 * (2.0 * PI * v).cos() + 10.0)
        .sum()
}
