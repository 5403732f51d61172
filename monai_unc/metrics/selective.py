"""Selective prediction: risk-coverage curves (AURC, E-AURC, AUGRC) and referral curves.

Case-level metrics for deciding which cases to send to a human. Every function takes one score per case
(an aggregated uncertainty, see :mod:`monai_unc.aggregation`, or a confidence) and one risk or metric
value per case, as 1-D numpy arrays or torch tensors; curves follow the input's library, areas are floats.

Risk-coverage curve (ValUES, Appendix A.3, eqs. 5-8; conventions of fd-shifts, Jaeger et al. 2023)
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
    E-AURC = AURC - AURC*    where AURC* is the AURC of the oracle that ranks cases by risk (untied scores)

Two optima are offered for E-AURC. ``"empirical"`` (default) evaluates the same trapezoid on the oracle ranking
(cases sorted by ascending risk) with a point at every coverage ``k / N``, where its selective risk is the mean
of the ``k`` lowest risks; it depends on the risks only, never on the score being judged, and works for 0/1 and
continuous risk. With tied scores the scored term is not :func:`aurc` (one point per tie group) but the expected
AURC over a uniformly random order of the tied cases, every case its own point: at a kept count ``k`` inside a
tie group, ``k - a`` random cases of the group are kept besides the ``a`` more confident ones, so the expected
selective risk is ``(S_a + (k - a) * group mean) / k`` (``S_a`` the summed risk of the ``a``), and the area,
linear in these, is the expected area. A score gets no credit for its ties: a constant score keeps random cases
and is charged the mean risk curve, not read as a perfect ranking. Every expected point is the mean risk of a
mixture of ``k``-subsets, never below the oracle's at the same ``k``, so the default E-AURC is >= 0, ties included
(a difference within the float rounding of the two areas, ``8 N eps max(risk)``, is returned as exactly 0, never as
``-1e-16``); without ties it is ``aurc() - AURC*`` (Geifman, Uziel, El-Yaniv: *Bias-Reduced
Uncertainty Estimation for Deep Neural Classifiers*). ``"closed_form"`` is fd-shifts' analytic value for 0/1 risk
with error rate ``e``, subtracted from :func:`aurc` as fd-shifts does: ``AURC* = e + (1 - e) ln(1 - e)`` (the exact
integral of the oracle's selective risk; it differs from the empirical trapezoid by O(1/N)). fd-shifts reports
areas multiplied by 1000; these functions do not.

Referral curve (RETINA, Sec. 2.3)
-------------------------------------------
For a referral rate ``tau`` in [0, 1] the ``ceil(tau * N)`` most uncertain cases are referred to an expert
and the metric is evaluated on the retained ``N - ceil(tau * N)`` cases: either the mean of a per-case value
(Dice, accuracy, ...) or any cohort metric recomputed on the retained cases (a callable, e.g. AUROC).
The area under the referral curve is the trapezoid over ``tau``.

The risk-controlled referral threshold lives in :mod:`monai_unc.metrics.risk_control` (re-exported here).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from .._deprecation import deprecated_arg_names
from .._utils import ArrayLike, case_vector, check_bool, share_count, to_numpy, trapezoid, warn_nan, warn_tied

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

# the referral threshold with a guarantee has its own module; re-exported so existing imports keep working
from .risk_control import (  # noqa: E402
    RiskControlledThreshold,
    clopper_pearson_upper,
    hoeffding_bentkus_pvalue,
    hoeffding_bentkus_upper,
    risk_controlled_threshold,
)

_SCORE_KINDS = ("uncertainty", "confidence")
_OPTIMA = ("empirical", "closed_form")


class RiskCoverageCurve(NamedTuple):
    """Points of a risk-coverage curve, ordered by descending coverage (1 first, 0 last).

    Returned by :func:`risk_coverage_curve`.

    Attributes:
        coverage: fraction of retained cases.
        selective_risk: mean risk of the retained cases (the last point repeats the one before it).
        generalized_risk: sum of the retained cases' risk divided by ``N`` (0 at coverage 0).
        threshold: in the units of the input scores: the retained cases are those with
            ``uncertainty <= threshold`` (or ``confidence >= threshold``); ``-inf`` (``+inf`` for confidence)
            at coverage 0.

    Example:
        >>> from monai_unc.metrics import risk_coverage_curve
        >>> curve = risk_coverage_curve([0.1, 0.4, 0.2, 0.8], [0.0, 1.0, 0.0, 1.0])
        >>> curve.coverage
        array([1.  , 0.75, 0.5 , 0.25, 0.  ])
    """

    coverage: ArrayLike
    selective_risk: ArrayLike
    generalized_risk: ArrayLike
    threshold: ArrayLike


class ReferralCurve(NamedTuple):
    """A referral curve: ``value[k]`` is the metric on the cases retained at referral rate ``tau[k]``.

    Returned by :func:`referral_curve`.

    Attributes:
        tau: referral rates.
        value: the metric on the retained cases at each rate (NaN when every case is referred).
        n_retained: number of retained cases at each rate.

    Example:
        >>> from monai_unc.metrics import referral_curve
        >>> referral_curve([0.1, 0.4, 0.2, 0.8], [0.9, 0.6, 0.8, 0.3], taus=[0.0, 0.5]).n_retained
        array([4, 2])
    """

    tau: ArrayLike
    value: ArrayLike
    n_retained: ArrayLike


def _pair(uncertainty: Any, risk: Any) -> tuple[np.ndarray, np.ndarray]:
    """``uncertainty`` and ``risk`` as finite 1-D float64 arrays of one length, ``risk >= 0`` (errors name them)."""
    u = case_vector(uncertainty, "uncertainty")
    r = case_vector(risk, "risk")
    if u.shape != r.shape:
        raise ValueError(f"uncertainty and risk must have the same length, got {u.size} and {r.size}")
    if r.min() < 0:
        # found by hostile testing: a negative "risk" (e.g. -Dice, a quality) gave a negative AURC without complaint
        raise ValueError(
            f"risk must be a loss >= 0 (0/1 error, 1 - Dice, ...), got a minimum of {r.min():.4g}; pass 1 - Dice "
            "rather than a quality"
        )
    return u, r


def _confidence(scores: np.ndarray, score_type: str) -> np.ndarray:
    if score_type not in _SCORE_KINDS:
        raise ValueError(f"score_type must be one of {_SCORE_KINDS}, got {score_type!r}")
    return -scores if score_type == "uncertainty" else scores


def _follow(a: np.ndarray, reference: Any) -> ArrayLike:
    """Return ``a`` in the library (and device) of ``reference``."""
    if isinstance(reference, torch.Tensor):
        return torch.from_numpy(np.ascontiguousarray(a)).to(reference.device)
    return a


def _tie_groups(confidence: np.ndarray, risk: np.ndarray) -> tuple[np.ndarray, ...]:
    """Cases by ascending confidence (the first cases leave first): ``(confidence, risk, suffix, starts)``.

    ``suffix[j]`` is the risk summed over the retained cases ``j ..`` (accumulated from the most confident end),
    ``starts`` the first position of each group of tied confidences (where a point of the curve is; the order inside
    a group does not matter to the sums at its start).
    """
    order = np.argsort(confidence)
    c = confidence[order]
    r = risk[order]
    suffix = np.cumsum(r[::-1])[::-1]
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    return c, r, suffix, starts


def _rc_points(confidence: np.ndarray, risk: np.ndarray) -> tuple[np.ndarray, ...]:
    """fd-shifts' RC points, vectorised: O(N log N) instead of a Python loop over cases.

    Returns (coverage, selective_risk, generalized_risk, confidence_threshold), descending coverage.
    """
    n = confidence.size
    c, _, suffix, starts = _tie_groups(confidence, risk)
    kept = (n - starts).astype(np.float64)
    coverage = np.r_[kept / n, 0.0]
    selective = np.r_[suffix[starts] / kept, suffix[starts[-1]] / kept[-1]]
    generalized = np.r_[suffix[starts] / n, 0.0]
    threshold = np.r_[c[starts], np.inf]
    return coverage, selective, generalized, threshold


def ranked_risk(uncertainty: Any, risk: Any, score_type: str = "uncertainty") -> tuple[np.ndarray, np.ndarray]:
    """The checked inputs of a risk-coverage metric: the confidence of each case and its risk; warns about nothing.

    The one core of :func:`aurc`, :func:`augrc`, :func:`eaurc` and :func:`risk_coverage_curve`, and of the metrics
    that compute them under another name and say their own warning for scores all tied
    (:func:`~monai_unc.metrics.casewise.failure_detection`, :func:`~monai_unc.metrics.discrimination.au_arc`): they
    call the cores, so no warning of a callee is filtered by its text (a ``catch_warnings``
    filter, as earlier versions used, is process-wide).

    Args:
        uncertainty: ``(N,)`` one score per case (larger = less confident unless ``score_type="confidence"``).
        risk: ``(N,)`` per-case risk >= 0.
        score_type: ``"uncertainty"`` (confidence ``g = -score``) or ``"confidence"``.

    Returns:
        ``(confidence, risk)``, two ``(N,)`` float64 numpy arrays.

    Raises:
        ValueError: empty input, lengths differ, non-finite values, a negative risk, or unknown ``score_type``.

    Example:
        >>> from monai_unc.metrics.selective import aurc_of, ranked_risk
        >>> g, r = ranked_risk([0.1, 0.4, 0.2, 0.8], [0.0, 1.0, 0.0, 1.0])
        >>> g.tolist(), round(aurc_of(g, r), 4)
        ([-0.1, -0.4, -0.2, -0.8], 0.1458)
    """
    s, r = _pair(uncertainty, risk)
    return _confidence(s, score_type), r


def aurc_of(confidence: np.ndarray, risk: np.ndarray) -> float:
    """:func:`aurc` of the checked :func:`ranked_risk` (confidence, risk), without its warning for scores all tied.

    Args:
        confidence: ``(N,)`` float64 confidence per case (larger = kept longer).
        risk: ``(N,)`` float64 risk per case.

    Returns:
        The area as a float.

    Example:
        >>> from monai_unc.metrics.selective import aurc_of, ranked_risk
        >>> round(aurc_of(*ranked_risk([0.5, 0.5], [0.0, 1.0])), 4)  # tied: no warning here
        0.5
    """
    cov, sel, _, _ = _rc_points(confidence, risk)
    return _trapezoid(cov, sel)


def augrc_of(confidence: np.ndarray, risk: np.ndarray) -> float:
    """:func:`augrc` of the checked :func:`ranked_risk` (confidence, risk), without its warning for scores all tied.

    Args:
        confidence: ``(N,)`` float64 confidence per case (larger = kept longer).
        risk: ``(N,)`` float64 risk per case.

    Returns:
        The area as a float.

    Example:
        >>> from monai_unc.metrics.selective import augrc_of, ranked_risk
        >>> round(augrc_of(*ranked_risk([0.1, 0.4, 0.2, 0.8], [0.0, 1.0, 0.0, 1.0])), 4)
        0.125
    """
    cov, _, gen, _ = _rc_points(confidence, risk)
    return _trapezoid(cov, gen)


#: what a risk-coverage metric is for scores all tied (:func:`~monai_unc._utils.warn_tied`)
_TIED = "the curve is one point at the mean risk, the value of no ranking"


def _ranked_warned(uncertainty: Any, risk: Any, score_type: str, caller: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ranked_risk`, warning as ``caller`` for scores all tied.

    In earlier versions a constant score gave its AURC without a word, as if it ranked the cases. The warning points
    at the caller of the public (decorated) ``caller``: warn_tied, this function, ``caller``, its
    ``deprecated_arg_names`` wrapper, the user.
    """
    g, r = ranked_risk(uncertainty, risk, score_type)
    warn_tied(g, caller, _TIED, stacklevel=5)
    return g, r


