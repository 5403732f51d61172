"""Hostile review 54 of :mod:`monai_unc.report`: what the pages' builder let through, the viewer's and the figures'
inputs (each test failed before its fix).

- ``el("iframe", srcdoc=...)`` escaped the value, which the browser decodes and parses as a document: a payload in it
  ran (set the parent page's title in headless Chromium); ``<animate attributename="href" values="javascript:...">``
  inside an SVG link made the link run script, past :func:`~monai_unc.report.markup.check_url`. ``<object data=URL>``
  and ``<table background=URL>`` loaded from the network in headless Chromium (only ``href``, ``src`` and a few others
  were checked), and ``srcset`` was checked as one URL though it lists several.
- :func:`~monai_unc.report.viewer.case_viewer` refused ``budget_bytes=numpy.int64(...)``, took ``margin=-3`` (the crop
  then cut away the foreground: voxels 2..4 of the prediction out of a crop of 3..5), ``True`` or ``2.5``, and failed on
  an affine or a spacing of the wrong shape or a singular affine with an ``IndexError`` or nibabel's
  ``HeaderDataError`` naming no argument.
- :func:`~monai_unc.report.plots.slice_of_highest_uncertainty` chose the first slice holding a NaN voxel (its sum NaN,
  which ``argmax`` takes): slice 1 of sum 0 instead of slice 4 of sum 36.
- The score histograms took any ``bins``: :func:`~monai_unc.report.triage.plot_score_distribution` drew no calibration
  bar for ``bins=0`` and failed with an ``IndexError`` for ``-1``; both plots drew one bin for ``True`` and failed in
  numpy for ``2.5``.
- :func:`~monai_unc.report.plots.plot_case_overlay` (and the triage page's overlay) failed in numpy or matplotlib on a
  label, uncertainty or image of another shape than the prediction (``AxisError``, ``TypeError``), a spacing of two
  sizes for a volume (``IndexError``) or of a zero (``ZeroDivisionError``) and an axis 3 or -1, naming no argument.
- :func:`~monai_unc.report.html.build_report` took ``n_cases=-1`` (figures of every case but the least uncertain) and
  ``True`` (one case), which ``build_triage_page`` and ``--cases`` refuse.
- :func:`~monai_unc.report.plots.plot_referral_curve` drew ``budget=True`` as "budget 100%", refused 1.5 or NaN as
  "taus must be referral rates" (no argument of it), and drew a risk-control referral fraction of 1.5 as "refer 150%".
- :func:`~monai_unc.report.plots.plot_uncertainty_histograms` drew ``failure_dice=True`` as "failed: Dice < 1" (every
  case failed) and NaN as "good: Dice >= nan" (every case good); a text or None failed formatting the legend.
- :func:`~monai_unc.report.triage.plot_score_distribution` drew ``accepted=["yes", "no"]`` (or ``[0.5, 0.2]``) as two
  accepted cases, ``threshold=True`` as "accept <= 1", and parsed text scores as numbers.
- :func:`~monai_unc.report.plots.plot_uncertainty_histograms` and :func:`~monai_unc.report.plots.plot_scores_by_shift`
  parsed text scores (and Dice) as numbers, which the referral curve beside them refuses.
- :func:`~monai_unc.report.triage.build_triage_page` (``n_cases``) and :func:`~monai_unc.report.viewer.viewer_block`
  (``index``) refused numpy integers.
- The monitoring dashboard's charts labelled the last case of a stream of 12345 cases ``1.234e+04`` (12340).
"""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.report.html import build_report
from monai_unc.report.markup import el
from monai_unc.report.monitor import svg_chart
from monai_unc.report.plots import (
    plot_case_overlay,
    plot_referral_curve,
    plot_scores_by_shift,
    plot_uncertainty_histograms,
    slice_of_highest_uncertainty,
)
from monai_unc.report.triage import build_triage_page, plot_score_distribution
from monai_unc.report.viewer import case_viewer, viewer_block

PAYLOAD = "<script>parent.document.title='PWNED'</script>"


