"""Hostile review 60 of the report pages: what a radiologist or QC reader sees against the files it comes from."""

from __future__ import annotations

import json
import re

import numpy as np

from monai_unc.evaluation.triage import ReferralRule
from monai_unc.report.html import build_report
from monai_unc.report.plots import plot_uncertainty_histograms
from monai_unc.report.triage import build_triage_page
from tests.report._hostile_cohorts import SHAPE, binary_probs, evaluate, write_cases
from tests.report.test_triage_hostile_numbers import triage_json


# --------------------------------------------------- 1. the failure Dice written rounded, across the cases it judges
def _three_quarters_case() -> tuple[np.ndarray, np.ndarray]:
    """A case of Dice exactly 0.75: four predicted and four reference voxels, three shared."""
    lab = np.zeros(SHAPE, np.int64)
    lab[5, 5, 4:8] = 1
    pred = np.zeros(SHAPE)
    pred[5, 5, 5:9] = 1
    return binary_probs(np.where(pred == 1, 0.9, 0.1)), lab


def test_report_writes_the_failure_dice_as_the_cases_are_judged_against_it(tmp_path):
    """Found by hostile review 60: with ``--failure-dice 0.7500001`` a case of Dice 0.75 is failed (red, counted in
    the card), but the page said "Dice below 0.75 is marked as failed" (``:g``, six digits) and the histogram's
    caption and legend "Dice >= 0.75 (good)": the case read failed for a Dice its own page calls good. The failure
    Dice is written with the digits it is compared in (float32, as a case's Dice is recorded): ``0.7500001``."""
    lab = np.zeros(SHAPE, np.int64)
    lab[4:8, 4:8, 4:8] = 1
    data = write_cases(tmp_path / "data", {"good": (binary_probs(np.where(lab == 1, 0.9, 0.1)), lab),
                                           "edge": _three_quarters_case()})
    out = evaluate(data, tmp_path / "eval", "--failure-dice", "0.7500001", "--budget", "0.5")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failures"]["n_failed"] == 1
    text = build_report(out, n_cases=0, viewer=False).read_text()
    row = re.search(r'<tr class="([^"]*)" data-case="edge">.*?<td class="dice">([^<]*)</td>', text)
    assert row is not None and "failed" in row.group(1) and row.group(2) == "0.750"
    assert "Dice below 0.7500001 is marked as failed" in text
    assert "failed (Dice &lt; 0.7500001) referred" in text
    assert "cases with Dice &gt;= 0.7500001 (good)" in text
    assert "0.75 " not in re.sub(r"<[^>]+>", " ", text).replace("0.750", "")


def test_histogram_legend_writes_the_failure_dice_it_splits_the_cases_at():
    """The legend of the good / failed histograms: ``Dice < 0.7500001`` for the case of Dice 0.75 it draws failed."""
    fig = plot_uncertainty_histograms(np.array([0.1, 0.2]), np.array([0.75, 0.9]), 0.7500001, "score")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["good: Dice >= 0.7500001 (n=1)", "failed: Dice < 0.7500001 (n=1)"]


def test_failure_dice_is_written_as_it_compares_in_float32():
    """``--failure-dice 0.75000001`` compares as the float32 0.75 (a Dice of 0.75 is not failed): written 0.75,
    never "Dice below 0.75000001" above a case of 0.750 that is not marked."""
    fig = plot_uncertainty_histograms(np.array([0.1, 0.2]), np.array([0.75, 0.9]), 0.75000001, "score")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["good: Dice >= 0.75 (n=2)", "failed: Dice < 0.75 (n=0)"]


def test_triage_page_writes_the_rules_failure_dice_as_it_judges_the_estimates(tmp_path):
    """The triage page's header named the rule's risk "dice < 0.75" for a failure Dice of 0.7500001, above an expected
    Dice written ``0.75`` (below it, so kept below)."""
    doc = triage_json()
    rule = ReferralRule.from_json(doc["rule"])
    rule.failure_dice = 0.7500001
    doc["rule"] = rule.to_json()
    doc["cases"][0].update(expected_dice=0.75)
    (tmp_path / "triage.json").write_text(json.dumps(doc))
    text = build_triage_page(tmp_path, n_cases=0, viewer=False).read_text()
    assert "(dice &lt; 0.7500001)" in text
    assert "dice &lt; 0.75)" not in text


