"""The worker's side: hptune.params() and hptune.report() under a real `hptune run`, and
each on its own."""

from __future__ import annotations

import io
import json
import math
import subprocess
from pathlib import Path

import pytest

import hptune
from conftest import hptune_json, loss_of, succeeded


def test_a_python_worker_runs_a_study_through_params_and_report(binary: str, study_file: Path) -> None:
    folder = study_file.parent
    done = subprocess.run([binary, "run", study_file.name], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    trials = hptune_json(binary, folder, "trials", "py-worker")
    assert len(succeeded(trials)) == 4, trials
    for trial in trials:
        # The value recorded is the final report, computed from the parameters the worker
        # read: both ends of the protocol agree on every parameter's value and type.
        assert trial["value"] == pytest.approx(loss_of(trial["params"]), rel=1e-12)
    log = (folder / "hptune-logs" / "py-worker" / "trial-0.log").read_text().splitlines()
    assert log[0].startswith("step=0 loss=") and log[1].startswith("step=1 loss=")
    assert log[2].startswith("loss=") and log[2].endswith(f"layers_seen={trials[0]['params']['layers']}")


def test_params_reads_the_protocols_flags_with_the_types_given() -> None:
    argv = ["--fixed", "--lr=1", "--layers=3", "--opt=sgd", "--ratio=0.25", "--name=a=b", "-x"]
    assert hptune.params(types={"lr": float}, argv=argv) == {
        "lr": 1.0, "layers": 3, "opt": "sgd", "ratio": 0.25, "name": "a=b",
    }
    assert isinstance(hptune.params(types={"lr": float}, argv=argv)["lr"], float)
    assert isinstance(hptune.params(argv=argv)["lr"], int)


def test_params_refuses_a_value_its_type_cannot_read_and_a_parameter_given_twice() -> None:
    with pytest.raises(ValueError, match="'layers' is 'many', which int cannot read"):
        hptune.params(types={"layers": int}, argv=["--layers=many"])
    with pytest.raises(ValueError, match="'lr' is given twice"):
        hptune.params(argv=["--lr=1", "--lr=2"])


def test_report_prints_the_protocols_line() -> None:
    out = io.StringIO()
    hptune.report(accuracy=0.91, loss=2, step=3, stream=out)
    hptune.report(accuracy=math.nan, stream=out)
    hptune.report(accuracy=-math.inf, stream=out)
    assert out.getvalue() == "step=3 accuracy=0.91 loss=2\naccuracy=nan\naccuracy=-inf\n"


@pytest.mark.parametrize(
    ("step", "metrics", "error", "message"),
    [
        (None, {}, ValueError, "at least one metric"),
        (None, {"acc": "0.9"}, TypeError, "'acc' must be a number, not str"),
        (None, {"acc": True}, TypeError, "'acc' must be a number, not bool"),
        (1.5, {"acc": 0.9}, TypeError, "step must be an int, not float"),
        (-1, {"acc": 0.9}, ValueError, "step must be at least 0"),
        (None, {"epoch": 2}, ValueError, "'epoch' gives a step"),
        (None, {"9lives": 2}, ValueError, "'9lives' cannot be reported"),
    ],
)
def test_report_refuses_what_the_protocol_cannot_read(step, metrics, error, message) -> None:
    out = io.StringIO()
    with pytest.raises(error, match=message):
        hptune.report(step=step, stream=out, **metrics)
    assert out.getvalue() == ""


def test_report_writes_the_metrics_file_as_cloudml_hypertune_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("HPTUNE_METRICS_FILE", str(path))
    monkeypatch.setenv("HPTUNE_TRIAL_ID", "7")
    hptune.report(accuracy=0.5, step=1, stream=io.StringIO())
    hptune.report(accuracy=0.75, stream=io.StringIO())
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert [{k: v for k, v in e.items() if k != "timestamp"} for e in entries] == [
        {"accuracy": "0.5", "global_step": "1", "trial": "7"},
        {"accuracy": "0.75", "trial": "7"},
    ]
    assert all(isinstance(e["timestamp"], float) for e in entries)
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]
