"""The "Conformal masks" section of the evaluation report (the product's report_section, drawn by the report)."""

from __future__ import annotations

import html as _html
import json
import re
import warnings

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.product import Overlay
from monai_unc.products import ConformalMasks
from monai_unc.report.html import build_report, format_value, product_section


def _drawn(block):
    """The section as report.html draws it: the product's ReportSection, rendered (every string escaped)."""
    return product_section(ConformalMasks.report_section(block), "conformal")


def _evaluate(root, name, data, *products):
    config = EvaluationConfig(budget=0.2, spatial=False, products=list(products))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], root / name, config)
    return root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("report_conformal")
    data = write_toy_cohort(root / "data", n_cases=6, shape=(12, 12, 12))
    return {
        "root": root,
        "plain": _evaluate(root, "plain", data),
        "crc": _evaluate(root, "crc", data, ConformalMasks({"outer": 0.3, "inner": 0.4})),
        "high": _evaluate(root, "high", data, ConformalMasks({"outer": 0.2}, delta=0.3, family="margin")),
    }


@pytest.fixture(scope="module")
def pages(runs):
    """The report pages of the three runs, each built once (``n_cases=1``; the tests only read them), and every
    ``plot_case_overlay`` call of each page as ``(case, {side: read-only copy of the mask} or None)``: the spy only
    records, the figures drawn are the real ones."""
    import monai_unc.report.html as page

    calls = {"crc": [], "plain": [], "high": []}
    building = []  # the name of the page being built
    real = page.plot_case_overlay

    def frozen(mask):
        mask = np.array(mask)
        mask.setflags(write=False)
        return mask

    def spy(case_id, *args, **kwargs):
        calls[building[-1]].append((case_id, {o.label.split()[0]: frozen(o.mask) for o in kwargs.get("overlays") or ()}
                                    or None))
        return real(case_id, *args, **kwargs)

    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(page, "plot_case_overlay", spy)
        for name in ("crc", "plain", "high"):
            building.append(name)
            out[name] = build_report(runs[name], n_cases=1).read_text()
    return {"text": out, "calls": {k: tuple(v) for k, v in calls.items()}}


def _section(text: str) -> str:
    m = re.search(r'<section id="conformal"[^>]*>(.*?)</section>', text, re.S)
    assert m is not None
    return m.group(1)


def _rows(section: str, side: str) -> dict[str, dict[str, object]]:
    table = re.search(rf'<table[^>]*id="conformal-{side}"[^>]*>(.*?)</table>', section, re.S)
    assert table is not None
    out = {}
    for attrs, body in re.findall(r"<tr ([^>]*)>(.*?)</tr>", table.group(1), re.S):
        a = dict(re.findall(r'([\w-]+)="([^"]*)"', attrs))
        out[_html.unescape(a["data-task"])] = {
            "lambda_hat": float(a["data-lambda-hat"]), "calibration_loss": float(a["data-calibration-loss"]),
            "cells": [_html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]}
    return out


def test_expectation_numbers_on_the_page_equal_summary(runs, pages):
    text = pages["text"]["crc"]
    block = json.loads((runs["crc"] / "summary.json").read_text())["conformal"]
    section = _section(text)
    assert "Conformal masks" in section and "probability threshold" in section
    assert "Mask: p &gt;= 1 - lambda_hat." in section and "Mask: p &gt; lambda_hat." in section
    assert set(block["sides"]) == {"outer", "inner"}
    for side, b in block["sides"].items():
        rows = _rows(section, side)
        assert set(rows) == set(b["per_task"]) and rows
        assert _html.escape(b["guarantee"], quote=False) in section
        for name, t in b["per_task"].items():
            r = rows[name]
            assert r["lambda_hat"] == t["lambda_hat"] and r["calibration_loss"] == t["calibration_loss"]
            assert r["cells"] == [name, format_value(b["target"], 4), format_value(t["calibration_loss"], 4),
                                  format_value(t["lambda_hat"], 6)]
    assert "calibration fnr" in section and "calibration fp" in section
    assert "above tol" not in section  # expectation control: no high-probability column


def test_high_probability_shows_the_share_above_tol_against_alpha(runs, pages):
    text = pages["text"]["high"]
    b = json.loads((runs["high"] / "summary.json").read_text())["conformal"]["sides"]["outer"]
    assert b["method"] == "high_probability"
    section = _section(text)
    assert "mm margin" in section and 'id="conformal-inner"' not in section
    assert "Mask: the predicted mask dilated by lambda_hat mm." in section
    rows = _rows(section, "outer")
    for name, t in b["per_task"].items():
        assert rows[name]["cells"] == [name, format_value(b["target"], 4), format_value(t["calibration_loss"], 4),
                                       f"{format_value(t['calibration_above_tol'], 4)} vs "
                                       f"{format_value(b['alpha'], 4)}", format_value(t["lambda_hat"], 6)]
        assert rows[name]["lambda_hat"] == t["lambda_hat"]


