"""Test-time noise too large for the input's dtype is refused before any pass, naming the noise.

Found by hostile testing: ``--tta-noise 1e308`` turned the float32 voxels into ``inf`` and every case failed with
``network output contains non-finite values``, which blames the network for what the option did.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from monai_unc.inferers import NoiseSource, TTAInferer, UncertaintyInferer
from monai_unc.keys import FLOAT32_MAX, noise_std_limit
from monai_unc.workflows.factory import build_inferer


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Conv3d(1, 2, 3, padding=1)


def test_the_limit_is_a_ninth_of_the_largest_float32():
    assert FLOAT32_MAX == float(np.finfo(np.float32).max)
    assert noise_std_limit() == pytest.approx(float(np.finfo(np.float32).max) / 9, rel=1e-15)
    assert noise_std_limit(float(torch.finfo(torch.float16).max)) == pytest.approx(65504 / 9)
    # a draw of 9 standard deviations at the limit is still finite in float32
    assert math.isfinite(float(np.float32(9 * noise_std_limit())))


def test_noise_at_the_limit_runs_and_beyond_it_is_refused_naming_std_and_dtype():
    image = torch.rand(1, 1, 4, 4, 4)
    limit = noise_std_limit(torch.finfo(torch.float32).max)
    with pytest.raises(ValueError, match=r"std=1e\+39 makes noise beyond the range of the input's torch.float32"):
        UncertaintyInferer(NoiseSource(std=1e39), seed=0)(image, _net())
    with pytest.raises(ValueError, match="at most 3.78e"):
        TTAInferer(flip_axes=(), noise_std=limit * 1.01, seed=0)(image, _net())
    # a float64 input takes far larger noise: the check follows the input's dtype
    NoiseSource(std=1e39).check_input(image.double(), image.device)
    with pytest.raises(ValueError, match="torch.float16: give a standard deviation of at most 7.28e"):
        NoiseSource(std=1e4).check_input(image.half(), image.device)
    # noise up to the limit is not refused (its output is the network's business, not this check's)
    UncertaintyInferer(NoiseSource(std=1.0, num_samples=2), seed=0)(image, _net())


def test_the_factory_refuses_it_naming_the_option():
    with pytest.raises(ValueError, match=r"--tta-noise must be at most 3.78e\+37 \(larger noise overflows"):
        build_inferer("tta", tta_noise=1e308)
    assert build_inferer("tta", tta_noise=noise_std_limit()) is not None