def _trapezoid(x: np.ndarray, y: np.ndarray) -> float:
    """Area under ``y(x)`` by the trapezoid rule, integrating from the smaller to the larger ``x``.

    ``x`` must be monotone (ascending or descending); the result does not depend on the direction.
    """
    if x.size < 2:
        return 0.0
    area = trapezoid(y, x)
    # + 0.0: a zero area over a descending x is -0.0, which reports print as "-0.0"
    return (area if x[-1] >= x[0] else -area) + 0.0


@deprecated_arg_names({"scores": "uncertainty"})
def risk_coverage_curve(
    uncertainty: ArrayLike, risk: ArrayLike, score_type: str = "uncertainty"
) -> RiskCoverageCurve:
    """Risk-coverage curve of a per-case score against a per-case risk (ValUES eqs. 5-6, fd-shifts).

    Args:
        uncertainty: ``(N,)`` one score per case: an aggregated uncertainty (larger = less confident, the
            default) or, with ``score_type="confidence"``, a confidence (formerly ``scores``).
        risk: ``(N,)`` per-case risk: 0/1 errors or a continuous loss such as ``1 - Dice``.
        score_type: ``"uncertainty"`` (confidence ``g = -score``) or ``"confidence"``.

    Returns:
        :class:`RiskCoverageCurve` with arrays of equal length (descending coverage, one point per distinct
        score plus the coverage-0 point), float64, in the library of ``uncertainty``.

    Raises:
        ValueError: empty input, lengths differ, non-finite values, a negative risk, or unknown ``score_type``.

    Example:
        >>> from monai_unc.metrics import risk_coverage_curve
        >>> curve = risk_coverage_curve([0.1, 0.4, 0.2, 0.8], [0.0, 1.0, 0.0, 1.0])
        >>> curve.coverage
        array([1.  , 0.75, 0.5 , 0.25, 0.  ])
        >>> curve.selective_risk
        array([0.5       , 0.33333333, 0.        , 0.        , 0.        ])
        >>> curve.threshold
        array([ 0.8,  0.4,  0.2,  0.1, -inf])
    """
    cov, sel, gen, thr = _rc_points(*_ranked_warned(uncertainty, risk, score_type, "risk_coverage_curve"))
    if score_type == "uncertainty":
        thr = -thr
    return RiskCoverageCurve(*(_follow(a, uncertainty) for a in (cov, sel, gen, thr)))


