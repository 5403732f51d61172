"""Real example data: the MNI ICBM152 2009 template with grey- and white-matter probability maps.

``nilearn`` (a dependency of monai-unc) ships the template T1 and the tissue probability maps, so nothing is
downloaded at run time. The example is one (average) brain; the protocol that keeps training and evaluation
apart (docs/data.md) is:

- train on the left hemisphere (voxels with world x < 0, left of the mid-sagittal plane), with augmentation
  (intensity, noise, bias field, small affine);
- report Dice and uncertainty on the right hemisphere (world x >= 0);
- the reference ambiguity map is ``sum_c p_c (1 - p_c)`` of the population tissue probabilities.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["TISSUE_CLASSES", "load_mni152_tissue", "hemisphere_masks", "tissue_ambiguity"]

#: class index -> name of the 3-class tissue task
TISSUE_CLASSES = ("background+CSF", "grey matter", "white matter")


def _nilearn_datasets():
    try:
        from nilearn import datasets
    except ImportError as e:
        if (e.name or "").split(".")[0] == "nilearn":  # missing only after `pip install --no-deps` (tests/cli)
            raise ImportError(
                "the MNI152 example needs nilearn, a dependency of monai-unc that is not installed: "
                "pip install 'nilearn>=0.10.1'"
            ) from e
        # installed, but its import failed: nilearn 0.10.0 imports pkg_resources, which setuptools >= 81 and the
        # environments without setuptools (uv, Python >= 3.12) lack (found by testing the declared lower bounds)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ImportError(
            f"the MNI152 example needs nilearn, which is installed but does not import ({first}): "
            "pip install --upgrade 'nilearn>=0.10.1'"
        ) from e
    return datasets


def tissue_ambiguity(probs: np.ndarray) -> np.ndarray:
    """Reference ambiguity ``sum_c p_c (1 - p_c)`` of class probabilities (the Gini impurity of the tissue classes).

    Args:
        probs: class probabilities ``(C, *spatial)``.

    Returns:
        ``(1, *spatial)``: 0 where one class is certain, at most ``1 - 1/C``.

    Example:
        >>> tissue_ambiguity(np.array([[0.5, 1.0], [0.5, 0.0]]))
        array([[0.5, 0. ]])
    """
    return (probs * (1.0 - probs)).sum(axis=0, keepdims=True)


def hemisphere_masks(affine: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks of the left (world x < 0) and right (world x >= 0) hemispheres.

    Args:
        affine: ``(4, 4)`` voxel -> world matrix (mm); world x is the left-right axis, 0 on the mid-sagittal
            plane.
        shape: the 3D volume shape ``(X, Y, Z)``.

    Returns:
        ``(left, right)``, each a bool ``(X, Y, Z)`` array; they partition the volume.

    Raises:
        ValueError: ``affine`` is not 4x4 or ``shape`` is not 3D.

    Example:
        >>> affine = np.eye(4); affine[0, 3] = -2.0  # world x = i - 2
        >>> left, right = hemisphere_masks(affine, (4, 1, 1))
        >>> left.ravel().tolist(), right.ravel().tolist()
        ([True, True, False, False], [False, False, True, True])
    """
    affine = np.asarray(affine, dtype=float)
    if affine.shape != (4, 4):
        raise ValueError(f"affine must be 4x4, got {affine.shape}")
    if len(shape) != 3:
        raise ValueError(f"shape must be 3D, got {shape}")
    idx = np.indices(shape, dtype=float).reshape(3, -1)
    world_x = (affine[0, :3] @ idx + affine[0, 3]).reshape(shape)
    left = world_x < 0
    return left, ~left


