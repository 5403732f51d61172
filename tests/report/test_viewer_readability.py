"""The viewer is readable (issue #40 item 3): its labels and captions have WCAG AA contrast, computed in headless
Chromium from the page's styles; the image and uncertainty colorbars have titles with units; the prediction is a
discrete label map with a legend of the class names; the multiplanar view draws its 3D tile; the uncertainty overlay
is transparent below a threshold, so the anatomy shows."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest

from monai_unc.report.markup import document, script_file
from monai_unc.report.viewer import (
    DEFAULT_COVERAGE,
    LABEL_COLORS,
    VIEWER_CSS,
    VIEWS,
    case_viewer,
    measure_unit,
    viewer_block,
    viewer_scripts,
    viewer_section,
)
from tests.report.test_viewer import _case, _chromium, _open_offline

NAMES = ["background", "liver", "tumour <b>&"]

# reads, once every viewer is ready, each text-bearing element of the viewers: its text, computed colour and the
# backgrounds below it (up to the first opaque one), the legends, and where the multiplanar view's 3D tile is
PROBE = r"""
(function () {
  function rgba(c) { var m = c.match(/[\d.]+/g).map(Number); return m.length === 3 ? m.concat([1]) : m; }
  function backs(node) {
    var out = [];
    for (var n = node; n && n.nodeType === 1; n = n.parentElement) {
      var c = rgba(getComputedStyle(n).backgroundColor);
      if (c[3] > 0) { out.push(c); if (c[3] >= 1) { return out; } }
    }
    out.push([255, 255, 255, 1]);  // the canvas of the page
    return out;
  }
  function probe() {
    var texts = [];
    document.querySelectorAll(".mu-viewer *").forEach(function (n) {
      if (n.tagName === "SCRIPT" || n.tagName === "OPTION") { return; }
      var own = Array.prototype.filter.call(n.childNodes, function (c) {
        return c.nodeType === 3 && c.textContent.trim();
      }).map(function (c) { return c.textContent.trim(); }).join(" ");
      if (!own) { return; }
      var s = getComputedStyle(n);
      texts.push({ tag: n.tagName.toLowerCase(), cls: n.className, text: own, color: rgba(s.color), backs: backs(n),
                   size: parseFloat(s.fontSize), weight: Number(s.fontWeight) || 400 });
    });
    var box = document.querySelector(".mu-viewer");
    var nv = box.niivue, canvas = box.querySelector("canvas.mu-view"), r = canvas.getBoundingClientRect();
    var scale = r.width / canvas.width, tiles = nv.screenSlices.map(function (t) {
      var l = t.leftTopWidthHeight;
      return { kind: t.axCorSag, rect: [r.left + window.scrollX + l[0] * scale, r.top + window.scrollY + l[1] * scale,
                                        l[2] * scale, l[3] * scale].map(Math.round) };
    });
    var result = {
      texts: texts,
      titles: Array.prototype.map.call(box.querySelectorAll(".mu-cbar"), function (c) {
        return { role: c.getAttribute("data-role"), title: c.querySelector(".mu-cbar-title").textContent,
                 ramp: Array.prototype.slice.call(c.querySelector("canvas").getContext("2d")
                   .getImageData(0, 0, 256, 1).data) };
      }),
      legend: Array.prototype.map.call(box.querySelectorAll(".mu-legend li"), function (li) {
        return { name: li.textContent, color: rgba(getComputedStyle(li.querySelector(".swatch")).backgroundColor) };
      }),
      view: box.querySelector('[data-control="view"]').value,
      tiles: tiles
    };
    document.body.setAttribute("data-probe", JSON.stringify(result));
  }
  var wait = setInterval(function () {
    if (document.body.getAttribute("data-viewer-ready")) {
      clearInterval(wait);
      requestAnimationFrame(function () { requestAnimationFrame(probe); });
    }
  }, 50);
})();
"""


def _luminance(rgb) -> float:
    """WCAG 2.x relative luminance of an sRGB colour (0..255 channels)."""
    c = np.asarray(rgb[:3], dtype=float) / 255.0
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2])


def _over(top, below):
    a = top[3]
    return [a * t + (1 - a) * b for t, b in zip(top[:3], below[:3])] + [1.0]


def _contrast(color, backs) -> float:
    """The WCAG contrast ratio of text ``color`` over the stack of backgrounds (nearest first, last opaque)."""
    bg = backs[-1]
    for layer in reversed(backs[:-1]):
        bg = _over(layer, bg)
    fg = _over(color, bg)
    hi, lo = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_wcag_contrast_formula():
    assert _contrast([0, 0, 0, 1], [[255, 255, 255, 1]]) == pytest.approx(21.0)
    assert _contrast([118, 118, 118, 1], [[255, 255, 255, 1]]) == pytest.approx(4.54, abs=0.01)
    assert _contrast([68, 68, 68, 1], [[0, 0, 0, 1]]) < 4.5  # dark grey on black: the complaint


def test_prediction_legend_names_colours_and_label_table():
    image, seg, u = _case()
    data = case_viewer("c", seg, u, image, measure="mutual_information", class_names=NAMES)
    assert data["labels"] == [{"value": 1, "name": "liver", "color": LABEL_COLORS[0]},
                              {"value": 2, "name": "tumour <b>&", "color": LABEL_COLORS[1]}]
    pred = next(v for v in data["volumes"] if v["role"] == "prediction")
    lut = pred["colormap_label"]
    assert lut["I"] == [0, 1, 2] and lut["A"] == [0, 255, 255]  # the background transparent, the classes opaque
    colours = list(zip(lut["R"], lut["G"], lut["B"]))[1:]
    assert len(set(colours)) == 2
    assert len(set(LABEL_COLORS)) == len(LABEL_COLORS)  # distinct colours up to the palette's length
    block = str(viewer_block(0, data))
    assert "tumour &lt;b&gt;&amp;" in block and "<b>" not in block  # the names are escaped
    # without class names (or with digit names, the default of an evaluation): "class k" after the values present
    seg3 = seg.copy()
    seg3[seg3 == 1] = 3
    for names in (None, ["0", "1", "2", "3"]):
        legend = case_viewer("c", seg3, u, image, class_names=names)["labels"]
        assert [(lab["value"], lab["name"]) for lab in legend] == [(2, "class 2"), (3, "class 3")]


def test_colorbar_titles_units_and_threshold():
    image, seg, u = _case()
    assert measure_unit("predictive_entropy") == measure_unit("mutual_information") == "nats"
    assert measure_unit("one_minus_max_prob") == measure_unit("variance") == ""
    for measure, title in (("mutual_information", "mutual information (nats)"),
                           ("variance", "variance (no unit)")):
        data = case_viewer("c", seg, u, image, measure=measure)
        vol = {v["role"]: v for v in data["volumes"]}
        assert vol["uncertainty"]["title"] == title
        assert vol["image"]["title"] == "image intensity (stored units)"
        block = str(viewer_block(0, data))
        assert f'<span class="mu-cbar-title">{title}</span>' in block
        assert '<span class="mu-cbar-title">image intensity (stored units)</span>' in block
        assert 'data-control="threshold"' in block
    # the default threshold leaves most of the crop transparent: the overlay does not cover the background
    rng = np.random.default_rng(3)
    u_dense = rng.random(seg.shape) * 0.3 + 0.01  # non-zero everywhere, as an entropy map is
    data = case_viewer("c", seg, u_dense, image)
    un = next(v for v in data["volumes"] if v["role"] == "uncertainty")
    box = tuple(slice(lo, hi) for lo, hi in data["crop"])
    shown = np.mean(u_dense[box] >= un["threshold"])
    assert shown <= DEFAULT_COVERAGE + 0.01 and un["cal_min"] == un["threshold"] and un["colormap_type"] == 1
    assert "three planes + 3D render" in dict(VIEWS).values()



def viewer_probe_page(tmp_path, probe: str, **viewer_kwargs):
    """A page in ``tmp_path`` with the toy case's viewer inside the report's own styles and the script ``probe``
    (run after the viewer's scripts); ``viewer_kwargs`` go to :func:`case_viewer`. Returns the page's path."""
    from monai_unc.report.html import PAGE_CSS  # the report's own styles around the viewer

    image, seg, u = _case()
    data = case_viewer("c<1>", seg, u, image, measure="mutual_information", **viewer_kwargs)
    scripts = viewer_scripts(tmp_path)
    (tmp_path / "assets" / "probe.js").write_text(probe)
    page = tmp_path / "page.html"
    page.write_text(document("viewer", PAGE_CSS + VIEWER_CSS, viewer_section([data], "Viewer"), scripts,
                             script_file("assets/probe.js")))
    return page

@pytest.mark.slow
def test_viewer_is_readable_in_the_browser(tmp_path):
    """Contrast from computed styles, titled colorbars, the class legend and the 3D tile drawn, in Chromium."""
    from PIL import Image

    exe = _chromium()
    page = viewer_probe_page(tmp_path, PROBE, class_names=NAMES)
    dom, shot, console = _open_offline(exe, page, tmp_path, "readable")
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-viewer-ready="1"' in body and "data-viewer-error" not in body, body
    probe = json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', body).group(1)))
    # 1. WCAG AA: every label, caption, legend and tick text at least 4.5:1 on what is below it
    texts = probe["texts"]
    kinds = {t["text"] for t in texts}
    assert {"view", "prediction opacity", "mutual information (nats)", "liver"} <= kinds, kinds
    assert any(t["cls"] == "note" for t in texts)
    low = [(t["text"], round(_contrast(t["color"], t["backs"]), 2)) for t in texts
           if _contrast(t["color"], t["backs"]) < 4.5]
    assert not low, low
    # 2. the colorbars are titled with their units, and their ramps painted (not blank)
    titles = {c["role"]: c["title"] for c in probe["titles"]}
    assert titles == {"image": "image intensity (stored units)", "uncertainty": "mutual information (nats)"}
    for c in probe["titles"]:
        ramp = np.asarray(c["ramp"], dtype=float).reshape(256, 4)
        assert ramp[:, 3].min() == 255 and ramp[:, :3].std() > 30, c["role"]
    # 3. the prediction's legend lists the class names, in the label table's colours
    assert [lab["name"] for lab in probe["legend"]] == ["liver", "tumour <b>&"]
    assert [lab["color"][:3] for lab in probe["legend"]] == [
        [int(h[i:i + 2], 16) for i in (1, 3, 5)] for h in LABEL_COLORS[:2]]
    # 4. the default view is "three planes + 3D render" and its 3D tile is drawn
    assert probe["view"] == "multiplanar"
    kinds = sorted(t["kind"] for t in probe["tiles"])
    assert kinds == [0, 1, 2, 4], kinds  # axial, coronal, sagittal and the render
    x, y, w, h = next(t["rect"] for t in probe["tiles"] if t["kind"] == 4)
    shot_px = np.asarray(Image.open(shot).convert("RGB"), dtype=np.float64)
    tile = shot_px[y:y + h, x:x + w]
    assert tile.size and tile.std() > 10, "the 3D tile is blank"
    assert np.mean(tile.max(axis=2) > 40) > 0.05  # a volume rendered, not just the crosshair
    bad = [ln for ln in console if re.search(r"uncaught|error|fail|refused", ln, re.I)]
    assert not bad, bad


LABEL_PROBE = r"""
(function () {
  function probe() {
    var box = document.querySelector(".mu-viewer"), nv = box.niivue;
    var v = nv.volumes[box.muData.volumes.findIndex(function (d) { return d.role === "prediction"; })];
    var lut = v.colormapLabel.lut, top = 0;
    for (var i = 0; i < v.img.length; i++) { if (v.img[i] > top) { top = v.img[i]; } }
    function color(k) { var j = 4 * (k - v.colormapLabel.min); return Array.prototype.slice.call(lut, j, j + 4); }
    var seen = {}, distinct = 0;
    for (var k = 1; k <= top; k++) { var c = color(k).join(","); if (!seen[c]) { seen[c] = 1; distinct++; } }
    document.body.setAttribute("data-label-probe", JSON.stringify({
      top: top, type: v.img.constructor.name, entries: lut.length / 4, min: v.colormapLabel.min,
      zero: color(0), first: color(1), last: color(top), distinct: distinct }));
  }
  function wait() { if (document.body.getAttribute("data-viewer-ready")) { probe(); } else { setTimeout(wait, 50); } }
  wait();
})();
"""


@pytest.mark.slow
def test_more_than_255_labels_are_drawn_each_in_its_colour_in_the_browser(tmp_path):
    """A prediction with 300 labels (whole-body CT class sets) is stored as uint16 display indices: NiiVue in Chromium
    reads all 300 (not wrapped to 8 bits), its label table has an opaque, distinct colour for every index and a
    transparent background, and the legend names the true label values."""
    exe = _chromium()
    shape = (30, 20, 20)
    seg = np.zeros(shape, dtype=np.int64)
    labels = np.arange(1, 301) * 7  # 300 labels up to 2100: the values are not the indices
    seg.reshape(-1)[:: 12][: labels.size] = labels  # every label present in the crop
    u = np.random.default_rng(0).random(shape)
    image = np.ones(shape, dtype=np.float32)
    data = case_viewer("many", seg, u, image, measure="mutual_information")
    assert [lab["value"] for lab in data["labels"]] == labels.tolist()
    scripts = viewer_scripts(tmp_path)
    (tmp_path / "assets" / "label_probe.js").write_text(LABEL_PROBE)
    page = tmp_path / "page.html"
    page.write_text(document("viewer", VIEWER_CSS, viewer_section([data], "Viewer"), scripts,
                             script_file("assets/label_probe.js")))
    dom, _, console = _open_offline(exe, page, tmp_path, "labels300")
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-viewer-ready="1"' in body and "data-viewer-error" not in body, body
    probe = json.loads(html.unescape(re.search(r'data-label-probe="([^"]*)"', body).group(1)))
    assert probe["top"] == 300 and probe["type"] == "Uint16Array", probe
    assert probe["min"] == 0 and probe["entries"] >= 301, probe
    assert probe["zero"][3] == 0 and probe["first"][3] == 255 and probe["last"][3] == 255, probe
    assert probe["distinct"] == 300, probe
    bad = [ln for ln in console if re.search(r"uncaught|error|fail|refused", ln, re.I)]
    assert not bad, bad
