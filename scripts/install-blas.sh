#!/usr/bin/env bash
# Makes sure the system has the BLAS libraries that hptune-trainer opens at run time for its
# matrix products on the CPU (docs/trainer.md, "Speed"):
# - Intel MKL's runtime (libmkl_rt.so.3 with its sequential layer and CPU kernels), which the
#   trainer prefers: on x86-64 Linux, as root, from PyPI's `mkl` wheel (pinned below; pip
#   downloads it) into /usr/local/lib, then `ldconfig`;
# - OpenBLAS (Debian's `libopenblas0-pthread`, with apt-get, as root), the fallback.
# Where it cannot install one, it says what to install and succeeds all the same: the trainer
# runs without them, only slower. Idempotent.
set -euo pipefail

MKL_VERSION=2026.2.0
# MKL's runtime library, its LP64 interface, its sequential threading layer, its core and the
# CPU-specific kernels it chooses from at run time.
MKL_LIBRARIES="rt intel_lp64 sequential core def mc3 avx2 avx512 avx10"
FALLBACK="the trainer uses OpenBLAS, or burn's own products without it"

# Whether the loader's cache (the listing $2, else read now) has a library of that name (a
# grep pattern).
has_library() { grep -q "$1 " <<<"${2:-$(ldconfig -p 2>/dev/null)}"; }

# Whether every MKL library the trainer needs is in the loader's cache, read once: MKL's runtime
# ends the process, rather than failing a call, when a layer it loads is missing.
has_mkl() {
  local name cache
  cache="$(ldconfig -p 2>/dev/null)"
  for name in $MKL_LIBRARIES; do
    has_library "libmkl_$name\\.so\\.3" "$cache" || return 1
  done
}

# Extracts MKL_LIBRARIES from the wheel $1 into the folder $2.
unpack_mkl() {
  "$PYTHON" - "$1" "$2" $MKL_LIBRARIES <<'PY'
import sys, zipfile
from pathlib import Path

wheel, target, names = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
target.mkdir()
wanted = {f"libmkl_{name}.so.3" for name in names}
with zipfile.ZipFile(wheel) as archive:
    for entry in archive.namelist():
        if "/lib/" in entry and Path(entry).name in wanted:
            (target / Path(entry).name).write_bytes(archive.read(entry))
            wanted.discard(Path(entry).name)
if wanted:
    sys.exit(f"the MKL wheel lacks {sorted(wanted)}")
PY
}

install_mkl() {
  has_mkl && return 0
  if [ "$(uname -sm)" != "Linux x86_64" ] || [ "$(id -u)" != 0 ]; then
    echo "MKL not installed (x86-64 Linux, as root, only): $FALLBACK" >&2
    return 0
  fi
  PYTHON="$(command -v python3 || true)"
  if [ -z "$PYTHON" ] || ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    echo "MKL not installed: it comes from PyPI, and python3 -m pip is missing; $FALLBACK" >&2
    return 0
  fi
  local wheels name
  wheels="$(mktemp -d)"
  trap 'rm -rf "$wheels"' RETURN
  if ! "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" \
    "mkl==$MKL_VERSION" >&2; then
    echo "could not download MKL $MKL_VERSION from PyPI: $FALLBACK" >&2
    return 0
  fi
  if ! unpack_mkl "$wheels"/mkl-*.whl "$wheels/lib" >&2; then
    echo "could not unpack MKL $MKL_VERSION's wheel: $FALLBACK" >&2
    return 0
  fi
  # Every library is unpacked before any is installed, and the runtime library goes last, so
  # that a failed or interrupted install never leaves a runtime without its layers.
  for name in ${MKL_LIBRARIES#rt } rt; do
    if ! cp "$wheels/lib/libmkl_$name.so.3" /usr/local/lib/; then
      echo "could not write /usr/local/lib: $FALLBACK" >&2
      return 0
    fi
  done
  ldconfig || true
  if has_mkl; then
    echo "installed MKL $MKL_VERSION (PyPI's mkl) into /usr/local/lib" >&2
  else
    echo "MKL $MKL_VERSION is in /usr/local/lib, which this system's loader does not search:" \
      "run the trainer with HPTUNE_BLAS=/usr/local/lib/libmkl_rt.so.3" >&2
  fi
}

install_openblas() {
  has_library 'libopenblas\.so\.0' && return 0
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    if apt-get update -qq >/dev/null && apt-get install -y -qq libopenblas0-pthread >/dev/null; then
      echo "installed OpenBLAS (libopenblas0-pthread)" >&2
    else
      echo "could not install libopenblas0-pthread with apt-get: the trainer runs without it," \
        "slower" >&2
    fi
  else
    echo "OpenBLAS not found: install it for a faster trainer (Debian/Ubuntu: apt-get install" \
      "libopenblas0-pthread; Fedora: dnf install openblas; macOS: brew install openblas, then" \
      "HPTUNE_BLAS=\$(brew --prefix openblas)/lib/libopenblas.dylib)" >&2
  fi
}

install_mkl
install_openblas