@deprecated_arg_names({"scores": "uncertainty"})
def aurc(uncertainty: ArrayLike, risk: ArrayLike, score_type: str = "uncertainty") -> float:
    """Area under the risk-coverage curve (ValUES eq. 7): trapezoid of the selective risk over coverage.

    Lower is better; 0 when every retained case has zero risk at every coverage. For continuous risk
    ``1 - Dice`` this is ValUES' failure-detection metric.

    Args:
        uncertainty: ``(N,)`` one score per case: an aggregated uncertainty (larger = less confident, the
            default) or, with ``score_type="confidence"``, a confidence (formerly ``scores``).
        risk: ``(N,)`` per-case risk: 0/1 errors or a continuous loss such as ``1 - Dice``.
        score_type: ``"uncertainty"`` (confidence ``g = -score``) or ``"confidence"``.

    Returns:
        The area as a float (for scores all tied, the mean-risk value of no ranking, with a ``UserWarning``).

    Example:
        >>> from monai_unc.metrics import aurc
        >>> round(aurc([0.1, 0.4, 0.2, 0.8], [0.0, 1.0, 0.0, 1.0]), 4)
        0.1458
    """
    return aurc_of(*_ranked_warned(uncertainty, risk, score_type, "aurc"))


@deprecated_arg_names({"scores": "uncertainty"})
def augrc(uncertainty: ArrayLike, risk: ArrayLike, score_type: str = "uncertainty") -> float:
    """Area under the generalized risk-coverage curve (Traub et al. 2024, as in fd-shifts).

    The generalized risk at a coverage is the retained cases' summed risk divided by all ``N`` cases, i.e.
    the probability of a silent failure; the curve ends at (0, 0) (Traub, Bungert, Lüth, Baumgartner, Maier-Hein,
    Maier-Hein, Jaeger: *Overcoming Common Flaws in the Evaluation of Selective Classification Systems*).

    Args:
        uncertainty: ``(N,)`` one score per case: an aggregated uncertainty (larger = less confident, the
            default) or, with ``score_type="confidence"``, a confidence (formerly ``scores``).
        risk: ``(N,)`` per-case risk: 0/1 errors or a continuous loss such as ``1 - Dice``.
        score_type: ``"uncertainty"`` (confidence ``g = -score``) or ``"confidence"``.

    Returns:
        The area as a float (for scores all tied, the mean-risk value of no ranking, with a ``UserWarning``).

    Example:
        >>> from monai_unc.metrics import augrc
        >>> round(augrc([0.1, 0.4, 0.2, 0.8], [0.0, 1.0, 0.0, 1.0]), 4)
        0.125
    """
    return augrc_of(*_ranked_warned(uncertainty, risk, score_type, "augrc"))


