"""bench/.venv (git-ignored): the Python packages a benchmark needs, installed once."""

import os
import subprocess
import sys
import venv
from pathlib import Path

VENV = Path(__file__).resolve().parent / ".venv"


def ensure(packages, modules):
    """Runs the calling script inside bench/.venv (re-running it there if needed), with
    `packages` installed unless `modules` (a comma-separated import list) import already."""
    if Path(sys.prefix).resolve() != VENV.resolve():
        python = VENV / "bin" / "python"
        if not python.exists():
            print(f"creating {VENV} ...", file=sys.stderr)
            venv.create(VENV, with_pip=True)
        os.execv(python, [str(python), *sys.argv])
    if subprocess.run([sys.executable, "-c", f"import {modules}"], capture_output=True).returncode:
        print(f"installing {' '.join(packages)} into {VENV} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *packages], check=True)