@pytest.mark.parametrize("make", [
    lambda: el("iframe", srcdoc=PAYLOAD),
    lambda: el("iframe", srcdoc_="x"),
    lambda: el("animate", attributename="href", values="javascript:document.title='PWNED'"),
    lambda: el("set", attributename="href", to="javascript:document.title='PWNED'"),
])
def test_attributes_and_elements_that_turn_escaped_text_into_script_are_refused(make):
    with pytest.raises(ValueError, match="srcdoc|sets another attribute"):
        make()


@pytest.mark.parametrize("tag, attribute", [("object", "data"), ("table", "background"), ("a", "ping"),
                                            ("blockquote", "cite"), ("object", "codebase")])
def test_every_attribute_the_browser_loads_is_checked_as_a_url(tag, attribute):
    with pytest.raises(ValueError, match=f"^{attribute} must be a relative file path"):
        el(tag, **{attribute: "https://example.org/x"})
    assert f'{attribute}="figures/x.png"' in el(tag, **{attribute: "figures/x.png"})


def test_srcset_is_refused():
    with pytest.raises(ValueError, match="lists URLs"):
        el("img", alt="x", src="a.png", srcset="a.png 1x, https://example.org/b.png 2x")


def _viewer_case():
    seg = np.zeros((8, 8, 8), np.int64)
    seg[2:5, 2:5, 2:5] = 1
    return seg, np.random.default_rng(0).random((8, 8, 8))


def test_case_viewer_takes_numpy_integers():
    seg, u = _viewer_case()
    data = case_viewer("c", seg, u, budget_bytes=np.int64(2**21), margin=np.int32(1))
    assert data["step"] == 1 and data["crop"] == [[0, 8]] * 3


@pytest.mark.parametrize("kwargs, name", [
    ({"margin": -3}, "margin"), ({"margin": True}, "margin"), ({"margin": 2.5}, "margin"),
    ({"budget_bytes": True}, "budget_bytes"), ({"budget_bytes": 0}, "budget_bytes"),
    ({"affine": np.eye(3)}, "affine"), ({"affine": np.diag([1.0, 1.0, 0.0, 1.0])}, "affine"),
    ({"affine": np.full((4, 4), np.nan)}, "affine"), ({"affine": [["a"] * 4] * 4}, "affine"),
    ({"spacing": (1.0, 1.0)}, "spacing"), ({"spacing": (0.0, 1.0, 1.0)}, "spacing"),
    ({"spacing": (np.nan, 1.0, 1.0)}, "spacing"),
])
def test_case_viewer_refuses_bad_geometry_and_sizes_naming_the_argument(kwargs, name):
    seg, u = _viewer_case()
    with pytest.raises(ValueError, match=f"^{name} must"):
        case_viewer("c", seg, u, **kwargs)


def test_a_2d_case_may_give_three_spacings():
    seg, u = _viewer_case()
    data = case_viewer("c", seg[..., 3], u[..., 3], spacing=(0.5, 2.0, 7.0))
    assert np.allclose(np.asarray(data["world_to_voxel"])[:, :3], np.diag([2.0, 0.5, 1.0]))


def test_a_nan_voxel_does_not_choose_its_slice():
    u = np.zeros((6, 6, 6))
    u[..., 4] = 1.0
    u[0, 0, 1] = np.nan
    # the reference: the slice sums with NaN voxels counted as 0
    want = int(np.argmax(np.where(np.isnan(u), 0.0, u).sum(axis=(0, 1))))
    assert want == 4
    assert slice_of_highest_uncertainty(u, 2) == want
    assert slice_of_highest_uncertainty(u, 2, mask=np.ones(u.shape, bool)) == want
    u[1, 1, 2], u[2, 2, 2] = np.inf, -np.inf  # a slice whose sum is undefined is not the hottest
    assert slice_of_highest_uncertainty(u, 2) == 4


@pytest.mark.parametrize("bins", [0, -1, True, 2.5, "4"])
@pytest.mark.parametrize("plot", [
    lambda bins: plot_uncertainty_histograms(np.array([0.1, 0.2, 0.3]), np.array([0.9, 0.2, 0.8]), 0.5, bins=bins),
    lambda bins: plot_score_distribution([0.1, 0.2, 0.3], [0.15], [True], 0.25, bins=bins),
])
def test_score_histograms_refuse_a_bin_count_that_is_not_a_positive_integer(plot, bins):
    with pytest.raises(ValueError, match="^bins must be a positive integer"):
        plot(bins)


