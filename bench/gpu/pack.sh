#!/usr/bin/env bash
# Builds hptune-trainer for NVIDIA GPUs (release, `--features cuda`) and the hptune controller,
# strips them and packs them with all-MiniLM-L6-v2's vocab.txt into
# bench/gpu/dist/hptune-trainer-cuda.tar.xz: what bench/gpu/run.sh (the diagnosis) and
# run.sh --packing (`hptune run` on the GPU) need on a GPU machine that has no Rust toolchain
# and no network.
# Usage: [PROFILE=release|dev] [FEATURES=cuda] bench/gpu/pack.sh [VOCAB_TXT]
# (FEATURES=flex PROFILE=dev packs the CPU build instead, bench/gpu/dist/hptune-trainer-flex.tar.xz:
# a dry run of the packing and of run.sh --device cpu --tiny --package ... on a machine without CUDA.)
# CUDARC_CUDA_VERSION pins the CUDA bindings (default 13000: CUDA 13, as the CI's check); the
# machine that runs the binary needs the NVIDIA driver and NVRTC (docs/trainer.md, "On a GPU").
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
vocab="${1:-models/all-MiniLM-L6-v2/vocab.txt}"
profile="${PROFILE:-release}"
features="${FEATURES:-cuda}"
[[ -f "$vocab" ]] || { echo "pack.sh: $vocab is missing (scripts/fetch-model.sh fetches it)" >&2; exit 2; }
export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13000}"
cargo build --profile "$profile" -p hptune-trainer --bin hptune-trainer --features "$features"
cargo build --profile "$profile" -p hptune --bin hptune
folder="$( [[ "$profile" == dev ]] && echo debug || echo "$profile")"
binaries=("${CARGO_TARGET_DIR:-target}/$folder/hptune-trainer" "${CARGO_TARGET_DIR:-target}/$folder/hptune")
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
for binary in "${binaries[@]}"; do
  cp "$binary" "$stage/"
  strip "$stage/$(basename "$binary")"
done
cp "$vocab" "$stage/vocab.txt"
mkdir -p bench/gpu/dist
package="bench/gpu/dist/hptune-trainer-$features.tar.xz"
tar -C "$stage" -cJf "$package" hptune-trainer hptune vocab.txt
ls -l "${binaries[@]}" "$stage/hptune-trainer" "$stage/hptune" "$package" \
  | awk '{printf "%8.1f MiB  %s\n", $5 / 1048576, $9}'
