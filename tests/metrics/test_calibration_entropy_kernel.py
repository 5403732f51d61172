"""The fused CPU kernel's normalised entropy (the UCE row): its logarithm, its values against the reference formula, and
the chunks near a bin edge that take the reference's values (so that the row's counts stay the reference's)."""

from __future__ import annotations

import decimal
import math

import numpy as np
import pytest
import torch

from monai_unc.measures import entropy
from monai_unc.metrics.calibration import ConfidenceHistogram, _cpu_kernel
from monai_unc.metrics.calibration import histogram as hist_module

pytestmark = pytest.mark.skipif(not _cpu_kernel.available(), reason="numba is not installed (the 'fast' extra)")

EPS = 2.0**-53
TINY = float(np.finfo(np.float64).tiny)


def exact_log(t: float) -> decimal.Decimal:
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        return decimal.Decimal(t).ln()


def ulp(x: float) -> float:
    return math.ulp(abs(x))


def test_log_within_three_ulps_of_the_exact_logarithm():
    rng = np.random.default_rng(0)
    t = np.concatenate(
        [
            rng.random(3000),
            np.exp(rng.uniform(math.log(TINY), 0.0, 3000)),  # log-uniform over every binade
            1.0 - np.arange(1, 200) * EPS,  # just below 1: log t near 0 (relative accuracy kept)
            2.0 ** -np.arange(0, 1023.0),  # powers of two: log z = 0 exactly
            np.nextafter(math.sqrt(0.5), [0.0, 1.0]),  # both sides of the range reduction's switch
            [TINY, 1.401298464324817e-45, 1e-300, 0.5, 0.25, 0.1, 1.0],  # float32's smallest, ...
        ]
    ).astype(np.float64)
    t = t[(t >= TINY) & (t <= 1.0)]
    got = np.empty_like(t)
    _cpu_kernel._kernels()(3).logs(t, got)
    assert got[t == 1.0].tolist() == [0.0] * int((t == 1.0).sum())
    worst = 0.0
    for ti, gi in zip(t.tolist(), got.tolist()):
        ref = exact_log(ti)
        if ref == 0:
            continue
        err = abs(decimal.Decimal(gi) - ref) / decimal.Decimal(ulp(float(ref)))
        worst = max(worst, float(err))
    assert worst <= 3.0, worst


def reference_entropy(p: np.ndarray) -> np.ndarray:
    """The histogram's reference formula (``_accumulate_probs``): float64 values clipped to [0, 1], torch's entropy."""
    q = torch.from_numpy(p).to(torch.float64, copy=True).clamp_(0.0, 1.0)
    return entropy(q.unsqueeze(0), normalize=True, validate=False).view(-1).clamp_(0.0, 1.0).numpy()


def kernel_entropy(p: np.ndarray, n_fine: int) -> tuple[np.ndarray, bool]:
    n_cls, n = p.shape
    out = np.empty(n)
    margin = _cpu_kernel.entropy_margin(n_cls) * n_fine
    near = _cpu_kernel._kernels()(n_cls).entropy(p, 0, n, out, math.log(n_cls), float(n_fine), margin)
    return out, bool(near)


