"""A session fixture's work done once per test session, not once per pytest-xdist worker.

A session- or module-scoped fixture runs in every worker that runs one of its tests, and ``--dist worksteal`` can send
its tests to both workers: an expensive fixture (a demo run, bundle trainings) then runs twice. :func:`once_per_session`
runs it once in a folder of the session's temporary root (shared by its workers), under a file lock: the first worker to
need it does the work, a later one reads the result (waiting for the first if it is still working). Without xdist it
runs in a folder of its own, as ``tmp_path_factory.mktemp`` does. A failed attempt leaves no result, so the next worker
that needs it tries again.

A worker that needs the result while another computes it waits, idle: work that only one test reads belongs in
that test (the memory measurements of ``tests/inferers/test_memory.py`` are one test for that reason).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock


def once_per_session(tmp_path_factory: pytest.TempPathFactory, name: str,
                     produce: Callable[[Path], Any]) -> tuple[Path, Any]:
    """``(folder, produce(folder))``, ``produce`` run once per test session in a fresh ``folder``; its result must
    be JSON-serialisable (it is kept for the other workers as JSON)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.mktemp(name)
        return folder, produce(folder)
    root = tmp_path_factory.getbasetemp().parent  # xdist: <session basetemp>/popen-gwN, so this is the session's
    folder, done = root / f"shared-{name}", root / f"shared-{name}.json"
    with FileLock(str(root / f"shared-{name}.lock")):
        if done.is_file():
            return folder, json.loads(done.read_text())
        if folder.exists():  # what a failed attempt left
            shutil.rmtree(folder)
        folder.mkdir()
        result = produce(folder)
        done.write_text(json.dumps(result))
    return folder, result
