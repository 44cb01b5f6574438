#!/usr/bin/env python3
"""Benchmark of hptune's Bayesian sampler against Optuna's samplers (and, on request, BoTorch's
log noisy expected improvement), on test functions with known optima.

One command: `python3 bench/bayes.py [flags]`. It creates bench/.venv (git-ignored) with
Optuna, scipy, torch and BoTorch (Optuna's GPSampler needs torch; PyPI's Linux wheel brings its
CUDA libraries: about 5.6 GB and 6 minutes here, once), builds hptune and the
objective worker in release mode (`HPTUNE_BENCH_NO_BUILD=1`: the binaries already in
target/release), runs every (sampler, function, mode, seed) and prints
Markdown tables:

- final simple regret (best value found - known optimum): median [Q1, Q3] over seeds; on the
  noisy functions (`branin-noisy`, `hartmann6-noisy`), the noise-free value of the trial the
  sampler names best (hptune: `hptune best --by model`; Optuna: its best observed trial),
  with a second table of hptune's regret by each way of naming it;
- on the constrained functions (`gardner`, `branin-constrained`), the regret of the best
  feasible value (inf where a run found no feasible trial): hptune with `constraints:` in the
  study file, Optuna's GPSampler and TPE with `constraints_func`, the random samplers
  recording feasibility only;
- on the functions of several objectives (`zdt1`, `zdt2`, `dtlz2`, `zdt1-noisy`, `constr`:
  MULTI; 100 trials, not in the default set), the hypervolume regret: the true front's
  hypervolume less that of the noise-free values of the run's front, hptune beside Optuna's
  GPSampler, multivariate TPE, NSGA-II and random search (the other samplers are skipped),
  with the median time per proposal at trials 90-99 and GPSampler's over hptune's;
- the median time per proposal of each cell's runs, after hptune's initial design;
- median time per proposal at the given trial counts (`--timing-at`), from runs as long as
  the largest of them (`--timing-trials`, Hartmann6, sequential, one seed).

The middle, 8 to 15 parameters at 100 trials (`ackley-D`, `rosenbrock-D`, `styblinski-tang-D`,
`rastrigin-D`, `rastrigin-off-D` and `mixed-D` for D = 8, 10, 12, 15, and 9, where the rules of
8 parameters meet those of 10; MIDDLE), is not in the default set either; it is meant for
hptune against Optuna's GPSampler, TPE and CMA-ES and Rustuna's TPE and CMA-ES (`rustuna-tpe`,
`rustuna-cmaes`: Optuna's Rust port, in-process, define-by-run). Both CMA-ES start at the box's
centre; `optuna-cmaes-random-start`, a control, starts Optuna's at a point drawn from the box
instead, and `--regret-at 10,30` prints where each sampler stands after its first trials.

The first trial of hptune's design is the centre of the box, so a function whose optimum lies
at the centre or next to it is solved, or nearly, by that trial, and its cells measure that
trial rather than the search (CENTRED: Ackley-5 on [-32.768, 32.768], Levy-5 on [-10, 10] with
its optimum at 1, Rastrigin on [-5.12, 5.12]). They stay for comparison with earlier results;
the default set has Ackley and Levy in 5 dimensions on [-5, 10] in their place (`ackley-off`,
`levy-off`: their optima a third and two fifths of the way along each side), and the middle's
Rastrigin off the centre is `rastrigin-off-D`.

Functions with many parameters (`ackley-20`, `levy-20`, `ackley-50`, `levy-50`, `mixed-30`,
200 trials each) are not in the default set; they are meant for hptune against Optuna's
multivariate TPE (`optuna-tpe-multivariate`), CMA-ES (`optuna-cmaes`, which draws
categoricals at random), GPSampler and random search.

hptune runs through the real controller: `hptune run` on a generated study file, with
`examples/objective.rs` as the worker; its proposal times come from the sampler's debug log.
Optuna and BoTorch run in-process through ask/tell, in the controller's order when trials take
equal time: with 4 parallel trials, 4 are asked, then all 4 are told (a batch's trials end
together, and the controller records every ended trial before it proposes the next). BoTorch
(`--samplers botorch`, spaces of linear doubles only) is not in the default set: its proposals take
about a second each.

Modes: `sequential` (one trial at a time), `parallel` (4 at once, trials of equal length: the
workers of a batch end together, but a few milliseconds apart, so how many of them the
controller has seen end when it proposes depends on its speed) and `async` (4 at once, the
trials end one at a time in number order, each proposal after the first 4 made while exactly 3
trials run, as with trials of unequal length: the worker's `--in-order` flag for hptune, one
`tell` then one `ask` for Optuna and BoTorch). `async` does not depend on timing, so hptune's
runs repeat exactly.

Results (every run, with its trajectory, its proposals and its timings) go to bench/results/<timestamp>.json.
"""

import argparse
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "bench" / ".venv"
RESULTS = ROOT / "bench" / "results"
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
if not TARGET.is_absolute():
    TARGET = ROOT / TARGET

# name -> (parameters, optimum, default trial count). A parameter is
# (id, kind, low, high, log) for numbers, (id, "categorical", values) for categoricals.
FUNCTIONS = {
    "branin": ([("x1", "double", -5.0, 10.0, False), ("x2", "double", 0.0, 15.0, False)],
               0.397887357729739, 50),
    "hartmann6": ([(f"x{i}", "double", 0.0, 1.0, False) for i in range(1, 7)],
                  -3.32236801141551, 100),
    "levy": ([(f"x{i}", "double", -10.0, 10.0, False) for i in range(1, 6)], 0.0, 50),
    "ackley": ([(f"x{i}", "double", -32.768, 32.768, False) for i in range(1, 6)], 0.0, 50),
    "mixed": ([("x1", "double", 1e-4, 1.0, True), ("x2", "integer", 1, 8, False),
               ("x3", "categorical", ["relu", "tanh", "sigmoid"])], 0.0, 50),
    # Badly scaled: values spanning orders of magnitude over the space.
    "goldstein-price": ([("x1", "double", -2.0, 2.0, False), ("x2", "double", -2.0, 2.0, False)],
                        3.0, 50),
    "six-hump-camel": ([("x1", "double", -3.0, 3.0, False), ("x2", "double", -2.0, 2.0, False)],
                       -1.031628453489877, 50),
    "styblinski-tang": ([(f"x{i}", "double", -5.0, 5.0, False) for i in range(1, 5)],
                        -39.16616570377142 * 4, 50),
}
# Constrained functions (the worker reports `constraint` beside `loss`): name -> the most
# `constraint` may be for a trial to be feasible.
CONSTRAINED = {"gardner": 0.5, "branin-constrained": 50.0}
FUNCTIONS["gardner"] = ([("x1", "double", 0.0, 6.0, False), ("x2", "double", 0.0, 6.0, False)],
                        -2.0, 50)
