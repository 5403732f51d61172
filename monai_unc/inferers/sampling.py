"""The generic uncertainty inferer: a product of sample sources streamed into :class:`SampleStats`.

A *sample source* is one axis of variation: dropout masks, flips, noise copies, ensemble members,
latent draws. :class:`UncertaintyInferer` evaluates the network once per element of the product of its
sources and streams every softmax into :class:`~monai_unc.stats.SampleStats`, so memory is that of one
prediction plus the statistics, whatever the number of samples.

Sliding windows (docs/design.md): the inner MONAI inferer (``base_inferer``) is called with a window
callable that runs *all* samples on the window and returns per-voxel means ``{pred, expected_entropy,
mean_sq}``. MONAI's ``SlidingWindowInferer`` stitches every value of a dict with the same per-voxel convex
weights, and a convex combination of means is again a mean, so PE = H(pred), MI = PE - EE and the variance
are evaluated after stitching, exactly as for a single window. Probabilities (not logits) are blended.

Sources at the *network* level (ensemble members) are looped outside the inner inferer, one member on the
device at a time; because stitching is linear, merging the stitched statistics of the members equals
stitching the statistics of all samples.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from monai.inferers import Inferer, SimpleInferer
from torch import nn

from .._utils import check_finite, check_probabilities
from ..keys import DEPRECATED_MEASURES, MIMeaning, UncertaintyKeys, canonical_measure
from ..stats import SampleStats, derive_measures

__all__ = [
    "SampleSource",
    "StochasticSource",
    "UncertaintyOutput",
    "UncertaintyInferer",
    "SoftmaxInferer",
    "apply_activation",
]

K = UncertaintyKeys
Predictor = Callable[[torch.Tensor], torch.Tensor]
Wrapper = Callable[[Predictor], Predictor]


class SampleSource:
    """One axis of the sample product.

    Subclasses define ``variants(x)``: a sequence whose elements are ``None`` (call the predictor as is) or a
    wrapper ``predictor -> predictor`` (e.g. flip the input, predict, flip back); ``activate(network)``: a
    context manager entered once per call (e.g. switch dropout on); and ``mi_meaning``: what the mutual
    information over this source measures. ``level = "network"`` sources (ensembles) are looped outside the
    inner inferer by :meth:`members`. ``innermost = True`` puts the source last in the product whatever its
    position in the list, so that its variants run back to back for each combination of the other sources (a
    latent-variable source reuses one backbone pass for all its draws; see :class:`~monai_unc.inferers.SSNSource`).
    """

    mi_meaning: MIMeaning = MIMeaning.EPISTEMIC
    level: str = "window"
    innermost: bool = False

    def variants(self, x: torch.Tensor) -> Sequence[Wrapper | None]:
        raise NotImplementedError

    def num_variants(self, x: torch.Tensor) -> int:
        return len(self.variants(x))

    def activate(self, network: nn.Module | None) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def reset(self) -> None:
        """Called at the start of every inferer call (clear per-call state such as :meth:`extra_outputs`)."""

    def prepare(self, x: torch.Tensor, predictor: Predictor) -> None:
        """Called once per window, before its samples, with the window input and the plain predictor (network
        and extra arguments, no wrapper): lets a source adapt to the input (Rate-In searches its dropout rates
        here). Default: nothing."""

    def extra_outputs(self) -> dict[str, Any]:
        """Per-call extras (not voxel maps) placed in :attr:`UncertaintyOutput.extras` after the call."""
        return {}

    def members(self, network: nn.Module | None, device: torch.device) -> Iterator[contextlib.AbstractContextManager]:
        raise NotImplementedError


class StochasticSource(SampleSource):
    """``num_samples`` calls of a network that samples internally (a latent-variable model such as SSN or the
    probabilistic U-Net, or any stochastic forward). MI over such samples is aleatoric (ValUES Appendix D)
    unless ``mi_meaning`` says otherwise."""

    def __init__(self, num_samples: int, mi_meaning: MIMeaning | str = MIMeaning.ALEATORIC) -> None:
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
        self.num_samples = num_samples
        self.mi_meaning = MIMeaning(mi_meaning)

    def variants(self, x: torch.Tensor) -> Sequence[Wrapper | None]:
        return [None] * self.num_samples


class UncertaintyOutput(dict):
    """``dict[str, Tensor]`` keyed by :class:`UncertaintyKeys`, with ``mi_meaning`` and ``num_samples``
    attributes saying what the mutual information measures and how many samples went in, and ``extras``: a
    dict of per-call outputs that are not voxel maps (e.g. Rate-In's per-layer rates, ``rate_in_rates``)."""

    def __init__(
        self,
        *args: Any,
        mi_meaning: MIMeaning = MIMeaning.NONE,
        num_samples: int = 1,
        extras: dict[str, Any] | None = None,
        **kw: Any,
    ):
        super().__init__(*args, **kw)
        self.mi_meaning = MIMeaning(mi_meaning)
        self.num_samples = int(num_samples)
        self.extras: dict[str, Any] = dict(extras) if extras else {}

    def __missing__(self, key: Any) -> Any:
        """``out["max_softmax"]`` (the key of older versions, one release) reads ``out["one_minus_max_prob"]``."""
        new = DEPRECATED_MEASURES.get(str(key))
        if new is None or new not in self:
            raise KeyError(key)
        return self[canonical_measure(str(key), stacklevel=3)]


def apply_activation(out: Any, activation: str | None, check: bool = True) -> torch.Tensor:
    """Network output -> probabilities ``(B, C, *spatial)``, ``C >= 2``.

    ``"softmax"`` over dim 1 (in float32 for half-precision outputs); ``"sigmoid"`` for a single-channel binary
    output, returned as the two channels ``(1 - p, p)``; ``None`` when the network already outputs
    probabilities (validated). A tuple/list output (deep supervision) uses its first, full-resolution element.
    Raises ``ValueError`` on non-finite outputs (``check=False`` skips that pass; the inferers check the
    accumulated statistics instead, where any NaN of any sample ends up).
    """
    if isinstance(out, (tuple, list)):
        if not out:
            raise ValueError("network returned an empty sequence")
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"network output must be a tensor, got {type(out).__name__}")
    if hasattr(out, "as_tensor"):
        out = out.as_tensor()
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
        return torch.softmax(out, dim=1)
    if activation == "sigmoid":
        if out.shape[1] != 1:
            raise ValueError(
                f"activation='sigmoid' expects a single-channel binary output, got {out.shape[1]} channels; "
                "multi-label sigmoid outputs are not class probabilities (use softmax networks or split labels)"
            )
        p = torch.sigmoid(out)
        return torch.cat([1 - p, p], dim=1)
    if activation is None:
        check_probabilities(out, "network output")
        return out
    raise ValueError(f"activation must be 'softmax', 'sigmoid' or None, got {activation!r}")


