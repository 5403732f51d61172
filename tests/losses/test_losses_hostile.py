"""Hostile review of the calibration losses: brute-force torch re-implementations (values and autograd gradients),
float64 gradchecks over every option, reduced precision, huge logits, NaN logits, degenerate shapes."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from monai_unc.losses import (
    DiceCEL1ACELoss,
    DiceCEMarginLoss,
    DiceSVLSLoss,
    L1ACELoss,
    MarginLoss,
    SVLSLoss,
    binned_calibration,
    l1_average_calibration_error,
    margin_penalty,
    mean_margin_penalty,
    svls_kernel,
)

# ---------------------------------------------------------------- brute-force references (float64, loops)


def _ref_kernel(dims: int, k: int, sigma: float, spacing) -> torch.Tensor:
    half = k // 2
    w = torch.zeros((k,) * dims, dtype=torch.float64)
    for idx in itertools.product(range(k), repeat=dims):
        w[idx] = math.exp(-sum(((i - half) * s) ** 2 for i, s in zip(idx, spacing)) / (2 * sigma**2))
    w = w / w.sum()
    c = (half,) * dims
    w[c] = 1 - w[c]
    return w / w.sum()


def _ref_svls_targets(onehot: torch.Tensor, k: int = 3, sigma: float = 1.0, spacing=None) -> torch.Tensor:
    dims = onehot.ndim - 2
    spacing = spacing or (1.0,) * dims
    kern = _ref_kernel(dims, k, sigma, spacing)
    half = k // 2
    shape = onehot.shape[2:]
    out = torch.zeros_like(onehot, dtype=torch.float64)
    for off in itertools.product(range(k), repeat=dims):  # out[x] += w[off] * y[clamp(x + off - half)]
        idx = [torch.clamp(torch.arange(n) + o - half, 0, n - 1) for n, o in zip(shape, off)]
        shifted = onehot.double()
        for d, ix in enumerate(idx):
            shifted = shifted.index_select(2 + d, ix)
        out = out + kern[off] * shifted
    return out


def _ref_reduce(per_voxel: torch.Tensor, reduction: str) -> torch.Tensor:
    return {"mean": per_voxel.mean(), "sum": per_voxel.sum(), "none": per_voxel}[reduction]


def _ref_svls(z, onehot, include_background, sigmoid, reduction, spacing=None):
    q = _ref_svls_targets(onehot, spacing=spacing)
    first = 0 if include_background else 1
    if sigmoid:
        terms = -(q * F.logsigmoid(z) + (1 - q) * F.logsigmoid(-z))  # log sigmoid, stable for large |z|
        per_voxel = terms[:, first:].mean(1, keepdim=True)
    else:
        per_voxel = -(q * torch.log_softmax(z, 1))[:, first:].sum(1, keepdim=True)
    return _ref_reduce(per_voxel, reduction)


def _ref_margin(z, onehot, margin, alpha, include_background, reduction):
    first = 0 if include_background else 1
    ce = -(onehot * torch.log_softmax(z, 1))[:, first:].sum(1, keepdim=True)
    d = z.max(1, keepdim=True).values - z
    pen = torch.clamp(d - margin, min=0)[:, first:].mean(1, keepdim=True)
    return _ref_reduce(ce + alpha * pen, reduction)


def _ref_ace(p, y, num_bins, soft, empty_weight=0.01, ignore_empty=True):
    """Per image and channel, one bin at a time: memberships, weighted means, mean gap over non-empty bins."""
    b, c = p.shape[:2]
    out = torch.zeros(b, c, dtype=torch.float64)
    centres = (torch.arange(num_bins, dtype=torch.float64) + 0.5) / num_bins
    for i, j in itertools.product(range(b), range(c)):
        pp, yy = p[i, j].reshape(-1).double(), y[i, j].reshape(-1).double()
        gaps = []
        for k in range(num_bins):
            if soft:  # triangular membership around centre k, the ends saturated
                w = torch.clamp(1 - (pp - centres[k]).abs() * num_bins, min=0)
                if k == 0:
                    w = torch.where(pp <= centres[0], torch.ones_like(pp), w)
                if k == num_bins - 1:
                    w = torch.where(pp >= centres[-1], torch.ones_like(pp), w)
            else:
                lo, hi = k / num_bins, (k + 1) / num_bins
                inside = (pp >= lo) & ((pp < hi) if k < num_bins - 1 else (pp <= hi))
                w = inside.double()
            total = w.sum()
            if total > 0 and (not soft or total >= empty_weight):
                gaps.append(((w * pp).sum() / total - (w * yy).sum() / total).abs())
        val = torch.stack(gaps).mean() if gaps else torch.zeros((), dtype=torch.float64)
        if ignore_empty and float(yy.sum()) == 0:
            val = val * 0
        out = out.index_put((torch.tensor([i]), torch.tensor([j])), val.reshape(1))
    return out


def _onehot(labels: torch.Tensor, c: int) -> torch.Tensor:
    return F.one_hot(labels[:, 0], c).movedim(-1, 1).double()


SHAPES = [(1, 3, 7), (2, 4, 5, 4), (1, 2, 3, 4, 3)]  # 1D, 2D, 3D; batch of one


# ---------------------------------------------------------------- values and gradients against the references


@pytest.mark.parametrize("shape", SHAPES, ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("include_background", [True, False])
@pytest.mark.parametrize("sigmoid", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_svls_values_and_gradients_equal_a_brute_force_reference(shape, include_background, sigmoid, reduction):
    gen = torch.Generator().manual_seed(sum(shape))
    z = (torch.randn(*shape, dtype=torch.float64, generator=gen) * 3).requires_grad_(True)
    labels = torch.randint(0, shape[1], (shape[0], 1, *shape[2:]), generator=gen)
    loss = SVLSLoss(include_background=include_background, to_onehot_y=True, softmax=not sigmoid, sigmoid=sigmoid,
                    reduction=reduction)
    got = loss(z, labels)
    zr = z.detach().clone().requires_grad_(True)
    want = _ref_svls(zr, _onehot(labels, shape[1]), include_background, sigmoid, reduction)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(z.grad, zr.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES, ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("include_background", [True, False])
@pytest.mark.parametrize("to_onehot_y", [True, False])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_margin_values_and_gradients_equal_a_brute_force_reference(shape, include_background, to_onehot_y,
                                                                    reduction):
    gen = torch.Generator().manual_seed(3 + sum(shape))
    z = (torch.randn(*shape, dtype=torch.float64, generator=gen) * 4).requires_grad_(True)
    labels = torch.randint(0, shape[1], (shape[0], 1, *shape[2:]), generator=gen)
    onehot = _onehot(labels, shape[1])
    loss = MarginLoss(margin=2.5, alpha=0.3, include_background=include_background, to_onehot_y=to_onehot_y,
                      reduction=reduction)
    got = loss(z, labels if to_onehot_y else onehot)
    zr = z.detach().clone().requires_grad_(True)
    want = _ref_margin(zr, onehot, 2.5, 0.3, include_background, reduction)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(z.grad, zr.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("soft", [False, True])
@pytest.mark.parametrize("num_bins", [1, 3, 20])
@pytest.mark.parametrize("sigmoid", [False, True])
def test_l1_ace_values_and_gradients_equal_a_brute_force_reference(soft, num_bins, sigmoid):
    gen = torch.Generator().manual_seed(num_bins)
    z = (torch.randn(2, 3, 6, 5, dtype=torch.float64, generator=gen) * 3).requires_grad_(True)
    labels = torch.randint(0, 3, (2, 1, 6, 5), generator=gen)
    labels[1] = 0  # classes 1, 2 absent from the second image
    onehot = _onehot(labels, 3)
    loss = L1ACELoss("soft" if soft else "hard", num_bins, to_onehot_y=True, softmax=not sigmoid, sigmoid=sigmoid,
                     reduction="none")
    got = loss(z, labels)
    zr = z.detach().clone().requires_grad_(True)
    p = torch.sigmoid(zr) if sigmoid else torch.softmax(zr, 1)
    want = _ref_ace(p, onehot, num_bins, soft)
    torch.testing.assert_close(got.reshape(2, 3), want, rtol=1e-10, atol=1e-12)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(z.grad, zr.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "make,to_onehot",
    [
        (lambda: SVLSLoss(include_background=False, sigmoid=True, softmax=False, reduction="none"), False),
        (lambda: SVLSLoss(spacing=(1.0, 3.0, 0.5), reduction="sum"), False),
        (lambda: MarginLoss(margin=1.0, alpha=1.0, include_background=False, to_onehot_y=True), True),
        (lambda: MarginLoss(margin=1.0, alpha=1.0, include_background=False, reduction="sum", to_onehot_y=True),
         True),
        (lambda: L1ACELoss("soft", 6, include_background=False, reduction="sum", to_onehot_y=True), True),
        (lambda: L1ACELoss("hard", 6, sigmoid=True, softmax=False, reduction="none"), False),
        (lambda: DiceSVLSLoss(include_background=False, sigmoid=True, softmax=False, batch=True), False),
        (lambda: DiceCEMarginLoss(margin=1.0, alpha=0.5, include_background=False, to_onehot_y=True), True),
        (lambda: DiceCEL1ACELoss("soft", 6, sigmoid=True, softmax=False), False),
    ],
)
def test_gradcheck_float64_3d_and_every_option(make, to_onehot):
    gen = torch.Generator().manual_seed(5)
    z = (torch.randn(1, 3, 3, 4, 3, dtype=torch.float64, generator=gen) * 3).requires_grad_(True)
    labels = torch.randint(0, 3, (1, 1, 3, 4, 3), generator=gen)
    target = labels if to_onehot else _onehot(labels, 3)
    loss = make()
    assert torch.autograd.gradcheck(lambda x: loss(x, target), (z,), eps=1e-6, atol=1e-5)


# ---------------------------------------------------------------- huge logits, one class, empty masks


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_logits_give_finite_values_equal_to_the_reference(dtype):
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(2, 3, 6, 6, generator=gen).sign() * 1e4
    z[:, 0] += 1.0  # no exact ties
    labels = torch.randint(0, 3, (2, 1, 6, 6), generator=gen)
    onehot = _onehot(labels, 3)
    for loss, want in [
        (SVLSLoss(to_onehot_y=True), _ref_svls(z.double(), onehot, True, False, "mean")),
        (MarginLoss(to_onehot_y=True), _ref_margin(z.double(), onehot, 10.0, 0.1, True, "mean")),
    ]:
        zz = z.to(dtype).requires_grad_(True)
        got = loss(zz, labels)
        got.backward()
        assert torch.isfinite(zz.grad).all()
        assert float(got.detach()) == pytest.approx(float(want), rel=1e-6)
    ace = L1ACELoss("hard", to_onehot_y=True, reduction="none")(z.to(dtype), labels)
    want = _ref_ace(torch.softmax(z.double(), 1), onehot, 20, False)
    torch.testing.assert_close(ace.reshape(2, 3).double(), want, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- reduced precision


def _half_cases():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(2, 3, 96, 96, generator=gen) * 4
    labels = torch.randint(0, 3, (2, 1, 96, 96), generator=gen)
    return z, labels


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("soft", [False, True])
def test_l1_ace_of_half_precision_probabilities_equals_float64_on_the_same_values(dtype, soft):
    """The bin sums must not accumulate in the input's 8- or 11-bit mantissa (a count stops growing at 256 / 2048)."""
    z, labels = _half_cases()
    p = torch.softmax(z, 1).to(dtype)
    y = _onehot(labels, 3).to(dtype)
    got = l1_average_calibration_error(p, y, num_bins=20, soft=soft)
    assert got.dtype == dtype
    want = l1_average_calibration_error(p.double(), y.double(), num_bins=20, soft=soft)
    torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=2e-3)
    _, _, weight = binned_calibration(p, y, num_bins=20, soft=soft)
    torch.testing.assert_close(weight.sum(-1), torch.full((2, 3), 96.0 * 96), rtol=1e-5, atol=0)  # each voxel once


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "make",
    [
        lambda: SVLSLoss(to_onehot_y=True),
        lambda: SVLSLoss(to_onehot_y=True, sigmoid=True, softmax=False),
        lambda: MarginLoss(margin=2.0, to_onehot_y=True),
        lambda: MarginLoss(margin=2.0, to_onehot_y=True, include_background=False, reduction="sum"),
        lambda: L1ACELoss("hard", to_onehot_y=True),
        lambda: L1ACELoss("soft", to_onehot_y=True),
        lambda: DiceSVLSLoss(to_onehot_y=True),
        lambda: DiceCEMarginLoss(margin=2.0, to_onehot_y=True),
        lambda: DiceCEL1ACELoss("soft", to_onehot_y=True),
    ],
)
def test_half_precision_logits_give_the_float64_loss_of_the_same_values(dtype, make):
    z, labels = _half_cases()
    zh = z.to(dtype).requires_grad_(True)
    got = make()(zh, labels)
    want = make()(zh.detach().double(), labels)
    assert float(got) == pytest.approx(float(want), rel=2e-3)
    got.backward()
    assert zh.grad.dtype == dtype and torch.isfinite(zh.grad).all()


