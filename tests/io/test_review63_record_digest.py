"""A case record whose ``record_digest`` is there but no digest counts as edited (review 63).

``changed_outputs`` took a record whose ``record_digest`` was set to ``null`` for one of an earlier version, written
before the field existed, and checked it file by file: a replaced map with its ``file_digests`` edited to match, and
the digest nulled, was trusted (``infer`` kept the case on resume, ``--continue_prediction`` too). A present field
that is not a string (``null``, a number, a list) is now an edited record; a record without the field still reads as
one of an earlier version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from monai_unc.io import changed_outputs, file_sha256, output_digests, record_digest


def _replaced_with_matching_digests(folder: Path) -> dict:
    """A record of ``c1_probs.nii.gz`` whose file was replaced and whose ``file_digests`` were edited to match."""
    path = folder / "c1_probs.nii.gz"
    path.write_bytes(b"as written")
    record = {"case": "c1", "files": [path.name], "file_digests": output_digests(folder, [path.name])}
    record["record_digest"] = record_digest(record)
    path.write_bytes(b"replaced!!")  # the same size
    record["file_digests"][path.name]["sha256"] = file_sha256(path)
    return record


@pytest.mark.parametrize("value", [None, 0, ["sha256:0"], {"sha256": "0"}, True])
def test_a_record_digest_that_is_no_digest_is_an_edited_record(tmp_path, value):
    record = {**_replaced_with_matching_digests(tmp_path), "record_digest": value}
    bad = changed_outputs(tmp_path, record)
    assert len(bad) == 1 and bad[0].startswith("record (its record_digest is ") and bad[0].endswith(
        "not a digest: edited)"), bad


def test_a_null_record_digest_is_named_as_null(tmp_path):
    record = {**_replaced_with_matching_digests(tmp_path), "record_digest": None}
    assert changed_outputs(tmp_path, record) == ["record (its record_digest is null, not a digest: edited)"]


def test_a_record_without_the_field_is_checked_file_by_file(tmp_path):
    record = _replaced_with_matching_digests(tmp_path)
    del record["record_digest"]  # an earlier version: no record digest, the files' digests trusted
    assert changed_outputs(tmp_path, record) == []
    (tmp_path / "c1_probs.nii.gz").write_bytes(b"other!!!!!")
    assert changed_outputs(tmp_path, record) == ["c1_probs.nii.gz (content changed)"]


def test_a_stale_string_digest_is_still_an_edited_record(tmp_path):
    record = _replaced_with_matching_digests(tmp_path)
    assert changed_outputs(tmp_path, record) == ["record (its text differs from the digest saved in it: edited)"]


def test_the_digests_of_another_field_are_checked(tmp_path):
    """``digests_key``: nnU-Net's records keep the segmentation's and the ``.npz``'s under their own field."""
    (tmp_path / "c1.nii.gz").write_bytes(b"segmentation")
    record = {"case": "c1", "prediction_file_digests": output_digests(tmp_path, ["c1.nii.gz"])}
    record["record_digest"] = record_digest(record)
    assert changed_outputs(tmp_path, record, ["c1.nii.gz"], digests_key="prediction_file_digests") == []
    assert changed_outputs(tmp_path, record, ["c1.nii.gz"]) == []  # no file_digests: presence only
    (tmp_path / "c1.nii.gz").write_bytes(b"segmentatioN")
    assert changed_outputs(tmp_path, record, ["c1.nii.gz"], digests_key="prediction_file_digests") == [
        "c1.nii.gz (content changed)"]
