#!/usr/bin/env bash
# Training throughput and peak memory of hptune-trainer (burn) beside PyTorch, same model,
# same machine, same run: all-MiniLM-L6-v2, batch 32, sequence 128, full AdamW steps.
# Usage: [ROUNDS=N] bench/trainer_speed.sh [MODEL_DIR] [BATCH] [SEQ] [STEPS] [BURN_BACKENDS...]
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

# ROUNDS=N alternates the runs N times (burn's backends, then PyTorch, in each round): the
# table gives each backend's median, and its median ratio to PyTorch's run of the same round,
# which keeps the ratio honest on a machine whose speed drifts.
rounds="${ROUNDS:-1}"
field() { sed -n "s/.*$2=\([^ ]*\).*/\1/p" <<<"$1"; }
declare -A rates ratios steps_s rss
for round in $(seq "$rounds"); do
    lines=()
    for backend in "${backends[@]}"; do
        lines+=("$("$example" "$model" "$batch" "$seq" "$steps" "$backend")")
    done
    lines+=("$("$python" bench/trainer_speed.py "$model" "$batch" "$seq" "$steps")")
    torch_rate="$(field "${lines[-1]}" samples_per_s)"
    for line in "${lines[@]}"; do
        name="$(field "$line" backend)"
        rate="$(field "$line" samples_per_s)"
        rates[$name]+="$rate "
        ratios[$name]+="$(python3 -c "print(round($rate / $torch_rate, 2))") "
        steps_s[$name]+="$(field "$line" step_s) "
        rss[$name]="$(field "$line" peak_rss_mib)"
    done
done
median() { python3 -c "import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))" $1; }
printf '%s, batch %s, seq %s, %s timed steps, %s cores, %s round(s)\n' "$model" "$batch" "$seq" \
    "$steps" "$(nproc)" "$rounds"
printf '%-16s %12s %10s %14s %16s\n' backend samples/s s/step peak_RSS_MiB vs_pytorch
for name in "${!rates[@]}"; do
    printf '%-16s %12.2f %10.3f %14s %15.2fx   (per round: %s)\n' "$name" \
        "$(median "${rates[$name]}")" "$(median "${steps_s[$name]}")" "${rss[$name]}" \
        "$(median "${ratios[$name]}")" "${ratios[$name]% }"
done | sort -k5 -r
