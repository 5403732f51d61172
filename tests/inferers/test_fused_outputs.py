"""The fused update of network outputs (issue #41: the MC overhead of a small network on a GPU).

Where the Triton kernel runs, the inferers hand each sample's network output to
``SampleStats._update_outputs``: the kernel evaluates the activation (softmax, a sigmoid per channel, or one
channel as two classes), flags non-finite outputs and adds every sum in one launch. The reference is the separate
steps that run elsewhere (torch's activation, the outputs' range check, the update of probabilities): the sums and
the inferers' maps must equal them within float32 rounding, a non-finite output must raise the same error, and a
deterministic network must keep MI = 0 exactly. The kernel runs on the CPU under ``TRITON_INTERPRET=1`` (a
subprocess) and on a GPU in the ``cuda`` tests; on the CPU without the interpreter the path declines.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import monai_unc._stats_kernels as kernels
from monai_unc.inferers.sampling import _to_probs
from monai_unc.stats import SampleStats
from tests._interpreter import run_interpreted

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")


def test_the_cpu_takes_the_separate_steps():
    z = torch.randn(2, 3, 4, 5, 6)
    flag = torch.zeros(1, dtype=torch.int32)
    assert not kernels.takes_outputs(z, torch.float64)
    s = SampleStats(validate=False)
    assert s._update_outputs(z, "softmax", 1, flag) is False
    assert s.sum_p is None and s.num_updates == 0 and s.accum_dtype == SampleStats(validate=False).accum_dtype


def test_update_outputs_declines_what_it_does_not_take(monkeypatch):
    """Declined (False, nothing added) without a call of the kernel: validation on, a multi-label mismatch, too few
    channels, a shape unlike the sums', a sample count that does not divide the batch."""
    calls = []
    s = SampleStats(validate=False).update(torch.softmax(torch.randn(2, 3, 4, 6), 1))  # the update of probabilities
    monkeypatch.setattr("monai_unc.stats.fused_takes_outputs", lambda z, accum: True)
    monkeypatch.setattr("monai_unc.stats.fused_accumulate_outputs", lambda *a, **k: calls.append(a))
    flag = torch.zeros(1, dtype=torch.int32)
    z = torch.randn(2, 3, 4, 5)
    assert not SampleStats(validate=True)._update_outputs(z, "softmax", 1, flag)
    assert not SampleStats(validate=False, multilabel=True)._update_outputs(z, "softmax", 1, flag)
    assert not SampleStats(validate=False)._update_outputs(z, "sigmoid", 1, flag)
    assert not SampleStats(validate=False)._update_outputs(z[:, :1], "softmax", 1, flag)
    assert not SampleStats(validate=False)._update_outputs(z, "binary_sigmoid", 1, flag)  # 3 channels, not 1
    assert not SampleStats(validate=False)._update_outputs(z, "softmax", 3, flag)  # 3 does not divide 2
    assert not s._update_outputs(z, "softmax", 1, flag)  # another spatial shape: the update's error, elsewhere
    assert calls == []
    assert s._update_outputs(torch.randn(2, 3, 4, 6), "softmax", 1, flag) and len(calls) == 1
    assert s.num_updates == 2 and s.count == 2.0