def _expected_aurc(confidence: np.ndarray, risk: np.ndarray) -> float:
    """AURC of the scores' ranking averaged over every order of tied cases, each case its own point.

    Cases are kept by descending confidence. At every kept count ``k = 1 .. N`` inside a tie group that spans
    the kept counts ``(a, b]`` (``a`` cases of strictly more confident groups kept before it), a uniformly random
    order of the group keeps ``k - a`` of its cases, whose expected summed risk is ``(k - a)`` times the group's
    mean, so the expected selective risk is ``(S_a + (k - a) * mean) / k`` with ``S_a`` the summed risk of the
    ``a`` cases. The trapezoid over ``k / N`` (then ``(0, last)``) is linear in the selective risks, hence the
    expected AURC of a random tie order. Without ties it is :func:`aurc` (same sums, same points).
    """
    n = confidence.size
    # the sums of _rc_points (bit for bit without ties); position j keeps n - j cases
    _, r, suffix, starts = _tie_groups(confidence, risk)
    ends = np.r_[starts[1:], n]
    size = ends - starts
    group = np.repeat(np.arange(starts.size), size)
    mean = np.add.reduceat(r, starts) / size
    # summed risk of the strictly more confident groups (the suffix after the group; 0 for the top group)
    before = np.r_[suffix, 0.0][ends]
    # position j keeps n - j cases, ends[g] - j of them from its own group
    sums = before[group] + (ends[group] - np.arange(n)) * mean[group]
    sums[starts] = suffix[starts]  # whole groups kept: the plain sum, exactly as aurc() has it
    kept = (n - np.arange(n)).astype(np.float64)
    sel = sums / kept
    return _trapezoid(np.r_[kept / n, 0.0], np.r_[sel, sel[-1]])


