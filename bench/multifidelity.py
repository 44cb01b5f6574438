#!/usr/bin/env python3
"""Multi-fidelity benchmark: hptune's Bayesian sampler modelling learning curves under ASHA,
against the same sampler on final values alone (`fidelity: off`), random search + ASHA, and
Optuna's TPE with HyperbandPruner and with SuccessiveHalvingPruner, on one simulated clock.

One command: `python3 bench/multifidelity.py [--seeds N] [--first-seed S] [--horizon UNITS]
[--unit-ms MS] [--jobs J] [--hptune PATH]`; `python3 bench/multifidelity.py --summarise FILE...`
prints the tables of several runs' result files (bench/results/multifidelity-*.json) over their
seeds. It creates bench/.venv (git-ignored) with Optuna, runs target/bench/hptune (see `HPTUNE`;
`--hptune PATH` runs another build, to compare two builds on one script), and prints Markdown
tables. Each hptune run prints a line to stderr: its trials, how many failed, its wall time, its
final regret and how far its real order strayed from the simulated clock (`order_departure`); a
run whose trials make no step for `STALL_S` seconds fails.

The function: 4 parameters, `x1 ∈ [-5, 10]`, `x2 ∈ [0, 15]` (Branin's), `x3, x4 ∈ [0, 1]`.
A configuration's final loss (at step R = 27) is `branin(x1, x2) / 10 + 0.5 (x3 - 0.75)² +
0.3 (x4 - 0.3)²` (minimum 0.0397887); its curve falls from `2 + 0.5 x4` at step 0 to it,
`f + (s - f)(e^{-k r} - e^{-k R}) / (1 - e^{-k R})` at step `r`, at a configuration-dependent
rate `k = 0.25 + (1 - x3)²`: configurations with small `x3` learn fast and end worse, so the
curves cross between steps 3 and 9 and early ranks mislead. Every reported value has Gaussian
noise (standard deviation 0.02) fixed by the seed, the configuration and the step.

The clock: every step costs one simulated unit. The worker (this script, `worker`) sleeps
`--unit-ms` per step so that the real run keeps the simulated order; the bench's clock is the
sum of simulated units: the trials, in number order, are list-scheduled on 4 workers (each
starts when the first of the 4 is free), each lasting the steps it reported. Optuna's runs are
simulated directly on the same clock: 4 workers, one step per unit, each trial reported and
pruned step by step, a new trial asked when a worker is free. hptune runs the real controller
(`hptune run`, 4 parallel trials, ASHA min_resource 1, reduction_factor 3, max_resource 27)
until the horizon is past on that clock.

Regret at time t: the noise-free final loss of the completed trial (one that reached step 27)
with the best observed final value among those completed by t, minus the minimum; 10 before
the first. Reported per method: the final regret at the horizon (median [Q1, Q3] over seeds),
the area under log10 regret over the horizon (mean over time, median over seeds), and for the
curve model the share of the horizon it takes to reach the final regret of `bayesian` + ASHA
(fidelity off) of the same seed.
"""

import argparse
import heapq
import json
import math
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
R = 27
WORKERS = 4
NOISE = 0.02
OPTIMUM = 0.397887 / 10
CAP = 10.0
# Seconds without a step after which a run has hung (a step takes --unit-ms).
STALL_S = 60
# hptune built with the workspace's own crates optimised as well (the dev profile's are not): a
# release build (opt-level 3 throughout), `cargo build --release --bin hptune && mkdir -p
# target/bench && cp target/release/hptune target/bench/`, or the dev profile at opt-level 3,
# `CARGO_PROFILE_DEV_OPT_LEVEL=3 cargo build --bin hptune && cp target/debug/hptune target/bench/`.
HPTUNE = ROOT / "target" / "bench" / "hptune"
BOUNDS = {"x1": (-5.0, 10.0), "x2": (0.0, 15.0), "x3": (0.0, 1.0), "x4": (0.0, 1.0)}


def branin(x1, x2):
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def final_loss(x):
    return branin(x["x1"], x["x2"]) / 10 + 0.5 * (x["x3"] - 0.75) ** 2 + 0.3 * (x["x4"] - 0.3) ** 2


