"""Hostile input to ``monai_unc.inferers.TTAInferer``: a NaN, negative, infinite or string noise level is refused."""

from __future__ import annotations

import pytest

from monai_unc.inferers import TTAInferer


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf"), "0.1"])
def test_tta_noise_std_is_validated(bad):
    with pytest.raises(ValueError, match="noise_std"):
        TTAInferer(noise_std=bad)
