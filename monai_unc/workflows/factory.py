"""The inferer of ``monai-unc infer``: ``+``-joined sample sources (:func:`build_inferer`).

Methods are ``mcdropout``, ``ratein``, ``tta`` (flips over all axis subsets, optional noise), ``ensemble`` (one
member per checkpoint) and ``ssn`` (latent draws of a Stochastic Segmentation Network), e.g. ``"mcdropout+tta"``;
``softmax`` alone is the deterministic baseline. The sliding-window inferer is used when ``roi`` is given.

``ssn`` alone draws ``samples`` logit maps per window from the network's SSN head(s): MI is aleatoric (ValUES
Appendix D). Combined with other sources (``ssn+mcdropout``: dropout in the SSN's backbone), each of their samples
is the SSN's latent-averaged prediction over ``samples`` draws (:class:`~monai_unc.inferers.SSNSource` with
``marginalize=True``), so the other sources' axis alone varies: MI is their (epistemic) part and the expected
entropy holds the aleatoric part.

:data:`METHOD_TOKENS`, :func:`method_tokens`, :func:`check_roi` and :func:`normalize_roi` are defined in
:mod:`monai_unc.workflows.options` (without MONAI, for the commands that only read and compute) and re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from monai.inferers import SimpleInferer, SlidingWindowInferer
from torch import nn

from ..inferers import (
    EnsembleSource,
    FlipSource,
    MCDropoutSource,
    NoiseSource,
    SoftmaxInferer,
    SSNSource,
    UncertaintyInferer,
)
from ..inferers.rate_in import RateInSource
from ..keys import DEFAULT_MEASURES, DEFAULT_RATEIN_TARGET, close_names, noise_std_limit
from ..keys import UncertaintyKeys as K
from ..networks import find_ssn_heads
from .models import checkpoint_temperature
from .options import METHOD_TOKENS, SHARED_PASS_TOKENS, check_roi, known_method_tokens, method_tokens, normalize_roi

__all__ = [
    "METHOD_TOKENS",
    "SHARED_PASS_TOKENS",
    "DEFAULT_MEASURES",
    "build_inferer",
    "check_roi",
    "normalize_roi",
    "method_tokens",
    "check_method_network",
]


def check_method_network(method: str, network: nn.Module) -> None:
    """Check that the network has what the method's sources need.

    ``ssn`` needs an :class:`~monai_unc.networks.SSNHead` (a Stochastic Segmentation Network, e.g. from
    :func:`monai_unc.data.build_ssn_network` or the toy bundle's ``configs/train_ssn.json``).

    Args:
        method: the ``+``-joined ``--method`` string.
        network: the loaded network.

    Raises:
        ValueError: naming ``--method``, when the network lacks what a source needs.
    """
    if "ssn" in method_tokens(method) and not find_ssn_heads(network):
        raise ValueError(
            f"--method {method}: the network ({type(network).__name__}) is not a Stochastic Segmentation Network (it "
            "has no SSNHead); give an SSN, e.g. --network configs/train_ssn.json --checkpoint model.pt, or choose "
            "another method"
        )


def build_inferer(
    method: str,
    samples: int = 10,
    roi: int | Sequence[int] | None = None,
    overlap: float = 0.25,
    sw_batch_size: int = 1,
    checkpoints: Sequence[str] = (),
    unsafe_load: bool = False,
    seed: int | None = 0,
    tta_noise: float = 0.0,
    ratein_target: float = DEFAULT_RATEIN_TARGET,
    activation: str | None = "softmax",
    measures: Sequence[str] = DEFAULT_MEASURES,
    keep_samples: bool = False,
    share_passes: bool = True,
    sample_batch_size: int | str = "auto",
    checkpoint_key: str | None = None,
) -> Any:
    """An :class:`~monai_unc.inferers.UncertaintyInferer` for a ``+``-joined method string (module docstring).

    Every option is checked here, before any work (``ValueError`` naming the command-line option): ``samples`` a
    positive integer, ``tta_noise`` a finite standard deviation >= 0 of at most
    :func:`~monai_unc.keys.noise_std_limit` (larger noise overflows the float32 images; > 0 only with the ``tta``
    source),
    ``ratein_target`` in [0, 1], ``roi`` positive sizes and ``overlap`` in [0, 1); ensemble members are plain
    state dicts. ``ssn`` draws ``samples`` latent samples (module docstring); whether the network has an SSN
    head is checked by :func:`check_method_network`.

    Args:
        method: ``+``-joined source names from :data:`METHOD_TOKENS` (``"softmax"`` alone: the deterministic
            baseline).
        samples: the number of samples per source that samples (MC dropout, Rate-In, SSN latent draws).
        roi: the sliding-window size (one size or one per axis); None: the whole image in one pass.
        overlap: the sliding-window overlap fraction, in [0, 1) (windows blended with Gaussian weights).
        sw_batch_size: windows per forward pass.
        checkpoints: the ensemble members' state dict files (``ensemble``: at least two).
        unsafe_load: load the members with ``weights_only=False`` (trusted files only).
        seed: the seed of the sampling (None: not seeded).
        tta_noise: the standard deviation of Gaussian intensity noise added per TTA sample (0: flips only).
        ratein_target: Rate-In's target information loss per dropout layer, in [0, 1].
        activation: ``"softmax"`` (mutually exclusive classes) or ``"sigmoid"`` (overlapping regions); None: the
            network outputs probabilities.
        measures: the uncertainty maps to compute (:class:`~monai_unc.keys.UncertaintyKeys` values); the
            baseline keeps only those a single prediction defines.
        keep_samples: the inferer also returns each sample's probabilities (``samples``, for ``--save-samples``;
            not with ``"softmax"``, which has no samples).
        share_passes: compute once per window what the MC dropout / Rate-In samples share (exact; the inferer's
            ``share_passes``); False: one full pass per sample (``--no-share-passes``).
        sample_batch_size: with shared passes, the samples run at once: ``"auto"`` or a positive integer
            (``--sample-batch-size``; the inferer's ``sample_batch_size``).
        checkpoint_key: the entry of the members' checkpoints that holds the state dict (a bundle's
            ``CheckpointLoader`` key, :attr:`~monai_unc.workflows.models.LoadedModel.checkpoint_key`); None: the
            usual entries.

    Returns:
        A :class:`~monai_unc.inferers.SoftmaxInferer` for ``"softmax"``, else an
        :class:`~monai_unc.inferers.UncertaintyInferer` over the sources, both on a ``SimpleInferer`` or a
        ``SlidingWindowInferer``.

    Raises:
        ValueError: naming the command-line option that is invalid.

    Example:
        >>> inf = build_inferer("mcdropout+tta", samples=2)
        >>> type(inf).__name__, [type(s).__name__ for s in inf.sources]
        ('UncertaintyInferer', ['MCDropoutSource', 'FlipSource'])
        >>> type(build_inferer("softmax", roi=64)).__name__
        'SoftmaxInferer'
    """
    tokens = known_method_tokens(method)
    if tokens is None:  # an unknown or empty name ("mcdropout++tta"); a misspelt one gets the closest spelling
        parts = [t.strip().lower() for t in method.split("+")]
        fixed = [t if t in METHOD_TOKENS else next(iter(close_names(t, METHOD_TOKENS, n=1)), "") for t in parts]
        hint = f"; did you mean {'+'.join(fixed)!r}?" if all(fixed) else ""
        raise ValueError(f"--method must be '+'-joined names from {METHOD_TOKENS}, got {method!r}{hint}")
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"--method names a source twice: {method!r}")
    if "softmax" in tokens and len(tokens) > 1:
        raise ValueError("--method softmax (the deterministic baseline) cannot be combined with other sources")
    if SHARED_PASS_TOKENS <= set(tokens):  # the two sources that sample dropout masks
        raise ValueError("--method: mcdropout and ratein both sample dropout masks; choose one")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"--samples must be a positive integer, got {samples!r}")
    if (isinstance(tta_noise, bool) or not isinstance(tta_noise, (int, float, np.integer, np.floating))
            or not math.isfinite(tta_noise) or tta_noise < 0):
        raise ValueError(f"--tta-noise must be a finite standard deviation >= 0, got {tta_noise!r}")
    if tta_noise > noise_std_limit():
        raise ValueError(f"--tta-noise must be at most {noise_std_limit():.3g} (larger noise overflows the float32 "
                         f"images), got {tta_noise!r}")
    if tta_noise > 0 and "tta" not in tokens:
        raise ValueError(f"--tta-noise {tta_noise:g} is used by the tta source only; add tta to --method {method!r}")
    if (isinstance(ratein_target, bool) or not isinstance(ratein_target, (int, float, np.integer, np.floating))
            or not 0.0 <= ratein_target <= 1.0):  # NaN fails the comparison
        raise ValueError(f"--ratein-target must be an information-loss fraction in [0, 1], got {ratein_target!r}")
    if ratein_target != DEFAULT_RATEIN_TARGET and "ratein" not in tokens:  # found by hostile review: recorded unused
        raise ValueError(f"--ratein-target {ratein_target:g} is used by the ratein source only; add ratein to "
                         f"--method {method!r}, or drop it")
    if not isinstance(share_passes, bool):
        raise ValueError(f"--no-share-passes: share_passes must be True or False, got {share_passes!r}")
    batch_ok = sample_batch_size == "auto" or (isinstance(sample_batch_size, (int, np.integer))
                                              and not isinstance(sample_batch_size, bool) and sample_batch_size >= 1)
    if not batch_ok:
        raise ValueError(f"--sample-batch-size must be 'auto' or a positive integer, got {sample_batch_size!r}")
    if sample_batch_size != "auto" and not share_passes:
        raise ValueError(f"--sample-batch-size {sample_batch_size} batches the samples of shared passes: drop it or "
                         "drop --no-share-passes")
    if not share_passes and not SHARED_PASS_TOKENS & set(tokens):
        raise ValueError(f"--no-share-passes concerns MC dropout / Rate-In samples, got --method {method!r}")
    if sample_batch_size != "auto" and not SHARED_PASS_TOKENS & set(tokens):
        raise ValueError(f"--sample-batch-size {sample_batch_size} batches MC dropout / Rate-In samples: add "
                         f"mcdropout or ratein to --method {method!r}, or drop it")
    if samples == 1 and (sample_batch_size != "auto" or not share_passes):
        # found by hostile testing: accepted, recorded in infer.json and every case's fingerprint (a resume with
        # another value was refused as "other seeded draws"), yet one sample per window has no pass to share or batch
        given = "--no-share-passes" if not share_passes else f"--sample-batch-size {sample_batch_size}"
        raise ValueError(f"{given} concerns several MC dropout / Rate-In samples per window, but --samples 1 draws "
                         "one: drop it")
    if roi is not None:
        roi = int(roi) if isinstance(roi, (int, np.integer)) else tuple(int(r) for r in roi)
        if min(roi if isinstance(roi, tuple) else (roi,)) < 1:
            raise ValueError(f"--roi sizes must be positive, got {roi}")
        if not 0 <= overlap < 1:
            raise ValueError(f"--overlap must be in [0, 1), got {overlap}")
        base = SlidingWindowInferer(roi, sw_batch_size=sw_batch_size, overlap=overlap, mode="gaussian")
    else:
        base = SimpleInferer()
    keys = [K.PRED.value, *measures]
    if keep_samples and "softmax" in tokens:
        raise ValueError("--save-samples needs a --method that samples (mcdropout, ratein, tta, ensemble, ssn); "
                         "softmax makes one prediction")
    if "softmax" in tokens:
        keys = [k for k in keys if k in (K.PRED.value, K.PREDICTIVE_ENTROPY.value, K.ONE_MINUS_MAX_PROB.value)]
        return SoftmaxInferer(base_inferer=base, activation=activation, keys=keys, seed=seed)
    sources: list[Any] = []
    for t in tokens:
        if t == "ensemble":
            if any(checkpoint_temperature(c, unsafe_load) is not None for c in checkpoints):
                raise ValueError("--method ensemble: a member holds a separate temperature (from monai-unc "
                                 "calibrate); ensemble members must be plain state dicts")
            if len(checkpoints) < 2:
                raise ValueError("--method ensemble needs at least two --checkpoint files (one per member)")
            sources.append(EnsembleSource(list(checkpoints), weights_only=not unsafe_load, key=checkpoint_key))
        elif t == "mcdropout":
            sources.append(MCDropoutSource(samples))
        elif t == "ratein":
            sources.append(RateInSource(samples, target_loss=ratein_target))
        elif t == "tta":
            sources.append(FlipSource("all"))
            if tta_noise > 0:
                sources.append(NoiseSource(tta_noise, num_samples=1))
        elif t == "ssn":
            # alone: the latent draws are the samples (MI aleatoric); with other sources: one latent-averaged
            # prediction per sample of theirs, so that their axis alone carries MI (epistemic)
            sources.append(SSNSource(samples, marginalize=len(tokens) > 1))
    track_variance = K.VARIANCE.value in keys
    return UncertaintyInferer(
        sources, base_inferer=base, activation=activation, keys=keys, seed=seed, track_variance=track_variance,
        keep_samples=keep_samples,
        share_passes=share_passes,
        sample_batch_size=sample_batch_size if sample_batch_size == "auto" else int(sample_batch_size),
    )
