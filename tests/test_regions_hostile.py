"""Hostile input to ``monai_unc.regions``: many regions (a multi-label model of tens of structures), region orders
permuted, nested nnU-Net-style regions, non-contiguous labels, empty masks; against a per-voxel brute force."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch

from monai_unc.regions import label_to_regions, per_region, region_masks, regions_to_labels, unclaimed_labels
from tests.test_regions_to_labels import _brute

#: the regions of nnU-Net's BraTS example (dataset.json ``labels`` with ``regions_class_order`` [1, 2, 3])
NNUNET_BRATS = {"whole tumor": (1, 2, 3), "tumor core": (2, 3), "enhancing tumor": (3,)}


@pytest.mark.parametrize("n_regions", [63, 70])
def test_more_than_62_regions_round_trip(n_regions):
    """63 regions or more overflowed the int64 bit code of a voxel's regions and crashed (a 2^R table)."""
    spec = {f"s{i}": (i + 1,) for i in range(n_regions)}
    labels = np.random.default_rng(0).integers(0, n_regions + 1, size=(6, 5, 4))
    back, missed = regions_to_labels(label_to_regions(labels, spec), spec)
    np.testing.assert_array_equal(back, labels)
    assert missed == 0 and back.dtype == np.uint8


def test_twenty_four_regions_take_no_exponential_time():
    """A table over all 2^R sets of regions took a minute at R = 20 (and 2^R memory): now the sets that occur."""
    spec = {f"s{i}": (i + 1,) for i in range(24)}
    labels = np.random.default_rng(1).integers(0, 25, size=(8, 8, 8))
    start = time.process_time()  # this process's CPU time: not the wall clock, which a loaded CI machine stretches
    back, missed = regions_to_labels(label_to_regions(labels, spec), spec)
    assert time.process_time() - start < 2.0  # about 0.07 s; the table over 2^24 sets took a minute
    np.testing.assert_array_equal(back, labels)
    assert missed == 0


@pytest.mark.parametrize("n_regions", [11, 13, 64])
def test_overlapping_regions_of_random_masks_equal_the_brute_force(n_regions):
    """Over 10 regions (only the occurring sets) and over 62 (unique columns): the brute force's labels and count."""
    rng = np.random.default_rng(n_regions)
    labels = list(range(1, 16)) + [40, 300]
    spec = {f"r{i}": tuple(int(v) for v in rng.choice(labels, size=rng.integers(1, 4), replace=False))
            for i in range(n_regions)}
    spec["r0"] = (300,)  # a label above 255: int32 maps
    masks = rng.uniform(size=(n_regions, 4, 3, 3)) < 0.15
    masks[:, 0, 0, 0] = False  # one background voxel
    got, missed = regions_to_labels(masks, spec)
    want, want_missed = _brute(masks, spec)
    np.testing.assert_array_equal(got, want)
    assert missed == want_missed and got.dtype == np.int32 and got[0, 0, 0] == 0


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
@pytest.mark.parametrize("spec", [NNUNET_BRATS, {"TC": (1, 4), "WT": (1, 2, 4), "ET": (4,)}], ids=["1-2-3", "1-2-4"])
def test_every_order_of_nested_regions_gives_the_labels_back(spec, order):
    """The channel order is the spec's order, whatever it is; labels 1, 2, 4 need not be contiguous."""
    names = list(spec)
    permuted = {names[i]: spec[names[i]] for i in order}
    values = sorted({v for vals in spec.values() for v in vals})
    labels = np.random.default_rng(2).choice([0, *values], size=(5, 4, 3))
    masks = label_to_regions(labels, permuted)
    back, missed = regions_to_labels(masks, permuted)
    np.testing.assert_array_equal(back, labels)
    assert missed == 0
    # the same masks read in another order are other regions: refused only by the count, so the labels differ
    if order != (0, 1, 2):
        assert not np.array_equal(regions_to_labels(masks, spec)[0], labels)


def test_inconsistent_nested_masks_keep_the_largest_consistent_label():
    """Sets of regions no label has: ET alone and TC with ET but without WT hold no label's set of regions (every
    label lies in WT), so they become background and are counted; WT with TC is label 2 exactly."""
    masks = np.zeros((3, 4), bool)  # whole tumor, tumor core, enhancing tumor
    masks[2, 0] = True  # ET only
    masks[1:, 1] = True  # TC and ET, not WT
    masks[:2, 2] = True  # WT and TC: label 2 exactly
    got, missed = regions_to_labels(masks, NNUNET_BRATS)
    assert got.tolist() == [0, 0, 2, 0] and missed == 2


