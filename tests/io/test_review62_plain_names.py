"""One test of a plain file name for every record users may edit (review 62).

``infer``'s resume (a record's ``files``), ``nnunet-predict``'s ``--continue_prediction`` (a record's ``maps``) and
the monitoring's read of a triage state (a case id of ``triage.json``) each had their own expression; the first two
took a name holding a backslash (a separator on Windows) or NUL for a plain name. They now share
:func:`monai_unc.io.plain_file_name`, the strictest of the three.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from monai_unc.io import changed_outputs, output_digests, plain_file_name, record_digest

#: whether a backslash separates paths here (Windows); on POSIX it is a plain character of a file name (hostile
#: review of review 62: infer predicted a case ``a\\b`` again on every resume)
BACKSLASH_SEPARATES = "\\" in (os.sep, os.altsep)
windows_only = pytest.mark.skipif(not BACKSLASH_SEPARATES, reason="a backslash is a plain character on POSIX")


@pytest.mark.parametrize("name", ["case01_probs.nii.gz", "a", ".hidden.json", "a..b", " spaced name.nii.gz",
                                  "h\u00f4pital.nii.gz"])
def test_plain_names(name):
    assert plain_file_name(name) is True


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "sub/x", "/etc/passwd", "x/", "a\x00b",
                                  None, 7, b"a", Path("a")])
def test_not_plain_names(name):
    assert plain_file_name(name) is False


@pytest.mark.parametrize("name", ["a\\b", "..\\x"])
def test_a_backslash_is_refused_where_it_separates(name):
    assert plain_file_name(name) is not BACKSLASH_SEPARATES


def _record(folder: Path, names: list[str]) -> dict:
    record = {"case": "c1", "files": names, "file_digests": output_digests(folder, names)}
    record["record_digest"] = record_digest(record)
    return record


@windows_only
def test_infer_record_entry_with_a_backslash_is_not_a_file_of_the_folder(tmp_path):
    odd = "..\\c1_probs.nii.gz"  # one entry on POSIX, a path outside the folder on Windows
    (tmp_path / odd).write_bytes(b"abc")
    record = _record(tmp_path, [odd])
    assert changed_outputs(tmp_path, record) == [f"files entry {odd!r} (not a file name of the output folder)"]


def test_infer_record_entry_with_nul_is_not_a_file_of_the_folder(tmp_path):
    (tmp_path / "c1_probs.nii.gz").write_bytes(b"abc")
    record = {"case": "c1", "files": ["c1_probs.nii.gz\x00"]}  # before: reported as missing (no warning on resume)
    assert changed_outputs(tmp_path, record) == ["files entry 'c1_probs.nii.gz\\x00' (not a file name of the output "
                                                 "folder)"]


def test_infer_record_plain_names_still_pass(tmp_path):
    (tmp_path / "c1_probs.nii.gz").write_bytes(b"abc")
    assert changed_outputs(tmp_path, _record(tmp_path, ["c1_probs.nii.gz"])) == []


@windows_only
def test_nnunet_map_entry_with_a_backslash_is_not_exported(tmp_path):
    pytest.importorskip("nnunetv2")
    from monai_unc.nnunet.export import case_exported

    out = tmp_path / "pred"
    (out / "uncertainty").mkdir(parents=True)
    (out / "case.nii.gz").write_bytes(b"seg")
    odd = "..\\case_predictive_entropy.nii.gz"
    (out / "uncertainty" / odd).write_bytes(b"map")
    (out / "uncertainty" / "case.json").write_text(json.dumps({"maps": {"predictive_entropy": odd}}))
    with pytest.warns(UserWarning, match="names map files outside uncertainty/") as caught:
        assert not case_exported(out / "case", ".nii.gz", ["predictive_entropy"])
    assert len(caught) == 1


@pytest.mark.parametrize("case_id", ["..", "../x", "a\x00b", "", *(["a\\b"] if BACKSLASH_SEPARATES else [])])
def test_monitoring_reads_no_triage_state_of_a_case_id_that_is_no_file_name(tmp_path, case_id):
    from monai_unc.monitoring import records

    state = tmp_path / "state" / "cases"
    state.mkdir(parents=True)
    seg = tmp_path / "x_seg.nii.gz"
    doc = {"case": case_id, "fingerprint": {"inputs": {"seg": [str(seg.resolve()), 3, 0]}}}
    for name in ("x.json", "a\\b.json", ".json"):  # what a lax test would have read
        (state / name).write_text(json.dumps(doc))
    assert records._triage_read_signature(tmp_path, case_id, str(seg)) is None


def test_monitoring_reads_the_triage_state_of_a_plain_case_id(tmp_path):
    from monai_unc.monitoring import records

    state = tmp_path / "state" / "cases"
    state.mkdir(parents=True)
    seg = tmp_path / "x_seg.nii.gz"
    sig = [str(seg.resolve()), 3, 0]
    (state / "x.json").write_text(json.dumps({"case": "x", "fingerprint": {"inputs": {"seg": sig}}}))
    assert records._triage_read_signature(tmp_path, "x", str(seg)) == sig
