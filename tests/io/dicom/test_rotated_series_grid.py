"""A series rotated by 45 degrees in its plane is on its own grid (found by hostile testing).

Its row and column directions lie exactly between two patient axes, so the closest RAS axis of each is a tie.
``nib.orientations.io_orientation`` of the series' affine and of a NIfTI file of the same grid (whose float32
sform rounds the cosines) broke the tie differently, and ``dicom-export`` / ``infer --output-format both`` refused
the series' own grid ("not on the source series' grid"). The axes are matched to each other now.
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io import save_nifti  # noqa: E402
from monai_unc.io.dicom import read_segmentation_labels, read_series, to_series_grid, write_series  # noqa: E402

C = float(np.sqrt(0.5))


#: in-plane rotations of the series (degrees about the patient's z axis); -135 is the hostile report's
#: ImageOrientationPatient 0.7071067812\0.7071067812\0\-0.7071067812\0.7071067812\0 (LPS)
ANGLES = (45, -45, 135, -135)


def _rotated(angle: float, shape=(6, 5, 4), spacing=(0.9, 1.1, 2.0)) -> np.ndarray:
    """An RAS affine whose first two axes are rotated by ``angle`` degrees about the patient's z axis."""
    c, s = np.cos(np.radians(angle)), np.sin(np.radians(angle))
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])
    affine = np.eye(4)
    affine[:3, :3] = rot * np.asarray(spacing)
    affine[:3, 3] = (-20.5, 13.25, 7.0)
    return affine


@pytest.mark.parametrize("angle", ANGLES)
@pytest.mark.parametrize("shape", [(6, 5, 4), (16, 16, 16)])
def test_a_nifti_of_the_rotated_series_grid_is_put_on_it_unchanged(tmp_path, angle, shape):
    rng = np.random.default_rng(0)
    write_series(rng.random(shape) * 100, _rotated(angle, shape), tmp_path / "series", modality="MR")
    series = read_series(tmp_path / "series", pixels=False)
    data = rng.random((1, *shape)).astype(np.float32)
    save_nifti(data[0], series.affine, tmp_path / "map.nii.gz")  # float32 sform: the cosines rounded
    img = nib.load(tmp_path / "map.nii.gz")
    out = to_series_grid(np.asarray(img.dataobj, np.float32)[None], img.affine, series, "map")
    np.testing.assert_array_equal(out, data)
    # and a flipped, permuted copy of the same grid still comes back in the series' order
    # moved[c, a, b, k] = data[c, X - 1 - b, a, k]; its voxel (a, b, k) is the series' (X - 1 - b, a, k)
    moved = np.flip(np.swapaxes(data, 1, 2), axis=2)
    flip = np.array([[0, -1, 0, shape[0] - 1], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])
    np.testing.assert_array_equal(to_series_grid(moved, series.affine @ flip, series, "map"), data)
    # a grid rotated the other way is still refused
    with pytest.raises(ValueError, match="not on the grid|not on the source series' grid"):
        to_series_grid(data, _rotated(angle + 90, shape), series, "map")


@pytest.mark.parametrize("delta", [1e-4, -1e-4])
@pytest.mark.parametrize("angle", ANGLES)
def test_dicom_export_of_a_prediction_on_the_rotated_grid(tmp_path, capsys, angle, delta):
    shape = (6, 5, 4)
    rng = np.random.default_rng(1)
    write_series(rng.random(shape) * 100, _rotated(angle, shape), tmp_path / "series" / "case0", modality="MR")
    # the prediction's grid rotated by a ten-thousandth of a degree more or less (voxel centres 3e-5 mm apart, as
    # a converter's rounding moves them): the tie of the closest RAS axes broken one way or the other
    affine = _rotated(angle + delta, shape)
    pred = tmp_path / "pred"
    pred.mkdir()
    label = np.zeros(shape, np.uint8)
    label[1:4, 1:3, 1:3] = 1
    save_nifti(label, affine, pred / "case0_seg.nii.gz")
    save_nifti(rng.random(shape).astype(np.float32), affine, pred / "case0_predictive_entropy.nii.gz")
    (pred / "infer.json").write_text(json.dumps({"settings": {"model": "example", "method": "mcdropout"}}))
    rc = main(["dicom-export", "-p", str(pred), "-s", str(tmp_path / "series"), "-o", str(tmp_path / "out"), "-q"])
    assert rc == 0, capsys.readouterr().err
    series = read_series(tmp_path / "series" / "case0", pixels=False)
    np.testing.assert_array_equal(read_segmentation_labels(tmp_path / "out" / "case0" / "seg.dcm", series), label)


@pytest.mark.parametrize("bad", ["nan", "zero column", "parallel axes"])
def test_an_affine_of_no_grid_is_refused_by_name(tmp_path, bad):
    """Found by hostile testing: nibabel's "Unable to find out axis 0.0 in start_ornt" (or an SVD that did not
    converge) reached the user; the volume is named now."""
    shape = (6, 5, 4)
    write_series(np.zeros(shape), _rotated(45, shape), tmp_path / "series", modality="MR")
    series = read_series(tmp_path / "series", pixels=False)
    affine = series.affine.copy()
    if bad == "nan":
        affine[0, 0] = np.nan
    elif bad == "zero column":
        affine[:3, 1] = 0.0
    else:
        affine[:3, 2] = affine[:3, 0]
    with pytest.raises(ValueError, match=r"^map has no valid affine \(not finite, or axes of no volume\)"):
        to_series_grid(np.zeros((1, *shape)), affine, series, "map")
