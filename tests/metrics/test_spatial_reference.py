"""BUC, BA-ECE and SPACE (Zeevi et al. Sec. 3) against brute-force references (review 67).

The references here share no code with the implementation, nor with the scipy references of ``test_spatial.py``:
boundaries by visiting every voxel's face neighbours, distances by the minimum over every (voxel, boundary voxel)
pair, the Gaussian of SPACE as explicit weights over a reflected copy. Small random cases are frozen in
``data/spatial_reference.json`` by ``data/make_spatial_reference.py`` (the same brute force, run once).
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from monai_unc.metrics.spatial import (
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    spatial_calibration_error,
)

FUNCTIONS = (boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error)


def _square_case():
    """A 2D case: a target square, a prediction shifted by one column, a map in [0, 1]."""
    rng = np.random.default_rng(3)
    target = np.zeros((9, 10), dtype=np.int64)
    target[2:7, 3:7] = 1
    pred = np.roll(target, 1, axis=1)
    return rng.random(target.shape), pred, target


@pytest.mark.parametrize("fn", FUNCTIONS)
@pytest.mark.parametrize("axis", [0, 2])
@pytest.mark.parametrize("identical", [False, True])
def test_an_axis_of_one_voxel_changes_no_metric(fn, axis, identical):
    """A 2D case stored as a 3D volume of one slice (``(1, H, W)`` or ``(H, W, 1)``, a slice of a NIfTI volume of
    thick slices) scores as the 2D case, whatever the slice thickness: no distance runs along that axis.

    Found by review 67: the thickness entered BUC's default width (at least ``max(spacing)``: 5 mm around a 0.5 mm
    grid) and the BA-ECE weights (``1 / (mean d + mean(spacing) / 2)``)."""
    u, p, t = _square_case()
    if identical:
        p = t.copy()  # HD95 0: BUC's default width is the floor of one grid step
    in_plane = (0.5, 0.8)
    thick = 5.0
    expand = (lambda a: a[None]) if axis == 0 else (lambda a: a[..., None])
    spacing3 = (thick, *in_plane) if axis == 0 else (*in_plane, thick)
    flat = fn(u, p, t, spacing=in_plane)
    slab = fn(expand(u), expand(p), expand(t), spacing=spacing3)
    assert np.isfinite(flat).all()
    np.testing.assert_allclose(slab, flat, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------ frozen references

DATA = Path(__file__).parent / "data"
REFERENCE = json.loads((DATA / "spatial_reference.json").read_text())
CASES = {c["name"]: c for c in REFERENCE["cases"]}
KEYS = {"buc": boundary_uncertainty_concentration, "ba_ece": boundary_aware_ece, "space": spatial_calibration_error}


def _arrays(case):
    return (np.asarray(case["uncertainty"], dtype=np.float64), np.asarray(case["pred"], dtype=np.int64),
            np.asarray(case["target"], dtype=np.int64))


def _options(key, case):
    o = case["options"]
    if key == "buc":
        return {"width": o.get("width")}
    if key == "ba_ece":
        return {"n_bands": o.get("n_bands", 10), "max_distance": o.get("max_distance")}
    return {"sigma": o.get("sigma", 2.0)}


def _generator():
    spec = importlib.util.spec_from_file_location("make_spatial_reference", DATA / "make_spatial_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_data_file_holds_what_the_generator_makes():
    """The frozen file was made by its script: the same cases, and the brute force gives the same values again on the
    cheap ones (the whole file takes about a minute to make)."""
    gen = _generator()
    made = gen.cases()
    assert [c["name"] for c in made] == list(CASES)
    for case in made:
        frozen = CASES[case["name"]]
        assert {k: frozen[k] for k in case} == json.loads(json.dumps(case))
    for name in ("constant map", "single voxel", "empty reference"):
        assert gen.expected(CASES[name]) == pytest.approx(CASES[name]["expected"], abs=1e-15)


@pytest.mark.parametrize("backend", ["auto", "scipy"])
@pytest.mark.parametrize("name", list(CASES))
def test_each_case_equals_the_brute_force(name, backend):
    """2D and 3D, binary and three labels, anisotropic (0.5 x 1 x 3 mm), the options, and the degenerate cases: empty
    prediction or reference, all foreground, a constant map, one voxel, every voxel on the boundary, one thick slice.
    Undefined values (the brute force's None) are NaN with a ``UserWarning``."""
    case = CASES[name]
    u, p, t = _arrays(case)
    sp = tuple(case["spacing"])
    for key, fn in KEYS.items():
        kw = _options(key, case)
        if key != "space":
            kw["backend"] = backend
        want = case["expected"][key]
        if want is None:
            with pytest.warns(UserWarning, match="undefined"):
                got = fn(u, p, t, spacing=sp, **kw)
            assert got.shape == (1,) and np.isnan(got).all(), key
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a defined value comes without a warning
            got = fn(u, p, t, spacing=sp, **kw)
        # the edt package's float32 distances move the BA-ECE weights by ~1e-7 relative for non-integer spacings
        tol = 1e-7 if key == "ba_ece" and backend == "auto" else 1e-12
        assert got.shape == (1,)
        assert float(got[0]) == pytest.approx(want, abs=tol), key


def test_a_batch_with_one_spacing_row_per_case_equals_the_cases_alone():
    """Batch > 1 as torch tensors, with a spacing row per case: each case gets its own row."""
    names = ("3d binary, 0.5 x 1 x 3 mm", "3d same shape, other spacing")
    arrays = [_arrays(CASES[n]) for n in names]
    u, p, t = (torch.as_tensor(np.stack([a[i] for a in arrays])) for i in range(3))
    rows = [CASES[n]["spacing"] for n in names]
    for key, fn in KEYS.items():
        got = fn(u[:, None], p[:, None], t[:, None], spacing=rows)
        assert isinstance(got, torch.Tensor) and got.shape == (2,)
        want = [CASES[n]["expected"][key] for n in names]
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-7 if key == "ba_ece" else 1e-12)


@pytest.mark.parametrize("key", list(KEYS))
def test_a_non_finite_uncertainty_is_refused_naming_it(key):
    u, p, t = _arrays(CASES["2d binary"])
    u[3, 4] = np.nan
    with pytest.raises(ValueError, match="uncertainty"):
        KEYS[key](u, p, t)
