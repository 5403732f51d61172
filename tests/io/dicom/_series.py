"""DICOM test series generated from the shipped MNI152 example (pydicom), and the ``dciodvfy`` check."""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache

import numpy as np
import pytest


@lru_cache(maxsize=1)
def mni_small():
    """The MNI152 2 mm example cut to a small box: image (X, Y, Z) in [0, 1], label (X, Y, Z), probs (3, X, Y, Z)."""
    from monai_unc.data import load_mni152_tissue

    d = load_mni152_tissue(2)
    box = (slice(30, 70, 2), slice(40, 80, 2), slice(35, 59, 2))  # 20 x 20 x 12
    return d["image"][0][box], d["label"][0][box], d["probs"][(slice(None), *box)]


def rotation(axis: int, degrees: float) -> np.ndarray:
    """A 3 x 3 rotation about one world axis."""
    t = np.deg2rad(degrees)
    c, s = np.cos(t), np.sin(t)
    i, j = [a for a in range(3) if a != axis]
    r = np.eye(3)
    r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r


#: name -> (modality, RAS affine, shuffled file order): axial, oblique, anisotropic, reversed slice direction
GEOMETRIES = {
    "axial_ct": ("CT", np.diag([1.0, 1.0, 1.0, 1.0]), None),
    "oblique_mr": ("MR", np.vstack([np.hstack([rotation(0, 20) @ rotation(2, 15) @ np.diag([0.9, 0.9, 2.0]),
                                               [[10.0], [-20.0], [5.0]]]), [0, 0, 0, 1]]), 3),
    "anisotropic_ct": ("CT", np.diag([0.7, 0.6, 3.0, 1.0]), 7),
    "reversed_mr": ("MR", np.diag([-1.0, 1.2, 2.5, 1.0]), 11),
}


def series_values(image: np.ndarray, modality: str) -> np.ndarray:
    """Image values as the series stores them: Hounsfield units for CT (-1000 .. 1000), integers for MR."""
    return image * 2000.0 - 1000.0 if modality == "CT" else np.round(image * 4000.0)


def make_series(folder, name: str, **kwargs):
    """Write the MNI152 box as the series ``name`` of :data:`GEOMETRIES`; returns (values, affine, files)."""
    from monai_unc.io.dicom import write_series

    modality, affine, seed = GEOMETRIES[name]
    image = mni_small()[0]
    values = series_values(image, modality)
    files = write_series(values, affine, folder, modality=modality, shuffle_seed=seed, **kwargs)
    return values, affine, files


def dciodvfy_errors(path) -> list[str]:
    """The ``Error`` lines of ``dciodvfy`` on one file (skips the test when dicom3tools is not installed)."""
    exe = shutil.which("dciodvfy")
    if exe is None:
        pytest.skip("dciodvfy is not installed (CI installs the Debian package 'dicom3tools')")
    r = subprocess.run([exe, str(path)], capture_output=True, text=True, timeout=120)
    return [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("Error")]
