"""Boundaries, distance-to-boundary maps and HD95: the shared geometry of the spatial metrics.

Definitions (docs/design.md, "Definitions the tests pin down"):

- **Boundary** of a label map ``L``: the voxels with at least one face neighbour (4-connectivity in 2D,
  6 in 3D) that carries a different label. Neighbours outside the volume do not count. For a multi-class
  map this is the all-label boundary: both sides of every interface between two different labels.
- **Distance to the boundary** ``d_L(x)``: the Euclidean distance in mm from ``x`` to the nearest boundary
  voxel, with per-axis voxel spacing; 0 on the boundary. A map without any boundary (a constant label map)
  has no finite distance: every voxel gets ``inf``.
- **HD95** follows MONAI's ``compute_hausdorff_distance(..., percentile=95, spacing=...)`` on the foreground
  ``label > 0``: the edge of a binary mask is the mask minus its binary erosion with the face-connected
  structuring element (voxels on the volume border count as edge voxels, as with scipy's ``border_value=0``);
  the directed distances from every predicted edge voxel to the nearest target edge voxel and back are
  reduced with the 95th percentile (linear interpolation, ``numpy.percentile``/``torch.quantile``), and
  HD95 is the larger of the two. We compute in float64 (CUDA tensors with cuCIM: float32 distances, below); MONAI
  casts the distances to float32 and runs ``torch.quantile`` in float32, so the two agree to about 1e-5 relative.
  Other percentiles in [0, 100] likewise, except 0: MONAI reads ``percentile=0`` as unset and returns the maximum
  (the classical Hausdorff distance), here it is the 0th percentile, the larger of the two directed minima.

Backends for the distance transform, fastest correct one first (``backend="auto"``):

- CUDA tensors with cuCIM installed: MONAI's ``distance_transform_edt`` (cuCIM on the GPU).
- The ``edt`` package (Silversmith, multi-threaded, 1-3 D): squared distances in float32, converted to
  float64 before the square root. With integer spacings the squared distances are integers below 2**24 for
  volumes up to several hundred voxels per axis, so the result equals scipy's bit for bit; with other
  spacings it agrees to float32 precision (relative 2e-7). ~10x faster than scipy on 2 cores. Spacings outside
  [2**-60, 2**40] mm, whose float32 squares would overflow (inf / NaN from about 1e19 mm) or lose their bits (0
  below about 1e-23 mm), are first scaled by a power of two to a largest spacing in [0.5, 1) mm and the distances
  scaled back (exact; this also keeps every backend's squares, float64 ones included, from underflowing to 0 below
  about 1e-160 mm or overflowing above about 1e154 mm; HD95 likewise); what is still outside goes to scipy.
- ``scipy.ndimage.distance_transform_edt`` (float64, any dimension), the fallback.

Where a decision hangs on a distance being at most a given value (a mask dilated or eroded by a margin in mm),
``distance_to_mask(..., exact_within=r)`` makes every distance up to ``r`` mm exact to float64 rounding, whatever the
backend: the ``edt`` package then runs on an integer lattice, where its float32 squared distances are exact integers
(:func:`lattice_unit`), and scipy's float64 transform runs where no such lattice exists (and for ``backend="cucim"``,
whose float32 is not exact: on the CPU).

HD95 uses a KD-tree over the edge-voxel coordinates (as MONAI does on CPU), which is faster than two dense
transforms because edges are sparse; for CUDA tensors with cuCIM installed, two dense transforms on the device
(cuCIM's float32 distances, read at the edge voxels), which are faster there than copying the edges to the host: the
values then agree with the KD-tree's to float32 precision (relative 2e-7), as the other distances of CUDA tensors do.

All functions accept numpy arrays or torch tensors; array outputs follow the input's library and device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import torch
from scipy import ndimage
from scipy.spatial import KDTree

from .._utils import (
    ArrayLike,
    case_spacings,
    check_bool,
    count_cases,
    like_input,
    normalize_spacing,
    num_threads,
    once_per_call,
    positive_finite,
    real_number,
    say_warning,
    to_numpy,
    to_tensor,
    user_stacklevel,
    warn_nan,
)

try:  # the fast multi-threaded EDT; optional at import time, a core dependency in pyproject
    import edt as _edt_pkg
except ImportError:  # pragma: no cover - exercised only without the edt package
    _edt_pkg = None

__all__ = [
    "BACKENDS",
    "available_backends",
    "label_boundary",
    "foreground_edges",
    "distance_to_boundary",
    "distance_to_mask",
    "lattice_unit",
    "hd95",
    "hausdorff_distance",
]

#: accepted values of ``backend``
BACKENDS = ("auto", "edt", "scipy", "cucim")

SpacingLike = float | Sequence[float] | np.ndarray


def _has_cucim() -> bool:
    try:
        import cucim.core.operations.morphology  # noqa: F401
    except Exception:
        return False
    return True


def available_backends() -> tuple[str, ...]:
    """The distance-transform backends usable in this environment (``"scipy"`` always is).

    Returns:
        A tuple of backend names out of ``"cucim"``, ``"edt"`` and ``"scipy"``.

    Example:
        >>> from monai_unc.metrics.boundary import available_backends
        >>> "scipy" in available_backends()
        True
    """
    out = []
    if _has_cucim() and torch.cuda.is_available():
        out.append("cucim")
    if _edt_pkg is not None:
        out.append("edt")
    out.append("scipy")
    return tuple(out)


def check_backend_name(backend: Any) -> None:
    """``ValueError`` naming ``backend`` unless it is one of :data:`BACKENDS`."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def _resolve_backend(backend: str, on_cuda: bool, ndim: int) -> str:
    check_backend_name(backend)
    # cuCIM's transform (through MONAI's distance_transform_edt) takes 2D and 3D images only: a 1D case raised
    # "Distance transform is only supported for 2D and 3D images" on a GPU with cuCIM (found by the review of the GPU
    # paths)
    if backend == "auto":
        if on_cuda and _has_cucim() and 2 <= ndim <= 3:
            return "cucim"
        return "edt" if (_edt_pkg is not None and 1 <= ndim <= 3) else "scipy"
    if backend == "edt" and (_edt_pkg is None or not 1 <= ndim <= 3):
        raise ValueError(
            "backend='edt' needs the `edt` package and 1-3 spatial dimensions"
            + ("" if _edt_pkg is not None else " (the package is not installed)")
        )
    if backend == "cucim" and not (on_cuda and _has_cucim()):
        raise ValueError("backend='cucim' needs a CUDA tensor and cuCIM installed")
    return backend


