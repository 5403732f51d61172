"""Image statistics of a case and the names of case-score columns, for the referral rule's checks."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ...io import (
    REORIENT_REMEDY,
    CaseError,
    grid_mismatch,
    image_channel_files,
    read_volume,
    reoriented_grid,
    without_time_axis,
)
from ...keys import MEASURES
from ...scores import CASE_SCORES

#: case-score aggregations of a measure, as ``evaluate`` names its columns ``<measure>_<aggregation>``
SCORE_AGGREGATIONS = CASE_SCORES
#: intensity statistics per image channel, inside the non-zero region (:func:`image_statistics`)
IMAGE_FEATURES = ("mean", "std", "p01", "p50", "p99")
#: how images in nnU-Net's channel naming are read for their statistics (:func:`read_image_channels`)
IMAGE_CHANNEL_FILES = ("all", "first")


# ----------------------------------------------------------------------------------------------------------------
# case scores, image statistics
# ----------------------------------------------------------------------------------------------------------------
def parse_score_column(column: str) -> tuple[str, str]:
    """``(measure, aggregation)`` of a score column such as ``"predictive_entropy_fg_mean"``.

    Args:
        column: the column name, ``<measure>_<aggregation>``.

    Returns:
        ``(measure, aggregation)``.

    Raises:
        ValueError: ``column`` is not ``<measure>_<aggregation>`` with a measure of :data:`monai_unc.keys.MEASURES`
            and an aggregation of :data:`SCORE_AGGREGATIONS`.

    Example:
        >>> parse_score_column("mutual_information_patch_mean")
        ('mutual_information', 'patch_mean')
    """
    for agg in sorted(SCORE_AGGREGATIONS, key=len, reverse=True):  # fg_mean before mean
        if column.endswith(f"_{agg}") and column[: -len(agg) - 1] in MEASURES:
            return column[: -len(agg) - 1], agg
    raise ValueError(f"score column {column!r} is not <measure>_<aggregation> with a measure in {MEASURES} and an "
                     f"aggregation in {SCORE_AGGREGATIONS}")


def image_statistics(image: np.ndarray) -> np.ndarray:
    """Intensity statistics of an image ``(C, *spatial)``, per channel inside the non-zero region.

    Per channel the mean, standard deviation and the 1st, 50th and 99th percentiles (:data:`IMAGE_FEATURES`) of the
    voxels inside the non-zero region (voxels where any channel is non-zero: the head of a skull-stripped MR, the
    field of view of a padded scan; every voxel when the image is zero everywhere). Cheap: one pass plus a partition.

    Args:
        image: ``(C, *spatial)`` intensities, finite.

    Returns:
        ``(C * 5,)`` float64, channel-major (names: :func:`image_feature_names`).

    Raises:
        ValueError: ``image`` has fewer than 2 dimensions or NaN / inf values.

    Example:
        >>> image_statistics(np.array([[[0., 1.], [2., 3.]]])).round(3)
        array([2.   , 0.816, 1.02 , 2.   , 2.98 ])
    """
    img = np.asarray(image)
    if img.ndim < 2:
        raise ValueError(f"image must be (C, *spatial), got shape {img.shape}")
    if not np.isfinite(img).all():
        raise ValueError("image contains NaN or inf")
    region = (img != 0).any(axis=0)
    if not region.any():
        region = np.ones(img.shape[1:], dtype=bool)
    out = []
    for c in range(img.shape[0]):
        v = img[c][region].astype(np.float64)
        p01, p50, p99 = np.percentile(v, (1, 50, 99))
        out += [v.mean(), v.std(), p01, p50, p99]
    return np.asarray(out, dtype=np.float64)


def read_image_channels(
    path: str | os.PathLike,
    channel_files: str = "all",
    geometry: tuple[Sequence[int], np.ndarray] | None = None,
    case_id: str = "",
) -> np.ndarray:
    """The image ``(C, *spatial)`` of a case whose image file is ``path``, every channel stacked.

    With ``channel_files="all"`` and nnU-Net's channel naming (``path`` is ``CASE_0000.<ext>``) the channel files
    ``CASE_0000``, ``CASE_0001``, ... (:func:`monai_unc.io.image_channel_files`) read one by one and concatenated,
    otherwise the one file (a 4D NIfTI gives its channels). ``geometry`` ``(spatial shape, affine)``: every file must
    have it (affine within :data:`monai_unc.io.GEOMETRY_ATOL` mm); by default the first file's.

    Args:
        path: the case's image file (``CASE_0000.<ext>`` in nnU-Net's channel naming).
        channel_files: ``"all"`` (every channel file) or ``"first"`` (only ``path``).
        geometry: ``(spatial shape, affine)`` every file must have, or None.
        case_id: names the case in error messages.

    Returns:
        The image, ``(C, *spatial)`` float32.

    Raises:
        ValueError: ``channel_files`` is not one of :data:`IMAGE_CHANNEL_FILES`.
        CaseError: a channel file has another spatial shape or affine, or NaN or inf voxels.
    """
    if channel_files not in IMAGE_CHANNEL_FILES:
        raise ValueError(f"channel_files must be one of {IMAGE_CHANNEL_FILES}, got {channel_files!r}")
    paths = image_channel_files(path, case_id or None) if channel_files == "all" else (Path(path),)
    who = f"case {case_id!r}: " if case_id else ""
    parts = []
    for p, (data, aff) in zip(paths, _channel_volumes(paths, who)):
        if geometry is None:
            geometry = (data.shape[1:], aff)
        shape, ref_aff = geometry
        if (order := reoriented_grid(aff, data.shape[1:], ref_aff, shape)) is not None:
            raise CaseError(f"{who}image {p.name} holds the grid of the case's other volumes with {order}: "
                            + REORIENT_REMEDY.format(what="the case's other volumes"))
        if tuple(data.shape[1:]) != tuple(shape):
            raise CaseError(f"{who}image {p.name} has spatial shape {tuple(data.shape[1:])}, expected {tuple(shape)}")
        problem = grid_mismatch(aff, ref_aff, shape)
        if problem is not None:
            raise CaseError(f"{who}image {p.name} is not in the space of the case's other volumes ({problem})")
        if not np.isfinite(data).all():  # named here: image_statistics' error named neither the file nor the case
            raise CaseError(f"{who}image {p.name} has NaN or inf voxels (a corrupt or unfinished scan?): its intensity "
                            "statistics are undefined")
        parts.append(data.astype(np.float32, copy=False))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def _channel_volumes(paths: Sequence[Path], who: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(data, affine)`` of each channel file; DICOM series of one case (``<case>_0000/``, ...) on channel 0's grid.

    A channel's series stored with its slices or rows the other way round is put in channel 0's voxel order, as
    ``infer`` reads it (:func:`monai_unc.io.dicom.channel_on_series_grid`).
    """
    if len(paths) < 2 or not all(p.is_dir() for p in paths):
        for p in paths:
            yield without_time_axis(read_volume(p))  # (X, Y, Z, 1, C): on its 3-D grid (review 64)
        return
    from ...io.dicom import channel_on_series_grid, read_series

    reference = read_series(paths[0])
    assert reference.volume is not None
    yield reference.volume[None], reference.affine
    for p in paths[1:]:
        try:
            volume = channel_on_series_grid(read_series(p), reference, f"series {p.name}",
                                            remedy=f"the channels of a case lie on one grid: resample it onto the "
                                                   f"grid of {paths[0].name}")
        except ValueError as e:
            raise CaseError(f"{who}{e}") from None
        yield volume[None], reference.affine


def image_feature_names(n_channels: int) -> tuple[str, ...]:
    """Names of :func:`image_statistics`' entries: ``mean``, ``std``, ... (``c1_mean`` ... for more channels).

    Args:
        n_channels: the number of image channels ``C``.

    Returns:
        ``5 C`` names, channel-major: :data:`IMAGE_FEATURES` for one channel, ``c<i>_<feature>`` otherwise.

    Example:
        >>> image_feature_names(2)[:3]
        ('c0_mean', 'c0_std', 'c0_p01')
    """
    if n_channels == 1:
        return IMAGE_FEATURES
    return tuple(f"c{c}_{f}" for c in range(n_channels) for f in IMAGE_FEATURES)