@pytest.mark.parametrize("make", [lambda: SVLSLoss(to_onehot_y=True), lambda: MarginLoss(margin=2.0, to_onehot_y=True),
                                  lambda: DiceCEL1ACELoss("hard", to_onehot_y=True)])
def test_float16_mean_loss_of_a_large_volume_does_not_overflow(make):
    """A mean of per-voxel values near 3 is near 3; a float16 sum of 2^18 of them is inf."""
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(1, 3, 64, 64, 64, generator=gen) * 4
    labels = torch.randint(0, 3, (1, 1, 64, 64, 64), generator=gen)
    got = make()(z.half(), labels)
    want = make()(z.half().double(), labels)
    assert math.isfinite(float(got)) and float(got) == pytest.approx(float(want), rel=2e-3)


def test_fused_margin_penalty_of_float16_logits_does_not_overflow():
    z = torch.zeros(1, 2, 200, 200, dtype=torch.float16)
    z[:, 0] = 20.0  # every class-1 entry pays 10: the mean is 5, the sum 200 000 > float16's 65 504
    assert float(mean_margin_penalty(z, 10.0)) == pytest.approx(5.0)


# ---------------------------------------------------------------- non-finite logits


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])  # -inf is a probability 0: a finite loss
@pytest.mark.parametrize("binning", ["hard", "soft"])
def test_non_finite_logits_raise_value_error_in_the_ace_losses(bad, binning):
    z = torch.randn(1, 3, 5, 5)
    z[0, 1, 2, 2] = bad
    y = torch.randint(0, 3, (1, 1, 5, 5))
    for loss in (L1ACELoss(binning, to_onehot_y=True), DiceCEL1ACELoss(binning, to_onehot_y=True)):
        with pytest.raises(ValueError, match="logits must be finite"):
            loss(z, y)


