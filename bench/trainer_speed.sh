#!/usr/bin/env bash
# Training throughput and peak memory of hptune-trainer (burn) beside PyTorch, same model,
# same machine, same run.
#
# Random token ids, a fixed batch (all-MiniLM-L6-v2, batch 32, sequence 128, full AdamW steps):
#   [ROUNDS=N] bench/trainer_speed.sh [MODEL_DIR] [BATCH] [SEQ] [STEPS] [BURN_BACKENDS...]
# Real sentences, as users train: one epoch of the hptune-trainer binary against transformers +
# PyTorch on the first ROWS rows of an SST-2 train.tsv, batch 32, variable-length batches
# padded to their longest, at each maximal length and batch order:
#   [ROWS=1024] [MAX_LENS="64 128"] [ORDERS="shuffled length-grouped"] [THREADS=N] \
#       bench/trainer_speed.sh sst2 [TRAIN_TSV] [MODEL_DIR]
# (THREADS=N: N threads each, through RAYON_NUM_THREADS and OMP_NUM_THREADS; default: as many
# as cores, 2 here. THREADS=1 keeps the ratio when other work holds the cores: one thread
# each waits for no other.)
# Needs: scripts/fetch-model.sh, and torch + transformers in bench/.venv (or PYTHON=...).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-bench/.venv/bin/python}"

# One epoch of real sentences on each side; the ratio compares runs of the same maximal
# length and batch order. Training samples/s is each side's own figure for the epoch (first
# batch to last; tokenising before it and evaluating after it are not counted); peak RSS is the
# whole process's (`/usr/bin/time`).
real_sentences() {
    local data="${1:-$repo/../shared/data/sst2/train.tsv}" model="${2:-models/all-MiniLM-L6-v2}"
    local rows="${ROWS:-1024}" rate rss line
    if [[ -n "${THREADS:-}" ]]; then
        export RAYON_NUM_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS"
    fi
    cargo build --quiet -p hptune-trainer --bin hptune-trainer >&2
    local trainer="${CARGO_TARGET_DIR:-target}/debug/hptune-trainer" log
    log="$(mktemp)"
    trap 'rm -f "$log"' RETURN
    printf '%s, %s rows of %s, batch 32, 1 epoch, learning rate 5e-5, %s threads each, load average %s\n' \
        "$model" "$rows" "$data" "${THREADS:-$(nproc)}" "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%-8s %-15s %-16s %10s %13s %11s\n' max_len order implementation samples/s \
        peak_RSS_MiB vs_pytorch
    for max_len in ${MAX_LENS:-64 128}; do
        for order in ${ORDERS:-shuffled length-grouped}; do
            /usr/bin/time -f 'peak_rss_kib=%M' "$trainer" --model "$model" --train "$data" \
                --max-train-samples "$rows" --eval "$data" --max-eval-samples 32 \
                --batch-size 32 --epochs 1 --learning-rate 5e-5 --max-seq-len "$max_len" \
                --batch-order "$order" --seed 42 >/dev/null 2>"$log" || { cat "$log" >&2; exit 1; }
            rate="$(sed -n 's/.*epoch 1\/1: \([0-9.]*\) training samples\/s.*/\1/p' "$log")"
            rss="$(( $(sed -n 's/^peak_rss_kib=//p' "$log") / 1024 ))"
            line="$("$python" bench/trainer_speed.py "$model" 32 "$max_len" 0 --data "$data" \
                --rows "$rows" --order "$order" 2>"$log")" || { cat "$log" >&2; exit 1; }
            torch_rate="$(field "$line" samples_per_s)"
            printf '%-8s %-15s %-16s %10.2f %13s %10.2fx\n' "$max_len" "$order" hptune-trainer \
                "$rate" "$rss" "$(python3 -c "print($rate / $torch_rate)")"
            printf '%-8s %-15s %-16s %10.2f %13s %10.2fx\n' "$max_len" "$order" pytorch \
                "$torch_rate" "$(field "$line" peak_rss_mib)" 1
        done
    done
}

field() { sed -n "s/.*$2=\([^ ]*\).*/\1/p" <<<"$1"; }
if [[ "${1:-}" == sst2 ]]; then
    shift
    real_sentences "$@"
    exit 0
fi
model="${1:-models/all-MiniLM-L6-v2}"; batch="${2:-32}"; seq="${3:-128}"; steps="${4:-3}"
shift $(( $# < 4 ? $# : 4 ))
backends=("${@:-flex}")
features=$(IFS=,; echo "${backends[*]}")

cargo build --quiet -p hptune-trainer --example train_speed --features "$features" >&2
example="${CARGO_TARGET_DIR:-target}/debug/examples/train_speed"

# ROUNDS=N alternates the runs N times (burn's backends, then PyTorch, in each round): the
# table gives each backend's median, and its median ratio to PyTorch's run of the same round,
# which keeps the ratio honest on a machine whose speed drifts.
rounds="${ROUNDS:-1}"
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
