"""Review 68: PAvPU decides the patches whose mean lies within rounding of the threshold on exact sums, vectorised.

Until review 68 each such patch was summed as Python fractions, one patch at a time: seconds for a 64^3 checkerboard
at the threshold with window 2. The old decision is kept here as the brute-force reference; the new one must agree
with it exactly.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from monai_unc._utils import exceeds
from monai_unc.metrics import discrimination as D
from monai_unc.metrics import pavpu


def _old_patch_uncertain(u, w, threshold):
    """The decision of monai-unc before review 68: a rational sum per patch near the threshold (the reference)."""
    means = D._patch_means(u, w)
    out = means > threshold
    scale = max(abs(threshold), float(np.max(u)), -float(np.min(u)))
    near = np.abs(means - threshold) <= D._PATCH_MEAN_RTOL * scale
    if not near.any():
        return out
    n = tuple(s // k for s, k in zip(u.shape, w))
    patches = u[tuple(slice(0, m * k) for m, k in zip(n, w))].reshape([v for m, k in zip(n, w) for v in (m, k)])
    axes = tuple(range(1, 2 * len(w), 2))
    lo, hi = patches.min(axis=axes), patches.max(axis=axes)
    constant = near & (lo == hi)
    out[constant] = exceeds(lo[constant], threshold, inclusive=False)
    for idx in np.argwhere(near & ~constant):
        patch = u[tuple(slice(i * k, (i + 1) * k) for i, k in zip(idx, w))]
        exact = sum(Fraction(*v.as_integer_ratio()) for v in patch.ravel())
        out[tuple(idx)] = exact > Fraction(threshold) * patch.size
    return out


def _checker(shape, lo, hi, dtype=np.float64):
    parity = np.indices(shape).sum(0) % 2
    return np.where(parity == 1, hi, lo).astype(dtype), parity == 0


def _maps():
    rng = np.random.default_rng(68)
    yield "random 3D", rng.random((9, 10, 11)), rng.random((9, 10, 11)) < 0.3, 0.5
    tied = rng.integers(0, 5, (12, 12)) / 4.0  # many patches exactly at 0.5
    yield "tied 2D", tied, rng.random((12, 12)) < 0.5, 0.5
    yield "tied 3D float32", (rng.integers(0, 3, (8, 8, 8)) / 2.0).astype(np.float32), rng.random((8, 8, 8)) < 0.5, 0.5
    for lo, hi in ((0.0, 1.0), (0.1, 0.9), (0.3, 0.7), (0.2, 0.8)):
        u, e = _checker((8, 8, 8), lo, hi)
        yield f"checker {lo}/{hi}", u, e, 0.5
    u, e = _checker((8, 8, 8), 0.3, 0.7, np.float32)
    yield "checker float32", u, e, 0.5
    u, e = _checker((8, 8), 0.1, 0.2, np.float16)
    yield "checker float16", u, e, (float(u[0, 0]) + float(u[0, 1])) / 2  # exactly the mean of a pair
    u, e = _checker((6, 6, 6), 0.1, 0.9, np.longdouble)
    yield "checker longdouble", u, e, 0.5
    u, e = _checker((6, 6), 1e-320, 3e-320)  # subnormals
    yield "checker subnormal", u, e, 2e-320
    u = np.full((8, 8), 0.1)
    u[::3] = np.nextafter(0.1, 1)  # one ulp apart from the constant rows
    yield "one ulp", u, np.zeros((8, 8), dtype=bool), 0.1


@pytest.mark.parametrize("window", [2, 3, (1, 2, 3), (3, 2), (2, 1)])
@pytest.mark.parametrize("case", list(_maps()), ids=lambda c: c[0])
def test_pavpu_equals_the_rational_reference_exactly(case, window, monkeypatch):
    _, u, e, threshold = case
    if not isinstance(window, int) and len(window) != u.ndim:
        pytest.skip("window of another dimension")
    new = pavpu(u, e, window=window, threshold=threshold, per_case=False)
    w = D._window(window, u.ndim)
    np.testing.assert_array_equal(D._patch_uncertain(u, w, threshold), _old_patch_uncertain(u, w, threshold))
    monkeypatch.setattr(D, "_patch_uncertain", _old_patch_uncertain)
    assert new == pavpu(u, e, window=window, threshold=threshold, per_case=False)


def test_pavpu_per_case_equals_the_reference(monkeypatch):
    u, e = _checker((2, 1, 6, 8, 4), 0.1, 0.9)
    u[1] = np.random.default_rng(1).integers(0, 3, (1, 6, 8, 4)) / 2.0
    new = pavpu(u, e, window=(2, 2, 1), per_case=True)
    monkeypatch.setattr(D, "_patch_uncertain", _old_patch_uncertain)
    np.testing.assert_array_equal(new, pavpu(u, e, window=(2, 2, 1), per_case=True))


def test_exact_row_sums_against_fractions():
    """The rows whose float64 terms overflow (values near 1e308) are decided on fractions; the others on the sweeps."""
    rng = np.random.default_rng(5)
    rows = rng.integers(-4, 5, (200, 6)) / 8.0  # many sums exactly at the threshold
    rows[:3] = [[1.5e308, -1.5e308, 1.5e308, -1.5e308, 0.0, 1e-300]] * 3  # x - t overflows for t = -0.4e308 ...
    rows[3] = [0.1, 0.2, 0.3, 0.1, 0.2, 0.3]
    for t in (0.0, 0.125, -0.4e308, 0.2):
        ref = [sum(Fraction(v) for v in row) > Fraction(t) * row.size for row in rows]
        np.testing.assert_array_equal(D._sums_exceed(rows, t), ref)


def test_a_checkerboard_at_the_threshold_takes_no_rational_sum(monkeypatch):
    """Every patch of the checkerboard is within rounding of the threshold; none is summed as fractions (the old code
    built one Fraction per voxel: 1.6-2 s for 64^3 with window 2)."""
    made = []

    class Counting(Fraction):
        def __new__(cls, *args, **kwargs):
            made.append(args)
            return super().__new__(cls, *args, **kwargs)

    monkeypatch.setattr(D, "Fraction", Counting)
    u, e = _checker((16, 16, 16), 0.1, 0.9)
    assert pavpu(u, e, window=2, per_case=False) == 0.0  # exact sum of 0.1 + 0.9 is above 1: every patch uncertain
    assert made == []


@pytest.mark.parametrize("fsum_rows", [0, 10**9])
def test_both_exact_routes_equal_the_fractions(fsum_rows, monkeypatch):
    """Review 68: up to ``_FSUM_ROWS`` rows are summed with ``math.fsum``, more with the sweeps: each route, forced on
    every row, equals the rational reference (overflowing rows included)."""
    monkeypatch.setattr(D, "_FSUM_ROWS", fsum_rows)
    rng = np.random.default_rng(7)
    rows = rng.integers(-4, 5, (300, 6)) / 8.0
    rows[:3] = [[1.5e308, -1.5e308, 1.5e308, -1.5e308, 0.0, 1e-300]] * 3
    rows[3] = [0.1, 0.2, 0.3, 0.1, 0.2, 0.3]
    for t in (0.0, 0.125, -0.4e308, 0.2):
        ref = [sum(Fraction(v) for v in row) > Fraction(t) * row.size for row in rows]
        np.testing.assert_array_equal(D._sums_exceed(rows, t), ref)
    long_rows = np.where(np.arange(40) % 2, 0.1, 0.9).astype(np.longdouble)[None].repeat(3, 0)
    long_rows[1, 0] = np.nextafter(long_rows[1, 0], np.longdouble(0))
    ref = [sum(Fraction(*v.as_integer_ratio()) for v in row) > Fraction(0.5) * row.size for row in long_rows]
    np.testing.assert_array_equal(D._sums_exceed(long_rows, 0.5), ref)


def test_one_huge_window_at_the_threshold_is_exact():
    """Review 68: a 64^3 window on a 64^3 checkerboard at the threshold took 5 s (the sweeps' Python loop over its
    2^19 terms; 0.04 s now, measured outside the tests: timings belong in benchmarks/), with the rational
    reference's result."""
    u, e = _checker((64, 64, 64), 0.1, 0.9)
    got = D._patch_uncertain(u, (64, 64, 64), 0.5)
    ref = sum(Fraction(v) for v in (0.1, 0.9)) * (u.size // 2) > Fraction(0.5) * u.size
    assert got.shape == (1, 1, 1) and bool(got[0, 0, 0]) == ref
    assert pavpu(u, e, window=64, per_case=False) == (0.0 if ref else 1.0)
