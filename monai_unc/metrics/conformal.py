"""Conformal segmentation masks: inner and outer masks with a finite-sample guarantee on the voxels they miss or add.

A **nested family** of masks ``C_lambda`` per class (softmax, one-vs-rest) or region (sigmoid), indexed by
``lambda`` on a grid ``lambda_j = j * step``, ``j = 0 .. size``:

============  =============================================  ===============================================
family        outer (grows with ``lambda``)                  inner (shrinks as ``lambda`` grows)
============  =============================================  ===============================================
threshold     ``C = {x : p(x) >= 1 - lambda}``               ``C = {x : p(x) > lambda}``
margin        predicted mask dilated by ``lambda`` mm:       predicted mask eroded by ``lambda`` mm:
              ``C = {x : d(x, pred) <= lambda}``             ``C = {x : d(x, not pred) > lambda}``
============  =============================================  ===============================================

with Euclidean distances in mm under the voxel spacing (:func:`~monai_unc.metrics.boundary.distance_to_mask`; the
volume border does not count as background, so an all-foreground prediction never erodes). The threshold grid has
``size`` bins (a power of two, default ``2**12``, so ``1 - j / size`` and ``p * size`` are exact in floating point);
the margin grid runs from 0 to a largest margin in steps of ``step`` mm.

The **loss** of case ``i`` with true mask ``Y``:

- outer: the false-negative rate ``FNR_i(lambda) = |Y minus C| / |Y|``, 0 when ``Y`` is empty; non-increasing;
- inner: the false-positive share ``FP_i(lambda) = |C minus Y| / |C|``, 0 when ``C`` is empty; bounded by 1 but
  not monotone in general.

**One pass, bounded memory.** Every voxel gets the grid index at which it enters (outer) or leaves (inner) the mask
(:func:`entry_index`); two histograms of that index, over the true and the false voxels, give ``L_i(lambda_j)`` at
every grid point at once (:class:`ConformalCaseState`, about one byte per bin, task and histogram: tens of kB per
case at the default grid; additive, savable as ``.npz``). The histogram path is exact on the grid: it equals the
losses computed on the full volume. The grid rounds toward the safe side: a distance is divided by the step and
rounded up after subtracting ``1e-9`` (a distance a rounding error above a grid point counts as on it: the outer
mask can only grow, the inner only shrink), and the fitted ``lambda_hat`` is a grid point at or above the continuous
infimum (a larger outer, smaller inner mask). The slack covers float64 rounding only, so the margin family's
distances are exact to float64 rounding up to the end of the grid whatever the backend
(:func:`~monai_unc.metrics.boundary.distance_to_mask` with ``exact_within``: the edt package's float32 runs on an
exact integer lattice, or scipy's float64 transform runs).

**Fitting.** From ``n`` calibration cases (:func:`fit_conformal_rule`):

- in expectation, conformal risk control (Angelopoulos, Bates, Fisch, Lei, Schuster, "Conformal Risk Control",
  ICLR 2024; :func:`crc_lambda`): ``lambda_hat = inf{lambda : (n / (n + 1)) mean_i L_i(lambda) + B / (n + 1) <=
  alpha}`` gives ``E[L_new(lambda_hat)] <= alpha`` (``B = 1``). CRC needs non-increasing losses: the inner
  false-positive share is replaced by its monotone upper envelope ``sup_{lambda' >= lambda} FP_i(lambda')``,
  which bounds it, so the guarantee holds for the share itself;
- with high probability (Mossina and Friedrich, "Controlling False Positives in Image Segmentation via Conformal
  Prediction", 2025; :func:`high_probability_lambda`): ``s_i = min{lambda : L_i(lambda') <= tol for every
  lambda' >= lambda}`` and ``lambda_hat`` = the ``ceil((n + 1)(1 - alpha))``-th smallest ``s_i`` give
  ``P(L_new(lambda_hat) <= tol) >= 1 - alpha``.

Both guarantees are marginal: over the draw of the calibration cases and the new case, for exchangeable cases; not
conditional on one case. Optional strata of a case score (Mondrian calibration) give each stratum its own
``lambda_hat`` and the guarantee within the stratum.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._utils import (
    check_integer,
    normalize_spacing,
    positive_finite,
    probability_tolerance,
    quantile_min_cases,
    quantile_rank,
    to_numpy,
)
from ..activation import Activation, get_activation
from ..product import format_cell, format_level
from ..state import register_state_type
from .boundary import distance_to_mask

__all__ = [
    "CONFORMAL_FAMILIES",
    "CONFORMAL_SIDES",
    "DEFAULT_THRESHOLD_BINS",
    "DEFAULT_MAX_MARGIN_MM",
    "DEFAULT_MARGIN_STEP_MM",
    "ConformalCaseState",
    "ConformalTaskRule",
    "ConformalRule",
    "conformal_grid",
    "task_guarantee",
    "entry_index",
    "conformal_case_state",
    "crc_lambda",
    "crc_tolerance",
    "high_probability_lambda",
    "last_index",
    "TRIVIAL_MASKS",
    "min_calibration_cases",
    "quantile_edges",
    "stratum_of",
    "fit_conformal_rule",
]

#: the two nested families of masks
CONFORMAL_FAMILIES = ("threshold", "margin")
#: outer masks (control the missed share of the truth) and inner masks (control the false-positive share)
CONFORMAL_SIDES = ("outer", "inner")
#: what a margin rule past its grid (:func:`last_index`) keeps, per side: the trivial mask
TRIVIAL_MASKS = {"outer": "every voxel", "inner": "no voxel"}
#: bins of the probability grid (a power of two: the grid points and ``p * bins`` are exact in floating point)
DEFAULT_THRESHOLD_BINS = 4096
#: the largest margin of the default margin grid, in mm
DEFAULT_MAX_MARGIN_MM = 20.0
#: the step of the default margin grid, in mm
DEFAULT_MARGIN_STEP_MM = 0.25
#: a distance this much (relative to the step) above a grid point counts as on it (toward the safe side)
_ROUNDING_SLACK = 1e-9
#: the float64 machine epsilon, 2**-52 (the rounding allowance of conformal risk control: :func:`crc_tolerance`)
_EPS = float(np.finfo(np.float64).eps)
_METHODS = ("expectation", "high_probability")


# --------------------------------------------------------------------------------------------------------------
# the grid and the index of a voxel on it
# --------------------------------------------------------------------------------------------------------------


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def conformal_grid(family: str, grid: int | tuple[float, float] | None = None) -> tuple[float, int]:
    """The ``lambda`` grid of a family as ``(step, size)``: ``lambda_j = j * step`` for ``j = 0 .. size``.

    Args:
        family: ``"threshold"`` or ``"margin"``.
        grid: threshold family: the number of probability bins, a power of two in ``[2, 2**16]`` (default
            :data:`DEFAULT_THRESHOLD_BINS`), giving ``step = 1 / bins``; margin family: ``(max_margin_mm,
            step_mm)`` (default ``(DEFAULT_MAX_MARGIN_MM, DEFAULT_MARGIN_STEP_MM)``), giving ``size =
            ceil(max_margin_mm / step_mm)``.

    Returns:
        ``(step, size)``: a float and an int; the grid has ``size + 1`` points from 0 to ``size * step``.

    Example:
        >>> conformal_grid("threshold", 8)
        (0.125, 8)
        >>> conformal_grid("margin", (2.0, 0.5))
        (0.5, 4)
    """
    _check_choice(family, "family", CONFORMAL_FAMILIES)
    if family == "threshold":
        bins = DEFAULT_THRESHOLD_BINS if grid is None else grid
        if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or not 2 <= bins <= 2**16:
            raise ValueError(f"grid must be a power of two in [2, 65536] for the threshold family, got {grid!r}")
        if int(bins) & (int(bins) - 1):
            raise ValueError(f"grid must be a power of two for the threshold family (exact grid), got {bins}")
        return 1.0 / int(bins), int(bins)
    spec = (DEFAULT_MAX_MARGIN_MM, DEFAULT_MARGIN_STEP_MM) if grid is None else grid
    try:
        # a bool is no length and text no number: (True, 0.5) read as a 1 mm grid, ("20", "0.25") was parsed (found by
        # hostile review 55)
        if isinstance(spec, (str, bytes)) or any(isinstance(v, (bool, np.bool_, str, bytes)) for v in spec):
            raise TypeError
        top, step = (float(v) for v in spec)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(f"grid must be (max_margin_mm, step_mm) for the margin family, got {grid!r}") from None
    if not (math.isfinite(top) and math.isfinite(step) and step > 0 and top >= step):
        raise ValueError(f"grid must be (max_margin_mm, step_mm) with 0 < step_mm <= max_margin_mm, got {grid!r}")
    size = math.ceil(top / step - _ROUNDING_SLACK)
    if size > 100_000:
        raise ValueError(f"grid has {size} margin steps; use a larger step_mm (at most 100000 steps)")
    return step, size


def entry_index(values: np.ndarray, family: str, side: str, step: float, size: int) -> np.ndarray:
    """The grid index at which each voxel enters (outer) or leaves (inner) the mask; the one rule of membership.

    Outer: voxel ``x`` is in ``C_j`` iff ``e(x) <= j``; inner: iff ``e(x) > j``. With ``G = size``:

    - threshold, outer: ``e = G - floor(p G)`` (``p >= 1 - j / G``); inner: ``e = ceil(p G)`` (``p > j / G``);
    - margin, outer: ``d`` = distance in mm to the predicted mask; inner: ``d`` = distance to its complement;
      ``e = ceil(d / step - 1e-9)``, and ``G + 1`` (beyond the grid) for ``d > G * step`` or ``inf``. The index is
      only as exact as ``d``: :func:`conformal_case_state` and :meth:`ConformalRule.apply` compute distances exact
      to float64 rounding up to the grid's end (:func:`~monai_unc.metrics.boundary.distance_to_mask` with
      ``exact_within``), so that a voxel exactly ``lambda`` mm away is on the grid point ``lambda``.

    Args:
        values: probabilities in [0, 1] (threshold) or distances in mm, ``>= 0`` or ``inf`` (margin), any shape
            (numpy); ``ValueError`` naming ``values`` for NaN or a value out of range.
        family: ``"threshold"`` or ``"margin"``.
        side: ``"outer"`` or ``"inner"``.
        step: the grid step of :func:`conformal_grid` (``1 / size`` for the threshold family).
        size: the grid size of :func:`conformal_grid`.

    Returns:
        int32 indices in ``[0, size + 1]`` of the shape of ``values`` (int32: converting to it costs a fifth of
        int64; the histograms of :class:`ConformalCaseState` count in int64).

    Example:
        >>> import numpy as np
        >>> p = np.array([0.0, 0.25, 0.3, 1.0])
        >>> entry_index(p, "threshold", "outer", 0.25, 4).tolist()
        [4, 3, 3, 0]
        >>> entry_index(p, "threshold", "inner", 0.25, 4).tolist()
        [0, 1, 2, 4]
        >>> entry_index(np.array([0.0, 0.5, 0.51, np.inf]), "margin", "outer", 0.5, 2).tolist()
        [0, 1, 2, 3]
    """
    _check_choice(family, "family", CONFORMAL_FAMILIES)
    _check_choice(side, "side", CONFORMAL_SIDES)
    size = check_integer(size, "size")
    if family == "threshold":
        if size & (size - 1) or not 2 <= size <= 2**16 or step != 1.0 / size:
            raise ValueError(f"step must be 1 / size and size a power of two in [2, 65536] for the threshold family, "
                             f"got step={step!r}, size={size!r}")
    elif isinstance(step, bool) or not isinstance(step, (int, float, np.integer, np.floating)) or not (
            math.isfinite(step) and step > 0):
        raise ValueError(f"step must be a positive finite number of mm, got {step!r}")
    v = to_numpy(values, "values") if isinstance(values, torch.Tensor) else np.asarray(values)
    if v.dtype.kind not in "iuf":
        raise TypeError(f"values must be numbers (probabilities or distances in mm), got dtype {v.dtype}")
    if v.dtype == np.float16:  # float16 turned size 65536 into inf (every index -2^31; found by hostile testing)
        v = v.astype(np.float32)
    if v.size:
        lo, hi = float(v.min()), float(v.max())  # NaN propagates through both
        top = 1.0 if family == "threshold" else math.inf
        if not (0.0 <= lo and hi <= top):
            what = "probabilities in [0, 1]" if family == "threshold" else "distances in mm (>= 0, inf allowed)"
            raise ValueError(f"values must be {what}, without NaN, got values in [{lo:.6g}, {hi:.6g}]")
    return _entry_index(v, family, side, float(step), size)


def _entry_index(values: np.ndarray, family: str, side: str, step: float, size: int) -> np.ndarray:
    """:func:`entry_index` without the checks: ``values`` are checked probabilities or distances (the hot path)."""
    if family == "threshold":
        scaled = values * size  # exact for a power-of-two size
        if side == "inner":
            return np.ceil(scaled).astype(np.int32)
        idx = scaled.astype(np.int32)  # truncation: the floor of values >= 0
        return np.subtract(size, idx, out=idx)
    with np.errstate(invalid="ignore", over="ignore"):
        raw = np.ceil(values / step - _ROUNDING_SLACK)
    raw = np.where(np.isfinite(raw), raw, size + 1)
    return np.clip(raw, 0, size + 1).astype(np.int32)


# --------------------------------------------------------------------------------------------------------------
# the per-case state
# --------------------------------------------------------------------------------------------------------------


def _suffix_counts(counts: np.ndarray) -> np.ndarray:
    """``out[..., j] = sum_{e > j} counts[..., e]`` for ``j = 0 .. size`` (``counts`` has ``size + 2`` bins)."""
    return np.cumsum(counts[..., ::-1], axis=-1)[..., ::-1][..., 1:]


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` as float64, 0 where ``den == 0`` (the empty-truth and empty-mask rules)."""
    out = np.zeros(np.broadcast_shapes(num.shape, den.shape), dtype=np.float64)
    np.divide(num, den, out=out, where=den > 0)
    return out