def _optimal_aurc(risk: np.ndarray, optimum: str) -> float:
    """``AURC*`` of the oracle that ranks cases by ascending risk; it does not depend on any score.

    Args:
        risk: ``(N,)`` checked per-case risk.
        optimum: ``"empirical"`` or ``"closed_form"`` (see :func:`eaurc`).

    Returns:
        The oracle's area as a float. ``"empirical"``: the trapezoid with a point at every coverage ``k / N``
        (selective risk the mean of the ``k`` lowest risks), then ``(0, last)`` as for :func:`aurc`.
    """
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
    # oracle: cases ranked by ascending risk; keeping the k lowest risks gives coverage k / N and selective
    # risk (sum of the k lowest) / k, at every k (ties in risk do not matter: tied cases have equal risk)
    kept = np.arange(n, 0, -1, dtype=np.int64)
    sel = np.cumsum(np.sort(risk))[kept - 1] / kept
    cov = np.r_[kept / n, 0.0]
    return _trapezoid(cov, np.r_[sel, sel[-1]])


@deprecated_arg_names({"scores": "uncertainty"})
def eaurc(
    uncertainty: ArrayLike, risk: ArrayLike, score_type: str = "uncertainty", optimum: str = "empirical"
) -> float:
    """Excess AURC (ValUES eq. 8, Geifman et al. 2019): the scored ranking's AURC minus the oracle's ``AURC*``.

    With the empirical optimum (default) the oracle ranks cases by ascending risk with a point at every coverage
    ``k / N``, whatever the scores. Without tied scores E-AURC is ``aurc() - AURC*``. With ties the scored term is
    the expected AURC over a uniformly random order of the tied cases (every case its own point), not
    :func:`aurc`'s one point per tie group: a score gets no credit for what its ties leave undecided, so a
    constant score is charged the mean risk curve, ``mean(risk) - AURC* > 0`` unless all risks are equal, rather
    than read as a perfect ranking. E-AURC is then >= 0, ties included (a difference within the float rounding of
    the two areas is returned as exactly 0), and a coarser
    (rounded) score is not rewarded for merging cases. fd-shifts' closed-form optimum is the integral of a
    continuous oracle subtracted from :func:`aurc` and can exceed a trapezoid AURC (tie groups, small N), so
    with it E-AURC can be negative. Geifman, Uziel, El-Yaniv: *Bias-Reduced Uncertainty Estimation for Deep
    Neural Classifiers*.

    Args:
        uncertainty: ``(N,)`` one score per case: an aggregated uncertainty (larger = less confident, the
            default) or, with ``score_type="confidence"``, a confidence (formerly ``scores``).
        risk: ``(N,)`` per-case risk: 0/1 errors or a continuous loss such as ``1 - Dice``.
        score_type: ``"uncertainty"`` (confidence ``g = -score``) or ``"confidence"``.
        optimum: ``"empirical"`` (default): ``AURC*`` is the trapezoid AURC of the oracle that ranks cases by
            ascending risk, a point at every ``k / N``, and tied scores enter as the expected AURC over random
            orders of the tied cases, so E-AURC >= 0 (a difference within the float rounding of the two areas,
            ``8 * N * eps * max(risk)``, is returned as exactly 0); works for continuous risk. ``"closed_form"``:
            fd-shifts' :func:`aurc` minus ``e + (1 - e) ln(1 - e)`` for 0/1 risk with error rate ``e`` (ValueError
            for other risk).

    Returns:
        The excess area as a float (scores all tied warn that they cannot rank the cases).

    Example:
        >>> from monai_unc.metrics import eaurc
        >>> round(eaurc([0.8, 0.1, 0.2, 0.4], [0.0, 1.0, 0.0, 1.0]), 4)  # an error is the most certain case
        0.5833
        >>> round(eaurc([0.1, 0.4, 0.2, 0.8], [0.0, 1.0, 0.0, 1.0]), 4)  # the errors are the most uncertain cases
        0.0
        >>> round(eaurc([0.5, 0.5, 0.5, 0.5], [0.0, 1.0, 0.0, 1.0]), 4)  # a constant score: mean 0.5 - AURC* 7/48
        0.3542
    """
    g, r = ranked_risk(uncertainty, risk, score_type)
    warn_tied(g, "eaurc", "the scored term is the mean risk, the value of no ranking", stacklevel=4)
    return eaurc_of(g, r, optimum)


