"""Fixtures of the Python package's tests: studies in a temporary folder, run by the real
``hptune`` binary (the one the wheel installed beside the package, scripts/test-python.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, List

import pytest

import hptune

# A worker that reads its parameters with hptune.params() and reports a loss that is a
# function of them, with two intermediate values and the final one, through hptune.report().
WORKER = '''
import hptune

p = hptune.params(types={"lr": float})
assert isinstance(p["lr"], float) and isinstance(p["layers"], int) and isinstance(p["opt"], str), p
loss = p["lr"] * p["layers"] + (1.0 if p["opt"] == "sgd" else 0.5)
for step in range(2):
    hptune.report(loss=loss + 1.0 / (step + 1), step=step)
hptune.report(loss=loss, layers_seen=p["layers"])
'''


def loss_of(params: dict) -> float:
    """The loss the worker reports for ``params``."""
    return params["lr"] * params["layers"] + (1.0 if params["opt"] == "sgd" else 0.5)


def write_study(
    folder: Path,
    name: str,
    trials: int,
    python: str = sys.executable,
    parallel: int = 2,
    algorithm: str = "random",
    extra: str = "",
) -> Path:
    """A study file in ``folder`` whose worker is ``WORKER`` run by ``python``: a log-scaled
    double, an integer and a categorical parameter, the loss minimized, ``trials`` trials,
    and the lines ``extra`` (an ``early_stopping`` block)."""
    (folder / "worker.py").write_text(WORKER)
    study = folder / f"{name}.yaml"
    study.write_text(textwrap.dedent(f"""\
        name: {name}
        objective: {{metric: loss, goal: minimize}}
        parameters:
          - {{id: lr, type: double, min: 0.001, max: 1.0, scale: log}}
          - {{id: layers, type: integer, min: 1, max: 4}}
          - {{id: opt, type: categorical, values: [sgd, adam]}}
        algorithm: {algorithm}
        max_trial_count: {trials}
        parallel_trial_count: {parallel}
        seed: 11
        trial:
          command: [{json.dumps(python)}, worker.py]
          timeout: 1m
        """) + extra)
    return study


def hptune_json(binary: str, folder: Path, *args: str) -> Any:
    """Runs ``hptune ARGS... --format json`` in ``folder`` and reads what it prints."""
    done = subprocess.run([binary, *args, "--format", "json"], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def postgres_url() -> str:
    """The PostgreSQL database of the tests: ``HPTUNE_TEST_POSTGRES``, else the one
    scripts/start-postgres.sh starts (or finds running) and prints."""
    url = os.environ.get("HPTUNE_TEST_POSTGRES")
    if url:
        return url
    script = Path(__file__).resolve().parents[2] / "scripts" / "start-postgres.sh"
    done = subprocess.run([str(script)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"scripts/start-postgres.sh failed ({done.returncode}): {done.stderr[-2000:]}")
    url = done.stdout.strip().splitlines()[-1]
    os.environ["HPTUNE_TEST_POSTGRES"] = url
    return url


@pytest.fixture
def binary() -> str:
    """The hptune binary the package finds (the wheel's, in the tests' environment)."""
    return hptune.find_binary()


@pytest.fixture
def study_file(tmp_path: Path) -> Path:
    """A four-trial study of ``WORKER`` in a temporary folder."""
    return write_study(tmp_path, "py-worker", 4)


def succeeded(trials: List[dict]) -> List[dict]:
    """The trials that succeeded."""
    return [t for t in trials if t["state"] == "succeeded"]
