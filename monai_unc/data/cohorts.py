"""Every example cohort writer: the demo cohort, the synthetic toy cohort and the example data sets as NIfTI.

The synthetic toy cohort is for the command line; the example data sets are NIfTI folders that MONAI bundles
read (``bundles/*/configs``).

:func:`make_demo_cohort` (``monai-unc demo``) and :func:`write_toy_cohort` write flat ``images/``, ``labels/``
folders and a ``shifts.csv``; :func:`export_mni152_cases` and :func:`export_toy_cases` write the bundle layout below.

Layout of a folder written here::

    dataset.json          provenance, protocol, classes and the case list (paths relative to the folder)
    images/<case>.nii.gz  image (float32)
    labels/<case>.nii.gz  reference label map (uint8)
    masks/<case>.nii.gz   evaluation region (uint8, 1 inside)      -- MNI152 only: the held-out right hemisphere
    raters/<case>.nii.gz  one rater per volume of a 4D image (uint8) -- toy set only

``dataset.json`` ``"cases"`` is a list of ``{"case", "image", "label", "mask" | "raters", "shift", "severity"}``:
a MONAI datalist once the paths are joined with the folder (:func:`load_datalist`).

The writers refuse a non-empty folder that they did not write (no ``dataset.json`` of theirs), so pointing them at
a user's data never overwrites it; a folder they wrote before is left as is unless ``overwrite=True``.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
from scipy.ndimage import gaussian_filter

from .._utils import check_seed
from ..io import atomic_write_json, atomic_write_text, read_json_or_none, save_nifti, save_nifti_image, write_csv
from ..measures import entropy
from .mni152 import TISSUE_CLASSES, load_mni152_tissue
from .perturbations import MAX_SEVERITY, PERTURBATIONS, fixed_perturbation, make_mni152_cohort
from .synthetic import SHIFTS, make_toy_dataset

__all__ = [
    "DEMO_SHIFTS",
    "DEMO_CALIBRATION_SHIFTS",
    "DEMO_NEW_SHIFTS",
    "DEMO_RECORD",
    "make_demo_cohort",
    "write_toy_cohort",
    "MANIFEST",
    "export_mni152_cases",
    "export_toy_cases",
    "load_datalist",
    "left_hemisphere_sample",
]

#: name of the manifest file written into every exported folder
MANIFEST = "dataset.json"
_WRITER = "monai_unc.data.export"  # the module's former name, kept: folders written before stay recognised


def _check_folder(folder: Path, overwrite: bool) -> bool:
    """True if the folder must be (re)written; raises if it holds data this module did not write."""
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            ours = json.loads(manifest.read_text()).get("writer") == _WRITER
        except (OSError, ValueError):
            ours = False
        if not ours:
            raise FileExistsError(f"{folder} holds a {MANIFEST} not written by {_WRITER}; refusing to write there")
        return overwrite
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(
            f"{folder} is not empty and was not written by {_WRITER}; choose an empty or new folder"
        )
    return True


def _save(arr: np.ndarray, affine: np.ndarray, path: Path) -> None:
    img = nib.Nifti1Image(arr, affine)
    img.set_qform(affine, code=1)
    img.set_sform(affine, code=1)
    save_nifti_image(img, path)


def _save_plain(arr: np.ndarray, affine: np.ndarray, path: Path) -> None:
    """``nib.save`` of ``Nifti1Image(arr, affine)`` (header as nibabel sets it) through a temporary name."""
    save_nifti_image(nib.Nifti1Image(arr, affine), path)


def _write_manifest(folder: Path, content: dict[str, Any]) -> Path:
    content = {"writer": _WRITER, **content}
    return atomic_write_text(folder / MANIFEST, json.dumps(content, indent=2) + "\n")


def export_mni152_cases(
    folder: str | os.PathLike,
    n_cases: int = 6,
    seed: int = 0,
    kinds: Sequence[str] = PERTURBATIONS,
    severity_range: tuple[float, float] = (1.0, MAX_SEVERITY),
    resolution: int = 2,
    overwrite: bool = False,
) -> Path:
    """Export the MNI152 tissue example (docs/data.md) to NIfTI in the layout of the module docstring.

    Case 0 is the template itself (shift ``"none"``); cases 1.. are perturbed copies from
    :func:`~monai_unc.data.make_mni152_cohort` (noise, bias field, contrast, blur, resolution loss, cycled,
    severity drawn from ``severity_range``), with the shift and severity recorded in the manifest. Images are the
    T1 scaled to [0, 1] (perturbed copies may leave that range), labels the 3-class tissue map (0 background + CSF,
    1 grey matter, 2 white matter), masks the right hemisphere (world x >= 0): the half never seen in training,
    where metrics are reported. Every file carries the template's affine (2 mm RAS for ``resolution=2``). Needs
    ``nilearn``.

    Args:
        folder: the folder to write (new, empty, or written by this module before).
        n_cases: the number of cases.
        seed: seed of the perturbations.
        kinds: the perturbations to cycle.
        severity_range: ``(low, high)`` severities within [0, 5].
        resolution: template resolution in mm (1 or 2).
        overwrite: rewrite a folder this module wrote before (otherwise it is left as is).

    Returns:
        The path of ``dataset.json``.

    Raises:
        FileExistsError: the folder holds data this module did not write.
        TypeError, ValueError: ``seed`` is not an integer in ``[0, 2**64)`` (before anything is written).
    """
    seed = check_seed(seed, optional=False)  # a numpy integer seed wrote the images, then failed in the manifest
    folder = Path(folder)
    if not _check_folder(folder, overwrite):
        return folder / MANIFEST
    cases = make_mni152_cohort(
        n_cases, seed=seed, kinds=kinds, severity_range=severity_range, include_clean=True, resolution=resolution
    )
    data = load_mni152_tissue(resolution=resolution)
    affine = data["affine"]
    rows = []
    for i, c in enumerate(cases):
        name = f"mni152_{i:02d}_{c['shift']}"
        _save(c["image"][0].astype(np.float32), affine, folder / "images" / f"{name}.nii.gz")
        _save(c["label"][0].astype(np.uint8), affine, folder / "labels" / f"{name}.nii.gz")
        _save(c["right"].astype(np.uint8), affine, folder / "masks" / f"{name}.nii.gz")
        rows.append(
            {
                "case": name,
                "image": f"images/{name}.nii.gz",
                "label": f"labels/{name}.nii.gz",
                "mask": f"masks/{name}.nii.gz",
                "shift": c["shift"],
                "severity": round(float(c["severity"]), 4),
            }
        )
    return _write_manifest(
        folder,
        {
            "name": "MNI152 2009 tissue (nilearn), 3 classes",
            "source": "MNI ICBM152 non-linear 2009 template (T1, grey/white-matter probability maps) as shipped by "
            "nilearn (load_mni152_template / load_mni152_gm_template / load_mni152_wm_template)",
            "protocol": "label = argmax of (background + CSF, GM, WM) probabilities; the example network was "
            "trained on the left hemisphere (world x < 0); masks/ marks the held-out right hemisphere (world x >= 0) "
            "where metrics are reported; perturbed copies (shift != 'none') are realistic shifts of the same brain",
            "classes": {str(k): v for k, v in enumerate(TISSUE_CLASSES)},
            "resolution_mm": resolution,
            "seed": seed,
            "cases": rows,
        },
    )


def export_toy_cases(
    folder: str | os.PathLike,
    n_cases: int = 16,
    shape: Sequence[int] = (32, 32, 32),
    n_raters: int = 3,
    shifts: Sequence[str] = SHIFTS,
    seed: int = 1000,
    overwrite: bool = False,
) -> Path:
    """Export synthetic toy cases to NIfTI at 1 mm identity geometry, in the layout of the module docstring.

    The cases come from :func:`~monai_unc.data.make_toy_dataset` (blurred borders, raters, shifts cycled over
    ``shifts``). Raters are one 4D file per case ``(X, Y, Z, R)`` (``EnsureChannelFirstd(channel_dim=-1)`` gives
    ``(R, X, Y, Z)``). The default seed differs from the one the toy bundle trains on (0), so exported cases are
    unseen.

    Args:
        folder: the folder to write (new, empty, or written by this module before).
        n_cases: the number of cases.
        shape: volume size in voxels.
        n_raters: raters per case.
        shifts: the shift labels to cycle (:data:`~monai_unc.data.synthetic.SHIFTS`).
        seed: seed of the cases.
        overwrite: rewrite a folder this module wrote before (otherwise it is left as is).

    Returns:
        The path of ``dataset.json``.

    Raises:
        FileExistsError: the folder holds data this module did not write.
        TypeError, ValueError: ``seed`` is not an integer in ``[0, 2**64)`` (before anything is written).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     manifest = export_toy_cases(d, n_cases=2, shape=(8, 8, 8), shifts=("none", "shape"))
        ...     [c["case"] for c in json.loads(manifest.read_text())["cases"]]
        ['toy_00_none', 'toy_01_shape']
    """
    # found by hostile testing: a numpy integer seed wrote every image, then failed to write the manifest (not JSON
    # serialisable), leaving an export without its manifest; seed=-1 failed inside numpy without naming seed
    seed = check_seed(seed, optional=False)
    folder = Path(folder)
    if not _check_folder(folder, overwrite):
        return folder / MANIFEST
    cases = make_toy_dataset(int(n_cases), shape=tuple(shape), n_raters=n_raters, shift=list(shifts), seed=seed)
    affine = np.eye(4)
    rows = []
    for i, c in enumerate(cases):
        name = f"toy_{i:02d}_{c['shift']}"
        _save(c["image"][0].astype(np.float32), affine, folder / "images" / f"{name}.nii.gz")
        _save(c["label"].astype(np.uint8), affine, folder / "labels" / f"{name}.nii.gz")
        _save(np.moveaxis(c["raters"], 0, -1).astype(np.uint8), affine, folder / "raters" / f"{name}.nii.gz")
        rows.append(
            {
                "case": name,
                "image": f"images/{name}.nii.gz",
                "label": f"labels/{name}.nii.gz",
                "raters": f"raters/{name}.nii.gz",
                "shift": c["shift"],
                "severity": 0.0 if c["shift"] == "none" else 1.0,
            }
        )
    return _write_manifest(
        folder,
        {
            "name": "monai-unc synthetic toy set (ValUES Appendix B style)",
            "source": "generated by monai_unc.data.make_toy_dataset",
            "protocol": f"one object per case, blurred border annotated by {n_raters} raters (label = majority vote); "
            "shifts: intensity (darker object), shape (cube), position (partly outside the volume)",
            "classes": {"0": "background", "1": "object"},
            "seed": seed,
            "cases": rows,
        },
    )


def load_datalist(folder: str | os.PathLike, keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The manifest's cases as a MONAI datalist.

    File entries (``.nii.gz``) are joined with ``folder``; other entries (``case``, ``shift``, ``severity``) are
    kept as they are.

    Args:
        folder: a folder written by :func:`export_mni152_cases` or :func:`export_toy_cases`.
        keys: keep only these entries (e.g. ``["image"]`` for inference); None keeps all.

    Returns:
        One dict per case.

    Raises:
        FileNotFoundError: ``dataset.json`` is missing.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = export_toy_cases(d, n_cases=1, shape=(8, 8, 8))
        ...     item = load_datalist(d, keys=["image", "label"])[0]
        ...     [(k, Path(v).relative_to(d).as_posix()) for k, v in item.items()]
        [('image', 'images/toy_00_none.nii.gz'), ('label', 'labels/toy_00_none.nii.gz')]
    """
    folder = Path(folder)
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise FileNotFoundError(
            f"{manifest} not found: export the example data first (scripts/export_example_nifti.py)"
        )
    cases = json.loads(manifest.read_text())["cases"]
    out = []
    for c in cases:
        item = {}
        for k, v in c.items():
            if keys is not None and k not in keys:
                continue
            item[k] = str(folder / v) if isinstance(v, str) and v.endswith(".nii.gz") else v
        out.append(item)
    return out


