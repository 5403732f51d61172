"""The lesion-level retention curve on a grid whose every share refers all lesions (review 67)."""

from __future__ import annotations

import pytest

from monai_unc.evaluation.lesions import lesion_retention


def test_every_share_referring_all_lesions_gives_an_empty_curve_with_a_warning():
    """Found by review 67: one lesion with ``referred=(0.5,)`` (ceil(0.5 * 1) = 1 referred) failed with
    ``ValueError: taus is empty`` from referral_curve, naming no argument of lesion_retention."""
    with pytest.warns(UserWarning, match="refers all 1 lesion"):
        curve = lesion_retention([0.3], [0.5], [0], referred=(0.5,))
    assert curve == {"referred": [], "kept": [], "dice": [], "false_positive_share": [], "oracle_dice": []}
    # a share that keeps the lesion still gives its point
    assert lesion_retention([0.3], [0.5], [0], referred=(0.0, 0.5))["dice"] == [0.5]
