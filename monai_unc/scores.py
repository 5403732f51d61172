"""Case scores: the one definition of the per-case uncertainty scores of a map (ValUES, Sec. 4.3 and Appendix F).

``monai-unc evaluate`` (``metrics.csv``), ``nnunet-predict`` (its scores table) and the QC report use these
functions, so the same map gives the same numbers everywhere. For an uncertainty map ``u`` and the predicted
segmentation ``seg`` of one case (:func:`case_scores`, via :func:`monai_unc.aggregation.aggregate`):

==============  =================================================================================================
``mean``        mean of ``u`` over the whole volume
``fg_mean``     mean of ``u`` over the predicted foreground ``seg > 0`` (size-normalised; ValUES Appendix F.1
                divides the whole-image sum by the foreground size instead); NaN with a ``UserWarning`` when the
                prediction is empty
``patch_mean``  the largest *mean* of ``u`` over a stride-1 box of ``patch_size`` voxels per axis (ValUES'
                patch aggregation, 10 voxels; the box is clipped to the image). A box mean, not a box sum: the
                two rank cases identically when every box is complete, and the mean stays on the scale of ``u``
==============  =================================================================================================

Columns are named ``<measure>_<score>`` (:func:`case_score_columns`), e.g. ``mutual_information_patch_mean``.
Version 0.1.0 wrote the same box mean as ``<measure>_patch``; :func:`resolve_score_column` still accepts that
name with a ``DeprecationWarning`` and :func:`upgrade_row` renames it in rows read back from older files.

Core-only imports (aggregation), so any adapter (nnU-Net, the report) can import this module.
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ._utils import ArrayLike, check_bool, to_numpy
from .aggregation import aggregate
from .keys import DEPRECATED_MEASURES

__all__ = [
    "CASE_SCORES",
    "PATCH_SIZE",
    "case_scores",
    "case_score_columns",
    "region_suffix",
    "region_suffixes",
    "resolve_score_column",
    "upgrade_row",
]

#: the scores of one map, in column order (column ``<measure>_<score>``)
CASE_SCORES = ("mean", "fg_mean", "patch_mean")
#: box size (voxels per axis) of ``patch_mean`` (ValUES, Sec. 4.3)
PATCH_SIZE = 10
#: the former name of ``patch_mean`` (the same box mean), accepted for one release
_OLD_PATCH = "patch"


def _map(uncertainty: Any) -> np.ndarray:
    u = to_numpy(uncertainty, "uncertainty")
    if u.ndim not in (2, 3):
        raise ValueError(f"uncertainty must be one case's 2D or 3D map (*spatial), got shape {u.shape}")
    if u.size == 0:  # here, with the map's shape: aggregate named its (1, 1, *spatial) batch (found by hostile testing)
        raise ValueError(f"uncertainty is empty (shape {u.shape})")
    return u


def _seg(seg: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The predicted label map of :func:`case_scores`: the map's shape, finite non-negative integral labels."""
    s = to_numpy(seg, "seg")
    if s.shape != shape:
        raise ValueError(f"seg must have the shape of uncertainty {shape}, got {s.shape}")
    if s.dtype == np.bool_:
        return s
    if not np.issubdtype(s.dtype, np.number) or np.issubdtype(s.dtype, np.complexfloating):
        raise TypeError(f"seg must be a label map of integers, got dtype {s.dtype}")
    if np.issubdtype(s.dtype, np.floating):  # a NaN or 0.5 is no label (NaN > 0 would count it as background)
        if not bool(np.isfinite(s).all()):
            raise ValueError(f"seg contains {int((~np.isfinite(s)).sum())} non-finite value(s) (NaN or inf)")
        if not bool((s == np.round(s)).all()):
            raise ValueError("seg must hold integer labels, got non-integral values")
    if s.size and s.dtype.kind in "if" and s.min() < 0:
        raise ValueError(f"seg must hold non-negative labels, got minimum {s.min()}")
    return s


def case_scores(
    uncertainty: ArrayLike, seg: ArrayLike, patch_size: int | tuple[int, ...] = PATCH_SIZE
) -> dict[str, float]:
    """The case scores of one uncertainty map (module docstring): ``{"mean", "fg_mean", "patch_mean"}``.

    Args:
        uncertainty: one case's map ``(*spatial)``, 2D or 3D, numpy or torch (larger = less confident).
        seg: the predicted label map of the same shape (foreground = ``seg > 0``).
        patch_size: box size in voxels for ``patch_mean`` (int or one per axis).

    Returns:
        float64 Python floats; ``fg_mean`` is NaN with a ``UserWarning`` for an empty prediction.

    Raises:
        ValueError: naming ``uncertainty`` for a map that is not 2D or 3D, empty or not finite; naming ``seg`` for
            another shape, or labels that are negative, non-integral or not finite.
        TypeError: naming ``seg`` for a label map that is not numeric (bool masks are accepted).
    """
    return _scores(uncertainty, seg, patch_size, warn=True)


