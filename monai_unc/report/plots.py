"""Figures of the QC report: referral curve, uncertainty histograms, scores by shift and per-case overlays.

The histograms compare good and failed cases; the overlays show image, prediction contour, uncertainty heatmap
and error map on the slices of highest uncertainty. Every plotted number comes from a metric function (the
referral curves from :func:`monai_unc.metrics.selective.referral_curve`, the histograms from
:func:`monai_unc.metrics.casewise.uncertainty_histograms`); these functions only draw. The reliability diagram
is drawn by :mod:`monai_unc.report.reliability`. Figures are matplotlib ``Figure`` objects (Agg backend, no
display needed); :func:`save_png` writes one atomically and returns the PNG bytes for embedding.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import rc_context
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

from .._utils import case_pair, check_integer, is_real, label_text, normalize_spacing, real_array
from ..evaluation import dice_failed, failure_dice_text
from ..io import atomic_write_bytes
from ..metrics.casewise import in_distribution_labels, is_in_distribution, uncertainty_histograms_core
from ..metrics.selective import referral_curve, referral_curve_core
from ..product import Overlay, format_cell, format_fraction, format_level, format_target
from .markup import replace_surrogates
from .palette import MAX_DISTINCT_COLORS, class_colors, distinct_colors
from .viewer import check_convention, measure_unit

__all__ = [
    "save_png",
    "case_figure_path",
    "plot_referral_curve",
    "plot_uncertainty_histograms",
    "plot_scores_by_shift",
    "plot_qu_brats_curves",
    "slice_of_highest_uncertainty",
    "plot_case_overlay",
]

_GOOD, _BAD, _ACCENT, _RC = "#1f77b4", "#d62728", "#2ca02c", "#9467bd"
#: the points of the scores-by-shift plot: colours other than good / failed, which the histograms beside it use
_IID, _SHIFTED = "#7f7f7f", "#ff7f0e"
#: the most classes the overlay's legend names (the rest, the smallest on the shown slices, are counted in one line)
LEGEND_CLASSES = 12
_VIEWS = {2: "axial", 1: "coronal", 0: "sagittal"}
#: the QU-BraTS regions' colours (more regions: :func:`~monai_unc.report.palette.distinct_colors`)
_QU_BRATS_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")


def _figure(width: float, height: float) -> Any:
    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def save_png(fig: Any, path: str | os.PathLike | None = None) -> bytes:
    r"""PNG bytes of ``fig``; also written to ``path`` (through a temporary file and a rename) when given.

    Every text is drawn as it is: a ``$`` in a case id, a class, region or shift name is not read as mathtext (an
    unbalanced ``$\frac`` would fail the whole page), and a lone surrogate (bytes that were not UTF-8, which the
    fonts cannot draw) is drawn as U+FFFD, as on the pages. The figure is drawn at its own dpi on a white background.

    Args:
        fig: a matplotlib ``Figure``.
        path: the ``.png`` file to write, or None.

    Returns:
        The PNG bytes.

    Example:
        >>> fig = Figure(figsize=(1, 1), dpi=20)
        >>> _ = fig.add_subplot().set_title("$\\frac")  # not mathtext
        >>> save_png(fig)[:4]
        b'\x89PNG'
    """
    buf = io.BytesIO()
    with rc_context({"text.parse_math": False}):  # also the tick labels made while drawing
        for text in fig.findobj(Text):
            text.set_parse_math(False)
            shown = replace_surrogates(text.get_text())
            if shown != text.get_text():
                text.set_text(shown)
        fig.savefig(buf, format="png", dpi=fig.dpi, facecolor="white")
    data = buf.getvalue()
    if path is not None:
        atomic_write_bytes(path, data)
    return data


def case_figure_path(folder: str | os.PathLike, case_id: str) -> Path:
    """``<folder>/case_<case_id>.png``, the figure of one case on a page.

    Case ids come from file names and from records a user can edit (``triage.json``, ``metrics.csv``), so an id
    that would put the figure anywhere but directly in ``folder`` is refused.

    Args:
        folder: the page's figure folder.
        case_id: the case id.

    Returns:
        The figure's path.

    Raises:
        ValueError: naming the case id when it is empty or contains a path separator or a NUL byte.
    """
    cid = str(case_id)
    if not cid or "\0" in cid or os.sep in cid or (os.altsep and os.altsep in cid):
        raise ValueError(f"case id {cid!r} cannot name a figure file (empty, a path separator or NUL): the record "
                         "it comes from was edited or is not this package's")
    return Path(folder) / f"case_{cid}.png"


def plot_referral_curve(
    scores: np.ndarray,
    dice: np.ndarray,
    budget: float | None = None,
    score_name: str = "uncertainty",
    risk_control: Mapping[str, Any] | None = None,
) -> Any:
    """Mean Dice of the retained cases against the referral rate (RETINA, Sec. 2.3).

    Three curves: referral by ``scores`` (most uncertain first), the oracle that refers the lowest Dice first
    (the best any score can do) and random referral (the cohort mean in expectation). A vertical line marks
    ``budget`` with the expected Dice of the cases kept there; a second one the referral fraction of the
    risk-controlled threshold. RETINA: Band, Rudner, Feng, Filos, Nado, Dusenberry, Jerfel, Tran, Gal,
    *Benchmarking Bayesian Deep Learning on Diabetic Retinopathy Detection Tasks*, NeurIPS 2021 Datasets and
    Benchmarks.

    Args:
        scores: ``(N,)`` case uncertainty scores (higher: referred first).
        dice: ``(N,)`` Dice of the cases.
        budget: a referral fraction in [0, 1] to mark, or None.
        score_name: the legend name of the score.
        risk_control: the ``summary["risk_control"]`` block of :func:`monai_unc.evaluation.summarize`
            (``referral_fraction``, ``feasible``, ``target_risk``, ``delta``), or None.

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: ``scores`` or ``dice`` not finite, empty or of different lengths (naming the argument), or
            ``budget`` or the ``referral_fraction`` of ``risk_control`` not a number in [0, 1].

    Example:
        >>> fig = plot_referral_curve(np.array([0.9, 0.1, 0.5, 0.2]), np.array([0.2, 0.9, 0.6, 0.8]), budget=0.25)
        >>> fig.axes[0].get_title()
        'Referral curve'
    """
    scores, dice = case_pair(scores, dice, "dice")  # errors name this function's arguments
    # found by hostile testing: budget=True was drawn as "budget 100%", 1.5 refused as "taus must be referral rates",
    # naming no argument of this function, and a referral fraction of 1.5 drawn as "refer 150%" off the axis
    rc_fraction = None if risk_control is None else risk_control.get("referral_fraction")
    for name, frac, given in (("budget", budget, budget is not None),
                              ("risk_control['referral_fraction']", rc_fraction, risk_control is not None)):
        if given and not (is_real(frac) and 0.0 <= float(frac) <= 1.0):
            raise ValueError(f"{name} must be a referral fraction in [0, 1], got {frac!r}")
    ours = referral_curve(scores, dice)  # warns if the scores are all tied
    # the oracle ranks by the Dice: cases of one Dice (all perfect) are no tie of the scores, yet said "all N scores are
    # tied, so the scores cannot rank the cases" (found by review 67; lesion_retention's since review 63); the curve's
    # core says nothing (review 68: a text filter inside catch_warnings was process-wide)
    oracle = referral_curve_core(1.0 - dice, dice)
    fig = _figure(5.2, 3.8)
    ax = fig.add_subplot()
    # ceil(tau * N) cases are referred: the value at tau = k / N holds on ((k - 1) / N, k / N]
    ax.plot(oracle.tau, oracle.value, color="0.55", ls="--", lw=1.5, drawstyle="steps-pre",
            label="oracle (lowest Dice first)")
    ax.plot(ours.tau, ours.value, color=_GOOD, lw=2.2, drawstyle="steps-pre", label=f"by {score_name}")
    ax.plot(ours.tau, ours.value, color=_GOOD, lw=0, marker="o", ms=3.5)
    ax.axhline(float(dice.mean()), color="0.3", ls=":", lw=1.5, label="random referral")
    if budget is not None:
        # found by hostile testing: a budget that refers every case (one case, budget 10 %) was labelled "Dice nan";
        # the Dice is written as the tables write it (format_cell)
        kept = float(referral_curve_core(scores, dice, taus=[budget]).value[0])  # every case referred: the legend
        ax.axvline(budget, color=_BAD, lw=1.2, alpha=0.8)
        ax.plot([budget], [kept], marker="D", color=_BAD, ms=7,
                label=f"budget {format_fraction(budget)}: " + (f"Dice {format_cell(kept)}" if np.isfinite(kept)
                                                               else "every case referred"))
    if risk_control is not None:
        frac = float(risk_control["referral_fraction"])
        if risk_control.get("feasible"):
            what = (f"risk <= {format_target(risk_control['target_risk'])} w.p. {format_level(risk_control['delta'])}: "
                    f"refer {format_fraction(frac)}")
        else:
            what = f"risk {format_target(risk_control['target_risk'])} not certifiable: refer all"
        ax.axvline(frac, color=_RC, lw=1.6, ls="-.", label=what)
        if frac < 1.0:
            at = referral_curve_core(scores, dice, taus=[frac])  # every case referred: no mark (NaN)
            ax.plot([frac], [at.value[0]], marker="s", color=_RC, ms=7)
    ax.set_xlabel("fraction of cases referred for review")
    ax.set_ylabel("mean Dice of the retained cases")
    ax.set_xlim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    ax.set_title("Referral curve", fontsize=11)
    return fig


def plot_uncertainty_histograms(
    scores: np.ndarray, dice: np.ndarray, failure_dice: float, score_name: str = "uncertainty", bins: int = 12
) -> Any:
    """Case-score histograms of good (Dice >= ``failure_dice``) and failed cases on shared bins (RETINA Sec. 2.4).

    The bars are counts; failed cases at low uncertainty are silent failures. A case has failed as the summary counts
    it (:func:`~monai_unc.evaluation.dice_failed`: compared at the float32 precision a Dice is recorded in). An empty
    group is drawn empty. A case without a defined score (NaN or infinite) is left out: it has no place on the score
    axis (give the scores as they are, not filled for the ranking with
    :func:`~monai_unc.evaluation.fill_undefined_scores`).

    Args:
        scores: ``(N,)`` case uncertainty scores (NaN: undefined, left out).
        dice: ``(N,)`` Dice of the cases.
        failure_dice: the Dice below which a case counts as failed.
        score_name: the x-axis label.
        bins: the number of shared bins.

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: ``scores`` and ``dice`` not 1-D of one value per case, ``failure_dice`` not a number in [0, 1]
            (as :class:`~monai_unc.evaluation.EvaluationConfig` takes it), or ``bins`` not a positive integer.
        TypeError: ``scores`` or ``dice`` not real numbers (text, complex).

    Example:
        >>> fig = plot_uncertainty_histograms(np.array([0.9, 0.1, 0.5, 0.2]), np.array([0.2, 0.9, 0.6, 0.8]), 0.5)
        >>> fig.axes[0].get_ylabel()
        'cases'
    """
    bins = check_integer(bins, "bins")  # found by hostile testing: True drew one bin, 2.5 failed in numpy
    # found by hostile testing: failure_dice=True drew every case failed under "Dice < 1", NaN every case good under
    # "Dice >= nan", and a text or None failed formatting the legend
    if not (is_real(failure_dice) and 0.0 <= float(failure_dice) <= 1.0):
        raise ValueError(f"failure_dice must be a Dice in [0, 1], got {failure_dice!r}")
    # found by hostile testing: text scores and Dice were parsed as numbers (the referral curve refuses them)
    scores = real_array(np.asarray(scores), "scores", " (NaN: undefined)")
    dice = real_array(np.asarray(dice), "dice")
    if scores.ndim != 1 or dice.shape != scores.shape:  # found by hostile testing: an IndexError of the masking
        raise ValueError(f"scores and dice must be 1-D with one value per case, got shapes {scores.shape} and "
                         f"{dice.shape}")
    defined = np.isfinite(scores)
    scores = scores[defined]
    # the one failure rule (dice_failed: at the float32 precision a Dice is recorded in), as summary.json's failures
    # and the triage table count them (found by hostile testing: a Dice of exactly 0.9, recorded 0.899999976, was
    # drawn failed here next to a summary that counted no failure)
    good = ~dice_failed(dice[defined], failure_dice)

    fig = _figure(5.2, 3.8)
    ax = fig.add_subplot()
    ax.set_title("Case uncertainty: good vs failed", fontsize=11)
    ax.set_xlabel(score_name)
    ax.set_ylabel("cases")
    if not scores.size:  # no case has a defined score: nothing to place on the axis
        ax.text(0.5, 0.5, "no case has a defined score", ha="center", va="center", transform=ax.transAxes)
        return fig
    # the histograms' core: an empty group is drawn empty, not warned (in earlier versions every UserWarning was
    # ignored here inside warnings.catch_warnings(), a process-wide filter). Its only lines are of an empty group: the
    # bins of a bin count span every (finite) score, so no case lies outside them
    h, _ = uncertainty_histograms_core(scores, good, bins=bins, density=False)
    widths = np.diff(h.edges)
    # the failed cases hatched as well as red: blue and red bars of equal lightness look alike printed in grey
    for values, color, hatch, label in (
        (h.correct, _GOOD, None, f"good: Dice >= {failure_dice_text(failure_dice)} (n={h.n_correct})"),
        (h.incorrect, _BAD, "///", f"failed: Dice < {failure_dice_text(failure_dice)} (n={h.n_incorrect})"),
    ):
        v = np.nan_to_num(values)
        ax.bar(h.edges[:-1], v, width=widths, align="edge", color=color, alpha=0.55, edgecolor=color, hatch=hatch,
               label=label)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_scores_by_shift(scores: np.ndarray, shifts: Sequence[str], iid: Sequence[str], score_name: str) -> Any:
    """Case scores grouped by shift label (one column of points per group, in-distribution first).

    Points are jittered horizontally with a fixed seed; a bar marks each group's median. In-distribution groups are
    grey, shifted ones orange (a legend says so): not the blue / red of good / failed cases of
    :func:`plot_uncertainty_histograms`, which the report shows beside it. A case without a defined score (NaN or
    infinite) is left out, as in :func:`plot_uncertainty_histograms`.

    Args:
        scores: ``(N,)`` case uncertainty scores (NaN: undefined, left out).
        shifts: ``N`` shift labels (``""``, None or NaN is drawn as ``(none)``).
        iid: the labels that count as in-distribution, e.g. :data:`~monai_unc.metrics.IID_SHIFTS`, compared as
            :func:`~monai_unc.metrics.is_in_distribution` compares them (drawn first, in grey).
        score_name: the y-axis label.

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: ``shifts`` not one label per score.
        TypeError: ``scores`` not real numbers (text, complex).

    Example:
        >>> fig = plot_scores_by_shift(np.array([0.1, 0.2, 0.7]), ["none", "none", "noise"], ["none"], "entropy")
        >>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
        ['none', 'noise']
    """
    scores = real_array(np.asarray(scores), "scores", " (NaN: undefined)")  # not text parsed as numbers
    shifts = list(shifts)
    if scores.ndim != 1 or len(shifts) != scores.size:  # found by hostile testing: extra labels were dropped unsaid
        raise ValueError(f"shifts must give one label per score, got {len(shifts)} labels for scores of shape "
                         f"{scores.shape}")
    defined = np.isfinite(scores)
    shifts = [label_text(s) for s, d in zip(shifts, defined) if d]  # None / NaN: "", as the OoD AUROC reads it
    scores = scores[defined]
    iid_texts = in_distribution_labels(iid)
    groups = sorted(set(shifts), key=lambda s: (not is_in_distribution(s, iid_texts), s))
    fig = _figure(5.2, 3.8)
    ax = fig.add_subplot()
    rng = np.random.default_rng(0)
    drawn: dict[str, Any] = {}
    for i, g in enumerate(groups):
        v = scores[[s == g for s in shifts]]
        kind = "in-distribution" if is_in_distribution(g, iid_texts) else "shifted"
        color = _IID if kind == "in-distribution" else _SHIFTED
        drawn[kind] = ax.scatter(i + rng.uniform(-0.12, 0.12, v.size), v, color=color, s=28, alpha=0.8,
                                 edgecolor="white", lw=0.5)
        drawn["median"] = ax.hlines(np.median(v), i - 0.25, i + 0.25, color="0.2", lw=1.5)
    if drawn:  # the colours say in- or out-of-distribution, not good or failed as in the histograms beside it
        kinds = [k for k in ("in-distribution", "shifted", "median") if k in drawn]
        ax.legend([drawn[k] for k in kinds], kinds, fontsize=8)
    ax.set_xticks(range(len(groups)), [g or "(none)" for g in groups], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(score_name)
    ax.grid(alpha=0.3, axis="y")
    ax.set_title("Case uncertainty by shift", fontsize=11)
    return fig


def plot_qu_brats_curves(
    thresholds: Sequence[float], curves: Mapping[str, Mapping[str, Sequence[float]]], max_uncertainty: float = 100.0
) -> Any:
    """The QU-BraTS curves against the uncertainty threshold, one line per region in three panels.

    The panels are filtered Dice, filtered true positives (FTP) and filtered true negatives (FTN). Lowering the
    threshold filters out more uncertain voxels: a good map raises the filtered Dice while filtering few true
    positives and true negatives (the score rewards a high Dice area and low FTP / FTN areas). QU-BraTS: Mehta et
    al., *QU-BraTS: MICCAI BraTS 2020 Challenge on Quantifying Uncertainty in Brain Tumor Segmentation*, MELBA 2022.

    Args:
        thresholds: the threshold grid (:func:`monai_unc.metrics.qu_brats_thresholds`, any order).
        curves: ``{region: {"dice": [...], "ftp": [...], "ftn": [...]}}`` at ``thresholds`` (e.g. the mean over the
            cases of the curves of :func:`monai_unc.metrics.qu_brats`); the values are drawn as given.
        max_uncertainty: the top of the threshold axis (100 in the challenge).

    Returns:
        The matplotlib ``Figure`` (three axes).

    Raises:
        ValueError: a region without its ``dice``, ``ftp`` or ``ftn`` curve, or a curve not one value per threshold.

    Example:
        >>> curve = {"dice": [0.9, 0.8, 0.7], "ftp": [0.5, 0.2, 0.0], "ftn": [0.3, 0.1, 0.0]}
        >>> len(plot_qu_brats_curves([25, 50, 100], {"WT": curve}).axes)
        3
    """
    t = np.asarray(thresholds, dtype=np.float64)
    order = np.argsort(t)
    panels = (("dice", "filtered Dice (higher is better)"), ("ftp", "filtered true positives (lower is better)"),
              ("ftn", "filtered true negatives (lower is better)"))
    # found by hostile testing: a curve longer than the thresholds lost its last values without a word (a shorter one
    # failed with numpy's IndexError, a missing curve with a KeyError), and a seventh region took the first's colour
    values: dict[str, dict[str, np.ndarray]] = {}
    for name, c in curves.items():
        values[str(name)] = {}
        for key, _ in panels:
            if key not in c:
                raise ValueError(f"curves[{str(name)!r}] has no {key!r} curve (it needs 'dice', 'ftp' and 'ftn')")
            v = np.asarray(c[key], dtype=np.float64)
            if v.shape != t.shape:
                raise ValueError(f"curves[{str(name)!r}][{key!r}] has shape {v.shape}, thresholds {t.shape}: one value "
                                 "per threshold")
            values[str(name)][key] = v
    colors = _QU_BRATS_COLORS if len(values) <= len(_QU_BRATS_COLORS) else distinct_colors(len(values), "white")
    fig = _figure(11.0, 3.5)
    axes = fig.subplots(1, 3, squeeze=False)[0]
    for ax, (key, title) in zip(axes, panels):
        for i, (name, c) in enumerate(values.items()):
            v = c[key]
            ax.plot(t[order], v[order], color=colors[i], lw=1.8, marker="o", ms=2.5, label=name)
        ax.set_xlim(0, max_uncertainty)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("uncertainty threshold (voxels above it filtered out)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    return fig


def slice_of_highest_uncertainty(
    u: np.ndarray, axis: int, mask: np.ndarray | None = None, min_fraction: float = 0.25
) -> int:
    """Index along ``axis`` of the slice with the largest summed uncertainty.

    With a ``mask`` (e.g. the reference foreground) only slices that cut the mask and whose mask area is at least
    ``min_fraction`` of the largest mask area along ``axis`` are candidates, so that the chosen slices show the
    anatomy rather than background far from it; an empty mask leaves every slice a candidate. A NaN voxel (no value)
    adds nothing to its slice's sum, as the viewer draws it as the lowest value.

    Args:
        u: the uncertainty map, e.g. ``(X, Y, Z)``.
        axis: the axis the slices cut.
        mask: a boolean volume of the shape of ``u``, or None.
        min_fraction: the smallest mask area of a candidate, as a fraction of the largest (0: every slice that
            cuts the mask, however little of it).

    Returns:
        The slice index.

    Example:
        >>> u = np.zeros((4, 4, 4)); u[..., 3] = 1.0; u[..., 1] = 0.5
        >>> mask = np.zeros((4, 4, 4), bool); mask[..., :3] = True
        >>> slice_of_highest_uncertainty(u, 2), slice_of_highest_uncertainty(u, 2, mask=mask)
        (3, 1)
    """
    u = np.asarray(u, dtype=np.float64)
    other = tuple(a for a in range(u.ndim) if a != axis)
    # found by hostile testing: one NaN voxel made its slice's sum NaN, which argmax takes first: the slice of a NaN
    # (sum 0 else) was shown instead of one of sum 36; a sum still NaN (inf - inf) is never chosen
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, never chosen
        totals = np.nansum(u, axis=other)
    totals[np.isnan(totals)] = -np.inf
    if mask is not None:
        area = np.asarray(mask, dtype=bool).sum(axis=other)
        if area.max() > 0:
            totals = np.where((area > 0) & (area >= min_fraction * area.max()), totals, -np.inf)
    return int(np.argmax(totals))


def _take(a: np.ndarray, axis: int, index: int) -> np.ndarray:
    # displayed with the first remaining axis horizontal, origin at the bottom (RAS: right / anterior / up)
    return np.take(a, index, axis=axis).T


def _mirror(a: np.ndarray, mirror: bool) -> np.ndarray:
    """A slice as :func:`_take` gives it, its columns reversed when ``mirror`` (drawn right to left)."""
    return a[:, ::-1] if mirror else a


#: the patient sides of the RAS axes' low and high ends
_SIDES = (("L", "R"), ("P", "A"), ("I", "S"))


def _to_ras(affine: np.ndarray, ndim: int) -> np.ndarray | None:
    """The orientation array (``(axis, flip)`` per stored axis) of the RAS-closest voxel order of ``affine``.

    None when a stored axis has no direction (a zero column of the affine): the arrays are then drawn as stored.
    """
    from nibabel.orientations import io_orientation

    a = np.asarray(affine, dtype=np.float64)
    if a.shape != (4, 4) or not np.isfinite(a).all():
        raise ValueError(f"affine must be a finite 4 x 4 matrix, got shape {a.shape}")
    ornt = io_orientation(a)[:ndim]
    return ornt if np.isfinite(ornt).all() else None


def _orient(a: np.ndarray, ornt: np.ndarray) -> np.ndarray:
    from nibabel.orientations import apply_orientation

    return apply_orientation(np.asarray(a), ornt)


def _contour_legend(area: Mapping[int, int], colors: Mapping[int, str],
                    class_names: Sequence[str] | None) -> list[Any]:
    """Legend handles of the contoured classes: at most :data:`LEGEND_CLASSES`, the largest, in label order.

    The classes left out (the smallest on the shown slices) are counted in one last entry, ``+N more classes``.
    """
    names = list(class_names) if class_names is not None else []
    if len(area) > LEGEND_CLASSES:
        named = sorted(sorted(area, key=lambda c: (-area[c], c))[:LEGEND_CLASSES - 1])
    else:
        named = sorted(area)
    handles = [Line2D([], [], color=colors[c], lw=1.5, label=str(names[c]) if c < len(names) else f"class {c}")
               for c in named]
    if len(named) < len(area):
        rest = len(area) - len(named)
        handles.append(Line2D([], [], color="none", label=f"+{rest} more class{'es' if rest > 1 else ''}"))
    return handles


def plot_case_overlay(
    case_id: str,
    seg: np.ndarray,
    label: np.ndarray | None,
    uncertainty: np.ndarray,
    image: np.ndarray | None = None,
    spacing: Sequence[float] = (1.0, 1.0, 1.0),
    measure: str = "uncertainty",
    axes: Sequence[int] = (2, 1, 0),
    info: Mapping[str, Any] | None = None,
    class_names: Sequence[str] | None = None,
    overlays: Sequence[Overlay] = (),
    affine: np.ndarray | None = None,
    convention: str = "neurological",
) -> Any:
    """One row per view through the slice of highest uncertainty among the slices that cut the reference foreground.

    Columns: image, prediction contour, uncertainty heatmap and error map (``seg != label``: red where the
    prediction has a foreground the label does not, blue where it misses one, purple for a wrong class). Slices
    are chosen by :func:`slice_of_highest_uncertainty` among every slice that cuts the reference foreground
    (``min_fraction=0``: a small lesion counts as much as the organ's widest slices). Without a ``label`` (new,
    unlabelled cases) the slices are chosen inside the predicted foreground and there is no error-map column.
    ``overlays`` adds contours beside the prediction's (a product's case files, e.g. the masks of a fitted rule),
    each with its colour, style and legend.

    Each class has a colour of its own (:func:`~monai_unc.report.palette.class_colors`, by label value: the same as
    in the interactive viewer, and different for a hundred classes and more). The legend names the classes
    contoured on the shown slices only, at most :data:`LEGEND_CLASSES` (the largest there; the others are counted in
    a last ``+N more classes`` entry), in two columns beyond six entries, so that it stays inside its panel.

    Args:
        case_id: the case id (title).
        seg: the predicted label map ``(X, Y, Z)``.
        label: the reference label map ``(X, Y, Z)``, or None.
        uncertainty: the uncertainty map ``(X, Y, Z)``.
        image: the image ``(X, Y, Z)`` or ``(C, X, Y, Z)`` (the first channel is shown); None shows the reference.
        spacing: voxel size in mm per axis (sets the aspect ratio).
        measure: the name of the uncertainty map (column title).
        axes: the axes to cut, one row each (2 axial, 1 coronal, 0 sagittal).
        info: ``{name: value}`` shown after the case id in the title.
        class_names: names of the classes for the contour legend, indexed by label value (``class_names[0]`` the
            background); a class without a name is ``class <value>``.
        overlays: :class:`~monai_unc.product.Overlay` contours, each mask bool ``(X, Y, Z)``
            (:meth:`~monai_unc.product.CohortProduct.case_overlays`).
        affine: the volumes' 4 x 4 voxel-to-world (RAS, mm) affine. With it every volume is drawn in the RAS-closest
            voxel order (nibabel's ``io_orientation``, as NiiVue shows the files in the viewer): the patient's left on
            the left of every panel (the default ``convention``), anterior / superior at the top, whatever order the
            file stores (LPS from DICOM or SimpleITK, flipped or permuted axes), the rows are the true axial, coronal
            and sagittal planes, the image panels carry the patient sides (``L`` / ``R``, ``P`` / ``A``, ``I`` /
            ``S``) and a row's label gives the slice's index in the file. Without it (default) the arrays are drawn
            as stored, assumed RAS.
        convention: ``"neurological"`` (default): the patient's left on the left of the axial and coronal panels;
            ``"radiological"`` (how radiologists read): mirrored left-right, the patient's right on the left, the side
            marks swapped (``R`` on the left), as the viewer then draws it
            (:data:`~monai_unc.report.viewer.CONVENTIONS`). The sagittal panels are the same in both.

    2-D volumes ``(X, Y)`` are drawn as one row (the plane itself), as is any volume one voxel thick along an axis.

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: a ``seg`` that is not 2-D or 3-D, a ``label``, ``uncertainty``, ``image`` (its first channel) or
            overlay mask of another shape than ``seg``, a ``spacing`` that is not one positive finite size per axis (a
            2-D case may give three), ``axes`` that are not 0, 1 or 2, an ``affine`` that is not a finite 4 x 4
            matrix, or a ``convention`` that is not ``"neurological"`` or ``"radiological"``.
        TypeError: a ``convention`` that is not a str.

    Example:
        >>> seg = np.zeros((8, 8, 8), np.int64); seg[2:6, 2:6, 2:6] = 1
        >>> u = np.random.default_rng(0).random((8, 8, 8))
        >>> fig = plot_case_overlay("case1", seg, seg, u, axes=(2,))
        >>> [ax.get_title() for ax in fig.axes[:4]]
        ['image', 'prediction contour', 'uncertainty', 'error map']
    """
    overlays = list(overlays)
    convention = check_convention(convention)
    seg = np.asarray(seg)
    # found by hostile testing: volumes of other shapes, a spacing of too few or non-positive sizes and axes other
    # than 0, 1, 2 failed in numpy or matplotlib (AxisError, IndexError, ZeroDivisionError) naming no argument
    if seg.ndim not in (2, 3):
        raise ValueError(f"seg must be a 2-D or 3-D label map, got shape {seg.shape}")
    for o in overlays:
        if np.shape(o.mask) != seg.shape:
            raise ValueError(f"overlays: {o.label!r} has shape {np.shape(o.mask)}, seg {seg.shape}")
    if image is not None and np.ndim(image) == seg.ndim + 1:  # channel first: the first channel is shown
        image = np.asarray(image)[0]
    for name, a in (("label", label), ("uncertainty", uncertainty), ("image", image)):
        if a is not None and np.shape(a) != seg.shape:
            raise ValueError(f"{name} must have seg's shape {seg.shape}, got {np.shape(a)}")
    axes = list(axes)
    if not axes or any(isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)) or a not in (0, 1, 2)
                       for a in axes):
        raise ValueError(f"axes must name the axes to cut, each 0, 1 or 2, got {axes!r}")
    spacing = normalize_spacing(tuple(spacing)[:2] if seg.ndim == 2 and np.size(spacing) == 3 else spacing, seg.ndim,
                                "spacing")
    ornt = _to_ras(affine, seg.ndim) if affine is not None else None
    if seg.ndim == 2:  # a 2-D case: one slice, drawn as the plane it is
        flat = ornt[:, 0].astype(int).tolist() if ornt is not None else [0, 1]
        third = ({0, 1, 2} - set(flat)).pop()
        if ornt is not None:
            ornt = np.vstack([ornt, [third, 1.0]])
        spacing = (*spacing, 1.0)
        seg, uncertainty, label, image = (None if a is None else np.asarray(a)[..., None]
                                          for a in (seg, uncertainty, label, image))
        overlays = [Overlay(o.label, np.asarray(o.mask)[..., None], o.color, o.linestyle) for o in overlays]
    file_index = [lambda k: k] * 3
    if ornt is not None:  # RAS-closest voxel order: the patient's left on the left, as in the viewer
        shape = seg.shape
        seg, uncertainty, label, image = (None if a is None else _orient(a, ornt)
                                          for a in (seg, uncertainty, label, image))
        overlays = [Overlay(o.label, _orient(o.mask, ornt), o.color, o.linestyle) for o in overlays]
        new_spacing = [1.0] * 3
        for i, (ax_, flip) in enumerate(ornt):
            new_spacing[int(ax_)] = spacing[i]
            n = shape[i]
            file_index[int(ax_)] = (lambda k, n=n: n - 1 - k) if flip < 0 else (lambda k: k)
        spacing = tuple(new_spacing)
    # the radiological convention: the patient's right (the RAS x axis's high end) on the left of the screen; the
    # slices with x horizontal (axial, coronal) are mirrored as they are drawn, so both conventions show the same slices
    sides = [_SIDES[0][::-1], *_SIDES[1:]] if convention == "radiological" else list(_SIDES)
    assert seg is not None and uncertainty is not None
    flat_axes = [a for a in range(3) if seg.shape[a] == 1]
    if flat_axes:  # a cut along another axis would be one voxel wide
        axes = [a for a in axes if a in flat_axes] or flat_axes[:1]
    labelled = label is not None
    reference = label if labelled else seg
    base = image if image is not None else reference.astype(np.float32)
    fig = _figure(11.0 if labelled else 8.4, 2.75 * len(axes) + 0.4)
    grid = fig.subplots(len(axes), 4 if labelled else 3, squeeze=False)
    err = np.zeros(seg.shape, dtype=np.int8)
    if labelled:
        err[(seg > 0) & (label == 0)] = 1  # false positive
        err[(seg == 0) & (label > 0)] = 2  # false negative
        err[(seg > 0) & (label > 0) & (seg != label)] = 3  # wrong foreground class
    err_cmap = ListedColormap([(0, 0, 0, 0), (0.85, 0.15, 0.15, 0.9), (0.15, 0.35, 0.95, 0.9), (0.6, 0.2, 0.8, 0.9)])
    # the heatmap's column names its unit, as the viewer's colorbar does (found by hostile review 60: "mutual
    # information" over a colour bar of nats)
    unit = measure_unit(str(measure))
    heat = str(measure).replace("_", " ") + (f" ({unit})" if unit else "")
    titles = ("image", "prediction contour", heat) + (("error map",) if labelled else ())
    # every slice that cuts the reference foreground is a candidate: a small lesion away from the organ's widest
    # slices, where the uncertainty is, is shown
    slices = [slice_of_highest_uncertainty(uncertainty, axis, mask=reference > 0, min_fraction=0.0) for axis in axes]
    shown = [_take(seg, axis, k) for axis, k in zip(axes, slices)]
    # every class has its own colour, the same as in the viewer (by label value, palette.class_colors); label values
    # above MAX_DISTINCT_COLORS are coloured by their rank among the case's labels, as the viewer ranks them (found by
    # hostile review 60: ranked among the shown slices' labels only, label 6000 was drawn in the colour the viewer
    # gives label 5000 when the slices did not cut 5000)
    drawn = {int(v) for s2 in shown for v in np.unique(s2) if v > 0}
    every = np.unique(seg[seg > 0]) if drawn and max(drawn) > MAX_DISTINCT_COLORS else drawn
    colors = {v: c for v, c in class_colors(int(v) for v in every).items() if v in drawn}
    area: dict[int, int] = {}
    for row, (axis, k) in enumerate(zip(axes, slices)):
        dims = [d for d in range(3) if d != axis]
        aspect = float(spacing[dims[1]]) / float(spacing[dims[0]])
        mirror = convention == "radiological" and dims[0] == 0  # x horizontal: its high end (R) on the left
        seg2, img2, u2, e2 = (_mirror(a, mirror) for a in (shown[row], _take(base, axis, k),
                                                           _take(uncertainty, axis, k), _take(err, axis, k)))
        finite = img2[np.isfinite(img2)]  # NaN voxels (outside the field of view) neither set nor blank the window
        lo, hi = np.percentile(finite, (1, 99.5)) if finite.size else (0, 1)
        # the colour bar spans the values drawn: the hottest voxel of the slice is its top, never clipped
        finite_u = u2[np.isfinite(u2)]
        u_max = (float(finite_u.max()) if finite_u.size else 0.0) or 1.0
        panels = grid[row]
        for ax in panels:
            ax.imshow(img2, cmap="gray", vmin=lo, vmax=hi if hi > lo else lo + 1, origin="lower", aspect=aspect,
                      interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
        for c in sorted(colors):
            inside = seg2 == c
            if inside.any() and not inside.all():
                panels[1].contour(inside.astype(float), levels=[0.5], colors=colors[c], linewidths=0.9)
                area[c] = area.get(c, 0) + int(inside.sum())
        for o in overlays:
            m2 = _mirror(_take(np.asarray(o.mask, dtype=bool), axis, k), mirror)
            if m2.any() and not m2.all():
                panels[1].contour(m2.astype(float), levels=[0.5], colors=o.color, linestyles=o.linestyle,
                                  linewidths=1.0)
        im = panels[2].imshow(u2, cmap="inferno", vmin=0, vmax=u_max, origin="lower", aspect=aspect, alpha=0.85,
                              interpolation="nearest")
        if labelled:
            panels[3].imshow(e2, cmap=err_cmap, vmin=0, vmax=3, origin="lower", aspect=aspect,
                             interpolation="nearest")
        view = _VIEWS.get(axis, f"axis {axis}")
        panels[0].set_ylabel(f"{view} {file_index[axis](k)}", fontsize=9)
        if ornt is not None:  # the patient's sides at the image panel's edges
            (left, right), (bottom, top) = sides[dims[0]], sides[dims[1]]
            for x, y, text, ha, va in ((0.02, 0.5, left, "left", "center"), (0.98, 0.5, right, "right", "center"),
                                       (0.5, 0.02, bottom, "center", "bottom"), (0.5, 0.98, top, "center", "top")):
                panels[0].text(x, y, text, transform=panels[0].transAxes, ha=ha, va=va, fontsize=7,
                               color="#ffd54f", fontweight="bold")
        if row == 0:
            for ax, title in zip(panels, titles):
                ax.set_title(title, fontsize=10)
        fig.colorbar(im, ax=panels[2], fraction=0.046, pad=0.02).ax.tick_params(labelsize=7)
    handles = _contour_legend(area, colors, class_names)
    handles += [Line2D([], [], color=o.color, ls=o.linestyle, lw=1.5, label=o.label) for o in overlays]
    if handles:
        grid[0][1].legend(handles=handles, loc="lower right", fontsize=6, framealpha=0.7, handlelength=1.2,
                          ncols=1 if len(handles) <= LEGEND_CLASSES // 2 else 2, columnspacing=0.8)
    text = f"case {case_id}"
    if info:
        text += "   " + "   ".join(f"{k} {v}" for k, v in info.items())
    fig.suptitle(text, fontsize=11)
    return fig
