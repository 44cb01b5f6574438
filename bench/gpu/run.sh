#!/usr/bin/env bash
# The GPU diagnosis (bench/gpu/run.py): PyTorch eager f32 (IEEE and TF32 matrix products) and bf16
# autocast against hptune-trainer f32 and bf16, each with an empty kernel cache (warm-cache) and a
# warm one, cubecl's autotune at minimal and balanced; MiniLM-sized, sequence 128, batch 32 by
# default. One table (samples/s, step time, peak GPU memory, loss after 50 steps, cold and first
# step, host syncs, kernels, host and GPU time per step, GPU utilisation) and raw logs under
# $OUT/gpu-diagnosis, within --budget seconds (500). Needs python3 with torch and transformers, and
# bench/gpu/dist/hptune-trainer-cuda.tar.xz (bench/gpu/pack.sh, on a machine with Rust).
# `bench/gpu/run.sh --packing [packing.py flags]` runs bench/gpu/packing.py instead (issue #34:
# several trials on one GPU under `hptune run`; its header has its CPU dry run).
# Usage: bench/gpu/run.sh [run.py flags], e.g. --models minilm,bert-base; a CPU dry run:
#   bench/gpu/run.sh --device cpu --tiny --package bench/gpu/dist/hptune-trainer-flex.tar.xz
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
# The trainer opens the CUDA driver and NVRTC by name (cudarc): where the loader's cache lacks
# them, the folders that hold them are added after LD_LIBRARY_PATH's own, the driver's folder
# first, then CUDA's toolkit and pip's nvidia wheels; never a toolkit's stub or forward-compat
# driver, which would be loaded in place of the real one.
cached="$(ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true)"
sites="$("$python" -c 'import site; print(*site.getsitepackages(), site.getusersitepackages())' 2>/dev/null || true)"
for library in libcuda.so libnvrtc.so; do
  [[ "$cached" == *"$library"* ]] && continue
  for root in /usr/local/nvidia /usr/local/cuda /usr/local/cuda-* $sites; do
    [[ -d "$root" ]] || continue
    while IFS= read -r folder; do
      [[ ":${LD_LIBRARY_PATH:-}:" == *":$folder:"* ]] && continue
      export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$folder"
    done < <(find "$root" -name "$library*" -not -path '*/stubs/*' -not -path '*/compat/*' \
      -printf '%h\n' 2>/dev/null | sort -u)
  done
done
if [[ "${1:-}" == --packing ]]; then
  shift
  exec "$python" "$here/packing.py" "$@"
fi
exec "$python" "$here/run.py" "$@"