# ----------------------------------------- 2. label values above 4096: the figure's colours differ from the viewer's
def test_case_figure_colours_large_label_values_as_the_viewer_does():
    """Found by hostile review 60: label values above ``MAX_DISTINCT_COLORS`` (4096) are coloured by rank; the static
    figure ranked the labels of its shown slices only, so a case of labels 5000 and 6000 whose axial slice cuts 6000
    alone drew 6000 in gold, the colour the viewer (and legend) gives 5000 (6000 is cyan there). Both rank all the
    case's labels."""
    from matplotlib.colors import to_hex

    from monai_unc.report.plots import plot_case_overlay
    from monai_unc.report.viewer import case_viewer

    seg = np.zeros((10, 10, 10), np.int64)
    seg[1:4, 1:4, 1:4] = 5000
    seg[5:9, 5:9, 5:9] = 6000
    u = np.zeros(seg.shape)
    u[5:9, 5:9, 5:9] = 1.0
    viewer = {lab["value"]: lab["color"] for lab in case_viewer("c", seg, u)["labels"]}
    fig = plot_case_overlay("c", seg, seg, u, axes=(2,))
    legend = fig.axes[1].get_legend()
    drawn = {t.get_text(): to_hex(h.get_color()) for t, h in zip(legend.get_texts(), legend.legend_handles)}
    assert drawn == {"class 6000": viewer[6000]}
    assert viewer[6000] != viewer[5000]


