"""Case-level downstream tasks: OoD AUROC (vs sklearn), failure detection, AL improvement, histograms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from monai_unc.metrics.casewise import al_improvement, failure_detection, ood_auroc, uncertainty_histograms
from monai_unc.metrics.selective import augrc, aurc, eaurc


def test_ood_auroc_matches_sklearn_with_ties():
    rng = np.random.default_rng(0)
    iid = rng.integers(0, 6, size=70).astype(float)  # ties within and across groups
    ood = rng.integers(2, 9, size=40).astype(float)
    labels = np.r_[np.zeros(70), np.ones(40)]
    expected = roc_auc_score(labels, np.r_[iid, ood])
    assert ood_auroc(iid, ood) == pytest.approx(expected, abs=1e-12)
    assert ood_auroc(torch.tensor(iid), torch.tensor(ood)) == pytest.approx(expected, abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=20),
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=20),
)
def test_property_ood_auroc(iid, ood):
    iid, ood = np.array(iid), np.array(ood)
    labels = np.r_[np.zeros(iid.size), np.ones(ood.size)]
    assert ood_auroc(iid, ood) == pytest.approx(roc_auc_score(labels, np.r_[iid, ood]), abs=1e-12)
    # swapping the groups mirrors the AUROC
    assert ood_auroc(ood, iid) == pytest.approx(1 - ood_auroc(iid, ood), abs=1e-12)


def test_ood_auroc_extremes_and_errors():
    assert ood_auroc([0.1, 0.2], [0.5, 0.9]) == 1.0
    assert ood_auroc([0.5, 0.9], [0.1, 0.2]) == 0.0
    assert ood_auroc([0.3, 0.3], [0.3]) == 0.5
    with pytest.raises(ValueError, match="uncertainty_ood is empty"):
        ood_auroc([0.1], [])
    with pytest.raises(ValueError, match="uncertainty_iid contains 1 non-finite"):
        ood_auroc([np.nan], [0.1])


def test_failure_detection_uses_one_minus_dice():
    rng = np.random.default_rng(1)
    dice = rng.uniform(0.3, 1.0, size=50)
    u = 1 - dice + rng.normal(0, 0.1, size=50)
    res = failure_detection(u, dice)
    risk = 1 - dice
    assert res.aurc == pytest.approx(aurc(u, risk))
    assert res.eaurc == pytest.approx(eaurc(u, risk))
    assert res.augrc == pytest.approx(augrc(u, risk))
    # a perfect ranking has zero excess
    assert failure_detection(1 - dice, dice).eaurc == pytest.approx(0.0, abs=1e-12)
    # hand case: two cases, the worse one is also the more uncertain one
    hand = failure_detection([0.9, 0.1], [0.5, 1.0])
    assert hand.aurc == pytest.approx(0.5 * (0.25 + 0.0) / 2 + 0.5 * 0.0)
    with pytest.raises(ValueError, match=r"dice must lie in \[0, 1\]"):
        failure_detection([0.1, 0.2], [0.5, 1.2])
    with pytest.raises(ValueError, match="same length"):
        failure_detection([0.1, 0.2], [0.5])
    with pytest.raises(ValueError, match="dice contains"):
        failure_detection([0.1, 0.2], [0.5, np.nan])


def test_al_improvement():
    # method: 0.60 -> 0.72 (+20 %); random: 0.60 -> 0.66 (+10 %)
    assert al_improvement(0.60, 0.72, 0.60, 0.66) == pytest.approx(0.10)
    # per-case Dice values are averaged first
    assert al_improvement([0.5, 0.7], [0.7, 0.74], np.array([0.6]), torch.tensor([0.66])) == pytest.approx(
        (0.72 - 0.6) / 0.6 - 0.1
    )
    with pytest.warns(UserWarning, match="undefined"):
        assert np.isnan(al_improvement(0.0, 0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="dice_t2 contains"):
        al_improvement(0.5, np.nan, 0.5, 0.5)


def test_uncertainty_histograms_match_numpy():
    rng = np.random.default_rng(2)
    u = rng.uniform(size=300)
    correct = rng.uniform(size=300) > u  # uncertain cases are more often wrong
    h = uncertainty_histograms(u, correct, bins=10)
    edges = np.histogram_bin_edges(u, bins=10)
    np.testing.assert_allclose(h.edges, edges)
    np.testing.assert_allclose(h.correct, np.histogram(u[correct], bins=edges, density=True)[0])
    np.testing.assert_allclose(h.incorrect, np.histogram(u[~correct], bins=edges, density=True)[0])
    width = np.diff(h.edges)
    assert (h.correct * width).sum() == pytest.approx(1.0) and (h.incorrect * width).sum() == pytest.approx(1.0)
    assert h.n_correct == correct.sum() and h.n_incorrect == (~correct).sum()
    # the incorrect cases sit at higher uncertainty
    centres = (edges[1:] + edges[:-1]) / 2
    assert (h.incorrect * width * centres).sum() > (h.correct * width * centres).sum()
    counts = uncertainty_histograms(u, correct.astype(int), bins=10, density=False, range=(0, 1))
    assert counts.correct.sum() == correct.sum()


def test_uncertainty_histograms_degenerate_and_errors():
    with pytest.warns(UserWarning, match="no incorrect cases"):
        h = uncertainty_histograms([0.1, 0.2, 0.2], [True, True, True], bins=4)
    assert np.isnan(h.incorrect).all() and np.isfinite(h.correct).all()
    # constant uncertainty still gives a histogram (numpy's unit-width range)
    h = uncertainty_histograms([0.3, 0.3], [True, False], bins=3)
    assert h.correct.sum() > 0
    with pytest.raises(ValueError, match="boolean"):
        uncertainty_histograms([0.1, 0.2], [0.5, 1.0])
    with pytest.raises(ValueError, match="same length"):
        uncertainty_histograms([0.1, 0.2], [True])