FUNCTIONS["branin-constrained"] = (*FUNCTIONS["branin"][:2], 50)
# Many parameters, 200 trials: Ackley and Levy in 20 and 50 dimensions on [-5, 10] (TuRBO's
# box for Ackley, Eriksson et al., 2019), which puts their optima (0 and 1) off the centre of
# the box, where CMA-ES starts its search; and `mixed-30`, a mixed space of this benchmark's
# design (examples/objective.rs): 10 doubles, 5 log-scale doubles, 5 integers and 10
# categoricals, each categorical moving the best value of one double, minimum 0.
for _d in (20, 50):
    for _name in ("ackley", "levy"):
        FUNCTIONS[f"{_name}-{_d}"] = (
            [(f"x{i}", "double", -5.0, 10.0, False) for i in range(1, _d + 1)], 0.0, 200)
FUNCTIONS["mixed-30"] = (
    [(f"x{i}", "double", 0.0, 1.0, False) for i in range(1, 11)]
    + [(f"x{i}", "double", 1e-4, 1.0, True) for i in range(11, 16)]
    + [(f"x{i}", "integer", 1, 8, False) for i in range(16, 21)]
    + [(f"x{i}", "categorical", ["a", "b", "c"]) for i in range(21, 26)]
    + [(f"x{i}", "categorical", ["a", "b", "c", "d"]) for i in range(26, 31)],
    0.0, 200)
MANY_PARAMETERS = [f"{name}-{d}" for d in (20, 50) for name in ("ackley", "levy")] + ["mixed-30"]
# The worker's function of each benchmark function whose name differs.
WORKER = {f"{name}-{d}": name for d in (20, 50) for name in ("ackley", "levy")}
# Ackley and Levy in 5 dimensions off the box's centre: on [-5, 10], the box of 20-50
# parameters, their optima (0 and 1) lie a third and two fifths of the way along each side;
# on their usual boxes the optimum is the centre (Ackley's) or a twentieth of the side from it
# (Levy's). They stand in the default set for the usual boxes (CENTRED, below).
for _name in ("ackley", "levy"):
    FUNCTIONS[f"{_name}-off"] = (
        [(f"x{i}", "double", -5.0, 10.0, False) for i in range(1, 6)], 0.0, 50)
    WORKER[f"{_name}-off"] = _name
# The middle (issue 39), 8 to 15 parameters, 100 trials (50 with `--trials 50`): a fine-tuning
# study's size. Ackley and Rosenbrock on [-5, 10] (the optimum off the centre, as above),
# Styblinski-Tang on [-5, 5] and Rastrigin on [-5.12, 5.12] (their usual boxes; Rastrigin's
# optimum is the centre, where CMA-ES draws its first generation), `rastrigin-off-D`:
# Rastrigin on [-5.12, 10.24], the optimum a third of the way along each side as Ackley's, and
# `mixed-D`: D/4 categoricals of four values, each moving the best value of one double,
# D/4 integers in 1..8 and the rest doubles in [0, 1] (the worker's `mixed`, minimum 0).
# name -> (the worker's function, the box's low and high side, the optimum per parameter)
MIDDLE_BOXES = {"ackley": ("ackley", -5.0, 10.0, 0.0),
                "rosenbrock": ("rosenbrock", -5.0, 10.0, 0.0),
                "styblinski-tang": ("styblinski-tang", -5.0, 5.0, -39.16616570377142),
                "rastrigin": ("rastrigin", -5.12, 5.12, 0.0),
                "rastrigin-off": ("rastrigin", -5.12, 10.24, 0.0)}
MIDDLE = []
MIDDLE_SIZES = (8, 9, 10, 12, 15)
for _d in MIDDLE_SIZES:
    for _name, (_worker, _low, _high, _optimum) in MIDDLE_BOXES.items():
        FUNCTIONS[f"{_name}-{_d}"] = (
            [(f"x{i}", "double", _low, _high, False) for i in range(1, _d + 1)],
            _optimum * _d, 100)
        WORKER[f"{_name}-{_d}"] = _worker
        MIDDLE.append(f"{_name}-{_d}")
    _kinds = _d // 4
    _doubles = _d - 2 * _kinds
    FUNCTIONS[f"mixed-{_d}"] = (
        [(f"x{i}", "double", 0.0, 1.0, False) for i in range(1, _doubles + 1)]
        + [(f"x{i}", "integer", 1, 8, False) for i in range(_doubles + 1, _doubles + _kinds + 1)]
        + [(f"x{i}", "categorical", ["a", "b", "c", "d"])
           for i in range(_doubles + _kinds + 1, _d + 1)],
        0.0, 100)
    WORKER[f"mixed-{_d}"] = "mixed-many"
    MIDDLE.append(f"mixed-{_d}")
# Functions whose optimum is the box's centre or next to it, where hptune's design puts its
# first trial: not in the default set (the module's doc).
CENTRED = ["ackley", "levy"] + [f"rastrigin-{d}" for d in MIDDLE_SIZES]
# Noisy functions: name -> (the noise-free function, the noise's standard deviation: 2 % of
# the function's range over the space). Their regret is that of the noise-free value of the
# trial each sampler names best: for hptune `hptune best --by model`, for Optuna its best
# observed trial (it has no other).
NOISY = {"branin-noisy": ("branin", 0.02 * (308.129 - 0.397887)),
         "hartmann6-noisy": ("hartmann6", 0.02 * 3.32237)}
# Their trial counts: 50 for both (Hartmann6's noise-free runs have 100).
for _name, (_clean, _sd) in NOISY.items():
    FUNCTIONS[_name] = (*FUNCTIONS[_clean][:2], 50)
# Several objectives (all minimised), 100 trials each: name -> how the worker computes them
# (`worker`, `python3 bench/bayes.py --worker NAME`), their metrics, the reference point of
# the hypervolume, the constraints (metric, most it may be) and the noise's standard deviation.
# FUNCTIONS holds their parameters and the true front's hypervolume (in place of an optimum):
# a run's regret is that less the hypervolume of the noise-free values of its front (the
# non-dominated feasible trials by their observed values, as `hptune best` and Optuna's
# `best_trials` name them), above the reference point.
MULTI = {
    "zdt1": {"metrics": ["f1", "f2"], "reference": [1.1, 1.1]},
    "zdt2": {"metrics": ["f1", "f2"], "reference": [1.1, 1.1]},
    "dtlz2": {"metrics": ["f1", "f2", "f3"], "reference": [1.1, 1.1, 1.1]},
    # ZDT1 with noise of 2 % of the front's range on both objectives.
    "zdt1-noisy": {"metrics": ["f1", "f2"], "reference": [1.1, 1.1], "noise": 0.02},
    # CONSTR (Deb, 2001): f1 = x1, f2 = (1 + x2)/x1, with 6 - x2 - 9 x1 <= 0 and
    # 1 + x2 - 9 x1 <= 0.
    "constr": {"metrics": ["f1", "f2"], "reference": [1.1, 10.0],
               "constraints": [("c1", 0.0), ("c2", 0.0)]},
}
_UNIT6 = [(f"x{i}", "double", 0.0, 1.0, False) for i in range(1, 7)]
# Hypervolumes of the true fronts above the references, in closed form: ZDT1's front
# f2 = 1 - sqrt(f1) and ZDT2's f2 = 1 - f1² for f1 in [0, 1]; DTLZ2's, the unit sphere's
# positive octant (the reference box less the octant of the ball); CONSTR's, f2 = 7/f1 - 9 for
# f1 in [7/18, 2/3] and 1/f1 for f1 in [2/3, 1].
FUNCTIONS["zdt1"] = (_UNIT6, 1.1 - 1 + 2 / 3 + 0.1 * 1.1, 100)
FUNCTIONS["zdt2"] = (_UNIT6, 1.1 - 1 + 1 / 3 + 0.1 * 1.1, 100)
FUNCTIONS["dtlz2"] = (_UNIT6, 1.1 ** 3 - math.pi / 6, 100)
FUNCTIONS["zdt1-noisy"] = FUNCTIONS["zdt1"]
FUNCTIONS["constr"] = ([("x1", "double", 0.1, 1.0, False), ("x2", "double", 0.0, 5.0, False)],
                       19 * (2 / 3 - 7 / 18) - 7 * math.log(12 / 7)
                       + 10 / 3 - math.log(1.5) + 0.1 * 9, 100)