#: spacings (mm) whose squared distances the edt package's float32 holds: at least 2**-60 (the square of one step,
#: 2**-120, is a normal float32 with all its bits) and at most 2**40 (3 axes of 2**23 voxels: 3 * 2**126 < 2**128).
#: Others go to scipy's float64 transform (float32 gave inf / NaN from about 1e19 mm and 0 below about 1e-23 mm).
_EDT_SPACING_RANGE = (2.0**-60, 2.0**40)


def _edt_safe(spacing: Sequence[float]) -> bool:
    """Whether the edt package's float32 squared distances hold every distance of ``spacing`` (_EDT_SPACING_RANGE)."""
    lo, hi = _EDT_SPACING_RANGE
    return all(lo <= float(s) <= hi for s in spacing)


def spacing_exponent(spacing: Sequence[float]) -> int:
    """``e`` with the largest of ``spacing`` in ``[2**(e-1), 2**e)``; 0 for spacings in _EDT_SPACING_RANGE.

    Distances scale with the spacing, and by a power of two exactly: the transforms and the HD95 tree compute on the
    spacing divided by ``2**e`` (:func:`scale_spacing`) and the distances are multiplied back
    (:func:`times_power_of_two`). Spacings whose float64 squares underflow or overflow (about 1e-160 mm and below,
    1e154 mm and above) gave distances of 0 or inf: BA-ECE scored every voxel in one band, BUC was NaN (in earlier
    versions).
    """
    if _edt_safe(spacing):
        return 0
    return math.frexp(max(float(s) for s in spacing))[1]


def scale_spacing(spacing: Sequence[float], e: int) -> tuple[float, ...]:
    """``spacing / 2**e``, exact (a subnormal spacing too, whose ``2**-e`` alone overflows)."""
    return tuple(math.ldexp(float(s), -e) for s in spacing)


def times_power_of_two(x: Any, e: int) -> Any:
    """``x * 2**e`` (a float, numpy array or tensor) in two exact factors: ``2.0**e`` alone overflows beyond 1023."""
    half = e // 2
    return x * 2.0**half * 2.0 ** (e - half)


def _spatial_dims(x: Any, spatial_dims: int | None, name: str, one_case: str | None = None) -> int:
    """Number of trailing spatial axes; the leading axes (if any) index independent cases.

    ``one_case``: the name of a function that takes one case and no ``spatial_dims``; its message for more than 3 axes
    points to a squeeze (found by hostile testing: ``hausdorff_distance`` of a ``(1, X, Y, Z)`` MONAI image was told to
    pass ``spatial_dims``, which it does not take).
    """
    if spatial_dims is None:
        if x.ndim > 3 and one_case is not None:
            raise ValueError(
                f"{name} has {x.ndim} dimensions (shape {tuple(x.shape)}); {one_case} takes one case of 1-3 spatial "
                "axes: drop the channel / batch axes first (e.g. x[0] of a (1, X, Y, Z) image)"
            )
        if x.ndim > 3:
            raise ValueError(
                f"{name} has {x.ndim} dimensions; pass spatial_dims=2 or 3 for batched input "
                f"(got shape {tuple(x.shape)})"
            )
        if x.ndim == 0:
            raise ValueError(f"{name} must have at least one spatial dimension, got a scalar")
        return x.ndim
    if (
        isinstance(spatial_dims, bool)
        or not isinstance(spatial_dims, (int, np.integer))
        or not 1 <= int(spatial_dims) <= x.ndim
    ):
        raise ValueError(f"spatial_dims must be an integer between 1 and {name}.ndim={x.ndim}, got {spatial_dims!r}")
    return int(spatial_dims)