def test_score_histograms_take_numpy_integers():
    fig = plot_score_distribution([0.1, 0.2, 0.3], [0.15], [True], 0.25, bins=np.int64(5))
    assert len(fig.axes[0].patches) >= 5
    fig = plot_uncertainty_histograms(np.array([0.1, 0.2, 0.3]), np.array([0.9, 0.2, 0.8]), 0.5, bins=np.int64(5))
    assert fig.axes[0].get_ylabel() == "cases"


@pytest.mark.parametrize("kwargs, name", [
    ({"label": np.zeros((8, 8))}, "label"), ({"uncertainty": np.zeros((8, 8, 7))}, "uncertainty"),
    ({"image": np.zeros((8, 8))}, "image"), ({"image": np.zeros((2, 8, 8, 7))}, "image"),
    ({"spacing": (1.0, 1.0)}, "spacing"), ({"spacing": (0.0, 1.0, 1.0)}, "spacing"),
    ({"spacing": (-1.0, 1.0, 1.0)}, "spacing"), ({"axes": (3,)}, "axes"), ({"axes": (-1,)}, "axes"),
    ({"axes": (True,)}, "axes"), ({"axes": ()}, "axes"), ({"seg": np.zeros(8, np.int64)}, "seg"),
])
def test_case_overlay_refuses_bad_shapes_spacing_and_axes_naming_the_argument(kwargs, name):
    seg, u = _viewer_case()
    args = {"case_id": "c", "seg": seg, "label": seg, "uncertainty": u, **kwargs}
    with pytest.raises(ValueError, match=f"^{name} must"):
        plot_case_overlay(**args)


def test_case_overlay_takes_numpy_axes_and_a_2d_case_with_three_spacings():
    seg, u = _viewer_case()
    fig = plot_case_overlay("c", seg, seg, u, spacing=(1.0, 1.0, 2.0), axes=(np.int64(2),), measure=None)
    assert fig.axes[0].get_ylabel().startswith("axial ") and fig.axes[2].get_title() == "None"
    fig = plot_case_overlay("c", seg[..., 3], seg[..., 3], u[..., 3], spacing=(1.0, 2.0, 5.0))
    assert fig.axes[0].get_images()[0].axes.get_aspect() == 2.0


@pytest.mark.parametrize("n_cases", [-1, True, 2.5, "2"])
def test_build_report_refuses_a_case_count_that_is_not_a_non_negative_integer(tmp_path, n_cases):
    with pytest.raises(ValueError, match="^n_cases must be a non-negative integer"):
        build_report(tmp_path / "eval", tmp_path / "out", n_cases=n_cases)
    assert not (tmp_path / "out").exists()  # refused before anything is written


SCORES, DICE = np.array([0.9, 0.1, 0.5, 0.2]), np.array([0.2, 0.9, 0.6, 0.8])
RC = {"feasible": True, "target_risk": 0.1, "delta": 0.1}


@pytest.mark.parametrize("kwargs, name", [
    ({"budget": True}, "budget"), ({"budget": 1.5}, "budget"), ({"budget": -0.1}, "budget"),
    ({"budget": float("nan")}, "budget"), ({"budget": "0.2"}, "budget"),
    ({"risk_control": {**RC, "referral_fraction": 1.5}}, "risk_control"),
    ({"risk_control": {**RC, "referral_fraction": float("nan")}}, "risk_control"),
    ({"risk_control": RC}, "risk_control"),
])
def test_referral_curve_refuses_a_fraction_outside_0_1_naming_it(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}.* must be a referral fraction in \\[0, 1\\]"):
        plot_referral_curve(SCORES, DICE, **kwargs)


def test_referral_curve_marks_numpy_and_edge_fractions():
    fig = plot_referral_curve(SCORES, DICE, budget=np.float32(0.25), risk_control={**RC, "referral_fraction": 1})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    # the reference: the mean Dice of the three least uncertain cases (0.9, 0.6, 0.8)
    assert any(t == f"budget 25%: Dice {np.mean([0.9, 0.6, 0.8]):.3f}" for t in labels), labels
    assert labels[-1].endswith("refer 100%")


