"""The pages are usable at 200% zoom, printed and colour-blind (WCAG 2.1 AA checks computed in headless Chromium).

- the scrolling box of a long table (``.scroll``: the triage table, the monitor's audit trail) stays within the page
  width, and a long case id in a figure caption wraps, so the page itself does not scroll sideways (WCAG 1.4.10
  reflow) at 200% zoom (a 640 px wide window);
- printed, that box shows every row: the page's ``@media print`` rules are applied in a copy of the page and every
  row of a 60-case table must lie inside the box (before, ``max-height:520px; overflow:auto`` cut the decisions of
  the cases below the first twenty or so off the paper);
- the score plot of the triage page tells accepted from referred cases by marker shape, not by colour alone (a
  greyscale print or a deuteranopic reader cannot tell the blue and red dots apart: their lightness is equal).
"""

from __future__ import annotations

import html
import json
import re
import subprocess

import numpy as np
import pytest

from monai_unc.report.html import PAGE_CSS, Figure, img_tag, table
from monai_unc.report.markup import document, el, script_file
from tests.report.test_viewer import _chromium

# applies the page's print rules as screen rules (Chromium has no print emulation in --dump-dom), then reports the
# page width and, for every .scroll box, how many of its rows lie (vertically) inside the box's visible area
PROBE = r"""
window.addEventListener("load", function () {
  var res = { print: 0, width: document.documentElement.clientWidth };
  res.scroll_width = document.documentElement.scrollWidth;
  if (location.hash === "#print") {
    var css = "";
    Array.prototype.forEach.call(document.styleSheets, function (sheet) {
      Array.prototype.forEach.call(sheet.cssRules, function (rule) {
        if (rule.media && Array.prototype.indexOf.call(rule.media, "print") >= 0) {
          Array.prototype.forEach.call(rule.cssRules, function (r) { css += r.cssText + "\n"; res.print += 1; });
        }
      });
    });
    var style = document.createElement("style");
    style.textContent = css;
    document.head.appendChild(style);
  }
  res.boxes = Array.prototype.map.call(document.querySelectorAll(".scroll"), function (box) {
    var b = box.getBoundingClientRect(), rows = box.querySelectorAll("tbody tr"), shown = 0;
    rows.forEach(function (tr) {
      var r = tr.getBoundingClientRect();
      if (r.top >= b.top - 1 && r.bottom <= b.bottom + 1) { shown += 1; }
    });
    return { rows: rows.length, shown: shown, right: b.right };
  });
  document.body.setAttribute("data-probe", JSON.stringify(res));
});
"""


def _page(tmp_path, n_rows: int = 60):
    """A page with the pages' style sheet and a triage-like table of ``n_rows`` cases with long case ids."""
    rows = [el("tr", el("td", str(i)), el("td", f"case_{i:03d}_" + "1.2.840.113619.2.55.3.604688119" * 3, class_="l"),
               el("td", "review" if i % 3 else "accept", class_="l"), el("td", f"{i / 7:.3f}"))
            for i in range(n_rows)]
    body = el("div", table(["rank", "case", "decision", "score"], rows, left=("case", "decision")), class_="scroll")
    # a case's slices, captioned with its long id (no space, no hyphen: no break opportunity)
    case = img_tag(Figure("case-0", f"case_000_{'1.2.840.113619.2.55.3.604688119' * 3}: triage rank 1 of 60",
                          "Rows: the axial, coronal and sagittal slices.", b"png"))
    (tmp_path / "probe.js").write_text(PROBE)
    page = tmp_path / "page.html"
    page.write_text(document("table", PAGE_CSS, el("main", el("h2", "Triage"), body,
                                                   el("section", case, class_="cases")), script_file("probe.js")))
    return page


def _probe(exe, page, tmp_path, width: int, fragment: str = "") -> dict:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--proxy-server=127.0.0.1:9", f"--window-size={width},900", "--virtual-time-budget=5000",
             f"--user-data-dir={tmp_path / f'profile-{width}{fragment[1:]}'}", "--dump-dom"]
    dom = subprocess.run([exe, *flags, page.resolve().as_uri() + fragment], capture_output=True, text=True,
                         timeout=240).stdout
    return json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', dom).group(1)))


@pytest.mark.slow
def test_long_table_scrolls_inside_the_page_width_at_200_percent_zoom(tmp_path):
    exe = _chromium()
    res = _probe(exe, _page(tmp_path), tmp_path, 640)  # a 1280 px screen at 200% zoom
    assert res["scroll_width"] <= res["width"], res  # no sideways scrolling of the page
    assert res["boxes"][0]["right"] <= res["width"] + 1, res