def loss(x, step, seed):
    """The noisy loss reported at `step`."""
    f, s = final_loss(x), 2.0 + 0.5 * x["x4"]
    k = 0.25 + (1 - x["x3"]) ** 2
    clean = f + (s - f) * (math.exp(-k * step) - math.exp(-k * R)) / (1 - math.exp(-k * R))
    key = f"{seed}|{step}|" + "|".join(f"{x[p]:.12g}" for p in sorted(x))
    return clean + random.Random(key).gauss(0.0, NOISE)


def worker(argv):
    """The trial worker: `worker --seed S --unit-ms MS --x1=.. --x2=.. --x3=.. --x4=..`."""
    args = dict(a.lstrip("-").split("=", 1) for a in argv if "=" in a)
    x = {p: float(args[p]) for p in BOUNDS}
    seed, unit = int(args["seed"]), float(args["unit-ms"]) / 1000
    value = None
    for step in range(1, R + 1):
        time.sleep(unit)
        value = loss(x, step, seed)
        print(f"step={step} loss={value}", flush=True)
    print(f"loss={value}", flush=True)


def schedule(trials):
    """The simulated end of each trial (number order, its steps so far), list-scheduled on
    the workers, and when the next trial would start."""
    free = [0.0] * WORKERS
    ends = []
    for trial in trials:
        start = heapq.heappop(free)
        end = start + trial["steps"]
        heapq.heappush(free, end)
        ends.append(end)
    return ends, free[0]


def regret_curve(completions):
    """(time, regret) steps from completions (end, observed final, clean final), by time."""
    best, curve = None, []
    for end, observed, clean in sorted(completions):
        if best is None or observed < best[0]:
            best = (observed, clean)
            curve.append((end, clean - OPTIMUM))
    return curve


def regret_at(curve, t):
    value = CAP
    for end, regret in curve:
        if end <= t:
            value = regret
    return value


def area(curve, horizon):
    """Mean of log10 regret over [0, horizon]."""
    points = [(0.0, CAP)] + [(e, r) for e, r in curve if e <= horizon] + [(horizon, None)]
    total = 0.0
    for (t0, r0), (t1, _) in zip(points, points[1:]):
        total += (t1 - t0) * math.log10(max(r0, 1e-12))
    return total / horizon


def run_hptune(hptune, variant, seed, horizon, unit_ms, work):
    algorithm, fidelity = {"model": ("bayesian", "model"), "bayesian": ("bayesian", "off"),
                           "random": ("random", "off")}[variant]
    params = "\n".join(f"  - {{id: {p}, type: double, min: {lo}, max: {hi}}}"
                       for p, (lo, hi) in BOUNDS.items())
    study = work / f"{variant}-{seed}.yaml"
    study.write_text(f"""name: mf-{variant}-{seed}
objective: {{metric: loss, goal: minimize}}
parameters:
{params}
algorithm: {algorithm}
max_trial_count: 2000
parallel_trial_count: {WORKERS}
seed: {seed}
early_stopping: {{rule: asha, min_resource: 1, reduction_factor: 3, max_resource: {R}, fidelity: {fidelity}}}
trial:
  command: [{sys.executable}, {ROOT / 'bench' / 'multifidelity.py'}, worker, --seed={seed}, --unit-ms={unit_ms}]
  timeout: 5m
""")
    db = work / f"{variant}-{seed}.db"
    started = time.time()
    # The controller's lines (one per trial that ends) go to a file: a pipe nobody reads fills
    # at 64 KiB, some 300 trials, and the controller then blocks writing to it.
    err = work / f"{variant}-{seed}.err"
    with open(err, "w") as stderr:
        process = subprocess.Popen(
            [str(hptune), "run", str(study), "--storage", f"sqlite://{db}",
             "--log-dir", str(work / f"logs-{variant}-{seed}")],
            cwd=work, stdout=subprocess.DEVNULL, stderr=stderr)
    # Past the horizon on the simulated clock (checked every second), the study is interrupted;
    # one whose trials make no step for STALL_S seconds has hung, and the run fails.
    progress, moved = None, time.time()
    while process.poll() is None:
        time.sleep(1.0)
        trials = read_trials(db)
        # A running trial's steps so far bound its end from below: once the next trial would
        # start past the horizon, nothing more ends before it.
        if schedule(trials)[1] > horizon:
            process.send_signal(signal.SIGINT)
            break
        now = len(trials), sum(t["steps"] for t in trials)
        if now != progress:
            progress, moved = now, time.time()
        elif time.time() - moved > STALL_S:
            process.kill()
            raise RuntimeError(f"{variant} seed {seed}: no trial made a step for {STALL_S} s "
                               f"({len(trials)} trials); the controller's last lines are in {err}")
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
    return read_trials(db), time.time() - started


