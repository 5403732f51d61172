"""Review 66: the losses against independent numpy / scipy references of the authors' definitions.

Each reference below is written from the paper and the authors' public code (read, not copied) in numpy / scipy,
never with :mod:`monai_unc.losses`: SVLS (Islam, Glocker, IPMI 2021; github.com/mobarakol/SVLS), MbLS (Liu et al.,
CVPR 2022; github.com/by-liu/MbLS) and its segmentation version (Murugesan et al., MedIA 2023;
github.com/Bala93/MarginLoss), the hard and soft L1-ACE (Barfoot et al.; github.com/cai4cai/Average-Calibration-Losses),
and the two losses the package takes from MONAI as they are, NACL (github.com/Bala93/MarginLoss,
``AdaptMarginSVLS``) and the focal loss (Mukhoti et al., NeurIPS 2020, as in github.com/by-liu/MbLS), whose
differences from the authors' code docs/training.md states. A few values are frozen as literals (computed once by
these references), so that a change of the reference itself is caught too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monai.losses import FocalLoss, NACLLoss
from scipy import ndimage
from scipy.special import log_softmax, softmax

from monai_unc.losses import (
    DiceCEMarginLoss,
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

# ---------------------------------------------------------------- the references (numpy / scipy only)


def _onehot(labels: np.ndarray, classes: int) -> np.ndarray:
    """``(B, *S)`` integer labels as ``(B, C, *S)`` float64."""
    return np.moveaxis(np.eye(classes)[labels], -1, 1)


def _svls_kernel(dims: int, sigma: float, spacing=None, size: int = 3) -> np.ndarray:
    """The paper's kernel: a normalised Gaussian (its 1 / (2 pi sigma^2) factor cancels), the centre raised to the
    neighbours' mass, divided by that mass, and the smoothed labels divided by the kernel's sum (2)."""
    spacing = (1.0,) * dims if spacing is None else spacing
    axes = [(np.arange(size) - (size - 1) / 2) * s for s in spacing]
    sq = sum(a**2 for a in np.meshgrid(*axes, indexing="ij"))
    g = np.exp(-sq / (2 * sigma**2)) / (2 * np.pi * sigma**2)
    g = g / g.sum()
    centre = (size // 2,) * dims
    neighbours = 1.0 - g[centre]
    g[centre] = neighbours
    g = g / neighbours
    return g / g.sum()


def _svls_targets(onehot: np.ndarray, sigma: float, spacing=None, size: int = 3) -> np.ndarray:
    """Each channel correlated with the kernel, the border replicated (scipy's ``mode="nearest"``)."""
    kern = _svls_kernel(onehot.ndim - 2, sigma, spacing, size)
    out = np.empty_like(onehot)
    for b in range(onehot.shape[0]):
        for c in range(onehot.shape[1]):
            out[b, c] = ndimage.correlate(onehot[b, c], kern, mode="nearest")
    return out


def _svls_loss_and_grad(z: np.ndarray, onehot: np.ndarray, sigma: float, spacing=None):
    """``mean over voxels of -sum_c q_c log softmax(z)_c`` and its gradient ``(softmax(z) sum_c q_c - q) / N``."""
    q = _svls_targets(onehot, sigma, spacing)
    n = z.size // z.shape[1]
    loss = -(q * log_softmax(z, axis=1)).sum(1).mean()
    grad = (softmax(z, axis=1) * q.sum(1, keepdims=True) - q) / n
    return loss, grad


def _mbls_loss_and_grad(z: np.ndarray, labels: np.ndarray, margin: float, alpha: float):
    """``CE + alpha * mean over voxels and classes of max(0, max_j z_j - z_c - margin)`` and its gradient
    (unique maxima: the random logits have no ties)."""
    c = z.shape[1]
    n = labels.size
    y = _onehot(labels, c)
    logp = log_softmax(z, axis=1)
    ce = -(y * logp).sum(1).mean()
    top = z.max(1, keepdims=True)
    dist = top - z
    paying = dist > margin
    loss = ce + alpha * np.maximum(dist - margin, 0.0).mean()
    grad = (np.exp(logp) - y) / n - alpha * paying / (n * c)
    grad = grad + alpha * paying.sum(1, keepdims=True) * (z == top) / (n * c)
    return loss, grad


def _dice_without_background(z: np.ndarray, labels: np.ndarray, eps: float = 1e-5) -> float:
    """The segmentation MbLS's Dice: per image and foreground class ``1 - (2 |y p| + eps) / (|y| + |p| + eps)``."""
    p = softmax(z, axis=1)[:, 1:]
    y = _onehot(labels, z.shape[1])[:, 1:]
    axes = tuple(range(2, z.ndim))
    return float(np.mean(1 - (2 * (y * p).sum(axes) + eps) / (y.sum(axes) + p.sum(axes) + eps)))


def _ace(p: np.ndarray, y: np.ndarray, num_bins: int, soft: bool, empty_weight: float = 0.01) -> np.ndarray:
    """Per image and class: the mean over non-empty bins of |mean p - mean y|, 0 for a class absent from the image.

    Hard: bin ``k`` holds ``k / M < p <= (k + 1) / M`` (no value of the inputs lies on an edge). Soft: the membership
    of bin ``k`` is the triangle ``max(0, 1 - M |p - c_k|)`` around its centre ``c_k = (k + 1/2) / M``, all of it in
    the end bin below the first or above the last centre; a bin lighter than ``empty_weight`` is empty.
    """
    b, c = p.shape[:2]
    out = np.zeros((b, c))
    centres = (np.arange(num_bins) + 0.5) / num_bins
    for i in range(b):
        for j in range(c):
            pp, yy = p[i, j].ravel(), y[i, j].ravel()
            if soft:
                w = np.maximum(0.0, 1 - np.abs(pp[None] - centres[:, None]) * num_bins)
                w[0, pp <= centres[0]] = 1.0
                w[-1, pp >= centres[-1]] = 1.0
            else:
                k = np.clip(np.ceil(pp * num_bins) - 1, 0, num_bins - 1).astype(int)
                w = (k[None] == np.arange(num_bins)[:, None]).astype(float)
            total = w.sum(1)
            keep = total >= empty_weight if soft else total > 0
            gaps = np.abs((w @ pp)[keep] / total[keep] - (w @ yy)[keep] / total[keep])
            out[i, j] = gaps.mean() if yy.sum() > 0 else 0.0
    return out


def _random(shape, classes, seed, scale=3.0):
    rng = np.random.default_rng(seed)
    z = rng.normal(scale=scale, size=(shape[0], classes, *shape[1:]))
    labels = rng.integers(0, classes, size=shape)
    return z, labels


# ---------------------------------------------------------------- SVLS


@pytest.mark.parametrize(
    "shape,classes,sigma,spacing",
    [((2, 6, 5), 3, 1.0, None), ((2, 6, 5), 4, 1.5, (2.5, 1.0)), ((1, 4, 5, 3), 3, 1.0, None),
     ((2, 3, 4, 5), 2, 0.8, (1.0, 0.7, 3.0))],
    ids=["2d", "2d-anisotropic", "3d", "3d-anisotropic"],
)
def test_svls_loss_and_gradient_equal_the_papers_definition(shape, classes, sigma, spacing):
    z, labels = _random(shape, classes, seed=sum(shape) + classes)
    want, want_grad = _svls_loss_and_grad(z, _onehot(labels, classes), sigma, spacing)
    loss = SVLSLoss(sigma=sigma, spacing=spacing, to_onehot_y=True)
    zt = torch.tensor(z, requires_grad=True)
    got = loss(zt, torch.from_numpy(labels[:, None]))
    got.backward()
    assert got.item() == pytest.approx(want, rel=1e-12)
    np.testing.assert_allclose(zt.grad.numpy(), want_grad, rtol=1e-10, atol=1e-15)
    # one-hot and label map give the same loss
    onehot = torch.from_numpy(_onehot(labels, classes))
    assert float(SVLSLoss(sigma=sigma, spacing=spacing)(zt.detach(), onehot)) == pytest.approx(want, rel=1e-12)
    # the soft labels of both forms (direct convolution, one pass per axis) are the reference's
    q = _svls_targets(_onehot(labels, classes), sigma, spacing)
    dims = len(shape) - 1
    np.testing.assert_allclose(svls_targets_separable(onehot, 3, sigma, spacing).numpy(), q, atol=1e-14)
    kern = svls_kernel(dims, 3, sigma, spacing, dtype=torch.float64)
    np.testing.assert_allclose(svls_targets(onehot, kern).numpy(), q, atol=1e-14)


def test_svls_frozen_values_of_the_reference():
    """A fixed 2-D input: the reference and the loss give the numbers computed once by the reference."""
    z = np.array([[[[2.0, -1.0, 0.5], [0.0, 1.0, -2.0]], [[-1.0, 0.5, 1.5], [2.5, -0.5, 0.0]],
                   [[0.3, 0.2, -0.7], [-1.2, 0.8, 1.1]]]])  # (1, 3, 2, 3)
    labels = np.array([[[0, 1, 1], [2, 1, 0]]])
    frozen = {1.0: 1.672547441316593, 2.0: 1.667984943425188}
    for sigma, value in frozen.items():
        want, _ = _svls_loss_and_grad(z, _onehot(labels, 3), sigma)
        assert want == pytest.approx(value, rel=1e-12)
        got = SVLSLoss(sigma=sigma, to_onehot_y=True)(torch.from_numpy(z), torch.from_numpy(labels[:, None]))
        assert float(got) == pytest.approx(value, rel=1e-12)
    # a kernel value: 3-D, sigma 1, the face neighbour of the centre
    assert _svls_kernel(3, 1.0)[1, 1, 0] == pytest.approx(0.030823473546344904, rel=1e-12)
    assert float(svls_kernel(3, 3, 1.0, dtype=torch.float64)[1, 1, 0]) == pytest.approx(0.030823473546344904, rel=1e-12)


def test_svls_of_a_single_class_is_the_plain_cross_entropy():
    """A target of one class everywhere is not smoothed at all (the border replicated, the kernel sums to 1)."""
    z, _ = _random((2, 4, 3), 3, seed=5)
    labels = np.full((2, 4, 3), 2)
    want = -log_softmax(z, axis=1)[:, 2].mean()
    got = SVLSLoss(to_onehot_y=True, spacing=(1.0, 2.0))(torch.from_numpy(z), torch.from_numpy(labels[:, None]))
    assert float(got) == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------- MbLS


@pytest.mark.parametrize("shape,classes,margin", [((2, 5, 4), 4, 3.0), ((1, 3, 4, 2), 3, 2.0), ((3, 7), 5, 10.0)],
                         ids=["2d", "3d", "1d-wide"])
def test_margin_loss_and_gradient_equal_the_papers_definition(shape, classes, margin):
    z, labels = _random(shape, classes, seed=classes, scale=6.0)
    want, want_grad = _mbls_loss_and_grad(z, labels, margin, 0.1)
    for to_onehot in (True, False):
        zt = torch.tensor(z, requires_grad=True)
        target = torch.from_numpy(labels[:, None]) if to_onehot else torch.from_numpy(_onehot(labels, classes))
        got = MarginLoss(margin=margin, alpha=0.1, to_onehot_y=to_onehot)(zt, target)
        got.backward()
        assert got.item() == pytest.approx(want, rel=1e-12)
        np.testing.assert_allclose(zt.grad.numpy(), want_grad, rtol=1e-10, atol=1e-15)
    # the penalty alone: elementwise and its fused mean
    pen = np.maximum(z.max(1, keepdims=True) - z - margin, 0.0)
    np.testing.assert_allclose(margin_penalty(torch.from_numpy(z), margin).numpy(), pen, rtol=1e-14)
    assert float(mean_margin_penalty(torch.from_numpy(z), margin)) == pytest.approx(pen.mean(), rel=1e-12)


def test_segmentation_margin_loss_equals_the_papers_definition_and_frozen_values():
    z, labels = _random((2, 4, 5), 3, seed=11, scale=8.0)
    want = _mbls_loss_and_grad(z, labels, 5.0, 0.1)[0] + _dice_without_background(z, labels)
    got = DiceCEMarginLoss(margin=5.0, alpha=0.1, include_background=False, to_onehot_y=True, smooth_nr=1e-5,
                           smooth_dr=1e-5)(torch.from_numpy(z), torch.from_numpy(labels[:, None]))
    assert float(got) == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(5.636478504769392, rel=1e-12)  # frozen


def test_margin_penalty_of_a_single_class_present_only_counts_logit_distances():
    """The penalty does not look at the target: one class present or not, the same value."""
    z, _ = _random((2, 3, 3), 3, seed=2, scale=9.0)
    labels = np.zeros((2, 3, 3), dtype=np.int64)
    want = _mbls_loss_and_grad(z, labels, 4.0, 0.5)[0]
    got = MarginLoss(margin=4.0, alpha=0.5, to_onehot_y=True)(torch.from_numpy(z), torch.from_numpy(labels[:, None]))
    assert float(got) == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------- L1-ACE


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
@pytest.mark.parametrize("shape,classes,num_bins", [((2, 6, 5), 3, 20), ((1, 4, 3, 5), 4, 7)], ids=["2d", "3d"])
def test_l1_ace_equals_the_papers_definition(soft, shape, classes, num_bins):
    z, labels = _random(shape, classes, seed=num_bins + classes)
    labels[0][labels[0] == classes - 1] = 0  # a class absent from the first image: its ACE is 0
    p = softmax(z, axis=1)
    y = _onehot(labels, classes)
    want = _ace(p, y, num_bins, soft)
    binning = "soft" if soft else "hard"
    got = L1ACELoss(binning, num_bins=num_bins, to_onehot_y=True, reduction="none")(
        torch.from_numpy(z), torch.from_numpy(labels[:, None]))
    np.testing.assert_allclose(got.reshape(want.shape).numpy(), want, rtol=1e-12, atol=1e-15)
    assert want[0, classes - 1] == 0.0
    got_onehot = l1_average_calibration_error(torch.from_numpy(p), torch.from_numpy(y), num_bins, soft=soft)
    np.testing.assert_allclose(got_onehot.numpy(), want, rtol=1e-12, atol=1e-15)


def test_l1_ace_frozen_values_and_a_single_class_present():
    p = np.array([[[0.05, 0.33, 0.61, 0.98, 0.47, 0.72]]])
    y = np.array([[[0.0, 1.0, 1.0, 1.0, 0.0, 0.0]]])
    frozen = {False: 0.08375, True: 0.14109862517631622}  # 4 bins; hard: (0.05 + 0.1 + 0.165 + 0.02) / 4
    for soft, value in frozen.items():
        assert _ace(p, y, 4, soft)[0, 0] == pytest.approx(value, rel=1e-12)
        got = l1_average_calibration_error(torch.from_numpy(p), torch.from_numpy(y), 4, soft=soft)
        assert float(got) == pytest.approx(value, rel=1e-12)
    # one class everywhere: that class's ACE is |mean p - 1| per bin, the others 0 (absent)
    z, _ = _random((1, 3, 4), 3, seed=9)
    labels = np.ones((1, 3, 4), dtype=np.int64)
    want = _ace(softmax(z, axis=1), _onehot(labels, 3), 5, False)
    got = L1ACELoss(num_bins=5, to_onehot_y=True, reduction="none")(torch.from_numpy(z),
                                                                      torch.from_numpy(labels[:, None]))
    np.testing.assert_allclose(got.reshape(1, 3).numpy(), want, rtol=1e-12)
    assert want[0, 0] == want[0, 2] == 0.0 and want[0, 1] > 0


# ---------------------------------------------------------------- gradients (float64 gradcheck, tiny inputs)


@pytest.mark.parametrize("make", [lambda: SVLSLoss(to_onehot_y=True, spacing=(1.0, 2.0)),
                                  lambda: MarginLoss(margin=1.0, to_onehot_y=True),
                                  lambda: L1ACELoss("soft", num_bins=4, to_onehot_y=True)],
                         ids=["svls-anisotropic", "mbls", "soft-ace"])
def test_gradcheck_float64_on_a_tiny_2d_input(make):
    z, labels = _random((1, 3, 2), 3, seed=4)
    zt = torch.tensor(z, requires_grad=True)
    target = torch.from_numpy(labels[:, None])
    loss = make()
    assert torch.autograd.gradcheck(lambda x: loss(x, target), (zt,), eps=1e-6, atol=1e-7)


# ---------------------------------------------------------------- MONAI's NACL and focal loss (docs/training.md)


def _nacl_authors_targets(labels: np.ndarray, classes: int, size: int = 3) -> np.ndarray:
    """The authors' neighbourhood proportions: the 2-D label map zero-padded (the padding counts as class 0),
    the share of each class in the ``size x size`` window."""
    half = size // 2
    padded = np.pad(labels, [(0, 0), (half, half), (half, half)], constant_values=0)
    out = np.zeros((labels.shape[0], classes, *labels.shape[1:]))
    for c in range(classes):
        out[:, c] = ndimage.uniform_filter((padded == c).astype(float), size=(1, size, size),
                                           mode="constant")[:, half:-half, half:-half]
    return out


def test_monai_nacl_zero_pads_the_one_hot_where_the_authors_count_the_padding_as_background():
    """As docs/training.md states: equal inside; at the border MONAI's proportions miss the padded share."""
    _, labels = _random((2, 5, 6), 3, seed=3)
    ours = NACLLoss(classes=3, dim=2).get_constr_target(torch.from_numpy(labels)).numpy()
    authors = _nacl_authors_targets(labels, 3)
    np.testing.assert_allclose(ours[:, :, 1:-1, 1:-1], authors[:, :, 1:-1, 1:-1], atol=1e-6)
    np.testing.assert_allclose(ours[:, 1:], authors[:, 1:], atol=1e-6)  # foreground classes: the same everywhere
    padded_share = 1.0 - ours.sum(1)  # 3/9 on an edge, 5/9 in a corner, 0 inside
    np.testing.assert_allclose(authors[:, 0] - ours[:, 0], padded_share, atol=1e-6)
    assert padded_share[0, 0, 0] == pytest.approx(5 / 9) and padded_share[0, 0, 2] == pytest.approx(3 / 9)


def test_monai_focal_loss_mean_is_the_authors_softmax_focal_loss_over_the_classes():
    """MONAI's mean runs over the classes too: ``use_softmax=True`` gives the authors' value divided by C."""
    z, labels = _random((2, 4, 3), 4, seed=8)
    logpt = np.take_along_axis(log_softmax(z, axis=1), labels[:, None], axis=1)
    authors = float(np.mean(-((1 - np.exp(logpt)) ** 3) * logpt))  # gamma 3, mean over voxels
    monai = FocalLoss(to_onehot_y=True, use_softmax=True, gamma=3.0)(torch.from_numpy(z),
                                                                      torch.from_numpy(labels[:, None]))
    assert float(monai) * 4 == pytest.approx(authors, rel=1e-6)  # MONAI computes in float32


# ---------------------------------------------------------------- empty inputs of the functions (review 66)


EMPTY = [(0, 3, 4, 4), (2, 3, 0, 4), (2, 0, 4, 4)]


@pytest.mark.parametrize("shape", EMPTY, ids=["no-image", "no-voxel", "no-channel"])
@pytest.mark.parametrize(
    "call,name",
    [(lambda x: margin_penalty(x, 1.0), "logits"),
     (lambda x: mean_margin_penalty(x, 1.0), "logits"),
     (lambda x: svls_targets_separable(x), "onehot"),
     (lambda x: svls_targets(x, svls_kernel(2)), "onehot"),
     (lambda x: binned_calibration(x, x), "probs"),
     (lambda x: l1_average_calibration_error(x, x), "probs")],
    ids=["margin_penalty", "mean_margin_penalty", "svls_targets_separable", "svls_targets", "binned_calibration",
         "l1_average_calibration_error"],
)
def test_functions_refuse_an_empty_input_naming_it(shape, call, name):
    """Found by review 66: an IndexError or a torch RuntimeError, or a silent NaN (a mean over no voxel) or a
    misleading "the logits have one channel"; the loss classes already refused empty logits."""
    with pytest.raises(ValueError, match=f"^{name} must not be empty"):
        call(torch.zeros(shape))