def left_hemisphere_sample(resolution: int = 2) -> dict[str, np.ndarray]:
    """The training data of the example network: the left hemisphere (world x < 0) of the MNI152 example.

    Cut exactly as :func:`~monai_unc.data.training.train_tissue_model` cuts it. Needs ``nilearn``.

    Args:
        resolution: template resolution in mm (1 or 2).

    Returns:
        ``{"image": (1, X_left, Y, Z) float32, "label": (1, X_left, Y, Z) int64}``.
    """
    data = load_mni152_tissue(resolution=resolution)
    n_left = int(data["left"].any(axis=(1, 2)).sum())
    return {"image": data["image"][:, :n_left].copy(), "label": data["label"][:, :n_left].copy()}


#: (case id, shift label, perturbation, parameter)
DEMO_SHIFTS: tuple[tuple[str, str, str, float], ...] = (
    ("right_clean", "none", "identity", 0.0),
    ("right_gamma085", "none", "gamma_noise", 0.85),
    ("right_gamma120", "none", "gamma_noise", 1.2),
    ("right_noise010", "noise", "noise", 0.10),
    ("right_noise016", "noise", "noise", 0.16),
    ("right_bias070", "bias field", "bias", 0.7),
    ("right_bias110", "bias field", "bias", 1.1),
    ("right_gamma045", "contrast", "gamma", 0.45),
    ("right_gamma260", "contrast", "gamma", 2.6),
    ("right_blur25", "blur", "blur", 2.5),
    ("right_lowres3", "resolution", "lowres", 3.0),
)


