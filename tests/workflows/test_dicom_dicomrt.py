"""Hostile review of the DICOM export round trip (dicom-export): defects found and their regressions."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from tests.io.dicom._series import dciodvfy_errors  # noqa: E402


def _cases(root, top_class):
    """Small CT series and label maps whose largest class is ``top_class[case]`` (no probabilities)."""
    from monai_unc.io.dicom import read_series, write_series

    pred = root / "pred"
    pred.mkdir(parents=True)
    for case, top in top_class.items():
        write_series(np.zeros((8, 7, 3)), np.diag([0.9, 1.1, 2.0, 1.0]), root / "series" / case, modality="CT")
        grid = read_series(root / "series" / case, pixels=False)
        label = np.zeros(grid.shape, np.uint8)
        for c in range(1, top + 1):
            label[c, 2:5, 1] = c
        nib.save(nib.Nifti1Image(label, grid.affine), pred / f"{case}_seg.nii.gz")
    return pred, root / "series"


def test_a_case_without_the_highest_class_keeps_the_segments_file(tmp_path):
    """Issue: without probabilities a case's classes were those of its label map (1..its largest label), so a
    segments file naming the model's classes (necrosis, oedema, enhancing tumour) failed the case whose prediction
    had no enhancing tumour ("key '3' is not a class of the segmentation ([1, 2])"); every case now gets the file's
    segments, a class absent from its label map an empty one."""
    from monai_unc.io.dicom import read_segmentation_labels, read_series
    from monai_unc.workflows.dicom import dicom_export

    pred, series = _cases(tmp_path, {"c0": 3, "c1": 2})
    names = {"1": {"name": "necrosis"}, "2": {"name": "oedema"}, "3": {"name": "enhancing tumour"}}
    (tmp_path / "segments.json").write_text(json.dumps(names))
    dicom_export(pred, series, tmp_path / "out", segments=tmp_path / "segments.json", progress=False)
    for case in ("c0", "c1"):
        ds = pydicom.dcmread(tmp_path / "out" / case / "seg.dcm")
        assert [(int(s.SegmentNumber), str(s.SegmentLabel)) for s in ds.SegmentSequence] == [
            (1, "necrosis"), (2, "oedema"), (3, "enhancing tumour")]
        labels = read_segmentation_labels(tmp_path / "out" / case / "seg.dcm",
                                          read_series(series / case, pixels=False))
        expected = np.asarray(nib.load(pred / f"{case}_seg.nii.gz").dataobj)
        assert np.array_equal(labels, expected)
        assert dciodvfy_errors(tmp_path / "out" / case / "seg.dcm") == []
        assert dciodvfy_errors(tmp_path / "out" / case / "sr.dcm") == []


def test_a_segments_file_key_of_no_class_is_still_refused(tmp_path):
    """Keys that are no class value ("03", "x", above 65535) stay refused; with probabilities the classes are their
    channels, so a key above them is refused too."""
    from monai_unc.io.dicom import read_segment_specs

    path = tmp_path / "segments.json"
    path.write_text(json.dumps({"1": {"name": "a"}, "3": {"name": "c"}}))
    assert [s.name for s in read_segment_specs(path, [1, 2], named_classes=True)] == ["a", "class 2", "c"]
    assert [s.label for s in read_segment_specs(path, [1, 2, 3, 4], named_classes=True)] == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="key '3' is not a class"):
        read_segment_specs(path, [1, 2])
    for key in ("03", "x", "65536", "0"):
        path.write_text(json.dumps({"1": {"name": "a"}, key: {"name": "c"}}))
        with pytest.raises(ValueError, match=f"key '{key}' is not a class"):
            read_segment_specs(path, [1, 2], named_classes=True)


@pytest.mark.parametrize("bad", [np.nan, np.inf, 0.5, 70000.0])
def test_a_segmentation_of_no_class_values_is_one_line_naming_the_case(tmp_path, capsys, bad):
    """Issue: a segmentation holding NaN failed with "cannot convert float NaN to integer", an infinite value with an
    OverflowError traceback, a fractional one with "labels must hold integer class values": none named the case or
    the file. A value above 65535 (a DICOM segment number) is refused too."""
    from monai_unc.cli import main

    pred, series = _cases(tmp_path, {"c0": 2})
    path = pred / "c0_seg.nii.gz"
    img = nib.load(path)
    label = np.asarray(img.dataobj).astype(np.float32)
    label[0, 0, 0] = bad
    nib.save(nib.Nifti1Image(label, img.affine), path)
    assert main(["dicom-export", "-p", str(pred), "--series", str(series), "-o", str(tmp_path / "out"),
                 "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "case c0: segmentation c0_seg.nii.gz has 1 value(s) NaN, infinite, fractional or above 65535" in err, err
    assert not list((tmp_path / "out").rglob("*.dcm"))
