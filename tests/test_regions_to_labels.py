"""``regions_to_labels``: the inverse of ``label_to_regions``, against a per-voxel brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from monai_unc.regions import BRATS_2023_REGIONS, BRATS_REGIONS, label_to_regions, regions_to_labels


def _brute(masks: np.ndarray, spec: dict) -> tuple[np.ndarray, int]:
    """Per voxel: the label whose regions are exactly the voxel's, else the largest subset (smallest label)."""
    names = list(spec)
    labels = sorted({v for vals in spec.values() for v in vals})
    sets = {lab: frozenset(n for n in names if lab in spec[n]) for lab in labels}
    out = np.zeros(masks.shape[1:], np.int64)
    missed = 0
    for idx in itertools.product(*(range(n) for n in masks.shape[1:])):
        have = frozenset(n for r, n in enumerate(names) if masks[(r, *idx)])
        exact = [lab for lab in labels if sets[lab] == have]
        if exact or not have:  # the empty set is the background's (no region may hold 0)
            out[idx] = exact[0] if exact else 0
            continue
        missed += 1
        subs = [lab for lab in labels if sets[lab] <= have]
        if subs:
            out[idx] = min(subs, key=lambda lab: (-len(sets[lab]), lab))
    return out, missed


@pytest.mark.parametrize("spec", [BRATS_REGIONS, BRATS_2023_REGIONS, {"A": (1, 2), "B": (2, 3), "C": (7,)},
                                  {"only": (5,)}, {"all": (2, 1), "one": (1,)}])
def test_equals_brute_force_on_every_combination(spec):
    rng = np.random.default_rng(0)
    masks = rng.uniform(size=(len(spec), 5, 4, 3)) < 0.5
    got, missed = regions_to_labels(masks, spec)
    want, want_missed = _brute(masks, spec)
    np.testing.assert_array_equal(got, want)
    assert missed == want_missed and isinstance(got, np.ndarray) and got.dtype == np.uint8
    # where every set of regions is a label's, the labels give the masks back
    ok = np.zeros(masks.shape[1:], bool)
    for idx in itertools.product(*(range(n) for n in masks.shape[1:])):
        ok[idx] = _brute(masks[(slice(None), *[slice(i, i + 1) for i in idx])], spec)[1] == 0
    back = label_to_regions(got, spec)
    np.testing.assert_array_equal(back[:, ok], masks[:, ok])


def test_round_trip_of_label_maps_and_torch():
    labels = np.random.default_rng(1).choice([0, 1, 2, 4], size=(6, 5, 4))
    back, missed = regions_to_labels(label_to_regions(labels, "brats"), "brats")
    np.testing.assert_array_equal(back, labels)
    assert missed == 0
    t, _ = regions_to_labels(torch.from_numpy(label_to_regions(labels, "brats")).to(torch.uint8), "brats")
    assert isinstance(t, torch.Tensor) and t.tolist() == labels.tolist()
    big, _ = regions_to_labels(np.ones((1, 2, 2)), {"X": (300,)})  # labels above 255: a wider dtype
    assert big.dtype == np.int32 and big.tolist() == [[300, 300], [300, 300]]


def test_bad_masks():
    with pytest.raises(ValueError, match="one mask per region"):
        regions_to_labels(np.zeros((2, 3, 3)), "brats")
    with pytest.raises(ValueError, match="0/1"):
        regions_to_labels(np.full((3, 2, 2), 0.5), "brats")
