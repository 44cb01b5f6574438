#!/usr/bin/env python3
"""The dashboard on large studies: time to first render, the server's memory, and whether an
open dashboard slows the controller.

One command: `python3 bench/dashboard_scale.py [--sizes 10000,100000] [--run-trials 1000]
[--pairs 2] [--parts render,speed,optuna-dashboard] [--baseline OTHER_HPTUNE]`. It creates bench/.venv (git-ignored)
with websocket-client (and, for the last part, Optuna and optuna-dashboard), builds hptune
and the objective worker in release mode, and:

1. for each size N, makes a study of N finished trials of the Branin function (one run of
   `hptune run` creates the study, the rest are inserted as the controller writes them: a
   random point, its value, an attempt, three intermediate values), starts `hptune
   dashboard` on it, and opens the study page in headless Chromium four times (over the
   DevTools protocol): the time from navigation to the page's `hptune-ready` mark (set once
   the figures, the summary and the first page of the trial table are drawn), the first time
   (the server reads the study) and the median of the next three; the server's resident and
   peak memory after; with `--baseline`, another hptune binary (an earlier build) serves
   the same database in turn, a row each, alternately twice;
2. runs a study of `--run-trials` Branin trials with `hptune run` (random search, 4 at once,
   workers that return at once: the controller's own speed), alternately with no dashboard and
   with the study page open (polling every 2 s), `--pairs` times each, and prints trials/s;
3. (`optuna-dashboard`) exports the first size's trials into Optuna's storage and times
   optuna-dashboard's study page the same way (until its first plot is drawn).
"""

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_venv

ROOT = Path(__file__).resolve().parent.parent
VENV = bench_venv.VENV
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
if not TARGET.is_absolute():
    TARGET = ROOT / TARGET


def build():
    subprocess.run(["cargo", "build", "--release", "-p", "hptune", "--bin", "hptune",
                    "--example", "objective"], cwd=ROOT, check=True)
    return TARGET / "release" / "hptune", TARGET / "release" / "examples" / "objective"


def branin(x1, x2):
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def study_yaml(name, trials, objective):
    return (f"name: {name}\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n"
            "  - {id: x1, type: double, min: -5.0, max: 10.0}\n"
            "  - {id: x2, type: double, min: 0.0, max: 15.0}\n"
            f"algorithm: random\nmax_trial_count: {trials}\nparallel_trial_count: 4\nseed: 1\n"
            f"trial:\n  command: [{objective}, --function, branin, --steps, \"3\"]\n")


def make_study(hptune, objective, folder, size):
    """A database in `folder` with a study `scale` of `size` finished trials."""
    import sqlite3

    env = dict(os.environ, HPTUNE_STORAGE=f"sqlite://{folder / 'hptune.db'}")
    (folder / "study.yaml").write_text(study_yaml("scale", 1, objective))
    subprocess.run([hptune, "run", "study.yaml"], cwd=folder, env=env, check=True,
                   capture_output=True)
    db = sqlite3.connect(folder / "hptune.db")
    (study_id,) = db.execute("SELECT id FROM studies WHERE name = 'scale'").fetchone()
    rng = random.Random(size)
    start = time.time() - size
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"
    rows, steps = [], []
    for number in range(1, size):
        x1, x2 = rng.uniform(-5, 10), rng.uniform(0, 15)
        t0 = start + number
        rows.append((study_id, number, json.dumps({"x1": x1, "x2": x2}), branin(x1, x2),
                     stamp(t0), stamp(t0), stamp(t0 + 0.8), f"pid:{number}"))
    db.executemany(
        "INSERT INTO trials (study_id, number, state, params, value, created_at, started_at,"
        " finished_at, worker, attempt) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, 1)", rows)
    db.execute("UPDATE trials SET state = 'succeeded' WHERE study_id = ? AND state = 'running'",
               (study_id,))
    for (trial_id, value, at) in db.execute(
            "SELECT id, value, finished_at FROM trials WHERE study_id = ? AND number > 0",
            (study_id,)).fetchall():
        steps += [(trial_id, s, value + (4 - s), at) for s in (1, 2, 3)]
    db.executemany("INSERT INTO measurements (trial_id, attempt, step, metric, value, recorded_at)"
                   " VALUES (?, 1, ?, 'loss', ?, ?)", steps)
    db.commit()
    db.close()
    return env