#: the demo's shift kinds: perturbation -> (shift label, the largest parameter inside the training augmentation
#: range, or the range as (low, high) for ``gamma``); a level inside the range is labelled ``"none"`` (in
#: distribution), as the contrast changes of :data:`DEMO_SHIFTS` are
_DEMO_KINDS: dict[str, tuple[str, float | tuple[float, float] | None]] = {
    "gamma_noise": ("none", None), "noise": ("noise", 0.05), "bias": ("bias field", 0.3),
    "gamma": ("contrast", (0.7, 1.5)), "blur": ("blur", 1.0), "lowres": ("resolution", 1.0),
}


#: the record in a demo cohort's folder of what each case was made with:
#: ``{case: [seed, perturbation, parameter, revision]}``; written before the first image, so it names the cases of
#: an interrupted run too
DEMO_RECORD = "demo_cases.json"

#: revision of each :func:`~monai_unc.data.perturbations.fixed_perturbation` kind, recorded with every case so that a
#: folder made before a kind changed is made again (``lowres`` 2: kept slices stay in place, no stretch along z)
_FIXED_REVISIONS = {"lowres": 2}

_DEMO_TAGS = {"gamma_noise": "gn", "noise": "noise", "bias": "bias", "gamma": "gamma", "blur": "blur",
              "lowres": "lowres"}


