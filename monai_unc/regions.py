"""Region specifications for region-based (multi-label) segmentation: label map -> overlapping binary regions.

A *region spec* maps region names to the labels they contain, in channel order, e.g. the BraTS regions

    {"TC": (1, 4), "WT": (1, 2, 4), "ET": (4,)}

(tumour core, whole tumour, enhancing tumour of the BraTS 2018-2022 labels 1 necrotic / non-enhancing core,
2 oedema, 4 enhancing tumour). Regions may overlap; each is one binary task (a sigmoid channel of a region-based
network, one QU-BraTS evaluation). :data:`BRATS_REGIONS` uses the channel order of MONAI's
``ConvertToMultiChannelBasedOnBratsClasses`` (TC, WT, ET), so ``label_to_regions(label)`` of a label map
``(*spatial)`` equals that transform's output (a channel-first 3D map ``(1, X, Y, Z)``, which the transform squeezes,
needs ``channel_dim=0``); :data:`BRATS_2023_REGIONS` is the same with the enhancing tumour labelled 3 (BraTS 2023).

Every metric of the package scores a region as a binary task: :func:`binary_probabilities` turns one sigmoid
channel ``p_r`` into the two-class probabilities ``(1 - p_r, p_r)`` that the softmax-style metrics take, and
:func:`per_region` calls any metric once per region::

    per_region(ece, {"probs": probs, "target": region_targets}, names=["TC", "WT", "ET"])   # {"TC": ..., ...}

Inputs may be numpy arrays or torch tensors; outputs follow the input's library (a MONAI ``MetaTensor`` label map
gives ``MetaTensor`` masks carrying its meta, so that ``SaveImage`` and ``Invertd`` work on them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ._utils import (
    ArrayLike,
    check_labels,
    is_int,
    keep_meta,
    like_input,
    parameter_error,
    to_tensor,
    unique_json_keys,
)

__all__ = [
    "BRATS_REGIONS",
    "BRATS_2023_REGIONS",
    "MONAI_BRATS_ORDER",
    "RegionSpec",
    "check_regions",
    "parse_regions",
    "unclaimed_labels",
    "unclaimed_labels_message",
    "label_to_regions",
    "region_masks",
    "check_foreground_regions",
    "regions_to_labels",
    "binary_probabilities",
    "per_region",
]

RegionSpec = Mapping[str, Sequence[int]]

#: channel order of MONAI's ``ConvertToMultiChannelBasedOnBratsClasses`` (and of the Model Zoo BraTS bundle)
MONAI_BRATS_ORDER = ("TC", "WT", "ET")
#: BraTS 2018-2022 regions (labels 1, 2, 4) in MONAI's channel order TC, WT, ET
BRATS_REGIONS: dict[str, tuple[int, ...]] = {"TC": (1, 4), "WT": (1, 2, 4), "ET": (4,)}
#: BraTS 2023 regions (enhancing tumour labelled 3) in MONAI's channel order TC, WT, ET
BRATS_2023_REGIONS: dict[str, tuple[int, ...]] = {"TC": (1, 3), "WT": (1, 2, 3), "ET": (3,)}

_NAMED = {"brats": BRATS_REGIONS, "brats2023": BRATS_2023_REGIONS}

#: the largest label a region may hold (label maps are stored as integers of at most 32 bits)
MAX_LABEL = 2**31 - 1


def check_regions(regions: RegionSpec, name: str = "regions") -> dict[str, tuple[int, ...]]:
    """Validate a region spec and return it as ``{name: (label, ...)}`` in the given order.

    Args:
        regions: mapping of region names to their labels (an int or a sequence of ints per region).
        name: the argument name used in error messages.

    Returns:
        ``{region name: tuple of labels}`` in the given order (a single int becomes a 1-tuple).

    Raises:
        TypeError: when it is not a mapping of strings to integer sequences.
        ValueError: when it is empty, a region name is empty, a region has no label, a label is negative, larger
            than :data:`MAX_LABEL` or repeated within a region.

    Example:
        >>> from monai_unc.regions import check_regions
        >>> check_regions({"WT": [1, 2, 4], "ET": 4})
        {'WT': (1, 2, 4), 'ET': (4,)}
    """
    if not isinstance(regions, Mapping):
        raise TypeError(f"{name} must be a mapping from region names to label lists, got {type(regions).__name__}")
    if not regions:
        raise ValueError(f"{name} is empty: give at least one region")
    out: dict[str, tuple[int, ...]] = {}
    for key, labels in regions.items():
        if not isinstance(key, str):  # a TypeError, as the docstring says (found by hostile review 60: ValueError)
            raise TypeError(f"{name}: region names must be non-empty strings, got {type(key).__name__} {key!r}")
        if not key:
            raise ValueError(f"{name}: region names must be non-empty strings, got {key!r}")
        if isinstance(labels, np.ndarray) and labels.ndim == 0:  # np.asarray(4): one label, like 4 (iterating raised
            labels = labels[()]  # a TypeError naming no argument)
        if isinstance(labels, (int, np.integer)) and not isinstance(labels, bool):
            labels = (labels,)
        if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence | np.ndarray):
            raise TypeError(f"{name}[{key!r}] must be a list of integer labels, got {type(labels).__name__}")
        vals = []
        for v in labels:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name}[{key!r}] must hold integer labels, got {v!r}")
            if v < 0:
                raise ValueError(f"{name}[{key!r}] holds the negative label {int(v)}")
            if v > MAX_LABEL:
                raise ValueError(f"{name}[{key!r}] holds the label {int(v)}, larger than any label map can hold "
                                 f"(at most {MAX_LABEL})")
            vals.append(int(v))
        if not vals:
            raise ValueError(f"{name}[{key!r}] has no label")
        if len(set(vals)) != len(vals):
            raise ValueError(f"{name}[{key!r}] repeats a label: {vals}")
        out[key] = tuple(vals)
    return out


def parse_regions(spec: RegionSpec | str) -> dict[str, tuple[int, ...]]:
    """A region spec from a mapping, a name or a JSON object string.

    Names: ``"brats"`` (:data:`BRATS_REGIONS`) and ``"brats2023"`` (:data:`BRATS_2023_REGIONS`), case-insensitive.
    A JSON object string such as ``'{"WT": [1, 2, 4], "TC": [1, 4], "ET": [4]}'`` keeps the order of its keys as
    the channel order.

    Args:
        spec: a mapping of region names to labels, a known name or a JSON object string.

    Returns:
        The validated spec ``{region name: tuple of labels}`` (see :func:`check_regions`).

    Raises:
        ValueError: for unknown names, invalid JSON (a region named twice included) or an invalid spec.

    Example:
        >>> from monai_unc.regions import parse_regions
        >>> parse_regions("brats")
        {'TC': (1, 4), 'WT': (1, 2, 4), 'ET': (4,)}
        >>> parse_regions('{"WT": [1, 2, 3], "ET": [3]}')
        {'WT': (1, 2, 3), 'ET': (3,)}
    """
    if isinstance(spec, str):
        key = spec.strip()
        if key.lower() in _NAMED:
            return dict(_NAMED[key.lower()])
        try:
            spec = json.loads(key, object_pairs_hook=lambda pairs: unique_json_keys(
                pairs, "regions: the region {key!r} is given twice"))
        except json.JSONDecodeError as e:
            shown = repr(key) if len(key) <= 200 else repr(key[:200]) + f" ... ({len(key)} characters)"
            raise ValueError(
                f"regions must be one of {sorted(_NAMED)} or a JSON object of region -> labels, got {shown}"
            ) from e
        except RecursionError:  # nested deeper than the json module recurses: a refusal, not a traceback
            raise ValueError("regions: the JSON is nested too deeply to be a region spec (region -> list of labels)"
                             ) from None
    return check_regions(spec)



def unclaimed_labels(labels: ArrayLike, regions: RegionSpec | str) -> list[int]:
    """The non-zero values of a label map that no region of ``regions`` holds (they would count as background).

    Args:
        labels: an integer label map (any shape; numpy array or torch tensor).
        regions: a region spec (as for :func:`parse_regions`).

    Returns:
        The unclaimed label values, sorted (empty when every non-zero label lies in some region).

    Raises:
        ValueError: naming ``labels`` when they are empty, negative, non-integral or not finite.

    Example:
        >>> import numpy as np
        >>> from monai_unc.regions import unclaimed_labels
        >>> unclaimed_labels(np.array([0, 1, 2, 3, 7]), "brats")
        [3, 7]
    """
    spec = parse_regions(regions) if not isinstance(regions, Mapping) else check_regions(regions)
    claimed = {v for values in spec.values() for v in values}
    values = torch.unique(_labels(labels)).cpu().tolist()  # validated: 1.5 was read as label 1, NaN crashed in int()
    return [int(v) for v in values if v != 0 and int(v) not in claimed]


def unclaimed_labels_message(
    found: Mapping[int, Sequence[str]], regions: RegionSpec | str, option: str = "--ignore-unclaimed-labels"
) -> str:
    """The refusal of label values that no region claims, for a cohort.

    It names the labels, in how many cases, and the likely fix (a named spec with the same regions that claims
    them, e.g. ``brats2023`` for label 3 under ``brats``).

    Args:
        found: ``{label: [case id, ...]}`` of the unclaimed labels.
        regions: the region spec in use.
        option: how the caller names the option that ignores them.

    Returns:
        One line of text.

    Example:
        >>> from monai_unc.regions import unclaimed_labels_message
        >>> unclaimed_labels_message({3: ["a", "b"]}, "brats")[:48]
        'label 3 in 2 case(s) (a, b) is in no region of t'
    """
    spec = parse_regions(regions) if not isinstance(regions, Mapping) else check_regions(regions)
    parts = []
    for label in sorted(found):
        ids = list(found[label])
        shown = ", ".join(map(str, ids[:3])) + (", ..." if len(ids) > 3 else "")
        parts.append(f"label {label} in {len(ids)} case(s) ({shown})")
    labels = set(found)
    guess = [name for name, named in _NAMED.items() if list(named) == list(spec) and named != spec
             and labels <= {v for values in named.values() for v in values}]
    hint = f"did you mean {guess[0]}?" if guess else "give a region spec that claims every label"
    return (f"{'; '.join(parts)} {'is' if len(parts) == 1 else 'are'} in no region of the spec "
            f"{ {k: list(v) for k, v in spec.items()} }: {hint} (or {option} to count them as background)")


def label_to_regions(
    labels: ArrayLike, regions: RegionSpec | str = BRATS_REGIONS, channel_dim: int | None = None
) -> Any:
    """Binary region masks from an integer label map: region ``r`` is ``isin(labels, regions[r])``.

    Args:
        labels: integer label map (float arrays with integral values are accepted), any shape.
        regions: region spec (see :func:`parse_regions`); default :data:`BRATS_REGIONS` (TC, WT, ET).
        channel_dim: ``None``: the regions are stacked on a new leading axis, ``(R, *labels.shape)``; an index:
            ``labels.shape[channel_dim]`` must be 1 and is replaced by the ``R`` regions (e.g. ``channel_dim=1`` maps
            a batch ``(B, 1, *spatial)`` to ``(B, R, *spatial)``; ``0`` maps ``(1, *spatial)`` to ``(R, *spatial)``).

    Returns:
        Boolean masks, ``(R, *labels.shape)`` or ``labels.shape`` with ``R`` at ``channel_dim``; numpy for numpy
        input, torch (same device) otherwise, a MONAI ``MetaTensor`` with a copy of the labels' meta (affine, file
        name) for a ``MetaTensor``, as MONAI's ``ConvertToMultiChannelBasedOnBratsClasses`` gives.

    Raises:
        ValueError: for labels that are empty, negative or not integral, or a ``channel_dim`` without one channel.

    Example:
        >>> import numpy as np
        >>> from monai_unc.regions import label_to_regions
        >>> labels = np.array([[0, 1], [2, 4]])
        >>> masks = label_to_regions(labels)  # TC, WT, ET
        >>> masks.shape
        (3, 2, 2)
        >>> masks.astype(int)
        array([[[0, 1],
                [0, 1]],
        <BLANKLINE>
               [[0, 1],
                [1, 1]],
        <BLANKLINE>
               [[0, 0],
                [0, 1]]])
    """
    spec = parse_regions(regions)
    t = _labels(labels)
    if channel_dim is None:
        out = torch.stack([_isin(t, v) for v in spec.values()], dim=0)
    else:
        if isinstance(channel_dim, bool) or not isinstance(channel_dim, int):
            raise TypeError(f"channel_dim must be an int or None, got {type(channel_dim).__name__}")
        if not -t.ndim <= channel_dim < t.ndim:
            raise ValueError(f"channel_dim {channel_dim} is out of range for labels of shape {tuple(t.shape)}")
        if t.shape[channel_dim] != 1:
            raise ValueError(
                f"labels must have one channel along channel_dim={channel_dim}, got shape {tuple(t.shape)}"
            )
        out = torch.cat([_isin(t, v) for v in spec.values()], dim=channel_dim)
    return keep_meta(like_input(out, labels), labels)


def region_masks(labels: ArrayLike, regions: RegionSpec | str = BRATS_REGIONS) -> dict[str, Any]:
    """One boolean mask of the label map's shape per region: ``{region: isin(labels, regions[region])}``.

    The masks are kept apart in the spec's order (no stacked copy; see :func:`label_to_regions` for the stacked
    form).

    Args:
        labels: integer label map, any shape.
        regions: region spec (see :func:`parse_regions`); default :data:`BRATS_REGIONS`.

    Returns:
        ``{region name: boolean mask of labels.shape}``; numpy in, numpy out; a ``MetaTensor`` gives
        ``MetaTensor`` masks with a copy of its meta.

    Example:
        >>> import numpy as np
        >>> from monai_unc.regions import region_masks
        >>> masks = region_masks(np.array([0, 1, 2, 4]))
        >>> {name: m.astype(int).tolist() for name, m in masks.items()}
        {'TC': [0, 1, 0, 1], 'WT': [0, 1, 1, 1], 'ET': [0, 0, 0, 1]}
    """
    spec = parse_regions(regions)
    t = _labels(labels)
    return {name: keep_meta(like_input(_isin(t, values), labels), labels) for name, values in spec.items()}


def check_foreground_regions(regions: RegionSpec | str) -> dict[str, tuple[int, ...]]:
    """The parsed region spec, refused when a region holds label 0, the background.

    Region masks can be turned back into labels (:func:`regions_to_labels`) only when no region holds label 0: a voxel
    in no region gets label 0, which would put it in that region. nnU-Net's ``LabelManager`` never puts the
    background in a region either. ``monai-unc infer --save-samples --regions`` checks its spec with this before any
    model is loaded.

    Args:
        regions: region spec (see :func:`parse_regions`): a mapping ``{name: [label, ...]}``, a JSON object or a name.

    Returns:
        ``{region: (label, ...)}`` in the spec's order.

    Raises:
        ValueError: an invalid spec, or a region holding label 0 (naming ``regions``).

    Example:
        >>> from monai_unc.regions import check_foreground_regions
        >>> check_foreground_regions({"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]})["WT"]
        (1, 2, 4)
        >>> check_foreground_regions({"all": [0, 1]})
        Traceback (most recent call last):
        ...
        ValueError: regions['all'] holds label 0, the background: a voxel in no region gets label 0, which would put it in that region; list only foreground labels in a region (as nnU-Net does)
    """  # noqa: E501
    spec = parse_regions(regions) if not isinstance(regions, Mapping) else check_regions(regions)
    for key, values in spec.items():
        if 0 in values:
            # found by review 67: a voxel in no region got 0, whose regions hold this one (the docstring's "only regions
            # the masks hold are kept" did not hold); nnU-Net never puts the background in a region
            raise parameter_error(ValueError(
                f"regions[{key!r}] holds label 0, the background: a voxel in no region gets label 0, which would put "
                "it in that region; list only foreground labels in a region (as nnU-Net does)"), "regions")
    return spec


def regions_to_labels(masks: ArrayLike, regions: RegionSpec | str = BRATS_REGIONS) -> tuple[Any, int]:
    """A label map whose regions (:func:`label_to_regions`) are the given region masks: the inverse of that function.

    Each voxel gets the label whose set of regions is the voxel's set of regions; where no label of the spec has
    exactly that set (e.g. an enhancing tumour outside the tumour core under the BraTS spec), the label whose set is
    the largest subset of it (so only regions the masks hold are kept; 0, the background, when none). Labels of the
    same set of regions are interchangeable for the regions; the smallest is taken.

    Args:
        masks: binary region masks ``(R, *spatial)`` in the spec's order (bool or 0/1 values).
        regions: region spec (see :func:`parse_regions`); default :data:`BRATS_REGIONS`. No region may hold label 0,
            the background (the label of a voxel in no region), as in nnU-Net, whose ``LabelManager`` leaves the
            background out of its regions and whose conversion of regions to labels starts every voxel at 0.

    Returns:
        ``(labels, n_unrepresented)``: the label map ``(*spatial)`` (uint8 up to label 255, else int32; numpy in,
        numpy out; a ``MetaTensor`` gives a ``MetaTensor`` with a copy of its meta) and the number of voxels whose
        set of regions no label has exactly (0: ``label_to_regions`` of the labels gives the masks back).

    Raises:
        ValueError: ``masks`` without one channel per region of the spec, or values other than 0/1; ``regions`` with
            label 0 in a region (a voxel in no region would get 0, which puts it in that region).

    Example:
        >>> import numpy as np
        >>> from monai_unc.regions import label_to_regions, regions_to_labels
        >>> labels = np.array([[0, 1], [2, 4]])
        >>> back, missed = regions_to_labels(label_to_regions(labels))  # TC, WT, ET
        >>> back.tolist(), missed
        ([[0, 1], [2, 4]], 0)
        >>> regions_to_labels(np.array([[0], [0], [1]]))  # ET alone: no BraTS label is in ET only
        (array([0], dtype=uint8), 1)
    """
    spec = check_foreground_regions(regions)
    t = to_tensor(masks, "masks")
    if t.ndim < 2 or t.shape[0] != len(spec):
        raise ValueError(f"masks must be (R, *spatial) with one mask per region of the spec ({len(spec)}: "
                         f"{', '.join(spec)}), got shape {tuple(t.shape)}")
    if t.dtype != torch.bool:
        if bool(((t != 0) & (t != 1)).any()):
            raise ValueError("masks must hold 0/1 region masks")
        t = t != 0
    names = list(spec)
    n_reg = len(names)
    # the distinct sets of regions the voxels have, as columns of ``present`` (R, K), and each voxel's column:
    # every set of few regions (a bit code indexes a table of 2^R columns), the sets that occur otherwise (a table
    # over all 2^R sets grows exponentially: 20 regions took a minute, 63 overflowed the int64 code)
    if n_reg <= 62:
        code_map = torch.zeros(t.shape[1:], dtype=torch.int64, device=t.device)
        for r in range(n_reg):
            code_map |= t[r].to(torch.int64) << r
        if n_reg <= 10:
            codes, index = torch.arange(1 << n_reg, device=t.device), code_map
        else:
            codes, index = torch.unique(code_map, return_inverse=True)
        present = (codes.unsqueeze(0) >> torch.arange(n_reg, device=t.device).unsqueeze(1)) & 1 == 1
    else:
        present, index = torch.unique(t.reshape(n_reg, -1), dim=1, return_inverse=True)
        index = index.reshape(t.shape[1:])
    # each set's label: that of the label with the most regions all inside the set (the smallest label of a tie);
    # exact where a label has the set itself (or the set is empty: the background)
    members = {label: torch.tensor([label in spec[n] for n in names], device=t.device)
               for label in sorted({v for values in spec.values() for v in values})}
    table = torch.zeros(present.shape[1], dtype=torch.int64, device=t.device)
    taken = torch.zeros(present.shape[1], dtype=torch.bool, device=t.device)
    # the empty set is the background's (0: no region holds it, refused above)
    exact = ~present.any(0)
    for label, member in sorted(members.items(), key=lambda kv: (-int(kv[1].sum()), kv[0])):
        inside = (present | ~member.unsqueeze(1)).all(0)
        exact |= (present == member.unsqueeze(1)).all(0)
        table[inside & ~taken] = label
        taken |= inside
    labels = table[index]
    missed = int((~exact[index]).sum())
    top = max({tuple(m.tolist()): label for label, m in sorted(members.items(), reverse=True)}.values())  # labels used
    labels = labels.to(torch.uint8 if top <= 255 else torch.int32)
    return keep_meta(like_input(labels, masks), masks), missed


def _labels(labels: ArrayLike) -> torch.Tensor:
    """The label map as a tensor in its own dtype (no int64 copy of a large volume).

    Validated like :func:`~monai_unc._utils.check_labels`: integral, non-negative, not empty.
    """
    t = to_tensor(labels, "labels")
    if t.numel() == 0:
        raise ValueError(f"labels is empty (shape {tuple(t.shape)})")
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    if t.is_complex():
        raise TypeError(f"labels must be integer class labels, got dtype {t.dtype}")
    if t.is_floating_point() or (t.is_signed() and int(t.min()) < 0):
        return check_labels(t, "labels")  # raises for non-integral, non-finite or negative labels
    return t


def _isin(t: torch.Tensor, values: Sequence[int]) -> torch.Tensor:
    """``isin`` for a few labels: an OR of equalities in the label map's own dtype (faster than ``torch.isin``).

    A label that the dtype cannot hold is in no voxel: compared as it is, it would wrap around (300 is 44 as a uint8,
    256 is the background 0).
    """
    if not t.is_floating_point():
        info = torch.iinfo(t.dtype)
        values = [v for v in values if info.min <= v <= info.max]
    if not values:
        return torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    out = t == values[0]
    for v in values[1:]:
        out |= t == v
    return out


def binary_probabilities(probs: ArrayLike, channel_dim: int = 1) -> Any:
    """One region's foreground probability ``p`` as the two-class probabilities ``(1 - p, p)``.

    The channel along ``channel_dim`` becomes two channels, so that a softmax-style metric (ECE, NLL, Brier, ...)
    scores the region as a binary task with class 1 = inside the region.

    Differs from :func:`monai_unc.activation.binary_probabilities` (on purpose) in its shape rule: this one
    *replaces* an existing one-channel axis (``(B, 1, *spatial)`` becomes ``(B, 2, *spatial)``, the batch layout of
    the metrics and of :func:`per_region`), while the activation one *adds* a new class axis to a map of any shape
    (``(*spatial)`` becomes ``(2, *spatial)`` with its default ``axis=0``). The values are the same: this equals
    ``activation.binary_probabilities(probs.squeeze(channel_dim), axis=channel_dim)``; this one also refuses
    non-floating-point input.

    Args:
        probs: sigmoid probabilities of one region, one channel along ``channel_dim``, e.g. ``(B, 1, *spatial)``.
        channel_dim: the channel axis.

    Returns:
        ``(1 - p, p)`` concatenated along ``channel_dim``, e.g. ``(B, 2, *spatial)``; numpy in, numpy out.

    Raises:
        ValueError: when the axis does not have exactly one channel or values leave ``[0, 1]``.
        TypeError: for non-floating-point input.

    Example:
        >>> import torch
        >>> from monai_unc.regions import binary_probabilities
        >>> binary_probabilities(torch.tensor([[[0.25, 0.9]]]))
        tensor([[[0.7500, 0.1000],
                 [0.2500, 0.9000]]])
    """
    t = to_tensor(probs, "probs")
    if isinstance(channel_dim, bool) or not isinstance(channel_dim, int) or not -t.ndim <= channel_dim < t.ndim:
        raise ValueError(f"channel_dim {channel_dim!r} is not an axis of probs with shape {tuple(t.shape)}")
    if t.shape[channel_dim] != 1:
        raise ValueError(
            f"probs must hold one region (one channel along channel_dim={channel_dim}), got shape {tuple(t.shape)}"
        )
    if not t.is_floating_point():
        raise TypeError(f"probs must be floating point probabilities, got dtype {t.dtype}")
    if t.numel() and not bool(((t >= 0) & (t <= 1)).all()):
        raise ValueError("probs must lie in [0, 1] (sigmoid outputs), found values outside (or NaN)")
    return like_input(torch.cat([1 - t, t], dim=channel_dim), probs)


def per_region(
    fn: Callable[..., Any],
    region_args: Mapping[str, ArrayLike],
    names: Sequence[str] | None = None,
    binary_probs: Sequence[str] = ("probs",),
    channel_dim: int = 1,
    **kwargs: Any,
) -> dict[str, Any]:
    """Call ``fn`` once per region and return ``{region name: result}`` in channel order.

    Args:
        fn: any metric, e.g. :func:`monai_unc.metrics.ece` or
            :func:`monai_unc.metrics.boundary_uncertainty_concentration`.
        region_args: keyword arguments of ``fn`` with one channel per region along ``channel_dim``, all with the
            same number ``R`` of channels, e.g. ``{"probs": (B, R, *spatial) sigmoid probabilities, "target":
            (B, R, *spatial) region masks}``; region ``r`` receives channel ``r`` with the axis kept
            (``(B, 1, *spatial)``). Boolean masks are passed as ``uint8`` labels.
        names: region names (default ``"0"``, ``"1"``, ...); e.g. ``list(parse_regions("brats"))``.
        binary_probs: the keys of ``region_args`` holding probabilities; region ``r`` receives
            :func:`binary_probabilities` of them, ``(1 - p_r, p_r)``.
        channel_dim: the region axis (1 for batches ``(B, R, *spatial)``, 0 for one case ``(R, *spatial)``).
        **kwargs: passed to every call unchanged (e.g. ``n_bins``, ``spacing``).

    Returns:
        ``{region name: fn(...)}`` for the ``R`` regions, in channel order.

    Raises:
        ValueError: when ``region_args`` is empty, the region counts differ, ``names`` has another length or an
            argument is given both in ``region_args`` and in ``kwargs``.
        TypeError: when ``fn`` is not callable or ``channel_dim`` is not an integer.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import ece
        >>> from monai_unc.regions import per_region
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.rand(1, 3, 4, 4, 4)  # sigmoid outputs of TC, WT, ET
        >>> target = probs > 0.5
        >>> res = per_region(ece, {"probs": probs, "target": target}, names=["TC", "WT", "ET"], n_bins=5)
        >>> {name: round(float(v), 4) for name, v in res.items()}
        {'TC': 0.2496, 'WT': 0.2418, 'ET': 0.251}
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not isinstance(region_args, Mapping) or not region_args:
        raise ValueError("region_args must be a non-empty mapping of argument name -> (B, R, *spatial) array")
    # found by hostile testing: "1", 1.0, True or None failed inside with an error naming no argument
    if not is_int(channel_dim):
        raise TypeError(f"channel_dim must be an int (the region axis), got {channel_dim!r}")
    channel_dim = int(channel_dim)
    tensors = {k: to_tensor(v, k) for k, v in region_args.items()}
    counts = {k: int(t.shape[channel_dim]) if -t.ndim <= channel_dim < t.ndim else -1 for k, t in tensors.items()}
    if len(set(counts.values())) != 1 or -1 in counts.values():
        raise ValueError(
            f"every region argument needs the same number of regions along axis {channel_dim}, got {counts}"
        )
    n = next(iter(counts.values()))
    names = [str(i) for i in range(n)] if names is None else [str(x) for x in names]
    if len(names) != n:
        raise ValueError(f"names has {len(names)} entries but the region arguments have {n} regions")
    if len(set(names)) != n:
        raise ValueError(f"names must be unique, got {names}")
    # found by hostile review 60: an argument given both per region and as a keyword (target=... beside a "target"
    # in region_args) took the per-region value without a word
    both = sorted(set(kwargs) & set(region_args))
    if both:
        raise ValueError(f"{', '.join(both)} given both in region_args and as a keyword argument: give each argument "
                         "once (per region in region_args, or the same for every region as a keyword)")
    unknown = [k for k in binary_probs if k not in region_args]
    if unknown and tuple(binary_probs) != ("probs",):
        raise ValueError(f"binary_probs names {unknown}, which region_args does not have")
    out: dict[str, Any] = {}
    for r, name in enumerate(names):
        call = dict(kwargs)
        for k, t in tensors.items():
            part = t.narrow(channel_dim, r, 1)
            if k in binary_probs:
                part = binary_probabilities(part, channel_dim)
            elif part.dtype == torch.bool:
                part = part.to(torch.uint8)
            call[k] = like_input(part, region_args[k])
        out[name] = fn(**call)
    return out