#: the narrow dtypes a histogram of :class:`ConformalCaseState` is held in (the counts above one go in a list)
_BASE_DTYPES = (np.uint8, np.uint16, np.uint32)
_INT64_MAX = int(np.iinfo(np.int64).max)


def _pack_counts(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-negative int64 counts as ``(base, index, value)``, exactly: the smallest of three narrow layouts.

    ``base`` holds every count in the narrow dtype (uint8, 16 or 32) that gives the fewest bytes, 0 where a count does
    not fit; ``index`` (uint32 flat positions, increasing) and ``value`` (uint32, or int64 when one needs it) list
    the counts that do not fit. A case's histogram counts a few hundred to a few thousand voxels in most bins and
    millions in a few (near p = 0 and 1), so uint8 with a short list holds it in about an eighth of int64's bytes.
    """
    flat = counts.reshape(-1)
    top = int(flat.max()) if flat.size else 0
    best: tuple[int, Any, np.ndarray] | None = None
    for dtype in _BASE_DTYPES:
        limit = int(np.iinfo(dtype).max)
        over = np.flatnonzero(flat > limit) if top > limit else np.zeros(0, dtype=np.intp)
        value_bytes = 4 if top <= 0xFFFFFFFF else 8
        cost = flat.size * np.dtype(dtype).itemsize + over.size * (4 + value_bytes)
        if best is None or cost < best[0]:
            best = (cost, dtype, over)
    assert best is not None
    _, dtype, over = best
    limit = int(np.iinfo(dtype).max)
    base = np.where(flat > limit, 0, flat).astype(dtype).reshape(counts.shape)
    index_dtype = np.uint32 if flat.size <= 0xFFFFFFFF else np.int64
    value = flat[over].astype(np.uint32 if top <= 0xFFFFFFFF else np.int64)
    return base, over.astype(index_dtype), value


def _unpack_counts(packed: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """The int64 counts of :func:`_pack_counts` (a new array)."""
    base, index, value = packed
    out = base.astype(np.int64)
    if index.size:
        out.reshape(-1)[index] = value
    return out


def _check_packed(arrays: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """``counts_base``, ``counts_index``, ``counts_value`` of a saved state checked as :func:`_pack_counts` writes them.

    A file may have been edited: ``ValueError`` naming the key for a wrong shape or dtype, a negative count, or an
    index off the grid or out of order.
    """
    prefix = "counts"
    base, index, value = (np.asarray(arrays[f"{prefix}_{k}"]) for k in ("base", "index", "value"))
    if base.shape != shape:
        raise ValueError(f"{prefix}_base must have shape {shape} (true and false, tasks, size + 2), got {base.shape}")
    for key, a in (("base", base), ("index", index), ("value", value)):
        if a.dtype.kind not in "iu":
            raise ValueError(f"{prefix}_{key} must hold integers, got dtype {a.dtype}")
        if key != "base" and a.ndim != 1:
            raise ValueError(f"{prefix}_{key} must be one-dimensional, got shape {a.shape}")
        if a.size and (int(a.min()) < 0 or int(a.max()) > _INT64_MAX):
            raise ValueError(f"{prefix}_{key} must hold non-negative int64 numbers, got values in "
                             f"[{int(a.min())}, {int(a.max())}]")
    if index.size != value.size:
        raise ValueError(f"{prefix}_index and {prefix}_value must have one entry each per count, got {index.size} "
                         f"and {value.size}")
    if index.size and (int(index.max()) >= base.size or (index.size > 1 and not np.all(np.diff(
            index.astype(np.int64)) > 0))):
        raise ValueError(f"{prefix}_index must hold increasing positions in [0, {base.size}) of {prefix}_base")
    return base, index.astype(np.int64), value.astype(np.int64)


@register_state_type("conformal_case")
class ConformalCaseState:
    """What one case contributes to fitting a conformal mask: per task, histograms of the voxels' grid index.

    ``true_counts[t, e]`` / ``false_counts[t, e]`` count the true / false voxels of task ``t`` whose
    :func:`entry_index` is ``e`` (``e = 0 .. size + 1``). Every loss and mask size on the grid follows
    (:meth:`losses`, :meth:`mask_sizes`). States of one family, side and grid add (``a + b``: the pooled voxels,
    e.g. two halves of a volume in the threshold family); they are small and picklable, and
    :meth:`to_arrays` / :meth:`from_arrays` round-trip through ``numpy.savez``.

    Memory: the histograms are held and saved exactly in a narrow integer dtype (uint8, 16 or 32, whichever takes the
    fewest bytes) with the few counts that do not fit listed beside it; :attr:`true_counts` and :attr:`false_counts`
    give them as int64. A two-class case at the default ``2**12`` bins takes 33-40 kB for both sides (two int64
    histograms per side took 262 kB).

    Args:
        activation: ``"softmax"`` or ``"sigmoid"``: how the probabilities of a case split into tasks.
        family: ``"threshold"`` or ``"margin"``.
        side: ``"outer"`` or ``"inner"``.
        step: the grid step (:func:`conformal_grid`).
        size: the grid size; the grid has ``size + 1`` points.
        names: one name per task: the class index (softmax, one-vs-rest) or the region (sigmoid).
        true_counts: non-negative integer counts ``(T, size + 2)``.
        false_counts: non-negative integer counts ``(T, size + 2)``.

    Example:
        >>> import numpy as np
        >>> probs = np.array([[0.9, 0.6, 0.2, 0.1]])
        >>> state = conformal_case_state(probs, np.array([[1, 1, 1, 0]]), activation="sigmoid", grid=4)
        >>> state.n_true.tolist(), state.losses()[0].round(3).tolist()
        ([3], [1.0, 0.667, 0.333, 0.333, 0.0])
    """

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __init__(self, activation: str, family: str, side: str, step: float, size: int, names: Sequence[str],
                 true_counts: np.ndarray, false_counts: np.ndarray) -> None:
        get_activation(activation)
        self.activation = activation
        self.family = _check_choice(family, "family", CONFORMAL_FAMILIES)
        self.side = _check_choice(side, "side", CONFORMAL_SIDES)
        # True was a 1 mm step, a size of 4.7 the grid of 4 and "0.5" was parsed (found by hostile review 55)
        if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, float, np.integer, np.floating)):
            raise ValueError(f"step must be a positive finite number, got {step!r}")
        size = check_integer(size, "size")
        self.step, self.size, self.names = float(step), size, tuple(str(n) for n in names)
        if not (math.isfinite(self.step) and self.step > 0):
            raise ValueError(f"step and size must be positive, got step={self.step}, size={self.size}")
        self._counts = _pack_counts(np.stack([self._checked("true_counts", true_counts),
                                              self._checked("false_counts", false_counts)]))

    def _checked(self, name: str, counts: Any) -> np.ndarray:
        """Counts checked (``ValueError`` naming ``name``) as int64."""
        a = np.asarray(counts)
        shape = (len(self.names), self.size + 2)
        if a.shape != shape:
            raise ValueError(f"{name} must have shape {shape} (tasks, size + 2), got {a.shape}")
        if a.dtype.kind not in "iu" or (a.size and (int(a.min()) < 0 or int(a.max()) > _INT64_MAX)):
            raise ValueError(f"{name} must hold non-negative integer counts, got dtype {a.dtype}")
        return a.astype(np.int64, copy=False)

    def _both(self) -> np.ndarray:
        """The two histograms, int64 ``(2, T, size + 2)``: true, false (a new array)."""
        return _unpack_counts(self._counts)

    def _set(self, which: int, name: str, counts: Any) -> None:
        both = self._both()
        both[which] = self._checked(name, counts)
        self._counts = _pack_counts(both)

    @property
    def true_counts(self) -> np.ndarray:
        """The histogram of the true voxels, int64 ``(T, size + 2)`` (a new array; assign to change it)."""
        return self._both()[0]

    @true_counts.setter
    def true_counts(self, counts: np.ndarray) -> None:
        self._set(0, "true_counts", counts)

    @property
    def false_counts(self) -> np.ndarray:
        """The histogram of the false voxels, int64 ``(T, size + 2)`` (a new array; assign to change it)."""
        return self._both()[1]

    @false_counts.setter
    def false_counts(self, counts: np.ndarray) -> None:
        self._set(1, "false_counts", counts)

    def __repr__(self) -> str:
        return (f"ConformalCaseState(activation={self.activation!r}, family={self.family!r}, side={self.side!r}, "
                f"step={self.step!r}, size={self.size!r}, names={self.names!r}, true_counts={self.true_counts!r})")

    @property
    def nbytes(self) -> int:
        """Bytes of the histograms as held (and saved, before compression): the memory a case's state takes."""
        return sum(a.nbytes for a in self._counts)

    @property
    def lambdas(self) -> np.ndarray:
        """The grid ``j * step``, ``j = 0 .. size`` (float64 ``(size + 1,)``): probabilities or mm."""
        return self.step * np.arange(self.size + 1, dtype=np.float64)

    @property
    def n_true(self) -> np.ndarray:
        """True voxels of each task (int64 ``(T,)``)."""
        return self.true_counts.sum(axis=1)

    def losses(self) -> np.ndarray:
        """``L(lambda_j)`` of every task at every grid point: FNR (outer) or false-positive share (inner).

        Returns:
            float64 ``(T, size + 1)`` in [0, 1]; FNR is 0 for a task without true voxels, the false-positive share
            0 where the mask is empty.
        """
        true_counts, false_counts = self._both()
        missed_or_kept_true = _suffix_counts(true_counts)
        if self.side == "outer":
            return _ratio(missed_or_kept_true, true_counts.sum(axis=1)[:, None])
        kept_false = _suffix_counts(false_counts)
        return _ratio(kept_false, missed_or_kept_true + kept_false)

    def mask_sizes(self) -> np.ndarray:
        """Voxels in the mask ``C_lambda_j`` of every task at every grid point.

        Returns:
            int64 ``(T, size + 1)`` (multiply by the voxel volume for mm^3).
        """
        counts = self._both().sum(axis=0)
        beyond = _suffix_counts(counts)
        if self.side == "inner":
            return beyond
        return counts.sum(axis=1)[:, None] - beyond

    def compatible(self, other: ConformalCaseState) -> bool:
        """Whether ``other`` has the same activation, family, side, grid and task names.

        Args:
            other: another state.

        Returns:
            True when the two can be added or fitted together.
        """
        return (self.activation, self.family, self.side, self.step, self.size, self.names) == (
            other.activation, other.family, other.side, other.step, other.size, other.names)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConformalCaseState):
            return NotImplemented
        return self.compatible(other) and np.array_equal(self._both(), other._both())

    def __add__(self, other: ConformalCaseState) -> ConformalCaseState:
        if not isinstance(other, ConformalCaseState):
            return NotImplemented
        return ConformalCaseState.from_state_dict(self.state_dict()).merge(other)

    def merge(self, other: ConformalCaseState) -> ConformalCaseState:
        """Add the voxels of ``other`` into this state (in place; :class:`monai_unc.state.MergeableState`).

        Args:
            other: a state of the same activation, family, side, grid and task names.

        Returns:
            ``self``.
        """
        if not isinstance(other, ConformalCaseState):
            raise TypeError(f"other must be a ConformalCaseState, got {type(other).__name__}")
        if not self.compatible(other):
            raise ValueError("other must have the same activation, family, side, grid and names to be added")
        self._counts = _pack_counts(self._both() + other._both())
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as numpy arrays (no object arrays), e.g. for ``numpy.savez`` (:mod:`monai_unc.state`).

        Returns:
            A dict of arrays that :meth:`from_state_dict` reads back.
        """
        return self.to_arrays()

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> ConformalCaseState:
        """The state of :meth:`state_dict` (or of ``numpy.load`` of a saved ``.npz``).

        Args:
            state: a mapping with the keys of :meth:`state_dict`.

        Returns:
            The state; ``ValueError`` naming ``arrays`` for a missing key.
        """
        return cls.from_arrays(state)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as numpy arrays (no object arrays), e.g. for ``numpy.savez``.

        The two histograms are saved as they are held: ``counts_base`` ``(2, T, size + 2)`` (true, false) in a narrow
        dtype, ``counts_index`` and ``counts_value`` the counts that do not fit in it (earlier versions saved int64
        ``true_counts`` / ``false_counts``, which :meth:`from_arrays` still reads; they refuse this layout, naming the
        keys they miss).

        Returns:
            A dict of arrays that :meth:`from_arrays` reads back.
        """
        out = {
            "activation": np.array(self.activation), "family": np.array(self.family), "side": np.array(self.side),
            "step": np.array(self.step), "size": np.array(self.size, dtype=np.int64),
            "names": np.array(self.names, dtype=str),
        }
        for key, a in zip(("base", "index", "value"), self._counts):
            out[f"counts_{key}"] = a.copy()
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> ConformalCaseState:
        """The state of :meth:`to_arrays` (or of ``numpy.load`` of a saved ``.npz``), or int64 histograms.

        Args:
            arrays: a mapping with the keys of :meth:`to_arrays`, or with ``true_counts`` and ``false_counts``
                (int64 ``(T, size + 2)``: the layout of earlier versions) in place of the ``counts_*`` arrays.

        Returns:
            The state; ``ValueError`` naming ``arrays`` for a missing key, or naming the key of a malformed array.

        Example:
            >>> import io, numpy as np
            >>> state = conformal_case_state(np.array([[0.2, 0.8]]), np.array([[0, 1]]), activation="sigmoid", grid=4)
            >>> buf = io.BytesIO()
            >>> np.savez(buf, **state.to_arrays())
            >>> _ = buf.seek(0)
            >>> back = ConformalCaseState.from_arrays(np.load(buf))
            >>> back.compatible(state), bool((back.true_counts == state.true_counts).all())
            (True, True)
        """
        dense = "true_counts" in arrays or "false_counts" in arrays
        counts = ("true_counts", "false_counts") if dense else ("counts_base", "counts_index", "counts_value")
        keys = ("activation", "family", "side", "step", "size", "names", *counts)
        missing = [k for k in keys if k not in arrays]
        if missing:
            raise ValueError(f"arrays lacks {missing} (expected the keys of ConformalCaseState.to_arrays())")
        a = {k: np.asarray(arrays[k]) for k in keys[:6]}
        # the stored scalars as they are (the constructor checks the step): int() made a size of 4.7 the grid of 4
        head = (str(a["activation"][()]), str(a["family"][()]), str(a["side"][()]), a["step"][()],
                check_integer(a["size"][()], "size"), tuple(str(n) for n in a["names"].reshape(-1)))
        if dense:
            return cls(*head, np.asarray(arrays["true_counts"]), np.asarray(arrays["false_counts"]))
        both = _unpack_counts(_check_packed(arrays, (2, len(head[5]), head[4] + 2)))
        return cls(*head, both[0], both[1])