def _graded(prefix: str, levels: dict[str, Sequence[float]]) -> tuple[tuple[str, str, str, float], ...]:
    """Demo cases ``(f"{prefix}_{tag}{round(value * 100):03d}", label, kind, value)`` for every level of every kind.

    ``tag`` is ``gn`` for ``gamma_noise``, else the kind.
    """
    out = []
    for kind, values in levels.items():
        label, limit = _DEMO_KINDS[kind]
        for v in values:
            inside = limit is None or (limit[0] <= v <= limit[1] if isinstance(limit, tuple) else v <= limit)
            out.append((f"{prefix}_{_DEMO_TAGS[kind]}{round(v * 100):03d}", "none" if inside else label, kind,
                        float(v)))
    return tuple(out)


#: calibration cohort of the full demo (42 cases): graded severities of the kinds of :data:`DEMO_SHIFTS`, 23 inside
#: the training augmentation range; 35 keep Dice >= 0.8 (~0.80-0.86), 7 fail (down to Dice ~0.65)
DEMO_CALIBRATION_SHIFTS: tuple[tuple[str, str, str, float], ...] = (
    ("cal_clean", "none", "identity", 0.0),
    *_graded("cal", {
        "gamma_noise": (0.75, 0.8, 0.85, 0.9, 0.95, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5),
        "noise": (0.01, 0.02, 0.03, 0.06, 0.09, 0.12, 0.16),
        "bias": (0.15, 0.3, 0.5, 0.7, 1.0, 1.3, 1.6),
        "gamma": (0.9, 1.1, 1.3, 0.45, 0.6, 2.0, 2.8),
        "blur": (0.3, 0.6, 1.0, 1.5, 2.2, 3.0),
        "lowres": (2, 3, 4),
    }),
)  # fmt: skip

