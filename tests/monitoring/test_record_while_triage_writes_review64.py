"""``monitor record`` of a triage folder that a ``triage`` of another process is still writing (review 64).

Found by the hostile review of two runs at once: ``report``, ``evaluate`` and ``dicom-export`` refuse a folder that
another run still holds, ``monitor record`` read it anyway (a cron ``triage`` rewriting the folder while a user records
it by hand: the run half-way, or "no triage.json" when the rerun had removed the earlier one). It is refused in one
line naming the holder, before the store is created or written.
"""

from __future__ import annotations

import pytest

from monai_unc import cli
from monai_unc.io import output_lock
from tests._holders import ForkedHolder
from tests.monitoring._stream import make_rule, write_triage


@pytest.mark.slow  # a holder process and two records
def test_a_triage_folder_being_written_is_not_recorded(tmp_path, capsys):
    folder = write_triage(tmp_path / "tri", make_rule([0.1, 0.2]), [{"case": "a", "score": 0.1}])
    db = tmp_path / "m.db"
    holder = ForkedHolder(lambda: output_lock(folder, "monai-unc triage"), hold_s=60)
    try:
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
