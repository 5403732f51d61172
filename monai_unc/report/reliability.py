"""Reliability diagrams (Guo et al. 2017) with Kock et al.'s adaptations.

All labels, minimum bin counts and per-case box plots (Kock et al. Sec. 2.2, Appendix A, Fig. 5).

Figures are built with matplotlib's object-oriented API on the Agg canvas (no pyplot, no display, safe in
worker processes); pass ``path`` to write a PNG/PDF/SVG.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatterSciNotation

from .._deprecation import deprecated_arg_names
from .._utils import ArrayLike, to_tensor
from ..io import atomic_savefig
from ..metrics.calibration import (
    DEFAULT_FINE_BINS,
    ConfidenceHistogram,
    classwise_ece,
    ece,
    reliability_curve,
    uce,
)
from ..product import format_cell
from .palette import distinct_colors

__all__ = ["plot_reliability_diagram"]

_SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def _plain_power(label: str) -> str:
    r"""Matplotlib's mathtext tick label as plain unicode text: ``$\mathdefault{2\times10^{6}}$`` -> ``2×10⁶``.

    The report draws every text with ``text.parse_math`` off (a ``$`` in a case id must not be read as mathtext),
    so the log formatter's mathtext labels would show as written; these labels need no mathtext.

    Args:
        label: a label of :class:`~matplotlib.ticker.LogFormatterSciNotation` (or an empty string).

    Returns:
        The label without ``$``, ``\mathdefault`` and braces, its exponent in superscript digits.

    Example:
        >>> _plain_power("$\\mathdefault{10^{7}}$"), _plain_power("$\\mathdefault{2\\times10^{-1}}$")
        ('10⁷', '2×10⁻¹')
    """
    text = label.replace("$", "").replace("\\mathdefault", "").replace("\\times", "\u00d7")
    text = re.sub(r"\^\{([^{}]*)\}", lambda m: m.group(1).translate(_SUPERSCRIPT), text)
    return text.replace("{", "").replace("}", "").replace("\\,", "").strip()


class _PlainLogFormatter(LogFormatterSciNotation):
    """The log axis' tick labels as plain text (``10⁶``), readable with ``text.parse_math`` off."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return _plain_power(super().__call__(x, pos))


#: the most class curves of ``kind="classwise"`` drawn in colour with a legend entry each (with more classes, those of
#: the largest calibration error; the others are thin grey lines, counted in one legend entry)
LEGEND_CURVES = 12

#: what the count panel counts: a voxel once for the top label and the entropy, once per label when every label's
#: probability is binned (found by hostile testing: 1000 voxels of three classes read "3000 voxels")
_COUNT_UNITS = {"top": "voxels", "all_label": "voxels \u00d7 labels", "classwise": "voxels \u00d7 labels",
                "uncertainty": "voxels"}

_AXIS_LABELS = {
    "top": ("confidence of the predicted label", "accuracy"),
    "all_label": ("probability of a label", "observed frequency"),
    "classwise": ("probability of the label", "observed frequency"),
    "uncertainty": ("normalised entropy", "error rate"),
}


def _calibration_error(hist: ConfidenceHistogram, kind: str, n_bins: int, min_bin_count: int) -> float | np.ndarray:
    """The value in the title, from the metric functions.

    ECE / all-label ECE / UCE of the pooled histogram, or the per-class ECEs for ``"classwise"`` (NaN for a class
    without kept bins; the title averages the others).
    """
    opts = {"n_bins": n_bins, "min_bin_count": min_bin_count}
    if kind == "classwise":
        return np.asarray(classwise_ece(hist, per_class=True, **opts), dtype=np.float64)
    if kind == "uncertainty":
        return float(uce(hist, **opts))
    return float(ece(hist, kind=kind, **opts))


def _highlighted(per_class: np.ndarray, kept: np.ndarray) -> list[int]:
    """The classes drawn in colour, in class order.

    All of them up to :data:`LEGEND_CURVES`, else the ``LEGEND_CURVES - 1`` of the largest ECE (a class without a
    kept bin last).
    """
    n = per_class.shape[0]
    if n <= LEGEND_CURVES:
        return list(range(n))
    drawn = kept.any(axis=1)
    order = sorted(range(n), key=lambda c: (not drawn[c], -np.nan_to_num(per_class[c], nan=-np.inf), c))
    return sorted(order[:LEGEND_CURVES - 1])