@pytest.mark.slow
def test_printed_table_shows_every_row(tmp_path):
    exe = _chromium()
    page = _page(tmp_path)
    screen = _probe(exe, page, tmp_path, 1280)
    assert screen["boxes"][0]["shown"] < 60  # on screen the box scrolls (the setting of this test is not vacuous)
    printed = _probe(exe, page, tmp_path, 1280, "#print")
    assert printed["print"] > 0, "the pages have no print rules"
    assert printed["boxes"][0] == {"rows": 60, "shown": 60, "right": printed["boxes"][0]["right"]}, printed


def test_triage_plot_tells_decisions_apart_by_marker_not_colour_alone():
    from matplotlib.collections import PathCollection

    from monai_unc.report.triage import plot_score_distribution

    fig = plot_score_distribution([0.1, 0.2, 0.3, 0.4], [0.15, 0.25, 0.35, 0.45], [True, True, False, False], 0.3)
    dots = {c.get_label().split(" (")[0]: c for c in fig.axes[0].collections if isinstance(c, PathCollection)}
    assert set(dots) == {"new: accept", "new: review"}, set(dots)
    shapes = {k: np.round(c.get_paths()[0].vertices, 3) for k, c in dots.items()}
    a, r = shapes["new: accept"], shapes["new: review"]
    assert a.shape != r.shape or not np.allclose(a, r), "accepted and referred cases differ by colour only"


# once the viewer is ready: the view's accessible name, role, tab index and description, and the crosshair voxel
# (NiiVue's RAS voxels) before and after Page Up / Page Down in the three-plane view and in the coronal view
KEY_PROBE = r"""
(function () {
  function key(canvas, name) {
    var ev = new KeyboardEvent("keydown", { key: name, code: name, bubbles: true, cancelable: true });
    canvas.dispatchEvent(ev);
    return ev.defaultPrevented;
  }
  function probe() {
    var box = document.querySelector(".mu-viewer"), nv = box.niivue, canvas = box.querySelector("canvas.mu-view");
    function vox() { return Array.prototype.slice.call(nv.frac2vox(nv.scene.crosshairPos)); }
    canvas.focus();
    var desc = document.getElementById(canvas.getAttribute("aria-describedby") || "none");
    var res = { name: canvas.getAttribute("aria-label"), role: canvas.getAttribute("role"), tab: canvas.tabIndex,
                focused: document.activeElement === canvas, description: desc ? desc.textContent : null,
                pending: box.querySelectorAll("[data-pending]").length };
    res.start = vox();
    res.prevented = key(canvas, "PageUp");
    res.up = vox();
    key(canvas, "PageDown"); key(canvas, "PageDown");
    res.down = vox();
    var view = box.querySelector('[data-control="view"]');
    view.value = "coronal";
    view.dispatchEvent(new Event("input"));
    key(canvas, "PageUp");
    res.coronal = vox();
    document.body.setAttribute("data-probe", JSON.stringify(res));
  }
  var wait = setInterval(function () {
    if (document.body.getAttribute("data-viewer-ready")) { clearInterval(wait); probe(); }
  }, 50);
})();
"""


@pytest.mark.slow
def test_viewer_is_named_and_steps_slices_from_the_keyboard(tmp_path):
    from tests.report.test_viewer import _open_offline
    from tests.report.test_viewer_readability import viewer_probe_page

    exe = _chromium()
    page = viewer_probe_page(tmp_path, KEY_PROBE)
    dom, _, _ = _open_offline(exe, page, tmp_path, "keys")
    res = json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', dom).group(1)))
    # 1. reachable by Tab, with a name and a description (a nameless focusable canvas before)
    assert res["tab"] == 0 and res["focused"], res
    assert res["name"] == "3D viewer of case c<1>" and res["role"] == "application", res
    assert "Page Up / Page Down change the slice" in res["description"], res
    assert res["pending"] == 0, res  # the "has not started" message is gone once the view runs
    # 2. Page Up / Page Down step the axial slice (RAS z) by one voxel in the three-plane view, not the page
    x, y, z = res["start"]
    assert res["prevented"] is True
    assert res["up"] == [x, y, z + 1] and res["down"] == [x, y, z - 1], res
    # 3. in the coronal view, the coronal slice (RAS y)
    assert res["coronal"] == [x, y + 1, z - 1], res


