#!/usr/bin/env bash
# hptune-trainer (f32, bf16) against PyTorch eager (f32, bf16 autocast) on a GPU, MiniLM- and
# bert-base-sized models, batch 32, sequences 128 and 512: one table of training samples/s,
# step time, peak GPU memory and the loss after the same 50 steps (bench/gpu/run.py).
# Needs python3 with torch and transformers, and bench/gpu/dist/hptune-trainer-cuda.tar.xz
# (bench/gpu/pack.sh, on a machine with Rust). Usage: bench/gpu/run.sh [run.py flags]
#   e.g. bench/gpu/run.sh --models minilm --seqs 128; a CPU dry run: --device cpu --tiny --binary B --vocab V
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
# The trainer opens the CUDA driver and NVRTC by name (cudarc): where the loader's cache lacks
# them, the folders of CUDA's toolkit and of pip's nvidia wheels that hold them are added.
for library in libcuda.so libnvrtc.so; do
  if ! ldconfig -p 2>/dev/null | grep -q "$library"; then
    site="$("$python" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)"
    found="$(find /usr/local/nvidia /usr/local/cuda /usr/local/cuda-* ${site:+"$site/nvidia"} \
      -name "$library*" -printf '%h\n' 2>/dev/null | sort -u | paste -sd: || true)"
    [[ -n "$found" ]] && export LD_LIBRARY_PATH="$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
done
exec "$python" "$here/run.py" "$@"