@deprecated_arg_names({"x": "probs", "labels": "target"})
def plot_reliability_diagram(
    probs: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
    *,
    kind: str = "top",
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case_boxes: bool = False,
    show_counts: bool = True,
    ax: Axes | None = None,
    title: str | None = None,
    path: str | Path | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
    class_names: list[str] | None = None,
) -> Figure:
    """Plot a reliability diagram from a :class:`ConfidenceHistogram` (or probabilities and reference labels).

    Bars show the observed frequency per bin (accuracy for ``kind="top"``, the frequency of the label for
    ``"all_label"``, the error rate for ``"uncertainty"``), hatched bars the gap to the bin's mean confidence,
    markers the mean confidence against the frequency, the dashed line perfect calibration. Bins with fewer
    than ``min_bin_count`` voxels are left empty (Kock et al. uses 50). ``kind="classwise"`` draws one curve per
    label instead of bars. Kock et al.: Kock, Thielke et al., "Confidence Histograms for Model Reliability Analysis
    and Temperature Calibration".

    Args:
        probs: a histogram (per case for the box plots) or probabilities ``(B, C, *spatial)`` with ``target``;
            each batch item is then a case.
        target: reference labels ``(B, *spatial)`` or ``(B, 1, *spatial)`` (only with probabilities). The keywords
            ``x`` and ``labels`` are deprecated aliases of ``probs`` and ``target`` (as in
            :func:`~monai_unc.metrics.calibration.reliability_curve`).
        kind: ``"top"`` (confidence of the predicted label), ``"all_label"`` (every label's probability),
            ``"classwise"`` (one curve per label) or ``"uncertainty"`` (normalised entropy against the error rate,
            UCE: Laves et al., *Well-calibrated Model Uncertainty with Temperature Scaling for Dropout Variational
            Inference*).
        n_bins: equal-width bins of the diagram.
        min_bin_count: fewest voxels of a drawn bin (0: every non-empty bin).
        per_case_boxes: overlay, per bin, a box plot of the per-case frequencies (Kock et al. Fig. 5); bins of a
            case with fewer than ``min_bin_count`` voxels do not contribute to that case's box.
        show_counts: add a lower panel with the voxels per bin (log scale); with ``"all_label"`` and ``"classwise"``
            the probabilities per bin, one per voxel and label (``C`` per voxel).
        ax: draw the diagram on this axis (no count panel); its figure is returned.
        title: the title (default: the kind and its calibration error).
        path: write the figure there.
        n_fine_bins: fine bins of the histogram built from probabilities (a multiple of ``n_bins``).
        class_names: legend names for ``kind="classwise"``, one per class, class 0 (the background) first. Up to
            :data:`LEGEND_CURVES` classes each curve has its colour (:func:`~monai_unc.report.palette.distinct_colors`)
            and legend entry; with more, the ``LEGEND_CURVES - 1`` classes of the largest ECE are, and the others are
            thin grey lines counted in one entry.

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: an unknown ``kind``; ``target`` missing with probabilities, or given with a histogram;
            probabilities that are not ``(B, C, *spatial)``; ``per_case_boxes`` with ``"classwise"`` or a histogram
            without per-case counts; ``class_names`` not one per class, or with another kind than ``"classwise"``.

    Example:
        >>> import numpy as np
        >>> probs = np.array([[[0.9, 0.2, 0.6, 0.3]], [[0.1, 0.8, 0.4, 0.7]]])[None, :, 0]
        >>> fig = plot_reliability_diagram(probs, np.array([[0, 1, 1, 1]]), n_bins=5, show_counts=False)
        >>> type(fig).__name__, len(fig.axes)
        ('Figure', 1)
    """
    if kind not in _AXIS_LABELS:
        raise ValueError(f"kind must be one of {tuple(_AXIS_LABELS)}, got {kind!r}")
    if isinstance(probs, ConfidenceHistogram):
        if target is not None:
            raise ValueError("target must be None when plotting a ConfidenceHistogram")
        hist = probs
    else:
        if target is None:
            raise ValueError("target (the reference labels) is required with probabilities")
        p = to_tensor(probs, "probs")
        if p.ndim < 3:
            raise ValueError(f"probs must have shape (B, C, *spatial), got {tuple(p.shape)}")
        hist = ConfidenceHistogram(int(p.shape[1]), n_fine_bins=n_fine_bins).update(p, target)
    if per_case_boxes and kind == "classwise":
        raise ValueError("per_case_boxes is not available for kind='classwise'")
    if class_names is not None and kind != "classwise":  # found by hostile testing: accepted and unused
        raise ValueError(f"class_names names the curves of kind='classwise' only, got kind={kind!r}")
    if per_case_boxes and not hist.per_case:
        raise ValueError("per_case_boxes needs a histogram with per_case=True")

    curve = reliability_curve(hist, kind=kind, n_bins=n_bins, min_bin_count=min_bin_count)
    if ax is None:
        fig = Figure(figsize=(5.0, 6.0 if show_counts else 4.8))
        FigureCanvasAgg(fig)
        if show_counts:
            grid = fig.add_gridspec(2, 1, height_ratios=(3, 1), hspace=0.08)
            ax_rel = fig.add_subplot(grid[0])
            ax_cnt: Axes | None = fig.add_subplot(grid[1], sharex=ax_rel)
        else:
            ax_rel, ax_cnt = fig.add_subplot(1, 1, 1), None
    else:
        fig_any: Any = ax.figure
        fig, ax_rel, ax_cnt = fig_any, ax, None

    edges, centers, width = curve.edges, curve.centers, 1.0 / n_bins
    xlabel, ylabel = _AXIS_LABELS[kind]
    ax_rel.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
    value = _calibration_error(hist, kind, n_bins, min_bin_count)
    if kind == "classwise":
        n_cls = int(curve.frequency.shape[0])
        if class_names is not None and len(class_names) != n_cls:
            raise ValueError(f"class_names must name each of the {n_cls} classes, background first (class 0), got "
                             f"{len(class_names)} names")
        names = [str(n) for n in class_names] if class_names is not None else [f"label {c}" for c in range(n_cls)]
        shown = _highlighted(np.asarray(value, dtype=np.float64), curve.kept)
        colors = distinct_colors(len(shown), "white")
        for c in range(n_cls):
            ok = curve.kept[c]
            if c in shown:
                ax_rel.plot(curve.confidence[c][ok], curve.frequency[c][ok], "o-", ms=3, zorder=3,
                            color=colors[shown.index(c)], label=names[c])
            else:  # one of many classes, not among the worst calibrated: context, in grey
                ax_rel.plot(curve.confidence[c][ok], curve.frequency[c][ok], "-", lw=0.6, color="0.72", zorder=2,
                            label="_nolegend_")
        if len(shown) < n_cls:
            ax_rel.plot([], [], "-", lw=0.6, color="0.72",
                        label=f"{n_cls - len(shown)} other classes (smaller ECE)")
        summary = f"classwise ECE {format_cell(float(np.nanmean(value)), 4)}"
    else:
        ok = curve.kept
        freq = np.where(ok, curve.frequency, 0.0)
        conf = np.where(ok, curve.confidence, 0.0)
        ax_rel.bar(edges[:-1], freq, width=width, align="edge", color="tab:blue", alpha=0.6,
                   edgecolor="tab:blue", label=ylabel)  # fmt: skip
        ax_rel.bar(edges[:-1], conf - freq, bottom=freq, width=width, align="edge", color="none",
                   edgecolor="tab:red", hatch="//", lw=0.8, label="gap to mean confidence")  # fmt: skip
        ax_rel.plot(curve.confidence[ok], curve.frequency[ok], "o", color="black", ms=3, label="bin means")
        name = {"top": "ECE", "all_label": "all-label ECE", "uncertainty": "UCE"}[kind]
        summary = f"{name} {format_cell(float(value), 4)}"
        if per_case_boxes:
            cases = reliability_curve(hist, kind=kind, n_bins=n_bins, min_bin_count=min_bin_count, per_case=True)
            data = [cases.frequency[:, b][cases.kept[:, b]] for b in range(n_bins)]
            pos = [centers[b] for b in range(n_bins) if data[b].size]
            data = [d for d in data if d.size]
            if data:
                ax_rel.boxplot(data, positions=pos, widths=0.5 * width, manage_ticks=False, showfliers=True,
                               flierprops={"markersize": 2}, medianprops={"color": "tab:orange"})  # fmt: skip
    ax_rel.set_xlim(0, 1)
    ax_rel.set_ylim(0, 1)
    ax_rel.set_ylabel(ylabel)
    # the minimum counts what the bins count: a class's voxels for "classwise" (one histogram per class)
    unit = "voxels" if kind == "classwise" else _COUNT_UNITS[kind]
    extra = f", bins with >= {min_bin_count} {unit}" if min_bin_count else ""
    ax_rel.set_title(title if title is not None else f"{summary} ({n_bins} bins{extra})", fontsize=10)
    ax_rel.legend(loc="upper left", fontsize=7)
    if ax_cnt is not None:
        counts = curve.counts if kind != "classwise" else curve.counts.sum(0)
        ax_cnt.bar(edges[:-1], np.maximum(counts, 0), width=width, align="edge", color="gray")
        if counts.max() > 0:
            ax_cnt.set_yscale("log")
            ax_cnt.yaxis.set_major_formatter(_PlainLogFormatter())
            ax_cnt.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False))
        ax_cnt.set_ylabel(_COUNT_UNITS[kind])
        ax_cnt.set_xlabel(xlabel)
        ax_rel.tick_params(labelbottom=False)
    else:
        ax_rel.set_xlabel(xlabel)
    if path is not None:
        atomic_savefig(fig, path, dpi=120, bbox_inches="tight")
    return fig
