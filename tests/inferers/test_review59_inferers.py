"""Hostile review 59 of the inferers core: brute-force checks of what a review found wrong."""

from __future__ import annotations

import pytest
import torch
from monai.inferers import SlidingWindowInferer

from monai_unc.inferers import EnsembleInferer, MCDropoutInferer, SoftmaxInferer, TTAInferer


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(1, 3, 1), torch.nn.Dropout(0.2)).eval()


@pytest.mark.parametrize("shape", [(0, 1, 8, 8), (1, 1, 0, 8), (1, 0, 8, 8), (2, 1, 8, 0)])
@pytest.mark.parametrize("make", [
    lambda: MCDropoutInferer(2), lambda: SoftmaxInferer(), lambda: TTAInferer(),
    lambda: MCDropoutInferer(2, base_inferer=SlidingWindowInferer((4, 4))),
])
def test_empty_input_is_refused_naming_inputs(shape, make):
    """Found by hostile review 59: an empty batch failed in torch.aminmax (RuntimeError), under a sliding window in
    MONAI (UnboundLocalError), and an empty spatial or channel axis in the network's convolution, none naming
    ``inputs`` (docs/design.md: an empty volume gets a ValueError naming the argument)."""
    with pytest.raises(ValueError, match=r"inputs is empty \(shape"):
        make()(torch.rand(shape), _net())


def test_empty_input_is_refused_by_an_ensemble():
    with pytest.raises(ValueError, match="inputs is empty"):
        EnsembleInferer([_net(), _net()])(torch.rand(0, 1, 8, 8))


class _HalfNoisyNet(torch.nn.Module):
    """A half-precision convolution plus Gaussian noise drawn in float32: the same logits (in ``dtype``) whatever the
    dtype of its input, returned in the input's dtype, so that a float64 run is the exact reference of a half run."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 3, 3, padding=1).to(dtype)
        self.dtype = dtype

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        z = self.conv(t.to(self.dtype))
        z = z + (0.7 * torch.randn(z.shape, dtype=torch.float32)).to(self.dtype)
        return z.to(t.dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", ["gaussian", "constant"])
def test_half_precision_input_is_stitched_without_half_precision_rounding(dtype, mode):
    """Found by hostile review 59: MONAI stitches in the dtype of the input it gets, and half-precision buffers held the
    stitched entropies (about 1 nat) to 1e-3 (float16) / 8e-3 (bfloat16): MI and WD, differences of them, were off by
    up to 1.5e-3 / 1.1e-2 nats here against a float64 stitching of the same windows and samples (with MC dropout,
    whose MI and WD are at most 2.2e-3 and 1.5e-3 nats, by up to 7.4e-3 and 2.1e-2 in bfloat16). Now every map is
    the float64 one rounded to the input's dtype."""
    from monai_unc.inferers import StochasticSource, UncertaintyInferer

    torch.manual_seed(0)
    net = _HalfNoisyNet(dtype)
    x = torch.rand(2, 1, 13, 11).to(dtype)

    def run(inputs):
        sw = SlidingWindowInferer((6, 6), sw_batch_size=1, overlap=0.5, mode=mode)
        return UncertaintyInferer(StochasticSource(4), base_inferer=sw, seed=3)(inputs, net)

    out = run(x)
    ref = run(x.double())  # the same windows, draws and logits; stitched and evaluated in float64
    assert out["mutual_information"].dtype == dtype
    assert float(ref["window_disagreement"].max()) > 1e-4 and float(ref["mutual_information"].max()) > 1e-4
    eps = torch.finfo(dtype).eps
    for key in ("mutual_information", "window_disagreement", "pred", "predictive_entropy", "expected_entropy",
                "variance", "one_minus_max_prob"):
        err = (out[key].double() - ref[key]).abs()
        assert bool((err <= eps * ref[key].abs() + 1e-5).all()), (key, float(err.max()))


def test_memory_model_counts_float32_stitching_buffers_for_half_precision_inputs():
    """The half-precision input's stitching buffers are float32 now (above): the memory model counts 4 bytes each."""
    from monai_unc.inferers import estimate_memory

    shape, roi = (64, 64, 64), (32, 32, 32)
    half = estimate_memory(shape, 3, roi_size=roi, input_dtype=torch.float16)
    single = estimate_memory(shape, 3, roi_size=roi)
    assert half.parts["stitching buffers"] == single.parts["stitching buffers"]


def test_augmentation_pairs_and_mi_meaning_errors_name_the_argument():
    """Found by hostile review 59: one callable where a ``(forward, inverse)`` pair belongs failed with Python's
    ``object of type 'function' has no len()``, ``None`` with ``'NoneType' object is not iterable``, and
    ``StochasticSource(mi_meaning="foo")`` with ``'foo' is not a valid MIMeaning``, none naming the argument."""
    from monai_unc.inferers import AugmentationSource, StochasticSource

    def same(t):
        return t

    with pytest.raises(ValueError, match=r"augmentations\[0\] must be a \(forward, inverse\) pair"):
        AugmentationSource([same])
    with pytest.raises(ValueError, match=r"augmentations\[1\] must be a \(forward, inverse\) pair"):
        TTAInferer(augmentations=[(same, same), "ab"])
    with pytest.raises(TypeError, match="augmentations must be a sequence"):
        AugmentationSource(None)
    with pytest.raises(TypeError, match="augmentations must be a sequence"):
        TTAInferer(augmentations=same)
    assert len(AugmentationSource([(same, same), [same, same]]).pairs) == 2
    with pytest.raises(ValueError, match="mi_meaning must be one of"):
        StochasticSource(2, mi_meaning="foo")
    assert StochasticSource(2, mi_meaning="epistemic").mi_meaning.value == "epistemic"
