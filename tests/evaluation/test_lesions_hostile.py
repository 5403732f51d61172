"""Hostile cases of the lesion-wise product (:mod:`monai_unc.evaluation.lesions`): touching, split and merged
lesions, lesions on the volume border, anisotropic voxels (``min_volume`` in mm^3, not voxels) and several cases
merged, each against a brute force on ``scipy.ndimage.label`` written from the definitions (docs/lesions.md)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy import ndimage

from monai_unc.activation import TaskView
from monai_unc.evaluation.lesions import LesionState, lesion_case_state, summarize_lesions

FULL = ndimage.generate_binary_structure(3, 3)
OPTIONS = {"dilation": 1, "min_volume": 10.0, "iou": 0.25, "hd_penalty": 374.0, "r": 0.001, "failure_dice": 0.5,
           "rank_by": None}


def _brute(pred, target, u, spacing, dilation, min_volume):
    """Per predicted 26-connected component (raster order): volume (mm^3), centre (voxels), false positive, Dice,
    mean and max of ``u``; and the case's TP / FN / FP, from the definitions, one lesion at a time."""
    p_lab, n_p = ndimage.label(pred, FULL)
    grown = ndimage.binary_dilation(target, ndimage.generate_binary_structure(3, 2), iterations=dilation) \
        if dilation else target
    zone, n_g = ndimage.label(grown, FULL)
    matched = {k: sorted({int(j) for j in np.unique(p_lab[(zone == k) & pred])} - {0}) for k in range(1, n_g + 1)}
    gt_dice = {}
    for k, js in matched.items():
        les = target & (zone == k)
        union = np.isin(p_lab, js) if js else np.zeros_like(pred)
        gt_dice[k] = 2 * (les & union).sum() / (les.sum() + union.sum()) if js else 0.0
    voxel = float(np.prod(spacing))
    counted = {k for k in matched if (target & (zone == k)).sum() * voxel > min_volume}
    rows = []
    for j in range(1, n_p + 1):
        comp = p_lab == j
        hits = [k for k, js in matched.items() if j in js]
        rows.append({"volume_mm3": comp.sum() * voxel, "center": np.argwhere(comp).mean(0),
                     "false_positive": float(not hits), "dice": max([gt_dice[k] for k in hits], default=0.0),
                     "u_mean": u[comp].mean(), "u_max": u[comp].max()})
    tp = sum(1 for k in counted if matched[k])
    fp = sum(1 for r in rows if r["false_positive"])
    return rows, (tp, len(counted) - tp, fp)


def _scene():
    """Touching, split, merged, border and lone lesions in one 20x18x16 volume (reference and prediction)."""
    t = np.zeros((20, 18, 16), bool)
    p = np.zeros_like(t)
    t[0:3, 0:3, 0:3] = True  # on the corner of the volume
    p[0:2, 0:3, 0:3] = True
    t[5:9, 5:9, 5:9] = True  # one reference lesion ...
    p[5:9, 5:6, 5:9] = True  # ... split in two predicted ones
    p[5:9, 8:9, 5:9] = True
    t[12:14, 2:5, 2:5] = True  # two reference lesions one voxel apart: merged by the dilation ...
    t[15:17, 2:5, 2:5] = True
    p[12:17, 2:5, 2:5] = True  # ... and predicted as one
    t[2:4, 12:14, 12:14] = True  # two diagonally touching predicted voxels (26-connected: one lesion)
    p[2, 12, 12] = p[3, 13, 13] = True
    p[17:20, 14:18, 12:16] = True  # a false positive on the far border
    t[10, 14, 2] = True  # a one-voxel reference lesion, missed (below min_volume at 1 mm^3 per voxel)
    return p, t


