"""Hostile review 68 of the image folder's DICOM case folders (review 67's ``<case>/<series>/`` warning)."""

from __future__ import annotations

import pytest

from monai_unc.io import dicom_series_folders


def test_a_case_folder_of_study_and_series_folders_is_not_left_out_silently(tmp_path):
    # found by hostile review 68: the warning of review 67 looked one level down only, so the common PACS layout
    # <case>/<study>/<series>/<slices> left the case out without a word, beside the cases that hold their slices
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "IM0001").write_bytes(b"")
    (tmp_path / "deep" / "STUDY1" / "SERIES1").mkdir(parents=True)
    (tmp_path / "deep" / "STUDY1" / "SERIES1" / "IM0001").write_bytes(b"")
    (tmp_path / "empty" / "nothing").mkdir(parents=True)  # no file anywhere: no case, nothing to say
    with pytest.warns(UserWarning, match=r"1 folder\(s\) hold no file but folders of files, left out: deep/ "
                                         r"\(holding STUDY1/SERIES1/\)") as record:
        found = dicom_series_folders(tmp_path)
    assert [p.name for p in found] == ["flat"]
    assert "empty" not in str(record[0].message)