def test_accumulate_outputs_argument_errors(monkeypatch):
    z = torch.randn(2, 1, 10)
    sums = [torch.zeros(2, 2, 10, dtype=torch.float64), torch.zeros(2, 1, 10, dtype=torch.float64), None]
    flag = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match="Triton kernel only"):
        kernels.accumulate_outputs(z, [1.0], *sums, False, "binary_sigmoid", flag)
    monkeypatch.setattr(kernels, "_kind", lambda p: "triton")
    # a check that let a call through would launch: a failure here, not a build failure that turns the kernels off
    monkeypatch.setattr(kernels, "run_triton", lambda *a, **k: pytest.fail("the kernel was launched"))
    with pytest.raises(ValueError, match="activation must be one of"):
        kernels.accumulate_outputs(z, [1.0], *sums, False, "relu", flag)
    with pytest.raises(ValueError, match="reads one output channel"):
        kernels.accumulate_outputs(torch.randn(2, 2, 10), [1.0], *sums, False, "binary_sigmoid", flag)
    with pytest.raises(ValueError, match="nonfinite must be an int32"):
        kernels.accumulate_outputs(z, [1.0], *sums, False, "binary_sigmoid", flag.long())
    with pytest.raises(ValueError, match="sum_p must be a contiguous"):
        kernels.accumulate_outputs(z, [1.0], torch.zeros(2, 3, 10, dtype=torch.float64), *sums[1:], False,
                                   "binary_sigmoid", flag)
    with pytest.raises(ValueError, match="sample rows do not hold"):
        kernels.accumulate_outputs(z, [1.0, 1.0], *sums, False, "binary_sigmoid", flag)
    # found by hostile testing: the kernel reads the outputs as contiguous rows (a transposed view gave a softmax off
    # by 0.89) and float64 outputs went into float32 sums
    with pytest.raises(ValueError, match="contiguous floating-point"):
        kernels.accumulate_outputs(torch.randn(2, 10, 2).transpose(1, 2), [1.0], *sums, False, "softmax", flag)
    with pytest.raises(ValueError, match="float64 for float64 outputs"):
        kernels.accumulate_outputs(z.double(), [1.0], sums[0].float(), sums[1].float(), None, False,
                                   "binary_sigmoid", flag)
    with pytest.raises(ValueError, match="share one dtype"):
        kernels.accumulate_outputs(z, [1.0], sums[0], sums[1].float(), None, False, "binary_sigmoid", flag)


def test_accumulate_refuses_samples_that_are_not_contiguous_rows():
    p = torch.softmax(torch.randn(2, 10, 3), 2).transpose(1, 2)  # (2, 3, 10), not contiguous
    sums = [torch.zeros(2, 3, 10, dtype=torch.float64), torch.zeros(2, 1, 10, dtype=torch.float64), None]
    with pytest.raises(ValueError, match="p3 must be a contiguous"):
        kernels.accumulate(p, [1.0], *sums, False, False, lambda c: c)


def test_update_outputs_hands_on_plain_tensors(monkeypatch):
    """A MONAI MetaTensor reaches the kernel as a plain tensor (found by hostile testing: under the interpreter, its
    ``new_empty`` failed inside Triton, which took it for a build failure and turned the kernels off)."""
    from monai.data import MetaTensor

    seen = []
    monkeypatch.setattr("monai_unc.stats.fused_takes_outputs", lambda z, accum: True)
    monkeypatch.setattr("monai_unc.stats.fused_accumulate_outputs", lambda z3, *a, **k: seen.append(type(z3)))
    z = MetaTensor(torch.randn(1, 3, 4, 5))
    assert SampleStats(validate=False)._update_outputs(z, "softmax", 1, torch.zeros(1, dtype=torch.int32))
    assert seen == [torch.Tensor]


def test_triton_launches_run_on_their_tensors_device(monkeypatch):
    """Triton launches on CUDA's current device: ``run_triton`` makes the first tensor's device current (found by
    hostile testing: tensors on ``cuda:1`` while the current device is 0)."""
    from monai_unc import _jit

    entered = []

    class Device:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            entered.append(self.device)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", Device)
    for device, switched in ((torch.device("cuda", 1), True), (torch.device("cuda", 0), False),
                             (torch.device("cpu"), False), (torch.device("cuda"), False), (None, False)):
        entered.clear()
        with _jit.device_guard(device):
            pass
        assert entered == ([device] if switched else []), device
    seen = []
    monkeypatch.setattr(_jit, "device_guard", lambda device: seen.append(device) or Device(device))
    t = torch.zeros(2, device="meta")
    assert _jit.run_triton(lambda a, b: "ran", 3, t) == "ran"
    assert seen == [t.device]


