"""The reliability diagram's title shows the metric functions' ECE (one ECE): it equals ``ece`` / ``all_label_ece`` /
``uce`` / ``classwise_ece`` and the weighted gap the plot computed itself before (written out here)."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import torch

import monai_unc.report.reliability as reliability
from monai_unc.metrics.calibration import (
    ConfidenceHistogram,
    all_label_ece,
    classwise_ece,
    ece,
    reliability_curve,
    uce,
)
from monai_unc.report.reliability import plot_reliability_diagram


def old_gap(curve):
    """report/reliability.py's ``_gap`` before the plot called the metric functions."""
    w = np.where(curve.kept, curve.weights, 0.0)
    g = np.where(curve.kept, np.abs(curve.frequency - curve.confidence), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w * g).sum(-1) / w.sum(-1)


@pytest.fixture(scope="module")
def hist():
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(3, 3, 10, 9, 8, generator=g)
    probs = torch.softmax(logits, 1)
    labels = torch.randint(0, 3, (3, 10, 9, 8), generator=g)
    return ConfidenceHistogram(3, per_case=True).update(probs, labels)


@pytest.mark.parametrize(
    "kind, fn, name",
    [("top", ece, "ECE"), ("all_label", all_label_ece, "all-label ECE"), ("uncertainty", uce, "UCE")],
)
@pytest.mark.parametrize("min_bin_count", [0, 40])
def test_title_is_the_metric_value(hist, kind, fn, name, min_bin_count):
    value = fn(hist, n_bins=10, min_bin_count=min_bin_count)
    old = float(old_gap(reliability_curve(hist, kind=kind, n_bins=10, min_bin_count=min_bin_count)))
    assert value == pytest.approx(old, abs=1e-12)  # the numbers did not change
    fig = plot_reliability_diagram(hist, kind=kind, n_bins=10, min_bin_count=min_bin_count)
    assert fig.axes[0].get_title().startswith(f"{name} {value:.4f} (10 bins")


def test_classwise_title_is_the_mean_of_the_per_class_values(hist):
    per_class = classwise_ece(hist, n_bins=15, per_class=True)
    np.testing.assert_allclose(per_class, old_gap(reliability_curve(hist, kind="classwise")), atol=1e-12)
    fig = plot_reliability_diagram(hist, kind="classwise")
    assert fig.axes[0].get_title().startswith(f"classwise ECE {np.nanmean(per_class):.4f}")


def test_the_plot_calls_the_metric_function(hist, monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return 0.123456

    monkeypatch.setattr(reliability, "ece", spy)
    fig = plot_reliability_diagram(hist, kind="top", n_bins=12, min_bin_count=3)
    assert fig.axes[0].get_title().startswith("ECE 0.1235")
    assert calls == [{"kind": "top", "n_bins": 12, "min_bin_count": 3}]


def test_old_keywords_x_and_labels_warn_and_draw_the_same_diagram():
    """``plot_reliability_diagram(probs, target)`` takes the names of ``reliability_curve``; ``x`` and ``labels``
    still work for one release, with a DeprecationWarning."""
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(2 * torch.randn(2, 3, 6, 5, 4, generator=g), 1)
    target = torch.randint(0, 3, (2, 6, 5, 4), generator=g)
    assert list(inspect.signature(plot_reliability_diagram).parameters)[:2] == ["probs", "target"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = plot_reliability_diagram(probs=probs, target=target, n_bins=8, show_counts=False)
    with pytest.warns(DeprecationWarning, match="argument '(x|labels)' is deprecated, use '(probs|target)'") as rec:
        old = plot_reliability_diagram(x=probs, labels=target, n_bins=8, show_counts=False)
    assert len(rec) == 2 and rec[0].filename == __file__
    assert old.axes[0].get_title() == new.axes[0].get_title()
    for a, b in zip(old.axes[0].patches, new.axes[0].patches):
        assert (a.get_x(), a.get_y(), a.get_height()) == (b.get_x(), b.get_y(), b.get_height())
    with pytest.raises(ValueError, match="target .* is required with probabilities"):
        plot_reliability_diagram(probs)
    with pytest.raises(ValueError, match="target must be None"):
        plot_reliability_diagram(ConfidenceHistogram(3).update(probs, target), target)


def _tick_texts(fig):
    """The tick label texts of the voxel-count panel after drawing ``fig`` as the report does."""
    from monai_unc.report.plots import save_png

    save_png(fig)  # the report draws with text.parse_math off
    fig.canvas.draw()
    ax = fig.axes[1]
    assert ax.get_yscale() == "log"
    return [t.get_text() for t in ax.get_yticklabels()] + [t.get_text() for t in ax.get_yticklabels(minor=True)]


def test_count_panel_tick_labels_are_plain_powers_of_ten():
    """Issue 40 item 4: the log axis read "^{7}}$" in report.html; its labels are plain "10⁶" now."""
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(4 * torch.randn(1, 2, 120, 100, 90, generator=g), 1)  # about 10^6 voxels
    labels = torch.randint(0, 2, (1, 120, 100, 90), generator=g)
    fig = plot_reliability_diagram(ConfidenceHistogram(2).update(probs, labels), kind="top", n_bins=10)
    texts = [t for t in _tick_texts(fig) if t]
    assert texts, "the count panel has no tick labels"
    assert not any("$" in t or "^{" in t or "\\" in t or "{" in t for t in texts), texts
    assert all(t.startswith(("10", "1")) or "\u00d710" in t for t in texts), texts
    assert any(t in ("10\u2075", "10\u2076") for t in texts), texts


def test_plain_power_of_matplotlib_labels():
    assert reliability._plain_power("$\\mathdefault{10^{7}}$") == "10\u2077"
    assert reliability._plain_power("$\\mathdefault{10^{-12}}$") == "10\u207b\u00b9\u00b2"
    assert reliability._plain_power("$\\mathdefault{3\\times10^{2}}$") == "3\u00d710\u00b2"
    assert reliability._plain_power("") == ""
