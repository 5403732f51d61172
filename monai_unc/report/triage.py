"""The HTML page of ``monai-unc triage``: new unlabelled cases, ranked, with the referral rule's decision.

:func:`build_triage_page` reads a triage folder (``triage.json`` written by
:func:`monai_unc.evaluation.triage.run_triage`) and writes ``triage.html`` (figures embedded as base64 PNG, no
network resource; the same figures under ``figures/``), in the style of the QC report (:mod:`monai_unc.report.html`):

1. header: the rule (score, threshold, target risk, delta, method, calibration cases) and, when the predictions'
   fingerprint differs from the rule's and the triage was told to go on (``--allow-mismatch``), a warning banner
   listing the differences; a note when no fingerprint could be checked;
2. cards: cases, accepted, referred, the reasons, the guarantee for the accepted cases;
3. the ranked table: case, decision, reason, score (for a region-based rule also the score of each region, whose
   mean is the score), ``expected_dice``, image z-score;
4. the score distribution of the new cases against the calibration cases (:func:`plot_score_distribution`), with the
   threshold and the calibration range;
5. overlays of the most uncertain cases on their slices of highest uncertainty (:func:`plot_triage_overlay`: image,
   prediction contour, uncertainty; no label, so no error map), slices chosen by
   :func:`monai_unc.report.plots.slice_of_highest_uncertainty`. The uncertainty is read from files, never computed:
   the case's map file of the rule's measure, or for a case without map files the map triage derived from its
   probabilities (``<triage>/maps/<case>_<measure>.nii.gz``).

With the outputs of a cohort product's command for the same cases (``triage --<command>-rule``; the keyword
``<command>=FOLDER`` of :func:`build_triage_page`) the table gains the product's columns
(:meth:`~monai_unc.product.CohortProduct.applied_columns`), the case figures its contours
(:meth:`~monai_unc.product.CohortProduct.case_overlays`, read from that folder's files) and the page its section
(:meth:`~monai_unc.product.CohortProduct.applied_section`).

:func:`link_page` adds a link to the triage page in the header of another page (the demo's QC report).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
from matplotlib.figure import Figure as MplFigure

from .._utils import check_integer, is_count, is_finite_real, is_real, is_text_list, real_array
from ..evaluation import triage_order
from ..evaluation.config import DERIVED_MAPS_DIR
from ..evaluation.rows import derived_map_path
from ..evaluation.triage import Decision, ReferralRule, mismatch_fields
from ..evaluation.triage.rule import check_recorded_decisions, check_triage_summary
from ..io import CaseFiles, atomic_write_text
from ..io.provenance import decode_untrusted_json
from ..io.signing import Trust
from ..product import (
    Overlay,
    ThresholdText,
    command_product,
    format_estimate,
    format_level,
    format_score,
    format_target,
)
from .html import (
    ACCEPT_ALL,
    PAGE_CSS,
    Figure,
    cards,
    case_figures_section,
    case_overlays,
    decision_tag,
    figures_folder,
    format_value,
    img_tag,
    keep_page_figures,
    load_figure_case,
    product_section,
    region_display,
    scroll_box,
    section_element_ids,
    table,
    warning_list,
    write_case_figures,
)
from .markup import Markup, check_url, document, el, escape, isolate
from .plots import plot_case_overlay, save_png
from .viewer import CONVENTIONS, VIEWER_CSS, case_viewer, check_convention, viewer_scripts, viewer_section

__all__ = ["build_triage_page", "plot_score_distribution", "plot_triage_overlay", "link_page", "TRIAGE_PAGE_IDS"]

#: the ids of the triage page's own elements (``triage.html``), which no product's section, table or banner takes;
#: ``triage-link`` is the link :func:`link_page` adds to a page
TRIAGE_PAGE_IDS = frozenset({"summary", "triage", "triage-table", "plots", "cases", "viewers", "warnings",
                             "triage-check", "mismatch", "unverified", "triage-link"})

_ACCEPT, _REVIEW, _CAL = "#1f77b4", "#d62728", "0.55"
_EXTRA_CSS = """
.banner{background:#fff4e5;border:2px solid #e6a23c;color:#6b4a00;padding:10px 14px;border-radius:6px;margin:12px 0}
header .banner{color:#6b4a00;font-size:13px}.banner ul{margin:4px 0 0 18px;padding:0}
td.reason{text-align:left;max-width:560px;font-size:12px}tr.review td{background:#fde8e6}
"""


def plot_score_distribution(
    calibration_scores: Sequence[float],
    new_scores: Sequence[float],
    accepted: Sequence[bool],
    threshold: float,
    score_name: str = "score",
    bins: int = 20,
    n_undefined: int = 0,
) -> Any:
    """Histogram of the calibration cases' scores with the new cases' scores below it, on one axis.

    The calibration cases are a grey histogram; the new cases one mark each (blue dots accepted, red crosses
    referred: a shape as well as a colour); the certified threshold is dashed and the region outside the calibration
    range shaded (always referred). Undefined new scores are left out (they are referred).

    Args:
        calibration_scores: the calibration cases' scores.
        new_scores: the new cases' scores (NaN or None: undefined).
        accepted: one decision per new case, a boolean (True: accepted).
        threshold: the rule's certified threshold (``inf``: every score in the range accepted, ``-inf``: none; no
            line is drawn for either).
        score_name: the x-axis label.
        bins: the histogram's bins.
        n_undefined: the calibration cases without a defined score (the rule's ``n_undefined``): not on the score
            axis, but counted in the legend, which gives the drawn cases of all the rule's calibration cases.

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: ``accepted`` not one boolean decision per new score, a calibration score that is not finite, a
            ``threshold`` that is not a number (NaN, a bool or text), ``n_undefined`` not a non-negative integer, or
            ``bins`` not a positive integer.
        TypeError: scores that are not real numbers (text).

    Example:
        >>> fig = plot_score_distribution([0.1, 0.2, 0.3, 0.4], [0.15, 0.5, float("nan")], [True, False, False], 0.3)
        >>> len(fig.axes)
        1
    """
    # found by hostile testing: accepted=["yes", "no"] (or [0.5, 0.2]) drew both cases accepted, threshold=True a line
    # "accept <= 1", and text scores were parsed as numbers
    cal = real_array(np.asarray(calibration_scores), "calibration_scores")
    new = real_array(np.asarray(new_scores), "new_scores", " (None or NaN: undefined)")
    acc = np.asarray(accepted)
    if acc.size and acc.dtype.kind != "b":
        raise ValueError(f"accepted must hold one boolean decision per new score (True: accepted), got dtype "
                         f"{acc.dtype}")
    acc = acc.astype(bool)
    if not is_real(threshold) or math.isnan(threshold):
        raise ValueError(f"threshold must be a number (inf: every score accepted, -inf: none), got {threshold!r}")
    n_undefined = check_integer(n_undefined, "n_undefined", 0)
    # found by hostile testing: bins=0 drew no calibration bar unsaid, -1 failed with an IndexError, True drew one bin
    bins = check_integer(bins, "bins")
    # found by hostile testing: one decision for two new cases was broadcast ("new: accept (n=2)"), and a NaN
    # calibration score set the axis to the new cases only, the calibration cases' bars outside it
    if new.ndim != 1 or acc.shape != new.shape:
        raise ValueError(f"accepted must give one decision per new score, got shapes {acc.shape} and {new.shape}")
    if cal.ndim != 1 or not np.isfinite(cal).all():
        raise ValueError("calibration_scores must be the finite scores of the calibration cases (those without a "
                         "defined score are counted by n_undefined)")
    ok = np.isfinite(new)
    every = np.concatenate([cal, new[ok]])
    lo, hi = (float(every.min()), float(every.max())) if every.size else (0.0, 1.0)
    pad = 0.05 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.05
    edges = np.linspace(lo - pad, hi + pad, bins + 1)
    fig = MplFigure(figsize=(6.4, 3.6), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    if cal.size:
        # found by hostile testing: "n=40" beside a header of 45 calibration cases (5 without a defined score)
        count = f"n={cal.size}" if not n_undefined else (f"n={cal.size} of {cal.size + n_undefined}; {n_undefined} "
                                                           "without a defined score not drawn")
        ax.hist(cal, bins=edges, color=_CAL, alpha=0.55, label=f"calibration cases ({count})")
        ax.axvspan(edges[0], cal.min(), color=_REVIEW, alpha=0.08)
        ax.axvspan(cal.max(), edges[-1], color=_REVIEW, alpha=0.08, label="outside the calibration range")
    top = ax.get_ylim()[1] if cal.size else 1.0
    y = -0.08 * top
    rng = np.random.default_rng(0)
    jitter = rng.uniform(-0.035, 0.035, new.size) * top
    # a shape per decision as well as a colour: blue and red dots look alike printed in grey or to a colour-blind reader
    for mask, color, marker, label in ((acc & ok, _ACCEPT, "o", "new: accept"),
                                       (~acc & ok, _REVIEW, "X", "new: review")):
        if mask.any():
            ax.scatter(new[mask], y + jitter[mask], color=color, marker=marker, s=34 if marker == "X" else 26,
                       edgecolor="white", lw=0.5, zorder=3, label=f"{label} (n={int(mask.sum())})")
    if math.isfinite(threshold):
        # the rule as ThresholdText writes it (rounded toward referral; "threshold 0.217" read as a rule accepted
        # scores up to 0.217 that a threshold of 0.21696 refers)
        t = ThresholdText.choose(threshold, new[ok].tolist())
        ax.axvline(threshold, color="0.15", ls="--", lw=1.4,
                   label=f"threshold: accept {t.relation(True, ascii_only=False)} {t.bound_text()}")
    ax.set_ylim(-0.16 * top, top * 1.05)
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_xlabel(score_name)
    ax.set_ylabel("calibration cases")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper right", framealpha=0.9)
    ax.set_title("Scores of the new cases against the calibration cases", fontsize=11)
    return fig


def plot_triage_overlay(
    case_id: str,
    seg: np.ndarray,
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
    """One row per view through the slice of highest summed uncertainty among the slices that cut the prediction.

    Columns: image, prediction contour per class and uncertainty heatmap; label-free, so there is no error map.
    Slices are chosen by :func:`monai_unc.report.plots.slice_of_highest_uncertainty` inside the predicted
    foreground; the figure is drawn by :func:`monai_unc.report.plots.plot_case_overlay`, as in the evaluation
    report.

    Args:
        case_id: the case id (title).
        seg: the predicted label map ``(X, Y, Z)``.
        uncertainty: the uncertainty map ``(X, Y, Z)``.
        image: the image ``(X, Y, Z)`` or ``(C, X, Y, Z)`` (channel 0 is shown), or None.
        spacing: voxel size in mm per axis.
        measure: the name of the uncertainty map (column title).
        axes: the axes to cut, one row each (2 axial, 1 coronal, 0 sagittal).
        info: ``{name: value}`` shown after the case id in the title.
        class_names: names of the classes for the contour legend.
        overlays: contours drawn beside the prediction's (:class:`~monai_unc.product.Overlay`: a product's case
            files, e.g. the masks of a fitted rule).
        affine: the volumes' voxel-to-world affine: with it the slices are drawn in the RAS-closest voxel order, the
            patient's left on the left and the sides marked (:func:`~monai_unc.report.plots.plot_case_overlay`);
            without it as stored.
        convention: ``"neurological"`` (default, the patient's left on the left) or ``"radiological"`` (the axial
            and coronal panels mirrored: the patient's right on the left, ``R`` marked there).

    Returns:
        The matplotlib ``Figure``.

    Example:
        >>> seg = np.zeros((8, 8, 8), np.int64); seg[2:6, 2:6, 2:6] = 1
        >>> fig = plot_triage_overlay("new1", seg, np.random.default_rng(0).random((8, 8, 8)), axes=(2,))
        >>> [ax.get_title() for ax in fig.axes[:3]]
        ['image', 'prediction contour', 'uncertainty']
    """
    return plot_case_overlay(case_id, seg, None, uncertainty, image, spacing, measure, axes, info, class_names,
                             overlays=overlays, affine=affine, convention=convention)


def _threshold_text(summary: Mapping[str, Any], rule: ReferralRule) -> ThresholdText | None:
    """How the page states the rule's threshold for its cases' scores (None: not certified, or every score)."""
    if not rule.feasible or not math.isfinite(rule.threshold):
        return None
    return ThresholdText.choose(rule.threshold, [c["score"] for c in summary["cases"] if c.get("score") is not None])


def _score_formatter(summary: Mapping[str, Any], rule: ReferralRule) -> Callable[[Any], str]:
    """The one writing of the cases' scores on the page (:func:`monai_unc.report.html.score_formatter`)."""
    t = _threshold_text(summary, rule)
    return format_score if t is None else t.score


def _header(summary: Mapping[str, Any], rule: ReferralRule, title: str, checked: str) -> Markup:
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    t = _threshold_text(summary, rule)
    thr = ("not certified: refer every case" if not rule.feasible else ACCEPT_ALL if t is None else
           f"accept score {t.relation(True, ascii_only=False)} {t.bound_text()}")
    parts: list[Any] = [
        el("h1", title),
        el("p", f"{summary['n_cases']} new case(s), no labels · triage score ", el("b", rule.score),
           f" · {thr} · target risk ", el("b", f"{format_target(rule.target_risk)}"),
           f" ({rule.risk_definition}), 1 - delta = {format_level(rule.delta)}, {rule.method.upper()} · certified on "
           f"{rule.n_calibration} calibration case(s) · generated {now} by monai-unc"),
    ]
    if summary.get("rule_file"):
        parts.append(el("p", f"rule: {summary['rule_file']}"))
    parts.append(el("p", f"triage.json: {checked}", id="triage-check"))  # how it was checked (check_triage_summary)
    fp = summary["fingerprint"]
    if fp.get("status") == "mismatch":
        items = [el("li", el("b", str(d["field"])), f": predictions {json.dumps(d['predictions'])}, rule "
                    f"{json.dumps(d['rule'])}") for d in fp["differences"]]
        parts.append(el("div", el("b", "Fingerprint mismatch (--allow-mismatch):"), " these predictions were not made "
                        "like the ones the rule was certified on, so the guarantee does not cover them. Differences:",
                        el("ul", *items), class_="banner", id="mismatch"))
    elif fp.get("status") == "unverified":
        parts.append(el("div", el("b", "Fingerprint not checked:"), " neither the rule nor the predictions record how "
                        "the predictions were made (model, method, samples, settings); make sure they come from the "
                        "same model and settings.", class_="banner", id="unverified"))
    return el("header", *parts)


def _cards(summary: Mapping[str, Any], rule: ReferralRule) -> Markup:
    reasons = summary.get("reasons", {})
    items = [("new cases", str(summary["n_cases"])), ("accepted", str(summary["n_accepted"])),
             ("referred for review", str(summary["n_review"]))]
    labels = {"above_threshold": "above the threshold", "outside_range": "outside the calibration range",
              "image_statistics": "image statistics far off", "undefined_score": "undefined score",
              "not_certified": "rule not certified"}
    items += [(f"referred: {labels[k]}", str(v)) for k, v in reasons.items() if k in labels]
    # with --allow-mismatch the predictions are not those the rule was certified for: the header says the guarantee
    # does not cover them, so no card may claim it (found by hostile review: the card read "<= 0.4" under the banner)
    covered = rule.feasible and not _mismatch(summary)
    # found by hostile testing: the card read "guaranteed mean risk of accepted <= 0.2" when the range or image checks
    # had referred cases the threshold accepts, for which the guarantee (the paragraph below) is 0.2 c / (c - eps): the
    # card then names the cases its bound is for
    checked = any(c.get("code") in ("outside_range", "image_statistics") and c.get("score") is not None
                  and float(c["score"]) <= rule.threshold for c in summary["cases"])
    whom = "the cases the threshold accepts, before the range and image checks" if checked else "accepted"
    items.append((f"guaranteed mean risk of {whom} ({rule.risk_definition}), w.p. {format_level(rule.delta)}",
                  f"≤ {format_target(rule.target_risk)}" if covered
                  else "none: fingerprint mismatch" if rule.feasible else "none"))
    return cards(items)


def _mismatch(summary: Mapping[str, Any]) -> bool:
    """Whether the triage ran on predictions whose fingerprint differs from the rule's (``--allow-mismatch``)."""
    return (summary.get("fingerprint") or {}).get("status") == "mismatch"


def _expected_dice_head(rule: ReferralRule) -> str:
    """The column head of the expected Dice: its interval's level, or that it is the model's own estimate."""
    rec = rule.record
    if rec is None or rec.expected_dice is None:
        return "expected Dice (model's own estimate, uncalibrated)"
    return f"expected Dice [{format_level(rec.interval_alpha, percent=True)} conformal interval]"


def _expected_dice_text(c: Mapping[str, Any], failure_dice: float | None = None) -> str:
    """A case's expected Dice, with its conformal interval when triage computed one: ``0.93 [0.78, 1.00]``.

    The interval's ends are rounded outward (:func:`~monai_unc.product.format_interval`): rounded to the nearest they
    could move inward and the printed interval miss a Dice the interval covers. With ``failure_dice`` (the rule's
    :attr:`~monai_unc.evaluation.triage.ReferralRule.judged_dice`) the estimate never reads equal to it or on its
    other side (earlier versions read 0.795 as ``0.80`` under "dice < 0.8").
    """
    return format_estimate(c.get("expected_dice"), c.get("expected_dice_low"), c.get("expected_dice_high"),
                           threshold=failure_dice)


def _interval_note(rule: ReferralRule, summary: Mapping[str, Any] | None = None) -> str:
    """One sentence under the table: the expected Dice interval's guarantee and its caveat, or that it has none.

    Under a fingerprint mismatch (``--allow-mismatch``) the sentence says its coverage does not hold for these cases.
    """
    text = rule.interval_statement(mismatch_fields((summary or {}).get("fingerprint") or {}))
    return f"{text[0].upper()}{text[1:]}."


def _table(summary: Mapping[str, Any], rule: ReferralRule,
           applied: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None) -> Markup:
    cases = {c["case"]: c for c in summary["cases"]}
    has_q = any("expected_dice" in c for c in cases.values())
    has_z = any("image_z_max" in c for c in cases.values())
    regions = rule.region_names if any("region_scores" in c for c in cases.values()) else []
    extra = [(command, key, head, digits) for command, rows in (applied or {}).items()
             for key, head, digits in command_product(command).applied_columns(list(rows.values()), rule.class_names)]
    head = ["rank", "case", "rule decision", rule.score] + [f"{rule.aggregation} {n}" for n in regions] + \
        ([_expected_dice_head(rule)] if has_q else []) + (["image z"] if has_z else []) + [h for _, _, h, _ in extra] \
        + ["reason"]
    trs = []
    score = _score_formatter(summary, rule)
    for rank, cid in enumerate(summary["order"], 1):
        c = cases[cid]
        cells = [el("td", str(rank)), el("td", isolate(cid), class_="l"),
                 el("td", decision_tag(c["decision"], "rule"), class_="l"), el("td", score(c.get("score")))]
        cells += [el("td", format_score((c.get("region_scores") or {}).get(n))) for n in regions]
        if has_q:
            cells.append(el("td", _expected_dice_text(c, rule.judged_dice)))
        if has_z:
            z, ref = c.get("image_z_max"), rule.image_reference  # never read across its z_max (ImageReference.z_text)
            cells.append(el("td", format_value(z, 1) if ref is None else ref.z_text(z)))
        cells += [el("td", format_value((applied or {})[command].get(cid, {}).get(key), digits), class_=command)
                  for command, key, _, digits in extra]
        cells.append(el("td", c["reason"], class_="reason"))
        trs.append(el("tr", *cells, class_=c["decision"], data_case=cid, data_decision=c["decision"]))
    return scroll_box(table(head, trs, ("case", "rule decision", "reason"), id="triage-table"),
                      "triage table, most uncertain case first")


def _case_figures(summary: Mapping[str, Any], rule: ReferralRule, n_cases: int, fig_dir: Path, maps: Path,
                  folders: Mapping[str, Path] | None = None,
                  viewers: list[dict[str, Any]] | None = None, unread: list[str] | None = None,
                  convention: str = "neurological") -> list[Figure]:
    """The overlays of the ``n_cases`` most uncertain cases, drawn from files.

    A case's map of the rule's measure is its map file, or, for a case without map files, the map triage derived from
    its probabilities (``maps``: ``<triage>/maps/<case>_<measure>.nii.gz``); a case with neither (a triage folder of
    an older version, which kept no derived map) has no figure. A case whose files cannot be read (missing,
    unreadable) has no figure either and one line in ``unread``, so that the page is still written.
    """
    unread = [] if unread is None else unread
    cases = {c["case"]: c for c in summary["cases"]}
    score = _score_formatter(summary, rule)
    chosen = summary["order"][:n_cases]
    drawn: list[tuple[str, str, str, bytes]] = []  # (case, title, caption, PNG) of each figure drawn
    for cid in chosen:
        d = summary.get("files", {}).get(cid)
        if not d:
            continue
        files = CaseFiles.from_json(d)
        if not files.maps:  # the map triage derived from the probabilities, as evaluate's report reads its maps/
            derived = derived_map_path(maps, cid, rule.measure)
            files.maps = {rule.measure: derived} if derived.is_file() else {}
        if rule.measure not in files.maps:
            continue
        regions = rule.regions
        case = load_figure_case(files, rule.measure, rule.num_classes, files.image is not None, regions is not None,
                                unread)
        if case is None:  # its files cannot be read: a line in unread
            continue
        c = cases[cid]
        info = {"score": score(c.get("score")), "decision": c["decision"]}
        if "expected_dice" in c:
            info["expected Dice"] = _expected_dice_text(c, rule.judged_dice)
        seg, u, class_names = case.seg, case.maps[rule.measure], rule.class_names
        if regions is not None:  # nested regions drawn as one label map, the largest uncertainty over the regions
            seg, _, u, class_names = region_display(case.seg, None, u, regions, len(case.spacing))
        if viewers is not None and c["decision"] != "accept":  # the flagged cases: those referred for review
            viewers.append(case_viewer(cid, seg, u, case.image, case.affine, case.spacing, rule.measure,
                                       class_names=class_names, image_unit=case.image_unit, convention=convention))
        overlays, notes = case_overlays(folders or {}, cid)  # the case files the products' commands wrote
        fig = plot_triage_overlay(cid, seg, u, case.image, case.spacing, rule.measure, info=info,
                                  class_names=class_names, overlays=overlays, affine=case.affine,
                                  convention=convention)
        drawn.append((cid, f"{cid}: triage rank {summary['order'].index(cid) + 1} of "
                       f"{len(summary['order'])} ({c['decision']})",
                       f"Reason: {c['reason']}. Rows: the axial, coronal and sagittal slices with the largest "
                       f"summed uncertainty inside the predicted foreground, drawn with {CONVENTIONS[convention]} "
                       "(the sides marked on the image), as in the viewer. Columns: image; prediction "
                       "contour per class; uncertainty heatmap." + "".join(f" {n}" for n in notes), save_png(fig)))
    return write_case_figures(fig_dir, drawn)  # one file per case drawn (none for a case without a figure)


_CASE_NUMBERS = ("score", "expected_dice", "expected_dice_low", "expected_dice_high", "image_z_max")
#: the codes of a case's decision (:meth:`monai_unc.evaluation.triage.ReferralRule.apply`): accepted, or the first
#: reason for review
_CODES = Decision.CODES


def _check_summary(summary: Any, source: str) -> None:
    """Check the fields of a ``triage.json`` that the page reads (a file a user may have edited).

    Their types, and that they agree with each other: ``n_cases``, ``n_accepted``, ``n_review``, ``accepted``,
    ``review``, ``reasons`` and each case's ``code`` with the cases' decisions, ``order`` with their scores (as
    :func:`~monai_unc.evaluation.triage_order` ranks them). The decisions are checked against the rule by
    :func:`~monai_unc.evaluation.triage.rule.check_recorded_decisions`.

    Args:
        summary: the parsed file.
        source: how the message names the file.

    Raises:
        ValueError: one line naming ``source`` and the field.

    Example:
        >>> _check_summary({"n_cases": "3"}, "t/triage.json")
        Traceback (most recent call last):
        ...
        ValueError: t/triage.json: field 'n_cases' must be a count of cases, got str '3'
    """
    def bad(name: str, want: str, value: Any) -> ValueError:
        return ValueError(f"{source}: field {name!r} must be {want}, got {type(value).__name__} {value!r}"[:400])

    def number(value: Any) -> bool:  # a finite number or null (strict JSON has no NaN: an undefined value is null)
        return value is None or is_finite_real(value)

    def text(value: Any) -> bool:
        return isinstance(value, str)

    if not isinstance(summary, dict):
        raise ValueError(f"{source}: the triage summary must be a JSON object, got {type(summary).__name__}")
    for name in ("n_cases", "n_accepted", "n_review"):
        if not is_count(summary.get(name)):
            raise bad(name, "a count of cases", summary.get(name))
    reasons = summary.get("reasons", {})
    if not isinstance(reasons, dict) or not all(map(is_count, reasons.values())):
        raise bad("reasons", "an object of counts", reasons)
    if not isinstance(summary.get("rule"), dict):
        raise bad("rule", "an object (the referral rule)", summary.get("rule"))
    for name in ("rule_file", "rule_signature"):
        if summary.get(name) is not None and not text(summary[name]):
            raise bad(name, "text or null", summary[name])
    for name in ("notes", "warnings"):
        if summary.get(name) is not None and not is_text_list(summary[name]):
            raise bad(name, "a list of lines", summary[name])
    fp = summary.get("fingerprint")
    if not isinstance(fp, dict) or not (fp.get("status") is None or text(fp["status"])):
        raise bad("fingerprint", 'an object with a text "status"', fp)
    if fp.get("status") == "mismatch" and not (isinstance(fp.get("differences"), list) and all(
            isinstance(d, dict) and {"field", "predictions", "rule"} <= d.keys() for d in fp["differences"])):
        raise bad("fingerprint.differences", 'a list of objects with "field", "predictions" and "rule"',
                  fp.get("differences"))
    cases = summary.get("cases")
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise bad("cases", "a list of objects", cases)
    for i, c in enumerate(cases):
        for name in ("case", "reason"):
            if not text(c.get(name)):
                raise bad(f"cases[{i}].{name}", "text", c.get(name))
        if c.get("decision") not in ("accept", "review"):
            raise bad(f"cases[{i}].decision", "'accept' or 'review'", c.get("decision"))
        for name in _CASE_NUMBERS:
            if not number(c.get(name)):
                raise bad(f"cases[{i}].{name}", "a finite number or null", c.get(name))
        regions = c.get("region_scores")
        if regions is not None and not (isinstance(regions, dict) and all(map(number, regions.values()))):
            raise bad(f"cases[{i}].region_scores", "an object of finite numbers or null", regions)
    ids = [c["case"] for c in cases]
    order = summary.get("order")
    if len(set(ids)) != len(ids) or not is_text_list(order) or sorted(order) != sorted(ids):
        raise bad("order", "the case ids of 'cases', each once", order)
    if summary["n_cases"] != len(cases):
        raise bad("n_cases", f"the number of cases ({len(cases)})", summary["n_cases"])
    scores = np.array([math.nan if c.get("score") is None else float(c["score"]) for c in cases])
    expected = [ids[i] for i in triage_order(ids, scores)]
    if order != expected:
        k = next(i for i, (a, b) in enumerate(zip(order, expected)) if a != b)
        raise bad("order", f"the case ids from the highest score to the lowest (undefined scores first, ties by case "
                  f"id): at rank {k + 1} case {expected[k]!r}, not {order[k]!r}", order)
    decisions = [c["decision"] for c in cases]
    for name, decision in (("n_accepted", "accept"), ("n_review", "review")):
        if summary[name] != decisions.count(decision):
            raise bad(name, f"the number of cases whose decision is {decision!r} ({decisions.count(decision)})",
                      summary[name])
    for name, decision in (("accepted", "accept"), ("review", "review")):
        want = [c["case"] for c in cases if c["decision"] == decision]
        if name in summary and summary[name] != want:
            raise bad(name, f"the ids of the cases whose decision is {decision!r} ({want})", summary[name])
    codes = [c.get("code") for c in cases]
    for i, (code, decision) in enumerate(zip(codes, decisions)):
        if code is not None and not Decision.code_agrees(decision, code):
            raise bad(f"cases[{i}].code", f"{'accepted' if decision == 'accept' else 'a reason for review'} (the "
                      f"case's decision is {decision!r}; codes: {', '.join(_CODES)})", code)
    if "reasons" in summary and all(code is not None for code in codes):
        counted = {code: codes.count(code) for code in dict.fromkeys(codes)}
        if reasons != counted:
            raise bad("reasons", f"the number of cases of each code ({counted})", reasons)
    elif "reasons" in summary and sum(reasons.values()) != len(cases):
        raise bad("reasons", f"counts of the {len(cases)} cases' reasons", reasons)
    files = summary.get("files", {})
    if not isinstance(files, dict):
        raise bad("files", "an object", files)
    for cid, d in files.items():
        if d is None:
            continue
        if not (isinstance(d, dict) and text(d.get("case")) and text(d.get("label"))
                and all(d.get(k) is None or text(d[k]) for k in ("seg", "probs", "image"))
                and isinstance(d.get("maps") or {}, dict) and all(  # a path, or one per region (review 61)
                    text(v) or isinstance(v, list) and v and all(map(text, v))
                    for v in (d.get("maps") or {}).values())):
            raise bad(f"files.{cid}", 'the files of a case (an object of paths with "case" and "label") or null', d)


def build_triage_page(
    triage: str | os.PathLike,
    output: str | os.PathLike | None = None,
    n_cases: int = 4,
    title: str = "Triage of new cases",
    viewer: bool = True,
    *,
    trust: Trust | None = None,
    convention: str = "neurological",
    **applied: str | os.PathLike | None,
) -> Path:
    """Write ``triage.html`` (and ``figures/*.png``) for a triage folder.

    The folder is the ``output`` of :func:`monai_unc.evaluation.triage.run_triage`; the page's sections are listed
    in the module docstring. The page renders files and computes no map: a case's uncertainty is its map file, or
    the map triage derived from its probabilities and wrote to ``<triage>/maps/<case>_<measure>.nii.gz``.

    Args:
        triage: the triage folder (``triage.json``).
        output: folder of the page (default: ``triage``).
        n_cases: overlays of this many of the most uncertain cases (0: none).
        title: page title.
        viewer: embed the interactive 3D viewer (:mod:`monai_unc.report.viewer`) for the referred cases among the
            ``n_cases`` shown, with its scripts in ``<output>/assets`` (the PNG slices stay).
        trust: require ``triage.json`` to be signed by one of these trusted keys
            (:func:`~monai_unc.evaluation.triage.rule.check_triage_summary`; e.g. ``Trust(("keys/",))``), checked
            before anything is written; None: accepted unsigned, or signed by a key not trusted here with the
            warning below (``monai-unc triage`` reads the file it has just written).
        convention: how the case figures and the viewers draw the patient's sides
            (:data:`~monai_unc.report.viewer.CONVENTIONS`): ``"neurological"`` (default) the patient's left on the
            screen's left, ``"radiological"`` the patient's right (``monai-unc triage --convention radiological``).
        **applied: ``<command>=FOLDER``: the output folder of a product's command run on these cases
            (:attr:`monai_unc.product.CohortProduct.command`, e.g. ``monai-unc triage --<command>-rule``), or None:
            its numbers go into the table, its case files into the figures, its section onto the page.

    Returns:
        The path of ``triage.html``.

    Raises:
        ValueError: ``n_cases`` is not a non-negative integer, ``convention`` is neither convention, or
            ``triage.json`` is not strict JSON, has a field the page reads of the wrong type, counts, reasons or an
            order that contradict its cases, or a decision that is not the rule's for the case's score (an edited
            file; one line naming the file and the field); with ``trust``, a ``triage.json`` that is not signed by a
            trusted key.
        FileNotFoundError: the folder holds no ``triage.json``, or a product's folder lacks its outputs.
        TypeError: a keyword that is not a product's command, or a ``convention`` that is not a str.

    Warns:
        UserWarning: naming ``triage.json``, when who wrote it is not checked: it has no digest, or is signed by a key
            that is not trusted here (:func:`~monai_unc.evaluation.triage.rule.check_triage_summary`, whose line the
            page's header shows in every case).
    """
    unknown = sorted(k for k in applied if command_product(k) is None)
    if unknown:
        raise TypeError(f"build_triage_page() got unexpected keyword argument(s) {unknown}: not a product's command")
    folders = {k: Path(v) for k, v in applied.items() if v is not None}
    n_cases = check_integer(n_cases, "n_cases", 0)  # numpy integers too (found by hostile testing: refused)
    convention = check_convention(convention)
    folder = Path(triage)
    path = folder / "triage.json"
    if not path.is_file():
        raise FileNotFoundError(f"no triage.json in {folder}: run monai-unc triage --output {folder} first")
    summary = decode_untrusted_json(path.read_bytes(), str(path))  # UTF-8, strict JSON (no NaN, no key twice)
    _check_summary(summary, str(path))
    # a signature required: checked before anything else of the file is taken
    checked = None if trust is None else check_triage_summary(summary, str(path), trust, warn=True)
    rule = ReferralRule.from_json(summary["rule"], f"{path}: rule")
    check_recorded_decisions(summary["cases"], rule, str(path))  # each decision derived again from the rule
    # its digest and signature: any other edit; how it was checked is on the page, and warned about when who wrote
    # it is not checked (no digest, an untrusted key: review 61, the line was discarded)
    if checked is None:
        checked = check_triage_summary(summary, str(path), warn=True)
    products = {command: command_product(command) for command in folders}
    rows = {command: cls.applied_rows(folders[command]) for command, cls in products.items()}
    out_dir = Path(output) if output is not None else folder
    fig_dir, earlier = figures_folder(out_dir)  # not a link; an earlier page's figures this one lacks are removed
    cases = summary["cases"]
    scores = [math.nan if c.get("score") is None else float(c["score"]) for c in cases]
    dist = plot_score_distribution(rule.calibration_scores, scores, [c["decision"] == "accept" for c in cases],
                                   rule.threshold, rule.score.replace("_", " "), n_undefined=rule.n_undefined)
    figures = [Figure("scores", "Score distribution",
                      "Grey: the calibration cases the rule was certified on; below: the new cases (blue dots "
                      "accepted, red crosses referred). A new case outside the calibration range (shaded) is referred "
                      "whatever its score: the certificate says nothing about scores it has not seen.",
                      save_png(dist, fig_dir / "scores.png"),
                      fig_dir / "scores.png")]
    viewers: list[dict[str, Any]] | None = [] if viewer else None
    case_notes: list[str] = []
    case_figs = _case_figures(summary, rule, n_cases, fig_dir, folder / DERIVED_MAPS_DIR,
                              {products[c].name: f for c, f in folders.items()}, viewers, case_notes, convention)
    keep_page_figures(fig_dir, earlier, (*figures, *case_figs))
    notes = [el("li", n) for n in summary.get("notes", [])]
    left = [str(c) for c in summary.get("not_triaged") or []]  # no prediction (infer failed on them): at the top
    if left:
        notes.insert(0, el("li", f"{len(left)} case(s) NOT triaged, neither accepted nor referred (no prediction: "
                           "inference failed on them or was not run): " + ", ".join(left[:20])
                           + (f" and {len(left) - 20} more" if len(left) > 20 else "") + "; review them by hand"))
    guarantee = rule.guarantee()
    summary_section = el(
        "section", el("h2", "Summary"), _cards(summary, rule),
        el("p", f"{guarantee[0].upper() + guarantee[1:]}. A case is accepted only when its score is at most the "
           "threshold and inside the range of the calibration scores, and (when the rule and this triage have images) "
           "its intensity statistics are close to the calibration images'; every other case goes to review with its "
           "reason. " + ("These decisions (rule: accept / review) are the certified rule's, but these "
                         "predictions were not made like the ones it was certified on (fingerprint mismatch, above), "
                         "so they do not carry its guarantee" if _mismatch(summary) else
                         "These decisions (rule: accept / review) are the certified rule's and carry its guarantee")
           + "; the review budget of an evaluation report (budget: flagged / kept) is a ranking without one.",
           class_="note"),
        el("ul", *notes, class_="warn") if notes else None,
        el("p", f"Rule signature: {summary['rule_signature']}.", class_="note")
        if summary.get("rule_signature") and not str(summary["rule_signature"]).startswith("UNSIGNED") else None,
        id="summary")
    sections = [
        summary_section,
        el("section", el("h2", "Cases, most uncertain first"), _table(summary, rule, rows),
           el("p", _interval_note(rule, summary), class_="note") if any("expected_dice" in c for c in cases) else None,
           id="triage"),
    ]
    shown = [(section, cls.name) for command, cls in products.items()  # the products' commands run on these cases
             if (section := cls.applied_section(folders[command])) is not None]
    # one id per section, table and banner, none of this page's own
    sections += [product_section(section, name, section_id, element_ids=element_ids) for (section, name),
                 (section_id, element_ids) in zip(shown, section_element_ids(shown, TRIAGE_PAGE_IDS))]
    sections.append(el("section", el("h2", "Scores"), el("div", *map(img_tag, figures), class_="plots"), id="plots"))
    cases = case_figures_section("Most uncertain cases: slices of highest uncertainty", case_figs, case_notes,
                                 summary["order"])
    if cases is not None:
        sections.append(cases)
    view = viewer_section(viewers or [], "Referred cases: interactive viewer")
    if view is not None:
        sections.append(view)
    warns = summary.get("warnings") or []
    if warns:
        sections.append(warning_list(warns, case_ids=summary["order"]))
    page = document(title, PAGE_CSS + _EXTRA_CSS + (VIEWER_CSS if view is not None else ""),
                    _header(summary, rule, title, checked), el("main", *sections),
                    viewer_scripts(out_dir) if view is not None else None)
    return atomic_write_text(out_dir / "triage.html", page)


def link_page(page: str | os.PathLike, target: str | os.PathLike, text: str) -> Path:
    """Add a link to ``target`` at the end of ``page``'s ``<header>`` (or after ``<body>`` when it has none).

    The link is relative to ``page``'s folder; ``page`` is rewritten atomically. A second call with the same target
    does nothing.

    Args:
        page: the HTML page to change.
        target: the page to link to.
        text: the link text.

    Returns:
        ``page``.

    Raises:
        ValueError: ``page`` has no ``<body>``.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "report.html").write_text("<html><body><header></header></body></html>")
        ...     page = link_page(Path(d) / "report.html", Path(d) / "triage" / "triage.html", "triage")
        ...     'href="triage/triage.html"' in page.read_text()
        True
    """
    page = Path(page)
    doc = page.read_text(encoding="utf-8")
    href = check_url(quote(Path(os.path.relpath(Path(target).resolve(), page.resolve().parent)).as_posix()), "target")
    if f' href="{escape(href)}"' in doc:
        return page
    link = el("p", el("a", text, href=href, style="color:#fff"), class_="link", id="triage-link")
    if "</header>" in doc:
        doc = doc.replace("</header>", link + Markup("</header>"), 1)
    elif "<body>" in doc:
        doc = doc.replace("<body>", Markup("<body>") + link, 1)
    else:
        raise ValueError(f"{page} is not an HTML page with a <body>")
    return atomic_write_text(page, doc)