# --------------------------------------------------------------------------------------------------------------
# one case: probabilities (and masks) to tasks to histograms
# --------------------------------------------------------------------------------------------------------------


def _probabilities(probs: Any, act: Activation) -> np.ndarray:
    """``probs`` ``(C, *spatial)`` checked as the activation's probabilities (numpy, float32 or float64) in [0, 1].

    The checks of ``_utils.check_probabilities`` / ``check_unit_interval`` (values in [0, 1] and, for a softmax,
    class sums of 1, both within :func:`~monai_unc._utils.probability_tolerance`), done in numpy in the input's
    precision: the torch versions cost ~10x more on a 128^3 x 3 volume and run once per case here. NaN fails the
    range check (``min`` and ``max`` propagate it). Values within the tolerance outside [0, 1] are clipped.
    """
    p = to_numpy(probs, "probs")
    if not np.issubdtype(p.dtype, np.floating):
        raise TypeError(f"probs must be a floating point array of probabilities, got dtype {p.dtype}")
    if isinstance(probs, torch.Tensor):  # the tensor's own dtype: to_numpy gives a bfloat16 one as float32, whose
        # tolerance (1e-3) refused autocast probabilities (sums off by up to ~4e-3; found by hostile testing)
        tol = probability_tolerance(probs.dtype)
    else:
        tol = probability_tolerance(torch.float16 if p.dtype == np.float16 else torch.float32)
    if p.dtype not in (np.float32, np.float64):
        p = p.astype(np.float32)
    if p.ndim < 2 or p.size == 0 or p.shape[0] < act.min_channels:
        raise ValueError(f"probs must be (C, *spatial) with at least {act.min_channels} {act.channel_word} "
                         f"({act.name}) and one spatial axis, got shape {p.shape}")
    lo, hi = float(p.min()), float(p.max())
    if not (lo >= -tol and hi <= 1 + tol):  # False for NaN
        nan = int(np.isnan(p).sum())  # "values in [nan, nan]" hid one NaN voxel among valid probabilities
        if nan:
            raise ValueError(f"probs must lie in [0, 1], got {nan} NaN value(s) of {p.size}")
        raise ValueError(f"probs must lie in [0, 1], got values in [{lo:.4g}, {hi:.4g}] (inf, or logits?)")
    if not act.multilabel:
        dev = float(np.abs(p.sum(axis=0) - 1).max())
        if dev > tol:
            raise ValueError(f"probs must sum to 1 over the classes (axis 0, tolerance {tol}), largest deviation "
                             f"{dev:.4g}; pass softmax probabilities, not logits")
    if lo < 0 or hi > 1:
        p = np.clip(p, 0.0, 1.0)
    return p