# The kernels below are written once for two array types: numpy arrays (every CPU input: numpy single-threaded
# ops stay fast when other processes share the cores, where torch's OpenMP threads slow down 4x) and CUDA
# tensors. Torch CPU tensors are computed as zero-copy numpy views and converted back.
Array = np.ndarray | torch.Tensor


def _compute_array(x: Any, name: str) -> Array:
    """``x`` as the array type the kernels use: numpy for numpy / CPU torch input, a tensor on CUDA.

    Detached (a tensor that requires grad has no numpy view); a bfloat16 CPU tensor (autocast inference) as float32,
    which holds each of its values (numpy has no bfloat16).
    """
    t = to_tensor(x, name).detach()
    return t if t.device.type == "cuda" else to_numpy(t, name)


def _label_array(label: Any, name: str) -> Array:
    a = _compute_array(label, name)
    size = a.size if isinstance(a, np.ndarray) else a.numel()
    if size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(a.shape)})")
    if (a.dtype.kind == "c") if isinstance(a, np.ndarray) else a.is_complex():
        raise TypeError(f"{name} must be a real-valued label map, got dtype {a.dtype}")
    floating = np.issubdtype(a.dtype, np.floating) if isinstance(a, np.ndarray) else a.is_floating_point()
    if floating:
        bad = ~np.isfinite(a) if isinstance(a, np.ndarray) else ~torch.isfinite(a)
        if bool(bad.any()):
            raise ValueError(f"{name} contains {int(bad.sum())} non-finite value(s) (NaN or inf)")
        # a probability map is no label map: read as ``> 0`` every voxel of a soft map would be foreground (an HD95
        # of 15.6 mm for 1.2 mm; found by hostile testing), where check_labels refuses it elsewhere
        fractional = a != (np.round(a) if isinstance(a, np.ndarray) else torch.round(a))
        if bool(fractional.any()):
            value = float(a[fractional].reshape(-1)[0])
            raise ValueError(f"{name} must hold integer labels (a label map or mask), got non-integral values such as "
                             f"{value:.6g}; threshold probabilities first")
    signed = a.dtype.kind in "if" if isinstance(a, np.ndarray) else (a.is_floating_point() or a.is_signed())
    if signed:
        lo = float(a.min())
        if lo < 0:  # a label -1 (an 'ignore' value) would be background for some functions and foreground for others
            raise ValueError(f"{name} must hold non-negative labels, got minimum {lo:.6g}")
    return a


def _zeros_bool(shape: tuple, like: Array) -> Array:
    if isinstance(like, torch.Tensor):
        return torch.zeros(shape, dtype=torch.bool, device=like.device)
    return np.zeros(shape, dtype=bool)


def _copy(a: Array) -> Array:
    return a.clone() if isinstance(a, torch.Tensor) else a.copy()


def _to_numpy(a: Array) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a


# --------------------------------------------------------------------------------------------------------
# boundaries and edges (pure slicing)
# --------------------------------------------------------------------------------------------------------


def _boundary(lab: Array, n_spatial: int) -> Array:
    """All-label boundary over the last ``n_spatial`` axes (leading axes are independent cases)."""
    out = _zeros_bool(tuple(lab.shape), lab)
    for ax in range(lab.ndim - n_spatial, lab.ndim):
        n = lab.shape[ax]
        if n < 2:
            continue
        lo = [slice(None)] * lab.ndim
        hi = [slice(None)] * lab.ndim
        lo[ax], hi[ax] = slice(0, n - 1), slice(1, n)
        differ = lab[tuple(lo)] != lab[tuple(hi)]
        out[tuple(lo)] |= differ
        out[tuple(hi)] |= differ
    return out


def _edges(mask: Array, n_spatial: int) -> Array:
    """``mask & ~erosion(mask)`` with the face-connected element and a background border (scipy default)."""
    inner = _copy(mask)
    for ax in range(mask.ndim - n_spatial, mask.ndim):
        n = mask.shape[ax]
        lo = [slice(None)] * mask.ndim
        hi = [slice(None)] * mask.ndim
        if n >= 2:
            lo[ax], hi[ax] = slice(0, n - 1), slice(1, n)
            inner[tuple(lo)] &= mask[tuple(hi)]
            inner[tuple(hi)] &= mask[tuple(lo)]
        first = [slice(None)] * mask.ndim
        last = [slice(None)] * mask.ndim
        first[ax], last[ax] = 0, n - 1
        inner[tuple(first)] = False
        inner[tuple(last)] = False
    return mask & ~inner


def label_boundary(label: ArrayLike, spatial_dims: int | None = None) -> ArrayLike:
    """Boolean boundary mask of a label map (docs/design.md): a voxel with a face neighbour of another label.

    Args:
        label: label map ``(*spatial)`` (any integer, bool or integral float dtype), or a batch
            ``(*batch, *spatial)`` with ``spatial_dims`` set; multi-class maps give the all-label boundary.
        spatial_dims: number of trailing spatial axes (default: all axes, at most 3).

    Returns:
        bool mask of the same shape, numpy for numpy input, torch (same device) for torch input.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import label_boundary
        >>> label = np.zeros((4, 4), dtype=int)
        >>> label[1:3, 1:3] = 1
        >>> label_boundary(label).astype(int)
        array([[0, 1, 1, 0],
               [1, 1, 1, 1],
               [1, 1, 1, 1],
               [0, 1, 1, 0]])
    """
    a = _label_array(label, "label")
    n = _spatial_dims(a, spatial_dims, "label")
    return like_input(_boundary(a, n), label)


