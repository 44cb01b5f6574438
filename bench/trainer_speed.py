"""PyTorch baseline of bench/trainer_speed.sh: full AdamW steps of BertForSequenceClassification
(transformers), on random token ids (a fixed batch of BATCH x SEQ) or, with --data, on one epoch
of real sentences in variable-length batches padded to their longest, as users train; prints
`backend=pytorch samples_per_s=… step_s=… peak_rss_mib=…`.

    trainer_speed.py MODEL_DIR BATCH SEQ STEPS [--device cpu]
    trainer_speed.py MODEL_DIR BATCH MAX_LEN 0 --data train.tsv --rows N --order shuffled|length-grouped
"""

import argparse
import csv
import resource
import time

import torch
import transformers
from transformers import AutoTokenizer, BertForSequenceClassification, get_linear_schedule_with_warmup
from transformers.trainer_pt_utils import LengthGroupedSampler

parser = argparse.ArgumentParser()
parser.add_argument("model_dir")
parser.add_argument("batch", type=int)
parser.add_argument("seq", type=int, help="the fixed sequence, or the maximal length with --data")
parser.add_argument("steps", type=int, help="timed steps on random ids (ignored with --data)")
parser.add_argument("device", nargs="?", default="cpu")
parser.add_argument("--data", help="a .tsv with sentence and label columns: train one epoch on it")
parser.add_argument("--rows", type=int, default=1024, help="the first N rows of --data")
parser.add_argument("--order", choices=["shuffled", "length-grouped"], default="shuffled")
parser.add_argument("--learning-rate", type=float, default=5e-5)
parser.add_argument("--seed", type=int, default=42)
args = parser.parse_args()

transformers.logging.set_verbosity_error()
torch.manual_seed(args.seed)
device = args.device
model = BertForSequenceClassification.from_pretrained(args.model_dir, num_labels=2).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)


def step(batch):
    loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
    return loss


def random_ids():
    ids = torch.randint(1000, model.config.vocab_size, (args.batch, args.seq), device=device)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "labels": torch.arange(args.batch, device=device) % 2}
    timed = 0.0
    for index in range(args.steps + 1):  # one untimed warm-up step
        start = time.perf_counter()
        step(batch)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if index > 0:
            timed += time.perf_counter() - start
    return args.batch * args.steps, timed, args.steps


def real_sentences():
    """One epoch over the first --rows rows, timed from its first batch to its last as the
    Trainer's train_samples_per_second is: tokenised beforehand, padded batch by batch."""
    with open(args.data, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[: args.rows]
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    encoded = [tokenizer(r["sentence"], truncation=True, max_length=args.seq) for r in rows]
    labels = [int(r["label"]) for r in rows]
    generator = torch.Generator().manual_seed(args.seed)
    if args.order == "length-grouped":
        lengths = [len(e["input_ids"]) for e in encoded]
        order = list(LengthGroupedSampler(args.batch, lengths=lengths, generator=generator))
    else:
        order = torch.randperm(len(rows), generator=generator).tolist()
    batches = [order[i : i + args.batch] for i in range(0, len(order), args.batch)]
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, len(batches))
    start = time.perf_counter()
    for indices in batches:
        batch = tokenizer.pad([encoded[i] for i in indices], return_tensors="pt")
        batch["labels"] = torch.tensor([labels[i] for i in indices])
        loss = step({k: v.to(device) for k, v in batch.items()})
        scheduler.step()
        loss.item()
    return len(rows), time.perf_counter() - start, len(batches)


samples, seconds, steps = real_sentences() if args.data else random_ids()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"backend=pytorch samples_per_s={samples / seconds:.2f} step_s={seconds / steps:.3f}"
      f" peak_rss_mib={peak:.0f} threads={torch.get_num_threads()}")
