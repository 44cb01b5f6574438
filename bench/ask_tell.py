#!/usr/bin/env python3
"""Ask/tell overhead: the time per trial of `hptune ask` + `hptune tell` against Optuna's
and Rustuna's ask/tell, all on SQLite, in the same command.

A client asks for a trial, computes x^2 (no work) and tells the value, N times one after
another, on a study of one double with the random sampler (the sampler's own cost apart):

- hptune's commands: two processes per trial (`hptune ask --format json`, `hptune tell
  --value`), as a shell script or a program in any language drives it;
- hptune's Python package: `Study.ask()` / `Study.tell()`, requests to one `hptune session`
  process that the package starts on the first and keeps (no process per trial);
- Optuna in-process: `study.ask()` / `study.tell()` with its SQLite storage (RDBStorage), no
  process per trial;
- Rustuna (Optuna's Rust port, a wheel from PyPI) in-process: `study.ask()` /
  `study.tell()` with its `SQLite3Storage`;
- Optuna's own commands (`optuna ask` / `optuna tell`, a process each, as hptune's), over
  fewer trials (`--cli-trials`): each pays Python's and Optuna's import.

Then, from a wheel built of the same binary (scripts/build-wheel.py): the seconds of `pip
install` into a fresh virtual environment and of a first trial through the installed package.

Prints Markdown tables (per trial: the mean, and the mean of the first and last 10% of the
trials, which shows whether a trial costs more as the study grows); writes
bench/results/ask_tell.json.

    python3 bench/ask_tell.py [--trials 1000] [--cli-trials 50] [--profile release|debug]
                              [--binary PATH]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_venv  # noqa: E402

bench_venv.ensure(["optuna", "rustuna"], "optuna,rustuna")

import optuna  # noqa: E402
import rustuna  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

sys.path.insert(0, str(ROOT / "python" / "src"))
import hptune  # noqa: E402

STUDY = """\
name: overhead
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x, type: double, min: -5.0, max: 5.0}}
algorithm: random
max_trial_count: {trials}
parallel_trial_count: 1
seed: 1
"""


def hptune_binary(profile):
    args = ["cargo", "build", "--bin", "hptune"] + (["--release"] if profile == "release" else [])
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True)
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )
    return Path(json.loads(meta.stdout)["target_directory"]) / profile / "hptune"


def hptune_loop(binary, trials, folder):
    study = folder / "study.yaml"
    study.write_text(STUDY.format(trials=trials))
    env = {**os.environ, "HPTUNE_STORAGE": f"sqlite://{folder / 'hptune.db'}"}
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        asked = subprocess.run(
            [binary, "ask", study, "--format", "json"], env=env, check=True,
            capture_output=True, text=True,
        )
        trial = json.loads(asked.stdout)[0]
        x = trial["params"]["x"]
        subprocess.run(
            [binary, "tell", "overhead", str(trial["number"]), "--value", repr(x * x)],
            env=env, check=True, capture_output=True,
        )
        times.append(time.perf_counter() - start)
    told = subprocess.run(
        [binary, "trials", "overhead", "--state", "succeeded", "--format", "json"],
        env=env, check=True, capture_output=True, text=True,
    )
    assert len(json.loads(told.stdout)) == trials, "hptune lost a trial"
    return times


def hptune_session_loop(binary, trials, folder):
    study_file = folder / "session.yaml"
    study_file.write_text(STUDY.format(trials=trials).replace("name: overhead", "name: session"))
    times = []
    with hptune.Study(study_file, storage=f"sqlite://{folder / 'session.db'}", binary=str(binary)) as study:
        for _ in range(trials):
            start = time.perf_counter()
            trial = study.ask()
            x = trial.params["x"]
            study.tell(trial, x * x)
            times.append(time.perf_counter() - start)
        assert len([t for t in study.trials() if t["state"] == "succeeded"]) == trials, "hptune lost a trial"
    return times


def optuna_loop(trials, folder):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name="overhead", storage=f"sqlite:///{folder / 'optuna.db'}",
        sampler=optuna.samplers.RandomSampler(seed=1),
    )
    space = {"x": optuna.distributions.FloatDistribution(-5.0, 5.0)}
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        trial = study.ask(space)
        x = trial.params["x"]
        study.tell(trial, x * x)
        times.append(time.perf_counter() - start)
    return times


def rustuna_loop(trials, folder):
    study = rustuna.create_study(
        study_name="overhead", storage=rustuna.storages.SQLite3Storage(str(folder / "rustuna.db")),
        sampler=rustuna.samplers.RandomSampler(seed=1), direction="minimize",
    )
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        trial = study.ask()
        x = trial.suggest_float("x", -5.0, 5.0)
        study.tell(trial.number, x * x)
        times.append(time.perf_counter() - start)
    assert len(study.trials) == trials, "Rustuna lost a trial"
    return times


def optuna_cli_loop(trials, folder):
    optuna_cli = Path(sys.executable).with_name("optuna")
    storage = f"sqlite:///{folder / 'optuna-cli.db'}"
    common = ["--storage", storage, "--study-name", "overhead"]
    subprocess.run([optuna_cli, "create-study", *common], check=True, capture_output=True)
    space = json.dumps({"x": {"name": "FloatDistribution", "attributes": {"low": -5.0, "high": 5.0}}})
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        asked = subprocess.run(
            [optuna_cli, "ask", *common, "--sampler", "RandomSampler", "--search-space", space],
            check=True, capture_output=True, text=True,
        )
        trial = json.loads(asked.stdout.strip().splitlines()[-1])
        x = trial["params"]["x"]
        subprocess.run(
            [optuna_cli, "tell", *common, "--trial-number", str(trial["number"]),
             "--values", repr(x * x)],
            check=True, capture_output=True,
        )
        times.append(time.perf_counter() - start)
    return times


def wheel_to_first_trial(binary, folder):
    """Seconds of `pip install` of a wheel carrying `binary` into a fresh virtual environment
    (offline, as from a downloaded file), then of a first trial asked and told through the
    installed package and binary."""
    wheel = subprocess.run(
        [sys.executable, ROOT / "scripts" / "build-wheel.py", "--binary", binary, "--out", folder / "dist"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    env_dir = folder / "wheel-venv"
    subprocess.run([sys.executable, "-m", "venv", env_dir], check=True)
    python = env_dir / "bin" / "python"
    start = time.perf_counter()
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check", wheel],
        check=True,
    )
    installed = time.perf_counter()
    study = folder / "first.yaml"
    study.write_text(STUDY.format(trials=1).replace("name: overhead", "name: first"))
    client = (
        "import hptune, sys; s = hptune.Study(sys.argv[1], storage=sys.argv[2]); "
        "t = s.ask(); s.tell(t, t.params['x'] ** 2); assert s.trials()[0]['state'] == 'succeeded'"
    )
    env = {k: v for k, v in os.environ.items() if k != "HPTUNE_BIN"}
    subprocess.run([python, "-c", client, study, f"sqlite://{folder / 'first.db'}"], env=env, check=True)
    return installed - start, time.perf_counter() - installed


def summary(times):
    tenth = max(1, len(times) // 10)
    mean = lambda xs: 1000 * sum(xs) / len(xs)  # noqa: E731
    return {
        "trials": len(times),
        "ms_per_trial": mean(times),
        "first_10pct_ms": mean(times[:tenth]),
        "last_10pct_ms": mean(times[-tenth:]),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--cli-trials", type=int, default=50)
    parser.add_argument("--profile", choices=["release", "debug"], default="release")
    parser.add_argument("--binary", type=Path, help="the hptune binary to measure (not built; --profile names it)")
    args = parser.parse_args()
    binary = args.binary.resolve() if args.binary else hptune_binary(args.profile)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows[f"hptune `ask` + `tell` commands ({args.profile} build, two processes)"] = summary(hptune_loop(binary, args.trials, folder))
        rows[f"hptune package Study.ask + Study.tell ({args.profile} build, one `hptune session`)"] = summary(hptune_session_loop(binary, args.trials, folder))
        rows[f"Optuna {optuna.__version__} study.ask + study.tell (in-process)"] = summary(optuna_loop(args.trials, folder))
        rows[f"Rustuna {version('rustuna')} study.ask + study.tell (in-process)"] = summary(rustuna_loop(args.trials, folder))
        rows["Optuna `optuna ask` + `optuna tell` (a process each)"] = summary(optuna_cli_loop(args.cli_trials, folder))
        install, first = wheel_to_first_trial(binary, folder)
    print("| client, SQLite | trials | ms per trial | first 10% | last 10% |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['trials']} | {row['ms_per_trial']:.1f} | "
              f"{row['first_10pct_ms']:.1f} | {row['last_10pct_ms']:.1f} |")
    print()
    print("| from the wheel | seconds |")
    print("|---|---:|")
    print(f"| `pip install --no-index` of the wheel into a fresh venv | {install:.2f} |")
    print(f"| then a first trial asked and told through the package | {first:.2f} |")
    rows["wheel"] = {"pip_install_s": install, "first_trial_s": first}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ask_tell.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
