#!/usr/bin/env python3
"""Paired comparison of two `bench/bayes.py` result files of the same sampler: one built one way
(BEFORE), one another (AFTER), run on the same functions, modes and seeds; or of two samplers'
runs of the same seeds.

`python3 bench/paired.py BEFORE.json AFTER.json [--label-before B] [--label-after A] [--sampler
S] [--sampler-after S2]` (S2: AFTER's sampler, S by default) prints two Markdown tables: each
seed's final regret on both sides and their ratio (after / before; none where before found the
optimum), then per function and mode the seeds both sides ran, the medians, the mean over seeds
of log10(after) - log10(before) with its standard error (`bayes.paired_log10`: negative where
AFTER is lower), and on how many seeds AFTER is lower and higher (`summary_table`, which
`bench/study_ab.py` prints too). `bayes.py --include` cannot pair such files: it keeps one run
per (sampler, function, mode, seed). Standard library only.
"""

import argparse
import json
import statistics

import bayes


def by_seed(runs):
    """{(function, mode, seed): final regret} of `runs` (`bayes.py`'s run records)."""
    return {(r["function"], bayes.mode_of(r), r["seed"]): r["final_regret"] for r in runs}


def regrets(path, sampler):
    """`by_seed` of the runs of `sampler` in the file `path`."""
    runs = json.loads(open(path).read())["runs"]
    return by_seed(r for r in runs if r["sampler"] == sampler)


def summary_table(before, after, b="before", a="after"):
    """Per function and mode, of the seeds both `before` and `after` ({(function, mode, seed):
    final regret}) ran: their medians, the mean over seeds of log10(after) - log10(before) ±
    its standard error (`bayes.paired_log10`), and on how many seeds `after` is lower and
    higher; `b` and `a` label the two sides."""
    both = [k for k in before if k in after]
    lines = [f"| function | mode | seeds | median, {b} | median, {a} | {a} against {b}, "
             f"Δ mean log10 | {a} lower / higher |", "|---|---|---|---|---|---|---|"]
    for function, mode in dict.fromkeys(k[:2] for k in both):
        pairs = [(before[k], after[k]) for k in both if k[:2] == (function, mode)]
        lower = sum(y < x for x, y in pairs)
        higher = sum(y > x for x, y in pairs)
        mean, error = bayes.paired_log10([(y, x) for x, y in pairs])
        lines.append(f"| {function} | {mode} | {len(pairs)} | "
                     f"{statistics.median(x for x, _ in pairs):.4g} | "
                     f"{statistics.median(y for _, y in pairs):.4g} | {mean:+.2f} ± {error:.2f} | "
                     f"{lower} / {higher} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--label-before", default="before")
    parser.add_argument("--label-after", default="after")
    parser.add_argument("--sampler", default="hptune-bayesian")
    parser.add_argument("--sampler-after", help="AFTER's sampler (default: --sampler)")
    args = parser.parse_args()
    before = regrets(args.before, args.sampler)
    after = regrets(args.after, args.sampler_after or args.sampler)
    both = [k for k in before if k in after]
    cells = list(dict.fromkeys(k[:2] for k in both))
    b, a = args.label_before, args.label_after
    print(f"| function | mode | seed | {b} | {a} | {a} / {b} |\n|---|---|---|---|---|---|")
    for function, mode in cells:
        for seed in sorted(s for f, m, s in both if (f, m) == (function, mode)):
            x, y = before[(function, mode, seed)], after[(function, mode, seed)]
            ratio = f"{y / x:.2f}" if x > 0 else "-"
            print(f"| {function} | {mode} | {seed} | {x:.4g} | {y:.4g} | {ratio} |")
    print("\n" + summary_table(before, after, b, a))


if __name__ == "__main__":
    main()
