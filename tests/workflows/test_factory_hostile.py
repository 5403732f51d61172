"""Hostile options for ``monai_unc.workflows.factory``: noise level, Rate-In target and ROI sizes."""

from __future__ import annotations

import math

import pytest


def test_build_inferer_validates_noise_and_targets():
    from monai_unc.workflows.factory import build_inferer, check_roi

    for bad in (-1.0, math.nan, math.inf, "0.1"):
        with pytest.raises(ValueError, match="--tta-noise must be a finite standard deviation >= 0"):
            build_inferer("tta", tta_noise=bad)
    with pytest.raises(ValueError, match="tta source only"):
        build_inferer("mcdropout", tta_noise=0.1)
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="--ratein-target must be"):
            build_inferer("mcdropout", ratein_target=bad)
    assert len(build_inferer("tta", tta_noise=0.1).sources) == 2  # flips and noise
    with pytest.raises(ValueError, match=r"--roi gives 2 sizes \(8, 8\) but the network takes 3D input"):
        check_roi([8, 8], 3)
    for ok in (8, [8], (8, 8, 8), None):
        check_roi(ok, 3)
    check_roi([8, 8], None)  # dimensionality unknown: nothing assumed
