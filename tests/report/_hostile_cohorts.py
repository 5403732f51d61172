"""Small cohorts written case by case for the hostile-number tests of the report pages.

Each case is ``(probabilities (C, X, Y, Z), label map (X, Y, Z))``; :func:`write_cases` writes the monai-unc layout
(``predictions/<case>_probs.nii.gz`` and ``<case>_seg.nii.gz``, ``labels/<case>.nii.gz``, ``images/<case>.nii.gz``)
and, with ``shifts``, a ``shifts.csv``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import nibabel as nib
import numpy as np

from monai_unc import cli

SHAPE = (12, 12, 12)


def ball(radius: float, shape: tuple[int, int, int] = SHAPE) -> np.ndarray:
    """A centred ball of ``radius`` voxels (int label map)."""
    g = np.indices(shape).astype(float) - (np.array(shape, float) / 2).reshape(3, 1, 1, 1)
    return ((g**2).sum(0) <= radius * radius).astype(np.int64)


def binary_probs(fg: np.ndarray) -> np.ndarray:
    """``(2, X, Y, Z)`` probabilities of a foreground probability map."""
    return np.stack([1.0 - fg, fg]).astype(np.float32)


def write_cases(root: Path, cases: Mapping[str, tuple[np.ndarray, np.ndarray]],
                shifts: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Write the cases under ``root`` (module docstring).

    Returns:
        ``{"labels", "predictions", "images", "shifts" (or None)}`` folders and file.
    """
    dirs = {k: root / k for k in ("labels", "predictions", "images")}
    for d in dirs.values():
        d.mkdir(parents=True)
    affine = np.eye(4)
    for cid, (p, y) in cases.items():
        p = np.asarray(p, np.float32)
        nib.save(nib.Nifti1Image(np.moveaxis(p, 0, -1), affine), dirs["predictions"] / f"{cid}_probs.nii.gz")
        nib.save(nib.Nifti1Image(p.argmax(0).astype(np.int16), affine), dirs["predictions"] / f"{cid}_seg.nii.gz")
        nib.save(nib.Nifti1Image(y.astype(np.int16), affine), dirs["labels"] / f"{cid}.nii.gz")
        image = (100.0 * y + np.random.default_rng(0).normal(0, 5, y.shape)).astype(np.float32)
        nib.save(nib.Nifti1Image(image, affine), dirs["images"] / f"{cid}.nii.gz")
    out: dict[str, Path] = {**dirs, "shifts": None}
    if shifts is not None:
        out["shifts"] = root / "shifts.csv"
        out["shifts"].write_text("case,shift\n" + "".join(f"{k},{v}\n" for k, v in shifts.items()))
    return out


def evaluate(data: Mapping[str, Path], output: Path, *options: str) -> Path:
    """``monai-unc evaluate`` of written cases into ``output`` (in this process); returns ``output``."""
    argv = ["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "--images", str(data["images"]),
            "-o", str(output), "--quiet", *options]
    if data.get("shifts") is not None:
        argv += ["--shifts", str(data["shifts"])]
    assert cli.main(argv) == 0
    return output


def small_score_cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Ten confident cases whose scores span 3e-6 .. 3e-3; the three least confident miss half the foreground."""
    lab = ball(4)
    cases = {}
    for i, eps in enumerate([2e-7, 5e-7, 1e-6, 3e-6, 6e-6, 1e-5, 2e-5, 4e-5, 1e-4, 3e-4]):
        fg = np.where(lab == 1, 1 - eps, eps)
        if i >= 7:
            fg[: SHAPE[0] // 2] = eps  # a failed case: half the foreground missed
        cases[f"c{i:02d}"] = (binary_probs(fg), lab)
    return cases
