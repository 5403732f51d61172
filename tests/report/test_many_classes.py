"""Figures and the viewer of a model with a hundred classes and more (a whole-body CT model, 105 classes): every class
has a colour of its own, the legends name the classes shown and stay readable, labels above 255 stay apart in the
viewer, and the classwise reliability diagram names each curve's class (found by hostile testing)."""

from __future__ import annotations

import base64
import gzip

import matplotlib
import nibabel as nib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from monai_unc.report.palette import (  # noqa: E402
    LABEL_COLORS,
    MAX_DISTINCT_COLORS,
    class_colors,
    distinct_colors,
)
from monai_unc.report.plots import LEGEND_CLASSES, plot_case_overlay  # noqa: E402
from monai_unc.report.reliability import LEGEND_CURVES, plot_reliability_diagram  # noqa: E402
from monai_unc.report.viewer import case_viewer  # noqa: E402

C = 105
NAMES = ["background"] + [f"organ_{c}" for c in range(1, C)]


def _lab(hexes):
    """CIELAB (D65) of ``#rrggbb`` colours, written out (the CIE 1976 formulas)."""
    rgb = np.array([[int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)] for h in hexes])
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = lin @ np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                          [0.0193339, 0.1191920, 0.9503041]]).T / [0.95047, 1.0, 1.08883]
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)