def test_viewer_colours_large_label_values_by_rank_among_all_the_cases_labels():
    """Subsampled to fit the page, a one-voxel label 5000 vanished from the viewer's volume and label 6000 took its
    colour (rank among the labels left): the legend's colour of 6000 changed with the page's size budget."""
    from monai_unc.report.viewer import case_viewer

    seg = np.zeros((40, 40, 40), np.int64)
    seg[1, 1, 1] = 5000
    seg[4:36, 4:36, 4:36] = 6000
    u = np.random.default_rng(0).random(seg.shape)
    full = case_viewer("c", seg, u)
    small = case_viewer("c", seg, u, budget_bytes=full["bytes"] // 3)
    assert small["step"] > 1 and [lab["value"] for lab in small["labels"]] == [6000]
    assert small["labels"][0]["color"] == {lab["value"]: lab["color"] for lab in full["labels"]}[6000]


# ------------------------------------------------------ 3. bidi override characters in a case id reorder the page
def test_bidi_override_in_a_case_id_cannot_reorder_the_text_after_it():
    """Found by hostile review 60: an invisible RIGHT-TO-LEFT OVERRIDE (U+202E) in a case id reached the page as it
    is, so the text after it up to the end of its paragraph was drawn reversed: "ranked first: x<U+202E>, 12, 34." reads
    "x43 ,21 ," (the ids 43 and 21, which are not cases). Explicit bidi controls are written visibly."""
    from monai_unc.report.markup import el

    for control in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069":
        html = el("p", "Cases without a defined score are ranked first: ", ", ".join(["x" + control, "12", "34"]),
                  title="x" + control)
        assert control not in html
        assert f"x[U+{ord(control):04X}], 12, 34" in html and f'title="x[U+{ord(control):04X}]"' in html


def test_triage_page_shows_a_case_id_with_a_bidi_override_visibly(tmp_path):
    """The triage page of a case named ``c\\u202e``: no override reaches the page, in its table or attributes."""
    doc = triage_json()
    rid = "c\u202e"
    doc["cases"][2]["case"] = rid
    doc["order"] = [rid, "b", "a"]
    doc["review"] = ["b", rid]
    (tmp_path / "triage.json").write_text(json.dumps(doc))
    text = build_triage_page(tmp_path, n_cases=0, viewer=False).read_text()
    assert "\u202e" not in text
    assert 'data-case="c[U+202E]"' in text and '<td class="l"><bdi>c[U+202E]</bdi></td>' in text  # isolated: review 61


# ------------------------------------------- 4. a constant map with NaN voxels: NaN drawn as the map's one value
def _decoded(volume: dict) -> np.ndarray:
    import base64
    import gzip

    import nibabel as nib

    img = nib.Nifti1Image.from_bytes(gzip.decompress(base64.b64decode(volume["base64"])))
    return np.asarray(img.get_fdata())


def test_viewer_does_not_draw_nan_voxels_of_a_constant_map_as_its_value():
    """Found by hostile review 60: a map of 0.5 nats with NaN voxels (no value: outside the model's field of view) is
    a constant map; its NaN voxels were quantised to the lowest value, 0.5, above the threshold 0, so the viewer
    coloured them as 0.5 nats, under "constant map: every voxel is 0.5 nats". They are now transparent (below the
    threshold) and the legend speaks of the voxels with a value."""
    from monai_unc.report.viewer import case_viewer, viewer_block

    seg = np.zeros((12, 12, 12), np.int64)
    seg[3:9, 3:9, 3:9] = 1
    u = np.full(seg.shape, 0.5)
    u[:, :, 6:] = np.nan
    data = case_viewer("const", seg, u, measure="predictive_entropy")
    v = next(v for v in data["volumes"] if v["role"] == "uncertainty")
    values = _decoded(v)
    crop = tuple(slice(a, b) for a, b in data["crop"])
    nan = np.isnan(u[crop])
    assert nan.any() and (~nan).any()
    assert np.allclose(values[~nan], 0.5, atol=1e-6) and (values[~nan] >= v["threshold"]).all()
    assert (values[nan] < v["threshold"]).all()
    html = str(viewer_block(0, data))
    assert "constant map: every voxel with a value is 0.5 nats" in html


# ------------------------------------------- 5. the calibration coverage of the risk-controlled threshold as 1.000
def test_risk_control_note_never_writes_a_calibration_coverage_below_one_as_one():
    """Found by hostile review 60: 1999 of 2000 calibration cases accepted (one without a defined score, referred) was
    written "calibration coverage 1.000", every calibration case accepted, beside "1999 of 2000 accepted". The
    coverage is a share with its counts, as the held-out cases' is: ``99.95% (1999 of 2000)``."""
    from monai_unc.evaluation import CohortState, EvaluationConfig, summarize
    from monai_unc.report.html import render_html

    rng = np.random.default_rng(0)
    rows = [{"case": f"case_{i:05d}", "dice": 0.95, "measure": "predictive_entropy",
             "predictive_entropy_fg_mean": None if i == 0 else float(rng.random())} for i in range(2000)]
    state = CohortState(num_classes=2, n_fine_bins=240, rows=rows)
    summary = summarize(state, EvaluationConfig(budget=0.1, target_risk=0.2))
    assert summary["risk_control"]["calibration"]["coverage"] == 0.9995
    page = render_html(summary, state.sorted_rows(), [], [])
    assert "1999 of 2000 accepted (calibration coverage 99.95% (1999 of 2000)," in page
    assert "coverage 1.000" not in page


# ------------------------------------------------------------- 6. an AUROC below 1 written as a perfect 1.000
def test_ood_auroc_below_one_never_reads_as_a_perfect_separation():
    """Found by hostile review 60: an OoD AUROC of 0.9996 (one shifted case of 2500 pairs ranked below an
    in-distribution one) was written ``1.000`` on the card, a perfect separation; so was a case's error AUROC in the
    table. As a non-zero value never reads 0, an AUROC below 1 never reads 1: ``0.9996``."""
    from monai_unc.evaluation import CohortState, EvaluationConfig, summarize
    from monai_unc.report.html import render_html

    rows = [{"case": f"c{i:02d}", "dice": 0.9, "measure": "predictive_entropy", "shift": "none" if i % 2 else "noise",
             "predictive_entropy_fg_mean": 0.1 * i, "error_auroc": 0.99996 if i == 3 else 0.8} for i in range(10)]
    state = CohortState(num_classes=2, n_fine_bins=240, rows=rows)
    summary = summarize(state, EvaluationConfig(budget=0.1))
    summary["ood"] = {"auroc": 0.9996}  # as evaluate --shifts writes it
    page = render_html(summary, state.sorted_rows(), [], [])
    assert '<div class="v">0.9996</div><div class="k">OoD AUROC</div>' in page
    row = re.search(r'data-case="c03">(.*?)</tr>', page).group(1)
    assert "<td>0.99996</td>" in row and "1.000" not in row


# -------------------------------------------- 7. the viewer's numbers: a CT window in exponent notation, rounded
def test_viewer_colorbar_writes_a_ct_window_in_whole_units():
    """Found by hostile review 60: the image colorbar of a CT (window -1024 .. 3071 HU) read ``-1.02e+03`` and
    ``3.07e+03``: exponent notation a reader of intensities does not expect, and -1024 shown as -1020. Values from
    1000 on are written whole; smaller ones keep three significant digits without an exponent."""
    from monai_unc.report.viewer import _fmt, case_viewer, viewer_block

    seg = np.zeros((12, 12, 12), np.int64)
    seg[3:9, 3:9, 3:9] = 1
    image = np.full(seg.shape, -1024.0)
    image[2:10, 2:10, 2:10] = 3071.0
    data = case_viewer("ct", seg, np.linspace(0, 1, seg.size).reshape(seg.shape), image)
    html = str(viewer_block(0, data))
    ticks = re.findall(r'<span class="mu-cbar-ticks"><span>([^<]*)</span><span>([^<]*)</span>', html)
    assert ticks[0] == ("-1024", "3071")
    assert (_fmt(0.5), _fmt(0.60231), _fmt(1.5e-5), _fmt(0.0)) == ("0.5", "0.602", "0.000015", "0")


def test_viewer_threshold_text_reads_the_same_after_the_slider_moves(tmp_path):
    """The slider's text, written by viewer.js when it moves, read ``0.500`` where the page wrote ``0.5`` (and
    ``1.23e+3`` for ``1234``): viewer.js writes it as viewer.py does."""
    import html as html_module

    import pytest

    from tests.report.test_viewer import _chromium, _open_offline
    from tests.report.test_viewer_readability import viewer_probe_page

    exe = _chromium()
    probe = r"""
(function () {
  function probe() {
    var slider = document.querySelector('[data-control="threshold"]'), out = [];
    [0.5, 0.60231, 0.000015].forEach(function (v) {
      slider.min = "0"; slider.max = "1"; slider.step = "any"; slider.value = String(v);
      slider.dispatchEvent(new Event("input"));
      out.push(document.querySelector('output[data-show="threshold"]').textContent);
    });
    document.body.setAttribute("data-probe", JSON.stringify(out));
  }
  function wait() { if (document.body.getAttribute("data-viewer-ready")) { probe(); } else { setTimeout(wait, 50); } }
  wait();
})();
"""
    page = viewer_probe_page(tmp_path, probe)
    dom, _, _ = _open_offline(exe, page, tmp_path, "slider")
    found = re.search(r'data-probe="([^"]*)"', dom)
    if found is None:
        pytest.fail(f"the viewer did not start: {re.search(r'<body([^>]*)>', dom).group(1)}")
    assert json.loads(html_module.unescape(found.group(1))) == ["0.5", "0.602", "0.000015"]


# ----------------------------------------- 8. the notebook viewer coloured the classes unlike the pages' viewer
def test_notebook_view_colours_each_class_as_the_pages_do(tmp_path):
    """Found by hostile review 60: ``notebook.view`` ("the same viewer" as the pages, docs/report.md) drew the
    prediction with the continuous ``winter`` ramp: label 1 was not the pages' gold, and labels 7 and 8 of a
    many-class model took nearly one colour. It now draws each label value in its colour of the pages
    (``palette.class_colors``), the background and absent values transparent."""
    import nibabel as nib
    import pytest

    pytest.importorskip("ipyniivue")
    from monai_unc.report.notebook import view
    from monai_unc.report.palette import class_colors

    seg = np.zeros((6, 7, 8), np.int16)
    seg[1:3, 1:3, 1:3], seg[3:5, 3:5, 3:5], seg[0, 0, 0] = 1, 8, 7
    path = tmp_path / "c1_seg.nii.gz"
    nib.save(nib.Nifti1Image(seg, np.eye(4)), path)
    lut = view(prediction=path).volumes[0].colormap_label
    assert lut is not None and lut.min == 0 and lut.max == 8
    rgba = np.asarray(lut.lut).reshape(-1, 4)
    colors = class_colors([1, 7, 8])
    for k in (1, 7, 8):
        assert rgba[k].tolist() == [int(colors[k][i:i + 2], 16) for i in (1, 3, 5)] + [255]
    assert rgba[[0, 2, 3, 4, 5, 6], 3].tolist() == [0] * 6


# ------------------------------------------ 9. a long table's scrolling box cannot be reached from the keyboard
def _scroll_boxes(page: str) -> list[str]:
    return re.findall(r'<div class="(?:scroll|wide)"[^>]*>', page)


def test_scrolling_table_boxes_are_focusable_and_named(tmp_path):
    """Found by hostile review 60: the triage table of a large cohort scrolls inside a box (``.scroll``, 520 px high)
    that holds no link or control, so a keyboard reader could not focus it and never saw the cases below the first
    twenty or so (axe: scrollable-region-focusable); the monitor's tables and the region table likewise. Every such
    box is focusable and named: ``tabindex="0" role="region" aria-label=...``."""
    from monai_unc.evaluation import CohortState, EvaluationConfig, summarize
    from monai_unc.monitoring import VerifyResult
    from monai_unc.report.html import render_html
    from monai_unc.report.monitor import build_monitor_page
    from tests.report.test_monitor_hostile_numbers import _groups, _rows

    rows = [{"case": f"c{i:03d}", "dice": 0.9, "measure": "predictive_entropy", "predictive_entropy_fg_mean": i / 100}
            for i in range(100)]
    state = CohortState(num_classes=2, n_fine_bins=240, rows=rows)
    report = render_html(summarize(state, EvaluationConfig(budget=0.1)), state.sorted_rows(), [], [])
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "triage.json").write_text(json.dumps(triage_json()))
    triage = build_triage_page(tmp_path / "t", n_cases=0, viewer=False).read_text()
    monitor = build_monitor_page(_groups(_rows(30, {3})), [], VerifyResult(True, 0, ""), tmp_path / "m.html")
    for page in (report, triage, monitor.read_text()):
        boxes = _scroll_boxes(page)
        assert boxes
        for box in boxes:
            assert 'tabindex="0"' in box and 'role="region"' in box and re.search(r'aria-label="[^"]+"', box), box


# --------------------------------------------- 10. the static uncertainty heatmap's colour bar without its unit
def test_case_figure_names_the_unit_of_its_uncertainty_heatmap():
    """Found by hostile review 60: the case figure's uncertainty column and its colour bar (0 .. 1.1) were titled
    "mutual information" with no unit, where the viewer beside it says "mutual information (nats)". A measure in nats
    says so; one without a unit (``one_minus_max_prob``) stays as it was."""
    from monai_unc.report.plots import plot_case_overlay

    seg = np.zeros((8, 8, 8), np.int64)
    seg[2:6, 2:6, 2:6] = 1
    u = np.random.default_rng(0).random(seg.shape)
    for measure, title in (("mutual_information", "mutual information (nats)"),
                           ("predictive_entropy", "predictive entropy (nats)"),
                           ("one_minus_max_prob", "one minus max prob")):
        fig = plot_case_overlay("c", seg, seg, u, axes=(2,), measure=measure)
        assert fig.axes[2].get_title() == title