def test_nan_probabilities_give_a_nan_ace_not_an_index_error():
    p = torch.rand(1, 2, 9, dtype=torch.float64)
    p[0, 0, 3] = float("nan")
    y = (torch.rand(1, 2, 9) > 0.5).double()
    for soft in (False, True):
        ace = l1_average_calibration_error(p, y, num_bins=4, soft=soft)
        assert math.isnan(float(ace[0, 0])) and math.isfinite(float(ace[0, 1]))


# ---------------------------------------------------------------- empty input, label dtypes


@pytest.mark.parametrize("shape", [(0, 3, 4, 4), (1, 3, 0, 4), (2, 3, 4, 0, 2)])
@pytest.mark.parametrize("make", [SVLSLoss, MarginLoss, L1ACELoss, DiceSVLSLoss, DiceCEMarginLoss, DiceCEL1ACELoss])
def test_empty_logits_raise_instead_of_a_nan_or_zero_loss(shape, make):
    """A mean over no voxel was NaN (SVLS, MbLS) or 0 (L1-ACE), silently."""
    z = torch.randn(*shape)
    y = torch.zeros(shape[0], 1, *shape[2:], dtype=torch.long)
    with pytest.raises(ValueError, match="logits must not be empty"):
        make(to_onehot_y=True)(z, y)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.float16])