#: new cases of the full demo (12, triaged without their labels): other levels of the same kinds, other noise draws
DEMO_NEW_SHIFTS: tuple[tuple[str, str, str, float], ...] = _graded("new", {
    "gamma_noise": (0.88, 1.15), "noise": (0.04, 0.08, 0.13), "bias": (0.8, 1.8), "gamma": (1.2, 0.5, 2.4),
    "blur": (0.8, 2.5),
})  # fmt: skip
_DEMO_CASES = DEMO_SHIFTS + DEMO_CALIBRATION_SHIFTS + DEMO_NEW_SHIFTS


def _demo_case_seed(seed: int, case: tuple[str, str, str, float]) -> np.random.SeedSequence:
    """The seed of one demo case's random parts (noise).

    Child ``i`` of ``seed`` for the ``i``-th case of
    :data:`DEMO_SHIFTS` + :data:`DEMO_CALIBRATION_SHIFTS` + :data:`DEMO_NEW_SHIFTS` (so a case gets the same noise in
    any subset, and the cases of :data:`DEMO_SHIFTS` the noise they always had), else a child keyed by the CRC-32 of
    the case id (past the shipped cases' keys).
    """
    try:
        key = _DEMO_CASES.index(tuple(case))
    except ValueError:
        key = len(_DEMO_CASES) + zlib.crc32(str(case[0]).encode())
    return np.random.SeedSequence(seed, spawn_key=(key,))


