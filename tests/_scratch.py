"""Folders in the system's temporary folder that live as long as the process that made them (review 67).

``tests/conftest.py`` gives every test process a configuration folder of its own (``XDG_CONFIG_HOME``), which the
commands the tests start as subprocesses inherit; it was made with ``tempfile.mkdtemp`` and never removed (1421 of
them had piled up in ``/tmp`` on one machine). :func:`process_folder` removes its folder when the process that made it
exits normally (``atexit``), after every test and the subprocesses they waited for, and never in a forked child whose
exit runs the parent's ``atexit`` handlers while the parent still uses the folder.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child inherits the handler: the folder is its parent's
        shutil.rmtree(path, ignore_errors=True)


def process_folder(prefix: str) -> str:
    """A new folder under the temporary folder (``tempfile.mkdtemp``), removed when this process exits.

    Args:
        prefix: the start of the folder's name (``monai-unc-test-config-``).

    Returns:
        The folder's path.
    """
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(_remove, path, os.getpid())
    return path
