"""Hostile review of shared passes on networks users write (session 33, side ``sharing``).

- a kept module call that writes into its input (a pre-activation block's ``ReLU(inplace=True)`` on an encoder
  feature that the decoder also reads) was skipped by the replays, so the feature stayed unwritten;
- MC dropout with a MONAI invertible transform as TTA (``InvertibleTransformSource``) crashed with shared passes;
- a TorchScript or ``torch.compile`` submodule hides its operations from the trace: shared passes reused its random
  draws (TorchScript) or crashed inside dynamo (compiled).

Injected masks and the helpers come from ``test_shared``.
"""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
import torch.nn.functional as F
from monai.inferers import SlidingWindowInferer
from torch import nn

from monai_unc.inferers import MCDropoutInferer
from monai_unc.networks import shared as shared_module
from monai_unc.networks.shared import SharedPasses

from .test_shared import BankDropout, MaskBank, assert_maps_close, run_both


class _OneDraw(nn.Module):
    """A random operation whose values do not matter: every sample equals the deterministic pass."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (torch.rand_like(x) >= 0).to(x.dtype)


class _PreActivationUNet(nn.Module):
    """The down block starts with ``ReLU(inplace=True)`` on the encoder feature the decoder reads as its skip."""

    def __init__(self, drop: nn.Module, how: str = "relu") -> None:
        super().__init__()
        self.enc1 = nn.Conv2d(1, 8, 3, padding=1)
        first = nn.ReLU(inplace=True) if how == "relu" else _AddInPlace()
        self.enc2 = nn.Sequential(first, nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1))
        self.drop = drop
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.dec = nn.Conv2d(16, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        return self.dec(torch.cat([self.up(self.drop(e2)), e1], 1))


class _AddInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x += 1.0
        return x


@pytest.mark.parametrize("how", ["relu", "iadd"])
@pytest.mark.parametrize("min_shared_work", [None, 0.0])
def test_a_kept_call_that_writes_into_its_input_is_not_skipped(how, min_shared_work):
    """Found by hostile review: the replays skipped the down block (kept) but recomputed the encoder feature it writes
    into (its output was changed after it was kept), so the decoder read the feature without the block's in-place
    ReLU: every replayed sample 0.44 off the full pass. A call that writes into its input is not kept."""
    torch.manual_seed(0)
    net = _PreActivationUNet(_OneDraw(), how).eval()
    x = torch.randn(1, 1, 16, 16)
    with torch.no_grad():
        ref = net(x.clone())
        passes = SharedPasses(net, min_shared_work=min_shared_work)
        first = passes.trace(net, x)
        more = passes.replay(net, x, 3)
        again = passes.replay(net, x, 2)
    assert passes.shared_calls >= 1 and not passes.plain  # the encoder's first convolution is still shared
    torch.testing.assert_close(first, ref, rtol=0, atol=0)
    torch.testing.assert_close(more, ref.repeat(3, 1, 1, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(again, ref.repeat(2, 1, 1, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sw_batch", [1, 2])
def test_pre_activation_unet_maps_equal_full_passes_injected_masks(sw_batch):
    """The MC dropout maps of the pre-activation U-Net with injected masks: shared passes equal full passes (0.1 off
    in ``pred`` before)."""
    bank = MaskBank()
    torch.manual_seed(0)
    net = _PreActivationUNet(BankDropout(bank, "drop")).eval()
    bank.watch(net)
    x = torch.randn(1, 1, 24, 24)

    def make(share: bool) -> MCDropoutInferer:
        return MCDropoutInferer(num_samples=6, share_passes=share, sample_batch_size=3 if share else "auto",
                                base_inferer=SlidingWindowInferer((16, 16), sw_batch_size=sw_batch, overlap=0.5))

    full, shared = run_both(make, x, net, bank)
    assert_maps_close(full, shared)


@pytest.mark.parametrize(("sw_batch", "sample_batch"), [(1, "auto"), (2, 4)])
def test_mc_dropout_with_monai_invertible_tta_equals_full_passes_injected_masks(sw_batch, sample_batch):
    """Found by hostile review: ``InvertibleTransformSource`` inverted only the first ``B`` rows of a replay's ``k B``
    samples, and the inferer raised a ValueError traceback (``num_samples must be a positive divisor ...``) with the
    defaults. Each replayed sample is now inverted with its input's transform: the maps equal full passes."""
    from monai.transforms import Rotate90

    from monai_unc.inferers import InvertibleTransformSource, MCDropoutSource, UncertaintyInferer

    bank = MaskBank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                        BankDropout(bank, "drop"), nn.Conv2d(8, 3, 1)).eval()
    bank.watch(net)
    x = torch.rand(1, 1, 24, 20)  # not square: a rotation that is not inverted shows

    def make(share: bool) -> UncertaintyInferer:
        sources = [MCDropoutSource(5), InvertibleTransformSource([Rotate90(k=1, spatial_axes=(0, 1))])]
        return UncertaintyInferer(sources, share_passes=share, sample_batch_size=sample_batch if share else "auto",
                                  keep_samples=True,
                                  base_inferer=SlidingWindowInferer((16, 16), sw_batch_size=sw_batch, overlap=0.5))

    full, shared = run_both(make, x, net, bank)
    assert_maps_close(full, shared)


