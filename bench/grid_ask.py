#!/usr/bin/env python3
"""One `hptune ask` on a grid study of a few thousand trials: its wall and CPU time, for each
binary given, on copies of the same database.

The study: two integers, 100 x 50 = 5,000 grid points, filled with `--trials` trials asked and
told through one `hptune session` of the last binary (each told x + y). Then, `--rounds`
times, each binary in turn on its own copy of that database: `hptune ask STUDY.yaml --format
json` timed (wall, and the CPU of the process, user + system), then `hptune tell` of the trial
it got (not timed), so every round asks at the same size. Prints a Markdown table: the median
per binary and the ratio to the first binary's.

    python3 bench/grid_ask.py --binary BEFORE --binary AFTER [--trials 3000] [--rounds 15]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from hptune_process import Session, timed

STUDY = """\
name: grid
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: integer, min: 0, max: 99}
  - {id: y, type: integer, min: 0, max: 49}
algorithm: grid
parallel_trial_count: 4
"""


def fill(binary, study, env, trials):
    """Asks and tells `trials` trials through one `hptune session`."""
    session = Session(binary, study, env)
    for _ in range(trials):
        trial = session.request({"op": "ask"})[0]
        session.request({"op": "tell", "trial": trial["number"],
                         "value": sum(trial["params"].values())})
    session.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", action="append", required=True, help="an hptune binary (repeat)")
    parser.add_argument("--trials", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    binaries = [str(Path(b).resolve()) for b in args.binary]
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        study = scratch / "grid.yaml"
        study.write_text(STUDY)
        filled = scratch / "filled"
        filled.mkdir()
        fill(binaries[-1], study, {**os.environ, "HPTUNE_STORAGE": f"sqlite://{filled / 'hptune.db'}"}, args.trials)
        envs = []
        for i, _ in enumerate(binaries):
            folder = scratch / f"copy{i}"
            shutil.copytree(filled, folder)
            envs.append({**os.environ, "HPTUNE_STORAGE": f"sqlite://{folder / 'hptune.db'}"})
        walls = [[] for _ in binaries]
        cpus = [[] for _ in binaries]
        proposed = [[] for _ in binaries]
        for _ in range(args.rounds):
            for i, binary in enumerate(binaries):
                out, wall, cpu = timed([binary, "ask", str(study), "--format", "json"], envs[i])
                trial = json.loads(out)[0]
                proposed[i].append(trial["params"])
                walls[i].append(wall)
                cpus[i].append(cpu)
                subprocess.run(
                    [binary, "tell", "grid", str(trial["number"]), "--value", "1"],
                    env=envs[i], check=True, capture_output=True,
                )
        assert all(p == proposed[0] for p in proposed), "the binaries proposed different points"
    print(f"One `hptune ask` on a grid study of {args.trials} trials (5,000 points), median of {args.rounds}:\n")
    print("| binary | wall ms | CPU ms | wall ratio | CPU ratio |")
    print("|---|---:|---:|---:|---:|")
    base_wall, base_cpu = statistics.median(walls[0]), statistics.median(cpus[0])
    for binary, wall, cpu in zip(binaries, walls, cpus):
        wall, cpu = statistics.median(wall), statistics.median(cpu)
        print(f"| {binary} | {wall * 1e3:.1f} | {cpu * 1e3:.1f} | {wall / base_wall:.2f} | {cpu / base_cpu:.2f} |")


if __name__ == "__main__":
    main()