def eaurc_of(confidence: np.ndarray, risk: np.ndarray, optimum: str = "empirical") -> float:
    """:func:`eaurc` of the checked :func:`ranked_risk` (confidence, risk), without its warning for scores all tied.

    Args:
        confidence: ``(N,)`` float64 confidence per case (larger = kept longer).
        risk: ``(N,)`` float64 risk per case.
        optimum: ``"empirical"`` or ``"closed_form"`` (see :func:`eaurc`).

    Returns:
        The excess area as a float.

    Raises:
        ValueError: an unknown ``optimum``, or ``"closed_form"`` with a risk that is not 0/1.

    Example:
        >>> from monai_unc.metrics.selective import eaurc_of, ranked_risk
        >>> round(eaurc_of(*ranked_risk([0.5, 0.5, 0.5, 0.5], [0.0, 1.0, 0.0, 1.0])), 4)  # tied: no warning here
        0.3542
    """
    g, r = confidence, risk
    if optimum == "closed_form":  # fd-shifts: the tie-group trapezoid AURC minus the analytic optimum
        return _trapezoid(*_rc_points(g, r)[:2]) - _optimal_aurc(r, optimum)
    excess = _expected_aurc(g, r) - _optimal_aurc(r, optimum)
    # found by review 66: the two areas are sums of N rounded terms, so a ranking as good as the oracle's (all risks
    # equal, or ties only among equal risks) gave +-1e-16 (-1.1e-16 for risks [0.7] * 4 and scores [0, 0, 0, 1]),
    # printed as a negative E-AURC in summary.json and the report; a difference within that rounding is 0
    return 0.0 if abs(excess) <= _rounding_bound(r) else excess


def _rounding_bound(risk: np.ndarray) -> float:
    """A bound on the float64 rounding of an area of :func:`_expected_aurc` minus :func:`_optimal_aurc`.

    Each area is a trapezoid of ``N`` selective risks, each a running sum of at most ``N`` risks (at most
    ``max(risk)``) divided by a count: every area is off by at most about ``N * eps * max(risk)``, the difference by
    twice that; four times it leaves a margin.
    """
    return 8.0 * risk.size * float(np.finfo(np.float64).eps) * float(risk.max())


def _n_referred(taus: np.ndarray, n: int) -> np.ndarray:
    # ceil(tau * N), robust to tau * N landing a few ulps above an integer (0.3 * 10 = 3.0000000000000004)
    return share_count(taus, n)


def _taus(taus: ArrayLike | Sequence[float] | None, n: int) -> np.ndarray:
    if taus is None:
        return np.arange(n, dtype=np.float64) / n  # every partition that retains at least one case
    t = to_numpy(taus, "taus")
    if t.dtype.kind not in "iuf":
        # found by hostile testing: text ("0.5") was parsed and a complex rate lost its imaginary part; flags
        # ([True, False]) were read as the rates 1 and 0
        raise TypeError(f"taus must hold referral rates (real numbers), got dtype {t.dtype}")
    if t.ndim > 1:  # found by hostile review 60: a (2, 2) array was flattened into four rates without a word
        raise ValueError(f"taus must be one referral rate or a 1-D sequence of them, got shape {t.shape}")
    t = t.astype(np.float64, copy=False).ravel()
    if t.size == 0:
        raise ValueError("taus is empty")
    if not np.isfinite(t).all() or t.min() < 0 or t.max() > 1:
        raise ValueError(f"taus must be referral rates in [0, 1], got values in [{t.min()}, {t.max()}]")
    return t


def _metric_value(result: Any, tau: float) -> float:
    """The value a cohort metric (the callable ``values`` of :func:`referral_curve`) gave at referral rate ``tau``.

    One real number: a Python or numpy scalar, or a numpy array or torch tensor of one element (any device, bool,
    integer or real). In earlier versions ``float()`` parsed the text ``"0.5"``, and ``None`` or two values failed
    naming no argument; ``TypeError`` naming ``values`` instead.
    """
    try:
        a = to_numpy(result, "values")
    except TypeError:
        a = None
    if a is None or a.size != 1:
        raise TypeError(
            f"values must return one real number (the metric of the retained cases), got {type(result).__name__} "
            f"{result!r} at referral rate {tau:.4g}"
        )
    return float(a.reshape(()))