def make_demo_cohort(
    folder: str | os.PathLike, seed: int = 0, shifts: Sequence[tuple[str, str, str, float]] | None = None
) -> dict[str, Path]:
    """Write the demo cohort of ``monai-unc demo`` (:mod:`monai_unc.workflows.demo`) as NIfTI.

    The files are ``images/<case>.nii.gz``, ``labels/<case>.nii.gz``, ``shifts.csv`` and ``demo_cases.json`` (the
    seed, perturbation and parameter each image was made with); an existing case is kept when it was made with the
    same ones, and made again otherwise (another ``seed``, perturbation or parameter under the same case id).
    Every case is the held-out right hemisphere of the MNI152 example with one
    :func:`~monai_unc.data.perturbations.fixed_perturbation`; its random parts come from ``seed`` and the case
    (:func:`_demo_case_seed`), so a case is the same in any subset. Needs ``nilearn``.

    Args:
        folder: the folder to write.
        seed: seed of the perturbations' random parts.
        shifts: the cases to make, ``(case id, shift label, perturbation, parameter)`` (default
            :data:`DEMO_SHIFTS`; the full demo passes :data:`DEMO_CALIBRATION_SHIFTS` + :data:`DEMO_NEW_SHIFTS`).

    Returns:
        The paths: ``{"images", "labels", "shifts"}``.

    Raises:
        TypeError, ValueError: ``seed`` is not an integer in ``[0, 2**64)`` (before anything is written), or
            ``shifts`` names a case twice.
    """
    # found by hostile testing: seed=1.5 was recorded as 1 in demo_cases.json, then failed inside numpy; -1 failed
    # there without naming seed, after the record was written
    seed = check_seed(seed, optional=False)
    shifts = DEMO_SHIFTS if shifts is None else tuple(tuple(c) for c in shifts)  # type: ignore[misc]
    ids = [str(c[0]) for c in shifts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"shifts names a case twice: {sorted({c for c in ids if ids.count(c) > 1})[:5]}")
    folder = Path(folder)
    images, labels = folder / "images", folder / "labels"
    shifts_csv = folder / "shifts.csv"
    made_path = folder / DEMO_RECORD
    made = read_json_or_none(made_path)
    made = dict(made) if isinstance(made, dict) else {}  # no record (an older folder): every case is made again

    def recipe(case: tuple) -> list:
        """What a case's image is made from, as it reads back from JSON."""
        return [int(seed), str(case[2]), float(case[3]), _FIXED_REVISIONS.get(str(case[2]), 1)]

    todo = [c for c in shifts if made.get(str(c[0])) != recipe(c)
            or not all((d / f"{c[0]}.nii.gz").is_file() for d in (images, labels))]
    if todo:
        # forget the cases to make before their files change: an interrupted run must not leave a new image under
        # the record of an older one
        for case in todo:
            made.pop(str(case[0]), None)
        atomic_write_json(made_path, made)
        data = load_mni152_tissue(resolution=2)
        right = data["right"]
        xs = np.flatnonzero(right.any(axis=(1, 2)))
        x0, x1 = int(xs.min()), int(xs.max()) + 1
        affine = data["affine"].copy()
        affine[:3, 3] = affine[:3, :3] @ np.array([x0, 0, 0]) + affine[:3, 3]  # voxel x0 becomes voxel 0
        image = data["image"][0, x0:x1]
        label = data["label"][0, x0:x1].astype(np.int16)
        for case in todo:
            cid, _, kind, value = case
            rng = np.random.default_rng(_demo_case_seed(seed, case))
            save_nifti(fixed_perturbation(image, kind, value, rng), affine, images / f"{cid}.nii.gz")
            save_nifti(label, affine, labels / f"{cid}.nii.gz")
            made[str(cid)] = recipe(case)
            atomic_write_json(made_path, made)
    columns = ["case", "shift", "perturbation", "parameter"]
    write_csv(shifts_csv, [dict(zip(columns, row)) for row in shifts], columns)
    return {"images": images, "labels": labels, "shifts": shifts_csv}


