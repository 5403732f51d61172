"""Risk-controlled referral threshold with a statistical guarantee on the risk of the accepted cases.

Methods: selective classification with guaranteed risk (Geifman & El-Yaniv 2017: *Selective Classification for
Deep Neural Networks*) and Learn then Test (Angelopoulos, Bates, Candès, Jordan, Lei 2021: *Learn then Test:
Calibrating Predictive Algorithms to Achieve Risk Control*), whose tests take the Hoeffding-Bentkus p-value (any loss
in [0, 1]) or, for 0/1 losses, the exact binomial p-value (:func:`binomial_pvalue`).

:func:`risk_controlled_threshold` picks, from calibration cases, the acceptance threshold with the largest
coverage such that, with probability at least ``1 - delta`` over the calibration draw, the selective risk of new
exchangeable cases that it accepts is at most ``target_risk``; :func:`accepted_by_threshold` is the one rule of
which cases a threshold accepts (a defined score at most the threshold; an undefined one never). See
docs/referral_threshold.md for the math.
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import special

from .._utils import ArrayLike, case_vector, real_array, share_count, to_numpy
from ..product import format_cell, format_level

__all__ = [
    "RiskControlledThreshold",
    "accepted_by_threshold",
    "risk_controlled_threshold",
    "binomial_pvalue",
    "clopper_pearson_upper",
    "hoeffding_bentkus_pvalue",
    "hoeffding_bentkus_upper",
]

_RC_METHODS = ("sgr", "ltt")
#: the p-values of LTT's tests (:func:`risk_controlled_threshold`'s ``p_value``): the first is the default
P_VALUES = ("hoeffding_bentkus", "binomial")
#: what :func:`risk_controlled_threshold` does with an undefined (non-finite) calibration uncertainty
_UNDEFINED = ("error", "refer")


def accepted_by_threshold(scores: ArrayLike, threshold: float) -> ArrayLike:
    """Which cases a risk-controlled threshold accepts: a *defined* (finite) score at most ``threshold``.

    The one rule of the package for "accepted": the certification counts an undefined score (NaN or infinite, e.g.
    ``fg_mean`` of an empty predicted foreground) as referred (:func:`risk_controlled_threshold` with
    ``undefined="refer"``), and every place that applies or reports the threshold refers it too
    (:meth:`RiskControlledThreshold.accept`, the ``risk_control`` block of ``summary.json``, the referral rule's
    decision), so the accepted set the certificate speaks of is the one the rule accepts. A threshold of ``inf``
    accepts every defined score, ``-inf`` (not certified) none. The comparison is made in float64 whatever the
    input's dtype (:meth:`RiskControlledThreshold.accept`).

    Args:
        scores: case scores (uncertainty), any shape; a numpy array, a sequence or a torch tensor.
        threshold: the acceptance threshold.

    Returns:
        A boolean mask of ``scores``' shape, in the library of the input.

    Raises:
        TypeError: ``scores`` that are not real numbers (complex, strings), or a ``threshold`` that is not one real
            number (a bool, a string, an array).
        ValueError: a NaN ``threshold`` (it accepted no case, as if the rule were not certified).

    Example:
        >>> accepted_by_threshold(np.array([0.1, 0.5, np.nan, np.inf]), math.inf).tolist()
        [True, True, False, False]
        >>> accepted_by_threshold([0.1, 0.5], 0.3).tolist()
        [True, False]
    """
    threshold = _check_threshold(threshold)
    # a complex score lost its imaginary part and a string was parsed as a number, each accepted or referred without
    # an error (found by hostile testing); risk_controlled_threshold refuses both for the calibration scores
    if isinstance(scores, torch.Tensor):
        if scores.is_complex():
            raise TypeError(f"scores must hold real numbers, got dtype {scores.dtype}")
        u = scores if scores.dtype == torch.float64 else scores.to(torch.float64)
        return torch.isfinite(u) & (u <= threshold)
    u = real_array(np.asarray(scores), "scores")  # None in a list: an undefined score (NaN)
    return np.isfinite(u) & (u <= threshold)


def _check_threshold(threshold: Any) -> float:
    """``threshold`` as a float: one real number, ``inf`` and ``-inf`` included.

    ``TypeError`` naming it for a bool (``True`` was read as the threshold 1 and accepted every score up to it), a
    string (numpy's "ufunc 'less_equal' did not contain a loop" named no argument) or an array; ``ValueError`` for NaN.
    """
    kind = "U" if isinstance(threshold, (str, bytes)) else np.asarray(threshold).dtype.kind
    if kind not in "iuf" or np.ndim(threshold) != 0:
        raise TypeError(f"threshold must be one real number (inf or -inf included), got {type(threshold).__name__} "
                        f"{threshold!r:.80}")
    t = float(threshold)
    if math.isnan(t):
        raise ValueError("threshold must be a number (inf or -inf included), got NaN")
    return t


def clopper_pearson_upper(errors: ArrayLike | float, n: ArrayLike | float, delta: float) -> np.ndarray | float:
    """One-sided ``1 - delta`` upper confidence bound on a binomial proportion (Clopper-Pearson).

    The ``b`` that solves ``P(Bin(n, b) <= errors) = delta`` (SGR's ``B*``, Geifman & El-Yaniv 2017), i.e.
    the ``1 - delta`` quantile of ``Beta(errors + 1, n - errors)``; 1 when ``errors == n`` and, by convention, 1
    when ``n == 0`` (nothing observed).

    Args:
        errors: number of errors, scalar or array.
        n: number of trials, broadcasting with ``errors``.
        delta: allowed probability in (0, 1) that the bound fails.

    Returns:
        The bound, vectorised over ``errors`` and ``n``; a float for scalar input. ``ValueError`` when ``n`` is not
        a non-negative integer (NaN or 10.5 trials bound nothing) or ``errors`` is not an integer in ``[0, n]``, or
        ``delta`` is outside (0, 1); ``TypeError`` for a bool, string or complex ``errors`` / ``n`` or a ``delta``
        that is not one number.

    Example:
        >>> from monai_unc.metrics import clopper_pearson_upper
        >>> round(clopper_pearson_upper(2, 50, 0.1), 4)
        0.103
        >>> clopper_pearson_upper([0, 5], [10, 10], 0.1).round(4)
        array([0.2057, 0.7327])
    """
    e = _count_values(errors, "errors", "errors")
    nn = _check_counts(n, "n")
    delta = _check_delta(delta)
    if np.any(e < 0) or np.any(e > nn) or np.any(e != np.round(e)):
        raise ValueError("errors must be integers in [0, n]")
    full = e >= nn
    from scipy import stats  # ~1 s to import: loaded by the bounds that use it, not by every command using metrics

    with np.errstate(invalid="ignore", divide="ignore"):
        # the upper delta tail (isf), not ppf(1 - delta): 1 - delta in float64 loses a level below ~1e-16 (the union
        # bound's delta / K can be that small), which gave a bound below the exact one or a bound of 1
        ub = stats.beta.isf(delta, e + 1.0, np.where(full, 1.0, nn - e))
    ub = np.where(full, 1.0, ub)
    return float(ub) if ub.ndim == 0 else ub


def _count_values(x: ArrayLike | float, name: str, what: str) -> np.ndarray:
    """``x`` as float64; ``TypeError`` naming ``name`` for a bool (a flag read as one), text or a complex number."""
    if np.asarray(x).dtype == bool:
        raise TypeError(f"{name} must be numbers of {what} (integers), got the bool {x!r}")
    if isinstance(x, (str, bytes)) or np.asarray(x).dtype.kind not in "iuf":
        raise TypeError(f"{name} must be numbers of {what} (integers), got {type(x).__name__} {x!r}")
    return np.asarray(x, dtype=np.float64)


def _check_counts(n: ArrayLike | float, name: str) -> np.ndarray:
    """``n`` as float64, ``ValueError`` naming ``name`` unless every entry is a finite integer ``>= 0``.

    A bool is a ``TypeError`` (``True`` read as one case bounded a risk from a flag), and so are a string (``"10"`` was
    parsed) and a complex number.
    """
    nn = _count_values(n, name, "cases")
    if not np.isfinite(nn).all() or np.any(nn < 0) or np.any(nn != np.round(nn)):
        raise ValueError(f"{name} must be non-negative integers (numbers of cases), got {n!r}")
    return nn


def _check_delta(delta: Any) -> float:
    """``delta`` as a float in (0, 1).

    ``TypeError`` naming it for a non-number (a bool, a string, an array of several values), ``ValueError`` outside
    (0, 1) (NaN included).
    """
    a = None if isinstance(delta, (str, bytes)) else np.asarray(delta)
    if a is None or a.ndim != 0 or a.dtype.kind not in "iuf":
        raise TypeError(f"delta must be one number in (0, 1), got {type(delta).__name__} {delta!r}")
    d = float(a)
    if not 0 < d < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return d


def _check_unit(x: ArrayLike | float, name: str) -> np.ndarray:
    """``x`` as float64, ``ValueError`` naming ``name`` unless every entry is finite and in [0, 1].

    ``TypeError`` naming ``name`` for what is no real number: a bool (``alpha=True`` was read as 1 and gave the
    p-value 0, a certificate from a flag; found by hostile testing), a string (``"0.1"`` was parsed) or a complex
    number.
    """
    kind = "U" if isinstance(x, (str, bytes)) else np.asarray(x).dtype.kind
    if kind not in "iuf":
        raise TypeError(f"{name} must be real numbers in [0, 1], got {type(x).__name__} {x!r}")
    a = np.asarray(x, dtype=np.float64)
    if not np.isfinite(a).all() or np.any(a < 0) or np.any(a > 1):
        raise ValueError(f"{name} must lie in [0, 1], got {x!r}")
    return a


def _bernoulli_kl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``h1(a, b) = a log(a / b) + (1 - a) log((1 - a) / (1 - b))`` with ``0 log 0 = 0``."""
    return special.rel_entr(a, b) + special.rel_entr(1.0 - a, 1.0 - b)


def hoeffding_bentkus_pvalue(
    risk_hat: ArrayLike | float, n: ArrayLike | float, alpha: ArrayLike | float
) -> np.ndarray | float:
    """Hoeffding-Bentkus p-value for ``H0: E[loss] > alpha`` from the mean ``risk_hat`` of ``n`` losses in [0, 1].

    ``p = min( exp(-n h1(min(risk_hat, alpha), alpha)),  e * P(Bin(n, alpha) <= ceil(n risk_hat)) )`` with
    ``h1`` the Bernoulli KL divergence (Bates, Angelopoulos, Lei, Malik, Jordan 2021: *Distribution-Free,
    Risk-Controlling Prediction Sets*; used by Learn-then-Test, Angelopoulos et al. 2021). Valid for any losses
    bounded in [0, 1] (not only 0/1).

    Args:
        risk_hat: mean loss of the ``n`` cases.
        n: number of cases (``n == 0`` gives 1).
        alpha: the risk level of the null hypothesis.

    Returns:
        The p-value, vectorised; a float for scalar input. ``ValueError`` naming the argument when ``risk_hat`` or
        ``alpha`` is outside [0, 1] or ``n`` is not a non-negative integer (a mean loss outside [0, 1] would give a
        p-value of 0, a certificate from nothing); ``TypeError`` naming it for a bool, string or complex ``risk_hat``,
        ``n`` or ``alpha``.

    Example:
        >>> from monai_unc.metrics import hoeffding_bentkus_pvalue
        >>> round(hoeffding_bentkus_pvalue(0.02, 100, 0.1), 4)
        0.0053
    """
    p = _hb_pvalue(_check_unit(risk_hat, "risk_hat"), _check_counts(n, "n"), _check_unit(alpha, "alpha"))
    return float(p) if p.ndim == 0 else p


def _hb_pvalue(r: np.ndarray, nn: np.ndarray, a: np.ndarray) -> np.ndarray:
    """:func:`hoeffding_bentkus_pvalue` on checked float64 arrays (the root-finding and the batch core)."""
    hoeffding = np.exp(-nn * _bernoulli_kl(np.minimum(r, a), a))
    from scipy import stats  # ~1 s to import: loaded by the bounds that use it, not by every command using metrics

    k = share_count(r, nn)  # ceil(n r): n * mean can land a few ulps above an integer, and nothing more is absorbed
    bentkus = math.e * stats.binom.cdf(k, nn, a)
    return np.where(nn > 0, np.minimum(np.minimum(hoeffding, bentkus), 1.0), 1.0)


def binomial_pvalue(
    risk_hat: ArrayLike | float, n: ArrayLike | float, alpha: ArrayLike | float
) -> np.ndarray | float:
    """Exact binomial p-value for ``H0: P(loss = 1) > alpha`` from the failure rate ``risk_hat`` of ``n`` 0/1 losses.

    ``p = P(Bin(n, alpha) <= n risk_hat)``: under ``H0`` the number of failures is ``Bin(n, r)`` with ``r > alpha``,
    stochastically larger than ``Bin(n, alpha)``, so ``P(p <= t) <= t``. Valid only for losses that are exactly 0 or 1
    (Bernoulli); for them it is never larger than :func:`hoeffding_bentkus_pvalue` (whose Bentkus term is ``e`` times
    this tail, and whose Hoeffding term is a Chernoff bound on it), so a test at level ``d`` rejects at least as often.
    ``p <= d`` exactly when the Clopper-Pearson bound :func:`clopper_pearson_upper` at level ``d`` is ``<= alpha``.

    Args:
        risk_hat: failure rate of the ``n`` cases (failures / ``n``): ``n risk_hat`` must be an integer.
        n: number of cases (``n == 0`` gives 1).
        alpha: the risk level of the null hypothesis.

    Returns:
        The p-value, vectorised; a float for scalar input. ``ValueError`` naming the argument when ``risk_hat`` or
        ``alpha`` is outside [0, 1], ``n`` is not a non-negative integer, or ``n risk_hat`` is not a whole number of
        failures (a mean of losses that are not 0/1); ``TypeError`` naming it for a bool, string or complex argument.

    Example:
        >>> from monai_unc.metrics import binomial_pvalue, hoeffding_bentkus_pvalue
        >>> round(binomial_pvalue(0.02, 100, 0.1), 4), round(hoeffding_bentkus_pvalue(0.02, 100, 0.1), 4)
        (0.0019, 0.0053)
    """
    r, nn, a = _check_unit(risk_hat, "risk_hat"), _check_counts(n, "n"), _check_unit(alpha, "alpha")
    x = r * nn
    # a few ulps off an integer is rounding of failures / n (0.3 * 10); more is a mean of losses that are not 0/1
    if np.any(np.abs(x - np.round(x)) > 4.0 * np.finfo(np.float64).eps * np.maximum(nn, 1.0)):
        raise ValueError(f"risk_hat must be a number of failures over n (a mean of 0/1 losses) for the binomial "
                         f"p-value, got risk_hat {risk_hat!r:.80} with n {n!r:.40}")
    p = _binom_pvalue(r, nn, a)
    return float(p) if p.ndim == 0 else p


def _binom_pvalue(r: np.ndarray, nn: np.ndarray, a: np.ndarray) -> np.ndarray:
    """:func:`binomial_pvalue` on checked float64 arrays (the batch core): ``P(Bin(n, a) <= n r)``, 1 for ``n = 0``."""
    from scipy import stats  # ~1 s to import: loaded by the bounds that use it, not by every command using metrics

    k = share_count(r, nn)  # the number of failures (n * mean lands within ulps of it)
    return np.where(nn > 0, np.minimum(stats.binom.cdf(k, nn, a), 1.0), 1.0)


def hoeffding_bentkus_upper(risk_hat: float, n: int, delta: float) -> float:
    """Upper confidence bound from the Hoeffding-Bentkus p-value: ``inf {alpha : p(risk_hat, n, alpha) <= delta}``.

    The p-value decreases in ``alpha`` above ``risk_hat``, so the bound is the root of ``p - delta`` on
    ``(risk_hat, 1)``, found with ``scipy.optimize.brentq`` and moved up by at most a few 1e-12 so that the
    p-value at the bound is ``<= delta`` (brentq's answer may lie on either side of the root).

    Args:
        risk_hat: mean loss of the ``n`` cases, in [0, 1].
        n: number of cases.
        delta: allowed probability in (0, 1) that the bound fails.

    Returns:
        The bound as a float; 1 when ``risk_hat == 1`` or ``n == 0``. ``ValueError`` naming the argument when
        ``risk_hat`` is not one number in [0, 1], ``n`` is not a non-negative integer or ``delta`` is outside (0, 1);
        ``TypeError`` for a bool ``risk_hat`` or ``n`` or a ``delta`` that is not one number.

    Example:
        >>> from monai_unc.metrics import hoeffding_bentkus_upper
        >>> round(hoeffding_bentkus_upper(0.02, 100, 0.1), 4)
        0.0656
    """
    delta = _check_delta(delta)
    r = _check_unit(risk_hat, "risk_hat")
    if r.ndim:  # numpy's "only 0-dimensional arrays can be converted" named no argument (found by hostile testing)
        raise ValueError(f"risk_hat must be one mean loss, got {risk_hat!r}")
    r = float(r)
    nn = _check_counts(n, "n")
    if nn.ndim:
        raise ValueError(f"n must be one number of cases, got {n!r}")
    if nn == 0 or r >= 1.0:
        return 1.0

    def f(a: float) -> float:
        return float(_hb_pvalue(np.float64(r), nn, np.float64(a))) - delta

    lo, hi = r, 1.0 - 1e-15
    if f(hi) > 0:
        return 1.0
    from scipy import optimize  # loaded by the bound that uses it (with scipy.stats above)

    root = float(optimize.brentq(f, lo, hi, xtol=1e-12, rtol=1e-12))
    # brentq's answer is within its tolerance of the root on either side; an upper bound must not lie below it (a
    # bound 1e-12 under the root claimed a little more than the p-value certifies), so step up until p <= delta
    step = 1e-12 * (1.0 + root)
    while f(root) > 0 and root < hi:
        root = min(root + step, hi)
        step *= 2.0
    return root


@dataclass(frozen=True)
class RiskControlledThreshold:
    """Result of :func:`risk_controlled_threshold`.

    Attributes:
        threshold: accept a new case iff its uncertainty is defined and ``<= threshold`` (:meth:`accept`,
            :func:`accepted_by_threshold`). It is the largest float below the smallest *refused* defined calibration
            uncertainty (``+inf`` when every case with a defined uncertainty is accepted, ``-inf`` when none is:
            ``feasible=False``, refer everything).
        coverage: fraction of calibration cases accepted; ``n_accepted`` of ``n_calibration`` (every calibration
            case, those with an undefined uncertainty included: they are referred).
        risk: empirical selective risk of the accepted calibration cases (NaN when none is accepted).
        bound: upper confidence bound on the selective risk at the chosen threshold: SGR's Clopper-Pearson bound
            at level ``delta / n_candidates`` (valid simultaneously over all candidates), or LTT's upper bound at the
            level the chosen candidate was tested at, from its p-value (Hoeffding-Bentkus, or with
            ``p_value="binomial"`` the Clopper-Pearson bound) (``<= target_risk``; LTT's guarantee itself is
            ``risk <= target_risk``). When infeasible: the smallest such bound over the candidates at the levels they
            were tested at (``> target_risk``), i.e. how far the calibration set is from certifying the target.
        feasible: False when no candidate threshold satisfies the target (then ``threshold == -inf``).
        method: ``"sgr"`` or ``"ltt"``.
        target_risk: the guaranteed risk level.
        delta: the allowed failure probability.
        n_candidates: the number of thresholds tested.
        n_undefined: the calibration cases with an undefined uncertainty (``undefined="refer"``), counted as
            referred.
        p_value: the p-value of LTT's tests, ``"hoeffding_bentkus"`` or ``"binomial"`` (SGR: ``"hoeffding_bentkus"``,
            the default, unused).

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import risk_controlled_threshold
        >>> rng = np.random.default_rng(0)
        >>> u = rng.random(400)  # calibration cases: errors become likelier with uncertainty
        >>> failed = (rng.random(400) < 0.3 * u**2).astype(float)
        >>> res = risk_controlled_threshold(u, failed, target_risk=0.1, delta=0.1)
        >>> res.feasible, res.n_accepted, res.n_calibration
        (True, 241, 400)
        >>> res.accept(np.array([0.05, 0.9]))
        array([ True, False])
    """

    threshold: float
    coverage: float
    risk: float
    bound: float
    feasible: bool
    method: str
    target_risk: float
    delta: float
    n_accepted: int
    n_calibration: int
    n_candidates: int
    n_undefined: int = 0
    p_value: str = P_VALUES[0]

    def accept(self, uncertainty: ArrayLike) -> ArrayLike:
        """Boolean mask of the cases to accept (defined and ``uncertainty <= threshold``), in the library of the input.

        :func:`accepted_by_threshold`: an undefined uncertainty (NaN or infinite) is referred, as the certification
        counted it. The comparison is made in float64 whatever the input's dtype: ``threshold`` is the largest
        float64 below the first refused calibration value, and rounding it to float32 (what a float32 array or
        tensor compared with a Python float does) would give that refused value back and accept it, and with it every
        new case tied with it (a discrete score, e.g. a voxel count, ties often).

        Args:
            uncertainty: case uncertainties, any shape (NaN or infinite: referred).

        Returns:
            A boolean mask of the same shape.
        """
        return accepted_by_threshold(uncertainty, self.threshold)


def _min_certifiable(alpha: float, delta: float) -> int:
    """Fewest accepted cases that can certify risk <= alpha at level delta (all losses 0): (1 - alpha)^n <= delta.

    Both the Clopper-Pearson bound ``1 - delta^(1/n)`` and the HB p-value ``(1 - alpha)^n`` need this many, so
    smaller acceptance sets are never candidates (a data-independent choice that costs no power). A subnormal
    ``alpha`` makes the ratio overflow to ``inf``: no calibration set certifies it (``math.ceil(inf)`` raised an
    ``OverflowError`` in earlier versions), so the count is one that no calibration set reaches.
    """
    need = math.log(delta) / math.log1p(-alpha)
    if math.isinf(need):
        return sys.maxsize
    return max(1, math.ceil(need - 1e-9))


def _candidate_ranks(m: int, alpha: float, delta: float, n_candidates: int | None) -> np.ndarray:
    """Ranks ``k`` (accept the k least uncertain cases) tested, ascending; depends only on ``m, alpha, delta``."""
    lo = _min_certifiable(alpha, delta)
    if lo > m:
        return np.zeros(0, dtype=np.int64)
    if n_candidates is None or n_candidates >= m - lo + 1:
        return np.arange(lo, m + 1, dtype=np.int64)
    # from the top, so that a single candidate asks "can every case be accepted?"
    return np.unique(np.round(np.linspace(m, lo, n_candidates)).astype(np.int64))


def _risk_control_batch(
    uncertainty: np.ndarray,
    risk: np.ndarray,
    alpha: float,
    delta: float,
    method: str,
    n_candidates: int | None,
    with_bound: bool = True,
    sequence: str = "fallback",
    p_value: str = P_VALUES[0],
) -> dict[str, np.ndarray]:
    """Vectorised core over ``R`` independent calibration sets: ``uncertainty``, ``risk`` ``(R, m)``.

    For rank ``k`` the rule accepts every case with ``u <= u_(k)`` (the k-th smallest; a tie group enters whole),
    i.e. ``u < t_k`` with ``t_k`` the next larger calibration value (``+inf`` past the last). Returns per row:
    ``n_accepted`` (0 = infeasible), ``cut`` (``t_k``; ``-inf`` when infeasible), ``loss_sum``, ``bound``,
    ``n_candidates``. ``with_bound=False`` skips LTT's bound (NaN; for many-split simulations). ``p_value``: LTT's
    p-value (``"binomial"`` assumes 0/1 ``risk``; the caller checks it).
    """
    binomial = method == "ltt" and p_value == "binomial"
    n_rows, m = uncertainty.shape
    order = np.argsort(uncertainty, axis=1, kind="stable")
    u = np.take_along_axis(uncertainty, order, axis=1)
    prefix = np.concatenate([np.zeros((n_rows, 1)), np.cumsum(np.take_along_axis(risk, order, axis=1), axis=1)], 1)
    ranks = _candidate_ranks(m, alpha, delta, n_candidates)
    n_cand = ranks.size
    rows = np.arange(n_rows)[:, None]
    out = {
        "n_accepted": np.zeros(n_rows, dtype=np.int64),
        "cut": np.full(n_rows, -np.inf),
        "loss_sum": np.zeros(n_rows),
        "bound": np.ones(n_rows),
        "n_candidates": np.full(n_rows, n_cand, dtype=np.int64),
    }
    if n_cand == 0:
        # the calibration set is too small to certify the target even with zero observed risk: judge full coverage
        full = prefix[:, -1]
        if method == "sgr" or binomial:  # the exact binomial bound: SGR's, and that of LTT's binomial p-value
            out["bound"] = np.asarray(clopper_pearson_upper(np.round(full), np.full(n_rows, m), delta))
        else:
            out["bound"] = np.array([hoeffding_bentkus_upper(f / m, m, delta) for f in full])
        return out
    # accepted count per candidate: the whole tie group of the k-th smallest value (vectorised searchsorted)
    v = u[:, ranks - 1]  # (R, K)
    n_acc = np.stack([np.searchsorted(u[i], v[i], side="right") for i in range(n_rows)])
    loss = prefix[rows, n_acc]
    if method == "sgr":
        ub = clopper_pearson_upper(np.round(loss), n_acc, delta / n_cand)
        ok = ub <= alpha
        # the feasible candidate with the largest coverage (n_acc is non-decreasing in k: the last feasible one)
        any_ok = ok.any(axis=1)
        last = n_cand - 1 - np.argmax(ok[:, ::-1], axis=1)
        pick = np.where(any_ok, last, np.argmin(ub, axis=1))
        bound = ub[np.arange(n_rows), pick]
    else:
        pv = (_binom_pvalue if binomial else _hb_pvalue)(loss / n_acc, n_acc.astype(np.float64), np.float64(alpha))
        # Wiens' fallback procedure over increasing k: candidate j is tested at w_j delta plus the level of
        # candidate j - 1 if that one was rejected. Fixed-sequence testing is w = (1, 0, ..., 0).
        w = np.r_[1.0, np.zeros(n_cand - 1)] if sequence == "fixed" else np.full(n_cand, 1.0 / n_cand)
        levels = np.zeros((n_rows, n_cand))
        rejected = np.zeros((n_rows, n_cand), dtype=bool)
        level = np.zeros(n_rows)
        prev = np.zeros(n_rows, dtype=bool)
        for j in range(n_cand):
            level = w[j] * delta + np.where(prev, level, 0.0)
            prev = (level > 0) & (pv[:, j] <= level)
            levels[:, j], rejected[:, j] = level, prev
        any_ok = rejected.any(axis=1)
        # every rejected H0 is false with probability >= 1 - delta: take the largest coverage among them
        pick = np.where(any_ok, n_cand - 1 - np.argmax(rejected[:, ::-1], axis=1), 0)
        bound = np.full(n_rows, np.nan)
        if with_bound and binomial:  # inf {a : P(Bin(n, a) <= e) <= level}: the Clopper-Pearson bound at that level
            for i in range(n_rows):
                js = [pick[i]] if any_ok[i] else range(n_cand)
                bound[i] = min(float(clopper_pearson_upper(np.round(loss[i, j]), n_acc[i, j], levels[i, j]))
                               if levels[i, j] > 0 else 1.0 for j in js)
        elif with_bound:
            for i in range(n_rows):
                js = [pick[i]] if any_ok[i] else range(n_cand)  # infeasible: the best bound at its tested level
                bound[i] = min(
                    hoeffding_bentkus_upper(loss[i, j] / n_acc[i, j], int(n_acc[i, j]), levels[i, j])
                    if levels[i, j] > 0 else 1.0
                    for j in js
                )
    sel_n = n_acc[np.arange(n_rows), pick]
    out["n_accepted"] = np.where(any_ok, sel_n, 0)
    cut = np.where(sel_n < m, u[np.arange(n_rows), np.minimum(sel_n, m - 1)], np.inf)
    out["cut"] = np.where(any_ok, cut, -np.inf)
    out["loss_sum"] = np.where(any_ok, loss[np.arange(n_rows), pick], 0.0)
    out["bound"] = bound
    return out


def risk_controlled_threshold(
    uncertainty_cal: ArrayLike,
    risk_cal: ArrayLike,
    target_risk: float,
    delta: float = 0.1,
    method: str = "sgr",
    n_candidates: int | None = 20,
    sequence: str = "fallback",
    undefined: str = "error",
    p_value: str = P_VALUES[0],
) -> RiskControlledThreshold:
    """Referral threshold with a statistical guarantee on the selective risk of the accepted cases.

    Returns the acceptance threshold ``tau`` on case uncertainty (accept ``u <= tau``, refer the rest) with the
    largest calibration coverage among those for which, with probability at least ``1 - delta`` over the draw of
    the calibration set,

        R(tau) = E[ risk | u <= tau ] <= target_risk          (for a new case exchangeable with the calibration set)

    Candidates are the rules "accept the k least uncertain calibration cases" (a tie group enters whole) for
    ``n_candidates`` ranks ``k`` spread evenly from the smallest that could certify the target at all
    (``(1 - target)^k <= delta``) to ``N`` (every rank in that range with ``n_candidates=None``). Conditional on
    the first refused value, the accepted cases are i.i.d. from the accepted region, so each candidate is a
    fixed-size test of ``H0_k: R_k > target_risk``:

    - ``"sgr"`` (selection with guaranteed risk, Geifman & El-Yaniv 2017): 0/1 risk (e.g. ``dice < 0.8``);
      Clopper-Pearson upper bound ``B*(errors, n_k, delta / K)`` of the binomial tail, a union (Bonferroni) bound
      over the ``K`` candidates; the largest coverage with ``B* <= target_risk`` is returned. (The paper's binary
      search tests ``log2 N`` thresholds chosen on the data; the union over every candidate is valid as stated.)
    - ``"ltt"`` (Learn-then-Test, Angelopoulos et al. 2021): any risk in [0, 1] (e.g. ``1 - Dice``); the
      Hoeffding-Bentkus p-value of each ``H0_k``, tested along the data-independent sequence of increasing
      coverage with family-wise error <= ``delta``; the largest rejected candidate is returned.
      ``sequence="fixed"``: fixed-sequence testing (every test at level ``delta``, stop at the first
      non-rejection). ``sequence="fallback"`` (default): Wiens' fallback procedure, which gives each of the ``K``
      tests ``delta / K`` and passes the level of a rejected test on to the next, so one noisy small-sample test
      at the start does not stop the sequence (fixed-sequence testing refers every case in about a third of
      the calibration draws of a cohort with 2 % failures, a 10 % target and ``delta = 0.1``;
      docs/referral_threshold.md). ``p_value="binomial"``: for a 0/1 risk, each test takes the exact binomial
      p-value ``P(Bin(n_k, target) <= errors_k)`` (:func:`binomial_pvalue`) instead of the Hoeffding-Bentkus one,
      never larger, so LTT certifies at least as much coverage with the same guarantee.

    A case whose uncertainty is undefined (NaN or infinite, e.g. ``fg_mean`` of an empty predicted foreground) is
    never accepted (:func:`accepted_by_threshold`). With ``undefined="refer"`` such calibration cases are counted as
    referred: the candidates and their bounds are those of the ``N_d`` cases with a defined uncertainty (the grid of
    ranks that of ``N_d``), and the coverage is over all ``N``. Conditional on which calibration cases have a defined
    uncertainty (observable on a new case too), those cases are exchangeable draws from the cases with a defined
    uncertainty, so the guarantee holds for ``E[risk | uncertainty defined and <= tau]``, the risk of the cases the
    rule accepts. (Counting them as accepted, e.g. by filling them above every defined value, would certify a
    set the rule does not accept: when they are easy cases, the accepted cases' risk then exceeds the target.)

    Args:
        uncertainty_cal: ``(N,)`` case uncertainty of the calibration cases (larger = referred first); non-finite
            values only with ``undefined="refer"``.
        risk_cal: ``(N,)`` per-case risk in [0, 1]; 0/1 for ``"sgr"``.
        target_risk: the risk level ``alpha`` in (0, 1) to guarantee.
        delta: allowed probability in (0, 1) that the guarantee fails (over the calibration draw).
        method: ``"sgr"`` or ``"ltt"``.
        n_candidates: how many ranks to test (evenly spaced; the grid depends only on ``N``, ``target_risk`` and
            ``delta``, never on the data). Fewer candidates mean a smaller union penalty for SGR and fewer chances
            for LTT's sequence to stop on a noisy small-sample test, at the price of a coarser threshold (steps of
            about ``N / n_candidates`` cases). ``None``: every rank. Default 20.
        sequence: LTT's multiple-testing procedure: ``"fallback"`` (default) or ``"fixed"`` (ignored by SGR).
        undefined: ``"error"`` (default): a non-finite ``uncertainty_cal`` is a ``ValueError``; ``"refer"``: it marks
            an undefined uncertainty, counted as referred (above). With no defined uncertainty at all nothing is
            certified (``feasible=False``, ``bound=1``).
        p_value: the p-value of LTT's tests: ``"hoeffding_bentkus"`` (default; valid for any risk in [0, 1]) or
            ``"binomial"`` (exact, for a 0/1 risk only: a ``risk_cal`` with another value is a ``ValueError``, and
            so is ``"binomial"`` with ``method="sgr"``, whose Clopper-Pearson bound is already the binomial one).
            Chosen before seeing the data: the binomial p-value is valid because the risk *is* 0/1 by its definition
            (e.g. ``dice < 0.8``), not because the calibration values happen to be.

    Returns:
        :class:`RiskControlledThreshold`. When no candidate certifies the target, ``feasible=False``,
        ``threshold=-inf`` (refer every case), ``coverage=0``, ``risk=NaN``, with a ``UserWarning``.

    Assumes the calibration and future cases are exchangeable (same distribution, same model, same uncertainty
    definition) and continuous uncertainties (ties are accepted or referred together, which the proof does not
    cover exactly). See docs/referral_threshold.md.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import risk_controlled_threshold
        >>> rng = np.random.default_rng(0)
        >>> u = rng.random(400)  # calibration cases: errors become likelier with uncertainty
        >>> failed = (rng.random(400) < 0.3 * u**2).astype(float)
        >>> res = risk_controlled_threshold(u, failed, target_risk=0.1, delta=0.1)
        >>> res.feasible, round(res.threshold, 3), round(res.coverage, 3)
        (True, 0.653, 0.603)
        >>> round(res.risk, 3), round(res.bound, 3)
        (0.05, 0.098)
        >>> ltt = risk_controlled_threshold(u, failed, target_risk=0.1, delta=0.1, method="ltt")
        >>> round(ltt.coverage, 3)
        0.603
        >>> exact = risk_controlled_threshold(u, failed, target_risk=0.1, delta=0.1, method="ltt", p_value="binomial")
        >>> exact.p_value, exact.coverage >= ltt.coverage
        ('binomial', True)
    """
    res = risk_controlled_threshold_core(uncertainty_cal, risk_cal, target_risk, delta, method, n_candidates,
                                         sequence, undefined, p_value)
    if not res.feasible:
        warnings.warn(no_certificate_message(res), UserWarning, stacklevel=2)
    return res


def no_certificate_message(res: RiskControlledThreshold) -> str:
    """The warning of :func:`risk_controlled_threshold` when no threshold certifies the target (``res.feasible`` False).

    Args:
        res: the result that certifies nothing.

    Returns:
        One line naming the target, the level, the calibration cases and the best bound.

    Example:
        >>> import numpy as np
        >>> res = risk_controlled_threshold_core(np.arange(4.0), np.ones(4), target_risk=0.1)
        >>> no_certificate_message(res)[:70]
        'risk_controlled_threshold: no threshold certifies selective risk <= 0.'
    """
    why = f" ({res.n_undefined} of them with an undefined uncertainty, counted as referred)" if res.n_undefined else ""
    return (f"risk_controlled_threshold: no threshold certifies selective risk <= {res.target_risk:g} with probability "
            f"{format_level(res.delta)} on these {res.n_calibration} calibration cases{why} (best bound "
            f"{format_cell(res.bound, 4, res.target_risk)}); refer every case")


def risk_controlled_threshold_core(
    uncertainty_cal: ArrayLike,
    risk_cal: ArrayLike,
    target_risk: float,
    delta: float = 0.1,
    method: str = "sgr",
    n_candidates: int | None = 20,
    sequence: str = "fallback",
    undefined: str = "error",
    p_value: str = P_VALUES[0],
) -> RiskControlledThreshold:
    """:func:`risk_controlled_threshold` without its warning (callers that say or record an infeasible target).

    The same arguments, checks and result; when no threshold certifies the target the result has
    ``feasible=False`` and nothing is warned (:func:`no_certificate_message` gives the public function's line).

    Example:
        >>> import numpy as np
        >>> res = risk_controlled_threshold_core(np.arange(4.0), np.ones(4), target_risk=0.1)
        >>> res.feasible, res.coverage
        (False, 0.0)
    """
    if undefined not in _UNDEFINED:
        raise ValueError(f"undefined must be one of {_UNDEFINED}, got {undefined!r}")
    if undefined == "refer":
        u = to_numpy(uncertainty_cal, "uncertainty_cal")
        # complex: the cast to float64 dropped the imaginary part (found by hostile testing), as case_vector refuses
        if u.dtype.kind not in "biuf":
            raise TypeError(f"uncertainty_cal must hold real numbers, got dtype {u.dtype}")
        if u.ndim != 1 or u.size == 0:
            raise ValueError(f"uncertainty_cal must be 1-D and non-empty (one value per case), got shape {u.shape}")
        u = u.astype(np.float64)
    else:
        u = case_vector(uncertainty_cal, "uncertainty_cal")
    r = case_vector(risk_cal, "risk_cal")
    if u.shape != r.shape:
        raise ValueError(f"uncertainty_cal and risk_cal must have the same length, got {u.size} and {r.size}")
    if method not in _RC_METHODS:
        raise ValueError(f"method must be one of {_RC_METHODS}, got {method!r}")
    if r.min() < 0 or r.max() > 1:
        raise ValueError(f"risk_cal must lie in [0, 1], got values in [{r.min():.4g}, {r.max():.4g}]")
    if method == "sgr" and not np.isin(r, (0.0, 1.0)).all():
        raise ValueError(
            "method='sgr' needs a 0/1 risk_cal (e.g. dice < 0.8); use method='ltt' for a continuous risk in [0, 1]"
        )
    if isinstance(p_value, str) and p_value in P_VALUES:
        if p_value == "binomial" and method != "ltt":
            raise ValueError("p_value='binomial' is a p-value of method='ltt'; method='sgr' bounds the 0/1 risk with "
                             "the binomial (Clopper-Pearson) bound already")
        if p_value == "binomial" and not np.isin(r, (0.0, 1.0)).all():
            bad = float(r[~np.isin(r, (0.0, 1.0))][0])
            raise ValueError(f"p_value='binomial' needs a 0/1 risk_cal (e.g. dice < 0.8), got the loss {bad:.6g}; use "
                             "p_value='hoeffding_bentkus' for a risk in [0, 1]")
    else:
        raise ValueError(f"p_value must be one of {P_VALUES}, got {p_value!r:.80}")
    for name, val in (("target_risk", target_risk), ("delta", delta)):
        if isinstance(val, (bool, np.bool_)) or not isinstance(val, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number in (0, 1), got {type(val).__name__} {val!r:.80}")
        if not 0 < float(val) < 1:
            raise ValueError(f"{name} must be a number in (0, 1), got {val!r}")
    if n_candidates is not None and (
        isinstance(n_candidates, bool) or not isinstance(n_candidates, (int, np.integer)) or n_candidates < 1
    ):
        raise ValueError(f"n_candidates must be a positive integer or None, got {n_candidates!r}")
    if sequence not in ("fallback", "fixed"):
        raise ValueError(f"sequence must be 'fallback' or 'fixed', got {sequence!r}")
    alpha, delta = float(target_risk), float(delta)
    m = u.size
    defined = np.isfinite(u)
    n_und = int(m - defined.sum())
    ud, rd = u[defined], r[defined]  # the undefined cases are referred: never in a candidate's accepted set
    if ud.size:
        res = _risk_control_batch(ud[None], rd[None], alpha, delta, method, n_candidates, sequence=sequence,
                                  p_value=p_value)
    else:  # nothing to certify on: CP's bound of no observation is 1
        res = {"n_accepted": np.zeros(1, np.int64), "cut": np.full(1, -np.inf), "loss_sum": np.zeros(1),
               "bound": np.ones(1), "n_candidates": np.zeros(1, np.int64)}
    n_acc = int(res["n_accepted"][0])
    cut = float(res["cut"][0])
    feasible = n_acc > 0
    if not feasible:
        threshold = -math.inf
    else:
        threshold = math.inf if cut == math.inf else float(np.nextafter(cut, -np.inf))
    return RiskControlledThreshold(
        threshold=threshold,
        coverage=n_acc / m,
        risk=float(res["loss_sum"][0] / n_acc) if feasible else math.nan,
        bound=float(res["bound"][0]),
        feasible=feasible,
        method=method,
        target_risk=alpha,
        delta=delta,
        n_accepted=n_acc,
        n_calibration=m,
        n_candidates=int(res["n_candidates"][0]),
        n_undefined=n_und,
        p_value=p_value,
    )
