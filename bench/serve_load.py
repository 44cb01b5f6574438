"""Load test of `hptune-trainer serve` beside transformers' text-classification pipeline
behind a minimal Python HTTP server: the same fine-tuned model, the same machine, the same run.

One command: `python3 bench/serve_load.py [--model DIR] [--seconds N]`. It creates bench/.venv
with torch and transformers (bench/bench_venv.py), fine-tunes the model briefly with
hptune-trainer (all-MiniLM-L6-v2 from scripts/fetch-model.sh by default; a classifier needs a
head, and both servers then load the same folder), starts each server in turn on loopback and
drives it with `wrk` (Debian's package) from a second process: one connection (p50 and p99
latency), then 16 (throughput), one sentence a request. Peak memory is the server's VmHWM.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import bench_venv

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
if not TARGET.is_absolute():
    TARGET = ROOT / TARGET
SENTENCE = "the film is a quiet, funny and moving portrait of a family that never quite fits together"
BODY = json.dumps({"instances": [SENTENCE]})

# The baseline: transformers' pipeline in the standard library's threaded HTTP server, each
# request classified as it comes (the pipeline does not batch across requests), with
# torch's intra-op threads as given: on a loaded 2-core machine, 2 OpenMP threads that spin
# while waiting for each other can be 20x slower than 1, so both are measured.
PYTHON_SERVER = r'''
import json, sys
import torch
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from transformers import pipeline
torch.set_num_threads(int(sys.argv[3]))
classify = pipeline("text-classification", model=sys.argv[1], device="cpu")
class Handler(BaseHTTPRequestHandler):
    # Headers and body leave at once, not 40 ms apart (Nagle's algorithm and delayed ACKs).
    disable_nagle_algorithm = True
    def log_message(self, *args):
        pass
    def reply(self, status, payload):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply(200, {"status": "ready"})
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.reply(200, {"predictions": classify(request["instances"])})
ThreadingHTTPServer.protocol_version = "HTTP/1.1"
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
'''


def build():
    subprocess.run(["cargo", "build", "-p", "hptune-trainer", "--bin", "hptune-trainer"],
                   cwd=ROOT, check=True)
    return TARGET / "debug" / "hptune-trainer"


def fine_tune(trainer, model, out):
    """A classifier of `model` (one short epoch on the trainer's fixture data) in `out`."""
    data = ROOT / "trainer" / "tests" / "fixtures" / "data"
    subprocess.run([trainer, "--model", model, "--train", data / "train.tsv",
                    "--eval", data / "eval.tsv", "--epochs", "1", "--output-dir", out],
                   check=True, stdout=subprocess.DEVNULL)


def wait_ready(url, process):
    deadline = time.time() + 300
    while time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{url} never answered")


def wrk(url, connections, seconds, script):
    out = subprocess.run(["wrk", "-t", str(min(connections, 2)), "-c", str(connections),
                          "-d", f"{seconds}s", "--latency", "-s", script, url],
                         capture_output=True, text=True, check=True).stdout
    def ms(label):
        value, unit = re.search(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups()
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"p50": ms("50%"), "p99": ms("99%"),
            "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "errors": int(errors.group(1)) if errors else 0}


def peak_mib(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


def measure(name, command, port, health, route, seconds, script):
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{port}{health}", process)
        url = f"http://127.0.0.1:{port}{route}"
        wrk(url, 1, 2, script)  # warm-up
        one = wrk(url, 1, seconds, script)
        sixteen = wrk(url, 16, seconds, script)
        return {"server": name, "p50_ms_c1": one["p50"], "p99_ms_c1": one["p99"],
                "rps_c1": one["rps"], "rps_c16": sixteen["rps"], "p50_ms_c16": sixteen["p50"],
                "peak_mib": peak_mib(process.pid), "errors": one["errors"] + sixteen["errors"]}
    finally:
        process.terminate()
        process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(ROOT / "models" / "all-MiniLM-L6-v2"))
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--max-batch-size", type=int, default=16)
    args = parser.parse_args()
    bench_venv.ensure(["torch", "transformers"], "torch, transformers")
    trainer = build()
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        model = scratch / "model"
        fine_tune(trainer, args.model, model)
        script = scratch / "post.lua"
        script.write_text("wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"
                          f"wrk.body = {json.dumps(BODY)}\n")
        server = scratch / "pipeline_server.py"
        server.write_text(PYTHON_SERVER)
        rows = [
            measure("hptune-trainer serve", [trainer, "serve", "--model-dir", model, "--host",
                    "127.0.0.1", "--port", "18431", "--max-batch-size", str(args.max_batch_size)],
                    18431, "/ping", "/invocations", args.seconds, script),
        ]
        rows += [measure(f"transformers pipeline, {threads} thr",
                         [sys.executable, server, model, "18432", str(threads)],
                         18432, "/", "/", args.seconds, script)
                 for threads in (1, 2)]
    print(f"{Path(args.model).name} fine-tuned, one sentence a request, {os.cpu_count()} cores "
          f"(load average {os.getloadavg()[0]:.1f}), {args.seconds} s a run, wrk on loopback")
    print(f"{'server':30} {'p50 ms c=1':>11} {'p99 ms c=1':>11} {'req/s c=1':>10} "
          f"{'req/s c=16':>11} {'p50 ms c=16':>12} {'peak MiB':>9} {'errors':>7}")
    for r in rows:
        print(f"{r['server']:30} {r['p50_ms_c1']:11.2f} {r['p99_ms_c1']:11.2f} {r['rps_c1']:10.1f} "
              f"{r['rps_c16']:11.1f} {r['p50_ms_c16']:12.2f} {r['peak_mib']:9.0f} {r['errors']:7d}")
    ours, theirs = rows[0], rows[1:]
    # Against PyTorch's better setting for each figure.
    p50 = min(r["p50_ms_c1"] for r in theirs)
    rps = max(r["rps_c16"] for r in theirs)
    peak = min(r["peak_mib"] for r in theirs)
    print(f"ratios to PyTorch's best: p50 c=1 {ours['p50_ms_c1'] / p50:.2f}x (goal <= 1), "
          f"throughput c=16 {ours['rps_c16'] / rps:.2f}x (goal >= 1.5), "
          f"peak memory {ours['peak_mib'] / peak:.2f}x (goal <= 0.5)")


if __name__ == "__main__":
    main()
