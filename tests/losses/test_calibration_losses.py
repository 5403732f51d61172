"""The calibration losses against the authors' code (frozen outputs), brute-force numpy references, float64
gradchecks, edge cases and bad input."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from monai.losses import DiceCELoss, DiceLoss

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
    svls_targets,
    svls_targets_separable,
)

REFERENCE = json.loads((Path(__file__).parent / "authors_reference" / "reference.json").read_text())


def _inputs(key: str) -> tuple[torch.Tensor, torch.Tensor]:
    entry = REFERENCE["inputs"][key]
    return torch.tensor(entry["logits"], dtype=torch.float32), torch.tensor(entry["labels"])


# ---------------------------------------------------------------- the authors' code (frozen by generate.py)


@pytest.mark.parametrize("entry", REFERENCE["svls"], ids=lambda e: f"sigma{e['sigma']}")
def test_svls_equals_the_authors_code(entry):
    z, y = _inputs(entry["input"])
    ours = SVLSLoss(sigma=entry["sigma"], to_onehot_y=True)(z, y)
    assert float(ours) == pytest.approx(entry["loss"], rel=1e-5)


@pytest.mark.parametrize("entry", REFERENCE["mbls"], ids=lambda e: f"{e['input']}-m{e['margin']}")
def test_margin_loss_equals_the_authors_code(entry):
    z, y = _inputs(entry["input"])
    ours = MarginLoss(margin=entry["margin"], alpha=entry["alpha"], to_onehot_y=True)(z, y)
    assert float(ours) == pytest.approx(entry["loss"], rel=1e-5)


@pytest.mark.parametrize("entry", REFERENCE["seg_mbls"], ids=lambda e: f"{e['input']}-m{e['margin']}")
def test_segmentation_margin_loss_equals_the_authors_code(entry):
    """Murugesan et al.'s CE + Dice (background left out, eps 1e-5 on both sides) + alpha * penalty."""
    z, y = _inputs(entry["input"])
    ours = DiceCEMarginLoss(margin=entry["margin"], alpha=entry["alpha"], include_background=False, to_onehot_y=True,
                            smooth_nr=1e-5, smooth_dr=1e-5)(z, y)
    assert float(ours) == pytest.approx(entry["loss"], rel=1e-5)


