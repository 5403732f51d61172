"""The Monte Carlo log-likelihood loss of Stochastic Segmentation Networks.

Monteiro et al., *Stochastic Segmentation Networks: Modelling Spatially Correlated Aleatoric Uncertainty*,
NeurIPS 2020: with logits ``eta ~ N(mu, P P^T + D)`` and a label map ``y``,

    p(y | x) = E_eta[ prod_i softmax(eta)_{i, y_i} ]
    log p(y | x) ~= logsumexp_m ( sum_i log softmax(eta_m)_{i, y_i} ) - log M,     eta_1..eta_M reparameterised

and the loss is the negative of this estimate, averaged over the batch. The sum runs over every voxel ``i`` of the
image, so the value grows with the image size; :class:`SSNLoss` divides it by the number of voxels ``N`` (a
constant factor: same minimiser, same gradient directions) so that it reads like a per-voxel cross-entropy and
equals ``F.cross_entropy`` exactly when the covariance is zero and ``M = 1``. ``normalize=False`` gives the
summed form of the authors' code. The per-image sums are accumulated in float64 and the whole loss runs outside
``torch.autocast`` (half-precision logits are promoted to float32): ``logsumexp`` over sums of ~1e6 terms is
exact to float32 precision at any image size.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Distribution

from .._utils import check_bool, check_labels, is_int
from .ssn import SSNDistribution, no_autocast

__all__ = ["SSNLoss", "ssn_log_likelihood"]


def _labels(target: Any, batch: int | None = None, spatial_dims: int | None = None) -> torch.Tensor:
    """Label map ``(B, *spatial)`` or ``(B, 1, *spatial)`` -> int64 ``(B, *spatial)``.

    ``spatial_dims`` (when the prediction tells it) decides whether axis 1 is a channel: found by hostile testing,
    a ``(B, *spatial)`` map of a one-slice volume (``spatial = (1, H, W)``) lost its first spatial axis as if it
    were the channel and was refused as of another shape.
    """
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor label map, got {type(target).__name__}")
    t = target.as_tensor() if hasattr(target, "as_tensor") else target
    channel = t.ndim == spatial_dims + 2 if spatial_dims is not None else t.ndim >= 3
    if channel and t.shape[1] == 1:
        t = t[:, 0]
    if t.ndim < 2:
        raise ValueError(f"target must be a label map (B, *spatial) or (B, 1, *spatial), got {tuple(target.shape)}")
    if batch is not None and t.shape[0] != batch:
        raise ValueError(f"target has batch size {t.shape[0]} but the distribution has {batch}")
    return check_labels(t, "target")


def _sample_log_likelihood(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``sum_i log softmax(logits)_{i, y_i}`` per image, in float64: logits ``(B, C, N)``, target ``(B, N)``."""
    dtype = torch.promote_types(logits.dtype, torch.float32)
    return -F.cross_entropy(logits.to(dtype), target, reduction="none").sum(-1, dtype=torch.float64)


def _log_mean_exp(per_sample: list[torch.Tensor], n: int, normalize: bool) -> torch.Tensor:
    """``logsumexp_m(per_sample) - log M`` (``/ N`` when ``normalize``): stable for sums of any size."""
    ll = torch.logsumexp(torch.stack(per_sample), dim=0) - math.log(len(per_sample))
    return ll / n if normalize else ll


