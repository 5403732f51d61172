"""The HTML QC report and its plots: self-contained page, triage table, figures, headless-Chromium rendering."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, read_shifts, run_evaluate
from monai_unc.report.html import build_report, reliability_figure
from monai_unc.report.plots import (
    plot_case_overlay,
    plot_referral_curve,
    plot_uncertainty_histograms,
    save_png,
    slice_of_highest_uncertainty,
)
from tests._paths import ROOT

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    data = write_toy_cohort(root / "data", n_cases=6, shape=(16, 16, 16))
    config = EvaluationConfig(budget=0.2, shifts=read_shifts(data["shifts"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state, summary, paths = run_evaluate(data["labels"], data["predictions"], root / "eval", config,
                                             images=data["images"])
    html = build_report(root / "eval", n_cases=1)
    return {"html": html, "text": html.read_text(), "summary": summary, "state": state, "root": root, "data": data}


def _embedded(text: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)]


def test_page_is_self_contained(report):
    text = report["text"]
    assert text.startswith("<!doctype html>") and text.rstrip().endswith("</html>")
    # nothing is loaded from elsewhere: every src/href is a data URI, or one of the viewer's scripts beside the page
    refs = re.findall(r'(?:src|href)="([^"]+)"', text)
    scripts = ["assets/niivue.umd.js", "assets/viewer.js"]
    assert refs and all(r.startswith("data:") or r in scripts for r in refs)
    assert all((report["html"].parent / s).is_file() for s in scripts if s in refs)
    assert "http://" not in text and "https://" not in text
    images = _embedded(text)
    assert len(images) == 4 + 2  # reliability, referral, histograms, shifts + 1 most uncertain + 1 most certain
    assert all(img.startswith(PNG_MAGIC) for img in images)
    saved = sorted((report["html"].parent / "figures").glob("*.png"))
    assert {p.read_bytes() for p in saved} == set(images)  # the PNGs on disk are the embedded ones
    csv_link = re.search(r'href="data:text/csv;base64,([^"]+)"', text)
    assert base64.b64decode(csv_link.group(1)).decode() == (report["root"] / "eval" / "metrics.csv").read_text()


def test_the_page_says_what_made_it(report):
    import html as html_lib

    import monai
    import torch

    import monai_unc

    text = html_lib.unescape(report["text"])
    assert "generated " in text and f"by monai-unc {monai_unc.__version__}" in text
    assert (f"evaluated by monai-unc {monai_unc.__version__} (monai {monai.__version__}, torch {torch.__version__})"
            in text)
    assert f"predictions: {os.path.abspath(report['data']['predictions'])}" in text
    assert f"labels: {os.path.abspath(report['data']['labels'])}" in text


def test_triage_table_follows_the_summary(report):
    text, summary = report["text"], report["summary"]
    table = re.search(r'<table id="triage-table">(.*?)</table>', text, re.S).group(1)
    rows = re.findall(r'<tr class="([^"]*)" data-case="([^"]+)">(.*?)</tr>', table, re.S)
    assert [r[1] for r in rows] == summary["triage"]["order"]
    n_ref = math.ceil(0.2 * 6)
    assert [r[1] for r in rows if "referred" in r[0]] == summary["triage"]["order"][:n_ref]
    assert sum(">budget: flagged<" in r[2] for r in rows) == n_ref
    scores = [float(re.findall(r"<td>([0-9.]+)</td>", r[2])[1]) for r in rows]
    assert scores == sorted(scores, reverse=True)
    failed = {c for c in summary["failures"]["cases"]}
    assert {r[1] for r in rows if "failed" in r[0]} == failed
    kept = summary["triage"]["dice_kept"]  # the rows marked kept (no tie at the cut: the referral curve's value)
    assert kept == pytest.approx(summary["triage"]["dice_retained"]) and not summary["triage"]["tied"]
    assert f"the mean Dice of the <b>{6 - n_ref}</b> retained cases is <b>{kept:.3f}" in text


def test_budget_override_recomputes_the_triage(report, tmp_path):
    from monai_unc.evaluation import load_evaluation, resummarize

    summary = resummarize(*load_evaluation(report["root"] / "eval"), budget=0.5)
    html = build_report(report["root"] / "eval", tmp_path / "r", n_cases=0, summary=summary)
    text = html.read_text()
    assert text.count(">budget: flagged<") == 3
    assert len(_embedded(text)) == 4 and not (tmp_path / "r" / "figures" / "case_toy000.png").exists()
    assert "budget of <b>50% (3 of 6 cases)</b>" in text
    with pytest.warns(DeprecationWarning, match="build_report") as said:  # the old way: the same page
        old = build_report(report["root"] / "eval", tmp_path / "old", budget=0.5, n_cases=0).read_text()
    # the deprecation names the caller of build_report, not a line of the package
    named = [os.path.basename(w.filename) for w in said if w.category is DeprecationWarning]
    assert named == [os.path.basename(__file__)]
    assert old.count(">budget: flagged<") == 3 and "budget of <b>50% (3 of 6 cases)</b>" in old


def _refuse_every_binding(monkeypatch, function, refuse) -> set[tuple[str, str]]:
    """Patch ``refuse`` over every name a loaded monai_unc module binds ``function`` to (a patch of one module's name
    misses the modules that imported it with ``from ... import``); the ``(module, name)`` pairs patched."""
    bound = [(module, name) for module in list(sys.modules.values())
             if getattr(module, "__name__", "").startswith("monai_unc")
             for name, value in list(vars(module).items()) if value is function]
    for module, name in bound:
        monkeypatch.setattr(module, name, refuse)
    return {(module.__name__, name) for module, name in bound}


def test_the_report_reads_the_summary_evaluate_wrote(report, tmp_path, monkeypatch):
    """Without another budget the page shows ``summary.json`` as written: the cohort summary is never recomputed."""
    import monai_unc.evaluation.cohort as cohort

    def refuse(*args, **kwargs):
        raise AssertionError("the report recomputed the cohort summary")

    # every binding of the summary (earlier versions patched evaluation.cohort's only, which the page reaches through
    # resummarize alone: a page calling another module's summarize passed)
    assert _refuse_every_binding(monkeypatch, cohort.summarize, refuse) >= {(cohort.__name__, "summarize")}
    text = build_report(report["root"] / "eval", tmp_path / "r", n_cases=2).read_text()
    saved = json.loads((report["root"] / "eval" / "summary.json").read_text())
    assert f"the mean Dice of the <b>{6 - saved['triage']['n_referred']}</b> retained cases is " \
           f"<b>{saved['triage']['dice_kept']:.3f}" in text


def test_report_without_probabilities_has_no_reliability_diagram(report, tmp_path):
    data = report["data"]
    pred = tmp_path / "segs"
    pred.mkdir()
    for f in data["predictions"].glob("*_seg.nii.gz"):
        shutil.copy(f, pred / f.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state, summary, _ = run_evaluate(data["labels"], pred, tmp_path / "e", EvaluationConfig(num_classes=2),
                                         measures=None, uncertainty=data["predictions"])
    assert state.histogram is None and "calibration" not in summary
    assert reliability_figure(state, 15, 0) is None
    text = build_report(tmp_path / "e", n_cases=1).read_text()
    assert 'id="fig-reliability"' not in text and 'id="fig-referral"' in text and "pooled ECE" not in text


def test_chromium_renders_the_report(report, tmp_path):
    """Headless Chromium loads the page: the triage table is there and every embedded image decodes."""
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if exe is None:
        pytest.skip("Chromium is not installed (CI installs the Debian package 'chromium')")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    url = report["html"].resolve().as_uri()
    shot = tmp_path / "shot.png"
    # one run takes the screenshot and dumps the DOM (both once the virtual time budget has run out): the page, and
    # its viewer, load once
    r = subprocess.run([exe, *flags, "--window-size=1280,2200", "--virtual-time-budget=5000", "--dump-dom",
                        f"--screenshot={shot}", url], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("RGB"), dtype=np.float64)
    assert img.shape[:2] == (2200, 1280)
    assert img.std() > 20  # not a blank page
    assert (np.abs(img - [35, 50, 74]).sum(-1) < 10).mean() > 0.01  # the dark header band is drawn
    dom = r.stdout
    assert 'id="triage-table"' in dom and len(re.findall(r'<tr[^>]*data-case="', dom)) == 6  # the table's rows
    for key in ("reliability", "referral", "histograms", "shifts"):
        assert f'id="fig-{key}"' in dom
    total = int(re.search(r'data-images-total="(\d+)"', dom).group(1))
    loaded = int(re.search(r'data-images-loaded="(\d+)"', dom).group(1))
    assert total == loaded == 6


# ------------------------------------------------------------------------------------------------ plots
def test_slice_of_highest_uncertainty_brute_force():
    rng = np.random.default_rng(0)
    u = rng.random((7, 8, 9))
    for axis in range(3):
        sums = [np.take(u, k, axis=axis).sum() for k in range(u.shape[axis])]
        assert slice_of_highest_uncertainty(u, axis) == int(np.argmax(sums))
    mask = np.zeros(u.shape, bool)
    mask[2:4, 1:7, 1:8] = True
    u[0] += 10.0  # the most uncertain slice lies outside the mask
    assert slice_of_highest_uncertainty(u, 0) == 0
    assert slice_of_highest_uncertainty(u, 0, mask=mask) == 2 + int(np.argmax([u[2].sum(), u[3].sum()]))
    assert slice_of_highest_uncertainty(u, 0, mask=np.zeros(u.shape, bool)) == 0


def test_referral_plot_draws_the_metric_values():
    from monai_unc.metrics.selective import referral_curve

    rng = np.random.default_rng(1)
    dice = rng.uniform(0.5, 1.0, 9)
    score = 1 - dice + rng.normal(0, 0.1, 9)
    fig = plot_referral_curve(score, dice, budget=0.3)
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    ours = referral_curve(score, dice)
    np.testing.assert_allclose(lines["by uncertainty"].get_ydata(), ours.value)
    np.testing.assert_allclose(lines["oracle (lowest Dice first)"].get_ydata(), referral_curve(1 - dice, dice).value)
    budget = next(v for k, v in lines.items() if k.startswith("budget 30%"))
    assert budget.get_ydata()[0] == pytest.approx(referral_curve(score, dice, taus=[0.3]).value[0])
    assert save_png(fig).startswith(PNG_MAGIC)


def test_histogram_plot_counts():
    score = np.array([0.1, 0.2, 0.25, 0.8, 0.9])
    dice = np.array([0.9, 0.95, 0.5, 0.6, 0.85])
    fig = plot_uncertainty_histograms(score, dice, 0.8, bins=4)
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert len(heights) == 8
    np.testing.assert_array_equal(heights[:4], [2, 0, 0, 1])  # good cases: 0.1, 0.2 | 0.9
    np.testing.assert_array_equal(heights[4:], [1, 0, 0, 1])  # failed cases: 0.25 | 0.8


def test_histogram_plot_counts_failures_as_the_summary_does():
    """Found by hostile testing: the histogram split the cases by ``dice >= failure_dice`` in float64, so a Dice of
    exactly 0.9 (18 / 20, recorded as the float32 0.899999976) was drawn as failed at ``--failure-dice 0.9`` while
    summary.json's failures and the triage table (``dice_failed``) count it as not failed."""
    from monai_unc.evaluation import dice_failed

    dice = np.array([float(np.float32(18 / 20)), 1.0, float(np.float32(0.7)), 0.5])
    assert dice_failed(dice, 0.9).tolist() == [False, False, True, True]
    fig = plot_uncertainty_histograms(np.array([0.1, 0.2, 0.3, 0.4]), dice, 0.9, bins=2)
    heights = [p.get_height() for p in fig.axes[0].patches]
    np.testing.assert_array_equal(heights, [2, 0, 0, 2])  # good: 0.1, 0.2 | failed: 0.3, 0.4
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["good: Dice >= 0.9 (n=2)", "failed: Dice < 0.9 (n=2)"]
    # at 0.7 the float32 Dice 0.699999988 is 0.7 as recorded: not failed either
    assert [t.get_text() for t in plot_uncertainty_histograms(np.array([0.1, 0.2, 0.3, 0.4]), dice, 0.7, bins=2)
            .axes[0].get_legend().get_texts()] == ["good: Dice >= 0.7 (n=3)", "failed: Dice < 0.7 (n=1)"]


