"""Hostile review of review 62: a Tiff3DIO ``.tif`` read without its spacing file is said where it matters.

nnU-Net's ``Tiff3DIO`` keeps a ``.tif``'s spacing in ``<name>.json`` beside it; without one, spacing ``(1, 1, 1)`` is
assumed with a warning. A label map copied without its spacing file beside a prediction that has one was refused as
"a.tif and the label a.tif have different affines (voxel centres up to 7.382 mm apart ...)": the warning of the failed
case was not shown, and the error did not say that one spacing was assumed. The warning named the file without its
folder (``a.tif``), so a label could not be told from the prediction of the same name.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

pytest.importorskip("tifffile")

import tifffile  # noqa: E402

from monai_unc import cli  # noqa: E402
from monai_unc.io import CaseError, load_case, match_cases, read_nnunet_image  # noqa: E402


def _cohort(root, label_spacing_file):
    labels, pred = root / "labels", root / "pred"
    labels.mkdir()
    pred.mkdir()
    label = np.zeros((4, 6, 8), np.uint8)  # (z, y, x)
    label[1:3, 2:4, 2:6] = 1
    tifffile.imwrite(labels / "a.tif", label, photometric="minisblack")  # (z, y, x) pages, not RGB
    tifffile.imwrite(pred / "a.tif", label, photometric="minisblack")
    (pred / "a.json").write_text(json.dumps({"spacing": [3.0, 0.5, 0.5]}))
    if label_spacing_file:
        (labels / "a.json").write_text(json.dumps({"spacing": [3.0, 0.5, 0.5]}))
    probs = np.stack([1.0 - 0.8 * label, 0.8 * label]).astype(np.float32)
    np.savez(pred / "a.npz", probabilities=probs)
    return labels, pred


def test_the_grid_error_names_the_missing_spacing_file(tmp_path):
    labels, pred = _cohort(tmp_path, label_spacing_file=False)
    (files,) = match_cases(labels, pred, layout="nnunet", measures=[])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(CaseError, match=r"different affines .*the label a\.tif has no spacing file a\.json "
                                            r"beside it: spacing \(1, 1, 1\) was assumed"):
            load_case(files)


def test_the_command_line_failure_names_the_missing_spacing_file(tmp_path, capsys):
    labels, pred = _cohort(tmp_path, label_spacing_file=False)
    cli.main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(tmp_path / "out"), "--layout", "nnunet",
              "--quiet"])
    err = capsys.readouterr().err
    assert "case 'a' failed" in err and "has no spacing file a.json" in err, err


def test_with_both_spacing_files_the_case_is_read(tmp_path):
    labels, pred = _cohort(tmp_path, label_spacing_file=True)
    (files,) = match_cases(labels, pred, layout="nnunet", measures=[])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        case = load_case(files)
    assert case.spacing == pytest.approx((0.5, 0.5, 3.0))


def test_the_warning_names_the_folder(tmp_path):
    (tmp_path / "labels").mkdir()
    tifffile.imwrite(tmp_path / "labels" / "a.tif", np.zeros((2, 3, 5), np.uint8))
    with pytest.warns(UserWarning, match=r"labels[/\\]a\.tif: no spacing file a\.json"):
        read_nnunet_image(tmp_path / "labels" / "a.tif")


@pytest.mark.parametrize("value", ["1" + "0" * 400, "-1" + "0" * 400])
def test_a_spacing_too_large_for_a_float_is_refused_naming_the_file(tmp_path, value):
    # an integer of 400 digits is valid JSON: it was an OverflowError naming no file (the spacing file is untrusted)
    tifffile.imwrite(tmp_path / "v.tif", np.zeros((2, 3, 4), np.uint8))
    (tmp_path / "v.json").write_text('{"spacing": [' + value + ", 1, 1]}")
    with pytest.raises(CaseError, match=r"v\.json: \"spacing\" must be 3 positive numbers"):
        read_nnunet_image(tmp_path / "v.tif")
