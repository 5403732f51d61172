"""Scripts in processes of their own, forked from one server process that imported the heavy modules once.

A test that needs a fresh process (Triton's interpreter, set before Triton is imported; a second command line run
beside the test's own, that takes its folder's lock itself) pays ~5-8 s of CPU to import torch, MONAI and the package
in it. A :class:`ForkServer` imports them once (its prelude) and forks a fresh copy of itself for each script: each
script runs in a process of its own, as under ``python -c``, without paying those imports again.
:func:`run_interpreted` runs a script under Triton's interpreter (``TRITON_INTERPRET=1``) for the tests of the Triton
kernels on a CPU, in one such server per test process (started at the first script, ended at exit).
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

#: the process that forks a copy of itself per script: runs its prelude (``sys.argv[1]``: the imports done once for
#: every copy), then reads one JSON line per script (``[script, stdout file, stderr file]``), writes the copy's process
#: id, then its exit status, one line each
_SERVER = r"""
import json, os, sys, traceback
exec(compile(sys.argv[1], "<prelude>", "exec"), {"__name__": "__prelude__", "__builtins__": __builtins__})
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


class ForkServer:
    """A server process (:data:`_SERVER`) that runs ``prelude`` once and forks a copy of itself per script.

    Args:
        prelude: Python code run once in the server (the imports every copy inherits); it must run nothing that
            starts threads (torch's intra-op pool, a CUDA context), which a forked copy would not have.
        env: the server's environment (its copies inherit it); the repository root is its working folder.
    """

    def __init__(self, prelude: str, env: dict[str, str]) -> None:
        self.prelude, self.env = prelude, env
        self._process: subprocess.Popen | None = None
        self._pending = bytearray()  # what was read of the server's standard output beyond the last line returned

    def stop(self) -> None:
        """End the server (a later :meth:`run` starts another)."""
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
            self._process.stdin.close()
            self._process.stdout.close()

    def _started(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen([sys.executable, "-c", _SERVER, self.prelude], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, bufsize=0, env=self.env, cwd=ROOT)
            self._pending.clear()
            atexit.register(self.stop)
        return self._process

    def _line(self, deadline: float) -> str:
        """The next line of the server's standard output; ``""`` at the deadline or when it ended."""
        fd = self._process.stdout.fileno()
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                return ""
            self._pending.extend(chunk)
        line, _, rest = bytes(self._pending).partition(b"\n")
        self._pending[:] = rest
        return line.decode()

    def run(self, script: str, timeout: float) -> tuple[int, str, str]:
        """``script`` in a fresh copy of the server: ``(exit status, stdout, stderr)``.

        A script still running after ``timeout`` seconds is killed (the server too) and fails the test.
        """
        server = self._started()
        deadline = time.monotonic() + timeout
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            server.stdin.write((json.dumps([script, str(out), str(err)]) + "\n").encode())
            pid = self._line(deadline).strip()
            rc = self._line(deadline).strip()
            if not rc:
                if pid:
                    os.kill(int(pid), signal.SIGKILL)
                self.stop()
                pytest.fail(f"the forked script did not finish within {timeout} s (or its server ended)")
            return int(rc), out.read_text() if out.exists() else "", err.read_text() if err.exists() else ""


#: the server of :func:`run_interpreted`: Triton's interpreter, no CUDA device, the checkout importable
_TRITON = ForkServer(
    "import torch, triton, monai, monai_unc, monai_unc._jit, monai_unc._stats_kernels, monai_unc.stats\n"
    "import monai_unc.inferers, monai_unc.metrics.calibration",
    {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""})


def run_interpreted(script: str, timeout: float = 900) -> str:
    """``script`` under ``TRITON_INTERPRET=1`` in a process of its own, with no CUDA device, the checkout importable
    and the repository root as working folder (a fork of this test process's server, module docstring).

    Asserts a zero exit status (with the ends of its output in the message) and returns its standard output; a
    script still running after ``timeout`` seconds is killed and fails the test.
    """
    rc, stdout, stderr = _TRITON.run(script, timeout)
    assert rc == 0, stdout[-2000:] + stderr[-4000:]
    return stdout
