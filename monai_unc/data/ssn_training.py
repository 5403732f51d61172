"""Training a Stochastic Segmentation Network on the synthetic toy set with raters.

The toy cases (:func:`monai_unc.data.make_toy_dataset`, after ValUES Appendix B.1) carry several raters' labels
that disagree on where the blurred object's border lies. An SSN learns that disagreement when every training
sample pairs the image with *one* rater's label drawn at random (as the SSN paper trains on LIDC's four
annotations): the Monte Carlo log-likelihood (:class:`~monai_unc.networks.SSNLoss`) then rewards a distribution
whose draws cover all raters' borders, and the latent-variable mutual information concentrates where the raters
disagree.

Protocol of :func:`train_ssn`: a MONAI ``UNet`` backbone with ``feature_channels`` outputs and an
:class:`~monai_unc.networks.SSNHead` (:func:`build_ssn_network`), its covariance limited to the object and its
surroundings by an :class:`~monai_unc.networks.IntensityMask` (local mean intensity above 0.03, dilated by 2
voxels; it covers every rater's border, and without it the 3D training drifted to factors that flip the
background, as the SSN authors observed outside the brain); random flips along every axis and Gaussian noise
(ValUES C.1 uses flips and noise); Adam with cosine decay; the first ``mean_only_iterations`` train the mean alone
with cross-entropy (ValUES C.2 pretrains the mean for 5 epochs before the covariance, which makes training more
stable), then the SSN loss with ``num_mc_samples`` draws.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from monai.networks.nets import UNet

from .._utils import check_bool, check_integer, check_nonnegative, check_seed, is_finite_real, is_int
from ..networks import IntensityMask, SSNHead, SSNLoss, SSNNetwork
from .model import check_trained_network_path, save_trained_network
from .synthetic import make_toy_dataset

__all__ = ["SSN_TOY_NETWORK", "build_ssn_network", "train_ssn"]

#: default architecture of :func:`build_ssn_network` for the 3D toy set (keyword arguments)
SSN_TOY_NETWORK: dict[str, Any] = {
    "spatial_dims": 3,
    "in_channels": 1,
    "num_classes": 2,
    "channels": (16, 32, 64),
    "strides": (2, 2),
    "num_res_units": 1,
    "feature_channels": 16,
    "rank": 10,
    "dropout": 0.0,
    "epsilon": 1e-5,
    "init_variance": 1e-3,
    "mask": {"threshold": 0.03, "smooth": 5, "dilate": 5, "channel": 0},
}


def build_ssn_network(
    spatial_dims: int = 3,
    in_channels: int = 1,
    num_classes: int = 2,
    channels: Sequence[int] = (16, 32, 64),
    strides: Sequence[int] = (2, 2),
    num_res_units: int = 1,
    feature_channels: int = 16,
    rank: int = 10,
    dropout: float = 0.0,
    epsilon: float = 1e-5,
    init_variance: float | None = 1e-3,
    mask: dict[str, Any] | None = None,
) -> SSNNetwork:
    """A MONAI ``UNet`` (``out_channels=feature_channels``) with an :class:`SSNHead` of the given ``rank``.

    The keyword arguments are what :func:`train_ssn` records under ``"network"``: ``build_ssn_network(**record[
    "network"])`` rebuilds a saved model before ``load_state_dict``. The SSN is that of Monteiro et al.,
    *Stochastic Segmentation Networks: Modelling Spatially Correlated Aleatoric Uncertainty* (NeurIPS 2020).

    Args:
        spatial_dims: 2 or 3.
        in_channels: image channels.
        num_classes: output classes ``C`` (background included).
        channels: the UNet's channels per level.
        strides: the UNet's strides between levels.
        num_res_units: residual units per UNet block.
        feature_channels: the backbone's output channels, the SSN head's input.
        rank: ``R`` of the low-rank covariance factor.
        dropout: the UNet's dropout rate.
        epsilon: floor of the diagonal variance.
        init_variance: the logits' variance at initialisation (None: the head's default initialisation).
        mask: keyword arguments of an :class:`IntensityMask` limiting the covariance (``None``: everywhere).

    Returns:
        The :class:`SSNNetwork` (in training mode, on the CPU).

    Example:
        >>> net = build_ssn_network(spatial_dims=2, channels=(4, 8), strides=(2,), feature_channels=4, rank=2)
        >>> type(net.head).__name__, net.head.rank
        ('SSNHead', 2)
    """
    backbone = UNet(
        spatial_dims=spatial_dims,
        in_channels=in_channels,
        out_channels=feature_channels,
        channels=tuple(channels),
        strides=tuple(strides),
        num_res_units=num_res_units,
        dropout=dropout,
    )
    head = SSNHead(feature_channels, num_classes, rank, spatial_dims, epsilon=epsilon, init_variance=init_variance)
    return SSNNetwork(backbone, head, mask_fn=IntensityMask(**mask) if mask is not None else None)


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and tuples as lists, recursively (for the JSON record)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _batch(
    images: np.ndarray, raters: np.ndarray, batch_size: int, rng: np.random.Generator, noise_std: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random cases, one random rater's label each, random flips along every axis, Gaussian noise."""
    idx = rng.integers(len(images), size=batch_size)
    who = rng.integers(raters.shape[1], size=batch_size)
    xs, ys = [], []
    for i, r in zip(idx, who):
        x, y = images[i], raters[i, r]
        axes = [a for a in range(y.ndim) if rng.random() < 0.5]
        if axes:
            x = np.flip(x, [a + 1 for a in axes])
            y = np.flip(y, axes)
        if noise_std > 0 and rng.random() < 0.3:
            x = x + rng.normal(0.0, noise_std, x.shape).astype(np.float32)
        xs.append(np.ascontiguousarray(x))
        ys.append(np.ascontiguousarray(y))
    return torch.from_numpy(np.stack(xs)).float(), torch.from_numpy(np.stack(ys)).long()


