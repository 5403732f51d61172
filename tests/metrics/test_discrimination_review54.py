"""Hostile review 54 of the voxel-wise discrimination metrics (:mod:`monai_unc.metrics.discrimination`)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from monai_unc.metrics import discrimination as D
from monai_unc.metrics.discrimination import auroc, avu, error_auprc, error_auroc


@pytest.mark.parametrize("fn", [error_auroc, error_auprc, avu])
def test_huge_finite_uncertainties_give_no_overflow_warning(fn):
    """Finite values whose float64 sum overflows are valid: the finiteness check warned "overflow encountered"."""
    u = np.array([1e308, 1e308, -1e308, 0.1, 1e308])
    e = np.array([1, 0, 0, 0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = fn(u, e, per_case=False)
    if fn is error_auroc:
        assert value == roc_auc_score(e, u)


def test_auroc_of_huge_scores_gives_no_overflow_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert auroc([1e308, 1e308], [1e308, 0.0]) == 0.75


def test_huge_values_with_a_nan_are_still_refused():
    with pytest.raises(ValueError, match="uncertainty contains 1 non-finite"):
        error_auroc(np.array([1e308, 1e308, np.nan]), np.array([1, 0, 0]), per_case=False)


_U = np.array([0.1, 0.5, 0.9, 0.3])


@pytest.mark.parametrize(
    "call",
    [
        lambda: D.error_auroc(_U, np.zeros(4), per_case=False),
        lambda: D.error_auprc(_U, np.ones(4), per_case=False),
        lambda: D.correct_certain_ratio(_U, np.zeros(4), threshold=-1.0, per_case=False),
        lambda: D.uncertain_incorrect_ratio(_U, np.zeros(4), per_case=False),
        lambda: D.error_auroc(_U.reshape(2, 1, 1, 2), np.zeros((2, 1, 1, 2)), per_case=True),
    ],
    ids=["error_auroc", "error_auprc", "correct_certain_ratio", "uncertain_incorrect_ratio", "per_case"],
)
def test_nan_warnings_point_at_the_caller(call):
    """Found by hostile testing: on Python < 3.12 (a list comprehension is a frame of its own) the NaN warnings of a
    case without errors (or without correct or certain voxels) pointed into discrimination.py, one frame short of
    the caller, as pavpu's and auroc's did not."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    assert np.isnan(value).all()
    assert caught and all(w.category is UserWarning for w in caught)
    assert all(w.filename == __file__ for w in caught), [w.filename for w in caught]


def test_values_unchanged_by_the_loop():
    """The per-case values are those of the pooled computation of each case (brute-force Mann-Whitney)."""
    rng = np.random.default_rng(0)
    u = np.round(rng.random((3, 1, 5, 5)) * 4) / 4  # ties
    e = rng.random((3, 1, 5, 5)) < 0.4
    got = D.error_auroc(u, e, per_case=True)
    for i in range(3):
        pos, neg = u[i][e[i]], u[i][~e[i]]
        ref = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (pos.size * neg.size)
        assert math.isclose(got[i], ref, rel_tol=0, abs_tol=1e-15)
