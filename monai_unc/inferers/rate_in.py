"""Rate-In: information-driven adaptive dropout rates at inference (Zeevi et al., CVPR 2025).

Monte-Carlo dropout with one fixed rate everywhere ignores that feature maps differ in how much of their
information a given rate destroys. Rate-In inserts (or converts) dropout in a trained network and, for every
input, tunes each dropout layer's rate with a feedback loop until the *information loss* between the layer's
input and its dropped-out output matches a target: rates rise where features are redundant and fall where
every unit matters. No labels and no retraining are needed. Zeevi et al. (spatially-aware evaluation of
segmentation uncertainty, Sec. 4.2) uses Rate-In maps as its "high quality" uncertainty maps.

Pieces (functional core first):

- information-loss functions on a pair ``(pre, post)`` of feature maps ``(B, C, *spatial)``, each returning one
  value in ``[0, 1]`` per batch element: :func:`relative_mse_loss`, :func:`ssim_loss` (structural, 2D/3D,
  MONAI's SSIM), :func:`mutual_information_loss` (Gaussian or binned estimate). ``post`` is the masked map
  *without* the ``1 / (1 - p)`` rescaling of inverted dropout: a gain carries no information;
- :func:`search_dropout_rate`: the controller ``p <- clip(p - lr * err / (1 + |err|), p_min, p_max)`` with
  ``err = loss(p) - target`` averaged over ``draws`` fresh dropout masks, ``lr`` multiplied by ``lr_decay``
  after each step, stopping when ``|err| < tol`` or after ``max_iter`` iterations; vectorised over the batch
  (one rate per input);
- :class:`RateInDropout`: a dropout module with modes ``"adapt"`` (search on the current input, then apply the
  representative draw of its last iteration) and ``"fixed"`` (reuse the last rates with fresh masks);
  :class:`RateInHook` attaches one post hoc as a forward hook (``state_dict`` unchanged, like
  :func:`~monai_unc.inferers.dropout.add_dropout`);
  :func:`add_rate_in`, :func:`convert_dropout_to_rate_in`, :func:`remove_rate_in`, :func:`find_rate_in_layers`;
- :class:`RateInSource` / :class:`RateInInferer`: for each input (each sliding window) one search pass runs the
  network with every layer in ``"adapt"`` mode, so the layers are tuned one after the other in network order
  and deeper layers see the dropout of earlier ones; then ``num_samples`` passes in ``"fixed"`` mode stream into
  :class:`~monai_unc.stats.SampleStats`. The rates are returned in ``out.extras["rate_in_rates"]``.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .._utils import (
    ArrayLike,
    check_bool,
    check_finite,
    is_compiled,
    is_int,
    like_input,
    plain_module,
    recompile_after_hooks,
    to_tensor,
)
from ..keys import DEFAULT_RATEIN_TARGET, RATEIN_LOSS_NAMES, MIMeaning
from ..networks.dropout import default_channelwise, fast_path_layers
from ..networks.ssn import no_autocast
from .dropout import DropoutHook, find_dropout_layers, resolve_dropout_sites
from .sampling import Predictor, SampleSource, UncertaintyInferer

__all__ = [
    "LOSS_NAMES",
    "relative_mse_loss",
    "ssim_loss",
    "mutual_information_loss",
    "get_information_loss",
    "RateSearchResult",
    "search_dropout_rate",
    "RateInDropout",
    "RateInHook",
    "add_rate_in",
    "convert_dropout_to_rate_in",
    "remove_rate_in",
    "release_kept_layers",
    "find_rate_in_layers",
    "RateInSource",
    "RateInInferer",
]

LossFn = Callable[[torch.Tensor, torch.Tensor], Any]

# controller defaults (docs/rate_in.md; with the default loss the search pass costs ~1.3 forward passes)
DEFAULT_TARGET = DEFAULT_RATEIN_TARGET
DEFAULT_LR = 1.0
DEFAULT_LR_DECAY = 0.9
DEFAULT_TOL = 0.01
DEFAULT_MAX_ITER = 15
DEFAULT_DRAWS = 4
DEFAULT_P_MAX = 0.9


# ============================================================================================ losses
def _pair(pre: Any, post: Any) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = to_tensor(pre, "pre"), to_tensor(post, "post")
    if a.shape != b.shape:
        raise ValueError(f"pre and post must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.ndim < 2:
        raise ValueError(f"pre must be a batch of feature maps (B, C, *spatial), got shape {tuple(a.shape)}")
    if a.numel() == 0:
        raise ValueError(f"pre is empty (shape {tuple(a.shape)})")
    if not a.is_floating_point() or not b.is_floating_point():
        raise TypeError(f"pre and post must be floating point feature maps, got {a.dtype} and {b.dtype}")
    check_finite(a, "pre")
    check_finite(b, "post")
    return a, b


def _finish(loss: torch.Tensor, reference: Any, what: str) -> ArrayLike:
    bad = torch.isnan(loss)
    if bool(bad.any()):
        warnings.warn(
            f"{what}: information loss undefined for {int(bad.sum())} of {loss.numel()} input(s) ({_WHY[what]}); "
            "returning NaN there",
            UserWarning,
            stacklevel=3,
        )
    return like_input(loss, reference)


_WHY = {
    "relative_mse_loss": "the feature map is all zero",
    "ssim_loss": "no spatial window, or the feature map is constant in every channel, e.g. all zero",
    "mutual_information_loss": "the feature map is constant",
}


def _relative_mse(pre: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    a = pre.reshape(pre.shape[0], -1).double()
    b = post.reshape(post.shape[0], -1).double()
    energy = (a * a).sum(1)
    lost = ((a - b) ** 2).sum(1)
    return torch.where(energy > 0, lost / energy.clamp_min(torch.finfo(torch.float64).tiny), torch.nan)


def relative_mse_loss(pre: ArrayLike, post: ArrayLike) -> ArrayLike:
    """Relative mean squared error ``sum (pre - post)^2 / sum pre^2`` per batch element.

    With dropout its expectation equals the rate for element-wise and channel-wise masks alike, whatever the
    content, so it is the content-blind baseline among the Rate-In losses (Zeevi et al. 2025 list MSE among
    their losses).

    Args:
        pre: feature map before dropout, ``(B, C, *spatial)`` (or ``(B, C)``), numpy or torch.
        post: the same map after dropout.

    Returns:
        ``(B,)`` values, in ``[0, 1]`` when ``post`` is a masked copy of ``pre``: the fraction of the feature energy
        removed. NaN with a ``UserWarning`` where ``pre`` is all zero (nothing to lose).

    Example:
        >>> from monai_unc.inferers import relative_mse_loss
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> pre = torch.randn(2, 8, 6, 6, 6)  # a feature map: 2 inputs, 8 channels
        >>> keep = (torch.rand(2, 8, 1, 1, 1) > 0.25).float()  # drop some of the channels
        >>> post = pre * keep
        >>> relative_mse_loss(pre, post).round(decimals=3)
        tensor([0.3560, 0.4840], dtype=torch.float64)
        >>> 1 - keep.mean(dim=(1, 2, 3, 4))  # the fraction of channels dropped
        tensor([0.3750, 0.5000])
    """
    a, b = _pair(pre, post)
    return _finish(_relative_mse(a, b), pre, "relative_mse_loss")


def _ssim_window(spatial: Sequence[int], kernel_size: int) -> list[int] | None:
    out = []
    for s in spatial:
        k = min(kernel_size, s)
        k = k if k % 2 == 1 else k - 1
        if k < 1:
            return None
        out.append(k)
    return out


def _ssim(
    pre: torch.Tensor, post: torch.Tensor, kernel_size: int, kernel_sigma: float, kernel_type: str
) -> torch.Tensor:
    from monai.metrics.regression import compute_ssim_and_cs

    nsp = pre.ndim - 2
    ks = _ssim_window(pre.shape[2:], kernel_size)
    if ks is None:
        return torch.full((pre.shape[0],), torch.nan, dtype=torch.float64, device=pre.device)
    # each channel scaled to [0, 1] by the range of pre (the same affine map for post), so data_range = 1
    a = pre.float()
    flat = a.reshape(a.shape[0], a.shape[1], -1)
    lo = flat.amin(-1).view(*a.shape[:2], *([1] * nsp))
    rng = (flat.amax(-1).view_as(lo) - lo).clamp_min(1e-12)
    an, bn = (a - lo) / rng, (post.float() - lo) / rng
    # float32 convolutions even inside torch.autocast (the Rate-In search runs inside the network's forward): local
    # variances E[x^2] - E[x]^2 in half precision would cancel and move the searched rates
    with no_autocast(a.device):
        ssim_map, _ = compute_ssim_and_cs(
            bn, an, spatial_dims=nsp, kernel_size=ks, kernel_sigma=[kernel_sigma] * nsp, data_range=1.0,
            kernel_type=kernel_type,
        )
    # a channel constant in pre has no structure, and its SSIM came only from the constants c1, c2 and the clamped
    # range: 1 (no loss) for an all-zero channel whatever the mask, about 0 (total loss) for a non-zero constant as
    # soon as one element of a window is dropped (the difference divided by 1e-12). Such channels are left out of the
    # average: one constant channel of 8 (at 5 or at 1e-3) set an element-wise loss of at least 1/8 at any rate and
    # drove the searched rate from 0.17 to 0.005, and all-zero channels diluted the loss and raised the rate. The
    # MSE and mutual-information losses give such channels no weight either. A map constant in every channel (all
    # zero: a dead layer) has no structure at all: undefined (NaN), like the other losses on such maps
    live = (flat.amax(-1) != flat.amin(-1)).to(torch.float64)  # (B, C)
    per_channel = ssim_map.reshape(*ssim_map.shape[:2], -1).double().mean(-1)
    count = live.sum(1)
    ssim = (per_channel * live).sum(1) / count.clamp_min(1.0)
    return torch.where(count > 0, (1.0 - ssim).clamp(0.0, 1.0), torch.nan)


def ssim_loss(
    pre: ArrayLike, post: ArrayLike, kernel_size: int = 7, kernel_sigma: float = 1.5, kernel_type: str = "gaussian"
) -> ArrayLike:
    """Structural information loss ``1 - SSIM(pre, post)`` per batch element, clipped to ``[0, 1]``.

    Each channel is scaled to ``[0, 1]`` by the range of its ``pre`` map (the same affine map is applied to
    ``post``), SSIM (Wang et al. 2004; constants k1 = 0.01, k2 = 0.03, population covariances, as
    ``skimage.metrics.structural_similarity(use_sample_covariance=False)``) is computed with MONAI's
    ``compute_ssim_and_cs`` over valid windows of ``kernel_size`` voxels per axis (shrunk to the map where it is
    smaller; Gaussian of ``kernel_sigma`` voxels or uniform) and averaged over channels and windows. Zeevi et al.
    2025 use SSIM for image-like feature maps. Cost: five depthwise n-D convolutions per call (a full n-D window is
    faster than separable passes with oneDNN on CPU, measured), the slowest loss. The convolutions run in float32
    also inside ``torch.autocast``.

    Args:
        pre: feature map before dropout, ``(B, C, H, W)`` or ``(B, C, H, W, D)``.
        post: the same map after dropout.
        kernel_size: SSIM window in voxels per axis, odd (as scikit-image's ``win_size``).
        kernel_sigma: standard deviation of the Gaussian window in voxels.
        kernel_type: ``"gaussian"`` or ``"uniform"``.

    Returns:
        ``(B,)`` losses in ``[0, 1]``. NaN with a ``UserWarning`` where ``pre`` is constant in every channel (e.g. all
        zero): SSIM measures structure and such a map has none (SSIM of two equal constant maps is 1 through its
        constants, a loss of 0 at every rate, which would drive Rate-In's search to ``p_max``), and where the map has
        no spatial window. Channels constant in ``pre`` beside others that are not are left out of the average (their
        SSIM depends only on the constants and the scaling: 1 for an all-zero channel, about 0 under element-wise
        dropout for a non-zero constant), as the MSE and mutual-information losses give them no weight.

    Example:
        >>> from monai_unc.inferers import ssim_loss
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> pre = torch.randn(2, 8, 6, 6, 6)  # a feature map: 2 inputs, 8 channels
        >>> keep = (torch.rand(2, 8, 1, 1, 1) > 0.25).float()  # drop some of the channels
        >>> post = pre * keep
        >>> ssim_loss(pre, post, kernel_size=3).round(decimals=3)
        tensor([0.3630, 0.4870], dtype=torch.float64)
    """
    a, b = _pair(pre, post)
    if a.ndim not in (4, 5):
        raise ValueError(f"ssim_loss needs 2D or 3D feature maps (B, C, H, W[, D]), got shape {tuple(a.shape)}")
    if kernel_type not in ("gaussian", "uniform"):
        raise ValueError(f"kernel_type must be 'gaussian' or 'uniform', got {kernel_type!r}")
    # a numpy integer is an integer (found by hostile testing, as for bins, draws, max_iter and num_samples)
    if not is_int(kernel_size) or kernel_size < 1 or kernel_size % 2 == 0:
        # found by hostile testing: kernel_size=4 was used as 3 without a word (a window needs a centre voxel)
        raise ValueError(f"kernel_size must be a positive odd integer, got {kernel_size!r}")
    _check_positive_finite(kernel_sigma, "kernel_sigma")
    return _finish(_ssim(a, b, int(kernel_size), kernel_sigma, kernel_type), pre, "ssim_loss")


def _logdet_spd(m: torch.Tensor) -> torch.Tensor:
    chol, info = torch.linalg.cholesky_ex(m)
    out = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    if bool((info > 0).any()):  # numerically indefinite: fall back to eigenvalues clipped at the ridge
        ev = torch.linalg.eigvalsh(m).clamp_min(torch.finfo(m.dtype).tiny)
        out = torch.where(info > 0, torch.log(ev).sum(-1), out)
    return out


def _ridge_and_self_information(sxx: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ridge ``r = eps * mean variance`` (B,), ``I(pre; pre)`` (B,) and whether the map carries information."""
    c = sxx.shape[-1]
    scale = torch.diagonal(sxx, dim1=-2, dim2=-1).sum(-1) / c
    ok = scale > 0
    ridge = eps * torch.where(ok, scale, torch.ones_like(scale))
    lam = torch.linalg.eigvalsh(sxx).clamp_min(0.0)
    r = ridge.unsqueeze(-1)
    mi_self = 0.5 * (2 * torch.log(lam + r) - torch.log(r) - torch.log(2 * lam + r)).sum(-1)
    return ridge, mi_self, ok & (mi_self > 0)


def _gaussian_mi_from_cov(cov: torch.Tensor, c: int, eps: float) -> torch.Tensor:
    """Relative Gaussian information loss from the joint covariance ``(B, 2C, 2C)`` of ``(pre, post)``."""
    sxx, syy = cov[:, :c, :c], cov[:, c:, c:]
    with _small_linalg(cov.device):
        ridge, mi_self, ok = _ridge_and_self_information(sxx, eps)
        r = ridge.view(-1, 1, 1)
        eye_c = torch.eye(c, dtype=cov.dtype, device=cov.device)
        eye_2c = torch.eye(2 * c, dtype=cov.dtype, device=cov.device)
        mi = 0.5 * (_logdet_spd(sxx + r * eye_c) + _logdet_spd(syy + r * eye_c) - _logdet_spd(cov + r * eye_2c))
    loss = (1.0 - mi / mi_self.clamp_min(1e-300)).clamp(0.0, 1.0)
    return torch.where(ok, loss, torch.nan)


class _ChannelMaskGaussianMI:
    """Gaussian information loss of channel masks on one feature map, from its covariance alone.

    For a 0/1 channel mask ``d`` (kept set K) the joint covariance of ``(x, d * x)`` is ``[[S, S D], [D S, D S D]]``;
    with the ridge ``r`` the dropped channels decouple and the Schur complement gives
    ``I = 1/2 [log det(S + rI) - log det(S + rI - S D Q^-1 D S)]`` with ``Q = D S D + rI`` (``S_KK + rI`` on the kept
    channels, ``r`` elsewhere). So after one pass over the voxels (``S``) a mask costs two ``C x C`` Cholesky
    factorisations; the value equals :func:`mutual_information_loss` on ``(x, d * x)``.
    """

    def __init__(self, sxx: torch.Tensor, eps: float = 1e-3) -> None:
        self.c = sxx.shape[1]
        self.sxx = sxx
        self.ridge, self.mi_self, self.ok = _ridge_and_self_information(self.sxx, eps)
        self.eye = torch.eye(self.c, dtype=self.sxx.dtype, device=self.sxx.device)
        self.a = self.sxx + self.ridge.view(-1, 1, 1) * self.eye
        self.logdet_a = _logdet_spd(self.a)

    def __call__(self, idx: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """``idx`` (n,) batch rows, ``keep`` (draws, n, C) 0/1 masks -> mean loss over draws (n,)."""
        return self.per_draw(idx, keep).mean(0)

    def per_draw(self, idx: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """``idx`` (n,) batch rows, ``keep`` (draws, n, C) 0/1 masks -> the loss of every mask (draws, n)."""
        draws, n, c = keep.shape
        d = keep.to(self.sxx.dtype).reshape(draws * n, c)
        s = self.sxx[idx].repeat(draws, 1, 1)
        r = self.ridge[idx].repeat(draws).view(-1, 1, 1)
        sd = s * d.unsqueeze(1)  # S D
        q = sd * d.unsqueeze(2) + r * self.eye  # D S D + rI
        chol, _ = torch.linalg.cholesky_ex(q)
        cond = self.a[idx].repeat(draws, 1, 1) - sd @ torch.cholesky_solve(sd.transpose(1, 2), chol)
        cond = 0.5 * (cond + cond.transpose(1, 2))
        mi = 0.5 * (self.logdet_a[idx].repeat(draws) - _logdet_spd(cond))
        loss = (1.0 - mi / self.mi_self[idx].repeat(draws).clamp_min(1e-300)).clamp(0.0, 1.0)
        loss = torch.where(self.ok[idx].repeat(draws), loss, torch.nan)
        return loss.view(draws, n)


def _covariance(pre: torch.Tensor, post: torch.Tensor | None = None) -> torch.Tensor:
    """Covariance over voxels (float64) of the channels of ``pre`` (and ``post`` stacked after them)."""
    b, c = pre.shape[:2]
    z = pre.reshape(b, c, -1)
    if post is not None:
        z = torch.cat([z, post.reshape(b, c, -1)], dim=1)
    z = z.double()
    z = z - z.mean(-1, keepdim=True)
    return z @ z.transpose(1, 2) / z.shape[-1]


def _gaussian_mi(pre: torch.Tensor, post: torch.Tensor, eps: float) -> torch.Tensor:
    return _gaussian_mi_from_cov(_covariance(pre, post), pre.shape[1], eps)


def _joint_from_channel_mask(sxx: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Joint covariance of ``(x, d * x)`` for a 0/1 channel mask ``d`` ``(B, C)``: exact, no pass over voxels."""
    d = keep.to(sxx.dtype)
    sxy = sxx * d.unsqueeze(1)
    syy = sxy * d.unsqueeze(2)
    return torch.cat([torch.cat([sxx, sxy], 2), torch.cat([sxy.transpose(1, 2), syy], 2)], 1)


def _binned_mi(pre: torch.Tensor, post: torch.Tensor, bins: int) -> torch.Tensor:
    b = pre.shape[0]
    a = pre.reshape(b, -1).double()
    y = post.reshape(b, -1).double()
    # the bins span the range of pre; a value of post outside it (the erased zeros of a map whose range excludes 0)
    # gets a bin of its own below or above it. Found by hostile testing: the bins spanned the range of pre and 0, so a
    # map 5 + 0.05 u fell into one bin (loss NaN, "the feature map is constant", the rate stuck at p_init) and a map in
    # [5, 6] used 11 of the 64 bins
    lo = a.amin(1, keepdim=True)
    hi = a.amax(1, keepdim=True)
    width = (hi - lo).clamp_min(torch.finfo(torch.float64).tiny)

    def label(v: torch.Tensor) -> torch.Tensor:
        return ((v - lo) / width * bins).floor().clamp(0, bins - 1).long()

    ny = bins + 2
    label_y = torch.where(y < lo, bins, torch.where(y > hi, bins + 1, label(y)))
    offset = torch.arange(b, device=a.device).unsqueeze(1) * (bins * ny)
    joint = torch.bincount((offset + label(a) * ny + label_y).reshape(-1), minlength=b * bins * ny)
    joint = joint.reshape(b, bins, ny).double() / a.shape[1]
    px, py = joint.sum(2), joint.sum(1)

    def plogp(p: torch.Tensor) -> torch.Tensor:
        return torch.where(p > 0, p * torch.log(p.clamp_min(1e-300)), torch.zeros_like(p))

    h_x = -plogp(px).sum(1)
    mi = plogp(joint).sum((1, 2)) - plogp(px).sum(1) - plogp(py).sum(1)
    loss = (1.0 - mi / h_x.clamp_min(1e-300)).clamp(0.0, 1.0)
    return torch.where(h_x > 0, loss, torch.nan)


def mutual_information_loss(
    pre: ArrayLike, post: ArrayLike, estimator: str = "gaussian", eps: float = 1e-3, bins: int = 64
) -> ArrayLike:
    """Relative information loss ``1 - I(pre; post) / I(pre; pre)`` per batch element, in ``[0, 1]``.

    The voxels of one batch element are the samples.

    - ``estimator="gaussian"`` (default): the channel vectors are treated as jointly Gaussian with the empirical
      ``2C x 2C`` covariance of ``(pre, post)``, regularised by ``eps`` times the mean variance of ``pre``
      (equivalently, both maps observed through independent noise of that variance), and
      ``I = 1/2 [log det S_pp + log det S_qq - log det S_joint]``. ``I(pre; pre) = 1/2 sum_i log((l_i + r)^2 /
      (r (2 l_i + r)))`` over the eigenvalues ``l_i`` of ``S_pp`` with ridge ``r``. Because it looks at all
      channels at once it sees redundancy: with independent channels the loss is the fraction of channels a
      channel-wise mask drops; a channel whose copy survives costs almost nothing. Cost: one ``2C x 2C``
      covariance (float64) per call.
    - ``estimator="binned"``: plug-in mutual information of the element values of ``pre`` and ``post`` binned on
      ``bins`` equal-width bins over the range of ``pre`` (values of ``post`` below or above it, such as the erased
      zeros of a map whose range excludes 0, in one more bin each), divided by the binned entropy of ``pre``.

    Zeevi et al. 2025 measure the loss by mutual information between the feature maps before and after dropout.

    Args:
        pre: feature map before dropout, ``(B, C, *spatial)``.
        post: the same map after dropout.
        estimator: ``"gaussian"`` or ``"binned"``.
        eps: ridge of the Gaussian estimate, relative to the mean variance of ``pre``.
        bins: bins of the binned estimate.

    Returns:
        ``(B,)`` losses; NaN with a ``UserWarning`` where ``pre`` is constant (no information to lose).

    Example:
        >>> from monai_unc.inferers import mutual_information_loss
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> pre = torch.randn(2, 8, 6, 6, 6)  # a feature map: 2 inputs, 8 channels
        >>> keep = (torch.rand(2, 8, 1, 1, 1) > 0.25).float()  # drop some of the channels
        >>> post = pre * keep
        >>> mutual_information_loss(pre, post).round(decimals=3)
        tensor([0.3710, 0.4960], dtype=torch.float64)
        >>> mutual_information_loss(pre, post, estimator="binned").round(decimals=3)
        tensor([0.3910, 0.5170], dtype=torch.float64)
    """
    a, b = _pair(pre, post)
    if estimator == "gaussian":
        _check_positive_finite(eps, "eps")
        _check_voxels(a, "pre")
        loss = _gaussian_mi(a, b, float(eps))
    elif estimator == "binned":
        if not is_int(bins) or bins < 2:
            raise ValueError(f"bins must be an integer >= 2, got {bins!r}")
        loss = _binned_mi(a, b, int(bins))
    else:
        raise ValueError(f"estimator must be 'gaussian' or 'binned', got {estimator!r}")
    return _finish(loss, pre, "mutual_information_loss")


def _check_positive_finite(value: Any, name: str) -> None:
    """``TypeError`` / ``ValueError`` naming ``name`` unless ``value`` is a positive finite real number.

    Found by hostile testing: ``eps=True`` was read as 1, ``eps=inf`` failed in LAPACK, ``kernel_sigma="1.5"`` with
    "'>' not supported between 'str' and 'int'".
    """
    _check_real(value, name)
    if not 0 < float(value) < float("inf"):
        raise ValueError(f"{name} must be positive and finite, got {value}")


def _check_voxels(x: torch.Tensor, name: str) -> None:
    """The Gaussian estimate takes the voxels of a map as its samples: it needs at least two."""
    if x.ndim < 3 or x[0, 0].numel() < 2:
        raise ValueError(
            f"the Gaussian mutual information estimates a covariance over the voxels of each map, and {name} of shape "
            f"{tuple(x.shape)} has fewer than 2 voxels per map; use the binned estimate (\"mi\" does on such maps)"
        )


# unvalidated torch versions used inside the search loop (pre is checked once per search)
_FAST_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "mi_gaussian": functools.partial(_gaussian_mi, eps=1e-3),
    "mi_binned": functools.partial(_binned_mi, bins=64),
    "ssim": functools.partial(_ssim, kernel_size=7, kernel_sigma=1.5, kernel_type="gaussian"),
    "mse": _relative_mse,
}
_GAUSSIAN_EPS = 1e-3
#: loss names accepted by the Rate-In layers and inferer
LOSS_NAMES = RATEIN_LOSS_NAMES


def _resolve_name(loss: str, channelwise: bool) -> str:
    if loss == "mi":
        # the Gaussian estimate sees cross-channel redundancy but treats element-wise erasures as heavy noise
        # (its loss then far exceeds the erased fraction); the binned estimate handles erasures
        return "mi_gaussian" if channelwise else "mi_binned"
    return loss


def get_information_loss(loss: str | LossFn, channelwise: bool = True) -> LossFn:
    """Resolve a loss name or pass a callable through.

    Names: ``"mi"`` (mutual information: the Gaussian estimate for channel-wise masks, the binned one for
    element-wise masks), ``"mi_gaussian"``, ``"mi_binned"``, ``"ssim"``, ``"mse"``.

    Args:
        loss: a name, or a callable taking ``(pre, post)`` torch tensors ``(B, C, *spatial)`` and returning a ``(B,)``
            tensor (or one float for every batch element) of information losses, larger = more information lost.
        channelwise: which estimator ``"mi"`` means.

    Returns:
        The loss function.

    Raises:
        ValueError: for an unknown name.

    Example:
        >>> import torch
        >>> from monai_unc.inferers import get_information_loss
        >>> x = torch.randn(1, 4, 8, 8)
        >>> get_information_loss("mse")(x, torch.zeros_like(x))  # everything lost
        tensor([1.], dtype=torch.float64)
    """
    if isinstance(loss, str):
        name = _resolve_name(loss, channelwise)
        if name not in _FAST_LOSSES:
            raise ValueError(f"loss must be one of {LOSS_NAMES} or a callable, got {loss!r}")
        return _FAST_LOSSES[name]
    if not callable(loss):
        raise TypeError(f"loss must be a name or a callable (pre, post) -> losses, got {type(loss).__name__}")
    return loss


# ============================================================================================ controller
@dataclass
class RateSearchResult:
    """Outcome of :func:`search_dropout_rate` for a batch of ``B`` inputs.

    Attributes:
        rates: ``(B,)`` float64 final rates.
        losses: ``(B,)`` information loss of the last iteration (the mean over its draws, at the final rate).
        iterations: ``(B,)`` number of loss evaluations.
        converged: ``(B,)`` whether ``|loss - target| < tol`` was reached.
        keep: the keep-mask, of the last iteration's draws, whose own loss is nearest ``losses`` (``(B, C, 1, ...)``
            channel-wise or ``x.shape`` element-wise, in ``x``'s dtype).

    Example:
        >>> import torch
        >>> from monai_unc.inferers import search_dropout_rate
        >>> _ = torch.manual_seed(0)
        >>> res = search_dropout_rate(torch.randn(2, 8, 6, 6, 6), "mse", target_loss=0.2)
        >>> res.keep.shape, res.converged
        (torch.Size([2, 8, 1, 1, 1]), tensor([True, True]))
    """

    rates: torch.Tensor
    losses: torch.Tensor
    iterations: torch.Tensor
    converged: torch.Tensor
    keep: torch.Tensor


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``n`` intra-op CPU threads (restored afterwards)."""
    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if before != n:
            torch.set_num_threads(before)


def _small_linalg(device: torch.device) -> contextlib.AbstractContextManager:
    """One CPU thread for factorisations of small (C x C) matrices.

    On CPU, LAPACK's threads only add synchronisation cost there (measured up to 100 ms per call on a busy 2-core
    machine).
    """
    return _torch_threads(1) if device.type == "cpu" else contextlib.nullcontext()


def _mask_shape(x: torch.Tensor, channelwise: bool) -> tuple[int, ...]:
    if channelwise and x.ndim >= 3:
        return (*x.shape[:2], *([1] * (x.ndim - 2)))
    return tuple(x.shape)


def _draw_keep(x: torch.Tensor, rates: torch.Tensor, channelwise: bool) -> torch.Tensor:
    shape = _mask_shape(x, channelwise)
    u = torch.rand(shape, device=x.device, dtype=torch.float32)
    keep_prob = (1.0 - rates).to(torch.float32).view(-1, *([1] * (len(shape) - 1)))
    return (u < keep_prob).to(x.dtype)


def _apply_keep(x: torch.Tensor, keep: torch.Tensor, rates: torch.Tensor) -> torch.Tensor:
    scale = (1.0 / (1.0 - rates)).to(x.dtype).view(-1, *([1] * (x.ndim - 1)))
    return x * keep * scale


def _losses(loss_fn: LossFn, pre: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    # the named losses are the unvalidated cores, which do not warn (an undefined loss is said once, by the search);
    # what a caller's own loss function warns reaches the caller
    out = loss_fn(pre, post)
    if isinstance(out, np.ndarray):
        out = torch.from_numpy(out)
    out = torch.as_tensor(out, dtype=torch.float64, device=pre.device).reshape(-1)
    if out.numel() == 1 and pre.shape[0] != 1:
        out = out.expand(pre.shape[0])
    if out.numel() != pre.shape[0]:
        raise ValueError(f"the information loss must return one value per batch element ({pre.shape[0]}), "
                         f"got {out.numel()}")
    return out


def _check_real(value: Any, name: str) -> None:
    """``TypeError`` unless ``value`` is a real number (``True`` / ``"0.1"`` are not rates or step sizes)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")


def _check_controller(
    target_loss: float, p_init: float, lr: float, lr_decay: float, tol: float, max_iter: int, p_min: float,
    p_max: float, p_name: str = "p_init",
) -> None:
    """Check the controller settings; ``p_name`` is what the caller calls the initial rate (``p`` for a layer)."""
    for name, value in (("target_loss", target_loss), (p_name, p_init), ("lr", lr), ("lr_decay", lr_decay),
                        ("tol", tol), ("p_min", p_min), ("p_max", p_max)):
        _check_real(value, name)
    if not 0.0 <= float(target_loss) <= 1.0:
        raise ValueError(f"target_loss must be in [0, 1], got {target_loss}")
    if not 0.0 <= float(p_min) <= float(p_max) < 1.0:
        raise ValueError(f"need 0 <= p_min <= p_max < 1, got p_min={p_min}, p_max={p_max}")
    if not float(p_min) <= float(p_init) <= float(p_max):
        raise ValueError(f"{p_name} must be in [p_min, p_max] = [{p_min}, {p_max}], got {p_init}")
    _check_positive_finite(lr, "lr")
    if not 0.0 < float(lr_decay) <= 1.0:
        raise ValueError(f"lr_decay must be in (0, 1], got {lr_decay}")
    _check_positive_finite(tol, "tol")
    if not is_int(max_iter) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")


def _check_layer_rate(p: Any, name: str) -> None:
    """A layer's initial rate ``p`` (called ``name`` by the caller) must be a real number above 0."""
    _check_real(p, name)
    if not float(p) > 0:
        raise ValueError(f"{name} (the initial rate) must be > 0, got {p}")


# how the warning of search_dropout_rate on a target it cannot reach begins after the caller's prefix
_UNREACHED_TARGET_WARNING = "target_loss="


def _unreached_target_message(
    losses: torch.Tensor, rates: torch.Tensor, target_loss: float, tol: float, p_min: float, p_max: float
) -> str | None:
    """Say which inputs ended with their rate pinned at a bound, short of ``target_loss``; ``None`` if none did.

    An input is pinned when its rate is ``p_max`` and its information loss is still below the target by ``tol`` or
    more (the controller would raise the rate further), or its rate is ``p_min`` and its loss is above the target by
    ``tol`` or more: no rate in ``[p_min, p_max]`` reaches the target, and the bound is the rate used. An input that
    merely ran out of iterations between the bounds is not pinned. NaN losses (undefined) are not counted here.

    Args:
        losses: ``(B,)`` information loss at the final rates.
        rates: ``(B,)`` final rates.
        target_loss: the target information loss.
        tol: the controller's tolerance.
        p_min: smallest rate.
        p_max: largest rate.

    Returns:
        One sentence beginning with ``_UNREACHED_TARGET_WARNING``, naming the bound used and the losses reached,
        or ``None``.
    """
    err = losses.double() - target_loss
    r = rates.double()
    high = (r >= p_max) & (err <= -tol)
    low = (r <= p_min) & (err >= tol)
    parts = []
    for pinned, bound, name, side in ((high, p_max, "p_max", "below"), (low, p_min, "p_min", "above")):
        if bool(pinned.any()):
            got = losses[pinned].double()
            parts.append(f"{int(pinned.sum())} at {name}={bound:g} with information loss {float(got.min()):.4g}"
                         + ("" if got.numel() == 1 else f" to {float(got.max()):.4g}") + f", {side} the target")
    if not parts:
        return None
    n = int(high.sum() + low.sum())
    return (f"{_UNREACHED_TARGET_WARNING}{target_loss:g} not reached for {n} of {losses.numel()} input(s) "
            f"(tol={tol:g}): {'; '.join(parts)}; the bound is the rate used (no rate in [p_min, p_max] reaches "
            "the target; see the search result's rates, losses and converged)")


def search_dropout_rate(
    x: torch.Tensor,
    loss: str | LossFn = "mi",
    target_loss: float = DEFAULT_TARGET,
    *,
    p_init: float = DEFAULT_TARGET,
    channelwise: bool = True,
    lr: float = DEFAULT_LR,
    lr_decay: float = DEFAULT_LR_DECAY,
    tol: float = DEFAULT_TOL,
    max_iter: int = DEFAULT_MAX_ITER,
    p_min: float = 0.0,
    p_max: float = DEFAULT_P_MAX,
    draws: int = DEFAULT_DRAWS,
    validate: bool = True,
) -> RateSearchResult:
    """Rate-In's feedback loop: find, per batch element, the dropout rate whose information loss is the target.

    Starting from ``p_init``, each iteration draws ``draws`` dropout masks at the current rates (channel-wise: whole
    channels, as ``Dropout2d/3d``; otherwise element-wise), measures the mean of ``loss(x, keep * x)`` over them and,
    where ``|err| = |loss - target_loss| >= tol``, updates ``p <- clip(p - lr * err / (1 + |err|), p_min, p_max)``
    (too much information lost lowers the rate) and ``lr <- lr * lr_decay``. An input stops at ``|err| < tol``,
    after ``max_iter`` iterations, or when its loss is undefined (NaN: constant map, or with ``validate=False`` a map
    holding NaN or inf, which is not searched; the rate stays where it is, ``p_init`` on a map undefined from the
    start, with a ``UserWarning``). A target that no rate in ``[p_min, p_max]`` reaches (e.g. ``target_loss=0.99``
    with ``p_max=0.9``) ends with the rate pinned at the bound and a ``UserWarning`` naming the bound and the loss
    reached. The last
    iteration is measured at the final rate; of its draws, the mask whose own loss is nearest their mean is returned
    (the last of equals), so that the caller applies dropout that removes what the rate typically removes. A single
    draw can be far from that: with few channels a channel mask sometimes drops all of them, and the layers after
    this one were then searched on a map that had lost everything.

    Zeevi, Shwartz-Ziv, LeCun, Staib, Onofrey: *Rate-In: Information-Driven Adaptive Dropout Rates for Improved
    Inference-Time Uncertainty Estimation*, CVPR 2025.

    With the Gaussian mutual information and channel-wise masks (the default ``"mi"``) the joint covariance of
    ``(x, keep * x)`` follows exactly from the covariance of ``x`` (computed once), so an iteration costs a few
    ``2C x 2C`` Cholesky factorisations and no pass over the voxels. Uses the global torch RNG (seed it for
    determinism).

    Args:
        x: feature map ``(B, C, *spatial)`` (the input of the dropout layer).
        loss: a loss name or callable (see :func:`get_information_loss`).
        target_loss: information loss to reach, in ``[0, 1]``.
        p_init: initial rate.
        channelwise: drop whole channels or single elements (always elements on a map without spatial axes,
            ``(B, C)``, or with one voxel, where ``"mi"`` then means the binned estimate).
        lr: controller step size (see :func:`search_dropout_rate`).
        lr_decay: factor applied to ``lr`` after every update.
        tol: stop when ``|loss - target_loss| < tol``.
        max_iter: most loss evaluations per input.
        p_min: smallest rate.
        p_max: largest rate.
        draws: dropout masks averaged per loss evaluation.
        validate: check ``x`` for NaN/inf first (``ValueError``); without it a non-finite map gives a NaN loss and
            keeps ``p_init``.

    Returns:
        :class:`RateSearchResult`.

    Example:
        >>> import torch
        >>> from monai_unc.inferers import search_dropout_rate
        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(2, 16, 6, 6, 6)
        >>> res = search_dropout_rate(x, "mse", target_loss=0.2)
        >>> res.rates.round(decimals=2), res.converged
        (tensor([0.1600, 0.2100], dtype=torch.float64), tensor([True, True]))
    """
    res = _search_core(x, loss, target_loss, p_init=p_init, channelwise=channelwise, lr=lr, lr_decay=lr_decay, tol=tol,
                       max_iter=max_iter, p_min=p_min, p_max=p_max, draws=draws, validate=validate)
    message = _unreached_target_message(res.losses, res.rates, float(target_loss), float(tol), float(p_min),
                                        float(p_max))
    if message is not None:
        warnings.warn(f"search_dropout_rate: {message}", UserWarning, stacklevel=2)
    _warn_undefined(res.losses, loss, p_init, stacklevel=3)
    return res


def _search_core(
    x: torch.Tensor, loss: str | LossFn, target_loss: float, *, p_init: float, channelwise: bool, lr: float,
    lr_decay: float, tol: float, max_iter: int, p_min: float, p_max: float, draws: int, validate: bool,
) -> RateSearchResult:
    """:func:`search_dropout_rate` without its warnings: its callers say what the result means, once, at their depth."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating point torch.Tensor (B, C, *spatial)")
    if x.ndim < 2 or x.numel() == 0:
        raise ValueError(f"x must be a non-empty feature map (B, C, *spatial), got shape {tuple(x.shape)}")
    _check_controller(target_loss, p_init, lr, lr_decay, tol, max_iter, p_min, p_max)
    if not is_int(draws) or draws < 1:
        raise ValueError(f"draws must be an integer >= 1, got {draws!r}")
    draws, max_iter = int(draws), int(max_iter)
    # a map without spatial axes ((B, C): a linear layer's output) gets element-wise masks whatever ``channelwise``
    # says (``_mask_shape``), and on one voxel per channel ((B, C, 1, 1)) a channel mask is an element mask; so "mi"
    # means the element-wise estimator there: the Gaussian one would estimate a covariance from one voxel per input
    # and return NaN, and the rate would never move from ``p_init``
    channelwise = check_bool(channelwise, "channelwise") and x.ndim >= 3 and x[0, 0].numel() >= 2
    if isinstance(loss, str) and loss == "ssim" and x.ndim not in (4, 5):
        raise ValueError(f"loss 'ssim' needs 2D or 3D feature maps x (B, C, H, W[, D]), got shape {tuple(x.shape)}; "
                         "use 'mi' or 'mse' on other maps")
    fn = get_information_loss(loss, channelwise)
    if isinstance(loss, str) and _resolve_name(loss, channelwise) == "mi_gaussian":
        _check_voxels(x, "x")
    if validate:
        check_finite(x, "x")
    if hasattr(x, "as_tensor"):
        x = x.as_tensor()
    b, c, dev = x.shape[0], x.shape[1], x.device
    # without ``validate``, an input whose map holds NaN or inf (an overflow inside the network) has an undefined loss
    # and keeps p_init; it never reaches the loss (found by hostile testing: the default "mi" failed with a LinAlgError
    # from the Gaussian estimate, the binned one with "bincount only supports non-negative inputs", for the whole
    # batch)
    finite = torch.isfinite(x.reshape(b, -1)).all(1)
    fast = None
    small_linalg: contextlib.AbstractContextManager = contextlib.nullcontext()
    if isinstance(loss, str) and _resolve_name(loss, channelwise) == "mi_gaussian" and channelwise:
        xf = x if bool(finite.all()) else torch.where(finite.view(-1, *([1] * (x.ndim - 1))), x, torch.zeros_like(x))
        sxx = _covariance(xf)  # the only pass over the voxels
        small_linalg = _small_linalg(dev)
        with _small_linalg(dev):
            fast = _ChannelMaskGaussianMI(sxx, _GAUSSIAN_EPS)

    def measure(idx: torch.Tensor, xa: torch.Tensor, ra: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # the mean loss over the draws, and the draw whose own loss is nearest that mean: the mask the search pass
        # applies, so that the layers after this one are searched on a map that lost what this layer's dropout
        # typically removes (the last draw could be any of them: a channel mask on few channels sometimes erases the
        # whole map, and every later layer of that input was then searched on a map without the image)
        if fast is not None:
            ks = [_draw_keep(xa, ra, channelwise) for _ in range(draws)]
            per = fast.per_draw(idx, torch.stack([k.reshape(k.shape[0], c) for k in ks]))
        else:
            ks, per_list = [], []
            for _ in range(draws):
                k = _draw_keep(xa, ra, channelwise)
                per_list.append(_losses(fn, xa, xa * k))
                ks.append(k.bool())  # 0/1 masks: one byte per element while the draws are compared
            per = torch.stack(per_list)
        mean = per.mean(0)
        pick = _representative_draw(per, mean)
        chosen = torch.stack(ks)[pick, torch.arange(pick.numel(), device=pick.device)]
        return mean, chosen.to(xa.dtype)

    rates = torch.full((b,), float(p_init), dtype=torch.float64, device=dev)
    losses = torch.full((b,), float("nan"), dtype=torch.float64, device=dev)
    iterations = torch.zeros(b, dtype=torch.int64, device=dev)
    converged = torch.zeros(b, dtype=torch.bool, device=dev)
    keep = torch.ones(_mask_shape(x, channelwise), dtype=x.dtype, device=dev)
    active = finite.clone()
    if not bool(finite.all()):  # a mask at p_init for the inputs not searched, as for every undefined loss
        keep[~finite] = _draw_keep(x[~finite], rates[~finite], channelwise)
    step = float(lr)
    with small_linalg:  # C x C factorisations: threads only add synchronisation cost on CPU
        for it in range(max_iter):
            idx = active.nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            all_active = idx.numel() == b
            xa = x if all_active else x[idx]
            ra = rates if all_active else rates[idx]
            la, k = measure(idx, xa, ra)
            keep[idx] = k
            losses[idx] = la
            iterations[idx] = it + 1
            err = la - float(target_loss)
            done = err.abs() < float(tol)
            converged[idx] = done
            still = ~done & ~torch.isnan(la)
            if it == max_iter - 1 or not bool(still.any()):
                break
            new = (ra - step * err / (1.0 + err.abs())).clamp(float(p_min), float(p_max))
            rates[idx] = torch.where(still, new, ra)
            active[idx] = still
            step *= float(lr_decay)
    return RateSearchResult(rates, losses, iterations, converged, keep)


def _warn_undefined(losses: torch.Tensor, loss: str | LossFn, p_init: float, stacklevel: int) -> None:
    """Warn when the search's information loss is undefined (NaN) for some input; ``stacklevel`` as seen from here."""
    if bool(torch.isnan(losses).any()):
        warnings.warn(
            f"search_dropout_rate: the information loss ({_loss_name(loss)}) is undefined (NaN) for some input(s), "
            f"e.g. a constant, all-zero or non-finite feature map: the search stops there and keeps the rate it had "
            f"(p_init={float(p_init)} where the loss is undefined from the start; see the result's losses)",
            UserWarning,
            stacklevel=stacklevel,
        )


def _representative_draw(per: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """Per input, the index of the draw whose loss is nearest the mean over the draws (the last of equals).

    ``per`` ``(draws, n)`` losses, ``mean`` ``(n,)``; where the loss is undefined (NaN) the last draw.
    """
    dist = (per - mean.unsqueeze(0)).abs()
    dist = torch.where(torch.isnan(dist), torch.full_like(dist, float("inf")), dist)
    return per.shape[0] - 1 - torch.argmin(dist.flip(0), dim=0)


def _loss_name(loss: str | LossFn) -> str:
    return loss if isinstance(loss, str) else getattr(loss, "__name__", "callable")


@torch.compiler.disable
def _layer_search(layer: RateInDropout, x: torch.Tensor) -> RateSearchResult:
    """:meth:`RateInDropout.search`, run eagerly even inside a network compiled with ``torch.compile``.

    The controller decides on the host, per iteration, which inputs are still searched and whether to stop (the data
    dependent steps that keep its random draws those of the uncompiled network), so dynamo cannot trace it: traced, the
    search broke the graph at each of these places and at the warnings (each piece compiled apart). Run eagerly, it is
    one graph break per search. Warnings point at the caller of ``search`` (this frame, torch's wrapper, ``search``).
    """
    res = _search_core(x.detach(), layer.loss, layer.target_loss, channelwise=layer.channelwise, validate=False,
                       **layer.controller())
    layer.rates, layer.last_search = res.rates, res
    layer.searches = getattr(layer, "searches", 0) + 1
    _warn_undefined(res.losses, layer.loss, layer.p, stacklevel=5)
    if not getattr(layer, "_warned_unreached", False):
        message = _unreached_target_message(res.losses, res.rates, layer.target_loss, layer.tol, layer.p_min,
                                           layer.p_max)
        if message is not None:
            layer._warned_unreached = True
            warnings.warn(f"RateInDropout ({_loss_name(layer.loss)}): {message}. Warned once per layer.",
                          UserWarning, stacklevel=4)
    return res


# ============================================================================================ layer
class RateInDropout(nn.modules.dropout._DropoutNd):
    """Dropout whose rate is tuned per input so that the information it removes matches ``target_loss``.

    Active in training mode (``module.train()``; :func:`~monai_unc.inferers.dropout.enable_mc_dropout` switches it
    on like any dropout layer) and an identity in eval mode. After a search, ``rates`` ``(B,)``, ``last_search``
    (:class:`RateSearchResult`) hold the outcome and ``searches`` counts the searches since :meth:`reset` (a layer
    called at several places of one forward pass keeps the rates of its last call; :class:`RateInSource` warns);
    none is part of the ``state_dict``.

    Args:
        p: initial rate of the search (``p_init``) and the rate used in ``"fixed"`` mode before any search; in
            ``(0, p_max]``.
        target_loss: information loss to reach, in ``[0, 1]`` (fraction of the layer's information removed).
        loss: ``"mi"`` (mutual information: Gaussian estimate for channel-wise, binned for element-wise masks;
            default), ``"mi_gaussian"``, ``"mi_binned"``, ``"ssim"``, ``"mse"`` or a callable ``(pre, post) -> (B,)``;
            see :func:`get_information_loss`.
        channelwise: drop whole channels (``Dropout2d/3d`` style, for convolutional maps ``(B, C, *spatial)``) or
            single elements (for tokens ``(B, L, E)``, whose axis 1 is no channel axis; inserted layers choose per
            site, see :func:`~monai_unc.inferers.dropout.default_channelwise`).
        mode: ``"adapt"``: search the rates on every input, then apply the search's mask (``last_search.keep``);
            ``"fixed"``: reuse the last rates (``rates``) with a fresh mask.
        lr: controller step size (see :func:`search_dropout_rate`).
        lr_decay: factor applied to ``lr`` after every update.
        tol: stop when ``|loss - target_loss| < tol``.
        max_iter: most loss evaluations per input.
        p_min: smallest rate.
        p_max: largest rate.
        draws: dropout masks averaged per loss evaluation.

    Example:
        >>> import torch
        >>> from monai_unc.inferers import RateInDropout
        >>> _ = torch.manual_seed(0)
        >>> layer = RateInDropout(target_loss=0.2, loss="mse").train()
        >>> y = layer(torch.randn(2, 16, 6, 6, 6))
        >>> layer.rates.round(decimals=2), layer.last_search.converged
        (tensor([0.1600, 0.2100], dtype=torch.float64), tensor([True, True]))
    """

    def __init__(
        self,
        p: float = DEFAULT_TARGET,
        target_loss: float = DEFAULT_TARGET,
        loss: str | LossFn = "mi",
        channelwise: bool = True,
        mode: str = "adapt",
        lr: float = DEFAULT_LR,
        lr_decay: float = DEFAULT_LR_DECAY,
        tol: float = DEFAULT_TOL,
        max_iter: int = DEFAULT_MAX_ITER,
        p_min: float = 0.0,
        p_max: float = DEFAULT_P_MAX,
        draws: int = DEFAULT_DRAWS,
    ) -> None:
        # every setting checked under its own name before torch's check of p ("dropout probability has to be
        # between 0 and 1"); found by hostile testing: p=0.95 was refused as "p_init must be in [p_min, p_max]"
        _check_layer_rate(p, "p")
        _check_controller(target_loss, p, lr, lr_decay, tol, max_iter, p_min, p_max, p_name="p")
        check_bool(channelwise, "channelwise")
        get_information_loss(loss, channelwise)
        super().__init__(p=float(p))
        if not is_int(draws) or draws < 1:
            raise ValueError(f"draws must be an integer >= 1, got {draws!r}")
        self.draws = int(draws)
        self.target_loss = float(target_loss)
        self.loss = loss
        self.channelwise = bool(channelwise)
        self.mode = mode
        self.lr, self.lr_decay, self.tol, self.max_iter = float(lr), float(lr_decay), float(tol), int(max_iter)
        self.p_min, self.p_max = float(p_min), float(p_max)
        self.rates: torch.Tensor | None = None
        self.last_search: RateSearchResult | None = None
        self.searches = 0  # searches since the last reset (more than one per forward pass: a module used twice)
        self.replaced: nn.Module | None = None  # the dropout module this layer replaced (convert_dropout_to_rate_in)
        self.kept_by: Any = None  # the RateInSource that keeps this layer attached between calls (activate(keep=True))

    @property
    def mode(self) -> str:
        """``"adapt"`` (search the rates on every input) or ``"fixed"`` (reuse the last rates)."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in ("adapt", "fixed"):
            raise ValueError(f"mode must be 'adapt' or 'fixed', got {value!r}")
        self._mode = value

    def controller(self) -> dict[str, float]:
        """The controller settings as keyword arguments of :func:`search_dropout_rate`."""
        return {
            "p_init": self.p, "lr": self.lr, "lr_decay": self.lr_decay, "tol": self.tol, "max_iter": self.max_iter,
            "p_min": self.p_min, "p_max": self.p_max, "draws": self.draws,
        }

    def settings(self) -> dict[str, Any]:
        """The values this layer applies, as JSON data (a callable ``loss`` by its name).

        Returns:
            ``{"p", "target_loss", "loss", "channelwise", "lr", "lr_decay", "tol", "max_iter", "p_min", "p_max",
            "draws"}``.
        """
        loss = self.loss if isinstance(self.loss, str) else getattr(self.loss, "__name__", repr(self.loss))
        return {"p": float(self.p), "target_loss": self.target_loss, "loss": loss, "channelwise": self.channelwise,
                "lr": self.lr, "lr_decay": self.lr_decay, "tol": self.tol, "max_iter": self.max_iter,
                "p_min": self.p_min, "p_max": self.p_max, "draws": self.draws}

    def reset(self) -> None:
        """Forget the last rates (``"fixed"`` mode falls back to ``p``)."""
        self.rates = None
        self.last_search = None
        self.searches = 0

    def search(self, x: torch.Tensor) -> RateSearchResult:
        """Run the controller on ``x`` and store the rates; returns the :class:`RateSearchResult`.

        A target that no rate in ``[p_min, p_max]`` reaches is warned about once per layer (the first search where
        it happens, naming the bound used and the loss reached), not on every forward pass. Inside a network compiled
        with ``torch.compile`` the search runs eagerly (one graph break; its stopping decisions are taken on the host).
        """
        return _layer_search(self, x)

    def rate_in(self, x: torch.Tensor) -> torch.Tensor:
        """Apply Rate-In dropout regardless of the train/eval state (used by :class:`RateInHook`)."""
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            return x
        if hasattr(x, "as_tensor"):
            x = x.as_tensor()
        if self.mode == "adapt":
            res = self.search(x)
            return _apply_keep(x, res.keep, res.rates)
        rates = self.rates
        if rates is None:
            rates = torch.full((x.shape[0],), self.p, dtype=torch.float64, device=x.device)
        elif rates.numel() != x.shape[0]:
            if rates.numel() != 1:
                raise ValueError(
                    f"fixed mode holds rates for {rates.numel()} inputs but got a batch of {x.shape[0]}; "
                    "run the layer in 'adapt' mode on this batch first"
                )
            rates = rates.expand(x.shape[0])
        rates = rates.to(x.device)
        return _apply_keep(x, _draw_keep(x, rates, self.channelwise), rates)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Rate-In dropout in training mode (searching or reusing the rates, see ``mode``); identity in eval."""
        return self.rate_in(x) if self.training else x

    def extra_repr(self) -> str:
        """The settings shown in ``repr``."""
        name = self.loss if isinstance(self.loss, str) else getattr(self.loss, "__name__", "callable")
        return (
            f"p={self.p}, target_loss={self.target_loss}, loss={name}, channelwise={self.channelwise}, "
            f"mode={self.mode}"
        )


class RateInHook(DropoutHook):
    """Forward hook applying a :class:`RateInDropout` to a module's output (post-hoc Rate-In).

    A :class:`~monai_unc.inferers.dropout.DropoutHook`, so :func:`~monai_unc.inferers.dropout.enable_mc_dropout`,
    :func:`~monai_unc.inferers.dropout.find_dropout_layers` and ``remove_dropout`` treat it like post-hoc dropout;
    active when the hooked module is in training mode or ``mc_enabled``.

    Args:
        layer: the Rate-In layer it applies.

    Example:
        >>> import torch
        >>> from monai_unc.inferers import RateInHook, add_rate_in, find_rate_in_layers
        >>> net = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.Conv3d(8, 2, 1))
        >>> add_rate_in(net, after=["0"], target_loss=0.2)
        ['0']
        >>> find_rate_in_layers(net)
        [('0', RateInDropout(p=0.2, target_loss=0.2, loss=mi, channelwise=True, mode=adapt))]
    """

    def __init__(self, layer: RateInDropout) -> None:
        if not isinstance(layer, RateInDropout):
            raise TypeError(f"layer must be a RateInDropout, got {type(layer).__name__}")
        super().__init__(layer.p, channelwise=layer.channelwise)
        self.layer = layer
        self.replaced: DropoutHook | None = None

    def _drop_tensor(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer.rate_in(x)

    def __repr__(self) -> str:
        return f"RateInHook({self.layer.extra_repr()})"


# ============================================================================================ placement
def _layer_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    if "channelwise" in kwargs and kwargs["channelwise"] is None:  # not given: the kind of each site (or layer)
        del kwargs["channelwise"]
    allowed = {"p", "target_loss", "loss", "channelwise", "lr", "lr_decay", "tol", "max_iter", "p_min", "p_max",
               "draws"}
    bad = sorted(set(kwargs) - allowed)
    if bad:
        raise TypeError(f"unexpected Rate-In layer argument(s): {bad}; allowed: {sorted(allowed)}")
    return kwargs


def find_rate_in_layers(model: nn.Module) -> list[tuple[str, RateInDropout]]:
    """``(name, layer)`` of every Rate-In layer of ``model`` in module order.

    :class:`RateInDropout` modules (their own name) and :class:`RateInHook` s (the name of the hooked module).

    Args:
        model: the network.

    Returns:
        A list of ``(name, RateInDropout)``.

    Example:
        >>> import torch
        >>> from monai_unc.inferers import RateInDropout, find_rate_in_layers
        >>> net = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3), RateInDropout(), torch.nn.Conv3d(8, 2, 1))
        >>> [name for name, _ in find_rate_in_layers(net)]
        ['1']
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    out: list[tuple[str, RateInDropout]] = []
    for name, m in plain_module(model).named_modules():  # a torch.compile wrapper: its module's names
        if isinstance(m, RateInDropout):
            out.append((name, m))
        for h in m._forward_hooks.values():
            if isinstance(h, RateInHook):
                out.append((name or "<root>", h.layer))
    return out


def add_rate_in(
    model: nn.Module, after: str | Sequence[str] | Callable[[str, nn.Module], bool] = "auto", **layer_kwargs: Any
) -> list[str]:
    """Insert Rate-In dropout post hoc after the modules chosen by ``after``.

    Same placement as :func:`~monai_unc.inferers.dropout.add_dropout`: ``"auto"`` = every encoder and decoder stage
    but the output of MONAI UNet / BasicUNet / DynUNet and nnU-Net PlainConvUNet, or module names, or a predicate.
    Parameters and ``state_dict`` keys are unchanged.

    Args:
        model: the network, modified in place.
        after: ``"auto"``, a list of module names or a predicate ``(name, module) -> bool``.
        **layer_kwargs: configure each :class:`RateInDropout` (``p``, ``target_loss``, ``loss``, ``channelwise``,
            controller settings). Without ``channelwise``, each site gets the kind of
            :func:`~monai_unc.inferers.dropout.default_channelwise`: channel-wise on convolutional feature maps,
            element-wise after ``Linear``, attention and transformer modules. Their outputs are tokens ``(B, L, E)``
            (or channels last), whose axis 1 is no channel axis: a channel mask there erased whole tokens. Rate-In
            defines dropout as a Bernoulli mask on the units of a layer's features, and MC dropout in transformers
            (MONAI's ViT / UNETR / SwinUNETR) draws element-wise masks.

    Returns:
        The names of the modules followed by Rate-In dropout.

    Example:
        >>> import torch
        >>> from monai_unc.inferers import add_rate_in, remove_rate_in
        >>> net = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3), torch.nn.ReLU(), torch.nn.Conv3d(8, 2, 1))
        >>> add_rate_in(net, after=lambda name, m: isinstance(m, torch.nn.ReLU), target_loss=0.1)
        ['1']
        >>> remove_rate_in(net)
        1
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    kwargs = _with_default_p(_layer_kwargs(dict(layer_kwargs)))
    plain = plain_module(model)  # a torch.compile wrapper: hooks on its module, under the names the user knows
    names = resolve_dropout_sites(plain, after)
    modules = dict(plain.named_modules())
    for n in names:
        if any(isinstance(h, RateInHook) for h in modules[n]._forward_hooks.values()):
            warnings.warn(f"module {n!r} already has a Rate-In hook; adding another", UserWarning)
        kind = {} if "channelwise" in kwargs else {"channelwise": default_channelwise(plain, n)}
        modules[n].register_forward_hook(RateInHook(RateInDropout(**kwargs, **kind)))
    recompile_after_hooks(model)  # a wrapper called before would keep its graph without the hooks
    return names


def _with_default_p(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Inserted layers start the search at the target loss, at least 0.05, clipped to ``[p_min, p_max]``.

    The target loss is the rate at which a content-blind loss would hit it.
    """
    out = dict(kwargs)
    if "p" not in out:
        target = out.get("target_loss", DEFAULT_TARGET)
        if isinstance(target, bool) or not isinstance(target, numbers.Real) or not 0.0 <= float(target) <= 1.0:
            # found by hostile testing: target_loss=nan made p nan, refused as "p (the initial rate) must be > 0";
            # the layer's own check names target_loss
            target = DEFAULT_TARGET
        out["p"] = _clip_rate(max(float(target), 0.05), out)
    return out


def _clip_rate(p: float, kwargs: dict[str, Any]) -> float:
    """A default initial rate clipped to the ``[p_min, p_max]`` of the layer settings (the caller did not choose it).

    Left alone when the bounds are not numbers: the layer's own checks name them.
    """
    lo, hi = kwargs.get("p_min", 0.0), kwargs.get("p_max", DEFAULT_P_MAX)
    if isinstance(lo, bool) or isinstance(hi, bool) or not isinstance(lo, numbers.Real) or (
        not isinstance(hi, numbers.Real)
    ):
        return p
    return min(max(float(p), float(lo)), float(hi))


def _rate_of(m: nn.Module) -> float:
    return float(getattr(m, "p", 0.0) or 0.0)


#: dropout modules that convert_dropout_to_rate_in replaces (alpha dropout keeps SELU statistics: left alone)
_CONVERTIBLE = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


def convert_dropout_to_rate_in(model: nn.Module, **layer_kwargs: Any) -> list[str]:
    """Replace every dropout of ``model`` by Rate-In dropout, in place; returns their names.

    Converted are ``torch.nn`` dropout modules with a rate above 0 and post-hoc
    :class:`~monai_unc.inferers.dropout.DropoutHook` s. The initial rate ``p`` of each Rate-In layer is the rate it
    replaces (clipped to ``[p_min, p_max]``) unless ``p`` is given; ``Dropout1d/2d/3d`` and channel-wise hooks become
    channel-wise, ``nn.Dropout`` element-wise, unless ``channelwise`` is given. ``AlphaDropout``, ``DropPath``
    (stochastic depth) and ``nn.MultiheadAttention``'s attention dropout are left alone (:class:`RateInSource` does
    not sample them). :func:`remove_rate_in` undoes the conversion.

    Args:
        model: the network, modified in place.
        **layer_kwargs: configure each :class:`RateInDropout` (``p``, ``target_loss``, ``loss``, ``channelwise``,
            controller settings).

    Returns:
        The names of the converted layers.

    Raises:
        ValueError: when the model has no dropout to convert.

    Example:
        >>> from monai_unc.inferers import convert_dropout_to_rate_in, remove_rate_in
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(
        ...     torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.Dropout3d(0.2), torch.nn.Conv3d(8, 3, 1)
        ... ).eval()
        >>> image = torch.rand(1, 1, 6, 6, 6)
        >>> convert_dropout_to_rate_in(net, target_loss=0.1)
        ['1']
        >>> type(net[1]).__name__, net[1].p
        ('RateInDropout', 0.2)
        >>> remove_rate_in(net), type(net[1]).__name__
        (1, 'Dropout3d')
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    kwargs = _layer_kwargs(dict(layer_kwargs))
    converted: list[str] = []
    # one Rate-In layer per dropout module, also where a module is registered under two names (nnU-Net's
    # ConvDropoutNormReLU holds its dropout as `.dropout` and as `.all_modules.1`)
    done: dict[int, RateInDropout] = {}
    for name, parent in list(plain_module(model).named_modules()):  # a torch.compile wrapper: its module's names
        for child_name, child in list(parent.named_children()):
            if id(child) in done:
                setattr(parent, child_name, done[id(child)])
                continue
            if type(child) in _CONVERTIBLE:
                if _rate_of(child) <= 0:
                    continue
                kw = {"p": _clip_rate(_rate_of(child), kwargs),
                      "channelwise": isinstance(child, (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)), **kwargs}
                layer = RateInDropout(**kw)
                layer.train(child.training)
                object.__setattr__(layer, "replaced", child)  # kept for remove_rate_in, not as a submodule
                setattr(parent, child_name, layer)
                done[id(child)] = layer
                converted.append(f"{name}.{child_name}" if name else child_name)
        for key, h in list(parent._forward_hooks.items()):
            if isinstance(h, DropoutHook) and not isinstance(h, RateInHook) and h.p > 0:
                kw = {"p": _clip_rate(h.p, kwargs), "channelwise": h.channelwise, **kwargs}
                new = RateInHook(RateInDropout(**kw))
                new.mc_enabled = h.mc_enabled
                new.replaced = h
                parent._forward_hooks[key] = new
                converted.append(name or "<root>")
    if not converted:
        raise ValueError(
            f"{type(plain_module(model)).__name__} has no dropout to convert (no torch.nn Dropout* with a rate above 0 "
            "and no post-hoc dropout); insert Rate-In with add_rate_in(model, after=...)"
        )
    recompile_after_hooks(model)  # a wrapper called before would keep its graph with the replaced hooks
    return converted


def remove_rate_in(model: nn.Module) -> int:
    """Undo :func:`add_rate_in` and :func:`convert_dropout_to_rate_in`.

    Inserted hooks are removed, converted layers and hooks get their original dropout back. :class:`RateInDropout`
    modules built into the architecture stay.

    Args:
        model: the network, modified in place.

    Returns:
        How many layers or hooks were removed or restored.

    Example:
        >>> import torch
        >>> from monai_unc.inferers import add_rate_in, remove_rate_in
        >>> net = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3), torch.nn.Conv3d(8, 2, 1))
        >>> _ = add_rate_in(net, after=["0"])
        >>> remove_rate_in(net), remove_rate_in(net)
        (1, 0)
    """
    count = 0
    for parent in list(plain_module(model).modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, RateInDropout) and child.replaced is not None:
                setattr(parent, child_name, child.replaced)
                count += 1
        for key, h in list(parent._forward_hooks.items()):
            if isinstance(h, RateInHook):
                if h.replaced is not None:
                    parent._forward_hooks[key] = h.replaced
                else:
                    del parent._forward_hooks[key]
                count += 1
    if count:
        recompile_after_hooks(model)
    return count


def release_kept_layers(network: nn.Module, but: Any = None) -> int:
    """Remove the Rate-In layers that sources keep attached to ``network`` between calls (``keep_layers=True``).

    A source that samples the network otherwise (MC dropout, another Rate-In source) calls it first: switched on with
    the network's dropout, kept layers would sample Rate-In in place of the network's own dropout.

    Args:
        network: the network (a ``torch.compile`` wrapper too).
        but: a source whose kept layers stay (the caller itself). The layers of a source that is sampling the network
            right now (an MC dropout x Rate-In product) stay too.

    Returns:
        How many layers or hooks were removed.

    Example:
        >>> import torch
        >>> release_kept_layers(torch.nn.Sequential(torch.nn.Conv3d(1, 2, 1), torch.nn.Dropout3d(0.2)))
        0
    """
    # a source sampling the network in this very call (a product with MC dropout) keeps its layers
    owners = {id(o): o for _, layer in find_rate_in_layers(network)
              if (o := getattr(layer, "kept_by", None)) is not None and o is not but
              and not getattr(o, "_layers", None)}
    return sum(owner.release() for owner in owners.values())


# ============================================================================================ inferer
class RateInSource(SampleSource):
    """``num_samples`` dropout passes with Rate-In rates searched once per input (per window).

    The rate search runs in :meth:`prepare`: one forward pass with every Rate-In layer in ``"adapt"`` mode (each
    layer tunes its rate on the activations that reach it, i.e. after the dropout of the layers before it), its
    output discarded; the samples then run in ``"fixed"`` mode. Layers: Rate-In layers already in the network
    are used as they are; otherwise ``placement`` decides, for the duration of the call: ``"insert"`` adds them
    after the modules chosen by ``after`` (see :func:`add_rate_in`), ``"convert"`` converts the network's dropout
    (:func:`convert_dropout_to_rate_in`), ``"auto"`` converts when the network has dropout and inserts otherwise.
    Other dropout layers of the network stay in the mode they are in. MI is epistemic, MI(Y, theta).

    A ``torch.compile`` network compiles again after every change of its hooks or modules (dynamo does not guard on
    hooks, so the compiled code is dropped, :func:`~monai_unc._utils.recompile_after_hooks`): attached and removed per
    call, the layers make every call compile the network again. ``keep_layers=True`` keeps the layers attached to a
    compiled network between calls instead (switched off outside them: the network predicts as before), so that it
    compiles once; :meth:`release` removes them. Until then the network holds them: call :meth:`release` before
    training it, saving it as a module or running dropout of its own on it.

    Args:
        num_samples: dropout passes per input.
        placement: ``"auto"``, ``"insert"`` or ``"convert"``.
        after: where ``"insert"`` places the layers.
        keep_layers: keep the attached layers on a ``torch.compile`` network between calls (see above; default
            False: the network is left as found after every call). An uncompiled network is restored after every
            call either way. The layers are kept on one network at a time (the last one the source sampled).
        **layer_kwargs: configure each :class:`RateInDropout`.

    Example:
        >>> from monai_unc.inferers import FlipSource, RateInSource, UncertaintyInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(
        ...     torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.Dropout3d(0.2), torch.nn.Conv3d(8, 3, 1)
        ... ).eval()
        >>> image = torch.rand(1, 1, 6, 6, 6)
        >>> source = RateInSource(num_samples=4, target_loss=0.1)
        >>> out = UncertaintyInferer([source, FlipSource([0])], seed=0)(image, net)
        >>> out.num_samples, sorted(out.extras)
        (8, ['rate_in_converged', 'rate_in_iterations', 'rate_in_losses', 'rate_in_rates'])
        >>> type(net[1]).__name__  # the network is restored after the call
        'Dropout3d'
    """

    mi_meaning = MIMeaning.EPISTEMIC
    shareable = True
    _samples_dropout = True

    def __init__(
        self,
        num_samples: int = 30,
        placement: str = "auto",
        after: str | Sequence[str] | Callable[[str, nn.Module], bool] = "auto",
        keep_layers: bool = False,
        **layer_kwargs: Any,
    ) -> None:
        self.keep_layers = check_bool(keep_layers, "keep_layers")
        if not is_int(num_samples) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
        num_samples = int(num_samples)
        if placement not in ("auto", "insert", "convert"):
            raise ValueError(f"placement must be 'auto', 'insert' or 'convert', got {placement!r}")
        self.num_samples = num_samples
        self.placement = placement
        self.after = after
        self.layer_kwargs = _layer_kwargs(dict(layer_kwargs))
        RateInDropout(**_with_default_p(self.layer_kwargs))  # validate the settings now, not at the first call
        self._layers: list[tuple[str, RateInDropout]] = []
        self._records: dict[str, dict[str, list[torch.Tensor]]] = {}
        # a compiled network the layers stay attached to between calls, and their placement (see activate)
        self._kept: tuple[nn.Module, str] | None = None

    def __len__(self) -> int:
        return self.num_samples

    def variants(self, x: torch.Tensor) -> list[Callable | None]:
        """``num_samples`` plain calls (fixed rates, fresh masks)."""
        return [None] * self.num_samples

    @contextlib.contextmanager
    def activate(
        self, network: nn.Module | None, keep: bool | None = None
    ) -> Iterator[list[tuple[str, RateInDropout]]]:
        """Attach the Rate-In layers for the call (see ``placement``) and switch them on; restore afterwards.

        The network's own Rate-In layers get back their training flag, ``mode``, ``rates`` and ``last_search``.
        The layers attached for the call are removed afterwards; with ``keep`` on a ``torch.compile`` network they stay
        attached instead (switched off outside the calls, their state restored as above) until :meth:`release`, until
        this source activates on another network, or until another source activates on this one. Dynamo does not
        guard on hooks, so attaching or removing them drops the compiled code
        (:func:`~monai_unc._utils.recompile_after_hooks`): removed after every call, they made every case of
        ``nnunet-predict`` under ``nnUNet_compile=1`` compile the network again (in earlier versions).

        Args:
            network: the network (a ``torch.compile`` wrapper too).
            keep: keep the attached layers on a compiled network between calls (the owner of the network and of
                this source, e.g. the nnU-Net predictor, sets it); None: the source's ``keep_layers``.

        Yields:
            The Rate-In layers ``[(name, layer)]``.
        """
        if not isinstance(network, nn.Module):
            raise TypeError(f"RateInSource needs the network as a torch.nn.Module, got {type(network).__name__}")
        # a torch.compile wrapper: the layers of its module, under the names the user knows (``after=["1"]``, the
        # keys of ``rate_in_rates``), not under ``_orig_mod.``; the compiled calls run the hooks and layers attached
        # the layers are attached and removed through the wrapper (found by review36: attached to its module alone, a
        # compiled network called before kept its graph without them and the search failed, "none of the Rate-In
        # layers ran"): add_rate_in / remove_rate_in drop the stale graph of a compiled wrapper
        wrapper, network = network, plain_module(network)
        keep = getattr(self, "keep_layers", False) if keep is None else check_bool(keep, "keep")
        if self._kept is not None and plain_module(self._kept[0]) is not network:
            self.release()  # kept on another network
        # layers another source keeps on this network are not this source's: removed before its own are attached
        release_kept_layers(network, but=self)
        layers = find_rate_in_layers(network)
        attached = not layers
        keep = keep and is_compiled(wrapper)
        # a layer's mode and its last search (``rates``, ``last_search``: what "fixed" mode applies): the network's own
        # Rate-In layers are given back as they were (found by hostile testing: they kept the rates of the call's last
        # window, so a later "fixed"-mode MC dropout pass applied another case's rates, or failed on another batch size)
        states: list[tuple[RateInDropout, bool, str, Any, Any]] = []
        hooks: list[tuple[RateInHook, bool]] = []
        gates: list[tuple[nn.Module, bool]] = []
        try:
            if attached:
                placement = self.resolved_placement(network)
                self._attach(wrapper)
                layers = find_rate_in_layers(network)
                if keep:  # kept attached between calls: the compiled code stays valid
                    self._kept = (wrapper, placement)
                    for _, layer in layers:
                        layer.kept_by = self
            for _, layer in layers:
                states.append((layer, layer.training, layer.mode, layer.rates, layer.last_search))
                layer.train()
                layer.mode = "fixed"
            hooks = [(h, h.mc_enabled) for m in network.modules() for h in m._forward_hooks.values()
                     if isinstance(h, RateInHook)]
            for h, _ in hooks:
                h.mc_enabled = True
            # a TransformerEncoderLayer's fused fast path skipped the Rate-In layers it holds: every sample alike
            # (found by hostile review 65); its own flag only, as MC dropout switches it
            gates = [(m, m.training) for m in fast_path_layers(network, [layer for _, layer in layers])]
            for m, _ in gates:
                m.training = True
            self._layers = layers
            yield layers
        finally:
            for m, training in reversed(gates):
                m.training = training
            for layer, training, mode, rates, last_search in states:
                layer.train(training)
                layer.mode = mode
                layer.rates, layer.last_search = rates, last_search
            for h, enabled in hooks:
                h.mc_enabled = enabled
            if attached and not keep:
                remove_rate_in(wrapper)
            self._layers = []

    def release(self) -> int:
        """Remove the layers kept attached to a compiled network between calls (``activate(keep=True)``).

        Returns:
            How many layers or hooks were removed (0 when none are kept).

        Example:
            >>> import torch
            >>> from monai_unc.inferers import RateInSource
            >>> RateInSource(num_samples=2).release()  # nothing kept
            0
        """
        if self._kept is None:
            return 0
        wrapper, self._kept = self._kept[0], None
        return remove_rate_in(wrapper)

    def resolved_placement(self, network: nn.Module) -> str:
        """Where the layers of :meth:`activate` come from on ``network``.

        Args:
            network: the network.

        Returns:
            ``"existing"`` (Rate-In layers already in the network), ``"convert"`` or ``"insert"`` (``"auto"``
            resolved: convert when the network has dropout).
        """
        if self._kept is not None and plain_module(self._kept[0]) is plain_module(network):
            return self._kept[1]  # the layers this source keeps attached to a compiled network
        if find_rate_in_layers(network):
            return "existing"
        if self.placement != "auto":
            return self.placement
        mods, hooks = find_dropout_layers(network)
        return "convert" if any(type(m) in _CONVERTIBLE for m in mods) or bool(hooks) else "insert"

    def applied_settings(self, network: nn.Module) -> dict[str, Any]:
        """Every Rate-In value applied on ``network``, as JSON data (the record of a run); the network is not run.

        The layers are attached as :meth:`activate` attaches them and removed again. Values shared by every layer
        are listed once; a value that differs between layers (e.g. the initial rate ``p`` of converted dropout
        layers of different rates) is listed per layer under ``per_layer``.

        Args:
            network: the network the source will sample.

        Returns:
            ``{"num_samples", "placement", ["after",] <RateInDropout.settings() shared by every layer>, "layers":
            [names], ["per_layer": {name: {key: value}}]}``.
        """
        placement = self.resolved_placement(network)
        with self.activate(network) as layers:
            per_layer = {name: layer.settings() for name, layer in layers}
        first = next(iter(per_layer.values()), {})
        shared = {k: v for k, v in first.items() if all(s[k] == v for s in per_layer.values())}
        out: dict[str, Any] = {"num_samples": self.num_samples, "placement": placement}
        if placement == "insert":
            after = self.after
            if callable(after):
                after = getattr(after, "__name__", repr(after))
            out["after"] = after if isinstance(after, str) else [str(a) for a in after]
        out.update(shared)
        out["layers"] = list(per_layer)
        varying = {name: {k: v for k, v in s.items() if k not in shared} for name, s in per_layer.items()}
        if any(varying.values()):
            out["per_layer"] = varying
        return out

    def _attach(self, network: nn.Module) -> None:
        kwargs = dict(self.layer_kwargs)
        placement = self.resolved_placement(plain_module(network))
        if placement == "convert":
            convert_dropout_to_rate_in(network, **kwargs)
        else:
            add_rate_in(network, after=self.after, **_with_default_p(kwargs))

    def reset(self) -> None:
        """Clear the per-call search records."""
        self._records = {}

    def prepare(self, x: torch.Tensor, predictor: Predictor) -> None:
        """Search the rates of every Rate-In layer on ``x`` with one forward pass of ``predictor``.

        The callers pass the network's Python module (a ``torch.compile`` wrapper's ``_orig_mod``): the search decides
        on the host, draw by draw, and traced it broke the graph at each decision, and a break inside a loop over
        modules made dynamo run that module eagerly in the sampling passes too (in earlier versions).
        """
        layers = self._layers
        if not layers:
            raise RuntimeError("RateInSource.prepare called outside activate()")
        for _, layer in layers:
            layer.reset()
            layer.mode = "adapt"
        try:
            predictor(x)
        finally:
            for _, layer in layers:
                layer.mode = "fixed"
        ran = [(name, layer) for name, layer in layers if layer.last_search is not None]
        if not ran:
            raise ValueError(
                f"none of the {len(layers)} Rate-In layer(s) ran in the forward pass (are they placed on modules the "
                "network calls, on floating point tensors?)"
            )
        # found by hostile testing: one dropout module applied at several places of the forward pass (a common
        # pattern) was searched at each place, but only the last search was kept, so the sampling passes applied the
        # rates of the last place at every place, without a word
        again = sorted({f"{name} ({layer.searches} times)" for name, layer in ran if layer.searches > 1})
        if again:
            warnings.warn(
                f"Rate-In layer(s) called more than once in one forward pass: {again}; a layer keeps one rate per "
                "input, that of its last call, and the samples apply it at every call. Give each place its own "
                "dropout module for a rate per place",
                UserWarning,
                stacklevel=2,
            )
        if len(ran) < len(layers):
            idle = [name for name, layer in layers if layer.last_search is None]
            warnings.warn(f"Rate-In layers not reached by the forward pass keep their initial rate: {idle}",
                          UserWarning)
        seen: dict[str, int] = {}
        for name, layer in ran:
            seen[name] = seen.get(name, 0) + 1
            key = name if seen[name] == 1 else f"{name}#{seen[name]}"
            rec = self._records.setdefault(key, {"rates": [], "losses": [], "iterations": [], "converged": []})
            res = layer.last_search
            rec["rates"].append(res.rates.detach().float().cpu())
            rec["losses"].append(res.losses.detach().float().cpu())
            rec["iterations"].append(res.iterations.detach().cpu())
            rec["converged"].append(res.converged.detach().cpu())

    def records_copy(self) -> dict[str, dict[str, list[torch.Tensor]]]:
        """A copy of the per-call search records, to go back to with :meth:`restore_records`.

        Returns:
            ``{layer: {"rates": [...], "losses": [...], "iterations": [...], "converged": [...]}}``, new lists of the
            recorded tensors (one per search).
        """
        return {k: {f: list(v) for f, v in rec.items()} for k, rec in self._records.items()}

    def restore_records(self, records: dict[str, dict[str, list[torch.Tensor]]]) -> None:
        """Go back to the records of :meth:`records_copy` (e.g. before a sliding window that is run again).

        Args:
            records: what :meth:`records_copy` returned.
        """
        self._records = {k: {f: list(v) for f, v in rec.items()} for k, rec in records.items()}

    def extra_outputs(self) -> dict[str, Any]:
        """``rate_in_rates``, ``rate_in_losses``, ``rate_in_iterations``, ``rate_in_converged``: per layer name."""
        if not self._records:
            return {}
        out: dict[str, Any] = {}
        for field in ("rates", "losses", "iterations", "converged"):
            out[f"rate_in_{field}"] = {k: torch.cat(v[field]) for k, v in self._records.items()}
        return out


class RateInInferer(UncertaintyInferer):
    """Monte-Carlo dropout with Rate-In adaptive rates (Zeevi et al., CVPR 2025).

    For every input (every window of a ``SlidingWindowInferer``) one search pass tunes each Rate-In layer's rate,
    layer by layer in network order, until the information the layer's dropout removes matches ``target_loss``; then
    ``num_samples`` dropout passes with those rates stream into :class:`~monai_unc.stats.SampleStats`.

    Zeevi, Shwartz-Ziv, LeCun, Staib, Onofrey: *Rate-In: Information-Driven Adaptive Dropout Rates for Improved
    Inference-Time Uncertainty Estimation*, CVPR 2025.

    Args:
        num_samples: MC samples per input (Zeevi et al. uses 30).
        target_loss: information loss per layer, in ``[0, 1]``.
        loss: ``"mi"`` (mutual information, default), ``"mi_gaussian"``, ``"mi_binned"``, ``"ssim"``, ``"mse"`` or a
            callable (see :func:`get_information_loss`).
        placement: ``"auto"``, ``"insert"`` or ``"convert"`` (see :class:`RateInSource`); ignored when the network
            already has Rate-In layers (they keep their own settings).
        after: where ``"insert"`` places the layers (as in :func:`~monai_unc.inferers.dropout.add_dropout`).
        channelwise: drop channels or elements in inserted layers (converted layers keep their kind unless given);
            default: per site, channel-wise on convolutional feature maps and element-wise after ``Linear``,
            attention and transformer modules (tokens ``(B, L, E)``; see
            :func:`~monai_unc.inferers.dropout.default_channelwise`).
        p_init: initial rate of the search (default: the target loss, at least 0.05, for inserted layers; the rate
            it replaces for converted ones; either clipped to ``[p_min, p_max]``).
        lr: controller step size (see :func:`search_dropout_rate`).
        lr_decay: factor applied to ``lr`` after every update.
        tol: stop when ``|loss - target_loss| < tol``.
        max_iter: most loss evaluations per input.
        p_min: smallest rate.
        p_max: largest rate.
        draws: dropout masks averaged per loss evaluation.
        keep_layers: on a ``torch.compile`` network, keep the Rate-In layers a call attaches between calls (switched
            off outside them), so that the network compiles once instead of on every call; :meth:`release` removes
            them (see :class:`RateInSource`). Default False: the network is left as found after every call.
        **kwargs: :class:`~monai_unc.inferers.sampling.UncertaintyInferer` options but ``sources``
            (``base_inferer``, ``seed``, ``keys``, ``keep_samples``, ...).

    Calling it returns an :class:`~monai_unc.inferers.sampling.UncertaintyOutput` with the usual maps and, in
    ``out.extras``, ``rate_in_rates`` / ``rate_in_losses`` / ``rate_in_iterations`` / ``rate_in_converged``: dicts
    from layer name to a tensor with one value per searched input (the batch, or every window in sliding-window
    order).

    Example:
        >>> from monai_unc.inferers import RateInInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(
        ...     torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.Dropout3d(0.2), torch.nn.Conv3d(8, 3, 1)
        ... ).eval()
        >>> image = torch.rand(1, 1, 6, 6, 6)
        >>> out = RateInInferer(num_samples=5, target_loss=0.1, seed=0)(image, net)
        >>> out["mutual_information"].shape, list(out.extras["rate_in_rates"])
        (torch.Size([1, 1, 6, 6, 6]), ['1'])
        >>> out.extras["rate_in_rates"]["1"].shape
        torch.Size([1])
    """

    def __init__(
        self,
        num_samples: int = 30,
        target_loss: float = DEFAULT_TARGET,
        loss: str | LossFn = "mi",
        placement: str = "auto",
        after: str | Sequence[str] | Callable[[str, nn.Module], bool] = "auto",
        channelwise: bool | None = None,
        p_init: float | None = None,
        lr: float = DEFAULT_LR,
        lr_decay: float = DEFAULT_LR_DECAY,
        tol: float = DEFAULT_TOL,
        max_iter: int = DEFAULT_MAX_ITER,
        p_min: float = 0.0,
        p_max: float = DEFAULT_P_MAX,
        draws: int = DEFAULT_DRAWS,
        keep_layers: bool = False,
        **kwargs: Any,
    ) -> None:
        layer_kwargs: dict[str, Any] = {
            "target_loss": target_loss, "loss": loss, "lr": lr, "lr_decay": lr_decay, "tol": tol,
            "max_iter": max_iter, "p_min": p_min, "p_max": p_max, "draws": draws,
        }
        if channelwise is not None:
            layer_kwargs["channelwise"] = check_bool(channelwise, "channelwise")
        if p_init is not None:
            # checked under the name given here: the layers call it p (found by hostile testing: p_init=0 was refused
            # as "p (the initial rate) must be > 0")
            _check_layer_rate(p_init, "p_init")
            _check_controller(target_loss, p_init, lr, lr_decay, tol, max_iter, p_min, p_max)
            layer_kwargs["p"] = p_init
        self._refuse_sources(kwargs, "RateInInferer")
        source = RateInSource(num_samples, placement=placement, after=after, keep_layers=keep_layers, **layer_kwargs)
        super().__init__(sources=[source], **kwargs)
        self.num_samples = source.num_samples
        self.source = source

    def release(self) -> int:
        """Remove the Rate-In layers kept attached to a compiled network between calls (``keep_layers=True``).

        Returns:
            How many layers or hooks were removed (0 when none are kept).

        Example:
            >>> import torch
            >>> from monai_unc.inferers import RateInInferer
            >>> net = torch.nn.Sequential(
            ...     torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(0.2), torch.nn.Conv3d(4, 3, 1)
            ... ).eval()
            >>> inferer = RateInInferer(num_samples=2, target_loss=0.1, seed=0, keep_layers=True)
            >>> out = inferer(torch.rand(1, 1, 4, 4, 4), torch.compile(net, backend="eager"))
            >>> type(net[1]).__name__  # kept: the next call reuses the compiled code
            'RateInDropout'
            >>> inferer.release(), type(net[1]).__name__
            (1, 'Dropout3d')
        """
        return self.source.release()
