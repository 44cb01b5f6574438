"""hptune-trainer against PyTorch eager on a GPU: speed, memory and the loss after the same steps.

Runs where only Python, PyTorch and transformers are installed (no Rust, no network): it takes
an hptune-trainer built with `--features cuda` (bench/gpu/pack.sh packs one), makes MiniLM-sized
and bert-base-sized checkpoints with transformers from their configs (random weights, seeded;
the tokenizer is MiniLM's vocab.txt, shipped in the package), and trains each side on the same
rows in the same order (`--batch-order sequential`), dropout off, for two epochs of STEPS
batches: the evaluation loss after the first epoch compares the two (same weights, batches and
hyperparameters), the second epoch's speed is the one reported (the first compiles kernels).
Peak GPU memory is what nvidia-smi reports used while the process runs, less what was used before
it started, sampled every 0.1 s (on the CPU: peak RSS). Prints one table; see bench/RESULTS.md for the command.
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


class PeakMemory:
    """The peak memory of a child process: on a GPU the rise of the GPUs' used memory over what
    was used before it started (nvidia-smi every 0.1 s; process ids are not compared, since a
    container's differ from the driver's); on the CPU its peak RSS, as the kernel counted it."""

    def __init__(self, device: str):
        self.gpu = device.startswith("cuda")
        if self.gpu and shutil.which("nvidia-smi") is None:
            sys.exit("run.py: nvidia-smi is not on PATH; it measures the GPU memory")
        self.peak = 0

    @staticmethod
    def used_mib():
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout
        return sum(int(line) for line in out.split() if line.strip().isdigit())

    def sample(self):
        while not self.done.is_set():
            self.peak = max(self.peak, self.used_mib() - self.baseline)
            time.sleep(0.1)

    def run(self, command):
        """Runs `command`; returns its completed process."""
        self.baseline = self.used_mib() if self.gpu else 0
        with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
            process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True)
            self.done = threading.Event()
            sampler = threading.Thread(target=self.sample, daemon=True)
            if self.gpu:
                sampler.start()
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            self.done.set()
            if self.gpu:
                sampler.join()
            else:
                self.peak = usage.ru_maxrss // 1024
            stdout.seek(0)
            stderr.seek(0)
            return subprocess.CompletedProcess(command, process.returncode, stdout.read(), stderr.read())


def failure(done) -> str:
    """Why a child failed: its exit status and the last lines of its stderr (a panic's message and
    where it was raised)."""
    tail = "\n    ".join(done.stderr.strip().splitlines()[-12:])
    return f"exit {done.returncode}" + (f":\n    {tail}" if tail else "")


def run_trainer(binary, model, data, evaluation, seq, steps, batch, device, precision):
    command = [str(binary), "--model", str(model), "--train", str(data), "--eval", str(evaluation),
               "--batch-size", str(batch), "--eval-batch-size", str(batch), "--epochs", "2",
               "--max-seq-len", str(seq), "--batch-order", "sequential", "--dropout", "0",
               "--learning-rate", str(LEARNING_RATE), "--device", device, "--precision", precision]
    memory = PeakMemory(device)
    done = memory.run(command)
    if done.returncode != 0:
        return {"error": failure(done)}
    losses = re.findall(r"^step=1 .*?\bloss=([0-9.eE+-]+)", done.stdout, re.M)
    rates = re.findall(r"epoch 2/2: ([0-9.]+) training samples/s", done.stderr)
    if not losses or not rates:
        return {"error": "no loss or speed in the output:\n" + done.stderr[-2000:]}
    rate = float(rates[-1])
    return {"samples_per_s": rate, "step_ms": 1000 * batch / rate, "peak_mib": memory.peak, "loss": float(losses[0])}


def run_torch(model, data, evaluation, seq, steps, batch, device, precision):
    command = [sys.executable, __file__, "torch-worker", "--model", str(model), "--data", str(data),
               "--eval", str(evaluation), "--seq", str(seq), "--batch", str(batch), "--device", device,
               "--precision", precision]
    memory = PeakMemory(device)
    done = memory.run(command)
    if done.returncode != 0:
        return {"error": failure(done)}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["peak_mib"] = memory.peak
    return result


def torch_worker(args):
    """PyTorch eager: the same two epochs as the trainer, in this process; prints a JSON line."""
    import torch
    import transformers
    from transformers import BertForSequenceClassification, BertTokenizerFast, get_linear_schedule_with_warmup

    transformers.logging.set_verbosity_error()
    device = torch.device(args.device)
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

    def epoch():
        model.train()
        sync()
        start = time.perf_counter()
        for inputs, labels in train:
            with autocast():
                loss = model(**inputs, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            loss.item()
        sync()
        return time.perf_counter() - start

    def eval_loss():
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad(), autocast():
            for inputs, labels in evaluation:
                logits = model(**inputs).logits.float()
                total += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
                count += len(labels)
        return total / count

    epoch()
    loss = eval_loss()
    seconds = epoch()
    samples = sum(len(labels) for _, labels in train)
    print(json.dumps({"samples_per_s": samples / seconds, "step_ms": 1000 * seconds / len(train), "loss": loss,
                      "torch_peak_allocated_mib": (torch.cuda.max_memory_allocated() >> 20) if device.type == "cuda" else None}))


def unpack(package: Path, into: Path):
    with tarfile.open(package) as tar:
        try:
            tar.extractall(into, filter="data")
        except TypeError:  # Python before 3.12 without the backported filters
            tar.extractall(into)
    binary = into / "hptune-trainer"
    binary.chmod(0o755)
    return binary, into / "vocab.txt"


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
    parser.add_argument("--models", default="minilm,bert-base")
    parser.add_argument("--seqs", default="128,512")
    parser.add_argument("--precisions", default="f32,bf16", help="f32, bf16 or both")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50, help="batches per epoch (two epochs run)")
    parser.add_argument("--tiny", action="store_true", help="a tiny model, sequence 16, 4 steps: a dry run")
    args = parser.parse_args()
    if args.tiny:
        args.models, args.seqs, args.steps, args.batch = "tiny", "16", 4, 8
    work = Path(tempfile.mkdtemp(prefix="hptune-gpu-bench-"))
    binary, vocab = (args.binary, args.vocab) if args.binary and args.vocab else unpack(args.package, work)
    binary, vocab = args.binary or binary, args.vocab or vocab
    gpu = args.device.startswith("cuda")
    precisions = [(p, p) for p in args.precisions.split(",")]
    if not precisions or any(p not in ("f32", "bf16") for p, _ in precisions):
        parser.error(f"--precisions {args.precisions!r}: f32, bf16 or both, comma-separated")
    memory_kind = "peak GPU MiB (nvidia-smi)" if gpu else "peak RSS MiB"
    print(f"batch {args.batch}, {args.steps} steps an epoch, 2 epochs (speed: the second; loss: eval after the first), "
          f"learning rate {LEARNING_RATE}, dropout 0, device {args.device}", flush=True)
    header = f"{'model':<10} {'seq':>4} {'implementation':<22} {'samples/s':>10} {'step ms':>9} {memory_kind:>26} {'loss@' + str(args.steps):>10} {'|diff|':>9}"
    print(header)
    print("-" * len(header))
    for size in args.models.split(","):
        model = work / size
        if not model.exists():
            make_checkpoint(model, size, vocab)
        for seq in (int(s) for s in args.seqs.split(",")):
            data = make_data(work, vocab, seq, args.batch * args.steps, seed=1)
            evaluation = make_data(work, vocab, seq, 2 * args.batch, seed=2)
            for trainer_precision, torch_precision in precisions:
                rows = []
                if gpu or trainer_precision == "f32":
                    rows.append((f"hptune-trainer {trainer_precision}",
                                 run_trainer(binary, model, data, evaluation, seq, args.steps, args.batch,
                                             args.device, trainer_precision)))
                else:
                    rows.append((f"hptune-trainer {trainer_precision}", {"error": "the CPU trains in f32 only"}))
                label = "pytorch eager f32" if torch_precision == "f32" else "pytorch bf16 autocast"
                rows.append((label, run_torch(model, data, evaluation, seq, args.steps, args.batch, args.device,
                                              torch_precision)))
                reference = rows[-1][1].get("loss")
                for name, r in rows:
                    if "error" in r:
                        print(f"{size:<10} {seq:>4} {name:<22} {r['error']}", flush=True)
                        continue
                    diff = abs(r["loss"] - reference) if reference is not None else float("nan")
                    print(f"{size:<10} {seq:>4} {name:<22} {r['samples_per_s']:>10.1f} {r['step_ms']:>9.1f} "
                          f"{r['peak_mib']:>26} {r['loss']:>10.5f} {diff:>9.2e}", flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
