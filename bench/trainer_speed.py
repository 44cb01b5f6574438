"""PyTorch baseline of bench/trainer_speed.sh: full AdamW steps of BertForSequenceClassification
on random token ids; prints `backend=pytorch samples_per_s=… step_s=… peak_rss_mib=…`."""

import resource
import sys
import time

import torch
import transformers
from transformers import BertForSequenceClassification

model_dir = sys.argv[1]
batch, seq, steps = (int(a) for a in sys.argv[2:5])
device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=2).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
ids = torch.randint(1000, model.config.vocab_size, (batch, seq), device=device)
mask = torch.ones_like(ids)
labels = torch.arange(batch, device=device) % 2
timed = 0.0
for step in range(steps + 1):
    start = time.perf_counter()
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    if step > 0:
        timed += time.perf_counter() - start
step_s = timed / steps
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"backend=pytorch samples_per_s={batch / step_s:.2f} step_s={step_s:.3f} peak_rss_mib={peak:.0f}"
      f" threads={torch.get_num_threads()}")
