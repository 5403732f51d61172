"""``dicom-export`` verifies the digests of the predictions it exports, as ``evaluate`` and ``triage`` do (review 63).

Review 63 made ``evaluate``, ``triage`` and ``conformal`` refuse an ``infer`` case whose map or segmentation was
replaced or edited since ``infer`` wrote it (the size and sha256 its record keeps). ``dicom-export``, which writes
those very files into a PACS as the model's output (the SR names the model's weight digests), read them without
that check: a map replaced under its name was exported as the model's, without a word (found by the hostile review of
the combined change).
"""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.workflows.dicom import dicom_export  # noqa: E402
from tests.io.dicom._series import make_series  # noqa: E402

MAP = "ct01_predictive_entropy.nii.gz"


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    import torch
    from monai.networks.nets import UNet

    from tests._cases import TOY_NET

    root = tmp_path_factory.mktemp("r63dicomdigests")
    images = root / "images"
    make_series(images / "ct01", "anisotropic_ct")
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), root / "net.pt")
    (root / "net.json").write_text(json.dumps(TOY_NET))
    assert main(["infer", "-i", str(images), "-o", str(root / "pred"), "--network", str(root / "net.json"),
                 "--checkpoint", str(root / "net.pt"), "--samples", "2", "--device", "cpu", "-q"]) == 0
    return root


@pytest.fixture
def pred(predicted, tmp_path):
    shutil.copytree(predicted / "pred", tmp_path / "pred")
    return tmp_path / "pred"


def test_an_unchanged_run_is_exported(predicted, pred, tmp_path):
    assert main(["dicom-export", "-p", str(pred), "-s", str(predicted / "images"), "-o", str(tmp_path / "out"),
                 "-q"]) == 0


def test_a_replaced_map_is_refused_in_one_line_naming_the_case_and_the_file(predicted, pred, tmp_path, capsys):
    # another map of the same grid in its place (the run's expected entropy): only the digests tell
    shutil.copyfile(pred / "ct01_expected_entropy.nii.gz", pred / MAP)
    capsys.readouterr()
    assert main(["dicom-export", "-p", str(pred), "-s", str(predicted / "images"), "-o", str(tmp_path / "out"),
                 "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ct01" in err[0] and MAP in err[0] and "differ from what was written" in err[0], err
    assert not (tmp_path / "out" / "ct01").exists()  # refused before any object


def test_the_python_api_refuses_an_edited_segmentation(predicted, pred, tmp_path):
    seg = pred / "ct01_seg.nii.gz"
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0xFF  # another content of the same size
    seg.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"ct01: ct01_seg\.nii\.gz \(content changed\)"):
        dicom_export(pred, predicted / "images", tmp_path / "out", progress=False)


def test_a_segmentation_stored_with_nifti_scaling_is_exported_as_its_integers(predicted, pred, tmp_path):
    """evaluate reads a segmentation stored with ``scl_slope`` / ``scl_inter`` as the integers it encodes (review 63);
    the export read it as float32 and refused its background ``-4.5e-08`` as a fractional class value."""
    import nibabel as nib
    import numpy as np

    from monai_unc.io import output_digests, record_digest
    from monai_unc.io.dicom import read_segmentation_labels, read_series

    series = read_series(predicted / "images" / "ct01", pixels=False)
    dicom_export(pred, predicted / "images", tmp_path / "plain", progress=False, probabilities=False)
    expected = read_segmentation_labels(tmp_path / "plain" / "ct01" / "seg.dcm", series)
    seg_path = pred / "ct01_seg.nii.gz"
    img = nib.load(seg_path)
    labels = np.asarray(img.dataobj).astype(np.int16)
    assert labels.max() >= 1
    raw = ((labels - 3) * 10).astype(np.int16)  # stored as slope 0.1, intercept 3 (a tool's rescaled export)
    scaled = nib.Nifti1Image(raw, img.affine, img.header)
    scaled.header.set_data_dtype(np.int16)
    scaled.header.set_slope_inter(0.1, 3)
    nib.save(scaled, seg_path)
    record = json.loads((pred / "ct01.json").read_text())  # as if infer had written this file
    record["file_digests"] = output_digests(pred, list(record["file_digests"]))
    record.pop("record_digest")
    record["record_digest"] = record_digest(record)
    (pred / "ct01.json").write_text(json.dumps(record))
    dicom_export(pred, predicted / "images", tmp_path / "out", progress=False, probabilities=False)
    np.testing.assert_array_equal(read_segmentation_labels(tmp_path / "out" / "ct01" / "seg.dcm", series), expected)
