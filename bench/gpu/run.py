"""hptune-trainer against PyTorch eager on a GPU: speed, memory, the loss after the same steps,
cold and warm starts, host syncs, kernels, host and GPU time per step, GPU utilisation.

Runs where only Python, PyTorch and transformers are installed (no Rust, no network): it takes
an hptune-trainer built with `--features cuda` (bench/gpu/pack.sh packs one), makes MiniLM-sized
and bert-base-sized checkpoints with transformers from their configs (random weights, seeded;
the tokenizer is MiniLM's vocab.txt, shipped in the package), and trains each side on the same
rows in the same order (`--batch-order sequential`), dropout off, for two epochs of STEPS
batches: the evaluation loss after the first epoch compares the two (same weights, batches and
hyperparameters), the second epoch's speed is the one reported (the first compiles kernels).
Each trainer variant (precision, autotune level) first runs `warm-cache` on an empty kernel
cache (the cold start), then trains on the cache it left (the warm start). Peak GPU memory is
what nvidia-smi reports used while the process runs, less what was used before it started,
sampled every 0.1 s with the utilisation (on the CPU: peak RSS). Prints one table and writes it
with the raw logs to --out; bench/RESULTS.md says what each column measures.
"""

import argparse
import csv
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

SIZES = {
    # all-MiniLM-L6-v2's and bert-base-uncased's shapes.
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    # A dry run on the CPU (--tiny).
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
}
LEARNING_RATE = 5e-5


