#!/usr/bin/env bash
# The Python package's tests (python/tests) against a built hptune binary: builds the wheel
# from it (scripts/build-wheel.py, no cargo build), makes a fresh virtual environment in
# target/python-tests/venv, installs pytest (from PyPI) and the wheel there, and runs pytest
# with that environment's Python, so the tests import the package and run the binary as a
# user of the wheel would. Idempotent: each run starts from a fresh environment.
# Usage: scripts/test-python.sh [BINARY [PYTEST ARGS...]]   (default: target/debug/hptune, which
# `cargo test --workspace` builds)
# Without Python 3.11 or its venv module it says the tests are skipped and exits 0;
# HPTUNE_TEST_PYTHON=required makes that a failure.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
binary="$(realpath -m "${1:-$repo_root/target/debug/hptune}")"
python="${PYTHON:-python3}"
work="$repo_root/target/python-tests"

if ! "$python" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  if [[ "${HPTUNE_TEST_PYTHON:-}" == required ]]; then
    echo "test-python: $python with venv (Python 3.11 or later) is required (HPTUNE_TEST_PYTHON=required) and missing" >&2
    exit 1
  fi
  echo "test-python: skipped, no $python with venv (Python 3.11 or later)" >&2
  exit 0
fi
[[ -x "$binary" ]] || { echo "test-python: no binary at $binary (cargo build first)" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
wheel="$("$python" "$repo_root/scripts/build-wheel.py" --binary "$binary" --out "$work/dist")"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check pytest "$wheel" >&2
cd "$repo_root"
HPTUNE_TEST_WHEEL="$wheel" "$work/venv/bin/python" -m pytest python/tests -q -p no:cacheprovider "${@:2}"
