"""Anytime-valid monitoring of a deployed model: conformal test martingales and a harmful-shift test on risk.

Two statistics watch a stream of new cases, each with a false-alarm probability of at most ``alpha`` over an
unbounded stream (Ville's inequality: a nonnegative (super)martingale that starts at 1 exceeds ``1 / alpha`` with
probability at most ``alpha``, ever):

- **label-free**: online conformal p-values of a case score (:func:`conformal_pvalues`: each new case ranked among
  a reference sample and the cases before it) are independent and uniform while the cases are exchangeable with the
  reference; the Simple Jumper conformal test martingale (:func:`simple_jumper`) bets that they are not and grows
  when the score's distribution moves (Vovk, Nouretdinov, Gammerman, "Testing exchangeability on-line", ICML 2003;
  Vovk, Petej, Nouretdinov, Ahlberg, Carlsson, Gammerman, "Retrain or not retrain: Conformal test martingales for
  change-point detection", COPA 2021). :func:`change_point` estimates where the change began.
- **with audited labels**: a betting e-process on the losses of the accepted cases (failure yes/no, or
  ``1 - Dice``, in ``[0, 1]``) against the certified target risk (:func:`risk_eprocess`; Waudby-Smith and Ramdas,
  "Estimating means of bounded random variables by betting", JRSSB 2023; Podkopaev and Ramdas, "Tracking the risk
  of a deployed model and detecting harmful distribution shifts", ICLR 2022). It alarms when the risk exceeds the
  target ("harmful shift"), and with probability at most ``alpha`` while every case's risk stays at or below it
  (benign shifts included). Its lower confidence sequence (:func:`risk_lower_bound`) is the smallest risk that the
  losses seen so far leave possible.

All functions are plain numpy; the store and the command line (``monai-unc monitor``) call them. See
docs/monitoring.md.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import torch

from .._utils import real_array, to_numpy

__all__ = [
    "JUMPER_RATE",
    "RISK_BET_CAP",
    "MartingaleResult",
    "RiskTestResult",
    "conformal_pvalues",
    "simple_jumper",
    "first_alarm",
    "change_point",
    "score_martingale",
    "risk_bets",
    "risk_eprocess",
    "risk_lower_bound",
    "risk_test",
]

#: the Simple Jumper's jumping rate ``J`` (Vovk et al. 2021 use 0.01)
JUMPER_RATE = 0.01
#: the largest bet of the risk e-process: every factor ``1 + lam (x - m)`` stays >= ``1 - RISK_BET_CAP`` > 0
RISK_BET_CAP = 0.9
#: the exponent ``k`` of the power betting function ``k p^(k - 1)`` whose log-gains estimate the change point
_CUSUM_POWER = 0.2
#: the half-life (in labelled cases) of the running estimates that size the risk bets
_BET_HALF_LIFE = 25.0


def _check_alpha(alpha: float) -> float:
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, Real) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    return float(alpha)


def _alarm_level(alpha: float) -> float:
    """``log(1 / alpha)``, the level of ``log S_n`` that raises an alarm, lowered by a relative rounding allowance.

    Written as ``-log(alpha)``: ``1 / alpha`` overflows to ``inf`` below ``alpha = 5.6e-309`` (no alarm ever). The
    allowance is relative: an absolute ``1e-12`` made the level negative for ``alpha`` within ``1e-12`` of 1, where a
    martingale at its start (``S_0 = 1``) raised an alarm and the risk bound read 1 after losses of 0.
    """
    return -math.log(alpha) * (1 - 1e-12)


def _vector(x: object, name: str, allow_nan: bool = True, allow_inf: bool = False) -> np.ndarray:
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(x).__name__}")
    try:
        # a tensor by to_numpy: numpy.asarray refused a bfloat16 (autocast) or CUDA one (found by hostile review 59)
        raw = to_numpy(x, name) if isinstance(x, torch.Tensor) else np.asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a sequence of numbers: {e}") from None
    # not a float64 cast of whatever came: it parsed text ("0.5") and dropped the imaginary part of complex values
    # with only numpy's ComplexWarning (found by hostile testing); None in a list is NaN
    a = real_array(raw, name, " (NaN or None for an undefined value)")
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    if (not allow_inf and np.isinf(a).any()) or (not allow_nan and np.isnan(a).any()):
        raise ValueError(f"{name} must be finite{'' if not allow_nan else ' or NaN'}")
    return a


def _check_pvalues(pvalues: object) -> np.ndarray:
    """P-values as a float64 vector: each in ``[0, 1]`` or NaN (undefined)."""
    p = _vector(pvalues, "pvalues")
    if ((p < 0) | (p > 1)).any():
        raise ValueError("pvalues must lie in [0, 1]")
    return p


def conformal_pvalues(
    scores: object, reference: object = (), *, seed: int | np.random.Generator | None = 0,
) -> np.ndarray:
    """Online smoothed conformal p-values of a stream of scores, larger scores stranger.

    Case ``n`` is ranked among the reference scores and the stream's earlier scores (its "bag"):
    ``p_n = (#{bag > s_n} + tau_n (#{bag == s_n} + 1)) / (|bag| + 1)`` with ``tau_n`` uniform on ``[0, 1]``
    (Vovk, Nouretdinov, Gammerman 2003). When the reference and the stream together are exchangeable, the p-values
    are independent and uniform on ``[0, 1]`` (ties included, thanks to ``tau``); when the scores move up they
    gather near 0, when they move down near 1.

    Args:
        scores: ``(N,)`` the stream's scores in arrival order; NaN (an undefined score) gives a NaN p-value, with a
            warning, and does not join the bag.
        reference: ``(M,)`` finite scores of the calibration cohort (may be empty: the stream alone is tested for
            exchangeability).
        seed: seed or generator of the ``tau`` draws (the same seed gives the same p-values).

    Returns:
        ``(N,)`` p-values in ``(0, 1]``.

    Raises:
        ValueError: infinite scores, or NaN in ``reference``.
        TypeError: scores that are not real numbers (text, complex numbers).

    Example:
        >>> conformal_pvalues([0.5, 3.0, -1.0], reference=[0.0, 1.0, 2.0], seed=0).round(3)
        array([0.659, 0.054, 0.84 ])
    """
    s = _vector(scores, "scores")
    ref = _vector(reference, "reference", allow_nan=False)
    if not (seed is None or isinstance(seed, np.random.Generator)
            or isinstance(seed, Integral) and not isinstance(seed, (bool, np.bool_)) and seed >= 0):
        raise ValueError(f"seed must be a non-negative integer, a numpy Generator or None, got {seed!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    tau = rng.uniform(size=len(s)).tolist()
    defined = ~np.isnan(s)
    # the bag as counts over the sorted distinct values, in a Fenwick tree: O(log K) per case
    uniq = np.unique(np.concatenate([ref, s[defined]]))
    k = len(uniq)
    counts = np.bincount(np.searchsorted(uniq, ref), minlength=k).tolist()
    tree = [0] + counts  # 1-based Fenwick tree of the counts, built in O(K)
    for i in range(1, k + 1):
        j = i + (i & -i)
        if j <= k:
            tree[j] += tree[i]
    total = len(ref)
    ranks = np.searchsorted(uniq, np.where(defined, s, 0.0)).tolist()
    out = np.full(len(s), np.nan)
    for n in np.flatnonzero(defined).tolist():
        r = ranks[n]
        i, at_most = r + 1, 0  # the number of bag values <= uniq[r]
        while i > 0:
            at_most += tree[i]
            i -= i & -i
        equal = counts[r]
        out[n] = (total - at_most + tau[n] * (equal + 1)) / (total + 1)
        counts[r] += 1
        total += 1
        i = r + 1
        while i <= k:
            tree[i] += 1
            i += i & -i
    if np.isnan(s).any():
        warnings.warn(f"{int(np.isnan(s).sum())} undefined score(s): their p-values are NaN and the martingale "
                      "skips them", UserWarning, stacklevel=2)
    return out


def simple_jumper(pvalues: object, jump: float = JUMPER_RATE) -> np.ndarray:
    """The Simple Jumper conformal test martingale of a sequence of p-values, as ``log S_n``.

    Three betting functions ``f_e(p) = 1 + e (p - 1/2)``, ``e`` in ``{-1, 0, 1}``, share the capital; before each
    bet a fraction ``jump`` of the whole capital is spread evenly over the three (Vovk et al. 2021, Algorithm 1), so
    the martingale can switch from "no change" to "p-values small" (scores up) or "p-values large" (scores down) at
    any time. It is a test martingale (``S_0 = 1``, nonnegative, ``E[S_n | past] = S_{n-1}``) when the p-values
    are independent and uniform, so ``P(sup_n S_n >= 1 / alpha) <= alpha`` (Ville's inequality).

    Args:
        pvalues: ``(N,)`` p-values in ``[0, 1]``; a NaN leaves the capital as it is (a factor 1).
        jump: the jumping rate ``J`` in ``[0, 1]``.

    Returns:
        ``(N,)`` ``log S_n`` (natural log) after each p-value.

    Raises:
        ValueError: p-values outside ``[0, 1]``, or ``jump`` outside ``[0, 1]``.

    Example:
        >>> np.exp(simple_jumper([0.5, 0.0, 0.0], jump=0.0)).round(4)
        array([1.    , 1.    , 1.1667])
    """
    p = _check_pvalues(pvalues)
    if isinstance(jump, (bool, np.bool_)) or not isinstance(jump, Real) or not 0 <= jump <= 1:
        raise ValueError(f"jump must be a number in [0, 1], got {jump!r}")
    j = float(jump)
    wd, w0, wu = 1 / 3, 1 / 3, 1 / 3  # the capital's split over e = -1, 0, 1, normalised; log_s carries its total
    log_s = 0.0
    out = np.empty(len(p))
    for n, pn in enumerate(p.tolist()):
        if pn == pn:  # not NaN
            wd, w0, wu = (1 - j) * wd + j / 3, (1 - j) * w0 + j / 3, (1 - j) * wu + j / 3
            wd, wu = wd * (1.5 - pn), wu * (0.5 + pn)
            total = wd + w0 + wu
            log_s += math.log(total)
            wd, w0, wu = wd / total, w0 / total, wu / total
        out[n] = log_s
    return out


def first_alarm(log_martingale: object, alpha: float) -> int | None:
    """The index of the first value at or above ``log(1 / alpha)``, or None when there is none.

    Args:
        log_martingale: ``(N,)`` ``log S_n`` of a test (super)martingale or e-process: ``-inf`` where it is 0 (a
            nonnegative martingale that lost its whole capital: no alarm), NaN for no value.
        alpha: the false-alarm probability in ``(0, 1)``.

    Returns:
        The 0-based index of the alarm, or None.

    Example:
        >>> first_alarm(np.log([1.0, 5.0, 25.0, 3.0]), alpha=0.05)
        2
        >>> first_alarm([0.0, -np.inf, -np.inf], alpha=0.05) is None  # a martingale at 0 stays there
        True
    """
    a = _check_alpha(alpha)
    # found by hostile review 60: log 0 = -inf, the value of a nonnegative martingale that lost everything, was
    # refused as "not finite"
    m = _vector(log_martingale, "log_martingale", allow_inf=True)
    hit = np.flatnonzero(m >= _alarm_level(a))
    return int(hit[0]) if hit.size else None


def change_point(pvalues: object, alarm: int) -> int:
    """Where the change that raised an alarm began: the CUSUM estimate on the p-values up to the alarm.

    For each direction (scores up: small p-values; scores down: large ones) the log-gains of the power betting
    function ``g_i = log(k) + (k - 1) log(q_i)``, ``q_i = p_i`` or ``1 - p_i``, ``k = 0.2`` (Vovk, Nouretdinov,
    Gammerman 2003) have mean ``log k + 1 - k < 0`` while the cases are exchangeable and grow after a change in
    that direction; the estimate is the start of the run ``k..alarm`` with the largest sum of gains over both
    directions (Page's CUSUM; the last such start on ties). NaN p-values count as gain 0.

    Args:
        pvalues: ``(N,)`` the p-values the martingale bet on.
        alarm: the index of the alarm (:func:`first_alarm`).

    Returns:
        The 0-based index of the first case estimated to follow the change.

    Raises:
        ValueError: ``alarm`` is not an index of ``pvalues``, or p-values outside ``[0, 1]``.

    Example:
        >>> change_point([0.5, 0.6, 0.4, 0.01, 0.02, 0.03], alarm=5)
        3
        >>> change_point([0.5, 0.02, 0.5, 0.3, 0.97, 0.99, 0.98], alarm=6)
        4
    """
    p = _check_pvalues(pvalues)
    if isinstance(alarm, bool) or not isinstance(alarm, (int, np.integer)) or not 0 <= alarm < len(p):
        raise ValueError(f"alarm must be an index of pvalues (0 to {len(p) - 1}), got {alarm!r}")
    best, start = -math.inf, 0
    for q in (p[: alarm + 1], 1 - p[: alarm + 1]):
        g = np.nan_to_num(math.log(_CUSUM_POWER) + (_CUSUM_POWER - 1) * np.log(np.maximum(q, 1e-12)), nan=0.0)
        tail = np.cumsum(g[::-1])[::-1]  # tail[k] = sum of g[k..alarm]
        k = len(tail) - 1 - int(np.argmax(tail[::-1]))  # the last maximum
        if tail[k] > best:
            best, start = float(tail[k]), k
    return start


@dataclass(frozen=True)
class MartingaleResult:
    """A conformal test martingale on one stream.

    Attributes:
        pvalues: ``(N,)`` the online conformal p-values.
        log_martingale: ``(N,)`` ``log S_n``.
        alpha: the false-alarm probability.
        alarm: index of the first case at which ``S_n >= 1 / alpha``, or None.
        change_point: the estimated first case after the change (:func:`change_point`), or None without an alarm.
    """

    pvalues: np.ndarray
    log_martingale: np.ndarray
    alpha: float
    alarm: int | None
    change_point: int | None


def score_martingale(
    scores: object, reference: object = (), *, alpha: float = 0.05, jump: float = JUMPER_RATE,
    seed: int | np.random.Generator | None = 0,
) -> MartingaleResult:
    """Conformal p-values, the Simple Jumper martingale, its alarm and change point, on one stream of scores.

    Args:
        scores: ``(N,)`` the stream (:func:`conformal_pvalues`).
        reference: ``(M,)`` the calibration cohort's scores.
        alpha: the false-alarm probability over the whole (unbounded) stream.
        jump: the jumping rate (:func:`simple_jumper`).
        seed: seed of the p-values' tie-breaking draws.

    Returns:
        The :class:`MartingaleResult`.

    Example:
        >>> rng = np.random.default_rng(1)
        >>> stream = np.concatenate([rng.normal(0, 1, 100), rng.normal(2, 1, 100)])
        >>> r = score_martingale(stream, rng.normal(0, 1, 200))
        >>> r.alarm is not None and 100 <= r.alarm < 130, r.change_point in range(90, 110)
        (True, True)
    """
    a = _check_alpha(alpha)
    p = conformal_pvalues(scores, reference, seed=seed)
    log_s = simple_jumper(p, jump)
    alarm = first_alarm(log_s, a)
    return MartingaleResult(p, log_s, a, alarm, None if alarm is None else change_point(p, alarm))


def _losses(losses: object, target: float) -> np.ndarray:
    x = _vector(losses, "losses")
    if ((x < 0) | (x > 1)).any():
        raise ValueError("losses must lie in [0, 1] (failure 0/1, or 1 - Dice)")
    if isinstance(target, (bool, np.bool_)) or not isinstance(target, Real) or not 0 < target < 1:
        raise ValueError(f"target must be a number in (0, 1), got {target!r}")
    return x


def risk_bets(losses: object, target: float, cap: float = RISK_BET_CAP) -> np.ndarray:
    """The bets ``lam_n >= 0`` of the risk e-process, each computed from the losses before case ``n`` only.

    ``lam_n = clip((mu - target) / (target (1 - target)), 0, cap)``: the growth-rate-optimal (Kelly) bet against a
    failure rate ``target`` when the failure rate is ``mu`` (for losses in ``[0, 1]`` the binary loss is the one of
    largest variance), with ``mu`` an exponentially weighted mean (half-life 25 labelled cases, a prior pseudo-case
    at the target) of the recent losses, so that the bets follow a risk that changes and stay at 0 while the risk is
    under the target. A bet that depends only on the past keeps the e-process valid whatever the rule (Waudby-Smith
    and Ramdas 2023, predictable bets).

    Args:
        losses: ``(N,)`` losses in ``[0, 1]``; NaN (no label) is skipped.
        target: the certified target risk in ``(0, 1)``.
        cap: the largest bet, in ``(0, 1)``.

    Returns:
        ``(N,)`` the bets (0 at NaN losses).

    Example:
        >>> risk_bets([1, 1, 1, 0], target=0.1).round(3)
        array([0. , 0.9, 0.9, 0.9])
    """
    x = _losses(losses, target)
    if isinstance(cap, (bool, np.bool_)) or not isinstance(cap, Real) or not 0 < cap < 1:
        raise ValueError(f"cap must be in (0, 1), got {cap!r}")
    t, c = float(target), float(cap)
    decay = 0.5 ** (1 / _BET_HALF_LIFE)
    keep = ~np.isnan(x)
    xs = x[keep]
    out = np.zeros(len(x))
    if not len(xs):
        return out
    # Before the k-th labelled case: w_k = decay w_{k-1} + 1, s_k = decay s_{k-1} + x_{k-1}, from w_0 = 1 and
    # s_0 = t (one pseudo-case at the target). lfilter runs this first-order recurrence in C with the same float64
    # operations in the same order (decay * previous + input), so the bets equal those of the per-case Python loop
    # before review 65 bit for bit (checked on random streams in the tests), ~10x faster.
    # scipy.signal loads scipy.stats (~0.4 s in all): imported by the bets, not by every monitor command (found by
    # the hostile review of review 65: `monai-unc monitor` imported both on every run)
    from scipy.signal import lfilter

    w, s1 = np.empty(len(xs)), np.empty(len(xs))
    w[0], s1[0] = 1.0, t
    w[1:] = lfilter([1.0], [1.0, -decay], np.ones(len(xs) - 1), zi=[decay * 1.0])[0]
    s1[1:] = lfilter([1.0], [1.0, -decay], xs[:-1], zi=[decay * t])[0]
    out[keep] = np.minimum(np.maximum((s1 / w - t) / (t * (1 - t)), 0.0), c)
    return out


def risk_eprocess(losses: object, target: float, m: float | None = None) -> np.ndarray:
    """``log K_n(m) = sum_{i <= n} log(1 + lam_i (x_i - m))``, the betting e-process against a risk ``m``.

    With the bets of :func:`risk_bets` (nonnegative, predictable) ``K_n(m)`` is a nonnegative supermartingale
    whenever every case's conditional expected loss is at most ``m``, so it exceeds ``1 / alpha`` with probability
    at most ``alpha``, ever (Waudby-Smith and Ramdas 2023; Podkopaev and Ramdas 2022).

    Args:
        losses: ``(N,)`` losses in ``[0, 1]`` (NaN skipped).
        target: the certified target risk (it sizes the bets).
        m: the risk tested against, in ``[0, 1]`` (default ``target``).

    Returns:
        ``(N,)`` ``log K_n(m)``.

    Raises:
        ValueError: losses outside ``[0, 1]``, ``target`` outside ``(0, 1)`` or ``m`` outside ``[0, 1]`` (or NaN).

    Example:
        >>> np.exp(risk_eprocess([0, 1, 1, 1], target=0.1)).round(2)
        array([1.  , 1.  , 1.81, 3.28])
    """
    x = _losses(losses, target)
    if m is None:
        mm = float(target)
    elif isinstance(m, (bool, np.bool_)) or not isinstance(m, Real) or not 0 <= m <= 1:
        # a risk outside [0, 1] makes a factor 1 + lam (x - m) negative (a NaN e-process) or the test meaningless
        raise ValueError(f"m must be a risk in [0, 1], got {m!r}")
    else:
        mm = float(m)
    lam = risk_bets(x, target)
    terms = np.where(np.isnan(x), 0.0, np.log1p(lam * (np.nan_to_num(x) - mm)))
    return np.cumsum(terms)


def _rejected_hits(x: np.ndarray, lam: np.ndarray, m: np.ndarray, rows: int, level: float) -> np.ndarray:
    """Per case ``n < rows``: how many of the risks ``m`` have ``log K_n(m) >= level`` (columns in bounded blocks)."""
    hits = np.zeros(rows, dtype=np.int64)
    block = max(1, 4_000_000 // max(rows, 1))
    for start in range(0, len(m), block):
        mm = m[start:start + block]
        hits += (np.cumsum(np.log1p(lam[:rows, None] * (x[:rows, None] - mm[None, :])), axis=0) >= level).sum(axis=1)
    return hits


def _rejected_counts(x: np.ndarray, lam: np.ndarray, grid: np.ndarray, level: float) -> np.ndarray:
    """Per case: how many points of the increasing ``grid`` have ``log K_n(m) >= level`` (a prefix of the grid).

    ``log K_n(m)`` decreases in ``m``, so the rejected points of case ``n`` are the first ``count_n``. A coarse pass
    over every ``s``-th point (``s ~ sqrt(len(grid))``) finds the cell of each case, stopping at the last case that
    the previous coarse point rejected (the later cases reject no larger ``m``); the ``s - 1`` points inside a cell
    are then summed only for the cases up to the last one in that cell. Each ``log K_n(m)`` computed is the same
    cumulative sum as the full ``N x len(grid)`` table's, so the counts are the same; the logarithms are about
    ``N x 2 sqrt(len(grid))`` when the bound settles, instead of ``N x len(grid)``.
    """
    step = max(1, math.isqrt(len(grid)))
    coarse = np.arange(0, len(grid), step)
    cell = np.zeros(len(x), dtype=np.int64)  # per case: how many coarse points are rejected
    rows = len(x)
    for k in range(len(coarse)):
        if not rows:
            break
        hit = _rejected_hits(x, lam, grid[coarse[k:k + 1]], rows, level)
        cell[:rows] += hit
        last = np.flatnonzero(hit)
        rows = int(last[-1]) + 1 if len(last) else 0
    count = np.where(cell > 0, coarse[np.maximum(cell - 1, 0)] + 1, 0)
    for k in np.unique(cell[cell > 0]).tolist():  # cases whose bound lies between coarse points k - 1 and k
        inside = np.flatnonzero(cell == k)
        fine = grid[coarse[k - 1] + 1:coarse[k] if k < len(coarse) else len(grid)]
        if len(fine):
            count[inside] += _rejected_hits(x, lam, fine, int(inside[-1]) + 1, level)[inside]
    return count


def risk_lower_bound(losses: object, target: float, alpha: float, resolution: int = 2000) -> np.ndarray:
    """The lower confidence sequence ``L_n = sup {m : K_n(m) >= 1 / alpha}`` on a grid (0 when no ``m`` qualifies).

    The bets do not depend on ``m``, so ``K_n(m)`` decreases in ``m`` and the rejected risks ``{m : K_n(m) >= 1 /
    alpha}`` form an interval from 0. ``L_n`` is the largest point of the grid ``{0, 1/resolution, ..., 1}`` and
    ``target`` in it, which rounds the exact bound down by less than ``1 / resolution`` (a lower bound stays valid
    when lowered). With probability at least ``1 - alpha``, ``L_n`` never exceeds the largest conditional risk of the
    cases so far, for every ``n`` at once; the harmful-shift alarm ``L_n >= target`` is the same event as
    ``K_n(target) >= 1 / alpha``. Cost: the cases bet 0 (the risk estimate under the target) need no logarithm
    (their sums are the previous case's), and the others about ``N x 2 sqrt(resolution)`` logarithms once the bound
    settles (a coarse pass, then the grid points around each case's bound; ``N x (resolution + 1)`` in earlier
    versions), in blocks of bounded memory; the values are those of the full grid, bit for bit.

    Args:
        losses: ``(N,)`` losses in ``[0, 1]`` (NaN skipped: the bound carries over).
        target: the certified target risk (it sizes the bets).
        alpha: the miscoverage in ``(0, 1)``.
        resolution: the number of grid steps over ``[0, 1]``.

    Returns:
        ``(N,)`` the lower bounds in ``[0, 1]``.

    Example:
        >>> risk_lower_bound([1] * 8, target=0.1, alpha=0.05).round(3)[-3:]
        array([0.088, 0.28 , 0.406])
    """
    a = _check_alpha(alpha)
    x = _losses(losses, target)
    if isinstance(resolution, (bool, np.bool_)) or not isinstance(resolution, Integral) or resolution < 1:
        raise ValueError(f"resolution must be a positive integer, got {resolution!r}")
    keep = ~np.isnan(x)
    xs, lam = x[keep], risk_bets(x, target)[keep]
    grid = np.unique(np.concatenate([np.linspace(0.0, 1.0, resolution + 1), [float(target)]]))
    level = _alarm_level(a)
    count = np.zeros(len(xs), dtype=np.int64)  # per n: how many grid points (from 0) are rejected
    # A case bet 0 adds log1p(+-0) = +-0 to every log K_n(m): its sums equal those of the last bet case, bit for bit.
    bet = np.flatnonzero(lam > 0)
    if len(bet):
        at = np.repeat(np.arange(len(bet)), np.diff(np.append(bet, len(xs))))  # case n >= bet[0]: its last bet case
        count[bet[0]:] = _rejected_counts(xs[bet], lam[bet], grid, level)[at]
    defined = np.where(count > 0, grid[np.maximum(count - 1, 0)], 0.0)
    out = np.zeros(len(x))
    out[keep] = defined
    # NaN losses carry the previous bound forward
    return out[np.maximum.accumulate(np.where(keep, np.arange(len(out)), 0))] if len(out) else out


@dataclass(frozen=True)
class RiskTestResult:
    """The harmful-shift test of one stream of audited losses.

    Attributes:
        log_eprocess: ``(N,)`` ``log K_n(target)``.
        lower_bound: ``(N,)`` the running maximum of the lower confidence sequence (:func:`risk_lower_bound`):
            ``max_{k <= n} L_k``, as valid a lower bound on the largest risk of the cases so far as ``L_n`` (every
            ``L_k`` holds at once) and at least ``target`` from the alarm on.
        target: the certified target risk.
        alpha: the false-alarm probability.
        alarm: index of the first loss at which ``K_n(target) >= 1 / alpha`` (lower bound at or above the
            target), or None.
    """

    log_eprocess: np.ndarray
    lower_bound: np.ndarray
    target: float
    alpha: float
    alarm: int | None


def risk_test(losses: object, target: float, alpha: float = 0.05) -> RiskTestResult:
    """The harmful-shift alarm on audited losses of accepted cases (Podkopaev and Ramdas 2022).

    Args:
        losses: ``(N,)`` losses in ``[0, 1]`` in the order they became known (a sequence that only grows, so that
            every look continues the same e-process; NaN: not audited).
        target: the certified target risk.
        alpha: the false-alarm probability over the whole stream, while every case's risk is at most ``target``.

    Returns:
        The :class:`RiskTestResult`.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> x = np.concatenate([rng.uniform(size=200) < 0.05, rng.uniform(size=300) < 0.2]).astype(float)
        >>> r = risk_test(x, target=0.1)
        >>> r.alarm is not None and r.alarm > 200
        True
    """
    a = _check_alpha(alpha)
    log_k = risk_eprocess(losses, target)
    # the largest bound so far: once an alarm is raised, later cases cannot report a bound under the target
    bound = np.maximum.accumulate(risk_lower_bound(losses, target, a)) if len(log_k) else np.zeros(0)
    return RiskTestResult(log_k, bound, float(target), a, first_alarm(log_k, a))
