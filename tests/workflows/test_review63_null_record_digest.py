"""``infer``'s resume predicts again a case whose record's ``record_digest`` was set to ``null`` (review 63).

A present but null digest read as a record of an earlier version (no ``record_digest`` field), whose
``file_digests`` are trusted: a replaced map with its digest entry edited to match, and the record digest nulled,
was kept. A record without the field is still checked file by file.
"""

from __future__ import annotations

import shutil

import pytest

from monai_unc.io import file_sha256
from tests.workflows.test_review61_resume import _copy, _edit, _rerun, run  # noqa: F401 (the module's fixture)


@pytest.mark.slow
@pytest.mark.parametrize("value", [None, 7])
def test_a_replaced_map_with_a_record_digest_that_is_no_digest_is_predicted_again(run, tmp_path, capsys,  # noqa: F811
                                                                                 value):
    out, argv = _copy(run, tmp_path)
    probs, whole = out / "toy000_probs.nii.gz", (out / "toy000_probs.nii.gz").read_bytes()
    shutil.copyfile(out / "toy001_probs.nii.gz", probs)  # another case's map in its place ...

    def match(doc):  # ... its digest entry edited to match, and the record's own digest no digest
        doc["file_digests"]["toy000_probs.nii.gz"] = {"size": probs.stat().st_size, "sha256": file_sha256(probs)}
        doc["record_digest"] = value
    _edit(out / "toy000.json", match)
    err = _rerun(argv, capsys)
    assert "case 'toy000'" in err and "not a digest: edited" in err and "predicting it again" in err, err
    assert err.count("warning") == 1, err  # one warning, for the one case
    assert probs.read_bytes() == whole  # seeded: predicted again, the same bytes


@pytest.mark.slow
def test_a_record_without_the_field_is_still_kept(run, tmp_path, capsys):  # noqa: F811
    out, argv = _copy(run, tmp_path)
    _edit(out / "toy000.json", lambda doc: None, "drop")  # an earlier version's record: no record_digest
    kept = (out / "toy000.json").stat().st_mtime_ns
    err = _rerun(argv, capsys)
    assert "warning" not in err, err
    assert (out / "toy000.json").stat().st_mtime_ns == kept
