"""``nnunet-predict`` on DICOM series and with ``--output-format dicom|both``.

The series are predicted as nnU-Net would predict the same values in NIfTI files with the series' geometry (the
outputs equal bit for bit), every output lies on the grid of the source series (not nnU-Net's cropped, resampled
preprocessing space: one series has empty border slices that nnU-Net crops away, the other anisotropic voxels that
it resamples), and the DICOM objects hold the NIfTI outputs at each source slice (each frame placed by the slice it
references, read from the objects' own headers).
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")
pytest.importorskip("nnunetv2")

from monai_unc import cli  # noqa: E402
from monai_unc.io import read_volume, save_nifti  # noqa: E402
from monai_unc.io.dicom import frame_slices, read_segmentation_labels, read_series, write_series  # noqa: E402
from tests.io.dicom._series import GEOMETRIES, dciodvfy_errors, make_series, mni_small  # noqa: E402
from tests.nnunet.test_nnunet_conformal import write_model_folder  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]

MEASURES = ("expected_entropy", "mutual_information", "one_minus_max_prob", "predictive_entropy")
ROOT_UID = "1.2.826.0.1.3680043.10.779."


def _snapshot(folder):
    return {str(p): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


def _predict(images, out, model, *extra):
    argv = ["nnunet-predict", "-i", str(images), "-o", str(out), "-m", str(model), "-f", "0", "-device", "cpu",
            "--sources", "mirroring", "-npp", "0", "-nps", "0", "--disable_progress_bar", "--save_probabilities",
            *extra]
    assert cli.main(argv) == 0


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    root = tmp_path_factory.mktemp("nnunet_dicom")
    model = write_model_folder(root / "model")
    images = root / "images"
    make_series(images / "ct01", "anisotropic_ct")  # resampled by nnU-Net (its model: 1 mm voxels)
    mr = np.round(mni_small()[0] * 4000.0) + 100.0
    mr[:, :, :3] = 0.0  # empty slices and columns: nnU-Net crops them away and puts them back
    mr[:4] = 0.0
    write_series(mr, GEOMETRIES["oblique_mr"][1], images / "mr01", modality="MR", shuffle_seed=5)
    nifti_in = root / "nifti_images"  # the same values in NIfTI files with the series' geometry
    for case in ("ct01", "mr01"):
        data, affine = read_volume(images / case)
        save_nifti(data[0], affine, nifti_in / f"{case}_0000.nii.gz")
    before = _snapshot(images)
    _predict(nifti_in, root / "from_nifti", model)
    _predict(images, root / "both", model, "--output-format", "both", "--uid-root", ROOT_UID)
    _predict(images, root / "dicom", model, "--output-format", "dicom", "--study-uid", "new")
    assert _snapshot(images) == before  # nothing written into the input
    return root, images


@pytest.mark.parametrize("case", ["ct01", "mr01"])
def test_dicom_input_equals_nifti_input_on_the_series_grid(predicted, case):
    root, images = predicted
    series = read_series(images / case, pixels=False)
    for name in (f"{case}.nii.gz", *(f"uncertainty/{case}_{m}.nii.gz" for m in MEASURES)):
        ours, ref = nib.load(root / "both" / name), nib.load(root / "from_nifti" / name)
        np.testing.assert_array_equal(np.asarray(ours.dataobj), np.asarray(ref.dataobj))
        assert ours.shape == series.shape, name  # the source grid, not nnU-Net's cropped / resampled one
        np.testing.assert_allclose(ours.affine, series.affine, atol=1e-4)
    np.testing.assert_array_equal(np.load(root / "both" / f"{case}.npz")["probabilities"],
                                  np.load(root / "from_nifti" / f"{case}.npz")["probabilities"])
    if case == "mr01":  # outside nnU-Net's crop: background, no uncertainty
        seg = np.asarray(nib.load(root / "both" / f"{case}.nii.gz").dataobj)
        pe = np.asarray(nib.load(root / "both" / "uncertainty" / f"{case}_predictive_entropy.nii.gz").dataobj)
        assert (seg[:4] == 0).all() and (pe[:4] == 0).all() and pe[4:, :, 3:].max() > 0


@pytest.mark.parametrize("case", ["ct01", "mr01"])
def test_dicom_objects_hold_the_nifti_outputs(predicted, case):
    root, images = predicted
    series = read_series(images / case, pixels=False)
    folder = root / "both" / "dicom" / case
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(["seg.dcm", "probabilities.dcm", "sr.dcm", *(f"{m}.dcm" for m in MEASURES)])
    for name in names:
        assert dciodvfy_errors(folder / name) == [], name
    seg = np.asarray(nib.load(root / "both" / f"{case}.nii.gz").dataobj)
    np.testing.assert_array_equal(read_segmentation_labels(folder / "seg.dcm", series), seg)
    uids = [str(ds.SOPInstanceUID) for ds in series.datasets]
    pixels = hd.seg.segread(folder / "seg.dcm").get_pixels_by_source_instance(
        uids, combine_segments=True, ignore_spatial_locations=True)
    np.testing.assert_array_equal(pixels, np.transpose(seg, (2, 1, 0)))
    for m in MEASURES:
        u = np.asarray(nib.load(root / "both" / "uncertainty" / f"{case}_{m}.nii.gz").dataobj)
        pm = pydicom.dcmread(folder / f"{m}.dcm")
        assert pm.SeriesInstanceUID.startswith(ROOT_UID)
        for frame, k in zip(pm.pixel_array, frame_slices(pm, series, m)):
            np.testing.assert_array_equal(frame, u[:, :, k].T)  # float32 kept exactly


def test_output_format_dicom_writes_only_the_objects_in_a_new_study(predicted):
    root, images = predicted
    out = root / "dicom"
    assert sorted(p.name for p in out.iterdir()) == ["ct01", "dicom_export.json", "mr01"]
    manifest = json.loads((out / "dicom_export.json").read_text())
    assert manifest["study_uid"] == "new"
    for case in ("ct01", "mr01"):
        series = read_series(images / case, pixels=False)
        source_study = str(series.datasets[0].StudyInstanceUID)
        seg = np.asarray(nib.load(root / "both" / f"{case}.nii.gz").dataobj)
        np.testing.assert_array_equal(read_segmentation_labels(out / case / "seg.dcm", series), seg)
        studies = {str(pydicom.dcmread(p, stop_before_pixels=True).StudyInstanceUID) for p in (out / case).iterdir()}
        assert len(studies) == 1 and source_study not in studies  # one new study per case
        assert manifest["cases"][case]["study_instance_uid"] in studies
        assert dciodvfy_errors(out / case / "sr.dcm") == []
        assert dciodvfy_errors(out / case / "seg.dcm") == []


def test_output_format_dicom_needs_dicom_input(predicted, tmp_path, capsys):
    root, _ = predicted
    capsys.readouterr()
    argv = ["nnunet-predict", "-i", str(root / "nifti_images"), "-o", str(tmp_path / "out"), "-m",
            str(root / "model"), "-f", "0", "-device", "cpu", "--output-format", "both"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs DICOM input" in err and "-i " in err, err
    assert not (tmp_path / "out").exists()  # refused before any work
    bad = tmp_path / "segments.json"  # a segments file with a bad field: refused before the prediction too
    bad.write_text(json.dumps({"1": {"name": ""}}))
    argv[2] = str(root / "images")
    assert cli.main([*argv, "--segments", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "name must be 1 to 64 characters" in err, err
    assert not (tmp_path / "out").exists()
