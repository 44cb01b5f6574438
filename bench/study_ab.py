#!/usr/bin/env python3
"""One study run end to end by two or more `hptune` binaries, alternating, in one command.

For a change that should not alter what a study costs (a refactoring, a new dependency), run
the same study file with the binary before and after it: each round runs every binary once,
in turn, on a fresh SQLite database and log folder, and the table gives each binary's median
wall time, its ratio to the first binary's, the trials that completed and the best value.

    python3 bench/study_ab.py studies/sst2-minilm.yaml OLD_HPTUNE NEW_HPTUNE [--rounds 1]

Run from the repository root (study files name their workers relative to it).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_once(hptune: str, study: str, folder: Path) -> tuple[float, int, float]:
    """Runs the study once; wall seconds, succeeded trials, best value."""
    database = f"sqlite://{folder}/hptune.db"
    start = time.perf_counter()
    subprocess.run(
        [hptune, "run", study, "--storage", database, "--log-dir", str(folder / "logs")],
        check=True, capture_output=True, text=True)
    elapsed = time.perf_counter() - start

    def read(*command: str):
        out = subprocess.run([hptune, *command, study, "--storage", database, "--format", "json"],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)

    completed = sum(1 for trial in read("trials") if trial["state"] == "succeeded")
    value = read("best")["value"]
    return elapsed, completed, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("study")
    parser.add_argument("hptune", nargs="+", help="hptune binaries; the first is the baseline")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    walls: dict[str, list[float]] = {b: [] for b in args.hptune}
    outcome: dict[str, tuple[int, float]] = {}
    for round_ in range(args.rounds):
        for binary in args.hptune:
            with tempfile.TemporaryDirectory() as folder:
                wall, completed, best = run_once(binary, args.study, Path(folder))
            walls[binary].append(wall)
            outcome[binary] = (completed, best)
            print(f"round {round_ + 1}: {binary}: {wall:.1f} s", file=sys.stderr)
    baseline = statistics.median(walls[args.hptune[0]])
    print(f"`{args.study}`, {args.rounds} round(s), median wall time\n")
    print("| hptune | wall s | ratio to the first | succeeded trials | best value |")
    print("|---|---:|---:|---:|---:|")
    for binary in args.hptune:
        wall = statistics.median(walls[binary])
        completed, best = outcome[binary]
        print(f"| {binary} | {wall:.1f} | {wall / baseline:.2f}x | {completed} | {best:.4g} |")


if __name__ == "__main__":
    main()
