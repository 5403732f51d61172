"""Running a script under Triton's interpreter (``TRITON_INTERPRET=1``) for the tests of the Triton kernels on a CPU.

The interpreter must be set before Triton is imported, hence another process than the test's. One such process per
test process (started at the first script, ended at exit) imports torch, Triton, MONAI and the package once, and forks
a fresh copy of itself for each script: each script runs in a process of its own, as under ``python -c``, without
paying the ~5 s of CPU of those imports again.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests._paths import ROOT

#: the process that forks a copy of itself per script: reads one JSON line per script (``[script, stdout file,
#: stderr file]``), writes the copy's process id, then its exit status, one line each
_SERVER = r"""
import json, os, sys, traceback
import torch, triton, monai, monai_unc, monai_unc._jit, monai_unc._stats_kernels, monai_unc.stats  # once for all
import monai_unc.inferers, monai_unc.metrics.calibration
for line in sys.stdin:
    script, out, err = json.loads(line)
    pid = os.fork()
    if pid == 0:  # the copy: runs the script as `python -c` would, never returns into the loop
        code = 1
        try:
            with open(out, "w") as o, open(err, "w") as e:
                os.dup2(o.fileno(), 1)
                os.dup2(e.fileno(), 2)
            sys.stdout = open(1, "w", buffering=1, closefd=False)
            sys.stderr = open(2, "w", buffering=1, closefd=False)
            sys.argv = ["-c"]
            exec(compile(script, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(pid, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""

_server: subprocess.Popen | None = None
_pending = bytearray()  # what was read of the server's standard output beyond the last line returned


def _stop() -> None:
    if _server is not None and _server.poll() is None:
        _server.kill()
        _server.wait()


def _started() -> subprocess.Popen:
    """The process of :data:`_SERVER` of this test process, started on first use."""
    global _server
    if _server is None or _server.poll() is not None:
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
        _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   bufsize=0, env=env, cwd=ROOT)
        _pending.clear()
        atexit.register(_stop)
    return _server


def _line(server: subprocess.Popen, deadline: float) -> str:
    """The next line of the server's standard output; ``""`` at the deadline or when it ended."""
    fd = server.stdout.fileno()
    while b"\n" not in _pending:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            return ""
        _pending.extend(chunk)
    line, _, rest = bytes(_pending).partition(b"\n")
    _pending[:] = rest
    return line.decode()


def run_interpreted(script: str, timeout: float = 900) -> str:
    """``script`` under ``TRITON_INTERPRET=1`` in a process of its own, with no CUDA device, the checkout importable
    and the repository root as working folder (a fork of this test process's server, module docstring).

    Asserts a zero exit status (with the ends of its output in the message) and returns its standard output; a
    script still running after ``timeout`` seconds is killed and fails the test.
    """
    server = _started()
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        server.stdin.write((json.dumps([script, str(out), str(err)]) + "\n").encode())
        pid = _line(server, deadline).strip()
        rc = _line(server, deadline).strip()
        if not rc:
            if pid:
                os.kill(int(pid), signal.SIGKILL)
            _stop()
            pytest.fail(f"the interpreted script did not finish within {timeout} s (or its server ended)")
        stdout = out.read_text() if out.exists() else ""
        stderr = err.read_text() if err.exists() else ""
    assert int(rc) == 0, stdout[-2000:] + stderr[-4000:]
    return stdout