def read_trials(db):
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        rows = con.execute(
            "SELECT t.id, t.number, t.state, t.params, t.value, "
            "(SELECT MAX(m.step) FROM measurements m WHERE m.trial_id = t.id AND m.attempt = t.attempt), "
            "t.created_at, t.finished_at FROM trials t ORDER BY t.number").fetchall()
        con.close()
    except sqlite3.Error:
        return []
    trials = []
    for _id, number, state, params, value, steps, created, finished in rows:
        if state == "pending" and not steps:
            continue
        x = {k: float(v) for k, v in json.loads(params).items()}
        trials.append({"number": number, "state": state, "x": x, "value": value,
                       "steps": steps or 0, "created": created, "finished": finished})
    return trials


def order_departure(trials):
    """How far the real run strayed from the simulated clock: over the trials, the largest
    difference between the trials finished (in real time) when it was created and those the
    simulated clock has ended by its simulated start. With 4 workers a few trials ending
    together make up to 3; more says the load broke the simulated order."""
    ends = schedule(trials)[0]
    starts = [end - t["steps"] for t, end in zip(trials, ends)]
    finished = [t["finished"] for t in trials if t["finished"]]
    return max((abs(sum(f <= t["created"] for f in finished) - sum(e <= start for e in ends))
                for t, start in zip(trials, starts)), default=0)


def hptune_completions(trials):
    ends = schedule(trials)[0]
    return [(end, t["value"], final_loss(t["x"])) for t, end in zip(trials, ends)
            if t["state"] == "succeeded" and t["steps"] >= R and t["value"] is not None]


def run_optuna(pruner_name, seed, horizon):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = {
        "hyperband": optuna.pruners.HyperbandPruner(min_resource=1, max_resource=R, reduction_factor=3),
        "sha": optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
    }[pruner_name]
    # HyperbandPruner puts a trial in a bracket by a hash of the study's name and its number:
    # a name of its own per seed, not Optuna's random one, makes a seed's run repeatable.
    study = optuna.create_study(study_name=f"mf-{pruner_name}-{seed}",
                                sampler=optuna.samplers.TPESampler(seed=seed), pruner=pruner)

    def ask():
        trial = study.ask()
        x = {p: trial.suggest_float(p, lo, hi) for p, (lo, hi) in BOUNDS.items()}
        return trial, x

    events, completions, order = [], [], 0
    for w in range(WORKERS):
        trial, x = ask()
        heapq.heappush(events, (1.0, order, trial, x, 1))
        order += 1
    while events:
        now, _, trial, x, step = heapq.heappop(events)
        if now > horizon:
            break
        value = loss(x, step, seed)
        trial.report(value, step)
        if step == R:
            study.tell(trial, value)
            completions.append((now, value, final_loss(x)))
        elif trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            heapq.heappush(events, (now + 1, order, trial, x, step + 1))
            order += 1
            continue
        trial, x = ask()
        heapq.heappush(events, (now + 1, order, trial, x, 1))
        order += 1
    return completions


def quartiles(values):
    values = sorted(values)
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[1], q[0], q[2]


def ensure_venv():
    venv_dir = ROOT / "bench" / ".venv"
    if Path(sys.prefix).resolve() != venv_dir.resolve():
        python = venv_dir / "bin" / "python"
        if not python.exists():
            import venv
            venv.create(venv_dir, with_pip=True)
        os.execv(python, [str(python), *sys.argv])
    if subprocess.run([sys.executable, "-c", "import optuna"], capture_output=True).returncode:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "optuna"], check=True)


