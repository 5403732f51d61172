"""The fused update of SampleStats (issue #41) equals the reference torch path and a brute-force numpy computation.

The reference is ``SampleStats`` with ``monai_unc._stats_kernels.FUSED_KERNELS`` off (the torch ops of before); the
brute force sums ``w p``, ``w p^2`` and ``w H(p)`` in float64 numpy, sample by sample. Sums are compared within
``accumulation_error_bound`` (twice it between two float32 paths), the entropy within the rounding of the precision
it is evaluated in; unit weights give the reference's sums bit for bit on the CPU. The Triton kernel is checked on
the CPU under ``TRITON_INTERPRET=1`` (a subprocess) and on a GPU by the ``cuda`` test.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import monai_unc._stats_kernels as kernels
from monai_unc.stats import SampleStats, accumulation_error_bound, derive_measures
from tests._interpreter import run_interpreted

needs_numba = pytest.mark.skipif(not kernels.available("cpu"), reason="numba is not installed")
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")


@pytest.fixture
def reference(monkeypatch):
    """A context in which SampleStats runs its reference torch path."""

    class Switch:
        def __enter__(self):
            monkeypatch.setattr(kernels, "FUSED_KERNELS", False)

        def __exit__(self, *exc):
            monkeypatch.setattr(kernels, "FUSED_KERNELS", True)

    return Switch()


def samples(n, shape, multilabel, dtype, seed=0, sharp=3.0):
    g = torch.Generator().manual_seed(seed)
    if multilabel:
        out = [torch.rand(shape, generator=g, dtype=torch.float64) for _ in range(n)]
        out[0].view(-1)[:3] = torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64)  # 0 log 0 on both sides
    else:
        out = [torch.softmax(sharp * torch.randn(shape, generator=g, dtype=torch.float64), 1) for _ in range(n)]
        out[0][0, :, ...].view(shape[1], -1)[:, 0] = 0.0
        out[0][0, 0, ...].view(-1)[0] = 1.0  # one-hot voxel: p = 0 classes
    return [p.to(dtype) for p in out]


def brute_force(ps, weights, multilabel, per_class):
    """Float64 numpy sums of the samples as given (their rounded values), one sample at a time."""
    sp = sh = s2 = 0.0
    for p, w in zip(ps, weights):
        q = p.double().numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            if multilabel:
                h = -(np.where(q > 0, q * np.log(q), 0.0) + np.where(q < 1, (1 - q) * np.log(1 - q), 0.0))
            else:
                h = -np.where(q > 0, q * np.log(q), 0.0).sum(axis=1, keepdims=True)
        sq = q * q if per_class else (q * q).sum(axis=1, keepdims=True)
        sp, sh, s2 = sp + w * q, sh + w * h, s2 + w * sq
    return sp, sh, s2


#: entropy tolerance per unit of weight: the rounding of the precision the entropy is evaluated in
H_ATOL = {torch.float64: 1e-12, torch.float32: 4e-6, torch.float16: 1.5e-2, torch.bfloat16: 1.2e-1}


def assert_sums_close(a: torch.Tensor, b: torch.Tensor, rtol: float) -> None:
    a, b = a.double(), b.double()
    err = (a - b).abs()
    assert bool((err <= rtol * b.abs() + 1e-300).all()), float((err / b.abs().clamp_min(1e-300)).max())


CASES = [
    # (input dtype, multilabel, class_variance, track_variance, shape)
    (torch.float32, False, True, True, (1, 3, 9, 10, 11)),
    (torch.float32, False, False, True, (2, 4, 7, 13)),
    (torch.float32, True, True, True, (2, 3, 5, 6, 7)),
    (torch.float32, False, True, False, (1, 2, 6, 7, 8)),
    (torch.float64, False, False, True, (2, 3, 5, 6, 7)),
    (torch.float64, True, True, True, (1, 2, 8, 9)),
    (torch.float16, False, True, True, (1, 3, 6, 7, 8)),
    (torch.float16, True, False, True, (2, 3, 9, 10)),
    (torch.bfloat16, False, False, True, (1, 4, 5, 6, 7)),
    (torch.bfloat16, True, True, False, (1, 2, 5, 6, 7)),
]


@needs_numba
@pytest.mark.parametrize("accum", [torch.float64, torch.float32])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype,multilabel,class_variance,track_variance,shape", CASES)
def test_fused_update_equals_reference_and_brute_force(
    reference, dtype, multilabel, class_variance, track_variance, shape, weighted, accum
):
    if dtype == torch.float64 and accum == torch.float32:
        pytest.skip("float64 samples with float32 sums keep the reference path")
    ps = samples(5, shape, multilabel, dtype)
    ws = [0.75, 2.0, 1.0, 0.3, 1.5] if weighted else [1.0] * 5
    opts = {
        "multilabel": multilabel,
        "class_variance": class_variance,
        "track_variance": track_variance,
        "accum_dtype": accum,
    }
    fused = SampleStats(**opts)
    for p, w in zip(ps, ws):
        fused.update(p, w)
    with reference:
        ref = SampleStats(**opts)
        for p, w in zip(ps, ws):
            ref.update(p, w)
    assert fused.count == ref.count and fused.num_updates == ref.num_updates == 5
    assert fused.out_dtype == ref.out_dtype == dtype
    bound = accumulation_error_bound(5 + shape[1], accum)
    names = ["sum_p", "sum_h"] + (["sum_p2"] if track_variance else [])
    assert ref.sum_p2 is None if not track_variance else fused.sum_p2 is not None
    for name in names:
        a, b = getattr(fused, name), getattr(ref, name)
        assert a.shape == b.shape and a.dtype == b.dtype == accum, name
        assert_sums_close(a, b, 2 * bound)
    if not weighted and accum == torch.float64:
        # unit weights: every addition is one correctly rounded s + p, and the entropy is the same torch formula
        assert torch.equal(fused.sum_p, ref.sum_p) and torch.equal(fused.sum_h, ref.sum_h)
    sp, sh, s2 = brute_force(ps, ws, multilabel, class_variance or multilabel)
    assert_sums_close(fused.sum_p, torch.from_numpy(sp), bound)
    if track_variance:
        assert_sums_close(fused.sum_p2, torch.from_numpy(s2), bound)
    atol = H_ATOL[dtype] * sum(ws) + (bound * float(np.abs(sh).max()))
    assert float((fused.sum_h.double() - torch.from_numpy(sh)).abs().max()) <= atol
    # the maps derived from both
    keys = fused.available_keys()
    mf, mr = fused.measures(keys), ref.measures(keys)
    for k in keys:
        assert torch.allclose(mf[k].double(), mr[k].double(), rtol=1e-5, atol=H_ATOL[dtype] * 5), k


@needs_numba
@pytest.mark.parametrize("multilabel", [False, True])
def test_update_many_equals_updates_in_order(multilabel):
    ps = samples(4, (2, 3, 6, 7, 5), multilabel, torch.float32, seed=3)
    ws = [1.0, 0.5, 3.0, 1.25]
    one = SampleStats(multilabel=multilabel, class_variance=False)
    for p, w in zip(ps, ws):
        one.update(p, w)
    batch = SampleStats(multilabel=multilabel, class_variance=False).update_many(torch.cat(ps), 4, ws)
    listed = SampleStats(multilabel=multilabel, class_variance=False).update_many(ps, weights=ws)
    for s in (batch, listed):
        assert s.count == one.count and s.num_updates == 4
        for name in ("sum_p", "sum_h", "sum_p2"):
            assert torch.equal(getattr(s, name), getattr(one, name)), name
    # a second batch on top of earlier samples, unit weights by default
    more = samples(2, (2, 3, 6, 7, 5), multilabel, torch.float32, seed=4)
    batch.update_many(torch.cat(more), num_samples=2)
    for p in more:
        one.update(p)
    assert torch.equal(batch.sum_h, one.sum_h) and batch.num_updates == one.num_updates == 6


def test_update_many_argument_errors():
    p = torch.full((4, 2, 3), 0.5)
    s = SampleStats()
    with pytest.raises(TypeError, match="num_samples"):
        s.update_many(p)
    with pytest.raises(ValueError, match="num_samples"):
        s.update_many(p, num_samples=3)
    with pytest.raises(ValueError, match="num_samples"):
        s.update_many(p, num_samples=0)
    with pytest.raises(ValueError, match="weights"):
        s.update_many(p, num_samples=2, weights=[1.0])
    with pytest.raises(ValueError, match="weights must be positive"):
        s.update_many(p, num_samples=2, weights=[1.0, -1.0])
    with pytest.raises(TypeError, match="weights"):
        s.update_many(p, num_samples=2, weights=[1.0, "2"])
    with pytest.raises(TypeError, match="weights"):
        s.update_many(p, num_samples=2, weights=2.0)
    with pytest.raises(ValueError, match="num_samples"):
        s.update_many([p[:2], p[2:]], num_samples=3)
    with pytest.raises(ValueError, match="does not match the shape of earlier samples"):
        s.update_many([p[:2], p[:1]])
    assert s.sum_p is None and s.num_updates == 0


def _bad_inputs():
    g = torch.Generator().manual_seed(5)
    good = torch.softmax(torch.randn(2, 3, 4, 5, 6, generator=g), 1)
    out = {}
    for name, (c, value) in {
        "nan": (1, float("nan")),
        "inf": (2, float("inf")),
        "neg": (0, -0.2),
        "above": (1, 1.3),
    }.items():
        p = good.clone()
        p[1, c, 3, 4, 5] = value
        out[name] = (p, False)
    out["sum"] = (good * 1.05, False)
    out["sum_border_above"] = (good * (1 + 1.2e-3), False)
    out["sum_border_below"] = (good * (1 + 0.8e-3), False)
    out["one_class"] = (good[:, :1], False)
    out["ints"] = ((good > 0.5).to(torch.int64), False)
    out["two_dims"] = (good[0, :, 0], False)
    out["empty"] = (good[:, :, :0], False)
    out["half_nan"] = (out["nan"][0].half(), False)
    ml = torch.rand(2, 3, 4, 5, generator=g)
    for name, value in {"ml_nan": float("nan"), "ml_above": 1.01, "ml_neg": -0.01, "ml_ok_tol": 1.0005}.items():
        p = ml.clone()
        p[0, 2, 1, 1] = value
        out[name] = (p, True)
    out["ml_no_channel"] = (ml[:, :0], True)
    return out


def _outcome(fn):
    try:
        fn()
    except (ValueError, TypeError) as err:
        return type(err).__name__, str(err)
    return None


@needs_numba
@pytest.mark.parametrize("name", sorted(_bad_inputs()))
def test_validation_rejects_the_same_inputs_with_the_same_messages(reference, name):
    p, multilabel = _bad_inputs()[name]
    fused_single = _outcome(lambda: SampleStats(multilabel=multilabel).update(p))
    stats = SampleStats(multilabel=multilabel)
    fused_many = _outcome(lambda: stats.update_many(torch.cat([p, p]) if p.ndim else p, num_samples=2))
    with reference:
        ref = _outcome(lambda: SampleStats(multilabel=multilabel).update(p))
    assert fused_single == ref
    if ref is not None and p.ndim >= 1 and p.shape[0] > 0:
        assert fused_many == ref
        assert stats.sum_p is None and stats.num_updates == 0  # nothing added
    if name.startswith("sum_border") or name == "ml_ok_tol":
        assert (ref is None) == (name in ("sum_border_below", "ml_ok_tol"))


@needs_numba
def test_a_bad_sample_in_a_batch_raises_before_anything_is_added():
    ps = samples(3, (1, 3, 4, 5, 6), False, torch.float32, seed=6)
    ps[2] = ps[2].clone()
    ps[2][0, 0, 1, 1, 1] = float("nan")
    stats = SampleStats().update(ps[0])
    before = stats.sum_p.clone()
    with pytest.raises(ValueError, match=r"probs contains 1 non-finite value"):
        stats.update_many(torch.cat(ps), num_samples=3)
    assert torch.equal(stats.sum_p, before) and stats.num_updates == 1


@needs_numba
def test_non_contiguous_samples_and_non_contiguous_sums(reference):
    g = torch.Generator().manual_seed(7)
    base = torch.softmax(torch.randn(2, 6, 5, 4, generator=g), -1)  # classes last
    p = base.permute(0, 3, 1, 2)  # (B, C, H, W), not contiguous
    assert not p.is_contiguous()
    fused = SampleStats().update(p).update(p.contiguous(), 0.5)
    with reference:
        ref = SampleStats().update(p).update(p.contiguous(), 0.5)
    assert torch.equal(fused.sum_p, ref.sum_p) and torch.equal(fused.sum_h, ref.sum_h)
    # sums over stitched (non-contiguous) buffers, then more samples
    mean = p.double().transpose(2, 3).contiguous().transpose(2, 3)
    ee = torch.rand(2, 1, 6, 5, generator=g, dtype=torch.float64)
    s = SampleStats.from_moments(mean.clone(), ee.clone(), mean_sq=mean * mean, count=2.0)
    s.update(p)
    with reference:
        r = SampleStats.from_moments(mean.clone(), ee.clone(), mean_sq=mean * mean, count=2.0).update(p)
    for name in ("sum_p", "sum_h", "sum_p2"):
        assert torch.equal(getattr(s, name), getattr(r, name)), name


@needs_numba
def test_validate_false_nan_propagates_like_the_reference(reference):
    p = samples(1, (1, 3, 4, 5), False, torch.float32, seed=8)[0]
    p[0, 1, 2, 2] = float("nan")
    fused = SampleStats(validate=False).update(p)
    with reference:
        ref = SampleStats(validate=False).update(p)
    assert torch.equal(torch.isnan(fused.sum_h), torch.isnan(ref.sum_h))
    assert torch.equal(torch.isnan(fused.sum_p), torch.isnan(ref.sum_p))


def test_reference_path_where_no_kernel_applies():
    # half-precision sums: the reference path (its constructor warns, as the inferers do), same values as before
    p = samples(2, (1, 3, 4, 5), False, torch.float32, seed=9)
    with pytest.warns(UserWarning, match="accum_dtype=torch.float16"):
        s = SampleStats(accum_dtype=torch.float16).update(p[0]).update(p[1])
    assert s.sum_p.dtype == torch.float16
    assert torch.allclose(s.sum_p.float(), (p[0] + p[1]), atol=2e-3)
    assert kernels.backend(p[0], torch.float16) is None
    assert kernels.backend(p[0].double(), torch.float32) is None
    assert kernels.backend(p[0].to(torch.int64), torch.float64) is None


def test_from_moments_passes_finite_values_whose_sum_overflows():
    mean = torch.full((1, 2, 4, 4), 3e38, dtype=torch.float32)  # every value finite, the float32 sum is not
    # not probabilities: the finiteness check alone
    s = SampleStats.from_moments(mean, torch.zeros(1, 1, 4, 4), count=1.0, validate=False)
    assert s.count == 1.0
    mean[0, 1, 2, 3] = float("-inf")
    with pytest.raises(ValueError, match=r"mean contains 1 non-finite value"):
        SampleStats.from_moments(mean, torch.zeros(1, 1, 4, 4), count=1.0)


def test_derive_measures_auto_chunks_equal_one_chunk():
    ps = samples(3, (1, 3, 40, 30, 20), False, torch.float32, seed=10)
    s = SampleStats()
    for p in ps:
        s.update(p)
    keys = s.available_keys()
    auto = derive_measures(s.moments(), keys)
    small = derive_measures(s.moments(), keys, chunk_elements=3 * 30 * 20 * 3)
    whole = derive_measures(s.moments(), keys, chunk_elements=None)
    for k in keys:
        assert torch.equal(auto[k], whole[k]) and torch.equal(small[k], whole[k]), k
    with pytest.raises(ValueError, match="chunk_elements"):
        derive_measures(s.moments(), keys, chunk_elements="big")


#: under TRITON_INTERPRET=1: the Triton kernels forced onto CPU tensors, against the reference path
INTERPRETER_CHECK = r"""
import torch
import monai_unc._stats_kernels as K
from monai_unc.stats import SampleStats, accumulation_error_bound

