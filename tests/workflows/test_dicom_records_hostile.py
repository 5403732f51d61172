"""Untrusted JSON records of a prediction folder read by ``dicom-export`` and ``evaluate`` (found by hostile testing).

``read_json_or_none`` documents None for a record that is missing, unreadable or not JSON, so that a prediction
folder from a collaborator with a broken record is read as one without it; deeply nested brackets raised
``RecursionError`` instead, and ``dicom-export`` died with a traceback (exit 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monai_unc.io import read_json_or_none, save_nifti

NESTED = "[" * 200_000 + "]" * 200_000


def test_read_json_or_none_of_deeply_nested_json_is_none(tmp_path):
    path = tmp_path / "record.json"
    path.write_text(NESTED)
    assert read_json_or_none(path) is None
    path.write_text('{"a": [1]}')
    assert read_json_or_none(path) == {"a": [1]}


def test_dicom_export_ignores_a_nested_case_record(tmp_path: Path, capsys):
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    from monai_unc.cli import main
    from monai_unc.io.dicom import read_series, write_series

    series = tmp_path / "series"
    write_series(np.zeros((8, 7, 4)), np.diag([1.0, 1, 2, 1]), series / "ct01", modality="CT")
    grid = read_series(series / "ct01", pixels=False)
    pred = tmp_path / "pred"
    pred.mkdir()
    seg = np.zeros(grid.shape, np.uint8)
    seg[2:5, 2:5, 1:3] = 1
    save_nifti(seg, grid.affine, pred / "ct01_seg.nii.gz")
    (pred / "ct01.json").write_text(NESTED)
    (pred / "infer.json").write_text(NESTED)
    code = main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "out"), "-q"])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "ct01" / "seg.dcm").is_file()
