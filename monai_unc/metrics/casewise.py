"""Case-level downstream tasks: OoD detection, failure detection, active learning, uncertainty histograms.

Each function takes one aggregated uncertainty per case (see :mod:`monai_unc.aggregation`) and returns
floats or small numpy arrays. Definitions follow ValUES (ValUES, Appendix A.2-A.4) and RETINA
(RETINA (Band et al.), Sec. 2.4 and Appendix D.1).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .._deprecation import deprecated_arg_names
from .._utils import (
    ArrayLike,
    case_pair,
    case_vector,
    check_bool,
    holds_bool,
    label_text,
    real_array,
    to_numpy,
    warn_nan,
    warn_tied,
)
from .discrimination import auroc
from .selective import augrc_of, aurc_of, eaurc_of, ranked_risk

__all__ = [
    "FailureDetection",
    "IID_SHIFTS",
    "UncertaintyHistograms",
    "fill_undefined_scores",
    "in_distribution_labels",
    "is_in_distribution",
    "ood_auroc",
    "ood_auroc_by_shift",
    "failure_detection",
    "al_improvement",
    "uncertainty_histograms",
]


class FailureDetection(NamedTuple):
    """Failure detection with risk ``1 - Dice`` (ValUES A.3): AURC, E-AURC and AUGRC (lower is better).

    Returned by :func:`failure_detection`.

    Attributes:
        aurc: area under the risk-coverage curve (:func:`monai_unc.metrics.aurc`).
        eaurc: excess AURC (:func:`monai_unc.metrics.eaurc`).
        augrc: area under the generalized risk-coverage curve (:func:`monai_unc.metrics.augrc`).

    Example:
        >>> from monai_unc.metrics import failure_detection
        >>> failure_detection([0.1, 0.2, 0.3, 0.4], [0.9, 0.8, 0.85, 0.5])._fields
        ('aurc', 'eaurc', 'augrc')
    """

    aurc: float
    eaurc: float
    augrc: float


class UncertaintyHistograms(NamedTuple):
    """Data for RETINA's predictive-uncertainty histogram (correct in blue, incorrect in red).

    Returned by :func:`uncertainty_histograms`.

    Attributes:
        edges: ``(n_bins + 1,)`` shared bin edges.
        correct: ``(n_bins,)`` density (integrating to 1 over ``edges``) or counts of the correct cases.
        incorrect: ``(n_bins,)`` the same for the incorrect cases.
        n_correct: number of correct cases.
        n_incorrect: number of incorrect cases.

    Example:
        >>> from monai_unc.metrics import uncertainty_histograms
        >>> h = uncertainty_histograms([0.1, 0.2, 0.6, 0.9], [True, True, False, False], bins=2, density=False)
        >>> h.correct, h.incorrect, h.n_correct
        (array([2., 0.]), array([0., 2.]), 2)
    """

    edges: np.ndarray
    correct: np.ndarray
    incorrect: np.ndarray
    n_correct: int
    n_incorrect: int


@deprecated_arg_names({"scores_iid": "uncertainty_iid", "scores_ood": "uncertainty_ood"})
def ood_auroc(uncertainty_iid: ArrayLike, uncertainty_ood: ArrayLike) -> float:
    """AUROC of separating OoD cases (positive) from i.i.d. cases by their uncertainty (ValUES A.2).

    ``AUROC = P(u_ood > u_iid) + 0.5 P(u_ood = u_iid)`` (Mann-Whitney ``U``), so ties count one half as in
    ``sklearn.metrics.roc_auc_score``; computed by :func:`monai_unc.metrics.discrimination.auroc`, the same code as
    the voxel-wise ``error_auroc``. 1 = every OoD case more uncertain than every i.i.d. case, 0.5 = chance.

    Args:
        uncertainty_iid: ``(N_iid,)`` per-case uncertainty of in-distribution cases (formerly ``scores_iid``).
        uncertainty_ood: ``(N_ood,)`` per-case uncertainty of shifted (OoD) cases (formerly ``scores_ood``).

    Returns:
        The AUROC as a float in [0, 1].

    Example:
        >>> from monai_unc.metrics import ood_auroc
        >>> ood_auroc([0.1, 0.2, 0.3], [0.25, 0.4, 0.5])
        0.8888888888888888
    """
    a = case_vector(uncertainty_iid, "uncertainty_iid")
    b = case_vector(uncertainty_ood, "uncertainty_ood")
    return auroc(b, a)


#: the shift labels that mark in-distribution cases, compared with a label stripped of surrounding whitespace and
#: lower-cased (:func:`is_in_distribution`): ``monai-unc evaluate --shifts``, the report's "scores by shift" plot and
#: :class:`monai_unc.engines.CaseScoresHandler` alike; an empty label is in-distribution
IID_SHIFTS = ("", "none", "iid", "id", "clean", "in-distribution")


def _label_text(label: Any) -> str:
    """A shift label as :func:`is_in_distribution` compares it: its text stripped and lower-cased.

    A missing label (None, or the NaN that pandas reads from an empty cell) is ``""``, an empty label.
    """
    return label_text(label).strip().lower()


class _LabelSet(frozenset):
    """The labels of :func:`in_distribution_labels`, already compared text (what :func:`is_in_distribution` skips)."""

    __slots__ = ()


def in_distribution_labels(labels: Iterable[Any] = IID_SHIFTS) -> frozenset[str]:
    """The in-distribution labels as :func:`is_in_distribution` compares them, for a loop over many cases.

    Each label's text stripped and lower-cased (None or NaN reads as ``""``), once: passing the result as ``labels`` to
    :func:`is_in_distribution` skips this step in every call, with the same answers.

    Args:
        labels: the in-distribution labels (default :data:`IID_SHIFTS`); a result of this function is returned as is.
            One label given as a string is that label (not its characters).

    Returns:
        A frozenset of the compared texts.

    Example:
        >>> iid = in_distribution_labels(["Site A", " none"])
        >>> sorted(iid), [is_in_distribution(s, iid) for s in ("site a", "NONE", "site B")]
        (['none', 'site a'], [True, True, False])
    """
    if isinstance(labels, _LabelSet):
        return labels
    if isinstance(labels, (str, bytes)):  # found by hostile testing: "clean" was the labels c, l, e, a, n
        labels = (labels.decode() if isinstance(labels, bytes) else labels,)
    return _LabelSet(_label_text(label) for label in labels)


#: :data:`IID_SHIFTS` as compared, made once (the default of :func:`is_in_distribution`)
_IID_TEXTS = in_distribution_labels(IID_SHIFTS)


def is_in_distribution(shift: Any, labels: Iterable[Any] = IID_SHIFTS) -> bool:
    """Whether a case's shift label marks it in-distribution: the one rule of every OoD AUROC of the package.

    The label, as text without surrounding whitespace and lower-cased, is one of ``labels`` (compared the same way).
    A loop over cases with other labels than :data:`IID_SHIFTS` passes :func:`in_distribution_labels` of them, which
    are compared as they are; other labels are made so in every call.

    Args:
        shift: the case's shift label (None or NaN, pandas' empty cell, reads as ``""``).
        labels: the in-distribution labels (default :data:`IID_SHIFTS`), or :func:`in_distribution_labels` of them.

    Returns:
        True for an in-distribution case.

    Example:
        >>> [is_in_distribution(s) for s in ("none", " None ", "Clean", "", "noise")]
        [True, True, True, True, False]
        >>> is_in_distribution("site A", ["Site A"]), is_in_distribution("none", ["site A"])
        (True, False)
    """
    texts = _IID_TEXTS if labels is IID_SHIFTS else in_distribution_labels(labels)
    return _label_text(shift) in texts


def _score_values(scores: Any, name: str) -> np.ndarray:
    """``scores`` as a flat float64 copy: real numbers, NaN or inf for an undefined score (TypeError naming ``name``).

    Found by hostile testing: text (``"0.9"``) was parsed and complex scores lost their imaginary part, where every
    other case metric refuses both (:func:`monai_unc._utils.case_vector`); ``None`` in a list is undefined, as before.
    """
    return real_array(to_numpy(scores, name, objects=True), name, " (NaN or inf for an undefined score)").reshape(-1)


def _filled(out: np.ndarray) -> np.ndarray:
    """:func:`fill_undefined_scores` of a checked float64 copy, in place."""
    bad = ~np.isfinite(out)
    if bad.any():
        top = np.nanmax(out[~bad]) if (~bad).any() else 0.0
        # found by hostile testing: from 2**53 on, max + 1 rounds to max, so an undefined score tied with the most
        # uncertain defined case and the triage order (ties by case id) could put it after that case
        fill = top + 1.0
        out[bad] = fill if fill > top else np.nextafter(top, np.inf)
    return out


def fill_undefined_scores(scores: ArrayLike) -> np.ndarray:
    """Undefined (NaN or infinite) scores become larger than every defined one: those cases rank most uncertain.

    The one rule for a case without a defined score (e.g. ``fg_mean`` of an empty predicted foreground) in the
    cohort's ranking: triage, failure detection, the referral curve and the OoD AUROC (:func:`ood_auroc_by_shift`).
    A ranking only: the risk-controlled threshold does not fill, it refers such a case and counts it as referred in
    its certification (:func:`~monai_unc.metrics.risk_control.accepted_by_threshold`), since a stand-in above every
    defined score would make a threshold that accepts every case count it as accepted.

    Args:
        scores: per-case scores ``(N,)``; NaN or inf marks an undefined score.

    Returns:
        A float64 copy with every non-finite score set to ``max(defined) + 1`` (``1`` when none is defined), or to the
        next float64 above ``max(defined)`` where adding 1 does not change it (``|max| >= 2**53``).

    Raises:
        TypeError: ``scores`` holds something else than real numbers (text, complex numbers); a list may hold ``None``
            for an undefined score.

    Example:
        >>> fill_undefined_scores(np.array([0.2, np.nan, 0.5]))
        array([0.2, 1.5, 0.5])
    """
    return _filled(_score_values(scores, "scores"))


def ood_auroc_by_shift(
    uncertainty: ArrayLike, shifts: Sequence[Any], iid_labels: Iterable[Any] = IID_SHIFTS
) -> dict[str, Any]:
    """The OoD AUROC of a cohort from its case scores and shift labels, overall and per shift label.

    In-distribution cases are those :func:`is_in_distribution` says are (``iid_labels``); a case without a defined
    score (NaN or inf) ranks as the most uncertain (:func:`fill_undefined_scores`), as in the triage. The one
    computation of ``monai-unc evaluate --shifts`` (``summary.json``'s ``ood``) and of
    :class:`monai_unc.engines.CaseScoresHandler`.

    Args:
        uncertainty: ``(N,)`` per-case scores.
        shifts: ``N`` shift labels (None or NaN, pandas' empty cell, reads as ``""``; other values as their text,
            ``0`` as ``"0"``).
        iid_labels: the in-distribution labels (default :data:`IID_SHIFTS`).

    Returns:
        ``{"n_iid", "n_ood"}`` and, when both are non-zero, ``"auroc"`` (:func:`ood_auroc` of the shifted cases
        against the in-distribution ones) and ``"per_shift"`` (``{label: AUROC}`` of each shifted label, as written,
        against all in-distribution cases).

    Raises:
        TypeError: ``shifts`` is one string rather than one label per case, or ``uncertainty`` holds something else
            than real numbers.
        ValueError: ``uncertainty`` and ``shifts`` differ in length.

    Example:
        >>> r = ood_auroc_by_shift([0.1, 0.2, float("nan"), 0.3], ["none", "Clean", "noise", "blur"])
        >>> r["n_iid"], r["n_ood"], r["auroc"], r["per_shift"]
        (2, 2, 1.0, {'blur': 1.0, 'noise': 1.0})
    """
    if isinstance(shifts, (str, bytes)):
        # found by hostile testing: one label given as a string was read as one label per character ("blur" for four
        # cases: the shifts b, l, u, r), as in_distribution_labels once read "clean"
        raise TypeError(f"shifts must hold one label per case (a list), got the string {shifts!r}")
    raw = _score_values(uncertainty, "uncertainty")
    defined = np.isfinite(raw)
    scores = _filled(raw)  # as fill_undefined_scores, naming the argument
    # None and NaN (pandas' empty cell) read as "", as is_in_distribution reads them and as read_shifts reads an empty
    # cell (found by hostile testing: a NaN label was the shift "nan", so a table read by pandas gave another AUROC)
    labels = [label_text(s) for s in shifts]
    if len(labels) != scores.size:
        raise ValueError(f"uncertainty and shifts must have one entry per case, got {scores.size} and {len(labels)}")
    iid_texts = in_distribution_labels(iid_labels)  # once, not per case
    iid = np.array([is_in_distribution(s, iid_texts) for s in labels], dtype=bool)
    out: dict[str, Any] = {"n_iid": int(iid.sum()), "n_ood": int((~iid).sum())}
    if iid.any() and (~iid).any() and not defined.any():
        # found by review 61: every score undefined ranked every case alike, AUROC 0.5 without a word
        nan = warn_nan(f"ood_auroc_by_shift: every one of the {scores.size} scores is undefined (NaN or inf); the OoD "
                       "AUROC is undefined")
        out["auroc"] = nan
        out["per_shift"] = {s: nan for s in sorted({s for s, i in zip(labels, iid) if not i})}
    elif iid.any() and (~iid).any():
        out["auroc"] = ood_auroc(scores[iid], scores[~iid])
        out["per_shift"] = {s: ood_auroc(scores[iid], scores[np.array(labels) == s])
                            for s in sorted({s for s, i in zip(labels, iid) if not i})}
    return out


def failure_detection(uncertainty: ArrayLike, dice: ArrayLike, optimum: str = "empirical") -> FailureDetection:
    """Failure detection (ValUES A.3, eqs. 4-8): risk ``l = 1 - Dice`` per case, confidence ``-uncertainty``.

    Args:
        uncertainty: ``(N,)`` aggregated uncertainty per case.
        dice: ``(N,)`` Dice per case in [0, 1] (ValUES averages the Dice of the mean prediction against each
            rater, eq. 3).
        optimum: E-AURC optimum, see :func:`monai_unc.metrics.selective.eaurc`.

    Returns:
        :class:`FailureDetection` ``(aurc, eaurc, augrc)`` of the risk ``1 - Dice``.

    Example:
        >>> from monai_unc.metrics import failure_detection
        >>> res = failure_detection([0.1, 0.2, 0.3, 0.4], [0.9, 0.8, 0.85, 0.5])
        >>> [round(v, 4) for v in res]
        [0.1422, 0.0062, 0.0828]
    """
    u, d = case_pair(uncertainty, dice, "dice", "uncertainty")
    if d.min() < 0 or d.max() > 1:
        raise ValueError(f"dice must lie in [0, 1], got values in [{d.min():.4g}, {d.max():.4g}]")
    risk = 1.0 - d
    # one warning for the three areas of a constant score (found by review 61: none at all)
    warn_tied(u, "failure_detection", "AURC and AUGRC are those of no ranking (one point at the mean risk) and "
              "E-AURC charges the mean risk", stacklevel=3)
    # the cores of aurc, eaurc and augrc, which do not warn (found by review 68: their warnings were filtered by text,
    # a process-wide filter)
    g, r = ranked_risk(u, risk)
    return FailureDetection(aurc=aurc_of(g, r), eaurc=eaurc_of(g, r, optimum), augrc=augrc_of(g, r))


def _mean_dice(x: Any, name: str) -> float:
    """The mean of Dice values in [0, 1] (ValueError naming ``name`` otherwise)."""
    a = case_vector(np.atleast_1d(to_numpy(x, name)), name)
    # found by hostile testing: a Dice of -0.5 or 1.5 (a percentage, a loss) gave a relative change without complaint
    if a.min() < 0 or a.max() > 1:
        raise ValueError(f"{name} must hold Dice values in [0, 1], got values in [{a.min():.4g}, {a.max():.4g}]")
    return float(a.mean())


def al_improvement(
    dice_t1: ArrayLike | float,
    dice_t2: ArrayLike | float,
    dice_random_t1: ArrayLike | float,
    dice_random_t2: ArrayLike | float,
) -> float:
    """Active-learning improvement over random querying (ValUES A.4, eqs. 9-10).

    ``C = (Dice_t2 - Dice_t1) / Dice_t1`` for the uncertainty-driven query and for random querying;
    the result is ``C_method - C_random`` (a fraction; multiply by 100 for percent).

    Args:
        dice_t1: test-set Dice after cycle 1 of the uncertainty-driven query: a float, or per-case Dice values
            that are averaged first.
        dice_t2: the same after cycle 2.
        dice_random_t1: test-set Dice after cycle 1 of random querying.
        dice_random_t2: the same after cycle 2.

    Returns:
        ``C_method - C_random`` as a float. A zero Dice at cycle 1 leaves the relative change undefined: NaN with a
        ``UserWarning``.

    Raises:
        ValueError: a Dice outside [0, 1] (e.g. in percent), NaN or inf, or an empty array.

    Example:
        >>> from monai_unc.metrics import al_improvement
        >>> round(al_improvement(0.70, 0.77, 0.70, 0.735), 4)  # +10 % against +5 %
        0.05
    """
    d1, d2 = _mean_dice(dice_t1, "dice_t1"), _mean_dice(dice_t2, "dice_t2")
    r1, r2 = _mean_dice(dice_random_t1, "dice_random_t1"), _mean_dice(dice_random_t2, "dice_random_t2")
    if d1 == 0 or r1 == 0:
        return warn_nan("al_improvement: a cycle-1 Dice of 0 makes the relative change undefined")
    return (d2 - d1) / d1 - (r2 - r1) / r1


def uncertainty_histograms(
    uncertainty: ArrayLike,
    correct: ArrayLike,
    bins: int | ArrayLike = 20,
    range: tuple[float, float] | None = None,
    density: bool = True,
) -> UncertaintyHistograms:
    """Histograms of per-case uncertainty for correct and incorrect cases on shared bins (RETINA Sec. 2.4).

    A reliable model puts the correct cases' mass near low uncertainty and the incorrect cases' mass at
    higher uncertainty; incorrect cases with low uncertainty are the dangerous silent failures (Band et al.:
    *Benchmarking Bayesian Deep Learning on Diabetic Retinopathy Detection Tasks*).

    Args:
        uncertainty: ``(N,)`` per-case uncertainty.
        correct: ``(N,)`` booleans (or 0/1): whether the case's prediction is acceptable (for segmentation,
            e.g. ``dice >= 0.8``).
        bins: number of equal-width bins or explicit edges (as ``numpy.histogram``).
        range: ``(lo, hi)`` of the bins; default the range of all cases, so both groups share the axis.
        density: normalise each group to unit area (RETINA plots densities); ``False`` gives counts.

    Returns:
        :class:`UncertaintyHistograms` (numpy arrays). Cases outside the bins (a ``range`` or explicit edges that do
        not cover them) are left out of the histograms with a ``UserWarning`` (``n_correct`` and ``n_incorrect`` still
        count them); a group without cases inside the bins gets an all-NaN histogram and a ``UserWarning``.

    Raises:
        TypeError: ``bins`` or ``range`` holds a bool (``True`` is no bin count), or ``density`` is not a bool.
        ValueError: ``correct`` is not 0/1, or lengths differ.

    Example:
        >>> from monai_unc.metrics import uncertainty_histograms
        >>> h = uncertainty_histograms([0.1, 0.2, 0.3, 0.6, 0.9], [1, 1, 0, 1, 0], bins=4, range=(0.0, 1.0))
        >>> h.edges
        array([0.  , 0.25, 0.5 , 0.75, 1.  ])
        >>> h.correct, h.incorrect
        (array([2.66666667, 0.        , 1.33333333, 0.        ]), array([0., 2., 0., 2.]))
    """
    h, said = uncertainty_histograms_core(uncertainty, correct, bins, range, density)
    for line in said:
        warnings.warn(line, UserWarning, stacklevel=2)
    return h


def uncertainty_histograms_core(
    uncertainty: ArrayLike,
    correct: ArrayLike,
    bins: int | ArrayLike = 20,
    range: tuple[float, float] | None = None,
    density: bool = True,
) -> tuple[UncertaintyHistograms, list[str]]:
    """:func:`uncertainty_histograms` without its warnings: the histograms and the lines it would warn.

    For a caller that shows an empty group as such (the report's histogram plot draws it empty); in earlier versions
    it ignored every ``UserWarning`` inside ``warnings.catch_warnings()``, a process-wide filter. The same arguments,
    checks and histograms as :func:`uncertainty_histograms`.

    Args:
        uncertainty: as :func:`uncertainty_histograms`.
        correct: as :func:`uncertainty_histograms`.
        bins: as :func:`uncertainty_histograms`.
        range: as :func:`uncertainty_histograms`.
        density: as :func:`uncertainty_histograms`.

    Returns:
        ``(histograms, lines)``: the :class:`UncertaintyHistograms` and the ``UserWarning`` lines of
        :func:`uncertainty_histograms`, in order: cases outside the bins (never with the default ``range`` and a
        bin count: the bins then span every case), then each group without cases inside the bins (its histogram
        all NaN).

    Example:
        >>> h, said = uncertainty_histograms_core([0.1, 0.2, 0.3], [1, 1, 1], bins=2, density=False)
        >>> h.correct.tolist(), said
        ([1.0, 2.0], ['uncertainty_histograms: no incorrect cases, that histogram is NaN'])
    """
    density = check_bool(density, "density")  # found by hostile testing: density="no" gave densities
    for name, value in (("bins", bins), ("range", range)):
        # found by review 67: bins=True was numpy's one bin, range=(False, True) the range (0, 1), without a word
        if holds_bool(value):
            raise TypeError(f"{name} must hold numbers (a bin count, bin edges or a (lo, hi) range), got {value!r}")
    u, c = case_pair(uncertainty, correct, "correct", "uncertainty")
    if not np.isin(c, (0.0, 1.0)).all():
        raise ValueError("correct must be boolean (or 0/1) per case")
    ok = c.astype(bool)
    edges = np.histogram_bin_edges(u, bins=bins, range=range)
    # found by hostile testing: numpy drops the cases outside the edges without a word, and a group with none inside
    # came back NaN with numpy's "invalid value encountered in divide" instead of this function's warning
    inside = (u >= edges[0]) & (u <= edges[-1])
    said: list[str] = []
    if not inside.all():
        said.append(f"uncertainty_histograms: {int((~inside).sum())} of {u.size} case(s) lie outside the bins "
                    f"[{edges[0]:.4g}, {edges[-1]:.4g}] and are not in the histograms")
    hists = []
    for name, sel in (("correct", ok), ("incorrect", ~ok)):
        if (sel & inside).any():
            h, _ = np.histogram(u[sel & inside], bins=edges, density=density)
            hists.append(h.astype(np.float64))
        else:
            said.append(f"uncertainty_histograms: no {name} cases{' inside the bins' if sel.any() else ''}, "
                        "that histogram is NaN")
            hists.append(np.full(edges.size - 1, np.nan))
    return UncertaintyHistograms(edges, hists[0], hists[1], int(ok.sum()), int((~ok).sum())), said