def test_label_maps_of_any_integer_like_dtype_give_the_same_loss(dtype):
    gen = torch.Generator().manual_seed(8)
    z = torch.randn(2, 2, 5, 6, generator=gen)
    y = torch.randint(0, 2, (2, 1, 5, 6), generator=gen)
    for make in (SVLSLoss, MarginLoss, L1ACELoss, DiceSVLSLoss, DiceCEMarginLoss, DiceCEL1ACELoss):
        torch.testing.assert_close(make(to_onehot_y=True)(z, y.to(dtype)), make(to_onehot_y=True)(z, y))


@pytest.mark.parametrize("make", [SVLSLoss, MarginLoss, L1ACELoss, DiceSVLSLoss, DiceCEMarginLoss, DiceCEL1ACELoss])
def test_a_nan_in_a_one_hot_target_raises_naming_the_target(make):
    """The loss was NaN without a word (only non-finite logits were reported)."""
    z = torch.randn(1, 3, 6, 6)
    y = _onehot(torch.randint(0, 3, (1, 1, 6, 6)), 3).float()
    y[0, 1, 2, 2] = float("nan")
    with pytest.raises(ValueError, match="target must be finite"):
        make()(z, y)


@pytest.mark.parametrize("empty_weight", [0.0, 1e-3, 0.5])
def test_soft_ace_with_any_empty_weight_leaves_weightless_bins_out(empty_weight):
    """``empty_weight=0`` (allowed) kept the bins of weight 0 and made every error 0 / 0 = NaN."""
    gen = torch.Generator().manual_seed(4)
    z = (torch.randn(2, 3, 8, 8, dtype=torch.float64, generator=gen) * 10).requires_grad_(True)
    labels = torch.randint(0, 3, (2, 1, 8, 8), generator=gen)
    got = L1ACELoss("soft", empty_weight=empty_weight, to_onehot_y=True, reduction="none")(z, labels)
    zr = z.detach().clone().requires_grad_(True)
    want = _ref_ace(torch.softmax(zr, 1), _onehot(labels, 3), 20, True, empty_weight)
    torch.testing.assert_close(got.reshape(2, 3), want, rtol=1e-10, atol=1e-12)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(z.grad, zr.grad, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- one-hot targets outside [0, 1]


@pytest.mark.parametrize("bad", [2.0, -1.0, 1.5])
@pytest.mark.parametrize("binning", ["hard", "soft"])
def test_an_ace_target_outside_0_1_raises_naming_the_target(bad, binning):
    """A one-hot target holding 2 or -1 (a label map or an ignore label passed as one-hot) gave a number silently."""
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(1, 2, 6, 6, generator=gen)
    y = _onehot(torch.randint(0, 2, (1, 1, 6, 6), generator=gen), 2).float()
    y[0, 1, 2, 2] = bad
    for loss in (L1ACELoss(binning), DiceCEL1ACELoss(binning)):
        with pytest.raises(ValueError, match=r"target must be one-hot or soft with values in \[0, 1\]"):
            loss(z, y)
    with pytest.raises(ValueError, match=r"target must be one-hot or soft with values in \[0, 1\]"):
        l1_average_calibration_error(torch.softmax(z, 1), y, soft=binning == "soft")


def test_an_integer_one_hot_target_outside_0_1_raises_and_soft_targets_stay_accepted():
    gen = torch.Generator().manual_seed(4)
    z = torch.randn(1, 2, 6, 6, generator=gen)
    labels = torch.randint(0, 2, (1, 1, 6, 6), generator=gen)
    with pytest.raises(ValueError, match=r"got values in \[0, 2\]"):
        L1ACELoss()(z, _onehot(labels, 2).long() * 2)
    soft = _onehot(labels, 2).float() * 0.8 + 0.1  # soft labels in [0, 1] are documented and accepted
    assert math.isfinite(float(L1ACELoss()(z, soft))) and math.isfinite(float(DiceCEL1ACELoss()(z, soft)))
    assert torch.isfinite(l1_average_calibration_error(torch.softmax(z, 1), soft)).all()


@pytest.mark.parametrize("bad", [2.0, -1.0, 1.5])
@pytest.mark.parametrize("make", [SVLSLoss, MarginLoss, DiceSVLSLoss, DiceCEMarginLoss,
                                  lambda: MarginLoss(reduction="none"), lambda: SVLSLoss(reduction="sum")])
def test_an_svls_or_margin_target_outside_0_1_raises_naming_the_target(bad, make):
    """SVLS, MbLS and their Dice variants took a one-hot target holding 2 or -1 and returned a number."""
    gen = torch.Generator().manual_seed(7)
    z = torch.randn(1, 3, 6, 6, generator=gen)
    y = _onehot(torch.randint(0, 3, (1, 1, 6, 6), generator=gen), 3).float()
    y[0, 1, 2, 2] = bad
    with pytest.raises(ValueError, match=r"target must be one-hot or soft with values in \[0, 1\]"):
        make()(z, y)
    with pytest.raises(ValueError, match=r"got values in \[0, 2\]"):
        make()(z, _onehot(torch.randint(0, 3, (1, 1, 6, 6), generator=gen), 3).long() * 2)
    soft = _onehot(torch.randint(0, 3, (1, 1, 6, 6), generator=gen), 3).float() * 0.8 + 0.05  # in [0, 1]: accepted
    assert torch.isfinite(make()(z, soft)).all()


# ---------------------------------------------------------------- numpy scalar and bool settings


@pytest.mark.parametrize(
    "make",
    [
        lambda: L1ACELoss(num_bins=np.int64(15), empty_weight=np.float32(0.1), to_onehot_y=True),
        lambda: DiceCEL1ACELoss(num_bins=np.int32(15), ace_weight=np.float32(0.3), dice_weight=np.int64(1),
                                to_onehot_y=True),
        lambda: MarginLoss(margin=np.float32(5.0), alpha=np.float32(0.1), to_onehot_y=True),
        lambda: DiceCEMarginLoss(margin=np.int64(5), alpha=np.float64(0.1), to_onehot_y=True),
        lambda: SVLSLoss(kernel_size=np.int64(3), sigma=np.float32(1.0), spacing=(np.float32(1.0), np.int64(2)),
                         to_onehot_y=True),
        lambda: DiceSVLSLoss(kernel_size=np.int32(5), sigma=np.float64(1.0), spacing=np.float32(1.0),
                             to_onehot_y=True),
    ],
)
def test_numpy_scalar_settings_give_the_loss_of_the_python_numbers(make):
    """A numpy integer or float32 setting was refused with 'must be an integer >= 1, got np.int64(15)'."""
    gen = torch.Generator().manual_seed(5)
    z = torch.randn(1, 3, 6, 6, generator=gen)
    y = torch.randint(0, 3, (1, 1, 6, 6), generator=gen)
    loss = make()
    assert math.isfinite(float(loss(z, y)))


def test_numpy_scalar_settings_equal_python_numbers_in_the_functional_core():
    gen = torch.Generator().manual_seed(6)
    z = torch.randn(1, 3, 6, 6, generator=gen)
    p, y = torch.softmax(z, 1), _onehot(torch.randint(0, 3, (1, 1, 6, 6), generator=gen), 3).float()
    torch.testing.assert_close(L1ACELoss(num_bins=np.int64(15))(z, y), L1ACELoss(num_bins=15)(z, y))
    torch.testing.assert_close(l1_average_calibration_error(p, y, np.int64(7), True, np.float32(0.5)),
                               l1_average_calibration_error(p, y, 7, True, 0.5))
    torch.testing.assert_close(mean_margin_penalty(z, np.float32(1.5)), mean_margin_penalty(z, 1.5))
    torch.testing.assert_close(svls_kernel(2, np.int64(5), np.float32(1.5), (np.float32(1.0), 2)),
                               svls_kernel(2, 5, 1.5, (1.0, 2.0)))


@pytest.mark.parametrize(
    "make,name",
    [
        (lambda: L1ACELoss(num_bins=True), "num_bins"),
        (lambda: L1ACELoss(num_bins=np.float64(15.0)), "num_bins"),
        (lambda: L1ACELoss(empty_weight=np.bool_(False)), "empty_weight"),
        (lambda: MarginLoss(margin=True), "margin"),
        (lambda: MarginLoss(alpha="0.1"), "alpha"),
        (lambda: DiceCEL1ACELoss(ace_weight=True), "ace_weight"),
        (lambda: SVLSLoss(sigma=True), "sigma"),
        (lambda: SVLSLoss(kernel_size=np.bool_(True)), "kernel_size"),
        (lambda: SVLSLoss(spacing=(True, 1.0)), "spacing"),
        (lambda: svls_kernel(2, spacing="ab"), "spacing"),
        (lambda: margin_penalty(torch.zeros(1, 2, 3), True), "margin"),
        (lambda: mean_margin_penalty(torch.zeros(1, 2, 3), np.bool_(True)), "margin"),
        (lambda: binned_calibration(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), True), "num_bins"),
    ],
)
def test_bool_or_non_number_settings_raise_type_error_naming_argument_and_type(make, name):
    """A bool was taken as 1 (sigma=True, margin=True in the functional core); others got a value-error message."""
    with pytest.raises(TypeError, match=rf"^{name} must be .*, got (bool|float64|str)"):
        make()


