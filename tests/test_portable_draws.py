"""Seeded CPU dropout masks drawn alike on every CPU (:class:`monai_unc._utils.PortableDraws`).

Found by review 75: PyTorch draws a CPU dropout mask (``bernoulli_`` with a number ``p``) with Intel MKL's generator
on an Intel CPU and with its own Mersenne Twister on any other (PyTorch issues #84030, #121595), so a seeded call gave
other maps on an Intel machine than the documented ones (measured on an AMD one), and the tests that compare seeded
maps with documented tables failed there. A seeded CPU call now draws its masks with a tensor probability, which never
takes the MKL path: on a non-Intel CPU the results are bit for bit torch's own.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from monai_unc._utils import PortableDraws, seeded_rng
from monai_unc.inferers import MCDropoutInferer


class _Ops(TorchDispatchMode):
    """Records the ATen operations that run."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _torch_draws_another_way() -> bool:
    """Whether torch's own CPU dropout draws other masks than the reference on this machine (Intel MKL's generator).

    Measured, not read from the CPU's vendor: on a virtualised Intel Xeon (AVX-512) torch 2.14's own masks equalled
    the reference, and a test skipped for every Intel CPU skipped there what it could check.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        own = torch.nn.functional.dropout(torch.ones(4096), 0.5) != 0
        torch.manual_seed(0)
        return not torch.equal(own, torch.rand(4096, dtype=torch.float64) < 0.5)


def _keep(shape: tuple[int, ...], p: float) -> torch.Tensor:
    """The reference mask: torch's uniform float64 draws (53 bits, no MKL path on any CPU) below ``1 - p``."""
    return torch.rand(shape, dtype=torch.float64) < 1 - p


@pytest.mark.parametrize("p", [0.1, 0.5, 0.37])
def test_masks_are_the_generators_uniform_draws_below_the_keep_rate(p):
    """Independent reference: ``torch.rand`` in float64 from the same seed, compared with ``1 - p``."""
    x = torch.randn(3, 4, 5, 6, 7)
    with PortableDraws():
        torch.manual_seed(7)
        y = F.dropout(x, p)
        torch.manual_seed(7)
        z = F.dropout3d(x, p)
        torch.manual_seed(7)
        drop = F.alpha_dropout(x, p, training=True)
        torch.manual_seed(7)
        b = torch.empty(1000).bernoulli_(p)
    torch.manual_seed(7)
    keep = _keep(x.shape, p)
    torch.testing.assert_close(y, torch.where(keep, x / (1 - p), torch.zeros(())), rtol=1e-6, atol=0)
    assert torch.equal(y != 0, keep)
    torch.manual_seed(7)
    channels = _keep((3, 4, 1, 1, 1), p)
    assert torch.equal((z != 0).all(dim=(2, 3, 4), keepdim=True), channels)
    alpha = 1.7580993408473766
    a = 1 / math.sqrt((alpha**2 * p + 1) * (1 - p))
    torch.testing.assert_close(drop, torch.where(keep, a * x + alpha * a * p, torch.full((), alpha * a * (p - 1))))
    torch.manual_seed(7)
    assert torch.equal(b, (torch.rand(1000, dtype=torch.float64) < p).float())  # success with probability p


_CALLS = {
    "F.dropout": lambda x: F.dropout(x, 0.3),
    "F.dropout keywords": lambda x: F.dropout(x, p=0.2, training=True),
    "F.dropout in place": lambda x: F.dropout(x.clone(), 0.3, True, True),
    "F.alpha_dropout": lambda x: F.alpha_dropout(x, 0.3, True),
    "F.dropout3d": lambda x: F.dropout3d(x, 0.4),
    "F.dropout3d in place": lambda x: F.dropout3d(x.clone(), 0.4, inplace=True),
    "F.dropout3d unbatched": lambda x: F.dropout3d(x[0], 0.4),
    "F.dropout3d unbatched in place": lambda x: F.dropout3d(x[0].clone(), 0.4, True, True),
    "F.dropout2d": lambda x: F.dropout2d(x[:, :, 0], 0.4),
    "F.dropout1d": lambda x: F.dropout1d(x[:, :, 0, 0], 0.4),
    "F.dropout1d unbatched": lambda x: F.dropout1d(x[0, :, 0, 0], 0.4),
    "F.feature_alpha_dropout": lambda x: F.feature_alpha_dropout(x, 0.4, True),
    "torch.dropout": lambda x: torch.dropout(x, 0.3, True),
    "torch.feature_dropout_": lambda x: torch.feature_dropout_(x.clone(), 0.3, True),
    "torch.alpha_dropout": lambda x: torch.alpha_dropout(x, 0.3, train=True),
    "Tensor.bernoulli_": lambda x: x.clone().bernoulli_(0.3),
    "Tensor.bernoulli_ default": lambda x: x.clone().bernoulli_(),
    "torch.bernoulli": lambda x: torch.bernoulli(x, 0.3),
    "torch.bernoulli channels last": lambda x: torch.bernoulli(x.to(memory_format=torch.channels_last_3d), 0.3),
    "Tensor.bernoulli_ channels last": lambda x: x.to(memory_format=torch.channels_last_3d).bernoulli_(0.3),
    "F.dropout channels last": lambda x: F.dropout(x.to(memory_format=torch.channels_last_3d), 0.3),
    "F.dropout expanded": lambda x: F.dropout(x[:1].expand(4, *x.shape[1:]), 0.3),
    "nn.Dropout": lambda x: torch.nn.Dropout(0.3)(x),
    "nn.Dropout3d": lambda x: torch.nn.Dropout3d(0.3)(x),
    "DropPath": lambda x: x * x.new_empty((x.shape[0], 1, 1, 1, 1)).bernoulli_(0.8) / 0.8,
    "p = 1": lambda x: F.dropout(x, 1.0),
    "p = 0": lambda x: F.dropout(x, 0.0),
    "eval mode": lambda x: F.dropout(x, 0.3, training=False),
    "own generator": lambda x: x.clone().bernoulli_(0.3, generator=torch.Generator().manual_seed(3)),
}


