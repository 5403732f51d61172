"""Review 63: a 2D RGB(A) ``.tif`` ``(H, W, 3)`` given as a label map or segmentation is refused in one line.

nnU-Net picks a dataset's reader by its ``file_ending`` and tries ``NaturalImage2DIO`` before ``Tiff3DIO`` for
``.tif``: the first reads ``(H, W, 3 | 4)`` as one 2D image with 3 (4) colour channels. Labels and segmentations have
one channel (nnU-Net writes them so), so such a file is no label map. ``io.read_nnunet_image`` read it as a 3-slice
volume ``(1, 3, W, H)`` instead: a label was then "a different shape" from its 2D segmentation, or (against a 3-slice
prediction) was scored as a volume. A 3D ``.tif`` that ``Tiff3DIO`` wrote has its spacing file ``<name>.json`` beside
it and is still read as a volume, whatever its size along x.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

tifffile = pytest.importorskip("tifffile")

from monai_unc import cli  # noqa: E402
from monai_unc.io import CaseError, CaseFiles, load_case, read_label, read_volume  # noqa: E402

MESSAGE = r"is a 2D RGB\(A\) image as nnU-Net reads a \.tif"


def _rgb(channels=3):
    rng = np.random.default_rng(0)
    return rng.integers(0, 2, (7, 9, channels)).astype(np.uint8)  # (H, W, colour)


@pytest.mark.parametrize("channels", [3, 4])
def test_rgb_tif_label_is_refused_in_one_line(tmp_path, channels):
    tifffile.imwrite(tmp_path / "a.tif", _rgb(channels))
    with pytest.raises(CaseError, match=MESSAGE) as info:
        read_label(CaseFiles("a", tmp_path / "a.tif"))
    assert "\n" not in str(info.value)
    assert "a.json beside it" in str(info.value)  # how to read it as a 3D volume instead
    with pytest.raises(CaseError, match=MESSAGE):
        read_volume(tmp_path / "a.tif")


def test_nnunet_reads_such_a_tif_as_three_channels(tmp_path):
    """The premise, from nnU-Net's own reader (its order for '.tif': NaturalImage2DIO first)."""
    pytest.importorskip("nnunetv2")
    from nnunetv2.imageio.natural_image_reader_writer import NaturalImage2DIO
    from nnunetv2.imageio.reader_writer_registry import determine_reader_writer_from_file_ending

    tifffile.imwrite(tmp_path / "a.tif", _rgb())
    assert determine_reader_writer_from_file_ending(".tif", str(tmp_path / "a.tif"), verbose=False) is NaturalImage2DIO
    data, _ = NaturalImage2DIO().read_images([str(tmp_path / "a.tif")])
    assert data.shape == (3, 1, 7, 9)  # (c, 1, H, W): three channels of one 2D image


def test_rgb_tif_segmentation_is_refused(tmp_path):
    lab = (_rgb()[..., 0] > 0).astype(np.uint8)
    tifffile.imwrite(tmp_path / "a.tif", lab)  # a 2D grayscale label: read as nnU-Net's (1, y, x)
    tifffile.imwrite(tmp_path / "a_seg.tif", _rgb())
    with pytest.raises(CaseError, match=MESSAGE):
        load_case(CaseFiles("a", tmp_path / "a.tif", seg=tmp_path / "a_seg.tif"), num_classes=2)


def test_3d_tif_of_three_voxels_along_x_with_its_spacing_file_is_a_volume(tmp_path):
    """Tiff3DIO writes a spacing file beside every 3D .tif: with it, (z, y, 3) is a volume of 3 voxels along x."""
    arr = _rgb()
    tifffile.imwrite(tmp_path / "a.tif", arr)
    (tmp_path / "a.json").write_text(json.dumps({"spacing": [2.0, 1.0, 0.5]}))
    data, affine = read_label(CaseFiles("a", tmp_path / "a.tif"))
    assert data.shape == (1, 3, 9, 7)
    assert data[0, 2, 4, 6] == arr[6, 4, 2]
    assert np.diag(affine).tolist() == [0.5, 1.0, 2.0, 1.0]


def test_gray_2d_tif_still_reads(tmp_path):
    lab = (_rgb()[..., 0] > 0).astype(np.uint8)
    tifffile.imwrite(tmp_path / "a.tif", lab)
    data, affine = read_label(CaseFiles("a", tmp_path / "a.tif"))
    assert data.shape == (1, 9, 7, 1) and np.array_equal(affine, np.eye(4))


def test_evaluate_reports_the_rgb_label_in_one_line(tmp_path, capsys):
    pytest.importorskip("PIL")
    from PIL import Image

    (tmp_path / "labels").mkdir()
    (tmp_path / "pred").mkdir()
    tifffile.imwrite(tmp_path / "labels" / "a.tif", _rgb())
    Image.fromarray((_rgb()[..., 0] > 0).astype(np.uint8)).save(tmp_path / "pred" / "a.png")
    np.savez(tmp_path / "pred" / "a.npz", probabilities=np.full((2, 1, 7, 9), 0.5, np.float32))
    rc = cli.main(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(tmp_path / "pred"), "-o",
                   str(tmp_path / "ev"), "--layout", "nnunet", "--quiet"])
    err = capsys.readouterr().err
    assert rc != 0
    lines = [line for line in err.splitlines() if "RGB(A)" in line]
    assert len(lines) == 1 and "a.tif" in lines[0], err
