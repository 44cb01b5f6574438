"""Several trials on one GPU (issue #34): `hptune run` of the SST-2 MiniLM study with
`trial.resources.gpus` 1, 0.25 and 0.125 on one device, with hptune-trainer and with a plain
PyTorch worker (bench/gpu/worker.py), then a study in which one trial allocates past its cap.

Each study is sized to fit (a fixed trial count, random search seeded, one epoch of a few
hundred SST-2 rows), so every K trains the same configurations: the table gives trials
completed per hour of `hptune run`'s wall time, its ratio to K=1 (the goal: >= 2.5x at K=4), the
median dev accuracy, and the isolation `hptune run` reported (MPS or time-sharing). The last
row says whether the hog failed alone with an out-of-memory reason while its neighbours
finished. Studies that would not start in --budget are skipped and said so; one that overruns is
stopped with its workers, and its row counts what completed, saying so. Writes table.txt and
logs.tar.gz (studies, hptune's output, the workers' logs) to --out ($OUT/gpu-packing).

On a GPU: bench/gpu/run.sh --packing (needs bench/gpu/dist/hptune-trainer-cuda.tar.xz, which
bench/gpu/pack.sh makes with the hptune controller beside the trainer). A CPU dry run with a
fake device (HPTUNE_GPUS=0), from the repository root, with CPU binaries and the real model:
  bench/gpu/run.sh --packing --device cpu --tiny --hptune target/debug/hptune \
    --trainer target/debug/hptune-trainer --model models/all-MiniLM-L6-v2
"""

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import finish, make_checkpoint, start, unpack  # noqa: E402


def study_yaml(name, command, trials, k, gpu_memory=None, grid_members=None):
    """A study file: random search (seed 7) over the learning rate and warmup, `trials` trials,
    K at once on the device (`gpus: 1/K`); with `grid_members`, a grid over `member` instead."""
    share = "1" if k == 1 else repr(1 / k)
    resources = f"{{gpus: {share}" + (f", gpu_memory: {gpu_memory}" if gpu_memory else "") + "}"
    if grid_members:
        parameters = f"  - {{id: member, type: integer, min: 0, max: {grid_members - 1}}}\nalgorithm: grid\n"
    else:
        parameters = ("  - {id: learning_rate, type: double, min: 2.0e-5, max: 3.0e-4, scale: log}\n"
                      "  - {id: warmup_ratio, type: double, min: 0.0, max: 0.2}\n"
                      f"algorithm: random\nmax_trial_count: {trials}\n")
    return (f"name: {name}\nobjective: {{metric: accuracy, goal: maximize}}\nparameters:\n{parameters}"
            f"parallel_trial_count: {k}\nmax_failed_trial_count: {trials}\nmax_retries: 0\nseed: 7\n"
            f"trial:\n  command: {json.dumps([str(c) for c in command])}\n  resources: {resources}\n"
            "  timeout: 8m\n")


