"""Case-level downstream tasks: OoD detection, failure detection, active learning, uncertainty histograms.

Each function takes one aggregated uncertainty per case (see :mod:`monai_unc.aggregation`) and returns
floats or small numpy arrays. Definitions follow ValUES (ValUES, Appendix A.2-A.4) and RETINA
(RETINA (Band et al.), Sec. 2.4 and Appendix D.1).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._deprecation import deprecated_arg_names
from .._utils import ArrayLike, case_pair, case_vector, to_numpy, warn_nan
from .discrimination import auroc
from .selective import augrc, aurc, eaurc

__all__ = [
    "FailureDetection",
    "UncertaintyHistograms",
    "ood_auroc",
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
    return FailureDetection(
        aurc=aurc(u, risk), eaurc=eaurc(u, risk, optimum=optimum), augrc=augrc(u, risk)
    )


def _mean_dice(x: Any, name: str) -> float:
    a = case_vector(np.atleast_1d(to_numpy(x, name)), name)
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
        :class:`UncertaintyHistograms` (numpy arrays). A group without cases gets an all-NaN histogram and a
        ``UserWarning``.

    Example:
        >>> from monai_unc.metrics import uncertainty_histograms
        >>> h = uncertainty_histograms([0.1, 0.2, 0.3, 0.6, 0.9], [1, 1, 0, 1, 0], bins=4, range=(0.0, 1.0))
        >>> h.edges
        array([0.  , 0.25, 0.5 , 0.75, 1.  ])
        >>> h.correct, h.incorrect
        (array([2.66666667, 0.        , 1.33333333, 0.        ]), array([0., 2., 0., 2.]))
    """
    u, c = case_pair(uncertainty, correct, "correct", "uncertainty")
    if not np.isin(c, (0.0, 1.0)).all():
        raise ValueError("correct must be boolean (or 0/1) per case")
    ok = c.astype(bool)
    edges = np.histogram_bin_edges(u, bins=bins, range=range)
    hists = []
    for name, sel in (("correct", ok), ("incorrect", ~ok)):
        if sel.any():
            h, _ = np.histogram(u[sel], bins=edges, density=density)
            hists.append(h.astype(np.float64))
        else:
            warn_nan(f"uncertainty_histograms: no {name} cases, that histogram is NaN")
            hists.append(np.full(edges.size - 1, np.nan))
    return UncertaintyHistograms(edges, hists[0], hists[1], int(ok.sum()), int((~ok).sum()))
