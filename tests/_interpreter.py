"""Running a script under Triton's interpreter (``TRITON_INTERPRET=1``) for the tests of the Triton kernels on a CPU."""

from __future__ import annotations

import os
import subprocess
import sys

from tests._paths import ROOT


def run_interpreted(script: str, timeout: float = 900) -> str:
    """``python -c script`` in a subprocess with ``TRITON_INTERPRET=1``, no CUDA device and the checkout importable.

    The interpreter must be set before Triton is imported, hence a subprocess. Asserts a zero exit status (with the
    ends of its output in the message) and returns its standard output.
    """
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout,
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r.stdout
