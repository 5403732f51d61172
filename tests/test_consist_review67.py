"""Consistency defects found by review 67: one rule for the same kind of option across the modules that take it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.aggregation import aggregate, check_threshold
from monai_unc.transforms import AggregateUncertainty, UncertaintyToDiscrete


# ---------------------------------------------------------------------------------------------------------------
# threshold: a 0-d real tensor / array is its number in aggregate and in UncertaintyToDiscrete alike
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t", [torch.tensor(0.5), torch.tensor(0.5, dtype=torch.float64), np.array(0.5),
                               np.float32(0.5), torch.tensor(0)])
def test_aggregate_takes_a_zero_dimensional_threshold(t):
    """aggregate(..., threshold=torch.quantile(...)) was refused ("must be a real number") while
    UncertaintyToDiscrete accepted the same 0-d tensor."""
    u = np.array([[[[0.2, 0.6], [0.8, 0.1]]]])
    want = aggregate(u, "threshold", threshold=float(t))
    np.testing.assert_array_equal(aggregate(u, "threshold", threshold=t), want)
    np.testing.assert_array_equal(AggregateUncertainty("threshold", threshold=t)(u[0]), AggregateUncertainty(
        "threshold", threshold=float(t))(u[0]))
    assert UncertaintyToDiscrete(threshold=t)(u[0]).tolist() == UncertaintyToDiscrete(threshold=float(t))(u[0]).tolist()


@pytest.mark.parametrize("t", [torch.tensor(True), np.array(True), torch.tensor([0.5]), np.array([0.5]),
                               torch.tensor(0.5j), np.array("0.5"), "0.5", True, [0.5]])
def test_aggregate_and_discrete_refuse_the_same_thresholds(t):
    u = np.array([[[[0.2, 0.6], [0.8, 0.1]]]])
    with pytest.raises(ValueError, match="^threshold must be a real number"):
        aggregate(u, "threshold", threshold=t)
    with pytest.raises(TypeError, match="^threshold must be a real number"):
        UncertaintyToDiscrete(threshold=t)


@pytest.mark.parametrize("t", [torch.tensor(float("nan")), np.array(np.inf)])
def test_non_finite_zero_dimensional_thresholds_are_refused_alike(t):
    u = np.array([[[[0.2, 0.6], [0.8, 0.1]]]])
    with pytest.raises(ValueError, match="^threshold must be finite"):
        aggregate(u, "threshold", threshold=t)
    with pytest.raises(ValueError, match="^threshold must be finite"):
        UncertaintyToDiscrete(threshold=t)


def test_check_threshold_is_the_one_checker():
    assert check_threshold(torch.tensor(0.25)) == 0.25 and isinstance(check_threshold(np.array(1)), float)
    with pytest.raises(TypeError, match="^cut must be a real number"):
        check_threshold(torch.tensor(True), "cut", error=TypeError)


# ---------------------------------------------------------------------------------------------------------------
# regions_to_labels: label 0 in a region spec is refused (nnU-Net: the background is in no region)
# ---------------------------------------------------------------------------------------------------------------
def test_regions_to_labels_refuses_label_0_in_a_region():
    """A voxel in no region got 0, whose regions (label_to_regions) hold the region listing 0: the region came back,
    against the docstring's "only regions the masks hold are kept". nnU-Net's LabelManager leaves the background out
    of every region (a region of label 0 alone is dropped; its converter starts every voxel at 0)."""
    from monai_unc.regions import regions_to_labels

    masks = np.array([[0, 1, 1], [0, 1, 0]], bool)
    with pytest.raises(ValueError, match=r"^regions\['all'\] holds label 0"):
        regions_to_labels(masks, {"all": (0, 1), "one": (1,)})
    with pytest.raises(ValueError, match=r"^regions\['bg'\] holds label 0"):
        regions_to_labels(masks, '{"one": [1], "bg": [0]}')
    labels, missed = regions_to_labels(masks, {"all": (2, 1), "one": (1,)})  # without 0: unchanged
    assert labels.tolist() == [0, 1, 2] and missed == 0