@pytest.mark.parametrize("bad", ["no", "false", 0, 1, None])
@pytest.mark.parametrize(
    "make,name",
    [
        (lambda b: SVLSLoss(include_background=b), "include_background"),
        (lambda b: SVLSLoss(to_onehot_y=b), "to_onehot_y"),
        (lambda b: SVLSLoss(softmax=b, sigmoid=False), "softmax"),
        (lambda b: SVLSLoss(softmax=False, sigmoid=b), "sigmoid"),
        (lambda b: MarginLoss(include_background=b), "include_background"),
        (lambda b: MarginLoss(to_onehot_y=b), "to_onehot_y"),
        (lambda b: L1ACELoss(ignore_empty_classes=b), "ignore_empty_classes"),
        (lambda b: L1ACELoss(include_background=b), "include_background"),
        (lambda b: DiceSVLSLoss(squared_pred=b), "squared_pred"),
        (lambda b: DiceSVLSLoss(batch=b), "batch"),
        (lambda b: DiceSVLSLoss(include_background=b), "include_background"),
        (lambda b: DiceCEMarginLoss(to_onehot_y=b), "to_onehot_y"),
        (lambda b: DiceCEMarginLoss(include_background=b), "include_background"),
        (lambda b: DiceCEMarginLoss(softmax=b), "softmax"),
        (lambda b: DiceCEMarginLoss(squared_pred=b), "squared_pred"),
        (lambda b: DiceCEL1ACELoss(squared_pred=b), "squared_pred"),
        (lambda b: DiceCEL1ACELoss(include_background=b), "include_background"),
        (lambda b: DiceCEL1ACELoss(to_onehot_y=b), "to_onehot_y"),
        (lambda b: mean_margin_penalty(torch.zeros(1, 2, 3), 1.0, b), "include_background"),
        (lambda b: binned_calibration(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), 5, b), "soft"),
        (lambda b: l1_average_calibration_error(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), 5,
                                                ignore_empty_classes=b), "ignore_empty_classes"),
    ],
)
def test_non_bool_flags_raise_type_error_naming_them(make, name, bad):
    """A flag given as a string ("no", "false": truthy) or a number was taken as its truth value without a word."""
    with pytest.raises(TypeError, match=rf"^{name} must be True or False"):
        make(bad)