SAMPLERS = ["hptune-bayesian", "hptune-random", "optuna-gp", "optuna-tpe",
            "optuna-tpe-multivariate", "optuna-cmaes", "optuna-cmaes-random-start",
            "optuna-nsga2", "optuna-random", "rustuna-tpe", "rustuna-cmaes", "botorch"]
# BoTorch is a reference for the parallel proposals, on request: it takes seconds a proposal.
# Multivariate TPE and CMA-ES are the references for the functions with many parameters;
# Rustuna's (Optuna's Rust port) TPE and CMA-ES, with Optuna's, for the middle.
DEFAULT_SAMPLERS = [s for s in SAMPLERS
                    if s not in ("botorch", "optuna-tpe-multivariate", "optuna-cmaes",
                                 "optuna-cmaes-random-start", "optuna-nsga2", "rustuna-tpe",
                                 "rustuna-cmaes")]
# The samplers of several objectives: NSGA-II is Optuna's default for them.
MULTI_SAMPLERS = ["hptune-bayesian", "optuna-gp", "optuna-tpe-multivariate", "optuna-nsga2",
                  "optuna-random"]
# mode -> trials run at once
MODES = {"sequential": 1, "parallel": 4, "async": 4}


def ensure_venv():
    """Re-runs this script inside bench/.venv, creating it first if needed."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {VENV} ...", file=sys.stderr)
        venv.create(VENV, with_pip=True)
    check = subprocess.run([python, "-c",
                            "import optuna, scipy, torch, greenlet, botorch, cmaes, rustuna"],
                           capture_output=True)
    if check.returncode != 0:
        print("installing optuna, scipy, torch, botorch, cmaes, rustuna into bench/.venv ...",
              file=sys.stderr)
        # greenlet lets Optuna's GPSampler batch its L-BFGS-B runs (it warns and runs
        # slower without it).
        subprocess.run([str(python), "-m", "pip", "install", "-q", "optuna", "scipy", "numpy",
                        "greenlet", "torch", "botorch", "cmaes", "rustuna"], check=True)
    os.execv(python, [str(python), *sys.argv])


def build(with_hptune, with_objective=True):
    """The release `hptune` (only `with_hptune`: Optuna's samplers need just the objective) and
    the objective worker (only `with_objective`: the functions of several objectives have
    their own, `worker`)."""
    targets = (["--bin", "hptune"] if with_hptune else []) + (
        ["--example", "objective"] if with_objective else [])
    if targets and not os.environ.get("HPTUNE_BENCH_NO_BUILD"):
        subprocess.run(["cargo", "build", "--release", *targets], cwd=ROOT, check=True)
    return TARGET / "release" / "hptune", TARGET / "release" / "examples" / "objective"


def study_yaml(name, function, algorithm, trials, parallel, seed, command):
    if function in MULTI:
        lines = [f"name: {name}", "objectives:"]
        lines += [f"  - {{metric: {m}, goal: minimize}}" for m in MULTI[function]["metrics"]]
        lines.append("parameters:")
    else:
        lines = [f"name: {name}", "objective:", "  metric: loss", "  goal: minimize",
                 "parameters:"]
    for p in FUNCTIONS[function][0]:
        lines.append(f"  - id: {p[0]}")
        lines.append(f"    type: {p[1]}")
        if p[1] == "categorical":
            lines.append(f"    values: [{', '.join(p[2])}]")
        else:
            lines.append(f"    min: {p[2]!r}")
            lines.append(f"    max: {p[3]!r}")
            if p[4]:
                lines.append("    scale: log")
    lines += [
        f"algorithm: {algorithm}",
        f"max_trial_count: {trials}",
        f"parallel_trial_count: {parallel}",
        f"seed: {seed}",
        "trial:",
        f"  command: [{', '.join(map(str, command))}]",
        # Far above a trial's own time (milliseconds): in the `async` mode a worker also waits
        # for its turn (`ORDER_WAIT`), which on a loaded machine takes several proposals'
        # time, and a trial the controller kills for the wait would be the benchmark's failure,
        # not the sampler's.
        "  timeout: 10m",
    ]
    if function in CONSTRAINED:
        lines.append(f"constraints: [{{metric: constraint, max: {CONSTRAINED[function]!r}}}]")
    bounds = MULTI.get(function, {}).get("constraints", [])
    if bounds:
        lines.append("constraints: ["
                     + ", ".join(f"{{metric: {m}, max: {b!r}}}" for m, b in bounds) + "]")
    return "\n".join(lines) + "\n"


ANSI = re.compile(r"\x1b\[[0-9;]*m")
PROPOSED = re.compile(r"proposed trial=(\d+) .*micros=(\d+)")


def worker_args(function, seed):
    """The worker's flags that pick `function` (and its noise, fixed by `seed`)."""
    if function in NOISY:
        clean, sd = NOISY[function]
        return ["--function", clean, "--noise", repr(sd), "--noise-seed", str(seed)]
    return ["--function", WORKER.get(function, function)]


def run_study(hptune, work, study):
    """`hptune run` of the study file text `study` in the folder `work`, on SQLite there; the
    storage's URL and the time of each proposal by trial number, from the sampler's log."""
    path = Path(work) / "study.yaml"
    path.write_text(study)
    storage = f"sqlite://{work}/bench.db"
    env = dict(os.environ, RUST_LOG="hptune::sampler=debug", NO_COLOR="1")
    run = subprocess.run([hptune, "run", str(path), "--storage", storage], cwd=work,
                         env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"hptune run failed ({run.returncode}): {run.stderr[-2000:]}")
    timings = {}
    for line in ANSI.sub("", run.stderr).splitlines():
        if m := PROPOSED.search(line):
            timings[int(m[1])] = int(m[2]) / 1e6
    return storage, timings


def run_hptune(binaries, sampler, function, trials, mode, seed):
    """`hptune run` of the study; as every runner, the trials' values (None: failed or
    infeasible), proposal times, the parameters named best (noisy functions) and proposals."""
    hptune, objective = binaries
    algorithm = sampler.removeprefix("hptune-")
    parallel = MODES[mode]
    with tempfile.TemporaryDirectory(prefix="hptune-bench-") as work:
        name = f"{function}-{algorithm}-{mode}-{seed}"
        command = [objective, *worker_args(function, seed)]
        if mode == "async":
            command += ["--in-order", work, "--running", parallel, "--trials", trials]
        storage, timings = run_study(hptune, work, study_yaml(
            name, function, algorithm, trials, parallel, seed, command))
        listed = subprocess.run([hptune, "trials", name, "--format", "json", "--storage",
                                 storage], cwd=work, capture_output=True, text=True, check=True)
        trials_json = sorted(json.loads(listed.stdout), key=lambda t: t["number"])
        chosen = {}
        for by in ("observed", "model") if function in NOISY else ():
            best = subprocess.run([hptune, "best", name, "--by", by, "--format", "json",
                                   "--storage", storage], cwd=work, capture_output=True,
                                  text=True, check=True)
            chosen[by] = json.loads(best.stdout)["params"]
    # Only a feasible trial's value counts.
    values = [t["value"] if t["state"] == "succeeded" and t.get("infeasible") is None else None
              for t in trials_json]
    proposals = [t["params"] for t in trials_json]
    return values, [timings.get(i) for i in range(len(values))], chosen, proposals


def hptune_design(dimension, trials):
    """The size of hptune's initial design for `dimension` parameters in a study of `trials`
    (src/sampler/bayes/design.rs): 2D + 1 trials, 5 to 20, but in the middle (10 to 15
    parameters, or 8 and 9 with fewer than 10 trials per parameter) 13 or a fifth of the
    trials where that is fewer (at least 5)."""
    if 10 <= dimension <= 15 or (8 <= dimension <= 9 and trials < 10 * dimension):
        return max(5, min(13, trials // 5))
    return min(20, max(5, 2 * dimension + 1))


def distributions(function):
    import optuna.distributions as d
    out = {}
    for p in FUNCTIONS[function][0]:
        if p[1] == "categorical":
            out[p[0]] = d.CategoricalDistribution(p[2])
        elif p[1] == "integer":
            out[p[0]] = d.IntDistribution(p[2], p[3], log=p[4])
        else:
            out[p[0]] = d.FloatDistribution(p[2], p[3], log=p[4])
    return out


def evaluate(objective, function, params, seed=0):
    """The worker's final line at `params`: `loss`'s value, and `constraint`'s (or None)."""
    args = ([str(objective), *worker_args(function, seed)]
            + [f"--{k}={v}" for k, v in params.items()])
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    pairs = dict(pair.split("=", 1) for pair in out.strip().splitlines()[-1].split())
    constraint = float(pairs["constraint"]) if "constraint" in pairs else None
    return float(pairs["loss"]), constraint


def in_controller_order(trials, mode, ask, tell):
    """Asks and tells as hptune's controller would with trials of equal length: `ask()`
    proposes the next trial, `tell()` ends the oldest running one. With 4 parallel trials, 4
    are asked, then all 4 are told (a batch's trials end together, and the controller
    records every ended trial before it proposes the next); asynchronously, one is told, then
    one asked."""
    asked, running, parallel = 0, 0, MODES[mode]
    while asked < trials or running:
        while asked < trials and running < parallel:
            ask()
            asked, running = asked + 1, running + 1
        tell()
        running -= 1
        while mode != "async" and running:
            tell()
            running -= 1


def ask_and_tell(study, function, trials, mode, tell):
    """Runs an Optuna `study` of `function` through ask/tell in the controller's order
    (`in_controller_order`), `tell(trial)` evaluating the oldest running trial and telling
    it; the time of each proposal and its parameters, by trial number."""
    dists = distributions(function)
    timings, proposals, pending = [None] * trials, [None] * trials, []

    def ask():
        start = time.perf_counter()
        trial = study.ask(dists)
        timings[trial.number] = time.perf_counter() - start
        proposals[trial.number] = trial.params
        pending.append(trial)

    in_controller_order(trials, mode, ask, lambda: tell(pending.pop(0)))
    return timings, proposals


def random_start(function, seed):
    """A point of `function`'s numeric parameters drawn uniformly from the box, in each
    parameter's scale, from `seed`: where `optuna-cmaes-random-start` starts CMA-ES, which
    otherwise starts at the box's centre (Rastrigin's optimum on its usual box, and low on
    Rosenbrock's)."""
    rng = random.Random(seed)
    start = {}
    for p in FUNCTIONS[function][0]:
        if p[1] == "categorical":
            continue
        low, high = (math.log(p[2]), math.log(p[3])) if p[4] else (p[2], p[3])
        value = rng.uniform(low, high)
        value = math.exp(value) if p[4] else value
        start[p[0]] = round(value) if p[1] == "integer" else value
    return start


def run_optuna(binaries, sampler, function, trials, mode, seed):
    """Optuna through ask/tell, evaluating with the same worker binary as hptune."""
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Feasible where the value is <= 0, as Optuna's `constraints_func` has it.
    bound = CONSTRAINED.get(function)
    constrained = {} if bound is None else {
        "constraints_func": lambda t: [t.user_attrs["constraint"] - bound]}
    make = {
        "optuna-gp": lambda: optuna.samplers.GPSampler(seed=seed, **constrained),
        # Optuna's default TPE: since Optuna 5.0 multivariate with one objective, so its runs
        # there are those of optuna-tpe-multivariate (but for `constraints_func`).
        "optuna-tpe": lambda: optuna.samplers.TPESampler(seed=seed, **constrained),
        "optuna-tpe-multivariate": lambda: optuna.samplers.TPESampler(seed=seed,
                                                                      multivariate=True),
        # Categoricals, which CMA-ES does not model, are drawn at random.
        "optuna-cmaes": lambda: optuna.samplers.CmaEsSampler(seed=seed,
                                                             warn_independent_sampling=False),
        # A control: CMA-ES from a point drawn at random rather than the box's centre.
        "optuna-cmaes-random-start": lambda: optuna.samplers.CmaEsSampler(
            x0=random_start(function, seed), seed=seed, warn_independent_sampling=False),
        "optuna-random": lambda: optuna.samplers.RandomSampler(seed=seed),
    }[sampler]
    study = optuna.create_study(direction="minimize", sampler=make())
    values = [None] * trials

    def tell(trial):
        value, constraint = evaluate(binaries[1], function, trial.params, seed)
        if constraint is not None:
            trial.set_user_attr("constraint", constraint)
        feasible = constraint is None or constraint <= bound
        values[trial.number] = value if feasible else None
        study.tell(trial, value)

    timings, proposals = ask_and_tell(study, function, trials, mode, tell)
    chosen = {"observed": study.best_trial.params} if function in NOISY else {}
    return values, timings, chosen, proposals


def run_rustuna(binaries, sampler, function, trials, mode, seed):
    """Rustuna (Optuna's Rust port, `pip install rustuna`) in-process, define-by-run through
    `ask()` and `suggest_*` in the controller's order, evaluating with the same worker binary
    as hptune; its CMA-ES draws categoricals at random, as Optuna's does."""
    import rustuna
    make = {"rustuna-tpe": rustuna.samplers.TPESampler,
            "rustuna-cmaes": rustuna.samplers.CmaEsSampler}[sampler]
    study = rustuna.create_study(direction="minimize", sampler=make(seed=seed))
    timings, proposals, values, pending = [None] * trials, [None] * trials, [None] * trials, []

    def suggest(trial, p):
        if p[1] == "categorical":
            return trial.suggest_categorical(p[0], p[2])
        if p[1] == "integer":
            return trial.suggest_int(p[0], p[2], p[3], log=p[4])
        return trial.suggest_float(p[0], p[2], p[3], log=p[4])

    def ask():
        start = time.perf_counter()
        trial = study.ask()
        params = {p[0]: suggest(trial, p) for p in FUNCTIONS[function][0]}
        timings[trial.number] = time.perf_counter() - start
        proposals[trial.number] = params
        pending.append((trial.number, params))

    def tell():
        number, params = pending.pop(0)
        values[number] = evaluate(binaries[1], function, params, seed)[0]
        study.tell(number, values[number])

    in_controller_order(trials, mode, ask, tell)
    return values, timings, {}, proposals


def run_botorch(binaries, sampler, function, trials, mode, seed):
    """BoTorch's log noisy expected improvement (Ament et al., 2023) with the running trials as
    pending points, its Monte Carlo fantasies as in hptune's parallel proposals: the
    reference for what parallel proposals cost. The same initial design size as hptune
    (`hptune_design` scrambled Sobol points), then a GP with BoTorch's default priors, fitted
    at every proposal, and the acquisition maximised from 512 raw samples and 10 restarts.
    Doubles on a linear scale only."""
    import torch
    from botorch.acquisition.logei import qLogNoisyExpectedImprovement
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize
    from botorch.optim import optimize_acqf
    from gpytorch.mlls import ExactMarginalLogLikelihood

    params = FUNCTIONS[function][0]
    dim = len(params)
    design = torch.quasirandom.SobolEngine(dim, scramble=True, seed=seed).draw(
        hptune_design(dim, trials), dtype=torch.float64)
    bounds = torch.tensor([[0.0] * dim, [1.0] * dim], dtype=torch.float64)
    xs, values, timings, pending, told = [], [None] * trials, [None] * trials, [], []

    def to_params(x):
        return {name: low + u * (high - low)
                for (name, _, low, high, _), u in zip(params, x.tolist())}

    def ask():
        n = len(xs)
        start = time.perf_counter()
        if n < len(design):
            x = design[n]
        else:
            torch.manual_seed(seed * 100_003 + n)
            train_x = torch.stack([xs[i] for i in told])
            train_y = -torch.tensor([[values[i]] for i in told], dtype=torch.float64)
            model = SingleTaskGP(train_x, train_y, outcome_transform=Standardize(m=1))
            fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
            running = torch.stack([xs[i] for i in pending]) if pending else None
            acquisition = qLogNoisyExpectedImprovement(model, train_x, X_pending=running)
            x, _ = optimize_acqf(acquisition, bounds, q=1, num_restarts=10, raw_samples=512)
            x = x[0].detach()
        timings[n] = time.perf_counter() - start
        xs.append(x)
        pending.append(n)

    def tell():
        n = pending.pop(0)
        values[n] = evaluate(binaries[1], function, to_params(xs[n]), seed)[0]
        told.append(n)

    in_controller_order(trials, mode, ask, tell)
    chosen = {}
    if function in NOISY:
        best = min((i for i in told if values[i] is not None), key=lambda i: values[i])
        chosen["observed"] = to_params(xs[best])
    return values, timings, chosen, [to_params(x) for x in xs]


def runs_on(sampler, function):
    """Whether `sampler` can search `function`'s space (BoTorch's runner: linear doubles only,
    without constraints; Rustuna's: without constraints; several objectives: the samplers of
    MULTI_SAMPLERS)."""
    if function in MULTI:
        return sampler in MULTI_SAMPLERS
    if sampler.startswith("rustuna"):
        return function not in CONSTRAINED
    return sampler != "botorch" or (function not in CONSTRAINED and all(
        p[1] == "double" and not p[4] for p in FUNCTIONS[function][0]))


def several(function, params):
    """`function`'s objectives at `params` (noise-free) and its constraints' values."""
    x = [float(params[p[0]]) for p in FUNCTIONS[function][0]]
    base = function.removesuffix("-noisy")
    if base in ("zdt1", "zdt2"):
        g = 1 + 9 * sum(x[1:]) / (len(x) - 1)
        shape = math.sqrt(x[0] / g) if base == "zdt1" else (x[0] / g) ** 2
        return [x[0], g * (1 - shape)], []
    if base == "dtlz2":
        g = sum((v - 0.5) ** 2 for v in x[2:])
        a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
        return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b),
                (1 + g) * math.sin(a)], []
    return [x[0], (1 + x[1]) / x[0]], [6 - x[1] - 9 * x[0], 1 + x[1] - 9 * x[0]]


def evaluate_several(function, params, seed):
    """`function` at `params`: the observed objectives (with the noise, a draw fixed by the
    function, the seed and the parameters), the noise-free ones, and whether it is feasible."""
    import hashlib
    clean, constraints = several(function, params)
    sd = MULTI[function].get("noise", 0.0)
    key = repr((function, seed, sorted((k, float(v)) for k, v in params.items())))
    draw = random.Random(hashlib.sha256(key.encode()).digest())
    observed = [v + sd * draw.gauss(0.0, 1.0) for v in clean] if sd else clean
    bounds = MULTI[function].get("constraints", [])
    feasible = all(c <= b for c, (_, b) in zip(constraints, bounds))
    return observed, clean, constraints, feasible


# The longest a worker of the `async` mode waits for its turn to end (the trial before it ended,
# the one `running - 1` after it started) before it ends out of turn: a guard against a run
# whose trial failed, well inside the study's trial timeout (`study_yaml`).
ORDER_WAIT = 300


def worker(argv):
    """`bayes.py --worker FUNCTION --seed S --log FILE [--in-order DIR --running Q --trials N]
    --x1=...`: hptune's trial of a function of several objectives. It prints the objectives
    and the constraints' values as the final line and appends the evaluation to FILE (JSON
    lines); with `--in-order`, it ends in number order as `examples/objective.rs` does."""
    flags = dict(a.removeprefix("--").split("=", 1) for a in argv)
    function, seed = flags.pop("worker"), int(flags.pop("seed"))
    log, order = Path(flags.pop("log")), flags.pop("in-order", None)
    running, total = int(flags.pop("running", 1)), int(flags.pop("trials", 0))
    observed, clean, constraints, feasible = evaluate_several(function, flags, seed)
    trial = int(os.environ.get("HPTUNE_TRIAL_ID", "0"))
    if order:
        mark = lambda event, k: Path(order) / f"{event}-{k}"
        mark("started", trial).touch()
        deadline = time.monotonic() + ORDER_WAIT
        while time.monotonic() < deadline and not (
                (trial == 0 or mark("ended", trial - 1).exists())
                and (trial + running - 1 >= total or mark("started", trial + running - 1).exists())):
            time.sleep(0.001)
    names = MULTI[function]["metrics"] + [m for m, _ in MULTI[function].get("constraints", [])]
    with log.open("a") as out:
        out.write(json.dumps({"trial": trial, "params": flags, "observed": observed,
                              "clean": clean, "feasible": feasible}) + "\n")
    print(" ".join(f"{n}={v!r}" for n, v in zip(names, observed + constraints)), flush=True)
    if order:
        mark("ended", trial).touch()


def front_regret(function, evaluations):
    """The true front's hypervolume less that of the noise-free values of the run's front:
    the feasible evaluations that no other feasible one dominates by observed values.
    `evaluations`: (observed, clean, feasible) of each trial."""
    import numpy as np
    from optuna._hypervolume import compute_hypervolume
    feasible = [(o, c) for o, c, ok in evaluations if ok]
    dominates = lambda a, b: all(x <= y for x, y in zip(a, b)) and a != b
    front = [c for o, c in feasible if not any(dominates(p, o) for p, _ in feasible)]
    reference = MULTI[function]["reference"]
    inside = [c for c in front if all(v < r for v, r in zip(c, reference))]
    volume = compute_hypervolume(np.array(inside), np.array(reference)) if inside else 0.0
    return FUNCTIONS[function][1] - volume


def run_hptune_several(binaries, sampler, function, trials, mode, seed):
    """`hptune run` of a study of several objectives, the worker `bayes.py --worker`; the
    evaluations in the order they ended, and the proposal times."""
    hptune = binaries[0]
    algorithm = sampler.removeprefix("hptune-")
    parallel = MODES[mode]
    with tempfile.TemporaryDirectory(prefix="hptune-bench-") as work:
        name = f"{function}-{algorithm}-{mode}-{seed}"
        log = Path(work) / "evaluations.jsonl"
        command = [sys.executable, Path(__file__).resolve(), f"--worker={function}",
                   f"--seed={seed}", f"--log={log}"]
        if mode == "async":
            command += [f"--in-order={work}", f"--running={parallel}", f"--trials={trials}"]
        _, timings = run_study(hptune, work, study_yaml(
            name, function, algorithm, trials, parallel, seed, command))
        ended = [json.loads(line) for line in log.read_text().splitlines()]
    evaluations = [(e["observed"], e["clean"], e["feasible"]) for e in ended]
    return evaluations, [timings.get(i) for i in range(trials)], [e["params"] for e in ended]


def run_optuna_several(binaries, sampler, function, trials, mode, seed):
    """Optuna's samplers of several objectives through ask/tell, in the controller's order,
    with `constraints_func` where the function has constraints (random search records
    feasibility only)."""
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    bounds = MULTI[function].get("constraints", [])
    constrained = {"constraints_func": lambda t: t.user_attrs["constraints"]} if bounds else {}
    make = {
        "optuna-gp": lambda: optuna.samplers.GPSampler(seed=seed, **constrained),
        "optuna-tpe-multivariate": lambda: optuna.samplers.TPESampler(
            seed=seed, multivariate=True, **constrained),
        "optuna-nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed, **constrained),
        "optuna-random": lambda: optuna.samplers.RandomSampler(seed=seed),
    }[sampler]
    study = optuna.create_study(directions=["minimize"] * len(MULTI[function]["metrics"]),
                                sampler=make())
    evaluations = []

    def tell(trial):
        observed, clean, constraints, feasible = evaluate_several(function, trial.params, seed)
        trial.set_user_attr("constraints", [c - b for c, (_, b) in zip(constraints, bounds)])
        evaluations.append((observed, clean, feasible))
        study.tell(trial, observed)

    timings, proposals = ask_and_tell(study, function, trials, mode, tell)
    return evaluations, timings, proposals


def run_several(binaries, sampler, function, trials, mode, seed):
    """A run on a function of several objectives, as `run_one` records it; its regret is the
    hypervolume's ([`front_regret`])."""
    runner = run_hptune_several if sampler.startswith("hptune") else run_optuna_several
    start = time.perf_counter()
    evaluations, timings, proposals = runner(binaries, sampler, function, trials, mode, seed)
    regret = front_regret(function, evaluations)
    return {"sampler": sampler, "function": function, "mode": mode,
            "parallel": MODES[mode], "seed": seed, "trials": trials, "regret": [regret],
            "final_regret": regret, "chosen_regret": {}, "proposal_seconds": timings,
            "proposals": proposals, "wall_seconds": time.perf_counter() - start}


def run_one(binaries, sampler, function, trials, mode, seed):
    if function in MULTI:
        return run_several(binaries, sampler, function, trials, mode, seed)
    runner = {"hptune": run_hptune, "optuna": run_optuna, "rustuna": run_rustuna,
              "botorch": run_botorch}[
        sampler.split("-")[0]]
    start = time.perf_counter()
    values, timings, chosen, proposals = runner(binaries, sampler, function, trials, mode, seed)
    optimum = FUNCTIONS[function][1]
    best, trajectory = float("inf"), []
    for v in values:
        if v is not None:
            best = min(best, v)
        trajectory.append(best - optimum)
    # Noisy functions: the noise-free regret of the trial each way of choosing names, the
    # model's where the sampler has one.
    chosen_regret = {by: evaluate(binaries[1], NOISY[function][0], params)[0] - optimum
                     for by, params in chosen.items()}
    final = chosen_regret.get("model", chosen_regret.get("observed", trajectory[-1]))
    return {"sampler": sampler, "function": function, "mode": mode,
            "parallel": MODES[mode], "seed": seed,
            "trials": trials, "regret": trajectory, "final_regret": final,
            "chosen_regret": chosen_regret,
            "proposal_seconds": timings, "proposals": proposals,
            "wall_seconds": time.perf_counter() - start}


def mode_of(run):
    """The run's mode (results written before modes were recorded have only `parallel`)."""
    return run.get("mode", "sequential" if run["parallel"] == 1 else "parallel")


def cell(run):
    """The table cell a run belongs to."""
    return run["sampler"], run["function"], mode_of(run)


def quartiles(xs):
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[1], q[0], q[2]


def function_modes(runs):
    """The (function, mode) cells of `runs`, in the order of FUNCTIONS and MODES."""
    return sorted({cell(r)[1:] for r in runs},
                  key=lambda k: (list(FUNCTIONS).index(k[0]), list(MODES).index(k[1])))


def regret_table(runs, samplers):
    lines = ["| function | mode | " + " | ".join(samplers) + " |",
             "|---|---|" + "---|" * len(samplers)]
    for function, mode in function_modes(runs):
        cells = []
        for s in samplers:
            xs = [r["final_regret"] for r in runs if cell(r) == (s, function, mode)]
            if xs:
                m, lo, hi = quartiles(xs)
                cells.append(f"{m:.3g} [{lo:.2g}, {hi:.2g}] (n={len(xs)})")
            else:
                cells.append("-")
        label = {"sequential": "sequential", "parallel": f"{MODES[mode]} parallel",
                 "async": f"{MODES[mode]} asynchronous"}[mode]
        lines.append(f"| {function} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def early_regret_table(runs, samplers, at):
    """The median over seeds of each cell's regret after the first `n` trials of each run,
    for each `n` in `at`: where each sampler stands after its start (hptune's design,
    CMA-ES's first generation) and on the way to the final value."""
    lines = ["| function | mode | sampler | " + " | ".join(f"after {n}" for n in at) + " |",
             "|---|---|---|" + "---:|" * len(at)]
    for function, mode in function_modes(runs):
        for s in samplers:
            trajectories = [r["regret"] for r in runs if cell(r) == (s, function, mode)]
            if not trajectories:
                continue
            cells = [f"{statistics.median(t[n - 1] for t in trajectories):.3g}"
                     if all(len(t) >= n for t in trajectories) else "-" for n in at]
            lines.append(f"| {function} | {mode} | {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_log10(pairs):
    """The mean over `pairs` (a, b) of log10(a) - log10(b), regrets floored at 1e-12, and its
    standard error (NaN with one pair): negative where the first is lower."""
    d = [math.log10(max(a, 1e-12)) - math.log10(max(b, 1e-12)) for a, b in pairs]
    error = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
    return statistics.mean(d), error


def rival_table(runs):
    """hptune's Bayesian sampler against the other sampler of the lowest median regret in
    each (function, mode), paired by seed: both medians, the paired mean log10 difference ±
    its standard error, and the seeds where hptune is lower."""
    lines = ["| function | mode | hptune | lowest other | its median | hptune against it, paired "
             "| hptune lower in |", "|---|---|---:|---|---:|---:|---:|"]
    by_cell = {}
    for r in runs:
        by_cell.setdefault(cell(r), {})[r["seed"]] = r["final_regret"]
    for (sampler, function, mode), ours in by_cell.items():
        if sampler != "hptune-bayesian":
            continue
        others = {s: regrets for (s, f, m), regrets in by_cell.items()
                  if (f, m) == (function, mode) and s != sampler}
        if not others:
            continue
        rival = min(others, key=lambda s: statistics.median(others[s].values()))
        seeds = sorted(set(ours) & set(others[rival]))
        if not seeds:
            continue
        pairs = [(ours[k], others[rival][k]) for k in seeds]
        mean, error = paired_log10(pairs)
        lines.append(f"| {function} | {mode} | {statistics.median(ours.values()):.3g} | {rival} "
                     f"| {statistics.median(others[rival].values()):.3g} "
                     f"| {mean:+.2f} ± {error:.2f} | {sum(a < b for a, b in pairs)} of "
                     f"{len(pairs)} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def parallel_cost_table(runs, samplers):
    """The regret of each parallel mode against the sequential one, per function and sampler:
    medians, their ratio, and the mean over seeds of log10(parallel) - log10(sequential) with
    its standard error, paired by seed."""
    lines = ["| function | sampler | mode | ratio of medians | Δ mean log10 (paired) |",
             "|---|---|---|---|---|"]
    by_cell = {}
    for r in runs:
        by_cell.setdefault(cell(r), {})[r["seed"]] = max(r["final_regret"], 1e-12)
    for function in FUNCTIONS:
        for s in samplers:
            sequential = by_cell.get((s, function, "sequential"))
            for mode in ("parallel", "async"):
                other = by_cell.get((s, function, mode))
                seeds = sorted(set(sequential or {}) & set(other or {}))
                if len(seeds) < 2:
                    continue
                ratio = statistics.median(other.values()) / statistics.median(sequential.values())
                mean, error = paired_log10([(other[k], sequential[k]) for k in seeds])
                lines.append(f"| {function} | {s} | {mode} | {ratio:.2f}x | "
                             f"{mean:+.2f} ± {error:.2f} (n={len(seeds)}) |")
    return "\n".join(lines) if len(lines) > 2 else ""


def choice_table(runs):
    """On the noisy functions, the median noise-free regret of the trial named best by its
    observed value and by the model, for the samplers that have both."""
    lines = ["| function | mode | sampler | best observed | best by the model |",
             "|---|---|---|---|---|"]
    for function, mode, sampler in sorted({cell(r)[1:] + (r["sampler"],) for r in runs
                                           if "model" in r.get("chosen_regret", {})}):
        rs = [r["chosen_regret"] for r in runs if (*cell(r)[1:], r["sampler"])
              == (function, mode, sampler)]
        medians = [statistics.median(c[by] for c in rs) for by in ("observed", "model")]
        lines.append(f"| {function} | {mode} | {sampler} | {medians[0]:.3g} | "
                     f"{medians[1]:.3g} (n={len(rs)}) |")
    return "\n".join(lines) if len(lines) > 2 else ""


def timing_table(runs, samplers, at):
    lines = ["| sampler | " + " | ".join(f"{n} trials" for n in at) + " |",
             "|---|" + "---|" * len(at)]
    for s in samplers:
        cells = []
        for n in at:
            # The proposals of trials n-2 .. n+2 of every timing run.
            xs = [t for r in runs if r["sampler"] == s
                  for t in r["proposal_seconds"][max(0, n - 2):n + 3] if t is not None]
            cells.append(f"{1000 * statistics.median(xs):.1f} ms" if xs else "-")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def proposal_time_table(runs, samplers):
    """The median time per proposal of each (function, mode) cell's runs, over every proposal
    after hptune's initial design (`hptune_design`), for every sampler alike."""
    lines = ["| function | mode | " + " | ".join(samplers) + " |",
             "|---|---|" + "---|" * len(samplers)]
    for function, mode in function_modes(runs):
        dimension = len(FUNCTIONS[function][0])
        cells = []
        for s in samplers:
            xs = [t for r in runs if cell(r) == (s, function, mode)
                  for t in r["proposal_seconds"][hptune_design(dimension, r["trials"]):]
                  if t is not None]
            cells.append(f"{1000 * statistics.median(xs):.1f} ms" if xs else "-")
        lines.append(f"| {function} | {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def late_time_table(runs, samplers):
    """On the functions of several objectives, the median time per proposal of trials 90-99
    of each cell's runs, and GPSampler's over hptune's."""
    lines = ["| function | mode | " + " | ".join(samplers) + " | GPSampler / hptune |",
             "|---|---|" + "---|" * (len(samplers) + 1)]
    for function, mode in function_modes(r for r in runs if r["function"] in MULTI):
        medians = {}
        for s in samplers:
            xs = [t for r in runs if cell(r) == (s, function, mode)
                  for t in r["proposal_seconds"][90:100] if t is not None]
            medians[s] = statistics.median(xs) if xs else None
        cells = [f"{1000 * medians[s]:.1f} ms" if medians[s] else "-" for s in samplers]
        gp, ours = medians.get("optuna-gp"), medians.get("hptune-bayesian")
        cells.append(f"{gp / ours:.1f}x" if gp and ours else "-")
        lines.append(f"| {function} | {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def main():
    if sys.argv[1:2] and sys.argv[1].startswith("--worker="):
        return worker(sys.argv[1:])
    ensure_venv()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--functions",
                        help="comma-separated (default: every function but those of many "
                             "parameters, several objectives, the middle and CENTRED); given, "
                             "--include files add runs of these functions only")
    parser.add_argument("--samplers", default=",".join(DEFAULT_SAMPLERS),
                        help=f"of {', '.join(SAMPLERS)}")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the seeds are first-seed .. first-seed + seeds - 1")
    parser.add_argument("--trials", type=int, help="trials per run (default: 50, 100 for hartmann6)")
    parser.add_argument("--timing-trials", type=int, default=200,
                        help="length of the timing runs (Hartmann6, sequential); 0: none")
    parser.add_argument("--timing-samplers", default="hptune-bayesian,optuna-gp")
    parser.add_argument("--timing-at", default="10,50,100,200")
    parser.add_argument("--regret-at", default="",
                        help="also print the median regret after these numbers of trials "
                             "(e.g. 10,30), by sampler")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--include", type=Path, action="append", default=[],
                        help="a results file of an earlier run whose runs join the tables where "
                             "this run and earlier --include files have none of the same "
                             "sampler, function, mode and seed (e.g. Optuna's, which do not "
                             "change with hptune, or runs of other seeds)")
    parser.add_argument("--include-samplers",
                        help="comma-separated: --include files add runs of these samplers "
                             "only (default: of every sampler)")
    args = parser.parse_args()
    functions = (args.functions or ",".join(
        f for f in FUNCTIONS if f not in MANY_PARAMETERS and f not in MULTI
        and f not in MIDDLE and f not in CENTRED)).split(",")
    samplers = args.samplers.split(",") if args.samplers else []
    for name in samplers + args.timing_samplers.split(","):
        if name and name not in SAMPLERS:
            parser.error(f"unknown sampler {name!r}: the samplers are {', '.join(SAMPLERS)}")
    timed = args.timing_trials and args.timing_samplers.split(",") or []
    binaries = build(any(name.startswith("hptune") for name in samplers + timed),
                     timed or any(f not in MULTI for f in functions))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS / time.strftime("bayes-%Y%m%d-%H%M%S.json")
    runs, timing_runs = [], []

    def save():
        out.write_text(json.dumps({"argv": sys.argv, "runs": runs, "timing_runs": timing_runs}))

    for function in functions:
        trials = args.trials or FUNCTIONS[function][2]
        for mode in args.modes.split(","):
            for sampler in samplers:
                if not runs_on(sampler, function):
                    print(f"{function}: {sampler} searches linear doubles only; skipped",
                          file=sys.stderr)
                    continue
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    r = run_one(binaries, sampler, function, trials, mode, seed)
                    runs.append(r)
                    print(f"{function} {mode} {sampler} seed {seed}: regret "
                          f"{r['final_regret']:.4g} ({r['wall_seconds']:.1f} s)",
                          file=sys.stderr, flush=True)
                    save()
    if args.timing_trials:
        for sampler in filter(None, args.timing_samplers.split(",")):
            r = run_one(binaries, sampler, "hartmann6", args.timing_trials, "sequential", 0)
            timing_runs.append(r)
            print(f"timing {sampler}: {r['wall_seconds']:.1f} s", file=sys.stderr, flush=True)
            save()

    included_samplers = set(args.include_samplers.split(",")) if args.include_samplers else None

    def joins(run):
        # Whether an included run is of the functions, samplers and trial count asked for.
        return ((not args.functions or run["function"] in functions)
                and (included_samplers is None or run["sampler"] in included_samplers)
                and (not args.trials or run["trials"] == args.trials))

    for path in args.include:
        # An earlier run adds the runs (sampler, function, mode, seed) and the timing rows
        # that this run and the files before it lack.
        earlier = json.loads(path.read_text())
        have = {(*cell(r), r["seed"]) for r in runs}
        timed = {r["sampler"] for r in timing_runs}
        runs += [r for r in earlier["runs"]
                 if (*cell(r), r["seed"]) not in have and joins(r)]
        timing_runs += [r for r in earlier["timing_runs"] if r["sampler"] not in timed]
    samplers += sorted({r["sampler"] for r in runs} - set(samplers), key=SAMPLERS.index)
    # The JSON holds every run in the tables, those of the included files too.
    save()
    print(f"\nCommand: {' '.join(sys.argv)}\n")
    if runs:
        print("Final simple regret, median [Q1, Q3] over seeds:\n")
        print(regret_table(runs, samplers))
        if rivals := rival_table(runs):
            print("\nhptune against the other sampler of the lowest median, paired by seed "
                  "(mean log10 difference ± standard error; negative: hptune lower):\n")
            print(rivals)
        if args.regret_at:
            at = [int(n) for n in args.regret_at.split(",")]
            print("\nRegret after the first trials, median over seeds:\n")
            print(early_regret_table(runs, samplers, at))
        if choice := choice_table(runs):
            print("\nNoisy functions, the noise-free regret of hptune's best trial by each way "
                  "of naming it (median over seeds):\n")
            print(choice)
        print("\nMedian time per proposal after the initial design:\n")
        print(proposal_time_table(runs, samplers))
        if late := late_time_table(runs, samplers):
            print("\nSeveral objectives, median time per proposal at trials 90-99:\n")
            print(late)
        if cost := parallel_cost_table(runs, samplers):
            print("\nWith 4 trials at once against one at a time (a ratio above 1: higher "
                  "regret):\n")
            print(cost)
    if timing_runs:
        longest = max(r["trials"] for r in timing_runs)
        at = [int(n) for n in args.timing_at.split(",") if int(n) <= longest]
        print("\nMedian time per proposal (Hartmann6, sequential, one seed; the proposals of "
              "trials n-2..n+2):\n")
        shown = sorted({r["sampler"] for r in timing_runs}, key=SAMPLERS.index)
        print(timing_table(timing_runs, shown, at))
    print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()