def _labels(x: Any, name: str, act: Activation, probs: np.ndarray) -> np.ndarray:
    """A label map ``(*spatial)`` (softmax) or binary masks ``(R, *spatial)`` (sigmoid) fitting ``probs``.

    The checks of ``_utils.check_labels`` (integral, non-negative, below the number of classes; 0/1 for masks),
    in numpy; an integer or boolean map is returned as is (no int64 copy).
    """
    a = to_numpy(x, name)
    expected = tuple(probs.shape) if act.multilabel else tuple(probs.shape[1:])
    if tuple(a.shape) != expected:
        raise ValueError(f"{name} must have shape {expected} for {act.name} probabilities {tuple(probs.shape)}, "
                         f"got {tuple(a.shape)}")
    if a.dtype == bool:
        return a
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold integer labels, got dtype {a.dtype}")
    classes = 2 if act.multilabel else probs.shape[0]
    lo, hi = a.min(), a.max()
    if not (lo >= 0 and hi < classes):  # False for NaN
        raise ValueError(f"{name} must hold labels in [0, {classes - 1}], got values in [{lo}, {hi}]")
    if a.dtype.kind == "f":
        if not bool(np.all(a == np.round(a))):
            raise ValueError(f"{name} must hold integer labels, got non-integral values")
        a = a.astype(np.int64)
    return a


def _tasks(act: Activation, probs: np.ndarray, labels: np.ndarray | None, pred: np.ndarray | None,
           want_pred: bool) -> Iterator[tuple[int, np.ndarray, np.ndarray | None, np.ndarray | None]]:
    """``(position, p, true mask, predicted mask)`` of every one-vs-rest class (softmax) or region (sigmoid).

    The split into tasks and the predicted label of a task without ``pred`` (argmax, or ``p > 0.5``) come from the
    activation; the positive classes of a task are all its classes (softmax) or class 1 (a region).
    """
    task_probs = act.task_probabilities(probs, axis=0)
    task_labels = act.task_targets(labels, axis=0) if labels is not None else [None] * len(task_probs)
    task_preds = act.task_targets(pred, axis=0) if pred is not None else [None] * len(task_probs)
    position = 0
    for tp, tl, tpred in zip(task_probs, task_labels, task_preds):
        spatial = tp.shape[1:]
        if want_pred and tpred is None:
            flat = torch.from_numpy(np.ascontiguousarray(tp.reshape(tp.shape[0], -1)))
            tpred = act.confidence(flat[1] if act.multilabel else flat)[1]
            tpred = tpred.numpy().reshape(spatial)
        for k in ([1] if act.multilabel else range(tp.shape[0])):
            yield (position, tp[k], None if tl is None else np.asarray(tl) == k,
                   None if tpred is None else np.asarray(tpred) == k)
            position += 1


def _task_index(p: np.ndarray, pred: np.ndarray | None, family: str, side: str, step: float, size: int,
                spacing: tuple, backend: str) -> np.ndarray:
    """The :func:`entry_index` of one task's voxels: from its probabilities, or from distances to its prediction."""
    if family == "threshold":
        return _entry_index(p, family, side, step, size)
    assert pred is not None
    # exact up to one step beyond the grid: the index of every distance that can land on the grid is exact
    d = distance_to_mask(pred if side == "outer" else ~pred, spacing, backend, exact_within=(size + 1) * step)
    return _entry_index(d, family, side, step, size)


def _names(names: Sequence[str] | None, count: int) -> tuple[str, ...]:
    if names is None:
        return tuple(str(i) for i in range(count))
    out = tuple(str(n) for n in names)
    if len(out) != count or len(set(out)) != count:
        raise ValueError(f"names must be {count} distinct names (one per class or region), got {list(names)!r}")
    return out


def conformal_case_state(
    probs: Any,
    target: Any,
    *,
    family: str = "threshold",
    side: str = "outer",
    activation: str | Activation = "softmax",
    spacing: float | Sequence[float] = 1.0,
    pred: Any = None,
    grid: int | tuple[float, float] | None = None,
    names: Sequence[str] | None = None,
    backend: str = "auto",
) -> ConformalCaseState:
    """The :class:`ConformalCaseState` of one case: every ``L(lambda_j)`` of every class or region in one pass.

    Per task (softmax: every class one-vs-rest; sigmoid: every region) each voxel's :func:`entry_index` is
    binned over the true and the false voxels (``numpy.bincount``, int64). Memory: a few copies of one task's
    volume, whatever the grid.

    Args:
        probs: softmax probabilities ``(C, *spatial)`` summing to 1 over ``C``, or sigmoid probabilities
            ``(R, *spatial)`` in [0, 1]; numpy or torch.
        target: the true label map ``(*spatial)`` with labels ``0 .. C-1`` (softmax) or the true region masks
            ``(R, *spatial)`` (sigmoid).
        family: ``"threshold"`` (probabilities) or ``"margin"`` (distances in mm to the predicted mask).
        side: ``"outer"`` (loss: FNR) or ``"inner"`` (loss: false-positive share).
        activation: ``"softmax"`` or ``"sigmoid"`` (:func:`monai_unc.activation.get_activation`).
        spacing: voxel size in mm per spatial axis (margin family).
        pred: the predicted label map or region masks, in the layout of ``target`` (margin family; default: the
            argmax, or ``p > 0.5`` per region, of ``probs``). Ignored by the threshold family.
        grid: the grid of :func:`conformal_grid`.
        names: one name per class or region (default ``"0", "1", ...``).
        backend: the distance-transform backend of :func:`~monai_unc.metrics.boundary.distance_to_mask`; it
            changes the speed, not the result: distances are exact to float64 rounding up to the end of the grid
            (``exact_within``), with the edt package on an integer lattice where the spacings have one
            (:func:`~monai_unc.metrics.boundary.lattice_unit`) and scipy's float64 transform otherwise.

    Returns:
        The state with ``C`` (softmax) or ``R`` (sigmoid) tasks.

    Example:
        >>> import numpy as np
        >>> probs = np.array([[0.7, 0.6, 0.1, 0.2], [0.3, 0.4, 0.9, 0.8]])
        >>> state = conformal_case_state(probs, np.array([0, 1, 1, 1]), grid=4)
        >>> state.names, state.n_true.tolist()
        (('0', '1'), [1, 3])
        >>> state.losses()[1].tolist()  # class 1: FNR at lambda = 0, 0.25, ..., 1
        [1.0, 0.3333333333333333, 0.3333333333333333, 0.0, 0.0]
        >>> margin = conformal_case_state(probs, np.array([0, 1, 1, 1]), family="margin", grid=(2.0, 1.0))
        >>> margin.losses()[1].tolist()  # the prediction (argmax) misses voxel 1, one mm away
        [0.3333333333333333, 0.0, 0.0]
    """
    act = get_activation(activation)
    _check_choice(family, "family", CONFORMAL_FAMILIES)
    _check_choice(side, "side", CONFORMAL_SIDES)
    step, size = conformal_grid(family, grid)
    p = _probabilities(probs, act)
    labels = _labels(target, "target", act, p)
    pred_arr = None if pred is None or family == "threshold" else _labels(pred, "pred", act, p)
    sp = normalize_spacing(spacing, p.ndim - 1)
    count = p.shape[0]
    tc = np.zeros((count, size + 2), dtype=np.int64)
    fc = np.zeros((count, size + 2), dtype=np.int64)
    for t, pk, yk, predk in _tasks(act, p, labels, pred_arr, family == "margin"):
        idx = _task_index(pk, predk, family, side, step, size, sp, backend)
        tc[t] = np.bincount(idx[yk], minlength=size + 2)
        fc[t] = np.bincount(idx.reshape(-1), minlength=size + 2) - tc[t]
    return ConformalCaseState(act.name, family, side, step, size, _names(names, count), tc, fc)


# --------------------------------------------------------------------------------------------------------------
# fitting
# --------------------------------------------------------------------------------------------------------------


def _check_level(value: Any, name: str, upper: float = 1.0) -> float:
    """A level in ``(0, upper)``: 1 for probabilities and losses bounded by 1, the loss bound ``B`` of CRC."""
    span = f"(0, {upper:g})"
    if isinstance(value, (str, bytes)):  # float("0.1") would pass a string from a config file through unnoticed
        raise ValueError(f"{name} must be a number in {span}, got the string {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in {span}, got {value!r}") from None
    if isinstance(value, bool) or not 0 < v < upper:
        raise ValueError(f"{name} must lie in {span}, got {value!r}" + (f" (the loss bound B is {upper:g})"
                                                                          if upper != 1.0 else ""))
    return v


def _check_bound(value: Any) -> float:
    """The loss bound ``B`` of conformal risk control: a positive finite number (``ValueError`` naming ``B``)."""
    bound = positive_finite(value)
    if math.isnan(bound):
        raise ValueError(f"B must be a positive finite loss bound, got {value!r}")
    return bound


def _check_losses(losses: Any, bound: float) -> np.ndarray:
    a = np.asarray(to_numpy(losses, "losses"))
    if a.dtype.kind not in "biuf":  # complex lost its imaginary part with a ComplexWarning, text was parsed (found by
        # hostile review 55)
        raise TypeError(f"losses must hold real numbers, got dtype {a.dtype}")
    a = a.astype(np.float64)
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"losses must be a non-empty 2-D array (cases, grid points), got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("losses contains non-finite values (NaN or inf)")
    if a.min() < 0 or a.max() > bound:
        raise ValueError(f"losses must lie in [0, B={bound}], got values in [{a.min():.4g}, {a.max():.4g}]")
    return a


def _lambda_at(lambdas: Any, j: int, width: int) -> float:
    if lambdas is None:
        return float(j)
    raw = to_numpy(lambdas, "lambdas") if isinstance(lambdas, torch.Tensor) else np.asarray(lambdas)
    # text was parsed ("0.5"), a bool read as 0 or 1 and inf returned as lambda_hat (found by hostile review 55)
    if raw.dtype.kind not in "iuf":
        raise TypeError(f"lambdas must be real numbers (one per column of losses), got dtype {raw.dtype}")
    lam = raw.astype(np.float64).reshape(-1)
    if lam.shape[0] != width or not np.isfinite(lam).all() or (width > 1 and not np.all(np.diff(lam) > 0)):
        raise ValueError(f"lambdas must be {width} finite, increasing values (one per column of losses), got "
                         f"{lam.shape[0]}")
    return float(lam[j])


def _hp_rank(n: int, alpha: float) -> int:
    """``ceil((n + 1)(1 - alpha))`` (:func:`~monai_unc._utils.quantile_rank`: 9.000000000000002 stays 9)."""
    return quantile_rank(n, alpha)


