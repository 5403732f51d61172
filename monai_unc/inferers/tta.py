"""Test-time augmentation: flips over all axis subsets, Gaussian-noise copies, and custom invertible pairs.

For TTA the mutual information over augmented predictions is MI(Y, T), the information the prediction
carries about the transformation (ValUES, Appendix E); like the other sources it is reported as
epistemic. Every flip is undone on the prediction before it enters the statistics, so a network that is
exactly flip-equivariant gives MI = 0.

Unlike ``monai.data.TestTimeAugmentation`` this works inside ``SlidingWindowInferer`` windows and combines
with MC dropout and ensembles (MONAI issues 5207, 8032, 8218).
"""

from __future__ import annotations

import copy
import itertools
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..keys import MIMeaning
from .sampling import SampleSource, UncertaintyInferer, Wrapper

__all__ = ["FlipSource", "NoiseSource", "AugmentationSource", "InvertibleTransformSource", "TTAInferer", "flip_subsets"]


def _flip_axes(flip_axes: Any) -> str | tuple[int, ...]:
    """``flip_axes`` checked: ``"all"`` or a tuple of distinct integer spatial axes (negative: from the last one).

    A sequence (list, tuple, range, 1-D numpy array) of integers; ``TypeError`` naming ``flip_axes`` for anything
    else or a non-integer axis, ``ValueError`` for another string or a repeated axis. Their range is checked against
    an input's spatial axes by :func:`flip_subsets`.
    """
    if isinstance(flip_axes, str):
        if flip_axes != "all":
            raise ValueError(f"flip_axes must be 'all' or a sequence of spatial axes, got {flip_axes!r}")
        return flip_axes
    if (not isinstance(flip_axes, (Sequence, np.ndarray)) or isinstance(flip_axes, bytes)
            or (isinstance(flip_axes, np.ndarray) and flip_axes.ndim != 1)):
        hint = f" (one axis: ({flip_axes},))" if isinstance(flip_axes, numbers.Integral) else ""
        raise TypeError(f"flip_axes must be 'all' or a sequence of integer spatial axes{hint}, got {flip_axes!r}")
    # found by hostile testing: int() truncated 0.7 to axis 0 and 1.9 to axis 1, and took True for axis 1
    bad = [a for a in flip_axes if isinstance(a, (bool, np.bool_)) or not isinstance(a, numbers.Integral)]
    if bad:
        raise TypeError(f"flip_axes must hold integer spatial axes (not floats or bools), got {list(flip_axes)!r}")
    axes = tuple(int(a) for a in flip_axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"flip_axes has repeated axes: {axes}")
    return axes


def flip_subsets(spatial_dims: int, flip_axes: str | Sequence[int] = "all") -> list[tuple[int, ...]]:
    """All subsets of the spatial axes to flip (including the empty set): ``2**k`` tuples.

    Args:
        spatial_dims: number of spatial axes.
        flip_axes: ``"all"`` or a sequence of integer spatial axis indices (0-based, not counting batch and channel;
            a negative axis counts from the last spatial axis, as MONAI's ``Flip(spatial_axis=...)`` does).

    Returns:
        The subsets, the empty one first, with every axis as a non-negative index.

    Raises:
        TypeError: ``flip_axes`` is neither ``"all"`` nor a sequence of integers (an ``int``, ``0.7``, ``True``).
        ValueError: an axis out of range for ``spatial_dims`` axes, or an axis named twice (also as ``-1`` and
            ``spatial_dims - 1``).

    Example:
        >>> from monai_unc.inferers import flip_subsets
        >>> flip_subsets(3, [0, 2])
        [(), (0,), (2,), (0, 2)]
        >>> flip_subsets(3, [-1])  # the last spatial axis
        [(), (2,)]
        >>> len(flip_subsets(3))
        8
    """
    checked = _flip_axes(flip_axes)
    if isinstance(checked, str):
        axes = tuple(range(spatial_dims))
    else:
        bad = [a for a in checked if not -spatial_dims <= a < spatial_dims]
        if bad:
            raise ValueError(f"flip_axes {bad} out of range for an input with {spatial_dims} spatial axes "
                             f"(axes {-spatial_dims} to {spatial_dims - 1})")
        axes = tuple(a % spatial_dims for a in checked)
        if len(set(axes)) != len(axes):
            raise ValueError(f"flip_axes {checked} name an axis twice for {spatial_dims} spatial axes: {axes}")
    return [c for r in range(len(axes) + 1) for c in itertools.combinations(axes, r)]