def _whole_body():
    """104 organs, each a 4 x 4 block through slices 6..9 of a 48 x 48 x 16 volume."""
    seg = np.zeros((48, 48, 16), np.int64)
    for c in range(1, C):
        i = c - 1
        seg[(i % 12) * 4:(i % 12) * 4 + 4, (i // 12) * 4:(i // 12) * 4 + 4, 6:10] = c
    return seg, np.random.default_rng(0).random(seg.shape)


def test_palette_gives_every_class_its_own_colour():
    colors = distinct_colors(C - 1)
    assert len(set(colors)) == C - 1 and tuple(colors[:12]) == LABEL_COLORS
    assert distinct_colors(20) == colors[:20]  # a class keeps its colour whatever the number of classes
    lab = _lab(colors)
    d = np.linalg.norm(lab[:, None] - lab[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    assert d.min() > 10  # CIE76: about 2.3 is just noticeable; 5 cycled colours gave 0
    assert np.linalg.norm(lab[1:] - lab[:-1], axis=1).min() > 15  # neighbouring labels far apart
    white = distinct_colors(C, "white")
    assert len(set(white)) == C and white[:2] == ["#1f77b4", "#ff7f0e"]
    assert _lab(white)[:, 0].max() < 75  # readable on a white plot
    assert len(set(distinct_colors(MAX_DISTINCT_COLORS))) == MAX_DISTINCT_COLORS
    with pytest.raises(ValueError, match="n must be"):
        distinct_colors(MAX_DISTINCT_COLORS + 1)
    with pytest.raises(ValueError, match="background"):
        distinct_colors(3, "black")
    # by value while the values are small (the same colour in every case), by rank for a sparse atlas
    assert class_colors([1, 13, 97]) == {1: colors[0], 13: colors[12], 97: colors[96]}
    assert len(set(class_colors([255, 300]).values())) == 2
    sparse = class_colors([1, 5000, 70000])
    assert len(set(sparse.values())) == 3 and sparse[1] == LABEL_COLORS[0]
    with pytest.raises(ValueError, match="positive"):
        class_colors([0, 1])


def test_overlay_of_104_classes_names_the_shown_classes_in_their_own_colours():
    seg, u = _whole_body()
    fig = plot_case_overlay("c0", seg, seg, u, axes=(2,), class_names=NAMES)
    fig.canvas.draw()
    ax = fig.axes[1]
    sets = ax.collections
    contour_colors = [matplotlib.colors.to_hex(cs.get_edgecolor()[0]) for cs in sets]
    # the organs on the slice that do not fill it: every one contoured, each in its own colour (by label value)
    assert len(sets) == C - 1 and len(set(contour_colors)) == C - 1
    assert contour_colors == [class_colors(range(1, C))[c] for c in range(1, C)]
    leg = ax.get_legend()
    texts = [t.get_text() for t in leg.get_texts()]
    assert len(texts) == LEGEND_CLASSES and texts[-1] == f"+{C - 1 - (LEGEND_CLASSES - 1)} more classes"
    assert all(t in NAMES for t in texts[:-1])
    handles = leg.legend_handles
    assert [matplotlib.colors.to_hex(h.get_color()) for h in handles[:-1]] == [
        class_colors(range(1, C))[NAMES.index(t)] for t in texts[:-1]]
    box, fig_box = leg.get_window_extent(), fig.bbox
    assert box.y0 >= fig_box.y0 and box.y1 <= fig_box.y1 and box.height < 0.5 * ax.bbox.height
    # a slice with three classes: the legend names those three, not every class of the model
    few = np.zeros_like(seg)
    few[4:10, 4:10, 5:9], few[20:30, 20:30, 5:9], few[30:40, 5:12, 5:9] = 3, 40, 104
    few[0, 0, 0] = 7  # a class of the case away from the shown slice
    fig = plot_case_overlay("c1", few, few, u, axes=(2,), class_names=NAMES)
    leg = fig.axes[1].get_legend()
    assert [t.get_text() for t in leg.get_texts()] == ["organ_3", "organ_40", "organ_104"]
    assert [matplotlib.colors.to_hex(h.get_color()) for h in leg.legend_handles] == [
        class_colors(range(1, C))[c] for c in (3, 40, 104)]


def _decode(volume):
    img = nib.Nifti1Image.from_bytes(gzip.decompress(base64.b64decode(volume["base64"])))
    return np.asarray(img.dataobj)


def test_viewer_colours_every_class_and_keeps_labels_above_255_apart():
    seg, u = _whole_body()
    data = case_viewer("c", seg, u, class_names=NAMES)
    pred = next(v for v in data["volumes"] if v["role"] == "prediction")
    lut = pred["colormap_label"]
    colours = list(zip(lut["R"], lut["G"], lut["B"]))[1:]
    assert len(colours) == C - 1 and len(set(colours)) == C - 1  # 12 cycled colours gave organ 1 = 13 = 97
    assert [lab["color"] for lab in data["labels"]] == [class_colors(range(1, C))[c] for c in range(1, C)]
    # labels 255 and 300: two legend entries with their true values, two display indices, two colours
    seg300 = np.zeros((8, 8, 8), np.int64)
    seg300[1:3, 1:3, 1:3] = 255
    seg300[4:6, 4:6, 4:6] = 300
    data = case_viewer("c300", seg300, np.random.default_rng(1).random((8, 8, 8)),
                       class_names=[f"n{k}" for k in range(301)])
    assert [(lab["value"], lab["name"]) for lab in data["labels"]] == [(255, "n255"), (300, "n300")]
    pred = next(v for v in data["volumes"] if v["role"] == "prediction")
    shown = _decode(pred)
    box = tuple(slice(a, b) for a, b in data["crop"])
    np.testing.assert_array_equal(shown, np.select([seg300[box] == 255, seg300[box] == 300], [1, 2], 0))
    lut = pred["colormap_label"]
    assert lut["I"] == [0, 1, 2] and pred["cal_max"] == 2.0
    assert ["#{:02x}{:02x}{:02x}".format(*rgb) for rgb in zip(lut["R"], lut["G"], lut["B"])][1:] == [
        lab["color"] for lab in data["labels"]]
    assert data["labels"][0]["color"] != data["labels"][1]["color"]
    # more than 255 labels drawn: a uint16 display volume, every label its own index
    many = np.arange(1, 8 * 8 * 8 + 1, dtype=np.int64).reshape(8, 8, 8) * 1000
    data = case_viewer("cmany", many, np.random.default_rng(2).random((8, 8, 8)))
    pred = next(v for v in data["volumes"] if v["role"] == "prediction")
    shown = _decode(pred)
    assert shown.dtype == np.uint16 and len(np.unique(shown)) == 512 and len(data["labels"]) == 512
    assert len({lab["color"] for lab in data["labels"]}) == 512
    with pytest.raises(ValueError, match="integer labels"):
        case_viewer("c", seg300 + 0.5, np.zeros((8, 8, 8)))


def _classwise_probs():
    rng = np.random.default_rng(0)
    p = torch.softmax(torch.from_numpy(rng.normal(size=(1, C, 20, 20, 10)).astype(np.float32) * 3), 1)
    return p, torch.from_numpy(rng.integers(0, C, size=(1, 20, 20, 10)))


def test_classwise_diagram_needs_one_name_per_class_and_keeps_many_curves_readable():
    p, y = _classwise_probs()
    with pytest.raises(ValueError, match="class_names must name each of the 105 classes.*got 104"):
        plot_reliability_diagram(p, y, kind="classwise", show_counts=False, class_names=NAMES[1:])  # 1-indexed
    fig = plot_reliability_diagram(p, y, kind="classwise", show_counts=False, class_names=NAMES)
    ax = fig.axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_label() != "perfect calibration" and ln.get_xydata().size]
    assert len(lines) == C  # one curve per class
    named = [ln for ln in lines if not ln.get_label().startswith("_")]
    grey = [ln for ln in lines if ln.get_label().startswith("_")]
    assert len(named) == LEGEND_CURVES - 1 and len(grey) == C - len(named)
    assert len({ln.get_color() for ln in named}) == len(named)  # the named curves: each its own colour
    assert {ln.get_color() for ln in grey} == {"0.72"}
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts[0] == "perfect calibration" and texts[-1] == f"{C - len(named)} other classes (smaller ECE)"
    from monai_unc.metrics.calibration import ConfidenceHistogram, classwise_ece

    per_class = np.asarray(classwise_ece(ConfidenceHistogram(C).update(p, y), n_bins=15, per_class=True))
    worst = sorted(np.argsort(-np.nan_to_num(per_class, nan=-np.inf), kind="stable")[:LEGEND_CURVES - 1])
    assert texts[1:-1] == [NAMES[c] for c in worst]  # the worst calibrated classes are named
    # a few classes: every curve named, in matplotlib's first colours
    p3 = torch.softmax(torch.randn(1, 3, 10, 10, 4, generator=torch.Generator().manual_seed(0)), 1)
    y3 = torch.randint(0, 3, (1, 10, 10, 4), generator=torch.Generator().manual_seed(1))
    fig = plot_reliability_diagram(p3, y3, kind="classwise", show_counts=False, class_names=["bg", "a", "b"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["perfect calibration", "bg", "a", "b"]
    assert [ln.get_color() for ln in ax.get_lines()[1:]] == ["#1f77b4", "#ff7f0e", "#2ca02c"]
    with pytest.raises(ValueError, match="class_names"):
        plot_reliability_diagram(p3, y3, kind="classwise", show_counts=False, class_names=["a", "b"])