def test_scores_by_shift_draws_a_nan_label_as_the_empty_in_distribution_label():
    """A NaN label (pandas' empty cell) is the empty label, in-distribution, as the OoD AUROC reads it (found by
    hostile testing: it was drawn as a shift named "nan")."""
    from monai_unc.report.plots import plot_scores_by_shift

    fig = plot_scores_by_shift(np.array([0.1, 0.2, 0.7]), [float("nan"), "", "noise"], ["", "none"], "entropy")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["(none)", "noise"]


def test_scores_by_shift_says_its_colours_mean_the_shift_not_failure(report):
    """Found by the newcomer review: the shift plot drew in-distribution cases blue and shifted ones red with no
    legend and a caption silent on colour, beside the histograms where blue / red are good / failed cases: in the
    demo report the two bias-field cases (Dice 0.84, good) were red dots, read as failures. The plot now has its own
    colours and a legend, and the report's caption says what they mean."""
    from matplotlib.collections import PathCollection

    from monai_unc.metrics import IID_SHIFTS
    from monai_unc.report.plots import plot_scores_by_shift

    fig = plot_scores_by_shift(np.array([0.1, 0.2, 0.7, 0.3]), ["none", "none", "noise", "bias"], IID_SHIFTS, "s")
    ax = fig.axes[0]
    assert ax.get_legend() is not None
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["in-distribution", "shifted", "median"]
    shown = {tuple(np.round(c.get_facecolor()[0][:3], 3)) for c in ax.collections if isinstance(c, PathCollection)}
    hist = plot_uncertainty_histograms(np.array([0.1, 0.2, 0.3]), np.array([0.9, 0.5, 0.95]), 0.8, bins=2)
    good_failed = {tuple(np.round(patch.get_facecolor()[:3], 3)) for patch in hist.axes[0].patches}
    assert len(shown) == 2 and not shown & good_failed
    caption = re.search(r"<b>Uncertainty by shift\.</b>([^<]*)<", report["text"]).group(1)
    assert "grey: in-distribution" in caption and "orange: shifted" in caption


