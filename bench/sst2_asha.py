#!/usr/bin/env python3
"""The real multi-fidelity study: studies/sst2-minilm-asha.yaml (all-MiniLM-L6-v2 fine-tuned
on SST-2 on the CPU, epochs as ASHA's resource) with the curve model (`fidelity: model`) and
with the model of final values (`fidelity: off`), per seed side by side so both see the same
load.

One command: `python3 bench/sst2_asha.py [--seeds N] [--first-seed S] [--work DIR]
[--hptune PATH]`. Before it: `cargo build --workspace && scripts/fetch-model.sh` (the study
runs target/debug/hptune-trainer). Each study is the file with its `seed`, `fidelity` and
`name` replaced, run by `hptune run` into DIR/sst2-asha-VARIANT-SEED.db (default DIR:
bench/results/sst2-asha); a study already in DIR continues where it stopped (a spent budget
returns at once), so the command can be repeated after an interruption. The trials' model
folders are removed once a seed's two studies end. `--summarise DIR` prints the table of the
databases in DIR.

Per study: the best accuracy (a succeeded trial's final value, as `hptune best`), the highest
accuracy any trial reported after any epoch (a trial ASHA stopped included), the trial time
(the sum of the trials' durations: one trial runs at a time), the epochs trained, and the
median accuracy after the first epoch of the trials proposed once the two variants' proposals
differ (the trials before, the initial design from the same seed, are the same in both): how
well each sampler's own proposals start. Per seed: the trial time the curve model takes to
reach the best accuracy of `fidelity: off` less 0.3 points (the trials in the order they
ended, each adding its duration), as a share of `fidelity: off`'s whole trial time; the same
share in epochs, which the load does not move.
"""

import argparse
import math
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "studies" / "sst2-minilm-asha.yaml"
VARIANTS = ("model", "off")
# How far below `fidelity: off`'s best accuracy the curve model's best may end and still match.
TOLERANCE = 0.003


def study_text(seed, variant):
    text = STUDY.read_text()
    text = re.sub(r"(?m)^seed: .*$", f"seed: {seed}", text)
    text = re.sub(r"(?m)^name: .*$", f"name: sst2-asha-{variant}-{seed}", text)
    return text.replace("fidelity: model", f"fidelity: {variant}")


