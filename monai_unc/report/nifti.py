"""NIfTI writing with atomic renames: an interrupted run never leaves a half-written file."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import torch

__all__ = ["save_nifti", "atomic_write_text", "json_safe"]


def _partial_name(path: Path) -> Path:
    name = path.name
    for ext in (".nii.gz", ".nii"):
        if name.endswith(ext):
            return path.with_name(f".{name[: -len(ext)]}.partial{ext}")
    raise ValueError(f"path must end in .nii or .nii.gz, got {path}")


def save_nifti(data: np.ndarray | torch.Tensor, affine: np.ndarray, path: str | os.PathLike) -> Path:
    """Write a 3D map (or ``(1, X, Y, Z)`` / ``(1, 1, X, Y, Z)``) with ``affine`` (voxel -> world, mm).

    The file is written under a temporary name in the same folder and renamed into place.
    Integer arrays are stored as int16/int32, floating arrays as float32.
    """
    if isinstance(data, torch.Tensor):
        data = (data.as_tensor() if hasattr(data, "as_tensor") else data).detach().cpu().numpy()
    arr = np.asarray(data)
    while arr.ndim > 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 3:
        raise ValueError(f"data must be a 3D volume (after dropping leading singleton axes), got shape {arr.shape}")
    affine = np.asarray(affine, dtype=np.float64)
    if affine.shape != (4, 4):
        raise ValueError(f"affine must be 4x4, got {affine.shape}")
    if np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool:
        arr = arr.astype(np.int16 if arr.max(initial=0) < 2**15 else np.int32)
    else:
        arr = arr.astype(np.float32)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _partial_name(path)
    nib.save(nib.Nifti1Image(arr, affine), str(tmp))
    os.replace(tmp, path)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write text to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def json_safe(x: Any, digits: int | None = None) -> Any:
    """``x`` with plain Python types only, for ``json.dumps``: NaN/inf -> None, numpy scalars and arrays -> Python
    numbers and lists, tuples -> lists; floats rounded to ``digits`` significant digits when given."""
    if isinstance(x, dict):
        return {(k.item() if isinstance(k, np.generic) else k): json_safe(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v, digits) for v in x]
    if isinstance(x, np.ndarray):
        return json_safe(x.tolist(), digits)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (np.floating, float)):
        f = float(x)
        if not math.isfinite(f):
            return None
        return float(f"{f:.{digits}g}") if digits is not None else f
    if isinstance(x, np.integer):
        return int(x)
    return x
