"""The client's side: a study driven through the ``hptune`` binary's requests (ask, tell,
best, trials), answered by one ``hptune session`` process of the study."""

from __future__ import annotations

import math
import os
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

from hptune._binary import AllLeased, BudgetSpent
from hptune._session import Session
from hptune._worker import ParamValue, as_float, number_text

# The exit code of `tell --step` when the stopping rule stopped the trial.
_STOPPED = 3
# The exceptions of `ask`'s own exit codes: every parallel slot leased, no trial left.
_ASK_ERRORS = {4: AllLeased, 5: BudgetSpent}

#: What an objective returns: the objective's value.
Objective = Callable[["Trial"], float]


class Trial:
    """One asked trial: its number and parameters, and the way to report on it."""

    def __init__(self, study: "Study", number: int, params: Dict[str, ParamValue]) -> None:
        self.study = study
        #: The trial's number in the study, from 0.
        self.number = number
        #: The trial's parameters by id, typed by the study (inactive ones absent).
        self.params = params

    def report(self, value: float, step: int) -> bool:
        """Records an intermediate value of the objective at ``step`` (renewing the
        trial's lease) and returns whether the study's stopping rule stops the trial:
        when it does, the trial is ``stopped`` with this value and needs no ``tell``."""
        return self.study._tell_step(self, value, step)

    def __repr__(self) -> str:
        return f"Trial(number={self.number}, params={self.params!r})"