def test_numpy_bool_flags_are_bools():
    gen = torch.Generator().manual_seed(8)
    z = torch.randn(1, 3, 6, 6, generator=gen)
    y = torch.randint(0, 3, (1, 1, 6, 6), generator=gen)
    for make in (SVLSLoss, MarginLoss, L1ACELoss, DiceSVLSLoss, DiceCEMarginLoss, DiceCEL1ACELoss):
        a = make(include_background=np.bool_(False), to_onehot_y=np.bool_(True))(z, y)
        b = make(include_background=False, to_onehot_y=True)(z, y)
        torch.testing.assert_close(a, b)


def test_dicece_margin_sum_reduction_sums_the_penalty_over_the_voxels():
    """Found by hostile testing: with ``reduction="sum"`` the margin penalty was added as a mean (shrunk by the
    number of voxels against the summed CE); it is summed as ``MarginLoss(reduction="sum")`` sums it."""
    from monai.losses import DiceCELoss

    from monai_unc.losses import DiceCEMarginLoss, MarginLoss

    g = torch.Generator().manual_seed(0)
    z = 8 * torch.randn(2, 3, 6, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 1, 6, 5), generator=g)
    penalty_sum = MarginLoss(reduction="sum", to_onehot_y=True)(z, y) - torch.nn.functional.cross_entropy(
        z, y[:, 0], reduction="sum")
    got = DiceCEMarginLoss(to_onehot_y=True, reduction="sum")(z, y) - DiceCELoss(
        to_onehot_y=True, softmax=True, reduction="sum")(z, y)
    assert float(penalty_sum) > 1.0
    torch.testing.assert_close(got, penalty_sum, rtol=1e-10, atol=1e-10)


