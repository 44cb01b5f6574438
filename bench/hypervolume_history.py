#!/usr/bin/env python3
"""The hypervolume history of a study of two objectives: the time `hptune plot --kind
hypervolume` takes (the figure the dashboard draws again at each change of the study), for
each binary given, on the same database.

Each study has one double x in [0, 1] and two objectives to minimise, loss = x and ms = 1 - x
(`line`: every trial is on the front, the worst case) or ms = 1 - x + 0.2 u with u uniform in
[0, 1) (`noisy`: a front of a few dozen trials), filled with N random-search trials through one
`hptune session` of the last binary. Then each binary in turn, `--rounds` times, draws the
figure (its wall and CPU time, user + system; a draw over `--timeout` seconds is stopped and
shown as such); the SVGs of the binaries are compared. Prints a Markdown table.

    python3 bench/hypervolume_history.py --binary BEFORE --binary AFTER \
        [--studies noisy:10000,line:1000,line:2000] [--rounds 2] [--timeout 120]
"""

import argparse
import os
import random
import tempfile
from pathlib import Path

from hptune_process import Session, timed

STUDY = """\
name: {name}
objectives: [{{metric: loss, goal: minimize}}, {{metric: ms, goal: minimize}}]
parameters:
  - {{id: x, type: double, min: 0, max: 1}}
algorithm: random
max_trial_count: {trials}
parallel_trial_count: 1
seed: 1
"""


def fill(binary, folder, env, shape, trials):
    """A study of `trials` trials of `shape`, asked and told through one `hptune session`."""
    name = f"{shape}{trials}"
    study = folder / f"{name}.yaml"
    study.write_text(STUDY.format(name=name, trials=trials))
    session = Session(binary, study, env)
    noise = random.Random(1)
    for _ in range(trials):
        trial = session.request({"op": "ask"})[0]
        x = trial["params"]["x"]
        ms = 1 - x if shape == "line" else 1 - x + 0.2 * noise.random()
        session.request({"op": "tell", "trial": trial["number"], "metrics": {"loss": x, "ms": ms}})
    session.close()
    return name


def draw(binary, name, out, env, timeout):
    """`hptune plot NAME --kind hypervolume`: wall and CPU seconds, or None past `timeout`."""
    took = timed([binary, "plot", name, "--kind", "hypervolume", "--out", str(out)], env, timeout)
    return took and took[1:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", action="append", required=True, help="an hptune binary (repeat)")
    parser.add_argument("--studies", default="noisy:10000,line:1000,line:2000")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    binaries = [str(Path(b).resolve()) for b in args.binary]
    print("| study | trials | binary | wall s | CPU s | same SVG as the first |")
    print("|---|---:|---|---:|---:|---|")
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        env = {**os.environ, "HPTUNE_STORAGE": f"sqlite://{folder / 'hptune.db'}"}
        for spec in args.studies.split(","):
            shape, trials = spec.split(":")
            name = fill(binaries[-1], folder, env, shape, int(trials))
            for _ in range(args.rounds):
                svgs = []
                for i, binary in enumerate(binaries):
                    out = folder / f"{name}-{i}.svg"
                    took = draw(binary, name, out, env, args.timeout)
                    svgs.append(out.read_bytes() if took else None)
                    same = "—" if i == 0 or not took or svgs[0] is None else ("yes" if svgs[i] == svgs[0] else "NO")
                    times = f"{took[0]:.2f} | {took[1]:.2f}" if took else f"> {args.timeout:.0f} (stopped) | —"
                    print(f"| {shape} | {trials} | {binary} | {times} | {same} |", flush=True)


if __name__ == "__main__":
    main()
