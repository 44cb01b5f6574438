#!/usr/bin/env python3
"""Orchestration overhead: trials per second of `hptune run` against Optuna with SQLite.

hptune runs N trials of a worker process that reports at once (examples/objective.rs on
Branin), random sampler, SQLite storage, every state change committed; Optuna runs the same
number of trials of the same function in-process (no process per trial), RandomSampler,
its SQLite storage. Both at parallelism 1 and 4, in the same command, so the ratio holds on
a noisy machine; with --rounds N they alternate N times and the table gives the median of
the rounds' ratios. It also checks that hptune lost and duplicated no trial. As a floor, it
times the worker alone, started N times one after another by a shell loop that saves its
stdout and stderr to two new files per run, as hptune does: what a process per trial costs
before any orchestration, and so the highest ratio any orchestrator could reach at
parallelism 1 (hptune's own overhead per trial is the difference).

    python3 bench/orchestration.py [--trials 1000] [--optuna-trials 1000] [--rounds 1]
                                   [--hptune BIN --worker BIN]

It builds hptune and the worker in release mode, unless `--hptune` and `--worker` name the
binaries to measure (a build of another commit, for a before and after). Creates bench/.venv with Optuna on first use; prints a Markdown table; writes
bench/results/orchestration.json.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "bench" / ".venv"
RESULTS = ROOT / "bench" / "results"

STUDY = """\
name: overhead
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x1, type: double, min: -5.0, max: 10.0}}
  - {{id: x2, type: double, min: 0.0, max: 15.0}}
algorithm: random
max_trial_count: {trials}
parallel_trial_count: {parallel}
max_failed_trial_count: 1
seed: 1
trial:
  command: [{worker}, --function, branin]
"""

OPTUNA = r"""
import math, sys, time, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
trials, jobs, url = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def branin(trial):
    x1 = trial.suggest_float("x1", -5.0, 10.0)
    x2 = trial.suggest_float("x2", 0.0, 15.0)
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10
study = optuna.create_study(storage=url, sampler=optuna.samplers.RandomSampler(seed=1))
start = time.perf_counter()
study.optimize(branin, n_trials=trials, n_jobs=jobs)
elapsed = time.perf_counter() - start
print(elapsed, len(study.trials), optuna.__version__)
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def build():
    run(["cargo", "build", "--release", "--bin", "hptune", "--example", "objective"], cwd=ROOT)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / "hptune", target / "release" / "examples" / "objective"


def ensure_optuna():
    python = VENV / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", str(VENV)])
    if subprocess.run([str(python), "-c", "import optuna"], capture_output=True).returncode:
        run([str(python), "-m", "pip", "install", "--quiet", "optuna"])
    return python


def bench_hptune(hptune, worker, trials, parallel, tmp, round_):
    """Runs the study in a fresh directory under `tmp`. The directories are deleted only at the
    end of the benchmark: on ext4 without a journal (as on the machine these figures come
    from), the kernel avoids reusing recently deleted inodes by scanning past them, so for
    minutes after one run deleted its 2,000 log files the next run's file creations would
    pay for that scan (perf: half of hptune's CPU time in `recently_deleted`)."""
    tmp = Path(tmp) / f"hptune-parallel-{parallel}-{round_}"
    tmp.mkdir()
    study = tmp / "study.yaml"
    study.write_text(STUDY.format(trials=trials, parallel=parallel, worker=worker))
    env = dict(os.environ, HPTUNE_STORAGE=f"sqlite://{tmp}/hptune.db")
    start = time.perf_counter()
    run([str(hptune), "run", str(study), "--log-dir", f"{tmp}/logs"], cwd=tmp, env=env)
    elapsed = time.perf_counter() - start
    listed = json.loads(run([str(hptune), "trials", "overhead", "--format", "json"],
                            cwd=tmp, env=env).stdout)
    numbers = [t["number"] for t in listed]
    succeeded = sum(t["state"] == "succeeded" for t in listed)
    problems = []
    if sorted(numbers) != list(range(trials)):
        problems.append(f"numbers are not 0..{trials - 1}")
    if succeeded != trials:
        problems.append(f"{trials - succeeded} trials did not succeed")
    return elapsed, len(listed), problems


