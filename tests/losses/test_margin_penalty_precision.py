"""The MbLS margin penalty of float16 / bfloat16 logits (a network under autocast, as nnU-Net trains on a GPU) is
computed in float32 and summed in float64, and a soft target keeps its float32 values: held to a float64 reference
on the same values.

Found by hostile testing: the penalty was computed in the logits' dtype, so the distance of two float16 logits
overflowed to inf from 65504 on, every paying entry was rounded to the logits' 8- or 11-bit mantissa (a biased
error when many entries round alike: 2e-4 of the mean in float16, 2e-3 in bfloat16) and the mean itself was
returned in that dtype; the backward counted the paying classes of a voxel in the logits' dtype (a bfloat16 count
stops at 256).
"""

from __future__ import annotations

import pytest
import torch

from monai_unc.losses import (
    DiceCEL1ACELoss,
    DiceCEMarginLoss,
    DiceSVLSLoss,
    L1ACELoss,
    MarginLoss,
    SVLSLoss,
    margin_penalty,
    mean_margin_penalty,
)

HALF = [torch.float16, torch.bfloat16]


def _ref_mean(z: torch.Tensor, margin: float, first: int = 0) -> torch.Tensor:
    """``mean_c,v max(0, max_j z_j - z_c - margin)`` by a loop over voxels and classes, in float64."""
    flat = z.detach().double().reshape(z.shape[0], z.shape[1], -1)
    total, n = 0.0, 0
    for b in range(flat.shape[0]):
        top = flat[b].amax(0)
        for c in range(first, flat.shape[1]):
            total += float(torch.clamp(top - flat[b, c] - margin, min=0).sum())
            n += flat.shape[2]
    return torch.tensor(total / n, dtype=torch.float64)


def _untied_logits(dtype: torch.dtype, shape=(2, 4, 16, 16, 16), seed: int = 0) -> torch.Tensor:
    """Logits of ``dtype`` whose class 0 is the unique maximum by far (no tie at the maximum in any dtype)."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(shape, generator=gen, dtype=torch.float64) * 8
    z[:, 0] = z[:, 0].abs() + 40.0
    return z.to(dtype)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("include_background", [True, False])
def test_mean_penalty_of_half_logits_equals_float64_on_the_same_values(dtype, include_background):
    z = _untied_logits(dtype)
    got = mean_margin_penalty(z, 10.0, include_background)
    assert got.dtype == torch.float32
    want = _ref_mean(z, 10.0, 0 if include_background else 1)
    assert float(got) == pytest.approx(float(want), rel=1e-6)


@pytest.mark.parametrize("dtype", HALF)
def test_mean_penalty_over_a_128_cubed_patch_is_not_rounded_to_the_logits_mantissa(dtype):
    """Every paying entry rounds alike in the logits' dtype: 1000.5 - 0.2 - 10 = 990.3 is 990.5 in float16 (990
    in bfloat16), an error of 2e-4 of the mean in every voxel of the patch; the sum of 2 * 128^3 such entries must
    also keep float32 precision."""
    z = torch.empty(1, 2, 128, 128, 128, dtype=dtype)
    z[:, 0] = 1000.5
    z[:, 1] = 0.2
    want = (float(z[0, 0, 0, 0, 0]) - float(z[0, 1, 0, 0, 0]) - 10.0) / 2  # every voxel alike; class 0 pays 0
    got = mean_margin_penalty(z, 10.0)
    assert got.dtype == torch.float32
    assert float(got) == pytest.approx(want, rel=1e-6)
    assert float(_ref_mean(z[..., :4], 10.0)) == pytest.approx(want, rel=1e-12)  # the reference agrees


@pytest.mark.parametrize("dtype", HALF)
def test_logit_distances_beyond_float16_range_do_not_overflow(dtype):
    z = torch.zeros(1, 2, 4, 4, dtype=dtype)
    z[:, 0] = 40000.0
    z[:, 1] = -40000.0  # both are float16 numbers; their distance, 80000, is not
    want = (float(z[0, 0, 0, 0]) - float(z[0, 1, 0, 0]) - 10.0) / 2
    assert float(mean_margin_penalty(z, 10.0)) == pytest.approx(want, rel=1e-7)
    per_entry = margin_penalty(z, 10.0)
    assert per_entry.dtype == torch.float32 and torch.isfinite(per_entry).all()
    assert float(per_entry[0, 1, 0, 0]) == pytest.approx(2 * want, rel=1e-7)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("include_background", [True, False])
def test_gradient_of_half_logits_equals_the_float64_gradient(dtype, include_background):
    z = _untied_logits(dtype).requires_grad_(True)
    (mean_margin_penalty(z, 10.0, include_background) * 1000).backward()
    ref = z.detach().double().requires_grad_(True)
    (margin_penalty(ref, 10.0)[:, 0 if include_background else 1 :].mean() * 1000).backward()
    assert z.grad.dtype == dtype
    torch.testing.assert_close(z.grad.double(), ref.grad, rtol=2**-7, atol=0)


def test_gradient_with_more_than_256_paying_classes_in_bfloat16():
    """The maximum of a voxel receives (number of paying classes) / n; 299 counted in bfloat16 stopped at 256."""
    z = torch.zeros(1, 300, 2, 2, dtype=torch.bfloat16)
    z[:, 0] = 100.0
    z.requires_grad_(True)
    mean_margin_penalty(z, 10.0).backward()
    n = 300 * 4
    assert float(z.grad[0, 0, 0, 0]) == pytest.approx(299 / n, rel=2**-8)
    assert float(z.grad[0, 1, 0, 0]) == pytest.approx(-1 / n, rel=2**-8)


@pytest.mark.parametrize("dtype", HALF)
def test_losses_under_cpu_autocast_equal_the_float64_loss(dtype):
    """A training step: the network's logits come out of autocast in its dtype and the loss is taken inside it."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(3, 1, 1, 1, 1, generator=gen) * 20
    x = torch.randn(2, 1, 16, 16, 16, generator=gen)
    labels = torch.randint(0, 3, (2, 1, 16, 16, 16), generator=gen)
    for make in (lambda: MarginLoss(to_onehot_y=True), lambda: DiceCEMarginLoss(to_onehot_y=True)):
        with torch.autocast("cpu", dtype=dtype):
            z = torch.nn.functional.conv3d(x, w.to(x.dtype))  # in ``dtype`` under autocast
            assert z.dtype == dtype
            got = make()(z, labels)
        want = make()(z.detach().double(), labels)
        assert got.dtype == torch.float32
        assert float(got) == pytest.approx(float(want), rel=1e-6)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(
    "make",
    [
        lambda: SVLSLoss(),
        lambda: L1ACELoss("hard"),
        lambda: L1ACELoss("soft"),
        lambda: DiceSVLSLoss(),
        lambda: DiceCEL1ACELoss("soft"),
        lambda: MarginLoss(),
    ],
)
def test_a_soft_float32_target_is_not_rounded_to_the_half_logits_dtype(dtype, make):
    """A float32 target of 0.3 / 0.7 became 0.30078 / 0.69922 for bfloat16 logits: the loss 1e-3 off (float16 2e-4)."""
    z = torch.zeros(1, 2, 8, 8, 8)
    z[:, 0] = 2.0
    q = torch.zeros(1, 2, 8, 8, 8)
    q[:, 0], q[:, 1] = 0.3, 0.7
    got = make()(z.to(dtype), q)
    want = make()(z.to(dtype).double(), q.double())
    assert got.dtype == torch.float32
    assert float(got) == pytest.approx(float(want), rel=1e-5)
