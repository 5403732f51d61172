"""Review 62: the predictions of nnU-Net datasets in its other image formats — ``Tiff3DIO``'s 3D ``.tif`` (spacing in
``<name>.json``) and ``NaturalImage2DIO``'s 2D ``.png`` (maps in ``.npz``, key ``map``) — are evaluated.

Before, ``evaluate`` read none of these files: a ``.tif`` labels folder was "no label volume found", and a ``.tif``
segmentation beside nnU-Net's ``.npz`` probabilities was left out without a word (the argmax of the probabilities
scored instead, which is not nnU-Net's segmentation after its post-processing or region conversion). Each case below
is written by nnU-Net's own reader/writer and must give exactly the metrics of the same arrays written as NIfTI."""
from __future__ import annotations

import csv
import json
import warnings

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

import nibabel as nib  # noqa: E402
import tifffile  # noqa: E402
from nnunetv2.imageio.natural_image_reader_writer import NaturalImage2DIO  # noqa: E402
from nnunetv2.imageio.tif_reader_writer import Tiff3DIO  # noqa: E402

from monai_unc import cli  # noqa: E402
from monai_unc.io import CaseError, match_cases, read_nnunet_image, read_volume  # noqa: E402
from monai_unc.nnunet.export import write_float_map, write_region_maps  # noqa: E402

SPACING_ZYX = [3.0, 0.5, 0.75]