class Chromium:
    """Headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self):
        import websocket

        self.profile = tempfile.TemporaryDirectory()
        self.process = subprocess.Popen(
            ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--remote-debugging-port=0", "--window-size=1400,1000",
             f"--user-data-dir={self.profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in self.process.stderr:
            if "DevTools listening on " in line:
                url = line.split("DevTools listening on ")[1].strip()
                break
        self.socket = websocket.create_connection(url, timeout=600)
        self.next_id, self.session = 0, None
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", {})

    def call(self, method, params):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(self.socket.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def eval(self, expression):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result["result"].get("value")

    def time_to(self, url, ready, limit=300):
        """Milliseconds from navigating to `url` until JavaScript `ready` returns a number
        (the time it reports), or None after `limit` seconds."""
        self.call("Page.navigate", {"url": url})
        deadline = time.time() + limit
        while time.time() < deadline:
            value = self.eval(ready)
            if isinstance(value, (int, float)):
                return value
            time.sleep(0.02)
        return None

    def close(self):
        self.process.kill()
        self.process.wait()


HPTUNE_READY = ("(() => { const m = performance.getEntriesByName('hptune-ready')[0];"
                " return m ? m.startTime : null; })()")


def memory(pid):
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def start_dashboard(hptune, env, folder):
    process = subprocess.Popen([hptune, "dashboard", "--port", "0"], cwd=folder, env=env,
                               stdout=subprocess.PIPE, text=True)
    base = process.stdout.readline().split()[2].rstrip("/")
    return process, base


def first_render(hptune, objective, sizes, browser, baseline=None):
    servers = [("this build", hptune)]
    if baseline:
        servers = [("baseline", baseline), ("this build", hptune)] * 2
    print("| trials | server | HTML of the study page | first render, first load | first render, median of next 3 | server RSS | server peak |")
    print("|---|---|---|---|---|---|---|")
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            env = make_study(hptune, objective, folder, size)
            for label, server in servers:
                process, base = start_dashboard(server, env, folder)
                try:
                    times = [browser.time_to(f"{base}/studies/scale", HPTUNE_READY)
                             for _ in range(4)]
                    html = browser.eval("document.documentElement.outerHTML.length")
                    mem = memory(process.pid)
                finally:
                    process.kill()
                    process.wait()
                warm = statistics.median(times[1:])
                print(f"| {size:,} | {label} | {html / 1e6:.1f} MB | {times[0] / 1000:.2f} s "
                      f"| {warm / 1000:.2f} s | {mem['VmRSS']:.0f} MiB | {mem['VmHWM']:.0f} MiB |",
                      flush=True)


def controller_speed(hptune, objective, trials, pairs, browser):
    print("\n| run | dashboard | trials | seconds | trials/s |")
    print("|---|---|---|---|---|")
    for index, open_page in enumerate([False, True] * pairs, 1):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            env = dict(os.environ, HPTUNE_STORAGE=f"sqlite://{folder / 'hptune.db'}")
            (folder / "study.yaml").write_text(study_yaml("speed", 1, objective))
            subprocess.run([hptune, "run", "study.yaml"], cwd=folder, env=env, check=True,
                           capture_output=True)
            (folder / "study.yaml").write_text(study_yaml("speed", trials, objective))
            dashboard = None
            if open_page:
                dashboard, base = start_dashboard(hptune, env, folder)
                browser.time_to(f"{base}/studies/speed", HPTUNE_READY)
            began = time.time()
            subprocess.run([hptune, "run", "study.yaml"], cwd=folder, env=env, check=True,
                           capture_output=True)
            seconds = time.time() - began
            if dashboard:
                dashboard.kill()
                dashboard.wait()
            print(f"| {index} | {'open' if open_page else 'closed'} | {trials - 1} | "
                  f"{seconds:.1f} | {(trials - 1) / seconds:.1f} |")


def optuna_dashboard(hptune, objective, size, browser):
    import optuna
    from optuna.distributions import FloatDistribution

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = make_study(hptune, objective, folder, size)
        trials = json.loads(subprocess.run([hptune, "trials", "scale", "--format", "json"],
                                           cwd=folder, env=env, check=True,
                                           capture_output=True).stdout)
        storage = f"sqlite:///{folder / 'optuna.db'}"
        study = optuna.create_study(storage=storage, study_name="scale")
        distributions = {"x1": FloatDistribution(-5, 10), "x2": FloatDistribution(0, 15)}
        study.add_trials([optuna.trial.create_trial(params=t["params"], distributions=distributions,
                                                    value=t["value"]) for t in trials])
        port = 18123
        process = subprocess.Popen([str(VENV / "bin" / "optuna-dashboard"), storage, "--port",
                                    str(port), "--host", "127.0.0.1"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)
            ready = ("(() => document.querySelector('.js-plotly-plot .main-svg') ?"
                     " performance.now() : null)()")
            times = [browser.time_to(f"http://127.0.0.1:{port}/dashboard/studies/1", ready)
                     for _ in range(4)]
            mem = memory(process.pid)
        finally:
            process.kill()
            process.wait()
        shown = [f"{t / 1000:.2f} s" if t else "no plot within 300 s" for t in times]
        print(f"\noptuna-dashboard {__import__('optuna_dashboard').__version__}, {size:,} trials:"
              f" first plot drawn {shown[0]} (first load), then {', '.join(shown[1:])};"
              f" server RSS {mem['VmRSS']:.0f} MiB, peak {mem['VmHWM']:.0f} MiB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--run-trials", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--parts", default="render,speed,optuna-dashboard")
    parser.add_argument("--baseline", help="another hptune binary to time beside this build")
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "optuna-dashboard" in parts:
        bench_venv.ensure(["websocket-client", "optuna", "optuna-dashboard"],
                          "websocket, optuna, optuna_dashboard")
    else:
        bench_venv.ensure(["websocket-client"], "websocket")
    hptune, objective = build()
    sizes = [int(s) for s in args.sizes.split(",")]
    browser = Chromium()
    try:
        if "render" in parts:
            first_render(hptune, objective, sizes, browser, args.baseline)
        if "speed" in parts:
            controller_speed(hptune, objective, args.run_trials, args.pairs, browser)
        if "optuna-dashboard" in parts:
            optuna_dashboard(hptune, objective, sizes[0], browser)
    finally:
        browser.close()


if __name__ == "__main__":
    main()