def _hex(color: str) -> list[int]:
    return [int(color[i:i + 2], 16) for i in (1, 3, 5)] + [1]


def test_monitor_chart_text_and_lines_have_wcag_contrast(tmp_path):
    """Found by hostile testing: the dashboard's charts wrote their legends in the lines' colours, matplotlib's
    orange (#ff7f0e, 2.5:1 on the white chart: "referred", "image statistics", "calibration cases"), green (3.4:1)
    and grey (4.0:1), below the 4.5:1 of WCAG AA text; the lines themselves below the 3:1 of graphics (1.4.11)."""
    from monai_unc.monitoring import VerifyResult
    from monai_unc.report.monitor import build_monitor_page, svg_chart
    from tests.report.test_viewer_readability import _contrast

    page = build_monitor_page(_monitor_groups(), [], VerifyResult(True, 0, ""), tmp_path / "m.html",
                              calibration={"r1": [0.1, 0.2, 0.3]}).read_text()
    x = np.arange(5.0)
    # every series colour and every reference line colour the charts have, in one chart
    page += str(svg_chart("all colours", [(f"s{k}", x, x + k) for k in range(4)],
                      hlines=[(f"h{k}", float(k)) for k in range(3)], vlines=[("v", 2.0)]))
    white = [[255, 255, 255, 1]]  # svg.chart's background
    texts = re.findall(r'<text[^>]*fill="(#[0-9a-f]{6})"[^>]*>([^<]*)</text>', page)
    assert {"referred", "image statistics", "calibration cases", "s1", "s2", "s3", "h1"} <= {t for _, t in texts}
    low = sorted({(t, c, round(_contrast(_hex(c), white), 2)) for c, t in texts if _contrast(_hex(c), white) < 4.5})
    assert not low, low
    strokes = set(re.findall(r'<(?:polyline|line)[^>]*stroke="(#[0-9a-f]{6})"', page)) - {"#d5dae3"}  # the frame
    faint = sorted((c, round(_contrast(_hex(c), white), 2)) for c in strokes if _contrast(_hex(c), white) < 3.0)
    assert not faint, faint


@pytest.mark.slow
def test_viewer_without_its_scripts_says_so(tmp_path):
    """Found by hostile testing: a page moved without its assets/ folder (or opened with JavaScript off) showed each
    viewer as a blank black canvas with controls that did nothing, and no word why."""
    from monai_unc.report.viewer import VIEWER_CSS, case_viewer, viewer_section
    from tests.report.test_viewer import _case, _open_offline

    exe = _chromium()
    image, seg, u = _case()
    page = tmp_path / "page.html"
    page.write_text(document("viewer", PAGE_CSS + VIEWER_CSS,
                             viewer_section([case_viewer("c1", seg, u, image)], "Viewer"),
                             script_file("assets/niivue.umd.js"), script_file("assets/viewer.js")))  # not there
    dom, _, _ = _open_offline(exe, page, tmp_path, "bare")
    box = re.search(r'<div class="mu-viewer".*?<canvas', dom, re.S).group(0)
    text = html.unescape(re.sub(r"<[^>]+>", "", box))
    assert "The interactive viewer has not started" in text and "assets/" in text, text


def _monitor_groups():
    from monai_unc.monitoring import monitor_status

    rows = [{"case_id": f"c{i}", "site": "A", "triaged_at": f"t{i}", "score": 0.1 + 1e-3 * i, "image_z_max": 0.5,
             "decision": "review" if i % 4 == 0 else "accept", "rule_digest": "r1", "loss": 0.0 if i % 2 else None}
            for i in range(120)]
    return monitor_status(rows, {"r1": {"calibration_scores": [0.1, 0.2, 0.3], "target_risk": 0.1}}, alpha=0.05)


@pytest.mark.slow
def test_monitor_overview_scrolls_inside_the_page_width_at_200_percent_zoom(tmp_path):
    """Found by hostile testing: the dashboard's overview table (12 columns) was not in a scrolling box, so at 200%
    zoom the page scrolled sideways (882 px in a 640 px window) and its last column, the ALARM status, was off
    screen."""
    from monai_unc.monitoring import VerifyResult
    from monai_unc.report.monitor import build_monitor_page

    exe = _chromium()
    page = build_monitor_page(_monitor_groups(), [], VerifyResult(True, 0, ""), tmp_path / "m.html")
    (tmp_path / "probe.js").write_text(PROBE)
    page.write_text(page.read_text().replace("</body>", str(script_file("probe.js")) + "</body>"))
    res = _probe(exe, page, tmp_path, 640)
    assert res["scroll_width"] <= res["width"], res
    assert res["boxes"] and all(b["right"] <= res["width"] + 1 for b in res["boxes"]), res