def test_minus_infinite_logit_of_an_absent_class_gives_the_finite_loss():
    """Found by hostile testing: a ``-inf`` logit (probability exactly 0) of a class absent from the target made
    ``0 * log 0`` a NaN inside the soft-target cross-entropies, and SVLS / Dice-SVLS / Dice-CE-L1-ACE raised
    "logits must be finite"; the loss and its gradient equal those of a very negative finite logit."""
    from monai_unc.losses import DiceCEL1ACELoss, DiceSVLSLoss, SVLSLoss

    g = torch.Generator().manual_seed(1)
    z = torch.randn(1, 3, 6, 6, generator=g, dtype=torch.float64)
    z[:, 2] = -float("inf")
    y = torch.randint(0, 2, (1, 1, 6, 6), generator=g)  # class 2 absent
    finite = z.clone()
    finite[:, 2] = -1e30
    for loss in (SVLSLoss(to_onehot_y=True), DiceSVLSLoss(to_onehot_y=True), DiceCEL1ACELoss("hard", to_onehot_y=True),
                 SVLSLoss(to_onehot_y=True, softmax=False, sigmoid=True)):
        a, b = z.clone().requires_grad_(), finite.clone().requires_grad_()
        va, vb = loss(a, y), loss(b, y)
        va.backward()
        vb.backward()
        torch.testing.assert_close(va, vb)
        assert bool(torch.isfinite(a.grad).all())
        torch.testing.assert_close(a.grad[:, :2], b.grad[:, :2])


@pytest.mark.parametrize("name, value", [("smooth_nr", "x"), ("smooth_dr", -1.0), ("smooth_dr", float("nan"))])
def test_dice_smoothing_options_are_checked_by_name(name, value):
    from monai_unc.losses import DiceCEL1ACELoss, DiceSVLSLoss

    for cls in (DiceSVLSLoss, DiceCEL1ACELoss):
        with pytest.raises((ValueError, TypeError), match=name):
            cls(**{name: value})


