#!/usr/bin/env python3
"""One study run end to end by two or more `hptune` binaries, alternating, in one command.

For a change that should not alter what a study costs or proposes (a refactoring, a new
dependency), run the same study file with the binary before and after it: each round runs
every binary once, in turn, on a fresh SQLite database and log folder, and the table gives
each binary's median wall time, its ratio to the first binary's, the trials that completed,
the best value, and whether its trials (every number's parameters, state and value) are
those of the first binary's run in the same round.

    python3 bench/study_ab.py studies/sst2-minilm.yaml OLD_HPTUNE NEW_HPTUNE [--rounds 1]

With `--bayes FUNCTIONS`, the studies are `bench/bayes.py`'s instead of a file: hptune's
Bayesian sampler on each function, mode and seed, through bayes.py's own runner with the
worker `--objective` (the same for every binary, so only hptune differs). It prints, per
binary, the runs whose proposals (every trial's parameters and value) and named best trials
equal the first binary's, bayes.py's tables of each binary's runs, and each binary's final
regret against the first's, paired by seed: the medians, the mean difference of log10 regret
with its standard error, and in how many seeds it is lower (`--out FILE`: every run as JSON).

    python3 bench/study_ab.py --bayes branin,hartmann6,branin-noisy --modes sequential,async \\
        --seeds 3 --objective target/release/examples/objective OLD_HPTUNE NEW_HPTUNE

With `--paired`, the arguments are pairs of an `--out` file and a binary it ran: the paired
table of that binary's runs against the file's first binary, the files' runs pooled (e.g. the
same change run by two builds over different seeds).

    python3 bench/study_ab.py --paired seeds-0-9.json NEW_A seeds-10-29.json NEW_B

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

import bayes
import paired


def run_once(hptune: str, study: str, folder: Path) -> tuple[float, list[dict], float]:
    """Runs the study once; wall seconds, the trials by number, best value."""
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

    trials = sorted(read("trials"), key=lambda t: t["number"])
    return elapsed, trials, read("best")["value"]


def first_difference(trials: list[dict], baseline: list[dict]) -> str:
    """'same', or the first trial number whose parameters, state or value differ."""
    keys = ("number", "params", "state", "value")
    for ours, theirs in zip(trials, baseline):
        if any(ours.get(k) != theirs.get(k) for k in keys):
            return f"differ from trial {ours['number']}"
    if len(trials) != len(baseline):
        return f"{len(trials)} trials against {len(baseline)}"
    return "same"


def study_main(args, study: str, binaries: list[str]) -> None:
    """The table of one study file run by every binary."""
    walls: list[list[float]] = [[] for _ in binaries]
    same: list[list[str]] = [[] for _ in binaries]
    outcome: list[tuple[int, float]] = [(0, 0.0)] * len(binaries)
    for round_ in range(args.rounds):
        first = None
        for i, binary in enumerate(binaries):
            with tempfile.TemporaryDirectory() as folder:
                wall, trials, best = run_once(binary, study, Path(folder))
            first = trials if first is None else first
            walls[i].append(wall)
            outcome[i] = (sum(t["state"] == "succeeded" for t in trials), best)
            same[i].append(first_difference(trials, first))
            print(f"round {round_ + 1}: {binary}: {wall:.1f} s", file=sys.stderr)
    baseline = statistics.median(walls[0])
    print(f"`{study}`, {args.rounds} round(s), median wall time\n")
    print("| hptune | wall s | ratio to the first | succeeded trials | best value "
          "| trials as the first's, per round |")
    print("|---|---:|---:|---:|---:|---|")
    for binary, wall, (completed, best), rounds in zip(binaries, walls, outcome, same):
        wall = statistics.median(wall)
        print(f"| {binary} | {wall:.1f} | {wall / baseline:.2f}x | {completed} | {best:.4g} "
              f"| {', '.join(rounds)} |")


def bayes_main(args, binaries: list[str]) -> None:
    """bayes.py's studies run by every binary, their proposals compared run by run."""
    runs: list[list[dict]] = [[] for _ in binaries]
    # bayes.py runs hptune in the study's folder: the paths must not be relative.
    objective = Path(args.objective).resolve()
    for function in args.bayes.split(","):
        trials = args.trials or bayes.FUNCTIONS[function][2]
        for mode in args.modes.split(","):
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for binary, theirs in zip(binaries, runs):
                    run = bayes.run_one((Path(binary).resolve(), objective), "hptune-bayesian",
                                        function, trials, mode, seed)
                    theirs.append(run)
                    if args.out:
                        # Written whole, then renamed: a reader never sees half a file.
                        partial = args.out.with_suffix(".partial")
                        partial.write_text(json.dumps({"argv": sys.argv, "binaries": binaries,
                                                       "runs": runs}))
                        partial.replace(args.out)
                    print(f"{function} {mode} seed {seed}: {binary}: regret "
                          f"{run['final_regret']:.4g} ({run['wall_seconds']:.1f} s)",
                          file=sys.stderr, flush=True)
    compared = ("proposals", "regret", "chosen_regret")
    print(f"Command: {' '.join(sys.argv)}\n")
    print("| hptune | runs | proposals and named best as the first's | differing runs "
          "| wall s, sum |")
    print("|---|---:|---:|---|---:|")
    for binary, theirs in zip(binaries, runs):
        differing = [f"{r['function']} {r['mode']} seed {r['seed']}"
                     for r, first in zip(theirs, runs[0])
                     if any(r[k] != first[k] for k in compared)]
        total = sum(r["wall_seconds"] for r in theirs)
        print(f"| {binary} | {len(theirs)} | {len(theirs) - len(differing)} "
              f"| {', '.join(differing) or 'none'} | {total:.0f} |")
    for binary, theirs in zip(binaries, runs):
        print(f"\n{binary}: final simple regret, median [Q1, Q3] over seeds:\n")
        print(bayes.regret_table(theirs, ["hptune-bayesian"]))
        if choice := bayes.choice_table(theirs):
            print(f"\n{binary}: noisy functions, the noise-free regret of the best trial by "
                  "each way of naming it (median over seeds):\n")
            print(choice)
        print(f"\n{binary}: median time per proposal after the initial design:\n")
        print(bayes.proposal_time_table(theirs, ["hptune-bayesian"]))
    for binary, theirs in zip(binaries[1:], runs[1:]):
        print(f"\n{binary} against {binaries[0]}, paired by seed (negative: lower):\n")
        print(paired_table(theirs, runs[0]))