def crc_tolerance(n: int, alpha: float) -> float:
    """The rounding allowance ``tau`` of the conformal risk control condition ``sum_i L_i + B <= alpha (n + 1)``.

    A grid point passes when the computed ``sum_i L_i + B`` is at most the computed ``alpha (n + 1)`` plus ``tau =
    (n + 3) eps alpha (n + 1)``, ``eps = 2**-52``. Near equality the float sum of ``n`` losses, the addition of ``B``,
    the product ``alpha (n + 1)`` and the losses and ``alpha`` themselves (ratios and decimals rounded to binary) err
    by at most ``(n + 3) eps / 2`` times ``alpha (n + 1)``; ``tau`` is twice that, so a condition that holds with
    equality in exact arithmetic (e.g. nine losses in tenths summing to 6.9 with ``alpha = 0.79``: ``6.9 + 1 = 7.9 =
    0.79 * 10``, computed as ``7.900000000000001 > 7.9``) is not lost to rounding. In exchange ``alpha`` is loosened
    by at most ``tau / (n + 1) = (n + 3) eps alpha``: below ``1e-12 alpha`` for ``n < 4500``.

    Args:
        n: the number of calibration cases.
        alpha: the level.

    Returns:
        ``tau``.

    Example:
        >>> crc_tolerance(9, 0.79) < 1e-13
        True
    """
    n = check_integer(n, "n")
    a = _check_level(alpha, "alpha")
    return _crc_tau(n, a)


def _crc_tau(n: int, alpha: float) -> float:
    return (n + 3) * _EPS * alpha * (n + 1)


def _crc_passes(total: Any, n: int, alpha: float, bound: float) -> Any:
    """Whether ``total + B <= alpha (n + 1)`` up to the allowance of :func:`crc_tolerance` (elementwise)."""
    return total + bound <= alpha * (n + 1) + _crc_tau(n, alpha)


def min_calibration_cases(alpha: float, *, high_probability: bool = False, B: float = 1.0) -> int:  # noqa: N803
    """The fewest calibration cases for which a rule at level ``alpha`` can exist.

    Expectation (CRC): ``B <= alpha (n + 1)`` (even zero losses must pass), decided by the arithmetic of
    :func:`crc_lambda` (with its rounding allowance, :func:`crc_tolerance`), so ``n`` cases with zero losses always
    fit; high probability: ``ceil((n + 1)(1 - alpha)) <= n``, as :func:`high_probability_lambda` computes it.

    Args:
        alpha: the level: in (0, B) for CRC, in (0, 1) for the high-probability rule.
        high_probability: the high-probability rule instead of conformal risk control.
        B: the loss bound of CRC.

    Returns:
        The smallest ``n``.

    Example:
        >>> min_calibration_cases(0.1), min_calibration_cases(0.1, high_probability=True)
        (9, 9)
        >>> min_calibration_cases(0.05, high_probability=True), min_calibration_cases(1 / 49)
        (19, 48)
    """
    if high_probability:
        return quantile_min_cases(_check_level(alpha, "alpha"))
    bound = _check_bound(B)
    a = _check_level(alpha, "alpha", bound)
    estimate = bound / a - 1.0
    if not estimate < 2.0**53:
        raise ValueError(f"alpha={a} with B={bound} needs more than 2**53 calibration cases")
    n = max(1, math.floor(estimate) - 2)  # at or below the answer; the condition holds for every n above it
    while not _crc_passes(0.0, n, a, bound):
        n += 1
    return n


def _crc_index(losses: np.ndarray, alpha: float, bound: float) -> int:
    n = losses.shape[0]
    if np.any(np.diff(losses, axis=1) > 0):
        raise ValueError("losses must be non-increasing in lambda along axis 1 for conformal risk control "
                         "(use the monotone upper envelope sup_{lambda' >= lambda} L(lambda'))")
    ok = _crc_passes(losses.sum(axis=0), n, alpha, bound)
    if not ok.any():
        need = min_calibration_cases(alpha, B=bound)
        worst = (losses[:, -1].sum() + bound) / (n + 1)
        reason = (f"{n} case(s) are too few (at least {need} needed for alpha={alpha})" if n < need else
                  f"the mean loss at the largest lambda is {losses[:, -1].mean():.4g}")
        raise ValueError(f"no lambda on the grid reaches alpha={alpha}: even the largest gives the bound "
                         f"{format_cell(worst, 4, alpha)} > alpha ({reason})")  # never written as alpha itself
    return int(np.argmax(ok))


def crc_lambda(losses: Any, alpha: float, B: float = 1.0, lambdas: Any = None) -> float:  # noqa: N803
    """Conformal risk control: ``lambda_hat = inf{lambda : (n / (n + 1)) mean_i L_i(lambda) + B / (n + 1) <= alpha}``.

    For losses non-increasing in ``lambda`` and bounded by ``B``, ``E[L_new(lambda_hat)] <= alpha`` for a new
    case exchangeable with the ``n`` calibration cases (Angelopoulos, Bates, Fisch, Lei, Schuster, "Conformal Risk
    Control", ICLR 2024, Theorem 1), which assumes every case's loss at the last grid point is at most ``alpha``
    (e.g. 0 at a family's trivial set, :func:`last_index`): a refusal that depends on the calibration losses leaves
    the rules fitted on the other draws without the guarantee. On a grid the infimum is the first grid point that
    satisfies the condition, ``sum_i L_i + B <= alpha (n + 1)``, evaluated in floating point with the rounding
    allowance ``tau = (n + 3) eps alpha (n + 1)`` (:func:`crc_tolerance`; ``eps = 2**-52``, twice the rounding error
    of the sum and the product): an equality is not lost to rounding, and ``alpha`` is loosened by at most ``(n + 3)
    eps alpha``.

    Args:
        losses: ``(n, G)`` losses of ``n`` cases at ``G`` increasing grid points, in ``[0, B]``, non-increasing
            along each row (``ValueError`` otherwise).
        alpha: the target expected loss in (0, B).
        B: the loss bound (1 for FNR and false-positive share).
        lambdas: the ``G`` grid values, finite and increasing (default: the column index ``0 .. G-1``).

    Returns:
        ``lambda_hat`` as a float; ``ValueError`` saying why when no grid point satisfies the condition.

    Example:
        >>> import numpy as np
        >>> losses = np.array([[1.0, 0.5, 0.0], [1.0, 0.2, 0.0], [0.8, 0.0, 0.0]])
        >>> crc_lambda(losses, alpha=0.5, lambdas=[0.0, 0.5, 1.0])  # (0.7 + 1) / 4 = 0.425 <= 0.5
        0.5
    """
    bound = _check_bound(B)
    a = _check_level(alpha, "alpha", bound)
    arr = _check_losses(losses, bound)
    j = _crc_index(arr, a, bound)
    return _lambda_at(lambdas, j, arr.shape[1])


def _hp_scores(losses: np.ndarray, tol: float) -> np.ndarray:
    """``s_i`` as the grid index of the first point from which every loss is ``<= tol``; ``G`` when none."""
    ok_from_here = np.flip(np.logical_and.accumulate(np.flip(losses <= tol, axis=1), axis=1), axis=1)
    return np.where(ok_from_here.any(axis=1), np.argmax(ok_from_here, axis=1), losses.shape[1])


def _hp_index(losses: np.ndarray, tol: float, alpha: float) -> int:
    n = losses.shape[0]
    k = _hp_rank(n, alpha)
    if k > n:
        raise ValueError(f"{n} calibration case(s) are too few for alpha={alpha}: the high-probability rule needs "
                         f"at least {min_calibration_cases(alpha, high_probability=True)}")
    s = np.sort(_hp_scores(losses, tol))
    if s[k - 1] >= losses.shape[1]:
        failing = int((s >= losses.shape[1]).sum())
        raise ValueError(f"no lambda on the grid reaches tol={tol} with alpha={alpha}: {failing} of {n} case(s) "
                         f"stay above tol even at the largest lambda (at most {n - k} may)")
    return int(s[k - 1])


def high_probability_lambda(losses: Any, tol: float, alpha: float, lambdas: Any = None) -> float:
    """High-probability rule: ``lambda_hat`` = the ``ceil((n + 1)(1 - alpha))``-th smallest ``s_i``.

    ``s_i = min{lambda : L_i(lambda') <= tol for every lambda' >= lambda}``; then ``P(L_new(lambda_hat) <= tol) >=
    1 - alpha`` for a new case exchangeable with the ``n`` calibration cases (Mossina and Friedrich,
    "Controlling False Positives in Image Segmentation via Conformal Prediction", 2025). The losses need not be
    monotone; the guarantee assumes every case's loss at the last grid point is at most ``tol`` (every ``s_i``
    finite, as at a family's trivial set, :func:`last_index`): a case that never reaches ``tol`` is counted as
    covered when the rule is refused, so the rules fitted on the other draws miss the level.

    Args:
        losses: ``(n, G)`` losses of ``n`` cases at ``G`` increasing grid points.
        tol: the largest acceptable loss of one case, in (0, 1).
        alpha: the allowed probability in (0, 1) that a new case exceeds ``tol``.
        lambdas: the ``G`` grid values, finite and increasing (default: the column index ``0 .. G-1``).

    Returns:
        ``lambda_hat`` as a float; ``ValueError`` when ``ceil((n + 1)(1 - alpha)) > n`` (saying how many cases are
        needed) or when too many cases stay above ``tol`` at the largest ``lambda``.

    Example:
        >>> import numpy as np
        >>> losses = np.tile([0.5, 0.3, 0.05, 0.0], (9, 1))
        >>> losses[8] = [0.5, 0.5, 0.5, 0.0]
        >>> high_probability_lambda(losses, tol=0.1, alpha=0.1)  # the 9th smallest of s = (2, ..., 2, 3)
        3.0
        >>> high_probability_lambda(losses[:8], tol=0.1, alpha=0.2)  # the 8th smallest of eight 2s
        2.0
    """
    t = _check_level(tol, "tol")
    a = _check_level(alpha, "alpha")
    arr = _check_losses(losses, 1.0)
    j = _hp_index(arr, t, a)
    return _lambda_at(lambdas, j, arr.shape[1])


def last_index(family: str, size: int) -> int:
    """The largest grid index a fitted rule may have: ``size`` (threshold), ``size + 1`` (margin: the trivial set).

    The threshold family's last grid point is its trivial set already: ``p >= 0`` (outer, every voxel) and ``p > 1``
    (inner, no voxel), where every case's loss is 0. The margin family's grid stops at ``size * step`` mm, where an
    outer mask misses every true voxel of a case whose predicted mask is empty (no margin grows an empty mask) or
    lies farther away, and an eroded inner mask can keep false voxels; index ``size + 1`` (``lambda_hat = (size + 1)
    * step``, past the grid) is the trivial set there: every voxel (outer) or none (inner), the voxels of
    :func:`entry_index` ``<= size + 1`` or ``> size + 1``.

    Args:
        family: ``"threshold"`` or ``"margin"``.
        size: the grid size.

    Returns:
        The index; ``ValueError`` naming ``size`` when it is not a positive integer (a bool, 2.5).

    Example:
        >>> last_index("threshold", 4096), last_index("margin", 80)
        (4096, 81)
    """
    _check_choice(family, "family", CONFORMAL_FAMILIES)
    size = check_integer(size, "size")  # 2.5 gave the index 3.5 and True the index 2 (found by hostile review 55)
    return size if family == "threshold" else size + 1