def run_study(hptune, work, seed, variant):
    name = f"sst2-asha-{variant}-{seed}"
    study = work / f"{name}.yaml"
    study.write_text(study_text(seed, variant))
    with open(work / f"run-{variant}-{seed}.out", "a") as out:
        code = subprocess.run(
            [hptune, "run", str(study), "--storage", f"sqlite://{work / (name + '.db')}",
             "--log-dir", str(work / f"logs-{variant}-{seed}"),
             "--artifacts-dir", str(work / f"art-{variant}-{seed}")],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        sys.exit(f"{name}: hptune run exited {code}; its output is in {out.name}")


def timestamp(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def read_study(db):
    """The study's ended trials in the order they ended, each a dict: its number, params,
    seconds, epochs, final value (None unless it succeeded), accuracy after epoch 1 and highest
    accuracy after any epoch."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT t.number, t.params, t.state, t.value, t.started_at, t.finished_at, "
        "(SELECT MAX(m.step) FROM measurements m WHERE m.trial_id = t.id AND m.attempt = t.attempt), "
        "(SELECT m.value FROM measurements m WHERE m.trial_id = t.id AND m.attempt = t.attempt "
        "AND m.step = 1 AND m.metric = 'accuracy'), "
        "(SELECT MAX(m.value) FROM measurements m WHERE m.trial_id = t.id "
        "AND m.attempt = t.attempt AND m.metric = 'accuracy') "
        "FROM trials t WHERE t.finished_at IS NOT NULL ORDER BY t.finished_at").fetchall()
    con.close()
    return [{"number": number, "params": params, "seconds": timestamp(end) - timestamp(begin),
             "epochs": steps or 0, "value": value if state == "succeeded" else None,
             "first": first, "highest": highest}
            for number, params, state, value, begin, end, steps, first, highest in rows]


def best(trials):
    """The best final value and its trial's number (the first of equal ones), or None."""
    done = [t for t in trials if t["value"] is not None]
    return max(((t["value"], -t["number"]) for t in done), default=None)


def reached(trials, target):
    """Seconds and epochs spent up to the end of the first trial at or above `target`."""
    seconds = epochs = 0.0
    for t in trials:
        seconds, epochs = seconds + t["seconds"], epochs + t["epochs"]
        if t["value"] is not None and t["value"] >= target:
            return seconds, epochs
    return None


def diverged(studies):
    """The first trial number where the variants proposed different parameters: the trials
    before it (the initial design, from the same seed) are the same in both."""
    params = [{t["number"]: t["params"] for t in trials} for trials in studies.values()]
    number = 0
    while all(number in p for p in params) and len({p[number] for p in params}) == 1:
        number += 1
    return number


def summarise(work):
    seeds = sorted({int(m.group(1)) for db in work.glob("sst2-asha-*-*.db")
                    if (m := re.fullmatch(r"sst2-asha-(?:model|off)-(\d+)\.db", db.name))})
    print("| seed | variant | trials | best accuracy (trial) | highest after any epoch |"
          " trial time, s | epochs | epoch-1 accuracy after the shared trials, median |"
          " to off's best - 0.3 pt: time share | epochs share |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    shares = []
    for seed in seeds:
        studies = {v: read_study(work / f"sst2-asha-{v}-{seed}.db") for v in VARIANTS
                   if (work / f"sst2-asha-{v}-{seed}.db").exists()}
        shared = diverged(studies)
        off = studies.get("off")
        for variant, trials in studies.items():
            share = "- | -"
            if variant == "model" and off and best(off):
                hit = reached(trials, best(off)[0] - TOLERANCE)
                total = (sum(t["seconds"] for t in off), sum(t["epochs"] for t in off))
                shares.append((hit[0] / total[0], hit[1] / total[1]) if hit else (math.inf,) * 2)
                share = " | ".join(f"{x:.2f}" for x in shares[-1])
            found = best(trials)
            highest = [t["highest"] for t in trials if t["highest"] is not None]
            firsts = [t["first"] for t in trials if t["number"] >= shared and t["first"] is not None]
            print(f"| {seed} | {variant} | {len(trials)} | "
                  f"{f'{found[0]:.4f} ({-found[1]})' if found else '-'} | "
                  f"{f'{max(highest):.4f}' if highest else '-'} | "
                  f"{sum(t['seconds'] for t in trials):.0f} | {sum(t['epochs'] for t in trials)} | "
                  f"{f'{statistics.median(firsts):.3f} (trials {shared}+)' if firsts else '-'} |"
                  f" {share} |")
    if shares:
        print(f"\nThe curve model reaches `fidelity: off`'s best accuracy less 0.3 points in a median"
              f" {statistics.median(s for s, _ in shares):.2f} of its trial time"
              f" ({statistics.median(e for _, e in shares):.2f} of its epochs) over {len(shares)} seeds.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--work", type=lambda p: Path(p).resolve(),
                        default=ROOT / "bench" / "results" / "sst2-asha")
    parser.add_argument("--hptune", default=str(ROOT / "target" / "debug" / "hptune"),
                        type=lambda p: str(Path(p).resolve()))
    parser.add_argument("--summarise", metavar="DIR", type=Path,
                        help="only print the table of the studies in DIR")
    args = parser.parse_args()
    if args.summarise:
        return summarise(args.summarise)
    args.work.mkdir(parents=True, exist_ok=True)
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        with ThreadPoolExecutor(len(VARIANTS)) as pool:
            for future in [pool.submit(run_study, args.hptune, args.work, seed, v) for v in VARIANTS]:
                future.result()
        for variant in VARIANTS:
            shutil.rmtree(args.work / f"art-{variant}-{seed}", ignore_errors=True)
    summarise(args.work)


if __name__ == "__main__":
    main()