@pytest.mark.parametrize("make", [
    lambda: SVLSLoss(), lambda: MarginLoss(), lambda: L1ACELoss("hard"), lambda: L1ACELoss("soft"),
    lambda: DiceSVLSLoss(), lambda: DiceCEMarginLoss(), lambda: DiceCEL1ACELoss("soft"),
])
def test_softmax_over_one_channel_warns_that_the_calibration_term_has_no_gradient(make):
    """Found by hostile testing: a binary model with one output channel trained with the default ``softmax=True``
    got a constant calibration loss with an all-zero gradient (the hard / soft L1-ACE reported 0.496 and trained
    nothing), silently; now a warning names the cause. The values are unchanged (softmax of one class is 1), and
    ``sigmoid=True`` on the same output has a gradient and no warning."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, 1, 6, 6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    mask = (torch.rand(2, 1, 6, 6, 4, generator=g) > 0.5).double()
    with pytest.warns(UserWarning, match="softmax over one channel"):
        make()(z, mask)
    term = L1ACELoss("soft", softmax=False, sigmoid=True)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = term(z, mask)
    value.backward()
    assert float(z.grad.abs().sum()) > 0


def test_two_channel_softmax_does_not_warn():
    import warnings

    z = torch.randn(2, 2, 6, 6, dtype=torch.float64)
    y = torch.randint(0, 2, (2, 1, 6, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for loss in (SVLSLoss(to_onehot_y=True), MarginLoss(to_onehot_y=True), L1ACELoss(to_onehot_y=True),
                     DiceSVLSLoss(to_onehot_y=True), DiceCEMarginLoss(to_onehot_y=True),
                     DiceCEL1ACELoss(to_onehot_y=True)):
            loss(z, y)


@pytest.mark.parametrize("num_bins", [10, 20, 15])
def test_hard_bins_of_float32_values_just_below_an_edge_are_the_metrics_bins(num_bins):
    """Found by hostile testing: ``floor(p * num_bins)`` taken in float32 rounded the product of a value just below
    an edge up onto it (``float32(0.35) = 0.34999999``: bin 7 of 20 instead of 6), so the hard L1-ACE of
    ``p = (0.35, 0.36)``, ``y = (0, 1)`` was 0.145 (one bin) instead of 0.495 (two bins), where the documented
    convention, :func:`monai_unc.metrics.calibration.confidence_bins`, bins the value below the edge."""
    from monai_unc.metrics.calibration import confidence_bins

    edges = torch.arange(1, num_bins, dtype=torch.float32) / num_bins
    values = torch.cat([edges, torch.nextafter(edges, torch.zeros_like(edges)),
                        torch.nextafter(edges, torch.ones_like(edges)), torch.tensor([0.0, 1.0])])
    expected = torch.from_numpy(np.floor(values.double().numpy() * num_bins)).long().clamp(max=num_bins - 1)
    assert torch.equal(confidence_bins(values, num_bins), expected)  # the convention binned_calibration documents
    one_per_column = values.reshape(1, -1, 1)  # one value per channel: its bin is the one with weight
    _, _, weight = binned_calibration(one_per_column, torch.zeros_like(one_per_column), num_bins)
    assert torch.equal(weight[0].argmax(-1), expected)
    ace = l1_average_calibration_error(torch.tensor([[[0.35, 0.36]]]), torch.tensor([[[0.0, 1.0]]]), 20)
    assert float(ace) == pytest.approx((0.35 + 0.64) / 2, abs=1e-6)


def test_dice_ce_l1_ace_include_background_leaves_the_cross_entropy_over_every_channel_as_documented():
    """Found by hostile testing: ``DiceCEL1ACELoss`` documented ``include_background`` as applying "for all parts",
    but its cross-entropy covers every channel (MONAI's ``DiceCELoss`` convention, which the authors train with): with
    ``include_background=False`` the CE part was 1.3831 (all channels), not 1.0416 (channel 0 left out). The docstring
    now says what the loss computes."""
    import inspect

    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, 3, 8, 8, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 1, 8, 8), generator=g)
    ce_only = DiceCEL1ACELoss("hard", to_onehot_y=True, include_background=False, dice_weight=0.0, ace_weight=0.0,
                              ce_weight=1.0)
    torch.testing.assert_close(ce_only(z, y), F.cross_entropy(z, y[:, 0]))
    doc = " ".join(inspect.getdoc(DiceCEL1ACELoss).split())
    assert "include_background: for the Dice and L1-ACE parts; the cross-entropy covers every channel" in doc


def test_svls_targets_keep_the_target_dtype_under_autocast():
    """svls_targets promises targets in the dtype of onehot, but its convolution ran in bfloat16 under a training
    step's torch.autocast: targets off by 2e-3 and class sums off 1 by 2e-3. Found by hostile testing (precision
    review)."""
    from monai_unc.losses.functional import svls_kernel, svls_targets

    gen = torch.Generator().manual_seed(0)
    y = (torch.rand(1, 1, 12, 12, 12, generator=gen) > 0.5).float()
    y = torch.cat([1 - y, y], 1)
    kernel = svls_kernel(3)
    plain = svls_targets(y, kernel)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = svls_targets(y, kernel)
    assert autocast.dtype == torch.float32
    torch.testing.assert_close(autocast, plain, rtol=0, atol=0)


@pytest.mark.parametrize("name, value", [
    ("lambda_dice", float("nan")), ("lambda_dice", float("inf")), ("lambda_ce", float("nan")),
    ("smooth_nr", -1.0), ("smooth_dr", -1e-5), ("smooth_dr", float("nan")), ("lambda_ce", "1"),
])
def test_dicece_margin_dice_weights_and_smoothing_are_checked_by_name(name, value):
    """Found by hostile testing: MONAI checks only ``lambda_dice / lambda_ce < 0``, so a NaN or infinite weight or a
    negative / NaN smoothing term was accepted and the loss of finite logits came back NaN or inf without an error."""
    with pytest.raises((ValueError, TypeError), match=name):
        DiceCEMarginLoss(to_onehot_y=True, **{name: value})
    z = torch.randn(1, 3, 4, 4)
    y = torch.randint(0, 3, (1, 1, 4, 4))
    ok = DiceCEMarginLoss(to_onehot_y=True, lambda_dice=0.5, lambda_ce=2, smooth_nr=0, smooth_dr=1e-3)
    assert bool(torch.isfinite(ok(z, y)))


@pytest.mark.parametrize("soft", [False, True])
def test_l1_ace_of_values_outside_0_1_raises_naming_probs(soft):
    """Found by hostile testing: logits passed as ``probs`` fell into the end bins and gave an "error" of 2.17 (the
    documented range is [0, 1]) without a word."""
    z = torch.tensor([[[3.0, -2.0, 0.5, 7.0]]])
    y = torch.tensor([[[1.0, 0.0, 0.0, 1.0]]])
    with pytest.raises(ValueError, match=r"probs must be probabilities in \[0, 1\], got values in \[-2, 7\]"):
        l1_average_calibration_error(z, y, soft=soft)
    with pytest.raises(ValueError, match="probs"):
        l1_average_calibration_error(torch.full((1, 1, 3), 1.0 + 1e-6), y[..., :3], soft=soft)
    p = torch.sigmoid(z)  # the same values as probabilities: accepted, in [0, 1], equal to the brute force
    value = float(l1_average_calibration_error(p, y, num_bins=4, soft=soft))
    assert 0.0 <= value <= 1.0
    nan = p.clone()
    nan[0, 0, 1] = float("nan")  # a NaN probability stays the documented NaN, not a range error
    assert math.isnan(float(l1_average_calibration_error(nan, y, soft=soft)))