def _with_trivial_set(losses: np.ndarray, family: str) -> np.ndarray:
    """Losses ``(..., size + 1)`` on the grid, with the margin family's trivial set appended (loss 0 for every case).

    Conformal risk control assumes ``L_i(lambda_max) <= alpha`` for every case (Angelopoulos et al. 2024, Theorem 1)
    and the high-probability rule needs every ``s_i`` finite: at the trivial set both hold whatever the cases, so a
    rule exists for every calibration draw of enough cases. Without it the fit refused the draws with many cases
    beyond the grid's end and wrote a rule on the others, which then missed its level (E[FNR] 0.12 for a target of
    0.1 with 10 % empty predictions).
    """
    if family == "threshold":
        return losses
    return np.concatenate([losses, np.zeros((*losses.shape[:-1], 1))], axis=-1)


def _upper_envelope(losses: np.ndarray) -> np.ndarray:
    """``sup_{j' >= j} L(j')`` along the last axis: the smallest non-increasing bound of the losses."""
    return np.flip(np.maximum.accumulate(np.flip(losses, axis=-1), axis=-1), axis=-1)


#: the fields of :meth:`ConformalRule.to_dict` and of each of its tasks (:meth:`ConformalRule.from_dict` wants them all)
_RULE_FIELDS = ("activation", "family", "side", "step", "size", "method", "alpha", "tol", "names", "edges", "tasks")
_TASK_FIELDS = ("name", "stratum", "lambda_hat", "index", "n", "calibration_loss", "calibration_above_tol",
                "guarantee")


def _is_real(v: Any) -> bool:
    """A finite real number that is not a bool (a string, None or NaN is not)."""
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) and (
        math.isfinite(v))


def _check_task_record(t: Any, k: int, n: int, alpha: float, tol: float | None) -> None:
    """The recorded calibration numbers of ``tasks[k]`` (``ValueError`` naming the field).

    The level must be certifiable on ``n`` cases at all (:func:`min_calibration_cases`); ``calibration_loss`` a mean
    loss in [0, 1]; ``calibration_above_tol`` None for expectation control, else a share of the ``n`` cases in [0, 1]
    that the high-probability rule allows above ``tol`` (at most ``n - ceil((n + 1)(1 - alpha))`` cases), and then
    the mean loss at most ``above + (1 - above) tol`` (the cases above ``tol`` lose at most 1, the others ``tol``);
    ``guarantee`` a string. An edited file otherwise showed a loss of NaN or 7 beside a valid-looking guarantee.
    """
    need = min_calibration_cases(alpha, high_probability=tol is not None)
    if n < need:
        raise ValueError(f"tasks[{k}].n is {n}: alpha={alpha} cannot be certified on fewer than {need} calibration "
                         "cases")
    loss, above = t.calibration_loss, t.calibration_above_tol
    if not _is_real(loss) or not 0 <= loss <= 1:
        raise ValueError(f"tasks[{k}].calibration_loss must be a mean loss in [0, 1], got {loss!r}")
    if tol is None:
        if above is not None:
            raise ValueError(f"tasks[{k}].calibration_above_tol must be None for expectation control, got {above!r}")
        # the condition that chose lambda_hat, n * loss + 1 <= alpha (n + 1), with twice the fit's rounding allowance
        # (the mean was summed in another order and is multiplied back here), never below 1e-9
        if n * loss + 1 > alpha * (n + 1) + max(1e-9, 2 * _crc_tau(n, alpha)):
            raise ValueError(f"tasks[{k}].calibration_loss {loss!r} on {n} cases does not meet the level {alpha!r} "
                             "(n * loss + 1 <= alpha * (n + 1))")
    else:
        allowed = n - quantile_rank(n, alpha)
        if not _is_real(above) or not 0 <= above <= 1 or above * n > allowed + 1e-9:
            raise ValueError(f"tasks[{k}].calibration_above_tol must be the share of the {n} calibration cases above "
                             f"tol, at most {allowed} of them, got {above!r}")
        if loss > above + (1 - above) * tol + 1e-9:
            raise ValueError(f"tasks[{k}].calibration_loss {loss!r} exceeds what {above!r} of the cases above tol "
                             f"allow (at most {above + (1 - above) * tol:.6g})")
    if not isinstance(t.guarantee, str):
        raise ValueError(f"tasks[{k}].guarantee must be a string, got {t.guarantee!r}")


@dataclass(frozen=True)
class ConformalTaskRule:
    """The fitted ``lambda_hat`` of one class or region (in one stratum) and what was achieved on calibration.

    Attributes:
        name: the class or region.
        stratum: the stratum index (0 without stratification).
        lambda_hat: the chosen grid value (a probability for the threshold family, mm for the margin family).
        index: its grid index.
        n: calibration cases of the stratum.
        calibration_loss: the mean loss of the calibration cases at ``lambda_hat``.
        calibration_above_tol: the share of calibration cases with a loss above ``tol`` (high probability), or
            None.
        guarantee: the guarantee in words.

    Example:
        >>> ConformalTaskRule("1", 0, 0.5, 2048, 20, 0.04, None, "E[FNR] <= 0.1").lambda_hat
        0.5
    """

    name: str
    stratum: int
    lambda_hat: float
    index: int
    n: int
    calibration_loss: float
    calibration_above_tol: float | None
    guarantee: str


