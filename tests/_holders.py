"""Another process that holds a folder's lock, as a running command does, forked from the test process."""

from __future__ import annotations

import os
import select
import signal
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest


class ForkedHolder:
    """A child forked from the test process that enters ``lock()`` and holds it until killed (or ``hold_s`` passed).

    ``lock`` makes the context manager in the child, e.g. ``lambda: output_lock(folder, "monai-unc infer")``. The
    constructor returns once the child holds it, its process id in ``pid``; ``kill()`` then ``wait()``, or a ``with``
    block, ends it. The child is a copy of the test process: no interpreter start-up (a fresh ``python -c`` that
    imports the package's ``io`` spends about 3 s of CPU importing torch), and it holds the lock through its own open
    file, as another process does. A child that fails before it holds the lock fails the test with its traceback (on
    its standard error); one that does not hold it within ``wait_s`` is killed and fails the test.
    """

    def __init__(self, lock: Callable[[], AbstractContextManager[Any]], hold_s: float = 120.0,
                 wait_s: float = 60.0) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            try:
                os.close(r)
                with lock():
                    os.write(w, b"held")
                    select.select([], [], [], hold_s)  # until killed
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(0)
        os.close(w)
        self.pid = pid
        self._done = False
        try:
            ready, _, _ = select.select([r], [], [], wait_s)
            got = os.read(r, 4) if ready else b""
        finally:
            os.close(r)
        if got != b"held":
            self.kill()
            self.wait()
            pytest.fail("the holder process did not hold the lock" + ("" if ready else f" within {wait_s} s"))

    def kill(self) -> None:
        """Kill the child (``SIGKILL``: the lock is released as by a crash); nothing once it has been waited for."""
        if not self._done:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self) -> None:
        """Wait for the child to end (after :meth:`kill`)."""
        if not self._done:
            os.waitpid(self.pid, 0)
            self._done = True

    def __enter__(self) -> ForkedHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self.wait()
