"""The attacks of an adversary and an unlucky operator on the dashboard, `serve` and the
controller, run against two builds in one command: the build under test and a baseline.

    python3 bench/hostile.py --baseline DIR [--build DIR] [--parts a,b,...]

DIR is a folder holding the binaries `hptune`, `hptune-trainer` and `objective` (the example
worker); --build defaults to target/debug (`cargo build --workspace --examples`). The serve
attacks fine-tune all-MiniLM-L6-v2 (scripts/fetch-model.sh) for one short epoch first, with
the build's trainer; both builds' servers load that folder. Everything runs on loopback and
every wait is bounded: a build that never answers shows its cap (`>30 s`), not a hang.

Parts (all by default):
  dashboard-half-open  1,500 connections that never finish their headers (the dashboard's
                       descriptor limit set to 1,024), held 35 s: how many the server still
                       holds open, an authorised request's time, the server's RSS
  dashboard-fifo-log   a trial's `.err` log replaced by a named pipe, its page opened, then
                       the studies page asked for
  serve-abandoned      four requests of 256 texts closed 50 ms after sending, then one text:
                       its wait; then SIGTERM: time to exit
  serve-flood          400 abandoned requests of 4 MB: RSS; then SIGTERM: time to exit
  serve-slow-clients   50 connections that send half a request's headers, then SIGTERM: time
                       to exit
  serve-big-csv        a 5 MB CSV of 2.6M rows (over --max-instances): peak RSS, and `/ping`'s
                       time while 20 clients send it in a loop
  queue                a study of 20,000 `initial_trials` with instant workers: trials/s over
                       20 s, then SIGTERM: time to exit
  soak                 (by name only: minutes) 1,000 trials of half a second, 4 at once, the
                       dashboard's study page asked for every 5 s: throughput, the
                       controller's RSS and the page's time from start to end
"""

import argparse
import contextlib
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from serve_load import SENTENCE, fine_tune, wait_ready

ROOT = Path(__file__).resolve().parent.parent


class Build:
    """One build's binaries."""

    def __init__(self, label, folder):
        self.label = label
        folder = Path(folder).resolve()
        self.hptune = folder / "hptune"
        self.trainer = folder / "hptune-trainer"
        self.objective = folder / "objective"
        if not self.objective.exists():
            self.objective = folder / "examples" / "objective"
        for binary in (self.hptune, self.trainer, self.objective):
            if not binary.exists():
                sys.exit(f"{label}: no {binary}")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def status_kib(pid, field):
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    return int(re.search(rf"{field}:\s+(\d+) kB", text).group(1))


def mib(pid, field="VmRSS"):
    return status_kib(pid, field) / 1024


def timed_get(url, timeout, headers=None):
    """Milliseconds to a complete answer (any status), or None past `timeout`."""
    start = time.monotonic()
    try:
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as answered:
        answered.read()
    except (TimeoutError, socket.timeout, OSError):
        return None
    return (time.monotonic() - start) * 1000


def exit_seconds(process, cap, sig=signal.SIGTERM):
    """Seconds from `sig` to the process's exit; None past `cap` (then it is killed)."""
    start = time.monotonic()
    process.send_signal(sig)
    try:
        process.wait(timeout=cap)
        return time.monotonic() - start
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None


def ms(value, cap):
    return f">{cap:g} s" if value is None else f"{value:.0f} ms"


def seconds(value, cap):
    return f">{cap:g} s" if value is None else f"{value:.1f} s"


@contextlib.contextmanager
def ended(process):
    """Kills `process` when the block ends, however it ends."""
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def descriptor_limit(limit):
    def apply():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return apply


# --- the dashboard ----------------------------------------------------------------------------


