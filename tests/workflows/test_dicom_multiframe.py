"""An enhanced multi-frame series end to end: ``infer --output-format both`` on it, ``dicom-export`` on it, and
``evaluate`` with a DICOM SEG as the labels of a multi-frame ``--images`` series (the same metrics as NIfTI labels)."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io import read_csv  # noqa: E402
from monai_unc.io.dicom import default_segment, read_series, write_segmentation  # noqa: E402
from tests.io.dicom._multiframe import legacy_multiframe  # noqa: E402
from tests.io.dicom._series import dciodvfy_errors, make_series  # noqa: E402


def _snapshot(folder):
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(folder.rglob("*"))}


def test_infer_export_and_evaluate_on_a_multiframe_series(tmp_path):
    import torch
    from monai.networks.nets import UNet

    from tests._cases import TOY_NET

    images = tmp_path / "images"
    _, _, files = make_series(tmp_path / "single" / "ct01", "anisotropic_ct")
    source = legacy_multiframe(files, images / "ct01")
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    (tmp_path / "net.json").write_text(json.dumps(TOY_NET))
    before = _snapshot(images)
    assert main(["infer", "-i", str(images), "-o", str(tmp_path / "pred"), "--network", str(tmp_path / "net.json"),
                 "--checkpoint", str(tmp_path / "net.pt"), "--samples", "2", "--device", "cpu", "-q",
                 "--output-format", "both", "--uid-root", "1.2.826.0.1.3680043.10.778."]) == 0
    series = read_series(images / "ct01")
    assert series.multiframe
    seg = nib.load(tmp_path / "pred" / "ct01_seg.nii.gz")
    np.testing.assert_allclose(seg.affine, series.affine, atol=1e-5)
    assert seg.shape == series.shape
    # the same prediction as from the single-frame series the image was converted from (same volume, same grid)
    np.testing.assert_array_equal(series.volume, read_series(tmp_path / "single" / "ct01").volume)
    written = sorted(p.name for p in (tmp_path / "pred" / "dicom" / "ct01").iterdir())
    assert written == ["expected_entropy.dcm", "mutual_information.dcm", "one_minus_max_prob.dcm",
                       "predictive_entropy.dcm", "probabilities.dcm", "seg.dcm", "sr.dcm"]
    for name in written:
        assert dciodvfy_errors(tmp_path / "pred" / "dicom" / "ct01" / name) == [], name
    # highdicom reads the SEG back by source frame: frame series.frames[k] of the source is slice k
    exported = hd.seg.segread(tmp_path / "pred" / "dicom" / "ct01" / "seg.dcm")
    uid = str(series.datasets[0].SOPInstanceUID)
    pixels = exported.get_pixels_by_source_frame(uid, series.frames, combine_segments=True)
    np.testing.assert_array_equal(pixels, np.transpose(np.asarray(seg.dataobj), (2, 1, 0)))
    pm = hd.pm.ParametricMap.from_dataset(pydicom.dcmread(tmp_path / "pred" / "dicom" / "ct01" /
                                                          "predictive_entropy.dcm"))
    frames = {int(g.DerivationImageSequence[0].SourceImageSequence[0].ReferencedFrameNumber): i
              for i, g in enumerate(pm.PerFrameFunctionalGroupsSequence)}
    entropy = nib.load(tmp_path / "pred" / "ct01_predictive_entropy.nii.gz").get_fdata(dtype=np.float32)
    for k, frame in enumerate(series.frames):
        np.testing.assert_array_equal(pm.pixel_array[frames[frame]], entropy[:, :, k].T)
    report = pydicom.dcmread(tmp_path / "pred" / "dicom" / "ct01" / "sr.dcm")
    assert uid in {str(i.ReferencedSOPInstanceUID) for study in report.CurrentRequestedProcedureEvidenceSequence
                   for s in study.ReferencedSeriesSequence for i in s.ReferencedSOPSequence}
    # dicom-export on the same folder (its record's input digest is the one file's)
    assert main(["dicom-export", "-p", str(tmp_path / "pred"), "-s", str(images), "-o", str(tmp_path / "dicom"),
                 "-q"]) == 0
    assert dciodvfy_errors(tmp_path / "dicom" / "ct01" / "seg.dcm") == []
    # evaluate: a DICOM SEG on the multi-frame series as the labels, against the same labels as NIfTI
    mask = (series.volume > 0).astype(np.uint8)
    (tmp_path / "seg_labels").mkdir()
    (tmp_path / "nii_labels").mkdir()
    write_segmentation(mask, series, tmp_path / "seg_labels" / "ct01.dcm", [default_segment(1, "tissue")])
    nib.save(nib.Nifti1Image(mask, series.affine), tmp_path / "nii_labels" / "ct01.nii.gz")
    for kind in ("seg", "nii"):
        assert main(["evaluate", "-l", str(tmp_path / f"{kind}_labels"), "-p", str(tmp_path / "pred"), "--images",
                     str(images), "-o", str(tmp_path / f"eval_{kind}"), "--no-spatial", "-q"]) == 0
    by_seg, by_nifti = read_csv(tmp_path / "eval_seg" / "metrics.csv"), read_csv(tmp_path / "eval_nii" / "metrics.csv")
    assert by_seg == by_nifti and 0 <= float(by_seg[0]["dice"]) <= 1
    assert _snapshot(images) == before  # nothing written into the input folder
    assert source.is_file()


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_nnunet_predict_on_a_multiframe_series_equals_its_single_frame_series(tmp_path):
    """``nnunet-predict -i`` on the multi-frame image gives the outputs of the single-frame series it was converted
    from, bit for bit, and its DICOM objects reference the multi-frame image's frames."""
    pytest.importorskip("nnunetv2")
    from tests.nnunet.test_nnunet_conformal import write_model_folder

    model = write_model_folder(tmp_path / "model")
    _, _, files = make_series(tmp_path / "single" / "ct01", "anisotropic_ct")
    legacy_multiframe(files, tmp_path / "multi" / "ct01")
    for kind in ("single", "multi"):
        assert main(["nnunet-predict", "-i", str(tmp_path / kind), "-o", str(tmp_path / f"out_{kind}"), "-m",
                     str(model), "-f", "0", "-device", "cpu", "--sources", "mirroring", "-npp", "0", "-nps", "0",
                     "--disable_progress_bar", "--output-format", "both"]) == 0
    for name in ("ct01.nii.gz", "uncertainty/ct01_predictive_entropy.nii.gz"):
        a, b = nib.load(tmp_path / "out_single" / name), nib.load(tmp_path / "out_multi" / name)
        np.testing.assert_array_equal(np.asarray(a.dataobj), np.asarray(b.dataobj))
        np.testing.assert_array_equal(a.affine, b.affine)
    series = read_series(tmp_path / "multi" / "ct01", pixels=False)
    seg_file = tmp_path / "out_multi" / "dicom" / "ct01" / "seg.dcm"
    assert dciodvfy_errors(seg_file) == []
    exported = hd.seg.segread(seg_file)
    pixels = exported.get_pixels_by_source_frame(str(series.datasets[0].SOPInstanceUID), series.frames,
                                                 combine_segments=True)
    seg = np.asarray(nib.load(tmp_path / "out_multi" / "ct01.nii.gz").dataobj)
    np.testing.assert_array_equal(pixels, np.transpose(seg, (2, 1, 0)))
