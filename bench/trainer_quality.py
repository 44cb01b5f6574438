#!/usr/bin/env python3
"""Quality of hptune-trainer beside Hugging Face's Trainer: the same checkpoint, the same SST-2
training subset, the same hyperparameters, evaluated on the full SST-2 dev set.

One command (from the repository root):

    nice -n 5 bench/.venv/bin/python bench/trainer_quality.py [--train-samples N] [...]

It builds `hptune-trainer` (`cargo build -p hptune-trainer`, unless --no-build), runs it on the
first N rows of the training file, then runs `transformers.Trainer` (BertForSequenceClassification,
AdamW with no decay on biases and LayerNorm, linear warmup/decay, gradient clipping at 1.0,
dynamic padding, evaluation after every epoch) on the same rows with the same flags, and prints
a Markdown table: dev accuracy after the last epoch, wall time of the whole run (loading,
training, evaluations), training samples/s (training time only), and the difference in points.
`--seeds` runs both implementations once per seed: the two draw different random numbers for
the head and dropout, so one run each cannot tell a difference smaller than the spread between
seeds; the summary compares the implementations' mean accuracies over the seeds. Everything goes to
bench/results/trainer_quality-<timestamp>.json.

Runs in bench/.venv, installing torch, transformers and accelerate there when they are missing
(bench/bench_venv.py).
"""

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import bench_venv

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SST2 = ROOT.parent / "shared" / "data" / "sst2"
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
if not TARGET.is_absolute():
    TARGET = ROOT / TARGET


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="models/all-MiniLM-L6-v2")
    p.add_argument("--train", default=str(SST2 / "train.tsv"),
                   help="SST-2 train.tsv (header sentence<TAB>label)")
    p.add_argument("--dev", default=str(SST2 / "dev.tsv"),
                   help="SST-2 dev.tsv, evaluated in full")
    p.add_argument("--train-samples", type=int, default=512,
                   help="the first N training rows (the issue's full run: 8000)")
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-seq-len", type=int, default=128)
    p.add_argument("--batch-order", choices=["shuffled", "length-grouped"], default="shuffled",
                   help="both sides: hptune-trainer's --batch-order; the HF Trainer's "
                        "train_sampling_strategy random or group_by_length")
    p.add_argument("--seeds", type=int, nargs="+", default=[42],
                   help="one run of each implementation per seed")
    p.add_argument("--skip-hptune", action="store_true", help="only the Hugging Face runs")
    p.add_argument("--skip-hf", action="store_true", help="only the hptune-trainer runs")
    p.add_argument("--no-build", action="store_true", help="use the binary as it is")
    return p.parse_args()