K._kind = lambda p: "triton"
g = torch.Generator().manual_seed(0)
for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
    for ml in (False, True):
        for cv, tv, accum in ((True, True, torch.float64), (False, True, torch.float32), (True, False, torch.float64)):
            if dt == torch.float64 and accum == torch.float32:
                accum = torch.float64
            shape = (3 * 2, 3, 4, 5, 6)
            ps = torch.rand(shape, generator=g, dtype=torch.float64) if ml else torch.softmax(
                3 * torch.randn(shape, generator=g, dtype=torch.float64), 1)
            ps = ps.to(dt)
            ws = [1.0, 0.5, 2.0]
            opts = dict(multilabel=ml, class_variance=cv, track_variance=tv, accum_dtype=accum)
            K.FUSED_KERNELS = True
            a = SampleStats(**opts).update_many(ps, 3, ws)
            one = SampleStats(**opts)
            for j in range(3):
                one.update(ps[2 * j:2 * j + 2], ws[j])
            K.FUSED_KERNELS = False
            b = SampleStats(**opts)
            for j in range(3):
                b.update(ps[2 * j:2 * j + 2], ws[j])
            bound = 2 * accumulation_error_bound(3 + 3, accum)
            exact = {"sum_p": ps.double().view(3, 2, *shape[1:]), }
            for n in ("sum_p", "sum_h", "sum_p2"):
                x, y, z = getattr(a, n), getattr(b, n), getattr(one, n)
                if y is None:
                    assert x is None and z is None, n
                    continue
                assert x.dtype == y.dtype and x.shape == y.shape, n
                assert torch.equal(x, z), (n, "batch != updates")
                # the entropy in float32 (halves: more accurate than the reference's half evaluation)
                h_tol = {torch.float64: 1e-12, torch.float32: 4e-6, torch.float16: 1.5e-2, torch.bfloat16: 1.2e-1}[dt]
                tol = bound * y.double().abs() + (h_tol * 3.5 if n == "sum_h" else 1e-300)
                assert bool(((x.double() - y.double()).abs() <= tol).all()), (dt, ml, cv, n)
