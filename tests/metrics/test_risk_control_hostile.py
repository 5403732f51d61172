"""Hostile checks of the risk-controlled referral threshold: what the returned rule does on the calibration cases
themselves, against an independent float64 computation, and the public bounds against scipy.

:func:`~monai_unc.metrics.risk_control.risk_controlled_threshold` certifies the set of calibration cases it accepts;
:meth:`~monai_unc.metrics.risk_control.RiskControlledThreshold.accept` must accept exactly that set again, whatever
the dtype and library of the scores it is given.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from monai_unc.metrics.risk_control import (
    accepted_by_threshold,
    clopper_pearson_upper,
    hoeffding_bentkus_pvalue,
    hoeffding_bentkus_upper,
    risk_controlled_threshold,
)


def _discrete_cohort(seed: int = 0, m: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """float32 scores on 20 levels (many ties, as a voxel count or a rounded score has) and 0/1 failures."""
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 20, m).astype(np.float32) / np.float32(7)
    failed = (rng.random(m) < 0.02 + 0.5 * (u / 3) ** 3).astype(np.float64)
    return u, failed


@pytest.mark.parametrize("method", ["sgr", "ltt"])
@pytest.mark.parametrize("library", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_accept_on_low_precision_scores_is_the_certified_set(method, library, dtype):
    u32, failed = _discrete_cohort()
    u = u32.astype(dtype)
    res = risk_controlled_threshold(u, failed, target_risk=0.1, delta=0.1, method=method)
    assert res.feasible and 0 < res.n_accepted < u.size  # a finite threshold between two tie groups
    reference = u.astype(np.float64) <= res.threshold  # the set that was certified (independent, float64)
    assert int(reference.sum()) == res.n_accepted
    first_refused = float(np.min(u.astype(np.float64)[~reference]))
    x = torch.from_numpy(u) if library == "torch" else u
    got = res.accept(x)
    got = got.numpy() if library == "torch" else got
    # before the fix the threshold was rounded to the input's dtype, i.e. up to the first refused value, and the
    # whole tie group at that value (cases the certificate never covered) was accepted
    np.testing.assert_array_equal(got, reference)
    assert not bool(res.accept(np.array([first_refused], dtype=dtype))[0])
    assert isinstance(res.accept(torch.tensor([first_refused])), torch.Tensor)


def test_accept_integer_scores_and_nan():
    rng = np.random.default_rng(1)
    u = rng.integers(0, 30, 300)
    failed = (rng.random(300) < 0.01 + 0.4 * (u / 29) ** 4).astype(np.float64)
    res = risk_controlled_threshold(u, failed, target_risk=0.1, delta=0.1)
    assert res.feasible and 0 < res.n_accepted < u.size
    np.testing.assert_array_equal(res.accept(u), u.astype(np.float64) <= res.threshold)
    np.testing.assert_array_equal(res.accept(torch.from_numpy(u)).numpy(), u <= res.threshold)
    assert int(res.accept(u).sum()) == res.n_accepted
    assert not res.accept(np.array([np.nan]))[0] and not bool(res.accept(torch.tensor([float("nan")]))[0])


# ----------------------------------------------------------------------------------------------------------------
# the public bounds: out-of-contract input is refused, never turned into a certificate
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "name"), [
    ((-0.1, 10, 0.2), "risk_hat"),  # gave p = 0: H0 "risk > 0.2" rejected at every level from a negative mean loss
    ((float("nan"), 10, 0.2), "risk_hat"),
    ((1.5, 10, 0.2), "risk_hat"),
    ((0.1, 10.5, 0.2), "n"),
    ((0.1, -3, 0.2), "n"),
    ((0.1, float("nan"), 0.2), "n"),
    ((0.1, 10, 1.5), "alpha"),
    ((0.1, 10, float("nan")), "alpha"),
    ((np.array([0.1, -0.2]), 10, 0.2), "risk_hat"),
])
def test_hb_pvalue_refuses_out_of_contract_input(args, name):
    with pytest.raises(ValueError, match=rf"^{name} must"):
        hoeffding_bentkus_pvalue(*args)


@pytest.mark.parametrize(("args", "name"), [((-0.5, 10, 0.1), "risk_hat"), ((float("nan"), 10, 0.1), "risk_hat"),
                                            ((0.1, -5, 0.1), "n"), ((0.1, 2.5, 0.1), "n"),
                                            ((1.5, 10, 0.1), "risk_hat")])
def test_hb_upper_refuses_out_of_contract_input(args, name):
    with pytest.raises(ValueError, match=rf"^{name} must"):
        hoeffding_bentkus_upper(*args)


@pytest.mark.parametrize("n", [10.5, float("nan"), -1, [10, 10.5]])
def test_clopper_pearson_refuses_a_non_integer_number_of_trials(n):
    with pytest.raises(ValueError, match="n must be"):
        clopper_pearson_upper(0, n, 0.1)


def test_bounds_on_valid_input_match_scipy():
    """Independent references: the binomial tail root (Clopper-Pearson) and the written-out HB p-value."""
    for e, n, d in [(0, 1, 0.1), (0, 30, 0.05), (3, 30, 0.1), (29, 30, 0.2), (7, 200, 0.01)]:
        ub = clopper_pearson_upper(e, n, d)
        assert stats.binom.cdf(e, n, ub) == pytest.approx(d, rel=1e-8)
        assert stats.binom.cdf(e, n, ub - 1e-6) > d  # the smallest such b: the tail is still above delta below it
    assert clopper_pearson_upper(30, 30, 0.1) == 1.0 and clopper_pearson_upper(0, 0, 0.1) == 1.0
    for r, n, a in [(0.0, 40, 0.1), (0.05, 100, 0.1), (0.3, 20, 0.2)]:
        kl = (r * np.log(r / a) if r > 0 else 0.0) + (1 - r) * np.log((1 - r) / (1 - a))
        hoeffding = np.exp(-n * kl) if r < a else 1.0
        bentkus = np.e * stats.binom.cdf(np.ceil(n * r), n, a)
        assert hoeffding_bentkus_pvalue(r, n, a) == pytest.approx(min(hoeffding, bentkus, 1.0), rel=1e-10)


def test_hb_pvalue_counts_ceil_n_r_exactly_review38():
    """review38: ceil(n r) rounded n r to 9 decimals first, so a mean loss 1e-12 above 5 / 100 counted 5 losses, not 6:
    a p-value below the exact one (0.0042 instead of 0.0063), a certificate at delta = 0.005 the data do not give.
    Reference: scipy's binomial cdf at the exact count, beside the Hoeffding term (independent of share_count)."""
    n, a = 100, 0.15
    for r, k in ((0.05 + 1e-12, 6), (0.05, 5), (0.1, 10)):  # r < a: the Hoeffding term is not clipped
        hoeffding = math.exp(-n * (r * math.log(r / a) + (1 - r) * math.log((1 - r) / (1 - a))))
        expected = min(hoeffding, math.e * stats.binom.cdf(k, n, a), 1.0)
        assert hoeffding_bentkus_pvalue(r, n, a) == pytest.approx(expected, rel=1e-9)
    assert hoeffding_bentkus_pvalue(0.05 + 1e-12, n, a) > 0.005


