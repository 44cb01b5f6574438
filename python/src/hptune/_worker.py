"""The worker's side of the protocol (docs/worker-protocol.md): its parameters and its reports."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, TextIO, Union

#: A parameter's value: an ``integer`` parameter's is an ``int``, a ``double`` or
#: ``discrete`` one's a ``float``, a ``categorical`` one's a ``str``.
ParamValue = Union[int, float, str]

#: The variable that names the file a worker may write its measurements to.
METRICS_FILE_VARIABLE = "HPTUNE_METRICS_FILE"
#: The variable that gives the trial's number.
TRIAL_VARIABLE = "HPTUNE_TRIAL_ID"

# A metric's name as the protocol reads it in a ``name=value`` pair (src/protocol/report.rs).
_METRIC_NAME = re.compile(r"[a-z_][\w./|-]*\Z", re.IGNORECASE)
# The keys that give a measurement's step rather than a metric.
_STEP_KEYS = ("step", "global_step", "epoch")
# A parameter on the worker's command line, as the protocol writes it.
_PARAM_FLAG = re.compile(r"--([^=\s]+)=(.*)\Z", re.DOTALL)


def params(
    types: Optional[Mapping[str, Callable[[str], ParamValue]]] = None,
    argv: Optional[Sequence[str]] = None,
) -> Dict[str, ParamValue]:
    """The trial's parameters, from the ``--<id>=<value>`` flags of the command line.

    hptune writes a number without its type: a ``double`` whose value is whole comes
    as ``--lr=1``. Each value is read as an ``int`` if it is one, else a ``float``, else
    kept as a ``str``; ``types`` gives a parameter's type where the study knows better
    (``params(types={"lr": float})``). Flags that are not ``--<id>=<value>`` (those the
    study's command holds itself) are skipped.

    Args:
        types: for some ids, the function that reads the value (``float``, ``int``, ``str``).
        argv: the arguments to read; by default ``sys.argv[1:]``.

    Raises:
        ValueError: a value that its given type cannot read, or an id given twice.
    """
    types = types or {}
    found: Dict[str, ParamValue] = {}
    for arg in sys.argv[1:] if argv is None else argv:
        match = _PARAM_FLAG.match(arg)
        if match is None:
            continue
        key, text = match.group(1), match.group(2)
        if key in found:
            raise ValueError(f"the parameter '{key}' is given twice on the command line")
        reader = types.get(key)
        if reader is None:
            found[key] = _guess(text)
            continue
        try:
            found[key] = reader(text)
        except ValueError as err:
            raise ValueError(f"the parameter '{key}' is '{text}', which {reader.__name__} cannot read: {err}") from None
    return found


def _guess(text: str) -> ParamValue:
    """An ``int`` if ``text`` is one, else a ``float``, else ``text`` itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def report(
    *,
    step: Optional[int] = None,
    stream: Optional[TextIO] = None,
    **metrics: float,
) -> None:
    """Reports measurements to hptune: ``report(accuracy=0.91, step=3)``.

    Prints the protocol's line (``step=3 accuracy=0.91``) to stdout and flushes it, and,
    when ``HPTUNE_METRICS_FILE`` names a file, writes the measurements there too, in the
    format ``cloudml-hypertune`` writes (the way a remote engine's worker reports). A
    report with a step is an intermediate value; without one, the final value.

    Args:
        step: the training step or epoch, for an intermediate value.
        stream: where the line goes; by default ``sys.stdout``.
        **metrics: each metric's value; NaN or infinity of the objective fails the trial.

    Raises:
        ValueError: no metric, a name the protocol cannot read, or a negative step.
        TypeError: a value that is not a real number, or a step that is not an integer.
    """
    line = _report_line(step, metrics)
    out = sys.stdout if stream is None else stream
    out.write(line + "\n")
    out.flush()
    path = os.environ.get(METRICS_FILE_VARIABLE)
    if path:
        _MetricsFile.at(path).append(step, metrics)


def _report_line(step: Optional[int], metrics: Mapping[str, float]) -> str:
    """The protocol's line for one report, after checking its names and values."""
    if not metrics:
        raise ValueError("report() needs at least one metric, as report(accuracy=0.91)")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an int, not {type(step).__name__}")
        if step < 0:
            raise ValueError(f"step must be at least 0, not {step}")
    pairs: List[str] = [] if step is None else [f"step={step}"]
    for name, value in metrics.items():
        if name in _STEP_KEYS:
            raise ValueError(f"'{name}' gives a step, it cannot be a metric: pass step=")
        if not _METRIC_NAME.match(name):
            raise ValueError(
                f"'{name}' cannot be reported: a metric's name starts with a letter or '_' "
                "and holds only letters, digits and '_' '.' '/' '|' '-'"
            )
        pairs.append(f"{name}={number_text(value, f'the metric {name!r}')}")
    return " ".join(pairs)


def as_float(value: object, what: str) -> float:
    """``value`` as a ``float``: an ``int``, a ``float``, or a number that converts (a
    numpy or torch scalar); ``what`` names it in the error.

    Raises:
        TypeError: anything else, ``bool`` included.
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a number, not bool")
    if isinstance(value, (int, float)):
        return float(value)
    converter = getattr(value, "__float__", None)
    if converter is None:
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    return float(converter())


def number_text(value: object, what: str) -> str:
    """``value`` as the protocol and the binary read a number: an ``int`` as it is, a
    float in its shortest exact form, ``nan``, ``inf`` or ``-inf``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    number = as_float(value, what)
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    return repr(number)


class _MetricsFile:
    """The metrics file of one worker: every report so far, rewritten whole on each one."""

    _open: Dict[str, "_MetricsFile"] = {}

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: List[str] = []

    @classmethod
    def at(cls, path: str) -> "_MetricsFile":
        """The file at ``path``, with the reports this process made to it."""
        if path not in cls._open:
            cls._open[path] = cls(path)
        return cls._open[path]

    def append(self, step: Optional[int], metrics: Mapping[str, float]) -> None:
        """Adds one report and rewrites the file at once (a new file renamed over it), so
        that hptune, which reads it while the worker runs, never sees half a report."""
        entry: Dict[str, object] = {
            name: number_text(value, f"the metric {name!r}") for name, value in metrics.items()
        }
        if step is not None:
            entry["global_step"] = str(step)
        entry["timestamp"] = time.time()
        entry["trial"] = os.environ.get(TRIAL_VARIABLE, "")
        self.lines.append(json.dumps(entry))
        folder = os.path.dirname(os.path.abspath(self.path))
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".hptune-metrics-")
        try:
            with os.fdopen(fd, "w") as out:
                out.write("\n".join(self.lines) + "\n")
            os.replace(temporary, self.path)
        except BaseException:
            os.unlink(temporary)
            raise