@pytest.mark.parametrize("failure_dice", [True, float("nan"), 1.5, -0.1, "0.5", None])
def test_histograms_refuse_a_failure_dice_that_is_not_a_dice(failure_dice):
    with pytest.raises(ValueError, match="^failure_dice must be a Dice in \\[0, 1\\]"):
        plot_uncertainty_histograms(SCORES, DICE, failure_dice)


def test_histograms_count_the_failed_cases_as_the_summary_does():
    fig = plot_uncertainty_histograms(SCORES, DICE, np.float32(0.6))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["good: Dice >= 0.6 (n=3)", "failed: Dice < 0.6 (n=1)"]  # 0.6 recorded as float32 is not failed


@pytest.mark.parametrize("kwargs, error, name", [
    ({"accepted": ["yes", "no"]}, ValueError, "accepted"), ({"accepted": [0.5, 0.2]}, ValueError, "accepted"),
    ({"threshold": True}, ValueError, "threshold"), ({"threshold": float("nan")}, ValueError, "threshold"),
    ({"threshold": "0.25"}, ValueError, "threshold"), ({"threshold": None}, ValueError, "threshold"),
    ({"new_scores": ["0.15", "0.4"]}, TypeError, "new_scores"),
    ({"calibration_scores": ["0.1", "0.2"]}, TypeError, "calibration_scores"),
])
def test_score_distribution_refuses_decisions_thresholds_and_scores_that_are_not_theirs(kwargs, error, name):
    args = {"calibration_scores": [0.1, 0.2, 0.3], "new_scores": [0.15, 0.4], "accepted": [True, False],
            "threshold": 0.25, **kwargs}
    with pytest.raises(error, match=f"^{name} must"):
        plot_score_distribution(**args)


def test_score_distribution_draws_each_decision_where_it_is():
    fig = plot_score_distribution([0.1, 0.2, 0.3], [0.15, 0.4, None], np.array([True, False, False]), -np.inf)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "new: accept (n=1)" in labels and "new: review (n=1)" in labels  # the undefined score is not drawn
    assert not any(t.startswith("threshold") for t in labels)  # not certified: no line
    marks = {c.get_label(): c.get_offsets()[:, 0].tolist() for c in fig.axes[0].collections if c.get_label()}
    assert marks["new: accept (n=1)"] == [0.15] and marks["new: review (n=1)"] == [0.4]


@pytest.mark.parametrize("plot, name", [
    (lambda: plot_uncertainty_histograms(["0.1", "0.2"], [0.9, 0.1], 0.5), "scores"),
    (lambda: plot_uncertainty_histograms([0.1, 0.2], ["0.9", "0.1"], 0.5), "dice"),
    (lambda: plot_scores_by_shift(["0.1", "0.2"], ["a", "b"], ["none"], "s"), "scores"),
    (lambda: plot_scores_by_shift([0.1, 0.2j], ["a", "b"], ["none"], "s"), "scores"),
])
def test_score_plots_refuse_text_scores_as_the_referral_curve_does(plot, name):
    with pytest.raises(TypeError, match=f"^{name} must hold real numbers"):
        plot()


def test_viewer_block_and_the_triage_page_take_numpy_integers(tmp_path):
    seg, u = _viewer_case()
    assert 'id="viewer-3"' in viewer_block(np.int64(3), case_viewer("c", seg, u))
    with pytest.raises(ValueError, match="^index must be a non-negative integer"):
        viewer_block(True, case_viewer("c", seg, u))
    # the count passes its check: the missing triage.json is what is refused
    with pytest.raises(FileNotFoundError, match="no triage.json"):
        build_triage_page(tmp_path, n_cases=np.int64(2))
    with pytest.raises(ValueError, match="^n_cases must be a non-negative integer"):
        build_triage_page(tmp_path, n_cases=-1)


def test_chart_ticks_name_the_cases_they_stand_at():
    import re

    x = np.arange(1, 12346)
    svg = svg_chart("t", [("a", x, np.sin(x))])
    ticks = re.findall(r'text-anchor="middle">([^<]*)<', svg)[:5]
    assert ticks == ["1", "3087", "6173", "9259", "12345"]  # np.linspace(1, 12345, 5), whole numbers
