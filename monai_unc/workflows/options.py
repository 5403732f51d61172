"""The values of ``monai-unc infer``'s options that are checked without MONAI, and the name of its failed-cases file.

The method sources (:data:`METHOD_TOKENS`, :func:`method_tokens`: defined in :mod:`monai_unc.keys`, which the file
layer reads too, and re-exported here), the window sizes of ``--roi``
(:func:`normalize_roi`, :func:`check_roi`), the modes of ``--intensity`` (:data:`INTENSITY_MODES`) and
:data:`FAILURES_FILE` are needed by commands that only read and compute (``evaluate`` lists the files it may not
overwrite, a rule records the method of its predictions): they live here, apart from the inferer
(:mod:`monai_unc.workflows.factory`) and the prediction loop (:mod:`monai_unc.workflows.infer`), which re-export them,
so that those commands start without importing MONAI.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..keys import DROPOUT_TOKENS, METHOD_TOKENS, method_tokens

__all__ = [
    "METHOD_TOKENS",
    "SHARED_PASS_TOKENS",
    "INTENSITY_MODES",
    "FAILURES_FILE",
    "method_tokens",
    "check_roi",
    "normalize_roi",
]

#: the sources whose samples share passes (``share_passes``, ``--no-share-passes``, ``--sample-batch-size``):
#: those that sample dropout masks, :data:`monai_unc.keys.DROPOUT_TOKENS` (the same object)
SHARED_PASS_TOKENS = DROPOUT_TOKENS

#: the intensity normalisations of ``--intensity`` (:func:`monai_unc.workflows.infer.normalize_intensity`)
INTENSITY_MODES = ("none", "max", "minmax", "zscore")

#: written by rank 0 of :func:`~monai_unc.workflows.infer.run_infer` (and of the other cohort commands) when cases
#: failed (removed by a run without failures)
FAILURES_FILE = "failures.json"


def known_method_tokens(method: str) -> list[str] | None:
    """The source names of a ``+``-joined ``--method`` string when each part is a known name, else None.

    Unlike :func:`method_tokens` nothing is dropped: an empty part (``"mcdropout++tta"``, a trailing ``+``) or a
    name outside :data:`METHOD_TOKENS` makes the string malformed. Duplicates and combinations are the caller's to
    check.

    Args:
        method: e.g. ``"MCDropout+tta"``.

    Returns:
        The lower-cased names in order, or None.

    Example:
        >>> known_method_tokens("MCDropout + tta"), known_method_tokens("mcdropout++tta"), known_method_tokens("x")
        (['mcdropout', 'tta'], None, None)
    """
    tokens = [t.strip().lower() for t in method.split("+")]
    return tokens if all(t in METHOD_TOKENS for t in tokens) else None


def check_roi(roi: int | Sequence[int] | None, spatial_dims: int | None, what: str = "the network") -> None:
    """Check that a per-axis window size has as many axes as the input.

    One size (an int or a one-element sequence) fits any dimensionality.

    Args:
        roi: the ``--roi`` value: None, one size or one size per axis.
        spatial_dims: the number of spatial axes of the network or of the images (None: not known, nothing
            checked).
        what: what ``spatial_dims`` belongs to, for the message.

    Raises:
        ValueError: naming ``--roi``, when the number of sizes is neither 1 nor ``spatial_dims``.

    Example:
        >>> check_roi([64, 64, 32], 3), check_roi(64, 2)
        (None, None)
    """
    if roi is None or spatial_dims is None or isinstance(roi, (int, np.integer)):
        return
    sizes = tuple(int(r) for r in roi)
    if len(sizes) not in (1, spatial_dims):
        raise ValueError(f"--roi gives {len(sizes)} sizes {sizes} but {what} takes {spatial_dims}D input: give one "
                         f"size for every axis or {spatial_dims} sizes")


def normalize_roi(roi: int | Sequence[int] | None) -> int | list[int] | None:
    """A ``--roi`` value as the workflows take it.

    One size (an int, or a one-element sequence as ``--roi 64`` gives) becomes an int, which fits any
    dimensionality; several sizes become a list of ints, one per axis.

    Args:
        roi: None, one size, or a sequence of sizes.

    Returns:
        None, an int or a list of ints (not checked: :func:`check_roi` and
        :func:`~monai_unc.workflows.factory.build_inferer` do that).

    Example:
        >>> normalize_roi([64]), normalize_roi((64, 64, 32)), normalize_roi(None)
        (64, [64, 64, 32], None)
    """
    if roi is None or isinstance(roi, (int, np.integer)):
        return None if roi is None else int(roi)
    sizes = [int(r) for r in roi]
    return sizes[0] if len(sizes) == 1 else sizes
