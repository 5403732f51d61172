"""``monitor record`` of a triage folder that a ``triage`` of another process is still writing (review 64).

Found by the hostile review of two runs at once: ``report``, ``evaluate`` and ``dicom-export`` refuse a folder that
another run still holds, ``monitor record`` read it anyway (a cron ``triage`` rewriting the folder while a user records
it by hand: the run half-way, or "no triage.json" when the rerun had removed the earlier one). It is refused in one
line naming the holder, before the store is created or written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monai_unc import cli
from tests.monitoring._stream import make_rule, write_triage

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a holder process (about 1 s to start where the machine is idle) and two records
def test_a_triage_folder_being_written_is_not_recorded(tmp_path, capsys):
    folder = write_triage(tmp_path / "tri", make_rule([0.1, 0.2]), [{"case": "a", "score": 0.1}])
    db = tmp_path / "m.db"
    code = ("import sys, time; from monai_unc.io import output_lock\n"
            "with output_lock(sys.argv[1], 'monai-unc triage'):\n    print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert cli.main(["monitor", "record", str(folder), "--db", str(db)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "being written by another run" in err[0] and f"pid {holder.pid}" in err[0], err
        assert str(folder) in err[0] and "monai-unc triage" in err[0], err
        assert not db.exists()  # nothing created
    finally:
        holder.kill()
        holder.wait()
    assert cli.main(["monitor", "record", str(folder), "--db", str(db)]) == 0  # the holder gone: recorded
