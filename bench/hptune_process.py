"""What the benchmarks that drive one `hptune` binary share: a client of `hptune session`
(one process, one JSON line a request) and a command timed by its wall and CPU time."""

import json
import resource
import subprocess
import time


class Session:
    """One `hptune session STUDY` of `binary` under `env`; each request must succeed."""

    def __init__(self, binary, study, env):
        self.process = subprocess.Popen(
            [binary, "session", str(study)], env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )

    def request(self, line):
        """Sends `line` (a dict), returns its answer's `result`; fails unless it exits 0."""
        self.process.stdin.write(json.dumps(line) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        assert answer["exit"] == 0, answer
        return answer["result"]

    def close(self):
        """Ends the session (end of input) and checks that it exited 0."""
        self.process.stdin.close()
        assert self.process.wait() == 0


def timed(args, env, timeout=None):
    """Runs `args` to success: (its stdout, wall seconds, CPU seconds: user + system of the
    process), or None when it runs past `timeout` seconds (then stopped)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        out = subprocess.run(args, env=env, check=True, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out.stdout, wall, cpu