class Study:
    """A study of the ``hptune`` binary, driven from Python.

    ``Study("study.yaml", storage="sqlite://hptune.db")`` names the study file (the study
    is created on the first ask if it does not exist yet) and its storage (by default
    ``HPTUNE_STORAGE``, else ``sqlite://hptune.db`` in the current folder, as for the
    binary). Every method is one request to one ``hptune session`` process of the study
    (:func:`~hptune.find_binary`, or ``binary``), started on the first and kept until
    :meth:`close` (or the study is collected, or the program ends), and raises
    :class:`~hptune.HptuneError` when it fails, with the exit code of the command
    (``hptune ask``, ``tell``, ...) that would have failed so. Each request runs under the
    study's lock in the database, as the command does: other clients and ``hptune run``
    share the study. A session process that ended (killed) fails the request it was
    answering and is started again by the next one.
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        storage: Optional[str] = None,
        *,
        lease: Optional[str] = None,
        binary: Optional[str] = None,
    ) -> None:
        """``lease`` is how long an asked trial is held without a report before it goes
        back to the study (``"1h"``, the binary's default when not given)."""
        self.path = os.fspath(path)
        self.storage = storage
        self.lease = lease
        self.binary = binary
        self._session = Session(self.path, storage, binary)

    def close(self) -> None:
        """Ends the study's ``hptune session`` process; a later request starts a new one."""
        self._session.close()

    def __enter__(self) -> "Study":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ask(self) -> Trial:
        """Claims the study's next trial (creating the study on the first ask) and returns it.

        Raises:
            BudgetSpent: no trial left to claim: the budget is spent, too many trials
                failed, or the grid is exhausted (exit code 5).
            AllLeased: every parallel slot of the study is leased (4).
            HptuneError: the study file is bad (2), the database failed (1).
        """
        lease = {} if self.lease is None else {"lease": self.lease}
        (record,) = self._session.request({"op": "ask", **lease}, errors=_ASK_ERRORS)
        return Trial(self, int(record["number"]), dict(record["params"]))

    def tell(
        self,
        trial: Union[Trial, int],
        value: Optional[float] = None,
        *,
        metrics: Optional[Dict[str, float]] = None,
        fail: Optional[str] = None,
    ) -> None:
        """Records a trial's end: its final ``value`` of the objective and, or, its final
        ``metrics`` by name (the objective, constrained metrics); or that it failed, with
        the reason ``fail``. A NaN or infinite objective fails the trial, with the reason.

        Raises:
            ValueError: neither a result nor ``fail``, or both.
            HptuneError: an unknown trial, a trial already told or not asked, a metric the
                study does not have (exit code 2); a trial whose lease ended (1).
        """
        result = value is not None or metrics is not None
        if result == (fail is not None):
            raise ValueError("tell() takes a value or metrics=, or else fail=")
        request = {"op": "tell", "trial": _number(trial), **_result(value, metrics)}
        if fail is not None:
            request["fail"] = fail
        self._session.request(request)

    def _tell_step(self, trial: Trial, value: float, step: int) -> bool:
        """Records an intermediate value; whether the stopping rule stopped the trial
        (exit code 3, with the answer in the JSON either way)."""
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an int, not {type(step).__name__}")
        request = {"op": "tell", "trial": trial.number, **_result(value, None), "step": step}
        answer = self._session.request(request, accept=(0, _STOPPED))
        return bool(answer["stop"])

    def best(self) -> Dict[str, Any]:
        """The best trial: ``number``, ``value`` and ``params`` among its fields (what
        ``hptune best --format json`` prints).

        Raises:
            HptuneError: no trial has succeeded yet, or the study does not exist.
        """
        result: Dict[str, Any] = self._session.request({"op": "best"})
        return result

    def trials(self) -> List[Dict[str, Any]]:
        """Every trial of the study, as ``hptune trials --format json`` lists them:
        ``number``, ``state``, ``params``, ``value``, ``error`` among their fields."""
        result: List[Dict[str, Any]] = self._session.request({"op": "trials"})
        return result

    def optimize(
        self,
        objective: Objective,
        n_trials: Optional[int] = None,
        n_jobs: int = 1,
        catch: Tuple[Type[BaseException], ...] = (),
    ) -> None:
        """Runs ``objective(trial)`` on asked trials and tells each its value, in
        ``n_jobs`` threads, until ``n_trials`` trials have run or the study's budget is
        spent (``n_trials=None``: until the budget is spent).

        An objective that raises fails its trial with the exception as the reason; an
        exception of a type in ``catch`` lets the others go on, any other stops the
        optimization and is raised again once the running trials have ended. An
        objective whose :meth:`Trial.report` said stop may return anything: the trial
        already ended as ``stopped``.
        """
        if n_jobs < 1:
            raise ValueError(f"n_jobs must be at least 1, not {n_jobs}")
        if n_trials is not None and n_trials < 0:
            raise ValueError(f"n_trials must be at least 0, not {n_trials}")
        lock = threading.Lock()
        remaining = [math.inf if n_trials is None else n_trials]
        stop = threading.Event()

        def take() -> bool:
            with lock:
                if stop.is_set() or remaining[0] <= 0:
                    return False
                remaining[0] -= 1
                return True

        def loop() -> None:
            while take():
                trial = self._ask_waiting(stop)
                if trial is None:
                    return
                self._run_one(objective, trial, catch, stop)

        with ThreadPoolExecutor(max_workers=n_jobs) as pool:
            futures = [pool.submit(loop) for _ in range(n_jobs)]
        for future in futures:
            future.result()

    def _ask_waiting(self, stop: threading.Event) -> Optional[Trial]:
        """The next trial, waiting while every parallel slot of the study is leased (to
        other clients, or to more threads than it allows); ``None`` once there is none
        left to claim, which stops the other threads too."""
        wait = 0.05
        while not stop.is_set():
            try:
                return self.ask()
            except BudgetSpent:
                stop.set()
                return None
            except AllLeased:
                pass
            stop.wait(wait)
            wait = min(wait * 2, 1.0)
        return None

    def _run_one(
        self,
        objective: Objective,
        trial: Trial,
        catch: Tuple[Type[BaseException], ...],
        stop: threading.Event,
    ) -> None:
        stopped = _Stopped(trial)
        try:
            value = as_float(objective(stopped), "the objective's return value")
        except BaseException as err:
            reason = "".join(traceback.format_exception_only(type(err), err)).strip()
            self.tell(trial, fail=f"the objective raised {reason}")
            if isinstance(err, catch):
                return
            stop.set()
            raise
        if not stopped.was_stopped:
            self.tell(trial, value)


class _Stopped(Trial):
    """A trial as :meth:`Study.optimize` hands it to the objective: it remembers whether
    a report stopped it (then the trial has ended and is not told)."""

    def __init__(self, trial: Trial) -> None:
        super().__init__(trial.study, trial.number, trial.params)
        self.was_stopped = False

    def report(self, value: float, step: int) -> bool:
        stop = super().report(value, step)
        self.was_stopped = self.was_stopped or stop
        return stop


def _result(value: Optional[float], metrics: Optional[Dict[str, float]]) -> Dict[str, Any]:
    """The fields of a ``tell`` request that give a result, ``value`` and ``metrics``, each
    number as text (as the binary's flags read it: a NaN or an infinity too, which JSON
    does not write)."""
    fields: Dict[str, Any] = {} if value is None else {"value": number_text(value, "the value")}
    if metrics:
        fields["metrics"] = {name: number_text(v, f"the metric {name!r}") for name, v in metrics.items()}
    return fields


def _number(trial: Union[Trial, int]) -> int:
    return trial.number if isinstance(trial, Trial) else int(trial)
