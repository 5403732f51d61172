"""Realistic image perturbations and a shifted MNI152 cohort (docs/data.md).

The MNI152 example is one brain. Case-level metrics need a cohort, so :func:`make_mni152_cohort` builds "cases" from
the template and perturbed copies of it (noise, bias field, contrast, blur, resolution loss), each with its
perturbation recorded as the shift label. Labels are not perturbed: every copy is segmented on the original grid
and compared with the same tissue labels, on the held-out right hemisphere.

Severity runs from 0 (the unchanged image) to 5; the parameters grow linearly with it and severity 5 lies beyond
the augmentation the example network was trained with (``monai_unc/data/training.py``):

==============  ==========================================================  =======================
kind            transform at severity ``s``                                 training augmentation
==============  ==========================================================  =======================
``noise``       additive Gaussian, std ``0.03 s`` x intensity range          std up to 0.05
``bias_field``  MONAI ``RandBiasField`` (degree 3), coefficients in          coefficients in
                ``[-0.1 s, 0.1 s]``: multiplicative ``exp(field)``           [0, 0.3]
``contrast``    MONAI ``AdjustContrast`` with gamma ``1 + 0.15 s`` or its     gamma in [0.7, 1.5]
                inverse (chosen by ``seed``)
``blur``        MONAI ``GaussianSmooth``, sigma ``0.4 s`` voxels (along the    sigma up to 1 voxel
                axes of more than one voxel)
``resolution``  downsample by ``1 + 0.3 s`` per axis (area), back to the      none
                original grid (linear interpolation)
==============  ==========================================================  =======================

Random parts (the noise, the bias-field coefficients, the gamma direction) come from ``seed``; the same seed and a
larger severity scale the same draw, so severity is monotone for a fixed seed.

The blur pads the volume with zeros (MONAI's ``GaussianSmooth``): where the image is not zero at its faces, the
voxels within about ``2 x sigma`` of them darken as well. The MNI152 template's head reaches some of its faces
(intensities up to 0.8 within three voxels of them at 2 mm), so a blurred case of :func:`make_mni152_cohort` is also
a little darker there, tissue labels of its lowest axial slices included (71 labelled voxels of the
right hemisphere within four voxels of the inferior face, of 108 682); the validation studies' figures were made
so and are kept comparable. The demo cohort's :func:`fixed_perturbation` blurs with reflection at the faces instead.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from monai.data import MetaTensor
from monai.transforms import AdjustContrast, GaussianSmooth, RandBiasField, Resize
from scipy.ndimage import gaussian_filter

from .._utils import ArrayLike, check_finite, check_seed, to_tensor
from .mni152 import load_mni152_tissue

__all__ = [
    "PERTURBATIONS",
    "MAX_SEVERITY",
    "FIXED_PERTURBATIONS",
    "perturb",
    "fixed_perturbation",
    "make_mni152_cohort",
]

PERTURBATIONS = ("noise", "bias_field", "contrast", "blur", "resolution")
MAX_SEVERITY = 5.0
#: kinds of :func:`fixed_perturbation` (the demo cohort's perturbations, each given by its parameter)
FIXED_PERTURBATIONS = ("identity", "gamma_noise", "noise", "gamma", "bias", "blur", "lowres")


def _seed32(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**32 - 1))


def _plain(t: Any) -> torch.Tensor:
    """MONAI transforms return MetaTensors: back to a plain float32 tensor."""
    t = t.as_tensor() if hasattr(t, "as_tensor") else torch.as_tensor(t)
    return t.to(torch.float32)


def perturb(image: ArrayLike, kind: str, severity: float, seed: int = 0) -> ArrayLike:
    """A perturbed copy of ``image`` (channel-first ``(C, *spatial)``, 2 or 3 spatial axes); see the module table.

    Args:
        image: intensities, numpy or torch (the result follows the input's library and float dtype).
        kind: one of :data:`PERTURBATIONS`.
        severity: 0 (unchanged copy) to 5.
        seed: seed of the random parts; a fixed seed and a larger severity scale the same draw.

    Returns:
        The perturbed image, same shape, library, device and float dtype as ``image`` (float32 for integer input); a
        MONAI ``MetaTensor`` (what ``LoadImage`` returns) gives a ``MetaTensor`` with a copy of its meta data (affine
        included): the voxels change, never their place in space.

    Raises:
        ValueError: unknown ``kind``, ``severity`` outside [0, 5], non-finite or empty ``image``, wrong shape, a
            negative or non-integer ``seed``.
        TypeError: ``severity`` is not a number, or ``image`` is bool or complex.

    Example:
        >>> x = np.zeros((1, 8, 8, 8), np.float32); x[0, 2:6, 2:6, 2:6] = 1.0
        >>> y = perturb(x, "blur", 2.0)
        >>> y.shape, y.dtype, bool(y.max() < 1.0)
        ((1, 8, 8, 8), dtype('float32'), True)
        >>> bool((perturb(x, "noise", 0.0) == x).all())
        True
    """
    if kind not in PERTURBATIONS:
        raise ValueError(f"kind must be one of {PERTURBATIONS}, got {kind!r}")
    if isinstance(severity, bool) or not isinstance(severity, (int, float, np.integer, np.floating)):
        raise TypeError(f"severity must be a number in [0, {MAX_SEVERITY:g}], got {type(severity).__name__}")
    s = float(severity)
    if not 0.0 <= s <= MAX_SEVERITY:
        raise ValueError(f"severity must be in [0, {MAX_SEVERITY:g}], got {severity}")
    x = to_tensor(image, "image")
    if x.ndim not in (3, 4):
        raise ValueError(f"image must be channel-first (C, *spatial) with 2 or 3 spatial axes, got {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"image is empty (shape {tuple(x.shape)})")
    if x.dtype == torch.bool or x.is_complex():
        raise TypeError(f"image must be real-valued, got dtype {x.dtype}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    out_dtype = x.dtype if x.is_floating_point() else torch.float32
    check_finite(x.detach(), "image")
    if s == 0:  # the unchanged image in its own precision (a float32 round trip would change float64 values)
        y = x.detach().to(out_dtype, copy=True)
    else:
        x32 = x.detach().to(torch.float32)
        check_finite(x32, "image")  # float64 values beyond the float32 range
        y = _apply(x32.cpu(), kind, s, np.random.default_rng(seed)).to(device=x.device, dtype=out_dtype)
    if isinstance(image, MetaTensor):  # found by hostile testing: a plain tensor, the image's affine dropped
        return MetaTensor(y, meta=copy.deepcopy(image.meta),
                          applied_operations=copy.deepcopy(image.applied_operations))
    return y.numpy() if isinstance(image, np.ndarray) else y


def _apply(x: torch.Tensor, kind: str, s: float, rng: np.random.Generator) -> torch.Tensor:
    spatial = x.shape[1:]
    if kind == "noise":
        scale = float(x.max() - x.min()) or 1.0
        noise = np.random.default_rng(_seed32(rng)).standard_normal(x.shape).astype(np.float32)
        return x + torch.from_numpy(noise) * (0.03 * s * scale)
    if kind == "bias_field":
        t = RandBiasField(degree=3, coeff_range=(-0.1 * s, 0.1 * s), prob=1.0)
        t.set_random_state(seed=_seed32(rng))
        return _plain(t(x))
    if kind == "contrast":
        gamma = 1.0 + 0.15 * s
        if rng.uniform() < 0.5:
            gamma = 1.0 / gamma
        return _plain(AdjustContrast(gamma=gamma)(x))
    if kind == "blur":
        # along the axes of more than one voxel only: along an axis of length 1 (a single slice stored as (X, Y, 1))
        # MONAI's zero padding leaves the kernel's centre weight, an intensity drop (0.8 became 0.16 at sigma 2; found
        # by hostile testing)
        axes = [n for n in spatial if n > 1]
        if not axes:
            return x.clone()
        return _plain(GaussianSmooth(sigma=0.4 * s)(x.reshape(x.shape[0], *axes))).reshape(x.shape)
    # resolution: average into larger voxels, then interpolate back onto the original grid
    factor = 1.0 + 0.3 * s
    low = [max(1, round(n / factor)) for n in spatial]
    mode = "trilinear" if len(spatial) == 3 else "bilinear"
    down = Resize(low, mode="area")(x)
    return _plain(Resize(list(spatial), mode=mode, align_corners=False)(down))


def make_mni152_cohort(
    n_cases: int,
    seed: int = 0,
    kinds: Sequence[str] = PERTURBATIONS,
    severity_range: tuple[float, float] = (1.0, MAX_SEVERITY),
    include_clean: bool = True,
    roi: Sequence[slice] | None = None,
    resolution: int = 2,
) -> list[dict[str, Any]]:
    """A cohort of MNI152 "cases": the template (shift ``"none"``) and perturbed copies with their shift labels.

    Case 0 is the unperturbed template when ``include_clean``; the others cycle through ``kinds`` with a severity
    drawn uniformly from ``severity_range`` and a per-case seed, all reproducible from ``seed``. Perturbations act
    on the whole volume; ``roi`` (one slice per spatial axis) then crops image, label and masks, e.g. a block of
    the right hemisphere to keep CPU inference cheap. Needs ``nilearn`` (a dependency of monai-unc), like
    :func:`~monai_unc.data.load_mni152_tissue`.

    Args:
        n_cases: the number of cases.
        seed: seed of the severities and the perturbations.
        kinds: the perturbations to cycle (:data:`PERTURBATIONS`).
        severity_range: ``(low, high)`` within [0, 5].
        include_clean: case 0 is the unperturbed template.
        roi: three slices cropping the volumes, or None.
        resolution: template resolution in mm (1 or 2).

    Returns:
        One dict per case: ``image`` ``(1, X, Y, Z)`` float32, ``label`` ``(1, X, Y, Z)`` int64 (0 background +
        CSF, 1 grey matter, 2 white matter), ``right`` ``(X, Y, Z)`` bool (the evaluation hemisphere, world x >= 0),
        ``shift`` (``"none"`` or the kind), ``severity`` float, ``seed`` int (of the perturbation), ``spacing`` (mm).

    Raises:
        ValueError: a bad ``n_cases``, ``kinds``, ``severity_range`` or ``roi`` (or one that selects no voxel), or a
            ``seed`` outside ``[0, 2**64)``.
        TypeError: ``seed`` is not an integer (a float, a bool, None).
    """
    # found by hostile testing: seed=-1 or 1.5 failed inside numpy without naming seed, after the template was loaded
    seed = check_seed(seed, optional=False)
    if isinstance(n_cases, bool) or not isinstance(n_cases, (int, np.integer)) or n_cases < 1:
        raise ValueError(f"n_cases must be a positive integer, got {n_cases!r}")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if not kinds:
        raise ValueError("kinds must name at least one perturbation")
    bad = [k for k in kinds if k not in PERTURBATIONS]
    if bad:
        raise ValueError(f"kinds must be among {PERTURBATIONS}, got {bad}")
    lo, hi = (float(v) for v in severity_range)
    if not 0.0 <= lo <= hi <= MAX_SEVERITY:
        raise ValueError(f"severity_range must satisfy 0 <= low <= high <= {MAX_SEVERITY:g}, got {severity_range}")
    if roi is not None:
        roi = tuple(roi)
        if len(roi) != 3 or not all(isinstance(r, slice) for r in roi):
            raise ValueError(f"roi must be three slices (one per spatial axis), got {roi!r}")
    data = load_mni152_tissue(resolution=resolution)
    crop = (slice(None), *roi) if roi is not None else (slice(None),) * 4
    label = np.ascontiguousarray(data["label"][crop])
    right = np.ascontiguousarray(data["right"][crop[1:]])
    if label.size == 0:
        raise ValueError(f"roi {roi!r} selects no voxel of the {data['image'].shape[1:]} volume")
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(n_cases):
        case_seed = _seed32(rng)
        if include_clean and i == 0:
            kind, sev, image = "none", 0.0, data["image"]
        else:
            j = i - 1 if include_clean else i
            kind = kinds[j % len(kinds)]
            sev = float(np.random.default_rng(case_seed).uniform(lo, hi))
            image = perturb(data["image"], kind, sev, seed=case_seed)
        cases.append(
            {
                "image": np.ascontiguousarray(image[crop], dtype=np.float32),
                "label": label.copy(),
                "right": right.copy(),
                "shift": kind,
                "severity": sev,
                "seed": case_seed,
                "spacing": data["spacing"],
            }
        )
    return cases


def fixed_perturbation(image: np.ndarray, kind: str, value: float, rng: np.random.Generator) -> np.ndarray:
    """One of the demo cohort's fixed perturbations of a ``(X, Y, Z)`` image with intensities in [0, 1].

    Given by its parameter rather than a severity (:data:`FIXED_PERTURBATIONS`):

    - ``identity``; ``gamma_noise``: ``x ** value`` plus Gaussian noise of std 0.02; ``noise``: Gaussian noise of
      std ``value``; ``gamma``: ``x ** value``;
    - ``bias``: ``x * exp(value * f / max|f|)`` with a fixed smooth quadratic polynomial ``f`` over the volume;
    - ``blur``: Gaussian filter of ``value`` voxels; ``lowres``: every ``value``-th axial slice kept and linearly
      interpolated back.

    :func:`perturb` is the severity-graded family (with MONAI transforms) used for the larger shifted cohorts.

    Args:
        image: ``(X, Y, Z)`` intensities in [0, 1].
        kind: one of :data:`FIXED_PERTURBATIONS`.
        value: the perturbation's parameter (above).
        rng: the generator of the noise.

    Returns:
        The perturbed image ``(X, Y, Z)`` float32, clipped to [0, 1].

    Raises:
        ValueError: an unknown ``kind``; an ``image`` that is not a finite ``(X, Y, Z)`` array with intensities in
            [0, 1]; a ``value`` that is not
            a finite number, or out of its kind's range (negative for ``noise`` and ``blur``, not positive for
            ``gamma`` and ``gamma_noise``, not an integer >= 1 for ``lowres``).
        TypeError: ``rng`` is not a :class:`numpy.random.Generator`.

    Example:
        >>> out = fixed_perturbation(np.full((4, 4, 4), 0.5), "gamma", 2.0, np.random.default_rng(0))
        >>> out.dtype, float(out[0, 0, 0])
        (dtype('float32'), 0.25)
    """
    if kind not in FIXED_PERTURBATIONS:
        raise ValueError(f"kind must be one of {FIXED_PERTURBATIONS}, got {kind!r}")
    x = np.asarray(image, dtype=np.float64) if isinstance(image, np.ndarray) else None
    if x is None or x.ndim != 3 or x.size == 0 or not np.isfinite(x).all():
        got = f"shape {image.shape}" if isinstance(image, np.ndarray) else type(image).__name__
        raise ValueError(f"image must be a finite, non-empty (X, Y, Z) numpy array, got {got}")
    lo, hi = float(x.min()), float(x.max())
    if lo < 0.0 or hi > 1.0:  # found by hostile testing: x ** 0.5 of a negative voxel was NaN (numpy's warning
        # only), and values above 1 were clipped to 1 by every kind
        raise ValueError(f"image must hold intensities in [0, 1] (normalize it first), got [{lo:g}, {hi:g}]")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value):
        raise ValueError(f"value must be a finite number, got {value!r}")
    if kind in ("noise", "blur") and value < 0:
        raise ValueError(f"value of {kind!r} must be >= 0 (a standard deviation), got {value!r}")
    if kind in ("gamma", "gamma_noise") and value <= 0:
        raise ValueError(f"value of {kind!r} must be a positive exponent, got {value!r}")
    if kind == "lowres" and (value < 1 or value != int(value)):
        # int(value) would truncate 2.7 to 2, and a negative step would reverse the slices (a mirrored image)
        raise ValueError(f"value of 'lowres' must be an integer >= 1 (keep every value-th slice), got {value!r}")
    if kind == "identity":
        out = x
    elif kind == "gamma_noise":
        out = x**value + 0.02 * rng.standard_normal(x.shape)
    elif kind == "noise":
        out = x + value * rng.standard_normal(x.shape)
    elif kind == "gamma":
        out = x**value
    elif kind == "bias":
        grid = np.meshgrid(*(np.linspace(-1, 1, s) for s in x.shape), indexing="ij")
        field = 0.6 * grid[0] - 0.8 * grid[1] + 0.5 * grid[2] + 0.7 * grid[1] * grid[2] - 0.6 * grid[2] ** 2
        out = x * np.exp(value * field / np.abs(field).max())
    elif kind == "blur":
        out = gaussian_filter(x, value)
    elif kind == "lowres":
        out = _keep_every_nth_slice(x, int(value))
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def _keep_every_nth_slice(x: np.ndarray, step: int) -> np.ndarray:
    """Keep axial slices ``0, step, 2 step, ...`` of ``x`` ``(X, Y, Z)`` and interpolate linearly between them.

    Every kept slice stays at its own position (the image stays aligned with its label); slices past the last kept
    one repeat it.
    """
    kept = x[:, :, ::step]
    pos = np.arange(x.shape[2]) / step  # position of every slice in units of kept slices
    lo = np.minimum(np.floor(pos).astype(np.int64), kept.shape[2] - 1)
    hi = np.minimum(lo + 1, kept.shape[2] - 1)
    w = np.where(hi > lo, pos - lo, 0.0)
    return kept[:, :, lo] * (1.0 - w) + kept[:, :, hi] * w