@pytest.mark.parametrize(("call", "name", "error"), [
    (lambda: clopper_pearson_upper(True, 10, 0.1), "errors", TypeError),  # a flag read as one error
    (lambda: clopper_pearson_upper(0, True, 0.1), "n", TypeError),  # a flag read as one case: bound 0.9
    (lambda: hoeffding_bentkus_upper(0.1, True, 0.1), "n", TypeError),  # gave 0.9457
    (lambda: hoeffding_bentkus_pvalue(0.1, np.array([True, True]), 0.2), "n", TypeError),
    (lambda: hoeffding_bentkus_upper(0.1, 10, "0.1"), "delta", TypeError),  # "'<' not supported ..." naming nothing
    (lambda: hoeffding_bentkus_upper(0.1, 10, np.array([0.1, 0.2])), "delta", TypeError),  # "truth value ..."
    (lambda: hoeffding_bentkus_upper(0.1, 10, True), "delta", TypeError),
    (lambda: clopper_pearson_upper(1, 10, [0.1]), "delta", TypeError),
    (lambda: clopper_pearson_upper(1, 10, float("nan")), "delta", ValueError),
    (lambda: hoeffding_bentkus_upper(0.1, 10, 1.0), "delta", ValueError),
])
def test_bound_arguments_are_checked_naming_them(call, name, error):
    with pytest.raises(error, match=rf"^{name} must"):
        call()


