"""Defects found by the hostile end-to-end run of the nnU-Net and regions routes (review 63)."""

from __future__ import annotations

import warnings

import pytest

from monai_unc.evaluation.lesions import lesion_retention


def _tie_warnings(score, dice, fp):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        curve = lesion_retention(score, dice, fp, referred=(0.0, 0.25, 0.5))
    return curve, [str(w.message) for w in caught if "tied" in str(w.message)]


@pytest.mark.parametrize("dice, fp", [([0.0] * 4, [1] * 4), ([1.0] * 4, [0] * 4)])
def test_lesion_retention_does_not_call_distinct_scores_tied(dice, fp):
    """Every predicted lesion a false positive (Dice 0; an untrained or failing model) or every lesion Dice 1: the
    oracle curve ranks the lesions by their Dice, which are all equal; that said "referral_curve: all 4 scores are
    tied, so the scores cannot rank the cases", though the uncertainty scores were distinct and ranked them."""
    curve, tied = _tie_warnings([0.9, 0.1, 0.5, 0.2], dice, fp)
    assert tied == []
    assert curve["oracle_dice"] == [dice[0]] * 3 and curve["kept"] == [4, 3, 2]


def test_lesion_retention_warns_once_when_the_scores_are_tied():
    """Tied uncertainty scores do not rank the lesions: one warning, not one per curve drawn with them."""
    curve, tied = _tie_warnings([0.3] * 4, [0.0, 0.5, 0.9, 0.2], [1, 0, 0, 0])
    assert len(tied) == 1 and "all 4 scores are tied" in tied[0]
    assert curve["dice"][0] == pytest.approx(0.4)