def test_section_absent_without_conformal(pages):
    text = pages["text"]["plain"]
    assert 'id="conformal"' not in text and "Conformal masks" not in text


def test_hostile_class_names_stay_escaped(runs):
    block = json.loads((runs["crc"] / "summary.json").read_text())["conformal"]
    payload = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    side = block["sides"]["outer"]
    side["per_task"] = {payload: next(iter(side["per_task"].values()))}
    side["guarantee"] = payload
    html = _drawn(block)
    assert "<script>" not in html and "<img" not in html
    rows = _rows(str(html), "outer")
    assert list(rows) == [payload] and rows[payload]["cells"][0] == payload
    names = ["background", payload]  # class names from the evaluation go after the class index
    named = {**json.loads((runs["crc"] / "summary.json").read_text())["conformal"], "class_names": names}
    html = _drawn(named)
    assert "<script>" not in html and "<img" not in html
    rows = _rows(str(html), "inner")
    assert rows["0"]["cells"][0] == "0 (background)" and rows["1"]["cells"][0] == f"1 ({payload})"


def test_case_figures_draw_the_rule_masks(runs, pages):
    """The case figures of the crc page draw the conformal rule's masks (the module's one build of each page, its
    ``plot_case_overlay`` calls recorded); those of the plain page none."""
    import monai_unc.report.html as page
    from monai_unc.evaluation.conformal import ConformalRuleFile
    from monai_unc.io import CaseFiles, load_case

    calls = pages["calls"]["crc"]
    assert len(calls) == 2 and "conformal outer (white dashed)" in pages["text"]["crc"]
    doc = ConformalRuleFile.load(runs["crc"] / "conformal_rule.json")
    state, _ = page.load_evaluation(runs["crc"])
    for cid, masks in calls:
        assert masks is not None and set(masks) == {"outer", "inner"}
        case = load_case(CaseFiles.from_json(state.files[cid]), state.num_classes)
        for side, rule in doc.rules.items():  # the rule's apply on the case's probabilities, foreground union
            expected = rule.apply(case.probs, pred=case.seg, spacing=case.spacing)[1:].any(axis=0)
            assert np.array_equal(masks[side], expected)
    calls = pages["calls"]["plain"]
    assert len(calls) == 2 and all(m is None for _, m in calls)


def test_overlay_draws_conformal_contours_with_a_legend():
    from monai_unc.report.plots import plot_case_overlay

    seg = np.zeros((10, 10, 10), dtype=np.int64)
    seg[3:7, 3:7, 3:7] = 1
    outer, inner = np.zeros(seg.shape, bool), np.zeros(seg.shape, bool)
    outer[2:8, 2:8, 2:8] = True
    inner[4:6, 4:6, 4:6] = True
    u = np.random.default_rng(0).random(seg.shape) * 0.1
    u[4:6, 4:6, 4:6] += 1.0  # the slices of highest uncertainty cut the inner mask

    def contours_and_legend(**kw):
        fig = plot_case_overlay("c", seg, seg, u, **kw)
        ax = fig.axes[1]  # row 0, prediction contour
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        return len(ax.collections), legend

    n0, legend0 = contours_and_legend()
    drawn = [Overlay("outer mask (conformal)", outer, "#ffffff", "dashed"),
             Overlay("inner mask (conformal)", inner, "#00ff7f", "dotted")]
    n1, legend1 = contours_and_legend(overlays=drawn)
    assert n1 == n0 + 2
    assert legend1 == legend0 + ["outer mask (conformal)", "inner mask (conformal)"]
    with pytest.raises(ValueError, match="shape"):
        plot_case_overlay("c", seg, seg, u, overlays=[Overlay("outer", outer[:5])])


def test_the_products_overlays_are_its_mask_files(tmp_path):
    import nibabel as nib

    outer = np.zeros((2, 6, 6, 6), np.uint8)
    outer[0, 1:3, 1:3, 1:3] = 1
    outer[1, 3:5, 3:5, 3:5] = 1  # two foreground classes (channels last in the file): the figure draws their union
    nib.save(nib.Nifti1Image(np.moveaxis(outer, 0, -1), np.eye(4)), tmp_path / "a_outer.nii.gz")
    drawn = ConformalMasks.case_overlays(tmp_path, "a")
    assert [(o.label, o.color, o.linestyle) for o in drawn] == [("outer mask (conformal)", "#ffffff", "dashed")]
    assert np.array_equal(drawn[0].mask, outer.astype(bool).any(axis=0))
    assert ConformalMasks.case_overlays(tmp_path, "b") == []