class UncertaintyInferer(Inferer):
    """MONAI ``Inferer`` sampling a product of sources into streaming statistics.

    Args:
        sources: sample sources; the samples are their Cartesian product (e.g. ``[MCDropoutSource(10),
            FlipSource("all")]`` gives 10 x 8 samples in 3D). No source = one deterministic pass.
        base_inferer: the inner MONAI inferer (default ``SimpleInferer()``; ``SlidingWindowInferer`` for large
            volumes; ``buffer_steps`` is refused because MONAI then stitches only the first output).
        activation: ``"softmax"``, ``"sigmoid"`` (single-channel binary) or ``None`` (already probabilities).
        keys: measures to return (default: all available); see :class:`UncertaintyKeys`.
        keep_samples: also return ``samples`` ``(S, B, C, *spatial)`` (memory grows with S).
        track_variance: keep the second moment to report ``variance``.
        normalize: divide entropies by ``log C``.
        seed: seed for a private random stream (the global RNG state is restored afterwards).
        accum_dtype: dtype of the running sums (see :mod:`monai_unc.stats`).
        no_grad: run under ``torch.no_grad()`` (default).

    Returns an :class:`UncertaintyOutput` (a ``dict[str, Tensor]``); MetaTensor inputs give MetaTensor maps
    carrying the input's metadata.
    """

    default_keys: tuple[str, ...] | None = None

    def __init__(
        self,
        sources: Sequence[SampleSource] = (),
        base_inferer: Inferer | None = None,
        activation: str | None = "softmax",
        keys: Iterable[str] | None = None,
        keep_samples: bool = False,
        track_variance: bool = True,
        normalize: bool = False,
        seed: int | None = None,
        accum_dtype: torch.dtype = torch.float64,
        no_grad: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ("softmax", "sigmoid", None):
            raise ValueError(f"activation must be 'softmax', 'sigmoid' or None, got {activation!r}")
        self.sources = list(sources)
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
        keys = keys if keys is not None else self.default_keys
        self.keys = None if keys is None else [K(k).value for k in keys]
        if self.keys is not None and K.VARIANCE.value in self.keys and not track_variance:
            raise ValueError("keys asks for 'variance' but track_variance=False")
        self.keep_samples = bool(keep_samples)
        self.track_variance = bool(track_variance)
        self.normalize = bool(normalize)
        self.seed = seed
        self.accum_dtype = accum_dtype
        self.no_grad = bool(no_grad)

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
        """What the mutual information measures for this inferer's sources (before seeing an input, flips
        count as varying)."""
        kinds = {MIMeaning(s.mi_meaning) for s in self.sources}
        if not kinds:
            return MIMeaning.NONE
        return kinds.pop() if len(kinds) == 1 else MIMeaning.MIXED

    def _window_fn(self, network: Callable, window_sources: Sequence[SampleSource]) -> Callable:
        def window(x: torch.Tensor, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
            stats = SampleStats(track_variance=self.track_variance, accum_dtype=self.accum_dtype, validate=False)
            kept: list[torch.Tensor] = []

            def base(t: torch.Tensor) -> Any:
                return network(t, *args, **kwargs)

            for src in window_sources:
                src.prepare(x, base)
            for combo in itertools.product(*(s.variants(x) for s in window_sources)):
                predictor = base
                for wrap in combo:
                    if wrap is not None:
                        predictor = wrap(predictor)
                probs = apply_activation(predictor(x), self.activation, check=False)
                stats.update(probs)
                if self.keep_samples:
                    kept.append(probs.to(x.dtype))
            # a NaN/inf logit of any sample makes its softmax and so the summed entropy non-finite: one check
            if not bool(torch.isfinite(stats.sum_h).all()):
                raise ValueError("network output contains non-finite values (NaN or inf) for this input")
            # kept in the accumulation dtype: SimpleInferer passes them through exactly; SlidingWindowInferer
            # blends them into buffers of the input's dtype
            out = dict(stats.moments())
            if self.keep_samples:
                out[K.SAMPLES.value] = torch.cat(kept, dim=1)  # (B, S*C, *spatial): stitchable
            return out

        return window

    def __call__(self, inputs: torch.Tensor, network: Callable | None = None, *args: Any, **kwargs: Any):
        """Run the inferer: ``inputs`` ``(B, C_in, *spatial)``; ``network`` the model (may be ``None`` when an
        ensemble of modules supplies the networks). Extra args are passed to the network."""
        if not isinstance(inputs, torch.Tensor):
            raise TypeError(f"inputs must be a torch.Tensor (B, C, *spatial), got {type(inputs).__name__}")
        if inputs.ndim < 3:
            raise ValueError(f"inputs must have shape (B, C, *spatial), got {tuple(inputs.shape)}")
        self._check_base_inferer()
        x = inputs.as_tensor() if hasattr(inputs, "as_tensor") else inputs
        net_sources = [s for s in self.sources if s.level == "network"]
        window_sources = [s for s in self.sources if s.level != "network"]
        # innermost sources last: itertools.product then runs their variants back to back
        window_sources.sort(key=lambda s: bool(getattr(s, "innermost", False)))
        if network is None and not net_sources:
            raise ValueError("network is required (only an ensemble of modules can supply its own networks)")
        rng = contextlib.nullcontext()
        if self.seed is not None:
            devices = [x.device] if x.device.type == "cuda" else []
            rng = torch.random.fork_rng(devices=devices)
        grad = torch.no_grad() if self.no_grad else contextlib.nullcontext()
        total: SampleStats | None = None
        samples: list[torch.Tensor] = []
        for src in self.sources:
            src.reset()
        n_window = 1
        with rng, grad:
            if self.seed is not None:
                torch.manual_seed(self.seed)
            members = net_sources[0].members(network, x.device) if net_sources else [contextlib.nullcontext(network)]
            for member in members:
                with member as net, contextlib.ExitStack() as stack:
                    for src in window_sources:
                        stack.enter_context(src.activate(net))
                    out = self.base_inferer(x, self._window_fn(net, window_sources), *args, **kwargs)
                n_window = 1
                for src in window_sources:
                    n_window *= src.num_variants(x)
                part = SampleStats.from_moments(
                    _plain(out[K.PRED.value]),
                    _plain(out[K.EXPECTED_ENTROPY.value]),
                    _plain(out["mean_sq"]) if "mean_sq" in out else None,
                    count=float(n_window),
                )
                total = part if total is None else total.merge(part)
                if self.keep_samples:
                    s = _plain(out[K.SAMPLES.value])
                    b, c = s.shape[0], out[K.PRED.value].shape[1]
                    samples.append(s.reshape(b, n_window, c, *s.shape[2:]).transpose(0, 1))
        keys = self.keys if self.keys is not None else total.available_keys()
        out_dtype = x.dtype if x.is_floating_point() else torch.float32
        result = derive_measures(total.moments(), keys, normalize=self.normalize, out_dtype=out_dtype)
        if self.keep_samples:
            result[K.SAMPLES.value] = torch.cat(samples, dim=0)
        n_total = int(round(total.count))
        meaning = _combine_meanings(self.sources, x)
        if hasattr(inputs, "meta"):
            result = {k: _as_meta(v, inputs) if k != K.SAMPLES.value else v for k, v in result.items()}
        extras: dict[str, Any] = {}
        for src in self.sources:
            extras.update(src.extra_outputs())
        return UncertaintyOutput(result, mi_meaning=meaning, num_samples=n_total, extras=extras)


def _combine_meanings(sources: Sequence[SampleSource], x: torch.Tensor) -> MIMeaning:
    kinds = set()
    for s in sources:
        n = len(s) if s.level == "network" else s.num_variants(x)
        if n > 1:
            kinds.add(MIMeaning(s.mi_meaning))
    if not kinds:
        return MIMeaning.NONE
    return kinds.pop() if len(kinds) == 1 else MIMeaning.MIXED


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
    aleatoric baseline). Network modes are left untouched (call ``network.eval()`` as usual).
    """

    default_keys = (K.PRED.value, K.PREDICTIVE_ENTROPY.value, K.ONE_MINUS_MAX_PROB.value)

    def __init__(self, **kwargs: Any) -> None:
        if kwargs.get("sources"):
            raise ValueError("SoftmaxInferer takes no sample sources; use UncertaintyInferer")
        kwargs.pop("sources", None)
        kwargs.setdefault("track_variance", False)
        super().__init__(sources=(), **kwargs)