def test_empty_masks_are_background():
    got, missed = regions_to_labels(np.zeros((3, 2, 2, 2), bool), NNUNET_BRATS)
    assert got.tolist() == np.zeros((2, 2, 2), int).tolist() and missed == 0
    got, missed = regions_to_labels(torch.zeros(70, 3, dtype=torch.uint8), {f"s{i}": (i + 1,) for i in range(70)})
    assert isinstance(got, torch.Tensor) and got.tolist() == [0, 0, 0] and missed == 0


def test_the_label_dtype_follows_the_labels_the_spec_can_give():
    """Labels above 255 widen the map (int32) whatever the masks hold, so that a cohort's maps share a dtype."""
    spec = {f"s{i}": (i + 1,) for i in range(11)} | {"big": (300,)}
    empty, _ = regions_to_labels(np.zeros((12, 2, 2), bool), spec)
    assert empty.dtype == np.int32
    small, _ = regions_to_labels(np.zeros((11, 2, 2), bool), {f"s{i}": (i + 1,) for i in range(11)})
    assert small.dtype == np.uint8


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16])
def test_a_label_the_label_maps_dtype_cannot_hold_is_in_no_voxel(dtype):
    """Label 300 compared with a uint8 map wrapped to 44, and 256 to the background 0: region masks of labels that
    the map cannot hold were true on other labels' voxels."""
    labels = np.array([[0, 44], [4, 1]], dtype=dtype)
    spec = {"A": (300,), "B": (256, 4), "C": (1, 65536 + 1)}
    want = {"A": np.zeros((2, 2), bool), "B": labels == 4, "C": labels == 1}
    masks = label_to_regions(labels, spec)
    for r, name in enumerate(spec):
        np.testing.assert_array_equal(masks[r], want[name])
    for name, m in region_masks(torch.from_numpy(labels), spec).items():
        np.testing.assert_array_equal(m.numpy(), want[name])


def test_complex_labels_are_a_type_error():
    """Refused by the shared dtype check of to_tensor (review 63; label_to_regions had its own message)."""
    with pytest.raises(TypeError, match="labels must hold real numbers"):
        label_to_regions(torch.tensor([1 + 0j, 2 + 0j]))


@pytest.mark.parametrize("value, match", [(1.5, "non-integral"), (np.nan, "non-finite|NaN"), (-2.0, "non-negative")])
def test_unclaimed_labels_refuses_values_that_are_no_labels(value, match):
    """1.5 was read as label 1 (claimed, so not reported) and NaN crashed in ``int()``."""
    labels = np.array([0.0, 1.0, 2.0, value])
    with pytest.raises(ValueError, match=match):
        unclaimed_labels(labels, "brats")
    assert unclaimed_labels(np.array([0.0, 1.0, 3.0, 7.0]), "brats") == [3, 7]
    assert unclaimed_labels(torch.tensor([[0, 4], [2, 9]], dtype=torch.uint8), "brats") == [9]


def test_a_deeply_nested_regions_file_is_one_line(tmp_path):
    """Found by hostile testing: ``--regions FILE`` of 100 000 nested brackets raised ``RecursionError`` through
    ``parse_regions`` (a traceback); it is a one-line refusal."""
    from monai_unc.regions import parse_regions
    from monai_unc.workflows.prepare import read_region_spec

    nested = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match=r"regions: the JSON is nested too deeply to be a region spec"):
        parse_regions(nested)
    path = tmp_path / "regions.json"
    path.write_text(nested)
    with pytest.raises(ValueError, match=r"^--regions: .*nested too deeply") as e:
        read_region_spec(str(path))
    assert len(str(e.value)) < 400


def test_a_region_holding_label_0_is_refused():
    """With label 0 in a region, a voxel in no region got 0, whose regions hold that region (counted in
    n_unrepresented but written all the same); since review 67 such a spec is refused (tests/test_consist_review67.py).
    """
    spec = {"all": (0, 1), "one": (1,)}
    masks = np.array([[0, 1, 1], [0, 1, 0]], bool)  # no region; both; "all" only
    with pytest.raises(ValueError, match=r"^regions\['all'\] holds label 0"):
        regions_to_labels(masks, spec)


