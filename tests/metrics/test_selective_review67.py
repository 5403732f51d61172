"""Review 67 of selective prediction / referral against RETINA and brute force (see each test)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics.selective import area_under_referral_curve, referral_curve

U = [0.1, 0.4, 0.2, 0.8]
DICE = np.array([0.9, 0.6, 0.8, 0.3])


@pytest.mark.parametrize("result", ["0.5", b"0.5", None, 0.5 + 1j, np.array([0.5, 0.2]), [0.5, 0.2]])
def test_a_callable_that_returns_no_number_is_refused_naming_values(result):
    """Found by review 67: a cohort metric returning the text "0.5" was parsed into 0.5 (and None or a pair of
    values failed inside ``float`` naming no argument); the callable's result must be one real number."""
    with pytest.raises(TypeError, match="values"):
        referral_curve(U, lambda idx: result, ties="order")
    with pytest.raises(TypeError, match="values"):
        area_under_referral_curve(U, lambda idx: result, ties="order")


@pytest.mark.parametrize(("result", "expected"), [
    (0.5, 0.5), (np.float32(0.5), 0.5), (np.array(0.5), 0.5), (np.array([0.5]), 0.5), (torch.tensor(0.5), 0.5),
    (torch.tensor([0.5], dtype=torch.bfloat16, requires_grad=True), 0.5), (1, 1.0), (np.int64(1), 1.0),
])
def test_a_callable_may_return_any_one_real_number(result, expected):
    """Python, numpy and torch scalars (0-d or of one element) are read as their value, as before."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        curve = referral_curve(U, lambda idx: result, ties="order")
    assert curve.value.tolist() == [expected] * 4


def test_a_callable_recomputes_the_mean_of_the_kept_cases_as_per_case_values_do():
    """The callable form with ties broken by case order equals the per-case form (brute force of the kept sets)."""
    u = np.array([0.3, 0.1, 0.3, 0.7, 0.1])
    v = np.array([0.2, 0.9, 0.5, 0.4, 0.6])
    fn = referral_curve(u, lambda idx: v[idx].mean(), ties="order")
    per = referral_curve(u, v, ties="order")
    kept = [np.argsort(u, kind="stable")[: 5 - k] for k in range(5)]
    assert np.allclose(fn.value, [v[i].mean() for i in kept])
    assert np.allclose(per.value, fn.value)


def test_the_documented_differences_from_retina_hold():
    """docs/case_level.md, "Where RETINA's code differs": RETINA's mean of the N + 1 points (the last one perfect) and
    the trapezoid against the area under the steps that ceil(tau N) draws, checked on the documented cases and at
    random."""
    curve = referral_curve(U, DICE)
    assert round(float(np.mean(np.r_[curve.value, 1.0])), 4) == 0.8333
    assert round(area_under_referral_curve(U, DICE, normalize=True), 4) == 0.7972
    assert round(area_under_referral_curve(U, DICE), 4) == 0.5979
    rng = np.random.default_rng(67)
    for n in (2, 3, 7):
        u, v = rng.random(n), rng.random(n)
        c = referral_curve(u, v)
        steps = float(np.sum(c.value[1:])) / n  # the value at k / N holds on ((k - 1) / N, k / N]
        assert np.isclose(area_under_referral_curve(u, v), steps + (c.value[0] - c.value[-1]) / (2 * n))
    assert round(float(np.sum(curve.value[1:])) / 4, 4) == 0.6292


@pytest.mark.parametrize(("kwargs", "name"), [({"bins": True}, "bins"), ({"bins": np.bool_(True)}, "bins"),
                                              ({"range": (False, True)}, "range"), ({"bins": [0.0, True]}, "bins")])
def test_histogram_bins_and_range_refuse_flags(kwargs, name):
    """Found by review 67: ``bins=True`` was numpy's one bin and ``range=(False, True)`` the range (0, 1), silently
    (the package refuses a bool where a count or a number is meant)."""
    from monai_unc.metrics.casewise import uncertainty_histograms

    with pytest.raises(TypeError, match=name):
        uncertainty_histograms([0.1, 0.2, 0.6, 0.9], [1, 1, 0, 0], **kwargs)
    # numbers still work
    h = uncertainty_histograms([0.1, 0.2, 0.6, 0.9], [1, 1, 0, 0], bins=2, range=(0, 1), density=False)
    assert h.correct.tolist() == [2.0, 0.0] and h.incorrect.tolist() == [0.0, 2.0]
