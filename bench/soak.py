#!/usr/bin/env python3
"""Controller memory under worker output: the resident memory of `hptune run` while its
workers print without pause.

A study runs for --minutes (default 30) with two workers at a time. Each worker prints
1 MB/s of output for --trial-seconds (default 30): for the first half of its run a progress
bar redrawn with carriage returns and no line break, for the second half lines of progress
text and 1,000 step lines of the objective, then its final value. The controller's VmRSS is read from
/proc/PID/status every --every seconds (default 5); the table gives, minute by minute, the
last value and the largest one of the minute, and the peak (VmHWM) at the end. Goal: under
64 MiB, and flat. With --baseline BINARY, that binary (e.g. one built from an earlier
commit) runs the same study at the same time, in its own folder, and gets its own columns.
Logs of finished trials are deleted as the study goes (the disk would fill otherwise).
With --line-mb N, it runs instead one trial whose worker prints a line of N MB without a
break, and gives each binary's peak memory (VmHWM, sampled every 50 ms).

    python3 bench/soak.py [--minutes 30] [--hptune BINARY] [--baseline BINARY] [--line-mb N]

Without --hptune, builds `hptune` (cargo build -p hptune) and runs it.
"""

import argparse
import math
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STUDY = """\
name: soak
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x, type: double, min: -2.0, max: 2.0}}
algorithm: random
max_trial_count: 100000
parallel_trial_count: 2
seed: 1
trial:
  command: [python3, {worker}, --seconds={seconds}]
"""

# Prints 1 MB/s for --seconds. The first half of the run is a progress bar redrawn with
# carriage returns and no line break (100 KB each tenth of a second); the second half, each
# tenth of a second, 100 KB of progress text in lines and a share of the 1,000 step lines;
# then the final value.
WORKER = r"""
import sys, time
args = dict(a.lstrip("-").split("=") for a in sys.argv[1:])
x, seconds = float(args["x"]), float(args["seconds"])
ticks, steps = int(seconds * 10), 1000
half = ticks // 2
out = sys.stdout
bar = "".join(f"\r[{'#' * (i % 50):<50}] {i % 100}%" for i in range(1700))   # 100 KB
text = ("epoch progress: " + "." * 80 + "\n") * 1000                        # 97 KB
start, step = time.monotonic(), 0
for tick in range(ticks):
    if tick < half:
        out.write(bar)
    else:
        out.write("\n" if tick == half else "")
        out.write(text)
        while step < (tick - half + 1) * steps // (ticks - half):
            step += 1
            out.write(f"step={step} loss={x * x + 1 / step}\n")
    out.flush()
    time.sleep(max(0.0, start + (tick + 1) / 10 - time.monotonic()))
print(f"loss={x * x}", flush=True)
"""


def build():
    subprocess.run(["cargo", "build", "--quiet", "-p", "hptune", "--bin", "hptune"],
                   cwd=ROOT, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "hptune"


def memory_kib(pid, field):
    """A field of /proc/PID/status in KiB (VmRSS, VmHWM), or None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def start(binary, folder, seconds):
    """Starts `binary run` on a new study in `folder`."""
    folder.mkdir()
    worker = folder / "worker.py"
    worker.write_text(WORKER)
    study = folder / "study.yaml"
    study.write_text(STUDY.format(worker=worker, seconds=seconds))
    env = dict(os.environ, HPTUNE_STORAGE=f"sqlite://{folder}/hptune.db")
    return subprocess.Popen([str(binary), "run", str(study), "--log-dir", str(folder / "logs")],
                            cwd=folder, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(folder / "controller.err", "w"))


def delete_finished_logs(folder):
    """Deletes the logs not written to for 10 s: those of finished trials."""
    now = time.time()
    for log in (folder / "logs").rglob("*"):
        try:
            if log.is_file() and now - log.stat().st_mtime > 10:
                log.unlink()
        except OSError:
            pass


LONG_LINE = """\
name: long-line
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x, type: double, min: -2.0, max: 2.0}}
max_trial_count: 1
trial:
  command: [{worker}]
  env: {{MODE: flood, FLOOD_BYTES: '{bytes}'}}