class FlipSource(SampleSource):
    """Flip the input over every subset of ``flip_axes`` and flip each prediction back (2^k samples).

    Args:
        flip_axes: ``"all"`` or a sequence of integer spatial axes (0-based; a negative axis counts from the last
            spatial axis, as in MONAI's ``Flip``). Their type is checked here and their range against the input's
            number of spatial axes when called (:func:`flip_subsets`).

    Example:
        >>> from monai_unc.inferers import FlipSource, UncertaintyInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Conv3d(1, 3, 3, padding=1)
        >>> image = torch.rand(1, 1, 4, 4, 4)
        >>> out = UncertaintyInferer(FlipSource("all"))(image, net)
        >>> out.num_samples, out.mi_meaning.value
        (8, 'epistemic')
    """

    mi_meaning = MIMeaning.EPISTEMIC

    def __init__(self, flip_axes: str | Sequence[int] = "all") -> None:
        self.flip_axes = _flip_axes(flip_axes)

    def variants(self, x: torch.Tensor) -> list[Wrapper | None]:
        """One wrapper per flip subset (``None`` for the identity)."""
        out: list[Wrapper | None] = []
        for subset in flip_subsets(x.ndim - 2, self.flip_axes):
            if not subset:
                out.append(None)
                continue
            dims = tuple(a + 2 for a in subset)

            def wrap(pred: Callable, dims: tuple[int, ...] = dims) -> Callable:
                return lambda t: _flip_output(pred(torch.flip(t, dims)), dims)

            out.append(wrap)
        return out


def _flip_output(out: Any, dims: tuple[int, ...]) -> Any:
    if isinstance(out, (tuple, list)):
        return type(out)(_flip_output(o, dims) for o in out)
    return torch.flip(out, dims)


class NoiseSource(SampleSource):
    """``num_samples`` copies of the input with additive Gaussian noise of standard deviation ``std``.

    ``std`` is in the input's intensity units, as in the TTA of ValUES.

    Args:
        std: standard deviation of the noise.
        num_samples: noisy copies per window.

    Example:
        >>> from monai_unc.inferers import NoiseSource, UncertaintyInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Conv3d(1, 3, 3, padding=1)
        >>> image = torch.rand(1, 1, 4, 4, 4)
        >>> out = UncertaintyInferer(NoiseSource(std=0.1, num_samples=4), seed=0)(image, net)
        >>> out.num_samples
        4
    """

    mi_meaning = MIMeaning.EPISTEMIC

    def __init__(self, std: float, num_samples: int = 1) -> None:
        if not (std >= 0 and std < float("inf")):
            raise ValueError(f"noise std must be non-negative and finite, got {std}")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
        self.std = float(std)
        self.num_samples = num_samples

    def variants(self, x: torch.Tensor) -> list[Wrapper | None]:
        """``num_samples`` wrappers, each adding fresh noise to the input."""
        def wrap(pred: Callable) -> Callable:
            return lambda t: pred(t + self.std * torch.randn_like(t))

        return [wrap] * self.num_samples


