"""Class probabilities put back on the image grid after a crop (MONAI ``CropForegroundd`` undone by ``Invertd``).

Found by review: ``Invertd`` pads the voxels the crop removed with zeros, so every class is 0 there; ``evaluate`` (and
every metric that checks class probabilities) refused such a file as "per-channel sigmoid probabilities ... logits
their activation ... read with multilabel=True (evaluate --regions)", a cause that it is not. The message now names
the zero padding of an undone crop and what to do with it.
"""

from __future__ import annotations

import shutil

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.data import MetaTensor
from monai.transforms import Compose, CropForegroundd, Invertd

from monai_unc import cli
from monai_unc._utils import check_probabilities, sum_f64, uncovered_padding
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.workflows.infer import restore_uncovered

_PADDING = "every class is 0 at"


def _inverted_probabilities(shape=(12, 10, 8), box=(slice(3, 9), slice(2, 8), slice(1, 6)), seed=0):
    """Softmax probabilities predicted on a ``CropForegroundd`` crop, inverted onto the image grid by ``Invertd``."""
    image = torch.zeros(1, *shape)
    image[(slice(None), *box)] = 1.0
    image = MetaTensor(image, affine=torch.eye(4))
    pre = Compose([CropForegroundd(keys="image", source_key="image")])
    data = pre({"image": image})
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, *data["image"].shape[1:], generator=g)
    data["pred"] = MetaTensor(torch.softmax(logits, 0), meta=data["image"].meta)  # as a MONAI network returns it
    inv = Invertd(keys="pred", transform=pre, orig_keys="image", nearest_interp=False)
    out = inv(data)["pred"]
    return out.as_tensor(), image.as_tensor()


def test_the_inversion_leaves_a_zero_frame_which_is_named_with_what_to_do():
    probs, image = _inverted_probabilities()
    outside = int((image[0] == 0).sum())
    # the premise, computed directly: zero in every class exactly outside the crop's box, class sums 1 inside it
    sums = probs.sum(0)
    assert torch.equal(sums == 0, image[0] == 0)
    assert torch.allclose(sums[image[0] > 0], torch.ones(()), atol=1e-6)
    with pytest.raises(ValueError) as e:
        check_probabilities(probs[None], "probs")
    msg = str(e.value)
    assert f"probs: {_PADDING} {outside} voxel(s)" in msg
    assert "Invertd" in msg and "CropForegroundd" in msg and "background" in msg and "restore_uncovered" in msg
    assert "sigmoid" not in msg and "logits" not in msg and "multilabel" not in msg


def test_what_the_message_says_to_do_gives_accepted_probabilities():
    probs, _ = _inverted_probabilities()
    fixed = restore_uncovered({"pred": probs}, probs.sum(0, keepdim=True))["pred"]
    check_probabilities(fixed[None], "probs")  # no error
    assert torch.equal(fixed.argmax(0)[probs.sum(0) == 0], torch.zeros(int((probs.sum(0) == 0).sum()),
                                                                         dtype=torch.int64))


def test_a_blended_outer_layer_counts_as_the_crops_edge():
    """``nearest_interp=False`` after a resampling blends the box's outer layer with the zeros (sums below 1)."""
    p = torch.zeros(2, 7, 7)
    p[0, 1:6, 1:6], p[1, 1:6, 1:6] = 0.3, 0.7
    p[:, 1, 1:6] *= 0.5  # one blended side of the box
    assert uncovered_padding(p, sum_f64(p, 0), 0, 1e-3) == 49 - 25
    with pytest.raises(ValueError, match=_PADDING):
        check_probabilities(p[None], "probs")


def test_a_box_at_most_two_voxels_thick_must_sum_to_one():
    """Every voxel of a box at most 2 voxels thick lies on its outer layer: nothing inside it says the channels are
    class probabilities, so its voxels must sum to 1 themselves (sigmoid probabilities there are no padding)."""
    p = torch.zeros(2, 7, 7)
    p[0, 2:4, 1:6], p[1, 2:4, 1:6] = 0.3, 0.7
    assert uncovered_padding(p, sum_f64(p, 0), 0, 1e-3) == 49 - 10
    p[1, 2:4, 1:6] = 0.2  # per-channel probabilities summing to 0.5
    assert uncovered_padding(p, sum_f64(p, 0), 0, 1e-3) == 0
    with pytest.raises(ValueError, match="must sum to 1 over the class dimension"):
        check_probabilities(p[None], "probs")


@pytest.mark.parametrize("case", ["zero-inside-the-box", "sigmoid-regions", "sum-above-one-inside", "no-zero"])
def test_other_deviations_keep_the_message_about_sigmoid_probabilities(case):
    p = torch.zeros(1, 2, 6, 6)
    p[0, 0, 1:5, 1:5], p[0, 1, 1:5, 1:5] = 0.4, 0.6
    if case == "zero-inside-the-box":  # a hole inside the box: no padding
        p[0, :, 2, 2] = 0
    elif case == "sigmoid-regions":  # overlapping regions around a zero frame
        p[0, 1, 1:5, 1:5] = 0.9
    elif case == "sum-above-one-inside":
        p[0, 0, 3, 3] = 0.9
    else:
        p[0, 0], p[0, 1] = 0.2, 0.3
    with pytest.raises(ValueError) as e:
        check_probabilities(p, "probs")
    assert _PADDING not in str(e.value) and "sigmoid" in str(e.value)


def test_batched_cases_and_sample_axes_are_read_per_case():
    probs, image = _inverted_probabilities()
    other, _ = _inverted_probabilities(seed=1)
    batch = torch.stack([probs, other])  # (B, C, *spatial): the same crop in both cases
    with pytest.raises(ValueError, match=rf"{_PADDING} {2 * int((image[0] == 0).sum())} voxel"):
        check_probabilities(batch, "probs")
    samples = batch[:, None]  # (S, B=1, C, *spatial), the class axis 2
    assert uncovered_padding(samples, sum_f64(samples, 2), 2, 1e-3) == 2 * int((image[0] == 0).sum())


def test_evaluate_names_the_undone_crop_in_one_line(tmp_path, capsys):
    paths = write_toy_cohort(tmp_path / "c", n_cases=1, shape=(16, 16, 16))
    pred = paths["predictions"]
    f = next(pred.glob("*_probs.nii.gz"))
    img = nib.load(f)
    a = np.asarray(img.dataobj).copy()
    a[:3], a[-2:], a[:, :2] = 0, 0, 0  # what Invertd leaves outside a CropForegroundd box (4D: x, y, z, class)
    nib.save(nib.Nifti1Image(a, img.affine), f)
    for s in pred.glob("*_seg.nii.gz"):
        s.unlink()
    shutil.rmtree(tmp_path / "ev", ignore_errors=True)
    try:
        rc = cli.main(["evaluate", "--labels", str(paths["labels"]), "--predictions", str(pred), "--output",
                       str(tmp_path / "ev"), "--quiet"])
    except SystemExit as e:
        rc = e.code
    err = [line for line in capsys.readouterr().err.splitlines() if "toy000_probs" in line]
    assert rc == 1 and len(err) == 1, err
    assert f"{_PADDING} {16 ** 3 - 11 * 14 * 16} voxel(s)" in err[0] and "Invertd" in err[0]
    assert "evaluate --regions" not in err[0] and "sigmoid" not in err[0]
