"""One long-lived ``hptune session`` process per study: a request and its answer are one
JSON line each over the process's standard input and output (docs/ask-tell.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import weakref
from typing import IO, Any, Dict, List, Mapping, Optional, Sequence, Type

from hptune._binary import HptuneError, failure_message, find_binary

# How long a session that was told to end (its standard input closed) may take to end.
_END_SECONDS = 10.0


class Session:
    """The ``hptune session STUDY.yaml`` process of one study, started on the first request
    and reused by the next ones (one at a time: a lock orders the requests of several
    threads). A process that has ended (killed, or after a failure) is started again on
    the next request; a request it ended during raises :class:`~hptune.HptuneError`."""

    def __init__(self, path: str, storage: Optional[str], binary: Optional[str]) -> None:
        self._args = ["session", path] + ([] if storage is None else ["--storage", storage])
        self._binary = binary
        self._lock = threading.Lock()
        self._process: Optional[_Process] = None

    def request(
        self,
        request: Dict[str, Any],
        accept: Sequence[int] = (0,),
        errors: Optional[Mapping[int, Type[HptuneError]]] = None,
    ) -> Any:
        """Sends ``request`` (its ``op`` and fields) and returns the answer's result.

        Raises:
            HptuneError: the answer is an error, or its exit code is not in ``accept``: of
                the class ``errors`` gives for that code, if any; or the process ended
                before it answered (its exit code and what it said on stderr).
        """
        op = str(request["op"])
        with self._lock:
            process = self._running()
            answer = process.exchange(json.dumps(request))
            if answer is None:
                self._process = None
                code, message = process.ended()
                raise HptuneError([process.binary, op], code, message)
        try:
            parsed = json.loads(answer)
            code = int(parsed["exit"])
        except (ValueError, KeyError, TypeError) as err:
            raise HptuneError([process.binary, op], 1, f"answered no JSON ({err}): {answer[:200]!r}") from None
        if "error" in parsed or code not in accept:
            error = (errors or {}).get(code, HptuneError)
            raise error([process.binary, op], code, str(parsed.get("error", parsed)))
        return parsed["result"]

    def close(self) -> None:
        """Ends the process, if it runs (its standard input closed, it ends as at the end
        of a client's requests); a later request starts a new one."""
        with self._lock:
            if self._process is not None:
                self._process.close()
                self._process = None

    def _running(self) -> "_Process":
        """The process, started if there is none, it has ended, or it is a parent's (this
        process was forked from the one that started it)."""
        process = self._process
        if process is None or process.pid_of_client != os.getpid() or not process.alive():
            if process is not None and process.pid_of_client == os.getpid():
                process.close()
            process = _Process(self._binary or find_binary(), self._args)
            self._process = process
        return process


class _Process:
    """A started ``hptune session`` and where its stderr goes (a temporary file, read when
    it ends)."""

    def __init__(self, binary: str, args: List[str]) -> None:
        self.binary = binary
        self.pid_of_client = os.getpid()
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        self._popen = subprocess.Popen(
            [binary, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            text=True, encoding="utf-8",
        )
        # A study dropped without close() ends its process when it is collected.
        self._finalizer = weakref.finalize(self, _end, self._popen, self._stderr)

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self._popen.poll() is None

    def exchange(self, line: str) -> Optional[str]:
        """Writes ``line`` and reads the answer's line; ``None`` when the process ended first."""
        stdin, stdout = self._popen.stdin, self._popen.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(line + "\n")
            stdin.flush()
            answer = stdout.readline()
        except (BrokenPipeError, OSError):
            return None
        return answer or None

    def ended(self) -> "tuple[int, str]":
        """The exit code of a process that ended before it answered and what it said (its
        stderr), once it has ended; a signal that ended it is named, with exit code 1."""
        try:
            code = self._popen.wait(timeout=_END_SECONDS)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            code = self._popen.wait()
        self._stderr.seek(0)
        said = failure_message(self._stderr.read().decode("utf-8", "replace"))
        self._finalizer()
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return 1, f"the hptune session process was ended by {name} before it answered (the next request starts a new one): {said}"
        return code, said

    def close(self) -> None:
        """Ends the process (see :meth:`Session.close`)."""
        self._finalizer()


def _end(popen: "subprocess.Popen[str]", stderr: IO[bytes]) -> None:
    """Closes the session's standard input, which ends it, and waits for it (killing it
    if it does not end in time)."""
    try:
        if popen.stdin is not None:
            popen.stdin.close()
    except OSError:
        pass
    try:
        popen.wait(timeout=_END_SECONDS)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()
    if popen.stdout is not None:
        popen.stdout.close()
    stderr.close()