# probabilities the checks accept a little outside [0, 1]: the kernel clamps them as the reference formula does
# (found by hostile testing: -p log tiny made entropies of -0.07 nats)
for dt in (torch.float32, torch.float64):
    for ml in (False, True):
        ps = torch.rand(2, 3, 4, 5, 6, generator=g, dtype=dt) if ml else torch.softmax(
            3 * torch.randn(2, 3, 4, 5, 6, generator=g, dtype=dt), 1)
        if ml:
            ps[0, 0, 1] = 1.0005
            ps[1, 2, 2] = -0.0005
        else:
            ps[:, :, 1] = torch.tensor([1.0004, -0.0002, -0.0002], dtype=dt).view(1, 3, 1, 1)
        out = []
        for fused in (True, False):
            K.FUSED_KERNELS = fused
            out.append(SampleStats(multilabel=ml).update_many(ps, 2).sum_h)
        K.FUSED_KERNELS = True
        assert float(out[1].min()) >= 0 and float(out[0].min()) >= -1e-6, (dt, ml, float(out[0].min()))
        assert torch.allclose(out[0], out[1], rtol=0, atol=1e-5), (dt, ml, float((out[0] - out[1]).abs().max()))
# the checks: the same errors as the reference's
good = torch.softmax(torch.randn(2, 3, 4, 5, 6, generator=g), 1)
for bad, ml in ((float("nan"), False), (-0.3, False), (1.4, True), (float("inf"), True)):
    p = (torch.rand(2, 3, 4, 5, 6, generator=g) if ml else good).clone()
    p[1, 2, 3, 4, 5] = bad
    msgs = []
    for fused in (True, False):
        K.FUSED_KERNELS = fused
        try:
            SampleStats(multilabel=ml).update(p)
        except ValueError as err:
            msgs.append(str(err))
    assert len(msgs) == 2 and msgs[0] == msgs[1], msgs