def test_overlay_figure(tmp_path):
    rng = np.random.default_rng(2)
    label = np.zeros((12, 10, 8), np.int64)
    label[3:9, 2:8, 2:6] = 1
    label[5:7, 4:6, 3:5] = 2
    seg = label.copy()
    seg[3, 2:8, 2:6] = 0  # a missed slab
    seg[10, 1, 1] = 1  # a false positive
    u = rng.random(label.shape) * 0.1 + (seg != label)
    fig = plot_case_overlay("c1", seg, label, u, rng.random((1, 12, 10, 8)), (1.0, 2.0, 3.0), "mutual_information",
                            info={"Dice": "0.9"}, class_names=["bg", "organ", "lesion"])
    assert len(fig.axes) == 12 + 3  # 3 views x 4 panels + colorbars
    titles = [ax.get_title() for ax in fig.axes[:4]]
    assert titles == ["image", "prediction contour", "mutual information (nats)", "error map"]
    err = fig.axes[3].get_images()[-1].get_array()
    k = slice_of_highest_uncertainty(u, 2, mask=label > 0)
    ref = np.zeros(label.shape, int)
    ref[(seg == 0) & (label > 0)] = 2
    ref[(seg > 0) & (label == 0)] = 1
    np.testing.assert_array_equal(np.asarray(err), ref[:, :, k].T)
    legend = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert legend == ["organ", "lesion"]
    assert save_png(fig, tmp_path / "o.png") == (tmp_path / "o.png").read_bytes()