def foreground_edges(mask: ArrayLike, spatial_dims: int | None = None) -> ArrayLike:
    """Edge voxels of the foreground ``mask > 0``, as MONAI's ``get_mask_edges`` finds them for HD95.

    The edge is the foreground minus its binary erosion by the face-connected structuring element, the
    volume border counting as background (``scipy.ndimage.binary_erosion`` defaults).

    Args:
        mask: mask or label map ``(*spatial)``, or ``(*batch, *spatial)`` with ``spatial_dims``.
        spatial_dims: number of trailing spatial axes (default: all axes, at most 3; see :func:`label_boundary`).

    Returns:
        bool edge mask of the same shape and library as the input.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics.boundary import foreground_edges
        >>> mask = np.zeros((5, 5), dtype=int)
        >>> mask[1:4, 1:4] = 1
        >>> foreground_edges(mask).astype(int)
        array([[0, 0, 0, 0, 0],
               [0, 1, 1, 1, 0],
               [0, 1, 0, 1, 0],
               [0, 1, 1, 1, 0],
               [0, 0, 0, 0, 0]])
    """
    a = _label_array(mask, "mask")
    n = _spatial_dims(a, spatial_dims, "mask")
    return like_input(_edges(a > 0, n), mask)


# --------------------------------------------------------------------------------------------------------
# distance transforms
# --------------------------------------------------------------------------------------------------------


def _distance_to_features(features: Array, spacing: tuple, backend: str) -> Array:
    """Euclidean distance (mm, float64) from every voxel to the nearest ``True`` voxel of ``features``.

    ``features`` is one case ``(*spatial)``; all ``inf`` when it has no ``True`` voxel. numpy in, numpy out;
    a CUDA tensor in, a tensor on the same device out (computed by cuCIM when available, else on the CPU).
    """
    ndim = features.ndim
    cuda = isinstance(features, torch.Tensor)
    bk = _resolve_backend(backend, cuda and features.device.type == "cuda", ndim)
    if bk == "cucim" and not 2 <= ndim <= 3:
        raise ValueError(f"backend='cucim' takes 2 or 3 spatial dimensions, got {ndim}")
    if not bool(features.any()):
        if cuda:
            return torch.full(tuple(features.shape), float("inf"), dtype=torch.float64, device=features.device)
        return np.full(features.shape, np.inf)
    e = spacing_exponent(spacing)
    if e:  # computed on a spacing whose squares neither underflow nor overflow, then scaled back (exact)
        return times_power_of_two(_distance_to_features(features, scale_spacing(spacing, e), backend), e)
    if bk == "cucim":
        return _cucim_distances(features, spacing).to(torch.float64)
    background = np.ascontiguousarray(~_to_numpy(features))
    if bk == "edt" and _edt_safe(spacing):
        # uint8 view of the bool mask (no copy): the edt package is faster on uint8 than on bool input.
        # Its 1D transform takes the spacing as one number, its 2D / 3D transforms a tuple of one per axis.
        aniso = float(spacing[0]) if ndim == 1 else tuple(spacing)
        sq = _edt_pkg.edtsq(background.view(np.uint8), anisotropy=aniso, black_border=False, parallel=num_threads())
        out = np.sqrt(sq, dtype=np.float64)
    else:
        out = ndimage.distance_transform_edt(background, sampling=spacing)
    return torch.from_numpy(out).to(features.device) if cuda else out


#: squared distances below this are integers that float32 (the edt package's output) holds exactly
_FLOAT32_EXACT_INTEGERS = 2**24
#: integers below this are float64 values
_FLOAT64_EXACT_INTEGERS = 2**53
#: the largest denominator looked for in a spacing (:func:`lattice_unit`)
_MAX_SPACING_DENOMINATOR = 10**6


def lattice_unit(spacing: SpacingLike, exact_within: float) -> tuple[float, tuple[int, ...]] | None:
    """A unit ``c`` with ``spacing[i] = n[i] * c`` for integers ``n[i]``, small enough for exact float32 arithmetic.

    Squared distances on the lattice of steps ``n`` are integers ``D = sum_i (k_i n_i)**2``; below ``2**24`` float32
    holds them, and every sum and square of the edt package's passes on them, exactly, so the distance ``c *
    sqrt(D)`` is exact to float64 rounding. ``c`` is the largest common unit of the spacings as the floats they are
    (every isotropic spacing: ``c = spacing``, ``n = 1``) or, failing that, of the fractions ``p / q`` (``q <=
    10**6``) whose nearest floats they are (0.8 is 4/5 and 3.0 is 3: ``c = 1/5``, ``n = (4, 15)``; a float32 header
    value such as 0.800000011920929 names no such fraction). It must satisfy ``exact_within / c < 4096``
    (``(exact_within / c)**2 < 2**24``).

    Args:
        spacing: voxel size in mm per axis.
        exact_within: the largest distance in mm that must be exact.

    Returns:
        ``(c, n)``, or None when the spacings have no such unit.

    Example:
        >>> from monai_unc.metrics.boundary import lattice_unit
        >>> lattice_unit((0.8, 0.8, 0.8), 20.0)
        (0.8, (1, 1, 1))
        >>> lattice_unit((0.7, 0.7, 3.0), 20.0)
        (0.1, (7, 7, 30))
        >>> lattice_unit((0.800000011920929, 0.800000011920929, 3.0), 20.0) is None
        True
    """
    lattice = _lattice(spacing, exact_within)
    return None if lattice is None else (float(lattice[0]), lattice[1])