def bench_worker_alone(worker, trials, tmp, round_):
    logs = Path(tmp) / f"alone-{round_}"
    logs.mkdir()
    loop = ('for i in $(seq $1); do "$0" --function branin --x1=1.5 --x2=2.5 '
            '>"$2/$i.log" 2>"$2/$i.err"; done')
    start = time.perf_counter()
    run(["bash", "-c", loop, str(worker), str(trials), str(logs)])
    return time.perf_counter() - start


def bench_optuna(python, trials, jobs):
    with tempfile.TemporaryDirectory() as tmp:
        out = run([str(python), "-c", OPTUNA, str(trials), str(jobs), f"sqlite:///{tmp}/optuna.db"])
    elapsed, count, version = out.stdout.split()
    return float(elapsed), int(count), version


def median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--optuna-trials", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1,
                        help="times hptune and Optuna alternate; the median ratio is reported")
    parser.add_argument("--hptune", type=Path, help="the hptune binary (default: build one)")
    parser.add_argument("--worker", type=Path, help="the worker binary, with --hptune")
    args = parser.parse_args()
    if (args.hptune is None) != (args.worker is None):
        parser.error("--hptune and --worker go together")

    hptune, worker = (args.hptune.resolve(), args.worker.resolve()) if args.hptune else build()
    python = ensure_optuna()
    scratch = tempfile.TemporaryDirectory()
    rounds = {1: [], 4: []}
    for round_ in range(args.rounds):
        alone = args.trials / bench_worker_alone(worker, args.trials, scratch.name, round_)
        for parallel in (1, 4):
            h_time, h_count, problems = bench_hptune(hptune, worker, args.trials, parallel,
                                                     scratch.name, round_)
            o_time, o_count, version = bench_optuna(python, args.optuna_trials, parallel)
            h_rate, o_rate = h_count / h_time, o_count / o_time
            rounds[parallel].append({
                "hptune_trials": h_count, "hptune_seconds": round(h_time, 3),
                "hptune_trials_per_s": round(h_rate, 1),
                "optuna_trials": o_count, "optuna_seconds": round(o_time, 3),
                "optuna_trials_per_s": round(o_rate, 1), "optuna_version": version,
                "ratio": round(h_rate / o_rate, 1), "problems": problems,
                "worker_alone_per_s": round(alone, 1),
                "floor_ratio": round(alone / o_rate, 1),
                "hptune_overhead_ms_per_trial": round(1000 * (1 / h_rate - 1 / alone), 2),
            })

    version = rounds[1][0]["optuna_version"]
    print(f"| parallel | hptune trials/s (process per trial) | Optuna {version} trials/s "
          "(in-process) | ratio | per round | the worker alone / Optuna | lost or duplicated "
          "| hptune's overhead ms/trial |")
    print("|---:|---:|---:|---:|---|---:|---|---:|")
    rows = []
    for parallel, runs in rounds.items():
        row = {key: median([r[key] for r in runs]) for key in (
            "hptune_trials_per_s", "optuna_trials_per_s", "ratio", "worker_alone_per_s",
            "floor_ratio", "hptune_overhead_ms_per_trial")}
        problems = sorted({p for r in runs for p in r["problems"]})
        rows.append({"parallel": parallel, "median": row, "rounds": runs, "problems": problems})
        print(f"| {parallel} | {row['hptune_trials_per_s']:.1f} | "
              f"{row['optuna_trials_per_s']:.1f} | {row['ratio']:.1f}x | "
              f"{', '.join(str(r['ratio']) for r in runs)} | {row['floor_ratio']:.1f}x | "
              f"{', '.join(problems) or 'none'} | {row['hptune_overhead_ms_per_trial']:.2f} |")
    alone = median([r["worker_alone_per_s"] for r in rounds[1]])
    print(f"\n{args.trials} trials each, medians of {args.rounds} round(s). The worker alone, "
          f"{args.trials} runs one after another from a shell loop, its output to two new files "
          f"per run: {alone:.1f} runs/s ({1000 / alone:.2f} ms each); 'the worker alone / Optuna' "
          "is the highest ratio a process per trial allows at parallelism 1, and the overhead "
          "column is hptune's time per trial minus the worker's alone.")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "orchestration.json").write_text(json.dumps(rows, indent=2))
    if any(r["problems"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
