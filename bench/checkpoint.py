"""What checkpoints save when trials are preempted: a study of 4 trials whose workers are each
SIGKILLed twice at random moments (a machine taken away), run three ways: uninterrupted, with
the kills and the workers resuming from their checkpoints (HPTUNE_RESUME_FROM), and with the
kills and workers that start over (hptune before checkpoints: each preemption restarts the
trial). The figure is the total trial time, the sum of every attempt's run time, against the
uninterrupted study's (goal: <= 1.15x with checkpoints).

    python3 bench/checkpoint.py [--hptune target/debug/hptune] [--steps 40] [--step-time 0.1]
                                [--seed 1] [--rounds 1]

The worker is tests/fixtures/workers/checkpointed.sh: `--steps` steps of `--step-time` seconds,
a checkpoint after every step (its step number, written and renamed). A kill falls at a moment
drawn uniformly over the attempt's remaining work, from 5% to 95% of it; the third attempt runs
to its end (max_retries 2). The 4 trials run at once.
"""

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests/fixtures/workers/checkpointed.sh"
TRIALS = 4
KILLS = 2

STUDY = """name: {name}
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x, type: double, min: -1.0, max: 1.0}}
algorithm: random
seed: 7
max_trial_count: {trials}
parallel_trial_count: {trials}
max_retries: {kills}
trial:
  command: [sh, '{worker}']
  env: {{STEPS: '{steps}', SLEEP: '{step_time}', PIDS: '{pids}'{extra}}}
"""


def preempt(
    pids: Path, done: threading.Event, rng: random.Random, expected: float, resumes: bool
) -> list:
    """SIGKILLs the first KILLS attempts of each trial at random moments of their remaining
    work (the whole trial for a worker that starts over, less what the earlier attempts did
    for one that resumes); returns what it killed, as (trial, attempt, seconds into it)."""
    killed = []
    pending = {}  # pid file -> (pid, started, kill at, trial, attempt)
    progress = {}  # trial -> seconds of work done by its killed attempts
    seen = set()
    while not done.is_set():
        for path in pids.glob("*.pid"):
            if path.name in seen:
                continue
            seen.add(path.name)
            trial, attempt = (int(v) for v in path.stem.split("-"))
            if attempt > KILLS:
                continue
            try:
                pid = int(path.read_text().strip())
            except ValueError:
                seen.discard(path.name)
                continue
            remaining = expected - progress.get(trial, 0.0)
            at = rng.uniform(0.05, 0.95) * remaining
            pending[path.name] = (pid, time.monotonic(), at, trial, attempt)
        for name, (pid, started, at, trial, attempt) in list(pending.items()):
            if time.monotonic() - started >= at:
                try:
                    os.killpg(pid, signal.SIGKILL)
                    killed.append((trial, attempt, round(at, 2)))
                    if resumes:
                        progress[trial] = progress.get(trial, 0.0) + at
                except ProcessLookupError:
                    pass
                del pending[name]
        time.sleep(0.01)
    return killed


def seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def run(hptune: str, args, mode: str, seed: int) -> dict:
    """One study: mode 'uninterrupted', 'resume' or 'restart'."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pids = tmp / "pids"
        pids.mkdir()
        extra = ", IGNORE_RESUME: '1'" if mode == "restart" else ""
        study = tmp / "study.yaml"
        study.write_text(
            STUDY.format(
                name="ckpt",
                trials=TRIALS,
                kills=KILLS,
                worker=WORKER,
                steps=args.steps,
                step_time=args.step_time,
                pids=pids,
                extra=extra,
            )
        )
        db = tmp / "hptune.db"
        env = dict(os.environ, HPTUNE_STORAGE=f"sqlite://{db}")
        env.pop("RUST_LOG", None)
        done = threading.Event()
        killed = []
        if mode != "uninterrupted":
            rng = random.Random(seed)
            expected = args.steps * args.step_time
            thread = threading.Thread(
                target=lambda: killed.extend(
                    preempt(pids, done, rng, expected, mode == "resume")
                )
            )
            thread.start()
        start = time.monotonic()
        out = subprocess.run(
            [hptune, "run", str(study)], cwd=tmp, env=env, capture_output=True, text=True
        )
        wall = time.monotonic() - start
        done.set()
        if mode != "uninterrupted":
            thread.join()
        if out.returncode != 0:
            raise SystemExit(f"hptune run failed ({mode}):\n{out.stderr}")
        with sqlite3.connect(db) as conn:
            rows = conn.execute(
                "SELECT started_at, finished_at FROM attempts WHERE finished_at IS NOT NULL"
            ).fetchall()
            states = conn.execute("SELECT state, COUNT(*) FROM trials GROUP BY state").fetchall()
            resumed = conn.execute(
                "SELECT COUNT(*) FROM attempts WHERE resumed_from IS NOT NULL"
            ).fetchone()[0]
        trial_time = sum(seconds(end) - seconds(begin) for begin, end in rows)
        return {
            "trial_time": trial_time,
            "wall": wall,
            "attempts": len(rows),
            "killed": len(killed),
            "resumed": resumed,
            "states": dict(states),
        }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hptune", default=str(ROOT / "target/debug/hptune"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-time", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    results = {mode: [] for mode in ("uninterrupted", "resume", "restart")}
    for r in range(args.rounds):
        for mode in results:
            results[mode].append(run(args.hptune, args, mode, args.seed + r))
    base = sum(x["trial_time"] for x in results["uninterrupted"])
    print(f"{TRIALS} trials of {args.steps} steps x {args.step_time} s, {KILLS} SIGKILLs each "
          f"(seed {args.seed}, {args.rounds} round(s))\n")
    print("| study | total trial time, s | against uninterrupted | wall time, s | attempts | kills | attempts given HPTUNE_RESUME_FROM | trials |")
    print("|---|---|---|---|---|---|---|---|")
    names = {
        "uninterrupted": "uninterrupted",
        "resume": "preempted, resuming from checkpoints",
        "restart": "preempted, starting over (before checkpoints)",
    }
    for mode, runs in results.items():
        total = sum(x["trial_time"] for x in runs)
        states = {}
        for x in runs:
            for k, v in x["states"].items():
                states[k] = states.get(k, 0) + v
        print(
            f"| {names[mode]} | {total / len(runs):.2f} | {total / base:.3f}x | "
            f"{sum(x['wall'] for x in runs) / len(runs):.2f} | "
            f"{sum(x['attempts'] for x in runs)} | {sum(x['killed'] for x in runs)} | "
            f"{sum(x['resumed'] for x in runs)} | "
            f"{', '.join(f'{v} {k}' for k, v in sorted(states.items()))} |"
        )


if __name__ == "__main__":
    main()