def ssn_log_likelihood(logit_samples: torch.Tensor, target: torch.Tensor, normalize: bool = True) -> torch.Tensor:
    """Monte Carlo estimate of ``log p(y | x)`` per image from logit samples (the functional core of :class:`SSNLoss`).

    ``(logsumexp_m sum_i log softmax(eta_m)_{i, y_i} - log M) / N`` (``/ N`` only when ``normalize``), the
    log-likelihood of Monteiro et al.: *Stochastic Segmentation Networks: Modelling Spatially Correlated Aleatoric
    Uncertainty*.

    Args:
        logit_samples: ``(M, B, C, *spatial)`` logits (M samples, C >= 2 classes).
        target: labels ``(B, *spatial)`` in ``[0, C)`` (integer, bool or integral float values); every voxel counts,
            there is no ignore label.
        normalize: divide by the number of voxels ``N = prod(spatial)``.

    Returns:
        ``(B,)`` in the samples' precision (float32 at least); the voxel sums are accumulated in float64.

    Raises:
        ValueError: for labels outside ``[0, C)``, no samples, fewer than 2 classes or mismatched shapes.

    Example:
        >>> import torch
        >>> from monai_unc.networks import ssn_log_likelihood
        >>> logits = torch.zeros(4, 1, 2, 3, 3)  # 4 samples that say 50:50 everywhere
        >>> ssn_log_likelihood(logits, torch.zeros(1, 3, 3, dtype=torch.long)).round(decimals=4)  # log(1/2)
        tensor([-0.6931])
    """
    if not isinstance(logit_samples, torch.Tensor):
        raise TypeError(f"logit_samples must be a torch.Tensor, got {type(logit_samples).__name__}")
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor label map, got {type(target).__name__}")
    normalize = check_bool(normalize, "normalize")
    if logit_samples.ndim < 4:
        raise ValueError(f"logit_samples must be (M, B, C, *spatial), got shape {tuple(logit_samples.shape)}")
    m, b, c = logit_samples.shape[:3]
    if m < 1:
        raise ValueError(f"logit_samples holds no sample (M = 0, shape {tuple(logit_samples.shape)})")
    if c < 2:
        raise ValueError(f"logit_samples need at least 2 classes (softmax), got C = {c}")
    if target.shape != (b, *logit_samples.shape[3:]):
        raise ValueError(
            f"target must be (B, *spatial) = {(b, *logit_samples.shape[3:])} to match logit_samples, got "
            f"{tuple(target.shape)}"
        )
    # every voxel counts: a negative label (cross_entropy's ignore_index -100) would drop out of the sum as if it
    # were predicted with probability 1, and a label >= C is no class of the samples
    target = check_labels(target.as_tensor() if hasattr(target, "as_tensor") else target, "target", num_classes=c)
    dtype = torch.promote_types(logit_samples.dtype, torch.float32)
    n = target[0].numel()
    with no_autocast(logit_samples.device):
        tgt = target.reshape(b, n)
        # one sample at a time: no M-fold copy of the target; cross_entropy is the fused, stable log-softmax
        per_sample = [_sample_log_likelihood(logit_samples[i].reshape(b, c, n), tgt) for i in range(m)]
        return _log_mean_exp(per_sample, n, normalize).to(dtype)