def write_toy_cohort(
    folder: str | os.PathLike,
    n_cases: int = 6,
    shape: tuple[int, int, int] = (24, 24, 24),
    spacing: tuple[float, float, float] = (1.5, 1.0, 2.0),
    shifts: tuple[str, ...] = ("none", "none", "intensity", "shape"),
    predictions: bool = True,
    seed: int = 0,
) -> dict[str, Path]:
    """A small synthetic cohort on disk, for trying the command line without a trained network.

    Cases come from :func:`monai_unc.data.make_toy_dataset` (one sphere, or a cube under the ``shape`` shift, with
    an ambiguous border; ``shifts`` is cycled over the cases). Writes ``images/<case>.nii.gz``,
    ``labels/<case>.nii.gz`` (majority vote of the raters) and ``shifts.csv``; with ``predictions=True`` also a
    stand-in for a model's output in the ``monai-unc`` layout, ``predictions/<case>_probs.nii.gz``, ``_seg`` and
    ``_predictive_entropy``: the raters' foreground fraction smoothed with a Gaussian of 1 voxel and scaled by 1.3
    (2 voxels and 1.6 for shifted cases, so that they are worse and more uncertain), clipped to [0, 1]. Volumes
    carry the anisotropic ``spacing`` (mm) in their affine.

    Args:
        folder: the folder to write (created if missing; files of the same names are replaced, a folder holding
            other files in ``images/``, ``labels/`` or ``predictions/`` is refused, and so is one holding
            predictions when ``predictions`` is False).
        n_cases: the number of cases.
        shape: volume size in voxels.
        spacing: voxel size in mm per axis.
        shifts: the shift labels to cycle.
        predictions: also write the stand-in predictions.
        seed: seed of the cases.

    Returns:
        ``{"images", "labels"[, "predictions"], "shifts"}``: the folders and the shift table.

    Raises:
        ValueError: ``folder`` holds files this cohort does not write (an earlier call with other settings).
        TypeError, ValueError: ``seed`` is not an integer in ``[0, 2**64)`` (before anything is written).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     paths = write_toy_cohort(d, n_cases=2, shape=(8, 8, 8))
        ...     print(sorted(paths), sorted(p.name for p in paths["predictions"].iterdir())[:3])
        ['images', 'labels', 'predictions', 'shifts'] ['toy000_predictive_entropy.nii.gz', 'toy000_probs.nii.gz',
        'toy000_seg.nii.gz']
    """
    seed = check_seed(seed, optional=False)  # -1 failed inside numpy after the folders were made
    folder = Path(folder)
    dirs = {k: folder / k for k in ("images", "labels", "predictions")}
    names = [f"toy{i:03d}" for i in range(n_cases)]
    expected = {("images", f"{c}.nii.gz") for c in names} | {("labels", f"{c}.nii.gz") for c in names}
    if predictions:
        expected |= {("predictions", f"{c}_{k}.nii.gz") for c in names for k in ("probs", "seg", "predictive_entropy")}
    # predictions/ too without predictions: an earlier call's predictions of other images stayed beside the new
    # images and labels (found by hostile review)
    stale = sorted(f"{k}/{p.name}" for k in ("images", "labels", "predictions")
                   if dirs[k].is_dir() for p in dirs[k].iterdir() if (k, p.name) not in expected)
    if stale:
        # a second call with fewer cases left the first call's cases beside the new ones (6 then 2 cases: six images
        # and six labels, shifts.csv listing two), so every command run on the folder read a mixed cohort
        raise ValueError(f"folder {folder} holds {len(stale)} file(s) that this cohort does not write (e.g. "
                         f"{stale[0]}): a cohort written with other settings; choose another folder")
    for k, d in dirs.items():
        if k != "predictions" or predictions:
            d.mkdir(parents=True, exist_ok=True)
    affine = np.diag([*map(float, spacing), 1.0])
    cases = make_toy_dataset(n_cases, shape=shape, shift=list(shifts), seed=seed)
    rows = []
    for i, c in enumerate(cases):
        cid = f"toy{i:03d}"
        rows.append((cid, c["shift"]))
        _save_plain(c["image"][0], affine, dirs["images"] / f"{cid}.nii.gz")
        _save_plain(c["label"].astype(np.int16), affine, dirs["labels"] / f"{cid}.nii.gz")
        if predictions:
            shifted = c["shift"] != "none"
            fg = gaussian_filter(c["probs"][1].astype(np.float64), 2.0 if shifted else 1.0)
            fg = np.clip(fg * (1.6 if shifted else 1.3), 0.0, 1.0)
            probs = np.stack([1.0 - fg, fg]).astype(np.float32)
            out = dirs["predictions"]
            _save_plain(np.moveaxis(probs, 0, -1), affine, out / f"{cid}_probs.nii.gz")
            _save_plain(probs.argmax(0).astype(np.int16), affine, out / f"{cid}_seg.nii.gz")
            pe = entropy(probs[None])[0, 0].astype(np.float32)
            _save_plain(pe, affine, out / f"{cid}_predictive_entropy.nii.gz")
    write_csv(folder / "shifts.csv", [{"case": cid, "shift": shift} for cid, shift in rows], ["case", "shift"])
    out_paths = {k: d for k, d in dirs.items() if k != "predictions" or predictions}
    out_paths["shifts"] = folder / "shifts.csv"
    return out_paths