def _lattice(spacing: SpacingLike, exact_within: float) -> tuple[Fraction, tuple[int, ...]] | None:
    """:func:`lattice_unit` with the unit as the exact fraction ``p / q`` it is (a float such as 0.1 is not)."""
    try:
        reach = float(exact_within)
    except (TypeError, ValueError):
        reach = math.nan
    if isinstance(exact_within, (bool, np.bool_)) or not (math.isfinite(reach) and reach >= 0):  # np.True_ was 1 mm
        raise ValueError(f"exact_within must be a non-negative distance in mm, got {exact_within!r}")
    values = []
    for s in np.atleast_1d(np.asarray(spacing, dtype=object)).reshape(-1):
        v = positive_finite(s)
        if math.isnan(v):
            raise ValueError(f"spacing must be positive and finite (mm per axis), got {spacing!r}")
        values.append(v)
    named = [Fraction(v).limit_denominator(_MAX_SPACING_DENOMINATOR) for v in values]
    for fractions in ([Fraction(v) for v in values], named):  # the floats themselves, then the fractions they name
        if any(float(f) != v for f, v in zip(fractions, values)):
            continue
        common = math.lcm(*(f.denominator for f in fractions))
        unit = Fraction(math.gcd(*(f.numerator * (common // f.denominator) for f in fractions)), common)
        if Fraction(reach) ** 2 < (_FLOAT32_EXACT_INTEGERS - 1) * unit**2:
            return unit, tuple(int(f / unit) for f in fractions)
    return None


def _exact_distance_to_features(features: np.ndarray, spacing: tuple, backend: str, exact_within: float,
                                on_cuda: bool = False) -> np.ndarray:
    """:func:`_distance_to_features` (numpy) exact to float64 rounding up to ``exact_within`` mm, whatever the backend.

    The edt package on the integer lattice of :func:`lattice_unit` where there is one (its float32 squared distances
    are then exact integers below ``2**24`` up to ``exact_within``, and at least ``2**24`` beyond: those come out
    beyond ``exact_within`` too), scipy's float64 transform otherwise. ``on_cuda``: whether the caller's input is a
    CUDA tensor, for the check of ``backend``; ``"cucim"`` (float32) is then served on the CPU as ``"auto"`` is.

    On the lattice of unit ``p / q`` the distance is ``sqrt(D) * p / q`` with the exact integer ``D``: where ``D`` is
    a perfect square (a distance along one axis, or a Pythagorean one) ``sqrt(D) * p`` is an exact integer and the
    one division rounds it correctly, so a voxel exactly ``r`` mm away comes out as the float ``r`` (0.7 mm, not
    0.7000000000000001 as ``sqrt(D) * float(p / q)`` gave); other distances are irrational and within a few units in
    the last place. What remains: scipy's transform (no lattice, or the ``scipy`` backend) computes
    ``sqrt(sum (k_i s_i)**2)`` in float64 and may land a unit in the last place beside a distance such as 2.1 mm (either
    side), so a decision ``d <= r`` taken exactly at ``r`` may still need a relative tolerance of a few ``1e-16``.
    """
    ndim = features.ndim
    bk = _resolve_backend(backend, on_cuda, ndim)
    if bk == "cucim":  # float32 on the GPU: not exact
        bk = _resolve_backend("auto", False, ndim)
    if not bool(features.any()):
        return np.full(features.shape, np.inf)
    lattice = _lattice(spacing, exact_within) if bk == "edt" else None
    if lattice is not None and not _edt_safe(lattice[1]):
        lattice = None  # steps whose float32 squares overflow: scipy
    background = np.ascontiguousarray(~features)
    if lattice is None:
        return ndimage.distance_transform_edt(background, sampling=spacing)
    unit, steps = lattice
    aniso = float(steps[0]) if ndim == 1 else tuple(float(n) for n in steps)
    sq = _edt_pkg.edtsq(background.view(np.uint8), anisotropy=aniso, black_border=False, parallel=num_threads())
    out = np.sqrt(sq, dtype=np.float64)
    p, q = unit.numerator, unit.denominator
    short = p < _FLOAT64_EXACT_INTEGERS // _FLOAT32_EXACT_INTEGERS and q < _FLOAT64_EXACT_INTEGERS
    if Fraction(float(unit)) != unit and short:
        out *= p  # sqrt(D) < 2**12 up to exact_within: an exact integer product where D is a perfect square
        out /= q  # the one rounding
    else:  # the unit is a float (one rounding: k * unit), or a fraction of over 29 bits (two roundings)
        out *= float(unit)
    return out


def distance_to_boundary(
    label: ArrayLike,
    spacing: SpacingLike = 1.0,
    spatial_dims: int | None = None,
    backend: str = "auto",
) -> ArrayLike:
    """Distance in mm from every voxel to the nearest boundary voxel of ``label`` (0 on the boundary).

    ``d_L(x) = min_{b in boundary(L)} || (x - b) * spacing ||_2`` (Zeevi, Lieffrig, Staib, Onofrey: *Spatially-Aware
    Evaluation of Segmentation Uncertainty*, Sec. 3.2; docs/design.md); a label map without a boundary (one label
    everywhere) gives ``inf`` everywhere.

    Args:
        label: label map ``(*spatial)`` or ``(*batch, *spatial)`` with ``spatial_dims``.
        spacing: voxel size in mm per spatial axis (scalar for isotropic), or one row per case for a batch.
        spatial_dims: number of trailing spatial axes (default: all axes, at most 3).
        backend: ``"auto"`` (cuCIM for CUDA tensors when installed, else ``edt``, else scipy), ``"edt"``,
            ``"scipy"`` or ``"cucim"``.

    Returns:
        float64 distances in mm of the same shape, numpy for numpy input, torch on the input's device otherwise.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import distance_to_boundary
        >>> label = np.zeros((1, 6), dtype=int)
        >>> label[0, 3:] = 1
        >>> distance_to_boundary(label, spacing=(1.0, 2.0))
        array([[4., 2., 0., 0., 2., 4.]])
    """
    a = _label_array(label, "label")
    n = _spatial_dims(a, spatial_dims, "label")
    spatial = tuple(a.shape[a.ndim - n :])
    cases = a.reshape((-1, *spatial))
    sps = case_spacings(spacing, cases.shape[0], n)
    outs = [_distance_to_features(_boundary(c, n), sp, backend) for c, sp in zip(cases, sps)]
    out = torch.stack(outs) if isinstance(a, torch.Tensor) else np.stack(outs)
    return like_input(out.reshape(tuple(a.shape)), label)


def distance_to_mask(mask: ArrayLike, spacing: SpacingLike = 1.0, backend: str = "auto",
                     exact_within: float | None = None) -> ArrayLike:
    """Distance in mm from every voxel to the nearest voxel where ``mask`` is true (``inf`` if none).

    The kernel under :func:`distance_to_boundary`, exposed for custom regions (e.g. distance to an error mask).

    Args:
        mask: one case ``(*spatial)``, boolean or 0/1.
        spacing: voxel size in mm per axis (scalar for isotropic).
        backend: as in :func:`distance_to_boundary`.
        exact_within: None, or a distance in mm up to which every distance must be exact to float64 rounding
            whatever the backend (the edt package's float32 is off by about 1e-7 relative for spacings such as
            0.8 mm, enough to move a voxel exactly ``r`` mm away beyond ``r``). The ``edt`` backend (and
            ``"auto"``) then runs on the integer lattice of :func:`lattice_unit`, as fast and exact, where the
            spacings have one, and scipy's float64 transform where they do not (anisotropic spacings that are no
            multiples of a common unit, such as float32 header values: about 4x slower); computed on the CPU
            (``backend="cucim"`` with a CUDA tensor is served there as ``"auto"``). A voxel exactly ``r`` mm away on
            the lattice comes out as the float ``r``; where scipy computes, a distance may be a unit in the last place
            off, so a decision ``d <= r`` taken exactly at ``r`` may still need a relative tolerance of a few 1e-16.
            Distances beyond ``exact_within`` come out beyond it, to float32 precision.

    Returns:
        float64 distances of the same shape and library as the input (0 inside the mask).

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics.boundary import distance_to_mask
        >>> distance_to_mask(np.array([1, 0, 0, 0, 1]), spacing=0.5)
        array([0. , 0.5, 1. , 0.5, 0. ])
    """
    a = _label_array(mask, "mask")
    n = _spatial_dims(a, None, "mask", one_case="distance_to_mask")
    sp = normalize_spacing(spacing, n)
    if exact_within is None:
        return like_input(_distance_to_features(a != 0, sp, backend), mask)
    if isinstance(exact_within, bool) or not isinstance(exact_within, (int, float, np.integer, np.floating)) or not (
            math.isfinite(exact_within) and exact_within >= 0):
        raise ValueError(f"exact_within must be None or a non-negative distance in mm, got {exact_within!r}")
    on_cuda = isinstance(a, torch.Tensor) and a.device.type == "cuda"
    return like_input(_exact_distance_to_features(_to_numpy(a != 0), sp, backend, float(exact_within), on_cuda), mask)


# --------------------------------------------------------------------------------------------------------
# HD95
# --------------------------------------------------------------------------------------------------------


def _hd_case(pred_fg: Array, target_fg: Array, spacing: tuple, percentile: float, warn: bool = True,
             backend: str = "auto") -> float:
    """Symmetric percentile Hausdorff distance (mm) between two binary masks of one case (MONAI convention).

    NaN when both masks are empty, ``inf`` when exactly one is (with a ``UserWarning`` if ``warn``). Two CUDA tensors
    on one device whose ``backend`` resolves to cuCIM: dense transforms on the device; else a KD-tree on the host.
    """
    n = pred_fg.ndim
    ep = _edges(pred_fg, n)
    et = _edges(target_fg, n)
    has_p, has_t = bool(ep.any()), bool(et.any())
    if not has_p and not has_t:
        if not warn:
            return float("nan")
        return warn_nan("hd95: prediction and target foregrounds are both empty; HD95 is undefined (NaN)", 4)
    if not has_p or not has_t:
        if warn:
            which = "prediction" if not has_p else "target"
            say_warning(f"hd95: the {which} foreground is empty; HD95 is infinite", UserWarning,
                        stacklevel=user_stacklevel(), merge=count_cases)  # once for a batch (hd95), with the count
        return float("inf")
    e = spacing_exponent(spacing)
    if e:  # as in _distance_to_features: squares of the scaled spacing neither underflow nor overflow
        return times_power_of_two(_hd_case(pred_fg, target_fg, scale_spacing(spacing, e), percentile, warn, backend), e)
    if (isinstance(ep, torch.Tensor) and isinstance(et, torch.Tensor) and ep.device == et.device
            and 2 <= n <= 3 and _resolve_backend(backend, ep.device.type == "cuda", n) == "cucim"):
        # CUDA tensors with cuCIM: the directed distances from two dense transforms on the device (float32
        # distances), where a KD-tree would copy the edges to the host and query there (0.13 s of 0.14 s of BUC's
        # default width on a 128 x 256 x 256 case on an H200)
        # as boolean masks: an integer 0/1 edge mask (``_hd_case`` of integer masks, as its KD-tree path takes them)
        # was inverted bitwise and used as an index (found by hostile testing)
        ep, et = ep != 0, et != 0
        d_pt = _directed_distances(ep, et, spacing)
        d_tp = _directed_distances(et, ep, spacing)
        return float(max(np.percentile(d_pt, percentile), np.percentile(d_tp, percentile)))
    ep, et = _to_numpy(ep), _to_numpy(et)
    scale = np.asarray(spacing, dtype=np.float64)
    cp = np.argwhere(ep).astype(np.float64) * scale
    ct = np.argwhere(et).astype(np.float64) * scale
    # sliding-midpoint trees (balanced_tree=False): built in half the time of median splits, queried as fast on
    # border points; the nearest distance, hence every value, is the same whatever the tree
    kw = {"leafsize": 32, "balanced_tree": False, "compact_nodes": False}
    d_pt = KDTree(ct, **kw).query(cp, k=1, workers=num_threads())[0]
    d_tp = KDTree(cp, **kw).query(ct, k=1, workers=num_threads())[0]
    return float(max(np.percentile(d_pt, percentile), np.percentile(d_tp, percentile)))


def _cucim_distances(features: torch.Tensor, spacing: tuple) -> torch.Tensor:
    """Distances (mm, float32) to the nearest ``True`` voxel of a CUDA bool tensor by cuCIM's transform.

    Computed in float32 (relative 2e-7), as :func:`_distance_to_features` computes them: ``float64_distances=True``
    fails (``RuntimeError: distances array must have dtype float32``, seen on an H200 with cuCIM 26.10 and MONAI
    1.6.1): MONAI preallocates a float64 output for it, but cuCIM's ``distance_transform_edt`` does not pass
    ``float64_distances`` on to its PBA kernels, which then expect float32.
    """
    from monai.transforms.utils import distance_transform_edt

    d = distance_transform_edt((~features)[None].to(torch.float32), sampling=list(spacing))
    return torch.as_tensor(d[0], device=features.device)  # float64 only at the edge voxels (_directed_distances)


def _directed_distances(src: torch.Tensor, dst: torch.Tensor, spacing: tuple) -> np.ndarray:
    """Distance (mm, float64) from every ``True`` voxel of ``src`` to the nearest one of ``dst`` (both non-empty).

    The dense transform to ``dst`` on its device (:func:`_cucim_distances`), read at ``src``'s voxels and brought to
    the host, in no particular order (a percentile does not depend on it).
    """
    return _cucim_distances(dst, spacing)[src].to(torch.float64).cpu().numpy()


def _check_percentile(percentile: Any) -> float:
    q = real_number(percentile, "percentile")  # True is no percentile (it was the 1st), nor "95" the 95th
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must lie in [0, 100], got {percentile}")
    return q


@once_per_call
def hausdorff_distance(
    pred_mask: ArrayLike,
    target_mask: ArrayLike,
    spacing: SpacingLike = 1.0,
    percentile: float = 95.0,
    warn: bool = True,
    backend: str = "auto",
) -> float:
    """Symmetric percentile Hausdorff distance (mm) between the foregrounds of ONE case: the kernel of :func:`hd95`.

    Edges, directed distances and percentiles as in :func:`hd95` (MONAI's convention, float64; CUDA tensors with
    cuCIM installed: from cuCIM's float32 transforms on the device).

    Args:
        pred_mask: one case ``(*spatial)`` (1-3 axes) of non-negative integer labels (a mask or label map; a
            probability map or a negative label raises ``ValueError``), foreground = non-zero; numpy array or torch
            tensor.
        target_mask: the reference of the same shape.
        spacing: voxel size in mm per axis (scalar for isotropic).
        percentile: in [0, 100] (95 for HD95, 100 for the classical Hausdorff distance); 0 is the 0th percentile,
            not MONAI's ``percentile=0`` (read as unset there: the maximum).
        warn: warn about empty foregrounds (``True`` or ``False``).
        backend: ``"auto"`` (CUDA tensors with cuCIM installed: two dense transforms on the device; else a KD-tree on
            the host), ``"cucim"`` (CUDA tensors only), ``"edt"`` or ``"scipy"`` (both: the KD-tree), as for
            :func:`distance_to_boundary`.

    Returns:
        a float in mm: NaN when both foregrounds are empty, ``inf`` when exactly one is (with a ``UserWarning`` if
        ``warn``).

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics.boundary import hausdorff_distance
        >>> pred = np.zeros((8, 8), dtype=int)
        >>> target = np.zeros((8, 8), dtype=int)
        >>> pred[2:5, 2:5], target[2:6, 2:6] = 1, 1
        >>> hausdorff_distance(pred, target, spacing=(1.0, 0.5), percentile=100)
        1.118033988749895
    """
    p = _label_array(pred_mask, "pred_mask")
    t = _label_array(target_mask, "target_mask")
    if p.shape != t.shape:
        raise ValueError(
            f"pred_mask and target_mask must have the same shape, got {tuple(p.shape)} and {tuple(t.shape)}"
        )
    n = _spatial_dims(p, None, "pred_mask", one_case="hausdorff_distance")
    warn = check_bool(warn, "warn")  # a string "no" is truthy
    check_backend_name(backend)
    return _hd_case(p > 0, t > 0, normalize_spacing(spacing, n), _check_percentile(percentile), warn, backend)


@once_per_call
def hd95(
    pred: ArrayLike,
    target: ArrayLike,
    spacing: SpacingLike = 1.0,
    spatial_dims: int | None = None,
    percentile: float = 95.0,
) -> ArrayLike:
    """95th-percentile symmetric Hausdorff distance (mm) between the foregrounds ``pred > 0``, ``target > 0``.

    Follows MONAI's ``compute_hausdorff_distance(y_pred, y, percentile=95, spacing=spacing)`` (edges by
    binary erosion, directed 95th percentiles with linear interpolation, the larger of the two), computed in
    float64 (CUDA tensors with cuCIM installed: from cuCIM's float32 transforms on the device). Both foregrounds
    empty: NaN with a ``UserWarning``; exactly one empty: ``inf`` with a warning (every distance to an empty set is
    infinite); each warning once for the call, naming how many cases, at the caller's line. MONAI agrees on both at
    ``percentile=100`` (its ``percentile=None``), but below 100 its interpolation between infinite distances
    (``inf - inf``) gives NaN where one foreground is empty, which a NaN-skipping mean over cases then leaves out: a
    missed structure stays visible here.

    Args:
        pred: label map ``(*spatial)`` or ``(*batch, *spatial)``: non-negative integer labels (any integer, bool or
            integral float dtype; a probability map or a negative label raises ``ValueError``: threshold first).
        target: reference label map of the same shape.
        spacing: voxel size in mm per spatial axis, or one row per case.
        spatial_dims: number of trailing spatial axes (default: all axes, at most 3).
        percentile: a real number in [0, 100]; 100 gives the classical Hausdorff distance. MONAI's convention holds
            for every percentile but 0: MONAI reads ``percentile=0`` as unset and returns the maximum (the classical
            Hausdorff distance), here 0 is the 0th percentile (the larger of the two directed minima, 0 where the
            edges meet).

    Returns:
        float64 values in mm of the leading (batch) shape, ``(1,)`` for a single case ``(*spatial)`` (numpy, or
        torch on the input's device); :func:`hausdorff_distance` gives the float of one case.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import hd95
        >>> pred = torch.zeros(2, 6, 6, 6, dtype=torch.long)
        >>> target = torch.zeros_like(pred)
        >>> pred[:, 1:4, 1:4, 1:4] = 1
        >>> target[0, 1:4, 1:4, 1:4] = 1
        >>> target[1, 2:5, 2:5, 2:5] = 1
        >>> hd95(pred, target, spacing=(1.0, 1.0, 2.0), spatial_dims=3)
        tensor([0.0000, 2.2361], dtype=torch.float64)
    """
    p = _label_array(pred, "pred")
    t = _label_array(target, "target")
    if p.shape != t.shape:
        raise ValueError(f"pred and target must have the same shape, got {tuple(p.shape)} and {tuple(t.shape)}")
    q = _check_percentile(percentile)
    n = _spatial_dims(p, spatial_dims, "pred")
    spatial = tuple(p.shape[p.ndim - n :])
    pc, tc = p.reshape((-1, *spatial)) > 0, t.reshape((-1, *spatial)) > 0
    sps = case_spacings(spacing, pc.shape[0], n)
    vals = [_hd_case(a, b, sp, q) for a, b, sp in zip(pc, tc, sps)]
    lead = tuple(p.shape[: p.ndim - n]) or (1,)
    return like_input(np.asarray(vals, dtype=np.float64).reshape(lead), pred)
