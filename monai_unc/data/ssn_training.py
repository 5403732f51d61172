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

import inspect
import json
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from monai.networks.nets import UNet

from .._utils import check_bool, check_integer, check_nonnegative, check_seed, is_finite_real, is_int, is_real
from ..networks import IntensityMask, SSNHead, SSNLoss, SSNNetwork
from .model import check_trained_network_path, save_trained_network
from .synthetic import make_toy_dataset

__all__ = ["SSN_TOY_NETWORK", "build_ssn_network", "train_ssn"]

_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_TINY = float(np.finfo(np.float32).smallest_subnormal)

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


def _field(name: str | None, key: str) -> str:
    """How a setting of the network definition is named in messages: ``network['dropout']`` or ``dropout``."""
    return f"{name}[{key!r}]" if name else key


def _check_int(value: Any, what: str, minimum: int) -> int:
    if not is_int(value):
        raise TypeError(f"{what} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_ints(value: Any, what: str) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{what} must be a sequence of positive integers, got {value!r}")
    return tuple(_check_int(v, f"{what}[{i}]", 1) for i, v in enumerate(value))


def _check_ssn_network(network: dict[str, Any], name: str | None = "network") -> dict[str, Any]:
    """Check every setting of an SSN network definition (:func:`build_ssn_network`'s keyword arguments).

    The definition comes from callers and from training records (``network`` / ``network_def`` of a ``.json`` that
    :func:`train_ssn` wrote, which ``monai-unc infer --network`` builds), so nothing is taken on trust: in earlier
    versions ``dropout=True`` built a UNet whose dropout layers zeroed every input (``p = 1.0``) and
    ``num_res_units=-1`` was accepted.

    Args:
        network: the settings (a subset of :data:`SSN_TOY_NETWORK`'s keys).
        name: how the definition is named in messages (``network['dropout']``); None: the bare setting's name.

    Returns:
        The settings with Python values (tuples for ``channels`` / ``strides``).

    Raises:
        TypeError: naming the setting: a value of the wrong type (a bool, a string or a float where an integer is
            expected, a bool or a string where a number is expected), ``network`` or ``mask`` not a dict.
        ValueError: naming the setting: an unknown setting, a value out of range (``spatial_dims`` not 2 or 3,
            ``in_channels`` / ``feature_channels`` / ``rank`` < 1, ``num_classes`` < 2, ``num_res_units`` < 0,
            ``dropout`` outside ``[0, 1)``, ``epsilon`` not positive and finite in float32, ``init_variance`` not
            positive and finite), ``channels`` with fewer than two levels or ``strides`` not one per level transition,
            or a ``mask`` that :class:`~monai_unc.networks.IntensityMask` refuses or that reads a missing channel.

    Example:
        >>> _check_ssn_network({"dropout": True})
        Traceback (most recent call last):
            ...
        TypeError: network['dropout'] must be a number in [0, 1), got True
        >>> _check_ssn_network({"channels": [4, 8], "strides": [2]})["channels"]
        (4, 8)
    """
    if not isinstance(network, dict):
        raise TypeError(f"{name or 'network'} must be a dict of build_ssn_network's arguments, got "
                        f"{type(network).__name__}")
    unknown = sorted(str(k) for k in network if k not in SSN_TOY_NETWORK)
    if unknown:
        raise ValueError(f"{name or 'network'} has unknown settings {unknown}; the settings are "
                         f"{list(SSN_TOY_NETWORK)}")
    out = dict(network)
    for key, minimum in (("spatial_dims", 2), ("in_channels", 1), ("num_classes", 2), ("num_res_units", 0),
                         ("feature_channels", 1), ("rank", 1)):
        if key in out:
            out[key] = _check_int(out[key], _field(name, key), minimum)
    if out.get("spatial_dims", 2) not in (2, 3):
        raise ValueError(f"{_field(name, 'spatial_dims')} must be 2 or 3, got {out['spatial_dims']!r}")
    channels = out["channels"] = _check_ints(out.get("channels", SSN_TOY_NETWORK["channels"]), _field(name, "channels"))
    strides = out["strides"] = _check_ints(out.get("strides", SSN_TOY_NETWORK["strides"]), _field(name, "strides"))
    if len(channels) < 2:
        raise ValueError(f"{_field(name, 'channels')} must have at least 2 levels, got {list(channels)}")
    if len(strides) != len(channels) - 1:
        raise ValueError(f"{_field(name, 'strides')} must have one stride per level transition, len(channels) - 1 = "
                         f"{len(channels) - 1}, got {list(strides)}")
    if "dropout" in out:
        dropout = out["dropout"]
        if not is_real(dropout):
            raise TypeError(f"{_field(name, 'dropout')} must be a number in [0, 1), got {dropout!r}")
        if not 0.0 <= dropout < 1.0:  # NaN fails too
            raise ValueError(f"{_field(name, 'dropout')} must be a number in [0, 1), got {dropout!r}")
        out["dropout"] = float(dropout)
    for key in ("epsilon", "init_variance"):
        if key not in out or (key == "init_variance" and out[key] is None):
            continue
        value = out[key]
        if not is_real(value):
            raise TypeError(f"{_field(name, key)} must be a positive number, got {value!r}")
        # float32: the head adds epsilon to float32 variances (1e300 is infinite there, 1e-50 is 0)
        if not (is_finite_real(value) and _FLOAT32_TINY <= value <= _FLOAT32_MAX):
            raise ValueError(f"{_field(name, key)} must be a positive number, finite and non-zero in float32, got "
                             f"{value!r}")
        out[key] = float(value)
    mask = out.get("mask")
    if mask is not None:
        if not isinstance(mask, dict):
            raise TypeError(f"{_field(name, 'mask')} must be a dict of IntensityMask's arguments or None, got "
                            f"{type(mask).__name__}")
        allowed = list(inspect.signature(IntensityMask).parameters)
        unknown = sorted(str(k) for k in mask if k not in allowed)
        if unknown:
            raise ValueError(f"{_field(name, 'mask')} has unknown settings {unknown}; the settings are {allowed}")
        try:
            channel = IntensityMask(**mask).channel
        except (TypeError, ValueError) as e:
            raise type(e)(f"{_field(name, 'mask')}: {e}") from None
        in_channels = out.get("in_channels", SSN_TOY_NETWORK["in_channels"])
        if channel >= in_channels:
            raise ValueError(f"{_field(name, 'mask')}['channel'] must be below in_channels={in_channels}, got "
                             f"{channel}")
    return out


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

    Raises:
        TypeError: naming the argument: a value of the wrong type (a bool or a float where an integer is expected, a
            bool or a string where a number is expected, ``mask`` not a dict). The arguments may come from a training
            record (``network_def``), which is untrusted input.
        ValueError: naming the argument: a value out of range (``spatial_dims`` not 2 or 3, ``num_classes`` < 2,
            ``num_res_units`` < 0, ``dropout`` outside ``[0, 1)``, ``epsilon`` not positive and finite in float32,
            other sizes < 1), ``strides`` not one per pair of ``channels`` levels, a ``mask`` that
            :class:`IntensityMask` refuses.

    Example:
        >>> net = build_ssn_network(spatial_dims=2, channels=(4, 8), strides=(2,), feature_channels=4, rank=2)
        >>> type(net.head).__name__, net.head.rank
        ('SSNHead', 2)
    """
    arch = _check_ssn_network(
        {"spatial_dims": spatial_dims, "in_channels": in_channels, "num_classes": num_classes, "channels": channels,
         "strides": strides, "num_res_units": num_res_units, "feature_channels": feature_channels, "rank": rank,
         "dropout": dropout, "epsilon": epsilon, "init_variance": init_variance, "mask": mask},
        None,
    )
    backbone = UNet(
        spatial_dims=arch["spatial_dims"],
        in_channels=arch["in_channels"],
        out_channels=arch["feature_channels"],
        channels=arch["channels"],
        strides=arch["strides"],
        num_res_units=arch["num_res_units"],
        dropout=arch["dropout"],
    )
    head = SSNHead(arch["feature_channels"], arch["num_classes"], arch["rank"], arch["spatial_dims"],
                   epsilon=arch["epsilon"], init_variance=arch["init_variance"])
    mask = arch["mask"]
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
        out_path: if given, the state dict is saved there and the training record beside it (``<out_path>.json``,
            e.g. ``ssn.pt.json``), atomically (temporary name, then rename).
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
            ``lr`` not positive and finite, ``noise_std`` not a number >= 0 that is finite in float32, ``shape`` not
            2 or 3 integers >= 8 or an axis not a multiple of the product of the network's strides, ``seed`` outside
            ``[0, 2**64)``, ``out_path`` ending in ``.json`` (a record's name) or not writable, a setting of
            ``network`` out of range or unknown (naming it, e.g. ``network['dropout']``; see
            :func:`build_ssn_network`). During training: a loss that is not finite (the network diverged; nothing is
            saved).
        TypeError: ``seed`` not an integer, ``progress`` not a bool, ``network`` not a dict or a setting of it of the
            wrong type (e.g. ``network['dropout']`` a bool).
    """
    # found by hostile testing: shape (32.9, 32) trained and recorded a (32, 32) task, seed=True trained with seed 1
    # and recorded True, progress="no" showed the bar; numpy integers / floats were refused
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or not all(is_int(s) for s in shape):
        raise ValueError(f"shape must be a sequence of integers (2D or 3D), got {shape!r}")
    shape = tuple(int(s) for s in shape)
    if len(shape) not in (2, 3) or min(shape) < 8:  # make_toy_dataset's check, before the network's checks
        raise ValueError(f"shape must be 2D or 3D with every axis >= 8 voxels, got {shape}")
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
    # the images are float32: a finite noise_std such as 1e300 is infinite there (in earlier versions it trained to
    # NaN weights, which were saved)
    if noise_std > _FLOAT32_MAX:
        raise ValueError(f"noise_std must be finite in float32 (the images' dtype, at most {_FLOAT32_MAX:g}"
                         f"), got {noise_std!r}")
    num_mc_samples = check_integer(num_mc_samples, "num_mc_samples")
    if out_path is not None:  # before training: a .json path would be overwritten by the record
        out_path = check_trained_network_path(out_path)
    if network is not None and not isinstance(network, dict):
        raise TypeError(f"network must be a dict of build_ssn_network's arguments or None, got "
                        f"{type(network).__name__}")
    arch = dict(SSN_TOY_NETWORK)
    arch.update(network or {})
    arch["spatial_dims"] = len(shape)
    arch = _plain(arch)
    try:
        json.dumps(arch, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"network must hold JSON values (it is recorded with the weights): {e}") from None
    # found by review: dropout=True trained a UNet whose dropout layers zeroed every input, num_res_units=-1 was taken
    arch = _plain(_check_ssn_network(arch, "network"))
    # found by review: shape (30, 30) with strides (2, 2) failed inside MONAI's UNet after the data were made
    multiple = math.prod(arch["strides"])
    if any(s % multiple for s in shape):
        raise ValueError(f"shape must have every axis a multiple of {multiple} (the product of the network's strides "
                         f"{arch['strides']}: the UNet halves and restores each axis), got {shape}")

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
        loss_value = float(loss.detach())  # one read of the loss a step: the check and the record's curve
        if not math.isfinite(loss_value):  # as train_tissue_model's losses: nothing is saved
            raise ValueError(f"the training loss is not finite at iteration {it} ({loss_value}); the network "
                             "diverged and is not saved (try a smaller lr or noise_std)")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 12.0)
        opt.step()
        sched.step()
        losses.append(loss_value)
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