def paired_table(runs: list[dict], baseline: list[dict]) -> str:
    """Per function and mode, `runs` against `baseline` paired by seed
    (`paired.summary_table`)."""
    return paired.summary_table(paired.by_seed(baseline), paired.by_seed(runs), "baseline",
                                "this binary")


def pooled_main(args: list[str]) -> None:
    """The paired table of each (file, binary) pair's runs against the file's first binary."""
    runs: list[dict] = []
    baseline: list[dict] = []
    for path, binary in zip(args[::2], args[1::2]):
        written = json.loads(Path(path).read_text())
        runs += written["runs"][written["binaries"].index(binary)]
        baseline += written["runs"][0]
    print(f"Command: {' '.join(sys.argv)}\n")
    print(paired_table(runs, baseline))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("args", nargs="+", metavar="STUDY HPTUNE",
                        help="the study file (not with --bayes), then hptune binaries; the "
                             "first binary is the baseline")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--bayes", metavar="FUNCTIONS",
                        help="bench/bayes.py's functions, comma-separated, instead of a study")
    parser.add_argument("--modes", default="sequential,async", help="with --bayes")
    parser.add_argument("--seeds", type=int, default=3,
                        help="with --bayes: seeds first-seed .. first-seed + N - 1")
    parser.add_argument("--first-seed", type=int, default=0, help="with --bayes")
    parser.add_argument("--trials", type=int, help="with --bayes (default: bayes.py's)")
    parser.add_argument("--objective", default="target/release/examples/objective",
                        help="with --bayes: the worker every binary runs")
    parser.add_argument("--out", type=Path, help="with --bayes: every run, as JSON")
    parser.add_argument("--paired", action="store_true",
                        help="the arguments are --out files, each followed by a binary it ran")
    args = parser.parse_args()
    if args.paired:
        if len(args.args) % 2:
            parser.error("--paired takes pairs of an --out file and a binary")
        pooled_main(args.args)
    elif args.bayes:
        bayes_main(args, args.args)
    elif len(args.args) < 2:
        parser.error("give a study file and at least one hptune binary")
    else:
        study_main(args, args.args[0], args.args[1:])


if __name__ == "__main__":
    main()
