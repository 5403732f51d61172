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
   :func:`monai_unc.report.plots.slice_of_highest_uncertainty`.

:func:`link_page` adds a link to the triage page in the header of another page (the demo's QC report).
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure as MplFigure

from ..evaluation.case import derived_maps
from ..evaluation.triage import ReferralRule
from ..io import CaseFiles, atomic_write_text, load_case
from .html import PAGE_CSS, Figure, format_value, img_tag, region_display
from .plots import plot_case_overlay, save_png

__all__ = ["build_triage_page", "plot_score_distribution", "plot_triage_overlay", "link_page"]

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
) -> Any:
    """Histogram of the calibration cases' scores (grey) and the new cases' scores below it (one dot per case:
    blue accepted, red referred), on one axis; the certified threshold (dashed) and the region outside the
    calibration range (shaded: always referred). Undefined new scores are left out (they are referred)."""
    cal = np.asarray(calibration_scores, dtype=np.float64)
    new = np.asarray(new_scores, dtype=np.float64)
    acc = np.asarray(accepted, dtype=bool)
    ok = np.isfinite(new)
    every = np.concatenate([cal, new[ok]])
    lo, hi = (float(every.min()), float(every.max())) if every.size else (0.0, 1.0)
    pad = 0.05 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.05
    edges = np.linspace(lo - pad, hi + pad, bins + 1)
    fig = MplFigure(figsize=(6.4, 3.6), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    if cal.size:
        ax.hist(cal, bins=edges, color=_CAL, alpha=0.55, label=f"calibration cases (n={cal.size})")
        ax.axvspan(edges[0], cal.min(), color=_REVIEW, alpha=0.08)
        ax.axvspan(cal.max(), edges[-1], color=_REVIEW, alpha=0.08, label="outside the calibration range")
    top = ax.get_ylim()[1] if cal.size else 1.0
    y = -0.08 * top
    rng = np.random.default_rng(0)
    jitter = rng.uniform(-0.035, 0.035, new.size) * top
    for mask, color, label in ((acc & ok, _ACCEPT, "new: accept"), (~acc & ok, _REVIEW, "new: review")):
        if mask.any():
            ax.scatter(new[mask], y + jitter[mask], color=color, s=26, edgecolor="white", lw=0.5, zorder=3,
                       label=f"{label} (n={int(mask.sum())})")
    if math.isfinite(threshold):
        ax.axvline(threshold, color="0.15", ls="--", lw=1.4, label=f"threshold {threshold:.4g}")
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
) -> Any:
    """One row per view through the slice of highest summed uncertainty among the slices that cut the predicted
    foreground (:func:`monai_unc.report.plots.slice_of_highest_uncertainty`): image, prediction contour per class,
    uncertainty heatmap. Label-free: there is no error map. Volumes 3D ``(X, Y, Z)``; ``image`` may be
    ``(C, X, Y, Z)`` (channel 0 is shown)."""
    return plot_case_overlay(case_id, seg, None, uncertainty, image, spacing, measure, axes, info, class_names)


def _tag(decision: str) -> str:
    return ('<span class="tag k">accept</span>' if decision == "accept"
            else '<span class="tag r">review</span>')


def _header(summary: Mapping[str, Any], rule: ReferralRule, title: str) -> str:
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    thr = ("not certified: refer every case" if not rule.feasible else
           "accept every score in the calibration range" if rule.threshold == math.inf else
           f"accept score &le; {rule.threshold:.6g}")
    parts = [
        f"<header><h1>{html.escape(title)}</h1>",
        f"<p>{summary['n_cases']} new case(s), no labels · triage score <b>{html.escape(rule.score)}</b> · "
        f"{thr} · target risk <b>{rule.target_risk:g}</b> ({html.escape(rule.risk_definition)}), 1 - delta = "
        f"{1 - rule.delta:g}, {html.escape(rule.method.upper())} · certified on {rule.n_calibration} calibration "
        f"case(s) · generated {now} by monai-unc</p>",
    ]
    if summary.get("rule_file"):
        parts.append(f"<p>rule: {html.escape(str(summary['rule_file']))}</p>")
    fp = summary["fingerprint"]
    if fp.get("status") == "mismatch":
        items = "".join(f"<li><b>{html.escape(str(d['field']))}</b>: predictions "
                        f"{html.escape(json.dumps(d['predictions']))}, rule {html.escape(json.dumps(d['rule']))}</li>"
                        for d in fp["differences"])
        parts.append('<div class="banner" id="mismatch"><b>Fingerprint mismatch (--allow-mismatch):</b> these '
                     "predictions were not made like the ones the rule was certified on, so the guarantee does not "
                     f"cover them. Differences:<ul>{items}</ul></div>")
    elif fp.get("status") == "unverified":
        parts.append('<div class="banner" id="unverified"><b>Fingerprint not checked:</b> neither the rule nor the '
                     "predictions record how the predictions were made (model, method, samples, settings); make sure "
                     "they come from the same model and settings.</div>")
    parts.append("</header>")
    return "".join(parts)