#: under TRITON_INTERPRET=1: the Triton kernel forced onto CPU tensors, against the separate steps
INTERPRETER_CHECK = r"""
import torch
import monai_unc._stats_kernels as K
import monai_unc.stats as S
from monai.inferers import SimpleInferer, SlidingWindowInferer
from monai_unc.inferers import MCDropoutInferer
from monai_unc.inferers.sampling import _to_probs
from monai_unc.stats import SampleStats

K._kind = lambda p: "triton"
calls = []
_kernel = S.fused_accumulate_outputs
def counted(*a, **k):
    calls.append(a[6])
    return _kernel(*a, **k)
S.fused_accumulate_outputs = counted

g = torch.Generator().manual_seed(0)
# 1. the sums against torch's activation and the update of probabilities
for act, cin in (("softmax", 3), ("softmax", 5), ("sigmoid", 3), ("binary_sigmoid", 1)):
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for cv, tv in ((False, True), (True, True), (False, False)):
            z = (4 * torch.randn(6, cin, 4, 5, 6, generator=g, dtype=torch.float64)).to(dt)
            z[0, 0, 0, 0, 0] = 60.0  # saturated: probabilities 0 and 1
            ml = act == "sigmoid"
            flag = torch.zeros(1, dtype=torch.int32)
            opts = dict(validate=False, multilabel=ml, class_variance=cv, track_variance=tv)
            a = SampleStats(**opts)
            assert a._update_outputs(z[:2], act, 1, flag)
            assert a._update_outputs(z[2:], act, 2, flag)  # two samples stacked on the batch axis
            # the separate steps: torch's activation, then the update of probabilities, its three samples in one
            # launch (update_many adds them bit for bit as three updates do: tests/test_stats_fused.py's check)
            p, m = _to_probs(z, "softmax" if act == "softmax" else "sigmoid", check=False)
            assert m == ml
            b = SampleStats(**opts).update_many(p, 3)
            assert int(flag) == 0 and a.count == b.count == 3.0 and a.num_updates == b.num_updates == 3
            assert a.out_dtype == b.out_dtype and a.accum_dtype == b.accum_dtype, (a.out_dtype, b.out_dtype)
            tol = 1e-12 if dt == torch.float64 else 3e-6
            for n in ("sum_p", "sum_h", "sum_p2"):
                x, y = getattr(a, n), getattr(b, n)
                if y is None:
                    assert x is None, n
                    continue
                assert x.shape == y.shape and x.dtype == y.dtype, (act, dt, n)
                err = float((x - y).abs().max())
                assert err <= tol, (act, dt, cv, n, err)
        # 2. a non-finite output sets the flag; finite ones leave it at 0
        for bad in (float("nan"), float("inf"), -float("inf")):
            zz = z[:2].clone()
            zz[1, cin - 1, 2, 3, 4] = bad
            flag = torch.zeros(1, dtype=torch.int32)
            assert SampleStats(validate=False, multilabel=ml)._update_outputs(zz, act, 1, flag)
            assert int(flag) == 1, (act, dt, bad)


# 3. the inferers: the same maps with the fused outputs and with the separate steps, the same error for a
# non-finite output, and the fused kernel taken once per sample (per replay batch)
class Net(torch.nn.Module):
    def __init__(self, out, bad=None):
        super().__init__()
        self.conv, self.drop = torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout(0.3)
        self.head = torch.nn.Conv3d(4, out, 1)
        self.bad = bad

    def forward(self, x):
        y = 3 * self.head(self.drop(self.conv(x)))
        if self.bad is not None:
            y = y.clone()
            y[0, 0, 1, 1, 1] = self.bad
        return y


# three 8^3 windows that overlap along x in two calls, of two windows and of one (12 x 10 x 14 took 12 windows in 6
# calls of 2): the claim is the equality of the maps, not the number of windows, and the interpreter's time grows
# with the launches; a call still holds a batch of two windows, overlapping windows still come from two calls, and
# the 896 voxels of one pass are one full block of the kernel and a partial one
x = torch.randn(1, 1, 14, 8, 8, generator=g)
windows = (SimpleInferer(), SlidingWindowInferer((8, 8, 8), sw_batch_size=2, overlap=0.5, mode="gaussian"))
for act, out in (("softmax", 3), ("sigmoid", 3), ("sigmoid", 1)):
    torch.manual_seed(1)
    net = Net(out).eval()
    for base in windows:
        maps = []
        for fused in (True, False):
            K.FUSED_OUTPUTS = fused
            calls.clear()
            maps.append(MCDropoutInferer(5, activation=act, base_inferer=base, seed=3)(x, net))
            assert bool(calls) == fused, (act, fused, len(calls))
        K.FUSED_OUTPUTS = True
        assert maps[0].keys() == maps[1].keys()
        for k in maps[0]:
            if isinstance(maps[0][k], torch.Tensor) and maps[0][k].is_floating_point():
                err = float((maps[0][k].double() - maps[1][k].double()).abs().max())
                assert err <= 2e-6, (act, out, type(base).__name__, k, err)
        calls.clear()
        kept = MCDropoutInferer(3, activation=act, base_inferer=base, seed=3, keep_samples=True)(x, net)
        assert calls == [] and "samples" in kept  # the samples need their probabilities: the separate steps
    for bad in (float("nan"), float("inf"), -float("inf")):
        msgs = []
        for fused in (True, False):
            K.FUSED_OUTPUTS = fused
            try:
                MCDropoutInferer(3, activation=act, seed=0)(x, Net(out, bad).eval())
            except ValueError as err:
                msgs.append(str(err))
        K.FUSED_OUTPUTS = True
        assert len(msgs) == 2 and msgs[0] == msgs[1] and "non-finite" in msgs[0], (act, bad, msgs)


# 4. a deterministic network keeps MI = 0 exactly through the fused outputs: tests/test_stats_fused.py's check
from monai_unc import _jit
assert _jit.triton_failure() is None, _jit.triton_failure()  # no silent fallback
print("fused outputs check passed")
"""