class AugmentationSource(SampleSource):
    """Custom invertible augmentations.

    Pairs ``(forward, inverse)`` where ``forward`` maps the input tensor ``(B, C, *spatial)`` and ``inverse`` maps the
    network output back to the original geometry.

    Args:
        pairs: the ``(forward, inverse)`` callables.

    Example:
        >>> from monai_unc.inferers import AugmentationSource, UncertaintyInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Conv3d(1, 3, 3, padding=1)
        >>> image = torch.rand(1, 1, 4, 4, 4)
        >>> rot = (lambda t: torch.rot90(t, 1, (2, 3)), lambda t: torch.rot90(t, -1, (2, 3)))
        >>> out = UncertaintyInferer(AugmentationSource([rot]))(image, net)
        >>> out.num_samples
        1
    """

    mi_meaning = MIMeaning.EPISTEMIC

    def __init__(self, pairs: Sequence[tuple[Callable, Callable]]) -> None:
        pairs = list(pairs)
        if not pairs:
            raise ValueError("augmentations must hold at least one (forward, inverse) pair")
        for i, pair in enumerate(pairs):
            if len(pair) != 2 or not all(callable(f) for f in pair):
                raise ValueError(f"augmentations[{i}] must be a (forward, inverse) pair of callables")
        self.pairs = pairs

    def variants(self, x: torch.Tensor) -> list[Wrapper | None]:
        """One wrapper per pair: ``inverse(predictor(forward(x)))``."""
        def make(fwd: Callable, inv: Callable) -> Wrapper:
            return lambda pred: (lambda t: inv(pred(fwd(t))))

        return [make(f, i) for f, i in self.pairs]


class InvertibleTransformSource(SampleSource):
    """MONAI invertible array transforms (``Rotate90``, ``Flip``, ``RandAffine``, ``Zoom``, ...) as TTA samples.

    Each transform is applied to every batch item (channel-first, as MONAI array transforms expect), the
    network predicts on the transformed batch, and ``transform.inverse`` maps every prediction back using the
    operations MONAI recorded on the transformed input; random transforms are drawn ``num_samples`` times.
    Transforms must keep the batch items' shapes equal to each other so that they can be stacked.

    Random transforms (MONAI ``Randomizable``: ``RandAffine``, ``RandFlip``, ...) draw from their own numpy
    ``RandomState``, which the inferer's ``seed`` (a torch stream) does not reach. With a ``seed`` the inferer calls
    :meth:`reseed` at the start of every call: the call then runs deep copies of the transforms whose random states
    are seeded from the inferer's seeded torch stream, so that every call with the same seed draws the same
    transformations (and the transforms given here keep their own state); the draws still differ between samples
    and windows, each taking the next values of the copy's stream. Without a seed the transforms given here draw
    from their own random states, as in MONAI (``transform.set_random_state(seed)`` makes them repeatable).

    Args:
        transforms: MONAI invertible array transforms.
        num_samples: draws of each random transform.

    Example:
        >>> from monai.transforms import Rotate90
        >>> from monai_unc.inferers import InvertibleTransformSource, UncertaintyInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Conv3d(1, 3, 3, padding=1)
        >>> image = torch.rand(1, 1, 4, 4, 4)
        >>> source = InvertibleTransformSource([Rotate90(k=1, spatial_axes=(0, 1))])
        >>> out = UncertaintyInferer(source)(image, net)
        >>> out.num_samples, out["pred"].shape
        (1, torch.Size([1, 3, 4, 4, 4]))
    """

    mi_meaning = MIMeaning.EPISTEMIC

    def __init__(self, transforms: Sequence[Any], num_samples: int = 1) -> None:
        from monai.transforms import InvertibleTransform

        transforms = list(transforms)
        if not transforms:
            raise ValueError("transforms must hold at least one MONAI invertible transform")
        for i, t in enumerate(transforms):
            if not isinstance(t, InvertibleTransform):
                raise TypeError(f"transforms[{i}] ({type(t).__name__}) is not a MONAI InvertibleTransform")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
        self.transforms = transforms
        self.num_samples = num_samples
        self._seeded: list[Any] | None = None  # this call's seeded copies (reseed), None: the transforms as given

    def reset(self) -> None:
        """Forget the previous call's seeded copies: an unseeded call runs the transforms as given."""
        self._seeded = None

    def reseed(self) -> None:
        """This call's transforms: deep copies, each random one seeded from torch's (the inferer's seeded) stream.

        Found by hostile testing: the inferer's ``seed`` did not reach the transforms' numpy random states, so the
        same seeded inferer gave other maps on every call (up to 0.09 apart in ``pred``). Deterministic transforms
        draw nothing and are used as given.
        """
        from monai.transforms import Randomizable

        seeded = []
        for t in self.transforms:
            if isinstance(t, Randomizable):
                t = copy.deepcopy(t)
                # below 2**32, as numpy's RandomState takes it
                t.set_random_state(seed=int(torch.randint(0, 2**32, (), dtype=torch.int64)))
            seeded.append(t)
        self._seeded = seeded

    def variants(self, x: torch.Tensor) -> list[Wrapper | None]:
        """One wrapper per transform and draw: transform, predict, invert."""
        def make(transform: Any) -> Wrapper:
            return lambda pred: (lambda t: _apply_inverted(transform, pred, t))

        transforms = self._seeded if self._seeded is not None else self.transforms
        return [make(t) for t in transforms for _ in range(self.num_samples)]