def read_rows(path, limit=None):
    """(sentence, label) rows of a GLUE-style TSV with a header, as hptune-trainer reads it."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        rows = [(r["sentence"], int(r["label"])) for r in reader]
    return rows[:limit] if limit is not None else rows


def run_hptune(args, seed):
    """Runs the trainer binary; returns its result record."""
    binary = TARGET / "debug" / "hptune-trainer"
    command = [
        str(binary), "--model", args.model, "--train", args.train, "--eval", args.dev,
        "--max-train-samples", str(args.train_samples),
        "--learning-rate", str(args.learning_rate), "--batch-size", str(args.batch_size),
        "--epochs", str(args.epochs), "--warmup-ratio", str(args.warmup_ratio),
        "--weight-decay", str(args.weight_decay), "--max-seq-len", str(args.max_seq_len),
        "--batch-order", args.batch_order, "--seed", str(seed),
    ]
    print("$ " + " ".join(command), file=sys.stderr, flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "HPTUNE_TRAINER_LOG": "info"})
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"hptune-trainer failed ({done.returncode}):\n{done.stderr[-3000:]}")
    lines = done.stdout.strip().splitlines()
    final = dict(pair.split("=") for pair in lines[-1].split())
    epochs = [dict(pair.split("=") for pair in line.split()) for line in lines[:-1]]
    # "epoch E/N: R training samples/s; ..." per epoch: training time = samples / rate.
    rates = [float(r) for r in re.findall(r"epoch \d+/\d+: ([0-9.]+) training samples/s",
                                          done.stderr)]
    train_s = sum(args.train_samples / r for r in rates) if rates else float("nan")
    return {
        "implementation": "hptune-trainer (burn-flex)",
        "seed": seed,
        "accuracy": float(final["accuracy"]),
        "eval_loss": float(final["loss"]),
        "per_epoch_accuracy": [float(e["accuracy"]) for e in epochs],
        "wall_s": wall,
        "train_s": train_s,
        "train_samples_per_s": args.train_samples * args.epochs / train_s,
        "command": command,
    }


def run_hf(args, seed):
    """Fine-tunes with transformers.Trainer in this process; returns its result record."""
    import numpy as np
    import torch
    import transformers
    from transformers import (AutoTokenizer, BertForSequenceClassification,
                              DataCollatorWithPadding, Trainer, TrainerCallback,
                              TrainingArguments)

    transformers.logging.set_verbosity_error()
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(args.model)

    def encode(rows):
        enc = tokenizer([s for s, _ in rows], truncation=True, max_length=args.max_seq_len)
        return [{"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": label}
                for ids, types, mask, (_, label) in zip(enc["input_ids"], enc["token_type_ids"],
                                                        enc["attention_mask"], rows)]

    train = encode(read_rows(args.train, args.train_samples))
    dev = encode(read_rows(args.dev))
    num_labels = len({r["labels"] for r in train})

    class EpochClock(TrainerCallback):
        """Training time only: from each epoch's start to its end (evaluation comes after)."""

        def __init__(self):
            self.train_s, self.started, self.accuracies = 0.0, None, []

        def on_epoch_begin(self, *_, **__):
            self.started = time.perf_counter()

        def on_epoch_end(self, *_, **__):
            self.train_s += time.perf_counter() - self.started

        def on_evaluate(self, _args, _state, _control, metrics=None, **__):
            self.accuracies.append(metrics["eval_accuracy"])

    def accuracy(prediction):
        return {"accuracy": float((np.argmax(prediction.predictions, axis=1)
                                   == prediction.label_ids).mean())}

    training_args = TrainingArguments(
        output_dir=str(RESULTS / "hf-trainer-tmp"), learning_rate=args.learning_rate,
        per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=64,
        num_train_epochs=args.epochs, warmup_steps=args.warmup_ratio,  # < 1: a ratio
        weight_decay=args.weight_decay, max_grad_norm=1.0, lr_scheduler_type="linear",
        train_sampling_strategy=("group_by_length" if args.batch_order == "length-grouped"
                                 else "random"),
        seed=seed, eval_strategy="epoch", save_strategy="no", logging_strategy="no",
        report_to="none", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
    clock = EpochClock()
    # Trainer seeds before building the model, so the new head depends on the seed only.
    trainer = Trainer(
        model_init=lambda: BertForSequenceClassification.from_pretrained(
            args.model, num_labels=num_labels),
        args=training_args, train_dataset=train, eval_dataset=dev,
        data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=accuracy,
        callbacks=[clock])
    trainer.train()
    wall = time.perf_counter() - start
    final = trainer.evaluate() if not clock.accuracies else None
    acc = clock.accuracies[-1] if clock.accuracies else final["eval_accuracy"]
    return {
        "implementation": f"HF Trainer (transformers {transformers.__version__}, "
                          f"torch {torch.__version__.split('+')[0]}, {torch.get_num_threads()} threads)",
        "seed": seed,
        "accuracy": acc,
        "per_epoch_accuracy": clock.accuracies,
        "wall_s": wall,
        "train_s": clock.train_s,
        "train_samples_per_s": args.train_samples * args.epochs / clock.train_s,
    }


def table(runs, reference):
    lines = [
        "| implementation | seed | dev accuracy | vs HF mean (points) | wall s | training samples/s | speed vs HF |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['implementation']} | {r['seed']} | {r['accuracy']:.4f} | "
            f"{100 * (r['accuracy'] - reference['accuracy']):+.2f} | {r['wall_s']:.0f} | "
            f"{r['train_samples_per_s']:.2f} | "
            f"{r['train_samples_per_s'] / reference['train_samples_per_s']:.2f}x |")
    return "\n".join(lines)


def mean_of(runs):
    """The mean accuracy and training speed of runs (one implementation, several seeds)."""
    return {"accuracy": statistics.mean(r["accuracy"] for r in runs),
            "train_samples_per_s": statistics.mean(r["train_samples_per_s"] for r in runs)}


def main():
    args = parse_args()
    if not args.skip_hf:
        bench_venv.ensure(["torch", "transformers", "accelerate"], "torch, transformers, accelerate")
    RESULTS.mkdir(parents=True, exist_ok=True)
    dev_rows = len(read_rows(args.dev))
    if not args.skip_hptune and not args.no_build:
        subprocess.run(["cargo", "build", "--quiet", "-p", "hptune-trainer"], cwd=ROOT, check=True)
    ours = [] if args.skip_hptune else [run_hptune(args, seed) for seed in args.seeds]
    hf = [] if args.skip_hf else [run_hf(args, seed) for seed in args.seeds]
    summary = (f"all-MiniLM-L6-v2 on the first {args.train_samples} rows of SST-2 train, "
               f"full dev set ({dev_rows} rows); lr {args.learning_rate}, batch {args.batch_size}, "
               f"{args.epochs} epochs, warmup ratio {args.warmup_ratio}, weight decay "
               f"{args.weight_decay}, max_seq_len {args.max_seq_len}, batches {args.batch_order}; "
               f"{os.cpu_count()} cores")
    print(summary)
    print()
    if hf:
        print(table(ours + hf, mean_of(hf)))
    for name, runs in (("hptune-trainer", ours), ("HF Trainer", hf)):
        if runs:
            accuracies = [r["accuracy"] for r in runs]
            print(f"\n{name} over {len(runs)} seeds: mean {statistics.mean(accuracies):.4f}, "
                  f"min {min(accuracies):.4f}, max {max(accuracies):.4f}")
    if ours and hf:
        gap = 100 * (mean_of(ours)["accuracy"] - mean_of(hf)["accuracy"])
        print(f"\nmean accuracy, hptune-trainer minus HF Trainer: {gap:+.2f} points")
    path = RESULTS / f"trainer_quality-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps({"settings": vars(args), "summary": summary, "runs": ours + hf},
                               indent=2) + "\n")
    print(f"\nresults: {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
