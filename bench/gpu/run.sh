#!/usr/bin/env bash
# hptune-trainer (f32, bf16) against PyTorch eager (f32, bf16 autocast) on a GPU, MiniLM- and
# bert-base-sized models, batch 32, sequences 128 and 512: one table of training samples/s,
# step time, peak GPU memory and the loss after the same 50 steps (bench/gpu/run.py).
# Needs python3 with torch and transformers, and bench/gpu/dist/hptune-trainer-cuda.tar.xz
# (bench/gpu/pack.sh, on a machine with Rust). Usage: bench/gpu/run.sh [run.py flags]
#   e.g. bench/gpu/run.sh --models minilm --seqs 128; a CPU dry run: --device cpu --tiny --binary B --vocab V
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python3}" "$here/run.py" "$@"
