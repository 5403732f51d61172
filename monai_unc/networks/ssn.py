"""Stochastic Segmentation Networks: a low-rank multivariate normal over the logits of all voxels and classes.

Monteiro, Le Folgoc, Coelho de Castro, Pawlowski, Marques, Kamnitsas, van der Wilk, Glocker: *Stochastic
Segmentation Networks: Modelling Spatially Correlated Aleatoric Uncertainty*, NeurIPS 2020.

A backbone's last feature map ``f`` (``(B, F, *spatial)``) goes through three 1x1 convolutions:

    mu      = conv_mean(f)                      (B, C, *spatial)        mean logits
    D       = exp(conv_log_diag(f)) + eps       (B, C, *spatial)        diagonal variance, floor eps
    P       = conv_factor(f)                    (B, R, C, *spatial)     rank-R covariance factor

and the logits of the whole image are ``eta ~ N(mu, P P^T + diag(D))`` with the covariance taken over all voxels
and classes jointly. Sampling is by reparameterisation, ``eta = mu + P z_R + sqrt(D) * z_D`` with standard normal
``z_R`` (R values per image) and ``z_D`` (one per logit): one draw is a spatially coherent segmentation
hypothesis.

Flattening (the event of the distribution): a logit map ``(B, C, *spatial)`` is flattened class-major, exactly
as ``tensor.reshape(B, -1)`` does: event index ``e = c * N + n`` with ``N = prod(spatial)`` and ``n`` the
row-major (C-order) index of the voxel. So ``distribution.loc[b, c * N + n]`` is the mean logit of class ``c`` at
voxel ``n``, ``distribution.cov_diag`` is indexed alike, and ``distribution.cov_factor[b, c * N + n, r]`` is
column ``r`` of ``P``. :meth:`SSNDistribution.logits` undoes it (``(..., B, C, *spatial)``).

Memory: the factor holds ``B x R x C x N`` values: 26.5 M floats (106 MB in float32) at 96^3 voxels, 3 classes
and rank 10, against (C N)^2 = 7e12 entries (28 TB) for a full covariance. :class:`SSNDistribution` is a
:class:`torch.distributions.LowRankMultivariateNormal` that (1) builds the small R x R "capacitance" matrix only
when a density or entropy is asked for (the stock class factorises it on construction: an extra pass over the
factor and a Cholesky that sampling never needs), and (2) samples with one batched matrix product per image
instead of broadcasting the factor over the sample dimension (which copies the factor once per sample). See
``benchmarks/bench_ssn.py``.

Modes of :class:`SSNHead` / :class:`SSNNetwork`: in ``eval()`` the plain forward returns the mean logits ``mu``
(only the mean convolution runs), so a trained SSN drops into any MONAI inferer, sliding window or bundle; in
``train()`` it returns the distribution (what :class:`~monai_unc.networks.SSNLoss` takes); inside
:func:`ssn_sampling` it returns one reparameterised logit sample per call (what
:class:`~monai_unc.inferers.SSNSource` uses).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.distributions import Distribution, LowRankMultivariateNormal
from torch.distributions.utils import _standard_normal, lazy_property

from .._utils import check_bool, exceeds, is_finite_real, is_int, no_autocast, warn_nan

__all__ = [
    "IntensityMask",
    "SSNParams",
    "SSNDistribution",
    "SSNHead",
    "SSNNetwork",
    "lowrank_distribution",
    "mirrored_ssn_noise",
    "sample_logits",
    "ssn_sampling",
    "find_ssn_heads",
]

_TRAIN_OUTPUTS = ("distribution", "raw")


class SSNParams(NamedTuple):
    """The parameters of an SSN's logit distribution, in image layout (float32 or float64).

    Attributes:
        mean: ``(B, C, *spatial)`` mean logits ``mu``.
        cov_diag: ``(B, C, *spatial)`` diagonal variance ``D``.
        cov_factor: ``(B, R, C, *spatial)`` covariance factor ``P``.

    Example:
        >>> import torch
        >>> from monai_unc.networks import SSNParams
        >>> _ = torch.manual_seed(0)
        >>> params = SSNParams(torch.zeros(1, 2, 4, 4), torch.ones(1, 2, 4, 4), 0.5 * torch.randn(1, 3, 2, 4, 4))
        >>> params.rank
        3
    """

    mean: torch.Tensor
    cov_diag: torch.Tensor
    cov_factor: torch.Tensor

    @property
    def rank(self) -> int:
        """``R``, the rank of the covariance factor."""
        return int(self.cov_factor.shape[1])


def _check_params(mean: torch.Tensor, cov_diag: torch.Tensor, cov_factor: torch.Tensor) -> None:
    # found by hostile testing: numpy arrays failed with an AttributeError, a complex mean drew complex "logits"
    for name, value in (("mean", mean), ("cov_diag", cov_diag), ("cov_factor", cov_factor)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        if value.is_complex():
            raise TypeError(f"{name} must be real, got {value.dtype}")
    if mean.ndim < 3:
        raise ValueError(f"mean must be (B, C, *spatial), got shape {tuple(mean.shape)}")
    if mean.shape[0] == 0 or mean[0].numel() == 0:
        raise ValueError(f"mean is empty (shape {tuple(mean.shape)}): an SSN distribution needs at least one image "
                         "with voxels")
    if cov_diag.shape != mean.shape:
        raise ValueError(f"cov_diag must have the shape of mean {tuple(mean.shape)}, got {tuple(cov_diag.shape)}")
    if cov_factor.ndim != mean.ndim + 1 or cov_factor.shape[0] != mean.shape[0] or (
        cov_factor.shape[2:] != mean.shape[1:]
    ):
        raise ValueError(
            f"cov_factor must be (B, R, C, *spatial) = (B, R, {', '.join(map(str, mean.shape[1:]))}) with B = "
            f"{mean.shape[0]}, got {tuple(cov_factor.shape)}"
        )
    if cov_factor.shape[1] < 1:
        raise ValueError("cov_factor must have rank R >= 1")


class SSNDistribution(LowRankMultivariateNormal):
    """``LowRankMultivariateNormal`` over the flattened logits of an image batch, with the spatial layout attached.

    Batch shape ``(B,)``, event size ``C * N`` (flattening in the module docstring). Differences from the stock class
    (same distribution, same ``rsample`` draws for a given random state up to floating-point rounding): the
    capacitance matrix (needed by ``log_prob``, ``entropy``, ``precision_matrix``) is computed lazily; ``rsample``
    does not copy the factor per sample; it and the dense ``covariance_matrix`` / ``scale_tril`` run outside
    ``torch.autocast`` (in the parameters' float32 or float64); ``log_prob``, ``entropy`` and ``precision_matrix``
    are computed in float64 (returned in the parameters' dtype), ``log_prob`` by a formula without the stock one's
    cancellation (float32 was hundreds of nats off at the head's floor ``D = 1e-5``); ``cov_diag`` may contain
    zeros (a deterministic logit) for sampling, but then the covariance is singular: ``log_prob`` / ``entropy`` /
    ``precision_matrix`` are NaN with a ``UserWarning`` (also where float64 cannot factorise the capacitance).

    Build it with :func:`lowrank_distribution` or :meth:`SSNHead.distribution`.

    Args:
        loc: ``(B, C * N)`` mean.
        cov_factor: ``(B, C * N, R)`` factor.
        cov_diag: ``(B, C * N)`` diagonal.
        spatial_shape: the spatial shape whose product is ``N``.
        validate_args: as in ``torch.distributions``.

    Example:
        >>> from monai_unc.networks import lowrank_distribution
        >>> import torch
        >>> from monai_unc.networks import SSNParams
        >>> _ = torch.manual_seed(0)
        >>> params = SSNParams(torch.zeros(1, 2, 4, 4), torch.ones(1, 2, 4, 4), 0.5 * torch.randn(1, 3, 2, 4, 4))
        >>> dist = lowrank_distribution(*params)
        >>> dist.batch_shape, dist.event_shape, dist.rank
        (torch.Size([1]), torch.Size([32]), 3)
        >>> dist.logits((5,)).shape, dist.mean_logits.shape
        (torch.Size([5, 1, 2, 4, 4]), torch.Size([1, 2, 4, 4]))
    """

    def __init__(
        self,
        loc: torch.Tensor,
        cov_factor: torch.Tensor,
        cov_diag: torch.Tensor,
        spatial_shape: Sequence[int],
        validate_args: bool | None = False,
    ) -> None:
        if loc.ndim != 2 or cov_diag.shape != loc.shape or cov_factor.ndim != 3 or (
            cov_factor.shape[:2] != loc.shape
        ):
            raise ValueError(
                "SSNDistribution takes loc and cov_diag (B, C*N) and cov_factor (B, C*N, R); got "
                f"{tuple(loc.shape)}, {tuple(cov_diag.shape)}, {tuple(cov_factor.shape)}"
            )
        spatial_shape = tuple(int(s) for s in spatial_shape)
        n = math.prod(spatial_shape)
        if n < 1 or loc.shape[1] % n:
            raise ValueError(f"event size {loc.shape[1]} is not a multiple of prod(spatial_shape {spatial_shape})")
        self.spatial_shape = spatial_shape
        self.num_classes = loc.shape[1] // n
        self.loc = loc
        self.cov_diag = cov_diag
        self.cov_factor = cov_factor
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        # dims of the (B, C, *spatial) map along which rsample mirrors z_D (set by a head inside mirrored_ssn_noise)
        self._noise_flip: tuple[int, ...] = ()
        Distribution.__init__(self, loc.shape[:1], loc.shape[1:], validate_args=validate_args)

    @lazy_property
    def _density_factors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """float64 ``(W, D, L, no_density)``: factor, diagonal, Cholesky factor of the capacitance, flags per image.

        ``L`` factorises the capacitance ``K = I + W^T D^-1 W`` (``R x R`` per image); ``no_density`` ``(B,)`` marks
        the images without a density.

        The stock float32 Woodbury evaluation ``diff^T D^-1 diff - |L^-1 W^T D^-1 diff|^2``
        subtracts two terms of size ``|W|^2 / D`` that nearly cancel; in earlier versions, at the head's own floor
        ``D = 1e-5`` with factor entries near 10 (rank 10, a 2 x 8 x 8 map) ``log_prob`` of a draw was 1538 against 435,
        and a positive ``D`` below float32's smallest normal number gave NaN / inf without a word. Here ``K`` and ``L``
        are float64; a zero variance, or a ``K`` float64 cannot factorise (a pivot ``L_jj^2`` of its Cholesky
        factorisation within its rounding ``R eps K_jj`` of zero, where every pivot of the exact ``K`` is at least 1),
        makes the image's ``L`` NaN with a warning (its covariance is singular: no density). The rounding floor makes
        the verdict the same on every BLAS: whether an exactly singular float64 ``K`` factorises depends on its last
        bit.
        """
        w = self._unbroadcasted_cov_factor.double()
        d = self._unbroadcasted_cov_diag.double()
        singular = (d == 0).any(-1)  # (B,)
        # the factorisation of those images is NaN: from rank 2 their capacitance held inf - inf and the Cholesky
        # factorisation raised LinAlgError (found by hostile testing); the other images keep their density
        d = torch.where(singular.unsqueeze(-1), torch.ones_like(d), d)
        with no_autocast(w.device):
            k = torch.matmul(w.mT / d.unsqueeze(-2), w)
            k = k + torch.eye(k.shape[-1], dtype=k.dtype, device=k.device)
            tril, info = torch.linalg.cholesky_ex(k)
        # K = I + W^T D^-1 W has every pivot >= 1 (each Schur complement of I + a PSD matrix is >= I); pivot j is
        # K_jj less the squares before it, so it carries rounding of about R eps K_jj, and one within that of zero
        # lost the I: the factorisation of an exactly singular float64 K succeeded or failed by the last bit, which
        # depends on the BLAS (found when Intel MKL's AVX-512 path factorised a K that another machine's refused, with
        # a tiny pivot and a log det far off). Against its own K_jj, not K's largest entry: diag(4e15, 1) is exact
        pivots = tril.diagonal(dim1=-2, dim2=-1).square()
        floor = k.shape[-1] * torch.finfo(k.dtype).eps * k.diagonal(dim1=-2, dim2=-1)
        info = torch.where((info == 0) & ~(pivots > floor).all(-1), torch.ones_like(info), info)
        failed = (info != 0) & ~singular
        if bool(singular.any()):  # found by hostile testing: entropy / log_prob were NaN without a word
            warn_nan("SSNDistribution: cov_diag holds zero variances (deterministic logits), so the covariance is "
                     "singular and has no density: log_prob, entropy and precision_matrix are NaN", stacklevel=5)
        if bool(failed.any()):
            warn_nan("SSNDistribution: the covariance is numerically singular in float64 (diagonal variances tiny "
                     "against the factor): log_prob, entropy and precision_matrix are NaN", stacklevel=5)
        bad = singular | (info != 0)
        if bool(bad.any()):
            tril = torch.where(bad.view(-1, 1, 1), torch.nan, tril)
        return w, d, tril, bad

    @property
    def _capacitance_tril(self) -> torch.Tensor:  # type: ignore[override]
        """The float64 Cholesky factor of ``I + P^T D^-1 P`` (NaN for images without a density)."""
        return self._density_factors[2]

    def _logdet(self) -> torch.Tensor:
        """float64 ``log det(P P^T + D)`` per image ``(B,)``: ``2 sum log diag L + sum log D``."""
        _, d, tril, _ = self._density_factors
        return 2.0 * tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) + d.log().sum(-1)

    # the density and the dense matrices run outside torch.autocast, as rsample and the capacitance do (found by hostile
    # testing: their matrix products ran in bfloat16 / float16, log_prob of a 2 x 24^3 map of rank 10 was 86 nats off
    # under CPU bfloat16 autocast, and the lazily cached matrices kept such values after the block)
    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """The log-density of ``value`` ``(*sample_shape, B, C*N)`` (or broadcastable to it), ``(*sample_shape, B)``.

        Computed in float64 outside ``torch.autocast`` and returned in the parameters' dtype, without the
        cancellation of the stock formula (see ``_density_factors``): with ``a = K^-1 W^T D^-1 (x - mu)``, the
        posterior mean of the latent ``z_R``, and ``r = x - mu - W a``, the Mahalanobis term is
        ``r^T D^-1 r + |a|^2``, a sum of two non-negative terms (and ``a`` minimises it, so an error in ``a`` changes
        it to second order only). Memory: float64 copies of the factor and of ``value``.
        """
        if self._validate_args:
            self._validate_sample(value)
        w, d, tril, _ = self._density_factors
        with no_autocast(self.loc.device):
            diff = value.double() - self.loc.double()  # (*S, B, E)
            b, e = self.loc.shape
            shape = diff.shape[:-1]
            x = diff.reshape(-1, b, e).permute(1, 2, 0)  # (B, E, S): the factor is not copied per sample
            a = torch.cholesky_solve(torch.matmul(w.mT, x / d.unsqueeze(-1)), tril)  # (B, R, S)
            r = x - torch.matmul(w, a)
            m = (r * r / d.unsqueeze(-1)).sum(1) + (a * a).sum(1)  # (B, S)
            out = -0.5 * (e * math.log(2 * math.pi) + self._logdet().unsqueeze(-1) + m)
            return out.T.reshape(shape).to(self.loc.dtype)

    def entropy(self) -> torch.Tensor:
        """The entropy per image ``(B,)``, from the float64 factorisation, in the parameters' dtype."""
        e = self.loc.shape[-1]
        return (0.5 * e * (1.0 + math.log(2 * math.pi)) + 0.5 * self._logdet()).to(self.loc.dtype)

    @lazy_property
    def covariance_matrix(self) -> torch.Tensor:  # type: ignore[override]
        """``P P^T + diag(D)`` per image ``(B, C*N, C*N)`` (dense: small maps only), outside ``torch.autocast``."""
        with no_autocast(self.loc.device):
            return LowRankMultivariateNormal.__dict__["covariance_matrix"].wrapped(self)

    @lazy_property
    def precision_matrix(self) -> torch.Tensor:  # type: ignore[override]
        """The inverse covariance per image (dense: small maps only), from the float64 factorisation."""
        w, d, tril, _ = self._density_factors
        with no_autocast(self.loc.device):
            a = torch.linalg.solve_triangular(tril, w.mT / d.unsqueeze(-2), upper=False)
            return (torch.diag_embed(d.reciprocal()) - torch.matmul(a.mT, a)).to(self.loc.dtype)

    @lazy_property
    def scale_tril(self) -> torch.Tensor:  # type: ignore[override]
        """The Cholesky factor of the covariance per image (dense: small maps only), outside ``torch.autocast``."""
        with no_autocast(self.loc.device):
            return LowRankMultivariateNormal.__dict__["scale_tril"].wrapped(self)

    @property
    def rank(self) -> int:
        """``R``, the rank of the covariance factor."""
        return int(self.cov_factor.shape[-1])

    def expand(self, batch_shape: Sequence[int], _instance: Any = None) -> SSNDistribution:
        """As ``torch.distributions.Distribution.expand``, keeping the spatial layout."""
        batch_shape = torch.Size(batch_shape)
        if batch_shape == self.batch_shape:
            return self
        raise NotImplementedError("SSNDistribution cannot be expanded to another batch shape")

    def rsample(self, sample_shape: Sequence[int] | torch.Size = ()) -> torch.Tensor:
        """Reparameterised draws ``(*sample_shape, B, C*N)``: ``loc + P z_R + sqrt(D) z_D``.

        Draws ``z_R`` then ``z_D`` with the shapes the stock class uses, so the draws equal
        ``LowRankMultivariateNormal.rsample`` for the same random state (up to rounding).
        """
        shape = self._extended_shape(torch.Size(sample_shape))
        w = self._unbroadcasted_cov_factor
        with no_autocast(self.loc.device):
            eps_w = _standard_normal(shape[:-1] + (self.rank,), dtype=self.loc.dtype, device=self.loc.device)
            eps_d = _standard_normal(shape, dtype=self.loc.dtype, device=self.loc.device)
            if self._noise_flip:  # z_D laid out as the unmirrored map's (mirrored_ssn_noise)
                image = (-1, *self.loc.shape[:1], self.num_classes, *self.spatial_shape)
                eps_d = eps_d.reshape(image).flip([a + 1 for a in self._noise_flip]).reshape(shape)
            s = eps_w.shape[:-2]  # sample dims
            b, r = eps_w.shape[-2:]
            # loc + (B, S, R) @ (B, R, CN) -> (B, S, CN): one fused product per image, the factor is not copied
            # per sample; then + sqrt(D) * z_D in place (the product's backward does not need its value), and
            # (S, B, CN) back (a view when B = 1)
            z = eps_w.reshape(-1, b, r).transpose(0, 1)
            out = torch.baddbmm(self.loc.unsqueeze(1), z, w.mT)
            eps_d = eps_d.reshape(-1, b, out.shape[-1]).transpose(0, 1)
            out.addcmul_(self._unbroadcasted_cov_diag.sqrt().unsqueeze(1), eps_d)
            return out.transpose(0, 1).reshape(*s, b, -1)

    def iter_rsample(self, num_samples: int, antithetic: bool = False) -> Iterator[torch.Tensor]:
        """``num_samples`` reparameterised draws ``(B, C*N)``, one at a time.

        The noise of all draws is drawn first, as ``rsample((num_samples,))`` draws it, so the draws are the rows
        of ``rsample((num_samples,))`` for the same random state; but only one draw exists at a time (a loss that
        consumes each draw before the next one keeps one draw in memory instead of ``num_samples``).
        ``antithetic=True`` draws ``num_samples / 2`` noise vectors and yields ``mu + dz`` for all of them, then
        ``mu - dz`` (the order of ``cat([mu + d, mu - d])``).
        """
        n = _positive_int(num_samples, "num_samples")  # found by hostile testing: 2.5 drew 2, 0 nothing
        antithetic = check_bool(antithetic, "antithetic")
        if antithetic and n % 2:
            raise ValueError(f"antithetic sampling needs an even number of samples, got {n}")
        m = n // 2 if antithetic else n
        shape = self._extended_shape(torch.Size((m,)))
        w = self._unbroadcasted_cov_factor
        eps_w = _standard_normal(shape[:-1] + (self.rank,), dtype=self.loc.dtype, device=self.loc.device)
        eps_d = _standard_normal(shape, dtype=self.loc.dtype, device=self.loc.device)
        sqrt_d = self._unbroadcasted_cov_diag.sqrt()
        for sign in (1.0, -1.0) if antithetic else (1.0,):
            for i in range(m):
                with no_autocast(self.loc.device):  # not held across the yield
                    out = torch.baddbmm(self.loc.unsqueeze(1), eps_w[i].unsqueeze(1), w.mT, alpha=sign)[:, 0]
                    out = torch.addcmul(out, sqrt_d, eps_d[i], value=sign)
                yield out

    def logits(self, sample_shape: Sequence[int] | torch.Size = ()) -> torch.Tensor:
        """``rsample(sample_shape)`` reshaped to logit maps ``(*sample_shape, B, C, *spatial)``."""
        x = self.rsample(sample_shape)
        return x.reshape(*x.shape[:-1], self.num_classes, *self.spatial_shape)

    @property
    def mean_logits(self) -> torch.Tensor:
        """The mean as logit maps ``(B, C, *spatial)``."""
        return self.loc.reshape(self.loc.shape[0], self.num_classes, *self.spatial_shape)


def lowrank_distribution(
    mean: torch.Tensor, cov_diag: torch.Tensor, cov_factor: torch.Tensor, validate_args: bool | None = False
) -> SSNDistribution:
    """The SSN distribution from parameters in image layout.

    Flattened class-major (module docstring). Half-precision inputs are promoted to float32. No copy of
    ``mean``/``cov_diag`` is made when they are contiguous; the factor is a transposed view.

    Args:
        mean: ``(B, C, *spatial)`` mean logits.
        cov_diag: ``(B, C, *spatial)`` diagonal variance.
        cov_factor: ``(B, R, C, *spatial)`` covariance factor.
        validate_args: as in ``torch.distributions``.

    Returns:
        :class:`SSNDistribution` with batch shape ``(B,)`` and event size ``C * N``.

    Raises:
        ValueError: for mismatched shapes, a negative variance in ``cov_diag``, or a NaN or infinite value in any
            parameter (every draw would be non-finite).
        TypeError: a parameter that is not a real-valued ``torch.Tensor`` (a numpy array, a complex tensor).

    Example:
        >>> from monai_unc.networks import lowrank_distribution
        >>> import torch
        >>> from monai_unc.networks import SSNParams
        >>> _ = torch.manual_seed(0)
        >>> params = SSNParams(torch.zeros(1, 2, 4, 4), torch.ones(1, 2, 4, 4), 0.5 * torch.randn(1, 3, 2, 4, 4))
        >>> dist = lowrank_distribution(params.mean, params.cov_diag, params.cov_factor)
        >>> dist.event_shape, round(float(dist.entropy()), 2)
        (torch.Size([32]), 48.8)
    """
    _check_params(mean, cov_diag, cov_factor)
    if not bool((cov_diag >= 0).all()):  # also NaN: sqrt(D) would make every draw NaN, and log_prob / entropy too
        raise ValueError("cov_diag must hold variances >= 0 (no negative or NaN values)")
    # found by hostile testing: a NaN or infinite mean, an infinite variance or a NaN factor gave non-finite draws
    # without a word
    for name, value in (("mean", mean), ("cov_diag", cov_diag), ("cov_factor", cov_factor)):
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} must be finite (no NaN or infinite values): every draw would be non-finite")
    return _distribution(mean, cov_diag, cov_factor, validate_args)


def _distribution(
    mean: torch.Tensor, cov_diag: torch.Tensor, cov_factor: torch.Tensor, validate_args: bool | None = False
) -> SSNDistribution:
    """:func:`lowrank_distribution` without the checks, for a head's own parameters (``D >= epsilon`` by design)."""
    _check_params(mean, cov_diag, cov_factor)
    dtype = torch.promote_types(mean.dtype, torch.float32)
    b, r = cov_factor.shape[:2]
    loc = mean.to(dtype).reshape(b, -1)
    diag = cov_diag.to(dtype).reshape(b, -1)
    factor = cov_factor.to(dtype).reshape(b, r, -1).transpose(1, 2)  # (B, C*N, R), e = c * N + n
    return SSNDistribution(loc, factor, diag, mean.shape[2:], validate_args=validate_args)


def sample_logits(params: SSNParams, num_samples: int | None = None) -> torch.Tensor:
    """Reparameterised logit samples from image-layout parameters.

    ``mu + sum_r P_r z_r + sqrt(D) z_D`` in full precision.

    Args:
        params: :class:`SSNParams`.
        num_samples: number of draws, or None for one draw without a sample axis.

    Returns:
        ``(B, C, *spatial)`` when ``num_samples`` is None, else ``(num_samples, B, C, *spatial)``.

    Raises:
        ValueError: for ``num_samples`` other than None or an integer >= 1, and as :func:`lowrank_distribution`.
        TypeError: as :func:`lowrank_distribution`.

    Example:
        >>> from monai_unc.networks import sample_logits
        >>> import torch
        >>> from monai_unc.networks import SSNParams
        >>> _ = torch.manual_seed(0)
        >>> params = SSNParams(torch.zeros(1, 2, 4, 4), torch.ones(1, 2, 4, 4), 0.5 * torch.randn(1, 3, 2, 4, 4))
        >>> sample_logits(params).shape, sample_logits(params, num_samples=4).shape
        (torch.Size([1, 2, 4, 4]), torch.Size([4, 1, 2, 4, 4]))
    """
    if num_samples is not None:
        num_samples = _positive_int(num_samples, "num_samples")
    return _sample(lowrank_distribution(*params), num_samples)


def _sample(d: SSNDistribution, num_samples: int | None = None, noise_flip: tuple[int, ...] = ()) -> torch.Tensor:
    if noise_flip:
        if max(noise_flip) >= 2 + len(d.spatial_shape):
            raise ValueError(f"axes {noise_flip} of mirrored_ssn_noise are not spatial dims of the head's "
                             f"(B, C, *spatial) map of {2 + len(d.spatial_shape)} dims")
        d._noise_flip = noise_flip
    return d.logits(() if num_samples is None else (num_samples,))


def _conv(spatial_dims: int) -> type[nn.Module]:
    if spatial_dims == 1:
        return nn.Conv1d
    if spatial_dims == 2:
        return nn.Conv2d
    if spatial_dims == 3:
        return nn.Conv3d
    raise ValueError(f"spatial_dims must be 1, 2 or 3, got {spatial_dims!r}")


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    # a numpy integer is an integer (found by hostile testing: np.int64(4) was refused as "not an integer >= 1")
    if not is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _prepare_mask(mask: torch.Tensor | None, ref: torch.Tensor) -> torch.Tensor | None:
    """``(B, *spatial)`` / ``(B, 1, *spatial)`` / broadcastable mask -> ``(B, 1, *spatial)`` in ``ref``'s dtype."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    m = mask.as_tensor() if hasattr(mask, "as_tensor") else mask
    spatial = ref.shape[2:]
    if m.ndim == ref.ndim - 1:
        m = m.unsqueeze(1)
    if m.ndim != ref.ndim or m.shape[1] != 1 or m.shape[2:] != spatial or m.shape[0] not in (1, ref.shape[0]):
        raise ValueError(
            f"mask must be (B, *spatial) or (B, 1, *spatial) matching the features' (B, *spatial) = "
            f"({ref.shape[0]}, {', '.join(map(str, spatial))}), got {tuple(mask.shape)}"
        )
    if m.dtype == torch.bool:
        return m.to(ref.dtype)
    m = m.to(ref.dtype)
    if not bool(((m == 0) | (m == 1)).all()):
        raise ValueError("mask must be binary (bool, or 0/1 values)")
    return m


class SSNHead(nn.Module):
    """SSN head: a backbone's feature map -> low-rank multivariate normal over the logits (module docstring).

    Args:
        in_channels: channels ``F`` of the feature map it reads (e.g. a MONAI ``UNet`` built with
            ``out_channels=F``). As a fallback it can read a network's logits (``in_channels = num_classes``,
            ``input_activation=None``, ``identity_mean=True`` keeps the network's logits as the initial mean).
        num_classes: ``C`` (>= 2; softmax over classes).
        rank: ``R`` of the covariance factor (default 10, as in the paper's BraTS experiments).
        spatial_dims: 2 or 3 (1 also works).
        epsilon: floor of the diagonal variance, ``D = exp(.) + epsilon`` (default 1e-5, the authors' value).
        input_activation: ``"relu"`` (default, as the authors' code applies it to the backbone's last features,
            which in a MONAI ``UNet`` come out of a plain convolution) or ``None`` (features already activated,
            e.g. nnU-Net's decoder, or logits).
        identity_mean: initialise the mean convolution to the identity (needs ``in_channels == num_classes``).
        init_variance: the logits' variance at initialisation (default 1e-3): the factor convolution starts at zero
            and the log-variance convolution at zero weights with bias ``log(init_variance)``, so training starts as
            cross-entropy training of the mean and the covariance grows where the labels ask for it. ``None`` keeps
            PyTorch's default initialisation of both (the authors' code). Why: the Monte Carlo loss is dominated by
            its best draw (the per-image log-likelihoods of the draws differ by hundreds of nats), so draws that are
            wrong cost almost nothing; from a large random initial covariance, training on the 3D toy set drifted
            to a factor that flips the whole image (mean probabilities near 0.5 everywhere), also after a
            mean-only warm-up; from a small one it did not (docs/ssn.md). ValUES pretrains the mean for the same
            reason.
        train_output: what the forward returns in training mode: ``"distribution"`` (default; pair it with
            :class:`~monai_unc.networks.SSNLoss`) or ``"raw"``: the stacked raw convolution outputs
            ``(B, C * (2 + R), *spatial)`` (mean, log-variance before the floor, factor), a tensor that frameworks
            expecting tensors can pass around (nnU-Net's deep supervision list); turn it into the distribution with
            :meth:`distribution_from_raw`. The forward's ``mask`` (an :class:`SSNNetwork`'s ``mask_fn``) is applied
            to the raw outputs (:meth:`raw`).

    Forward ``head(features, mask=None)``: eval mode -> mean logits ``(B, C, *spatial)``; training mode -> see
    ``train_output``; inside :func:`ssn_sampling` -> one logit sample ``(B, C, *spatial)``.

    ``mask`` (``(B, *spatial)`` or ``(B, 1, *spatial)``, bool or 0/1): where the covariance is active. Outside it
    the factor rows are zeroed and the diagonal is ``epsilon`` (the authors zero the covariance outside the brain,
    where it otherwise grows without bound): logits there are the mean up to noise of standard deviation
    ``sqrt(epsilon)``.

    Example:
        >>> import torch
        >>> from monai_unc.networks import SSNHead
        >>> _ = torch.manual_seed(0)
        >>> head = SSNHead(in_channels=8, num_classes=3, rank=4, spatial_dims=2)
        >>> features = torch.randn(2, 8, 6, 6)
        >>> head.eval()(features).shape  # mean logits
        torch.Size([2, 3, 6, 6])
        >>> dist = head.train()(features)  # the distribution, for SSNLoss
        >>> dist.batch_shape, dist.event_shape, head.raw_channels
        (torch.Size([2]), torch.Size([108]), 18)
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        rank: int = 10,
        spatial_dims: int = 3,
        epsilon: float = 1e-5,
        input_activation: str | None = "relu",
        identity_mean: bool = False,
        train_output: str = "distribution",
        init_variance: float | None = 1e-3,
    ) -> None:
        super().__init__()
        self.in_channels = _positive_int(in_channels, "in_channels")
        self.num_classes = _positive_int(num_classes, "num_classes", 2)
        self.rank = _positive_int(rank, "rank")
        # numpy scalars are numbers (found by hostile testing: np.int64(2) / np.float32(1e-5) were refused)
        if not is_int(spatial_dims):
            raise ValueError(f"spatial_dims must be 1, 2 or 3, got {spatial_dims!r}")
        conv = _conv(spatial_dims)
        self.spatial_dims = int(spatial_dims)
        if not (is_finite_real(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be a positive float (variance floor), got {epsilon!r}")
        self.epsilon = float(epsilon)
        if input_activation not in ("relu", None):
            raise ValueError(f"input_activation must be 'relu' or None, got {input_activation!r}")
        self.input_activation = input_activation
        if train_output not in _TRAIN_OUTPUTS:
            raise ValueError(f"train_output must be one of {_TRAIN_OUTPUTS}, got {train_output!r}")
        self.train_output = train_output
        self.mean_conv = conv(in_channels, num_classes, kernel_size=1)
        self.log_cov_diag_conv = conv(in_channels, num_classes, kernel_size=1)
        self.cov_factor_conv = conv(in_channels, num_classes * rank, kernel_size=1)
        if init_variance is not None:
            if not (is_finite_real(init_variance) and init_variance > 0):
                raise ValueError(f"init_variance must be a positive float or None, got {init_variance!r}")
            with torch.no_grad():
                self.cov_factor_conv.weight.zero_()
                self.cov_factor_conv.bias.zero_()
                self.log_cov_diag_conv.weight.zero_()
                self.log_cov_diag_conv.bias.fill_(math.log(float(init_variance)))
        self.init_variance = None if init_variance is None else float(init_variance)
        if check_bool(identity_mean, "identity_mean"):
            if in_channels != num_classes:
                raise ValueError(
                    f"identity_mean needs in_channels == num_classes, got {in_channels} and {num_classes}"
                )
            with torch.no_grad():
                self.mean_conv.weight.zero_()
                self.mean_conv.weight.view(num_classes, num_classes).copy_(torch.eye(num_classes))
                self.mean_conv.bias.zero_()
        #: set by :func:`ssn_sampling`: the forward then returns one reparameterised sample
        self.sampling = False
        #: set by :func:`mirrored_ssn_noise`: the dims along which a sample's per-logit noise ``z_D`` is mirrored
        self.noise_flip: tuple[int, ...] = ()

    def fold_temperature(self, temperature: torch.Tensor | float, rescale_floor: bool = False) -> None:
        """Fold a temperature into the head in place.

        The logits ``eta ~ N(mu, diag(D) + P P^T)`` divided by ``t`` are ``N(mu / t, diag(D) / t^2 + (P / t)(P / t)^T)``
        (per class ``c`` for a vector ``t``).

        The mean and factor convolutions' weights and biases are divided by ``t_c`` (factor channel ``r C + c``
        by ``t_c``) and the log-variance bias is shifted by ``-2 log t_c``, so ``exp(.)`` becomes
        ``exp(.) / t_c^2``. The floor ``epsilon`` of ``D = exp(.) + epsilon`` is not a weight: the exact
        distribution needs the floor ``epsilon / t^2``, which no change of weights gives. So the fold is refused
        (``ValueError``) unless ``rescale_floor=True``, which also sets :attr:`epsilon` to ``epsilon / t^2``
        (scalar ``t`` or equal ``t_c`` only: the floor is one number). ``epsilon`` is a constructor argument and
        not part of the ``state_dict``: a folded head saved as a state dict must be rebuilt with
        ``SSNHead(..., epsilon=head.epsilon)``; otherwise wrap the network in
        :class:`~monai_unc.temperature.TemperatureScaled`, which divides every sample by ``t`` exactly.

        Args:
            temperature: ``t`` (positive), a number or a tensor of 1 or ``num_classes`` values.
            rescale_floor: also divide the variance floor by ``t^2`` (see above).

        Raises:
            TypeError: ``temperature`` is a bool (``True`` would be ``t = 1``: nothing folded, without a word), or
                ``rescale_floor`` is not a bool.
            ValueError: ``t`` not positive and finite, of the wrong size, or not foldable exactly (see above).
        """
        rescale_floor = check_bool(rescale_floor, "rescale_floor")  # a string "no" is truthy
        if isinstance(temperature, (bool, np.bool_)) or (
            isinstance(temperature, torch.Tensor) and temperature.dtype == torch.bool
        ) or (isinstance(temperature, np.ndarray) and temperature.dtype == np.bool_):
            raise TypeError(f"temperature must be a positive number or a tensor of numbers, got {temperature!r}")
        t = torch.as_tensor(temperature, dtype=torch.float64).detach().reshape(-1).cpu()
        if t.numel() not in (1, self.num_classes):
            raise ValueError(
                f"temperature must have 1 or num_classes={self.num_classes} values, got {t.numel()}"
            )
        if not bool(torch.isfinite(t).all()) or bool((t <= 0).any()):
            raise ValueError(f"temperature must be positive and finite, got {t.tolist()}")
        t = t.expand(self.num_classes)
        if not bool((t == 1).all()):
            if not rescale_floor:
                raise ValueError(
                    f"cannot fold a temperature into an SSN head exactly: its diagonal variance D = exp(.) + epsilon "
                    f"has the fixed floor epsilon={self.epsilon:g}, and D / t^2 needs the floor epsilon / t^2, which "
                    "no change of weights gives; wrap the network in monai_unc.temperature.TemperatureScaled instead "
                    "(or pass rescale_floor=True and rebuild the head with the new epsilon)"
                )
            if not bool((t == t[0]).all()):
                raise ValueError(
                    "rescale_floor needs a scalar temperature (or equal t_c): the floor epsilon is one number for all "
                    f"classes, got {t.tolist()}; wrap the network in monai_unc.temperature.TemperatureScaled instead"
                )
        r = self.rank
        inv = 1.0 / t  # (C,)
        with torch.no_grad():
            for conv, scale in ((self.mean_conv, inv), (self.cov_factor_conv, inv.repeat(r))):  # channel r C + c
                w = conv.weight
                s = scale.to(device=w.device, dtype=w.dtype)
                w.mul_(s.view(-1, *([1] * (w.ndim - 1))))
                if conv.bias is not None:
                    conv.bias.mul_(s.to(conv.bias.dtype))
            log_var = self.log_cov_diag_conv
            shift = (-2.0 * torch.log(t)).to(device=log_var.weight.device, dtype=log_var.weight.dtype)
            if log_var.bias is None:  # pragma: no cover - built with bias
                raise ValueError("the log-variance convolution has no bias to shift")
            log_var.bias.add_(shift)
        if rescale_floor:
            self.epsilon = float(self.epsilon / float(t[0]) ** 2)

    @property
    def raw_channels(self) -> int:
        """Channels of :meth:`raw`: ``C * (2 + R)``."""
        return self.num_classes * (2 + self.rank)

    def extra_repr(self) -> str:
        """The settings shown in ``repr``."""
        return (
            f"in_channels={self.in_channels}, num_classes={self.num_classes}, rank={self.rank}, "
            f"spatial_dims={self.spatial_dims}, epsilon={self.epsilon}, input_activation={self.input_activation}, "
            f"train_output={self.train_output!r}"
        )

    # -------------------------------------------------------------------------------- building blocks
    def _check_features(self, features: torch.Tensor) -> torch.Tensor:
        if not isinstance(features, torch.Tensor):
            raise TypeError(f"features must be a torch.Tensor, got {type(features).__name__}")
        if features.ndim != self.spatial_dims + 2 or features.shape[1] != self.in_channels:
            raise ValueError(
                f"features must be (B, {self.in_channels}, *spatial) with {self.spatial_dims} spatial dims, got "
                f"shape {tuple(features.shape)}"
            )
        f = features.as_tensor() if hasattr(features, "as_tensor") else features
        return torch.relu(f) if self.input_activation == "relu" else f

    def mean_logits(self, features: torch.Tensor) -> torch.Tensor:
        """The mean logits ``(B, C, *spatial)`` (only the mean convolution runs)."""
        return self.mean_conv(self._check_features(features))

    def raw(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Stacked raw outputs ``(B, C * (2 + R), *spatial)``.

        Mean, log-variance (before exp and floor), factor (channel ``2C + r * C + c`` is column ``r`` for class ``c``).
        With a ``mask``, outside it the factor is zero and the log-variance is the dtype's lowest value (``exp`` of it
        is 0), so that :meth:`distribution_from_raw` gives the masked distribution without the mask (found by
        hostile testing: an :class:`SSNNetwork` with ``mask_fn`` and ``train_output="raw"`` trained the covariance
        everywhere while its draws masked it).

        Args:
            features: ``(B, F, *spatial)`` feature map.
            mask: where the covariance is active (see the class docstring).

        Returns:
            ``(B, C * (2 + R), *spatial)`` raw outputs.
        """
        f = self._check_features(features)
        log_var, factor = self.log_cov_diag_conv(f), self.cov_factor_conv(f)
        m = _prepare_mask(mask, log_var)
        if m is not None:
            log_var = torch.where(m > 0, log_var, torch.finfo(log_var.dtype).min)
            factor = torch.where(m > 0, factor, 0.0)  # not factor * m: an infinite factor times 0 is NaN
        return torch.cat([self.mean_conv(f), log_var, factor], dim=1)

    def _params(
        self, mean: torch.Tensor, log_var: torch.Tensor, factor: torch.Tensor, mask: torch.Tensor | None
    ) -> SSNParams:
        """The one place where raw outputs become :class:`SSNParams`.

        ``D = exp(log_var) + epsilon`` inside the mask and exactly ``epsilon`` outside it, ``P = factor`` inside the
        mask and 0 outside it, reshaped to ``(B, R, C, *spatial)``; computed in float32 (or wider). The mask selects
        (``torch.where``, before the ``exp``) instead of multiplying: in earlier versions a log-variance above ~88.7
        outside the mask (``exp`` infinite in float32, where the covariance blows up and the mask exists for) gave
        ``inf * 0 = NaN`` in the diagonal, the loss and the draws.
        """
        dtype = torch.promote_types(mean.dtype, torch.float32)
        with no_autocast(mean.device):
            mean, log_var, factor = mean.to(dtype), log_var.to(dtype), factor.to(dtype)
            cov_factor = factor.reshape(factor.shape[0], self.rank, self.num_classes, *factor.shape[2:])
            m = _prepare_mask(mask, mean)
            if m is not None:
                # masked before the exp: exp(lowest) = 0 and its gradient is 0 (a where after the exp would pass
                # 0 * exp(inf) = NaN back to the log-variance)
                log_var = torch.where(m > 0, log_var, torch.finfo(dtype).min)
                cov_factor = torch.where(m.unsqueeze(1) > 0, cov_factor, 0.0)
            cov_diag = torch.exp(log_var) + self.epsilon
        return SSNParams(mean, cov_diag, cov_factor)

    def params_from_raw(self, raw: torch.Tensor, mask: torch.Tensor | None = None) -> SSNParams:
        """:class:`SSNParams` (float32 or wider) from :meth:`raw`'s output, with the variance floor and the mask."""
        if not isinstance(raw, torch.Tensor):
            raise TypeError(f"raw must be a torch.Tensor, got {type(raw).__name__}")
        if raw.ndim < 3 or raw.shape[1] != self.raw_channels:
            raise ValueError(
                f"raw must be (B, C * (2 + R), *spatial) = (B, {self.raw_channels}, ...), got {tuple(raw.shape)}"
            )
        raw = raw.as_tensor() if hasattr(raw, "as_tensor") else raw
        c = self.num_classes
        return self._params(raw[:, :c], raw[:, c : 2 * c], raw[:, 2 * c :], mask)

    def params(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> SSNParams:
        """:class:`SSNParams` of the logit distribution for ``features``.

        The three convolutions are kept apart: no concatenated copy of the factor.

        Args:
            features: ``(B, F, *spatial)`` feature map.
            mask: where the covariance is active (see the class docstring).

        Returns:
            :class:`SSNParams` (float32 or wider).
        """
        f = self._check_features(features)
        return self._params(self.mean_conv(f), self.log_cov_diag_conv(f), self.cov_factor_conv(f), mask)

    def distribution_from_raw(self, raw: torch.Tensor, mask: torch.Tensor | None = None) -> SSNDistribution:
        """:class:`SSNDistribution` from :meth:`raw`'s output (e.g. the ``train_output="raw"`` tensor).

        Args:
            raw: ``(B, C * (2 + R), *spatial)`` raw outputs.
            mask: where the covariance is active.

        Returns:
            :class:`SSNDistribution`.
        """
        return _distribution(*self.params_from_raw(raw, mask))

    def distribution(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> SSNDistribution:
        """``LowRankMultivariateNormal`` (:class:`SSNDistribution`) over the flattened logits.

        Batch shape ``(B,)``, event size ``C * N``, class-major (module docstring).

        Args:
            features: ``(B, F, *spatial)`` feature map.
            mask: where the covariance is active.

        Returns:
            :class:`SSNDistribution`.
        """
        return _distribution(*self.params(features, mask))

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> Any:
        """Mean logits (eval), the training output (train) or one logit sample (inside :func:`ssn_sampling`).

        Args:
            features: ``(B, F, *spatial)`` feature map.
            mask: where the covariance is active.

        Returns:
            ``(B, C, *spatial)`` logits, or the training output (see ``train_output``).
        """
        if self.sampling:
            return _sample(_distribution(*self.params(features, mask)), noise_flip=self.noise_flip)
        if self.training:
            if self.train_output == "raw":
                return self.raw(features, mask)
            return self.distribution(features, mask)
        return self.mean_logits(features)


class IntensityMask:
    """A ``mask_fn`` for :class:`SSNNetwork`: the region of interest where the covariance is active, from the input.

    ``mask = dilate(box_mean(x[:, channel]) > threshold)``: the local mean over a box of ``smooth`` voxels per axis
    (which averages the noise out) above ``threshold``, dilated by a box of ``dilate`` voxels (odd sizes; 1 = no
    smoothing / no dilation). Returns a bool ``(B, 1, *spatial)`` map; 2D and 3D; picklable and usable from a MONAI
    config (``{"_target_": "monai_unc.networks.IntensityMask", "threshold": 0.03}``).

    Under a sliding window the mask is computed on each window's input: the box mean and the dilation see only the
    window, so at voxels within ``smooth // 2 + dilate // 2`` voxels of a window face that is not a face of the volume
    two overlapping windows can disagree (the covariance active in one, the mean only in the other) and the blended
    maps mix the two; deeper inside every window, and with ``smooth = dilate = 1`` everywhere, the mask of a window
    is the crop of the whole volume's mask. A mask that every window agrees on is computed once on the whole volume
    and given to the network as an input channel (``mask_fn=lambda x: x[:, 1:2] > 0.5``).

    Why a region of interest: the SSN authors zero the covariance outside the brain because there it "tends to blow
    up". The Monte Carlo loss is dominated by its best draw, so a factor that flips the background in the other
    draws costs almost nothing; on the 3D toy set, training without a mask drifted to such factors (mean
    probabilities near 0.5 far from the object), with this mask it did not (docs/ssn.md).

    Args:
        threshold: intensity threshold of the smoothed channel.
        smooth: box size (voxels per axis, odd) of the local mean.
        dilate: box size (voxels per axis, odd) of the dilation.
        channel: the input channel read.

    Example:
        >>> import torch
        >>> from monai_unc.networks import IntensityMask
        >>> x = torch.zeros(1, 1, 9, 9)
        >>> x[..., 3:6, 3:6] = 1.0
        >>> mask = IntensityMask(threshold=0.5, smooth=3, dilate=3)(x)
        >>> mask.shape, int(mask.sum())
        (torch.Size([1, 1, 9, 9]), 21)
    """

    def __init__(self, threshold: float = 0.03, smooth: int = 5, dilate: int = 5, channel: int = 0) -> None:
        if not is_finite_real(threshold):
            raise ValueError(f"threshold must be a finite number, got {threshold!r}")
        for name, v in (("smooth", smooth), ("dilate", dilate)):
            if not is_int(v) or v < 1 or v % 2 == 0:
                raise ValueError(f"{name} must be an odd integer >= 1 (voxels), got {v!r}")
        self.threshold = float(threshold)
        self.smooth = int(smooth)
        self.dilate = int(dilate)
        self.channel = _positive_int(channel, "channel", 0)

    def config(self) -> dict[str, Any]:
        """The constructor arguments (JSON-serialisable)."""
        return {"threshold": self.threshold, "smooth": self.smooth, "dilate": self.dilate, "channel": self.channel}

    def __repr__(self) -> str:
        return "IntensityMask(" + ", ".join(f"{k}={v!r}" for k, v in self.config().items()) + ")"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The bool mask ``(B, 1, *spatial)`` of ``x`` ``(B, C, *spatial)``."""
        if not isinstance(x, torch.Tensor) or x.ndim not in (4, 5) or x.shape[1] <= self.channel:
            raise ValueError(
                f"IntensityMask needs a 2D or 3D input (B, C, *spatial) with channel {self.channel}, got "
                f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
            )
        x = x.as_tensor() if hasattr(x, "as_tensor") else x
        img = x[:, self.channel : self.channel + 1].float()
        avg = torch.nn.functional.avg_pool3d if x.ndim == 5 else torch.nn.functional.avg_pool2d
        mx = torch.nn.functional.max_pool3d if x.ndim == 5 else torch.nn.functional.max_pool2d
        if self.smooth > 1:
            img = avg(img, self.smooth, stride=1, padding=self.smooth // 2, count_include_pad=False)
        m = exceeds(img, self.threshold, inclusive=False).float()  # exact: float32(0.3) = 0.30000001 > 0.3
        if self.dilate > 1:
            m = mx(m, self.dilate, stride=1, padding=self.dilate // 2)
        return m > 0


def find_ssn_heads(network: nn.Module) -> list[SSNHead]:
    """Every :class:`SSNHead` inside ``network`` (itself included).

    Args:
        network: any module.

    Returns:
        The heads, in module order.

    Example:
        >>> from monai_unc.networks import find_ssn_heads
        >>> import torch
        >>> from monai_unc.networks import SSNHead, SSNNetwork
        >>> _ = torch.manual_seed(0)
        >>> net = SSNNetwork(torch.nn.Conv3d(1, 8, 3, padding=1), SSNHead(8, num_classes=2, rank=2, init_variance=1.0))
        >>> x = torch.rand(1, 1, 4, 4, 4)
        >>> find_ssn_heads(net) == [net.head]
        True
    """
    if not isinstance(network, nn.Module):
        raise TypeError(f"network must be a torch.nn.Module, got {type(network).__name__}")
    return [m for m in network.modules() if isinstance(m, SSNHead)]


@contextlib.contextmanager
def ssn_sampling(network: nn.Module, cache: bool = False) -> Iterator[list[SSNHead]]:
    """Within the block every :class:`SSNHead` of ``network`` returns one reparameterised logit sample per call.

    The rest of the network keeps its mode. Yields the heads; restores their state afterwards. ``cache=True``
    also lets every :class:`SSNNetwork` inside keep the distribution of its last backbone pass, so that further
    draws for the same input can skip the backbone (used by :class:`~monai_unc.inferers.SSNSource`; see
    :meth:`SSNNetwork.reuse_features`).

    Args:
        network: a module holding SSN heads.
        cache: keep the last backbone pass's distribution (see above).

    Raises:
        ValueError: when the network has no SSN head.

    Example:
        >>> from monai_unc.networks import ssn_sampling
        >>> import torch
        >>> from monai_unc.networks import SSNHead, SSNNetwork
        >>> _ = torch.manual_seed(0)
        >>> net = SSNNetwork(torch.nn.Conv3d(1, 8, 3, padding=1), SSNHead(8, num_classes=2, rank=2, init_variance=1.0))
        >>> x = torch.rand(1, 1, 4, 4, 4)
        >>> net = net.eval()
        >>> with ssn_sampling(net):
        ...     a, b = net(x), net(x)  # two draws
        >>> bool((a != b).any()), bool(torch.equal(net(x), net(x)))  # outside: the mean
        (True, True)
    """
    cache = check_bool(cache, "cache")
    heads = find_ssn_heads(network)
    if not heads:
        raise ValueError(
            f"{type(network).__name__} has no SSNHead to sample from; build it as "
            "monai_unc.networks.SSNNetwork(backbone, SSNHead(...)) or put an SSNHead on its features"
        )
    nets = [m for m in network.modules() if isinstance(m, SSNNetwork)]
    old_heads = [h.sampling for h in heads]
    old_nets = [(n._cache_enabled, n._reuse) for n in nets]
    for h in heads:
        h.sampling = True
    for n in nets:
        n._cache_enabled = cache
        n._reuse = False
    try:
        yield heads
    finally:
        for h, s in zip(heads, old_heads):
            h.sampling = s
        for n, (c, r) in zip(nets, old_nets):
            n._cache_enabled, n._reuse = c, r
            n._cache = None


@contextlib.contextmanager
def mirrored_ssn_noise(network: nn.Module, axes: Sequence[int]) -> Iterator[list[SSNHead]]:
    """Within the block every :class:`SSNHead` of ``network`` draws the per-logit noise ``z_D`` of a sample mirrored.

    For test-time mirroring where the mirrored passes of one sample are one draw (nnU-Net's mirrors averaged in logit
    space, every mirror from the random state of the first): a sample ``mu + P z_R + sqrt(D) z_D`` of the pass on
    ``torch.flip(x, axes)``, flipped back, carries ``z_R`` (``R`` values per image, no position) unchanged, but the
    ``z_D`` drawn in the mirrored layout ends up mirrored, so the mean over the ``2^k`` mirrors averages ``2^k``
    independent values of ``z_D`` per voxel and keeps about ``1 / 2^k`` of the diagonal variance ``D``. Inside this
    block ``z_D`` is flipped along ``axes`` as it is drawn: flipped back, every mirror uses the ``z_D`` of the
    unmirrored pass, and the mirrors of one sample are one draw (exactly so for a flip-equivariant network).

    Args:
        network: a module holding SSN heads (the heads sample only inside :func:`ssn_sampling`).
        axes: the dims ``torch.flip`` mirrors the input along, as dims of the head's ``(B, C, *spatial)`` map
            (``>= 2``; the spatial dims of an input and of the head's map have the same numbers). ``()``: no change.

    Yields:
        The heads.

    Raises:
        ValueError: ``axes`` not integers ``>= 2`` without repeats, or the network has no SSN head; when sampling,
            an axis that is not a dim of the head's map.

    Example:
        >>> import torch
        >>> from monai_unc.networks import SSNHead, SSNNetwork, mirrored_ssn_noise, ssn_sampling
        >>> _ = torch.manual_seed(0)
        >>> net = SSNNetwork(torch.nn.Conv2d(1, 4, 1), SSNHead(4, num_classes=2, rank=2, spatial_dims=2,
        ...                                                    init_variance=1.0)).eval()
        >>> x = torch.rand(1, 1, 5, 4)
        >>> with ssn_sampling(net):
        ...     state = torch.get_rng_state()
        ...     a = net(x)
        ...     _ = torch.set_rng_state(state)
        ...     with mirrored_ssn_noise(net, (2, 3)):
        ...         b = torch.flip(net(torch.flip(x, (2, 3))), (2, 3))
        >>> torch.allclose(a, b, atol=1e-6)  # a network of 1x1 convolutions is flip-equivariant: one draw
        True
    """
    if isinstance(axes, (str, bytes)) or not isinstance(axes, Sequence) or not all(
        is_int(a) and a >= 2 for a in axes
    ) or len(set(int(a) for a in axes)) != len(axes):
        raise ValueError(f"axes must be distinct spatial dims (integers >= 2) of the (B, C, *spatial) maps, got "
                         f"{axes!r}")
    flip = tuple(int(a) for a in axes)
    heads = find_ssn_heads(network)
    if not heads:
        raise ValueError(f"{type(network).__name__} has no SSNHead whose noise to mirror")
    old = [h.noise_flip for h in heads]
    for h in heads:
        h.noise_flip = flip
    try:
        yield heads
    finally:
        for h, f in zip(heads, old):
            h.noise_flip = f


class SSNNetwork(nn.Module):
    """A segmentation backbone with an :class:`SSNHead` on its last feature map.

    Args:
        backbone: any network mapping ``(B, C_in, *spatial)`` to features ``(B, F, *spatial)`` (a tuple/list output,
            e.g. deep supervision, uses its first element), e.g. ``monai.networks.nets.UNet(..., out_channels=F)``.
        head: ``SSNHead(F, num_classes, rank, spatial_dims)``.
        mask_fn: optional ``input -> mask`` giving where the covariance is active (e.g. ``lambda x: x[:, :1] > 0``
            for the body); applied per call, so it works per sliding window.

    Forward: eval -> mean logits ``(B, C, *spatial)``; training -> the head's training output (the distribution
    by default); inside :func:`ssn_sampling` -> one logit sample. ``distribution(x)`` gives the distribution in
    any mode. The ``state_dict`` holds ``backbone.*`` and ``head.{mean_conv,log_cov_diag_conv,cov_factor_conv}.*``.

    Rebuild a checkpoint with the same constructor (a MONAI config works: ``{"_target_":
    "monai_unc.networks.SSNNetwork", "backbone": {...}, "head": {...}}``) and ``load_state_dict``.

    Example:
        >>> import torch
        >>> from monai_unc.networks import SSNHead, SSNNetwork
        >>> _ = torch.manual_seed(0)
        >>> net = SSNNetwork(torch.nn.Conv3d(1, 8, 3, padding=1), SSNHead(8, num_classes=2, rank=2, init_variance=1.0))
        >>> x = torch.rand(1, 1, 4, 4, 4)
        >>> net.eval()(x).shape  # mean logits
        torch.Size([1, 2, 4, 4, 4])
        >>> net.distribution(x).logits((3,)).shape  # three draws
        torch.Size([3, 1, 2, 4, 4, 4])
        >>> sorted(net.state_dict())[:2]
        ['backbone.bias', 'backbone.weight']
    """

    def __init__(
        self, backbone: nn.Module, head: SSNHead, mask_fn: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> None:
        super().__init__()
        if not isinstance(backbone, nn.Module):
            raise TypeError(f"backbone must be a torch.nn.Module, got {type(backbone).__name__}")
        if not isinstance(head, SSNHead):
            raise TypeError(f"head must be an SSNHead, got {type(head).__name__}")
        if mask_fn is not None and not callable(mask_fn):
            raise TypeError("mask_fn must be callable (input -> mask) or None")
        self.backbone = backbone
        self.head = head
        self.mask_fn = mask_fn
        self._cache_enabled = False
        self._reuse = False
        # the last backbone pass's input, mask and distribution parameters (inside ssn_sampling(cache=True))
        self._cache: tuple[torch.Tensor, torch.Tensor | None, SSNParams] | None = None

    @property
    def num_classes(self) -> int:
        """``C``, the classes of the head."""
        return self.head.num_classes

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The backbone's feature map ``(B, F, *spatial)`` (the first element of a tuple / list output)."""
        out = self.backbone(x)
        if isinstance(out, (tuple, list)):
            if not out:
                raise ValueError("backbone returned an empty sequence")
            out = out[0]
        return out

    def _mask(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor | None:
        if mask is not None:
            return mask
        return self.mask_fn(x) if self.mask_fn is not None else None

    def distribution(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> SSNDistribution:
        """The logit distribution for input ``x`` (``mask`` overrides ``mask_fn``)."""
        return self.head.distribution(self.features(x), self._mask(x, mask))

    @contextlib.contextmanager
    def reuse_features(self) -> Iterator[None]:
        """Draw new samples from the distribution of the previous backbone pass.

        Within the block (and inside ``ssn_sampling(..., cache=True)``), a forward call draws a new sample from the
        distribution of the previous backbone pass instead of running the backbone again, when its input (and
        ``mask``) equals that pass's: same shape and values. Another input runs the backbone again (found by hostile
        testing: a random TTA transform, redrawn for every latent draw, got the distribution of the first draw's
        transformed input, inverted with its own transform: mis-registered samples). The caller guarantees the same
        state of any other randomness, such as dropout masks.
        """
        old = self._reuse
        self._reuse = True
        try:
            yield
        finally:
            self._reuse = old

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> Any:
        """Mean logits (eval), the head's training output (train) or one logit sample (inside :func:`ssn_sampling`).

        Args:
            x: ``(B, C_in, *spatial)`` input.
            mask: where the covariance is active (overrides ``mask_fn``).

        Returns:
            ``(B, C, *spatial)`` logits, or the training output.
        """
        if self.head.sampling:
            if self._reuse and self._cache is not None and _same_input(self._cache[0], x) and (
                _same_input(self._cache[1], mask)
            ):
                params = self._cache[2]
            else:
                params = self.head.params(self.features(x), self._mask(x, mask))
                self._cache = (x, mask, params) if self._cache_enabled else None
            return _sample(_distribution(*params), noise_flip=self.head.noise_flip)
        return self.head(self.features(x), self._mask(x, mask))


def _same_input(cached: torch.Tensor | None, new: torch.Tensor | None) -> bool:
    """Whether ``new`` is the input (or mask) of the cached backbone pass: both None, or the same shape and values."""
    if cached is None or new is None:
        return cached is None and new is None
    if cached is new:
        return True
    a = cached.as_tensor() if hasattr(cached, "as_tensor") else cached
    b = new.as_tensor() if hasattr(new, "as_tensor") else new
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and bool(torch.equal(a, b))