K.FUSED_KERNELS = True
assert K.value_flags(good.view(2, 3, -1), True)[0] == 0
SampleStats().update(good)
try:
    SampleStats().update(good * 1.01)
except ValueError as err:
    assert "sum to 1" in str(err)
else:
    raise AssertionError("sums off 1 were accepted")
# a window of identical samples: H(m_w) evaluated by the kernel that evaluated each H(p_s) (torch's log differs from
# the kernel's by an ulp), so a deterministic network has MI = 0 exactly under overlapping windows
from monai.inferers import SimpleInferer, SlidingWindowInferer
from monai_unc.inferers import MCDropoutInferer


class Inert(torch.nn.Module):
    def __init__(self, out):
        super().__init__()
        self.conv, self.drop = torch.nn.Conv3d(1, out, 3, padding=1), torch.nn.Dropout(0.5)

    def forward(self, x):
        return 4 * self.conv(x) + 0.0 * self.drop(torch.ones(1)).sum()


# the inferers hand the network's outputs to the kernel (the fused outputs: the activation evaluated there)
import monai_unc.stats as S

calls = []
_outputs = S.fused_accumulate_outputs
S.fused_accumulate_outputs = lambda *a, **k: calls.append(1) or _outputs(*a, **k)
# two 8^3 windows that overlap along x (half of each; 12 x 10 x 14 took 12 windows): the claim is about the
# overlap, not the number of windows, and the interpreter's time grows with the windows; one window per network
# call (sw_batch_size 1), so that a sample's overlapping windows come from two calls, as the 12 windows in three
# calls of 4 did
x = torch.randn(1, 1, 12, 8, 8, generator=g)
for act, out in (("softmax", 3), ("sigmoid", 3), ("sigmoid", 1)):
    torch.manual_seed(0)
    calls.clear()
    res = MCDropoutInferer(4, activation=act, base_inferer=SlidingWindowInferer(
        (8, 8, 8), sw_batch_size=1, overlap=0.5, mode="gaussian"))(x, Inert(out))
    assert calls, (act, out)
    assert float(res["mutual_information"].abs().max()) == 0, (act, out, float(res["mutual_information"].max()))
    assert float(res["window_disagreement"].max()) > 1e-3, (act, out)
    ps = torch.softmax(4 * torch.randn(2, out, 5, 6, 7, generator=g), 1) if act == "softmax" else torch.rand(
        2, out, 5, 6, 7, generator=g)
    s = SampleStats(validate=False, multilabel=act == "sigmoid", accum_dtype=torch.float32).update(ps)
    assert torch.equal(s.sample_entropy(ps), s.sum_h), (act, out)
    # without windows: PE is evaluated by the kernel that evaluated each sample's entropy (found by hostile testing:
    # PE from the float64 mean in float64 against float32 sample entropies left MI ~1e-7)
    torch.manual_seed(0)
    res = MCDropoutInferer(3, activation=act, base_inferer=SimpleInferer())(x, Inert(out))
    assert float(res["mutual_information"].abs().max()) == 0, (act, out, float(res["mutual_information"].max()))
    assert float(res["predictive_entropy"].max()) > 1e-3, (act, out)