def train_ssn(
    out_path: str | os.PathLike | None = None,
    n_cases: int = 16,
    shape: Sequence[int] = (32, 32, 32),
    n_raters: int = 3,
    iterations: int = 300,
    batch_size: int = 4,
    lr: float = 1e-3,
    num_mc_samples: int = 20,
    mean_only_iterations: int | None = None,
    network: dict[str, Any] | None = None,
    noise_std: float = 0.05,
    seed: int = 0,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> tuple[SSNNetwork, dict[str, Any]]:
    """Train an SSN on ``n_cases`` toy cases with ``n_raters`` raters (module docstring); 2D or 3D ``shape``.

    Args:
        out_path: if given, the state dict is saved there and the training record beside it (``.json``),
            atomically (temporary name, then rename).
        n_cases: toy cases (:func:`monai_unc.data.make_toy_dataset`).
        shape: the spatial shape of a case, 2D or 3D.
        n_raters: raters per case; each training sample pairs the image with one rater drawn at random.
        iterations: Adam steps.
        batch_size: images per step.
        lr: initial learning rate (cosine decay to 0).
        num_mc_samples: ``M`` of :class:`SSNLoss`.
        mean_only_iterations: cross-entropy warm-up of the mean (default ``iterations // 10``).
        network: keyword arguments of :func:`build_ssn_network` overriding :data:`SSN_TOY_NETWORK`
            (``spatial_dims`` follows ``shape``; ``"mask": None`` lets the covariance act everywhere).
        noise_std: Gaussian noise added to 30 % of the training images.
        seed: seeds the data, the initialisation and the sampling (deterministic on CPU for a thread count).
        device: where the network trains.
        progress: a progress bar on stderr.

    Returns:
        ``(network, record)``: the network in eval mode and a dict with the settings, ``network`` (the
        :func:`build_ssn_network` arguments), ``network_def`` (the same as a MONAI config: the record file is a
        network spec for ``monai-unc infer --network``), ``losses`` (per iteration; cross-entropy during the warm-up,
        the SSN loss after it), ``loss_first`` / ``loss_last`` (mean of the first / last 10 % of the SSN-loss
        iterations) and ``train_seconds``.

    Raises:
        ValueError: naming the setting, before any data is made: ``iterations``, ``batch_size``, ``n_cases`` or
            ``n_raters`` not a positive integer, ``mean_only_iterations`` not an integer in ``[0, iterations)``,
            ``lr`` not positive and finite, ``noise_std`` not a finite number >= 0, ``shape`` not integers, ``seed``
            outside ``[0, 2**64)``, ``out_path`` ending in ``.json`` (the record's name) or not writable.
        TypeError: ``seed`` not an integer, ``progress`` not a bool.
    """
    # found by hostile testing: shape (32.9, 32) trained and recorded a (32, 32) task, seed=True trained with seed 1
    # and recorded True, progress="no" showed the bar; numpy integers / floats were refused
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or not all(is_int(s) for s in shape):
        raise ValueError(f"shape must be a sequence of integers (2D or 3D), got {shape!r}")
    shape = tuple(int(s) for s in shape)
    # n_raters too: found by hostile testing, n_raters=True trained with one rater and recorded "True raters"
    for name, value in (("iterations", iterations), ("batch_size", batch_size), ("n_cases", n_cases),
                        ("n_raters", n_raters)):
        if not is_int(value) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    iterations, batch_size, n_cases, n_raters = int(iterations), int(batch_size), int(n_cases), int(n_raters)
    seed = check_seed(seed, optional=False)
    progress = check_bool(progress, "progress")
    if mean_only_iterations is None:
        mean_only_iterations = iterations // 10
    # found by hostile testing: True / 1.5 passed the range check (a float then failed in a slice after training)
    mean_only_iterations = check_integer(mean_only_iterations, "mean_only_iterations", minimum=0)
    if not mean_only_iterations < iterations:
        raise ValueError(f"mean_only_iterations must be in [0, iterations), got {mean_only_iterations}")
    if not (is_finite_real(lr) and lr > 0):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    lr = float(lr)
    # found by hostile testing: a negative or NaN noise_std trained without noise and recorded the bad value, an
    # infinite one trained on infinite images to NaN losses
    # found by hostile testing: numpy scalars trained and then failed to save the record (not JSON serialisable)
    noise_std = check_nonnegative(noise_std, "noise_std", wrong_type=ValueError)
    num_mc_samples = check_integer(num_mc_samples, "num_mc_samples")
    if out_path is not None:  # before training: a .json path would be overwritten by the record
        out_path = check_trained_network_path(out_path)
    arch = dict(SSN_TOY_NETWORK)
    arch.update(network or {})
    arch["spatial_dims"] = len(shape)
    arch = _plain(arch)
    try:
        json.dumps(arch, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"network must hold JSON values (it is recorded with the weights): {e}") from None

    device = torch.device(device)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cases = make_toy_dataset(n_cases, shape=shape, n_raters=n_raters, seed=seed)
    images = np.stack([c["image"] for c in cases]).astype(np.float32)
    raters = np.stack([c["raters"] for c in cases])
    net = build_ssn_network(**arch).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=iterations)
    loss_fn = SSNLoss(num_mc_samples)
    losses: list[float] = []
    start = time.time()
    net.train()
    steps = range(iterations)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="train ssn")
    for it in steps:
        x, y = _batch(images, raters, batch_size, rng, noise_std)
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        if it < mean_only_iterations:
            loss = F.cross_entropy(net.head.mean_logits(net.features(x)), y)
        else:
            loss = loss_fn(net(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 12.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    seconds = time.time() - start
    ssn_losses = losses[mean_only_iterations:]
    k = max(1, len(ssn_losses) // 10)
    record = {
        "task": f"toy set ({len(shape)}D {shape}, {n_cases} cases, {n_raters} raters; one random rater's label per "
        "training sample)",
        "network": arch,
        # a MONAI config of the network: `monai-unc infer --network <this .json> --checkpoint <the .pt>`
        "network_def": {"_target_": "monai_unc.data.build_ssn_network", **arch},
        "iterations": iterations,
        "mean_only_iterations": mean_only_iterations,
        "batch_size": batch_size,
        "lr": lr,
        "num_mc_samples": num_mc_samples,
        "noise_std": noise_std,
        "seed": seed,
        "losses": losses,
        "loss_first": float(np.mean(ssn_losses[:k])),
        "loss_last": float(np.mean(ssn_losses[-k:])),
        "train_seconds": round(seconds, 2),
        "torch_threads": torch.get_num_threads(),
    }
    net.eval()
    if out_path is not None:
        save_trained_network(net, record, out_path)
    return net, record