def test_metatensor_labels_keep_their_meta_through_regions_and_back():
    """A MetaTensor label map (a MONAI pipeline's) gave plain tensors: the affine and file name were lost, so
    SaveImage wrote the region masks on an identity grid; MONAI's ConvertToMultiChannelBasedOnBratsClasses keeps
    them."""
    from monai.data import MetaTensor
    from monai.transforms import ConvertToMultiChannelBasedOnBratsClasses

    labels = np.random.default_rng(3).choice([0, 1, 2, 4], size=(1, 6, 5, 4)).astype(np.uint8)
    affine = torch.diag(torch.tensor([2.0, 1.5, 3.0, 1.0], dtype=torch.float64))
    mt = MetaTensor(torch.from_numpy(labels), affine=affine, meta={"filename_or_obj": "case0_seg.nii.gz"})
    masks = label_to_regions(mt, "brats", channel_dim=0)
    monai_masks = ConvertToMultiChannelBasedOnBratsClasses()(mt)
    assert isinstance(masks, MetaTensor) and isinstance(monai_masks, MetaTensor)
    torch.testing.assert_close(masks.as_tensor(), monai_masks.as_tensor())
    torch.testing.assert_close(masks.affine, affine)
    assert masks.meta["filename_or_obj"] == "case0_seg.nii.gz"
    back, missed = regions_to_labels(masks, "brats")
    assert isinstance(back, MetaTensor) and missed == 0
    assert back.as_tensor().tolist() == labels[0].tolist()
    torch.testing.assert_close(back.affine, affine)
    each = region_masks(mt, "brats")
    assert all(isinstance(m, MetaTensor) and torch.equal(m.affine, affine) for m in each.values())
    mt.meta["filename_or_obj"] = "changed"  # a copy of the meta, not the labels' own dict
    assert masks.meta["filename_or_obj"] == "case0_seg.nii.gz"
    plain = label_to_regions(torch.from_numpy(labels), "brats", channel_dim=0)  # a plain tensor stays plain
    assert type(plain) is torch.Tensor


def test_a_zero_dimensional_array_is_one_label_and_bad_ones_name_the_region():
    """np.asarray(4) as a region's labels raised numpy's "iteration over a 0-d array", naming no argument."""
    from monai_unc.regions import check_regions

    assert check_regions({"ET": np.asarray(4), "WT": np.array([1, 2, 4])}) == {"ET": (4,), "WT": (1, 2, 4)}
    with pytest.raises(TypeError, match=r"regions\['ET'\] must be a list of integer labels"):
        check_regions({"ET": np.asarray(4.0)})
    with pytest.raises(TypeError, match=r"regions\['ET'\] must be a list of integer labels"):
        check_regions({"ET": np.asarray(True)})


@pytest.mark.parametrize("bad", ["1", 1.0, True, None])
def test_per_region_names_a_channel_dim_that_is_no_axis_index(bad):
    """Regression: ``per_region(..., channel_dim="1")`` (or 1.0, True, None) failed inside with Python's or torch's own
    ``TypeError`` naming no argument (``narrow() received an invalid combination of arguments`` for True), and a
    numpy integer reached ``binary_probabilities``, which called it "not an axis of probs"."""
    probs = np.random.default_rng(0).random((2, 3, 4))
    with pytest.raises(TypeError, match="channel_dim must be an int"):
        per_region(lambda probs: probs.shape, {"probs": probs}, channel_dim=bad)
    got = per_region(lambda probs: probs.shape, {"probs": probs}, channel_dim=np.int64(1))
    assert got == {"0": (2, 2, 4), "1": (2, 2, 4), "2": (2, 2, 4)}


def test_a_region_name_that_is_no_string_is_a_type_error():
    # the docstring's TypeError (found by hostile review 60: a ValueError); an empty name stays a ValueError
    from monai_unc.regions import check_regions

    with pytest.raises(TypeError, match="region names must be non-empty strings, got int 1"):
        check_regions({1: [1]})
    with pytest.raises(ValueError, match="region names must be non-empty strings"):
        check_regions({"": [1]})
