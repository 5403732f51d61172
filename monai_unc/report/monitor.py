"""The dashboard of ``monai-unc monitor report``: one static HTML page, escaped by construction, offline.

:func:`build_monitor_page` draws, for every stream (a rule and a site, and all sites pooled), inline SVG charts
(no script, no network resource, no image file: the page works from disk):

1. the conformal test martingales of the case score and of the image statistics (log scale) against the alarm
   threshold ``1 / alpha``, with the alarm and the estimated change point (and a note when the rule records no
   statistics of its calibration images, so that the image martingale ranks within the stream only);
2. the audited accepted cases' risk: its lower confidence sequence and the observed running rate against the
   certified target;
3. the acceptance rate over a moving window of the last cases;
4. the distribution of the stream's case scores against the calibration cases';

then the alarms, the overview table (as ``monitor status``) and the audit trail with the result of the chain check.
Every string of the store (site names, case ids, command lines) reaches the page through
:mod:`monai_unc.report.markup`, so it shows as text.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..io import atomic_write_text
from ..monitoring import AuditEntry, GroupStatus, VerifyResult
from ..monitoring.status import alarm_level_text, martingale_peak_text
from ..monitoring.store import redact_url
from ..product import format_cell, format_share, format_target
from .html import PAGE_CSS, cards, scroll_box, table
from .markup import Markup, document, el, frag, isolate

__all__ = ["build_monitor_page", "svg_chart"]

_CSS = """
svg.chart{background:#fff;border:1px solid #d5dae3;border-radius:6px}
svg.chart text{font-size:11px;fill:#44505f;font-family:system-ui,Helvetica,Arial,sans-serif}
.alarm{color:#b3261e;font-weight:600}.ok{color:#1b6e3a;font-weight:600}
section.stream{margin-bottom:26px}.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
"""
#: the largest number of points of one drawn line (longer series are thinned)
_MAX_POINTS = 800
_W, _H, _ML, _MR, _MT, _MB = 560, 220, 52, 12, 24, 30
#: the series' colours, also of their legend texts: each at least 4.5:1 on the white chart (WCAG AA text; matplotlib's
#: orange, green and grey are 2.5, 3.4 and 4.0:1), blue and dark orange first (apart for a colour-blind reader)
_COLORS = ("#1f77b4", "#b35900", "#2a7d2a", "#6b6b6b")
#: the reference lines' colours and their labels', as :data:`_COLORS`
_HLINE_COLORS = ("#d62728", "#7b4fb0", "#8c564b")
#: the window of the moving acceptance rate
_WINDOW = 25
#: the most audit entries the audit trail's table shows (the latest)
_AUDIT_ROWS = 500


def _thin(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most :data:`_MAX_POINTS` points of a line: each run of points keeps its first, last, lowest and highest.

    Found by hostile testing: every k-th point was kept, so a martingale that crossed the alarm line at one case and
    fell back was drawn below the line (the peak the alarm stands for was not on the chart).

    Example:
        >>> y = np.zeros(5000); y[1234] = 3.0
        >>> x2, y2 = _thin(np.arange(5000.0), y)
        >>> len(x2) <= _MAX_POINTS, float(y2.max()), 1234.0 in x2
        (True, 3.0, True)
    """
    n = len(x)
    if n <= _MAX_POINTS:
        return x, y
    starts = np.linspace(0, n, _MAX_POINTS // 4 + 1).round().astype(int)
    keep = [np.array([0, n - 1])]
    for a, b in zip(starts[:-1], starts[1:]):
        if b > a:
            run = y[a:b]
            keep.append(np.array([a, b - 1, a + int(np.argmin(run)), a + int(np.argmax(run))]))
    idx = np.unique(np.concatenate(keep))
    return x[idx], y[idx]


def _num(v: float) -> str:
    return f"{v:.1f}"


def _tick(v: float) -> str:
    """An x tick's label: a whole number as it is (a case's place in the stream), anything else with 4 digits.

    Found by hostile testing: the last case of a stream of 12345 was labelled ``1.234e+04`` (12340).

    Example:
        >>> _tick(12345.0), _tick(3086.25), _tick(0.123456)
        ('12345', '3086', '0.1235')
    """
    return f"{v:.0f}" if float(v).is_integer() and abs(v) < 1e15 else f"{v:.4g}"


def svg_chart(
    title: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    *,
    hlines: Sequence[tuple[str, float]] = (),
    vlines: Sequence[tuple[str, float]] = (),
    y_label: str = "",
    x_label: str = "case",
    steps: bool = False,
) -> Markup:
    """An inline SVG line chart (no script): series, horizontal reference lines and vertical markers.

    Args:
        title: the chart's title (text).
        series: ``(name, x, y)`` per line; non-finite points are left out.
        hlines: ``(label, y)`` dashed horizontal lines (a threshold, a target); a non-finite ``y`` is left out.
        vlines: ``(label, x)`` dotted vertical markers (an alarm, a change point); a non-finite ``x`` is left out.
        y_label: the y axis' label.
        x_label: the x axis' label.
        steps: draw the series as steps (histograms), on a y axis that includes 0.

    Returns:
        The ``<svg>`` element; every text is escaped.

    Raises:
        ValueError: more ``series`` than :data:`_COLORS` (4) or ``hlines`` than :data:`_HLINE_COLORS` (3) (found by
            hostile testing: the ones beyond were left out without a word).

    Example:
        >>> svg = svg_chart("t<", [("a", [0, 1], [0, 1])], hlines=[("limit", 0.5)])
        >>> svg.startswith("<svg") and "t&lt;" in svg and "<polyline" in svg
        True
    """
    for name, given, colors in (("series", series, _COLORS), ("hlines", hlines, _HLINE_COLORS)):
        if len(given) > len(colors):
            raise ValueError(f"svg_chart: {name} takes at most {len(colors)} lines (one colour each), got {len(given)}")
    pts = []
    for _, xs, ys in series:
        x, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        ok = np.isfinite(x) & np.isfinite(y)
        pts.append(_thin(x[ok], y[ok]))
    all_x = np.concatenate([p[0] for p in pts] + [np.array([v for _, v in vlines], dtype=np.float64)])
    all_y = np.concatenate([p[1] for p in pts] + [np.array([v for _, v in hlines], dtype=np.float64)])
    all_x, all_y = all_x[np.isfinite(all_x)], all_y[np.isfinite(all_y)]
    if steps:  # a histogram's bars stand on 0 (found by hostile review 59: with every bin holding a case, the axis
        all_y = np.append(all_y, 0.0)  # began at the smallest share and the bins of one case were drawn as empty)
    x0, x1 = (float(all_x.min()), float(all_x.max())) if all_x.size else (0.0, 1.0)
    y0, y1 = (float(all_y.min()), float(all_y.max())) if all_y.size else (0.0, 1.0)
    if x1 <= x0:
        x1 = x0 + 1
    if y1 <= y0:
        y1 = y0 + 1
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad

    def sx(v: float) -> float:
        return _ML + (v - x0) / (x1 - x0) * (_W - _ML - _MR)

    def sy(v: float) -> float:
        return _H - _MB - (v - y0) / (y1 - y0) * (_H - _MT - _MB)

    parts = [el("text", title, x=_ML, y=15, font_weight="600"),
             el("rect", x=_ML, y=_MT, width=_W - _ML - _MR, height=_H - _MT - _MB, fill="none", stroke="#d5dae3")]
    for v in np.linspace(y0 + pad, y1 - pad, 4):
        shown = 0.0 if abs(v) < 1e-9 * (y1 - y0) else v  # no 2.2e-16 for a zero
        parts.append(el("text", f"{shown:.3g}", x=_ML - 4, y=_num(sy(v) + 4), text_anchor="end"))
    for v in np.linspace(x0, x1, 5):
        parts.append(el("text", _tick(v), x=_num(sx(v)), y=_H - _MB + 14, text_anchor="middle"))
    parts.append(el("text", x_label, x=_num((_ML + _W) / 2), y=_H - 3, text_anchor="middle"))
    parts.append(el("text", y_label, x=4, y=_MT - 6))
    for (label, v), color in zip(hlines, _HLINE_COLORS):
        if not math.isfinite(v):  # never a coordinate "inf" or "nan" (an invalid SVG attribute), as for the series
            continue
        parts += [el("line", x1=_ML, x2=_W - _MR, y1=_num(sy(v)), y2=_num(sy(v)), stroke=color, stroke_dasharray="5 3"),
                  el("text", label, x=_W - _MR - 2, y=_num(sy(v) - 3), text_anchor="end", fill=color)]
    # found by hostile testing: every marker's label was written on the legend's row, so an alarm and its change point
    # at one case (or a marker near the left edge and the legend) were drawn one over the other; each label now has
    # a row of its own below the legend
    for j, (label, v) in enumerate(vlines):
        if not math.isfinite(v):
            continue
        parts += [el("line", x1=_num(sx(v)), x2=_num(sx(v)), y1=_MT, y2=_H - _MB, stroke="#b3261e",
                     stroke_dasharray="2 2"),
                  el("text", label, x=_num(sx(v) + 3), y=_MT + 26 + 13 * j, fill="#b3261e")]
    legend_x = _ML + 6
    for (name, _, _), (x, y), color in zip(series, pts, _COLORS):
        if x.size:
            if steps:
                xs = np.repeat(x, 2)[1:]
                ys = np.repeat(y, 2)[:-1]
                x, y = xs, ys
            coords = " ".join(f"{_num(sx(a))},{_num(sy(b))}" for a, b in zip(x, y))
            parts.append(el("polyline", points=coords, fill="none", stroke=color, stroke_width="1.6"))
            if x.size == 1:  # one point draws no line: a dot
                parts.append(el("circle", cx=_num(sx(x[0])), cy=_num(sy(y[0])), r="3", fill=color))
        parts.append(el("text", name, x=_num(legend_x), y=_MT + 12, fill=color))
        legend_x += 8 + 7 * len(name)
    return el("svg", *parts, class_="chart", width=_W, height=_H, viewbox=f"0 0 {_W} {_H}", role="img",
              aria_label=title)


def _martingale_chart(g: GroupStatus) -> Markup:
    # found by hostile testing: each martingale was drawn against its own count of defined values, so with image
    # statistics missing for the first 50 cases the image alarm at the stream's 65th case was drawn at 15, before a
    # score alarm at case 26; both are now drawn at the case's place in the stream, as the acceptance chart
    series, vlines = [], []
    for name, kind, m in (("case score", "score", g.score), ("image statistics", "image", g.image)):
        if m is None:
            continue
        at = np.asarray(g.martingale_positions(kind), dtype=np.float64) + 1
        series.append((name, at[:len(m.log_martingale)], m.log_martingale / math.log(10)))
        if m.alarm is not None:
            vlines.append((f"{name}: alarm", at[m.alarm]))
            vlines.append((f"{name}: change", at[m.change_point or 0]))
    return svg_chart("Conformal test martingales (log10)", series,
                     # -log10(alpha), not log10(1 / alpha): 1 / alpha is inf below alpha = 5.6e-309
                     hlines=[(f"alarm: 1/alpha = {alarm_level_text(g.alpha)}", -math.log10(g.alpha))], vlines=vlines,
                     y_label="log10 S", x_label="case (in order; a case without the value is skipped)")


def _risk_chart(g: GroupStatus) -> Markup | None:
    if g.risk is None:
        return None
    lab = g.labelled_accepted
    n = np.arange(1, len(lab) + 1)
    running = np.cumsum([c["loss"] for c in lab]) / n
    vlines = [("alarm", g.risk.alarm + 1)] if g.risk.alarm is not None else []
    return svg_chart("Risk of the accepted cases (audited)",
                     [("lower confidence bound", n, g.risk.lower_bound), ("observed running rate", n, running)],
                     hlines=[(f"target {format_target(g.target_risk)}", g.target_risk)], vlines=vlines, y_label="risk",
                     x_label="audited accepted case (in order)")


def _acceptance_chart(g: GroupStatus) -> Markup:
    acc = np.array([c["decision"] == "accept" for c in g.cases], dtype=np.float64)
    k = min(_WINDOW, len(acc))
    moving = np.convolve(acc, np.ones(k) / k, mode="valid") if k else acc
    x = np.arange(k, len(acc) + 1)
    return svg_chart(f"Acceptance rate (last {k} cases)", [("accepted", x, moving), ("referred", x, 1 - moving)],
                     y_label="share", x_label="case (in order)")


def _score_chart(g: GroupStatus, calibration: Sequence[float]) -> Markup | None:
    s = np.array([c["score"] for c in g.cases], dtype=np.float64)
    s = s[np.isfinite(s)]
    cal = np.asarray(calibration, dtype=np.float64)
    both = np.concatenate([s, cal])
    if not both.size:
        return None
    lo, hi = float(both.min()), float(both.max())
    edges = np.linspace(lo, hi if hi > lo else lo + 1, 21)
    series = []
    for name, v in (("new cases", s), ("calibration cases", cal)):
        if v.size:
            h, _ = np.histogram(v, edges)
            series.append((name, edges, np.append(h / v.size, h[-1] / v.size)))
    return svg_chart("Case score distribution", series, y_label="share of cases", x_label="case score", steps=True)


def _stream_section(g: GroupStatus, calibration: Sequence[float]) -> Markup:
    alarms = g.alarms()
    status = (el("ul", *(el("li", a, class_="alarm") for a in alarms)) if alarms
              else el("p", "no alarm", class_="ok"))
    charts = [c for c in (_martingale_chart(g), _risk_chart(g), _acceptance_chart(g), _score_chart(g, calibration))
              if c is not None]
    score_reference = None if g.score_reference_note is None else el("p", f"Note: {g.score_reference_note}.")
    note = None if g.image_note is None else el("p", f"Note: {g.image_note}.")
    score_note = None if g.score_note is None else el("p", f"Warning: {g.score_note}.", class_="alarm")
    retriage = None if g.retriage_note is None else el("p", f"Note: {g.retriage_note}.")
    relabel = None if g.relabel_note is None else el("p", f"Warning: {g.relabel_note}.", class_="alarm")
    return el("section", el("h2", isolate(g.site), f" (rule {g.rule_digest.removeprefix('sha256:')[:12]})"), status,
              score_reference, note, score_note, retriage, relabel, el("div", *charts, class_="plots"),
              class_="stream")


def _overview(groups: Sequence[GroupStatus]) -> Markup:
    rows = []
    for g in groups:
        lab = g.labelled_accepted
        obs = float(np.mean([c["loss"] for c in lab])) if lab else math.nan
        lb = float(g.risk.lower_bound[-1]) if g.risk is not None else math.nan
        rows.append(el("tr", el("td", isolate(g.site), class_="l"), el("td", g.rule_digest[:19], class_="l mono"),
                       el("td", str(g.n_cases)), el("td", format_share(g.n_accepted, g.n_cases)),
                       el("td", format_share(*g.recent_accepted)), el("td", martingale_peak_text(g.score)),
                       el("td", martingale_peak_text(g.image)),
                       el("td", str(len(lab))), el("td", "-" if not lab else format_cell(obs, 3, g.target_risk)),
                       el("td", "-" if g.risk is None else format_cell(lb, 3, g.target_risk)),
                       el("td", f"{format_target(g.target_risk)}"),
                       el("td", "ALARM" if g.alarms() else "ok", class_="alarm" if g.alarms() else "ok"),
                       class_="referred" if g.alarms() else None))
    head = ["site", "rule", "cases", "accepted", "recent", "max score martingale", "max image martingale",
            "audited accepted", "observed risk", "risk lower bound", "target", "status"]
    # in a scrolling box: twelve columns are wider than a zoomed page, and the last one is the status
    return scroll_box(table(head, rows, left=["site", "rule"]), "overview table")


def _audit(audit: Sequence[AuditEntry], verified: VerifyResult) -> Markup:
    check = (el("p", f"chain intact: {verified.n_entries} entries, head {verified.head}", class_="ok")
             if verified.ok else el("ul", *(el("li", p, class_="alarm") for p in verified.problems)))
    shown = audit[-_AUDIT_ROWS:]
    rows = [el("tr", el("td", str(e.seq)), el("td", e.at, class_="l"), el("td", e.actor, class_="l"),
               el("td", e.host, class_="l"), el("td", e.action, class_="l"),
               el("td", redact_url(e.command), class_="l mono"),  # a store written before kept passwords there
               el("td", e.hash[:16], class_="l mono")) for e in shown]
    # a table cut without a word read as a log that starts later (found by hostile testing)
    cut = (el("p", f"the last {len(shown)} of {len(audit)} entries (from entry {shown[0].seq}); monai-unc monitor "
                   "verify checks them all") if len(shown) < len(audit) else None)
    return el("section", el("h2", "Audit trail"), check, cut,
              scroll_box(table(["#", "when (UTC)", "who", "host", "action", "command", "hash"], rows,
                               left=["when (UTC)", "who", "host", "action", "command", "hash"]), "audit trail"))


def build_monitor_page(
    groups: Sequence[GroupStatus],
    audit: Sequence[AuditEntry],
    verified: VerifyResult,
    output: str | os.PathLike,
    calibration: dict[str, Sequence[float]] | None = None,
) -> Path:
    """Write the monitoring dashboard (module docstring).

    Args:
        groups: the streams (:func:`monai_unc.monitoring.monitor_status`).
        audit: the audit log (:meth:`~monai_unc.monitoring.MonitorStore.audit_log`).
        verified: the chain check (:meth:`~monai_unc.monitoring.MonitorStore.verify`).
        output: the page's path (``.html``).
        calibration: the calibration scores of each rule digest (the score distribution chart), or None.

    Returns:
        The page's path.
    """
    # the site names isolated (review 61: a right-to-left name was reordered with the text and numbers beside it)
    alarms = [frag("[", isolate(g.site), f"] {a}") for g in groups for a in g.alarms()]
    alpha = groups[0].alpha if groups else 0.05
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = el("header", el("h1", "Monitoring of the deployed model"),
                el("p", f"generated {now}; each alarm's false-alarm probability is at most {alpha:g} over the whole "
                        "stream (Ville's inequality); see docs/monitoring.md"))
    summary = cards([("streams", str(len(groups))), ("cases", str(sum(g.n_cases for g in groups if not g.pooled))),
                     ("alarms", str(len(alarms))), ("audit entries", str(verified.n_entries)),
                     ("audit chain", "intact" if verified.ok else "TAMPERED")])
    alarm_section = el("section", el("h2", "Alarms"),
                       el("ul", *(el("li", a, class_="alarm") for a in alarms)) if alarms
                       else el("p", "no alarm", class_="ok"))
    cal = calibration or {}
    streams = [_stream_section(g, cal.get(g.rule_digest, ())) for g in groups]
    body = el("main", summary, alarm_section, el("h2", "Overview"), _overview(groups), *streams,
              _audit(audit, verified))
    page = document("monai-unc monitoring", PAGE_CSS + _CSS, header, body)
    out = Path(output)
    atomic_write_text(out, page)
    return out