def make_checkpoint(folder: Path, size: str, vocab: Path):
    """A BertForSequenceClassification with random (seeded) weights, dropout off, 2 labels."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=sum(1 for _ in vocab.open()), max_position_embeddings=512,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        classifier_dropout=0.0, num_labels=2, **SIZES[size])
    BertForSequenceClassification(config).save_pretrained(folder, safe_serialization=True)
    shutil.copy(vocab, folder / "vocab.txt")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))


def make_data(folder: Path, vocab: Path, seq: int, rows: int, seed: int) -> Path:
    """`rows` texts of `seq` random whole words (so every text is truncated to exactly `seq`
    tokens), labels 0/1 at random."""
    words = [w for w in vocab.read_text().split("\n") if re.fullmatch(r"[a-z]{3,}", w)]
    rng = random.Random(seed)
    path = folder / f"data-{seq}-{rows}-{seed}.tsv"
    with path.open("w", newline="") as f:
        out = csv.writer(f, delimiter="\t")
        out.writerow(["sentence", "label"])
        for _ in range(rows):
            out.writerow([" ".join(rng.choice(words) for _ in range(seq)), rng.randrange(2)])
    return path


class Monitor:
    """Runs a child process and watches it: on a GPU, nvidia-smi streams the GPUs' used memory and
    utilisation every 100 ms (`-lms 100`), each line stamped on arrival; the peak memory is the
    rise over what was used before the child started (process ids are not compared, since a
    container's differ from the driver's). On the CPU: the child's peak RSS, as the kernel counted
    it, and no utilisation. stdout and stderr are kept whole and written to `log` (a raw log)."""

    def __init__(self, device: str):
        self.gpu = device.startswith("cuda")
        if self.gpu and shutil.which("nvidia-smi") is None:
            sys.exit("run.py: nvidia-smi is not on PATH; it measures the GPU memory and utilisation")
        self.samples = []  # (time, used MiB, utilisation %)
        self.peak = 0

    @staticmethod
    def used_mib():
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout
        return sum(int(line) for line in out.split() if line.strip().isdigit())

    def _stream(self, smi):
        for line in smi.stdout:
            fields = [f.strip() for f in line.split(",")]
            if len(fields) == 2 and all(f.isdigit() for f in fields):
                self.samples.append((time.time(), int(fields[0]), int(fields[1])))

    def run(self, command, log: Path, timeout=None, cwd=None, env=None):
        """Runs `command`, killed after `timeout` seconds; returns its completed process
        (returncode None when killed) and writes its output to `log`."""
        baseline = self.used_mib() if self.gpu else 0
        smi = reader = None
        if self.gpu:
            smi = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used,utilization.gpu",
                                    "--format=csv,noheader,nounits", "-lms", "100"],
                                   stdout=subprocess.PIPE, text=True, bufsize=1)
            reader = threading.Thread(target=self._stream, args=(smi,), daemon=True)
            reader.start()
        started = time.time()
        with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
            process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True, cwd=cwd, env=env)
            timer = threading.Timer(timeout, process.kill) if timeout else None
            if timer:
                timer.start()
            _, status, usage = os.wait4(process.pid, 0)
            if timer:
                timer.cancel()
            killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9 and time.time() - started >= (timeout or 0)
            process.returncode = None if killed else os.waitstatus_to_exitcode(status)
            if smi:
                smi.terminate()
                smi.wait()
                reader.join(timeout=2)
                self.peak = max((used - baseline for _, used, _ in self.samples), default=0)
            else:
                self.peak = usage.ru_maxrss // 1024
            self.seconds = time.time() - started
            stdout.seek(0)
            stderr.seek(0)
            done = subprocess.CompletedProcess(command, process.returncode, stdout.read(), stderr.read())
        log.write_text(f"$ {' '.join(map(str, command))}\n# {self.seconds:.1f} s, exit {done.returncode}\n"
                       f"## stdout\n{done.stdout}\n## stderr\n{done.stderr}\n"
                       + "## nvidia-smi (time, used MiB, utilisation %)\n"
                       + "".join(f"{t:.2f} {m} {u}\n" for t, m, u in self.samples))
        return done

    def utilisation(self, start, end):
        """Mean GPU utilisation (%) of the samples between two times; None without samples."""
        inside = [u for t, _, u in self.samples if start <= t <= end]
        return sum(inside) / len(inside) if inside else None


def failure(done) -> str:
    """Why a child failed: its exit status and the last lines of its stderr (a panic's message and
    where it was raised)."""
    if done.returncode is None:
        return "killed at its time limit"
    tail = "\n    ".join(done.stderr.strip().splitlines()[-12:])
    return f"exit {done.returncode}" + (f":\n    {tail}" if tail else "")


def log_time(line: str) -> float:
    """The time of a trainer log line (tracing's UTC timestamp, first on the line)."""
    stamp = line.split()[0].rstrip("Z")
    whole, _, fraction = stamp.partition(".")
    base = time.mktime(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) - time.timezone
    return base + float("0." + (fraction or "0"))


TRAINER_LOG = "info,hptune_trainer::host_reads=debug"


def trainer_command(binary, model, data, evaluation, seq, batch, device, precision, autotune, epochs=2):
    return [str(binary), "--model", str(model), "--train", str(data), "--eval", str(evaluation),
            "--batch-size", str(batch), "--eval-batch-size", str(batch), "--epochs", str(epochs),
            "--max-seq-len", str(seq), "--batch-order", "sequential", "--dropout", "0",
            "--learning-rate", str(LEARNING_RATE), "--device", device, "--precision", precision,
            "--autotune", autotune]


def run_trainer(binary, model, data, evaluation, seq, batch, device, precision, autotune, cache, log, timeout):
    """A training run (two epochs) on kernel cache `cache`: speed and host figures of the second
    epoch, the loss after the first, the first step's time."""
    env = dict(os.environ, HPTUNE_KERNEL_CACHE=str(cache), HPTUNE_TRAINER_LOG=TRAINER_LOG)
    monitor = Monitor(device)
    done = monitor.run(trainer_command(binary, model, data, evaluation, seq, batch, device, precision, autotune),
                       log, timeout=timeout, env=env)
    if done.returncode != 0:
        return {"error": failure(done)}
    losses = re.findall(r"^step=1 .*?\bloss=([0-9.eE+-]+)", done.stdout, re.M)
    rates = re.findall(r"epoch 2/2: ([0-9.]+) training samples/s", done.stderr)
    first = re.findall(r"epoch 1/2: batch 1/\d+ after ([0-9.]+) s", done.stderr)
    tally = [l for l in done.stderr.splitlines() if "epoch 2/2 training: " in l and " host reads in " in l]
    syncs = re.findall(r"([0-9.]+) per step", tally[-1]) if tally else []
    host = re.findall(r"([0-9.]+) ms host CPU per step", tally[-1]) if tally else []
    if not losses or not rates:
        return {"error": "no loss or speed in the output:\n" + done.stderr[-2000:]}
    rate = float(rates[-1])
    result = {"samples_per_s": rate, "step_ms": 1000 * batch / rate, "peak_mib": monitor.peak,
              "loss": float(losses[0]), "first_step_s": float(first[0]) if first else None}
    result["syncs_per_step"] = float(syncs[0]) if syncs else None
    result["host_ms"] = float(host[0]) if host else None
    lines = done.stderr.splitlines()
    begin = [log_time(l) for l in lines if "epoch 1/2 evaluation:" in l]
    end = [log_time(l) for l in lines if "epoch 2/2 training:" in l]
    if begin and end:
        result["gpu_util"] = monitor.utilisation(begin[0], end[0])
        if result["gpu_util"] is not None:
            result["gpu_ms"] = result["step_ms"] * result["gpu_util"] / 100
    return result


def warm_cache(binary, model, seq, batch, device, precision, autotune, cache, log, timeout):
    """`hptune-trainer warm-cache` on `cache`: the seconds of one step and one evaluation, cold."""
    command = [str(binary), "warm-cache", "--model", str(model), "--seq", str(seq), "--batch", str(batch),
               "--eval-batch-size", str(batch), "--device", device, "--precision", precision, "--autotune", autotune]
    done = Monitor(device).run(command, log, timeout=timeout,
                               env=dict(os.environ, HPTUNE_KERNEL_CACHE=str(cache), HPTUNE_TRAINER_LOG="info"))
    if done.returncode is None:
        return {"error": f"first step > {timeout:.0f} s (killed)", "cold_s": None}
    if done.returncode != 0:
        return {"error": failure(done)}
    seconds = re.findall(r"tokens in ([0-9.]+) s:", done.stdout)
    return {"cold_s": float(seconds[0]) if seconds else None}


def count_kernels(binary, work, model, data_short, data_long, extra_steps, evaluation, seq, batch, device,
                  precision, autotune, cache, logs):
    """Kernels launched per training step: cubecl logs every launch (`[profiling.logger] level =
    "minimal"` in a cubecl.toml of the working directory, no timing, no sync); two one-epoch runs on
    the warm cache whose training sets differ by `extra_steps` batches, the difference over those
    steps."""
    if not device.startswith("cuda"):
        return None
    counts = []
    for name, data in (("short", data_short), ("long", data_long)):
        folder = work / f"kernels-{precision}-{name}"
        folder.mkdir(exist_ok=True)
        (folder / "cubecl.toml").write_text('[profiling.logger]\nlevel = "minimal"\nfile = "kernels.log"\nappend = false\n')
        command = trainer_command(binary, model, data, evaluation, seq, batch, device, precision, autotune, epochs=1)
        done = Monitor(device).run(command, logs / f"kernels-{precision}-{name}.log", timeout=120, cwd=folder,
                                   env=dict(os.environ, HPTUNE_KERNEL_CACHE=str(cache), HPTUNE_TRAINER_LOG="info"))
        launches = folder / "kernels.log"
        if done.returncode != 0 or not launches.exists():
            return None
        counts.append(sum("Executing " in line for line in launches.open(errors="replace")))
        shutil.copy(launches, logs / f"kernels-{precision}-{name}.txt")
    return (counts[1] - counts[0]) / extra_steps


def run_torch(model, data, evaluation, seq, batch, device, precision, log):
    command = [sys.executable, __file__, "torch-worker", "--model", str(model), "--data", str(data),
               "--eval", str(evaluation), "--seq", str(seq), "--batch", str(batch), "--device", device,
               "--precision", precision]
    monitor = Monitor(device)
    done = monitor.run(command, log)
    if done.returncode != 0:
        return {"error": failure(done)}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["peak_mib"] = monitor.peak
    result["gpu_util"] = monitor.utilisation(result.pop("epoch_start"), result.pop("epoch_end"))
    return result


def torch_worker(args):
    """PyTorch eager: the same two epochs as the trainer, in this process, then 5 profiled steps
    (CUPTI through torch.profiler: kernels and GPU time per step; synchronising calls counted with
    torch.cuda.set_sync_debug_mode); prints a JSON line."""
    import torch
    import transformers
    from transformers import BertForSequenceClassification, BertTokenizerFast, get_linear_schedule_with_warmup

    transformers.logging.set_verbosity_error()
    device = torch.device(args.device)
    if args.precision == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
    tokenizer = BertTokenizerFast.from_pretrained(args.model)
    model = BertForSequenceClassification.from_pretrained(args.model).to(device)

    def load(path):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        encoded = tokenizer([r["sentence"] for r in rows], truncation=True, max_length=args.seq,
                            padding="longest", return_tensors="pt")
        labels = torch.tensor([int(r["label"]) for r in rows])
        return [({k: v[i : i + args.batch].to(device) for k, v in encoded.items()}, labels[i : i + args.batch].to(device))
                for i in range(0, len(rows), args.batch)]

    train, evaluation = load(args.data), load(args.eval)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, eps=1e-8, weight_decay=0.0)
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, 2 * len(train))
    half = args.precision == "bf16"
    autocast = lambda: torch.autocast(device.type, dtype=torch.bfloat16, enabled=half)  # noqa: E731
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step(inputs, labels):
        with autocast():
            loss = model(**inputs, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        loss.item()

    def epoch():
        model.train()
        sync()
        start, cpu = time.perf_counter(), time.process_time()
        for i, (inputs, labels) in enumerate(train):
            step(inputs, labels)
            if i == 0:
                sync()
                first = time.perf_counter() - start
        sync()
        return time.perf_counter() - start, time.process_time() - cpu, first

    def eval_loss():
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad(), autocast():
            for inputs, labels in evaluation:
                logits = model(**inputs).logits.float()
                total += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
                count += len(labels)
        return total / count

    _, _, first_step = epoch()
    loss = eval_loss()
    epoch_start = time.time()
    seconds, cpu_seconds, _ = epoch()
    epoch_end = time.time()
    samples = sum(len(labels) for _, labels in train)
    result = {"samples_per_s": samples / seconds, "step_ms": 1000 * seconds / len(train), "loss": loss,
              "first_step_s": first_step, "host_ms": 1000 * cpu_seconds / len(train),
              "epoch_start": epoch_start, "epoch_end": epoch_end}
    if device.type == "cuda":
        profiled = train[:5]
        import warnings
        from torch.profiler import ProfilerActivity, profile
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                model.train()
                for inputs, labels in profiled:
                    step(inputs, labels)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        result["syncs_per_step"] = sum("synchroniz" in str(w.message) for w in caught) / len(profiled)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for inputs, labels in profiled:
                step(inputs, labels)
            sync()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset"))]
        result["kernels_per_step"] = len(kernels) / len(profiled)
        result["gpu_ms"] = sum(e.time_range.elapsed_us() for e in kernels) / 1000 / len(profiled)
        result["torch_peak_allocated_mib"] = torch.cuda.max_memory_allocated() >> 20
    print(json.dumps(result))


def unpack(package: Path, into: Path):
    with tarfile.open(package) as tar:
        try:
            tar.extractall(into, filter="data")
        except TypeError:  # Python before 3.12 without the backported filters
            tar.extractall(into)
    binary = into / "hptune-trainer"
    binary.chmod(0o755)
    return binary, into / "vocab.txt"


def start(out: Path, prefix: str):
    """Makes the output folder and a work folder (`prefix` names it) with its logs folder;
    returns the start time, the work folder and the logs folder."""
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    (work / "logs").mkdir()
    return time.time(), work, work / "logs"


def finish(say, lines, out: Path, logs: Path, work: Path, began: float):
    """Says how long the call took, writes the table's `lines` to out/table.txt and the folder
    `logs` to out/logs.tar.gz, and removes the work folder."""
    say(f"took {time.time() - began:.0f} s; table.txt and the raw logs (logs.tar.gz) in {out}")
    (out / "table.txt").write_text("\n".join(lines) + "\n")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        tar.add(logs, arcname="logs")
    shutil.rmtree(work, ignore_errors=True)


def fmt(value, spec, missing="n/a"):
    return missing if value is None else format(value, spec)


COLUMNS = [("implementation", 34, None), ("samples/s", 10, ".1f"), ("step ms", 8, ".1f"), ("peak MiB", 9, "d"),
           ("loss@N", 9, ".5f"), ("|diff|", 8, ".1e"), ("cold s", 7, ".1f"), ("1st step s", 10, ".2f"),
           ("syncs/step", 10, ".2f"), ("kernels/step", 12, ".0f"), ("host ms", 8, ".1f"), ("GPU ms", 7, ".1f"),
           ("GPU %", 6, ".0f")]
KEYS = [None, "samples_per_s", "step_ms", "peak_mib", "loss", "diff", "cold_s", "first_step_s", "syncs_per_step",
        "kernels_per_step", "host_ms", "gpu_ms", "gpu_util"]


def row(prefix, name, r):
    if "error" in r and "samples_per_s" not in r:
        return f"{prefix} {name:<34} {r['error']}"
    cells = [f"{name:<34}"] + [fmt(r.get(key), spec).rjust(width) for (_, width, spec), key in zip(COLUMNS[1:], KEYS[1:])]
    return f"{prefix} " + " ".join(cells)


def main():
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if len(sys.argv) > 1 and sys.argv[1] == "torch-worker":
        parser = argparse.ArgumentParser()
        for flag in ["--model", "--data", "--eval", "--device", "--precision"]:
            parser.add_argument(flag, required=True)
        parser.add_argument("--seq", type=int, required=True)
        parser.add_argument("--batch", type=int, required=True)
        return torch_worker(parser.parse_args(sys.argv[2:]))
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", type=Path, default=here / "dist" / "hptune-trainer-cuda.tar.xz",
                        help="what bench/gpu/pack.sh made: the binary and MiniLM's vocab.txt")
    parser.add_argument("--binary", type=Path, help="an hptune-trainer to use instead of the package's")
    parser.add_argument("--vocab", type=Path, help="a vocab.txt to use instead of the package's")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run")
    parser.add_argument("--models", default="minilm")
    parser.add_argument("--seqs", default="128")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50, help="batches per epoch (two epochs run)")
    parser.add_argument("--torch", default="f32,tf32,bf16", help="PyTorch eager runs: f32, tf32, bf16")
    parser.add_argument("--trainer", default="f32:minimal,bf16:minimal,f32:balanced,bf16:balanced",
                        help="trainer runs, PRECISION:AUTOTUNE, in the order they run while the budget lasts")
    parser.add_argument("--budget", type=float, default=500, help="seconds for the whole call; runs that would not "
                        "fit are skipped and said so")
    parser.add_argument("--cold-limit", type=float, default=180, help="most seconds a cold warm-cache may take")
    parser.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) / "gpu-diagnosis" if os.environ.get("OUT")
                        else here / "dist" / "diagnosis",
                        help="folder for table.txt and logs.tar.gz, the raw logs [default: $OUT/gpu-diagnosis, "
                        "else bench/gpu/dist/diagnosis]")
    parser.add_argument("--tiny", action="store_true", help="a tiny model, sequence 16, 4 steps: a dry run")
    args = parser.parse_args()
    if args.tiny:
        args.models, args.seqs, args.steps, args.batch = "tiny", "16", 4, 8
    began, work, logs = start(args.out, "hptune-gpu-bench-")
    left = lambda: args.budget - (time.time() - began)  # noqa: E731
    binary, vocab = (args.binary, args.vocab) if args.binary and args.vocab else unpack(args.package, work)
    binary, vocab = args.binary or binary, args.vocab or vocab
    gpu = args.device.startswith("cuda")
    torch_runs = [p for p in args.torch.split(",") if p]
    trainer_runs = [tuple(v.split(":")) for v in args.trainer.split(",") if v]
    if any(p not in ("f32", "tf32", "bf16") for p in torch_runs):
        parser.error(f"--torch {args.torch!r}: f32, tf32, bf16, comma-separated")
    if any(len(v) != 2 or v[0] not in ("f32", "bf16") or v[1] not in ("minimal", "balanced", "extensive", "full")
           for v in trainer_runs):
        parser.error(f"--trainer {args.trainer!r}: PRECISION:AUTOTUNE pairs, e.g. f32:minimal,bf16:balanced")
    lines = []

    def say(line=""):
        print(line, flush=True)
        lines.append(line)

    say(f"batch {args.batch}, {args.steps} steps an epoch, 2 epochs (speed, host, GPU: the second epoch; loss: eval "
        f"after the first), learning rate {LEARNING_RATE}, dropout 0, device {args.device}, budget {args.budget:.0f} s")
    say("cold s: warm-cache (one step and one evaluation) on an empty kernel cache; 1st step s: the training run's "
        "first step, on the cache warm-cache left (PyTorch: its first step); syncs/step: trainer host reads per step "
        "(PyTorch: synchronising calls, set_sync_debug_mode); kernels/step: cubecl's launch log (PyTorch: CUPTI); host ms: "
        "process CPU per step; GPU ms: kernel time per step (PyTorch: CUPTI; trainer: GPU % x step ms); GPU %: "
        "nvidia-smi utilisation every 100 ms over the second epoch; n/a: not measured on this device")
    header = " ".join(f"{name:>{width}}" if i else f"{name:<{width}}" for i, (name, width, _) in enumerate(COLUMNS))
    say(f"{'model':<10} {'seq':>4} {header}")
    say("-" * (16 + len(header)))
    for size in args.models.split(","):
        model = work / size
        if not model.exists():
            make_checkpoint(model, size, vocab)
        for seq in (int(s) for s in args.seqs.split(",")):
            prefix = f"{size:<10} {seq:>4}"
            data = make_data(work, vocab, seq, args.batch * args.steps, seed=1)
            evaluation = make_data(work, vocab, seq, 2 * args.batch, seed=2)
            short, extra = max(2, args.steps // 10), max(2, args.steps // 5)
            data_short = make_data(work, vocab, seq, args.batch * short, seed=1)
            data_long = make_data(work, vocab, seq, args.batch * (short + extra), seed=1)
            references = {}
            for precision in torch_runs:
                name = {"f32": "pytorch eager f32 (IEEE matmuls)", "tf32": "pytorch eager f32, TF32 matmuls",
                        "bf16": "pytorch bf16 autocast"}[precision]
                if left() < 60:
                    say(f"{prefix} {name:<34} skipped: {left():.0f} s of the budget left")
                    continue
                r = run_torch(model, data, evaluation, seq, args.batch, args.device, precision,
                              logs / f"{size}-{seq}-torch-{precision}.log")
                references.setdefault("bf16" if precision == "bf16" else "f32", r.get("loss"))
                r["diff"] = 0.0 if "loss" in r else None
                say(row(prefix, name, r))
            kernels = {}
            for precision, autotune in trainer_runs:
                name = f"hptune-trainer {precision} {autotune}"
                if not gpu and precision != "f32":
                    say(f"{prefix} {name:<34} the CPU trains in f32 only")
                    continue
                if left() < 90:
                    say(f"{prefix} {name:<34} skipped: {left():.0f} s of the budget left")
                    continue
                cache = work / f"cache-{size}-{seq}-{precision}-{autotune}"
                tag = f"{size}-{seq}-trainer-{precision}-{autotune}"
                cold = warm_cache(binary, model, seq, args.batch, args.device, precision, autotune, cache,
                                  logs / f"{tag}-cold.log", timeout=min(args.cold_limit, left() - 60))
                if "error" in cold:
                    say(row(prefix, name, cold))
                    continue
                r = run_trainer(binary, model, data, evaluation, seq, args.batch, args.device, precision, autotune,
                                cache, logs / f"{tag}-warm.log", timeout=max(30, left() - 20))
                r["cold_s"] = cold["cold_s"]
                if "loss" in r and references.get(precision) is not None:
                    r["diff"] = abs(r["loss"] - references[precision])
                if precision not in kernels and "error" not in r and left() > 60:
                    kernels[precision] = count_kernels(binary, work, model, data_short, data_long, extra, evaluation,
                                                       seq, args.batch, args.device, precision, autotune, cache,
                                                       logs)
                r["kernels_per_step"] = kernels.get(precision)
                say(row(prefix, name, r))
    finish(say, lines, args.out, logs, work, began)


if __name__ == "__main__":
    main()
