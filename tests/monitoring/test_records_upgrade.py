"""Upgrade: recording a triage folder that 0.1.0 wrote (found by the upgrade review).

0.1.0's ``triage.json`` holds its rule without a digest (``format_version`` 1, ``monai_unc_version`` "0.1.0"). The
store cannot key such a rule, so ``monitor record`` refuses it; it said only "field 'rule' must hold the referral
rule with its digest", not that the folder is an older version's nor what to do. It now says both, in one line,
and creates no store.
"""

from __future__ import annotations

import json

import pytest

from monai_unc import cli
from monai_unc.monitoring import read_triage_run

from ._stream import make_rule, write_triage


def _as_written_by_010(folder):
    doc = json.loads((folder / "triage.json").read_text())
    doc["rule"].pop("digest")
    doc["rule"].update(format_version=1, monai_unc_version="0.1.0")
    (folder / "triage.json").write_text(json.dumps(doc))


def test_a_010_triage_folder_is_refused_saying_what_to_do(tmp_path, capsys):
    folder = write_triage(tmp_path / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}])
    _as_written_by_010(folder)
    with pytest.raises(ValueError, match=r"records no digest \(written by monai-unc 0\.1\.0\): triage the cases again"):
        read_triage_run(folder)
    db = tmp_path / "m.db"
    assert cli.main(["monitor", "record", str(folder), "--db", str(db), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "triage the cases again with this version" in err
    assert not db.exists()


def test_a_rule_without_digest_and_format_is_still_a_wrong_field(tmp_path):
    folder = write_triage(tmp_path / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}])
    doc = json.loads((folder / "triage.json").read_text())
    doc["rule"] = {"score": "s"}  # no rule file's JSON at all
    (folder / "triage.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="field 'rule' must hold the referral rule with its digest"):
        read_triage_run(folder)
