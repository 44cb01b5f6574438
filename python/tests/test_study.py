"""The client's side: hptune.Study driving the real binary's ask, tell, best and trials."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, List

import pytest

import hptune
from conftest import hptune_json, loss_of, postgres_url, succeeded, write_study


def study_in(folder: Path, name: str, trials: int, **options: Any) -> hptune.Study:
    """A Study of a new study file in ``folder``, stored in a SQLite file there."""
    return hptune.Study(write_study(folder, name, trials, **options), storage=f"sqlite://{folder / 'hptune.db'}")


def test_a_sequential_ask_tell_loop_proposes_what_hptune_run_proposes(binary: str, tmp_path: Path) -> None:
    ran, asked = tmp_path / "ran", tmp_path / "asked"
    ran.mkdir(), asked.mkdir()
    study_file = write_study(ran, "same", 6, parallel=1, algorithm="bayesian")
    done = subprocess.run([binary, "run", study_file.name], cwd=ran, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    by_run = [t["params"] for t in sorted(hptune_json(binary, ran, "trials", "same"), key=lambda t: t["number"])]

    study = study_in(asked, "same", 6, parallel=1, algorithm="bayesian")
    by_client = []
    for _ in range(6):
        trial = study.ask()
        by_client.append(trial.params)
        study.tell(trial, loss_of(trial.params))
    assert by_client == by_run
    with pytest.raises(hptune.BudgetSpent) as spent:
        study.ask()
    assert spent.value.exit_code == 5 and "budget of 6 trials is spent" in spent.value.message


def test_ask_tells_a_spent_budget_from_a_full_study_and_from_a_failed_database(tmp_path: Path) -> None:
    study = study_in(tmp_path, "full", 2, parallel=1)
    first = study.ask()
    with pytest.raises(hptune.AllLeased) as full:
        study.ask()
    assert full.value.exit_code == 4
    study.tell(first, 1.0)
    study.tell(study.ask(), 2.0)
    with pytest.raises(hptune.BudgetSpent):
        study.ask()

    broken = tmp_path / "broken.db"
    broken.write_text("not a database, but long enough to be read as one " * 100)
    with pytest.raises(hptune.HptuneError) as failed:
        hptune.Study(study.path, storage=f"sqlite://{broken}").ask()
    assert type(failed.value) is hptune.HptuneError and failed.value.exit_code == 1


def test_a_study_file_without_a_trial_block_is_driven_by_the_client_alone(binary: str, tmp_path: Path) -> None:
    text = write_study(tmp_path, "clients", 3).read_text()
    study_file = tmp_path / "clients-only.yaml"
    study_file.write_text(text[: text.index("trial:")])
    study = hptune.Study(study_file, storage=f"sqlite://{tmp_path / 'hptune.db'}")
    study.optimize(lambda trial: loss_of(trial.params))
    assert len(succeeded(study.trials())) == 3
    done = subprocess.run([binary, "run", study_file.name, "--storage", str(study.storage)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2 and "no `trial:` block" in done.stderr


def test_optimize_in_more_threads_than_slots_fills_the_budget_exactly(tmp_path: Path) -> None:
    study = study_in(tmp_path, "threads", 8, parallel=2)
    seen: List[int] = []
    study.optimize(lambda trial: seen.append(trial.number) or loss_of(trial.params), n_jobs=3)

    trials = study.trials()
    assert sorted(seen) == list(range(8))
    assert len(succeeded(trials)) == 8
    assert all(t["value"] == loss_of(t["params"]) for t in trials)
    best = study.best()
    assert best["value"] == min(t["value"] for t in trials)
    assert best["params"] == next(t["params"] for t in trials if t["number"] == best["number"])


def test_optimize_runs_n_trials_and_a_later_call_goes_on(tmp_path: Path) -> None:
    study = study_in(tmp_path, "partial", 5)
    study.optimize(lambda trial: loss_of(trial.params), n_trials=3)
    assert len(study.trials()) == 3
    study.optimize(lambda trial: loss_of(trial.params), n_trials=10)
    assert len(succeeded(study.trials())) == 5


def test_a_report_the_stopping_rule_judges_unpromising_stops_the_trial(tmp_path: Path) -> None:
    study = study_in(tmp_path, "stops", 5, parallel=1, extra="early_stopping: {rule: median, min_steps: 1, min_trials: 3}\n")
    answers = {}

    def objective(trial: hptune.Trial) -> float:
        value = 10.0 + trial.number  # each trial worse than the ones before it
        for step in range(3):
            if trial.report(value, step):
                answers[trial.number] = step
                return value
        return value

    study.optimize(objective)
    trials = sorted(study.trials(), key=lambda t: t["number"])
    assert [t["state"] for t in trials] == ["succeeded"] * 3 + ["stopped"] * 2
    assert answers == {3: 1, 4: 1}
    assert trials[3]["value"] == 13.0


def test_an_objective_that_raises_fails_its_trial_with_the_reason(tmp_path: Path) -> None:
    study = study_in(tmp_path, "raises", 4)

    def objective(trial: hptune.Trial) -> float:
        if trial.number == 1:
            raise ValueError("diverged at step 3")
        return loss_of(trial.params)

    with pytest.raises(ValueError, match="diverged"):
        study.optimize(objective)
    study.optimize(objective, catch=(ValueError,))
    trials = sorted(study.trials(), key=lambda t: t["number"])
    assert [t["state"] for t in trials] == ["succeeded", "failed", "succeeded", "succeeded"]
    assert "ValueError: diverged at step 3" in trials[1]["error"]


def test_a_trial_not_told_before_its_lease_ends_goes_back_to_the_study(tmp_path: Path) -> None:
    study = study_in(tmp_path, "leased", 3)
    study.lease = "1s"
    first = study.ask()
    time.sleep(1.5)
    again = study.ask()
    assert (again.number, again.params) == (first.number, first.params)
    study.tell(again, 0.5)
    (trial,) = study.trials()
    assert (trial["state"], trial["value"], trial["attempt"]) == ("succeeded", 0.5, 2)


def test_bad_input_raises_the_binarys_message_and_exit_code_and_loses_nothing(tmp_path: Path) -> None:
    study = study_in(tmp_path, "bad", 4)
    trial = study.ask()
    cases = [
        (lambda: study.tell(99, 1.0), "99"),
        (lambda: study.tell(trial, metrics={"accuracy": 1.0}), "accuracy"),
        (lambda: trial.report(math.nan, step=1), "NaN"),
    ]
    for call, said in cases:
        with pytest.raises(hptune.HptuneError) as err:
            call()
        assert err.value.exit_code == 2, err.value
        assert said in err.value.message
    study.tell(trial, 0.25)
    with pytest.raises(hptune.HptuneError) as twice:
        study.tell(trial, 0.75)
    assert twice.value.exit_code == 2
    (record,) = study.trials()
    assert (record["state"], record["value"]) == ("succeeded", 0.25)


def test_a_nan_final_value_fails_the_trial_with_the_reason(tmp_path: Path) -> None:
    study = study_in(tmp_path, "nan", 2)
    study.tell(study.ask(), math.nan)
    (record,) = study.trials()
    assert record["state"] == "failed" and "NaN" in record["error"]


def test_calls_the_package_refuses_before_running_the_binary(tmp_path: Path) -> None:
    study = study_in(tmp_path, "refused", 2)
    with pytest.raises(ValueError, match="a value or metrics="):
        study.tell(0)
    with pytest.raises(ValueError, match="a value or metrics="):
        study.tell(0, 1.0, fail="both")
    with pytest.raises(TypeError, match="must be a number, not str"):
        study.tell(0, "0.5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_jobs must be at least 1"):
        study.optimize(lambda trial: 0.0, n_jobs=0)


def test_a_missing_study_file_and_a_missing_binary_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(hptune.HptuneError) as missing:
        hptune.Study(tmp_path / "nowhere.yaml", storage=f"sqlite://{tmp_path / 'db'}").ask()
    assert missing.value.exit_code == 2 and "nowhere.yaml" in missing.value.message
    monkeypatch.setenv("HPTUNE_BIN", str(tmp_path / "no-hptune"))
    with pytest.raises(FileNotFoundError, match="HPTUNE_BIN=.*no-hptune is not an executable file"):
        hptune.find_binary()


def test_a_client_killed_mid_trial_gives_its_trial_back_after_the_lease(tmp_path: Path) -> None:
    study = study_in(tmp_path, "killed", 3, parallel=1)
    study.lease = "1s"
    client = (
        "import sys, time, hptune\n"
        "study = hptune.Study(sys.argv[1], storage=sys.argv[2], lease='1s')\n"
        "trial = study.ask()\n"
        "print(trial.number, flush=True)\n"
        "time.sleep(600)\n"
    )
    killed = subprocess.Popen(
        [sys.executable, "-c", client, study.path, str(study.storage)], stdout=subprocess.PIPE, text=True,
    )
    assert killed.stdout is not None
    number = int(killed.stdout.readline())
    killed.kill()
    killed.wait()
    with pytest.raises(hptune.AllLeased):
        study.ask()  # its lease still runs
    time.sleep(1.5)
    again = study.ask()
    assert again.number == number
    study.tell(again, 0.5)
    (trial,) = study.trials()
    assert (trial["state"], trial["attempt"]) == ("succeeded", 2)


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_two_clients_and_a_hptune_run_share_one_budget_exactly(binary: str, tmp_path: Path, database: str) -> None:
    if database == "sqlite":
        study = study_in(tmp_path, "shared", 12, parallel=3)
    else:
        name = f"py-shared-{os.getpid()}-{time.time_ns()}"
        study = hptune.Study(write_study(tmp_path, name, 40, parallel=3), storage=postgres_url())
    budget = 12 if database == "sqlite" else 40
    run = subprocess.Popen(
        [binary, "run", study.path, "--storage", str(study.storage)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    other = hptune.Study(study.path, storage=study.storage)
    told: List[int] = []

    def objective(trial: hptune.Trial) -> float:
        told.append(trial.number)
        return loss_of(trial.params)

    with ThreadPoolExecutor(max_workers=2) as pool:
        clients = [pool.submit(s.optimize, objective, n_jobs=2) for s in (study, other)]
    for client in clients:
        client.result()
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 0, stderr

    trials = study.trials()
    assert sorted(t["number"] for t in trials) == list(range(budget))
    assert len(succeeded(trials)) == budget
    assert len(told) == len(set(told))


def test_one_session_process_answers_every_request_and_a_killed_one_is_started_again(tmp_path: Path) -> None:
    study = study_in(tmp_path, "session", 3, parallel=1)
    trial = study.ask()
    process = study._session._process
    assert process is not None
    first = process._popen
    study.tell(trial, 1.0)
    assert study._session._process is process, "the second request went to the same process"
    first.kill()
    first.wait()
    # Between requests: the next one starts a new process, nothing lost.
    again = study.ask()
    assert again.number == 1 and study._session._process is not process
    study.tell(again, 0.5)
    assert [t["state"] for t in study.trials()] == ["succeeded", "succeeded"]
    study.close()
    assert first.returncode is not None and study._session._process is None
    assert study.best()["number"] == 1, "a closed study starts a new process on its next request"
    study.close()


def test_a_session_process_that_ends_before_it_answers_is_reported_with_its_code_and_words(tmp_path: Path) -> None:
    dies = tmp_path / "dies.sh"
    dies.write_text("#!/bin/sh\nread line\necho \"error: the database went away\" >&2\nexit 7\n")
    dies.chmod(0o755)
    killed = tmp_path / "killed.sh"
    killed.write_text("#!/bin/sh\nread line\nkill -9 $$\n")
    killed.chmod(0o755)
    with pytest.raises(hptune.HptuneError) as ended:
        hptune.Study(tmp_path / "any.yaml", binary=str(dies)).ask()
    assert ended.value.exit_code == 7 and ended.value.message == "error: the database went away"
    with pytest.raises(hptune.HptuneError) as signalled:
        hptune.Study(tmp_path / "any.yaml", binary=str(killed)).trials()
    assert signalled.value.exit_code == 1 and "ended by SIGKILL before it answered" in signalled.value.message
