"""The wheel: installed into a fresh virtual environment with pip, offline, it runs a study
with the binary it carries and a worker that imports the package."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import hptune_json, succeeded, write_study


@pytest.fixture
def wheel() -> Path:
    """The wheel under test (scripts/test-python.sh builds it)."""
    path = os.environ.get("HPTUNE_TEST_WHEEL")
    if not path:
        pytest.fail("HPTUNE_TEST_WHEEL names no wheel: run the tests with scripts/test-python.sh")
    return Path(path)


def test_the_wheel_carries_the_binary_executable_and_records_every_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        record = archive.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
        binary = next(n for n in names if n.endswith(".data/scripts/hptune"))
        assert (archive.getinfo(binary).external_attr >> 16) & 0o111 == 0o111
    recorded = [line.split(",")[0] for line in record.splitlines()]
    assert sorted(recorded) == sorted(names)
    assert {"hptune/__init__.py", "hptune/py.typed"} <= set(names)


def test_pip_install_of_the_wheel_then_hptune_run_works_from_a_fresh_environment(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = str(bin_dir / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check", str(wheel)],
        check=True,
    )
    hptune = str(bin_dir / "hptune")
    # The package finds the binary its wheel installed, not another one on PATH.
    env = {k: v for k, v in os.environ.items() if k != "HPTUNE_BIN"}
    env["PATH"] = os.path.dirname(sys.executable)
    found = subprocess.run(
        [python, "-c", "import hptune; print(hptune.find_binary())"], env=env, capture_output=True, text=True, check=True,
    )
    assert found.stdout.strip() == hptune

    study = write_study(tmp_path, "from-wheel", 3, python=python)
    done = subprocess.run([hptune, "run", study.name], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(succeeded(hptune_json(hptune, tmp_path, "trials", "from-wheel"))) == 3