class _AlwaysDrop(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, 0.5, True)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.drop = nn.Dropout2d(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.conv(x)))


class _WithBlock(nn.Module):
    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 4, 3, padding=1)
        self.blk = block
        self.drop = nn.Dropout2d(0.2)
        self.out = nn.Conv2d(4, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.drop(self.blk(self.c1(x))))


def _scripted() -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated in recent PyTorch
        return torch.jit.script(_AlwaysDrop())


@pytest.mark.parametrize("how", ["script", "compile"])
def test_a_submodule_the_trace_cannot_see_into_gives_full_passes_and_one_log_line(how, caplog):
    """Found by hostile review: a TorchScript submodule's dropout is invisible to the trace, so its first draw was
    kept and shared by all samples (MI 0.0013 instead of 0.0037); a ``torch.compile`` submodule crashed inside dynamo
    (AssertionError traceback). Both now run full passes (the same maps as ``share_passes=False``, same seed) and
    say why in one log line; ``SharedPasses`` refuses them."""
    torch.manual_seed(0)
    block = _scripted() if how == "script" else torch.compile(_Block(), backend="eager")
    net = _WithBlock(block).eval()
    x = torch.rand(1, 1, 12, 12)
    with pytest.raises(shared_module.SharingUnavailable, match="submodule 'blk'"):
        SharedPasses(net)
    full = MCDropoutInferer(num_samples=6, share_passes=False, seed=0)(x, net)
    with caplog.at_level(logging.WARNING, logger="monai_unc.inferers.sampling"):
        shared = MCDropoutInferer(num_samples=6, seed=0)(x, net)
    lines = [r.getMessage() for r in caplog.records if "shared passes off" in r.getMessage()]
    assert len(lines) == 1 and "submodule 'blk'" in lines[0]
    assert_maps_close(full, shared)


def test_a_module_compiled_in_place_is_not_followed():
    """``Module.compile()`` compiles a module's calls in place (no wrapper for ``plain_module`` to unwrap)."""
    net = _WithBlock(_Block())
    net.blk.compile(backend="eager")
    with pytest.raises(shared_module.SharingUnavailable, match="compiled"):
        SharedPasses(net)
    assert SharedPasses(_WithBlock(_Block())).network is not None  # the same network not compiled is followed


class _BatchNormAfterDropout(nn.Module):
    def __init__(self, bank: MaskBank) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.drop = BankDropout(bank, "drop")
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.out = nn.Conv2d(8, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(torch.relu(self.bn1(self.c1(x))))
        return self.out(torch.relu(self.bn2(self.c2(h))))


@pytest.mark.parametrize("sw_batch", [1, 2])
def test_batch_norm_in_training_mode_after_a_draw_equals_full_passes_injected_masks(sw_batch):
    """``network.train()`` (a common way to switch MC dropout on) leaves batch norm in training mode: after a dropout
    it normalised each replay batch of k samples with their joint statistics (MI 0.01 off full passes, documented as
    not detected). The trace now sees ``batch_norm`` in training mode on a random draw and replays one sample at a
    time (the traced part still shared): the maps equal full passes with the same masks."""
    bank = MaskBank()
    torch.manual_seed(0)
    net = _BatchNormAfterDropout(bank).train()
    bank.watch(net)
    x = torch.rand(1, 1, 24, 24)

    def make(share: bool) -> MCDropoutInferer:
        return MCDropoutInferer(num_samples=6, share_passes=share, sample_batch_size=4 if share else "auto",
                                base_inferer=SlidingWindowInferer((16, 16), sw_batch_size=sw_batch, overlap=0.5))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the inferer warns about the training mode
        full, shared = run_both(make, x, net, bank)
    assert_maps_close(full, shared)
    with torch.no_grad():
        passes = SharedPasses(net, min_shared_work=0.0)
        passes.trace(net, x[..., :16, :16])
    assert passes.shared_calls >= 1  # the first block, before the draw, is still computed once
