"""The benchmarks' Python environment: bench/.venv (git-ignored), created on first use with
the packages a benchmark needs, and the script re-run inside it."""

import os
import subprocess
import sys
import venv
from pathlib import Path

VENV = Path(__file__).resolve().parent / ".venv"


def ensure_venv(imports, packages):
    """Re-runs the calling script inside bench/.venv, first creating it and installing
    `packages` when one of the modules `imports` is missing."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {VENV} ...", file=sys.stderr)
        venv.create(VENV, with_pip=True)
    check = subprocess.run([python, "-c", f"import {', '.join(imports)}"], capture_output=True)
    if check.returncode != 0:
        print(f"installing {', '.join(packages)} into {VENV} ...", file=sys.stderr)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    os.execv(python, [str(python), *sys.argv])