@dataclass(frozen=True)
class ConformalRule:
    """Fitted conformal masks for every class or region (and stratum): apply them to new cases without labels.

    Attributes:
        activation: ``"softmax"`` or ``"sigmoid"``.
        family: ``"threshold"`` or ``"margin"``.
        side: ``"outer"`` or ``"inner"``.
        step: the grid step.
        size: the grid size.
        method: ``"expectation"`` (conformal risk control) or ``"high_probability"``.
        alpha: the level.
        tol: the per-case tolerance of the high-probability rule, or None.
        names: the classes or regions, in the order of the masks of :meth:`apply`.
        edges: the inner edges of the strata of the case score (stratum ``s`` holds scores in ``[edges[s-1],
            edges[s])``), or None.
        tasks: one :class:`ConformalTaskRule` per stratum and task, stratum-major.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> states = []
        >>> for _ in range(20):
        ...     truth = rng.random((1, 50)) < 0.4
        ...     p = np.clip(truth * 0.6 + rng.random((1, 50)) * 0.4, 0, 1)
        ...     states.append(conformal_case_state(p, truth, activation="sigmoid", grid=64))
        >>> rule = fit_conformal_rule(states, alpha=0.1)
        >>> rule.lambda_hat("0")
        0.390625
        >>> rule.apply(np.array([[0.1, 0.62, 0.9]])).tolist()  # p >= 1 - 0.390625
        [[False, True, True]]
    """

    activation: str
    family: str
    side: str
    step: float
    size: int
    method: str
    alpha: float
    tol: float | None
    names: tuple[str, ...]
    edges: tuple[float, ...] | None
    tasks: tuple[ConformalTaskRule, ...]

    def __post_init__(self) -> None:
        """Check the fields, as :meth:`from_dict` reads them from an untrusted file (``ValueError`` naming the field).

        Membership in a mask is decided by each task's grid ``index`` alone (:meth:`apply`), so an index off the grid
        or a side, family or grid that differs from the fitted one would silently give empty or whole-volume masks
        under the recorded guarantee.
        """
        get_activation(self.activation)
        _check_choice(self.family, "family", CONFORMAL_FAMILIES)
        _check_choice(self.side, "side", CONFORMAL_SIDES)
        _check_choice(self.method, "method", _METHODS)
        _check_level(self.alpha, "alpha")
        if (self.tol is None) != (self.method == "expectation"):
            raise ValueError(f"tol must be None for method 'expectation' and a level for 'high_probability', got "
                             f"tol={self.tol!r} with method {self.method!r}")
        if self.tol is not None:
            _check_level(self.tol, "tol")
        size = check_integer(self.size, "size")
        step = self.step
        if isinstance(step, bool) or not isinstance(step, (int, float, np.floating)) or not (
                math.isfinite(step) and step > 0):
            raise ValueError(f"step must be a positive finite number, got {step!r}")
        if self.family == "threshold" and conformal_grid("threshold", int(size)) != (step, size):
            raise ValueError(f"step must be 1 / size for the threshold family, got step={step!r}, size={size!r}")
        if self.family == "margin" and size > 100_000:
            raise ValueError(f"size must be at most 100000 margin steps, got {size!r}")
        if (not isinstance(self.names, tuple) or not self.names or not all(isinstance(n, str) for n in self.names)
                or len(set(self.names)) != len(self.names)):
            raise ValueError(f"names must be a non-empty tuple of distinct strings, got {self.names!r}")
        if self.edges is not None:
            # a bool is no edge: True was the edge 1.0 (found by hostile review 55)
            if isinstance(self.edges, (list, tuple)) and any(isinstance(e, (bool, np.bool_)) for e in self.edges):
                raise ValueError(f"edges must be finite, strictly increasing numbers, got {self.edges!r}")
            _check_edges(self.edges)
        expected = self.num_strata * len(self.names)
        if not isinstance(self.tasks, tuple) or len(self.tasks) != expected:
            got = len(self.tasks) if isinstance(self.tasks, tuple) else type(self.tasks).__name__
            raise ValueError(f"tasks must hold {expected} ConformalTaskRule ({self.num_strata} strata x "
                             f"{len(self.names)} names), got {got}")
        for k, t in enumerate(self.tasks):
            st, pos = divmod(k, len(self.names))
            if not isinstance(t, ConformalTaskRule):
                raise ValueError(f"tasks[{k}] must be a ConformalTaskRule, got {type(t).__name__}")
            if t.name != self.names[pos] or isinstance(t.stratum, bool) or t.stratum != st:
                raise ValueError(f"tasks[{k}] must be {self.names[pos]!r} in stratum {st} (stratum-major, in the "
                                 f"order of names), got {t.name!r} in stratum {t.stratum!r}")
            check_integer(t.stratum, f"tasks[{k}].stratum", 0)
            j = check_integer(t.index, f"tasks[{k}].index", 0)
            top = last_index(self.family, size)
            if j > top:
                raise ValueError(f"tasks[{k}].index must be a grid index in [0, {top}], got {j!r}")
            lam = t.lambda_hat
            if (isinstance(lam, bool) or not isinstance(lam, (int, float, np.floating))
                    or not math.isclose(lam, j * step, rel_tol=1e-9, abs_tol=1e-12)):
                raise ValueError(f"tasks[{k}].lambda_hat must be the grid value {j * step!r} of its index {j}, got "
                                 f"{lam!r}")
            n = check_integer(t.n, f"tasks[{k}].n")  # a positive number of calibration cases
            _check_task_record(t, k, n, self.alpha, self.tol)

    @property
    def num_strata(self) -> int:
        """The number of strata (1 without stratification)."""
        return 1 if self.edges is None else len(self.edges) + 1

    def stratum(self, score: float | None) -> int:
        """The stratum of a case score (0 without stratification).

        Args:
            score: the case score; required when the rule is stratified (NaN, an undefined score, is the last
                stratum: :func:`stratum_of`).

        Returns:
            The stratum index.
        """
        if self.edges is None:
            return 0
        if score is None:
            raise ValueError("score must be the case score of a stratified rule (NaN: undefined, the last stratum)")
        return int(stratum_of([score], self.edges)[0])

    def task_rule(self, name: str, stratum: int = 0) -> ConformalTaskRule:
        """The :class:`ConformalTaskRule` of a class or region in a stratum.

        Args:
            name: the class or region.
            stratum: the stratum index.

        Returns:
            The task's rule; ``ValueError`` naming ``name`` or ``stratum`` when there is none.
        """
        if name not in self.names:
            raise ValueError(f"name must be one of {self.names}, got {name!r}")
        if not 0 <= stratum < self.num_strata:
            raise ValueError(f"stratum must be in [0, {self.num_strata}), got {stratum!r}")
        return self.tasks[stratum * len(self.names) + self.names.index(name)]

    def lambda_hat(self, name: str, stratum: int = 0) -> float:
        """The fitted ``lambda_hat`` of a class or region in a stratum.

        Args:
            name: the class or region.
            stratum: the stratum index.

        Returns:
            ``lambda_hat`` (a probability or mm).
        """
        return self.task_rule(name, stratum).lambda_hat

    def apply(self, probs: Any, pred: Any = None, spacing: float | Sequence[float] = 1.0,
              score: float | None = None, backend: str = "auto") -> np.ndarray:
        """The conformal masks of a new case: ``C_lambda_hat`` of every class or region.

        Membership is decided by the same :func:`entry_index` as in fitting, so the masks are exactly those whose
        calibration losses were counted.

        Args:
            probs: the case's probabilities, as in :func:`conformal_case_state`.
            pred: the predicted label map or region masks (margin family; default from ``probs``).
            spacing: voxel size in mm per spatial axis.
            score: the case score (stratified rules).
            backend: the distance-transform backend, as in :func:`conformal_case_state` (the same exact distances
                whatever the backend).

        Returns:
            bool ``(T, *spatial)``: one mask per name of :attr:`names`.
        """
        act = get_activation(self.activation)
        p = _probabilities(probs, act)
        if p.shape[0] != len(self.names):
            raise ValueError(f"probs has {p.shape[0]} channels but the rule has {len(self.names)} "
                             f"({', '.join(self.names)})")
        pred_arr = None if pred is None or self.family == "threshold" else _labels(pred, "pred", act, p)
        sp = normalize_spacing(spacing, p.ndim - 1)
        s = self.stratum(score)
        out = np.zeros(p.shape, dtype=bool)
        for t, pk, _, predk in _tasks(act, p, None, pred_arr, self.family == "margin"):
            idx = _task_index(pk, predk, self.family, self.side, self.step, self.size, sp, backend)
            j = self.tasks[s * len(self.names) + t].index
            out[t] = idx <= j if self.side == "outer" else idx > j
        return out

    def to_dict(self) -> dict[str, Any]:
        """The rule as JSON-able values (:meth:`from_dict` reads them back).

        Returns:
            A dict of plain values.
        """
        d = {k: getattr(self, k) for k in ("activation", "family", "side", "step", "size", "method", "alpha",
                                           "tol")}
        d["names"] = list(self.names)
        d["edges"] = None if self.edges is None else list(self.edges)
        d["tasks"] = [dict(t.__dict__) for t in self.tasks]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConformalRule:
        """The rule of :meth:`to_dict`.

        Every field is checked as :meth:`__post_init__` checks it, and each task's ``guarantee`` must be the words
        :func:`task_guarantee` gives its side, level, ``n`` and stratum (a rule made by hand may say what it likes).

        Args:
            d: the dict.

        Returns:
            The rule; ``ValueError`` naming the field that is missing, unknown or wrong.

        Example:
            >>> import json, numpy as np
            >>> s = [conformal_case_state(np.array([[0.2, 0.9]]), np.array([[0, 1]]), activation="sigmoid", grid=4)]
            >>> rule = fit_conformal_rule(s * 10, alpha=0.1)
            >>> ConformalRule.from_dict(json.loads(json.dumps(rule.to_dict()))) == rule
            True
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"d must be a conformal rule's dict, got {type(d).__name__}")
        missing = [k for k in _RULE_FIELDS if k not in d]
        extra = [str(k) for k in d if k not in _RULE_FIELDS]
        if missing or extra:
            raise ValueError(f"d is not a conformal rule's dict: missing fields {missing}, unknown fields {extra}")
        tasks_in = d["tasks"]
        if not isinstance(tasks_in, (list, tuple)) or not all(isinstance(t, Mapping) for t in tasks_in):
            raise ValueError(f"tasks must be a list of objects, got {type(tasks_in).__name__}")
        for k, t in enumerate(tasks_in):
            missing = [f for f in _TASK_FIELDS if f not in t]
            extra = [str(f) for f in t if f not in _TASK_FIELDS]
            if missing or extra:
                raise ValueError(f"tasks[{k}] is not a task rule: missing fields {missing}, unknown fields {extra}")
        for name in ("names", "edges"):
            if d[name] is not None and not isinstance(d[name], (list, tuple)):
                raise ValueError(f"{name} must be a list, got {type(d[name]).__name__} {d[name]!r}")
        for name in ("activation", "family", "side", "method"):
            if not isinstance(d[name], str):  # str(1) == "1" would pass through as a name
                raise ValueError(f"{name} must be a string, got {d[name]!r}")
        # the values as written, never coerced: float("0.3"), int(16.7) turned an edited field into another rule
        tasks = tuple(ConformalTaskRule(**t) for t in tasks_in)
        try:
            rule = cls(d["activation"], d["family"], d["side"], d["step"], d["size"], d["method"], d["alpha"],
                       d["tol"], tuple(d["names"]), None if d["edges"] is None else tuple(d["edges"]), tasks)
        except TypeError as err:
            raise ValueError(f"d is not a conformal rule's dict: {err}") from None
        # the words shown beside the masks: an edited "E[FNR] <= 0.001" was read beside a rule of level 0.1 (found by
        # hostile review 55); a rule made by hand may say what it likes, a rule read is the one fit_conformal_rule wrote
        for k, t in enumerate(rule.tasks):
            words = [task_guarantee(rule.side, rule.alpha, rule.tol, t.n, None if rule.edges is None else t.stratum,
                                    legacy=old) for old in (False, True)]
            if t.guarantee not in words:
                raise ValueError(f"tasks[{k}].guarantee must state the rule's guarantee ({words[0]!r}), got "
                                 f"{t.guarantee!r:.120}")
        return rule


def _loss_words(side: str) -> str:
    return "FNR (missed share of the true voxels)" if side == "outer" else "false-positive share of the mask"


def task_guarantee(side: str, alpha: float, tol: float | None, n: int, stratum: int | None = None, *,
                   legacy: bool = False) -> str:
    """The guarantee of one class or region's ``lambda_hat``, in words (what :class:`ConformalTaskRule` records).

    Args:
        side: ``"outer"`` or ``"inner"``.
        alpha: the level.
        tol: the per-case tolerance of the high-probability rule, or None (expectation control).
        n: the calibration cases (of the stratum).
        stratum: the stratum of a stratified rule, or None.
        legacy: the words of the release before 0.2.0, which wrote the high-probability level as ``1 - alpha`` with
            ``%g`` ("0.666667" for ``alpha = 1/3``; :func:`~monai_unc.product.format_level` never writes it above
            ``1 - alpha``): what a rule file written then records.

    Returns:
        The sentence.

    Example:
        >>> task_guarantee("outer", 0.1, None, 20)[:50]
        'E[FNR (missed share of the true voxels) of a new c'
    """
    words = _loss_words(side)
    where = "" if stratum is None else f" within stratum {stratum}"
    if tol is None:
        text = f"E[{words} of a new case] <= {alpha:g}"
    else:
        text = f"P({words} of a new case <= {tol:g}) >= {f'{1 - alpha:g}' if legacy else format_level(alpha)}"
    return text + (f"{where}; marginal over the {n} calibration cases and the new case (exchangeable), "
                   "not conditional on one case")


def _float_array(values: Any, name: str, what: str) -> np.ndarray:
    """``values`` as a flat float64 array; ``ValueError`` naming ``name`` when they are not numbers."""
    shown = repr(values)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    try:
        a = to_numpy(values, name) if isinstance(values, torch.Tensor) else np.asarray(values)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {what}, got {shown}") from None
    if a.dtype.kind not in "biuf":  # strings and objects: float("0.5") would pass a string through
        raise ValueError(f"{name} must be {what}, got {shown}")
    return a.astype(np.float64).reshape(-1)


def _check_edges(edges: Any) -> np.ndarray:
    e = _float_array(edges, "edges", "one or more finite, strictly increasing numbers")
    if e.size < 1 or not np.isfinite(e).all() or np.any(np.diff(e) <= 0):
        raise ValueError(f"edges must be one or more finite, strictly increasing values, got {edges!r}")
    return e


def stratum_of(scores: Any, edges: Sequence[float]) -> np.ndarray:
    """The stratum of each case score: stratum ``s`` holds the scores in ``[edges[s-1], edges[s])``.

    An undefined score (NaN, e.g. the foreground mean of an empty prediction) falls in the last stratum: it counts
    as the largest, as in triage, where undefined scores are referred first.

    Args:
        scores: case scores (any shape; NaN allowed, not +-inf).
        edges: the inner edges, finite and strictly increasing.

    Returns:
        int64 stratum indices in ``[0, len(edges)]`` of the shape of ``scores``.

    Example:
        >>> stratum_of([0.1, 0.5, 0.9, float("nan")], [0.5, 0.8]).tolist()
        [0, 1, 2, 2]
    """
    e = _check_edges(edges)
    s = _float_array(scores, "scores", "case scores (numbers, NaN for undefined)").reshape(np.shape(scores))
    if np.isinf(s).any():
        raise ValueError("scores must be finite case scores or NaN (undefined), got an infinite value")
    return np.where(np.isnan(s), e.size, np.searchsorted(e, np.nan_to_num(s), side="right")).astype(np.int64)


def quantile_edges(scores: Any, strata: int) -> tuple[float, ...]:
    """Inner edges that split case scores into ``strata`` groups of (nearly) equal size, e.g. terciles for 3.

    With the ``m`` defined scores sorted, ``s_(1) <= ... <= s_(m)``, edge ``k`` (``k = 1 .. strata - 1``) lies
    halfway between ``s_(m_k)`` and ``s_(m_k + 1)`` with ``m_k = floor(k m / strata + 1/2)`` (on ``s_(m_k + 1)``
    when the two are adjacent floats, whose midpoint rounds to ``s_(m_k)``), so ``s_(m_k)`` lies below the edge and
    ``s_(m_k + 1)`` at or above it: the strata hold ``m_k`` and ``m - m_k`` scores unless tied, and tied scores all go
    to the upper stratum (:func:`stratum_of`). Undefined scores (NaN) take no part; they fall in the last stratum.

    Args:
        scores: case scores (NaN allowed).
        strata: the number of strata, at least 2.

    Returns:
        ``strata - 1`` strictly increasing edges; ``ValueError`` when there are fewer defined scores than strata
        or ties make two edges equal.

    Example:
        >>> quantile_edges([5.0, 1.0, 3.0, 2.0, 4.0, 6.0], 3)
        (2.5, 4.5)
    """
    if isinstance(strata, bool) or not isinstance(strata, (int, np.integer)) or strata < 2:
        raise ValueError(f"strata must be an integer >= 2, got {strata!r}")
    s = _float_array(scores, "scores", "case scores (numbers, NaN for undefined)")
    if np.isinf(s).any():
        raise ValueError("scores must be finite case scores or NaN (undefined), got an infinite value")
    s = np.sort(s[~np.isnan(s)])
    m = s.size
    if m < strata:
        raise ValueError(f"scores has {m} defined value(s): too few for {strata} strata")
    cuts = [(2 * k * m + strata) // (2 * strata) for k in range(1, strata)]
    # halved before adding: the sum of two scores near the float64 maximum overflowed to an infinite edge; and the
    # midpoint of two adjacent floats rounds to the lower one, which stratum_of sends up: then the upper one is the
    # edge (found by hostile review 67)
    mid = [s[c - 1] / 2.0 + s[c] / 2.0 for c in cuts]
    edges = np.array([v if s[c - 1] < v else s[c] for v, c in zip(mid, cuts)])
    if np.any(np.diff(edges) <= 0):
        raise ValueError(f"scores are tied too much for {strata} strata: the edges {edges.tolist()} are not "
                         "strictly increasing (use fewer strata or another score)")
    return tuple(float(v) for v in edges)


def _strata(scores: Any, edges: Any, n: int) -> tuple[np.ndarray, tuple[float, ...] | None]:
    if edges is None:
        if scores is not None:
            raise ValueError("edges must be given with scores (the inner bin edges of the strata)")
        return np.zeros(n, dtype=np.int64), None
    e = _check_edges(edges)
    if scores is None:
        raise ValueError("scores must be given with edges (one case score per state)")
    s = _float_array(scores, "scores", f"{n} case scores (numbers, NaN for undefined; one per state)")
    if s.shape[0] != n or np.isinf(s).any():
        raise ValueError(f"scores must be {n} finite values or NaN (one per state), got {s.shape[0]}")
    return stratum_of(s, e), tuple(float(v) for v in e)


def fit_conformal_rule(
    states: Sequence[ConformalCaseState],
    alpha: float,
    *,
    tol: float | None = None,
    scores: Any = None,
    edges: Any = None,
) -> ConformalRule:
    """Fit ``lambda_hat`` per class or region (and stratum) from the states of ``n`` calibration cases.

    Without ``tol``: conformal risk control (:func:`crc_lambda`, ``B = 1``), ``E[L_new] <= alpha``; the inner
    false-positive share enters through its monotone upper envelope (it is not monotone in ``lambda``; the
    envelope bounds it, so the guarantee holds for the share). With ``tol``: the high-probability rule
    (:func:`high_probability_lambda`), ``P(L_new <= tol) >= 1 - alpha``. The guarantees are marginal over the
    calibration draw and the new case for exchangeable cases (within a stratum when stratified).

    Args:
        states: a sequence of one :class:`ConformalCaseState` per calibration case, all of one activation, family,
            side, grid and names (a single state: ``TypeError``; pass ``[state]``).
        alpha: the level in (0, 1).
        tol: the per-case tolerance in (0, 1) of the high-probability rule, or None for expectation control.
        scores: one case score per state (stratification; with ``edges``); NaN (undefined) is the last stratum.
        edges: the inner bin edges of the strata, strictly increasing (``k`` edges, ``k + 1`` strata; e.g. the
            terciles of the score on other data, or :func:`quantile_edges`). Each stratum gets its own
            ``lambda_hat``.

    The margin family's losses get the trivial mask past the grid (:func:`last_index`: every voxel for an outer
    mask, none for an inner one; loss 0 for every case), as the threshold family's last grid point is, so a rule
    exists for every draw of enough cases and the guarantees hold whatever the cases (an empty prediction, a
    structure beyond the largest margin); a rule at that index warns.

    Returns:
        The :class:`ConformalRule`; ``ValueError`` saying why when a stratum has too few cases for ``alpha``.

    Example:
        >>> import numpy as np
        >>> probs = np.array([[0.9, 0.7, 0.4, 0.2]])
        >>> states = [conformal_case_state(probs, np.array([[1, 1, 1, 0]]), activation="sigmoid", grid=8)] * 19
        >>> rule = fit_conformal_rule(states, alpha=0.1, tol=0.2)  # FNR <= 0.2 needs p >= 0.375
        >>> rule.lambda_hat("0"), rule.method
        (0.625, 'high_probability')
    """
    if isinstance(states, ConformalCaseState):
        raise TypeError("states must be a sequence of ConformalCaseState, one per calibration case, got a single "
                        "ConformalCaseState (pass [state] for one case)")
    try:
        states = list(states)
    except TypeError:
        raise TypeError(f"states must be a sequence of ConformalCaseState (one per calibration case), got "
                        f"{type(states).__name__}") from None
    if not states:
        raise ValueError("states must hold at least one case's ConformalCaseState")
    if not all(isinstance(s, ConformalCaseState) for s in states):
        raise TypeError("states must be ConformalCaseState objects")
    first = states[0]
    if not all(first.compatible(s) for s in states[1:]):
        raise ValueError("states must share activation, family, side, grid and names (one rule per such set)")
    a = _check_level(alpha, "alpha")
    t = None if tol is None else _check_level(tol, "tol")
    method = "expectation" if t is None else "high_probability"
    stratum_of, edge_tuple = _strata(scores, edges, len(states))
    n_strata = 1 if edge_tuple is None else len(edge_tuple) + 1
    need = min_calibration_cases(a, high_probability=t is not None)
    counts = np.bincount(stratum_of, minlength=n_strata)
    if counts.min() < need:
        if edge_tuple is None:
            raise ValueError(f"{len(states)} calibration case(s) are too few: alpha={a} needs at least {need}")
        short = [int(i) for i in np.flatnonzero(counts < need)]
        raise ValueError(f"stratum {short} has {[int(counts[i]) for i in short]} case(s); alpha={a} needs at least "
                         f"{need} calibration cases per stratum")
    # (n, T, G + 1), or G + 2 with the margin family's trivial set (:func:`last_index`): a rule for every draw
    losses = _with_trivial_set(np.stack([s.losses() for s in states]), first.family)
    trivial = last_index(first.family, first.size)
    true_counts = np.stack([s.n_true for s in states])  # (n, T)
    n_true = true_counts.sum(axis=0)
    # the inner loss is 1 for every non-empty mask then: the rule is (nearly) the empty mask, not vacuous (the message
    # said "its loss does not depend on lambda" for both sides; found by hostile testing)
    consequence = ("is vacuous (its missed share is 0 whatever lambda)" if first.side == "outer" else
                   "keeps (nearly) no voxel (every voxel of its mask is a false positive)")
    for ti in np.flatnonzero(n_true == 0):
        warnings.warn(f"{first.names[ti]!r}: none of the {len(states)} calibration cases has a true voxel of it, so "
                      f"its {first.side} rule {consequence}; check the labels", UserWarning, stacklevel=2)
    tasks = []
    for st in range(n_strata):
        in_stratum = stratum_of == st
        rows = losses[in_stratum]
        n = rows.shape[0]
        where = "" if edge_tuple is None else f" within stratum {st}"
        stratum_true = true_counts[in_stratum].sum(axis=0)
        for ti, name in enumerate(first.names):
            task_losses = rows[:, ti]
            if edge_tuple is not None and stratum_true[ti] == 0 < n_true[ti]:  # the cohort-wide warning said nothing
                warnings.warn(f"{name!r}{where}: none of its {n} calibration cases has a true voxel of it, so its "
                              f"{first.side} rule in this stratum {consequence}", UserWarning, stacklevel=2)
            try:
                if t is None:
                    j = _crc_index(_upper_envelope(task_losses), a, 1.0)
                else:
                    j = _hp_index(task_losses, t, a)
            except ValueError as err:
                raise ValueError(f"{name!r}{where}: {err}") from None
            at = task_losses[:, j]
            lam = float(j * first.step)
            if first.family == "margin" and j == trivial:
                warnings.warn(f"{name!r}{where}: no margin up to {first.size * first.step:g} mm meets the target on "
                              f"these {n} calibration cases: the {first.side} rule is the trivial mask "
                              f"({TRIVIAL_MASKS[first.side]}) for "
                              "every case (a larger grid, the threshold family or more cases may do better)",
                              UserWarning, stacklevel=2)
            text = task_guarantee(first.side, a, t, n, None if edge_tuple is None else st)
            tasks.append(ConformalTaskRule(name, st, lam, j, n, float(at.mean()),
                                           None if t is None else float((at > t).mean()), text))
    return ConformalRule(first.activation, first.family, first.side, first.step, first.size, method, a, t,
                         first.names, edge_tuple, tuple(tasks))