def _arrays(shape_zyx, seed, classes=2):
    rng = np.random.default_rng(seed)
    label = np.zeros(shape_zyx, np.uint8)
    sl = tuple(slice(s // 4, 3 * s // 4) for s in shape_zyx)
    label[sl] = 1
    seg = label.copy()
    seg[(rng.random(shape_zyx) < 0.1)] ^= 1  # a few voxels wrong
    logits = rng.normal(size=(classes, *shape_zyx)).astype(np.float32)
    logits[1] += 2.0 * seg - 1.0
    probs = np.exp(logits) / np.exp(logits).sum(0, keepdims=True)
    # the segmentation differs from the argmax of the probabilities (as after nnU-Net's post-processing): a reader
    # that leaves the segmentation out and scores the argmax gives another Dice
    seg[0, 0, 0] = 1 - int(probs[:, 0, 0, 0].argmax())
    ent = -(probs * np.log(probs)).sum(0).astype(np.float32)
    return label, seg, probs.astype(np.float32), ent


def _metrics(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _evaluate(labels, pred, out, *extra):
    assert cli.main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "--layout", "nnunet",
                     "--quiet", *extra]) == 0
    return _metrics(out / "metrics.csv")


def _write_nifti_twin(root, cases, affine):
    """The same arrays as NIfTI (x, y, z), nnU-Net's axes reversed, with ``affine``."""
    for sub in ("labels", "pred/uncertainty"):
        (root / sub).mkdir(parents=True)
    for cid, (label, seg, probs, ent) in cases.items():
        nib.save(nib.Nifti1Image(label.T.copy(), affine), str(root / "labels" / f"{cid}.nii.gz"))
        nib.save(nib.Nifti1Image(seg.T.copy(), affine), str(root / "pred" / f"{cid}.nii.gz"))
        np.savez(root / "pred" / f"{cid}.npz", probabilities=probs)
        nib.save(nib.Nifti1Image(ent.T.copy(), affine), str(root / "pred" / "uncertainty"
                                                             / f"{cid}_predictive_entropy.nii.gz"))
    return root / "labels", root / "pred"


def test_tiff3d_cases_give_the_metrics_of_the_same_arrays_as_nifti(tmp_path):
    cases = {cid: _arrays((6, 9, 11), seed) for seed, cid in enumerate(("a", "b", "c"))}
    rw, props = Tiff3DIO(), {"spacing": SPACING_ZYX}
    root = tmp_path / "tif"
    for sub in ("labels", "pred/uncertainty"):
        (root / sub).mkdir(parents=True)
    for cid, (label, seg, probs, ent) in cases.items():
        rw.write_seg(label, str(root / "labels" / f"{cid}.tif"), props)
        rw.write_seg(seg, str(root / "pred" / f"{cid}.tif"), props)
        np.savez(root / "pred" / f"{cid}.npz", probabilities=probs)
        write_float_map(rw, ent, root / "pred" / "uncertainty" / f"{cid}_predictive_entropy.tif", props)
    assert (root / "labels" / "a.json").is_file()
    assert (root / "pred" / "uncertainty" / "a_predictive_entropy.json").is_file()
    got = _evaluate(root / "labels", root / "pred", tmp_path / "ev_tif")
    labels, pred = _write_nifti_twin(tmp_path / "nii", cases, np.diag([*SPACING_ZYX[::-1], 1.0]))
    want = _evaluate(labels, pred, tmp_path / "ev_nii")
    assert got == want
    assert [r["spacing"] for r in got] == ["0.75x0.5x3"] * 3
    # the segmentation scored is the file, not the argmax of the probabilities
    assert float(got[0]["dice"]) != pytest.approx(float(_evaluate_argmax(tmp_path, cases)["dice"]))


def _evaluate_argmax(tmp_path, cases):
    """Case a evaluated without its segmentation file (the argmax of its probabilities scored)."""
    labels, pred = _write_nifti_twin(tmp_path / "argmax", {"a": cases["a"]}, np.diag([*SPACING_ZYX[::-1], 1.0]))
    (pred / "a.nii.gz").unlink()
    return _evaluate(labels, pred, tmp_path / "ev_argmax")[0]


def test_natural_image_2d_cases_with_npz_maps_give_the_metrics_of_nifti(tmp_path):
    cases = {cid: _arrays((1, 13, 17), seed) for seed, cid in enumerate(("r1", "r2"))}
    rw = NaturalImage2DIO()
    root = tmp_path / "png"
    for sub in ("labels", "pred/uncertainty"):
        (root / sub).mkdir(parents=True)
    for cid, (label, seg, probs, ent) in cases.items():
        rw.write_seg(label, str(root / "labels" / f"{cid}.png"), {})
        rw.write_seg(seg, str(root / "pred" / f"{cid}.png"), {})
        np.savez(root / "pred" / f"{cid}.npz", probabilities=probs)
        written = write_float_map(rw, ent, root / "pred" / "uncertainty" / f"{cid}_predictive_entropy.png", {})
        assert written.name == f"{cid}_predictive_entropy.npz"
    got = _evaluate(root / "labels", root / "pred", tmp_path / "ev_png")
    labels, pred = _write_nifti_twin(tmp_path / "nii", cases, np.eye(4))
    assert got == _evaluate(labels, pred, tmp_path / "ev_nii")
    assert got[0]["predictive_entropy_mean"] != "nan"


def test_per_region_tif_maps_are_read_as_the_4d_nifti_map(tmp_path):
    """A region model's maps in a format without 4D images (nnU-Net writes one file per region) are read with
    --regions, stacked in the spec's order, and give the same summary as one 4D NIfTI map; no "not read" warning."""
    rng = np.random.default_rng(3)
    shape = (5, 8, 9)
    label = np.zeros(shape, np.uint8)
    label[1:4, 2:6, 2:7] = 2
    label[2:3, 3:5, 3:6] = 1
    label[1:3, 2:4, 2:4] = 3
    regions = {"WT": (1, 2, 3), "TC": (1, 3), "ET": (3,)}
    masks = np.stack([np.isin(label, v) for v in regions.values()]).astype(np.float32)
    probs = np.clip(masks * 0.8 + rng.uniform(0, 0.2, size=masks.shape), 0, 1).astype(np.float32)
    maps = rng.uniform(0, 0.69, size=masks.shape).astype(np.float32)
    rw, props = Tiff3DIO(), {"spacing": SPACING_ZYX}
    root = tmp_path / "tif"
    for sub in ("labels", "pred/uncertainty"):
        (root / sub).mkdir(parents=True)
    rw.write_seg(label, str(root / "labels" / "c1.tif"), props)
    rw.write_seg(label, str(root / "pred" / "c1.tif"), props)
    np.savez(root / "pred" / "c1.npz", probabilities=probs)
    written = write_region_maps(rw, maps, root / "pred" / "uncertainty" / "c1_mutual_information.tif", props,
                                list(regions))
    assert [p.name for p in written] == [f"c1_mutual_information_{r}.tif" for r in regions]
    spec = json.dumps({"WT": [1, 2, 3], "TC": [1, 3], "ET": [3]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "... is not read" before
        cases = match_cases(root / "labels", root / "pred", layout="nnunet", regions=list(regions))
    assert [p.name for p in cases[0].maps["mutual_information"]] == [p.name for p in written]
    got = _evaluate(root / "labels", root / "pred", tmp_path / "ev_tif", "--regions", spec)
    nii = tmp_path / "nii"
    for sub in ("labels", "pred/uncertainty"):
        (nii / sub).mkdir(parents=True)
    aff = np.diag([*SPACING_ZYX[::-1], 1.0])
    nib.save(nib.Nifti1Image(label.T.copy(), aff), str(nii / "labels" / "c1.nii.gz"))
    nib.save(nib.Nifti1Image(label.T.copy(), aff), str(nii / "pred" / "c1.nii.gz"))
    np.savez(nii / "pred" / "c1.npz", probabilities=probs)
    nib.save(nib.Nifti1Image(np.moveaxis(maps, 0, -1).transpose(2, 1, 0, 3).copy(), aff),
             str(nii / "pred" / "uncertainty" / "c1_mutual_information.nii.gz"))
    want = _evaluate(nii / "labels", nii / "pred", tmp_path / "ev_nii", "--regions", spec)
    assert got == want
    assert got[0]["mutual_information_mean_ET"] != "nan"


def test_tif_axes_spacing_and_errors(tmp_path):
    # (z, y, x); x is not 3 or 4: without its spacing file such a .tif is a 2D RGB(A) image (review 63)
    arr = np.arange(2 * 3 * 5, dtype=np.uint16).reshape(2, 3, 5)
    tifffile.imwrite(tmp_path / "v.tif", arr)
    with pytest.warns(UserWarning, match=r"no spacing file v\.json .* \(1, 1, 1\) assumed"):
        data, affine = read_volume(tmp_path / "v.tif", dtype=None)
    assert data.shape == (1, 5, 3, 2) and data.dtype == np.uint16 and np.array_equal(affine, np.eye(4))
    assert data[0, 3, 2, 1] == arr[1, 2, 3]
    for bad in ({"spacing": [1, 2]}, {"spacing": [1, -2, 1]}, {"spacing": [1, float("nan"), 1]},
                {"spacing": [1, True, 1]}, {"spacing": "1 1 1"}, ["spacing"]):
        (tmp_path / "v.json").write_text(json.dumps(bad))
        with pytest.raises(CaseError, match=r"v\.json.*(spacing|cannot read)"):
            read_nnunet_image(tmp_path / "v.tif")
    (tmp_path / "v.json").write_text("{not json")
    with pytest.raises(CaseError, match=r"cannot read the spacing file .*v\.json"):
        read_nnunet_image(tmp_path / "v.tif")
    (tmp_path / "v.json").write_text(json.dumps({"spacing": [2.5, 1, 0.5]}))
    assert np.diag(read_nnunet_image(tmp_path / "v.tif")[1]).tolist() == [0.5, 1.0, 2.5, 1.0]
    rgb = np.zeros((5, 6, 3), np.uint8)
    from PIL import Image

    Image.fromarray(rgb).save(tmp_path / "rgb.png")
    with pytest.raises(CaseError, match=r"rgb\.png: a label map, segmentation or map must be one 2D image"):
        read_volume(tmp_path / "rgb.png")
    (tmp_path / "trunc.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(CaseError, match=r"cannot read .*trunc\.png"):
        read_volume(tmp_path / "trunc.png")
    np.savez(tmp_path / "m.npz", probabilities=np.zeros((1, 3, 4)))
    with pytest.raises(CaseError, match=r"m\.npz: an \.npz map must hold the key 'map'"):
        read_volume(tmp_path / "m.npz")