class SSNLoss(nn.Module):
    """Negative Monte Carlo log-likelihood of a Stochastic Segmentation Network (module docstring).

    ``SSNLoss(num_mc_samples=20)(distribution, target)``:

    - ``distribution``: the SSN's logit distribution with batch shape ``(B,)`` and event size ``C * N``, flattened
      class-major (``SSNHead.distribution`` / an :class:`~monai_unc.networks.SSNNetwork` in training mode; any
      ``torch.distributions`` object with ``rsample`` and that layout works). A plain logit tensor
      ``(B, C, *spatial)`` (the mean an SSN returns in eval mode) is taken as a point mass: the loss is then the
      cross-entropy, so validation loops that call the network in eval mode keep working.
    - ``target``: label map ``(B, *spatial)`` or ``(B, 1, *spatial)`` (integer or integral float values in
      ``[0, C)``).

    Args:
        num_mc_samples: ``M`` (default 20, the authors' setting).
        normalize: divide the per-image log-likelihood by the number of voxels (default; see the module
            docstring); ``False``: the summed form.
        antithetic: draw ``M / 2`` samples and use each with its mirror image about the mean (``mu +- dz``), the
            variance reduction of the authors' code; needs an even ``M``.

    Returns the mean over the batch of ``-(logsumexp_m sum_i log softmax(eta_m)_{i, y_i} - log M) [/ N]``.

    Example:
        >>> import torch
        >>> from monai_unc.networks import SSNHead, SSNLoss, SSNNetwork
        >>> _ = torch.manual_seed(0)
        >>> net = SSNNetwork(torch.nn.Conv3d(1, 8, 3, padding=1), SSNHead(8, num_classes=2, rank=2)).train()
        >>> x, y = torch.rand(2, 1, 4, 4, 4), torch.randint(0, 2, (2, 4, 4, 4))
        >>> loss = SSNLoss(num_mc_samples=4, antithetic=True)(net(x), y)
        >>> loss.shape, bool(loss > 0)
        (torch.Size([]), True)
        >>> loss.backward()
    """

    def __init__(self, num_mc_samples: int = 20, normalize: bool = True, antithetic: bool = False) -> None:
        super().__init__()
        # a numpy integer is an integer (found by hostile testing: np.int64(4) was refused as "not an integer >= 1")
        if not is_int(num_mc_samples) or num_mc_samples < 1:
            raise ValueError(f"num_mc_samples must be an integer >= 1, got {num_mc_samples!r}")
        num_mc_samples = int(num_mc_samples)
        self.normalize = check_bool(normalize, "normalize")  # a string "no" is truthy: never taken as True
        self.antithetic = check_bool(antithetic, "antithetic")
        if self.antithetic and num_mc_samples % 2:
            raise ValueError(f"antithetic sampling needs an even num_mc_samples, got {num_mc_samples}")
        self.num_mc_samples = num_mc_samples

    def extra_repr(self) -> str:
        """The settings shown in ``repr``."""
        return f"num_mc_samples={self.num_mc_samples}, normalize={self.normalize}, antithetic={self.antithetic}"

    def _samples(self, distribution: Distribution) -> torch.Tensor:
        m = self.num_mc_samples
        if not self.antithetic:
            return distribution.rsample((m,))
        half = distribution.rsample((m // 2,))
        mean = distribution.mean.unsqueeze(0)
        d = half - mean
        return torch.cat([mean + d, mean - d])

    def forward(self, distribution: Distribution | torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss of a batch.

        Args:
            distribution: the SSN's logit distribution, or mean logits ``(B, C, *spatial)`` (a point mass).
            target: label map ``(B, *spatial)`` or ``(B, 1, *spatial)``.

        Returns:
            The mean over the batch of the negative log-likelihood, a 0-dim tensor. ``ValueError`` for an empty
            batch (no mean to take).
        """
        if isinstance(target, torch.Tensor) and (target.ndim == 0 or target.numel() == 0):
            raise ValueError(f"SSNLoss: target is empty (shape {tuple(target.shape)}): a batch needs at least one "
                             "image with voxels")
        if isinstance(distribution, torch.Tensor):  # point mass at the given logits
            logits = distribution.as_tensor() if hasattr(distribution, "as_tensor") else distribution
            if logits.ndim < 3:
                raise ValueError(f"logits must be (B, C, *spatial), got shape {tuple(logits.shape)}")
            y = _labels(target, logits.shape[0], logits.ndim - 2)
            if y.shape[1:] != logits.shape[2:]:
                raise ValueError(f"target spatial shape {tuple(y.shape[1:])} != logits' {tuple(logits.shape[2:])}")
            return -ssn_log_likelihood(logits.unsqueeze(0), y, self.normalize).mean()  # checks the labels' range
        if not isinstance(distribution, Distribution) or not distribution.has_rsample:
            raise TypeError(
                "distribution must be a torch.distributions object with rsample (e.g. SSNHead.distribution), got "
                f"{type(distribution).__name__}"
            )
        if len(distribution.batch_shape) != 1 or len(distribution.event_shape) != 1:
            raise ValueError(
                "distribution must have batch shape (B,) and a flat event (C * N,) (one distribution per image), "
                f"got batch {tuple(distribution.batch_shape)}, event {tuple(distribution.event_shape)}"
            )
        b, e = distribution.batch_shape[0], distribution.event_shape[0]
        y = _labels(target, b, len(distribution.spatial_shape) if isinstance(distribution, SSNDistribution) else None)
        spatial = tuple(y.shape[1:])
        n = math.prod(spatial)
        if isinstance(distribution, SSNDistribution) and distribution.spatial_shape != spatial:
            raise ValueError(
                f"target spatial shape {spatial} does not match the distribution's {distribution.spatial_shape}"
            )
        if e % n or e // n < 2:
            raise ValueError(
                f"distribution event size {e} is not C * N with C >= 2 classes and N = {n} voxels of the target"
            )
        c = e // n
        check_labels(y, "target", num_classes=c)
        with no_autocast(y.device):
            if isinstance(distribution, SSNDistribution):
                # the same draws as rsample((M,)), consumed one at a time: one draw in memory, not M
                tgt = y.reshape(b, n)
                per_sample = [
                    _sample_log_likelihood(s.reshape(b, c, n), tgt)
                    for s in distribution.iter_rsample(self.num_mc_samples, antithetic=self.antithetic)
                ]
                ll = _log_mean_exp(per_sample, n, self.normalize)
                return -ll.to(torch.promote_types(distribution.loc.dtype, torch.float32)).mean()
            samples = self._samples(distribution).reshape(self.num_mc_samples, b, c, *spatial)
            return -ssn_log_likelihood(samples, y, self.normalize).mean()
