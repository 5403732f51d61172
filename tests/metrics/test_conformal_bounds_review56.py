"""Session 56: conformal risk control with a loss bound above 1, and strata without a true voxel."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from monai_unc.metrics.conformal import (
    conformal_case_state,
    crc_lambda,
    fit_conformal_rule,
    min_calibration_cases,
)


def _brute_crc(losses: np.ndarray, alpha: float, bound: float) -> int:
    n = losses.shape[0]
    for j in range(losses.shape[1]):
        if (losses[:, j].sum() + bound) / (n + 1) <= alpha:
            return j
    raise AssertionError("no grid point")


def test_crc_takes_a_level_up_to_the_loss_bound():
    # a loss bounded by 2 (e.g. two false-negative shares added) with a target of 1.2 was refused: alpha in (0, 1)
    rng = np.random.default_rng(0)
    losses = np.sort(rng.uniform(0, 2, size=(30, 12)), axis=1)[:, ::-1].copy()
    losses[:, -1] = 0.0
    assert crc_lambda(losses, alpha=1.2, B=2.0) == _brute_crc(losses, 1.2, 2.0)
    # scaling the losses, the bound and the level together leaves the rule unchanged
    assert crc_lambda(losses, alpha=1.2, B=2.0) == crc_lambda(losses / 2, alpha=0.6, B=1.0)
    assert min_calibration_cases(1.2, B=2.0) == min_calibration_cases(0.6) == 1


@pytest.mark.parametrize(("alpha", "bound"), [(2.0, 2.0), (2.5, 2.0), (1.0, 1.0), (0.6, 0.5), (0.0, 2.0)])
def test_crc_refuses_a_level_at_or_above_the_bound(alpha, bound):
    losses = np.zeros((20, 3))
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, "):
        crc_lambda(losses, alpha=alpha, B=bound)
    with pytest.raises(ValueError, match="alpha"):
        min_calibration_cases(alpha, B=bound)


def test_high_probability_cases_still_need_a_probability():
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\)"):
        min_calibration_cases(1.5, high_probability=True, B=2.0)


def _state(truth: list[int]):
    probs = np.array([[0.9, 0.7, 0.4, 0.2]])
    return conformal_case_state(probs, np.array([truth]), activation="sigmoid", side="outer", grid=8)


def test_a_stratum_without_a_true_voxel_warns():
    # stratum 0's cases have no true voxel: its outer rule is vacuous (the missed share is 0 whatever lambda); only a
    # class without a true voxel in every case warned
    states = [_state([0, 0, 0, 0])] * 12 + [_state([1, 1, 0, 0])] * 12
    scores = [0.1] * 12 + [0.9] * 12
    with pytest.warns(UserWarning, match=r"'0' within stratum 0: none of its 12 calibration cases has a true voxel"):
        rule = fit_conformal_rule(states, alpha=0.1, scores=scores, edges=[0.5])
    assert rule.num_strata == 2


def test_strata_with_true_voxels_do_not_warn():
    states = [_state([1, 0, 0, 0])] * 12 + [_state([1, 1, 0, 0])] * 12
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_conformal_rule(states, alpha=0.1, scores=[0.1] * 12 + [0.9] * 12, edges=[0.5])


def test_no_true_voxel_anywhere_warns_once_per_class():
    states = [_state([0, 0, 0, 0])] * 24
    with pytest.warns(UserWarning) as rec:
        fit_conformal_rule(states, alpha=0.1, scores=[0.1] * 12 + [0.9] * 12, edges=[0.5])
    texts = [str(w.message) for w in rec if "true voxel" in str(w.message)]
    assert len(texts) == 1 and "none of the 24 calibration cases" in texts[0]
