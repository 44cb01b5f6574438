"""Workers for bench/gpu/packing.py, speaking hptune's worker protocol (docs/worker-protocol.md).

`worker.py train ...`: a plain PyTorch worker: fine-tunes a BERT-family checkpoint (MiniLM) for
sequence classification with transformers on a TSV (`sentence`, `label`), keeping to the device
memory cap hptune gives it (`HPTUNE_GPU_MEMORY`, through PyTorch's per-process memory fraction),
and prints `accuracy=...` on the dev rows.

`worker.py hog --hog-member M -- COMMAND...`: the trial whose `--member` parameter is M
allocates past its cap (on a GPU a real allocation, which CUDA, MPS or PyTorch refuses with its
out-of-memory error; on the CPU, where no cap is enforced, it holds the bytes and reports
exceeding its cap itself, as a worker under time-sharing must); any other member runs COMMAND
with the parameters hptune appended (less `--member`).
"""

import argparse
import csv
import os
import random
import sys

SLACK = 256 << 20  # how far past its cap the hog allocates


def cap_bytes():
    value = os.environ.get("HPTUNE_GPU_MEMORY")
    return int(value) if value else None


def hog(argv):
    if "--" not in argv:
        sys.exit("worker.py hog: usage: hog --hog-member M [--device D] -- COMMAND...")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="worker.py hog")
    parser.add_argument("--hog-member", type=int, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv[:split])
    command = [a for a in argv[split + 1 :] if not a.startswith("--member=")]
    members = [a for a in argv[split + 1 :] if a.startswith("--member=")]
    if len(members) != 1:
        sys.exit("worker.py hog: hptune must pass exactly one --member=N")
    if int(members[0].split("=", 1)[1]) != args.hog_member:
        os.execvp(command[0], command)
    cap = cap_bytes()
    if cap is None:
        sys.exit("worker.py hog: no HPTUNE_GPU_MEMORY, so no cap to allocate past")
    if args.device.startswith("cuda"):
        import torch

        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
        held = torch.empty(cap + SLACK, dtype=torch.uint8, device="cuda")  # raises torch.OutOfMemoryError
        sys.exit(f"worker.py hog: allocated {held.numel()} bytes over a cap of {cap}: the cap was not enforced")
    held = bytearray(cap + SLACK)
    sys.exit(f"worker.py: out of memory: holding {len(held)} bytes, over the cap of {cap} bytes given by "
             "HPTUNE_GPU_MEMORY")


def train(argv):
    parser = argparse.ArgumentParser(prog="worker.py train")
    for flag in ["--model", "--train", "--eval"]:
        parser.add_argument(flag, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--max-train-samples", type=int, default=1024)
    parser.add_argument("--max-eval-samples", type=int, default=256)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--warmup_ratio", type=float, default=0.0)
    args = parser.parse_args(argv)

    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

    transformers.logging.set_verbosity_error()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    cap = cap_bytes()
    if cap is not None and device.type == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2).to(device)

    def load(path, limit):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:limit]
        return [r["sentence"] for r in rows], torch.tensor([int(r["label"]) for r in rows])

    def batches(texts, labels, shuffle):
        order = list(range(len(texts)))
        if shuffle:
            random.shuffle(order)
        for i in range(0, len(order), args.batch_size):
            chosen = order[i : i + args.batch_size]
            inputs = tokenizer([texts[j] for j in chosen], truncation=True, max_length=args.max_seq_len,
                               padding="longest", return_tensors="pt").to(device)
            yield inputs, labels[chosen].to(device)

    train_texts, train_labels = load(args.train, args.max_train_samples)
    eval_texts, eval_labels = load(args.eval, args.max_eval_samples)
    steps = args.epochs * -(-len(train_texts) // args.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(args.warmup_ratio * steps), steps)
    for epoch in range(1, args.epochs + 1):
        model.train()
        for inputs, labels in batches(train_texts, train_labels, shuffle=True):
            model(**inputs, labels=labels).loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        model.eval()
        correct = 0
        with torch.no_grad():
            for inputs, labels in batches(eval_texts, eval_labels, shuffle=False):
                correct += (model(**inputs).logits.argmax(-1) == labels).sum().item()
        peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
        print(f"step={epoch} accuracy={correct / len(eval_texts):.6f} peak_memory_bytes={peak}", flush=True)
    print(f"accuracy={correct / len(eval_texts):.6f} peak_memory_bytes={peak}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("train", "hog"):
        sys.exit("usage: worker.py train ... | worker.py hog --hog-member M [--device D] -- COMMAND...")
    (train if sys.argv[1] == "train" else hog)(sys.argv[2:])