@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (3.0, 1.0, 0.5), (0.5, 0.5, 5.0)])
@pytest.mark.parametrize("dilation", [0, 1, 3])
def test_case_state_equals_a_brute_force_on_scipy_label(spacing, dilation):
    p, t = _scene()
    u = np.random.default_rng(0).uniform(0, 1, p.shape)
    task = TaskView(None, p.astype(np.int64), t.astype(np.int64), 2, maps={"u": u}, spacing=spacing)
    case = SimpleNamespace(case_id="c", spacing=spacing, affine=None)
    a = lesion_case_state(case, [task], dict(OPTIONS, dilation=dilation), None, "u").arrays
    rows, (tp, fn, fp) = _brute(p, t, u, spacing, dilation, OPTIONS["min_volume"])
    assert a["lesion.1.lesion"].tolist() == list(range(1, len(rows) + 1))
    for f in ("volume_mm3", "false_positive", "dice"):
        np.testing.assert_allclose(a[f"lesion.1.{f}"], [r[f] for r in rows], rtol=1e-12, err_msg=f)
    np.testing.assert_allclose(np.stack([a[f"lesion.1.center_{d}"] for d in range(3)], 1),
                               [r["center"] for r in rows])
    # no affine: the world centre is the voxel centre times the spacing
    np.testing.assert_allclose(np.stack([a[f"lesion.1.center_mm_{d}"] for d in range(3)], 1),
                               [r["center"] * spacing for r in rows])
    np.testing.assert_allclose(a["lesion.1.score.u_mean"], [r["u_mean"] for r in rows])
    np.testing.assert_allclose(a["lesion.1.score.u_max"], [r["u_max"] for r in rows])
    assert (a["case.1.lesion_tp"][0], a["case.1.lesion_fn"][0], a["case.1.lesion_fp"][0]) == (tp, fn, fp)


def test_min_volume_is_in_cubic_millimetres_not_voxels():
    """A 2x2x2 reference lesion (8 voxels) is below ``min_volume=10`` at 1 mm^3 per voxel and counted at 1.5 mm^3."""
    t = np.zeros((10, 10, 10), np.int64)
    t[2:4, 2:4, 2:4] = 1
    p = np.zeros_like(t)
    case = SimpleNamespace(case_id="c", spacing=(1.0, 1.0, 1.0), affine=None)
    counts = {}
    for spacing in ((1.0, 1.0, 1.0), (1.5, 1.0, 1.0)):
        task = TaskView(None, p, t, 2, maps={}, spacing=spacing)
        a = lesion_case_state(case, [task], OPTIONS, None, None).arrays
        counts[spacing] = int(a["case.1.lesion_fn"][0])
    assert counts == {(1.0, 1.0, 1.0): 0, (1.5, 1.0, 1.0): 1}


def test_two_dimensional_cases_are_refused_by_name():
    task = TaskView(None, np.zeros((6, 6), np.int64), np.zeros((6, 6), np.int64), 2, maps={}, spacing=(1.0, 1.0))
    case = SimpleNamespace(case_id="c", spacing=(1.0, 1.0), affine=None)
    with pytest.raises(ValueError, match="3-D"):
        lesion_case_state(case, [task], OPTIONS, None, None)


def test_merged_cases_keep_their_lesions_apart_and_pool_the_counts():
    p, t = _scene()
    u = np.random.default_rng(1).uniform(0, 1, p.shape)
    states, expected = [], [0, 0, 0]
    for i, (pp, tt) in enumerate(((p, t), (t, p), (p, np.zeros_like(t)))):
        task = TaskView(None, pp.astype(np.int64), tt.astype(np.int64), 2, maps={"u": u}, spacing=(1.0, 1.0, 2.0))
        case = SimpleNamespace(case_id=f"c{i}", spacing=(1.0, 1.0, 2.0), affine=None)
        states.append(lesion_case_state(case, [task], OPTIONS, None, "u"))
        _, counts = _brute(pp, tt, u, (1.0, 1.0, 2.0), OPTIONS["dilation"], OPTIONS["min_volume"])
        expected = [e + c for e, c in zip(expected, counts)]
    merged = LesionState(states[0].state_dict())
    for s in states[1:]:
        merged.merge(LesionState(s.state_dict()))
    a = merged.arrays
    sizes = [s.arrays["lesion.1.lesion"].size for s in states]
    assert a["lesion.1.case_index"].tolist() == [float(i) for i, n in enumerate(sizes) for _ in range(n)]
    block = summarize_lesions(merged, ["c0", "c1", "c2"], OPTIONS)
    task = block["per_task"]["1"]
    assert [task["lesion_tp"], task["lesion_fn"], task["lesion_fp"]] == expected
    assert task["n_predicted_lesions"] == sum(sizes)
    # the listed lesions name their own case
    for les in block["lesions"]:
        i = int(les["case"][1:])
        assert les["lesion"] <= sizes[i]