@needs_triton
@pytest.mark.slow
def test_fused_outputs_under_the_interpreter():
    assert "fused outputs check passed" in run_interpreted(INTERPRETER_CHECK)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fused_outputs_on_the_device_equal_the_separate_steps(cuda_device, dtype):
    """On a GPU: the sums within float32 rounding of torch's activation and the update (absolute: the kernel's
    exponential may flush a probability below 1e-38 to 0), the flag set by a non-finite output only."""
    if cuda_device.type != "cuda" or not kernels.takes_outputs(torch.zeros(1, 2, 1, device=cuda_device),
                                                               torch.float64):
        pytest.skip("needs a CUDA device with Triton")
    g = torch.Generator().manual_seed(3)
    for act, cin in (("softmax", 3), ("sigmoid", 3), ("binary_sigmoid", 1)):
        z = (4 * torch.randn(6, cin, 20, 24, 16, generator=g)).to(dtype).to(cuda_device)
        ml = act == "sigmoid"
        flag = torch.zeros(1, dtype=torch.int32, device=cuda_device)
        a = SampleStats(validate=False, multilabel=ml)
        assert a._update_outputs(z[:2], act, 1, flag) and a._update_outputs(z[2:], act, 2, flag)
        b = SampleStats(validate=False, multilabel=ml)
        for j in range(3):
            b.update(_to_probs(z[2 * j:2 * j + 2], "softmax" if act == "softmax" else "sigmoid", check=False)[0])
        assert int(flag) == 0
        for n in ("sum_p", "sum_h", "sum_p2"):
            err = float((getattr(a, n) - getattr(b, n)).abs().max())
            assert err <= 2e-5, (act, n, err)
        bad = z[:2].clone()
        bad[1, 0, 2, 3, 4] = float("-inf")
        assert SampleStats(validate=False, multilabel=ml)._update_outputs(bad, act, 1, flag) and int(flag) == 1


@pytest.mark.cuda
def test_fused_outputs_add_no_synchronisation_per_sample(cuda_device):
    """The inferer's synchronisations do not grow with the samples: the outputs' check is read once per window."""
    if cuda_device.type != "cuda":
        pytest.skip("counts CUDA synchronisations")
    from monai_unc.inferers import MCDropoutInferer
    from tests._device import count_synchronisations

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Dropout(0.2), torch.nn.Conv3d(1, 3, 3, padding=1)).to(cuda_device).eval()
    x = torch.randn(1, 1, 16, 16, 16, device=cuda_device)
    counts = []
    for n in (3, 9):
        MCDropoutInferer(n, activation="softmax", seed=0)(x, net)  # compiles, remembers the plain trace
        with count_synchronisations() as syncs:
            MCDropoutInferer(n, activation="softmax", seed=0)(x, net)
        counts.append(len(syncs))
    assert counts[0] == counts[1], counts