def _cards(summary: Mapping[str, Any], rule: ReferralRule) -> str:
    reasons = summary.get("reasons", {})
    items = [("new cases", str(summary["n_cases"])), ("accepted", str(summary["n_accepted"])),
             ("referred for review", str(summary["n_review"]))]
    labels = {"above_threshold": "above the threshold", "outside_range": "outside the calibration range",
              "image_statistics": "image statistics far off", "undefined_score": "undefined score",
              "not_certified": "rule not certified"}
    items += [(f"referred: {labels[k]}", str(v)) for k, v in reasons.items() if k in labels]
    items.append((f"guaranteed mean risk of accepted ({rule.risk_definition}), w.p. {1 - rule.delta:g}",
                  f"&le; {rule.target_risk:g}" if rule.feasible else "none"))
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="v">{v}</div><div class="k">{html.escape(k)}</div></div>' for k, v in items
    ) + "</div>"


def _table(summary: Mapping[str, Any], rule: ReferralRule) -> str:
    cases = {c["case"]: c for c in summary["cases"]}
    has_q = any("expected_dice" in c for c in cases.values())
    has_z = any("image_z_max" in c for c in cases.values())
    regions = rule.region_names if any("region_scores" in c for c in cases.values()) else []
    head = ["rank", "case", "decision", rule.score] + [f"{rule.aggregation} {n}" for n in regions] + \
        (["expected Dice"] if has_q else []) + (["image z"] if has_z else []) + ["reason"]
    out = ['<div class="scroll"><table id="triage-table"><thead><tr>']
    out += [f'<th class="{"l" if h in ("case", "decision", "reason") else ""}">{html.escape(h)}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    for rank, cid in enumerate(summary["order"], 1):
        c = cases[cid]
        cells = [f"<td>{rank}</td>", f'<td class="l">{html.escape(cid)}</td>',
                 f'<td class="l">{_tag(c["decision"])}</td>', f"<td>{format_value(c.get('score'), 4)}</td>"]
        cells += [f"<td>{format_value((c.get('region_scores') or {}).get(n), 4)}</td>" for n in regions]
        if has_q:
            cells.append(f"<td>{format_value(c.get('expected_dice'))}</td>")
        if has_z:
            cells.append(f"<td>{format_value(c.get('image_z_max'), 1)}</td>")
        cells.append(f'<td class="reason">{html.escape(c["reason"])}</td>')
        out.append(f'<tr class="{c["decision"]}" data-case="{html.escape(cid)}" data-decision="{c["decision"]}">'
                   + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _case_figures(summary: Mapping[str, Any], rule: ReferralRule, n_cases: int, fig_dir: Path) -> list[Figure]:
    cases = {c["case"]: c for c in summary["cases"]}
    out = []
    for cid in summary["order"][:n_cases]:
        d = summary["files"].get(cid)
        if not d:
            continue
        files = CaseFiles.from_json(d)
        regions = rule.regions
        case = load_case(files, rule.num_classes, load_image=files.image is not None, multilabel=regions is not None)
        maps = derived_maps(case)
        if rule.measure not in maps:
            continue
        c = cases[cid]
        info = {"score": format_value(c.get("score"), 4), "decision": c["decision"]}
        if "expected_dice" in c:
            info["expected Dice"] = format_value(c["expected_dice"])
        seg, u, class_names = case.seg, maps[rule.measure], rule.class_names
        if regions is not None:  # nested regions drawn as one label map, the largest uncertainty over the regions
            seg, _, u, class_names = region_display(case.seg, None, u, regions)
        fig = plot_triage_overlay(cid, seg, u, case.image, case.spacing, rule.measure, info=info,
                                  class_names=class_names)
        path = fig_dir / f"case_{cid}.png"
        out.append(Figure(f"case-{cid}", f"{cid}: triage rank {summary['order'].index(cid) + 1} of "
                          f"{len(summary['order'])} ({c['decision']})",
                          f"Reason: {c['reason']}. Rows: the axial, coronal and sagittal slices with the largest "
                          "summed uncertainty inside the predicted foreground. Columns: image; prediction contour per "
                          "class; uncertainty heatmap.", save_png(fig, path), path))
    return out


def build_triage_page(
    triage: str | os.PathLike,
    output: str | os.PathLike | None = None,
    n_cases: int = 4,
    title: str = "Triage of new cases",
) -> Path:
    """Write ``triage.html`` (and ``figures/*.png``) for a triage folder (the ``output`` of
    :func:`monai_unc.evaluation.triage.run_triage`); returns the HTML path.

    Args:
        triage: the triage folder (``triage.json``).
        output: folder of the page (default: ``triage``).
        n_cases: overlays of this many of the most uncertain cases (0: none).
        title: page title.
    """
    if isinstance(n_cases, bool) or not isinstance(n_cases, int) or n_cases < 0:
        raise ValueError(f"n_cases must be a non-negative integer, got {n_cases!r}")
    folder = Path(triage)
    path = folder / "triage.json"
    if not path.is_file():
        raise FileNotFoundError(f"no triage.json in {folder}: run monai-unc triage --output {folder} first")
    summary = json.loads(path.read_text())
    rule = ReferralRule.from_json(summary["rule"], f"{path}: rule")
    out_dir = Path(output) if output is not None else folder
    fig_dir = out_dir / "figures"
    cases = summary["cases"]
    scores = [math.nan if c.get("score") is None else float(c["score"]) for c in cases]
    dist = plot_score_distribution(rule.calibration_scores, scores, [c["decision"] == "accept" for c in cases],
                                   rule.threshold, rule.score.replace("_", " "))
    figures = [Figure("scores", "Score distribution",
                      "Grey: the calibration cases the rule was certified on; dots: the new cases (blue accepted, red "
                      "referred). A new case outside the calibration range (shaded) is referred whatever its score: "
                      "the certificate says nothing about scores it has not seen.", save_png(dist, fig_dir /
                                                                                               "scores.png"),
                      fig_dir / "scores.png")]
    case_figs = _case_figures(summary, rule, n_cases, fig_dir)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in summary.get("notes", []))
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta name='viewport' content='width=device-width'><title>{html.escape(title)}</title>",
        f"<style>{PAGE_CSS}{_EXTRA_CSS}</style></head><body>",
        _header(summary, rule, title),
        '<main><section id="summary"><h2>Summary</h2>', _cards(summary, rule),
        f'<p class="note">{html.escape(rule.guarantee()[0].upper() + rule.guarantee()[1:])}. A case is accepted only '
        "when its score is at most the threshold and inside the range of the calibration scores, and (when the rule "
        "and this triage have images) its intensity statistics are close to the calibration images'; every other "
        "case goes to review with its reason.</p>",
        f'<ul class="warn">{notes}</ul>' if notes else "",
        "</section>",
        '<section id="triage"><h2>Cases, most uncertain first</h2>', _table(summary, rule), "</section>",
        '<section id="plots"><h2>Scores</h2><div class="plots">', *[img_tag(f) for f in figures], "</div></section>",
    ]
    if case_figs:
        parts += ['<section id="cases" class="cases"><h2>Most uncertain cases: slices of highest uncertainty</h2>',
                  *[img_tag(f) for f in case_figs], "</section>"]
    warns = summary.get("warnings") or []
    if warns:
        parts.append('<section id="warnings"><h2>Warnings</h2><ul class="warn">')
        parts += [f"<li>{html.escape(w)}</li>" for w in warns[:50]]
        parts.append("</ul></section>")
    parts.append("</main></body></html>\n")
    return atomic_write_text(out_dir / "triage.html", "".join(parts))


def link_page(page: str | os.PathLike, target: str | os.PathLike, text: str) -> Path:
    """Add a link to ``target`` (relative to ``page``'s folder) at the end of ``page``'s ``<header>`` (or after
    ``<body>`` when it has none), rewriting ``page`` atomically; a second call with the same target does nothing."""
    page = Path(page)
    doc = page.read_text(encoding="utf-8")
    href = os.path.relpath(Path(target).resolve(), page.resolve().parent)
    link = (f'<p class="link" id="triage-link"><a href="{html.escape(href)}" style="color:#fff">'
            f"{html.escape(text)}</a></p>")
    if f'href="{html.escape(href)}"' in doc:
        return page
    if "</header>" in doc:
        doc = doc.replace("</header>", link + "</header>", 1)
    elif "<body>" in doc:
        doc = doc.replace("<body>", "<body>" + link, 1)
    else:
        raise ValueError(f"{page} is not an HTML page with a <body>")
    return atomic_write_text(page, doc)
