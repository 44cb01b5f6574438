"""A Hugging Face transformers training loop that fine-tunes all-MiniLM-L6-v2 for sentiment on
the repository's SST-2 sample, tuned by hptune (README.md beside it shows the 10 lines that differ
from the same loop at fixed hyperparameters), run by `hptune run python/examples/hf-sst2.yaml`
from the repository root. Needs scripts/fetch-model.sh and `pip install torch transformers` (and the hptune wheel)."""

import csv

import hptune
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

MODEL = "models/all-MiniLM-L6-v2"
p = hptune.params(types={"learning_rate": float, "weight_decay": float})
learning_rate, batch_size, weight_decay = p["learning_rate"], p["batch_size"], p["weight_decay"]
epochs = 2

torch.manual_seed(0)
tokenizer = AutoTokenizer.from_pretrained(MODEL)
model = AutoModelForSequenceClassification.from_pretrained(MODEL, num_labels=2)


def loader(path: str, shuffle: bool) -> DataLoader:
    """The sentences and labels of a TSV file, tokenized batch by batch."""
    with open(path, newline="") as f:
        rows = [(r["sentence"], int(r["label"])) for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]

    def collate(items):
        batch = tokenizer([text for text, _ in items], padding=True, truncation=True, max_length=64, return_tensors="pt")
        batch["labels"] = torch.tensor([label for _, label in items])
        return batch

    return DataLoader(rows, batch_size=batch_size, shuffle=shuffle, collate_fn=collate)


train, dev = loader("samples/sst2/train.tsv", shuffle=True), loader("samples/sst2/dev.tsv", shuffle=False)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
steps = epochs * len(train)
scheduler = get_linear_schedule_with_warmup(optimizer, steps // 10, steps)

for epoch in range(epochs):
    model.train()
    for batch in train:
        model(**batch).loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        correct = sum((model(**b).logits.argmax(-1) == b["labels"]).sum().item() for b in dev)
    accuracy = correct / len(dev.dataset)
    hptune.report(accuracy=accuracy, step=epoch)
hptune.report(accuracy=accuracy)
