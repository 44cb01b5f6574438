"""Finding the ``hptune`` binary, and the errors of its commands."""

from __future__ import annotations

import os
import shutil
import sysconfig
from typing import List, Sequence

#: The variable that names the binary to run, before any other.
BINARY_VARIABLE = "HPTUNE_BIN"

_NAME = "hptune.exe" if os.name == "nt" else "hptune"


class HptuneError(RuntimeError):
    """A request to the ``hptune`` binary failed: ``message`` is what it said, ``exit_code``
    the exit status of its command (1: a failure, such as the database's; 2: bad input,
    such as an unknown trial or study), ``command`` the binary and the request (``ask``,
    ``tell``, ...)."""

    def __init__(self, command: Sequence[str], exit_code: int, message: str) -> None:
        self.command: List[str] = list(command)
        self.exit_code = exit_code
        self.message = message
        super().__init__(f"hptune {' '.join(self.command[1:2])} failed (exit code {exit_code}): {message}")


class BudgetSpent(HptuneError):
    """``ask`` found no trial left to give (exit code 5): the study's budget is spent,
    ``max_failed_trial_count`` trials failed, or every grid point was tried. Asking again
    gives nothing more, unless a trial whose lease ends without a result comes back."""


class AllLeased(HptuneError):
    """``ask`` found every one of the study's ``parallel_trial_count`` slots leased (exit
    code 4): asking again after another client's ``tell`` (or a lease's end) gives a trial."""


def find_binary() -> str:
    """The ``hptune`` binary that :class:`~hptune.Study` runs.

    In this order: the path in ``HPTUNE_BIN``; the one the wheel installed beside this
    package (the ``scripts`` folder of its environment, or of the user's); the first
    ``hptune`` on ``PATH``.

    Raises:
        FileNotFoundError: none of them is an executable file.
    """
    named = os.environ.get(BINARY_VARIABLE)
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return named
        raise FileNotFoundError(f"{BINARY_VARIABLE}={named} is not an executable file")
    for scheme in (None, f"{os.name}_user"):
        try:
            folder = sysconfig.get_path("scripts") if scheme is None else sysconfig.get_path("scripts", scheme)
        except KeyError:
            continue
        candidate = os.path.join(folder, _NAME)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(_NAME)
    if found is None:
        raise FileNotFoundError(
            "no hptune binary: install the hptune wheel, put hptune on PATH, or set "
            f"{BINARY_VARIABLE} to its path"
        )
    return found


def failure_message(stderr: str, stdout: str = "") -> str:
    """What a failed command said: its stderr, else its stdout."""
    text = stderr.strip() or stdout.strip()
    return text or "(it printed nothing)"