def load_mni152_tissue(resolution: int = 2) -> dict:
    """Load the MNI152 2009 template as a 3-class tissue segmentation example.

    The template and the tissue maps come with ``nilearn`` (a dependency of monai-unc); nothing is downloaded.
    Probabilities above 1 in total (GM + WM) are renormalised. The arrays are computed once per process (those of
    the last resolution asked for are kept) and every call returns copies of them, which the caller may change.

    Args:
        resolution: 1 or 2 (mm isotropic); 2 gives a 99 x 117 x 95 volume.

    Returns:
        A dict with ``image`` ``(1, X, Y, Z)`` float32 T1 scaled to [0, 1]; ``label`` ``(1, X, Y, Z)`` int64: 0
        background + CSF, 1 grey matter, 2 white matter (argmax of ``probs``); ``probs`` ``(3, X, Y, Z)`` float32
        tissue probabilities (background = 1 - GM - WM, clipped at 0); ``ambiguity`` ``(1, X, Y, Z)`` float32
        reference map ``sum_c p_c (1 - p_c)``; ``affine`` ``(4, 4)`` float64 voxel -> world (mm, RAS); ``spacing``
        tuple of mm; ``left``, ``right`` ``(X, Y, Z)`` bool hemisphere masks (training / evaluation split).

    Raises:
        ValueError: ``resolution`` is not 1 or 2.
        ImportError: without nilearn (an install with ``--no-deps``), or with a nilearn that does not import (0.10.0
            without setuptools' ``pkg_resources``); the message says which and what to install.
    """
    if resolution not in (1, 2):
        raise ValueError(f"resolution must be 1 or 2 (mm), got {resolution}")
    datasets = _nilearn_datasets()  # every call, cached or not: without a working nilearn it says what to install
    with _TISSUE_LOCK:  # threads asking for either resolution at once: one load each, never a half-switched cache
        kept = _TISSUE_CACHE.get(resolution)
        if kept is None:
            kept = _load_tissue(datasets, resolution)
            _TISSUE_CACHE.clear()  # the last resolution only (about 30 MB at 2 mm, 250 MB at 1 mm)
            _TISSUE_CACHE[resolution] = kept
    # copies: a caller may change its arrays in place
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kept.items()}


#: :func:`load_mni152_tissue`'s arrays of the last resolution asked for: nilearn resamples the tissue templates at
#: every load (about 2 s of CPU at 2 mm), and the training, the cohorts and the example exports each load them
_TISSUE_CACHE: dict[int, dict] = {}
_TISSUE_LOCK = threading.Lock()


def _load_tissue(datasets, resolution: int) -> dict:
    """:func:`load_mni152_tissue` computed (``datasets``: nilearn's ``datasets`` module)."""
    t1 = datasets.load_mni152_template(resolution=resolution)
    gm = datasets.load_mni152_gm_template(resolution=resolution)
    wm = datasets.load_mni152_wm_template(resolution=resolution)
    image = np.asarray(t1.get_fdata(), dtype=np.float32)
    image = np.clip(image, 0, None) / max(float(image.max()), 1e-6)
    p_gm = np.clip(np.asarray(gm.get_fdata(), dtype=np.float32), 0, 1)
    p_wm = np.clip(np.asarray(wm.get_fdata(), dtype=np.float32), 0, 1)
    total = p_gm + p_wm
    over = total > 1
    p_gm[over] /= total[over]
    p_wm[over] /= total[over]
    p_bg = np.clip(1.0 - p_gm - p_wm, 0, 1)
    probs = np.stack([p_bg, p_gm, p_wm]).astype(np.float32)
    probs /= probs.sum(axis=0, keepdims=True)
    label = probs.argmax(axis=0)[None].astype(np.int64)
    affine = np.asarray(t1.affine, dtype=np.float64)
    left, right = hemisphere_masks(affine, image.shape)
    spacing = tuple(float(s) for s in np.sqrt((affine[:3, :3] ** 2).sum(axis=0)))
    return {
        "image": image[None],
        "label": label,
        "probs": probs,
        "ambiguity": tissue_ambiguity(probs).astype(np.float32),
        "affine": affine,
        "spacing": spacing,
        "left": left,
        "right": right,
    }