def test_good_and_failed_histograms_differ_by_more_than_colour():
    """Found by hostile testing: the report's "good vs failed" histograms were blue and red bars of equal lightness
    (alike in a greyscale print and to a colour-blind reader); the failed cases' bars are now hatched."""
    from monai_unc.report.plots import plot_uncertainty_histograms

    fig = plot_uncertainty_histograms(np.array([0.9, 0.1, 0.5, 0.2, 0.7]), np.array([0.2, 0.9, 0.6, 0.8, 0.3]), 0.5)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    hatches = {label.split(":")[0]: h.patches[0].get_hatch() for h, label in zip(handles, labels)}
    assert set(hatches) == {"good", "failed"}, hatches
    assert hatches["good"] != hatches["failed"], hatches


# Machado, Oliveira and Fernandes (2009), severity 1, on linear RGB
_CVD = {"deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                         [-0.011820, 0.042940, 0.968881]],
        "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                       [-0.003882, -0.048116, 1.051998]]}


@pytest.mark.parametrize("vision", ["normal", *_CVD])
def test_first_label_colours_stay_apart_for_colour_blind_readers(vision):
    """Found by hostile testing: for a deuteranope label 1 (gold) and label 4 (chartreuse) differed by CIE76 5.6 and
    labels 5 and 9 (magenta, lilac) by 5.6, protanope 6 and 9 by 7.9: BraTS' necrosis (1) and enhancing tumour (4)
    contours looked alike. Simulated with Machado et al. (2009), CIELAB by scikit-image."""
    from skimage.color import rgb2lab

    from monai_unc.report.palette import LABEL_COLORS

    srgb = np.array([[int(h[i:i + 2], 16) for i in (1, 3, 5)] for h in LABEL_COLORS], dtype=np.float64) / 255
    if vision != "normal":
        lin = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
        sim = np.clip(lin @ np.asarray(_CVD[vision]).T, 0, 1)
        srgb = np.where(sim <= 0.0031308, 12.92 * sim, 1.055 * sim ** (1 / 2.4) - 0.055)
    lab = rgb2lab(srgb[None])[0]
    d = np.linalg.norm(lab[:, None] - lab[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    i, j = np.unravel_index(np.argmin(d), d.shape)
    assert d.min() > 10, (vision, LABEL_COLORS[i], LABEL_COLORS[j], round(float(d.min()), 1))


@pytest.mark.slow
def test_region_and_product_tables_scroll_inside_the_page_width_at_200_percent_zoom(tmp_path):
    """Found by hostile testing: the region table of a region evaluation (12 columns) and a product's tables (e.g. the
    lesion list) were not in a scrolling box: at 200% zoom the page scrolled sideways (759 px in a 640 px window)."""
    from monai_unc.product import ReportSection, ReportTable
    from monai_unc.report.html import _regions_section, product_section

    region = {"labels": [1, 2, 4], "column_suffix": "whole_tumour", "dice": {"mean": 0.81234},
              "calibration": {"ece": 0.01234, "nll": 0.1234, "brier": 0.0234},
              "qu_brats": {"score": 0.8, "dice_auc": 0.8, "ftp_auc": 0.3, "ftn_auc": 0.1},
              "failure_detection": {"aurc": 0.0567}}
    summary = {"regions": {"combined_score": "predictive_entropy_fg_mean",
                           "per_region": {"whole tumour": region, "tumour core": region}}}
    head = ["lesion", "case", "volume (mm3)", "centre x (mm)", "centre y (mm)", "centre z (mm)", "mean uncertainty",
            "max uncertainty", "Dice of the lesion", "detected", "referred", "expected Dice"]
    lesions = ReportSection("Lesions", tables=[ReportTable(head, [[f"{i}", "BraTS2021_00495", 1234.5, -12.25, 33.75,
                                                                   -4.5, 0.1234, 0.9876, 0.8, "yes", "no", 0.77]
                                                                  for i in range(3)], key="lesions")])
    (tmp_path / "probe.js").write_text(PROBE)
    page = tmp_path / "page.html"
    page.write_text(document("tables", PAGE_CSS, el("main", _regions_section(summary), product_section(lesions, "l")),
                             script_file("probe.js")))
    res = _probe(_chromium(), page, tmp_path, 640)
    assert res["scroll_width"] <= res["width"], res