def small_study(build, folder):
    """Four finished Branin trials in `folder`/hptune.db, logs in `folder`/hptune-logs."""
    study = folder / "study.yaml"
    study.write_text(
        "name: hostile\n"
        "objective: {metric: loss, goal: minimize}\n"
        "parameters:\n"
        "  - {id: x1, type: double, min: -5.0, max: 10.0}\n"
        "  - {id: x2, type: double, min: 0.0, max: 15.0}\n"
        "algorithm: random\nmax_trial_count: 4\nparallel_trial_count: 2\nseed: 1\n"
        f"trial:\n  command: [{json.dumps(str(build.objective))}, --function, branin]\n")
    subprocess.run([build.hptune, "--storage", folder / "hptune.db", "run", study], cwd=folder,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def dashboard(build, folder, **popen):
    port = free_port()
    process = subprocess.Popen(
        [build.hptune, "--storage", folder / "hptune.db", "dashboard", "--port", str(port)],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **popen)
    base = f"http://127.0.0.1:{port}"
    wait_ready(base + "/", process)
    return process, base, port


def half_open(port, count, request=b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"):
    """Up to `count` connections that send `request` and nothing more (fewer when the
    server's backlog is full: connecting stops after ten refusals or time-outs in a row)."""
    held, refused = [], 0
    while len(held) < count and refused < 10:
        connection = socket.socket()
        connection.settimeout(0.5)
        try:
            connection.connect(("127.0.0.1", port))
            connection.sendall(request)
        except OSError:
            connection.close()
            refused += 1
            continue
        refused = 0
        held.append(connection)
    return held


def still_open(connections):
    """How many of `connections` the server has not closed."""
    count = 0
    for connection in connections:
        connection.setblocking(False)
        try:
            count += connection.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            count += 1
        except OSError:
            pass
    return count


def dashboard_half_open(build, folder, hold=35.0, count=1500):
    small_study(build, folder)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 512)), hard))
    process, base, port = dashboard(build, folder, preexec_fn=descriptor_limit(1024))
    with ended(process):
        connections = half_open(port, count)
        time.sleep(hold)
        open_now = still_open(connections)
        answer = timed_get(base + "/", 10)
        rss = mib(process.pid)
        for connection in connections:
            connection.close()
        return [(f"connections still open after {hold:g} s (of {len(connections)})", str(open_now)),
                ("a request's time with them held", ms(answer, 10)),
                ("dashboard RSS", f"{rss:.0f} MiB")]


def dashboard_fifo_log(build, folder):
    small_study(build, folder)
    [log] = [p for p in (folder / "hptune-logs").rglob("trial-0.err")]
    log.unlink()
    os.mkfifo(log)
    process, base, _ = dashboard(build, folder)
    with ended(process):
        page = timed_get(base + "/studies/hostile/trials/0", 5)
        after = timed_get(base + "/", 5)
        return [("the trial's page", ms(page, 5)), ("the studies page after it", ms(after, 5))]


# --- serve ------------------------------------------------------------------------------------


def fine_tuned(build, folder):
    model = folder / "model"
    if not (model / "model.safetensors").exists():
        fine_tune(build.trainer, ROOT / "models" / "all-MiniLM-L6-v2", model)
    return model


