"""Hostile review 60 of the lesion-wise metrics (docs/lesions.md): claims of the documentation and behaviour checked
against independent references (brute force written from the definitions)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from monai_unc.metrics.boundary import hd95
from monai_unc.metrics.lesions import ndsc_retention_curve, shifts_retention_fractions, surface_hd95

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lesions.md"


def _cube_and_strays() -> tuple[np.ndarray, np.ndarray]:
    """A 10-voxel cube, and the cube with 12 stray voxels (two short lines) about 19 mm away."""
    t = np.zeros((40, 14, 14), bool)
    t[2:12, 2:12, 2:12] = True
    p = t.copy()
    i = np.arange(12)
    p[30 + i % 8, 1 + (i // 8) * 2, 1] = True
    return t, p


def test_surface_hd95_and_edge_hd95_can_differ_by_many_voxels():
    """docs/lesions.md said the area-weighted surface HD95 and the edge-voxel ``hd95`` "differ by up to a voxel".
    They weigh the stray voxels differently (their surface area is more than 5 % of the total, their edge voxels
    less than 5 %): 19 mm against 0 mm."""
    t, p = _cube_and_strays()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        surface = surface_hd95(t, p)
        edge = float(np.asarray(hd95(p.astype(np.int64), t.astype(np.int64))).ravel()[0])
    assert surface == 19.0 and edge == 0.0
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    assert "differ by up to a voxel" not in text
    assert "not interchangeable" in text


def _retention_brute(p, t, u, fractions, r=0.001):
    """The Shifts retention curve written out: voxels sorted by a stable argsort of the uncertainty, the first
    ``int(N f)`` keep the prediction and the rest take the truth, the nDSC of each such mask from its counts."""
    order = np.argsort(u, kind="stable")
    p, t = p[order], t[order]
    n, n_true = t.size, int(t.sum())
    k = 1.0 if n_true in (0, n) else (1 - r) * n_true / (r * (n - n_true))
    out = []
    for f in fractions:
        pos = int(n * f)
        cur = np.concatenate([p[:pos], t[pos:]])
        tp, fp, fn = int((cur & t).sum()), int((cur & ~t).sum()), int((~cur & t).sum())
        den = k * fp + 2 * tp + fn
        out.append(1.0 if den == 0 else 2 * tp / den)
    return np.array(out)


@pytest.mark.parametrize("seed", range(4))
def test_ndsc_retention_curve_with_a_mask_and_many_ties_equals_the_written_out_curve(seed):
    """The curve counts the retained voxels of prediction or truth by value (ties cut in raster order); with a
    brain mask and only a few distinct uncertainty values every cut falls inside a tie."""
    rng = np.random.default_rng(seed)
    fractions = shifts_retention_fractions(40)
    for _ in range(40):
        n = int(rng.integers(1, 150))
        p = rng.uniform(size=n) < rng.uniform()
        t = rng.uniform(size=n) < rng.uniform(0, 0.5)
        u = rng.integers(0, int(rng.integers(1, 5)), n).astype(np.float32)
        m = rng.uniform(size=n) < 0.7
        if not m.any():
            continue
        _, got = ndsc_retention_curve(p, t, u, fractions, mask=m)
        np.testing.assert_allclose(got, _retention_brute(p[m], t[m], u[m], fractions), rtol=1e-12, atol=0)


def test_only_imperfectly_matched_lesions_cost_a_surface_distance(monkeypatch):
    """docs/lesions.md said 10^5 one-voxel lesions "take seconds"; that holds where each is found exactly or missed
    (no surface distance), not where each is matched imperfectly (its own surfaces: 10^5 of them took about a
    minute). The cost model the docs now state: one target surface per imperfect lesion, one prediction surface per
    distinct set of matched components, none for an exact or a missed lesion."""
    from monai_unc.metrics import lesions as module

    calls = []
    original = module._surface_side

    def counted(mask, spacing):
        calls.append(mask.shape)
        return original(mask, spacing)

    monkeypatch.setattr(module, "_surface_side", counted)
    t = np.zeros((30, 30, 10), bool)
    p = np.zeros_like(t)
    for x in (2, 8, 14):  # found exactly
        t[x:x + 2, 2:4, 2:4] = p[x:x + 2, 2:4, 2:4] = True
    for x in (2, 8):  # missed
        t[x:x + 2, 20:22, 6:8] = True
    for x in (20, 26):  # found with one voxel more
        t[x:x + 2, 10:12, 2:4] = p[x:x + 2, 10:12, 2:4] = True
        p[x, 12, 2] = True
    r = module.brats_lesion_metrics(p, t, dilation=0, min_volume=0)
    assert (r.n_tp, r.n_fn, r.n_fp) == (5, 2, 0)
    assert len(calls) == 4  # two imperfect lesions: their target and prediction surfaces
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    assert "volume take seconds." not in text and "matched imperfectly" in text


def test_the_library_note_does_not_call_scipy_namespaces_removed_that_still_exist():
    """docs/lesions.md said ``scipy.ndimage.filters`` / ``.morphology`` were removed in SciPy 1.14; they are
    deprecated namespaces that SciPy keeps until 2.0 (present in every 1.x the package runs on)."""
    import importlib

    import scipy

    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    assert "removed in SciPy 1.14" not in text
    if int(scipy.__version__.split(".")[0]) < 2:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            assert hasattr(importlib.import_module("scipy.ndimage.filters"), "correlate")
            assert hasattr(importlib.import_module("scipy.ndimage.morphology"), "distance_transform_edt")
