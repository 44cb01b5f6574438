#!/usr/bin/env bash
# Makes sure the system has OpenBLAS, which hptune-trainer opens at run time for its matrix
# products on the CPU (about twice as fast as burn's own; docs/trainer.md). Installs Debian's
# `libopenblas0-pthread` when it is missing and this shell may use apt-get; elsewhere it says
# what to install and succeeds all the same: the trainer runs without it, only slower.
# Idempotent.
set -euo pipefail

if ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0 '; then
  exit 0
fi
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
