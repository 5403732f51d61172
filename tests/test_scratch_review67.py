"""Review 67: the configuration folder each test process makes in the temporary folder is removed at its exit.

``tests/conftest.py`` made ``monai-unc-test-config-*`` with ``tempfile.mkdtemp`` in every test process (each
pytest-xdist worker too) and never removed it: 1421 of them had piled up in ``/tmp`` on one machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._paths import ROOT

_SESSION = """
import os, subprocess, sys
from unittest import mock
sys.modules.update(torch=mock.MagicMock(), matplotlib=mock.MagicMock())  # the folder is under test, not the libraries
import tests.conftest
folder = os.environ["XDG_CONFIG_HOME"]
# a command a test starts inherits the folder and writes there while the session runs
subprocess.run([sys.executable, "-c", "import os; open(os.path.join(os.environ['XDG_CONFIG_HOME'], 'key'), 'w')"],
               check=True)
pid = os.fork()  # a forked child runs the atexit handlers it inherited when it exits: not the parent's folder
if pid == 0:
    sys.exit(0)
os.waitpid(pid, 0)
print(folder, os.path.isfile(os.path.join(folder, "key")))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_the_configuration_folder_of_a_test_process_is_removed_when_it_exits():
    done = subprocess.run([sys.executable, "-c", _SESSION], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    folder, kept_during_the_session = done.stdout.split()
    assert Path(folder).name.startswith("monai-unc-test-config-") and kept_during_the_session == "True"
    assert not Path(folder).exists()