def run_study(hptune, work, logs, name, text, env, timeout):
    """`hptune run` of one study in its own database, stopped (its workers too) after `timeout`
    seconds; returns its wall time, the isolation it reported, and its trials (`hptune trials
    --format json`), or an error."""
    folder = work / name
    folder.mkdir()
    (folder / "study.yaml").write_text(text)
    storage = f"sqlite://{folder / 'hptune.db'}"
    started = time.time()
    command = [str(hptune), "--storage", storage, "run", str(folder / "study.yaml"), "--log-dir", str(folder / "logs")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        returncode = process.returncode
    except subprocess.TimeoutExpired:
        # Two SIGTERMs: hptune run stops its workers now (their process groups are their own), so
        # that none is left on the GPU while the next study runs; SIGKILL if it has not ended in 15 s.
        process.terminate()
        time.sleep(0.5)
        process.terminate()
        try:
            stdout, stderr = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        returncode = None
    done = subprocess.CompletedProcess(command, returncode, stdout, stderr)
    seconds = time.time() - started
    (folder / "hptune-run.log").write_text(f"# {seconds:.1f} s, exit {done.returncode}\n## stdout\n{done.stdout}\n"
                                           f"## stderr\n{done.stderr}\n")
    output = done.stdout + done.stderr
    isolation = next((line.split("isolation: ", 1)[1].split(":")[0].strip()
                      for line in output.splitlines() if "isolation: " in line), "none (whole GPUs)")
    listed = subprocess.run([str(hptune), "--storage", storage, "trials", name, "--format", "json"],
                            capture_output=True, text=True, env=env)
    shutil.copytree(folder, logs / name, ignore=shutil.ignore_patterns("hptune.db*", "hptune-artifacts"))
    if (done.returncode not in (0, None)) or listed.returncode != 0:
        tail = (done.stderr or listed.stderr).strip().splitlines()[-3:]
        return {"error": f"exit {done.returncode}: " + " | ".join(tail)}
    if done.returncode is None:  # the trials completed per hour still hold, over the time it ran
        isolation += f"; stopped at its {timeout:.0f} s limit"
    return {"seconds": seconds, "isolation": isolation, "trials": json.loads(listed.stdout)}


def value_of(trial):
    """A trial's objective value in `hptune trials --format json`."""
    for key in ("value", "objective"):
        if isinstance(trial.get(key), (int, float)):
            return float(trial[key])
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", type=Path, default=HERE / "dist" / "hptune-trainer-cuda.tar.xz",
                        help="what bench/gpu/pack.sh made: hptune, hptune-trainer and MiniLM's vocab.txt")
    parser.add_argument("--hptune", type=Path, help="an hptune to use instead of the package's")
    parser.add_argument("--trainer", type=Path, help="an hptune-trainer to use instead of the package's")
    parser.add_argument("--model", type=Path, help="a MiniLM checkpoint folder [default: models/all-MiniLM-L6-v2 "
                        "when present, else a MiniLM-sized one with random weights (seeded), made with transformers]")
    parser.add_argument("--data", type=Path, default=HERE.parent.parent / "samples" / "sst2",
                        help="folder of train.tsv and dev.tsv [default: samples/sst2]")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run (fake device 0)")
    parser.add_argument("--ks", default="1,4,8", help="trials per device: gpus 1/K")
    parser.add_argument("--workers", default="trainer,pytorch", help="hptune-trainer and/or the PyTorch worker")
    parser.add_argument("--trials", type=int, default=12, help="trials per study")
    parser.add_argument("--train-samples", type=int, default=512)
    parser.add_argument("--eval-samples", type=int, default=256)
    parser.add_argument("--budget", type=float, default=480, help="seconds for the whole call")
    parser.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) / "gpu-packing" if os.environ.get("OUT")
                        else HERE / "dist" / "packing", help="folder for table.txt and logs.tar.gz")
    parser.add_argument("--tiny", action="store_true", help="4 trials, 64 rows, K 1 and 2: a dry run")
    args = parser.parse_args()
    if args.tiny:
        args.trials, args.train_samples, args.eval_samples, args.ks = 4, 64, 32, "1,2"
    began, work, logs = start(args.out, "hptune-gpu-packing-")
    left = lambda: args.budget - (time.time() - began)  # noqa: E731
    model = args.model or HERE.parent.parent / "models" / "all-MiniLM-L6-v2"
    random_weights = not (model / "model.safetensors").exists()
    trainer = vocab = None
    if not (args.hptune and args.trainer) or random_weights:
        trainer, vocab = unpack(args.package, work)
        (work / "hptune").chmod(0o755)
    hptune, trainer = args.hptune or work / "hptune", args.trainer or trainer
    if random_weights:
        model = work / "minilm"
        make_checkpoint(model, "minilm", vocab)
    gpu = args.device.startswith("cuda")
    env = dict(os.environ)
    if not gpu:
        env["HPTUNE_GPUS"] = "0"
    env["HPTUNE_GPU_LOCKS"] = str(work / "locks")
    env["HPTUNE_KERNEL_CACHE"] = str(work / "kernels")
    has_torch = importlib.util.find_spec("torch") is not None
    data = ["--train", args.data / "train.tsv", "--eval", args.data / "dev.tsv", "--max-train-samples",
            str(args.train_samples), "--max-eval-samples", str(args.eval_samples), "--seed", "42",
            "--device", args.device, "--batch-size", "32", "--epochs", "1"]
    commands = {"trainer": [trainer, "--model", model, "--metric", "accuracy", *data],
                "pytorch": [sys.executable, HERE / "worker.py", "train", "--model", model, *data]}
    lines = []

    def say(line=""):
        print(line, flush=True)
        lines.append(line)

    mps = shutil.which("nvidia-cuda-mps-control") is not None
    say(f"SST-2 MiniLM ({'random weights, seeded' if random_weights else model.name}), {args.trials} trials a study "
        f"(random search, seed 7), {args.train_samples} training rows, 1 epoch, batch 32, {args.eval_samples} dev rows; "
        f"device {args.device}; nvidia-cuda-mps-control {'found' if mps else 'not found'}; budget {args.budget:.0f} s")
    if gpu and "trainer" in args.workers.split(","):
        # Every trial compiles the kernels it lacks; compiled once here, the first study does not pay it alone.
        started = time.time()
        try:
            warm = subprocess.run([str(trainer), "warm-cache", "--model", str(model), "--seq", "128", "--batch",
                                   "32", "--device", args.device], capture_output=True, text=True, env=env,
                                  timeout=max(30, min(240, left() - 120)))
            outcome = f"exit {warm.returncode}"
            (logs / "warm-cache.log").write_text(f"## stdout\n{warm.stdout}\n## stderr\n{warm.stderr}\n")
        except subprocess.TimeoutExpired:
            outcome = "killed at its time limit"
        say(f"hptune-trainer warm-cache (the trials' shared kernel cache): {outcome}, {time.time() - started:.0f} s")
    say(f"{'worker':<16} {'gpus':>6} {'K':>2} {'done':>5} {'failed':>6} {'wall s':>7} {'trials/h':>9} "
        f"{'x K=1':>6} {'median acc':>10}  isolation")
    workers, ks = args.workers.split(","), [int(k) for k in args.ks.split(",")]
    if not has_torch and "pytorch" in workers:
        workers.remove("pytorch")
        say(f"pytorch          skipped: PyTorch is not installed for {sys.executable}")
    studies_left = len(workers) * len(ks) + 1  # and the out-of-memory study
    # Each study may take an even share of what is left, so that a slow K=1 leaves time for the rest.
    allowance = lambda: (left() - 20) / studies_left  # noqa: E731
    for worker in workers:
        base = None
        for k in ks:
            share = "1" if k == 1 else f"{1 / k:g}"
            prefix = f"{worker:<16} {share:>6} {k:>2}"
            if left() < 60:
                say(f"{prefix} skipped: {left():.0f} s of the budget left")
                continue
            name = f"packing-{worker}-k{k}"
            r = run_study(hptune, work, logs, name, study_yaml(name, commands[worker], args.trials, k), env,
                          timeout=allowance())
            studies_left -= 1
            if "error" in r:
                say(f"{prefix} {r['error']}")
                continue
            done = [t for t in r["trials"] if t.get("state") == "succeeded"]
            failed = [t for t in r["trials"] if t.get("state") == "failed"]
            per_hour = 3600 * len(done) / r["seconds"]
            base = per_hour if k == 1 else base
            values = [v for v in map(value_of, done) if v is not None]
            ratio = f"{per_hour / base:.2f}" if base else "n/a"
            accuracy = f"{100 * statistics.median(values):.2f}%" if values else "n/a"
            say(f"{prefix} {len(done):>5} {len(failed):>6} {r['seconds']:>7.1f} {per_hour:>9.0f} {ratio:>6} "
                f"{accuracy:>10}  {r['isolation']}")
    k = 4
    if left() < 60:
        say(f"out of memory, K={k}: skipped: {left():.0f} s of the budget left")
    else:
        name = "packing-out-of-memory"
        cap = "4GiB" if gpu else "64MiB"  # a MiniLM trial at batch 32 holds about 2 GB
        hog = [sys.executable, HERE / "worker.py", "hog", "--hog-member", str(k - 1), "--device", args.device, "--",
               *commands["trainer"]]
        r = run_study(hptune, work, logs, name, study_yaml(name, hog, k, k, gpu_memory=cap, grid_members=k), env,
                      timeout=left() - 20)
        if "error" in r:
            say(f"out of memory, K={k}, gpu_memory {cap}: {r['error']}")
        else:
            states = {t.get("number", i): (t.get("state"), t.get("error") or t.get("reason") or "")
                      for i, t in enumerate(r["trials"])}
            hogs = [s for s in states.values() if s[0] == "failed"]
            neighbours = [s for s in states.values() if s[0] == "succeeded"]
            alone = len(hogs) == 1 and "out of memory" in hogs[0][1] and len(neighbours) == k - 1
            say(f"out of memory, K={k}, gpu_memory {cap} (isolation: {r['isolation']}): "
                f"{'PASS' if alone else 'FAIL'}: {len(neighbours)} of {k - 1} neighbours succeeded, "
                f"{len(hogs)} failed: {'; '.join(h[1] for h in hogs) or 'none'}")
    finish(say, lines, args.out, logs, work, began)


if __name__ == "__main__":
    main()
