"""The self-contained HTML QC report of ``monai-unc report``.

:func:`build_report` reads an evaluation folder (``summary.json`` and the ``state/`` folder written by
``monai-unc evaluate``, both checked on reading: :func:`monai_unc.evaluation.load_evaluation`) and writes
``report.html`` with every figure embedded as a base64 PNG (the file can be mailed or archived alone; it loads nothing
from the network), plus the same figures as PNG files under ``figures/``; its ``metrics.csv`` download is the table of
the rows it shows (:func:`monai_unc.io.csv_text`), never the file on disk. Sections:

1. key numbers: cases, mean Dice, pooled calibration (ECE family from merged histograms), failure detection
   (AURC / E-AURC with risk 1 - Dice), OoD AUROC when shift labels were given;
2. the triage table: cases ranked by their uncertainty score (:func:`score_formatter`), the ``budget`` most uncertain
   marked for review, and the mean Dice of the cases kept and referred (with the referral curve's expectation when a
   tie of scores straddles the budget's cut, whose cases are marked); with a target risk, the decision of the
   risk-controlled threshold too (docs/referral_threshold.md);
3. cohort plots: all-label reliability diagram with the per-case spread, referral curve, uncertainty histograms
   of good vs failed cases, scores by shift;

   for a region evaluation (``monai-unc evaluate --regions``): a region table (Dice, pooled binary calibration,
   QU-BraTS, failure detection per region), per-region columns in the triage table (``dice_<R>``,
   ``qu_brats_score_<R>``, ``qu_brats_score``), one reliability diagram per region and the QU-BraTS curves
   (filtered Dice, FTP, FTN against the threshold, mean over the cases, one line per region);
4. per-case overlays (image, prediction contour, uncertainty heatmap, error map) on the slices of highest
   uncertainty, for the most uncertain cases and, for contrast, the most certain one;

   for an evaluation with cohort products (:mod:`monai_unc.product`): each product's section
   (:func:`product_sections`, from its block of ``summary.json``) and the contours of the case files it wrote in
   ``products/<name>/`` in the overlays (:func:`case_overlays`).

The page computes no metric: every number comes from what ``evaluate`` wrote (``summary.json``, the rows and
histograms of ``state/``), or from a summary the caller passes. Another budget or risk target is the evaluation's
cohort summary again (:func:`monai_unc.evaluation.resummarize`, called by ``monai-unc report --budget``), so the
numbers in the report are always those of the metric functions.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import hashlib
import itertools
import json
import os
import re
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .._utils import check_integer, each_warning_once, user_stacklevel
from ..evaluation import (
    IID_SHIFTS,
    CohortState,
    config_from_summary,
    dice_as_recorded,
    dice_failed,
    failure_dice_text,
    fill_undefined_scores,
    load_evaluation,
)
from ..evaluation.config import DERIVED_MAPS_DIR, former_region_suffix
from ..evaluation.products import PRODUCTS_DIR
from ..io import (
    CaseFiles,
    LoadedCase,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    case_image_files,
    csv_text,
    file_sha256,
    input_folder,
    is_seg_label,
    load_case,
    output_lock,
    output_lock_holder,
    owned_folder,
    read_csv,
    segment_label_values,
)
from ..product import (
    Overlay,
    ReportSection,
    ReportTable,
    ThresholdText,
    format_cell,
    format_fraction,
    format_level,
    format_score,
    format_share,
    format_target,
    product_type,
)
from ..regions import label_to_regions
from .markup import Markup, case_line, document, el, frag, isolate, isolated_list
from .plots import (
    case_figure_path,
    plot_case_overlay,
    plot_qu_brats_curves,
    plot_referral_curve,
    plot_scores_by_shift,
    plot_uncertainty_histograms,
    save_png,
)
from .reliability import plot_reliability_diagram
from .viewer import CONVENTIONS, VIEWER_CSS, case_viewer, check_convention, viewer_scripts, viewer_section

__all__ = [
    "Figure",
    "PAGE_CSS",
    "REPORT_SOURCE_RECORD",
    "ReadEvaluation",
    "build_report",
    "cards",
    "case_figure_paths",
    "case_overlays",
    "product_section",
    "product_sections",
    "read_evaluation",
    "ACCEPT_ALL",
    "BUDGET_NOTE",
    "DECISION_LABELS",
    "decision_tag",
    "format_value",
    "img_tag",
    "region_display",
    "render_html",
    "reliability_figure",
    "remove_stale_report",
    "score_formatter",
    "scroll_box",
    "section_element_ids",
    "section_ids",
    "write_case_figures",
    "table",
    "threshold_text",
    "warning_list",
    "write_report",
]


@dataclass
class Figure:
    """An embedded figure: element id, title, caption, PNG bytes and the file it was saved to.

    Attributes:
        key: the element id is ``fig-<key>``.
        title: the figure's title (also the ``alt`` text).
        caption: the caption, after the title.
        png: the PNG bytes, embedded as base64.
        path: the PNG file written next to the page, or None.
        case: the case id the title begins with (a case's figure), shown isolated (:func:`~.markup.isolate`) in the
            caption; None for a cohort figure.
    """

    key: str
    title: str
    caption: str
    png: bytes
    path: Path | None = None
    case: str | None = None


def reliability_figure(state: CohortState, n_bins: int, min_bin_count: int) -> Any | None:
    """All-label reliability diagram of the pooled histogram with per-case box plots.

    The box plot of the per-case frequencies per bin is that of Kock, Thielke et al., "Confidence Histograms for
    Model Reliability Analysis and Temperature Calibration" (Fig. 5), drawn by
    :func:`monai_unc.report.reliability.plot_reliability_diagram`.

    Args:
        state: the evaluated cohort's saved state (its per-case histograms).
        n_bins: equal-width bins of the diagram.
        min_bin_count: fewest voxels of a drawn bin.

    Returns:
        The matplotlib ``Figure``, or None when the cohort has no probabilities.
    """
    if state.histogram is None:
        return None
    return plot_reliability_diagram(
        state.histogram, kind="all_label", n_bins=n_bins, min_bin_count=min_bin_count, per_case_boxes=True
    )


def format_value(v: Any, digits: int = 3, threshold: float | None = None) -> str:
    """A table cell: ``digits`` decimals for finite floats, an en dash for missing or non-finite values.

    :func:`~monai_unc.product.format_cell`: a finite non-zero value never reads zero, and a value shown with a
    ``threshold`` it is judged against never reads equal to it or on its other side (significant digits instead).

    Args:
        v: the value (None and ``""`` are missing).
        digits: decimals of a float.
        threshold: the number the value is compared with where it is shown (the failure Dice of a case's Dice).

    Returns:
        The text of the cell (other values as ``str(v)``).

    Example:
        >>> format_value(0.12345), format_value(float("nan")), format_value(None), format_value(3)
        ('0.123', '–', '–', '3')
        >>> format_value(0.79988, threshold=0.8), format_value(2.4e-05, 4)
        ('0.7999', '2.4e-05')
    """
    return format_cell(v, digits, threshold)


def img_tag(fig: Figure) -> Markup:
    """A ``<figure>`` element embedding the figure's PNG (base64) in an ``<img>``, with its id, title and caption.

    Args:
        fig: the figure.

    Returns:
        The escaped ``<figure>`` element (no network resource).

    Example:
        >>> str(img_tag(Figure("ref", "R", "c", b"png")))[:67]
        '<figure id="fig-ref"><img alt="R" src="data:image/png;base64,cG5n">'
    """
    b64 = base64.b64encode(fig.png).decode("ascii")
    title = case_line(fig.title, [fig.case]) if fig.case is not None else fig.title  # a case id isolated (review 61)
    return el("figure", el("img", alt=fig.title, src=f"data:image/png;base64,{b64}"),
              el("figcaption", el("b", frag(title, ".")), " ", fig.caption), id=f"fig-{fig.key}")


PAGE_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#1d2430;background:#f5f6f8;
overflow-wrap:break-word}
header{background:#23324a;color:#fff;padding:18px 28px}header h1{margin:0 0 4px;font-size:22px}
header p{margin:2px 0;color:#c9d3e3;font-size:13px}main{padding:8px 28px 40px;max-width:1280px}
h2{font-size:18px;margin:26px 0 10px;border-bottom:2px solid #d5dae3;padding-bottom:4px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{background:#fff;border:1px solid #d5dae3;border-radius:6px;
padding:10px 14px;min-width:150px}.card .v{font-size:20px;font-weight:600}.card .k{font-size:12px;color:#5b6677}
.card .n{font-size:11px;color:#5b6677;font-style:italic;max-width:220px}
table{border-collapse:collapse;background:#fff;font-size:13px}th,td{border:1px solid #d5dae3;padding:4px 8px;
text-align:right}th{background:#e9edf3;position:sticky;top:0}td.l,th.l{text-align:left}
tr.referred td{background:#fde8e6}tr.failed td.dice{color:#b3261e;font-weight:600}
.tag{display:inline-block;border-radius:3px;padding:0 5px;font-size:11px;font-weight:600}
.tag.r{background:#d62728;color:#fff}.tag.k{background:#e3e7ee;color:#3a4556}.tag.t{background:#fff4e5;color:#6b4a00}
.plots{display:flex;flex-wrap:wrap;gap:14px}figure{margin:0;background:#fff;border:1px solid #d5dae3;
border-radius:6px;padding:8px}figure img{display:block;max-width:100%}figcaption{font-size:12px;color:#44505f;
max-width:580px;margin-top:4px}.plots figure{flex:0 1 580px}.cases figure{margin-bottom:14px}
.cases figcaption{max-width:1200px}.note{font-size:13px;color:#44505f;max-width:1000px}
.scroll{max-height:520px;max-width:100%;overflow:auto;display:inline-block;border:1px solid #d5dae3}
.wide{max-width:100%;overflow-x:auto}
@media print{.scroll,.wide{max-height:none;overflow:visible}th{position:static}}
ul.warn{font-size:12px;color:#6b4a00}
"""

_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute('data-images-total', String(imgs.length));
  document.body.setAttribute('data-images-loaded', String(ok));
});
"""


def cards(items: Sequence[tuple[str, str] | tuple[str, str, str]]) -> Markup:
    """The key-number cards of a page: one card per ``(label, value)`` or ``(label, value, note)``, all shown as text.

    The note, under the label, says what the number measures and which way is better (``calibration error, lower
    is better``), so that a reader new to the measure does not read it the wrong way round.

    Args:
        items: the ``(label, value)`` or ``(label, value, note)`` tuples, in order.

    Returns:
        The ``<div class="cards">`` element (escaped).

    Example:
        >>> str(cards([("cases", "12")]))
        '<div class="cards"><div class="card"><div class="v">12</div><div class="k">cases</div></div></div>'
        >>> str(cards([("ECE", "0.02", "calibration error <x>, lower is better")]))[-77:]
        '<div class="n">calibration error &lt;x&gt;, lower is better</div></div></div>'
    """
    def card(label: str, value: str, note: str = "") -> Markup:
        return el("div", el("div", value, class_="v"), el("div", label, class_="k"),
                  *((el("div", note, class_="n"),) if note else ()), class_="card")

    return el("div", *(card(*item) for item in items), class_="cards")


def table(head: Sequence[str], rows: Sequence[Markup], left: Sequence[str] = (), **attributes: Any) -> Markup:
    """An HTML table.

    Header cells ``head`` (class ``l``, left-aligned, for those in ``left``), then the ``rows`` (``<tr>`` elements);
    ``attributes`` are the ``<table>``'s.

    Args:
        head: the header cells.
        rows: the body rows (``<tr>`` elements).
        left: the header cells to left-align.
        **attributes: the ``<table>`` element's attributes.

    Returns:
        The ``<table>`` element.

    Example:
        >>> str(table(["case", "Dice"], [], left=["case"]))
        '<table><thead><tr><th class="l">case</th><th class="">Dice</th></tr></thead><tbody></tbody></table>'
    """
    ths = [el("th", h, class_="l" if h in left else "") for h in head]
    return el("table", el("thead", el("tr", *ths)), el("tbody", *rows), **attributes)


def scroll_box(content: Any, label: str, class_: str = "scroll") -> Markup:
    """A box that scrolls its table inside the page (``.scroll``: long tables; ``.wide``: sideways only).

    The box is focusable and named (``tabindex="0"``, ``role="region"``, ``aria-label``): a box of text without a
    link or a control cannot be reached from the keyboard otherwise, so a keyboard reader could not scroll a long
    triage table past its first twenty rows (axe's scrollable-region-focusable rule).

    Args:
        content: the table.
        label: the box's accessible name (what a screen reader announces).
        class_: ``"scroll"`` or ``"wide"``.

    Returns:
        The ``<div>`` element.

    Example:
        >>> str(scroll_box("t", "cases"))
        '<div class="scroll" tabindex="0" role="region" aria-label="cases">t</div>'
    """
    return el("div", content, class_=class_, tabindex="0", role="region", aria_label=label)


def _td(value: Any, class_: str | None = None) -> Markup:
    """A table cell: :class:`Markup` as it is, anything else as text."""
    return el("td", value, class_=class_)


#: the tag texts of the two decisions a page can show, ``{kind: (kept, referred)}``: the review budget's
#: (``budget``, a ranking without a guarantee) and a certified referral rule's (``rule``, which carries the guarantee)
DECISION_LABELS = {"": ("accept", "review"), "rule": ("rule: accept", "rule: review"),
                   "budget": ("budget: kept", "budget: flagged")}


def decision_tag(decision: str, kind: str = "") -> Markup:
    """The accept / review tag of a triage decision (anything but ``accept`` is a review).

    Args:
        decision: the decision, e.g. ``"accept"`` or ``"review"``.
        kind: whose decision, named on the tag (:data:`DECISION_LABELS`): ``"rule"`` (a certified referral rule:
            ``rule: accept`` / ``rule: review``), ``"budget"`` (the review budget's ranking: ``budget: kept`` /
            ``budget: flagged``) or ``""`` (``accept`` / ``review``).

    Returns:
        A ``<span class="tag ...">`` element.

    Example:
        >>> str(decision_tag("accept")), str(decision_tag("refer"))
        ('<span class="tag k">accept</span>', '<span class="tag r">review</span>')
        >>> str(decision_tag("review", "budget")), str(decision_tag("accept", "rule"))
        ('<span class="tag r">budget: flagged</span>', '<span class="tag k">rule: accept</span>')
    """
    kept, referred = DECISION_LABELS[kind]
    return (el("span", kept, class_="tag k") if decision == "accept" else el("span", referred, class_="tag r"))


#: the sentence of a page that shows the budget's decisions: which decision carries the guarantee
BUDGET_NOTE = ("The budget column is a ranking: it flags the most uncertain cases for review and guarantees nothing "
               "about the cases it keeps; only a certified referral rule (monai-unc evaluate --target-risk, applied "
               "to new cases by monai-unc triage) carries a guarantee on the risk of the cases it accepts.")


def warning_list(warns: Sequence[str], limit: int = 50, more: str = "", case_ids: Iterable[str] = ()) -> Markup:
    """The Warnings section: the first ``limit`` warnings, each escaped.

    Args:
        warns: the warnings.
        limit: at most this many are listed.
        more: when given and warnings are left out, a last item ``... and N more <more>``.
        case_ids: the page's case ids: a warning that begins with one (``"<case>: ..."``) shows it isolated
            (:func:`~.markup.case_line`).

    Returns:
        The ``<section id="warnings">`` element.

    Example:
        >>> str(warning_list(["a", "b<c", "d"], limit=2, more="(see summary.json)"))[-72:]
        '<li>b&lt;c</li><li>... and 1 more (see summary.json)</li></ul></section>'
    """
    ids = list(case_ids)
    items = [el("li", case_line(w, ids)) for w in warns[:limit]]
    if more and len(warns) > limit:
        items.append(el("li", f"... and {len(warns) - limit} more {more}"))
    return el("section", el("h2", "Warnings"), el("ul", *items, class_="warn"), id="warnings")


#: what each key number of the evaluation page measures and which way is better: the note under its card (without
#: it a newcomer could not tell whether an ECE of 0.05 or an AURC of 0.1 was good)
_CARD_NOTES: dict[str, str] = {
    "dice": "overlap with the reference labels, 0 to 1; higher is better",
    "dice_kept": "Dice of the cases left after the most uncertain are referred; higher is better",
    "caught": "failed cases among those referred for review; more is better",
    "ece": "calibration error of the top-label confidence; lower is better (0 = calibrated)",
    "all_label_ece": "calibration error over every class's probability; lower is better (0 = calibrated)",
    "nll": "negative log-likelihood of the labels per voxel; lower is better",
    "brier": "squared error of the probabilities (summed over classes, 0 to 2) per voxel; lower is better",
    "qu_brats": "QU-BraTS uncertainty score, 0 to 1; higher is better",
    "aurc": "area under the risk-coverage curve (uncertainty ranking the cases' errors); lower is better",
    "eaurc": "AURC above that of the best possible ranking; lower is better (0 = perfect)",
    "ood": "shifted cases told apart from the others by the case score; higher is better (0.5 = chance)",
    "risk_control": "cases the certified threshold sends to review; fewer is better at the same guarantee",
}


def _cards(summary: Mapping[str, Any]) -> Markup:
    notes = _CARD_NOTES
    items: list[tuple[str, str] | tuple[str, str, str]] = [
        ("cases", str(summary["n_cases"])),
        ("mean Dice", format_value(summary["dice"]["mean"]), notes["dice"]),
    ]
    t = summary["triage"]
    n = summary["n_cases"]
    items.append((f"mean Dice of the kept cases, budget {format_fraction(t['budget'])} ({t['n_referred']} of {n} "
                  "referred)", format_value(_dice_kept(t)), notes["dice_kept"]))
    f = summary.get("failures", {})
    caught = f"{f.get('caught_by_budget')} / {f.get('n_failed')}"
    items.append((f"failed (Dice < {failure_dice_text(f['dice_threshold'])}) referred", caught, notes["caught"]))
    cal = summary.get("calibration")
    if cal:
        items += [
            ("pooled ECE (top label)", format_value(cal["ece"], 4), notes["ece"]),
            ("pooled all-label ECE", format_value(cal["all_label_ece"], 4), notes["all_label_ece"]),
            ("pooled NLL", format_value(cal["nll"], 4), notes["nll"]),
            ("pooled Brier", format_value(cal["brier"], 4), notes["brier"]),
        ]
    qb = summary.get("qu_brats")
    if qb:
        items.append(("QU-BraTS score (mean over regions and cases)", format_value(qb["score"]), notes["qu_brats"]))
        items += [(f"QU-BraTS {name}", format_value(v), notes["qu_brats"]) for name, v in qb["per_region"].items()]
    fd = summary["failure_detection"]
    items += [("AURC (risk 1 - Dice)", format_value(fd["aurc"], 4), notes["aurc"]),
              ("E-AURC", format_value(fd["eaurc"], 4), notes["eaurc"])]
    ood = summary.get("ood")
    if ood and "auroc" in ood:  # null (every score undefined, review 61): the card reads "–", the warning says why
        # below 1 never reads a perfect 1.000
        items.append(("OoD AUROC", format_value(ood["auroc"], threshold=1.0), notes["ood"]))
    rc = summary.get("risk_control")
    if rc:
        key = (f"referred for risk <= {format_target(rc['target_risk'])} ({rc['risk']}), 1 - delta = "
               f"{format_level(rc['delta'])}")
        items.append((key, f"{len(rc['referred'])} / {summary['n_cases']}", notes["risk_control"]))
    return cards(items)


def _budget_text(summary: Mapping[str, Any]) -> str:
    """The review budget as a page writes it: the fraction with significant digits and the cases it refers."""
    t = summary["triage"]
    return f"{format_fraction(t['budget'])} ({t['n_referred']} of {summary['n_cases']} cases)"


def _dice_kept(triage: Mapping[str, Any]) -> Any:
    """The mean Dice of the cases the budget keeps (a summary of an older version: the referral curve's value)."""
    return triage["dice_kept"] if "dice_kept" in triage else triage["dice_retained"]


#: how a page states a certified threshold that accepts every score (the rule also refers scores outside the range of
#: the calibration scores: docs/triage.md)
ACCEPT_ALL = "accept every score in the calibration range"


def score_formatter(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Callable[[Any], str]:
    """The one writing of the triage scores on a report: significant digits, never equal to the certified threshold.

    Without a risk-controlled threshold (or with one that accepts every score or none) a score is written by
    :func:`~monai_unc.product.format_score`; with one, by :meth:`~monai_unc.product.ThresholdText.score` of the
    statement :func:`threshold_text` makes for the rows' scores, so a case on the other side of the threshold never
    reads equal to it.

    Args:
        summary: the cohort summary (``score.column``, ``risk_control``).
        rows: the cases' rows.

    Returns:
        A function ``value -> text``.
    """
    t = threshold_text(summary, rows)
    return format_score if t is None else t.score


def threshold_text(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> ThresholdText | None:
    """How the report states its risk-controlled threshold for the rows' scores (None: no finite threshold).

    Args:
        summary: the cohort summary.
        rows: the cases' rows.

    Returns:
        The :class:`~monai_unc.product.ThresholdText`, or None without a certified finite threshold.
    """
    rc = summary.get("risk_control")
    if not rc or not rc.get("feasible") or rc.get("threshold") is None:
        return None
    key = summary["score"]["column"]
    return ThresholdText.choose(float(rc["threshold"]), [r[key] for r in rows if isinstance(r.get(key), (int, float))])


def _risk_control_note(rc: Mapping[str, Any], n_cases: int, thr: ThresholdText | None = None) -> Markup:
    """One paragraph on the risk-controlled threshold (``summary["risk_control"]``), written as ``thr`` says."""
    cal = rc["calibration"]
    target = rc["target_risk"]  # the risks and the bound are judged against it: never written equal to it
    fitted = "all cases" if cal["cases"] == "all" else f"{cal['n_cases']} calibration case(s)"
    head = frag(el("b", "Risk-controlled threshold"), f" ({rc['method'].upper()}, fitted on {fitted}): target mean "
                "risk ", el("b", format_target(rc["target_risk"])), f" ({rc['risk']}) among accepted new cases, with "
                "probability at least ", el("b", format_level(rc["delta"])), ", assuming new cases are "
                "exchangeable with the calibration cases. ")
    if not rc["feasible"]:
        return frag(head, el("b", "No threshold satisfies the target"), " on these calibration cases (best bound "
                    f"{format_value(rc['bound'], 4, target)}): every case goes to review. Collect more calibration "
                    "cases or relax the target.")
    if rc["threshold"] is None:  # every calibration case with a defined score was accepted
        rule = frag(ACCEPT_ALL[0].upper() + ACCEPT_ALL[1:])
    else:
        thr = thr or ThresholdText.choose(float(rc["threshold"]))
        rule = frag("Accept a case when its score is ", "below " if thr.strict else "at most ",
                    el("b", thr.bound_text()), " (the lowest score it refers)" if thr.strict else None)
    # a share with its counts (found by hostile review 60: 1999 of 2000 read "coverage 1.000", every case accepted);
    # the coverage is over every calibration case, those without a defined score included
    n_cal = int(cal["n_cases"])
    coverage = format_share(int(round(float(cal["coverage"]) * n_cal)), n_cal)
    text = frag(head, rule, f": {n_cases - len(rc['referred'])} of {n_cases} accepted (calibration coverage "
                f"{coverage}, observed risk {format_value(cal['risk_accepted'], 4, target)}, "
                f"bound {format_value(rc['bound'], 4, target)}).")
    held = rc.get("held_out")
    if held:
        n_held = int(held["n_cases"])
        n_acc = int(round(float(held["coverage"]) * n_held))  # a share with its counts, not a bare "coverage 0.2"
        text += (f" Held-out cases: {n_held}, accepted {format_share(n_acc, n_held)}, observed risk of the accepted "
                 f"{format_value(held['risk_accepted'], 4, target)}"
                 f"{' (no accepted case: nothing to observe)' if n_acc == 0 else ''}.")
    return text


def _triage_table(rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> Markup:
    score_key = summary["score"]["column"]
    by_id = {str(r["case"]): r for r in rows}
    referred = set(summary["triage"]["referred"])
    tied = set(summary["triage"].get("tied") or ())
    score = score_formatter(summary, rows)
    thr = summary["failures"]["dice_threshold"]
    has_shift = any("shift" in r for r in rows)
    extra = [k for k in ("ece", "buc", "error_auroc") if any(k in r for r in rows)]
    regions = summary.get("regions")
    if regions:  # per-region Dice, then the QU-BraTS score (mean and per region)
        sfx = [b["column_suffix"] for b in regions["per_region"].values()]
        extra += [k for k in ([f"dice_{s}" for s in sfx] + ["qu_brats_score"] + [f"qu_brats_score_{s}" for s in sfx])
                  if any(k in r for r in rows)]
    rc = summary.get("risk_control")
    rc_head = ["rule (risk-controlled)"] if rc else []
    rc_referred = set(rc["referred"]) if rc else set()
    head = ["rank", "case", "budget"] + rc_head + [score_key, "Dice"] + (["shift"] if has_shift else []) + extra
    trs = []
    for rank, cid in enumerate(summary["triage"]["order"], 1):
        r = by_id[cid]
        dice = float(r["dice"])
        cls = ("referred " if cid in referred else "") + ("failed" if dice_failed(dice, thr) else "")
        budget_tag = decision_tag("review" if cid in referred else "accept", "budget")
        if cid in tied:  # a tie at the budget's cut: which of its cases is flagged is the case id's choice
            budget_tag = frag(budget_tag, " ", el("span", "tied at the cut", class_="tag t"))
        cells = [_td(str(rank)), _td(isolate(cid), "l"), _td(budget_tag, "l")]
        if rc:
            cells.append(_td(decision_tag("accept" if cid not in rc_referred else "review", "rule"), "l rc"))
        cells += [_td(score(r.get(score_key))), _td(format_value(dice_as_recorded(dice), threshold=thr), "dice")]
        if has_shift:
            cells.append(_td(str(r.get("shift", "")), "l"))
        # an AUROC below 1 never reads as a perfect 1.000 (found by hostile review 60), as non-zero never reads 0
        cells += [_td(format_value(r.get(k), threshold=1.0 if k == "error_auroc" else None)) for k in extra]
        trs.append(el("tr", *cells, class_=(cls + (" tied" if cid in tied else "")).strip(), data_case=cid))
    return scroll_box(table(head, trs, ("case", "budget", "shift", "rule (risk-controlled)"), id="triage-table"),
                      "triage table, most uncertain case first")


def _regions_section(summary: Mapping[str, Any]) -> Markup:
    """The region table of a region evaluation.

    Per region its labels, Dice (mean over cases), pooled binary calibration (top-label ECE, NLL, Brier), the mean
    QU-BraTS values and failure detection with its own score.
    """
    regions = summary["regions"]
    head = ["region", "labels", "columns", "Dice", "ECE", "NLL", "Brier", "QU-BraTS", "Dice AUC", "FTP AUC", "FTN AUC",
            "AURC"]
    note = el("p", "Each region is a binary task. Calibration pools the region's binary confidence histograms over all "
              "cases; QU-BraTS (Mehta et al., MELBA 2022) is the mean over the cases of the per-case score; AURC ranks "
              "the cases by the region's own score (risk 1 - Dice of the region). ", regions["combined_score"], ".",
              class_="note")
    trs = []
    for name, b in regions["per_region"].items():
        cal, qb, fd = b.get("calibration") or {}, b.get("qu_brats") or {}, b.get("failure_detection") or {}
        cells = [_td(name, "l"), _td(", ".join(str(v) for v in b["labels"]), "l"), _td(f"*_{b['column_suffix']}", "l")]
        cells += [_td(v) for v in (
            format_value(b["dice"]["mean"]), format_value(cal.get("ece"), 4), format_value(cal.get("nll"), 4),
            format_value(cal.get("brier"), 4), format_value(qb.get("score")), format_value(qb.get("dice_auc")),
            format_value(qb.get("ftp_auc")), format_value(qb.get("ftn_auc")), format_value(fd.get("aurc"), 4))]
        trs.append(el("tr", *cells, data_region=name))
    return el("section", el("h2", "Regions"), note,
              scroll_box(table(head, trs, ("region", "labels", "columns"), id="regions-table"), "region table", "wide"),
              id="regions")


def product_section(section: ReportSection, key: str, section_id: str | None = None, *,
                    element_ids: Sequence[str] | None = None) -> Markup:
    """The HTML of a product's :class:`~monai_unc.product.ReportSection`.

    Heading, paragraphs, cards and a table, every string escaped. The ids of its tables and banners
    (``<section id>-<key>``) are distinct whatever their keys (in earlier versions keys ``"a b"`` and ``"a_b"`` gave
    one id, and a link jumped to the first); a key that shares its id with no other keeps the id of earlier versions.

    Args:
        section: the section.
        key: the product's name (the section's ``id``: ``product-<key>``, or the section's own ``anchor``).
        section_id: the section's id when given (:func:`product_sections` gives each section of a page its own).
        element_ids: the ids of its keyed tables, then of its banners, when given (:func:`section_element_ids`
            gives those of all sections of a page at once); else they are chosen for this section alone.

    Returns:
        The ``<section>`` element.

    Raises:
        TypeError: ``element_ids`` one string, or not a collection.
        ValueError: ``element_ids`` not one id per keyed table and banner.
    """
    parts: list[Any] = [el("h2", str(section.title))]
    parts += [el("p", str(text), class_="note") for text in section.paragraphs]
    if section.items:
        parts.append(el("ul", *[el("li", str(item)) for item in section.items]))
    if section.cards:
        parts.append(cards([(str(label), str(value)) for label, value in section.cards]))
    anchor = _section_id(section, key) if section_id is None else str(section_id)
    tables = _section_tables(section)
    # one id per table and banner, whatever their keys
    if element_ids is None:
        element_ids = _element_ids([(anchor, section)], _REPORT_IDS)[0]
    element_ids = _given_ids(element_ids, "element_ids")
    if len(element_ids) != len(_element_keys(section)):
        raise ValueError(f"element_ids must give one id per keyed table and banner ({len(_element_keys(section))}), "
                         f"got {len(element_ids)}")
    sub_ids = iter(element_ids)
    for t in tables:
        if t.title:
            parts.append(el("h3", str(t.title)))
        if t.note:
            parts.append(el("p", str(t.note), class_="note"))
        data = list(t.row_data) + [{}] * max(0, len(t.rows) - len(t.row_data))
        # a case column's ids isolated, as every case id of the page (review 61)
        ids = {i for i, h in enumerate(t.head) if str(h).strip().lower() == "case"}
        rows = [el("tr", *[_td(isolate(format_value(v)) if i in ids else format_value(v), "l" if i == 0 else None)
                           for i, v in enumerate(row)],
                   **{f"data_{_slug(str(k)).replace('-', '_')}": str(v) for k, v in extra.items()})
                for row, extra in zip(t.rows, data)]
        key_id = next(sub_ids) if t.key else None
        parts.append(scroll_box(table([str(h) for h in t.head], rows, left=[str(t.head[0])] if t.head else (),
                                      id=key_id), str(t.title or section.title),
                                "wide"))  # scrolls sideways inside a narrow (zoomed) page
    for _, heading, text in section.banners:
        parts.append(el("div", el("b", str(heading)), " ", str(text), class_="banner",
                        id=next(sub_ids)))
    return el("section", *parts, id=anchor, class_="product")


def _section_tables(section: ReportSection) -> list[ReportTable]:
    """The tables of a section, its ``table_head`` one first."""
    tables = list(section.tables)
    if section.table_head:
        tables.insert(0, ReportTable(section.table_head, section.table_rows))
    return tables


def _element_keys(section: ReportSection) -> list[str]:
    """The keys of a section's keyed tables, then of its banners: what asks for ``<section id>-<key>``."""
    return [str(t.key) for t in _section_tables(section) if t.key] + [str(k) for k, _, _ in section.banners]


def _element_ids(sections: Sequence[tuple[str, ReportSection]], page_ids: Iterable[str]) -> list[list[str]]:
    """The ids of the keyed tables and banners of a page's product sections (``(section id, section)``).

    One pass over all of them: none takes another's id, a section's or one of the page's own (``page_ids``, and the
    figures' and viewers' ``fig-...``, ``viewer-...``).
    """
    wanted: list[tuple[str, str]] = []
    owner: list[int] = []
    for n, (sid, section) in enumerate(sections):
        for k in _element_keys(section):
            wanted.append((f"{sid}-{_anchor(k)}", k))
            owner.append(n)
    page = frozenset(page_ids) | {sid for sid, _ in sections}
    out: list[list[str]] = [[] for _ in sections]
    for n, element_id in zip(owner, _unique_ids(wanted, reserved=lambda i: _page_id(i, page))):
        out[n].append(element_id)
    return out


def _section_id(section: ReportSection, key: str) -> str:
    """The id a product's section asks for.

    Its own ``anchor`` (letters, digits, ``-``, ``_``; another as :func:`_anchor`), else ``product-<key>`` (a
    registered product's name is an identifier: kept as it is).
    """
    if section.anchor:
        given = str(section.anchor)
        return given if re.fullmatch(r"[A-Za-z][\w-]*", given) else _anchor(given)
    return f"product-{key if key.isidentifier() else _anchor(key)}"


#: the ids of the report page's own elements (``report.html``), which no product's section, table or banner takes
#: (:func:`product_sections`); ``triage-link`` is the link :func:`~monai_unc.report.triage.link_page` adds to a page
#: (the demo's ``report.html``). The triage page has its own (``monai_unc.report.triage.TRIAGE_PAGE_IDS``).
_REPORT_IDS = frozenset({"summary", "triage", "triage-table", "regions", "regions-table", "plots", "cases", "viewers",
                         "warnings", "triage-link"})
#: the beginnings of the ids of both pages' figures and viewers (``fig-<key>``, ``viewer-<n>``, ``viewer-data-<n>``)
_PAGE_ID_PREFIXES = ("fig-", "viewer-")


def _given_ids(ids: Any, name: str) -> list[str]:
    """The ids of a collection given as ``name``, as strings.

    A ``TypeError`` naming ``name`` for one string (its characters are not ids) or for what is not a collection (in
    earlier versions ``5`` gave Python's "'int' object is not iterable", and ``element_ids="pq"`` the ids ``p`` and
    ``q``).
    """
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name} must be a collection of ids, not one {type(ids).__name__}")
    try:
        items = iter(ids)
    except TypeError:
        raise TypeError(f"{name} must be a collection of ids, got {type(ids).__name__}") from None
    return [str(i) for i in items]


def _page_ids(page_ids: Iterable[str] | None) -> frozenset[str]:
    """The ids a page's products may not take: ``page_ids``, or ``report.html``'s for None."""
    return _REPORT_IDS if page_ids is None else frozenset(_given_ids(page_ids, "page_ids"))


def _page_id(element_id: str, page_ids: frozenset[str]) -> bool:
    """Whether ``element_id`` is (or may be) one of the page's own ids: ``page_ids``, or a figure's or a viewer's.

    Ids are compared exactly, as HTML compares them (``Summary`` is not ``summary``).
    """
    return element_id in page_ids or element_id.startswith(_PAGE_ID_PREFIXES)


def product_sections(summary: Mapping[str, Any]) -> list[Markup]:
    """The sections of the registered products whose blocks are in ``summary`` (:mod:`monai_unc.product`).

    They come in the summary's order; a product that shows nothing is left out. Each section has its own id, none of
    the page's own (``summary``, ``fig-...``): a section that asks for the id of another section or of the page gets
    one ending with a digest of its product's name (the id of earlier versions otherwise).

    Args:
        summary: the evaluation's summary (as read from ``summary.json``).

    Returns:
        The ``<section>`` elements.
    """
    shown: list[tuple[ReportSection, str]] = []
    for key, block in summary.items():
        cls = product_type(key)
        if cls is None or not isinstance(block, Mapping):
            continue
        section = cls.report_section(block)
        if section is not None:
            if not isinstance(section, ReportSection):
                raise TypeError(f"{cls.__name__}.report_section must return a ReportSection or None")
            shown.append((section, str(key)))
    return [product_section(section, key, section_id, element_ids=element_ids)
            for (section, key), (section_id, element_ids) in zip(shown, section_element_ids(shown))]


def section_element_ids(sections: Sequence[tuple[ReportSection, str]],
                        page_ids: Iterable[str] | None = None) -> list[tuple[str, list[str]]]:
    """The ids of the products' sections of one page, and of their tables and banners: all distinct.

    The sections' ids are :func:`section_ids`; then the ids of the keyed tables and banners of all sections
    (``<section id>-<key>``) are chosen together, so that none is another's, whatever section it is in (in earlier
    versions section ``a``'s table ``x·y`` and section ``a-x-b7``'s table ``y`` had one id), nor a section's or the
    page's own: one that would be gets ``-`` and a digest of its key; every other keeps the id of earlier versions.

    Args:
        sections: ``(section, product name)`` of each product's section, in the page's order.
        page_ids: the ids of the page's own elements (None: ``report.html``'s).

    Returns:
        ``(section id, ids of its keyed tables then of its banners)`` per section, in order.

    Raises:
        TypeError: ``page_ids`` a string (one id is ``{"summary"}``, not ``"summary"``), or not a collection.

    Example:
        >>> from monai_unc.product import ReportTable
        >>> section_element_ids([(ReportSection("A", anchor="x", tables=[ReportTable(["c"], [], key="y")]), "a"),
        ...                      (ReportSection("B", anchor="x-y"), "b")])
        [('x', ['x-y-a1fce436']), ('x-y', [])]
    """
    page = _page_ids(page_ids)
    ids = section_ids(sections, page)
    shown = [(section_id, section) for section_id, (section, _) in zip(ids, sections)]
    return list(zip(ids, _element_ids(shown, page)))


def section_ids(sections: Sequence[tuple[ReportSection, str]], page_ids: Iterable[str] | None = None) -> list[str]:
    """The ids of the products' sections of one page: distinct, and none of the page's own.

    A section keeps the id it asks for (its ``anchor``, else ``product-<name>``) unless another section, or the page
    (``summary``, ``triage``, ``plots``), has it; then it gets that id ending with ``-`` and a digest of its
    product's name (in earlier versions two products asking for one anchor shared it, and links jumped to the first).
    Ids are compared exactly, as HTML compares them (``Summary`` is not ``summary``). An anchor beginning as the
    page's figures and viewers do (``fig-``, ``viewer-``; ``fig`` and ``viewer`` too, which would give its tables
    such ids) is written ``product-<anchor>``.

    Args:
        sections: ``(section, product name)`` of each product's section, in the page's order.
        page_ids: the ids of the page's own elements (None: ``report.html``'s; the triage page gives its own).

    Returns:
        One id per section, in order.

    Raises:
        TypeError: ``page_ids`` a string (one id is ``{"summary"}``, not ``"summary"``), or not a collection.

    Example:
        >>> section_ids([(ReportSection("A", anchor="masks"), "a"), (ReportSection("B"), "b")])
        ['masks', 'product-b']
        >>> section_ids([(ReportSection("A", anchor="summary"), "a")])
        ['summary-ca978112']
    """
    page = _page_ids(page_ids)
    wanted = [(_section_id(section, str(key)), str(key)) for section, key in sections]
    # an id of the page's figures or viewers (fig-..., viewer-...) as a product's: product-fig-...
    wanted = [(f"product-{w}" if f"{w}-".startswith(_PAGE_ID_PREFIXES) else w, k) for w, k in wanted]
    return _unique_ids(wanted, reserved=lambda i: _page_id(i, page))


def case_figure_paths(folder: str | os.PathLike, case_ids: Iterable[str]) -> dict[str, Path]:
    """The figure file of each case of a page: :func:`~monai_unc.report.plots.case_figure_path`, one file per case.

    Case ids that differ in case only (``"A"``, ``"a"``) name one file on a case-insensitive file system (macOS,
    Windows), where one case's figure overwrote the other's in earlier versions: the id first in code point order
    keeps ``case_<id>.png``, the other gets ``case_<id>-<digest of the id>.png``. Every other case keeps its file.

    Args:
        folder: the page's figure folder.
        case_ids: the cases whose figures the page writes.

    Returns:
        ``{case id: figure file}``.

    Raises:
        ValueError: naming a case id that cannot name a file (empty, a path separator, NUL).

    Example:
        >>> sorted(p.name for p in case_figure_paths("figures", ["c1", "A", "a"]).values())
        ['case_A.png', 'case_a-ca978112.png', 'case_c1.png']
    """
    ids = list(dict.fromkeys(str(c) for c in case_ids))
    paths = [case_figure_path(folder, c) for c in ids]  # refuses an id that cannot name a file
    stems = _unique_ids([(p.name[:-len(".png")], c) for p, c in zip(paths, ids)], key=_file_key)
    return {c: p.with_name(f"{stem}.png") for c, p, stem in zip(ids, paths, stems)}


def render_html(
    summary: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    cohort_figures: Sequence[Figure],
    case_figures: Sequence[Figure],
    title: str = "Uncertainty QC report",
    source: str = "",
    csv_text: str | None = None,
    viewers: Sequence[Mapping[str, Any]] = (),
    scripts: Markup | None = None,
    case_notes: Sequence[str] = (),
) -> str:
    """The report page as one string (no network resource).

    Every value from the summary, the rows, the figures and the arguments is escaped (:mod:`monai_unc.report.markup`).
    ``viewers``: the interactive viewers of the flagged cases (:func:`~monai_unc.report.viewer.case_viewer`), which need
    ``scripts`` (:func:`~monai_unc.report.viewer.viewer_scripts`).

    Args:
        summary: the cohort summary (``summary.json``).
        rows: the per-case rows, in the order shown.
        cohort_figures: the cohort figures, in order.
        case_figures: the case overlays, in order.
        title: the page title.
        source: a line naming where the evaluation came from.
        csv_text: the ``metrics.csv`` text, embedded as a download link (None: no link); :func:`build_report` passes
            the table of ``rows`` (:func:`monai_unc.io.csv_text`).
        viewers: the interactive viewers of the flagged cases.
        scripts: the viewers' scripts (needed with ``viewers``).
        case_notes: one line per case whose files could not be read (missing or unreadable), shown in the cases'
            section instead of its figure.

    Returns:
        The HTML of the self-contained page.
    """
    t = summary["triage"]
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    measure = summary.get("measure") or "uncertainty"
    header = el("header", el("h1", title),
                el("p", f"{summary['n_cases']} cases · measure ", el("b", str(measure)), " · triage score ",
                   el("b", summary["score"]["column"]), f" · generated {now} by monai-unc {__version__}"),
                el("p", source, _made_with(summary)))
    note = [
        "Cases ranked from most to least uncertain. With a referral budget of ", el("b", _budget_text(summary)),
        " the ", el("b", str(t["n_referred"])), " most uncertain case(s) go to review; the mean Dice of the ",
        el("b", str(summary["n_cases"] - t["n_referred"])), " retained cases is ",
        el("b", format_value(_dice_kept(t))), f" (all cases: {format_value(t['dice_all'])}"
        + (f"; referred cases: {format_value(t['dice_referred'])}" if t.get("dice_referred") is not None else "")
        + "). ",
    ]
    tied = t.get("tied") or []
    if tied:
        n_flagged = len(set(tied) & set(t["referred"]))
        note += ["Cases ", isolated_list(tied), " have the same score at the budget's cut: the budget flags "
                 f"{n_flagged} of the {len(tied)} by case id (marked 'tied at the cut'); over a random order of the "
                 "tied cases the ",
                 el("b", "expected"), " mean Dice of the retained cases is ", el("b", format_value(t["dice_retained"])),
                 " (the referral curve at the budget). "]
    failure = failure_dice_text(summary["failures"]["dice_threshold"])
    note.append(f"Dice below {failure} is marked as failed. " + BUDGET_NOTE)
    rc = summary.get("risk_control")
    if rc:
        note += [" ", _risk_control_note(rc, summary["n_cases"], threshold_text(summary, rows))]
    if summary["score"].get("undefined"):
        note += [" Cases without a defined score are ranked first: ", isolated_list(summary["score"]["undefined"]), "."]
    if csv_text is not None:
        b64 = base64.b64encode(csv_text.encode()).decode("ascii")
        note += [" ", el("a", "Download metrics.csv", download="metrics.csv", href=f"data:text/csv;base64,{b64}"), "."]
    sections = [
        el("section", el("h2", "Summary"), _cards(summary), id="summary"),
        el("section", el("h2", "Triage"), el("p", *note, class_="note"), _triage_table(rows, summary), id="triage"),
        _regions_section(summary) if summary.get("regions") else None,
        *product_sections(summary),
        el("section", el("h2", "Cohort plots"), el("div", *map(img_tag, cohort_figures), class_="plots"), id="plots"),
    ]
    cases = case_figures_section("Cases: slices of highest uncertainty", case_figures, case_notes,
                                 summary["triage"]["order"])
    if cases is not None:
        sections.append(cases)
    # found by hostile testing: headed "Flagged cases" over the most uncertain cases, the budget keeps some of them
    view = viewer_section(viewers, "Most uncertain cases: interactive viewer") if scripts is not None else None
    if view is not None:
        sections.append(view)
    warns = summary.get("warnings") or []
    if warns:
        sections.append(warning_list(warns, more="(see summary.json)", case_ids=summary["triage"]["order"]))
    return document(title, PAGE_CSS + (VIEWER_CSS if view is not None else ""), header, el("main", *sections),
                    scripts if view is not None else None, script=_SCRIPT)


def region_display(
    seg: np.ndarray, label: np.ndarray | None, uncertainty: np.ndarray, regions: Mapping[str, Sequence[int]],
    spatial_dims: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, list[str]]:
    """Label maps for drawing a region-based case with :func:`~monai_unc.report.plots.plot_case_overlay`.

    Overlapping regions become one label map: regions sorted by their number of labels, most first (stable), and a
    voxel gets the index (1-based) of the last region in that order that contains it, so nested regions (BraTS WT >
    TC > ET) are drawn from the outside in. ``seg`` and ``label`` are ``(R, *spatial)`` region masks or label maps
    (converted with ``regions``); ``label`` may be None (no reference: the triage of new cases); the uncertainty drawn
    is the largest over the regions.

    Args:
        seg: region masks ``(R, *spatial)`` or a label map ``(*spatial)``.
        label: the reference, a label map ``(*spatial)`` or region masks ``(R, *spatial)``, or None.
        uncertainty: the uncertainty ``(R, *spatial)`` per region, or ``(*spatial)``.
        regions: the region spec ``{name: [label, ...]}`` in channel order.
        spatial_dims: the number of spatial axes (2 or 3; the case's, ``len(case.spacing)``). None: taken from
            ``label`` (a label map), else from the maps; give it whenever ``label`` may be region masks (read as a
            label map, masks of a 4-D reference file drew other regions than the case's: found by hostile review).

    Returns:
        ``(seg map, label map or None, uncertainty, class names)``: int label maps ``(*spatial)``, the uncertainty
        ``(*spatial)`` and the names with ``"background"`` first.

    Example:
        >>> seg = np.array([[1, 1, 0], [0, 1, 0]], dtype=bool)  # WT, TC masks of three voxels
        >>> s, lab, u, names = region_display(seg, None, np.zeros((2, 3)), {"WT": [1, 2], "TC": [2]})
        >>> s.tolist(), lab, u.shape, names
        ([1, 2, 0], None, (3,), ['background', 'WT', 'TC'])
    """
    names = list(regions)
    order = sorted(range(len(names)), key=lambda r: -len(regions[names[r]]))
    # spatial ndim: the label's, else the region maps' (R, *spatial)
    if spatial_dims is not None:
        ndim = int(spatial_dims)
    else:
        ndim = label.ndim if label is not None else (uncertainty.ndim - 1 if uncertainty.ndim == seg.ndim else seg.ndim)

    def as_masks(x: np.ndarray) -> np.ndarray:  # (R, *spatial) bool: a label map through the spec, masks as they are
        return np.asarray(label_to_regions(x, regions)) if x.ndim == ndim else np.asarray(x).astype(bool)

    pred = as_masks(seg)
    out: list[np.ndarray | None] = []
    for masks in (pred, None if label is None else as_masks(label)):
        if masks is None:
            out.append(None)
            continue
        disp = np.zeros(masks.shape[1:], dtype=np.int64)
        for rank, r in enumerate(order, 1):
            disp[masks[r]] = rank
        out.append(disp)
    u = uncertainty.max(axis=0) if uncertainty.ndim == ndim + 1 else uncertainty
    assert out[0] is not None
    return out[0], out[1], u, ["background"] + [names[r] for r in order]


def load_figure_case(files: CaseFiles, measure: str, num_classes: int | None, load_image: bool,
                     multilabel: bool, notes: list[str] | None = None, *,
                     seg_regions: Mapping[str, Sequence[int]] | None = None,
                     seg_label_values: Sequence[int] | None = None,
                     ignore_label: int | None = None) -> LoadedCase | None:
    """:func:`~monai_unc.io.load_case` of what a case figure draws: segmentation, label, ``measure``'s map, image.

    The probabilities (the largest file) and the other maps are not read again, unless the segmentation is to come
    from the probabilities (no segmentation file) or the class count from them (``num_classes`` None). ``files`` is
    changed in place to the files read. With ``notes``, a case whose files cannot be read (missing, unreadable) gives
    None and one line in ``notes`` (:func:`case_figures_section` shows them), so that the page is still written.
    Labels of a DICOM SEG are read as the evaluation read them: its segments as the regions of ``seg_regions``
    (``evaluate --seg-regions``), or given the label values ``seg_label_values`` (``--seg-label-values``). The
    reference voxels of ``ignore_label`` (``evaluate --ignore-label``) are read as background.
    """
    files.maps = {measure: files.maps[measure]}
    if files.seg is not None and num_classes is not None:
        files.probs = None
    try:
        case = load_case(files, num_classes, load_image=load_image, multilabel=multilabel,
                         seg_regions=seg_regions if multilabel else None, ignore_label=ignore_label)
        if seg_label_values is not None and is_seg_label(files.label):
            case.label = segment_label_values(case.label, seg_label_values, files.case_id)
        return case
    except (OSError, ValueError) as e:  # one line on the page for this case, not a page that fails whole
        if notes is None:
            raise
        notes.append(f"{files.case_id}: no figure and no viewer: {e}")
        return None


def case_figures_section(title: str, figures: Sequence[Figure], notes: Sequence[str],
                         case_ids: Iterable[str] = ()) -> Markup | None:
    """The section of a page's case figures, with a line per case whose files could not be read; None for neither.

    Args:
        title: the section's heading.
        figures: the case figures.
        notes: the lines of the cases without a figure (:func:`load_figure_case`).
        case_ids: the page's case ids, shown isolated at the start of a note (:func:`~.markup.case_line`).

    Returns:
        The ``<section id="cases">`` element, or None.
    """
    if not figures and not notes:
        return None
    ids = list(case_ids)
    unread = el("ul", *(el("li", case_line(n, ids)) for n in notes), class_="warn case-errors") if notes else None
    return el("section", el("h2", title), unread, *map(img_tag, figures), id="cases", class_="cases")


def case_overlays(folders: Mapping[str, Path | None], case_id: str) -> tuple[list[Overlay], list[str]]:
    """The contours of a case's files that products wrote, for its figure; read, never computed.

    Args:
        folders: ``{product name: folder}`` (an evaluation's ``products/<name>/``, or the output folder of the
            product's command); a None folder or an unregistered name is skipped.
        case_id: the case.

    Returns:
        ``(overlays, notes)``: the :class:`~monai_unc.product.Overlay` list of every product
        (:meth:`~monai_unc.product.CohortProduct.case_overlays`) and the caption sentences of those that drew one.

    Example:
        >>> case_overlays({}, "a")
        ([], [])
    """
    overlays: list[Overlay] = []
    notes: list[str] = []
    for name, folder in folders.items():
        cls = product_type(name)
        if cls is None or folder is None or not Path(folder).is_dir():
            continue
        drawn = list(cls.case_overlays(Path(folder), case_id))
        if drawn:
            overlays += drawn
            if cls.overlay_note:
                notes.append(str(cls.overlay_note))
    return overlays, notes


def _case_figures(
    state: CohortState, summary: Mapping[str, Any], n_cases: int, images: str | os.PathLike | None, fig_dir: Path,
    folders: Mapping[str, Path | None] | None = None,
    viewers: list[dict[str, Any]] | None = None,
    evaluation: Path | None = None,
    unread: list[str] | None = None,
    convention: str = "neurological",
) -> list[Figure]:
    unread = [] if unread is None else unread  # the lines of cases whose files cannot be read
    # DICOM SEG labels read as the evaluation read them (found by review: figures of --seg-label-values cases drew
    # the segment numbers as labels, and a SEG of --seg-regions failed as overlapping segments)
    config = summary.get("config") if isinstance(summary.get("config"), Mapping) else {}
    seg_regions = state.regions if config.get("seg_regions") is True and state.regions else None
    values = config.get("seg_label_values")
    seg_label_values = [int(v) for v in values] if isinstance(values, list) and values and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values) else None
    # the ignore label the evaluation left out (evaluate --ignore-label): its voxels are drawn as background
    ignore = config.get("ignore_label")
    ignore_label = ignore if isinstance(ignore, int) and not isinstance(ignore, bool) and ignore >= 1 else None
    order = summary["triage"]["order"]
    chosen = list(order[:n_cases])
    if len(order) > n_cases and n_cases > 0:
        chosen.append(order[-1])  # the most certain case, for contrast
    image_files: dict[str, Path] = {}
    if images is not None:
        # channel 0's series of a case predicted from one series per channel (its record, or nnU-Net's dataset.json
        # beside the predictions), as evaluate gives it
        pred_dirs = {Path(f[k]).parent for f in (state.files[c] for c in chosen if c in state.files)
                     for k in ("seg", "probs") if f.get(k)}
        for pred_dir in sorted(pred_dirs):
            layout = "nnunet" if (pred_dir / "dataset.json").is_file() else "monai-unc"
            for cid, path in case_image_files(images, pred_dir, chosen, layout).items():
                image_files.setdefault(cid, path)
    by_id = {str(r["case"]): r for r in state.rows}
    score_key = summary["score"]["column"]
    score = score_formatter(summary, state.rows)
    drawn: list[tuple[str, str, str, bytes]] = []  # (case, title, caption, PNG) of each figure drawn
    for rank, cid in enumerate(chosen):
        if cid not in state.files:
            continue
        files = CaseFiles.from_json(state.files[cid])
        lost = [p for p in (files.label, files.seg, files.probs,
                            *(x for f in files.maps.values() for x in (f if isinstance(f, tuple) else (f,))))
                if p is not None and not p.is_absolute() and not p.exists()]
        if lost:  # an evaluation of an earlier version: its paths are relative to the folder evaluate ran in
            raise FileNotFoundError(f"file not found: {lost[0]} (the evaluation, written by an earlier monai-unc, "
                                    "records its case files relative to the folder evaluate ran in: run report from "
                                    "there, or evaluate again)")
        derived = not files.maps and cid in state.derived_maps
        if derived:  # the maps evaluate derived from the probabilities
            # in this evaluation folder's maps/ (the folder may have been copied or moved since)
            files.maps = {m: Path(p) if evaluation is None else evaluation / DERIVED_MAPS_DIR / Path(p).name
                          for m, p in state.derived_maps[cid].items()}
        if cid in image_files:
            files.image = image_files[cid]
        # the prediction's map files, or those evaluate derived from the probabilities (maps/)
        measure = by_id[cid].get("measure") or next(iter(files.maps), None)
        if measure is None or measure not in files.maps:  # an evaluation of an older version, which kept no derived map
            continue
        if derived:
            _check_derived_map(state, cid, measure, Path(files.maps[measure]))
        case = load_figure_case(files, measure, state.num_classes, True, state.regions is not None, unread,
                                seg_regions=seg_regions, seg_label_values=seg_label_values, ignore_label=ignore_label)
        if case is None:  # its files cannot be read: a line in unread
            continue
        seg, label, u, class_names = case.seg, case.label, case.maps[measure], summary.get("class_names")
        if state.regions is not None:
            seg, label, u, class_names = region_display(case.seg, case.label, u, state.regions, len(case.spacing))
        r = by_id[cid]
        info = {"Dice": format_value(dice_as_recorded(float(r["dice"])),
                                     threshold=summary["failures"]["dice_threshold"]),
                score_key: score(r.get(score_key))}
        if "shift" in r:
            info["shift"] = r["shift"] or "none"
        if viewers is not None and rank < n_cases:  # the flagged (most uncertain) cases, not the contrast case
            viewers.append(case_viewer(cid, seg, u, case.image, case.affine, case.spacing, measure,
                                       class_names=class_names, image_unit=case.image_unit, convention=convention))
        overlays, notes = case_overlays(folders or {}, cid)
        fig = plot_case_overlay(cid, seg, label, u, case.image, case.spacing, measure, info=info,
                                class_names=class_names, overlays=overlays, affine=case.affine, convention=convention)
        pos = order.index(cid) + 1
        what = "most certain case (for contrast)" if rank == len(chosen) - 1 and rank >= n_cases else "triage rank"
        drawn.append((
            cid, f"{cid}: {what} {pos} of {len(order)}",
            "Rows: the axial, coronal and sagittal slices with the largest summed uncertainty, drawn with "
            f"{CONVENTIONS[convention]} (the sides marked on the image), as in the viewer. Columns: image; "
            "prediction contour per class; uncertainty heatmap; error map (red: false foreground, blue: missed "
            "foreground, purple: wrong class)." + "".join(f" {n}" for n in notes), save_png(fig),
        ))  # fmt: skip
    return write_case_figures(fig_dir, drawn)


def _check_derived_map(state: CohortState, case_id: str, measure: str, path: Path) -> None:
    """Refuse a map evaluate derived for a case that is another file now than the one it wrote.

    ``evaluate`` writes the maps it derives from the probabilities of a case without map files to ``<output>/maps`` and
    records the sha256 of each file in its state (:attr:`~monai_unc.evaluation.cohort.CohortState.derived_maps_sha256`,
    ``state/rows.json``). A rerun into the folder (on other predictions, or on predictions written again) replaces a
    map of the same name before it replaces the summary: killed in between, the folder held the earlier summary with
    the later run's map, and the page drew that map beside the earlier segmentation, Dice and score, without a word.
    As for an evaluation rewritten while the page is made, no page is made of it. A missing map is left to the
    figure's reading (one line on the page); a state written before the digests were recorded is not checked.

    Args:
        state: the evaluation's state.
        case_id: the case.
        measure: the measure whose map is drawn.
        path: the map file read.

    Raises:
        ValueError: naming the file, when its sha256 is not the one recorded for it.
    """
    recorded = state.derived_maps_sha256.get(case_id, {}).get(measure)
    if recorded is None or not path.is_file():
        return
    if file_sha256(path) != recorded:
        raise ValueError(f"{path} is not the map evaluate derived for case {case_id!r} of this evaluation (its sha256 "
                         f"differs from the one recorded in {path.parent.parent / 'state' / 'rows.json'}): another "
                         "run wrote it (a rerun into the folder, stopped before its summary) or it was edited; run "
                         "monai-unc evaluate again before the report")


def write_case_figures(fig_dir: Path, drawn: Sequence[tuple[str, str, str, bytes]]) -> list[Figure]:
    """Write the case figures a page drew, one file per case (:func:`case_figure_paths`), and give their figures.

    The files are named once every figure is drawn, after the cases that have one only: a case without a figure (its
    files cannot be read, it has no map) takes no name (in earlier versions it made case ``a`` write
    ``case_a-<digest>.png`` when case ``A`` had no figure).

    Args:
        fig_dir: the page's figure folder.
        drawn: ``(case id, title, caption, PNG bytes)`` of each figure, in the page's order.

    Returns:
        The figures (key ``case-<id>``), in order.

    Raises:
        ValueError: naming a case id that cannot name a file (empty, a path separator, NUL).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     figures = write_case_figures(Path(d), [("A", "A", "", b"png"), ("a", "a", "", b"png")])
        ...     [f.path.name for f in figures], sorted(p.name for p in Path(d).iterdir())
        (['case_A.png', 'case_a-ca978112.png'], ['case_A.png', 'case_a-ca978112.png'])
    """
    paths = case_figure_paths(fig_dir, [cid for cid, *_ in drawn])  # one file per case
    out = []
    for cid, title, caption, png in drawn:
        atomic_write_bytes(paths[cid], png)
        out.append(Figure(f"case-{cid}", title, caption, png, paths[cid], cid))
    return out


def _made_with(summary: Mapping[str, Any]) -> str:
    """What the evaluation recorded of its making (``summary.json``: versions and the folders evaluated), as text.

    Empty for a summary of an older version, which recorded neither; a field of the wrong type is left out (the page
    escapes whatever the text holds).
    """
    parts = []
    version = summary.get("monai_unc_version")
    if isinstance(version, str):
        libs = summary.get("library_versions")
        libs = libs if isinstance(libs, Mapping) else {}
        extra = ", ".join(f"{k} {v}" for k, v in sorted(libs.items()) if isinstance(v, str))
        parts.append(f"evaluated by monai-unc {version}" + (f" ({extra})" if extra else ""))
    inputs = summary.get("inputs")
    if isinstance(inputs, Mapping):
        parts += [f"{k}: {inputs[k]}" for k in ("predictions", "labels") if isinstance(inputs.get(k), str)]
    return "" if not parts else " · " + " · ".join(parts)


def build_report(
    evaluation: str | os.PathLike,
    output: str | os.PathLike | None = None,
    budget: float | None = None,
    images: str | os.PathLike | None = None,
    n_cases: int = 4,
    title: str = "Uncertainty QC report",
    viewer: bool = True,
    *,
    summary: Mapping[str, Any] | None = None,
    convention: str = "neurological",
    **risk_options: Any,
) -> Path:
    """Write ``report.html`` and ``figures/*.png`` for an evaluation folder.

    The page renders what ``evaluate`` wrote: the cohort numbers of ``summary.json`` (or of ``summary``), the rows
    of the saved state, curves drawn from the saved histograms; it computes no metric itself.

    Args:
        evaluation: the ``--output`` folder of ``monai-unc evaluate``.
        output: report folder (default ``<evaluation>/report``).
        budget: deprecated: another referral fraction (pass ``summary=monai_unc.evaluation.resummarize(...)``;
            ``monai-unc report --budget`` does).
        images: folder of the input images for the overlays (default: the one given to ``evaluate``, if any;
            without images the label map is the background of the overlays).
        n_cases: overlays for this many of the most uncertain cases (plus the most certain one).
        title: the page title.
        viewer: embed the interactive 3D viewer (:mod:`monai_unc.report.viewer`) for the ``n_cases`` most
            uncertain cases, with its scripts in ``<output>/assets`` (the PNG slices stay).
        summary: the cohort summary to show (default: the evaluation's ``summary.json``), e.g. the evaluation
            summarised again with another budget (:func:`monai_unc.evaluation.resummarize`).
        convention: how the case figures and the viewers draw the patient's sides
            (:data:`~monai_unc.report.viewer.CONVENTIONS`): ``"neurological"`` (default) the patient's left on the
            screen's left, ``"radiological"`` the patient's right (``monai-unc report --convention radiological``).
        risk_options: deprecated, with ``budget``: other risk-controlled threshold options (``target_risk``,
            ``delta``, ``risk``, ``risk_method``, ``calibration_cases``).

    Returns:
        The path of ``report.html``. ``figures/`` holds the page's figures: the PNGs an earlier report wrote there
        (listed in its ``.report_figures.json``) are removed; other files there, a user's own, are left alone.

    Raises:
        FileNotFoundError: ``images`` is given but is no folder (before anything is written).
        TypeError: ``convention`` is not a str.
        ValueError: ``n_cases`` is not a non-negative integer, ``convention`` is neither convention,
            ``<output>/figures`` is a symbolic link (:func:`monai_unc.io.owned_folder`), another run holds the report
            folder (another report: one at a time per folder, :func:`monai_unc.io.output_lock`), or another process's
            ``evaluate`` rewrote (or holds) the evaluation while the page was made (no page is kept), or a map that
            ``evaluate`` derived is another file than the one it wrote (the sha256 its state records; naming the file).
    """
    evaluation = Path(evaluation)
    # the page's options are checked before the evaluation is read (read in the report folder's lock)
    return _held_page(evaluation, output, images, n_cases, convention,
                      lambda out_dir, n, conv: _write_report(read_evaluation(evaluation), out_dir, budget, images, n,
                                                             title, viewer, summary, risk_options, conv))


def _held_page(evaluation: Path, output: str | os.PathLike | None, images: str | os.PathLike | None, n_cases: int,
               convention: str, write: Callable[[Path, int, str], Path]) -> Path:
    """The checks of a page's options, then ``write(out_dir, n_cases, convention)`` with the report folder held.

    One implementation for :func:`build_report` (which reads the evaluation inside ``write``) and
    :func:`write_report` (on an evaluation already read).
    """
    # found by hostile testing: n_cases=-1 drew every case but the least uncertain, True one case, unsaid
    n_cases = check_integer(n_cases, "n_cases", 0)
    convention = check_convention(convention)
    out_dir = Path(output) if output is not None else evaluation / "report"
    if images is not None:
        # found by hostile testing: a missing --images failed on the first overlay, with "folder not found: ..."
        # naming no option, after the report folder and its figures/ were made
        input_folder(images, "images", "--images folder")
    # found by hostile testing: two reports at once into one folder (other --budget / --cases) left figures/ with a
    # PNG of the other run's page and a record listing a figure that was not there
    # a warning of the evaluation's summary once, though the page reads it twice
    with each_warning_once(), output_lock(out_dir, "monai-unc report"):
        return write(out_dir, n_cases, convention)


@dataclass(frozen=True)
class ReadEvaluation:
    """An evaluation folder as read once for a page (:func:`read_evaluation`).

    Attributes:
        folder: the evaluation folder.
        state: its saved cohort state.
        summary: its ``summary.json``, as :func:`~monai_unc.evaluation.load_evaluation` returns it.
        digest: the SHA-256 of its ``summary.json``, taken before it was read (None when it could not be read): the
            page's record names it (:data:`REPORT_SOURCE_RECORD`).

    Example:
        >>> from monai_unc.report.html import ReadEvaluation
        >>> list(ReadEvaluation.__dataclass_fields__)
        ['folder', 'state', 'summary', 'digest']
    """

    folder: Path
    state: CohortState
    summary: dict[str, Any]
    digest: str | None


def read_evaluation(evaluation: str | os.PathLike) -> ReadEvaluation:
    """Read an evaluation folder once for a page: the digest of its ``summary.json``, then its state and summary.

    Args:
        evaluation: the ``--output`` folder of ``monai-unc evaluate``.

    Returns:
        The :class:`ReadEvaluation`, for :func:`write_report`.

    Raises:
        FileNotFoundError, ValueError: those of :func:`monai_unc.evaluation.load_evaluation`.

    Example:
        >>> from monai_unc.report.html import read_evaluation
        >>> read_evaluation("nowhere")
        Traceback (most recent call last):
        ...
        FileNotFoundError: no summary.json in nowhere: run monai-unc evaluate --output nowhere first
    """
    folder = Path(evaluation)
    digest = _summary_digest(folder)  # before reading: the record names the summary the page shows
    state, saved = load_evaluation(folder)
    return ReadEvaluation(folder, state, saved, digest)


def write_report(
    evaluation: ReadEvaluation,
    output: str | os.PathLike | None = None,
    *,
    images: str | os.PathLike | None = None,
    n_cases: int = 4,
    title: str = "Uncertainty QC report",
    viewer: bool = True,
    summary: Mapping[str, Any] | None = None,
    convention: str = "neurological",
) -> Path:
    """:func:`build_report` on an evaluation already read (:func:`read_evaluation`): the page shows that reading.

    ``monai-unc report`` reads the evaluation once, for its checks, the summary it computes again and the page.

    Args:
        evaluation: the evaluation as read.
        output: report folder (default ``<evaluation>/report``).
        images: folder of the input images for the overlays.
        n_cases: overlays for this many of the most uncertain cases (plus the most certain one).
        title: the page title.
        viewer: embed the interactive 3D viewer.
        summary: the cohort summary to show (default: the one read).
        convention: how the case figures and the viewers draw the patient's sides.

    Returns:
        The path of ``report.html``.

    Raises:
        TypeError: ``evaluation`` is not a :class:`ReadEvaluation`; ``convention`` is not a str.
        ValueError, FileNotFoundError: those of :func:`build_report`.

    Example:
        >>> from monai_unc.report.html import write_report
        >>> write_report("eval")
        Traceback (most recent call last):
        ...
        TypeError: evaluation must be a ReadEvaluation (read_evaluation(folder)), got str
    """
    if not isinstance(evaluation, ReadEvaluation):
        raise TypeError(f"evaluation must be a ReadEvaluation (read_evaluation(folder)), got "
                        f"{type(evaluation).__name__}")
    read = evaluation
    return _held_page(read.folder, output, images, n_cases, convention,
                      lambda out_dir, n, conv: _write_report(read, out_dir, None, images, n, title, viewer, summary, {},
                                                             conv))


def _write_report(read: ReadEvaluation, out_dir: Path, budget: float | None, images: str | os.PathLike | None,
                  n_cases: int, title: str, viewer: bool, summary: Mapping[str, Any] | None,
                  risk_options: dict[str, Any], convention: str = "neurological") -> Path:
    """:func:`build_report`'s work, its report folder held, on the evaluation as read (:func:`read_evaluation`).

    The evaluation is read once; an ``evaluate`` of another process that rewrites it meanwhile (its folder is held by
    that run, not by the report) is found when the page is written: the page and its record are removed again and
    the report refused in one line (in earlier versions, with two runs at once, the record named
    the digest of the new ``summary.json``, read at the end, so the page of the earlier evaluation was kept for good).
    """
    evaluation, state, saved, digest = read.folder, read.state, read.summary, read.digest
    if summary is None and (budget is not None or any(v is not None for v in risk_options.values())):
        warnings.warn("build_report(budget=..., target_risk=..., ...) is deprecated: the report renders a summary, it "
                      "computes none; pass summary=monai_unc.evaluation.resummarize(...) (monai-unc report --budget "
                      "does this)", DeprecationWarning, stacklevel=user_stacklevel())
        from ..evaluation import resummarize  # deprecated path: the report module itself computes no metric

        summary = resummarize(state, saved, budget, **risk_options)
    summary = dict(saved if summary is None else summary)
    config = config_from_summary(saved, state.rows, summary["triage"]["budget"])
    fig_dir, earlier = figures_folder(out_dir)
    rows = state.sorted_rows()
    score_key = summary["score"]["column"]
    raw = np.array([float(r[score_key]) if r.get(score_key) not in (None, "") else np.nan for r in rows])
    filled = fill_undefined_scores(raw)  # for the ranking only: an undefined score is drawn nowhere
    defined = np.isfinite(raw)
    dice = np.array([float(r["dice"]) for r in rows])
    label = score_key.replace("_", " ")
    n_undefined = int((~defined).sum())
    left_out = (f" {n_undefined} case(s) without a defined score (e.g. an empty predicted foreground) are left out "
                "of this plot; the ranking refers them first." if n_undefined else "")

    figures: list[Figure] = []

    def add(key: str, title: str, caption: str, fig: Any) -> None:
        path = fig_dir / f"{key}.png"
        figures.append(Figure(key, title, caption, save_png(fig, path), path))

    qb = summary.get("qu_brats")
    if qb:
        curves = qb["curves"]
        add("qu_brats", "QU-BraTS curves (mean over cases)",
            f"Filtered Dice, filtered true positives (FTP) and filtered true negatives (FTN) when the voxels whose "
            f"{qb['measure']} (scaled to [0, 100]) exceeds the threshold are filtered out, mean over the cases, one "
            f"line per region (Mehta et al., MELBA 2022). QU-BraTS score (mean over regions and cases) "
            f"{format_value(qb['score'])}; brain mask: {', '.join(qb['brain_mask'])}.",
            plot_qu_brats_curves(curves["thresholds"], curves["mean_over_cases"]))
    # one figure file and id per region, whatever the names (in earlier versions "a b" and "a_b" shared both)
    region_keys = _unique_anchors(state.region_histograms)
    for name, hist in state.region_histograms.items():
        cal = summary["regions"]["per_region"][name]["calibration"]
        add(f"reliability-{region_keys[str(name)]}", f"Reliability diagram, region {name} (pooled)",
            f"The region's probability of every voxel against the frequency of the region, from its merged binary "
            f"histograms; boxes: per-case spread. Pooled all-label ECE {format_value(cal['all_label_ece'], 4)} (the "
            f"diagram's), top-label ECE {format_value(cal['ece'], 4)} (the region table's).",
            plot_reliability_diagram(hist, kind="all_label", n_bins=config.n_bins,
                                     min_bin_count=config.min_bin_count, per_case_boxes=True))
    rel = reliability_figure(state, config.n_bins, config.min_bin_count)
    if rel is not None:
        cal = summary["calibration"]
        add("reliability", "Reliability diagram (all labels, pooled)",
            "Every class probability of every voxel against the frequency of that class, from the merged confidence "
            "histograms of all cases; the boxes show the spread of the per-case frequencies in each bin. Pooled "
            f"all-label ECE {format_value(cal['all_label_ece'], 4)}, top-label ECE {format_value(cal['ece'], 4)}.", rel)
    t = summary["triage"]
    tie = ""
    if t.get("tied"):
        tie = (f" At the budget the curve counts the cases tied at the cut by their expected share (expected mean Dice "
               f"{format_value(t['dice_retained'])}); the cases the table marks kept have mean Dice "
               f"{format_value(_dice_kept(t))}.")
    add("referral", "Referral curve",
        f"Mean Dice of the cases kept after referring the most uncertain ones (by {label}), against the oracle that "
        f"refers the worst cases first and random referral. Normalised area "
        f"{format_value(summary['referral']['area_normalized'])}.{tie}",
        plot_referral_curve(filled, dice, config.budget, label, risk_control=summary.get("risk_control")))
    add("histograms", "Uncertainty of good and failed cases",
        f"Histogram of {label} for cases with Dice >= {failure_dice_text(config.failure_dice)} (good) and below "
        f"(failed); failed cases on the left are silent failures.{left_out}",
        plot_uncertainty_histograms(raw[defined], dice[defined], config.failure_dice, label))
    if config.shifts is not None:
        ood = summary.get("ood", {})
        shifts = [r.get("shift", "") for r in rows]
        add("shifts", "Uncertainty by shift",
            f"Case scores per shift label (grey: in-distribution, orange: shifted; the colour says nothing of the "
            f"case's Dice; bar: the group's median); OoD AUROC (shifted vs in-distribution) "
            f"{format_value(ood.get('auroc'), threshold=1.0)}."
            f"{left_out}",
            plot_scores_by_shift(raw[defined], [s for s, d in zip(shifts, defined) if d], IID_SHIFTS, label))
    folders = {name: evaluation / PRODUCTS_DIR / name for name in summary if product_type(name) is not None
               and isinstance(summary[name], Mapping)}  # the case files the products wrote
    viewers: list[dict[str, Any]] | None = [] if viewer else None
    case_notes: list[str] = []
    case_figs = _case_figures(state, summary, n_cases, images, fig_dir, folders, viewers, evaluation, case_notes,
                              convention)
    keep_page_figures(fig_dir, earlier, (*figures, *case_figs))
    # the download is the table of the rows shown, written as evaluate writes metrics.csv (never the file, which a
    # reader may have edited since)
    page = render_html(summary, rows, figures, case_figs, title=title,
                       source=f"evaluation: {evaluation.resolve()}", csv_text=csv_text(rows), viewers=viewers or (),
                       scripts=viewer_scripts(out_dir) if viewers else None, case_notes=case_notes)
    written = atomic_write_text(out_dir / "report.html", page)
    # after the page: a page without its record is kept by remove_stale_report, a record never vouches for an older page
    atomic_write_json(out_dir / REPORT_SOURCE_RECORD, {"evaluation": str(evaluation.resolve()),
                                                       "summary_sha256": digest})
    holder = output_lock_holder(evaluation)
    if holder is not None or _summary_digest(evaluation) != digest:  # another evaluate rewrote it meanwhile
        _remove_page(out_dir)
        by = f" (another run holds it: {holder})" if holder is not None else " (rewritten by another run)"
        raise ValueError(f"the evaluation in {evaluation} changed (or is being rewritten) while the report was "
                         f"made{by}: no page was kept; make the report again once that run has ended")
    return written


#: the file beside ``report.html`` that records the evaluation (its folder and the digest of its ``summary.json``) the
#: page was made from (:func:`remove_stale_report`)
REPORT_SOURCE_RECORD = ".report_source.json"


def _summary_digest(evaluation: Path) -> str | None:
    """The SHA-256 of the evaluation's ``summary.json`` (None when it cannot be read: a failed or removed run)."""
    try:
        return hashlib.sha256((evaluation / "summary.json").read_bytes()).hexdigest()
    except OSError:
        return None


def remove_stale_report(evaluation: str | os.PathLike, output: str | os.PathLike | None = None) -> Path | None:
    """Remove the report page of an evaluation folder when the evaluation has changed since the page was made.

    Found by hostile testing: ``monai-unc evaluate`` run again into a folder with another ``--budget`` left
    ``<evaluation>/report/report.html`` saying "budget 20%" beside a ``summary.json`` of 50 %: a page of numbers the
    evaluation no longer holds. ``evaluate`` calls this after every run. The page's record
    (:data:`REPORT_SOURCE_RECORD`, written by :func:`build_report`) names the evaluation folder and the digest of the
    ``summary.json`` it rendered; a page recorded for this folder whose ``summary.json`` now differs or is gone (a run
    that failed) is removed with the figures it recorded. A page without a record (a user's own file, a page of an
    earlier release) or one made from another evaluation folder is left alone. A report that another process is
    writing into the folder is waited for up to ten seconds; one that takes longer is left to its own check (it keeps
    no page of an evaluation that changed while it was made), with a warning.

    Args:
        evaluation: the evaluation folder.
        output: the report folder (default ``<evaluation>/report``).

    Returns:
        The path of the removed page, or None when nothing was removed.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     remove_stale_report(folder) is None  # no page there
        True
    """
    evaluation = Path(evaluation)
    out_dir = Path(output) if output is not None else evaluation / "report"
    record = out_dir / REPORT_SOURCE_RECORD
    try:  # a file a user may edit: only the two recorded strings are read, never a path to remove
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("evaluation") != str(evaluation.resolve()):
        return None
    page = out_dir / "report.html"
    if data.get("summary_sha256") == _summary_digest(evaluation) or record.is_symlink():
        return None
    with contextlib.ExitStack() as held:
        try:  # not while a report is being written there: a short wait for one that is ending
            held.enter_context(output_lock(out_dir, "monai-unc evaluate", wait=_REPORT_WAIT_S))
        except ValueError:
            holder = output_lock_holder(out_dir)
            if holder is None:  # a planted lock file, not another run
                raise
            # found by the hostile review of two runs at once (review 64): evaluate exited 2 here after it had
            # written all its outputs; that report finds the evaluation changed when it ends and keeps no page
            warnings.warn(f"{out_dir} is being written by another run ({holder}): that report checks the evaluation "
                          "when it ends and keeps no page of an earlier one", UserWarning, stacklevel=2)
            return None
        removed = page if page.is_file() and not page.is_symlink() else None
        _remove_page(out_dir)
    return removed


#: seconds :func:`remove_stale_report` waits for another process's report into the folder to end
_REPORT_WAIT_S = 10.0


def _remove_page(out_dir: Path) -> None:
    """Remove ``report.html``, the figures its record lists and its source record (the folder held)."""
    page = out_dir / "report.html"
    if page.is_file() and not page.is_symlink():
        page.unlink()
    fig_dir = out_dir / "figures"
    if fig_dir.is_dir() and not fig_dir.is_symlink():
        for name in sorted(_recorded_figures(fig_dir)):
            (fig_dir / name).unlink(missing_ok=True)
        (fig_dir / _FIGURES_RECORD).unlink(missing_ok=True)
    (out_dir / REPORT_SOURCE_RECORD).unlink(missing_ok=True)


#: the file in ``<report>/figures`` that lists the PNGs the page wrote there (removed by the next page)
_FIGURES_RECORD = ".report_figures.json"


def figures_folder(out_dir: str | os.PathLike) -> tuple[Path, set[str]]:
    """A page's ``figures`` folder and the PNGs an earlier page recorded writing there, before this page writes any.

    Found by hostile testing: a page written again with other case figures (``--cases``, ``--budget``, another
    evaluation; ``build_triage_page`` with another ``n_cases``) left the earlier page's ``case_<id>.png`` beside its
    own figures; :func:`keep_page_figures` removes those the earlier page recorded (never a user's own files there).

    Args:
        out_dir: the page's folder.

    Returns:
        ``(figures folder, recorded names)``; the folder is not a symbolic link (its figures are removed). Its record
        now says that a page is being written (and which files were there besides the recorded figures), until
        :func:`keep_page_figures` writes the page's.
    """
    fig_dir = owned_folder(out_dir, "figures")
    earlier = _recorded_figures(fig_dir)
    # found by hostile testing of crash consistency: a page killed after writing its figures and before recording
    # them (SIGKILL, the OOM killer) left them unlisted, and no later page removed them (``report --cases 8`` killed,
    # then ``--cases 2``: six overlays the page does not show, for good). The record says a page is being written and
    # which files were there besides the recorded figures; :func:`keep_page_figures` writes the final one
    others = sorted(n for n in _png_names(fig_dir) if n not in earlier)
    atomic_write_json(fig_dir / _FIGURES_RECORD, {"figures": sorted(earlier), "others": others, "writing": True})
    return fig_dir, earlier


def keep_page_figures(fig_dir: Path, earlier: set[str], figures: Sequence[Figure]) -> None:
    """Remove the earlier page's recorded figures that this page does not show, and record this page's.

    An earlier name that a case-insensitive file system takes for one this page wrote (``case_A.png`` after
    ``case_a.png``: there, the file just written) is not removed (earlier versions removed it, and with it the figure
    on macOS or Windows); it stays in the record, so that a later page showing neither removes it.

    Args:
        fig_dir: the folder of :func:`figures_folder`.
        earlier: the names it returned.
        figures: this page's figures (those with a ``path`` are its files).
    """
    written = sorted({f.path.name for f in figures if f.path is not None})
    keys = {_file_key(n) for n in written}
    kept = {n for n in earlier if n not in written and _file_key(n) in keys}  # maybe the very file this page wrote
    for name in sorted(earlier - set(written) - kept):  # an earlier page's figures that this page does not show
        (fig_dir / name).unlink(missing_ok=True)
    if written or earlier:  # the record lists this page's figures (and the names that may be one of them)
        atomic_write_json(fig_dir / _FIGURES_RECORD, {"figures": sorted({*written, *kept})})
    else:  # nothing to record: not the pending record of figures_folder either
        (fig_dir / _FIGURES_RECORD).unlink(missing_ok=True)


def _is_figure_name(n: Any) -> bool:
    """A plain ``*.png`` name directly in the folder (what a record may name)."""
    return isinstance(n, str) and n.lower().endswith(".png") and not n.startswith(".") and Path(n).name == n \
        and "\\" not in n and n not in (".", "..")


def _png_names(fig_dir: Path) -> set[str]:
    """The plain ``*.png`` files of ``fig_dir`` (none when it is missing)."""
    if not fig_dir.is_dir():
        return set()
    return {p.name for p in fig_dir.iterdir() if _is_figure_name(p.name) and p.is_file() and not p.is_symlink()}


def _recorded_figures(fig_dir: Path) -> set[str]:
    """The PNG names an earlier report recorded writing in ``fig_dir`` (:data:`_FIGURES_RECORD`; none without it).

    The record is a file a user may edit: only plain ``*.png`` names directly in the folder are taken.
    """
    try:
        data = json.loads((fig_dir / _FIGURES_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    names = data.get("figures") if isinstance(data, dict) else None
    if not isinstance(names, list):
        return set()
    recorded = {n for n in names if _is_figure_name(n)}
    if data.get("writing") is True:  # a page killed while writing its figures: those it wrote are not listed, but
        # every figure there but the files that were there besides the recorded ones is the killed page's
        others = data.get("others")
        others = set(others) if isinstance(others, list) else None
        if others is not None:
            recorded |= _png_names(fig_dir) - others
    return recorded


def _slug(name: str) -> str:
    """The id part of an ASCII name, as in earlier versions.

    :func:`~monai_unc.evaluation.config.former_region_suffix` (the one rule of every run of characters other than
    ASCII letters and digits as ``_``), ``region`` when nothing is left.
    """
    return former_region_suffix(name) or "region"


#: the longest non-ASCII anchor in UTF-8 bytes before it is cut and told apart by a digest (it names a figure file too)
_ANCHOR_BYTES = 120


def _anchor(name: str) -> str:
    """The part of an element id (and figure file name) that stands for ``name``: unique and non-empty for any name.

    An ASCII name keeps the id of earlier versions (every run of characters other than ASCII letters and digits as
    ``_``, ``region`` when nothing is left). Another name keeps its letters, digits and marks of every script, and
    every other character is written as ``-<hex code point>-``: escaped by construction, so two names never share an
    id (in earlier versions the ASCII rule gave the Japanese or Hebrew region names ``水肿`` and ``浮肿`` both
    ``reliability-region``, one figure file and one id for both, and links jumped to the first), and the id holds a
    non-ASCII letter or a ``-`` that no ASCII name's id holds. One longer than :data:`_ANCHOR_BYTES` is cut and ends
    with a digest of the name.
    """
    name = str(name)
    if name.isascii():
        return _slug(name)
    out = "".join(c if c.isalnum() or unicodedata.category(c).startswith("M") else f"-{ord(c):x}-" for c in name)
    if len(out.encode()) > _ANCHOR_BYTES:
        cut = out.encode()[:_ANCHOR_BYTES - 17].decode(errors="ignore")
        out = f"{cut}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    return out


def _file_key(name: str) -> str:
    """``name`` as a case-insensitive file system compares file names (macOS, Windows).

    Case folded and canonically normalised (NFC: ``é`` as one code point or as ``e`` and a combining accent is one
    name on macOS). Two figure files of one key would be one file there. No compatibility folding (NFKC): no file
    system takes ``x²`` for ``x2`` or ``①`` for ``1``. Element ids that name no file are compared exactly, as HTML
    compares them.
    """
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).casefold())


def _unique_ids(wanted: Sequence[tuple[str, str]], reserved: Callable[[str], bool] | None = None,
                key: Callable[[str], str] = str) -> list[str]:
    """Element ids (and figure file names) unique within a page for ``(id wanted, name)`` pairs, in their order.

    An id that no other wanted id equals and that is not ``reserved``, compared by ``key`` (exactly, as HTML compares
    ids; :func:`_file_key` for ids that name files, as a case-insensitive file system compares them), is kept: the id
    of earlier versions. Of the names that want one id, the one written in it as it is (``"a_b"`` in
    ``reliability-a_b``, before ``"a b"``), else the first in code point order, keeps it, whatever the order of the
    names; every other one gets ``-`` and a digest of its name (8 hex digits, more in the unlikely case that these
    collide too), so adding a name never renames another one's figure unless that one's id was the same. A name that
    asks for one id more than once (a table and a banner of one key) also gets a counter.
    """
    taken: set[str] = set()
    out: list[str | None] = [None] * len(wanted)
    groups: dict[str, list[int]] = {}
    for i, (want, _) in enumerate(wanted):
        groups.setdefault(key(want), []).append(i)
    for group, members in groups.items():
        free = [i for i in members if reserved is None or not reserved(wanted[i][0])]
        if not free:
            continue
        first = min(free, key=lambda i: (not wanted[i][0].endswith(wanted[i][1]), wanted[i][1], i))
        out[first] = wanted[first][0]
        taken.add(group)
    seen: dict[tuple[str, str], int] = {}
    for i in sorted((i for i in range(len(wanted)) if out[i] is None), key=lambda i: (wanted[i][1], i)):
        want, name = wanted[i]
        repeat = seen[key(want), name] = seen.get((key(want), name), 0) + 1
        digest = hashlib.sha256(name.encode()).hexdigest()
        # a free one among these: at most len(taken) of the counted ones are taken (``reserved`` blocks a few ids,
        # never a family of them)
        tries = itertools.chain([f"{want}-{digest[:n]}" for n in (8, 16, 64)] if repeat == 1 else [],
                                (f"{want}-{digest[:8]}-{k}" for k in range(repeat, repeat + len(taken) + 64)))
        found = next((t for t in tries if key(t) not in taken and (reserved is None or not reserved(t))), None)
        if found is None:
            raise ValueError(f"no free element id for the name {name!r} (wanted {want!r}) on the page")
        out[i] = found
        taken.add(key(found))
    return [str(o) for o in out]


def _unique_anchors(names: Iterable[Any], reserved: Callable[[str], bool] | None = None) -> dict[str, str]:
    """``{name: id part}`` of distinct names, unique within a page (:func:`_unique_ids` of :func:`_anchor`).

    Compared as file names (:func:`_file_key`): the id part names a figure file too (``reliability-<part>.png``).
    """
    names = list(dict.fromkeys(str(n) for n in names))
    return dict(zip(names, _unique_ids([(_anchor(n), n) for n in names], reserved, key=_file_key)))


def read_metrics_csv(path: str | os.PathLike) -> list[dict[str, str]]:
    """Rows of a ``metrics.csv`` (strings), for tools that post-process the evaluation.

    The file is read by :func:`monai_unc.io.read_csv`; :func:`monai_unc.io.parse_float` reads a numeric cell
    (``nan`` and empty cells as NaN).

    Args:
        path: the ``metrics.csv`` of an evaluation.

    Returns:
        One dict per row, column -> cell text.

    Example:
        >>> import tempfile
        >>> import csv
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "metrics.csv"
        ...     with open(path, "w", newline="") as f:
        ...         csv.writer(f).writerows([["case", "dice"], ["c1", "0.9"]])
        ...     read_metrics_csv(path)
        [{'case': 'c1', 'dice': '0.9'}]
    """
    return read_csv(path)
