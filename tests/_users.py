"""Running a check as a user who may not write a folder (review 63: the commands run as a non-root user).

Root ignores a folder's permissions, so as root the check runs in a forked child that drops to ``nobody``; every
module it needs must already be imported, since ``nobody`` may not read this interpreter's files. A non-root user
runs it in this process, on folders made ``0555``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

#: the uid and gid the check runs as when the tests run as root
NOBODY = 65534


def run_unprivileged(check: Callable[[], None]) -> None:
    """Run ``check()`` as a user without root's rights (see the module docstring); its failure fails the test."""
    if os.geteuid() != 0:
        check()
        return
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            check()
            code = 0
        except BaseException:
            os.write(write, traceback.format_exc().encode()[-4000:])
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        message = f.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, message


def shared_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder ``nobody`` can reach (pytest's own folders are root's only, ``0700``), removed at the end: the body of
    a fixture (``yield from shared_folder(tmp_path)``)."""
    folder = Path(tempfile.mkdtemp(prefix="monai-unc-review63-", dir=tmp_path if os.geteuid() else None))
    os.chmod(folder, 0o755)
    yield folder
    for d, _, _ in os.walk(folder):
        os.chmod(d, 0o755)
    shutil.rmtree(folder, ignore_errors=True)