@pytest.mark.parametrize(
    "entry", REFERENCE["ace"], ids=lambda e: f"{e['input']}-{e['binning']}-{e['num_bins']}-{e['include_background']}"
)
def test_l1_ace_equals_the_authors_code(entry):
    z, y = _inputs(entry["input"])
    ours = L1ACELoss(entry["binning"], num_bins=entry["num_bins"], include_background=entry["include_background"],
                     to_onehot_y=True, reduction="none")(z, y)
    expected = torch.tensor(entry["per_image_channel"])
    assert ours.shape[:2] == expected.shape and all(s == 1 for s in ours.shape[2:])
    torch.testing.assert_close(ours.reshape(expected.shape), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("entry", REFERENCE["ace_dice_ce"], ids=lambda e: f"{e['input']}-{e['binning']}")
def test_dice_ce_l1_ace_equals_the_authors_code(entry):
    z, y = _inputs(entry["input"])
    ours = DiceCEL1ACELoss(entry["binning"], to_onehot_y=True)(z, y)  # the published defaults
    assert float(ours) == pytest.approx(entry["loss"], rel=1e-5)


# ---------------------------------------------------------------- brute-force numpy references


def _np_svls_kernel(dims, k, sigma, spacing):
    half = k // 2
    w = np.zeros((k,) * dims)
    for idx in itertools.product(range(k), repeat=dims):
        d2 = sum(((i - half) * s) ** 2 for i, s in zip(idx, spacing))
        w[idx] = math.exp(-d2 / (2 * sigma**2))
    w /= w.sum()
    c = (half,) * dims
    w[c] = 1 - w[c]
    return w / w.sum()


def _np_svls_targets(onehot, kernel):
    half = kernel.shape[0] // 2
    dims = onehot.ndim - 2
    padded = np.pad(onehot, [(0, 0), (0, 0)] + [(half, half)] * dims, mode="edge")
    out = np.zeros_like(onehot)
    for b, c in itertools.product(range(onehot.shape[0]), range(onehot.shape[1])):
        for pos in itertools.product(*[range(n) for n in onehot.shape[2:]]):
            acc = 0.0
            for off in itertools.product(range(kernel.shape[0]), repeat=dims):
                acc += kernel[off] * padded[(b, c, *[p + o for p, o in zip(pos, off)])]
            out[(b, c, *pos)] = acc
    return out


@pytest.mark.parametrize("dims,k,sigma,spacing", [(2, 3, 1.0, (1.0, 1.0)), (3, 3, 1.0, (1.0, 1.0, 3.0)),
                                                   (2, 5, 1.5, (0.7, 2.0)), (1, 3, 0.8, (1.0,))])
def test_svls_kernel_and_targets_match_numpy(dims, k, sigma, spacing):
    kernel = svls_kernel(dims, k, sigma, spacing, dtype=torch.float64)
    ref = _np_svls_kernel(dims, k, sigma, spacing)
    np.testing.assert_allclose(kernel.numpy(), ref, rtol=1e-12)
    assert kernel[(k // 2,) * dims] == pytest.approx(0.5)
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, size=(2, *([5, 4, 3][:dims])))
    onehot = np.moveaxis(np.eye(3)[labels], -1, 1)
    q = svls_targets(torch.from_numpy(onehot), kernel).numpy()
    np.testing.assert_allclose(q, _np_svls_targets(onehot, ref), rtol=1e-12)
    np.testing.assert_allclose(q.sum(1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("shape,k,sigma,spacing,dtype", [
    ((2, 3, 9, 7, 6), 3, 1.0, None, torch.float64),
    ((1, 2, 5, 1, 8), 5, 1.5, (1.0, 1.0, 3.0), torch.float64),  # an axis of length 1, one shorter than the taps
    ((3, 2, 6, 4), 7, 2.0, (0.7, 2.0), torch.float64),
    ((2, 4, 11), 3, 0.8, (1.0,), torch.float32),
    ((1, 3, 4, 5, 6), 3, 1.0, (1.0, 2.0, 0.5), torch.float32),
])
def test_svls_compiled_cpu_targets_equal_numpy_and_the_torch_form(monkeypatch, shape, k, sigma, spacing, dtype):
    pytest.importorskip("numba")
    from monai_unc.losses import functional as fn

    rng = np.random.default_rng(7)
    labels = rng.integers(0, shape[1], size=(shape[0], *shape[2:]))
    onehot = np.ascontiguousarray(np.moveaxis(np.eye(shape[1])[labels], -1, 1))
    y = torch.from_numpy(onehot).to(dtype)
    dims = len(shape) - 2
    monkeypatch.setattr(fn, "CPU_KERNEL_MIN_ELEMENTS", 0)
    assert fn._use_cpu_kernel(y)
    compiled = svls_targets_separable(y, k, sigma, spacing)
    monkeypatch.setattr(fn, "CPU_KERNEL_MIN_ELEMENTS", 10**12)
    assert not fn._use_cpu_kernel(y)
    torch_form = svls_targets_separable(y, k, sigma, spacing)
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    assert compiled.dtype == dtype and compiled.shape == y.shape
    torch.testing.assert_close(compiled, torch_form, atol=tol, rtol=0)
    ref = _np_svls_targets(onehot, _np_svls_kernel(dims, k, sigma, spacing or (1.0,) * dims))
    np.testing.assert_allclose(compiled.double().numpy(), ref, atol=tol)
    np.testing.assert_allclose(compiled.double().sum(1).numpy(), 1.0, atol=tol)


def test_svls_compiled_cpu_targets_in_threads_and_views(monkeypatch):
    pytest.importorskip("numba")
    from monai_unc.losses import _cpu_kernel
    from monai_unc.losses import functional as fn

    monkeypatch.setattr(fn, "CPU_KERNEL_MIN_ELEMENTS", 0)
    monkeypatch.setattr(_cpu_kernel, "MIN_ROWS_PER_THREAD", 2)
    y = torch.randint(0, 3, (2, 1, 12, 10, 9))
    onehot = torch.zeros(2, 3, 12, 10, 9, dtype=torch.float64).scatter_(1, y, 1.0)
    view = onehot.permute(0, 1, 4, 3, 2)  # not contiguous: made contiguous first
    ref = fn._separable_torch(view.contiguous(), [[float(v) for v in fn._gaussian_1d(3, 1.0, 1.0)]] * 3, 0.0)
    x = view.contiguous().reshape(6, 9, 10, 12).numpy()
    weights = [fn._gaussian_1d(3, 1.0, 1.0).numpy()] * 3
    for threads in (1, 3):
        out = _cpu_kernel.smooth_axes(x, weights, 0.0, n_threads=threads)
        torch.testing.assert_close(torch.from_numpy(out).reshape(view.shape), ref, atol=1e-12, rtol=0)
    with torch.no_grad():
        a = svls_targets_separable(view, 3, 1.0)
    monkeypatch.setattr(fn, "CPU_KERNEL_MIN_ELEMENTS", 10**12)
    torch.testing.assert_close(a, svls_targets_separable(view, 3, 1.0), atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="weights"):
        _cpu_kernel.smooth_axes(x, weights[:2], 0.0)


def test_svls_targets_keep_their_gradient_with_the_compiled_form_on(monkeypatch):
    from monai_unc.losses import functional as fn

    monkeypatch.setattr(fn, "CPU_KERNEL_MIN_ELEMENTS", 0)
    soft = torch.rand(1, 2, 4, 5, dtype=torch.float64, requires_grad=True)
    assert not fn._use_cpu_kernel(soft)  # a target that needs a gradient takes the torch form
    torch.autograd.gradcheck(lambda t: svls_targets_separable(t, 3, 1.0), (soft,))


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("include_background", [True, False])
def test_svls_loss_reductions_match_numpy(reduction, include_background):
    rng = np.random.default_rng(11)
    z = rng.normal(scale=2, size=(2, 4, 5, 3, 4))
    y = rng.integers(0, 4, size=(2, 1, 5, 3, 4))
    onehot = np.moveaxis(np.eye(4)[y[:, 0]], -1, 1)
    q = _np_svls_targets(onehot, _np_svls_kernel(3, 3, 1.0, (1.0, 1.0, 1.0)))
    terms = -q * _np_log_softmax(z)
    per_voxel = (terms if include_background else terms[:, 1:]).sum(1, keepdims=True)
    ref = {"none": per_voxel, "sum": per_voxel.sum(), "mean": per_voxel.mean()}[reduction]
    zt = torch.from_numpy(z).requires_grad_(True)
    loss = SVLSLoss(include_background=include_background, to_onehot_y=True, reduction=reduction)
    ours = loss(zt, torch.from_numpy(y))
    np.testing.assert_allclose(ours.detach().numpy(), ref, rtol=1e-12)
    # the gradient of the fused cross-entropy: (softmax(z) * sum_c q_c - q) per voxel, scaled by the reduction
    ours.sum().backward()
    qq = q if include_background else np.concatenate([np.zeros_like(q[:, :1]), q[:, 1:]], 1)
    p = np.exp(_np_log_softmax(z))
    grad = p * qq.sum(1, keepdims=True) - qq
    if reduction == "mean":
        grad = grad / per_voxel.size
    np.testing.assert_allclose(zt.grad.numpy(), grad, rtol=1e-10, atol=1e-14)


def test_anisotropic_spacing_spreads_less_along_the_coarse_axis():
    kernel = svls_kernel(3, 3, 1.0, (1.0, 1.0, 4.0), dtype=torch.float64)
    assert kernel[1, 1, 0] < kernel[1, 0, 1] == pytest.approx(kernel[0, 1, 1])
    assert torch.equal(svls_kernel(3, 3, 2.0, (1.0, 1.0, 1.0)), svls_kernel(3, 3, 2.0))
    assert torch.allclose(svls_kernel(3, 3, 2.0, 2.0), svls_kernel(3, 3, 1.0))  # sigma in the units of spacing
    z = torch.randn(1, 2, 6, 6, 6, dtype=torch.float64)
    y = torch.randint(0, 2, (1, 1, 6, 6, 6))
    iso = SVLSLoss(to_onehot_y=True)(z, y)
    aniso = SVLSLoss(to_onehot_y=True, spacing=(1.0, 1.0, 4.0))(z, y)
    assert not torch.isclose(iso, aniso)


def test_spacing_given_as_a_metatensors_pixdim_tensor():
    """Found by a review of calibrated training: ``spacing=batch["image"].pixdim`` (a tensor, as MONAI gives it) was
    refused with a TypeError where the same numbers as a list or numpy array were taken."""
    from monai.data import MetaTensor

    image = MetaTensor(torch.zeros(1, 6, 6, 6), affine=torch.diag(torch.tensor([0.8, 0.8, 3.0, 1.0])))
    z = torch.randn(1, 2, 6, 6, 6, dtype=torch.float64)
    y = torch.randint(0, 2, (1, 1, 6, 6, 6))
    want = SVLSLoss(to_onehot_y=True, spacing=[0.8, 0.8, 3.0])(z, y)
    for spacing in (image.pixdim, torch.tensor([0.8, 0.8, 3.0], dtype=torch.float32), torch.tensor(2.0)):
        got = SVLSLoss(to_onehot_y=True, spacing=spacing)(z, y)
        if spacing.ndim:
            assert torch.allclose(got, want, rtol=1e-6)
        else:
            assert torch.equal(got, SVLSLoss(to_onehot_y=True, spacing=2.0)(z, y))
    assert torch.equal(svls_kernel(3, 3, 1.0, torch.tensor([1.0, 1.0, 4.0])), svls_kernel(3, 3, 1.0, (1.0, 1.0, 4.0)))
    with pytest.raises(ValueError, match="spacing must be 3 positive finite numbers"):
        SVLSLoss(to_onehot_y=True, spacing=torch.tensor([0.8, 0.8]))(z, y)


def _np_log_softmax(z):
    m = z.max(1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(1, keepdims=True))


@pytest.mark.parametrize("include_background", [True, False])
def test_svls_loss_matches_numpy(include_background):
    rng = np.random.default_rng(2)
    z = rng.normal(scale=3, size=(2, 3, 4, 5))
    y = rng.integers(0, 3, size=(2, 1, 4, 5))
    onehot = np.moveaxis(np.eye(3)[y[:, 0]], -1, 1)
    q = _np_svls_targets(onehot, _np_svls_kernel(2, 3, 1.0, (1.0, 1.0)))
    terms = -q * _np_log_softmax(z)
    ref = (terms if include_background else terms[:, 1:]).sum(1).mean()
    ours = SVLSLoss(include_background=include_background, to_onehot_y=True)(torch.from_numpy(z), torch.from_numpy(y))
    assert float(ours) == pytest.approx(ref, rel=1e-12)
    # sigmoid: the binary cross-entropy of each channel against its smoothed mask, mean over channels and voxels
    p = 1 / (1 + np.exp(-z))
    ref_sig = (-(q * np.log(p) + (1 - q) * np.log(1 - p))).mean()
    ours_sig = SVLSLoss(softmax=False, sigmoid=True)(torch.from_numpy(z), torch.from_numpy(onehot))
    assert float(ours_sig) == pytest.approx(ref_sig, rel=1e-10)


@pytest.mark.parametrize("include_background", [True, False])
def test_margin_loss_matches_numpy(include_background):
    rng = np.random.default_rng(3)
    z = rng.normal(scale=8, size=(2, 4, 3, 3, 2))
    y = rng.integers(0, 4, size=(2, 1, 3, 3, 2))
    ce = -np.take_along_axis(_np_log_softmax(z), y, axis=1)
    pen = np.maximum(0, z.max(1, keepdims=True) - z - 5.0)
    if not include_background:
        ce = ce * (y != 0)
        pen = pen[:, 1:]
    ref = (ce[:, 0] + 0.3 * pen.mean(1)).mean()
    ours = MarginLoss(5.0, 0.3, include_background=include_background, to_onehot_y=True)(torch.from_numpy(z),
                                                                                        torch.from_numpy(y))
    assert float(ours) == pytest.approx(ref, rel=1e-12)
    np.testing.assert_allclose(margin_penalty(torch.from_numpy(z), 5.0).numpy(),
                               np.maximum(0, z.max(1, keepdims=True) - z - 5.0))


def _np_ace(p, y, num_bins, soft, empty_weight=0.01):
    """Loops over voxels and bins; soft weights from the distance to the bin centres (triangular kernel)."""
    out = np.zeros(p.shape[:2])
    centres = (np.arange(num_bins) + 0.5) / num_bins
    for b, c in itertools.product(range(p.shape[0]), range(p.shape[1])):
        pv, yv = p[b, c].ravel(), y[b, c].ravel()
        w = np.zeros((pv.size, num_bins))
        for i, v in enumerate(pv):
            if not soft:
                w[i, min(int(v * num_bins), num_bins - 1)] = 1
            elif v <= centres[0]:
                w[i, 0] = 1
            elif v >= centres[-1]:
                w[i, -1] = 1
            else:
                w[i] = np.maximum(0, 1 - np.abs(v - centres) * num_bins)
        tot = w.sum(0)
        keep = tot >= empty_weight if soft else tot > 0
        gaps = [abs((w[:, k] * pv).sum() / tot[k] - (w[:, k] * yv).sum() / tot[k]) for k in np.flatnonzero(keep)]
        out[b, c] = np.mean(gaps) if yv.sum() > 0 else 0.0
    return out


@pytest.mark.parametrize("soft", [False, True])
@pytest.mark.parametrize("num_bins", [1, 7, 20])
def test_l1_ace_matches_numpy(soft, num_bins):
    rng = np.random.default_rng(4)
    p = rng.uniform(size=(2, 3, 6, 5))
    p[0, 0, 0, :3] = [0.0, 1.0, 0.5]
    y = (rng.uniform(size=p.shape) < p).astype(float)
    y[1, 2] = 0  # an empty channel: ignored (0)
    ours = l1_average_calibration_error(torch.from_numpy(p), torch.from_numpy(y), num_bins, soft)
    np.testing.assert_allclose(ours.numpy(), _np_ace(p, y, num_bins, soft), rtol=1e-12, atol=1e-15)
    assert ours[1, 2] == 0
    kept = l1_average_calibration_error(torch.from_numpy(p), torch.from_numpy(y), num_bins, soft,
                                        ignore_empty_classes=False)
    assert kept[1, 2] > 0


def test_l1_ace_sigmoid_regions_match_numpy():
    rng = np.random.default_rng(5)
    z = rng.normal(scale=2, size=(1, 2, 5, 5, 3))
    y = (rng.uniform(size=z.shape) < 0.4).astype(float)  # overlapping regions
    ref = _np_ace(1 / (1 + np.exp(-z)), y, 10, True).mean()
    ours = L1ACELoss("soft", 10, sigmoid=True, softmax=False)(torch.from_numpy(z), torch.from_numpy(y))
    assert float(ours) == pytest.approx(ref, rel=1e-12)


def test_binned_calibration_is_the_calibration_histogram():
    """Hard bins: counts and sums equal those of a histogram computed with numpy."""
    rng = np.random.default_rng(6)
    p = rng.uniform(size=(1, 1, 500))
    y = (rng.uniform(size=p.shape) < 0.5).astype(float)
    sp, sy, w = binned_calibration(torch.from_numpy(p), torch.from_numpy(y), 10)
    np.testing.assert_array_equal(w[0, 0].numpy(), np.histogram(p, bins=10, range=(0, 1))[0])
    np.testing.assert_allclose(sp[0, 0].numpy(), np.histogram(p, bins=10, range=(0, 1), weights=p)[0])
    np.testing.assert_allclose(sy[0, 0].numpy(), np.histogram(p, bins=10, range=(0, 1), weights=y)[0])
    _, _, ws = binned_calibration(torch.from_numpy(p), torch.from_numpy(y), 10, soft=True)
    assert float(ws.sum()) == pytest.approx(500)  # every voxel's weight is shared out in full


# ---------------------------------------------------------------- gradients (float64)


def _gradcheck(loss, z, target):
    z = z.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: loss(x, target), (z,), eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize(
    "loss,to_onehot",
    [
        (SVLSLoss(to_onehot_y=True), True),
        (SVLSLoss(spacing=(1.0, 2.5), include_background=False), False),
        (SVLSLoss(softmax=False, sigmoid=True), False),
        (MarginLoss(margin=2.0, alpha=0.5, to_onehot_y=True), True),
        (L1ACELoss("hard", 5, to_onehot_y=True), True),
        (L1ACELoss("soft", 5, to_onehot_y=True), True),
        (L1ACELoss("soft", 4, sigmoid=True, softmax=False), False),
        (DiceSVLSLoss(to_onehot_y=True), True),
        (DiceCEMarginLoss(margin=2.0, to_onehot_y=True), True),
        (DiceCEL1ACELoss("soft", 5, to_onehot_y=True), True),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, torch.nn.Module) else str(v),
)
def test_gradcheck_float64(loss, to_onehot):
    gen = torch.Generator().manual_seed(7)
    z = torch.randn(2, 3, 4, 3, dtype=torch.float64, generator=gen) * 3
    labels = torch.randint(0, 3, (2, 1, 4, 3), generator=gen)
    target = labels if to_onehot else F.one_hot(labels[:, 0], 3).movedim(-1, 1).double()
    _gradcheck(loss, z, target)


def test_hard_ace_gradient_is_the_bin_mean_derivative():
    """d ACE / d p_i = sign(mean_p - mean_y) / (n_bins_used * count_of_bin(i)) for hard bins."""
    p = torch.tensor([[[0.1, 0.12, 0.8, 0.85, 0.9]]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[[1.0, 0.0, 0.0, 1.0, 1.0]]], dtype=torch.float64)
    l1_average_calibration_error(p, y, num_bins=2).sum().backward()
    # bin 0: mean p 0.11 < 0.5 -> -1/(2*2); bin 1: mean p 0.85 > 2/3 -> +1/(2*3)
    torch.testing.assert_close(p.grad, torch.tensor([[[-0.25, -0.25, 1 / 6, 1 / 6, 1 / 6]]], dtype=torch.float64))


# ---------------------------------------------------------------- edge cases and properties


def test_one_class():
    z = torch.randn(2, 1, 4, 4, dtype=torch.float64)
    y = torch.zeros(2, 1, 4, 4, dtype=torch.long)
    with pytest.warns(UserWarning, match="softmax over one channel"):  # softmax of one class is 1: no gradient
        assert float(SVLSLoss(to_onehot_y=True)(z, y)) == pytest.approx(0.0, abs=1e-12)
    with pytest.warns(UserWarning, match="softmax over one channel"):
        assert float(MarginLoss(to_onehot_y=True)(z, y)) == pytest.approx(0.0, abs=1e-12)
    with pytest.warns(UserWarning, match="softmax over one channel"):
        assert float(L1ACELoss(to_onehot_y=True)(z, y)) == pytest.approx(0.0, abs=1e-12)
    for loss in (SVLSLoss(include_background=False, to_onehot_y=True), MarginLoss(include_background=False,
                 to_onehot_y=True), L1ACELoss(include_background=False, to_onehot_y=True)):
        with pytest.raises(ValueError, match="no channel"):
            loss(z, y)
    # one binary region (sigmoid): the losses are defined
    onehot = torch.randint(0, 2, (2, 1, 4, 4)).double()
    assert float(SVLSLoss(softmax=False, sigmoid=True)(z, onehot)) > 0
    assert float(L1ACELoss(softmax=False, sigmoid=True)(z, onehot)) >= 0


def test_empty_foreground():
    """All background: the smoothed labels stay one-hot, the empty channels give no ACE, Dice stays finite."""
    z = torch.randn(1, 3, 6, 6, dtype=torch.float64)
    y = torch.zeros(1, 1, 6, 6, dtype=torch.long)
    assert float(SVLSLoss(to_onehot_y=True)(z, y)) == pytest.approx(float(F.cross_entropy(z, y[:, 0])), rel=1e-12)
    ace = L1ACELoss(to_onehot_y=True, reduction="none")(z, y)
    assert ace.shape == (1, 3, 1, 1) and float(ace[0, 1:].abs().sum()) == 0 and float(ace[0, 0]) > 0
    assert float(L1ACELoss(to_onehot_y=True, include_background=False)(z, y)) == 0.0
    for loss in (DiceSVLSLoss(to_onehot_y=True), DiceCEMarginLoss(to_onehot_y=True),
                 DiceCEL1ACELoss(to_onehot_y=True)):
        assert math.isfinite(float(loss(z, y)))


def test_svls_of_a_constant_map_is_cross_entropy_and_smooths_only_boundaries():
    z = torch.randn(1, 2, 5, 5, 5, dtype=torch.float64)
    y = torch.ones(1, 1, 5, 5, 5, dtype=torch.long)
    assert float(SVLSLoss(to_onehot_y=True)(z, y)) == pytest.approx(float(F.cross_entropy(z, y[:, 0])), rel=1e-12)
    onehot = torch.zeros(1, 2, 7, 7); onehot[:, 0] = 1; onehot[:, 0, :, 4:] = 0; onehot[:, 1, :, 4:] = 1  # noqa: E702
    q = SVLSLoss().soft_targets(onehot)
    assert torch.equal(q[:, :, :, :3], onehot[:, :, :, :3]) and torch.equal(q[:, :, :, 5:], onehot[:, :, :, 5:])
    assert bool(((q[:, 1, :, 3] > 0) & (q[:, 1, :, 3] < 0.5)).all())


def test_margin_penalty_vanishes_within_the_margin_and_the_loss_reduces_to_cross_entropy():
    z = torch.randn(2, 4, 6, 6, dtype=torch.float64)  # logit distances < 10
    y = torch.randint(0, 4, (2, 1, 6, 6))
    assert float(margin_penalty(z, 10.0).abs().max()) == 0
    assert float(MarginLoss(to_onehot_y=True)(z, y)) == pytest.approx(float(F.cross_entropy(z, y[:, 0])), rel=1e-12)
    assert float(MarginLoss(margin=0.0, alpha=1.0, to_onehot_y=True)(z, y)) > float(F.cross_entropy(z, y[:, 0]))


@pytest.mark.parametrize("shape", [(3, 2, 7), (2, 3, 5, 4), (1, 4, 6, 5, 4)], ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("include_background", [True, False])
def test_fused_margin_penalty_equals_autograd_of_the_plain_formula(shape, include_background):
    """The hand-written gradient against autograd of margin_penalty (no ties: continuous random logits)."""
    gen = torch.Generator().manual_seed(11)
    first = 0 if include_background else 1
    for scale in (1.0, 4.0, 20.0):  # from few to most entries paying the margin 3
        z = (torch.randn(*shape, dtype=torch.float64, generator=gen) * scale).requires_grad_(True)
        fused = mean_margin_penalty(z, 3.0, include_background)
        fused.backward()
        ref_z = z.detach().clone().requires_grad_(True)
        plain = margin_penalty(ref_z, 3.0)[:, first:].mean()
        plain.backward()
        torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
        if float(plain.detach()) == 0:  # nothing pays: autograd's zero gradient, None
            assert z.grad is None and float(ref_z.grad.abs().max()) == 0
        else:
            torch.testing.assert_close(z.grad, ref_z.grad, rtol=0, atol=1e-15)


def test_fused_margin_penalty_ties_and_nothing_paying():
    # two maxima: the gradient of the paying class goes to the first one
    z = torch.tensor([[[12.0], [12.0], [0.0]]], requires_grad=True)
    mean_margin_penalty(z, 10.0).backward()
    torch.testing.assert_close(z.grad.flatten(), torch.tensor([2 / 3, 0.0, -2 / 3]) / 2)
    # nothing pays: value 0 and a zero gradient (autograd's None), also inside a sum with another loss
    z = torch.randn(2, 3, 4, 4, requires_grad=True)
    value = mean_margin_penalty(z, 10.0)
    assert float(value.detach()) == 0.0
    (value + z.sum()).backward()
    torch.testing.assert_close(z.grad, torch.ones_like(z))
    # NaN logits give a NaN value (the loss classes then raise)
    assert math.isnan(float(mean_margin_penalty(torch.full((1, 2, 3), float("nan")), 1.0)))


def test_l1_ace_is_zero_when_calibrated_in_every_bin():
    p = torch.tensor([[[0.25] * 4 + [0.75] * 4]], dtype=torch.float64)
    y = torch.tensor([[[1.0, 0, 0, 0, 1, 1, 1, 0]]], dtype=torch.float64)
    assert float(l1_average_calibration_error(p, y, num_bins=10).sum()) == 0.0
    assert float(l1_average_calibration_error(p, 1 - y, num_bins=10).sum()) == pytest.approx(0.5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_reductions(reduction):
    z = torch.randn(2, 3, 4, 5)
    y = torch.randint(0, 3, (2, 1, 4, 5))
    for loss_cls in (SVLSLoss, MarginLoss):
        per_voxel = loss_cls(to_onehot_y=True, reduction="none")(z, y)
        assert per_voxel.shape == (2, 1, 4, 5)
        value = loss_cls(to_onehot_y=True, reduction=reduction)(z, y)
        expected = {"mean": per_voxel.mean(), "sum": per_voxel.sum(), "none": per_voxel}[reduction]
        torch.testing.assert_close(value, expected)
    per_channel = L1ACELoss(to_onehot_y=True, reduction="none")(z, y)
    assert per_channel.shape == (2, 3, 1, 1)
    value = L1ACELoss(to_onehot_y=True, reduction=reduction)(z, y)
    torch.testing.assert_close(value, {"mean": per_channel.mean(), "sum": per_channel.sum(), "none": per_channel}[
        reduction])


def test_one_hot_and_label_targets_agree_and_3d_works():
    z = torch.randn(1, 3, 4, 4, 4)
    y = torch.randint(0, 3, (1, 1, 4, 4, 4))
    onehot = F.one_hot(y[:, 0], 3).movedim(-1, 1).float()
    for a, b in [(SVLSLoss(to_onehot_y=True), SVLSLoss()), (MarginLoss(to_onehot_y=True), MarginLoss()),
                 (L1ACELoss("soft", to_onehot_y=True), L1ACELoss("soft")),
                 (DiceSVLSLoss(to_onehot_y=True), DiceSVLSLoss()), (DiceCEMarginLoss(to_onehot_y=True),
                                                                    DiceCEMarginLoss()),
                 (DiceCEL1ACELoss(to_onehot_y=True), DiceCEL1ACELoss())]:
        torch.testing.assert_close(a(z, y), b(z, onehot))


def test_composites_are_dice_plus_the_calibration_term():
    z = torch.randn(2, 3, 6, 6) * 6
    y = torch.randint(0, 3, (2, 1, 6, 6))
    dice = DiceLoss(to_onehot_y=True, softmax=True)
    torch.testing.assert_close(DiceSVLSLoss(to_onehot_y=True, lambda_svls=0.5)(z, y),
                               dice(z, y) + 0.5 * SVLSLoss(to_onehot_y=True)(z, y))
    ce = F.cross_entropy(z, y[:, 0])
    torch.testing.assert_close(DiceCEMarginLoss(margin=3.0, alpha=0.2, to_onehot_y=True)(z, y),
                               DiceCELoss(to_onehot_y=True, softmax=True)(z, y)
                               + 0.2 * margin_penalty(z, 3.0).mean())
    sq = DiceLoss(to_onehot_y=True, softmax=True, squared_pred=True, smooth_nr=0.0, smooth_dr=1e-5)
    torch.testing.assert_close(DiceCEL1ACELoss("hard", ace_weight=1.0, dice_weight=2.0, ce_weight=3.0,
                                               to_onehot_y=True)(z, y),
                               2.0 * sq(z, y) + 3.0 * ce + L1ACELoss(to_onehot_y=True)(z, y))


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: svls_kernel(4), "spatial_dims"),
        (lambda: svls_kernel(2, kernel_size=4), "kernel_size"),
        (lambda: svls_kernel(2, sigma=0.0), "sigma"),
        (lambda: svls_kernel(2, sigma=float("nan")), "sigma"),
        (lambda: svls_kernel(2, spacing=(1.0,)), "spacing"),
        (lambda: svls_kernel(2, spacing=(1.0, -1.0)), "spacing"),
        (lambda: svls_kernel(3, sigma=0.01), "too small"),  # exp(-5000): the neighbours underflow
        (lambda: SVLSLoss(kernel_size=2), "kernel_size"),
        (lambda: SVLSLoss(softmax=True, sigmoid=True), "exactly one"),
        (lambda: SVLSLoss(reduction="max"), "reduction"),
        (lambda: MarginLoss(margin=-1.0), "margin"),
        (lambda: MarginLoss(alpha=float("inf")), "alpha"),
        (lambda: L1ACELoss("medium"), "binning"),
        (lambda: L1ACELoss(num_bins=0), "num_bins"),
        (lambda: L1ACELoss(empty_weight=-0.1), "empty_weight"),
        (lambda: DiceCEMarginLoss(softmax=False), "softmax"),
        (lambda: DiceCEL1ACELoss(ace_weight=-1.0), "ace_weight"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_inputs_name_the_argument():
    loss = SVLSLoss(to_onehot_y=True)
    z = torch.randn(1, 3, 4, 4)
    with pytest.raises(TypeError, match="logits"):
        loss(np.zeros((1, 3, 4, 4)), torch.zeros(1, 1, 4, 4))
    with pytest.raises(TypeError, match="logits"):
        loss(torch.zeros(1, 3, 4, 4, dtype=torch.long), torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="logits"):
        loss(torch.zeros(1, 3), torch.zeros(1, 1))
    with pytest.raises(ValueError, match="finite"):
        loss(torch.full((1, 3, 4, 4), float("nan")), torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="label map"):
        loss(z, torch.zeros(1, 4, 4))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        loss(z, torch.full((1, 1, 4, 4), 3))
    with pytest.raises(ValueError, match="integer"):
        loss(z, torch.full((1, 1, 4, 4), 0.5))
    with pytest.raises(ValueError, match="one-hot"):
        SVLSLoss()(z, torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="spacing"):
        SVLSLoss(spacing=(1.0, 1.0, 2.0), to_onehot_y=True)(z, torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="target"):
        binned_calibration(torch.rand(1, 2, 3), torch.rand(1, 2, 4))
