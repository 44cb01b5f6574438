#!/usr/bin/env python3
"""Parameter importance: hptune's PED-ANOVA against Optuna's on the same trials.

One command: `python3 bench/importance.py [--trials N] [--seeds S]`. It creates bench/.venv
(git-ignored) with Optuna and numpy if it has not got them, builds hptune and the objective
worker (examples/objective.rs), and for each benchmark function and seed:

1. runs a random-search study of N trials with `hptune run` (SQLite, in a temporary folder);
2. exports its trials (`hptune trials --format json`) into an Optuna study in Optuna's own
   storage (an SQLite file beside it), with the same distributions;
3. computes the importances: hptune's from `hptune plot --kind importance` (the figure
   carries each parameter's value as `data-importance`), Optuna's with
   `PedAnovaImportanceEvaluator` (its defaults, which hptune's match);

and prints a Markdown table: both rankings, whether they agree, and the largest relative
difference between the two importances of a parameter.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import bench_venv

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
if not TARGET.is_absolute():
    TARGET = ROOT / TARGET

# name -> parameters: (id, kind, low, high, log) for numbers, (id, "categorical", values).
FUNCTIONS = {
    "branin": [("x1", "double", -5.0, 10.0, False), ("x2", "double", 0.0, 15.0, False)],
    "hartmann6": [(f"x{i}", "double", 0.0, 1.0, False) for i in range(1, 7)],
    "levy": [(f"x{i}", "double", -10.0, 10.0, False) for i in range(1, 5)],
    "mixed": [("x1", "double", 1e-4, 1.0, True), ("x2", "integer", 1, 8, False),
              ("x3", "categorical", ["relu", "tanh", "sigmoid"])],
}


def build():
    subprocess.run(["cargo", "build", "-p", "hptune", "--bin", "hptune", "--example", "objective"],
                   cwd=ROOT, check=True)
    return TARGET / "debug" / "hptune", TARGET / "debug" / "examples" / "objective"


def study_yaml(name, function, trials, seed, objective):
    lines = [f"name: {name}", "objective: {metric: loss, goal: minimize}", "parameters:"]
    for p in FUNCTIONS[function]:
        if p[1] == "categorical":
            lines.append(f"  - {{id: {p[0]}, type: categorical, values: [{', '.join(p[2])}]}}")
        else:
            scale = ", scale: log" if p[4] else ""
            lines.append(f"  - {{id: {p[0]}, type: {p[1]}, min: {p[2]}, max: {p[3]}{scale}}}")
    lines += ["algorithm: random", f"max_trial_count: {trials}", "parallel_trial_count: 4",
              f"seed: {seed}", "trial:", f"  command: [{objective}, --function, {function}]"]
    return "\n".join(lines) + "\n"


def optuna_importance(function, trials, storage):
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.importance import PedAnovaImportanceEvaluator

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    # `normalize=False` (the raw importances, as hptune shows them) is marked experimental.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    distributions = {}
    for p in FUNCTIONS[function]:
        if p[1] == "categorical":
            distributions[p[0]] = CategoricalDistribution(p[2])
        elif p[1] == "integer":
            distributions[p[0]] = IntDistribution(int(p[2]), int(p[3]), log=p[4])
        else:
            distributions[p[0]] = FloatDistribution(p[2], p[3], log=p[4])
    study = optuna.create_study(storage=storage, study_name=function)
    for t in trials:
        if t["state"] != "succeeded":
            continue
        study.add_trial(optuna.trial.create_trial(
            params=t["params"], distributions=distributions, value=t["value"]))
    importances = optuna.importance.get_param_importances(
        study, evaluator=PedAnovaImportanceEvaluator(), normalize=False)
    return dict(importances)


def hptune_importance(hptune, env, cwd, study):
    out = cwd / "importance.svg"
    subprocess.run([hptune, "plot", study, "--kind", "importance", "--out", out], env=env,
                   cwd=cwd, check=True, capture_output=True)
    svg = out.read_text()
    return {m[0]: float(m[1])
            for m in re.findall(r'data-param="([^"]+)" data-importance="([^"]+)"', svg)}


def ranking(importances):
    return [k for k, _ in sorted(importances.items(), key=lambda kv: (-kv[1], kv[0]))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    bench_venv.ensure(["optuna", "numpy"], "optuna, numpy")
    hptune, objective = build()
    print(f"PED-ANOVA importance, hptune against Optuna {__import__('optuna').__version__} "
          f"({args.trials} random-search trials each)\n")
    print("| function | seed | hptune ranking | Optuna ranking | same | max relative difference |")
    print("|---|---|---|---|---|---|")
    for function in FUNCTIONS:
        for seed in range(1, args.seeds + 1):
            with tempfile.TemporaryDirectory() as tmp:
                tmp = Path(tmp)
                env = dict(os.environ, HPTUNE_STORAGE=f"sqlite://{tmp / 'hptune.db'}")
                study = tmp / "study.yaml"
                name = f"{function}-{seed}"
                study.write_text(study_yaml(name, function, args.trials, seed, objective))
                subprocess.run([hptune, "run", study], env=env, cwd=tmp, check=True,
                               capture_output=True)
                trials = json.loads(subprocess.run(
                    [hptune, "trials", name, "--format", "json"], env=env, cwd=tmp, check=True,
                    capture_output=True).stdout)
                ours = hptune_importance(hptune, env, tmp, name)
                theirs = optuna_importance(function, trials, f"sqlite:///{tmp / 'optuna.db'}")
                difference = max(abs(ours[k] - theirs[k]) / max(abs(theirs[k]), 1e-300)
                                 for k in theirs)
                same = ranking(ours) == ranking(theirs)
                print(f"| {function} | {seed} | {' > '.join(ranking(ours))} | "
                      f"{' > '.join(ranking(theirs))} | {'yes' if same else 'NO'} | "
                      f"{difference:.1e} |")


if __name__ == "__main__":
    main()
