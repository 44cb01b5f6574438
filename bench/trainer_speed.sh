#!/usr/bin/env bash
# Training throughput and peak memory of hptune-trainer (burn) beside PyTorch, same model,
# same machine, same run: all-MiniLM-L6-v2, batch 32, sequence 128, full AdamW steps.
# Usage: bench/trainer_speed.sh [MODEL_DIR] [BATCH] [SEQ] [STEPS] [BURN_BACKENDS...]
# Needs: scripts/fetch-model.sh, and torch + transformers in bench/.venv (or PYTHON=...).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
model="${1:-models/all-MiniLM-L6-v2}"; batch="${2:-32}"; seq="${3:-128}"; steps="${4:-3}"
shift $(( $# < 4 ? $# : 4 ))
backends=("${@:-flex}")
python="${PYTHON:-bench/.venv/bin/python}"
features=$(IFS=,; echo "${backends[*]}")

cargo build --quiet -p hptune-trainer --example train_speed --features "$features" >&2
example="${CARGO_TARGET_DIR:-target}/debug/examples/train_speed"

results=()
for backend in "${backends[@]}"; do
    results+=("$("$example" "$model" "$batch" "$seq" "$steps" "$backend")")
done
results+=("$("$python" bench/trainer_speed.py "$model" "$batch" "$seq" "$steps")")

field() { sed -n "s/.*$2=\([^ ]*\).*/\1/p" <<<"$1"; }
torch_rate="$(field "${results[-1]}" samples_per_s)"
printf '%s, batch %s, seq %s, %s timed steps, %s cores\n' "$model" "$batch" "$seq" "$steps" "$(nproc)"
printf '%-16s %12s %10s %14s %16s\n' backend samples/s s/step peak_RSS_MiB vs_pytorch
for line in "${results[@]}"; do
    rate="$(field "$line" samples_per_s)"
    printf '%-16s %12s %10s %14s %15.2fx\n' "$(field "$line" backend)" "$rate" \
        "$(field "$line" step_s)" "$(field "$line" peak_rss_mib)" \
        "$(python3 -c "print($rate / $torch_rate)")"
done