METHODS = ["model", "bayesian", "random", "tpe-hyperband", "tpe-sha"]
NAMES = {
    "model": "hptune bayesian + ASHA, `fidelity: model` (the default)",
    "bayesian": "hptune bayesian + ASHA, `fidelity: off`",
    "random": "hptune random + ASHA",
    "tpe-hyperband": "Optuna TPE + HyperbandPruner",
    "tpe-sha": "Optuna TPE + SuccessiveHalvingPruner",
}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        return worker(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--summarise":
        return summarise_files(sys.argv[2:])
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--horizon", type=float, default=8 * R,
                        help="simulated units per worker (default 216: 8 full trials each)")
    parser.add_argument("--unit-ms", type=int, default=100)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--jobs", type=int, default=2, help="hptune runs at once")
    # Resolved here: each run starts it from its own temporary directory.
    parser.add_argument("--hptune", default=str(HPTUNE), type=lambda p: str(Path(p).resolve()),
                        help="the hptune binary (default target/bench/hptune)")
    args = parser.parse_args()
    ensure_venv()
    methods = args.methods.split(",")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    curves = {m: {} for m in methods}
    walls = {m: [] for m in methods}
    work = Path(tempfile.mkdtemp(prefix="hptune-mf-"))
    jobs = [(m, s) for s in seeds for m in methods if m in ("model", "bayesian", "random")]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {(m, s): pool.submit(run_hptune, args.hptune, m, s, args.horizon, args.unit_ms,
                                       work)
                   for m, s in jobs}
        for (m, s), future in futures.items():
            trials, wall = future.result()
            curves[m][s] = regret_curve(hptune_completions(trials))
            walls[m].append(wall)
            failed = sum(t["state"] == "failed" for t in trials)
            print(f"{m} seed {s}: {len(trials)} trials ({failed} failed), {wall:.0f} s, final "
                  f"regret {regret_at(curves[m][s], args.horizon):.3g}, order within "
                  f"{order_departure(trials)} trials of the simulated one", file=sys.stderr)
    for m in methods:
        if m.startswith("tpe-"):
            for s in seeds:
                curves[m][s] = regret_curve(run_optuna(m[4:], s, args.horizon))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"multifidelity-{int(time.time())}.json").write_text(json.dumps(
        {"args": vars(args), "curves": {m: {str(s): c for s, c in v.items()} for m, v in curves.items()}}))

    summarise(curves, seeds, args.horizon)


def summarise(curves, seeds, horizon):
    """Prints the tables of `curves` (method -> seed -> regret curve)."""
    methods = [m for m in METHODS if m in curves]
    print(f"\n{len(seeds)} seeds ({', '.join(map(str, seeds))}), horizon {horizon:g} simulated units "
          f"per worker, {WORKERS} workers, R = {R}\n")
    print("| method | final regret, median [Q1, Q3] | area under log10 regret (median) |"
          " regret at 60% of the horizon (median) |")
    print("|---|---|---|---|")
    for m in methods:
        finals = [regret_at(curves[m][s], horizon) for s in seeds]
        areas = [area(curves[m][s], horizon) for s in seeds]
        at60 = [regret_at(curves[m][s], 0.6 * horizon) for s in seeds]
        med, q1, q3 = quartiles(finals)
        print(f"| {NAMES[m]} | {med:.3g} [{q1:.3g}, {q3:.3g}] | {statistics.median(areas):.3f} |"
              f" {statistics.median(at60):.3g} |")
    if "model" in methods and "bayesian" in methods:
        shares = []
        for s in seeds:
            target = regret_at(curves["bayesian"][s], horizon)
            reached = next((e for e, r in curves["model"][s] if r <= target), math.inf)
            shares.append(reached / horizon)
        within = sum(1 for x in shares if x <= 0.6)
        print(f"\nShare of the horizon the curve model takes to reach the final regret of `fidelity: off` (same seed):"
              f" median {statistics.median(shares):.2f}, <= 0.6 in {within} of {len(seeds)} seeds"
              f" ({', '.join(f'{x:.2f}' for x in shares)}).")


def summarise_files(paths):
    """`--summarise FILE...`: the tables of several runs' result files, their seeds together."""
    curves, horizon = {}, None
    for path in paths:
        saved = json.loads(Path(path).read_text())
        if horizon not in (None, saved["args"]["horizon"]):
            sys.exit(f"{path}: another horizon")
        horizon = saved["args"]["horizon"]
        for m, by_seed in saved["curves"].items():
            curves.setdefault(m, {}).update({int(s): c for s, c in by_seed.items()})
    seeds = sorted(set.intersection(*(set(v) for v in curves.values())))
    summarise(curves, seeds, horizon)

if __name__ == "__main__":
    main()