def _apply_inverted(transform: Any, pred: Callable, x: torch.Tensor) -> torch.Tensor:
    from monai.data import MetaTensor

    items = [transform(MetaTensor(xi)) for xi in x]
    out = pred(torch.stack([i.as_tensor() for i in items]))
    if isinstance(out, (tuple, list)):
        out = out[0]
    # shared passes (MC dropout or Rate-In beside this source) return k samples of the batch at once: sample s of
    # input b at row s B + b, each inverted with the transform applied to input b
    b = len(items)
    if out.shape[0] % b:
        raise ValueError(f"the network returned {out.shape[0]} rows for a batch of {b} transformed inputs")
    back = []
    for j, oi in enumerate(out):
        item = items[j % b]
        m = MetaTensor(oi.as_tensor() if hasattr(oi, "as_tensor") else oi, meta=dict(item.meta))
        m.applied_operations = list(item.applied_operations)
        back.append(transform.inverse(m).as_tensor())
    return torch.stack(back)


class TTAInferer(UncertaintyInferer):
    """Test-time augmentation inferer: flips over all axis subsets x optional Gaussian-noise copies.

    The mutual information over augmentations is MI(Y, T) (ValUES, Appendix E), reported as epistemic.

    Args:
        flip_axes: ``"all"`` (2^k flips for k spatial axes: 8 in 3D) or a sequence of spatial axes; ``()`` for none.
        noise_std: standard deviation of additive Gaussian noise (0 disables noise).
        noise_samples: noise copies per flip when ``noise_std > 0``.
        augmentations: extra ``(forward, inverse)`` pairs, multiplied with the flips.
        transforms: MONAI invertible transforms (e.g. ``Rotate90``, ``RandAffine``), multiplied with the flips;
            random ones are drawn ``transform_samples`` times (see :class:`InvertibleTransformSource`).
        transform_samples: draws of each random transform.
        **kwargs: :class:`UncertaintyInferer` options (``base_inferer``, ``activation``, ``keep_samples``, ``seed``,
            ...). With a ``seed`` every call draws the same noise and the same random ``transforms`` (their random
            states are seeded from the inferer's stream, see :class:`InvertibleTransformSource`).

    The number of samples is ``2^k * noise_samples * len(augmentations) * len(transforms) * transform_samples``
    (each factor counted only when given).

    Example:
        >>> from monai_unc.inferers import TTAInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Conv3d(1, 3, 3, padding=1)
        >>> image = torch.rand(1, 1, 4, 4, 4)
        >>> out = TTAInferer(flip_axes="all", noise_std=0.05, noise_samples=2, seed=0)(image, net)
        >>> out.num_samples, out.mi_meaning.value
        (16, 'epistemic')
    """

    def __init__(
        self,
        flip_axes: str | Sequence[int] = "all",
        noise_std: float = 0.0,
        noise_samples: int = 1,
        augmentations: Sequence[tuple[Callable, Callable]] | None = None,
        transforms: Sequence[Any] | None = None,
        transform_samples: int = 1,
        **kwargs: Any,
    ) -> None:
        sources: list[SampleSource] = [FlipSource(flip_axes)]
        if isinstance(noise_std, bool) or not isinstance(noise_std, (int, float)) or not 0 <= noise_std < float("inf"):
            raise ValueError(f"noise_std must be a finite number >= 0 (0 disables noise), got {noise_std!r}")
        if noise_std > 0:
            sources.append(NoiseSource(noise_std, noise_samples))
        if augmentations:
            sources.append(AugmentationSource(augmentations))
        if transforms:
            sources.append(InvertibleTransformSource(transforms, transform_samples))
        kwargs.pop("sources", None)
        super().__init__(sources=sources, **kwargs)
