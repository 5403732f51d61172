"""The fused histogram kernels equal the reference torch path of ConfidenceHistogram.update.

The reference is the chunked torch update (``histogram.FUSED_KERNELS = False``), itself tested against float64
numpy, netcal and scikit-learn in ``test_calibration.py``. Counts must be equal (int64, exact); float sums within
their stated bound: the recursive-summation bound ``n * 2^-53`` relative of the reference's sums (``n`` voxels in a
bin), the NLL and Brier sums within ``n * 2^-52`` absolute plus ``n * 2^-52`` relative (the fused kernel sums the logs
as the log of a product; the relative part is the reference's own rounding of large terms).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc._utils import probability_tolerance
from monai_unc.metrics.calibration import ConfidenceHistogram, _cpu_kernel, calibration_metrics
from monai_unc.metrics.calibration import histogram as hist_module
from monai_unc.metrics.calibration._cpu_kernel import available

pytestmark = pytest.mark.skipif(not available(), reason="numba is not installed (the optional 'fast' extra)")

EPS = 2.0**-53


def reference(monkeypatch, *args, num_classes=3, uncertainty=True, **kwargs) -> ConfidenceHistogram:
    with monkeypatch.context() as m:
        m.setattr(hist_module, "FUSED_KERNELS", False)
        return ConfidenceHistogram(num_classes, uncertainty=uncertainty).update(*args, **kwargs)


def assert_equal_histograms(fused: ConfidenceHistogram, ref: ConfidenceHistogram, n_voxels: int) -> None:
    assert fused.case_ids == ref.case_ids
    assert torch.equal(fused.counts, ref.counts)
    bound = 4 * n_voxels * EPS
    np.testing.assert_allclose(fused.sums.numpy(), ref.sums.numpy(), rtol=bound, atol=1e-300)
    np.testing.assert_allclose(fused.weighted_counts.numpy(), ref.weighted_counts.numpy(), rtol=bound, atol=1e-300)
    fs, rs = fused.scalars.numpy(), ref.scalars.numpy()
    np.testing.assert_allclose(fs[:, 0], rs[:, 0], rtol=bound)
    np.testing.assert_allclose(fs[:, 1], rs[:, 1], rtol=bound, atol=4 * n_voxels * EPS)
    np.testing.assert_allclose(fs[:, 2], rs[:, 2], rtol=bound, atol=4 * n_voxels * EPS)


def softmax_case(shape, num_classes, seed, scale=3.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(scale * torch.randn(shape[0], num_classes, *shape[1:], generator=g, dtype=torch.float64), 1)
    labels = torch.randint(0, num_classes, shape, generator=g)
    return probs.to(dtype), labels


@pytest.mark.parametrize(
    "dtype, num_classes, uncertainty",
    [
        (torch.float32, 3, True),
        (torch.float64, 2, False),
        (torch.float32, 2, True),
        (torch.float64, 4, True),
        (torch.float32, 8, False),
        (torch.float32, 9, True),
        (torch.float64, 9, False),
    ],
)
def test_fused_equals_reference(monkeypatch, dtype, num_classes, uncertainty):
    probs, labels = softmax_case((2, 24, 20, 18), num_classes, seed=num_classes, dtype=dtype)
    assert hist_module._fused_for(probs)
    fused = ConfidenceHistogram(num_classes, uncertainty=uncertainty).update(probs, labels, case_ids=["a", "b"])
    ref = reference(monkeypatch, probs, labels, num_classes=num_classes, uncertainty=uncertainty, case_ids=["a", "b"])
    assert_equal_histograms(fused, ref, labels[0].numel())
    names = ("ece", "classwise_ece", "all_label_ece", "ace", "mce", "nll", "brier") + (("uce",) if uncertainty else ())
    mf, mr = calibration_metrics(fused, names), calibration_metrics(ref, names)
    for k in mr:
        assert mf[k] == pytest.approx(mr[k], rel=1e-12, abs=1e-15)


def test_weights_mask_and_cases(monkeypatch):
    probs, labels = softmax_case((3, 16, 16, 12), 4, seed=1, scale=5.0)
    g = torch.Generator().manual_seed(2)
    weights = torch.rand(labels.shape, generator=g, dtype=torch.float64) * (torch.rand(labels.shape, generator=g) > 0.2)
    mask = torch.rand(labels.shape, generator=g) > 0.3
    ids = ["x", "y", "x"]
    fused = ConfidenceHistogram(4).update(probs, labels, weights=weights, mask=mask, case_ids=ids)
    ref = reference(monkeypatch, probs, labels, num_classes=4, weights=weights, mask=mask, case_ids=ids)
    assert fused.weighted
    assert_equal_histograms(fused, ref, labels.numel())


def test_values_at_bin_edges_ties_and_one(monkeypatch):
    """Probabilities on fine-bin edges (k / F), exact 0 and 1, and tied maxima: same bins, first maximum wins."""
    f = ConfidenceHistogram(3).n_fine_bins
    k = torch.arange(0, f + 1, 97, dtype=torch.float64)
    p0 = k / f
    p1 = (1 - p0) / 2
    probs = torch.stack([p0, p1, 1 - p0 - p1])  # ties between classes 1 and 2 everywhere
    extra = torch.tensor(
        [[1.0, 0.0, 0.0, 0.5, 1 / 3], [0.0, 1.0, 0.0, 0.5, 1 / 3], [0.0, 0.0, 1.0, 0.0, 1 / 3]], dtype=torch.float64
    )
    probs = torch.cat([probs, extra], 1)[None, :, :, None]
    labels = (torch.arange(probs.shape[2]) % 3)[None, :, None]
    fused = ConfidenceHistogram(3).update(probs, labels)
    ref = reference(monkeypatch, probs, labels)
    assert_equal_histograms(fused, ref, probs.shape[2])
    assert int(fused.counts[0, 0, :, f - 1].sum()) == 1  # the one p = 1 of row 0, folded into the last bin


def test_threads_give_equal_counts(monkeypatch):
    """Private per-thread tables merged once: the counts do not depend on the number of threads."""
    probs, labels = softmax_case((1, 40, 40, 20), 3, seed=4)
    monkeypatch.setattr(_cpu_kernel, "MIN_VOXELS_PER_THREAD", 1024)  # this small case on two threads
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ConfidenceHistogram(3).update(probs, labels)
        torch.set_num_threads(2)
        two = ConfidenceHistogram(3).update(probs, labels)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(one.counts, two.counts)
    np.testing.assert_allclose(one.sums.numpy(), two.sums.numpy(), rtol=4 * labels.numel() * EPS, atol=1e-300)


@pytest.mark.parametrize("bad", ["nan", "range", "sum"])
def test_bad_values_raise_as_the_reference_and_nothing_is_added(monkeypatch, bad):
    probs, labels = softmax_case((1, 8, 8, 8), 3, seed=5, dtype=torch.float64)
    broken = probs.clone()
    broken[0, :, 3, 4, 5] = {"nan": float("nan"), "range": 1.5, "sum": 0.6}[bad]
    hist = ConfidenceHistogram(3).update(probs, labels)
    before = hist.counts.clone()
    with pytest.raises(ValueError, match="probs") as fused_err:
        hist.update(broken, labels)
    with monkeypatch.context() as m:
        m.setattr(hist_module, "FUSED_KERNELS", False)
        with pytest.raises(ValueError, match="probs") as ref_err:
            ConfidenceHistogram(3).update(broken, labels)
    assert str(fused_err.value) == str(ref_err.value)
    assert torch.equal(hist.counts, before)


def test_unchecked_out_of_range_values_fall_back_to_the_reference(monkeypatch):
    """``validate=False`` with values outside [0, 1]: clipped as the reference clips them."""
    probs, labels = softmax_case((1, 8, 8, 8), 3, seed=6, dtype=torch.float64)
    probs[0, 0, 1, 1, 1] = 1.2
    probs[0, 1, 2, 2, 2] = -0.1
    fused = ConfidenceHistogram(3).update(probs, labels, validate=False)
    ref = reference(monkeypatch, probs, labels, validate=False)
    assert_equal_histograms(fused, ref, labels.numel())


def test_other_dtypes_and_empty_masks_use_the_reference(monkeypatch):
    probs, labels = softmax_case((1, 6, 6, 6), 3, seed=7)
    half = probs.half()
    assert not hist_module._fused_for(half)
    fused = ConfidenceHistogram(3).update(half, labels)
    ref = reference(monkeypatch, half, labels)
    assert torch.equal(fused.counts, ref.counts)
    empty = torch.zeros(labels.shape, dtype=torch.bool)
    hist = ConfidenceHistogram(3).update(probs, labels, mask=empty)
    assert int(hist.counts.sum()) == 0 and float(hist.scalars.sum()) == 0.0


def test_requires_grad_input(monkeypatch):
    probs, labels = softmax_case((1, 6, 6, 6), 3, seed=8, dtype=torch.float64)
    fused = ConfidenceHistogram(3).update(probs.requires_grad_(), labels)
    ref = reference(monkeypatch, probs.detach(), labels)
    assert torch.equal(fused.counts, ref.counts)


@pytest.mark.parametrize("n", [1, 3, 4, 63, 65, 511, 512, 513, 1100])
def test_block_and_lane_remainders(monkeypatch, n):
    """Voxel counts around the kernel's block (512) and its NLL / Brier lanes (4, renormalised every 64 voxels)."""
    probs, labels = softmax_case((1, n, 1, 1), 3, seed=n, scale=8.0)
    fused = ConfidenceHistogram(3).update(probs, labels)
    ref = reference(monkeypatch, probs, labels)
    assert_equal_histograms(fused, ref, n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_voxels_in_one_bin(monkeypatch, dtype):
    """One voxel value repeated (the tables' worst case: every update hits the same bin), in two fixed cases."""
    f = ConfidenceHistogram(3).n_fine_bins
    n = 3000
    for column in ([1.0, 0.0, 0.0], [0.25, 0.5, 0.25]):
        probs = torch.tensor(column, dtype=dtype)[None, :, None].expand(1, 3, n).contiguous()
        labels = torch.zeros(1, n, dtype=torch.int64)
        labels[0, ::3] = 1
        fused = ConfidenceHistogram(3).update(probs, labels)
        ref = reference(monkeypatch, probs, labels)
        assert_equal_histograms(fused, ref, n)
        # brute force: every voxel in bin floor(v * F) of each class row (v = 1 folded into the last bin)
        counts = fused.counts[0]  # (rows, 2, F): misses (r = 0) and hits (r = 1)
        for c, v in enumerate(column):
            b = min(int(np.float64(torch.tensor(v, dtype=dtype)) * f), f - 1)
            assert int(counts[c, :, b].sum()) == int(counts[c].sum()) == n
            assert int(counts[c, 1, b]) == int((labels == c).sum())
        top = min(int(max(column) * f), f - 1)
        assert int(counts[3, :, top].sum()) == n
        assert int(counts[3, 1, top]) == int((labels == int(np.argmax(column))).sum())


def test_nan_outside_the_mask_is_never_read(monkeypatch):
    """NaN where the mask is False: the fused kernel runs on the masked voxels only, as the reference does."""
    probs, labels = softmax_case((1, 10, 10, 10), 3, seed=9)
    mask = torch.rand(labels.shape, generator=torch.Generator().manual_seed(3)) > 0.5
    probs = probs.masked_fill(~mask[:, None], float("nan"))
    fused = ConfidenceHistogram(3).update(probs, labels, mask=mask)
    ref = reference(monkeypatch, probs, labels, mask=mask)
    assert int(fused.counts[0, 0].sum()) == int(mask.sum())
    assert_equal_histograms(fused, ref, int(mask.sum()))


def test_packed_counts_unpacked_between_chunks(monkeypatch):
    """Counts and hits share one int64 (32 bits each); a small unpacking interval gives the same tables."""
    probs, labels = softmax_case((1, 30, 20, 10), 3, seed=10)
    g = torch.Generator().manual_seed(4)
    weights = torch.rand(labels.shape, generator=g, dtype=torch.float64) + 0.1
    for uncertainty, w in ((False, None), (True, None), (True, weights)):
        ref = reference(monkeypatch, probs, labels, uncertainty=uncertainty, weights=w)
        with monkeypatch.context() as m:
            m.setattr(_cpu_kernel, "PACKED_VOXELS", 700)
            m.setattr(hist_module, "_CPU_CHUNK", 500)
            fused = ConfidenceHistogram(3, uncertainty=uncertainty).update(probs, labels, weights=w)
        assert_equal_histograms(fused, ref, labels.numel())


def test_threads_with_weights_and_entropy_equal_the_reference(monkeypatch):
    probs, labels = softmax_case((1, 40, 30, 20), 4, seed=11)
    weights = torch.rand(labels.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    monkeypatch.setattr(_cpu_kernel, "MIN_VOXELS_PER_THREAD", 1024)
    ref = reference(monkeypatch, probs, labels, num_classes=4, weights=weights)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        fused = ConfidenceHistogram(4).update(probs, labels, weights=weights)
    finally:
        torch.set_num_threads(old)
    assert_equal_histograms(fused, ref, labels.numel())


def test_kernel_tables_equal_numpy(monkeypatch):
    """The kernel's tables against a brute-force numpy computation (not the torch reference): counts, hits, sums."""
    probs, labels = softmax_case((1, 37, 29, 1), 3, seed=12, scale=6.0)
    p = probs[0].reshape(3, -1).numpy()
    y = labels.reshape(-1).numpy()
    f = 64
    out = {
        "total": np.zeros((5, f + 1), np.int64),
        "hits": np.zeros((5, f + 1), np.int64),
        "sums": np.zeros((5, f + 1)),
        "scalars": np.zeros(3),
    }
    assert _cpu_kernel.histogram_tables(p, y, None, f, None, 1e-3, 1e-15, 1, out) == (0, 0, 0)
    v = np.clip(p.astype(np.float64), 0.0, 1.0)
    pred = np.argmax(v, 0)
    conf = v[pred, np.arange(y.size)]
    rows = [*v, conf]
    hit_rows = [y == c for c in range(3)] + [pred == y]
    for r, (vals, hit) in enumerate(zip(rows, hit_rows)):
        b = np.floor(vals * f).astype(np.int64)
        np.testing.assert_array_equal(out["total"][r], np.bincount(b, minlength=f + 1))
        np.testing.assert_array_equal(out["hits"][r], np.bincount(b[hit], minlength=f + 1))
        np.testing.assert_allclose(out["sums"][r], np.bincount(b, vals, minlength=f + 1), rtol=4 * y.size * EPS)
    p_true = v[y, np.arange(y.size)]
    np.testing.assert_allclose(out["scalars"][0], y.size)
    np.testing.assert_allclose(out["scalars"][1], -np.log(np.maximum(p_true, 1e-15)).sum(), rtol=1e-12)
    np.testing.assert_allclose(out["scalars"][2], ((v**2).sum(0) - 2 * p_true + 1).sum(), rtol=1e-12)


@pytest.mark.parametrize("f", [15 * 2**10, 64, 7, 3, 1])
@pytest.mark.parametrize("weighted", [False, True])
def test_edge_bin_copies_fold_into_their_bins(f, weighted):
    """A confident network's volume: most class values in the first and last ``EDGE_BINS`` bins, which the kernel
    spreads over ``EDGE_COPIES`` slots each (consecutive voxels in turn) and folds back; every edge bin and every lane
    of its copies is used, on two threads: counts, hits, sums (and weighted ones) equal a numpy brute force."""
    rng = np.random.default_rng(f)
    n, edge = 40_000, _cpu_kernel.EDGE_BINS
    lab = rng.integers(0, 3, n)
    # the top class's value 1 - d and one other class's d for d F = 0 .. EDGE_BINS (plus a fraction of a bin),
    # so the class rows' values sit in every edge bin, and a tenth of the voxels spread over all bins
    frac = np.where(rng.random(n) < 0.2, 0.0, rng.uniform(0, 0.999, n))  # d = 0: values 0 and 1 exactly
    d = (rng.integers(0, edge + 1, n) + frac) / max(f, 1)
    d = np.minimum(d, 0.5)
    p = np.zeros((3, n))
    p[lab, np.arange(n)] = 1.0 - d
    p[(lab + 1) % 3, np.arange(n)] = d
    spread = rng.random(n) < 0.1
    p[:, spread] = rng.dirichlet(np.ones(3), int(spread.sum())).T
    p = p.astype(np.float32)  # (float32: the kernel specialisations other tests compile too)
    y = np.where(rng.random(n) < 0.9, lab, rng.integers(0, 3, n))
    w = rng.uniform(0.1, 2.0, n) if weighted else None
    out = _empty_tables(f)
    if weighted:
        out.update(wtotal=np.zeros((5, f + 1)), whits=np.zeros((5, f + 1)))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_cpu_kernel, "MIN_VOXELS_PER_THREAD", 1024)
        assert _cpu_kernel.histogram_tables(p, y, w, f, None, 1e-3, 1e-15, 2, out) == (0, 0, 0)
    p = p.astype(np.float64)
    pred = np.argmax(p, 0)
    conf = p[pred, np.arange(n)]
    rows, hit_rows = [*p, conf], [y == c for c in range(3)] + [pred == y]
    ones = np.ones(n) if w is None else w
    for r, (vals, hit) in enumerate(zip(rows, hit_rows)):
        b = np.floor(vals * f).astype(np.int64)
        if r < 3 and f > 2 * edge:
            assert (np.bincount(b, minlength=f + 1)[np.r_[:edge, f + 1 - edge : f + 1]] > 0).all()
        np.testing.assert_array_equal(out["total"][r], np.bincount(b, minlength=f + 1))
        np.testing.assert_array_equal(out["hits"][r], np.bincount(b[hit], minlength=f + 1))
        np.testing.assert_allclose(out["sums"][r], np.bincount(b, vals * ones, minlength=f + 1), rtol=4 * n * EPS)
        if weighted:
            np.testing.assert_allclose(out["wtotal"][r], np.bincount(b, ones, minlength=f + 1), rtol=4 * n * EPS)
            np.testing.assert_allclose(out["whits"][r], np.bincount(b[hit], ones[hit], minlength=f + 1),
                                       rtol=4 * n * EPS)


def _empty_tables(f: int) -> dict[str, np.ndarray]:
    return {
        "total": np.zeros((5, f + 1), np.int64),
        "hits": np.zeros((5, f + 1), np.int64),
        "sums": np.zeros((5, f + 1)),
        "scalars": np.zeros(3),
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_invalid_and_nan_counts_equal_numpy(dtype):
    """Values out of range, NaNs and sums off 1 in a few blocks (and the last, partial one): the returned counts equal
    a numpy count of them (the kernel counts them only in the blocks that fail a check)."""
    rng = np.random.default_rng(5)
    n, tol = 3 * 512 + 77, 1e-3
    p = rng.dirichlet(np.ones(3), n).T.astype(dtype).copy()
    y = rng.integers(0, 3, n)
    p[0, 3], p[1, 3] = np.nan, np.nan  # two NaNs in one voxel
    p[2, 700] = -0.5  # out of range (and its sum off)
    p[1, 1000] = 1.0 + 10 * tol
    p[0, 1500], p[1, 1500] = 0.6, 0.6  # in range, sum off
    p[2, n - 2] = np.inf
    p[:, 900] = [-tol / 2, 0.5 + tol / 2, 0.5]  # within the tolerance (its sum too): valid
    for lo, hi in ((0, n), (0, 512), (512, 1024), (1024, n)):  # blocks that fail and blocks that do not
        q = np.ascontiguousarray(p[:, lo:hi])
        x = q.astype(np.float64)
        nan = int(np.isnan(x).sum())
        out_of_range = int(((x < -tol) | (x > 1 + tol) | np.isnan(x)).sum())
        with np.errstate(invalid="ignore"):
            d = np.abs(x.sum(0) - 1.0)
        sums_off = int(((d > tol) | np.isnan(d)).sum())
        got = _cpu_kernel.histogram_tables(q, y[lo:hi].copy(), None, 64, None, tol, 1e-15, 1, _empty_tables(64))
        assert got == (out_of_range + sums_off, nan, 0)
    assert _cpu_kernel.histogram_tables(
        np.ascontiguousarray(p[:, 800:1000]), y[800:1000].copy(), None, 64, None, tol, 1e-15, 1, _empty_tables(64)
    ) == (0, 0, 0)


@pytest.mark.parametrize("f", [15 * 2**10, 10, 1000, 3])
def test_kernel_bins_of_edge_values_equal_float64_floor(f):
    """Float32 values at and next to every bin edge k / F, 0, 1 and just below 1: each bin (class rows and the top
    row) equals ``floor(v * F)`` computed in float64 on the float32 value."""
    edges = np.arange(f + 1, dtype=np.float64) / f
    e32 = edges.astype(np.float32)
    vals = np.concatenate(
        [
            e32,
            np.nextafter(e32, np.float32(0)),
            np.nextafter(e32, np.float32(2)),
            np.array([0.0, 1.0, np.nextafter(np.float32(1), np.float32(0)), 1e-45], np.float32),
        ]
    )
    vals = np.clip(vals, 0, 1).astype(np.float32)
    p = np.stack([vals, np.zeros_like(vals), np.zeros_like(vals)])  # class 0 always the top label
    p[1] = (np.float64(1.0) - vals.astype(np.float64)).astype(np.float32)  # sums within the float32 tolerance
    p[1] = np.where(p[1] > vals, 0, p[1])  # class 0 stays the first maximum
    p[2] = 0
    y = np.zeros(vals.size, np.int64)
    out = _empty_tables(f)
    _cpu_kernel.histogram_tables(p, y, None, f, None, 1.0, 1e-15, 1, out)  # a loose tolerance: every sum passes
    for r in (0, 1, 3):
        v = p[r if r < 3 else 0].astype(np.float64)
        expect = np.bincount(np.floor(v * f).astype(np.int64), minlength=f + 1)
        np.testing.assert_array_equal(out["total"][r], expect)
        np.testing.assert_array_equal(out["sums"][r], np.bincount(np.floor(v * f).astype(np.int64), v, minlength=f + 1))


def test_kernel_rejects_too_many_bins():
    p = np.full((3, 4), 1 / 3)
    with pytest.raises(ValueError, match="n_fine"):
        _cpu_kernel.histogram_tables(p, np.zeros(4, np.int64), None, 1 << 31, None, 1e-3, 1e-15, 1, {})


@pytest.mark.parametrize("num_classes", [2, 3, 4, 9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_label_row_at_the_class_row_threshold(monkeypatch, num_classes, dtype):
    """The top-label row is taken from the class rows from ``top_label_limit`` on: voxels whose top value sits just
    below, at and above that bin's edge, two classes above 1/2 (sums and values off by up to the tolerance), ties, and
    a top value of 1: counts equal the reference's, the top row's sums within their bound, with and without weights."""
    tol = probability_tolerance(dtype)
    f = ConfidenceHistogram(num_classes).n_fine_bins
    limit = _cpu_kernel.top_label_limit(num_classes, f, tol)
    assert limit <= f
    rng = np.random.default_rng(num_classes)
    tops = np.concatenate(
        [
            (limit + np.array([-2, -1, 0, 1, 2])) / f,
            np.nextafter((limit + np.arange(-2, 3)) / f, 0),
            np.array([0.5 + tol / 2, 0.5, 1.0, (1 + (num_classes - 1) * tol) / 2]),
            rng.uniform(0.3, 1.0, 200),
        ]
    )
    voxels = []
    for t in tops:
        rest = np.full(num_classes - 1, (1.0 - t) / (num_classes - 1))
        voxels.append(np.concatenate([[t], rest]))
        # the others as high as the checks allow: the sum at 1 + tol (a hair below: summed in another order, a sum
        # at exactly 1 + tol can round either way), the others at -tol
        high = np.full(num_classes - 1, 0.0)
        high[0] = min(1.0 + tol, 1.0 + 0.999 * tol - t + (num_classes - 2) * tol)
        high[1:] = -tol
        voxels.append(np.concatenate([[t], high]))
        voxels.append(np.concatenate([rest[:1], [t], rest[1:]]))  # the top class not the first
    probs = torch.tensor(np.stack(voxels, 1), dtype=torch.float64).to(dtype)
    probs = probs[:, rng.permutation(probs.shape[1])]
    # keep only voxels that pass the checks as the reference computes them
    x = probs.to(torch.float64)
    ok = ((x >= -tol) & (x <= 1 + tol)).all(0) & ((x.sum(0) - 1).abs() <= tol)
    probs = probs[:, ok][None, :, :, None]
    n = probs.shape[2]
    labels = torch.from_numpy(rng.integers(0, num_classes, (1, n, 1)))
    weights = torch.from_numpy(rng.uniform(0.1, 2.0, (1, n, 1)))
    for w in (None, weights):
        fused = ConfidenceHistogram(num_classes).update(probs, labels, weights=w)
        ref = reference(monkeypatch, probs, labels, num_classes=num_classes, weights=w)
        assert_equal_histograms(fused, ref, n)
        assert int(fused.counts[0, num_classes, 0, limit:].sum()) > 0  # the derived part of the row is exercised
        assert int(fused.counts[0, num_classes, 0, :limit].sum()) > 0


@pytest.mark.parametrize("num_classes", [1, 2, 3, 5, 8, 40])
@pytest.mark.parametrize("n_fine", [1, 2, 7, 64, 15 * 2**10, 2**24])
@pytest.mark.parametrize("tol", [1e-3, 3.9e-3, 0.031])
def test_top_label_limit_leaves_one_class_above(num_classes, n_fine, tol):
    """Property of ``top_label_limit`` (brute force): a voxel that passes the checks (values in [-tol, 1 + tol], sum
    within tol of 1) and has a class value whose bin is at or above the limit has no other class value as large
    (the class is the unique maximum); adversarial voxels push the other values to the most the checks allow."""
    limit = _cpu_kernel.top_label_limit(num_classes, n_fine, tol)
    assert limit <= n_fine + 1
    if limit > n_fine:
        return  # nothing taken from the class rows
    rng = np.random.default_rng(n_fine + num_classes)
    v = np.concatenate([np.nextafter(limit / n_fine, 2.0) + np.zeros(4), rng.uniform(limit / n_fine, 1.0, 400)])
    rows = []
    for t in v:  # the second class as high as the checks allow: sum 1 + tol, every other class at -tol
        second = 1.0 + tol - t + (num_classes - 2) * tol
        rows.append(np.array([t, second] + [-tol] * (num_classes - 2))[:num_classes])
    p = np.stack(rows)
    assert (np.floor(np.clip(p[:, 0], 0, 1) * n_fine) >= limit).all()
    ok = ((p >= -tol) & (p <= 1 + tol)).all(1) & (np.abs(p.sum(1) - 1) <= tol)
    clipped = np.clip(p[ok], 0.0, 1.0)
    if num_classes > 1:
        assert (clipped[:, 0] > clipped[:, 1:].max(1)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_update_leaves_the_input_unchanged(dtype):
    """Values within the tolerance outside [0, 1] are clipped for the tables and the entropy row, never in the
    caller's array (a float64 input once was clipped in place by the entropy row's chunk)."""
    tol = probability_tolerance(dtype)
    probs = torch.tensor(
        [[0.5 + tol, -tol / 2, 1.0], [0.5, 1.0 + tol / 2, -tol / 2], [-tol / 2, -tol / 2, 0.0]], dtype=dtype
    )[None, :, :, None]
    before = probs.clone()
    labels = torch.tensor([[0, 1, 2]])[..., None]
    ConfidenceHistogram(3, uncertainty=True).update(probs, labels)
    assert torch.equal(probs, before)


@pytest.mark.parametrize("num_classes", [3, 9])  # the unrolled and the per-class kernel
@pytest.mark.parametrize("bad", [-1, 3, 9, 2**40])  # below 0, C (for 3 and 9), above
def test_kernel_counts_labels_out_of_range(num_classes, bad):
    """Labels outside [0, C) in some blocks (and the last, partial one): counted, never used as an index."""
    rng = np.random.default_rng(7)
    n = 3 * 1024 + 5
    p = rng.dirichlet(np.ones(num_classes), n).T.copy()
    y = rng.integers(0, num_classes, n)
    wrong = [5, 1500, n - 1] if bad < 0 or bad >= num_classes else []
    y[wrong] = bad
    out = {
        k: np.zeros((num_classes + 2, 65), np.int64 if k in ("total", "hits") else np.float64)
        for k in ("total", "hits", "sums")
    }
    out["scalars"] = np.zeros(3)
    got = _cpu_kernel.histogram_tables(p, y, None, 64, None, 1e-3, 1e-15, 1, out)
    assert got == (0, 0, len(wrong))


@pytest.mark.parametrize("num_classes", [3, 9])
@pytest.mark.parametrize("bad, message", [(-2, "non-negative"), (None, "holds class")])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("batch", [1, 2])
def test_labels_out_of_range_raise_as_the_reference(monkeypatch, num_classes, bad, message, masked, batch):
    """The range of int64 labels of one case without a mask is checked inside the kernel (no separate read): the same
    error as the reference path's, naming ``target``, and nothing added; with a mask or several cases the labels are
    checked before."""
    probs, labels = softmax_case((batch, 12, 10, 8), num_classes, seed=3)
    labels[-1, 3, 4, 5] = num_classes if bad is None else bad
    mask = torch.ones(labels.shape, dtype=torch.bool) if masked else None
    hist = ConfidenceHistogram(num_classes)
    with pytest.raises(ValueError, match=message) as fused_err:
        hist.update(probs, labels, mask=mask)
    assert "target" in str(fused_err.value)
    assert len(hist) == 0
    with monkeypatch.context() as m:
        m.setattr(hist_module, "FUSED_KERNELS", False)
        with pytest.raises(ValueError, match=message):
            ConfidenceHistogram(num_classes).update(probs, labels, mask=mask)


def test_labels_read_once_without_a_mask(monkeypatch):
    """Without a mask the fused CPU path does not read the labels for their range before the kernel does."""
    probs, labels = softmax_case((1, 8, 8, 8), 3, seed=2)
    calls = []
    real = torch.aminmax

    def counting(t, *args, **kwargs):
        calls.append(t.dtype)
        return real(t, *args, **kwargs)

    monkeypatch.setattr(torch, "aminmax", counting)
    ConfidenceHistogram(3).update(probs, labels)
    assert torch.int64 not in calls
    ConfidenceHistogram(3).update(probs, labels, mask=torch.ones(labels.shape, dtype=torch.bool))
    assert torch.int64 in calls
    calls.clear()
    two, two_labels = softmax_case((2, 8, 8, 8), 3, seed=2)
    ConfidenceHistogram(3).update(two, two_labels)  # several cases: every case's labels checked first
    assert torch.int64 in calls


@pytest.mark.parametrize("dtype, e", [(torch.float32, 2.0**-24), (torch.float64, 1e-12), (torch.float64, 1e-9)])
def test_nll_of_confident_voxels_within_the_absolute_bound(monkeypatch, dtype, e):
    """Confident, correct voxels (``-log p_y`` near 0): the fused NLL sum is within ``n 2^-52`` nats of the reference
    (absolute, as documented: the product of mantissas rounds away what ``-log p`` keeps, so not relative), and the
    reference within ``n 2^-53`` relative of an exact sum (``math.fsum`` of float64 logs). From a hostile review."""
    import math

    n = 5000
    p_true = torch.full((n,), 1.0 - e, dtype=torch.float64)
    probs = torch.stack([p_true, 1.0 - p_true])[None, :, :, None].to(dtype)
    target = torch.zeros(1, n, 1, dtype=torch.int64)
    fused = ConfidenceHistogram(2, uncertainty=False).update(probs, target).scalars[0, 1].item()
    ref = reference(monkeypatch, probs, target, num_classes=2, uncertainty=False).scalars[0, 1].item()
    exact = math.fsum((-np.log(probs[0, 0, :, 0].double().numpy())).tolist())
    assert ref == pytest.approx(exact, rel=n * 2.0**-53, abs=0)
    assert abs(fused - ref) <= n * 2.0**-52
    assert fused > 0


@pytest.mark.parametrize("bad_case", [0, 1])
def test_label_error_takes_precedence_across_the_batch(monkeypatch, bad_case):
    """Invalid probabilities in one case and a label out of range in another: the ``target`` error of the reference
    (which checks every case's labels first), with and without ``validate``. From a hostile review."""
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(2, 3, 50, generator=g), 1)
    probs[1 - bad_case, 0, 0] = float("nan")
    target = torch.randint(0, 3, (2, 50), generator=g)
    target[bad_case, 0] = 3
    target[bad_case, 1] = -5
    for validate in (True, False):
        with pytest.raises(ValueError) as ref_err:
            reference(monkeypatch, probs, target, uncertainty=False, validate=validate)
        with pytest.raises(ValueError) as fused_err:
            ConfidenceHistogram(3, uncertainty=False).update(probs, target, validate=validate)
        assert "target" in str(ref_err.value) and str(fused_err.value) == str(ref_err.value)