def hard_probabilities(n_cls: int, n: int, dtype: type, seed: int) -> np.ndarray:
    """Softmax probabilities of every sharpness, one-hot and uniform voxels, values at the tolerance's bounds."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n_cls, n)) * rng.choice([0.1, 1.0, 10.0, 300.0], size=n)
    p = np.exp(logits - logits.max(0))
    p /= p.sum(0)
    p[:, :n_cls] = np.eye(n_cls)  # one-hot: entropy 0
    p[:, n_cls : 2 * n_cls] = 1.0 / n_cls  # uniform: entropy 1
    p[:, 2 * n_cls] = 0.0
    p[0, 2 * n_cls], p[1, 2 * n_cls] = 1.0 + 5e-4, -5e-4  # within the checks' tolerance: clipped
    p[:, 2 * n_cls + 1] = 0.0
    p[0, 2 * n_cls + 1], p[1, 2 * n_cls + 1] = 1.0 - 1e-300, 1e-300  # a float64 subnormal-range value
    return np.ascontiguousarray(p.astype(dtype))


@pytest.mark.parametrize("n_cls", [2, 3, 8, 9])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_entropy_within_its_bound_of_the_reference(n_cls, dtype):
    p = hard_probabilities(n_cls, 20_000, dtype, seed=n_cls)
    ref = reference_entropy(p)
    got, _ = kernel_entropy(p, 15 * 2**10)
    assert np.all((got >= 0.0) & (got <= 1.0))
    diff = np.abs(got - ref)
    bound = (2 * n_cls + 8) * EPS * np.maximum(ref, got)
    assert np.all(diff <= bound), float((diff / np.maximum(ref, 1e-300)).max() / EPS)
    # well inside the margin the kernel keeps from every bin edge
    assert diff.max() * 128 <= _cpu_kernel.entropy_margin(n_cls)
    assert np.array_equal(got[:n_cls], np.zeros(n_cls))  # one-hot voxels: exactly 0, as the reference's


@pytest.mark.parametrize("n_cls", [3, 9])
def test_near_flag_is_a_voxel_within_the_margin_of_an_edge(n_cls):
    n_fine = 64
    p = hard_probabilities(n_cls, 5000, np.float64, seed=1)[:, 2 * n_cls + 2 :].copy()  # no uniform voxel
    got, near = kernel_entropy(p, n_fine)
    x = got * n_fine
    margin = _cpu_kernel.entropy_margin(n_cls) * n_fine
    frac = x - np.floor(x)
    brute = bool(np.any((x >= margin) & ((frac < margin) | (frac > 1.0 - margin))))
    assert near == brute
    # a voxel whose entropy is exactly a bin edge (h = 1: the uniform voxel; h = k / F built by bisection is not needed)
    q = np.concatenate([p, np.full((n_cls, 1), 1.0 / n_cls)], axis=1)
    assert kernel_entropy(np.ascontiguousarray(q), n_fine)[1]


def _tables(n_cls: int, n_fine: int) -> dict[str, np.ndarray]:
    rows = n_cls + 2
    return {
        "total": np.zeros((rows, n_fine + 1), np.int64),
        "hits": np.zeros((rows, n_fine + 1), np.int64),
        "sums": np.zeros((rows, n_fine + 1)),
        "scalars": np.zeros(3),
    }


def _calls(p: np.ndarray, y: np.ndarray, n_fine: int, chunk: int) -> tuple[list[tuple[int, int]], dict]:
    """histogram_tables with the reference formula as the entropy callable, recording its calls."""
    calls: list[tuple[int, int]] = []

    def ent(start: int, stop: int) -> np.ndarray:
        calls.append((start, stop))
        return reference_entropy(p[:, start:stop])

    out = _tables(p.shape[0], n_fine)
    assert _cpu_kernel.histogram_tables(p, y, None, n_fine, ent, 1e-3, 1e-15, 1, out, chunk=chunk) == (0, 0, 0)
    return calls, out


def test_reference_values_only_for_a_chunk_near_an_edge():
    n_cls, n_fine, chunk = 3, 15 * 2**10, 4096
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(3 * torch.randn(n_cls, 4 * chunk, generator=g, dtype=torch.float64), 0).to(torch.float32)
    y = torch.randint(0, n_cls, (4 * chunk,), generator=g).numpy()
    p = p.numpy()
    calls, _ = _calls(p, y, n_fine, chunk)
    assert calls == []  # softmax values: no entropy within 1e-13 of an edge, the kernel's values throughout
    p[:, chunk + 7] = np.float32(1.0 / 3.0)  # a uniform voxel (normalised entropy 1: the last edge) in chunk 1
    calls, out = _calls(p, y, n_fine, chunk)
    assert calls == [(chunk, 2 * chunk)]
    # the row's counts: the reference's bins of the reference's values
    ref = reference_entropy(p)
    bins = np.floor(ref * n_fine).astype(np.int64)
    assert np.array_equal(out["total"][n_cls + 1], np.bincount(bins, minlength=n_fine + 1))


def test_uniform_volume_equals_the_reference(monkeypatch):
    """Every voxel on an edge (uniform probabilities, entropy 1 up to rounding): every chunk takes the reference."""
    probs = torch.full((1, 4, 6, 5, 4), 0.25, dtype=torch.float32)
    probs[0, :, 0] = torch.tensor([0.7, 0.1, 0.1, 0.1])[:, None, None]
    labels = torch.randint(0, 4, (1, 6, 5, 4), generator=torch.Generator().manual_seed(0))
    fused = ConfidenceHistogram(4).update(probs, labels)
    with monkeypatch.context() as m:
        m.setattr(hist_module, "FUSED_KERNELS", False)
        ref = ConfidenceHistogram(4).update(probs, labels)
    assert torch.equal(fused.counts, ref.counts)
    assert torch.equal(fused.sums[..., -1, :], ref.sums[..., -1, :])  # the reference's own values: equal sums


def test_a_voxel_the_two_logarithms_put_in_neighbouring_bins(monkeypatch):
    """p = (t, (1 - t) / 2, (1 - t) / 2) with t found by bisection on the reference's entropy at the edge 2626 / F: the
    kernel's value (2625.9999999999995 F^-1 on the machine it was found on) and torch's (2626 F^-1) straddle the edge.
    The chunk holding it takes the reference's values: the row's counts are the reference's."""
    n_fine = 15 * 2**10
    t = float.fromhex("0x1.ec8d00918946bp-1")
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(3 * torch.randn(3, 3000, generator=g, dtype=torch.float64), 0)
    p[:, 1234] = torch.tensor([t, (1 - t) / 2, (1 - t) / 2], dtype=torch.float64)
    p = np.ascontiguousarray(p.numpy())
    y = np.zeros(3000, np.int64)
    ref_bins = np.floor(reference_entropy(p) * n_fine).astype(np.int64)
    calls, out = _calls(p, y, n_fine, chunk=1024)
    assert calls == [(1024, 2048)]
    assert np.array_equal(out["total"][4], np.bincount(ref_bins, minlength=n_fine + 1))
    fast_bins = np.floor(kernel_entropy(p, n_fine)[0] * n_fine).astype(np.int64)
    if fast_bins[1234] != ref_bins[1234]:  # torch's log rounds as where the voxel was found: without the margin ...
        monkeypatch.setattr(_cpu_kernel, "entropy_margin", lambda n_classes: 0.0)
        calls, out = _calls(p, y, n_fine, chunk=1024)
        assert calls == []
        assert not np.array_equal(out["total"][4], np.bincount(ref_bins, minlength=n_fine + 1))  # ... a wrong count


def test_very_many_fine_bins_take_the_reference_values():
    """With n_fine = 2^20 a chunk of 2^20 voxels would likely hold a voxel near an edge: the caller's values
    throughout, without computing the kernel's first; with the default n_fine the kernel's."""
    n = 1 << 20
    g = torch.Generator().manual_seed(7)
    p = np.ascontiguousarray(torch.softmax(torch.randn(3, n, generator=g, dtype=torch.float64), 0).numpy())
    y = np.zeros(n, np.int64)
    assert _calls(p, y, 1 << 20, chunk=n)[0] == [(0, n)]
    assert _calls(p, y, 15 * 2**10, chunk=n)[0] == []