"""


def long_line_peak(binary, megabytes):
    """The peak memory (KiB) of `binary run` on one trial whose worker prints a line of
    `megabytes` MB without a break (tests/fixtures/workers/quadratic.sh, MODE=flood)."""
    worker = ROOT / "tests" / "fixtures" / "workers" / "quadratic.sh"
    with tempfile.TemporaryDirectory(prefix="hptune-line-") as tmp:
        study = Path(tmp) / "study.yaml"
        study.write_text(LONG_LINE.format(worker=worker, bytes=int(megabytes * 1e6)))
        env = dict(os.environ, HPTUNE_STORAGE=f"sqlite://{tmp}/hptune.db")
        proc = subprocess.Popen([str(binary), "run", str(study)], cwd=tmp, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, memory_kib(proc.pid, "VmHWM") or 0)
            time.sleep(0.05)
        return peak


def finished_trials(folder):
    """How many trials of the study in `folder` succeeded."""
    with sqlite3.connect(folder / "hptune.db") as db:
        return db.execute("SELECT COUNT(*) FROM trials WHERE state = 'succeeded'").fetchone()[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--trial-seconds", type=float, default=30)
    parser.add_argument("--every", type=float, default=5, help="seconds between samples")
    parser.add_argument("--hptune", type=Path, help="the binary to measure (default: build it)")
    parser.add_argument("--baseline", type=Path, help="a binary to measure beside it")
    parser.add_argument("--line-mb", type=float, help="one trial printing a line this long")
    args = parser.parse_args()
    runs = {"hptune": (args.hptune or build()).resolve()}
    if args.baseline:
        runs["baseline"] = args.baseline.resolve()
    if args.line_mb:
        print(f"| binary | peak MiB, one line of {args.line_mb:g} MB |\n|---|---|")
        for name, binary in runs.items():
            print(f"| {name} | {long_line_peak(binary, args.line_mb) / 1024:.1f} |")
        return
    with tempfile.TemporaryDirectory(prefix="hptune-soak-") as tmp:
        folders = {name: Path(tmp) / name for name in runs}
        procs = {name: start(binary, folders[name], args.trial_seconds)
                 for name, binary in runs.items()}
        began = time.monotonic()
        minutes = []  # (minute, {name: (last KiB, largest KiB of the minute)})
        while time.monotonic() - began < args.minutes * 60:
            time.sleep(args.every)
            minute = max(1, math.ceil((time.monotonic() - began) / 60))
            if not minutes or minutes[-1][0] != minute:
                minutes.append((minute, {}))
            for name, proc in procs.items():
                rss = memory_kib(proc.pid, "VmRSS")
                if rss is None:
                    error = (folders[name] / "controller.err").read_text()
                    sys.exit(f"{name} ended early:\n{error}")
                _, largest = minutes[-1][1].get(name, (0, 0))
                minutes[-1][1][name] = (rss, max(largest, rss))
                delete_finished_logs(folders[name])
        peaks = {name: memory_kib(proc.pid, "VmHWM") for name, proc in procs.items()}
        for proc in procs.values():
            proc.send_signal(signal.SIGINT)
        for proc in procs.values():
            proc.wait()
        trials = {name: finished_trials(folders[name]) for name in runs}
    mib = lambda kib: f"{kib / 1024:.1f}"
    header = "| minute | " + " | ".join(f"{n} RSS MiB (last / largest)" for n in runs) + " |"
    print(header)
    print("|" + "---|" * (len(runs) + 1))
    for minute, sample in minutes:
        cells = [f"{mib(sample[n][0])} / {mib(sample[n][1])}" if n in sample else "" for n in runs]
        print(f"| {minute} | " + " | ".join(cells) + " |")
    print("| peak (VmHWM) | " + " | ".join(mib(peaks[n]) for n in runs) + " |")
    print("| trials succeeded | " + " | ".join(str(trials[n]) for n in runs) + " |")


if __name__ == "__main__":
    main()