def test_bound_delta_as_numpy_scalars():
    assert clopper_pearson_upper(2, 50, np.float32(0.1)) == pytest.approx(clopper_pearson_upper(2, 50, 0.1), rel=1e-6)
    assert hoeffding_bentkus_upper(0.02, np.int64(100), np.array(0.1)) == hoeffding_bentkus_upper(0.02, 100, 0.1)


@pytest.mark.parametrize(("call", "name"), [
    (lambda: hoeffding_bentkus_pvalue(0.1, 10, True), "alpha"),  # gave p = 0: H0 "risk > 1" rejected from a flag
    (lambda: hoeffding_bentkus_pvalue(True, 10, 0.2), "risk_hat"),
    (lambda: hoeffding_bentkus_pvalue(0.02, 100, "0.1"), "alpha"),  # the string was parsed
    (lambda: hoeffding_bentkus_pvalue(0.02, "100", 0.1), "n"),
    (lambda: hoeffding_bentkus_pvalue(0.02 + 0.5j, 100, 0.1), "risk_hat"),
    (lambda: hoeffding_bentkus_upper(True, 10, 0.1), "risk_hat"),
    (lambda: hoeffding_bentkus_upper("0.02", 100, 0.1), "risk_hat"),
    (lambda: clopper_pearson_upper("2", 50, 0.1), "errors"),
    (lambda: clopper_pearson_upper(2, "50", 0.1), "n"),
])
def test_bounds_refuse_a_flag_or_a_string_for_a_number_naming_it(call, name):
    """Hostile testing: ``alpha=True`` was read as 1 and gave the p-value 0 (a certificate from a flag), and strings
    were parsed as numbers; like a bool ``n`` or ``delta`` they are a ``TypeError`` naming the argument."""
    with pytest.raises(TypeError, match=rf"^{name} must"):
        call()


def test_hb_upper_refuses_several_mean_losses_naming_risk_hat():
    """Hostile testing: numpy's "only 0-dimensional arrays can be converted to Python scalars" named no argument."""
    with pytest.raises(ValueError, match="^risk_hat must be one mean loss"):
        hoeffding_bentkus_upper(np.array([0.1, 0.2]), 10, 0.1)


@pytest.mark.parametrize("scores", [
    np.array([0.1 + 5j, 0.9 + 0j]),  # accepted on its real part, with only numpy's ComplexWarning
    np.array(["0.1", "0.9"]),  # the strings were parsed: 0.1 accepted
    torch.tensor([0.1 + 5j, 0.9 + 0j]),
])
def test_accept_refuses_scores_that_are_no_real_numbers(scores):
    """Hostile testing: :func:`accepted_by_threshold` (and so ``RiskControlledThreshold.accept``) turned a complex
    score into its real part and parsed strings, accepting them without an error."""
    with pytest.raises(TypeError, match="^scores must hold real numbers"):
        accepted_by_threshold(scores, 0.5)


def test_accept_reads_none_in_a_list_as_an_undefined_score():
    """A missing score (``None`` in a list) is undefined and referred, as before the checks of real numbers (a list
    holding ``None`` is an object array, which the checks would otherwise refuse); a string among them is not."""
    assert accepted_by_threshold([0.1, None, 0.5, 2], 0.3).tolist() == [True, False, False, False]
    assert accepted_by_threshold(np.array([[None, 0.2]], dtype=object), 0.3).tolist() == [[False, True]]
    with pytest.raises(TypeError, match="^scores must hold real numbers"):
        accepted_by_threshold([0.1, None, "0.2"], 0.3)


def test_refer_mode_refuses_complex_calibration_scores_as_the_default_mode_does():
    """Hostile testing: ``undefined="error"`` refused complex ``uncertainty_cal`` (TypeError) but ``undefined="refer"``
    certified on the real parts."""
    u = np.linspace(0, 1, 50) + 1j
    failed = np.zeros(50)
    with pytest.raises(TypeError, match="^uncertainty_cal must hold real numbers"):
        risk_controlled_threshold(u, failed, 0.1)
    with pytest.raises(TypeError, match="^uncertainty_cal must hold real numbers"):
        risk_controlled_threshold(u, failed, 0.1, undefined="refer")