@pytest.mark.skipif(_torch_draws_another_way(), reason="torch's own CPU masks come from Intel MKL's generator here")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("call", list(_CALLS))
def test_every_call_is_bit_for_bit_torchs_own_on_a_cpu_whose_torch_draws_without_mkl(call, dtype):
    """Outputs, their strides and the generator's state after the call equal torch's own call: the seeded maps and
    documented tables measured before are unchanged."""
    x = torch.randn(3, 4, 5, 6, 7).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(11)
        own, after_own = _CALLS[call](x), torch.rand(3)
        with PortableDraws():
            torch.manual_seed(11)
            ours, after = _CALLS[call](x), torch.rand(3)
    assert ours.dtype == own.dtype and ours.stride() == own.stride()
    assert torch.equal(ours, own) and torch.equal(after, after_own)


def test_dropout_draws_with_a_tensor_probability_inside_a_seeded_cpu_call_only():
    """The MKL path is ``bernoulli_`` with a number; inside :func:`seeded_rng` on the CPU dropout takes the other."""
    x = torch.randn(2, 3, 4, 5, 6)
    with _Ops() as plain:
        F.dropout3d(x, 0.3)
        F.dropout(x, 0.3)
    assert [o for o in plain.ops if "bernoulli" in o] == ["aten.bernoulli_.float"] * 2
    with _Ops() as seeded, seeded_rng(0, []):
        F.dropout3d(x, 0.3)
        F.dropout(x, 0.3)
        torch.nn.Dropout(0.2)(x)
    assert [o for o in seeded.ops if "bernoulli" in o] == ["aten.bernoulli_.Tensor"] * 3


def test_a_seeded_inferer_on_the_cpu_never_draws_with_a_number_probability():
    """A seeded ``MCDropoutInferer`` call (shared passes, the default, and full passes) draws every mask with a tensor
    probability; an unseeded one keeps torch's own (fastest) path."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(0.3), torch.nn.Conv3d(4, 4, 1),
                              torch.nn.Dropout(0.2), torch.nn.Conv3d(4, 2, 1)).eval()
    x = torch.randn(1, 1, 8, 8, 8)
    for share in (True, False):
        with _Ops() as ops:
            seeded = MCDropoutInferer(num_samples=4, seed=3, share_passes=share)(x, net)["mutual_information"]
        drawn = [o for o in ops.ops if "bernoulli" in o]
        assert drawn and set(drawn) == {"aten.bernoulli_.Tensor"}, share
        again = MCDropoutInferer(num_samples=4, seed=3, share_passes=share)(x, net)["mutual_information"]
        assert torch.equal(seeded, again)
    with _Ops() as ops:
        MCDropoutInferer(num_samples=4)(x, net)
    assert "aten.bernoulli_.float" in ops.ops


def test_refusals_are_torchs():
    """A probability outside [0, 1] or a wrong input is torch's own error, inside the block as outside it."""
    x = torch.randn(2, 3, 4)
    with PortableDraws():
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
            F.dropout(x, 1.5)
        with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input"):
            F.dropout1d(torch.randn(2, 3, 4, 5), 0.3)
        with pytest.raises(RuntimeError):
            torch.empty(3).bernoulli_(1.5)


def test_a_metatensor_stays_a_metatensor():
    monai = pytest.importorskip("monai")
    x = monai.data.MetaTensor(torch.randn(2, 3, 4, 5, 6), meta={"note": 1})
    with PortableDraws():
        torch.manual_seed(1)
        y = F.dropout(x, 0.3)
    torch.manual_seed(1)
    assert type(y) is type(x) and y.meta["note"] == 1
    assert torch.equal(y.as_tensor() != 0, _keep(x.shape, 0.3))


def test_what_torch_refuses_or_records_stays_torchs():
    """Found by the review of the mode: ``training=1`` was accepted (torch refuses an int), and ``torch.bernoulli``
    of a MetaTensor or of a tensor that requires grad lost the class or the autograd record."""
    x = torch.randn(2, 3, 4)
    with PortableDraws(), pytest.raises(TypeError, match="must be bool"):
        F.dropout(x, 0.3, 1)
    w = torch.rand(2, 3, requires_grad=True)
    torch.manual_seed(4)
    own = torch.bernoulli(w, 0.3)
    with PortableDraws():
        torch.manual_seed(4)
        ours = torch.bernoulli(w, 0.3)
    assert ours.requires_grad == own.requires_grad and type(ours.grad_fn) is type(own.grad_fn)
    monai = pytest.importorskip("monai")
    m = monai.data.MetaTensor(torch.rand(2, 3), meta={"note": 2})
    with PortableDraws():
        assert type(torch.bernoulli(m, 0.3)) is type(m) and type(m.bernoulli(0.3)) is type(m)
