"""A real full disk for a test: a tiny tmpfs mounted in a private user and mount namespace (``unshare``).

No root is needed where the kernel lets unprivileged users create user namespaces (Linux); elsewhere the test skips.
The script runs in a child Python whose ``sys.argv[1]`` is the tmpfs folder and which has ``fill(folder)``: it
writes a file there until the disk is full (``ENOSPC``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._paths import ROOT

_FILL = '''
import os


def fill(folder):
    """Write ``<folder>/filler`` until the disk is full."""
    fd = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\\0" * 512)
    except OSError as e:
        assert e.errno == 28, e
    finally:
        os.close(fd)

'''
_MOUNT = 'mount -t tmpfs -o size="$1"k tmpfs "$2"'


def run_on_a_full_disk(tmp_path: Path, script: str, size_kib: int = 256) -> subprocess.CompletedProcess:
    """Run the Python ``script`` in a child whose ``sys.argv[1]`` is an empty tmpfs of ``size_kib`` KiB.

    Skips where ``unshare`` cannot mount one (not Linux, user namespaces not allowed).
    """
    unshare = shutil.which("unshare")
    if sys.platform != "linux" or unshare is None:
        pytest.skip("a tiny tmpfs needs Linux's unshare")
    disk = tmp_path / "disk"
    disk.mkdir()
    ns = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c"]
    probe = subprocess.run([*ns, _MOUNT, "sh", "16", str(disk)], capture_output=True, text=True, timeout=60)
    if probe.returncode:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {probe.stderr.strip()[:200]}")
    code = tmp_path / "on_a_full_disk.py"
    code.write_text(_FILL + script)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MONAI_UNC_TEST_DEVICE": "cpu"}
    return subprocess.run([*ns, f'{_MOUNT} && exec "$3" "$4" "$2"', "sh", str(size_kib), str(disk), sys.executable,
                           str(code)], capture_output=True, text=True, env=env, timeout=600)