def _referral_points(
    uncertainty: Any, values: Any, taus: Any, ties: str, warn_ties: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`referral_curve` as numpy arrays ``(tau, value, n_retained)`` and the number of cases ``N``.

    Warns only that the scores are all tied (at the caller of :func:`referral_curve` or of
    :func:`area_under_referral_curve`, which both call this directly; not with ``warn_ties=False``), not about the
    rates that refer every case: each public function says that in its own words (in earlier versions the area
    filtered the curve's warning by its text, a process-wide filter that the cohort metric it calls, and every other
    thread, ran under).
    """
    u = case_vector(uncertainty, "uncertainty")
    n = u.size
    t = _taus(taus, n)
    m = n - _n_referred(t, n)  # number of retained cases per tau
    if ties not in ("average", "order"):
        raise ValueError(f"ties must be 'average' or 'order', got {ties!r}")
    # found by review 61: a constant score gave a flat curve (ties "average") or the case order's (ties "order");
    # stacklevel: warn_tied, this function, the public function, its caller
    if warn_ties:
        warn_tied(u, "referral_curve", "the cases kept are a random choice (ties 'average': the mean at every rate) "
                  "or the first in case order (ties 'order'), not the most certain", stacklevel=4)
    out = np.full(t.shape, np.nan, dtype=np.float64)
    ok = m > 0
    if callable(values):
        if ties != "order":
            raise ValueError("ties='average' needs per-case values; pass ties='order' with a callable")
        order = np.argsort(u, kind="stable")  # ascending uncertainty: the first m cases are kept
        for k in np.flatnonzero(ok):
            # a copy: a callable that sorts its indices in place reordered the ranking of every later rate (found by
            # hostile testing)
            out[k] = _metric_value(values(order[: m[k]].copy()), float(t[k]))
    else:
        v = case_vector(values, "values")
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
    return t, out, m, n


def referral_curve(
    uncertainty: ArrayLike,
    values: ArrayLike | Callable[[np.ndarray], float],
    taus: ArrayLike | Sequence[float] | None = None,
    ties: str = "average",
) -> ReferralCurve:
    """Referral curve (RETINA, Sec. 2.3): metric on the cases kept after referring the most uncertain.

    For each referral rate ``tau`` the ``ceil(tau * N)`` cases with the largest uncertainty are referred and
    the metric is evaluated on the other ``N - ceil(tau * N)`` cases (Band et al.: *Benchmarking Bayesian Deep
    Learning on Diabetic Retinopathy Detection Tasks*).

    Args:
        uncertainty: ``(N,)`` per-case uncertainty (larger = referred first).
        values: either ``(N,)`` per-case values (Dice, 0/1 correctness, ...), whose mean over the retained
            cases is reported, or a callable ``fn(retained_indices) -> float`` that recomputes any cohort
            metric (e.g. AUROC) on the retained cases, given their indices into the inputs (a fresh int64 array
            per call, in ranking order, which the callable may modify) and returns one real number (a Python,
            numpy or torch scalar, or an array of one element; ``TypeError`` naming ``values`` otherwise).
        taus: referral rates in [0, 1]; default every partition that keeps at least one case,
            ``tau = k / N`` for ``k = 0 .. N-1``.
        ties: how cases tied in uncertainty are split at the referral cut. ``"average"`` (per-case values
            only): the expected mean over a uniformly random order of the tied cases, so the curve does not
            depend on case order; ``"order"``: ties are broken by case order (the earlier case is kept), the
            only choice for a callable.

    Returns:
        :class:`ReferralCurve` (``tau``, ``value``, ``n_retained``) in the library of ``uncertainty``. A rate
        that refers every case gives NaN with a ``UserWarning``; scores all tied warn that they cannot rank the cases.

    Example:
        >>> from monai_unc.metrics import referral_curve
        >>> dice = [0.9, 0.6, 0.8, 0.3]
        >>> curve = referral_curve([0.1, 0.4, 0.2, 0.8], dice)
        >>> curve.tau, curve.value.round(4)
        (array([0.  , 0.25, 0.5 , 0.75]), array([0.65  , 0.7667, 0.85  , 0.9   ]))
    """
    t, out, m, n = _referral_points(uncertainty, values, taus, ties)
    if (m == 0).any():
        warn_nan(
            f"referral_curve: {int((m == 0).sum())} referral rate(s) refer all {n} cases; the metric on an empty "
            "set is undefined (NaN)"
        )
    return ReferralCurve(_follow(t, uncertainty), _follow(out, uncertainty), _follow(m, uncertainty))


def referral_curve_core(
    uncertainty: ArrayLike,
    values: ArrayLike | Callable[[np.ndarray], float],
    taus: ArrayLike | Sequence[float] | None = None,
    ties: str = "average",
) -> ReferralCurve:
    """:func:`referral_curve` without its warnings, for a caller that says them in its own words or has said them.

    Neither the warning that the scores are all tied nor that of the rates that refer every case (their values are
    NaN, as :func:`referral_curve` gives them). For the same scores ranked again (another value per case, a rate
    marked on a drawn curve) and for an oracle ranking by the values themselves, whose ties are no tie of any
    uncertainty score (in earlier versions such callers filtered :func:`referral_curve`'s warnings by their text, or
    every ``UserWarning``, inside ``warnings.catch_warnings()``, a process-wide filter). Errors are
    :func:`referral_curve`'s.

    Args:
        uncertainty: as :func:`referral_curve`.
        values: as :func:`referral_curve`.
        taus: as :func:`referral_curve`.
        ties: as :func:`referral_curve`.

    Returns:
        The :class:`ReferralCurve` of :func:`referral_curve`.

    Example:
        >>> from monai_unc.metrics.selective import referral_curve_core
        >>> dice = [0.9, 0.6, 0.8, 0.3]
        >>> oracle = referral_curve_core([-d for d in dice], dice)  # lowest Dice first; no warning for tied Dice
        >>> oracle.value.round(4)
        array([0.65  , 0.7667, 0.85  , 0.9   ])
    """
    t, out, m, _ = _referral_points(uncertainty, values, taus, ties, warn_ties=False)
    return ReferralCurve(_follow(t, uncertainty), _follow(out, uncertainty), _follow(m, uncertainty))


def area_under_referral_curve(
    uncertainty: ArrayLike,
    values: ArrayLike | Callable[[np.ndarray], float],
    taus: ArrayLike | Sequence[float] | None = None,
    ties: str = "average",
    normalize: bool = False,
) -> float:
    """Area under the referral curve (RETINA's "R-<metric> AUC"): trapezoid of the curve over ``tau``.

    Rates that refer every case (above ``(N-1)/N``: no case is left, the curve is NaN there) are left out, and so
    are rates where a callable's metric is undefined (NaN or inf), with one ``UserWarning`` saying the range of rates
    the area then covers: with ``normalize=False`` the area is over that shorter range (``taus=[0, 0.5, 1]`` gives
    the area over ``[0, 0.5]``), so compare areas over the same covered range, or use ``normalize=True``. The
    default ``taus`` refer every case at no rate. A single usable rate gives NaN with a warning.

    Args:
        uncertainty: ``(N,)`` per-case uncertainty (larger = referred first).
        values: either ``(N,)`` per-case values (Dice, 0/1 correctness, ...), whose mean over the retained
            cases is reported, or a callable ``fn(retained_indices) -> float`` that recomputes any cohort
            metric (e.g. AUROC) on the retained cases, given their indices into the inputs (int64 array), and
            returns one real number.
        taus: referral rates in [0, 1]; default every partition that keeps at least one case,
            ``tau = k / N`` for ``k = 0 .. N-1``.
        ties: how cases tied in uncertainty are split at the referral cut. ``"average"`` (per-case values
            only): the expected mean over a uniformly random order of the tied cases, so the curve does not
            depend on case order; ``"order"``: ties are broken by case order (the earlier case is kept), the
            only choice for a callable.
        normalize: divide the area by the covered ``tau`` range, giving the curve's mean level on the metric's own
            scale (comparable across grids).

    Returns:
        The area (or the mean level with ``normalize``) as a float.

    Example:
        >>> from monai_unc.metrics import area_under_referral_curve
        >>> dice = [0.9, 0.6, 0.8, 0.3]
        >>> round(area_under_referral_curve([0.1, 0.4, 0.2, 0.8], dice, normalize=True), 4)
        0.7972
    """
    normalize = check_bool(normalize, "normalize")  # a truthy string ("no") must not switch it on
    # the rates that refer every case are said below, with the range of rates the area covers (referral_curve's
    # warning named neither)
    t, v, n_retained, n = _referral_points(uncertainty, values, taus, ties)
    keep = np.isfinite(v)
    # found by hostile review 60: a cohort metric undefined where cases are kept (an AUROC of a retained set without
    # a failure) was left out without a word, and the area covered a shorter range of rates than asked for; found by
    # review 67: so were the rates above (N-1)/N, which refer every case (only referral_curve's warning said so,
    # without the range the area then covers, which is what makes an area of normalize=False comparable)
    undefined = ~keep & (n_retained > 0)
    everything = n_retained == 0
    reasons = []
    if everything.any():
        reasons.append(f"{int(everything.sum())} referral rate(s) above (N-1)/N = {(n - 1) / n:.4g} refer all {n} "
                       "cases, leaving no case to measure")
    if undefined.any():
        reasons.append(f"the metric is undefined (NaN or inf) at {int(undefined.sum())} referral rate(s) that keep "
                       "cases")
    if reasons:
        covers = (f"the area covers the rates [{float(t[keep].min()):.4g}, {float(t[keep].max()):.4g}] only, not "
                  f"[{float(t.min()):.4g}, {float(t.max()):.4g}]" if keep.any() else "no rate is left")
        warnings.warn(f"area_under_referral_curve: {'; '.join(reasons)}; they are left out, and {covers}",
                      UserWarning, stacklevel=2)
    t, v = t[keep], v[keep]
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    if t.size < 2 or t[-1] == t[0]:
        return warn_nan("area_under_referral_curve: fewer than two distinct usable referral rates")
    area = _trapezoid(t, v)
    return area / float(t[-1] - t[0]) if normalize else area
