"""The generic uncertainty inferer: a product of sample sources streamed into :class:`SampleStats`.

A *sample source* is one axis of variation: dropout masks, flips, noise copies, ensemble members,
latent draws. :class:`UncertaintyInferer` evaluates the network once per element of the product of its
sources and streams every softmax into :class:`~monai_unc.stats.SampleStats`, so memory is that of one
prediction plus the statistics, whatever the number of samples.

Sliding windows: the inner MONAI inferer (``base_inferer``) is called with a window callable that runs *all*
samples on the window and returns per-voxel means ``{pred, expected_entropy, mean_sq}`` and the window's own
predictive entropy ``H(m_w)`` (``m_w`` the window's mean probabilities). MONAI's ``SlidingWindowInferer``
stitches every value of a dict with the same per-voxel convex weights ``a_w`` (``sum_w a_w = 1``), and a convex
combination of means is again a mean, so ``pred = sum_w a_w m_w`` and EE are exact after stitching. Probabilities
(not logits) are blended. With ``window_disagreement="separate"`` each window returns its own variance ``E_w[p^2] -
m_w^2`` in place of ``mean_sq``, so that the variance is the blend of the per-window variances (0 for a
deterministic network with any overlap; ``"mutual_information"`` keeps the variance of the mixture of the windows,
which also holds their disagreement).

Where windows overlap, the stitched ``pred`` also mixes windows that disagree (the network sees different
context, padding and normalisation statistics in each window), so ``PE = H(pred)`` splits into three parts::

    PE = EE + MI + WD
    MI = sum_w a_w [H(m_w) - EE_w]            the convex blend of the per-window mutual informations
    WD = H(sum_w a_w m_w) - sum_w a_w H(m_w)  window disagreement: a Jensen-Shannon term, >= 0, 0 without overlap

With ``window_disagreement="separate"`` (default) MI is the blend above and WD is returned as its own map
``window_disagreement``: a deterministic network gives MI = 0 exactly with any overlap. With
``window_disagreement="mutual_information"`` (the behaviour before WD existed) MI = PE - EE, i.e. MI + WD above,
and no WD map is made. Computation: ``H(m_w)`` (evaluated in the precision of the probabilities, like each
sample's ``H(p_s)`` in EE, so that identical samples give ``H(m_w) = EE_w`` bitwise) is stitched like the means,
then ``WD = H(pred) - stitched H(m_w)`` and ``MI = PE - EE - WD``. Float rounding of the stitching (buffers in the
input's dtype, float32 for a half-precision input: :func:`_stitching_input`) can make the computed WD slightly
negative; values down to ``-WD_RTOL * eps * (1 + PE)`` (``eps`` the machine epsilon of the stitched dtype) are set to
0, lower values (a base inferer whose blending is not convex) are also set to 0 with a ``UserWarning``. A
``SimpleInferer`` does not stitch: WD is exactly 0 and every map is bit-identical in both modes.

Sources at the *network* level (ensemble members) are looped outside the inner inferer, one member on the
device at a time; because stitching is linear, merging the stitched statistics of the members equals
stitching the statistics of all samples (pred, EE, variance). The window disagreement is then that of each
member's own windows, averaged over members (``WD = mean_k WD_k``), and MI = PE - EE - WD holds the rest: the
blend of each member's per-window MI plus the disagreement between the members' stitched predictions,
``H(mean_k pred_k) - mean_k H(pred_k)``. Without overlap this is the usual MI; a deterministic ensemble of
identical members gives MI = 0 with any overlap.

Multi-label (region-based) networks: ``activation="sigmoid"`` with ``C >= 2`` output channels treats each
channel as an independent Bernoulli variable (:mod:`monai_unc.measures`, ``multilabel``): ``pred`` holds the mean
foreground probability per channel and every map is ``(B, C, *spatial)``, one per region. A single-channel sigmoid
network stays a two-class problem, ``pred = (1 - p, p)`` and ``(B, 1, *spatial)`` maps (the values are the same).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from monai.inferers import Inferer, SimpleInferer, SliceInferer
from torch import nn
from torch.utils._pytree import tree_flatten

from .._utils import (
    argmax,
    check_bool,
    check_finite,
    check_integer,
    check_probabilities,
    check_sample_batch_size,
    check_seed,
    compiled_draws_context,
    network_devices,
    plain_module,
    probability_tolerance,
    seeded_rng,
)
from ..keys import DEPRECATED_MEASURES, MIMeaning, UncertaintyKeys, canonical_measure, combine_mi_meanings
from ..measures import entropy_dtype
from ..networks.dropout import align_fused_attention, find_dropout_layers
from ..networks.shared import (
    PLAIN_TRACES,
    InputGuard,
    SharedPasses,
    SharingUnavailable,
    hidden_submodule,
    sample_batch,
    watch_input,
)
from ..stats import (
    MEAN_SQ_SUM,
    WD_RTOL,
    WINDOW_DISAGREEMENT_MODES,
    SampleStats,
    add_squares,
    check_accum_dtype,
    default_chunk_elements,
    derive_measures,
    sample_stats_warned_dtype,
    spatial_chunks,
    window_disagreement_from_stitched,
)

__all__ = [
    "check_inputs",
    "check_output_ndim",
    "network_output_tensor",
    "compute_device",
    "network_spatial_dims",
    "SampleSource",
    "StochasticSource",
    "UncertaintyOutput",
    "UncertaintyInferer",
    "SoftmaxInferer",
    "apply_activation",
    "warn_if_probabilities",
    "check_network_logits",
    "WINDOW_DISAGREEMENT_MODES",
    "WD_RTOL",
    "window_disagreement_from_stitched",
    "ARGMAX",
    "PRED_DTYPES",
]

K = UncertaintyKeys
logger = logging.getLogger(__name__)
Predictor = Callable[[torch.Tensor], torch.Tensor]
Wrapper = Callable[[Predictor], Predictor]

#: internal key: each window's own predictive entropy H(m_w), stitched like the means
_WINDOW_PE = "window_predictive_entropy"
#: output key of the label map ``argmax_c pred`` ``(B, 1, *spatial)`` that replaces ``pred`` with ``pred_dtype=None``
ARGMAX = "argmax"
#: values of ``UncertaintyInferer(pred_dtype=...)`` besides ``None``: ``"input"`` keeps the dtype of the maps
PRED_DTYPES = ("input", torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _label_dtype(num_classes: int) -> torch.dtype:
    """The smallest integer dtype of the ``argmax`` label map of ``num_classes`` classes."""
    if num_classes <= 256:
        return torch.uint8
    return torch.int16 if num_classes <= 2**15 else torch.int64


class SampleSource:
    """One axis of the sample product of an :class:`UncertaintyInferer`.

    Subclasses define ``variants(x)``: a sequence whose elements are ``None`` (call the predictor as is) or a
    wrapper ``predictor -> predictor`` (e.g. flip the input, predict, flip back); ``activate(network)``: a
    context manager entered once per call (e.g. switch dropout on); and ``mi_meaning``: what the mutual
    information over this source measures. ``level = "network"`` sources (ensembles) are looped outside the
    inner inferer by :meth:`members`. ``innermost = True`` puts the source last in the product whatever its
    position in the list, so that its variants run back to back for each combination of the other sources (a
    latent-variable source reuses one backbone pass for all its draws; see :class:`~monai_unc.inferers.SSNSource`),
    and its wrappers closest to the network, inside the other sources' wrappers.

    Attributes:
        mi_meaning: what the mutual information over this source measures (:class:`~monai_unc.keys.MIMeaning`).
        level: ``"window"`` (sampled inside every window of the inner inferer) or ``"network"`` (looped outside it).
        innermost: put the source last in the product and its wrappers closest to the network.
        shareable: the samples differ only through random draws inside the network (its variants are all ``None``),
            so the inferer may compute what they share once (``share_passes``; not beside an innermost source of
            several variants or of one variant drawing several times, whose draws must run back to back).

    Example:
        >>> import torch
        >>> from monai_unc.inferers import SampleSource, UncertaintyInferer
        >>> class Shift(SampleSource):  # predict on the image and on a copy shifted by one voxel
        ...     def variants(self, x):
        ...         def shifted(predictor):
        ...             return lambda t: torch.roll(predictor(torch.roll(t, 1, dims=-1)), -1, dims=-1)
        ...         return [None, shifted]
        >>> net = torch.nn.Conv2d(1, 2, 3, padding=1)
        >>> out = UncertaintyInferer([Shift()])(torch.rand(1, 1, 8, 8), net)
        >>> out.num_samples
        2
    """

    mi_meaning: MIMeaning = MIMeaning.EPISTEMIC
    level: str = "window"
    innermost: bool = False
    shareable: bool = False
    #: the source switches the network's dropout on itself (MC dropout, Rate-In): dropout left in training mode is
    #: then no surprise, and only normalisation layers in training mode are reported (see ``UncertaintyInferer``)
    _samples_dropout: bool = False

    def variants(self, x: torch.Tensor) -> Sequence[Wrapper | None]:
        """The wrappers of one call: ``None`` (the predictor as is) or ``predictor -> predictor``.

        Args:
            x: the (window) input ``(B, C, *spatial)``.

        Returns:
            One entry per sample of this source.
        """
        raise NotImplementedError

    def num_variants(self, x: torch.Tensor) -> int:
        """Number of samples this source draws for ``x`` (``len(self.variants(x))`` by default)."""
        return len(self.variants(x))

    def variant_names(self, x: torch.Tensor) -> list[str] | None:
        """What each variant of :meth:`variants` is, in words, for error messages (e.g. ``"augmentations[1]"``).

        An inferer whose window holds a non-finite output runs its samples again one at a time to name the one that
        produced it, from these names, when every source of the window has them (deterministic variants: flips,
        augmentations, transforms); the default, None, leaves the message without a name (a source drawing at
        random would not draw the same sample again).

        Args:
            x: the (window) input ``(B, C, *spatial)``.

        Returns:
            One name per variant, or None.

        Example:
            >>> import torch
            >>> from monai_unc.inferers import FlipSource
            >>> FlipSource("all").variant_names(torch.zeros(1, 1, 4, 4))
            ['no flip', 'flip over spatial axes (0,)', 'flip over spatial axes (1,)', 'flip over spatial axes (0, 1)']
        """
        return None

    def activate(self, network: nn.Module | None) -> contextlib.AbstractContextManager:
        """Context manager entered once per inferer call with the network (default: nothing)."""
        return contextlib.nullcontext()

    def reset(self) -> None:
        """Called at the start of every inferer call (clear per-call state such as :meth:`extra_outputs`)."""

    def check_input(self, x: torch.Tensor, device: torch.device) -> None:
        """Called once per inferer call, after :meth:`reset` and before any sample: refuse what cannot run.

        An input the source cannot serve gets an error that names what to change (an ensemble member whose dtype
        differs from the input's). Default: nothing.

        Args:
            x: the inferer's input ``(B, C, *spatial)``.
            device: where the windows run (the input's device, or a sliding window's ``sw_device``).
        """

    def reseed(self) -> None:
        """Called once per call of an inferer with a ``seed``, inside its private random stream, after it is seeded.

        A source whose draws come from a random state of its own rather than torch's (MONAI's random transforms
        draw from a numpy ``RandomState``, which the inferer's seed does not reach) seeds that state here from
        torch's stream, so that seeded calls repeat their draws. Without a seed it is not called. Default: nothing.
        """

    def prepare(self, x: torch.Tensor, predictor: Predictor) -> None:
        """Called once per window, before its samples, with the window input and the plain predictor.

        The predictor is the network and its extra arguments, without a wrapper (of a ``torch.compile`` wrapper, its
        Python module ``_orig_mod``): lets a source adapt to the input (Rate-In searches its dropout rates here).
        Default: nothing.
        """

    def extra_outputs(self) -> dict[str, Any]:
        """Per-call extras (not voxel maps) placed in :attr:`UncertaintyOutput.extras` after the call."""
        return {}

    def members(self, network: nn.Module | None, device: torch.device) -> Iterator[contextlib.AbstractContextManager]:
        """For ``level = "network"`` sources: one context manager per member that makes ``network`` that member."""
        raise NotImplementedError


class StochasticSource(SampleSource):
    """``num_samples`` calls of a network that samples internally.

    A latent-variable model such as SSN or the probabilistic U-Net, or any stochastic forward. MI over such samples
    is aleatoric (ValUES Appendix D) unless ``mi_meaning`` says otherwise.

    Args:
        num_samples: calls per window.
        mi_meaning: what the mutual information over the calls measures.

    Example:
        >>> import torch
        >>> from monai_unc.inferers import StochasticSource, UncertaintyInferer
        >>> noisy = lambda x: torch.cat([x, -x], dim=1) + torch.randn(1)  # a stochastic forward
        >>> out = UncertaintyInferer(StochasticSource(5), seed=0)(torch.rand(1, 1, 4, 4), noisy)
        >>> out.num_samples, out.mi_meaning.value
        (5, 'aleatoric')
    """

    def __init__(self, num_samples: int, mi_meaning: MIMeaning | str = MIMeaning.ALEATORIC) -> None:
        num_samples = check_integer(num_samples, "num_samples")
        self.num_samples = num_samples
        try:
            self.mi_meaning = MIMeaning(mi_meaning)
        except ValueError:  # found by hostile review 59: "'foo' is not a valid MIMeaning" named no argument
            raise ValueError(f"mi_meaning must be one of {[m.value for m in MIMeaning]}, got {mi_meaning!r}") from None

    def variants(self, x: torch.Tensor) -> Sequence[Wrapper | None]:
        """``num_samples`` plain calls."""
        return [None] * self.num_samples


class UncertaintyOutput(dict):
    """``dict[str, Tensor]`` keyed by :class:`UncertaintyKeys`, with attributes describing the maps.

    Args:
        *args: as for ``dict``.
        mi_meaning: what the mutual information measures (:class:`~monai_unc.keys.MIMeaning`).
        num_samples: how many samples went in.
        extras: per-call outputs that are not voxel maps (e.g. Rate-In's per-layer rates, ``rate_in_rates``).
        multilabel: whether the channels are independent Bernoulli variables (a sigmoid network with ``C >= 2``
            outputs: ``pred`` holds per-channel foreground probabilities that need not sum to 1).
        **kw: as for ``dict``.

    Example:
        >>> import torch
        >>> from monai_unc.inferers import UncertaintyOutput
        >>> out = UncertaintyOutput(pred=torch.full((1, 2, 4, 4), 0.5), num_samples=1)
        >>> out["pred"].shape, out.num_samples, out.multilabel
        (torch.Size([1, 2, 4, 4]), 1, False)
    """

    def __init__(
        self,
        *args: Any,
        mi_meaning: MIMeaning = MIMeaning.NONE,
        num_samples: int = 1,
        extras: dict[str, Any] | None = None,
        multilabel: bool = False,
        **kw: Any,
    ):
        super().__init__(*args, **kw)
        self.mi_meaning = MIMeaning(mi_meaning)
        self.num_samples = int(num_samples)
        self.multilabel = bool(multilabel)
        self.extras: dict[str, Any] = dict(extras) if extras else {}

    def __missing__(self, key: Any) -> Any:
        """``out["max_softmax"]`` (the key of older versions, one release) reads ``out["one_minus_max_prob"]``."""
        new = DEPRECATED_MEASURES.get(str(key))
        if new is None or new not in self:
            raise KeyError(key)
        return self[canonical_measure(str(key), stacklevel=3)]

    def get(self, key: Any, default: Any = None) -> Any:
        """``dict.get``, reading a deprecated measure name as ``out[key]`` does (with its ``DeprecationWarning``).

        Plain ``dict.get`` bypasses ``__missing__``, so ``out.get("max_softmax")`` of code written for an
        earlier version was None without a word.
        """
        if key in self:
            return dict.__getitem__(self, key)
        new = DEPRECATED_MEASURES.get(str(key))
        if new is None or new not in self:
            return default
        return dict.__getitem__(self, canonical_measure(str(key), stacklevel=3))


def _class_name(module: nn.Module) -> str:
    """The class name of ``module``; of a ``torch.jit.script`` ed module, that of the Python module it was made from."""
    if isinstance(module, torch.jit.RecursiveScriptModule):
        return str(getattr(module, "original_name", type(module).__name__))
    return type(module).__name__


#: normalisation layers that may hold running statistics, by class name (a scripted copy has no Python class)
_RUNNING_NORM_NAMES = frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "InstanceNorm1d",
                                 "InstanceNorm2d", "InstanceNorm3d"})


def _is_running_norm(module: nn.Module) -> bool:
    """A normalisation layer with running statistics, also a ``torch.jit.script`` ed one.

    Found by hostile testing: a scripted network in training mode updated its ``BatchNorm`` statistics unreported.
    """
    if isinstance(module, nn.modules.batchnorm._NormBase):
        return bool(module.track_running_stats)
    return (isinstance(module, torch.jit.RecursiveScriptModule) and _class_name(module) in _RUNNING_NORM_NAMES
            and bool(getattr(module, "track_running_stats", False)))


def _training_mode_kinds(network: Any, dropout: bool) -> list[str]:
    """The kinds of modules of ``network`` whose training mode changes what an inference pass computes.

    Normalisation layers with running statistics (``BatchNorm*``, ``SyncBatchNorm``, ``InstanceNorm*`` with
    ``track_running_stats=True``) in training mode normalise with each batch's statistics and update their running
    statistics; with ``dropout``, also dropout layers and post-hoc dropout that are active (training mode). Layers
    that behave alike in both modes (``InstanceNorm`` without running statistics, rate-0 dropout) are not listed.

    Args:
        network: the network (anything but an ``nn.Module`` has none).
        dropout: also look for active dropout.

    Returns:
        Sorted, distinct class names (``"BatchNorm3d"``, ``"Dropout"``, ``"post-hoc dropout"``, ...).
    """
    if not isinstance(network, nn.Module):
        return []
    kinds = set()
    for m in network.modules():
        if m.training and _is_running_norm(m):
            kinds.add(_class_name(m))
    if dropout:
        modules, hooks = find_dropout_layers(network)
        kinds.update(_class_name(m) for m in modules if m.training)
        active = {id(h) for h in hooks if h.mc_enabled}
        active.update(id(h) for m in network.modules() if m.training for h in m._forward_hooks.values())
        if any(id(h) in active for h in hooks):
            kinds.add("post-hoc dropout")
    return sorted(kinds)


def _training_mode_warning(inferer: str, found: Sequence[tuple[int | None, list[str]]]) -> str:
    """The message of :meth:`UncertaintyInferer.__call__`'s warning about networks left in training mode."""
    parts = []
    for index, kinds in found:
        who = "the network" if index is None else f"ensemble member {index}"
        parts.append(f"{who} is in training mode, with {', '.join(kinds)}")
    return (
        f"{inferer}: {'; '.join(parts)}. In training mode a normalisation layer with running statistics normalises "
        "with the statistics of each batch (and updates its running statistics) and dropout is active (random "
        "predictions). The inferer leaves modes as they are (MONAI convention): call .eval() on the network(s) "
        "first. Warned once per inferer"
    )


def network_spatial_dims(network: Any) -> int | None:
    """The number of spatial axes of ``network``'s convolutions (1, 2 or 3) when they all agree, else None.

    None means no convolution, or a mix; e.g. a transformer or a plain callable.

    Args:
        network: a module or any callable.

    Returns:
        1, 2, 3 or None.

    Example:
        >>> import torch
        >>> from monai_unc.inferers.sampling import network_spatial_dims
        >>> network_spatial_dims(torch.nn.Conv3d(1, 2, 3)), network_spatial_dims(torch.nn.Identity())
        (3, None)
    """
    if not isinstance(network, nn.Module):
        return None
    dims = {len(m.kernel_size) for m in network.modules() if isinstance(m, nn.modules.conv._ConvNd)}
    return dims.pop() if len(dims) == 1 else None


def check_inputs(inputs: Any, network: Any = None, base_inferer: Any = None) -> None:
    """Up-front checks of an inferer's ``inputs``.

    A floating-point tensor ``(B, C, *spatial)`` with 1 to 3 spatial axes, as many as the network's convolutions (a
    volume without its batch axis would otherwise be read as a batch of images) and as the sliding window's
    ``roi_size``; under MONAI's ``SliceInferer`` (a 2D network on the slices of a 3D volume) a 5-D input whose
    slices have as many axes as both.

    Args:
        inputs: the inferer's input.
        network: the network, to compare its convolutions' dimensionality.
        base_inferer: the inner inferer, to compare a sliding window's ``roi_size``.

    Raises:
        TypeError: naming ``inputs`` for a non-tensor.
        ValueError: naming ``inputs`` for a tensor that is not floating point, a wrong number of axes or an empty
            tensor (an axis of size 0).

    Example:
        >>> import torch
        >>> from monai_unc.inferers.sampling import check_inputs
        >>> check_inputs(torch.rand(1, 1, 8, 8, 8), torch.nn.Conv3d(1, 2, 3))  # fine
        >>> check_inputs(torch.rand(1, 8, 8, 8), torch.nn.Conv3d(1, 2, 3))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: ...
    """
    if not isinstance(inputs, torch.Tensor):
        raise TypeError(f"inputs must be a torch.Tensor (B, C, *spatial), got {type(inputs).__name__}")
    if not inputs.is_floating_point():
        raise ValueError(f"inputs must be a floating-point tensor (images), got dtype {inputs.dtype}")
    if not 3 <= inputs.ndim <= 5:
        raise ValueError(
            f"inputs must have shape (B, C, *spatial) with 1 to 3 spatial axes (4-D for 2D, 5-D for 3D images), "
            f"got {inputs.ndim}-D shape {tuple(inputs.shape)}"
        )
    if inputs.numel() == 0:
        # found by hostile review 59: an empty batch failed in torch.aminmax (RuntimeError), under a sliding window in
        # MONAI (UnboundLocalError), an empty spatial axis in the network's first convolution
        raise ValueError(f"inputs is empty (shape {tuple(inputs.shape)}): every batch, channel and spatial axis needs "
                         "at least one element")
    # MONAI's SliceInferer runs a 2D network on the 2D slices of a 3D input (found by hostile testing: it was
    # refused as a 3D input for a 2D network)
    slices = isinstance(base_inferer, SliceInferer)
    if slices and inputs.ndim != 5:
        raise ValueError(
            f"inputs must be a 5-D tensor (B, C, H, W, D) under a SliceInferer (2D slices of a 3D volume), got "
            f"{inputs.ndim}-D shape {tuple(inputs.shape)}"
        )
    window_axes = inputs.ndim - 2 - int(slices)
    dims = network_spatial_dims(network)
    if dims is not None and window_axes != dims:
        if slices:
            raise ValueError(
                f"base_inferer is a SliceInferer (2D slices of the 3D inputs {tuple(inputs.shape)}) but the network's "
                f"convolutions are {dims}D: a SliceInferer needs a 2D network"
            )
        hint = " (did you forget the batch axis? use inputs[None])" if inputs.ndim - 1 == dims else ""
        raise ValueError(
            f"inputs has {inputs.ndim - 2} spatial axes (shape {tuple(inputs.shape)}) but the network's "
            f"convolutions are {dims}D: expected a {dims + 2}-D tensor (B, C, *spatial){hint}"
        )
    roi = getattr(base_inferer, "orig_roi_size" if slices else "roi_size", None)
    if roi is not None and not isinstance(roi, int):
        roi = tuple(roi)
        if len(roi) != window_axes:
            per_slice = " per slice" if slices else ""
            raise ValueError(
                f"inputs has {window_axes} spatial axes{per_slice} (shape {tuple(inputs.shape)}) but the sliding "
                f"window's roi_size {roi} has {len(roi)}"
            )


def compute_device(inputs: torch.Tensor, base_inferer: Any = None) -> torch.device:
    """The device on which the network runs: a sliding window's ``sw_device`` if it names one, else the input's.

    MONAI's ``SlidingWindowInferer(sw_device="cuda", device="cpu")`` keeps a large volume and the stitched output on
    the CPU and runs every window on the GPU: network-level sources (ensemble members) must then go to ``sw_device``,
    not to the input's device.

    Args:
        inputs: the inferer's input.
        base_inferer: the inner inferer (its ``sw_device`` attribute is read when present).

    Returns:
        The device of the windows.

    Example:
        >>> import torch
        >>> from monai.inferers import SlidingWindowInferer
        >>> from monai_unc.inferers.sampling import compute_device
        >>> compute_device(torch.zeros(1, 1, 4, 4), SlidingWindowInferer((4, 4), sw_device="cpu", device="cpu"))
        device(type='cpu')
    """
    sw_device = getattr(base_inferer, "sw_device", None)
    return torch.device(sw_device) if sw_device is not None else inputs.device


def check_output_ndim(out: Any, x: torch.Tensor) -> None:
    """Refuse a network output whose number of axes differs from the input's.

    E.g. ``DynUNet(deep_supervision=True)`` in train mode stacks its heads into ``(B, K, C, *spatial)``, which would
    be read as classes.

    Args:
        out: the network output (a tensor, or a tuple / list whose first element is used).
        x: the network input.

    Raises:
        ValueError: when the numbers of axes differ.

    Example:
        >>> import torch
        >>> from monai_unc.inferers.sampling import check_output_ndim
        >>> check_output_ndim(torch.rand(1, 2, 4, 4), torch.rand(1, 1, 4, 4))  # fine
    """
    t = out[0] if isinstance(out, (tuple, list)) and out else out
    if isinstance(t, torch.Tensor) and t.ndim != x.ndim:
        raise ValueError(
            f"network output has {t.ndim} axes (shape {tuple(t.shape)}) for a {x.ndim}-D input {tuple(x.shape)}: "
            "expected (B, C, *spatial) like the input. A stacked deep-supervision output (B, heads, C, *spatial), "
            "e.g. DynUNet(deep_supervision=True) in train mode, is the likely cause: put the network in eval mode "
            "or take the first (full-resolution) head"
        )


def network_output_tensor(out: Any) -> torch.Tensor:
    """The tensor of a network output, as a plain tensor (a MONAI ``MetaTensor`` loses its metadata).

    The output itself, or the first (full-resolution) element of a tuple / list output (deep supervision).

    Args:
        out: the network output.

    Returns:
        The output tensor.

    Raises:
        ValueError: on an empty tuple / list.
        TypeError: when the output (or its first element) is not a tensor.

    Example:
        >>> import torch
        >>> from monai_unc.inferers.sampling import network_output_tensor
        >>> network_output_tensor((torch.zeros(1, 2, 4), torch.zeros(1, 2, 2))).shape
        torch.Size([1, 2, 4])
    """
    if isinstance(out, (tuple, list)):
        if not out:
            raise ValueError("network returned an empty sequence")
        out = out[0]
    if not isinstance(out, torch.Tensor):
        # found by review 64: a network returning a dict (MONAI's inferers pass or stitch one) got "network output must
        # be a tensor, got dict", naming neither its entries nor what to give instead
        got = type(out).__name__
        if isinstance(out, dict):
            got = f"a dict with the entries {sorted(map(str, out))}"
        raise TypeError(
            f"network output must be a tensor (B, C, *spatial), or a tuple / list whose first element is the "
            f"full-resolution one (deep supervision), got {got}: the uncertainty inferers sample one output; give a "
            "network that returns the logits to sample (e.g. a module whose forward returns net(x)[key])"
        )
    return out.as_tensor() if hasattr(out, "as_tensor") else out


def warn_if_probabilities(out: Any, activation: str | None) -> bool:
    """Warn when a network's output, given to ``activation`` as logits, lies in ``[0, 1]`` like probabilities.

    A network that ends in its own ``Sigmoid`` (or ``Softmax``) layer returns probabilities; ``activation="sigmoid"``
    then applies the sigmoid a second time, which maps every probability into ``[0.5, 0.731]``: every voxel is
    predicted foreground, every entropy is near ``log 2``, without an error (found by hostile review). Logits of a
    whole window (or volume) rarely all lie in ``[0, 1]``; a constant output (a zero-initialised head) is not taken
    for probabilities. The inferers call this on the first sample of a call.

    Args:
        out: the network's output (a tensor, or what :func:`network_output_tensor` accepts).
        activation: the inferer's activation; ``None`` (probabilities expected) is not checked.

    Returns:
        Whether it warned.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     warn_if_probabilities(torch.tensor([[[0.1, 0.9]]]), "sigmoid"), len(w)
        (True, 1)
        >>> warn_if_probabilities(torch.tensor([[[-3.0, 2.5]]]), "sigmoid")
        False
    """
    if activation not in ("softmax", "sigmoid"):
        return False
    t = network_output_tensor(out)
    if t.numel() == 0 or t.is_complex():
        return False
    lo, hi = (float(v) for v in torch.aminmax(t.detach()))
    if not (0.0 <= lo < hi <= 1.0):
        return False
    warnings.warn(
        f"the network's output lies in [0, 1] (from {lo:.4g} to {hi:.4g}) as probabilities do, and "
        f"activation={activation!r} applies a {activation} to it as to logits: if the network ends in its own "
        f"{'Sigmoid' if activation == 'sigmoid' else 'Softmax'} layer, the probabilities are wrong (a second sigmoid "
        "puts every one in [0.5, 0.731]: every voxel foreground); give the network without its final activation "
        "(its logits), or activation=None for class probabilities",
        UserWarning,
        stacklevel=3,
    )
    return True


def _output_layout(out: torch.Tensor, activation: str) -> tuple[bool, str]:
    """``(multilabel, kind)`` of a network output under ``activation`` (``"softmax"`` or ``"sigmoid"``).

    With the errors of :func:`_to_probs`; ``kind`` names the fused kernel's activation (one sigmoid channel gives two
    classes, ``"binary_sigmoid"``).
    """
    if out.ndim < 3:
        raise ValueError(f"network output must be (B, C, *spatial), got shape {tuple(out.shape)}")
    if activation == "softmax":
        if out.shape[1] < 2:
            raise ValueError(
                "activation='softmax' needs at least 2 output channels; for a single-channel binary network "
                "use activation='sigmoid'"
            )
        return False, "softmax"
    if activation == "sigmoid":
        return (False, "binary_sigmoid") if out.shape[1] == 1 else (True, "sigmoid")
    raise ValueError(f"activation must be 'softmax', 'sigmoid' or None, got {activation!r}")


def _to_probs(out: Any, activation: str | None, check: bool = True) -> tuple[torch.Tensor, bool]:
    """:func:`apply_activation` plus whether the result is multi-label (per-channel Bernoulli)."""
    out = network_output_tensor(out)
    if out.ndim < 3:
        raise ValueError(f"network output must be (B, C, *spatial), got shape {tuple(out.shape)}")
    if check:
        check_finite(out, "network output")
    if out.dtype in (torch.float16, torch.bfloat16):
        out = out.float()
    if activation == "softmax":
        if out.shape[1] < 2:
            raise ValueError(
                "activation='softmax' needs at least 2 output channels; for a single-channel binary network "
                "use activation='sigmoid'"
            )
        return torch.softmax(out, dim=1), False
    if activation == "sigmoid":
        if out.shape[1] == 1:
            # the background as sigmoid(-z), not 1 - sigmoid(z): the float32 sigmoid rounds to 1 from z = 17 on,
            # and 1 - p was then 0 where the two-class softmax of (0, z) gives 4e-8 .. 1e-38 (found by hostile
            # testing: an NLL of 34.5 nats, the 1e-15 clamp, for a voxel whose exact NLL is 20)
            return torch.cat([torch.sigmoid(-out), torch.sigmoid(out)], dim=1), False
        return torch.sigmoid(out), True
    if activation is None:
        try:
            check_probabilities(out, "network output")
        except ValueError as e:  # found by review 61: --activation none on a network of logits said only "must lie
            # in [0, 1]", not which activation was meant
            raise ValueError(f"{str(e).splitlines()[0]}; activation None (--activation none) reads the output as "
                             "class probabilities: a network that outputs logits needs activation 'softmax' "
                             "(--activation softmax), or 'sigmoid' for one binary task per channel") from None
        return out, False
    raise ValueError(f"activation must be 'softmax', 'sigmoid' or None, got {activation!r}")


def apply_activation(out: Any, activation: str | None, check: bool = True) -> torch.Tensor:
    """Network output -> probabilities ``(B, C, *spatial)``.

    ``"softmax"`` over dim 1 (in float32 for half-precision outputs), ``C >= 2`` classes; ``"sigmoid"``: a
    single-channel binary output is returned as the two class channels ``(1 - p, p)`` (the background as
    ``sigmoid(-z)``, which keeps its tail where ``1 - p`` rounds to 0), a multi-channel output
    (``C >= 2``, region-based / multi-label networks such as BraTS WT/TC/ET) as the per-channel foreground
    probabilities ``sigmoid(z_c)``, each channel an independent Bernoulli variable (they need not sum to 1);
    ``None`` when the network already outputs class probabilities (validated: they must sum to 1). A tuple/list
    output (deep supervision) uses its first, full-resolution element.

    Args:
        out: network output ``(B, C, *spatial)`` (or a tuple / list of them).
        activation: ``"softmax"``, ``"sigmoid"`` or ``None``.
        check: refuse non-finite outputs (``False`` skips that pass; the inferers check the accumulated statistics
            instead, where any NaN of any sample ends up).

    Returns:
        The probabilities ``(B, C, *spatial)`` (``(B, 2, *spatial)`` for a one-channel sigmoid output).

    Raises:
        ValueError: on non-finite outputs or probabilities that do not sum to 1.

    Example:
        >>> import torch
        >>> from monai_unc.inferers import apply_activation
        >>> apply_activation(torch.zeros(1, 1, 2), "sigmoid")
        tensor([[[0.5000, 0.5000],
                 [0.5000, 0.5000]]])
        >>> apply_activation(torch.tensor([[[0.0], [1.0]]]), "softmax").round(decimals=4)
        tensor([[[0.2689],
                 [0.7311]]])
    """
    return _to_probs(out, activation, check)[0]


def _is_probability_map(out: Any) -> bool:
    """Whether a network output already is a non-uniform probability map over its ``C >= 2`` channels.

    Every value in ``[0, 1]`` and the channels summing to 1 at every voxel (within
    :func:`~monai_unc._utils.probability_tolerance` of the dtype), and not the uniform map ``1 / C`` (which a softmax
    leaves as it is). Logits practically never are one: a network with a softmax in its forward is.
    """
    t = network_output_tensor(out).detach()
    if t.ndim < 3 or t.shape[1] < 2 or not t.is_floating_point() or t.numel() == 0:
        return False
    tol = probability_tolerance(t.dtype)
    t = t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
    lo, hi = torch.aminmax(t)
    if not (bool(lo >= -tol) and bool(hi <= 1 + tol)):  # NaN compares False: not a probability map
        return False
    if not bool((t.sum(dim=1) - 1).abs().amax() <= tol):
        return False
    # max |t - 1/C| from the extremes, in t's dtype (the same roundings as the elementwise form): (t - 1/C).abs() made
    # two temporaries of the network's whole output, beyond the memory model, on the first sample of every call
    # (found by the review of the GPU paths)
    c = 1.0 / t.shape[1]
    return bool(torch.maximum(hi - c, c - lo) > tol)


def check_network_logits(out: Any, activation: str | None, who: str = "the network") -> bool:
    """Refuse, or warn about, a network output that already holds probabilities where ``activation`` expects logits.

    Under ``"softmax"`` a non-uniform probability map (every value in ``[0, 1]``, the channels summing to 1: a
    softmax in the network's forward) is refused, since a second softmax flattens it towards uniform; any other
    output in ``[0, 1]`` is warned about (:func:`warn_if_probabilities`). The one check of the inferers (on the first
    sample of a call) and of ``monai-unc calibrate`` (on the first case's output, which it fits a temperature to:
    found by hostile review, it took such probabilities for logits without a word).

    Args:
        out: the network's output (a tensor, or what :func:`network_output_tensor` accepts).
        activation: ``"softmax"``, ``"sigmoid"`` or ``None`` (probabilities expected: not checked).
        who: how the message names the network (``"ensemble member 1 (networks[1])"``).

    Returns:
        Whether it warned.

    Raises:
        ValueError: a probability map under ``"softmax"``, naming ``who``.

    Example:
        >>> check_network_logits(torch.tensor([[[2.0, -1.0]], [[-0.5, 3.0]]]).transpose(0, 1), "softmax")
        False
        >>> check_network_logits(torch.tensor([[[0.9], [0.1]]]), "softmax")
        Traceback (most recent call last):
        ...
        ValueError: the network already returns probabilities (every value in [0, 1], the channels summing to 1) ...
    """
    if activation == "softmax" and _is_probability_map(out):
        raise ValueError(
            f"{who} already returns probabilities (every value in [0, 1], the channels summing to 1) but "
            "activation='softmax' would apply a second softmax, flattening them towards uniform: return logits, or "
            "pass activation=None (then every network / member must return probabilities)"
        )
    return warn_if_probabilities(out, activation)


def _network_name(index: int | None, source: SampleSource | None = None) -> str:
    """``"ensemble member i (networks[i])"`` for a member of a network-level source, else ``"the network"``.

    A member given as a checkpoint path is named with its path too: ``"ensemble member i (networks[i]: PATH)"``.
    """
    if index is None:
        return "the network"
    networks = getattr(source, "networks", None)
    member = networks[index] if isinstance(networks, Sequence) and 0 <= index < len(networks) else None
    path = f": {os.fspath(member)}" if isinstance(member, (str, os.PathLike)) else ""
    return f"ensemble member {index} (networks[{index}]{path})"


def _member_output(shape: torch.Size, multilabel: bool) -> str:
    """A member's output ``(B, C, *spatial)`` in words, for :func:`_check_member_output`."""
    kind = "multilabel (sigmoid region)" if multilabel else "class"
    return f"{int(shape[1])} {kind} channels on the spatial grid {tuple(shape[2:])}"


def _check_output_grid(pred: torch.Tensor, x: torch.Tensor, who: str) -> None:
    """Refuse a network whose stitched output is not on its input's spatial grid.

    Found by hostile review: a single network that downsamples (a strided convolution without upsampling) or crops
    its output gave every map on its own smaller grid under ``SimpleInferer`` and ``SlidingWindowInferer`` (which
    scales the windows to the output) alike, and ``monai-unc infer`` wrote them with the image's affine; only the
    members of an ensemble were compared, with each other.

    Args:
        pred: the stitched mean probabilities ``(B, C, *spatial)``.
        x: the inferer's input ``(B, C_in, *spatial)``.
        who: how the message names the network (``"the network (UNet)"``, ``"ensemble member 1 (...)"``).

    Raises:
        ValueError: naming the network and both grids.
    """
    if tuple(pred.shape[2:]) != tuple(x.shape[2:]):
        raise ValueError(
            f"{who} returns its output on the spatial grid {tuple(pred.shape[2:])} but its input is on "
            f"{tuple(x.shape[2:])}: the uncertainty maps must be on the input's grid (a network that downsamples, "
            "crops or pads its output); use a network whose output keeps its input's grid"
        )


def _check_member_output(index: int, pred: torch.Tensor, multilabel: bool, first: tuple[torch.Size, bool] | None,
                         source: SampleSource | None = None) -> tuple[torch.Size, bool]:
    """Refuse an ensemble member whose stitched output differs from member 0's in channels, kind or grid.

    Found by hostile testing: a member with another spatial size failed in PyTorch's broadcasting (a ``RuntimeError``
    naming neither the ensemble nor the member) and one with another class count with "cannot merge statistics".

    Args:
        index: the member's index.
        pred: its stitched mean probabilities ``(B, C, *spatial)``.
        multilabel: whether its channels are independent Bernoulli variables.
        first: member 0's ``(shape, multilabel)``, or None for member 0 itself.
        source: the network-level source, whose checkpoint members are named with their paths.

    Returns:
        ``(shape, multilabel)`` of member 0.

    Raises:
        ValueError: naming the member and both outputs.
    """
    mine = (pred.shape, bool(multilabel))
    if first is None:
        return mine
    if mine != first:
        raise ValueError(
            f"{_network_name(index, source)} returns {_member_output(*mine)} but ensemble member 0 returns "
            f"{_member_output(*first)}: the members of an ensemble must predict the same classes on the same grid"
        )
    return first


class UncertaintyInferer(Inferer):
    """MONAI ``Inferer`` sampling a product of sources into streaming statistics.

    Every sample's probabilities stream into :class:`~monai_unc.stats.SampleStats`, so memory does not grow with the
    number of samples; the maps (predictive entropy, expected entropy, mutual information, variance, ...) are
    derived at the end.

    Args:
        sources: sample sources; the samples are their Cartesian product (e.g. ``[MCDropoutSource(10),
            FlipSource("all")]`` gives 10 x 8 samples in 3D). No source = one deterministic pass.
        base_inferer: the inner MONAI inferer (default ``SimpleInferer()``; ``SlidingWindowInferer`` for large
            volumes; ``buffer_steps`` is refused because MONAI then stitches only the first output).
        activation: ``"softmax"`` (a network or ensemble member whose output already is a non-uniform probability
            map, a softmax in its forward, is refused with a ``ValueError`` naming it), ``"sigmoid"`` (one channel:
            binary; ``C >= 2`` channels: multi-label, one independent Bernoulli variable per channel and
            ``(B, C, *spatial)`` maps) or ``None`` (already class probabilities).
        keys: measures to return (default: all available, plus ``window_disagreement`` when ``base_inferer`` is
            not a ``SimpleInferer`` and ``window_disagreement="separate"``); see :class:`UncertaintyKeys`.
        keep_samples: also return ``samples`` ``(S, B, C, *spatial)`` (memory grows with S); ``keys`` may then name
            ``samples`` (without it, ``keys`` naming ``samples`` is refused).
        track_variance: keep the second moment to report ``variance``.
        normalize: divide entropies by ``log C``.
        seed: seed for a private random stream (the global RNG state is restored afterwards): every call with the
            same seed draws the same samples. An integer in ``[0, 2**64)`` (a float, a bool or a negative seed is
            refused: torch would truncate or wrap it into another seed's draws). Sources with a random state of their
            own are seeded from it (:meth:`SampleSource.reseed`: MONAI's random transforms in
            :class:`~monai_unc.inferers.InvertibleTransformSource`); ``None``: torch's global stream, and MONAI's
            random transforms draw from their own ``RandomState`` as usual.
        accum_dtype: dtype of the running sums (see :mod:`monai_unc.stats`); ``None`` (default): float64 up to
            ``FLOAT64_MAX_CLASSES`` (16) classes and for float64 probabilities (a float64 network), float32 above
            (error bound in :mod:`monai_unc.stats`).
        class_variance: keep the second moment per class (``C`` channels per voxel); default: one channel
            ``sum_c p_c^2``, which gives the same ``variance`` map (the mean over classes) up to rounding. Multi-label
            outputs keep one per channel either way (their variance is per channel).
        pred_dtype: dtype of ``pred``: ``"input"`` (default, that of the maps), ``torch.float16`` /
            ``torch.bfloat16`` (half the memory of the returned mean probabilities) or ``torch.float32`` /
            ``torch.float64``; ``None``: no ``pred`` but ``argmax`` ``(B, 1, *spatial)``, the label map
            ``argmax_c pred`` (uint8 up to 256 classes; none for multi-label outputs), for callers that need only the
            segmentation and the scalar maps.
        no_grad: run under ``torch.no_grad()`` (default). ``False`` runs the network with autograd enabled (for a
            network whose forward needs it), but the outputs are never differentiable: every sample's probabilities
            enter the statistics detached (the running sums are updated in place), so no returned map requires grad
            and a backward pass through them is impossible. To differentiate an uncertainty measure, compute it from
            the stacked softmax outputs with :mod:`monai_unc.measures` (e.g.
            :func:`~monai_unc.measures.predictive_entropy`), which keeps the autograd graph.
        window_disagreement: ``"separate"`` (default): under overlapping sliding windows MI is the blend of the
            per-window MIs and the disagreement between windows is its own map ``window_disagreement``, so that
            PE = EE + MI + WD; ``"mutual_information"``: MI = PE - EE counts the window disagreement (the
            behaviour before this option existed). See the module docstring.
        share_passes: compute once per window (and per variant of the other sources) what the samples of a
            ``shareable`` source (MC dropout, Rate-In) have in common, and run only the part downstream of the random
            draws for every sample (:class:`~monai_unc.networks.shared.SharedPasses`; exact, on by default). Where
            the network's calls cannot be followed it falls back to full passes with one log line saying why.
            Where little is shared and the samples would replay one at a time, they run as full passes, and later
            windows like it skip the trace (:class:`~monai_unc.networks.shared.PlainTraces`).
            ``False``: one full pass per sample.
        sample_batch_size: with ``share_passes``, how many samples run at once along the batch axis (each with its
            own random draws): ``"auto"`` (default) sizes the batches so that they need no more than the traced first
            sample or a tenth of the case's stitched buffers (:func:`~monai_unc.networks.shared.auto_sample_batch`),
            or a fixed integer (a Python or numpy integer >= 1). A batch of k samples draws their masks in one call,
            so with a ``seed`` another batch size (or ``share_passes=False``) draws other masks: the maps then differ
            by sampling noise; the same settings repeat the same draws.

    Calling it returns an :class:`UncertaintyOutput` (a ``dict[str, Tensor]``, maps ``(B, 1, *spatial)``);
    MetaTensor inputs give MetaTensor maps carrying the input's metadata.

    Network modes are left as they are (MONAI convention: call ``network.eval()`` first); a sample source switches
    only what it samples (dropout for MC dropout and Rate-In). A network (or ensemble member) in training mode with
    normalisation layers that keep running statistics (``BatchNorm``: they would normalise with each batch's
    statistics and update the running ones) or, unless a source samples dropout, with active dropout gets a
    ``UserWarning`` naming the member and the kinds of layers, once per inferer.

    A ``torch.compile`` network (or member) is sampled with ``torch._inductor.config.fallback_random`` set, so that
    the graphs compiled during the call draw their random numbers (dropout masks, Rate-In's search, SSN latents) from
    torch's generator and a seeded call gives the maps of the plain network
    (:func:`~monai_unc._utils.compiled_draws_context`); the setting is restored afterwards.

    Example:
        >>> from monai_unc.inferers import FlipSource, MCDropoutSource, UncertaintyInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(
        ...     torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(0.3), torch.nn.Conv3d(4, 3, 1)
        ... ).eval()
        >>> image = torch.rand(1, 1, 4, 4, 4)
        >>> inferer = UncertaintyInferer([MCDropoutSource(3), FlipSource("all")], seed=0)
        >>> out = inferer(image, net)
        >>> out.num_samples, out.mi_meaning.value
        (24, 'epistemic')
        >>> sorted(out)
        ['expected_entropy', 'mutual_information', 'one_minus_max_prob', 'pred', 'predictive_entropy', 'variance']
        >>> out["pred"].shape, out["mutual_information"].shape
        (torch.Size([1, 3, 4, 4, 4]), torch.Size([1, 1, 4, 4, 4]))
        >>> pe, ee, mi = out["predictive_entropy"], out["expected_entropy"], out["mutual_information"]
        >>> bool(torch.allclose(pe, ee + mi, atol=1e-6))
        True
    """

    default_keys: tuple[str, ...] | None = None

    @staticmethod
    def _refuse_sources(kwargs: dict[str, Any], name: str) -> None:
        """``ValueError`` for a ``sources`` keyword given to an inferer that builds its own sources.

        Found by hostile testing: ``TTAInferer`` and ``EnsembleInferer`` dropped ``sources=[MCDropoutSource(5)]``
        without a word (2 samples where 10 were asked for); an empty ``sources`` is accepted.
        """
        if "sources" in kwargs:
            if kwargs.pop("sources"):
                raise ValueError(f"{name} builds its own sample sources and takes no sources=; combine sources with "
                                 "UncertaintyInferer([...]) (EnsembleInferer: extra_sources=)")

    def __init__(
        self,
        sources: Sequence[SampleSource] | SampleSource = (),
        base_inferer: Inferer | None = None,
        activation: str | None = "softmax",
        keys: Iterable[str] | None = None,
        keep_samples: bool = False,
        track_variance: bool = True,
        normalize: bool = False,
        seed: int | None = None,
        accum_dtype: torch.dtype | None = None,
        no_grad: bool = True,
        window_disagreement: str = "separate",
        class_variance: bool = False,
        pred_dtype: torch.dtype | str | None = "input",
        share_passes: bool = True,
        sample_batch_size: int | str = "auto",
    ) -> None:
        super().__init__()
        if not isinstance(share_passes, bool):
            raise TypeError(f"share_passes must be True or False, got {share_passes!r}")
        sample_batch_size = check_sample_batch_size(sample_batch_size)
        self.share_passes = share_passes
        self.sample_batch_size = sample_batch_size
        self._warned_training_mode = False  # the warning about networks in training mode: once per inferer
        if pred_dtype is not None and not any(pred_dtype == d for d in PRED_DTYPES):
            raise ValueError(f"pred_dtype must be None or one of {PRED_DTYPES}, got {pred_dtype!r}")
        check_accum_dtype(accum_dtype)
        for flag, value in (("keep_samples", keep_samples), ("track_variance", track_variance),
                            ("normalize", normalize), ("no_grad", no_grad), ("class_variance", class_variance)):
            check_bool(value, flag)
        if activation not in ("softmax", "sigmoid", None):
            raise ValueError(f"activation must be 'softmax', 'sigmoid' or None, got {activation!r}")
        if window_disagreement not in WINDOW_DISAGREEMENT_MODES:
            raise ValueError(
                f"window_disagreement must be one of {WINDOW_DISAGREEMENT_MODES}, got {window_disagreement!r}"
            )
        self.window_disagreement = window_disagreement
        if isinstance(sources, SampleSource):
            sources = [sources]  # one source needs no list
        self.sources = list(sources)
        bad = [type(src).__name__ for src in self.sources if not isinstance(src, SampleSource)]
        if bad:
            raise TypeError(f"sources must be SampleSource objects (or one of them), got {', '.join(bad)}")
        for s in self.sources:
            if not isinstance(s, SampleSource):
                raise TypeError(f"sources must be SampleSource objects, got {type(s).__name__}")
        if sum(s.level == "network" for s in self.sources) > 1:
            raise ValueError("at most one network-level source (ensemble) per inferer")
        self.base_inferer = base_inferer if base_inferer is not None else SimpleInferer()
        if not callable(self.base_inferer):
            raise TypeError("base_inferer must be a MONAI Inferer (callable)")
        self._check_base_inferer()
        self.activation = activation
        marginal = [s for s in self.sources if getattr(s, "marginalize", False)]
        if marginal and activation != "softmax":
            # the latent-averaged sample is log(mean softmax): another activation would read it as logits of another
            # kind (sigmoid: m / (1 + m)) or refuse it as probabilities outside [0, 1]
            raise ValueError(f"activation must be 'softmax' with {marginal[0]!r} (it returns the log of the mean "
                             f"softmax over its latent draws), got {activation!r}")
        keys = keys if keys is not None else self.default_keys
        if keys is not None:
            if isinstance(keys, str):
                keys = [keys]
            valid = [k.value for k in K] + list(DEPRECATED_MEASURES)
            unknown = [str(k) for k in keys if str(k) not in valid]
            if unknown:
                raise ValueError(f"keys: unknown output name(s) {unknown}; valid: {[k.value for k in K]}")
        self.keys = None if keys is None else [K(k).value for k in keys]
        if self.keys is not None and K.PRED.value in self.keys and pred_dtype is None:
            raise ValueError("keys asks for 'pred' but pred_dtype=None keeps no mean probabilities")
        if self.keys is not None and K.VARIANCE.value in self.keys and not track_variance:
            raise ValueError("keys asks for 'variance' but track_variance=False")
        if self.keys is not None and K.SAMPLES.value in self.keys and not keep_samples:
            # found by hostile testing: accepted here, then every sample was computed and derive_measures raised
            # "unknown measure 'samples'" at the end (with keep_samples=True too)
            raise ValueError("keys asks for 'samples' but keep_samples=False keeps no samples")
        if self.keys is not None and K.WINDOW_DISAGREEMENT.value in self.keys and window_disagreement != "separate":
            raise ValueError(
                "keys asks for 'window_disagreement' but window_disagreement='mutual_information' counts it in MI"
            )
        self.keep_samples = bool(keep_samples)
        self.track_variance = bool(track_variance)
        self.normalize = bool(normalize)
        self.seed = check_seed(seed)
        self.accum_dtype = accum_dtype
        self.no_grad = bool(no_grad)
        self.class_variance = bool(class_variance)
        self.pred_dtype = pred_dtype

    def _check_base_inferer(self) -> None:
        steps = getattr(self.base_inferer, "buffer_steps", None)
        if steps is not None and steps > 0:
            raise ValueError(
                "base_inferer is a SlidingWindowInferer with buffer_steps set: MONAI then stitches only the first "
                "output of the window callable and drops the uncertainty statistics; use buffer_steps=None"
            )
        if getattr(self.base_inferer, "with_coord", False):
            raise ValueError("base_inferer with with_coord=True is not supported (the network gets no coordinates)")

    # ------------------------------------------------------------------------------------------------
    @property
    def mi_meaning(self) -> str:
        """What the mutual information measures for this inferer's sources.

        The rule of :func:`~monai_unc.keys.combine_mi_meanings`, the same as the output's
        :attr:`UncertaintyOutput.mi_meaning`: only sources drawing more than one sample count (a marginalised
        :class:`~monai_unc.inferers.SSNSource` draws one). Before seeing an input, flips count as varying.
        """
        return combine_mi_meanings((s.mi_meaning, _planned_samples(s)) for s in self.sources)

    def _window_stats(self, multilabel: bool) -> SampleStats:
        """The running statistics of one window's samples (no value checks: the inferer checks the outputs)."""
        # half-precision sums: warned once, by the constructor (review 68: not by filtering the warning by its text
        # inside catch_warnings, process-wide, which re-showed the caller's once-per-location warnings every window)
        return sample_stats_warned_dtype(track_variance=self.track_variance, accum_dtype=self.accum_dtype,
                                         validate=False, multilabel=multilabel, class_variance=self.class_variance)

    def _window_fn(
        self, network: Callable, window_sources: Sequence[SampleSource]
    ) -> tuple[Callable, dict[str, Any]]:
        """The window callable and a dict in which it records ``multilabel``.

        ``multilabel``: whether the outputs are per-channel Bernoulli probabilities.
        """
        info: dict[str, Any] = {"multilabel": None, "activation_checked": False}

        def window(x: torch.Tensor, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
            # a half-precision input is stitched from a float32 copy (_stitching_input): the network gets its windows
            # in the input's own dtype
            x = x.to(info.get("input_dtype", x.dtype))
            stats: SampleStats | None = None
            probs_dtype = x.dtype
            kept: dict[int, torch.Tensor] = {}
            # (min, max) of every output: +-inf logits of a sigmoid and -inf of a softmax give probabilities of
            # exactly 0 / 1, which the check of the summed entropy below cannot see (found by hostile testing: a
            # float16 network whose logits overflowed gave confident maps without an error); aminmax makes no
            # temporary of the output's size
            extremes: list[torch.Tensor] = []
            # the fused update of network outputs (SampleStats._update_outputs) is tried first, and kept for the
            # window when the first sample took it; nonfinite: its flag of non-finite outputs (int32 on the device)
            fused_outputs: list[bool | None] = [None]
            nonfinite: list[torch.Tensor] = []

            def base(t: torch.Tensor) -> Any:
                return network(t, *args, **kwargs)

            def base_plain(t: torch.Tensor) -> Any:  # a compiled network's Python module: see RateInSource.prepare
                return plain_module(network)(t, *args, **kwargs)

            guard = InputGuard(x)
            for src in window_sources:
                src.prepare(x, base_plain)
                guard.restore()

            def add(raw: Any, indices: Sequence[int]) -> None:
                nonlocal stats, probs_dtype
                check_output_ndim(raw, x)
                if not info["activation_checked"]:  # once per call and network: its first sample
                    # a softmax in the network's forward was softmaxed again, silently flattening its probabilities
                    # towards uniform (found by hostile testing: an ensemble mixing a member that ends in logits with
                    # one that ends in nn.Softmax); a probability map under "softmax" is refused, other outputs in
                    # [0, 1] (a sigmoid in the forward: a second one puts every voxel in the foreground) warned
                    info["activation_checked"] = True
                    check_network_logits(raw, self.activation, info.get("who", "the network"))
                if self.activation is not None and not self.keep_samples and fused_outputs[0] is not False:
                    z = network_output_tensor(raw).detach()
                    multilabel, kind = _output_layout(z, self.activation)
                    if stats is None:  # the window's first sample decides, for every sample of the window (a
                        # deterministic network's samples must give the same probabilities bit for bit: MI = 0)
                        stats = self._window_stats(multilabel)
                        info["multilabel"] = multilabel
                        probs_dtype = info["probs_dtype"] = entropy_dtype(z.dtype)
                        fused_outputs[0] = stats._takes_outputs(z, kind)
                        if fused_outputs[0]:
                            nonfinite.append(torch.zeros(1, dtype=torch.int32, device=z.device))
                    # the activation, the outputs' finiteness and every sum in one launch where the fused kernel
                    # takes the outputs (a GPU): with a pass of a few milliseconds the host's time per sample shows
                    # (the separate steps: four launches and their Python)
                    if fused_outputs[0] and stats._update_outputs(z, kind, len(indices), nonfinite[0]):
                        info["classes"] = int(stats.sum_p.shape[1])
                        return
                    # the separate steps (a later refusal means outputs that the steps below reject, e.g. of another
                    # shape, or a kernel that failed to build)
                    fused_outputs[0] = False
                if self.activation is not None:  # probabilities (None) are checked by _to_probs itself
                    extremes.append(torch.stack(torch.aminmax(network_output_tensor(raw).detach())).float())
                probs, multilabel = _to_probs(raw, self.activation, check=False)
                if stats is None:
                    stats = self._window_stats(multilabel)
                    info["multilabel"] = multilabel
                    probs_dtype = info["probs_dtype"] = probs.dtype
                info["classes"] = int(probs.shape[1])
                b = x.shape[0]
                if len(indices) == 1:
                    stats.update(probs)
                else:  # k replayed samples stacked on the batch axis: the sums are read once for the k
                    stats.update_many(probs, num_samples=len(indices))
                if self.keep_samples:
                    for j, index in enumerate(indices):
                        p = probs if len(indices) == 1 else probs[j * b:(j + 1) * b]
                        # detached, as the statistics take them (found by hostile testing: with no_grad=False the
                        # returned samples required grad and each held its pass's autograd graph, every activation
                        # of the network, until the output was freed)
                        kept[index] = p.detach().to(x.dtype)

            shared = self._shared_source(network, window_sources, x, info, (args, kwargs))
            if shared is None:
                inner = _innermost_count(window_sources)
                for i, combo in enumerate(itertools.product(*(s.variants(x) for s in window_sources))):
                    add(_wrapped(base, combo, inner)(x), [i])
                    guard.restore()  # after add: an output that is a view of the input is read before
            else:
                # a torch.compile wrapper (``torch.compile(net)``, MONAI's ``SupervisedEvaluator(compile=True)``):
                # the shared passes follow the calls of its Python module, as the nnU-Net predictor does; the
                # compiled graph would trace the forwards the trace wraps, and dynamo fails on them
                plain = plain_module(network)

                def plain_base(t: torch.Tensor) -> Any:
                    return plain(t, *args, **kwargs)

                # the network's other arguments decide its calls as its modules do: part of a remembered verdict's key
                info["network_args"] = (tuple(args), tuple(sorted(kwargs.items())))
                self._shared_window(x, plain, base if plain is network else plain_base, window_sources, shared, add,
                                    info)
                guard.restore()  # the replays start from the input as given themselves; the caller's tensor here
            # a NaN of any sample makes the summed entropy non-finite, an infinite logit its output's min or max:
            # one check (one synchronisation) of both
            finite = torch.isfinite(stats.sum_h).all()
            if extremes:
                finite = finite & torch.isfinite(torch.stack(extremes)).all().to(finite.device)
            if nonfinite:
                finite = finite & (nonfinite[0] == 0).all().to(finite.device)
            if not bool(finite):
                # an ensemble names the member: one whose training diverged (NaN weights) failed every case with a
                # message that blamed the input (found by hostile testing)
                who = info.get("who", "the network")
                prefix = "" if who == "the network" else f"{who}: "
                # and TTA the flip / augmentation / transform (review 67: the sample was not named)
                sample = _nonfinite_sample(base, window_sources, x, guard) if shared is None else None
                if sample is not None:
                    prefix += f"{sample}: "
                raise ValueError(f"{prefix}network output contains non-finite values (NaN or inf) for this input")
            # the samples of a window, counted on the window itself: under MONAI's SliceInferer a window has one
            # spatial axis less than the input (FlipSource("all") flips the 2 axes of a slice, not 3)
            info["window_samples"] = stats.num_updates
            # kept in the accumulation dtype: SimpleInferer passes them through exactly; SlidingWindowInferer
            # blends them into buffers of the input's dtype. In place: no second copy of the sums
            out = dict(stats.take_moments())
            if self.window_disagreement == "separate" and self._stitches():
                # H(m_w) in the precision of the probabilities and by the kernel that evaluated each sample's H(p_s)
                # in EE: identical samples then give H(m_w) == EE_w bitwise, and a deterministic network MI = 0
                # exactly after stitching
                m = out[K.PRED.value]
                out[_WINDOW_PE] = stats.sample_entropy(m.to(probs_dtype)).to(m.dtype)
                # the window's own variance E_w[p^2] - m_w^2 in place of E_w[p^2]: stitched, it is the blend of the
                # per-window variances (the windows' disagreement stays out of it, as out of MI); the stitched
                # second moment is rebuilt after stitching (_within_window_second_moment)
                for key in ("mean_sq", MEAN_SQ_SUM):
                    if key in out:
                        out[key] = add_squares(out[key], m, -1.0).clamp_min_(0)
            if self.keep_samples:
                # (B, S*C, *spatial): stitchable; in the order of the product of the sources
                out[K.SAMPLES.value] = torch.cat([kept[i] for i in sorted(kept)], dim=1)
            return out

        return window, info

    def _shared_source(
        self, network: Any, window_sources: Sequence[SampleSource], x: torch.Tensor, info: dict[str, Any],
        network_args: Any = ((), {}),
    ) -> SampleSource | None:
        """The source whose samples share the computation that does not depend on a random draw, or None.

        ``network_args``: the extra positional and keyword arguments of the network's calls, ``(args, kwargs)``.
        """
        if not self.share_passes:
            return None
        shareable = [s for s in window_sources if getattr(s, "shareable", False)]
        if len(shareable) != 1 or shareable[0].num_variants(x) < 2:
            return None
        src = shareable[0]
        if any(v is not None for v in src.variants(x)):
            return None
        # the shared path runs the shareable source's samples inside each variant of the others, so an innermost
        # source (SSN draws reusing one backbone pass) would run outside them: its later draws reused the backbone
        # pass of the last replayed dropout sample for every dropout sample
        if any(_reuses_one_pass(s, x) for s in window_sources if s is not src):
            return None
        if isinstance(network, torch.jit.ScriptModule):
            info.setdefault("fallback", "the network is a TorchScript module: its calls cannot be followed")
            return None
        if any(isinstance(t, torch.Tensor) for t in tree_flatten(network_args)[0]):
            # found by hostile testing: a replay runs k samples on the input repeated k times along the batch axis,
            # but a tensor argument (a conditioning map of batch B) kept its batch: ``RuntimeError: The size of
            # tensor a (4) must match the size of tensor b (2)`` where full passes ran (or a batch-1 tensor was
            # broadcast over the samples, or refused by a concatenation)
            info.setdefault("fallback", "the network gets tensor arguments besides its input, which a replay batch "
                                        "of samples cannot repeat along the batch axis")
            return None
        if not isinstance(network, nn.Module):
            info.setdefault("fallback", "the network is not a torch.nn.Module whose calls can be followed")
            return None
        # a TorchScript or compiled submodule hides its operations (and random draws) from the trace
        hidden = hidden_submodule(plain_module(network))
        if hidden is not None:
            info.setdefault("fallback", hidden)
            return None
        return src

    def _sample_batch(self, passes: SharedPasses, remaining: int, info: dict[str, Any]) -> int:
        """Samples of the next replay batch: the fixed ``sample_batch_size`` or the automatic choice."""
        return sample_batch(passes, self.sample_batch_size, int(info.get("case_voxels", 0)),
                            int(info.get("classes", 1)), remaining)

    def _shared_window(
        self,
        x: torch.Tensor,
        network: nn.Module,
        base: Predictor,
        window_sources: Sequence[SampleSource],
        src: SampleSource,
        add: Callable[[Any, Sequence[int]], None],
        info: dict[str, Any],
    ) -> None:
        """The samples of one window with the shared part computed once per variant of the other sources."""
        n = src.num_variants(x)
        pos = list(window_sources).index(src)
        others = [s for s in window_sources if s is not src]
        other_variants = [list(s.variants(x)) for s in others]
        sizes = [len(v) for v in other_variants]
        sizes.insert(pos, n)

        def index(rest: tuple[int, ...], d: int) -> int:
            multi = list(rest)
            multi.insert(pos, d)
            flat = 0
            for i, size in zip(multi, sizes):
                flat = flat * size + i
            return flat

        inner = _innermost_count(others)
        extra = info.get("network_args", ())
        for rest, combo in zip(itertools.product(*(range(len(v)) for v in other_variants)),
                               itertools.product(*other_variants)):
            full = _wrapped(base, combo, inner)
            if PLAIN_TRACES.full_passes(network, x, self.sample_batch_size, int(info.get("case_voxels", 0)), n - 1,
                                        extra=extra):
                # an earlier trace of this network on a window like this one found too little to share, with one
                # sample per replay: every sample is a full pass, as the trace would have made them (the same
                # draws), without the trace's cost (PlainTraces). A network may write into its input on this window
                # only (an input-dependent normalisation): as after a trace that saw the write, the later samples
                # start from the input as the first got it (found by hostile testing: every full pass wrote into the
                # window again, and the seeded maps depended on which calls had run before)
                first, before = watch_input(full, x)
                add(first, [index(rest, 0)])
                del first
                for d in range(1, n):
                    add(full(x if before is None else before.clone()), [index(rest, d)])
                del before
                continue
            passes = SharedPasses(network)  # one per input: never shared across TTA variants
            add(_wrapped(lambda t, passes=passes: passes.trace(base, t), combo, inner)(x), [index(rest, 0)])
            done = 1
            while done < n:
                k = self._sample_batch(passes, n - done, info)
                if k == 1 and passes.plain and not passes.wrote_input:
                    # a plain replay of one sample is one full pass of the network on the input: the rest of the
                    # samples run as full passes (the same calls and draws), without a replay's per-call work (on an
                    # H200 with a 2 ms forward pass, the replays' Python time was exposed: 30 samples of the example
                    # UNet at 96^3 took 24 % more than 30 bare passes, full passes 7 %); later windows like this one
                    # skip the trace too
                    PLAIN_TRACES.remember(network, x, passes, int(info.get("classes", 1)), extra=extra)
                    for d in range(done, n):
                        add(full(x), [index(rest, d)])
                    break
                try:
                    raw = _wrapped(lambda t, passes=passes, k=k: passes.replay(base, t, k), combo, inner)(x)
                except SharingUnavailable as err:
                    info.setdefault("fallback", str(err))
                    for d in range(done, n):
                        add(_wrapped(base, combo, inner)(x), [index(rest, d)])
                    break
                add(raw, [index(rest, done + j) for j in range(k)])
                # freed before the next replay: held, this batch's outputs doubled the replays' outputs (with
                # sw_batch_size >= 2, the rows' outputs and their interleaved copy were alive beside them)
                del raw
                done += k

    def _stitches(self) -> bool:
        """Whether the base inferer may blend overlapping windows (anything but a ``SimpleInferer``)."""
        return not isinstance(self.base_inferer, SimpleInferer)

    def _default_keys(self, total: SampleStats) -> list[str]:
        keys = total.available_keys()
        if self.pred_dtype is None:
            keys.remove(K.PRED.value)
        if self.window_disagreement == "separate" and self._stitches():
            at = keys.index(K.MUTUAL_INFORMATION.value) + 1
            keys.insert(at, K.WINDOW_DISAGREEMENT.value)
        return keys

    def __call__(self, inputs: torch.Tensor, network: Callable | None = None, *args: Any, **kwargs: Any):
        """Run the inferer.

        Args:
            inputs: ``(B, C_in, *spatial)`` float tensor (or MetaTensor).
            network: the model (may be ``None`` when an ensemble of modules supplies the networks).
            *args: passed to the network.
            **kwargs: passed to the network.

        Returns:
            :class:`UncertaintyOutput` with the maps ``(B, 1, *spatial)`` (``(B, C, *spatial)`` for multi-label),
            ``pred`` ``(B, C, *spatial)`` and, with ``keep_samples``, ``samples``.
        """
        check_inputs(inputs, network, self.base_inferer)
        self._check_base_inferer()
        x = inputs.as_tensor() if hasattr(inputs, "as_tensor") else inputs
        net_sources = [s for s in self.sources if s.level == "network"]
        window_sources = [s for s in self.sources if s.level != "network"]
        # innermost sources last: itertools.product then runs their variants back to back
        window_sources.sort(key=lambda s: bool(getattr(s, "innermost", False)))
        if network is None and not net_sources:
            raise ValueError("network is required (only an ensemble of modules can supply its own networks)")
        device = compute_device(x, self.base_inferer)
        rng = contextlib.nullcontext()
        seed = check_seed(self.seed)  # the attribute may have been set after construction (a bundle override)
        if seed is not None:
            # the generators of the devices the call may draw on, seeded and restored: the input's, the windows'
            # (sw_device="cuda" with a CPU input) and those of the weights of the network and of the ensemble members
            # (a network across GPUs; a member whose first weights are on the windows' device is not moved); no other
            # (torch.manual_seed reseeded every GPU and left them so: found by review 64; the members: review 66)
            members = [m for s in net_sources for m in _module_members(s)]
            rng = seeded_rng(seed, [x.device, device, *network_devices(network, *members)])
        grad = torch.no_grad() if self.no_grad else contextlib.nullcontext()
        total: SampleStats | None = None
        separate = self.window_disagreement == "separate"
        wd_mean: torch.Tensor | None = None  # the members' WD_k, weighted by their samples
        n_seen = 0  # the samples of the members merged so far
        samples: list[torch.Tensor] = []
        for src in self.sources:
            src.reset()
        for src in self.sources:
            src.check_input(x, device)
        n_window = 1
        fallback_logged = False
        samples_dtypes: set[torch.dtype] = set()  # the members' probabilities' dtypes (PE's evaluation precision)
        check_modes = not getattr(self, "_warned_training_mode", False)
        samples_dropout = any(getattr(s, "_samples_dropout", False) for s in window_sources)
        in_training: list[tuple[int | None, list[str]]] = []
        member_output: tuple[torch.Size, bool] | None = None
        stitched_x = _stitching_input(x) if self._stitches() else x
        with rng, grad, contextlib.ExitStack() as call_stack:
            if seed is not None:
                for src in self.sources:  # random states of their own (MONAI transforms), from the seeded stream
                    src.reseed()
            members = net_sources[0].members(network, device) if net_sources else [contextlib.nullcontext(network)]
            # a generator of members (EnsembleSource.members) restores the network's own weights when it is closed:
            # closed here also when a member fails (found by hostile testing: suspended, it was closed only once the
            # error was freed, and the network held a checkpoint member's weights meanwhile)
            if hasattr(members, "close"):
                call_stack.callback(members.close)
            for index, member in enumerate(members):
                with member as net, contextlib.ExitStack() as stack:
                    # a compiled network draws its dropout masks (Rate-In's search, SSN latents, ...) from torch's
                    # generator, as the plain network does: inductor's own drew other masks for the same seed
                    # (review 62); only graphs compiled during the call are concerned
                    stack.enter_context(compiled_draws_context(net))
                    if check_modes:  # the modes the caller left, before a source switches dropout on
                        kinds = _training_mode_kinds(net, dropout=not samples_dropout)
                        if kinds:
                            in_training.append((index if net_sources else None, kinds))
                    for src in window_sources:
                        try:
                            stack.enter_context(src.activate(net))
                        except ValueError as err:  # e.g. a member without dropout under MC dropout: which one
                            if not net_sources:
                                raise
                            raise ValueError(f"{_network_name(index, net_sources[0])}: {err}") from None
                    if isinstance(net, nn.Module):
                        # MONAI's fused attention draws other attention dropout than its unfused path (review 66): in
                        # eval mode too (deterministic passes were random), or none while sampled (Swin: MI 0)
                        stack.enter_context(align_fused_attention(net))
                    window_fn, info = self._window_fn(net, window_sources)
                    info["who"] = _network_name(index, net_sources[0]) if net_sources else "the network"
                    info["case_voxels"] = x.numel() // max(int(x.shape[1]), 1)
                    info["input_dtype"] = x.dtype
                    out = self.base_inferer(stitched_x, window_fn, *args, **kwargs)
                if info.get("fallback") and not fallback_logged:
                    fallback_logged = True
                    # once per inferer and reason, not once per call: a cohort of 500 cases said it 500 times (per
                    # rank under torchrun; found by review 66)
                    said = self.__dict__.setdefault("_fallbacks_said", set())
                    if info["fallback"] not in said:
                        said.add(info["fallback"])
                        logger.warning("shared passes off, full passes instead: %s", info["fallback"])
                n_window = int(info.get("window_samples") or 0)
                if info.get("probs_dtype") is not None:
                    samples_dtypes.add(info["probs_dtype"])
                if not n_window:  # no window ran (an empty input fails before): the sources' count
                    n_window = 1
                    for src in window_sources:
                        n_window *= src.num_variants(x)
                pred = _plain(out[K.PRED.value])
                if net_sources:  # a member unlike member 0 is named against it; member 0 against the input below
                    member_output = _check_member_output(index, pred, bool(info["multilabel"]), member_output,
                                                         net_sources[0])
                _check_output_grid(pred, x, info["who"] if net_sources else f"the network ({type(net).__name__})")
                n_classes = int(pred.shape[1])
                if separate:  # before from_moments turns the stitched means into sums in place
                    if self._stitches():
                        wd = window_disagreement_from_stitched(pred, _plain(out[_WINDOW_PE]), bool(info["multilabel"]),
                                                               samples_dtype=info.get("probs_dtype"))
                    else:  # one window: WD = H(m) - H(m) = 0 exactly, and MI = PE - EE as without the option
                        wd = torch.zeros_like(_plain(out[K.EXPECTED_ENTROPY.value]))
                if separate and self._stitches():
                    _within_window_second_moment(out, pred)
                # the stitched buffers are this call's own: they become the statistics in place (no copy of C x V).
                # Each network's means are kept as means, weighted by 1, not by its samples (the stitched float32
                # means times 3 samples and divided by 3 again rounded: MI 1.2e-7 for a deterministic network with 3
                # samples under overlapping windows, found by a review); ensemble members are pooled as means too,
                # weighted by their samples (_blend: identical members give the same means bit for bit)
                part = SampleStats.from_moments(
                    pred,
                    _plain(out[K.EXPECTED_ENTROPY.value]),
                    _plain(out["mean_sq"]) if "mean_sq" in out else None,
                    count=1.0,
                    num_updates=n_window,
                    multilabel=bool(info["multilabel"]),
                    mean_sq_sum=_plain(out[MEAN_SQ_SUM]) if MEAN_SQ_SUM in out else None,
                    inplace=True,
                    validate=False,  # the inferer's own stitched means (no extra pass over C x V)
                )
                if self.keep_samples:
                    kept_samples = _plain(out[K.SAMPLES.value])
                    b = kept_samples.shape[0]
                    samples.append(
                        kept_samples.reshape(b, n_window, n_classes, *kept_samples.shape[2:]).transpose(0, 1).to(
                            x.dtype)
                    )
                del pred, out
                # the members' means pooled by their samples, as a step from the running mean (exact for identical
                # members: the sums m + m + m divided by 3 rounded, MI 1.8e-7 for three identical deterministic members
                # under overlapping windows)
                fraction = n_window / (n_seen + n_window)
                if separate:
                    wd = wd.to(part.accum_dtype)
                    wd_mean = wd if wd_mean is None else wd_mean.add_(wd.sub_(wd_mean).mul_(fraction))
                total = part if total is None else total._blend(part, fraction)
                n_seen += n_window
                del part
        if in_training:
            warnings.warn(_training_mode_warning(type(self).__name__, in_training), UserWarning, stacklevel=2)
            self._warned_training_mode = True
        keys = self.keys if self.keys is not None else self._default_keys(total)
        out_dtype = x.dtype if x.is_floating_point() else torch.float32
        n_total = int(total.num_updates)
        multilabel = total.multilabel
        moments = total.take_moments()  # the sums become the means in place: no second C x V buffer
        if wd_mean is not None:
            moments[K.WINDOW_DISAGREEMENT.value] = wd_mean
        # pred and the kept samples are no derived measures (samples, asked for in keys, are added below)
        derived = [k for k in keys if k not in (K.PRED.value, K.SAMPLES.value)]
        # PE in the precision the samples' entropies were evaluated in (one dtype for every member; else the maps').
        # Stitched windows: the buffers hold the input's dtype, in which the window disagreement's H(pred) is
        # evaluated too, so PE stays in the maps' dtype there (MI = PE - EE - WD exactly 0 for identical samples)
        samples_dtype = next(iter(samples_dtypes)) if len(samples_dtypes) == 1 and not self._stitches() else None
        maps = derive_measures(moments, derived, normalize=self.normalize, out_dtype=out_dtype, multilabel=multilabel,
                               samples_dtype=samples_dtype)
        result: dict[str, torch.Tensor] = {}
        for key in keys:
            if key == K.SAMPLES.value:
                continue
            if key != K.PRED.value:
                result[key] = maps[key]
            elif self.pred_dtype is not None:
                result[key] = moments[key].to(out_dtype if self.pred_dtype == "input" else self.pred_dtype)
        if self.pred_dtype is None and not multilabel:
            result = {ARGMAX: _argmax(moments[K.PRED.value]), **result}
        del moments, maps
        if self.keep_samples:
            result[K.SAMPLES.value] = torch.cat(samples, dim=0)
        meaning = _combine_meanings(self.sources, x)
        if hasattr(inputs, "meta"):
            result = {k: _as_meta(v, inputs) if k != K.SAMPLES.value else v for k, v in result.items()}
        extras: dict[str, Any] = {}
        for src in self.sources:
            extras.update(src.extra_outputs())
        return UncertaintyOutput(
            result, mi_meaning=meaning, num_samples=n_total, extras=extras, multilabel=total.multilabel
        )


def _combine_meanings(sources: Sequence[SampleSource], x: torch.Tensor) -> MIMeaning:
    """The MI meaning of ``sources`` for the input ``x`` (:func:`~monai_unc.keys.combine_mi_meanings`)."""
    return combine_mi_meanings(
        (s.mi_meaning, len(s) if s.level == "network" else s.num_variants(x)) for s in sources
    )


def _planned_samples(source: SampleSource) -> int:
    """Samples ``source`` draws before an input is seen: its length or ``num_samples``; 2 (varying) when unknown."""
    if hasattr(source, "__len__"):
        return len(source)
    n = getattr(source, "num_samples", None)
    return n if isinstance(n, int) and not isinstance(n, bool) else 2


def _argmax(pred: torch.Tensor) -> torch.Tensor:
    """``argmax_c pred`` ``(B, 1, *spatial)`` in the smallest integer dtype, computed in spatial chunks."""
    out = torch.empty((pred.shape[0], 1, *pred.shape[2:]), dtype=_label_dtype(int(pred.shape[1])), device=pred.device)
    for sl in spatial_chunks(tuple(pred.shape), default_chunk_elements(pred)):
        out[:, :, sl] = argmax(pred[:, :, sl], dim=1, keepdim=True).to(out.dtype)
    return out


def _reuses_one_pass(source: SampleSource, x: torch.Tensor) -> bool:
    """Whether an innermost ``source`` draws several times from one pass of the network for ``x``.

    Several variants run back to back (SSN draws), or one variant that calls the network several times (an
    ``SSNSource(m, marginalize=True)`` averaging ``m`` draws). Shared passes then run the shareable source's samples
    as full passes (a replay batch would run such draws outside its samples). Found by hostile testing: the
    marginalised source was let through, and with ``sample_batch_size >= 2`` one sample averaged the latent draws of
    several dropout masks.
    """
    if not getattr(source, "innermost", False):
        return False
    return source.num_variants(x) > 1 or (bool(getattr(source, "marginalize", False))
                                          and int(getattr(source, "num_samples", 1)) > 1)


def _nonfinite_sample(base: Predictor, sources: Sequence[SampleSource], x: torch.Tensor, guard: Any) -> str | None:
    """The first sample of a window whose output is not finite, named by its sources' :meth:`variant_names`.

    Runs the window's samples again one at a time (only on the way to the error); None when a source has no names
    (e.g. one drawing at random) or no sample is non-finite again.
    """
    lists = [list(s.variants(x)) for s in sources]
    names = [s.variant_names(x) for s in sources]
    if not lists or any(n is None or len(n) != len(v) for n, v in zip(names, lists)):
        return None
    inner = _innermost_count(sources)
    for i, idx in enumerate(itertools.product(*(range(len(v)) for v in lists))):
        out = _wrapped(base, [v[j] for v, j in zip(lists, idx)], inner)(x)
        bad = not bool(torch.isfinite(network_output_tensor(out).detach()).all())
        guard.restore()
        if bad:
            return f"TTA sample {i} ({', '.join(n[j] for n, j in zip(names, idx))})"
    return None


def _innermost_count(sources: Sequence[SampleSource]) -> int:
    """How many of ``sources`` (sorted with the innermost ones last) are innermost."""
    return sum(bool(getattr(s, "innermost", False)) for s in sources)


def _wrapped(base: Predictor, combo: Sequence[Wrapper | None], inner: int = 0) -> Predictor:
    """``base`` wrapped by every non-None wrapper of ``combo``, the first innermost.

    The last ``inner`` wrappers (those of innermost sources, sorted last) wrap ``base`` first, closest to the
    network: their draws then run inside one call of the other wrappers, on the input those produced once. Found by
    hostile testing: a marginalised SSN source wrapped outside a noise source averaged its latent draws over fresh
    noise per draw (with MC dropout, each on a new dropout mask).
    """
    if inner:
        combo = [*combo[len(combo) - inner:], *combo[:len(combo) - inner]]
    predictor = base
    for wrap in combo:
        if wrap is not None:
            predictor = wrap(predictor)
    return predictor


def _within_window_second_moment(out: dict[str, Any], pred: torch.Tensor) -> None:
    """Turn the stitched per-window variances back into a second moment, in place: ``blend_w Var_w + pred^2``.

    With ``window_disagreement="separate"`` each window returns its own variance ``E_w[p^2] - m_w^2`` in place of
    ``E_w[p^2]``; stitched, that is ``blend_w Var_w``. The statistics take a second moment, so ``pred^2`` (``sum_c
    pred_c^2`` for the one-channel moment) is added back: their variance ``E[p^2] - pred^2`` is then the blend of
    the per-window variances, 0 for a deterministic network with any overlap, instead of the variance of the mixture
    of the windows (which also held the windows' disagreement). Members of an ensemble, merged afterwards, keep
    their disagreement in the variance, as in MI.

    Rebuilt in float32 at least (the precision of the statistics they become): in a half-precision stitching buffer
    the rounding of ``pred^2`` stayed in ``E[p^2] - pred^2``, a variance of up to 2e-4 (float16) / 2e-3 (bfloat16)
    for a deterministic network (found by hostile testing); from_moments converts such buffers to float32 anyway.
    """
    for key in ("mean_sq", MEAN_SQ_SUM):
        if key in out:
            moment = _plain(out[key])
            out[key] = add_squares(moment.to(torch.promote_types(moment.dtype, torch.float32)), pred, 1.0)


def _stitching_input(x: torch.Tensor) -> torch.Tensor:
    """The input handed to a stitching base inferer: a float32 copy of a float16 / bfloat16 input, else ``x`` itself.

    MONAI's ``SlidingWindowInferer`` stitches every output in the dtype of the input it is given. In half-precision
    buffers the stitched mean probabilities and entropies (about 1 nat) kept roundings of 1e-3 (float16) to 8e-3
    (bfloat16) nats, and MI and WD, differences of such entropies, were noise larger than themselves (in earlier
    versions, MC dropout under overlapping Gaussian windows, MI and WD of at most 2.2e-3 nats off by up to 7.4e-3 and
    2.1e-2 nats in bfloat16, 1.5e-3 and 4.5e-3 in float16). The window callable gives each window back to the network
    in the input's dtype; only the maps are rounded to it.
    """
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _module_members(source: SampleSource) -> list[nn.Module]:
    """The modules a network-level source runs as members: an ``EnsembleSource``'s ``networks``; none elsewhere."""
    members = getattr(source, "networks", None)
    if not isinstance(members, (list, tuple, nn.ModuleList)):
        return []
    return [m for m in members if isinstance(m, nn.Module)]


def _plain(t: torch.Tensor) -> torch.Tensor:
    return t.as_tensor() if hasattr(t, "as_tensor") else t


def _as_meta(t: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    from monai.data import MetaTensor

    out = MetaTensor(t)
    out.copy_meta_from(ref)  # also handles collated (batched) metadata
    return out


class SoftmaxInferer(UncertaintyInferer):
    """Deterministic one-pass baseline: ``pred``, ``predictive_entropy`` (softmax entropy) and ``one_minus_max_prob``.

    Every study compares stochastic methods against this (ValUES; Zepf et al. uses softmax entropy as the
    aleatoric baseline). Network modes are left untouched (call ``network.eval()`` as usual; a network left in
    training mode with ``BatchNorm`` running statistics or active dropout gets a ``UserWarning``, once per inferer).

    Args:
        **kwargs: :class:`UncertaintyInferer` options except ``sources`` (e.g. ``base_inferer``, ``normalize``).

    Example:
        >>> from monai_unc.inferers import SoftmaxInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(
        ...     torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(0.3), torch.nn.Conv3d(4, 3, 1)
        ... ).eval()
        >>> image = torch.rand(1, 1, 4, 4, 4)
        >>> out = SoftmaxInferer()(image, net)
        >>> sorted(out), out.num_samples
        (['one_minus_max_prob', 'pred', 'predictive_entropy'], 1)
    """

    default_keys = (K.PRED.value, K.PREDICTIVE_ENTROPY.value, K.ONE_MINUS_MAX_PROB.value)

    def __init__(self, **kwargs: Any) -> None:
        self._refuse_sources(kwargs, "SoftmaxInferer")
        kwargs.setdefault("track_variance", False)
        super().__init__(sources=(), **kwargs)
