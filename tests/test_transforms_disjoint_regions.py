"""Sigmoid channels of regions that do not overlap (one per organ, no background channel) have no argmax class.

Their values lie in ``[0, 1]`` and sum to less than 1 outside the organs, so the overlap check (a sum above 1) let
them through and the argmax read channel 0 as the background: ``AggregateUncertainty(mask=pred)`` gave the
foreground mean 0.0139 instead of 0.7 (the first organ left out, every background voxel counted; found by hostile
review), ``SamplesToLabels`` labelled the first organ 0 and the background 1. The transforms now use the check of the
spatial metrics (``_utils.check_exclusive_channels``): channels in [0, 1] must sum to 1, the zero padding of an
inverted crop (every channel 0 outside the box of the other voxels) aside.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.transforms import AggregateUncertainty, AggregateUncertaintyd, SamplesToLabels, error_map

SHAPE = (10, 10, 10)


def _two_organs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Label map (organ A = 1, organ B = 2), a perfect two-head sigmoid output (A, B) and an uncertainty map."""
    lab = np.zeros(SHAPE, np.int64)
    lab[1:4, 1:4, 1:4] = 1
    lab[6:9, 6:9, 6:9] = 2
    p = np.full((2, *SHAPE), 0.02, np.float32)
    p[1] = 0.03
    p[0][lab == 1] = 0.95
    p[1][lab == 2] = 0.95
    u = np.zeros((1, *SHAPE), np.float32)
    u[0][lab == 1] = 0.9
    u[0][lab == 2] = 0.5
    return lab, p, u


def test_foreground_mean_with_sigmoid_organ_heads_as_mask_is_refused():
    _, p, u = _two_organs()
    with pytest.raises(ValueError, match=r"mask has 2 channels in \[0, 1\] that do not sum to 1"):
        AggregateUncertainty("mean")(torch.from_numpy(u), mask=torch.from_numpy(p))
    with pytest.raises(ValueError, match="do not sum to 1"):
        AggregateUncertaintyd("u", mask_key="pred")({"u": torch.from_numpy(u), "pred": torch.from_numpy(p)})


def test_samples_and_error_map_of_sigmoid_organ_heads_are_refused():
    lab, p, _ = _two_organs()
    with pytest.raises(ValueError, match="img has 2 channels in .* do not sum to 1"):
        SamplesToLabels()(torch.from_numpy(np.stack([p, p])))
    with pytest.raises(ValueError, match="pred has 2 channels in .* do not sum to 1"):
        error_map(p, (lab[None] > 0).astype(np.int64))


def test_thresholded_organ_masks_are_refused_as_masks():
    """Their zeros lie inside the box of the organs: the background of masks without a background channel, no
    padding (the check the spatial metrics use, now the one of the transforms too)."""
    _, p, u = _two_organs()
    with pytest.raises(ValueError, match="do not sum to 1"):
        AggregateUncertainty("mean")(torch.from_numpy(u), mask=torch.from_numpy((p > 0.5).astype(np.float32)))


def test_class_probabilities_with_a_background_and_zero_padding_are_kept():
    lab, p, u = _two_organs()
    probs = np.concatenate([1 - p.sum(0, keepdims=True), p])  # a background channel: softmax-like, sums to 1
    probs[:, :, :, :1] = 0  # the zero padding of an inverted crop
    fg = (lab > 0) & (np.arange(SHAPE[2]) >= 1)
    score = AggregateUncertainty("mean")(torch.from_numpy(u), mask=torch.from_numpy(probs))
    assert float(score) == pytest.approx(float(u[0][fg].mean()))