def case_scores_core(
    uncertainty: ArrayLike, seg: ArrayLike, patch_size: int | tuple[int, ...] = PATCH_SIZE
) -> dict[str, float]:
    """:func:`case_scores` without its warning: ``fg_mean`` of an empty prediction is NaN without a word.

    For callers that record the NaN as such (``nnunet-predict``'s scores table: null) or say it in their own
    words, when it is the score they use (not at all for another score of the map); in earlier versions they ignored
    every ``UserWarning`` inside ``warnings.catch_warnings()``, a process-wide filter. The same arguments, checks and
    numbers as :func:`case_scores`.

    Args:
        uncertainty: as :func:`case_scores`.
        seg: as :func:`case_scores`.
        patch_size: as :func:`case_scores`.

    Returns:
        ``{"mean", "fg_mean", "patch_mean"}`` as float64 Python floats; ``fg_mean`` is NaN for an empty prediction.

    Example:
        >>> import numpy as np
        >>> case_scores_core(np.full((2, 2), 0.5), np.zeros((2, 2), int), patch_size=1)  # empty: no warning
        {'mean': 0.5, 'fg_mean': nan, 'patch_mean': 0.5}
    """
    return _scores(uncertainty, seg, patch_size, warn=False)


def _scores(uncertainty: ArrayLike, seg: ArrayLike, patch_size: int | tuple[int, ...], warn: bool) -> dict[str, float]:
    """The scores of :func:`case_scores`; with ``warn`` an empty prediction's ``fg_mean`` warns (``aggregate``'s)."""
    u = _map(uncertainty)
    s = _seg(seg, u.shape)
    u5 = u[None, None]
    fg = (s > 0)[None, None]
    mean = float(aggregate(u5, "mean")[0])
    return {
        "mean": mean,
        # an empty foreground: aggregate's NaN, with its warning only when asked (it warns of nothing else here)
        "fg_mean": float(aggregate(u5, "mean", mask=fg)[0]) if warn or fg.any() else float("nan"),
        "patch_mean": float(aggregate(u5, "patch_mean", patch_size=patch_size)[0]),
    }


def case_score_columns(
    maps: Mapping[str, ArrayLike], seg: ArrayLike, patch_size: int | tuple[int, ...] = PATCH_SIZE, warn: bool = True
) -> dict[str, float]:
    """:func:`case_scores` of every map as ``{"<measure>_<score>": value}`` (map order, then :data:`CASE_SCORES`
    order): the score columns of ``metrics.csv``.

    Args:
        maps: ``{measure: map}``, each map as :func:`case_scores` takes it.
        seg: the predicted label map (foreground = ``seg > 0``).
        patch_size: box size in voxels of ``patch_mean``.
        warn: whether ``fg_mean`` of an empty prediction warns (:func:`case_scores`) or is NaN without a word
            (:func:`case_scores_core`, for a caller that says it in its own words).

    Returns:
        ``{column: score}`` (floats; NaN where a score is undefined).

    Example:
        >>> import numpy as np
        >>> case_score_columns({"predictive_entropy": np.full((2, 2), 0.5)}, np.ones((2, 2), int), patch_size=1)
        {'predictive_entropy_mean': 0.5, 'predictive_entropy_fg_mean': 0.5, 'predictive_entropy_patch_mean': 0.5}
    """
    warn = check_bool(warn, "warn")
    score = case_scores if warn else case_scores_core
    out: dict[str, float] = {}
    for name, u in maps.items():
        out.update({f"{name}_{k}": v for k, v in score(u, seg, patch_size).items()})
    return out


def region_suffix(name: str) -> str:
    """The column suffix of a region (``dice_<suffix>``, ``<measure>_<score>_<suffix>``).

    Letters and digits of every script are kept, as :func:`~monai_unc.evaluation.config.slug` keeps them for class
    columns, so that regions named in a hospital's own language (``"水肿"``, ``"Отёк"``) name distinct columns; an
    ASCII name gives the column of earlier versions (which kept ASCII letters and digits only, refusing a name without
    any and dropping the other letters: ``"Ödem"`` gave ``dem``).

    Args:
        name: the region name.

    Returns:
        The region name NFKC-normalised (full-width ``"Ｔ２"`` as ``"T2"``), with every run of characters other than
        letters, digits and their marks (accents, vowel signs) replaced by ``_`` and leading / trailing ``_``
        stripped, case kept (``WT`` -> ``dice_WT``, ``whole tumour`` -> ``dice_whole_tumour``, ``水肿 2`` ->
        ``dice_水肿_2``).

    Raises:
        ValueError: ``name`` has no letter or digit (e.g. ``"--"``).

    Example:
        >>> region_suffix("WT"), region_suffix("whole tumour"), region_suffix("Ödem"), region_suffix("水肿 2")
        ('WT', 'whole_tumour', 'Ödem', '水肿_2')
    """
    text = unicodedata.normalize("NFKC", str(name))
    kept = "".join(c if c != "_" and (c.isalnum() or unicodedata.category(c).startswith("M")) else "_" for c in text)
    out = re.sub(r"_+", "_", kept).strip("_")
    if not out:
        raise ValueError(f"regions: the region name {name!r} has no letter or digit to name its columns: give it a "
                         "name with some, e.g. 'edema'")
    return out


