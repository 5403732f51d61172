"""Writing into a folder the user may not write (review 63: the commands run as a non-root user).

Found by running ``monai-unc monitor report -o FOLDER/x.html`` as a non-root user on a root-owned ``0555`` folder:
the one error line named the private folder of the write, ``Permission denied: FOLDER/.x.html.partial.dir``, a
name the user never gave. The error names the file to be written now, as a full disk's does.
"""

from __future__ import annotations

import errno
import os
import sys

import pytest

from monai_unc import cli
from monai_unc.io import atomic_write_json, atomic_write_text, save_nifti
from tests._users import run_unprivileged
from tests._users import shared_folder as _shared_folder


@pytest.fixture
def shared(tmp_path):
    yield from _shared_folder(tmp_path)


pytestmark = pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"),
                                reason="POSIX permissions and fork")


@pytest.mark.parametrize("writer", ["text", "json", "nifti"])
def test_a_write_into_a_folder_the_user_may_not_write_names_the_file(shared, writer):
    import numpy as np

    locked = shared / "locked"
    locked.mkdir()
    os.chmod(locked, 0o555)
    target = locked / ("x.nii.gz" if writer == "nifti" else "x.json")
    write = {"text": lambda: atomic_write_text(target, "x"), "json": lambda: atomic_write_json(target, {"a": 1}),
             "nifti": lambda: save_nifti(np.zeros((2, 2, 2), np.float32), np.eye(4), target)}[writer]

    def check() -> None:
        with pytest.raises(PermissionError) as info:
            write()
        assert info.value.errno == errno.EACCES and info.value.filename == str(target), info.value
        assert str(target) in str(info.value) and ".partial" not in str(info.value)

    run_unprivileged(check)
    assert os.listdir(locked) == []


def test_monitor_report_into_a_folder_the_user_may_not_write_is_one_line_naming_the_file(shared, capsys):
    from monai_unc.monitoring import MonitorStore

    db = shared / "m.db"
    MonitorStore(str(db)).close()
    out = shared / "locked"
    out.mkdir()
    argv = ["monitor", "report", "--db", str(db), "-o", str(out / "dash.html")]
    assert cli.main(argv[:-2] + ["-o", str(shared / "warm.html")]) == 0  # what it imports, loaded
    os.chmod(out, 0o555)
    os.chmod(shared, 0o777)
    capsys.readouterr()

    def check() -> None:
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(out / "dash.html") in err[0] and ".partial" not in err[0], err

    run_unprivileged(check)
