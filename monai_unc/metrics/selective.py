"""Selective prediction: risk-coverage curves (AURC, E-AURC, AUGRC) and referral curves.

Case-level metrics for deciding which cases to send to a human. Every function takes one score per case
(an aggregated uncertainty, see :mod:`monai_unc.aggregation`, or a confidence) and one risk or metric
value per case, as 1-D numpy arrays or torch tensors; curves follow the input's library, areas are floats.

Risk-coverage curve (ValUES, seed 000, Appendix A.3, eqs. 5-8; conventions of fd-shifts, Jaeger et al. 2023)
---------------------------------------------------------------------------------------------------------
With confidence ``g_i`` (``g = -uncertainty``) and risk ``l_i`` (0/1 error, or ``1 - Dice`` per case), the
cases are sorted by confidence. For every threshold ``tau`` taken from the observed confidences, the
retained set is ``{i : g_i >= tau}``;

    coverage(tau)          = |retained| / N
    selective risk(tau)    = sum_{retained} l_i / |retained|
    generalized risk(tau)  = sum_{retained} l_i / N                     (AUGRC, Traub et al. 2024)

Cases with tied confidence enter (and leave) together: a curve point is emitted only where the confidence
changes. The curve starts at coverage 1 and ends with a point at coverage 0 that repeats the last selective
risk (generalized risk 0 there), exactly as fd-shifts does. Areas are trapezoids over coverage:

    AURC  = sum_t (cov_{t-1} - cov_t) (risk_{t-1} + risk_t) / 2
    E-AURC = AURC - AURC*    where AURC* is the AURC of the oracle that ranks cases by risk

Two optima are offered for E-AURC. ``"empirical"`` (default) evaluates the same trapezoid on the oracle
ranking (cases sorted by ascending risk, every case its own point), which works for 0/1 and continuous
risk. ``"closed_form"`` is fd-shifts' analytic value for 0/1 risk with error rate ``e``:
``AURC* = e + (1 - e) ln(1 - e)`` (the exact integral of the oracle's selective risk; it differs from the
empirical trapezoid by O(1/N)). fd-shifts reports areas multiplied by 1000; these functions do not.

Referral curve (RETINA, seed 002, Sec. 2.3)
-------------------------------------------
For a referral rate ``tau`` in [0, 1] the ``ceil(tau * N)`` most uncertain cases are referred to an expert
and the metric is evaluated on the retained ``N - ceil(tau * N)`` cases: either the mean of a per-case value
(Dice, accuracy, ...) or any cohort metric recomputed on the retained cases (a callable, e.g. AUROC).
The area under the referral curve is the trapezoid over ``tau``.

Risk-controlled referral threshold (Geifman & El-Yaniv 2017; Angelopoulos et al. 2021)
-------------------------------------------------------------------------------------
:func:`risk_controlled_threshold` picks, from calibration cases, the acceptance threshold with the largest
coverage such that, with probability at least ``1 - delta`` over the calibration draw, the selective risk of new
exchangeable cases that it accepts is at most ``target_risk``. See docs/referral_threshold.md for the math.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from scipy import optimize, special, stats

from .._utils import ArrayLike, to_numpy, warn_nan

__all__ = [
    "RiskCoverageCurve",
    "ReferralCurve",
    "risk_coverage_curve",
    "aurc",
    "eaurc",
    "augrc",
    "referral_curve",
    "area_under_referral_curve",
    "RiskControlledThreshold",
    "risk_controlled_threshold",
    "clopper_pearson_upper",
    "hoeffding_bentkus_pvalue",
    "hoeffding_bentkus_upper",
]

_SCORE_KINDS = ("uncertainty", "confidence")
_OPTIMA = ("empirical", "closed_form")


class RiskCoverageCurve(NamedTuple):
    """Points of a risk-coverage curve, ordered by descending coverage (1 first, 0 last).

    - ``coverage``: fraction of retained cases.
    - ``selective_risk``: mean risk of the retained cases (the last point repeats the one before it).
    - ``generalized_risk``: sum of the retained cases' risk divided by ``N`` (0 at coverage 0).
    - ``threshold``: in the units of the input scores: the retained cases are those with
      ``uncertainty <= threshold`` (or ``confidence >= threshold``); ``-inf`` (``+inf`` for confidence)
      at coverage 0.
    """

    coverage: ArrayLike
    selective_risk: ArrayLike
    generalized_risk: ArrayLike
    threshold: ArrayLike


class ReferralCurve(NamedTuple):
    """A referral curve: ``value[k]`` is the metric on the cases retained at referral rate ``tau[k]``."""

    tau: ArrayLike
    value: ArrayLike
    n_retained: ArrayLike


def _vector(x: Any, name: str) -> np.ndarray:
    """``x`` as a finite, non-empty, 1-D float64 numpy array (ValueError naming ``name`` otherwise)."""
    a = to_numpy(x, name)
    if a.dtype == bool:
        a = a.astype(np.float64)
    if not (np.issubdtype(a.dtype, np.number)):
        raise TypeError(f"{name} must hold numbers, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per case), got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty: at least one case is needed")
    a = a.astype(np.float64, copy=False)
    if not np.isfinite(a).all():
        n_bad = int((~np.isfinite(a)).sum())
        raise ValueError(f"{name} contains {n_bad} non-finite value(s) (NaN or inf)")
    return a


def _pair(scores: Any, other: Any, other_name: str) -> tuple[np.ndarray, np.ndarray]:
    s = _vector(scores, "scores")
    o = _vector(other, other_name)
    if s.shape != o.shape:
        raise ValueError(f"scores and {other_name} must have the same length, got {s.size} and {o.size}")
    return s, o


def _confidence(scores: np.ndarray, score_type: str) -> np.ndarray:
    if score_type not in _SCORE_KINDS:
        raise ValueError(f"score_type must be one of {_SCORE_KINDS}, got {score_type!r}")
    return -scores if score_type == "uncertainty" else scores


def _follow(a: np.ndarray, reference: Any) -> ArrayLike:
    """Return ``a`` in the library (and device) of ``reference``."""
    if isinstance(reference, torch.Tensor):
        return torch.from_numpy(np.ascontiguousarray(a)).to(reference.device)
    return a


def _rc_points(confidence: np.ndarray, risk: np.ndarray) -> tuple[np.ndarray, ...]:
    """fd-shifts' RC points, vectorised: O(N log N) instead of a Python loop over cases.

    Returns (coverage, selective_risk, generalized_risk, confidence_threshold), descending coverage.
    """
    n = confidence.size
    # ascending confidence, the first cases leave first; the order inside a tie group does not matter
    # because points are only emitted at group starts
    order = np.argsort(confidence)
    c = confidence[order]
    r = risk[order]
    # risk summed over the retained suffix order[k:], accumulated from the most confident end
    suffix = np.cumsum(r[::-1])[::-1]
    # a point where case k is the least confident retained case and the confidence changes
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    kept = (n - starts).astype(np.float64)
    coverage = np.r_[kept / n, 0.0]
    selective = np.r_[suffix[starts] / kept, suffix[starts[-1]] / kept[-1]]
    generalized = np.r_[suffix[starts] / n, 0.0]
    threshold = np.r_[c[starts], np.inf]
    return coverage, selective, generalized, threshold


def _trapezoid(x: np.ndarray, y: np.ndarray) -> float:
    """Area under ``y(x)`` by the trapezoid rule, integrating from the smaller to the larger ``x``.

    ``x`` must be monotone (ascending or descending); the result does not depend on the direction.
    """
    if x.size < 2:
        return 0.0
    area = float(np.sum(np.diff(x) * (y[1:] + y[:-1]) * 0.5))
    return area if x[-1] >= x[0] else -area


def risk_coverage_curve(scores: ArrayLike, risk: ArrayLike, score_type: str = "uncertainty") -> RiskCoverageCurve:
    """Risk-coverage curve of a per-case score against a per-case risk (ValUES eqs. 5-6, fd-shifts).

    Args:
        scores: ``(N,)`` one score per case: an aggregated uncertainty (larger = less confident, the
            default) or a confidence (``score_type="confidence"``).
        risk: ``(N,)`` per-case risk: 0/1 errors or a continuous loss such as ``1 - Dice``.
        score_type: ``"uncertainty"`` (confidence ``g = -score``) or ``"confidence"``.

    Returns:
        :class:`RiskCoverageCurve` with arrays of equal length (descending coverage, one point per distinct
        score plus the coverage-0 point), float64, in the library of ``scores``.

    Raises:
        ValueError: empty input, lengths differ, non-finite values, or unknown ``score_type``.
    """
    s, r = _pair(scores, risk, "risk")
    conf = _confidence(s, score_type)
    cov, sel, gen, thr = _rc_points(conf, r)
    if score_type == "uncertainty":
        thr = -thr
    return RiskCoverageCurve(*(_follow(a, scores) for a in (cov, sel, gen, thr)))


def aurc(scores: ArrayLike, risk: ArrayLike, score_type: str = "uncertainty") -> float:
    """Area under the risk-coverage curve (ValUES eq. 7): trapezoid of the selective risk over coverage.

    Lower is better; 0 when every retained case has zero risk at every coverage. For continuous risk
    ``1 - Dice`` this is ValUES' failure-detection metric. See :func:`risk_coverage_curve` for the arguments.
    """
    s, r = _pair(scores, risk, "risk")
    cov, sel, _, _ = _rc_points(_confidence(s, score_type), r)
    return _trapezoid(cov, sel)


def augrc(scores: ArrayLike, risk: ArrayLike, score_type: str = "uncertainty") -> float:
    """Area under the generalized risk-coverage curve (Traub et al. 2024, as in fd-shifts).

    The generalized risk at a coverage is the retained cases' summed risk divided by all ``N`` cases, i.e.
    the probability of a silent failure; the curve ends at (0, 0). See :func:`risk_coverage_curve`.
    """
    s, r = _pair(scores, risk, "risk")
    cov, _, gen, _ = _rc_points(_confidence(s, score_type), r)
    return _trapezoid(cov, gen)


def _optimal_aurc(risk: np.ndarray, optimum: str) -> float:
    if optimum not in _OPTIMA:
        raise ValueError(f"optimum must be one of {_OPTIMA}, got {optimum!r}")
    if optimum == "closed_form":
        if not np.isin(risk, (0.0, 1.0)).all():
            raise ValueError(
                "optimum='closed_form' needs binary (0/1) risk; use optimum='empirical' for continuous risk"
            )
        err = float(risk.mean())
        # e + (1 - e) ln(1 - e), with (1 - e) ln(1 - e) -> 0 as e -> 1
        return err + ((1.0 - err) * math.log(1.0 - err) if err < 1.0 else 0.0)
    n = risk.size
    # oracle: cases ranked by ascending risk, each case its own point: keeping the k lowest risks
    # gives coverage k / N and selective risk (sum of the k lowest) / k, for k = N .. 1, then (0, last)
    kept = np.arange(n, 0, -1, dtype=np.float64)
    sel = np.cumsum(np.sort(risk))[::-1] / kept
    cov = np.r_[kept / n, 0.0]
    return _trapezoid(cov, np.r_[sel, sel[-1]])


def eaurc(
    scores: ArrayLike, risk: ArrayLike, score_type: str = "uncertainty", optimum: str = "empirical"
) -> float:
    """Excess AURC (ValUES eq. 8, Geifman et al. 2019): ``AURC - AURC*``.

    Args:
        scores, risk, score_type: as in :func:`risk_coverage_curve`.
        optimum: ``"empirical"`` (default): ``AURC*`` is the trapezoid AURC of the oracle that ranks cases by
            ascending risk, each case its own point (works for continuous risk). ``"closed_form"``: fd-shifts'
            ``e + (1 - e) ln(1 - e)`` for 0/1 risk with error rate ``e`` (ValueError for other risk).

    With the empirical optimum E-AURC is >= 0 up to rounding, except that plateaus of tied scores can
    push the AURC below the oracle's (fd-shifts notes the same).
    """
    s, r = _pair(scores, risk, "risk")
    cov, sel, _, _ = _rc_points(_confidence(s, score_type), r)
    return _trapezoid(cov, sel) - _optimal_aurc(r, optimum)


def _n_referred(taus: np.ndarray, n: int) -> np.ndarray:
    # ceil(tau * N), robust to tau * N landing a few ulps above an integer (0.3 * 10 = 3.0000000000000004)
    return np.ceil(np.round(taus * n, 9)).astype(np.int64)


def _taus(taus: ArrayLike | Sequence[float] | None, n: int) -> np.ndarray:
    if taus is None:
        return np.arange(n, dtype=np.float64) / n  # every partition that retains at least one case
    t = to_numpy(taus, "taus").astype(np.float64, copy=False).ravel()
    if t.size == 0:
        raise ValueError("taus is empty")
    if not np.isfinite(t).all() or t.min() < 0 or t.max() > 1:
        raise ValueError(f"taus must be referral rates in [0, 1], got values in [{t.min()}, {t.max()}]")
    return t


def referral_curve(
    uncertainty: ArrayLike,
    values: ArrayLike | Callable[[np.ndarray], float],
    taus: ArrayLike | Sequence[float] | None = None,
    ties: str = "average",
) -> ReferralCurve:
    """Referral curve (RETINA, seed 002, Sec. 2.3): metric on the cases kept after referring the most uncertain.

    For each referral rate ``tau`` the ``ceil(tau * N)`` cases with the largest uncertainty are referred and
    the metric is evaluated on the other ``N - ceil(tau * N)`` cases.

    Args:
        uncertainty: ``(N,)`` per-case uncertainty (larger = referred first).
        values: either ``(N,)`` per-case values (Dice, 0/1 correctness, ...), whose mean over the retained
            cases is reported, or a callable ``fn(retained_indices) -> float`` that recomputes any cohort
            metric (e.g. AUROC) on the retained cases, given their indices into the inputs (int64 array).
        taus: referral rates in [0, 1]; default every partition that keeps at least one case,
            ``tau = k / N`` for ``k = 0 .. N-1``.
        ties: how cases tied in uncertainty are split at the referral cut. ``"average"`` (per-case values
            only): the expected mean over a uniformly random order of the tied cases, so the curve does not
            depend on case order; ``"order"``: ties are broken by case order (the earlier case is kept), the
            only choice for a callable.

    Returns:
        :class:`ReferralCurve` (``tau``, ``value``, ``n_retained``) in the library of ``uncertainty``. A rate
        that refers every case gives NaN with a ``UserWarning``.
    """
    u = _vector(uncertainty, "uncertainty")
    n = u.size
    t = _taus(taus, n)
    m = n - _n_referred(t, n)  # number of retained cases per tau
    if ties not in ("average", "order"):
        raise ValueError(f"ties must be 'average' or 'order', got {ties!r}")
    out = np.full(t.shape, np.nan, dtype=np.float64)
    ok = m > 0
    if callable(values):
        if ties != "order":
            raise ValueError("ties='average' needs per-case values; pass ties='order' with a callable")
        order = np.argsort(u, kind="stable")  # ascending uncertainty: the first m cases are kept
        for k in np.flatnonzero(ok):
            out[k] = float(values(order[: m[k]]))
    else:
        v = _vector(values, "values")
        if v.shape != u.shape:
            raise ValueError(f"uncertainty and values must have the same length, got {n} and {v.size}")
        # ties="average" does not depend on the order inside a tie group; "order" keeps the earlier case
        order = np.argsort(u, kind="stable" if ties == "order" else None)
        us, vs = u[order], v[order]
        prefix = np.r_[0.0, np.cumsum(vs)]
        mk = m[ok]
        sums = prefix[mk]
        if ties == "average":
            # the tie group [a, b) that holds the last kept case: keep (mk - a) of its (b - a) cases
            last = us[mk - 1]
            a = np.searchsorted(us, last, side="left")
            b = np.searchsorted(us, last, side="right")
            sums = prefix[a] + (mk - a) * (prefix[b] - prefix[a]) / (b - a)
        out[ok] = sums / mk
    if not ok.all():
        warn_nan(
            f"referral_curve: {int((~ok).sum())} referral rate(s) refer all {n} cases; the metric on an empty "
            "set is undefined (NaN)"
        )
    return ReferralCurve(_follow(t, uncertainty), _follow(out, uncertainty), _follow(m, uncertainty))


def area_under_referral_curve(
    uncertainty: ArrayLike,
    values: ArrayLike | Callable[[np.ndarray], float],
    taus: ArrayLike | Sequence[float] | None = None,
    ties: str = "average",
    normalize: bool = False,
) -> float:
    """Area under the referral curve (RETINA's "R-<metric> AUC"): trapezoid of the curve over ``tau``.

    Arguments as in :func:`referral_curve`. Rates that refer every case (NaN) are left out. With
    ``normalize=True`` the area is divided by the covered ``tau`` range, giving the curve's mean level on
    the metric's own scale (comparable across grids). A single usable rate gives NaN with a warning.
    """
    curve = referral_curve(uncertainty, values, taus=taus, ties=ties)
    t = to_numpy(curve.tau, "tau")
    v = to_numpy(curve.value, "value")
    keep = np.isfinite(v)
    t, v = t[keep], v[keep]
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    if t.size < 2 or t[-1] == t[0]:
        return warn_nan("area_under_referral_curve: fewer than two distinct usable referral rates")
    area = _trapezoid(t, v)
    return area / float(t[-1] - t[0]) if normalize else area


# ============================================================================ risk-controlled referral threshold

_RC_METHODS = ("sgr", "ltt")


def clopper_pearson_upper(errors: ArrayLike | float, n: ArrayLike | float, delta: float) -> np.ndarray | float:
    """One-sided ``1 - delta`` upper confidence bound on a binomial proportion (Clopper-Pearson).

    The ``b`` that solves ``P(Bin(n, b) <= errors) = delta`` (SGR's ``B*``, Geifman & El-Yaniv 2017), i.e.
    the ``1 - delta`` quantile of ``Beta(errors + 1, n - errors)``; 1 when ``errors == n`` and, by convention, 1
    when ``n == 0`` (nothing observed). Vectorised over ``errors`` and ``n``; a float for scalar input.
    """
    e = np.asarray(errors, dtype=np.float64)
    nn = np.asarray(n, dtype=np.float64)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if np.any(e < 0) or np.any(e > nn) or np.any(e != np.round(e)):
        raise ValueError("errors must be integers in [0, n]")
    full = e >= nn
    with np.errstate(invalid="ignore", divide="ignore"):
        ub = stats.beta.ppf(1.0 - delta, e + 1.0, np.where(full, 1.0, nn - e))
    ub = np.where(full, 1.0, ub)
    return float(ub) if ub.ndim == 0 else ub


def _bernoulli_kl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``h1(a, b) = a log(a / b) + (1 - a) log((1 - a) / (1 - b))`` with ``0 log 0 = 0``."""
    return special.rel_entr(a, b) + special.rel_entr(1.0 - a, 1.0 - b)


def hoeffding_bentkus_pvalue(
    risk_hat: ArrayLike | float, n: ArrayLike | float, alpha: ArrayLike | float
) -> np.ndarray | float:
    """Hoeffding-Bentkus p-value for ``H0: E[loss] > alpha`` from the mean ``risk_hat`` of ``n`` losses in [0, 1].

    ``p = min( exp(-n h1(min(risk_hat, alpha), alpha)),  e * P(Bin(n, alpha) <= ceil(n risk_hat)) )`` with
    ``h1`` the Bernoulli KL divergence (Bates et al. 2021; used by Learn-then-Test, Angelopoulos et al. 2021).
    Valid for any losses bounded in [0, 1] (not only 0/1). ``n == 0`` gives 1. Vectorised.
    """
    r = np.asarray(risk_hat, dtype=np.float64)
    nn = np.asarray(n, dtype=np.float64)
    a = np.asarray(alpha, dtype=np.float64)
    hoeffding = np.exp(-nn * _bernoulli_kl(np.minimum(r, a), a))
    k = np.ceil(np.round(nn * r, 9))  # n * mean can land a few ulps above an integer
    bentkus = math.e * stats.binom.cdf(k, nn, a)
    p = np.where(nn > 0, np.minimum(np.minimum(hoeffding, bentkus), 1.0), 1.0)
    return float(p) if p.ndim == 0 else p


def hoeffding_bentkus_upper(risk_hat: float, n: int, delta: float) -> float:
    """Upper confidence bound from the Hoeffding-Bentkus p-value: ``inf {alpha : p(risk_hat, n, alpha) <= delta}``.

    The p-value decreases in ``alpha`` above ``risk_hat``, so the bound is the root of ``p - delta`` on
    ``(risk_hat, 1)``, found with ``scipy.optimize.brentq``. 1 when ``risk_hat == 1`` or ``n == 0``.
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    r = float(risk_hat)
    if n <= 0 or r >= 1.0:
        return 1.0

    def f(a: float) -> float:
        return hoeffding_bentkus_pvalue(r, n, a) - delta

    lo, hi = r, 1.0 - 1e-15
    if f(hi) > 0:
        return 1.0
    return float(optimize.brentq(f, lo, hi, xtol=1e-12, rtol=1e-12))


@dataclass(frozen=True)
class RiskControlledThreshold:
    """Result of :func:`risk_controlled_threshold`.

    - ``threshold``: accept a new case iff ``uncertainty <= threshold`` (:meth:`accept`). It is the largest float
      below the smallest *refused* calibration uncertainty (``+inf`` when every case is accepted, ``-inf`` when
      none is: ``feasible=False``, refer everything).
    - ``coverage``: fraction of calibration cases accepted; ``n_accepted`` of ``n_calibration``.
    - ``risk``: empirical selective risk of the accepted calibration cases (NaN when none is accepted).
    - ``bound``: upper confidence bound on the selective risk at the chosen threshold: SGR's Clopper-Pearson bound
      at level ``delta / n_candidates`` (valid simultaneously over all candidates), or LTT's Hoeffding-Bentkus
      bound at the level the chosen candidate was tested at (``<= target_risk``; LTT's guarantee itself is
      ``risk <= target_risk``). When infeasible: the smallest such bound over the candidates at the levels they
      were tested at (``> target_risk``), i.e. how far the calibration set is from certifying the target.
    - ``feasible``: False when no candidate threshold satisfies the target (then ``threshold == -inf``).
    - ``method``, ``target_risk``, ``delta``, ``n_candidates`` (the number of thresholds tested).
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

    def accept(self, uncertainty: ArrayLike) -> ArrayLike:
        """Boolean mask of the cases to accept (``uncertainty <= threshold``), in the library of the input."""
        if isinstance(uncertainty, torch.Tensor):
            return uncertainty <= self.threshold
        return np.asarray(uncertainty) <= self.threshold


def _min_certifiable(alpha: float, delta: float) -> int:
    """Fewest accepted cases that can certify risk <= alpha at level delta (all losses 0): (1 - alpha)^n <= delta.

    Both the Clopper-Pearson bound ``1 - delta^(1/n)`` and the HB p-value ``(1 - alpha)^n`` need this many, so
    smaller acceptance sets are never candidates (a data-independent choice that costs no power).
    """
    return max(1, math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-9))


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
) -> dict[str, np.ndarray]:
    """Vectorised core over ``R`` independent calibration sets: ``uncertainty``, ``risk`` ``(R, m)``.

    For rank ``k`` the rule accepts every case with ``u <= u_(k)`` (the k-th smallest; a tie group enters whole),
    i.e. ``u < t_k`` with ``t_k`` the next larger calibration value (``+inf`` past the last). Returns per row:
    ``n_accepted`` (0 = infeasible), ``cut`` (``t_k``; ``-inf`` when infeasible), ``loss_sum``, ``bound``,
    ``n_candidates``. ``with_bound=False`` skips LTT's bound root-finding (NaN; for many-split simulations).
    """
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
        if method == "sgr":
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
        pv = hoeffding_bentkus_pvalue(loss / n_acc, n_acc, alpha)
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
        if with_bound:
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
      docs/referral_threshold.md).

    Args:
        uncertainty_cal: ``(N,)`` case uncertainty of the calibration cases (larger = referred first).
        risk_cal: ``(N,)`` per-case risk in [0, 1]; 0/1 for ``"sgr"``.
        target_risk: the risk level ``alpha`` in (0, 1) to guarantee.
        delta: allowed probability in (0, 1) that the guarantee fails (over the calibration draw).
        method: ``"sgr"`` or ``"ltt"``.
        n_candidates: how many ranks to test (evenly spaced; the grid depends only on ``N``, ``target_risk`` and
            ``delta``, never on the data). Fewer candidates mean a smaller union penalty for SGR and fewer chances
            for LTT's sequence to stop on a noisy small-sample test, at the price of a coarser threshold (steps of
            about ``N / n_candidates`` cases). ``None``: every rank. Default 20.
        sequence: LTT's multiple-testing procedure: ``"fallback"`` (default) or ``"fixed"`` (ignored by SGR).

    Returns:
        :class:`RiskControlledThreshold`. When no candidate certifies the target, ``feasible=False``,
        ``threshold=-inf`` (refer every case), ``coverage=0``, ``risk=NaN``, with a ``UserWarning``.

    Assumes the calibration and future cases are exchangeable (same distribution, same model, same uncertainty
    definition) and continuous uncertainties (ties are accepted or referred together, which the proof does not
    cover exactly). See docs/referral_threshold.md.
    """
    u = _vector(uncertainty_cal, "uncertainty_cal")
    r = _vector(risk_cal, "risk_cal")
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
    for name, val in (("target_risk", target_risk), ("delta", delta)):
        if isinstance(val, bool) or not isinstance(val, (int, float, np.floating)) or not 0 < float(val) < 1:
            raise ValueError(f"{name} must be a number in (0, 1), got {val!r}")
    if n_candidates is not None and (
        isinstance(n_candidates, bool) or not isinstance(n_candidates, (int, np.integer)) or n_candidates < 1
    ):
        raise ValueError(f"n_candidates must be a positive integer or None, got {n_candidates!r}")
    if sequence not in ("fallback", "fixed"):
        raise ValueError(f"sequence must be 'fallback' or 'fixed', got {sequence!r}")
    alpha, delta = float(target_risk), float(delta)
    res = _risk_control_batch(u[None], r[None], alpha, delta, method, n_candidates, sequence=sequence)
    n_acc = int(res["n_accepted"][0])
    m = u.size
    cut = float(res["cut"][0])
    feasible = n_acc > 0
    if not feasible:
        threshold = -math.inf
        warnings.warn(
            f"risk_controlled_threshold: no threshold certifies selective risk <= {alpha:g} with probability "
            f"{1 - delta:g} on these {m} calibration cases (best bound {float(res['bound'][0]):.4g}); "
            "refer every case",
            UserWarning,
            stacklevel=2,
        )
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
    )