@pytest.mark.slow
def test_docs_example_runs(tmp_path, monkeypatch):
    """The python block of docs/report.md runs as-is."""
    text = (ROOT / "docs" / "report.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "docs/report.md", "exec"), {"__name__": "__docs__"})


def test_probability_only_predictions_the_report_reads_the_maps_evaluate_derived(report, tmp_path, monkeypatch):
    """Predictions with probabilities and no map files: evaluate writes the maps it derives (``maps/``, the case's
    geometry) and the report draws them from disk, with the map computation and the cohort summary patched to
    raise. A rerun resumes with the saved maps; a deleted map file makes its case be computed again."""
    import nibabel as nib

    import monai_unc.evaluation.case as case_module
    import monai_unc.evaluation.cohort as cohort_module
    import monai_unc.evaluation.rows as rows_module
    import monai_unc.evaluation.runner as runner_module
    from monai_unc.evaluation import derived_maps
    from monai_unc.io import load_case, match_cases

    data = report["data"]
    pred = tmp_path / "probs_only"
    pred.mkdir()
    for f in list(data["predictions"].glob("*_seg.nii.gz")) + list(data["predictions"].glob("*_probs.nii.gz")):
        shutil.copy(f, pred / f.name)
    ev = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], pred, ev, EvaluationConfig(budget=0.2), images=data["images"], progress=False)
    files = {f.case_id: f for f in match_cases(data["labels"], pred)}
    written = sorted(p.name for p in (ev / "maps").iterdir())
    assert written == sorted(f"{c}_{m}.nii.gz" for c in files for m in ("predictive_entropy", "one_minus_max_prob"))
    case = load_case(files["toy000"])
    for m, u in derived_maps(case).items():  # the same values as the evaluation computed, in the case's geometry
        img = nib.load(ev / "maps" / f"toy000_{m}.nii.gz")
        np.testing.assert_array_equal(np.asarray(img.dataobj, dtype=np.float32), u)
        np.testing.assert_allclose(img.affine, case.affine)

    def refuse(*args, **kwargs):
        raise AssertionError("the report computed what evaluate wrote")

    # every name a loaded monai_unc module binds the map computation to, whatever the name (earlier versions patched
    # four modules by name, one of them report.html, which holds none: raising=False patched nothing there)
    bound = _refuse_every_binding(monkeypatch, rows_module.derived_maps, refuse)
    assert bound >= {(m.__name__, "derived_maps") for m in (case_module, rows_module, runner_module)}
    summaries = _refuse_every_binding(monkeypatch, cohort_module.summarize, refuse)
    assert (cohort_module.__name__, "summarize") in summaries
    text = build_report(ev, tmp_path / "r", n_cases=2, images=data["images"]).read_text()
    first = json.loads((ev / "summary.json").read_text())["triage"]["order"][0]
    assert (tmp_path / "r" / "figures" / f"case_{first}.png").is_file()
    assert "predictive_entropy" in text
    monkeypatch.undo()
    (ev / "maps" / "toy001_predictive_entropy.nii.gz").unlink()
    calls = []
    original = runner_module.evaluate_case
    monkeypatch.setattr(runner_module, "evaluate_case", lambda *a, **k: calls.append(1) or original(*a, **k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], pred, ev, EvaluationConfig(budget=0.2), images=data["images"], progress=False)
    assert len(calls) == 1 and (ev / "maps" / "toy001_predictive_entropy.nii.gz").is_file()  # that case alone