from monai_unc import _jit
assert _jit.triton_failure() is None, _jit.triton_failure()  # no silent fallback
print("interpreter check passed")
"""


@needs_triton
@pytest.mark.slow
def test_triton_kernels_under_the_interpreter():
    assert "interpreter check passed" in run_interpreted(INTERPRETER_CHECK)


@pytest.mark.cuda
@pytest.mark.parametrize("multilabel", [False, True])
def test_sample_entropy_is_the_updates_own_on_the_device(cuda_device, multilabel):
    """``sample_entropy`` evaluates H exactly as the update did (on a GPU: the Triton kernel's log, not torch's)."""
    ps = samples(3, (2, 3, 20, 24, 16), multilabel, torch.float32, seed=5)
    for accum in (torch.float64, torch.float32):
        s = SampleStats(multilabel=multilabel, accum_dtype=accum)
        for p in ps:
            s.update(p.to(cuda_device))
        one = SampleStats(multilabel=multilabel, accum_dtype=accum).update(ps[1].to(cuda_device))
        assert torch.equal(s.sample_entropy(ps[1].to(cuda_device)), one.sum_h)
        same = SampleStats(multilabel=multilabel, accum_dtype=accum)
        for _ in range(4):  # identical samples: the entropy of their mean is their expected entropy, bit for bit
            same.update(ps[2].to(cuda_device))
        m = same.moments()
        if accum == torch.float64:  # float64 sums of 4 equal float32 values: the mean is the value itself
            assert torch.equal(same.sample_entropy(m["pred"].float()), m["expected_entropy"])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fused_update_on_the_device_equals_the_reference(cuda_device, monkeypatch, dtype):
    if cuda_device.type != "cuda" or not kernels.available("cuda"):
        pytest.skip("needs a CUDA device with Triton")
    ps = [p.to(cuda_device) for p in samples(4, (2, 3, 20, 24, 16), False, dtype, seed=11)]
    batch = torch.cat(ps)
    for cv in (True, False):
        fused = SampleStats(class_variance=cv).update(ps[0], 0.5).update_many(batch[2:], num_samples=3)
        monkeypatch.setattr(kernels, "FUSED_KERNELS", False)
        ref = SampleStats(class_variance=cv).update(ps[0], 0.5)
        for p in ps[1:]:
            ref.update(p)
        monkeypatch.setattr(kernels, "FUSED_KERNELS", True)
        bound = 2 * accumulation_error_bound(4 + 3, torch.float64)
        assert_sums_close(fused.sum_p, ref.sum_p, bound)
        assert_sums_close(fused.sum_p2, ref.sum_p2, bound)
        h = (fused.sum_h - ref.sum_h).abs().max().item()
        assert h <= H_ATOL[dtype] * 4.5, h
        bad = ps[1].clone()
        bad[0, 1, 2, 3, 4] = float("nan")
        with pytest.raises(ValueError, match=r"probs contains 1 non-finite value"):
            SampleStats().update(bad)


@pytest.mark.cuda
def test_fused_update_synchronises_only_for_the_checks(cuda_device):
    if cuda_device.type != "cuda" or not kernels.available("cuda"):
        pytest.skip("counts CUDA synchronisations of the Triton update")
    from tests._device import count_synchronisations

    ps = [p.to(cuda_device) for p in samples(3, (1, 3, 24, 24, 24), False, torch.float32, seed=12)]
    batch = torch.cat(ps)
    for validate, expected in ((False, 0), (True, 1)):
        s = SampleStats(validate=validate).update(ps[0])  # compiles and caches the kernel and its constants
        s.update_many(batch, num_samples=3, weights=[0.5, 1.0, 2.0])
        with count_synchronisations() as syncs:
            s.update(ps[1])
            s.update_many(batch, num_samples=3, weights=[0.5, 1.0, 2.0])
        # validate=True: one read of the checks' flags per call (two calls)
        assert len(syncs) == 2 * expected, (validate, syncs)


@needs_numba
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("class_variance", [False, True])
def test_many_chunks_and_threads_equal_the_reference(reference, monkeypatch, dtype, class_variance):
    # chunks of 512 voxels that do not divide the volume, shared between two threads: every chunk's offsets (and
    # the half-precision path's chunk-local copies) reach the right voxels; unit weights: bit for bit
    monkeypatch.setattr(kernels, "CPU_CHUNK_ELEMENTS", 1024)
    monkeypatch.setattr(kernels, "CPU_MIN_VOXELS_PER_THREAD", 512)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    shape = (2, 3, 17, 13, 11)  # 2431 voxels: four full chunks and a part
    ps = samples(3, shape, False, dtype, seed=4)
    opts = {"class_variance": class_variance, "accum_dtype": torch.float64}
    fused = SampleStats(**opts).update_many(torch.cat(ps), 3)
    with reference:
        ref = SampleStats(**opts)
        for p in ps:
            ref.update(p)
    for name in ("sum_p", "sum_h", "sum_p2"):
        assert torch.equal(getattr(fused, name), getattr(ref, name)), name
    # the read-only check pass over the same chunks: a value out of range in the last, partial chunk
    bad = ps[1].clone()
    bad[1, 2, 16, 12, 10] = 1.5
    with pytest.raises(ValueError) as fused_err:
        SampleStats(**opts).update(bad)
    with reference, pytest.raises(ValueError) as ref_err:
        SampleStats(**opts).update(bad)
    assert str(fused_err.value) == str(ref_err.value)