def server(build, model):
    port = free_port()
    process = subprocess.Popen(
        [build.trainer, "serve", "--model-dir", model, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/ping", process)
    return process, port


def post(port, body, content_type="application/json", timeout=600):
    """(status, milliseconds) of one request; (None, None) past `timeout`."""
    start = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/invocations", body, {"Content-Type": content_type})
        response = connection.getresponse()
        response.read()
        return response.status, (time.monotonic() - start) * 1000
    except (TimeoutError, socket.timeout, OSError):
        return None, None
    finally:
        connection.close()


def abandon(port, body, after=0.05):
    """Sends a whole request and closes the connection `after` seconds later (or once the
    server has refused it)."""
    connection = socket.create_connection(("127.0.0.1", port))
    try:
        connection.sendall(b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Content-Type: application/json\r\n"
                           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(after)
    except OSError:
        pass  # refused before the whole body was sent (503: the queue is full)
    connection.close()


def texts(count, words=17):
    sentence = " ".join((SENTENCE.split() * 8)[:words])
    return json.dumps({"instances": [sentence] * count}).encode()


def serve_abandoned(build, model):
    process, port = server(build, model)
    with ended(process):
        for _ in range(4):
            abandon(port, texts(256, 120))
        _, lone = post(port, texts(1), timeout=300)
        return [("one text after four abandoned requests of 256", ms(lone, 300)),
                ("SIGTERM to exit", seconds(exit_seconds(process, 60), 60))]


def serve_flood(build, model, count=400):
    process, port = server(build, model)
    with ended(process):
        body = json.dumps({"instances": ["word " * 800] * 1000}).encode()
        for _ in range(count):
            abandon(port, body, after=0)
        time.sleep(2)
        rss, peak = mib(process.pid), mib(process.pid, "VmHWM")
        _, lone = post(port, texts(1), timeout=30)
        return [(f"RSS after {count} abandoned 4 MB requests (peak)", f"{rss:.0f} ({peak:.0f}) MiB"),
                ("one text after them", ms(lone, 30)),
                ("SIGTERM to exit", seconds(exit_seconds(process, 30), 30))]


def serve_slow_clients(build, model, count=50):
    process, port = server(build, model)
    with ended(process):
        held = half_open(port, count, b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        time.sleep(1)
        exit_after = exit_seconds(process, 90)
        for connection in held:
            connection.close()
        return [(f"SIGTERM to exit, {count} slow clients connected", seconds(exit_after, 90))]


def serve_big_csv(build, model, clients=20, duration=10.0):
    process, port = server(build, model)
    with ended(process):
        body = b"x\n" * 2_600_000
        status, _ = post(port, body, "text/csv", timeout=60)
        peak = mib(process.pid, "VmHWM")
        stop = threading.Event()

        def hammer():
            while not stop.is_set():
                post(port, body, "text/csv", timeout=60)
        workers = [threading.Thread(target=hammer, daemon=True) for _ in range(clients)]
        for worker in workers:
            worker.start()
        pings = []
        end = time.monotonic() + duration
        while time.monotonic() < end:
            pings.append(timed_get(f"http://127.0.0.1:{port}/ping", 10) or 10_000)
            time.sleep(0.1)
        stop.set()
        for worker in workers:
            worker.join(timeout=60)
        return [("a 5 MB CSV of 2.6M rows: answer, peak RSS", f"{status}, {peak:.0f} MiB"),
                (f"/ping with {clients} such clients, median / max",
                 f"{statistics.median(pings):.0f} / {max(pings):.0f} ms")]


# --- the controller ---------------------------------------------------------------------------


def queue(build, folder, entries=20_000, run_for=20.0):
    study = folder / "queue.yaml"
    lines = [
        "name: queue", "objective: {metric: loss, goal: minimize}", "parameters:",
        "  - {id: x1, type: double, min: -5.0, max: 10.0}",
        "  - {id: x2, type: double, min: 0.0, max: 15.0}",
        f"algorithm: random\nmax_trial_count: {entries}\nparallel_trial_count: 4\nseed: 1",
        f"trial:\n  command: [{json.dumps(str(build.objective))}, --function, branin]",
        "initial_trials:"]
    lines += [f"  - {{x1: {-5 + 15 * i / entries:.6f}, x2: {15 * (i % 97) / 97:.6f}}}"
              for i in range(entries)]
    study.write_text("\n".join(lines) + "\n")
    database = folder / "hptune.db"
    process = subprocess.Popen([build.hptune, "--storage", database, "run", study], cwd=folder,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(run_for)
    exit_after = exit_seconds(process, 60)
    with sqlite3.connect(database) as db:
        done = db.execute("SELECT count(*) FROM trials WHERE state = 'succeeded'").fetchone()[0]
    return [(f"trials/s over the first {run_for:g} s, {entries} queued", f"{done / run_for:.1f}"),
            ("SIGTERM to exit", seconds(exit_after, 60))]


def soak(build, folder, trials=1000):
    """A study of `trials` Branin trials, 4 at once, each about half a second, with the
    dashboard's study page asked for every 5 s."""
    study = folder / "soak.yaml"
    study.write_text(
        "name: soak\nobjective: {metric: loss, goal: minimize}\nparameters:\n"
        "  - {id: x1, type: double, min: -5.0, max: 10.0}\n"
        "  - {id: x2, type: double, min: 0.0, max: 15.0}\n"
        f"algorithm: random\nmax_trial_count: {trials}\nparallel_trial_count: 4\nseed: 1\n"
        f"trial:\n  command: [{json.dumps(str(build.objective))}, --function, branin, --steps, '5',"
        " --sleep-ms, '100']\n")
    database = folder / "hptune.db"
    run = subprocess.Popen([build.hptune, "--storage", database, "run", study], cwd=folder,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not database.exists() and run.poll() is None:
        time.sleep(0.2)
    time.sleep(2)
    page, base, _ = dashboard(build, folder)
    samples = []  # (seconds, trials ended, controller RSS MiB, page ms)
    start = time.monotonic()
    with ended(page):
        while run.poll() is None:
            rss = mib(run.pid)
            answer = timed_get(base + "/studies/soak", 10)
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
                finished = db.execute(
                    "SELECT count(*) FROM trials WHERE finished_at IS NOT NULL").fetchone()[0]
            samples.append((time.monotonic() - start, finished, rss, answer or 10_000))
            time.sleep(5)
        run.wait()
    quarter = max(1, len(samples) // 4)

    def rate(window):
        (t0, n0, _, _), (t1, n1, _, _) = window[0], window[-1]
        return (n1 - n0) / max(t1 - t0, 1e-9)
    pages = [s[3] for s in samples]
    return [(f"{trials} trials: minutes", f"{(time.monotonic() - start) / 60:.1f}"),
            ("trials/s, first / last quarter",
             f"{rate(samples[:quarter + 1]):.2f} / {rate(samples[-quarter - 1:]):.2f}"),
            ("controller RSS, first / last / largest",
             f"{samples[0][2]:.0f} / {samples[-1][2]:.0f} / {max(s[2] for s in samples):.0f} MiB"),
            ("dashboard study page, median / max",
             f"{statistics.median(pages):.0f} / {max(pages):.0f} ms")]


PARTS = {
    "dashboard-half-open": lambda build, folder, model: dashboard_half_open(build, folder),
    "dashboard-fifo-log": lambda build, folder, model: dashboard_fifo_log(build, folder),
    "serve-abandoned": lambda build, folder, model: serve_abandoned(build, model),
    "serve-flood": lambda build, folder, model: serve_flood(build, model),
    "serve-slow-clients": lambda build, folder, model: serve_slow_clients(build, model),
    "serve-big-csv": lambda build, folder, model: serve_big_csv(build, model),
    "queue": lambda build, folder, model: queue(build, folder),
    "soak": lambda build, folder, model: soak(build, folder),
}
# Long: asked for by name only.
DEFAULT_PARTS = [part for part in PARTS if part != "soak"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=str(ROOT / "target" / "debug"))
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--parts", default=",".join(DEFAULT_PARTS))
    args = parser.parse_args()
    parts = args.parts.split(",")
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        sys.exit(f"unknown parts {unknown}: choose from {', '.join(PARTS)}")
    builds = [Build("baseline", args.baseline), Build("this build", args.build)]
    scratch = Path(tempfile.mkdtemp(prefix="hptune-hostile-"))
    model = None
    if any(part.startswith("serve") for part in parts):
        model = fine_tuned(builds[1], scratch)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")
    print("| attack | measure | baseline | this build |")
    print("|---|---|---|---|")
    try:
        for part in parts:
            results = []
            for build in builds:
                folder = scratch / f"{part}-{builds.index(build)}"
                folder.mkdir()
                results.append(PARTS[part](build, folder, model))
            for (measure, before), (_, after) in zip(*results):
                print(f"| {part} | {measure} | {before} | {after} |", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
