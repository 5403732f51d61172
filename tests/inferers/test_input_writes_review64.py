"""A network that writes into its input: every sample sees the caller's input, and the caller's tensor is left as given.

Found by review 64: a network whose forward scales its input in place (``x.mul_(2)``) gave each later sample the input
as the earlier samples had left it (MC dropout without shared passes, the identity variant of TTA, overlapping sliding
windows, the Rate-In search pass), so the maps depended on the order of the samples (``pred`` off by up to 0.57 against
the same network computing ``x * 2``), and the caller's image came back scaled by ``2**samples``.
"""

import pytest
import torch
from monai.inferers import SlidingWindowInferer
from torch import nn

from monai_unc.inferers import MCDropoutInferer, RateInSource, TTAInferer, UncertaintyInferer


class _Scaled(nn.Module):
    """``core(2 x)``, the doubling in place (``x.mul_(2)``) or not."""

    def __init__(self, core: nn.Module, inplace: bool) -> None:
        super().__init__()
        self.core = core
        self.inplace = inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.core(x.mul_(2) if self.inplace else x * 2)


def _core() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Dropout2d(0.3), nn.Conv2d(4, 3, 1)).eval()


@pytest.mark.filterwarnings("ignore:the network's output lies in")
@pytest.mark.parametrize(
    "make",
    [
        lambda: MCDropoutInferer(3, seed=0, share_passes=False),
        lambda: MCDropoutInferer(3, seed=0),
        lambda: TTAInferer(seed=0),
        lambda: MCDropoutInferer(2, seed=0, share_passes=False,
                                 base_inferer=SlidingWindowInferer((4, 4), overlap=0.5)),
        lambda: UncertaintyInferer(RateInSource(2, placement="insert", after=["core.0"], target_loss=0.1), seed=0,
                                   share_passes=False),
    ],
    ids=["mc", "mc-shared", "tta", "mc-sliding-window", "rate-in"],
)
def test_network_writing_its_input(make):
    core = _core()
    x = torch.rand(1, 1, 8, 8)
    ref = make()(x.clone(), _Scaled(core, inplace=False))
    given = x.clone()
    got = make()(given, _Scaled(core, inplace=True))
    assert torch.equal(given, x), "the caller's input was left modified"
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], rtol=0, atol=1e-6, msg=key)


class _DictOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.core = _core()

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"seg": self.core(x), "aux": self.core(x)}


def test_a_dict_output_is_refused_naming_its_entries():
    """Found by review 64: ``network output must be a tensor, got dict`` named neither the entries nor the remedy."""
    with pytest.raises(TypeError, match=r"network output must be a tensor.*\['aux', 'seg'\].*returns the logits"):
        MCDropoutInferer(2, seed=0)(torch.rand(1, 1, 8, 8), _DictOutput().eval())


def test_an_inference_tensor_holding_nan_is_refused_as_before():
    """Found by review 64's review: the guard compared an inference tensor (no version counter) with ``torch.equal``,
    which is False where it holds NaN, so an input with a NaN, made under ``torch.inference_mode`` and given outside
    it, was written back and raised torch's ``RuntimeError`` (inplace update to an inference tensor) instead of the
    inferer's ``ValueError`` about the non-finite output."""
    with torch.inference_mode():
        x = torch.rand(1, 1, 8, 8)
        x[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        MCDropoutInferer(2, seed=0, share_passes=False)(x, _core())


def test_a_network_writing_an_inference_tensor_input():
    """Inside ``torch.inference_mode`` (no version counter) a write is found by the values and put back."""
    core = _core()
    with torch.inference_mode():
        x = torch.rand(1, 1, 8, 8)
        ref = MCDropoutInferer(3, seed=0, share_passes=False)(x.clone(), _Scaled(core, inplace=False))
        given = x.clone()
        got = MCDropoutInferer(3, seed=0, share_passes=False)(given, _Scaled(core, inplace=True))
    assert torch.equal(given, x)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], rtol=0, atol=1e-6, msg=key)


def test_watch_input_takes_an_unwritten_inference_tensor_holding_nan_as_unwritten():
    """``watch_input`` compared an inference tensor (no version counter) with ``torch.equal``, False where it holds a
    NaN: an unwritten input was taken for a written one (found by the review of review 64, as for InputGuard)."""
    from monai_unc.networks.shared import watch_input

    with torch.inference_mode():
        x = torch.tensor([1.0, float("nan"), 3.0])
        out, before = watch_input(lambda t: t * 2, x)
        assert before is None
        out, before = watch_input(lambda t: t.mul_(2), x)
        assert before is not None and before[0] == 1.0


def test_a_replay_of_a_copy_of_an_input_holding_nan_shares_the_trace():
    """The replay's check that its input equals the traced one used ``torch.equal`` alone: a copy of an input holding
    a NaN was taken for another input and the samples fell back to full passes."""
    from monai_unc.inferers import SharedPasses, enable_mc_dropout

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 4, 1), nn.ReLU(), nn.Conv3d(4, 4, 1), nn.Dropout(0.5), nn.Conv3d(4, 2, 1)).eval()
    x = torch.randn(1, 1, 4, 4, 4)
    x[0, 0, 0, 0, 0] = float("nan")
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, x)
        out = passes.replay(net, x.clone(), 2)  # raised SharingUnavailable before
    assert out.shape == (2, 2, 4, 4, 4)