def region_suffixes(names: Iterable[str]) -> list[str]:
    """The column suffixes of regions (:func:`region_suffix`), refused when two regions would share their columns.

    The one naming of per-region score columns: ``monai-unc evaluate`` (``metrics.csv``) and ``nnunet-predict`` (its
    scores table) both write ``<measure>_<score>_<suffix>``, so the same region has the same column in both.

    Args:
        names: the region names, in channel order.

    Returns:
        One suffix per region, in order.

    Raises:
        ValueError: a name without a letter or digit, or two names with the same suffix (e.g. ``"whole tumor"``
            and ``"whole-tumor"``, or ``"T2"`` and the full-width ``"Ｔ２"``).

    Example:
        >>> region_suffixes(["whole tumor", "TC"])
        ['whole_tumor', 'TC']
    """
    names = [str(n) for n in names]
    suffixes = [region_suffix(n) for n in names]
    if len(set(suffixes)) != len(suffixes):
        raise ValueError(f"regions: the region names {names} give the same column names {suffixes}")
    return suffixes


def _renamed(name: str, columns: Iterable[str]) -> str | None:
    """The current name of a deprecated score column ``<m>_patch`` when ``<m>_patch_mean`` is a column."""
    cols = set(columns)
    suffix = f"_{_OLD_PATCH}"
    if name.endswith(suffix) and f"{name}_mean" in cols:
        return f"{name}_mean"
    return None


def resolve_score_column(name: str, columns: Iterable[str], warn: bool = True) -> str:
    """``name`` if it is one of ``columns``; else the current name of a former one, with a ``DeprecationWarning`` when
    ``warn``: a measure's former name (``max_softmax_<score>`` -> ``one_minus_max_prob_<score>``,
    :data:`~monai_unc.keys.DEPRECATED_MEASURES`) and the former ``<m>_patch`` -> ``<m>_patch_mean`` (the same box
    mean); otherwise ``name`` unchanged (the caller reports the unknown column).

    Args:
        name: the score column asked for (an option's value).
        columns: the columns that exist.
        warn: whether a renamed column warns.

    Returns:
        The column to read.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     resolve_score_column("max_softmax_fg_mean", ["one_minus_max_prob_fg_mean"])
        'one_minus_max_prob_fg_mean'
    """
    cols = list(columns)
    if name in cols:
        return name
    # rows of a version that wrote both former names (<max_softmax>_patch), upgraded by upgrade_row, keep the former
    # measure name: <max_softmax>_patch_mean (found by hostile testing: the measure rename alone gave a missing column)
    kept = _renamed(name, cols)
    if kept is not None:
        if warn:
            warnings.warn(f"score column {name!r} is deprecated, use {kept!r} (the same box mean); the old name will "
                          "be removed in the next release", DeprecationWarning, stacklevel=3)
        return kept
    for old, current in DEPRECATED_MEASURES.items():
        if name.startswith(f"{old}_"):
            renamed = f"{current}_{name[len(old) + 1:]}"
            if warn:
                warnings.warn(f"score column {name!r} is deprecated: the map is now named {current}; using "
                              f"{renamed!r}", DeprecationWarning, stacklevel=3)
            name = renamed
            if name in cols:
                return name
            break
    new = _renamed(name, cols)
    if new is None:
        return name
    if warn:
        warnings.warn(f"score column {name!r} is deprecated, use {new!r} (the same box mean); the old name will be "
                      "removed in the next release", DeprecationWarning, stacklevel=3)
    return new


def upgrade_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A metric row with the former score column names renamed (``<m>_patch`` -> ``<m>_patch_mean`` for every
    measure ``m`` whose ``<m>_mean`` and ``<m>_fg_mean`` are in the row); key order is kept."""
    keys = set(row)
    out: dict[str, Any] = {}
    for k, v in row.items():
        m = k[: -len(_OLD_PATCH) - 1] if k.endswith(f"_{_OLD_PATCH}") else None
        if m and f"{m}_mean" in keys and f"{m}_fg_mean" in keys and f"{k}_mean" not in keys:
            out[f"{k}_mean"] = v
        else:
            out[k] = v
    return out
