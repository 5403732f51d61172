"""Finding, matching and loading the files of a cohort: images, labels, predictions and uncertainty maps.

A *case id* is a file name without its extension (``.nii.gz``, ``.nii``, ``.nrrd``, ``.mha``, ``.mhd``,
``.npy``; ``.npz`` for nnU-Net probabilities) and without the role's suffix: with ``suffix="_seg"`` the file
``brain01_seg.nii.gz`` belongs to case ``brain01``. Image folders may follow nnU-Net's channel convention
(``CASE_0000.nii.gz``, ``CASE_0001.nii.gz``: one file per input channel); when every volume name of the folder
ends in ``_`` and four digits the channels are grouped into one case, otherwise every file is a case of its own (one
rule, :func:`list_image_cases`, which :func:`image_channel_files` follows too). An entry named like a volume that is
not a file (a symbolic link to nothing, a folder ``x.nii.gz``) is listed all the same and fails as its case when it
is read (:func:`check_volume_entry`): no input is left out without a word.

Layouts read by ``monai-unc evaluate`` (:data:`LAYOUTS`):

- ``monai-unc`` (what ``monai-unc infer`` writes): ``<case>_seg.nii.gz`` label map, ``<case>_probs.nii.gz``
  probabilities as a 4D NIfTI ``(X, Y, Z, C)``, ``<case>_<measure>.nii.gz`` uncertainty maps, all in one folder;
- ``nnunet`` (what ``monai-unc nnunet-predict`` writes): ``<case>.nii.gz`` segmentation,
  ``<case>.npz`` probabilities (key ``probabilities``, ``(C, z, y, x)``: nnU-Net stores the array axes in
  reverse order of the NIfTI array, which this module undoes; with a reorienting reader/writer, nnU-Net's
  ``NibabelIOWithReorient`` or ``SimpleITKIOWithReorient`` named in the folder's ``plans.json`` / ``dataset.json``,
  in the RAS frame, which this module reorients to the segmentation's axes),
  ``uncertainty/<case>_<measure>.nii.gz`` maps.

Volumes are read as MONAI's ``LoadImage`` reads them (so any format MONAI reads), channel first, float32, with their
affine (voxel -> world, mm): NIfTI files (``.nii``, ``.nii.gz``) with nibabel directly, the same array and affine bit
for bit without importing MONAI (seconds per process), other files (and NIfTI files that path does not take) with
``LoadImage`` itself. :func:`load_case` checks that every volume of a case has the geometry of its label map
(shape and affine within ``GEOMETRY_ATOL`` mm), that label maps hold integer classes in ``[0, C)`` and that
probabilities are probabilities; every error names the case and the file.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.metadata
import itertools
import json
import math
import mmap
import os
import re
import stat
import sys
import threading
import time
import unicodedata
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._digest import content_digest
from .._utils import (
    affine_voxel_volume,
    canonical_text,
    check_bool,
    check_probabilities,
    check_unit_interval,
    foreground_masks,
    host_memory_free,
    is_finite_real,
    link_target,
    listed,
    load_nifti,
    nifti_version,
    num_threads,
    parameter_error,
)
from ..keys import DEPRECATED_MEASURES, LAYOUTS, MEASURES, canonical_measure, close_names
from .files import (
    OUTPUT_MARKERS,
    file_sha256,
    file_version,
    input_folder,
    plain_file_name,
    read_json_cached,
    read_json_or_none,
    settled,
)

try:  # Intel ISA-L's gzip reader (python-isal, the ``fast`` extra): .nii.gz inflated ~1.4x faster than by ``gzip``
    from isal import igzip as _igzip
except ImportError:  # the standard library's gzip, through nibabel
    _igzip = None

__all__ = [
    "check_finite_image",
    "volume_files",
    "is_seg_label",
    "input_digests",
    "changed_inputs",
    "output_digests",
    "changed_outputs",
    "record_digest",
    "check_case_ids_fit_folder",
    "colliding_case_ids",
    "folded_case_id",
    "folds_file_names",
    "settings_changes",
    "VOLUME_EXTENSIONS",
    "PAIR_HEADER_EXTENSION",
    "PROBABILITY_EXTENSIONS",
    "GEOMETRY_ATOL",
    "LAYOUTS",
    "MEASURES",
    "CaseError",
    "CaseFiles",
    "case_files_digest",
    "ImageCase",
    "LoadedCase",
    "split_extension",
    "list_files",
    "check_utf8_name",
    "check_volume_entry",
    "check_reference_folder",
    "list_image_cases",
    "image_channel_files",
    "dicom_series_folders",
    "DATASET_SUBFOLDERS",
    "refuse_dataset_root",
    "dicom_channel_series",
    "case_series_folder",
    "channel_name",
    "recorded_series",
    "recorded_channels",
    "case_image_files",
    "nnunet_input_channels",
    "match_cases",
    "case_id_hint",
    "read_volume",
    "SIMPLEITK_EXTENSIONS",
    "lps_image_affine",
    "read_label",
    "segment_label_values",
    "REFERENCE_EXTENSIONS",
    "NNUNET_IMAGE_EXTENSIONS",
    "SEGMENTATION_EXTENSIONS",
    "MAP_EXTENSIONS",
    "read_nnunet_image",
    "read_probabilities",
    "check_label_map",
    "spacing_from_affine",
    "ORTHOGONALITY_ATOL",
    "axes_cosine",
    "sheared_grid",
    "grid_displacement",
    "GEOMETRY_VOXEL_FRACTION",
    "grid_mismatch",
    "check_geometry",
    "reoriented_grid",
    "without_time_axis",
    "REORIENT_REMEDY",
    "nifti_geometry",
    "load_case",
    "INFER_RECORD",
    "RESERVED_RECORD_NAMES",
    "check_case_ids",
    "VERSION_KEY",
    "LIBRARIES_KEY",
    "library_versions",
    "read_prediction_regions",
    "nnunet_dataset_regions",
]

#: the run record that ``monai-unc infer`` writes into its output folder
INFER_RECORD = "infer.json"
#: the files of an ``infer`` output folder that are no case record ``<case>.json``: the run record, the list of the
#: failed cases, and the files that mark the output folder of another command (:data:`monai_unc.io.OUTPUT_MARKERS`,
#: which :func:`monai_unc.io.check_output_kind` looks for): a case whose record would be one of them is refused
#: (:func:`check_case_ids`)
RESERVED_RECORD_NAMES = tuple(dict.fromkeys(
    (INFER_RECORD, "failures.json", *(n for names in OUTPUT_MARKERS.values() for n in names if n.endswith(".json")))))
#: the key of the package version that made a run or a case, in ``infer.json`` and in each case record (``infer``,
#: ``nnunet-predict``): seeded draws may differ between versions
VERSION_KEY = "monai_unc_version"
#: the key of the library versions (:func:`library_versions`) in ``infer.json`` and in each case record
LIBRARIES_KEY = "library_versions"


def library_versions() -> dict[str, str]:
    """The versions of the libraries that draw a seeded run's samples, as ``infer.json`` and case records hold them.

    torch draws the dropout masks, Rate-In's search, SSN latents and TTA noise from the seed, and MONAI orders the
    sliding windows (and so the draws): another version of either may draw other samples from the same seed. MONAI is
    not imported for it (``nnunet-predict`` and its export workers run without MONAI): its version is that of the
    imported module, else of the installed distribution (``monai`` or ``monai-weekly``), else ``"none"``.

    Returns:
        ``{"monai": ..., "torch": ...}``.

    Example:
        >>> sorted(library_versions())
        ['monai', 'torch']
    """
    monai_version = getattr(sys.modules.get("monai"), "__version__", None)
    for dist in ("monai", "monai-weekly"):
        if monai_version is None:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                monai_version = importlib.metadata.version(dist)
    return {"monai": str(monai_version or "none"), "torch": str(torch.__version__)}


#: file endings read as volumes (longest first so that ``.nii.gz`` wins over ``.gz``)
VOLUME_EXTENSIONS = (".nii.gz", ".nii", ".nrrd", ".mha", ".mhd", ".npy")
#: the header of a NIfTI pair or Analyze file (its voxels in ``<case>.img``): no volume extension (its data file is
#: another), but an input case of an image folder (:func:`list_image_cases`), so that it is not left out without a word
PAIR_HEADER_EXTENSION = ".hdr"
#: labels may also be binary DICOM SEG objects ``<case>.dcm`` (read on their series' grid, :func:`read_label`)
REFERENCE_EXTENSIONS = (*VOLUME_EXTENSIONS, ".dcm")
#: probabilities may also come as nnU-Net ``.npz`` files
PROBABILITY_EXTENSIONS = (*VOLUME_EXTENSIONS, ".npz")
#: the image formats of nnU-Net's other reader/writers, read as labels, segmentations and maps
#: (:func:`read_nnunet_image`): ``Tiff3DIO``'s 3D ``.tif`` / ``.tiff`` (spacing in ``<name>.json`` beside it) and
#: ``NaturalImage2DIO``'s 2D ``.png`` / ``.bmp`` (and 2D ``.tif``)
NNUNET_IMAGE_EXTENSIONS = (".tif", ".tiff", ".png", ".bmp")
#: the files read as segmentations and labels: volumes and nnU-Net's other image formats, one family per folder
#: (nnU-Net's formats only from a folder that holds no volume for the role: a PNG snapshot beside NIfTI labels is not
#: read)
SEGMENTATION_EXTENSIONS = (*VOLUME_EXTENSIONS, *NNUNET_IMAGE_EXTENSIONS)
#: the files read as uncertainty maps: those and the ``<case>_<measure>.npz`` (key ``map``) that nnU-Net's 2D
#: natural-image datasets get, whose formats hold no floats (:func:`monai_unc.nnunet.export.write_float_map`); one
#: family per folder and measure, as for :data:`SEGMENTATION_EXTENSIONS`
MAP_EXTENSIONS = (*SEGMENTATION_EXTENSIONS, ".npz")
#: the maps of nnU-Net's other image formats (read from a folder without volume maps: :func:`_list_one_family`)
_NNUNET_MAP_EXTENSIONS = (*NNUNET_IMAGE_EXTENSIONS, ".npz")
#: largest displacement (mm) of a voxel centre tolerated between the affines of the volumes of one case, at least
#: (:func:`grid_displacement`: the largest over the grid, at one of its corner voxels; :func:`grid_mismatch`)
GEOMETRY_ATOL = 1e-3
#: ... or this fraction of the smallest voxel size, when larger (:func:`grid_mismatch`): the rounding of an affine as
#: writers store it (a float32 quaternion, direction cosines to 5 decimals) moves the far corners of a large grid
#: by up to a few hundredths of a voxel; the DICOM grid check is the same rule with another floor
#: (:func:`~monai_unc.io.dicom.to_series_grid`)
GEOMETRY_VOXEL_FRACTION = 0.1
#: largest ``|cos|`` of the angle between two voxel axes of a grid taken as orthogonal (:func:`axes_cosine`; about
#: 0.0057 degrees from perpendicular): the float32 rounding of an orthogonal affine stays near 1e-7
ORTHOGONALITY_ATOL = 1e-4
#: nnU-Net's channel naming ``<case>_NNNN``, whole names only (:func:`channel_name`); ASCII digits (``\d`` took other
#: scripts' digits)
_CHANNEL = re.compile(r"(?P<case>.+)_(?P<channel>[0-9]{4})")


def channel_name(name: str) -> tuple[str, int] | None:
    """The case and channel of a name in nnU-Net's channel naming, ``<case>_NNNN`` (four ASCII digits); else None.

    The one rule for file stems (``br01_0001`` of ``br01_0001.nii.gz``) and series folders (``br01_0001/``): the
    whole name must match (a name ending in a line break is no channel's).

    Args:
        name: a file stem (without its extension) or a folder name.

    Returns:
        ``(case id, channel number)``, or None when ``name`` is not named so.

    Example:
        >>> channel_name("br01_0001"), channel_name("br01"), channel_name("br01_01")
        (('br01', 1), None, None)
    """
    m = _CHANNEL.fullmatch(name)
    return None if m is None else (m["case"], int(m["channel"]))


class CaseError(ValueError):
    """A problem with the files of one case (missing, mismatched geometry, wrong values); a ``ValueError``.

    Example:
        >>> issubclass(CaseError, ValueError)
        True
    """


def check_finite_image(case_id: str, image: np.ndarray, name: str) -> None:
    """Refuse an image holding NaN or infinite voxels, naming how many and where, before the network sees it.

    In earlier versions an image with a few NaN voxels (a failed resampling, a masked export) failed as ``network
    output contains non-finite values (NaN or inf) for this input``, blaming the network (the convolutions spread one
    NaN over its neighbourhood, and ``--intensity max`` over the whole image). Used by ``monai-unc infer`` and, on the
    image as nnU-Net's reader reads it, by ``nnunet-predict`` (in earlier versions nnU-Net's normaliser took them
    silently).

    Args:
        case_id: the case id, for the message.
        image: the image ``(C, *spatial)``.
        name: the name of its (first) file, for the message.

    Raises:
        CaseError: the image holds a NaN or an infinite value.

    Example:
        >>> check_finite_image("c1", np.zeros((1, 2, 2, 2), np.float32), "c1.nii.gz")
        >>> check_finite_image("c1", np.array([[[[0.0, np.nan]]]]), "c1.nii.gz")
        Traceback (most recent call last):
        ...
        monai_unc.io.cases.CaseError: case 'c1': its image c1.nii.gz holds 1 NaN and 0 infinite voxel(s) of 2
        (the first at channel 0, voxel (0, 0, 1)): ...
    """
    if not np.issubdtype(np.asarray(image).dtype, np.inexact):  # integer voxels are always finite
        return
    bad = ~np.isfinite(image)
    if not bad.any():
        return
    n_nan = int(np.count_nonzero(np.isnan(image)))
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    raise CaseError(f"case {case_id!r}: its image {name} holds {n_nan} NaN and {int(bad.sum()) - n_nan} infinite "
                    f"voxel(s) of {image[0].size} (the first at channel {first[0]}, voxel {first[1:]}): the network "
                    "cannot predict them; replace them (e.g. by the background intensity: numpy.nan_to_num) and run "
                    "again")


# ----------------------------------------------------------------------------------------------------------------
# finding files
# ----------------------------------------------------------------------------------------------------------------
def split_extension(name: str, extensions: Sequence[str] = PROBABILITY_EXTENSIONS) -> tuple[str, str] | None:
    """Split a file name into its stem and its known extension.

    Args:
        name: a file name (not a path).
        extensions: the endings to recognise, matched case-insensitively, longest first.

    Returns:
        ``(stem, extension)``, the extension as written in ``name``; ``None`` for other endings and for hidden
        files (names starting with ``.``).

    Example:
        >>> split_extension("brain01_seg.nii.gz")
        ('brain01_seg', '.nii.gz')
        >>> split_extension("notes.txt") is None
        True
    """
    if name.startswith("."):
        return None
    low = name.lower()
    for ext in sorted(extensions, key=len, reverse=True):
        if low.endswith(ext) and len(name) > len(ext):
            return name[: -len(ext)], name[-len(ext) :]
    return None


def check_utf8_name(path: str | os.PathLike) -> None:
    r"""Refuse a file whose name is not valid UTF-8 (a case id must be writable to the UTF-8 tables and pages).

    Python gives such a name (bytes from another encoding, e.g. Latin-1 ``\xe9``) as a string with lone surrogates,
    which no UTF-8 output can hold: the error names the file (its bytes escaped) instead of failing in a later write.

    Args:
        path: the file or folder whose name becomes a case id.

    Raises:
        CaseError: naming the file and what to do.

    Example:
        >>> check_utf8_name("brain01_probs.nii.gz")
        >>> check_utf8_name("h\u00f4pital.nii.gz")  # a non-ASCII name is fine when it is UTF-8
    """
    name = Path(path).name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(Path(path)).decode("utf-8", "backslashreplace")
        raise CaseError(f"file name {shown} is not valid UTF-8 (it becomes a case id in the UTF-8 outputs): rename it, "
                        "e.g. with convmv -f latin1 -t utf8") from None


def check_volume_entry(path: str | os.PathLike) -> None:
    """Refuse a listed entry that cannot be read as a file: a symbolic link to nothing, or a folder named like a file.

    :func:`list_files` lists such entries (a case is never left out without a word); the readers
    (:func:`read_volume`, :func:`read_probabilities`, :func:`read_label`) and ``infer`` call this first, so that the
    case fails with the reason. A folder without a volume extension passes (a DICOM series folder, read by
    :func:`read_volume`); a missing path passes too (the reader says ``file not found``).

    Args:
        path: the entry.

    Raises:
        CaseError: naming the entry and what it is.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / "a.nii.gz").mkdir()
        ...     try:
        ...         check_volume_entry(Path(d) / "a.nii.gz")
        ...     except CaseError as e:
        ...         print(str(e).split(": ", 1)[1])
        a folder, not a volume file
    """
    path = Path(path)
    if path.is_symlink() and not path.exists():
        target = link_target(path)
        raise CaseError(f"cannot read {path}: a symbolic link to {target}, which does not exist (a share that is not "
                        "mounted, a moved file?)")
    if path.is_dir() and split_extension(path.name, (*PROBABILITY_EXTENSIONS, ".dcm")) is not None:
        raise CaseError(f"cannot read {path}: a folder, not a volume file")
    if path.exists() and not path.is_file() and not path.is_dir():
        raise CaseError(f"cannot read {path}: not a regular file (a pipe, socket or device)")


def list_files(
    folder: str | os.PathLike, suffix: str = "", extensions: Sequence[str] = VOLUME_EXTENSIONS, what: str = "folder"
) -> dict[str, Path]:
    """``{case id: path}`` of the files in ``folder`` whose stem ends with ``suffix`` (not recursive).

    Args:
        folder: the folder to list.
        suffix: the role's suffix (e.g. ``"_seg"``), removed from the stem to give the case id; ``""`` takes every
            file with one of ``extensions``.
        extensions: the file endings to read (:data:`VOLUME_EXTENSIONS` by default).
        what: the folder's role in messages (e.g. ``"labels folder"``).

    An entry named like a volume that is not a regular file (a symbolic link to nothing, e.g. on a share that is not
    mounted, or a folder ``x.nii.gz``) is listed too: reading it fails with the reason
    (:func:`check_volume_entry`), so that it is reported as its case instead of left out without a word.

    Returns:
        ``{case id: path}`` sorted by file name.

    Raises:
        FileNotFoundError: the folder does not exist.
        CaseError: two files give the same case id (e.g. ``a.nii`` and ``a.nii.gz``).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("a_seg.nii.gz", "a_probs.nii.gz", "b_seg.nii"):
        ...         _ = (Path(d) / name).write_bytes(b"")
        ...     {k: v.name for k, v in list_files(d, "_seg").items()}
        {'a': 'a_seg.nii.gz', 'b': 'b_seg.nii'}
    """
    folder = input_folder(folder, None, what)  # its caller marks the error with its parameter
    out: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        split = split_extension(path.name, extensions)
        if split is None:
            continue
        stem = split[0]
        if suffix:
            if not stem.endswith(suffix) or len(stem) == len(suffix):
                continue
            stem = stem[: -len(suffix)]
        check_utf8_name(path)
        if stem in out:
            raise CaseError(f"case {stem!r}: two files in {folder}: {out[stem].name} and {path.name}")
        out[stem] = path
    return out


def _list_one_family(folder: str | os.PathLike, suffix: str, volumes: Sequence[str], others: Sequence[str],
                     what: str = "folder") -> dict[str, Path]:
    """:func:`list_files` of one family of formats: the ``volumes`` where the folder holds any, else the ``others``.

    nnU-Net writes one file ending per dataset, and a folder of NIfTI volumes may hold PNG / TIFF snapshots of its
    cases (``case01.png`` beside ``case01.nii.gz``, an ``overview.png``): nnU-Net's other image formats
    (:data:`NNUNET_IMAGE_EXTENSIONS`, ``.npz`` maps) are read only from a folder without volumes for the role
    (such folders, evaluated by the first versions, were refused by some later ones as
    "two files" of a case or a labelled case without a prediction).
    """
    found = list_files(folder, suffix, volumes, what=what)
    return found if found else list_files(folder, suffix, others, what=what)


@dataclass(frozen=True)
class ImageCase:
    """One input case of ``infer``: its id and one file per input channel.

    Args:
        case_id: the case id (the file name without extension and, for nnU-Net channel files, without ``_0000``).
        channels: the image files, one per input channel, in channel order.

    Example:
        >>> from pathlib import Path
        >>> ImageCase("brain01", (Path("brain01_0000.nii.gz"),)).case_id
        'brain01'
    """

    case_id: str
    channels: tuple[Path, ...]


def list_image_cases(folder: str | os.PathLike, channel_suffix: str = "auto",
                     series_channels: int = 1) -> list[ImageCase]:
    """The input cases of an image folder, sorted by case id.

    The cases are the volume files of the folder (:func:`list_files`, entries that are no file included), its
    DICOM series folders (:func:`dicom_series_folders`: non-hidden sub-folders holding files, each one case named by
    the folder) and its NIfTI pair / Analyze headers ``<case>.hdr`` (:data:`PAIR_HEADER_EXTENSION`: one case each,
    read by MONAI's ``LoadImage`` where ``itk`` is installed, else failing with the reason), so that an entry beside
    the volume files is read as its case (and fails as its case when it cannot be read) instead of being left out.
    A header that cannot be a case of the folder is left out with a ``UserWarning`` naming it, as versions before
    read such folders: one whose case id is a volume file's or a series folder's (the original kept beside its
    conversion: the volume file is the case) and one beside cases of another number of channels (an atlas beside
    nnU-Net's channel files), so that a folder read before is not refused whole. Headers named as nnU-Net's channel
    files (``<case>_0000.hdr``) are channels of ``<case>`` where the volume files are named so too (or there are no
    volume files and every header is named so), as the volume files are.

    Args:
        folder: the image folder (not recursive).
        channel_suffix: ``"auto"``: when every volume name of the folder ends in ``_`` and four digits (nnU-Net's
            ``CASE_0000``), files are grouped into multi-channel cases by the part before it, otherwise every file
            is a case (a folder mixing both namings has no channel files: :func:`image_channel_files` follows the
            same rule); ``"none"``: one file per case.
        series_channels: the input channels of the network the cases are for. 1 (default): every series folder is
            a case, named by the folder; more: a case is one series folder per channel, named ``<case>_0000``,
            ``<case>_0001``, ... (:func:`dicom_channel_series`: a folder not named so, or a case without every
            channel, is refused), as nnU-Net names its channel files.

    Returns:
        One :class:`ImageCase` per case, its channel files in channel order.

    Raises:
        FileNotFoundError: the folder does not exist.
        ValueError: ``channel_suffix`` is neither value, or the folder holds no volume and no series folder.
        CaseError: a case's channel numbers have gaps, cases have different numbers of channels, or a file and a
            series folder give the same case id.
        ValueError: with ``series_channels`` above 1, a series folder not named by channel or a case without every
            channel.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("a_0000.nii.gz", "a_0001.nii.gz", "b_0000.nii.gz", "b_0001.nii.gz"):
        ...         _ = (Path(d) / name).write_bytes(b"")
        ...     [(c.case_id, [p.name for p in c.channels]) for c in list_image_cases(d)]
        [('a', ['a_0000.nii.gz', 'a_0001.nii.gz']), ('b', ['b_0000.nii.gz', 'b_0001.nii.gz'])]
    """
    said: list[str] = []
    try:
        return _image_cases(folder, channel_suffix, series_channels, said)
    finally:  # said before an error too (a folder of nested series folders only: why it holds no case)
        for line in said:
            warnings.warn(line, UserWarning, stacklevel=2)


def _image_cases(folder: str | os.PathLike, channel_suffix: str, series_channels: int,
                 said: list[str]) -> list[ImageCase]:
    """:func:`list_image_cases` without its warnings: its ``UserWarning`` lines are appended to ``said``.

    For :func:`_folder_channels`, whose folder's warnings are said where its cases are listed (in earlier versions it
    ignored every warning of the listing inside ``warnings.catch_warnings()``, a process-wide filter).
    """
    if channel_suffix not in ("auto", "none"):
        raise ValueError(f"channel_suffix must be 'auto' or 'none', got {channel_suffix!r}")
    files = list_files(folder, "", VOLUME_EXTENSIONS)
    # DICOM input: one series folder per case (read by read_volume); beside volume files, each is a case too
    series = [p for p in _series_folders(folder, said) if split_extension(p.name, VOLUME_EXTENSIONS) is None]
    # a NIfTI pair / Analyze file (<case>.hdr, its voxels in <case>.img) is a case too, read as MONAI reads it (with
    # itk only) or failing with the reason: it was left out without a word (found by hostile testing)
    pairs = list_files(folder, "", (PAIR_HEADER_EXTENSION,))
    if not files and not series and not pairs:
        raise ValueError(f"no image volume ({', '.join(VOLUME_EXTENSIONS)}) and no DICOM series folder found in "
                         f"{folder}")
    groups = _channel_groups(files) if channel_suffix == "auto" else None
    out = ([ImageCase(cid, chans) for cid, chans in sorted(groups.items())] if groups is not None
           else [ImageCase(stem, (path,)) for stem, path in sorted(files.items())])
    taken = {c.case_id: c.channels[0] for c in out}
    if series and (isinstance(series_channels, bool) or not isinstance(series_channels, int) or series_channels < 1):
        raise ValueError(f"series_channels must be a positive integer, got {series_channels!r}")
    # one series folder per case, or per channel for a network of several input channels (<case>_0000/, ...)
    by_case = _series_by_channel(folder, series, series_channels) if series else {}
    for cid, folders in by_case.items():
        if cid in taken:
            raise CaseError(f"case {cid!r}: two inputs in {folder}: {taken[cid].name} and the folder "
                            f"{folders[0].name}/")
        out.append(ImageCase(cid, folders))
        taken[cid] = folders[0]
    # a header that cannot be a case is left out with a warning, not made the folder's refusal (found by the review
    # of NIfTI pairs: an evaluate --images folder holding case1.nii.gz beside its original case1.hdr / .img, or an
    # atlas.hdr beside nnU-Net's channel files, was refused whole; the versions before read it)
    widths = {len(c.channels) for c in out}
    left_out = []
    pair_cases: dict[str, tuple[Path, ...]] = {stem: (p,) for stem, p in pairs.items()}
    named = {stem: p for stem, p in pairs.items() if channel_name(stem)}
    if channel_suffix == "auto" and named and (groups is not None or (not files and len(named) == len(pairs))):
        # pairs named as nnU-Net's channel files (<case>_0000.hdr) are channels of <case>, as volume files are (found
        # by the review of NIfTI pairs: the original case1_0000.hdr beside its conversion case1_0000.nii.gz was
        # predicted again as a case 'case1_0000', and a case of pairs got an id its label does not have); headers
        # numbered with gaps (an atlas_0002.hdr) stay cases of their own, as before, not the folder's refusal
        numbered: dict[str, dict[int, str]] = {}
        for stem in named:
            case, channel = channel_name(stem)  # type: ignore[misc]
            numbered.setdefault(case, {})[channel] = stem
        grouped = {cid: tuple(pairs[chans[i]] for i in sorted(chans)) for cid, chans in numbered.items()
                   if sorted(chans) == list(range(len(chans)))}
        for stem in pairs.keys() & grouped.keys():
            left_out.append(f"{pairs[stem].name} (case {stem!r} is {grouped[stem][0].name})")
        in_groups = {p.name for chans in grouped.values() for p in chans}
        pair_cases = {stem: (p,) for stem, p in pairs.items() if p.name not in in_groups and stem not in grouped}
        pair_cases.update(grouped)
    for cid, chans in sorted(pair_cases.items()):
        names = ", ".join(p.name for p in chans)
        if cid in taken:
            left_out.append(f"{names} (case {cid!r} is {taken[cid].name}{'/' if taken[cid].is_dir() else ''})")
        elif widths and len(chans) not in widths:
            width = "one channel" if len(chans) == 1 else f"{len(chans)} channels"
            left_out.append(f"{names} ({width}; the folder's cases have {max(widths)})")
        else:
            out.append(ImageCase(cid, chans))
    if left_out:
        said.append(f"{folder}: NIfTI pair / Analyze header(s) not read as cases: {'; '.join(left_out)}")
    out.sort(key=lambda c: c.case_id)
    counts: dict[int, ImageCase] = {}
    for c in out:
        counts.setdefault(len(c.channels), c)
    if len(counts) > 1:
        shown = "; ".join(f"{c.case_id!r} {n} ({', '.join(p.name for p in c.channels)})"
                          for n, c in sorted(counts.items()))
        raise CaseError(f"cases in {folder} have different numbers of channels, e.g. {shown}")
    return out


def _by_channel(named: Mapping[str, Path]) -> dict[str, dict[int, Path]] | None:
    """``{case: {channel number: path}}`` of names ``<case>_NNNN``, nnU-Net's channel naming; None for another name.

    The one parse of :func:`_channel_groups` (files) and :func:`dicom_channel_series` (series folders).
    """
    cases: dict[str, dict[int, Path]] = {}
    for name, path in named.items():
        parts = channel_name(name)
        if parts is None:
            return None
        cases.setdefault(parts[0], {})[parts[1]] = path
    return cases


def _channel_groups(files: Mapping[str, Path]) -> dict[str, tuple[Path, ...]] | None:
    """The channel files of each case, when every stem of ``files`` ends in ``_NNNN``; else None.

    ``{case: files in channel order}`` for nnU-Net's channel naming, None when a stem has no channel suffix (every
    file is then a case): the one rule of :func:`list_image_cases` and :func:`image_channel_files`. ``CaseError`` for
    channel numbers with gaps.
    """
    cases = _by_channel(files) if files else None
    if cases is None:
        return None
    out = {}
    for cid, chans in cases.items():
        idx = sorted(chans)
        if idx != list(range(len(idx))):
            raise CaseError(f"case {cid!r}: channel files must be numbered _0000, _0001, ... without gaps, got {idx}")
        out[cid] = tuple(chans[i] for i in idx)
    return out


def check_case_ids(cases: Iterable[ImageCase | str], reserved: Sequence[str] = RESERVED_RECORD_NAMES,
                   option: str = "--input") -> None:
    """Refuse case ids whose record ``<case>.json`` would be one of the folder's own files.

    ``infer`` writes each case's record as ``<case>.json`` beside its run record ``infer.json`` and ``failures.json``
    (:data:`RESERVED_RECORD_NAMES`): an input named ``infer.nii.gz`` would replace the run record, one named
    ``failures.nii.gz`` lose its record to the list of failures, one named ``summary`` mark the folder as an
    evaluation's. The comparison ignores letter case (``Infer.json`` is ``infer.json`` on macOS and Windows).

    Args:
        cases: the input cases, or their ids.
        reserved: the file names the output folder keeps for itself.
        option: how the message names the input.

    Raises:
        CaseError: one line naming the first such case, its input file and the file it would replace.

    Example:
        >>> check_case_ids(["brain01", "infer_1"])
        >>> try:
        ...     check_case_ids(["brain01", "infer"])
        ... except CaseError as e:
        ...     print(str(e).split(": its")[0])
        --input: case 'infer' cannot be predicted
    """
    taken = {name.casefold(): name for name in reserved}
    for case in cases:
        cid = case.case_id if isinstance(case, ImageCase) else str(case)
        name = taken.get(f"{cid}.json".casefold())
        if name is not None:
            source = f" ({case.channels[0].name})" if isinstance(case, ImageCase) and case.channels else ""
            raise CaseError(f"{option}: case {cid!r}{source} cannot be predicted: its record {cid}.json would be the "
                            f"output folder's own {name}; rename the input (e.g. {cid}_1)")


def folded_case_id(case_id: str) -> str:
    """The name a file system that ignores letter case and Unicode forms sees for ``case_id`` (NFC, case-folded).

    Example:
        >>> folded_case_id("Mu\u0308ller") == folded_case_id("M\u00fcller") == folded_case_id("MÜLLER")
        True
    """
    return unicodedata.normalize("NFC", str(case_id)).casefold()


def colliding_case_ids(case_ids: Iterable[str]) -> list[list[str]]:
    """Groups of case ids that differ only in letter case or Unicode form (``Case01`` / ``case01``).

    Such ids (also ``Müller`` in NFC and in NFD) name different files on Linux, one file on macOS and Windows and on
    shares served from them.

    Args:
        case_ids: the ids.

    Returns:
        Each group of two or more ids that :func:`folded_case_id` makes equal, in their order of appearance.

    Example:
        >>> colliding_case_ids(["Case01", "b", "case01", "c"])
        [['Case01', 'case01']]
    """
    return _id_groups(case_ids, folded_case_id)


def _id_groups(case_ids: Iterable[str], key: Callable[[str], str]) -> list[list[str]]:
    """The groups of two or more distinct ids that ``key`` makes equal, in their order of appearance."""
    groups: dict[str, list[str]] = {}
    for cid in case_ids:
        group = groups.setdefault(key(str(cid)), [])
        if str(cid) not in group:
            group.append(str(cid))
    return [g for g in groups.values() if len(g) > 1]


def _name_folding(folder: str | os.PathLike) -> tuple[bool, bool]:
    """``(letter case, Unicode form)``: which differences of a name the file system of ``folder`` ignores.

    One probe file (a mixed-case name with an ``é`` in NFC) is created and looked up twice, by its lower-case
    spelling and by its NFD spelling, then removed. The two are separate properties: APFS and HFS+ ignore both,
    NTFS, FAT / exFAT and SMB shares served from them or by Samba letter case only (a name's NFC and NFD spellings
    are two files there), ZFS with ``normalization=formD`` the form only; ext4, XFS and tmpfs neither. One lookup by
    the lower-case NFD spelling found the probe only where both were ignored, so ``Case01`` / ``case01`` passed on
    NTFS and SMB shares (found by a review of the case-folding check).
    """
    stem = f".monai-unc-probe-{os.getpid()}-{threading.get_ident()}-"
    probe = Path(folder) / (stem + "Ca\u00e9")
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    try:
        return (os.path.lexists(Path(folder) / (stem + "ca\u00e9")),
                os.path.lexists(Path(folder) / unicodedata.normalize("NFD", stem + "Ca\u00e9")))
    finally:
        probe.unlink(missing_ok=True)


def folds_file_names(folder: str | os.PathLike) -> bool:
    """Whether the file system of ``folder`` takes names that differ in letter case or Unicode form as one file.

    A probe file (a mixed-case name with an ``é`` in NFC) is created in ``folder`` and looked up by its lower-case
    spelling and by its NFD spelling, then removed: APFS and HFS+ find both, NTFS, FAT / exFAT and SMB shares the
    lower-case one (they keep NFC and NFD names apart); ext4, XFS and tmpfs neither.

    Args:
        folder: an existing, writable folder.

    Returns:
        True where either other spelling finds the probe file.

    Raises:
        OSError: the probe file cannot be created.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     isinstance(folds_file_names(d), bool)
        True
    """
    return any(_name_folding(folder))


def check_case_ids_fit_folder(case_ids: Sequence[str], folder: str | os.PathLike, option: str = "--output") -> None:
    """Refuse cases whose ids differ only in letter case or Unicode form when ``folder`` would take their files as one.

    On such a file system (macOS, Windows, an SMB share) ``Case01_seg.nii.gz`` and ``case01_seg.nii.gz`` are one file:
    the second case would overwrite the first's outputs and records, silently. Ids that do not collide, and folders
    that tell the spellings apart, pass without a probe file being written; the ids are compared as the file system
    compares names (letter case, Unicode form, or both: :func:`folds_file_names`).

    Args:
        case_ids: the run's case ids.
        folder: the existing output folder.
        option: how the message names the folder.

    Raises:
        ValueError: one line naming the first colliding ids and the folder.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     check_case_ids_fit_folder(["a", "b"], d)
    """
    if not colliding_case_ids(case_ids):
        return
    case, form = _name_folding(folder)
    if not (case or form):
        return

    def key(cid: str) -> str:
        cid = unicodedata.normalize("NFC", cid) if form else cid
        return cid.casefold() if case else cid

    groups = _id_groups(case_ids, key)
    if groups:
        names = " and ".join(repr(c) for c in groups[0][:3])
        more = f" ({len(groups) - 1} more such group(s))" if len(groups) > 1 else ""
        raise ValueError(f"{option} {folder}: cases {names} differ only in letter case or Unicode form, and this "
                         f"folder's file system takes their files as one file{more}: rename the inputs or write to a "
                         "folder on a file system that tells them apart")


def dicom_series_folders(folder: str | os.PathLike) -> list[Path]:
    """The DICOM series folders of an image folder: its non-hidden sub-folders that hold files, sorted by name.

    An image folder of ``infer`` (or the ``--images`` of ``evaluate`` / ``triage``) may hold, instead of volume
    files, one folder of single-frame CT or MR slices per case, named by case id; :func:`read_volume` reads such a
    folder with :func:`monai_unc.io.dicom.read_series` (the ``dicom`` extra). A sub-folder holding no file but
    folders of files (a PACS export's ``<case>/<series>/`` or ``<case>/<study>/<series>/`` layout, up to 4 levels
    down) is no series folder: it is left out with a ``UserWarning`` naming it.

    Args:
        folder: the image folder.

    Returns:
        The case folders (empty when there is none).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / "case1").mkdir()
        ...     _ = (Path(d) / "case1" / "IM0001").write_bytes(b"")
        ...     (Path(d) / "empty").mkdir()
        ...     [p.name for p in dicom_series_folders(d)]
        ['case1']
    """
    said: list[str] = []
    try:
        return _series_folders(folder, said)
    finally:
        for line in said:
            warnings.warn(line, UserWarning, stacklevel=2)


def _series_folders(folder: str | os.PathLike, said: list[str]) -> list[Path]:
    """:func:`dicom_series_folders` without its warning: its ``UserWarning`` line is appended to ``said``."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    out, nested = [], []
    for p in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if any(_visible_file(f) for f in p.iterdir()):
            out.append(p)
        else:  # a PACS export's <case>/<series>/ layout: the case was left out without a word (hostile review 67)
            inner = _nested_file_folders(p)
            if inner:
                nested.append(f"{p.name}/ (holding {', '.join(inner[:2])}"
                              f"{', ...' if len(inner) > 2 else ''})")
    if nested:
        said.append(f"{folder}: {len(nested)} folder(s) hold no file but folders of files, left out: "
                    f"{'; '.join(nested[:3])}{'; ...' if len(nested) > 3 else ''}; a case's series folder holds its "
                    "slices itself (<images>/<case>/<slices>): move the series' files up into the case folder")
    for p in out:  # the folder's name is the case id
        check_utf8_name(p)
    return out


#: how many folder levels below a case folder :func:`dicom_series_folders` looks for the slices of a nested layout
_NESTED_LEVELS = 4


def _nested_file_folders(folder: Path) -> list[str]:
    """The sub-folders of ``folder`` nearest to it that hold files, as ``a/b`` paths relative to it (sorted).

    Looks down to :data:`_NESTED_LEVELS` levels, level by level, and stops at the first level with such a folder: a
    PACS export nests ``<case>/<series>/`` or ``<case>/<study>/<series>/`` (in earlier versions a look one
    level down left the second layout out without a word).
    """
    def entries(path: Path) -> list[Path]:
        try:
            return sorted(path.iterdir())
        except OSError:  # an unreadable folder deep in a case folder: nothing to say about it here
            return []

    level = [(folder, "")]
    for _ in range(_NESTED_LEVELS):
        below = []
        for path, rel in level:
            for q in entries(path):
                if q.is_dir() and not q.name.startswith("."):  # a link loop ends at the last level
                    below.append((q, f"{rel}{q.name}/"))
        found = [rel for q, rel in below if any(_visible_file(f) for f in entries(q))]
        if found or not below:
            return found
        level = below
    return []


def _visible_file(path: Path) -> bool:
    """Whether ``path`` is a regular, non-hidden file (a slice of a series folder, for :func:`dicom_series_folders`)."""
    return path.is_file() and not path.name.startswith(".")


#: the sub-folders of an nnU-Net v2 / Medical Segmentation Decathlon dataset, by what they hold (the folder of such a
#: dataset is no folder of images or labels: :func:`refuse_dataset_root`)
DATASET_SUBFOLDERS: dict[str, tuple[str, ...]] = {"images": ("imagesTr", "imagesTs"),
                                                  "labels": ("labelsTr", "labelsTs")}


def refuse_dataset_root(folder: str | os.PathLike, parameter: str | None, what: str | None = None,
                        kind: str = "images") -> None:
    r"""Refuse a dataset root given as a folder of images or labels, naming the sub-folder to give instead.

    A folder that holds no volume of its own but sub-folders of volume files is the root of a dataset (nnU-Net's and
    the Medical Segmentation Decathlon's ``imagesTr/``, ``labelsTr/``, ``imagesTs/``; or any folder of image
    folders), not a folder of cases: read as one, its sub-folders were taken for DICOM series, each a case that
    failed (``case 'imagesTr' failed: ... not a readable DICOM file``), or it held "no label volume". A folder of
    DICOM series (sub-folders of slices, no volume files in them) passes, as does a folder with a volume of its
    own; a folder that cannot be listed passes too (its reader says why).

    Args:
        folder: the folder given.
        parameter: the parameter whose value it is (the error is marked with it, so that the command line names
            the option typed: :func:`monai_unc._utils.parameter_error`); None: not marked.
        what: how the message names the folder (default ``"<parameter> folder"``).
        kind: ``"images"`` or ``"labels"``: which sub-folders to propose first (:data:`DATASET_SUBFOLDERS`).

    Raises:
        ValueError: the folder looks like a dataset root; the message names the sub-folder(s) to pass.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("imagesTr/a_0000.nii.gz", "labelsTr/a.nii.gz", "imagesTs/b_0000.nii.gz"):
        ...         (Path(d) / name).parent.mkdir(exist_ok=True)
        ...         _ = (Path(d) / name).write_bytes(b"")
        ...     try:
        ...         refuse_dataset_root(d, "labels", kind="labels")
        ...     except ValueError as e:
        ...         print(*str(e).replace(d, "DIR").split("; "), sep="\n")
        labels folder DIR looks like a dataset root (no volume of its own
        sub-folders of volumes: imagesTr/, imagesTs/, labelsTr/): pass its sub-folder DIR/labelsTr instead
    """
    if kind not in DATASET_SUBFOLDERS:
        raise ValueError(f"kind must be one of {tuple(DATASET_SUBFOLDERS)}, got {kind!r}")
    root = Path(folder)
    try:
        entries = [e for e in root.iterdir() if not e.name.startswith(".")]
        if any(e.is_file() and split_extension(e.name, (*REFERENCE_EXTENSIONS, PAIR_HEADER_EXTENSION)) is not None
               for e in entries):
            return
        subs = sorted((e for e in entries if e.is_dir()), key=lambda e: e.name)
        # the first files of each sub-folder tell: a folder of volumes shows one at once, a DICOM series none (a
        # series of thousands of slices is not listed whole)
        holding = {e.name: [f.name for f in itertools.islice((f for f in e.iterdir() if not f.name.startswith(".")),
                                                             64) if f.is_file()] for e in subs}
    except OSError:
        return
    volumes = [n for n, files in holding.items() if any(split_extension(f, VOLUME_EXTENSIONS) for f in files)]
    known = [n for n in volumes if n in DATASET_SUBFOLDERS["images"] + DATASET_SUBFOLDERS["labels"]]
    others = [n for n, files in holding.items() if files and n not in volumes]  # DICOM series folders
    if not volumes or (others and not known):
        return
    wanted = [n for n in DATASET_SUBFOLDERS[kind] if n in volumes]
    word = kind[:-1]  # "image", "label"
    wanted = wanted or [n for n in volumes if word in n.lower()] or [n for n in volumes if "label" not in n.lower()]
    wanted = wanted or volumes
    what = what if what is not None else (f"{parameter} folder" if parameter else "folder")
    shown = ", ".join(f"{n}/" for n in volumes[:6]) + (", ..." if len(volumes) > 6 else "")
    also = f" (or {root / wanted[1]})" if len(wanted) > 1 else ""
    error = ValueError(f"{what} {root} looks like a dataset root (no volume of its own; sub-folders of volumes: "
                       f"{shown}): pass its sub-folder {root / wanted[0]}{also} instead")
    raise parameter_error(error, parameter) if parameter else error


def dicom_channel_series(folder: str | os.PathLike, channels: int) -> dict[str, tuple[Path, ...]]:
    """The DICOM series of each case of a model with several input channels: ``<case>_0000/``, ``<case>_0001/``, ...

    nnU-Net names a case's channel files ``<case>_0000.nii.gz``, ``<case>_0001.nii.gz``, ...; a folder of DICOM
    input names the case's series folders the same way (:func:`dicom_series_folders`), one series per channel in
    the order of the model's ``channel_names``.

    Args:
        folder: the image folder.
        channels: the model's number of input channels (at least 1; with 1 each series folder is a case).

    Returns:
        ``{case id: series folders in channel order}``, sorted by case id.

    Raises:
        ValueError: with several channels, a series folder not named ``<case>_NNNN`` or a case without every
            channel ``0000`` to ``channels - 1`` (naming the case and what it has); no series folder at all.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("brain_0000", "brain_0001"):
        ...         (Path(d) / name).mkdir()
        ...         _ = (Path(d) / name / "IM0001").write_bytes(b"")
        ...     {c: [p.name for p in s] for c, s in dicom_channel_series(d, 2).items()}
        {'brain': ['brain_0000', 'brain_0001']}
    """
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"channels must be a positive integer, got {channels!r}")
    series = dicom_series_folders(folder)
    if not series:
        raise ValueError(f"no DICOM series folder in {folder}")
    return _series_by_channel(folder, series, channels)


def _series_by_channel(folder: str | os.PathLike, series: Sequence[Path], channels: int
                       ) -> dict[str, tuple[Path, ...]]:
    """The rule of :func:`dicom_channel_series` on given series folders (those :func:`list_image_cases` reads)."""
    if channels == 1:
        return {p.name: (p,) for p in series}
    cases = _by_channel({p.name: p for p in series})
    if cases is None:
        unnamed = next(p.name for p in series if channel_name(p.name) is None)
        raise ValueError(f"{folder}: the model takes {channels} input channels, so each case needs one series folder "
                         f"per channel named <case>_0000, <case>_0001, ... (as nnU-Net names its channel files); "
                         f"{unnamed}/ is not named so")
    for cid, chans in sorted(cases.items()):
        if sorted(chans) != list(range(channels)):
            has = ", ".join(f"_{c:04d}" for c in sorted(chans))
            raise ValueError(f"{folder}: case {cid!r} has the series {has}; the model takes {channels} input channels "
                             f"(_0000 to _{channels - 1:04d})")
    return {cid: tuple(chans[c] for c in range(channels)) for cid, chans in sorted(cases.items())}


def case_series_folder(folder: str | os.PathLike, case_id: str, channels: int = 1) -> Path | None:
    """The source series of a case in a folder of DICOM input: ``<case>/``, or ``<case>_0000/`` for several channels.

    A model of several input channels takes one series per channel (:func:`dicom_channel_series`); its outputs lie
    on channel 0's. The number of channels decides, not which folder exists: with several, ``<case>/`` may be
    another case's channel series (case ``a_0000`` beside case ``a``) or a leftover empty folder (found by hostile
    testing: both were taken as the case's series).

    Args:
        folder: the folder of series folders.
        case_id: the case.
        channels: the model's number of input channels.

    Returns:
        The series folder, or None when it is not a folder.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / "brain_0000").mkdir()
        ...     case_series_folder(d, "brain", 2).name, case_series_folder(d, "brain")
        ('brain_0000', None)
    """
    path = Path(folder) / (case_id if channels <= 1 else f"{case_id}_0000")
    return path if path.is_dir() else None


#: the default ``record`` of :func:`recorded_series` and :func:`recorded_channels`: read the case's record
_READ: Any = object()


def recorded_series(predictions: str | os.PathLike, case_id: str, record: Any = _READ) -> list[str]:
    """The DICOM series folders ``infer`` predicted a case from, as the case's record lists them.

    ``infer`` records in ``<case>.json`` the digest of each input channel (:func:`input_digests`); a case predicted
    from DICOM series has one series folder per channel: ``<case>/`` for a network of one channel, ``<case>_0000/``,
    ``<case>_0001/``, ... for one of several (:func:`list_image_cases` with ``series_channels``).

    Args:
        predictions: the output folder of ``infer``.
        case_id: the case.
        record: the case's record as read already (:func:`read_json_or_none` of ``<case>.json``; None: no record);
            default read from ``predictions``.

    Returns:
        The names of the series folders in channel order; empty for a case predicted from another input (a NIfTI
        file or pair), a record without digests (an older version's), nnU-Net's records or no record.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("brain_0000", "brain_0001"):
        ...         (Path(d) / name).mkdir()
        ...         _ = (Path(d) / name / "IM0001").write_bytes(b"")
        ...     record = {"input_digests": input_digests([Path(d) / "brain_0000", Path(d) / "brain_0001"])}
        ...     _ = (Path(d) / "brain.json").write_text(json.dumps(record))
        ...     recorded_series(d, "brain")
        ['brain_0000', 'brain_0001']
    """
    if record is _READ:
        record = read_json_or_none(Path(predictions) / f"{case_id}.json")
    saved = record.get("input_digests") if isinstance(record, dict) else None
    # a series folder's digest lists its files ([name, size, times] each); a file's is one list of numbers
    if not (isinstance(saved, list) and saved and all(
            isinstance(e, dict) and isinstance(e.get("stat"), list) and e["stat"]
            and all(isinstance(f, list) for f in e["stat"]) for e in saved)):
        return []
    names = [case_id] if len(saved) == 1 else [f"{case_id}_{c:04d}" for c in range(len(saved))]
    return names if [e.get("file") for e in saved] == names else []


def recorded_channels(predictions: str | os.PathLike, case_id: str, record: Any = _READ) -> int:
    """The number of input channels ``infer`` predicted a case from, as the case's record lists its inputs.

    One series folder or channel file per channel (a 4D NIfTI file counts one). A case predicted from NIfTI channel
    files converted from DICOM series lies on the series of channel 0 as much as one predicted from the series
    (found by hostile testing: ``dicom-export -s SERIES`` and ``evaluate --images SERIES`` looked for ``<case>/`` for
    it, which for a case of several channels is no series of it, and refused the case).

    Args:
        predictions: the output folder of ``infer``.
        case_id: the case.
        record: the case's record as read already (:func:`read_json_or_none` of ``<case>.json``; None: no record);
            default read from ``predictions``.

    Returns:
        The number of inputs in ``<case>.json``; 0 without a record or ``inputs`` (nnU-Net's records).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     record = {"inputs": ["brain_0000.nii.gz", "brain_0001.nii.gz"]}
        ...     _ = (Path(d) / "brain.json").write_text(json.dumps(record))
        ...     recorded_channels(d, "brain"), recorded_channels(d, "other")
        (2, 0)
    """
    if record is _READ:
        record = read_json_or_none(Path(predictions) / f"{case_id}.json")
    inputs = record.get("inputs") if isinstance(record, dict) else None
    return len(inputs) if isinstance(inputs, list) else 0


def case_image_files(images: str | os.PathLike, predictions: str | os.PathLike, case_ids: Iterable[str],
                     layout: str = "monai-unc") -> dict[str, Path]:
    """The image of each case of an ``--images`` folder: its (first) channel file, or the series it lies on.

    The cases of :func:`list_image_cases`; a case predicted from one DICOM series per input channel lies on channel
    0's series, ``<case>_0000/``: an nnU-Net model of several channels (its ``dataset.json`` beside the
    predictions), or ``infer``'s network of several (the case's record lists the series, :func:`recorded_series`).
    The one rule of ``evaluate`` / ``triage`` (:func:`match_cases`) and of ``report --images`` (found by hostile
    testing: the report drew such a case on its label map, as if no image were given).

    Args:
        images: the folder of the input images.
        predictions: the predictions folder (the cases' records, nnU-Net's ``dataset.json``).
        case_ids: the cases whose series channels are looked up.
        layout: ``"monai-unc"`` or ``"nnunet"``.

    Returns:
        ``{case id: image file or series folder}``.

    Raises:
        CaseError: as :func:`list_image_cases`.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("brain_0000", "brain_0001"):
        ...         (Path(d) / "images" / name).mkdir(parents=True)
        ...         _ = (Path(d) / "images" / name / "IM0001").write_bytes(b"")
        ...     (Path(d) / "pred").mkdir()
        ...     series = [Path(d) / "images" / "brain_0000", Path(d) / "images" / "brain_0001"]
        ...     record = {"inputs": [str(p) for p in series], "input_digests": input_digests(series)}
        ...     _ = (Path(d) / "pred" / "brain.json").write_text(json.dumps(record))
        ...     {c: p.name for c, p in case_image_files(Path(d) / "images", Path(d) / "pred", ["brain"]).items()}
        {'brain_0000': 'brain_0000', 'brain_0001': 'brain_0001', 'brain': 'brain_0000'}
    """
    pred_dir = Path(predictions)
    series = {p.name: p for p in dicom_series_folders(images)}
    # a case predicted from one series per input channel lies on channel 0's series, <case>_0000/: an nnU-Net
    # model of several channels (its dataset.json beside the predictions), or infer's network of several (the
    # case's record lists the series)
    model_channels = (nnunet_input_channels(read_json_or_none(pred_dir / "dataset.json"))
                      if series and layout == "nnunet" else 1)
    channels = {cid: model_channels if layout == "nnunet" else recorded_channels(pred_dir, cid)
                for cid in (case_ids if series else ())}
    try:
        listed = list_image_cases(images)
    except CaseError:
        several = {n for n in channels.values() if n > 1}
        if len(several) != 1:
            raise
        # found by hostile testing: series named by channel beside NIfTI channel files were refused as cases of one
        # channel ("different numbers of channels"); they are the channels of the cases predicted from them
        listed = list_image_cases(images, series_channels=several.pop())
    image_files = {c.case_id: c.channels[0] for c in listed}
    for cid, n in channels.items():
        if n > 1:
            if f"{cid}_0000" in series:
                image_files[cid] = series[f"{cid}_0000"]
            elif (cid in image_files and image_files[cid].is_dir()
                  and (layout == "nnunet" or recorded_series(pred_dir, cid))):
                # <case>/: no series of a case predicted from one series per channel (its NIfTI channel files,
                # <case>_0000.nii.gz, stay its image); of a case infer predicted from NIfTI channel files it stays
                # the case's image, as in earlier versions, when there is no <case>_0000/ (found by review)
                del image_files[cid]
    return image_files


def image_channel_files(path: str | os.PathLike, case_id: str | None = None) -> tuple[Path, ...]:
    """Every channel file of the image case whose first channel file is ``path``.

    For nnU-Net's channel naming (``CASE_0000.nii.gz``, the file :func:`match_cases` gives as a case's ``image``)
    these are the files ``CASE_0000``, ``CASE_0001``, ... in the same folder, in channel order, grouped by the rule
    of :func:`list_image_cases`: only when every volume name of the folder has the ``_NNNN`` suffix (in a folder
    where some names have none, ``CASE_0000`` and ``CASE_0001`` are two cases, as ``infer`` predicted them); any
    other file is one file holding every channel (e.g. a 4D NIfTI). A NIfTI pair's header (``CASE_0000.hdr``) has
    the channels :func:`list_image_cases` gives its case. With ``case_id``, a DICOM series folder named
    ``<case>_0000`` (channel 0's series of a case predicted from one series per input channel, the image
    :func:`case_image_files` gives it) has the series ``<case>_0000/``, ``<case>_0001/``, ... beside it (found by
    hostile testing: triage's image statistics read channel 0's series only, so a rule fitted on the same cases as
    NIfTI channel files could not triage them, and a shift of another channel went unseen).

    Args:
        path: the case's (first) image file.
        case_id: the case (its series named by channel are found only with it: a case of one series may be named
            ``<name>_0000`` too).

    Returns:
        The channel files in channel order; ``(path,)`` for a name without the ``_0000`` channel suffix or in a
        folder whose files are not grouped.

    Raises:
        CaseError: the channel numbers have gaps, or two files of the folder give one name (:func:`list_files`).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("a_0000.nii.gz", "a_0001.nii.gz", "ab_0000.nii.gz"):
        ...         _ = (Path(d) / name).write_bytes(b"")
        ...     [p.name for p in image_channel_files(Path(d) / "a_0000.nii.gz")]
        ['a_0000.nii.gz', 'a_0001.nii.gz']
    """
    path = Path(path)
    if case_id is not None and path.name == f"{case_id}_0000" and path.is_dir():
        series = [path]
        while (path.parent / f"{case_id}_{len(series):04d}").is_dir():
            series.append(path.parent / f"{case_id}_{len(series):04d}")
        return tuple(series)
    if path.name.lower().endswith(PAIR_HEADER_EXTENSION) and path.parent.is_dir():
        # a NIfTI pair named as a channel file (<case>_0000.hdr) has its channels by list_image_cases' rule for pairs
        # (found by the review of NIfTI pairs: only its first channel was read by triage's image features)
        names = _folder_channels(path.parent, pairs=True).get(path.name)
        return (path,) if names is None else tuple(path.parent / n for n in names)
    split = split_extension(path.name, VOLUME_EXTENSIONS)
    parts = channel_name(split[0]) if split is not None else None
    if parts is None or parts[1] != 0 or not path.parent.is_dir():
        return (path,)
    names = _folder_channels(path.parent, pairs=False).get(path.name)
    return (path,) if names is None else tuple(path.parent / n for n in names)


#: the channel files of the last few folders :func:`image_channel_files` listed, by folder and the folder's state
_CHANNEL_LISTINGS: dict[tuple[Any, ...], dict[str, tuple[str, ...]]] = {}
_CHANNEL_LISTINGS_KEPT = 8
_CHANNEL_LISTINGS_LOCK = threading.Lock()


def _folder_channels(folder: Path, pairs: bool) -> dict[str, tuple[str, ...]]:
    """``{first channel file name: channel file names}`` of a folder's cases, listed once while it is unchanged.

    With ``pairs``, the cases of NIfTI pairs' headers (:func:`list_image_cases`); else nnU-Net's channel groups.

    :func:`image_channel_files` is called for every case of a cohort (three times a case by a triage), and listing the
    folder each time made a cohort quadratic in its size (a 1000-case folder of NIfTI pairs: 0.15 s a call). The listing
    is kept under the folder's version (:func:`~monai_unc.io.files.file_version`: path, inode, size, modification and
    change times in nanoseconds; a file added, removed or renamed changes them), so a changed folder is listed again; a
    listing that fails is not kept. A folder changed in the last :data:`~monai_unc.io.files.SETTLE_S` seconds is listed
    every time and its listing not kept: a file system with coarse timestamps (1 s on ext2/3 or NFS exports of them, 2 s
    on FAT) gives a file added within the same tick the same folder times (found by hostile review: a third channel
    written just after the listing was missed on every call, on an ext2 folder).
    """
    st = folder.stat()
    key = (file_version(str(folder.resolve()), st), pairs)  # the one identity of a file's version, as elsewhere
    kept = settled(st)
    with _CHANNEL_LISTINGS_LOCK:
        got = _CHANNEL_LISTINGS.get(key) if kept else None
    if got is not None:
        return got
    out: dict[str, tuple[str, ...]] = {}
    if pairs:
        # the folder's listing says its warnings (headers left out) where it lists the cases, not here
        for c in _image_cases(folder, "auto", 1, []):
            out.setdefault(c.channels[0].name, tuple(p.name for p in c.channels))
    else:
        files = list_files(folder, "", VOLUME_EXTENSIONS)
        groups = _channel_groups(files)
        if groups is not None:  # else a folder mixing both namings: every file is a case (list_image_cases)
            for members in groups.values():  # in channel order: the first is channel 0
                out[members[0].name] = tuple(p.name for p in members)
    if not kept:  # changed too recently for its times to tell a later change apart (coarse timestamps)
        return out
    with _CHANNEL_LISTINGS_LOCK:
        while len(_CHANNEL_LISTINGS) >= _CHANNEL_LISTINGS_KEPT:
            _CHANNEL_LISTINGS.pop(next(iter(_CHANNEL_LISTINGS)))
        _CHANNEL_LISTINGS[key] = out
    return out


@dataclass
class CaseFiles:
    """The files of one case for evaluation (``None`` where a role is absent), as :func:`match_cases` finds them.

    Args:
        case_id: the case id.
        label: the reference label map.
        seg: the predicted segmentation.
        probs: the predicted probabilities (NIfTI or nnU-Net ``.npz``).
        maps: ``{measure: uncertainty map file}``; for maps written one file per region
            (``<case>_<measure>_<region>``, :func:`match_cases` with ``regions``) a tuple of the files in the region
            spec's order, read stacked as one ``(R, *spatial)`` map.
        image: the input image (its first channel file for nnU-Net channel naming).

    Example:
        >>> from pathlib import Path
        >>> files = CaseFiles("a", Path("labels/a.nii.gz"), seg=Path("pred/a_seg.nii.gz"))
        >>> CaseFiles.from_json(files.to_json()) == files
        True
    """

    case_id: str
    label: Path
    seg: Path | None = None
    probs: Path | None = None
    maps: dict[str, Path | tuple[Path, ...]] = field(default_factory=dict)
    image: Path | None = None

    def to_json(self) -> dict[str, Any]:
        """The files as a JSON-ready dict (paths as strings), the inverse of :meth:`from_json`.

        Returns:
            ``{"case", "label", "seg", "probs", "maps", "image"}``; absent roles are None, ``maps`` is
            ``{measure: path}`` (a list of paths for per-region files).
        """
        return {
            "case": self.case_id,
            "label": str(self.label),
            "seg": None if self.seg is None else str(self.seg),
            "probs": None if self.probs is None else str(self.probs),
            "maps": {k: [str(x) for x in v] if isinstance(v, tuple) else str(v) for k, v in self.maps.items()},
            "image": None if self.image is None else str(self.image),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CaseFiles:
        """The :class:`CaseFiles` that :meth:`to_json` wrote.

        Args:
            d: the dict of :meth:`to_json` (``seg``, ``probs``, ``maps`` and ``image`` may be missing).

        Returns:
            The case's files.
        """
        def p(x: Any) -> Path | None:
            return None if x is None else Path(x)

        return cls(
            case_id=str(d["case"]),
            label=Path(d["label"]),
            seg=p(d.get("seg")),
            probs=p(d.get("probs")),
            maps={k: tuple(Path(x) for x in v) if isinstance(v, (list, tuple)) else Path(v)
                  for k, v in (d.get("maps") or {}).items()},
            image=p(d.get("image")),
        )


def case_files_digest(cases: Iterable[CaseFiles | ImageCase]) -> str:
    """A digest of which files each case has, by name: what the ranks of a cohort run compare besides the case ids.

    Each case contributes its id and the names (not the folders) of its label, segmentation, probabilities, maps and
    image (an :class:`ImageCase`: of its channel files), so that ranks started with another ``--measures``,
    ``--layout``, suffix or maps folder (other files for the same case ids) are told apart, and ranks in other
    working folders or mounts of the same files are not.

    Args:
        cases: the cases (:class:`CaseFiles` of the evaluating commands, :class:`ImageCase` of ``infer``), in any
            order.

    Returns:
        The sha256 (hex) of the cases' file names, sorted by case id.

    Example:
        >>> a = CaseFiles("c1", Path("labels/c1.nii.gz"), seg=Path("pred/c1_seg.nii.gz"))
        >>> b = CaseFiles("c1", Path("/mnt/labels/c1.nii.gz"), seg=Path("/mnt/pred/c1_seg.nii.gz"))
        >>> case_files_digest([a]) == case_files_digest([b])
        True
        >>> case_files_digest([a]) == case_files_digest([CaseFiles("c1", Path("labels/c1.nii.gz"))])
        False
    """
    def name(p: Path | None) -> str | None:
        return None if p is None else Path(p).name

    rows = sorted([c.case_id, [name(p) for p in c.channels]] if isinstance(c, ImageCase) else
                  [c.case_id, name(c.label), name(c.seg), name(c.probs),
                   {m: [name(x) for x in f] if isinstance(f, tuple) else name(f) for m, f in sorted(c.maps.items())},
                   name(c.image)] for c in cases)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def _describe(ids: Iterable[str], limit: int = 8) -> str:
    return listed(sorted(ids), limit)


def check_reference_folder(labels: str | os.PathLike, predictions: str | os.PathLike) -> None:
    """Refuse a labels folder that is the predictions folder (also through a symbolic link): ``evaluate``'s check.

    Matched with itself, a prediction folder gives every case its own segmentation as its label (nnU-Net's
    ``<case>.nii.gz``): a Dice of 1 everywhere, and a referral rule certified on labels that are none.
    :func:`match_cases` accepts it on purpose (``triage`` lists its predictions so); ``evaluate`` calls this first.

    Args:
        labels: the ``--labels`` folder.
        predictions: the ``--predictions`` folder.

    Raises:
        ValueError: one line naming both options and the folder.

    Example:
        >>> check_reference_folder("labels", "predictions")
        >>> try:
        ...     check_reference_folder("predictions", "./predictions")
        ... except ValueError as e:
        ...     print(str(e).split(" (")[0])
        --labels and --predictions are the same folder
    """
    same = Path(labels).resolve() == Path(predictions).resolve()
    if not same and Path(labels).exists() and Path(predictions).exists():
        same = os.path.samefile(labels, predictions)  # a bind mount, another name of one folder
    if same:
        raise ValueError(f"--labels and --predictions are the same folder ({os.fspath(predictions)}): every "
                         "prediction would be scored against itself as its own label; give the folder of the "
                         "reference label maps")


def match_cases(
    labels: str | os.PathLike,
    predictions: str | os.PathLike,
    *,
    layout: str = "monai-unc",
    seg_suffix: str | None = None,
    probs_suffix: str | None = None,
    uncertainty: str | os.PathLike | None = None,
    measures: Sequence[str] | None = None,
    images: str | os.PathLike | None = None,
    label_suffix: str = "",
    allow_missing: bool = False,
    allow_missing_labels: bool = False,
    missing_hint: str | None = "use --allow-missing to skip them",
    regions: Sequence[str] | None = None,
    say_missing: bool = True,
) -> list[CaseFiles]:
    """Match labels with predictions, probabilities and uncertainty maps by case id.

    Every case needs a label and at least a segmentation or probabilities. The cohort is the cases present on
    both sides: a labelled case without a prediction and a predicted case without a label are both errors
    (``CaseError`` listing the ids), so that a cohort never shrinks without a word; ``allow_missing`` and
    ``allow_missing_labels`` turn them into warnings. Maps written under a deprecated measure name are read with a
    ``DeprecationWarning``.

    Args:
        labels: folder of reference label maps ``<case><label_suffix>.<ext>``, or binary DICOM SEG objects
            ``<case>.dcm`` (then ``images`` must give each case's DICOM series: :func:`read_label`).
        predictions: folder with segmentations and/or probabilities (see :data:`LAYOUTS`).
        layout: ``"monai-unc"`` or ``"nnunet"``: default suffixes and the uncertainty sub-folder.
        seg_suffix: overrides the layout's suffix of the segmentations (then some labelled case must have one).
        probs_suffix: overrides the layout's suffix of the probabilities (then some labelled case must have them).
        uncertainty: folder of ``<case>_<measure>.<ext>`` maps (default from the layout); one named must hold maps.
        measures: measures to read, each a map every case must have; None (the default): every one of
            :data:`MEASURES` whose maps are found; an empty list: no map.
        images: optional folder of the input images (for overlays), nnU-Net channel files allowed.
        label_suffix: the suffix of the label files' stems (e.g. ``"_label"``).
        allow_missing: drop labelled cases that lack a prediction or map (instead of an error) as long as one
            case is left, with a ``UserWarning`` listing them.
        allow_missing_labels: drop cases that have a segmentation or probabilities but no label (instead of an
            error), with a ``UserWarning`` listing them.
        missing_hint: what the error of cases that lack files suggests, in parentheses (default: the ``evaluate``
            option that skips them); None: nothing (a command without that option names its own remedy).
        regions: the region names of a region-based (sigmoid) evaluation, in the spec's order: a measure's maps
            written one file per region (``<case>_<measure>_<region>.<ext>``, as nnU-Net's export writes those of 2D
            images) are then read too, as a tuple of the files in this order (:attr:`CaseFiles.maps`). None: only
            ``<case>_<measure>`` files (per-region files found are named in a ``UserWarning``).
        say_missing: with ``allow_missing``, the ``UserWarning`` listing the labelled cases skipped (default);
            False: they are skipped without it, for a caller that takes some of the cases only and checks those
            itself (``dicom-export``'s part of a run, the others being other runs' cases), so that it filters no
            warning by its text.

    Returns:
        One :class:`CaseFiles` per matched case, sorted by case id.

    Raises:
        ValueError: an unknown ``layout`` or measure.
        TypeError: ``regions`` is a string or holds something else than names, or ``say_missing`` is no bool.
        FileNotFoundError: a folder does not exist.
        CaseError: no label, a measure without maps, a case with per-region maps of some regions only or with both a
            ``<case>_<measure>`` file and per-region files of one measure (ambiguous), an explicit ``seg_suffix`` /
            ``probs_suffix`` that names no file of a labelled case, an explicit ``uncertainty`` folder without maps,
            or cases that lack files or labels (see above), or a case whose image is its own label, segmentation,
            probabilities or map file (``images`` naming one of those folders, e.g. the predictions of the
            ``nnunet`` layout).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("labels/a.nii.gz", "pred/a_seg.nii.gz", "pred/a_predictive_entropy.nii.gz"):
        ...         (Path(d) / name).parent.mkdir(exist_ok=True)
        ...         _ = (Path(d) / name).write_bytes(b"")
        ...     [(c.case_id, c.seg.name, sorted(c.maps)) for c in match_cases(Path(d) / "labels", Path(d) / "pred")]
        [('a', 'a_seg.nii.gz', ['predictive_entropy'])]
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {layout!r}")
    if regions is not None and (isinstance(regions, (str, bytes)) or not all(isinstance(r, str) for r in regions)):
        raise TypeError(f"regions must be a list of region names, got {regions!r:.80}")
    say_missing = check_bool(say_missing, "say_missing")
    lay = LAYOUTS[layout]
    given_suffixes = {"--seg-suffix": seg_suffix, "--probs-suffix": probs_suffix}  # None: the layout's
    seg_suffix = lay["seg_suffix"] if seg_suffix is None else seg_suffix
    probs_suffix = lay["probs_suffix"] if probs_suffix is None else probs_suffix
    pred_dir = Path(predictions)
    unc_dir = Path(uncertainty) if uncertainty is not None else pred_dir / lay["uncertainty_subdir"]
    seg_ok = Path(labels).resolve() != pred_dir.resolve()  # a prediction folder's .dcm files are no labels
    # each folder given, checked before any is read: the command line names its option (--images folder not found;
    # found by a probe of every command: a missing --images said "folder not found", naming no option)
    for parameter, folder, given in (("labels", labels, True), ("predictions", pred_dir, True),
                                     ("uncertainty", unc_dir, uncertainty is not None),
                                     ("images", images, images is not None)):
        if given:  # an uncertainty folder named explicitly: not evaluated without maps
            input_folder(folder, parameter)
    refuse_dataset_root(labels, "labels", kind="labels")  # an nnU-Net / MSD dataset's root: name its labelsTr/
    label_files = _list_one_family(labels, label_suffix, REFERENCE_EXTENSIONS if seg_ok else VOLUME_EXTENSIONS,
                                   NNUNET_IMAGE_EXTENSIONS, what="labels folder")
    if not label_files:
        raise CaseError(f"no label volume found in {labels}")
    seg_labels = sorted(c for c, p in label_files.items() if is_seg_label(p))
    if seg_labels and images is None:
        raise CaseError(f"the labels in {labels} are DICOM SEG objects (e.g. {label_files[seg_labels[0]].name}): "
                        "give --images, the folder of the cases' DICOM series (a SEG is read on its series' grid)")
    seg_files = _list_one_family(pred_dir, seg_suffix, VOLUME_EXTENSIONS, NNUNET_IMAGE_EXTENSIONS,
                                 what="predictions folder")
    if seg_suffix == probs_suffix:
        # nnU-Net: <case>.nii.gz is the segmentation, <case>.npz the probabilities
        prob_files = list_files(pred_dir, probs_suffix, (".npz",))
    else:
        prob_files = list_files(pred_dir, probs_suffix, PROBABILITY_EXTENSIONS)
    if seg_suffix == "":
        # "" matches every file: keep probability files and measure maps out of the segmentations; a map is
        # <case>_<measure> of a case listed here, in a maps folder that is this one (found by hostile testing: every
        # name ending in _<measure> was dropped, so nnU-Net's segmentation of a case 'scan_variance' was never read and
        # the case scored the argmax of its probabilities instead, or was refused as having no prediction)
        taken = set(prob_files.values())
        maps_here = unc_dir.resolve() == pred_dir.resolve()
        cases_here = set(seg_files) | set(prob_files)
        # a map-shaped name is a segmentation only as a labelled case's id (found by review: a map left by a removed
        # case, c3_predictive_entropy, was read as the segmentation of a case 'c3_predictive_entropy' without label)
        seg_files = {k: v for k, v in seg_files.items()
                     if v not in taken and not (_map_of(k, None) and (k not in label_files
                                                                      or (maps_here and _map_of(k, cases_here))))}
    # a suffix named explicitly must name files (found by hostile testing: `--seg-suffix _postt`, a typo, scored the
    # argmax of the probabilities instead of the post-processed segmentations, with exit status 0)
    for option, found in (("--seg-suffix", seg_files), ("--probs-suffix", prob_files)):
        given = given_suffixes[option]
        if given is not None and not set(found) & set(label_files):
            raise CaseError(f"{option} {given!r}: no file <case>{given}.<ext> of a labelled case in {pred_dir}; "
                            f"check the suffix (or leave {option} out for the layout's)")
    map_files: dict[str, dict[str, Path | tuple[Path, ...]]] = {}
    if measures is not None:
        measures = [canonical_measure(m, stacklevel=3) for m in measures]
    unknown = set(measures or ()) - set(MEASURES)
    if unknown:
        raise ValueError(f"measures must be among {MEASURES}, got {sorted(unknown)}")
    if unc_dir.is_dir():
        for m in MEASURES if measures is None else measures:
            found = _list_one_family(unc_dir, f"_{m}", VOLUME_EXTENSIONS, _NNUNET_MAP_EXTENSIONS)
            if not found:  # files written by older versions under a deprecated name, e.g. <case>_max_softmax
                for old in (o for o, n in DEPRECATED_MEASURES.items() if n == m):
                    found = _list_one_family(unc_dir, f"_{old}", VOLUME_EXTENSIONS, _NNUNET_MAP_EXTENSIONS)
                    if found:
                        warnings.warn(
                            f"reading the <case>_{old} maps of {unc_dir} as {m!r} ({old!r} is the deprecated name "
                            "of this map; files with that name will not be read in the next release)",
                            DeprecationWarning,
                            stacklevel=2,
                        )
                        break
            if regions:
                found = _with_region_files(unc_dir, m, regions, found, label_files)
            if found:
                map_files[m] = found
    # maps written one file per region (<case>_<measure>_<region>: 2D images, formats without 4D images) are not
    # read: said, so that a case is never evaluated without its maps without a word (found by review 61)
    read = [*seg_files.values(), *prob_files.values(),
            *(p for found in map_files.values() for f in found.values() for p in _map_paths(f))]
    region_file = _unread_region_map(unc_dir, label_files, read, MEASURES if measures is None else measures)
    if region_file is not None:
        warnings.warn(f"{region_file.name} in {unc_dir} is not read: it looks like one region's uncertainty map, "
                      "written one file per region (<case>_<measure>_<region>) for 2D images and formats without 4D "
                      "images, which a region evaluation reads when its regions (--regions) are named so; the cases "
                      "are evaluated without these maps", UserWarning, stacklevel=2)
    if uncertainty is not None and measures is None and not map_files:  # named explicitly: it must hold maps
        raise CaseError(f"--uncertainty {unc_dir}: no uncertainty map (<case>_<measure>.<ext>, measure one of "
                        f"{MEASURES}) in it; give the folder of the maps, or leave --uncertainty out to use the maps "
                        "derived from the probabilities (entropy, 1 - max p)")
    if measures:
        absent = [m for m in measures if m not in map_files]
        if absent:
            raise CaseError(f"no uncertainty map for measure(s) {absent} in {unc_dir} (files <case>_<measure>.<ext>)"
                            + ("" if region_file is None else f"; {region_file.name} there is one region's map, "
                               "written one file per region, read only when the evaluation's regions are named so"))
    image_files = case_image_files(images, pred_dir, label_files, layout) if images is not None else {}
    # the options as the command line names them: triage matches the predictions with themselves (labels = segs)
    roles = {"label": "--predictions" if not seg_ok else "--labels", "segmentation": "--predictions",
             "probabilities": "--predictions", "map": "--uncertainty" if uncertainty is not None else "--predictions"}

    swapped = (_swapped_folders_hint(labels, pred_dir, label_files, lay, seg_suffix, probs_suffix)
               if seg_ok and not prob_files and not map_files else "")
    cases, problems = [], {}
    for cid, label in sorted(label_files.items()):
        seg, probs = seg_files.get(cid), prob_files.get(cid)
        missing = []
        if seg is None and probs is None:
            missing.append(f"segmentation or probabilities in {pred_dir}")
        missing += [f"{m} map in {unc_dir}" for m in map_files if cid not in map_files[m]]
        if images is not None and cid not in image_files:
            missing.append(f"image in {images}")
        if missing:
            problems[cid] = missing
            continue
        files = CaseFiles(cid, label, seg, probs, {m: f[cid] for m, f in map_files.items()}, image_files.get(cid))
        if files.image is not None:  # --images naming the labels' or predictions' folder: a file scored as an image
            image = files.image.resolve()
            for role, path in (("label", label), ("segmentation", seg), ("probabilities", probs),
                               *(("map", p) for f in files.maps.values() for p in _map_paths(f))):
                if path is not None and path.resolve() == image:
                    raise CaseError(f"--images {images} and {roles[role]} name the same files: the image of case "
                                    f"{cid!r} would be its {role} {path.name}; give the folder of the input images")
        cases.append(files)
    extra = set(seg_files) | set(prob_files)
    extra -= set(label_files)
    if problems and (not allow_missing or not cases):
        first = sorted(problems)[0]
        raise CaseError(
            f"{len(problems)} of {len(label_files)} case(s) lack files: {_describe(problems)}; e.g. case {first!r} "
            f"has no {', no '.join(problems[first])}{case_id_hint(first, extra, 'the predictions')}"
            + ("" if allow_missing or not missing_hint or swapped else f" ({missing_hint})") + swapped
        )
    if extra and not cases:
        raise CaseError(f"no prediction matches a label; predictions exist for {_describe(extra)}{swapped}")
    if swapped:  # matched, but the labels are a prediction folder's files: said before any case is read
        warnings.warn(swapped.lstrip("; "), UserWarning, stacklevel=2)
    if extra and not allow_missing_labels:
        first = sorted(extra)[0]
        raise CaseError(
            f"{len(extra)} case(s) have predictions in {pred_dir} but no label in {labels}: {_describe(extra)}"
            f"{case_id_hint(first, set(label_files) - {c.case_id for c in cases}, 'the labels')}; add their labels, "
            "or pass --allow-missing-labels to evaluate only the labelled cases"
        )
    if problems and say_missing:
        warnings.warn(f"{len(problems)} of {len(label_files)} labelled case(s) skipped for lack of files "
                      f"(allow_missing): {_describe(problems)}", UserWarning, stacklevel=2)
    if extra:
        warnings.warn(f"{len(extra)} case(s) with predictions but no label skipped (allow_missing_labels): "
                      f"{_describe(extra)}", UserWarning, stacklevel=2)
    return cases


def _map_paths(path: Path | tuple[Path, ...]) -> tuple[Path, ...]:
    """The files of one measure's map of a case (:attr:`CaseFiles.maps`): one file, or one per region."""
    return tuple(path) if isinstance(path, tuple) else (path,)


def _map_name(path: Path | tuple[Path, ...]) -> str:
    """The name of a map in messages: its file's, or its per-region files' joined by ``+``."""
    return "+".join(p.name for p in _map_paths(path))


def _with_region_files(folder: Path, measure: str, regions: Sequence[str], single: Mapping[str, Path],
                       case_ids: Collection[str]) -> dict[str, Path | tuple[Path, ...]]:
    """``single`` (``{case: <case>_<measure> file}``) with the labelled cases' per-region files of ``measure``.

    A case's per-region files ``<case>_<measure>_<region>.<ext>`` become the tuple of its files in ``regions``' order.

    Raises:
        CaseError: naming the case, when it has per-region files of some regions only, or both a
            ``<case>_<measure>`` file and per-region files (which one holds its map is ambiguous).
    """
    per_region = {r: _list_one_family(folder, f"_{measure}_{r}", VOLUME_EXTENSIONS, _NNUNET_MAP_EXTENSIONS)
                  for r in regions}
    out: dict[str, Path | tuple[Path, ...]] = dict(single)
    for cid in sorted({c for found in per_region.values() for c in found} & set(case_ids)):
        have = [r for r in regions if cid in per_region[r]]
        example = per_region[have[0]][cid].name
        if cid in single:
            raise CaseError(f"case {cid!r}: both {single[cid].name} and per-region {measure} maps ({example}) in "
                            f"{folder}: which holds the case's map is ambiguous; remove one of them")
        if len(have) != len(regions):
            absent = [r for r in regions if r not in have]
            raise CaseError(f"case {cid!r}: its {measure} maps written one file per region ({example}) in {folder} "
                            f"lack the file(s) of region(s) {absent} (<case>_{measure}_<region>.<ext>, one for each "
                            f"of the regions {list(regions)})")
        out[cid] = tuple(per_region[r][cid] for r in regions)
    return out


def _unread_region_map(folder: Path, case_ids: Collection[str], read: Iterable[Path], measures: Iterable[str]
                       ) -> Path | None:
    """The first file of ``folder`` named ``<case>_<measure>_<region>.<ext>`` that is not read as a map, or None.

    Such files are the per-region maps that nnU-Net's export writes one file per region (a 2D image, a format without
    4D images: :func:`monai_unc.nnunet.export.write_region_maps`); :func:`match_cases` reads one file per measure.

    Args:
        folder: the uncertainty folder (nothing is found where it is no folder).
        case_ids: the labelled cases.
        read: the files read (maps, segmentations, probabilities): none of them is one.
        measures: the measures read (a deprecated name of one counts too).
    """
    if not folder.is_dir():
        return None
    taken = {os.path.abspath(p) for p in read}
    names = list(measures)
    names += [old for old, new in DEPRECATED_MEASURES.items() if new in names]
    ids = set(case_ids)
    for path in sorted(folder.iterdir()):
        split = split_extension(path.name, MAP_EXTENSIONS)
        if split is None or os.path.abspath(path) in taken:
            continue
        stem = split[0]
        for m in names:
            at = stem.find(f"_{m}_")
            while at > 0:  # <case>_<measure>_<region>, a case id that may hold '_<measure>_' itself
                if stem[:at] in ids and len(stem) > at + len(m) + 2:
                    return path
                at = stem.find(f"_{m}_", at + 1)
    return None


def _swapped_folders_hint(labels: str | os.PathLike, pred_dir: Path, label_files: Mapping[str, Path],
                          lay: Mapping[str, str], seg_suffix: str, probs_suffix: str) -> str:
    """``"; --labels and --predictions look swapped: ..."`` when the labels folder holds what a prediction folder holds.

    Called when the predictions folder gave neither probabilities nor maps. The labels folder looks like the output
    of ``infer`` / ``nnunet-predict`` when most of its files are named ``<case><seg_suffix>`` /
    ``<case><probs_suffix>`` / ``<case>_<measure>``, or it holds nnU-Net's ``<case>.npz`` probabilities or the
    layout's uncertainty sub-folder. In earlier versions ``evaluate -l PRED -p LABELS`` said only that every
    case lacked files, or that the number of classes was unknown.
    """
    labels = Path(labels)
    named = [c for c in label_files if (seg_suffix and c.endswith(seg_suffix))
             or (probs_suffix and c.endswith(probs_suffix)) or _map_of(c, None)]
    held = ""
    if label_files and 2 * len(named) >= len(label_files):
        held = f"files named as infer writes them (e.g. {label_files[sorted(named)[0]].name})"
    elif seg_suffix == probs_suffix and list_files(labels, probs_suffix, (".npz",)):
        held = "nnU-Net's <case>.npz probabilities"
    elif lay["uncertainty_subdir"] and (labels / lay["uncertainty_subdir"]).is_dir():
        held = f"an {lay['uncertainty_subdir']}/ folder of maps"
    elif _header_kind(next(iter(label_files.values()), None), channels=True) == "f":
        # multi-channel float "labels" (probability volumes) and integer predictions, from the headers; float labels
        # of one channel are common and valid (nibabel stores float64 by default; found by review 61: they drew this
        # hint on a segmentation-only evaluation)
        first = next(iter(_list_one_family(pred_dir, seg_suffix, VOLUME_EXTENSIONS,
                                           NNUNET_IMAGE_EXTENSIONS).values()), None)
        if _header_kind(first) in ("i", "u"):
            held = (f"multi-channel floating-point volumes (e.g. {next(iter(label_files.values())).name}) where the "
                    f"predictions are integer masks (e.g. {first.name})")
    if not held:
        return ""
    return (f"; --labels and --predictions look swapped: the labels folder {labels} holds {held} and the "
            f"predictions folder {pred_dir} no probabilities or maps (give -l the reference labels, -p the "
            "predictions)")


def _header_kind(path: Path | None, channels: bool = False) -> str | None:
    """The numpy kind (``f``, ``i``, ``u``) of a NIfTI file's stored voxels, read from its header; None otherwise.

    With ``channels``, None also for a volume of one channel (not 4D ``(X, Y, Z, C)`` with ``C > 1``).
    """
    if path is None or not path.name.lower().endswith((".nii", ".nii.gz")):
        return None
    try:
        img = load_nifti(path)
        if channels and (len(img.shape) < 4 or img.shape[3] < 2):
            return None
        return str(img.get_data_dtype().kind)
    except Exception:  # noqa: BLE001 - a hint only: an unreadable file is its case's error
        return None


def case_id_hint(case_id: str, known_ids: Iterable[str], where: str) -> str:
    """`` (<where> have case 'X' ...)``: the ids of ``known_ids`` that ``case_id`` may have been meant as, or ``""``.

    Said beside a file that matches no case (a label without a prediction, a prediction without a label, an image
    without a label), so that a reader who sees the case under another name is spared a search:

    - an id that differs only in letter case, Unicode form (``Müller`` typed on Linux, NFC, and copied from macOS,
      NFD) or surrounding spaces, which look the same in a message: both spellings are shown with
      :func:`ascii`;
    - else up to three ids close in spelling (:func:`monai_unc.keys.close_names`) or holding one another
      (``case1`` / ``case1_label``, ``case1_0000``), whose numbers agree: ids of a numbered cohort that differ in
      their numbers (``case_010`` / ``case_011``) are other cases, never proposed.

    Args:
        case_id: the id of the file that matches no case.
        known_ids: the case ids of the other side (the labels, the predictions).
        where: the other side as the message names it (``"the labels"``).

    Returns:
        The hint, with a leading space and in parentheses, or an empty string.

    Example:
        >>> case_id_hint("case1", ["case1_label", "case2_label"], "the labels")
        " (the labels have case 'case1_label': the same case under another name? file names must give the same id)"
        >>> case_id_hint("case_011", ["case_010", "case_001"], "the labels")
        ''
    """
    others = sorted({str(o) for o in known_ids} - {case_id})
    key = folded_case_id(case_id).strip()
    same = [o for o in others if folded_case_id(o).strip() == key]
    if same:
        return (f" ({where} have case {same[0]!r} ({ascii(same[0])}), which differs from {case_id!r} "
                f"({ascii(case_id)}) only in letter case, Unicode form or spaces: rename one)")
    numbers = re.findall(r"\d+", case_id)

    def same_numbers(other: str) -> bool:  # one id's numbers begin with the other's (case1 / case1_0000)
        theirs = re.findall(r"\d+", other)
        n = min(len(numbers), len(theirs))
        return [int(x) for x in numbers[:n]] == [int(x) for x in theirs[:n]]

    def affixed(longer: str, shorter: str) -> bool:  # case1_label / case1, img-case1 / case1
        return bool(shorter) and any(longer.startswith(shorter + c) or longer.endswith(c + shorter) for c in "_-. ")

    holding = [o for o in others if affixed(folded_case_id(o).strip(), key) or affixed(key, folded_case_id(o).strip())]
    close = [o for o in dict.fromkeys([*holding, *close_names(case_id, others, n=3)]) if same_numbers(o)][:3]
    if not close:
        return ""
    names = " or ".join(repr(o) for o in close)
    return (f" ({where} have case {names}: the same case under another name? file names must give the same "
            "id)")


def _map_of(stem: str, case_ids: Collection[str] | None) -> bool:
    """Whether ``stem`` is ``<case>_<measure>`` (a current or deprecated measure name) of a case of ``case_ids``.

    ``case_ids`` None: of any case.
    """
    return any(stem.endswith(f"_{m}") and len(stem) > len(m) + 1
               and (case_ids is None or stem[: -len(m) - 1] in case_ids) for m in (*MEASURES, *DEPRECATED_MEASURES))


# ----------------------------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------------------------
def read_volume(path: str | os.PathLike, dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Read a volume as MONAI's ``LoadImage`` reads it, channel first, float32, with its affine.

    NIfTI files (``.nii``, ``.nii.gz``; NIfTI-1 and NIfTI-2) are read with nibabel directly, without importing MONAI
    (seconds per process): the same array (float32, ``scl_slope`` / ``scl_inter`` applied, the values bit for bit) and
    affine (MONAI's choice between sform and qform) as ``LoadImage(image_only=True, ensure_channel_first=True)``, and
    the same error for an unreadable file (one exception where python-isal is installed: a corrupted ``.nii.gz``
    whose deflate stream declares an incomplete Huffman code, which zlib refuses and ISA-L's inflate decodes, is read,
    its CRC-32 checked); a NIfTI file this path is not sure to read as ``LoadImage`` does (complex or RGB data, 1 or
    more than 5 dimensions, ``MONAI_DICOM_READER`` set) and every other format go to ``LoadImage``.
    A 2D or 3D file gives ``C = 1``; a 4D NIfTI ``(X, Y, Z, C)`` gives ``C`` channels first (a 5D one ``(X, Y, Z, 1,
    C)`` gives ``(C, X, Y, Z, 1)``, as ``LoadImage``). ``.npy`` files have no geometry: their affine is the identity.
    ``.mha`` / ``.mhd`` / ``.nrrd`` files, which MONAI reads only with ``itk`` / ``pynrrd`` installed, are otherwise
    read with SimpleITK in MONAI's ITK convention (index order ``x, y, z``, the LPS geometry as a RAS affine:
    :func:`lps_image_affine`; the values as stored). A folder is read as one DICOM series of single-frame CT or MR
    slices (:func:`monai_unc.io.dicom.read_series`, the ``dicom`` extra): ``C = 1``, real-world values (Hounsfield
    units for CT), the affine from the slices' positions.

    Args:
        path: the volume file (any format MONAI reads) or a DICOM series folder.
        dtype: the data type of the array (``LoadImage``'s float32 by default), or None for the type the file stores
            where nibabel reads it (after its ``scl_slope`` / ``scl_inter`` scaling: the integers of a label map
            stay 1 or 2 bytes per voxel, in the file's order, not copied; a file mapping is copied); the other
            readers' type (float32) there.

    Returns:
        ``(data, affine)``: ``data`` ``(C, *spatial)`` (float32, ``LoadImage``'s type, but for the SimpleITK
        fallback; ``dtype``), ``affine`` ``(4, 4)`` float64 voxel -> world (mm).

    Raises:
        FileNotFoundError: the file does not exist.
        CaseError: the file or its volume is empty or cannot be read (truncated or corrupt), its affine holds NaN or
            inf, or it is a symbolic link to nothing or a folder named like a volume file (:func:`check_volume_entry`).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from monai_unc.io.files import save_nifti
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = save_nifti(np.zeros((4, 5, 6)), np.diag([2.0, 2, 2, 1]), Path(d) / "a.nii.gz")
        ...     data, affine = read_volume(path)
        ...     data.shape, affine[0, 0]
        ((1, 4, 5, 6), np.float64(2.0))
    """
    path = Path(path)
    check_volume_entry(path)  # a link to nothing, a folder x.nii.gz: the reason, not "file not found"
    if path.is_dir():  # a DICOM series folder (dicom_series_folders): its float32 volume and RAS affine
        data, affine, _ = _read_series_volume(path, dtype)
        return data, affine
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    if path.stat().st_size == 0:
        raise CaseError(f"cannot read {path}: the file is empty (0 bytes)")
    if path.name.lower().endswith(".gz"):  # an uncompressed NIfTI file named .gz: the reason, not "corrupt?"
        with open(path, "rb") as f:
            head = f.read(4)
        if nifti_version(head) is not None:
            raise CaseError(f"cannot read {path}: an uncompressed NIfTI file although its name ends with .gz (gzip "
                            "it, or rename it without .gz)")
    _check_nifti_claim(path)
    if path.name.lower().endswith((*NNUNET_IMAGE_EXTENSIONS, ".npz")):  # nnU-Net's formats, in its axis order
        data, affine = read_nnunet_image(path)
        read = _as_type(data, dtype), affine
    else:
        read = _read_nifti(path, dtype)
    if read is None:
        data, affine = _read_with_loader(path)
        read = _as_type(data, dtype), affine
    if read[0].size == 0:  # found by hostile review 59: MONAI reads a (16, 16, 0) volume as shape (0,), which infer
        # called "spatial shape () (0D)" and evaluate "0 channels"
        raise CaseError(f"cannot read {path}: the volume is empty (an axis of length 0: no voxels)")
    if not np.all(np.isfinite(read[1])):  # found by hostile review 59: predicted, and written, with a NaN affine
        raise CaseError(f"cannot read {path}: its affine (sform / qform) holds NaN or inf, so its voxels have no "
                        "position in space (a corrupt header): fix the file's geometry")
    return read


#: a NIfTI file whose header claims more data bytes than this is checked against the file's size before it is read
_CLAIM_CHECK_BYTES = 1 << 26
#: the most bytes one byte of a deflate stream inflates to (deflate's limit is about 1032; rounded up)
_DEFLATE_MAX_RATIO = 1100


def _check_nifti_claim(path: Path) -> None:
    """Refuse a NIfTI file whose header claims more data than the file can hold, before the data are allocated.

    The readers (nibabel, ``LoadImage``) allocate (and zero) the whole volume the header claims, then find the file
    too short: a file of a few hundred bytes claiming 2048^3 float32 voxels takes 32 GiB before its error (found by
    hostile testing: 1.5 GiB peak for a 65-byte ``.nii.gz`` claiming 1 GiB). An uncompressed file must hold the
    header's offset plus the data; a ``.gz`` file cannot inflate to more than :data:`_DEFLATE_MAX_RATIO` times its
    size. Only claims over :data:`_CLAIM_CHECK_BYTES` are checked (a smaller truncated file gives the readers' own
    error); a header nibabel does not read is left to the readers. A ``.gz`` file, which is inflated into memory
    whole, must also fit in the machine's free memory and swap (``_utils.host_memory_free``): a 32 MB file within
    deflate's ratio may claim 32 GB, and the operating system would kill the run, with its other cases, mid-read.
    A header whose spatial unit is metres or microns gets a warning (once per unit and process): the affine is read
    in the file's unit, as nibabel and MONAI read it, while every distance is labelled mm.

    Raises:
        CaseError: one line naming the file, the claimed shape and type and the file's size.
    """
    name = str(path)
    if not name.lower().endswith((".nii", ".nii.gz")):
        return
    try:

        img = load_nifti(os.path.expanduser(name))
        header = img.header
        shape = tuple(int(n) for n in header.get_data_shape())
        dtype = header.get_data_dtype()
        need = math.prod(shape) * dtype.itemsize
        offset = int(header.get_data_offset())
        size = path.stat().st_size
        unit = header.get_xyzt_units()[0]
    except Exception:  # noqa: BLE001 - a header nibabel does not read: the readers report it
        return
    if unit in ("meter", "micron"):  # nibabel and MONAI ignore the unit (ITK converts it to mm)
        warnings.warn(f"a NIfTI file's spatial unit is {unit} (xyzt_units): its affine is read as nibabel and MONAI "
                      "read it, so distances, margins and volumes are computed in that unit although labelled mm; "
                      "convert such files to mm for figures in mm", UserWarning, stacklevel=3)
    if need <= _CLAIM_CHECK_BYTES:
        return
    gz = name.lower().endswith(".gz")
    most = _DEFLATE_MAX_RATIO * size if gz else size - offset
    if need > most:
        held = (f"a {size}-byte compressed file inflates to at most {most} bytes" if gz
                else f"the file holds {most} bytes after its header")
        raise CaseError(f"cannot read {path}: its header claims {'x'.join(map(str, shape))} voxels of {dtype} "
                        f"({need} bytes of data), but {held} (a truncated or corrupt file?)")
    free = host_memory_free(swap=True) if gz else None
    if free is not None and need > free:  # inflated into memory whole: the process would be killed mid-read
        raise CaseError(f"cannot read {path}: its header claims {'x'.join(map(str, shape))} voxels of {dtype} "
                        f"({need / 2**20:.0f} MiB of data), more than this machine's free memory "
                        f"({free / 2**20:.0f} MiB, swap included)")


def read_nnunet_image(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read a label map, segmentation or map that nnU-Net's ``Tiff3DIO`` or ``NaturalImage2DIO`` wrote.

    nnU-Net holds these images in its array order, the reverse of the ``x, y, z`` order of NIfTI files: ``(z, y,
    x)`` for a 3D ``.tif`` / ``.tiff`` (``tifffile``), ``(1, y, x)`` for a 2D image (``.png``, ``.bmp``, a 2D
    ``.tif``). The axes are reversed here, as :func:`read_probabilities` reverses those of nnU-Net's ``.npz``
    probabilities, so a case's segmentation, probabilities and maps share one grid: ``(1, x, y, z)`` and ``(1, x, y,
    1)``. A 3D ``.tif``'s voxel spacing is ``Tiff3DIO``'s, the ``"spacing"`` (in the array's order) of
    ``<name>.json`` beside it (``(1, 1, 1)`` with a warning without one, as nnU-Net assumes), the affine the
    diagonal of that spacing; 2D images have no geometry (the identity). A ``.npz`` holds a map of a 2D natural-image
    dataset (key ``map``, :func:`monai_unc.nnunet.export.write_float_map`), in nnU-Net's order too.

    Args:
        path: a ``.tif`` / ``.tiff`` / ``.png`` / ``.bmp`` image or a ``.npz`` map.

    Returns:
        ``(data, affine)``: ``data`` ``(1, *spatial)`` in the type stored, ``affine`` ``(4, 4)`` float64.

    Raises:
        CaseError: the file cannot be read, holds colour channels or more than 3 axes (no label map or map), a
            ``.npz`` without the key ``map``, or a spacing file whose ``"spacing"`` is not 3 positive numbers. A
            ``.tif`` of shape ``(H, W, 3)`` or ``(H, W, 4)`` without a spacing file beside it is a 2D RGB(A) image,
            as nnU-Net reads it (its ``NaturalImage2DIO``, tried before ``Tiff3DIO`` for ``.tif``, takes the last
            axis as colour channels), and refused: labels and segmentations have one channel. With its spacing file
            (``Tiff3DIO`` writes one beside every 3D segmentation) it is read as a 3D volume.

    Example:
        >>> import json, tempfile
        >>> import tifffile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     # photometric="minisblack": z pages of one channel (tifffile stores 3 or 4 leading planes as RGB(A))
        ...     tifffile.imwrite(Path(d) / "case.tif", np.zeros((4, 5, 6), np.uint8), photometric="minisblack")
        ...     _ = (Path(d) / "case.json").write_text(json.dumps({"spacing": [3.0, 0.5, 0.5]}))
        ...     data, affine = read_nnunet_image(Path(d) / "case.tif")
        ...     data.shape, np.diag(affine).tolist()
        ((1, 6, 5, 4), [0.5, 0.5, 3.0, 1.0])
    """
    path = Path(path)
    name = path.name.lower()
    try:
        if name.endswith(".npz"):
            with np.load(path, allow_pickle=False) as f:
                if "map" not in f.files:
                    raise CaseError(f"{path}: an .npz map must hold the key 'map' (as nnU-Net's 2D natural-image "
                                    f"datasets' maps are written), has {f.files}")
                arr = np.asarray(f["map"])
        elif name.endswith((".tif", ".tiff")):
            import tifffile

            arr = np.asarray(tifffile.imread(str(path)))
        else:
            from PIL import Image

            with Image.open(path) as image:
                arr = np.asarray(image)
    except CaseError:
        raise
    except Exception as e:  # truncated / corrupt files: the readers' many exception types
        raise CaseError(f"cannot read {path}: {_reason(e)} (a truncated or corrupt file?)") from None
    tiff_3d = name.endswith((".tif", ".tiff")) and arr.ndim == 3
    if tiff_3d and arr.shape[-1] in (3, 4) and not _tiff_spacing_file(path).is_file():
        # nnU-Net tries NaturalImage2DIO first for a .tif (reader_writer_registry's order): it reads (H, W, 3 | 4) as
        # one 2D RGB(A) image, colour channels last; labels and segmentations are never colour images (it writes them
        # with one channel), and Tiff3DIO, the only reader of 3D .tif files, writes its spacing file beside each one
        aux = _tiff_spacing_file(path).name
        raise CaseError(f"{path}: an array of shape {arr.shape} is a 2D RGB(A) image as nnU-Net reads a .tif "
                        "(NaturalImage2DIO: colour channels last), not a label map, segmentation or map (one channel): "
                        f"save it with one channel; a 3D .tif of {arr.shape[-1]} voxels along x needs its spacing "
                        f"file {aux} beside it (as nnU-Net's Tiff3DIO writes it)")
    if arr.ndim == 2:
        arr = arr[None]  # nnU-Net's (1, y, x)
    if arr.ndim != 3 or (arr.shape[0] != 1 and not (tiff_3d or name.endswith(".npz"))):
        raise CaseError(f"{path}: a label map, segmentation or map must be one 2D image or a 3D .tif, got an array "
                        f"of shape {arr.shape} (colour channels or more axes)")
    affine = np.eye(4)
    if tiff_3d:
        affine[:3, :3] = np.diag(_tiff_spacing(path)[::-1])
    return np.ascontiguousarray(arr.transpose(2, 1, 0))[None], affine


def _tiff_spacing_file(path: Path) -> Path:
    """``Tiff3DIO``'s spacing file of a ``.tif`` / ``.tiff``: ``<name>.json`` beside it (its last suffix replaced)."""
    return path.with_name(path.name[: path.name.rfind(".")] + ".json")


def _assumed_spacing(*paths: Path | None) -> str:
    """What a grid error adds for a 3D ``.tif`` read without its spacing file (spacing (1, 1, 1) assumed), or ``""``.

    The warning of a case that then fails is not shown with its error (in earlier versions a
    label copied without its ``<name>.json`` was refused as "different affines ... 7.382 mm apart", nothing said of
    the spacing assumed).
    """
    said = []
    for i, path in enumerate(paths):
        if path is None or not path.name.lower().endswith((".tif", ".tiff")) or _tiff_spacing_file(path).is_file():
            continue
        with contextlib.suppress(Exception):  # a 2D .tif (NaturalImage2DIO) has no spacing: nothing assumed
            import tifffile

            with tifffile.TiffFile(str(path)) as tif:
                if len(tif.series) and len(tif.series[0].shape) == 3:
                    said.append(f"{'the label ' if i == 0 else ''}{path.name} has no spacing file "
                                f"{_tiff_spacing_file(path).name} beside it: spacing (1, 1, 1) was assumed")
    return "; ".join(said) + ("; nnU-Net's Tiff3DIO writes one beside each image, label and prediction"
                              if said else "")


def _positive_length(v: Any) -> bool:
    """Whether ``v`` (a JSON value) is a finite positive number that a float holds (an int of 400 digits is not)."""
    try:
        return is_finite_real(v) and v > 0
    except OverflowError:  # found by the hostile review of review 62: an OverflowError naming no file
        return False


def _tiff_spacing(path: Path) -> tuple[float, float, float]:
    """``Tiff3DIO``'s spacing of a 3D ``.tif`` (array order ``z, y, x``): ``"spacing"`` of ``<name>.json`` beside it.

    Raises:
        CaseError: the spacing file cannot be read or its ``"spacing"`` is not 3 positive finite numbers.
    """
    aux = _tiff_spacing_file(path)
    if not aux.is_file():
        # the path, not the name: a label and a prediction have the same name (hostile review of review 62)
        warnings.warn(f"{path}: no spacing file {aux.name} beside it (nnU-Net's Tiff3DIO writes one); spacing "
                      "(1, 1, 1) assumed, as nnU-Net assumes it", UserWarning, stacklevel=3)
        return (1.0, 1.0, 1.0)
    try:
        doc = json.loads(aux.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CaseError(f"cannot read the spacing file {aux}: {_reason(e)}") from None
    spacing = doc.get("spacing") if isinstance(doc, dict) else doc
    if not isinstance(spacing, list) or len(spacing) != 3 or not all(_positive_length(v) for v in spacing):
        raise CaseError(f"{aux}: \"spacing\" must be 3 positive numbers (the voxel size along z, y, x, as nnU-Net's "
                        f"Tiff3DIO writes it), got {spacing!r:.80}")
    return (float(spacing[0]), float(spacing[1]), float(spacing[2]))


def image_unit(path: str | os.PathLike | None) -> str | None:
    """The unit of the values :func:`read_volume` reads from an image, for a reader's legend.

    A DICOM series is read through its Modality LUT (``RescaleSlope`` / ``RescaleIntercept``): a CT series gives
    Hounsfield units (``"HU"``), another series (MR) real-world values of no standard unit
    (``"real-world values"``), neither of them the stored pixel values. A series whose slices state a
    ``ModalityLUTSequence`` (a table, not applied by :func:`~monai_unc.io.dicom.read_series`, as SimpleITK and
    MONAI's readers leave it) gives its stored pixel values: ``"stored values"``, of CT too (in earlier versions its
    legend said HU). A volume file (NIfTI, ...) gives its values as stored (its own ``scl_slope`` / ``scl_inter``
    applied) in a unit no header states: None.

    Args:
        path: the image file or DICOM series folder (``CaseFiles.image``), or None (no image).

    Returns:
        ``"HU"``, ``"real-world values"``, ``"stored values"`` or None (a volume file, no image, or a series folder
        whose headers cannot be read: the image's own read then says why).

    Raises:
        TypeError: ``path`` is not a path.

    Example:
        >>> image_unit(None) is None
        True
    """
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path or None, got {type(path).__name__}")
    path = Path(path)
    if not path.is_dir():
        return None
    try:
        from .dicom import read_series

        series = read_series(path, pixels=False)
    except (ImportError, OSError, ValueError):
        return None
    return _series_unit(series)


def _series_unit(series: Any) -> str:
    """:func:`image_unit` of a DICOM series already read (``DicomSeries``): ``"HU"`` for CT, else real-world values.

    Stored values where any slice states a ``ModalityLUTSequence``: the reader does not apply the table.
    """
    if series.states_modality_lut:
        return "stored values"
    modality = str(series.datasets[0].get("Modality", "")).strip().upper() if series.datasets else ""
    return "HU" if modality == "CT" else "real-world values"


def _read_series_volume(path: Path, dtype: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """:func:`read_volume` of a DICOM series folder, ``(data, affine)``, and :func:`image_unit` of the same read."""
    from .dicom import read_series

    series = read_series(path)
    assert series.volume is not None
    return _as_type(series.volume[None], dtype), series.affine, _series_unit(series)


def _read_image_volume(path: str | os.PathLike) -> tuple[tuple[np.ndarray, np.ndarray], str | None]:
    """:func:`read_volume` of a case's image and :func:`image_unit` of its values, a DICOM series' headers read once.

    Returns ``((data, affine), unit)``. :func:`load_case` reads the image through this and keeps the unit
    (:attr:`LoadedCase.image_unit`), so that a page's viewer does not read the series' headers again (in earlier
    versions :func:`image_unit` after the image's read took 0.18 s per viewer for a 300-slice series).
    """
    path = Path(path)
    check_volume_entry(path)  # a link to nothing, a folder x.nii.gz: read_volume's own refusal
    if path.is_dir():
        data, affine, unit = _read_series_volume(path, np.float32)
        return (data, affine), unit
    return read_volume(path), None


def _as_type(data: np.ndarray, dtype: Any) -> np.ndarray:
    """``data`` as ``dtype`` (itself when it has it; None keeps its type)."""
    return data if dtype is None else data.astype(dtype, copy=False)


def _maps_file(data: np.ndarray) -> bool:
    """Whether ``data`` views a memory-mapped file (nibabel maps an uncompressed ``.nii``)."""
    base: Any = data
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return True
        base = getattr(base, "base", None)
    return False


def _read_with_loader(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """:func:`read_volume` of an existing, non-empty file with MONAI's ``LoadImage``.

    SimpleITK reads the formats that MONAI reads only with ``itk`` / ``pynrrd`` when MONAI cannot.
    """
    try:
        img = _image_loader()(str(path))
        data = img.as_tensor().numpy() if hasattr(img, "as_tensor") else np.asarray(img)
    except Exception as e:  # truncated / corrupt files raise EOFError, OSError, zlib errors, ... from the readers
        if path.name.lower().endswith(SIMPLEITK_EXTENSIONS):  # MONAI reads them only with itk / pynrrd installed
            return _read_simpleitk(path, e)
        if path.name.lower().endswith(PAIR_HEADER_EXTENSION):  # MONAI tried every reader: the DICOM one's error
            stem = path.name[: -len(PAIR_HEADER_EXTENSION)]
            raise CaseError(f"cannot read {path}: a NIfTI pair or Analyze file (header {path.name}, voxels in "
                            f"{stem}.img), which MONAI reads only with itk installed: convert it to one .nii.gz file "
                            f"(nibabel: nib.save(nib.load('{path.name}'), '{stem}.nii.gz'); FSL: fslchfiletype "
                            f"NIFTI_GZ {stem})") from None
        raise CaseError(f"cannot read {path}: {_reason(e)} (a truncated or corrupt file?)") from None
    affine = np.asarray(img.affine, dtype=np.float64) if hasattr(img, "affine") else np.eye(4)
    if ".nii" in "".join(s.lower() for s in path.suffixes):  # a NIfTI file: its affine as the fast path reads it
        header_affine = _loader_nifti_affine(path)
        if header_affine is not None:
            affine = header_affine
    return data, affine


def _loader_nifti_affine(path: Path) -> np.ndarray | None:
    """The affine of a NIfTI file ``LoadImage`` read, from its header as :func:`_read_nifti` takes it.

    One choice of sform and qform for every NIfTI read; None for a header nibabel does not read (``LoadImage``'s
    affine stays).
    """
    try:
        import nibabel as nib

        img = load_nifti(os.path.expanduser(str(path)))
        if not isinstance(img, (nib.Nifti1Image, nib.Nifti2Image)):
            return None
    except Exception:  # noqa: BLE001 - LoadImage read the file: its affine stays
        return None
    return _nifti_affine(img, str(path))


def _read_nifti(path: Path, dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`read_volume` of a NIfTI file with nibabel alone, as ``LoadImage`` reads it; ``None`` leaves it to MONAI.

    Importing MONAI takes seconds; the commands that only read and compute (``evaluate``, ``report``, ``triage``,
    ``monitor``) need not pay it for NIfTI volumes. ``LoadImage(image_only=True, ensure_channel_first=True)`` reads a
    ``.nii`` / ``.nii.gz`` file with its ``NibabelReader``: ``nibabel.load``, MONAI's header correction
    (``correct_nifti_header_if_necessary``: the sform or qform whose voxel sizes disagree with ``pixdim`` is replaced
    by the other), ``np.asanyarray(img.dataobj)`` (nibabel's ``scl_slope`` / ``scl_inter`` scaling), a cast to
    float32, the channel put first (1 to 3 dimensions: a new channel axis; 4 and 5: the last axis) and
    ``img.affine``. This does the same steps with the same nibabel calls, so the array (dtype, values, shape, strides)
    and the affine are the same bit for bit (``tests/io/test_read_volume_fast.py`` compares both on a matrix of
    files), and so are the warnings and the error of an unreadable file (the same call raises it, and it is worded
    as ``LoadImage``'s; the one exception, a stream only ISA-L's inflate accepts: :func:`_nifti_data`). Whatever
    this is not sure to reproduce goes to ``LoadImage``: another file ending, a name starting with ``~``
    (``LoadImage`` expands it), ``MONAI_DICOM_READER`` set (it can put another reader before MONAI's NIfTI reader),
    nibabel not installed, an image nibabel loads as another class than ``Nifti1Image`` / ``Nifti2Image``, other
    than 2 to 5 dimensions, an empty axis, a data type other than real integers and floats of at most 64 bits
    (complex, RGB, float128). ``dtype`` None keeps the stored type (:func:`read_volume`).
    """
    name = str(path)
    suffixes = "".join(s.lower() for s in path.suffixes)  # MONAI's is_supported_format: ".nii" in the suffixes
    if (not name.lower().endswith((".nii", ".nii.gz")) or ".nii" not in suffixes or name.startswith("~")
            or os.environ.get("MONAI_DICOM_READER")):
        return None
    try:
        import nibabel as nib
    except ImportError:
        return None
    try:  # every step LoadImage takes too, so every error (a warning made one included) is LoadImage's
        img = load_nifti(name)
        if not _nifti_fast_path_reads(img, nib):
            return None
        message = _correct_nifti_header(img, name)
        raw = _nifti_data(img, name)  # nibabel's scaling, as NibabelReader._get_array_data
        if raw.dtype.kind not in "iuf" or raw.dtype.itemsize > 8 or raw.ndim != img.header["dim"][0]:
            return None
        # LoadImage(dtype=np.float32): np.asarray(raw, dtype=np.float32) made C-contiguous (a copy here, so that the
        # array never maps the file)
        if dtype is None:  # the stored type, in the file's order: a copy only of a file mapping
            data = np.array(raw, order="K") if _maps_file(raw) else raw
        else:
            data = np.array(raw, dtype=dtype, order="C")
    except Exception as e:  # truncated / corrupt files: EOFError, OSError, zlib errors, ... from nibabel
        raise CaseError(f"cannot read {path}: {_reason(e)} (a truncated or corrupt file?)") from None
    data = data[None] if data.ndim <= 3 else np.moveaxis(data, -1, 0)  # EnsureChannelFirst
    if message is not None:  # after the read: nibabel's warnings first, and a warning made an error is no read error
        warnings.warn(message, UserWarning, stacklevel=3)
    return data, np.array(img.affine, dtype=np.float64)


def _nifti_data(img: Any, name: str) -> Any:
    """``np.asanyarray(img.dataobj)``, a ``.gz`` file's bytes inflated by ISA-L where python-isal is installed.

    The same nibabel array proxy (shape, data type, offset, ``scl_slope`` / ``scl_inter``, order) reads from ISA-L's
    gzip reader instead of the file nibabel opens, so the array is the same bit for bit. Anything that goes wrong
    there reads the file again nibabel's way, which raises (and warns) what ``LoadImage`` does.

    One difference: ISA-L's inflate accepts deflate streams that zlib (hence nibabel, ``LoadImage``, ITK and the
    ``gzip`` program) refuses, those declaring an incomplete Huffman code (``invalid distances set``); zlib's and
    ISA-L's deflate do not write them, a corrupted file can hold one. Such a file is read here, with the content
    the gzip trailer's CRC-32 vouches for (the stream is read to its end after the data, so ISA-L checks the CRC-32
    and the length even when bytes follow the data), where ``LoadImage`` raises (``tests/io/test_cases_hostile.py``).

    The data are inflated straight into the array, a megabyte at a time (:class:`_ChunkedReads`): a gzip
    file's ``readinto`` would first inflate the whole volume into a bytes object of its own, twice the volume's
    memory at the read's peak (found by hostile testing on 1-byte label maps).
    """
    from nibabel.arrayproxy import ArrayProxy

    proxy = img.dataobj
    if _igzip is not None and name.lower().endswith(".gz") and type(proxy) is ArrayProxy:
        try:
            spec = (proxy.shape, proxy.dtype, proxy.offset, proxy.slope, proxy.inter)
            with _igzip.open(name, "rb") as f:
                # mmap=False: nibabel maps a file it does not know to be compressed (as it knows the gzip file)
                data = np.asanyarray(type(proxy)(_ChunkedReads(f), spec, mmap=False, order=proxy.order))
                while f.read(1 << 20):  # to the end of the stream, whatever follows the data: its CRC-32 checked
                    pass
            return data
        except Exception:  # the read below reports it as LoadImage does
            pass
    return np.asanyarray(proxy)


class _ChunkedReads:
    """A binary file whose ``readinto`` fills a large buffer a megabyte at a time (the rest as the file's).

    ``GzipFile.readinto`` (``io.BufferedIOBase``'s) reads the whole size into a new bytes object and copies it over;
    nibabel reads a volume with one ``readinto`` of its size.
    """

    #: bytes asked of the file at once
    CHUNK = 1 << 20

    def __init__(self, file: Any) -> None:
        self._file = file

    def readinto(self, buffer: Any) -> int:
        with memoryview(buffer) as view, view.cast("B") as flat:
            got = 0
            while got < flat.nbytes:
                n = self._file.readinto(flat[got : got + self.CHUNK])
                if not n:
                    break
                got += n
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def _nifti_fast_path_reads(img: Any, nib: Any) -> bool:
    """Whether :func:`_read_nifti` reads this nibabel image, else ``LoadImage`` does.

    NIfTI-1 / NIfTI-2 images of 2 to 5 dimensions, none empty, holding real integers or floats of at most 64 bits.
    """
    if type(img) not in (nib.Nifti1Image, nib.Nifti2Image):
        return False
    try:
        ndim = int(img.header["dim"][0])
        stored = img.header.get_data_dtype()
        return bool(2 <= ndim <= 5 and len(img.shape) == ndim and min(img.shape) >= 1 and stored.kind in "iuf"
                    and stored.itemsize <= 8 and stored.fields is None and stored.subdtype is None)
    except Exception:  # a header this does not understand: LoadImage reads it
        return False


def _correct_nifti_header(img: Any, name: str) -> str | None:
    """MONAI's ``correct_nifti_header_if_necessary`` (and ``rectify_header_sform_qform``), in place, but without qform.

    Returns the warning to give about the affine chosen, or None.

    When the voxel sizes of the affine disagree with ``pixdim``, the sform or qform that agrees replaces the one that
    does not (``img.affine`` follows) or, when neither agrees, ``pixdim`` takes the affine's voxel sizes. Below 5
    dimensions only, as MONAI; the comparisons are MONAI's, argument order included (``np.allclose`` is not
    symmetric). One departure: a file whose sform (code > 0) disagrees with ``pixdim`` and which has no qform
    (``qform_code`` 0) keeps its sform, as nibabel, ITK and FSL read it, where MONAI would take the unset qform (the
    default quaternion: an identity orientation at ``pixdim``'s voxel sizes). That, and a qform or sform put in place
    of the affine nibabel reads, is the warning returned (one line naming the file).
    """
    header = img.header
    d = header["dim"][0]
    if d >= 5:
        return None
    pixdim = np.asarray(header.get_zooms())[:d]
    if np.allclose(pixdim, _affine_spacing(img.affine, d)):
        return None
    sform, qform = img.get_sform(), img.get_qform()
    sform_mismatch = not np.allclose(_affine_spacing(sform, d), pixdim)
    qform_mismatch = not np.allclose(_affine_spacing(qform, d), pixdim)
    before = np.array(img.affine, dtype=np.float64)
    sizes = "x".join(f"{v:.4g}" for v in pixdim[:3])  # the spatial ones
    if header["sform_code"] != 0:
        if not sform_mismatch:
            return None
        if not qform_mismatch:
            if header["qform_code"] == 0:
                voxel = "x".join(f"{v:.4g}" for v in _affine_spacing(sform, d)[:3])
                return (f"{name}: its pixdim {sizes} disagrees with the voxel sizes {voxel} of its sform and it has "
                        "no qform (qform_code 0): the sform is used, as nibabel, ITK and FSL read it (MONAI's "
                        "LoadImage would read the unset qform, an identity orientation at pixdim's voxel sizes)")
            img.set_sform(img.get_qform())
            return _header_change(name, before, img, d, sizes, "sform", "qform")
    if header["qform_code"] != 0:
        if not qform_mismatch:
            return None
        if not sform_mismatch:
            img.set_qform(img.get_sform())
            return _header_change(name, before, img, d, sizes, "qform", "sform")
    header.set_zooms(_affine_spacing(img.affine, d))
    return None


def _header_change(name: str, before: np.ndarray, img: Any, d: int, sizes: str, wrong: str, used: str) -> str | None:
    """The warning of :func:`_correct_nifti_header` when MONAI's correction moved the affine nibabel reads."""
    after = np.asarray(img.affine, dtype=np.float64)
    if np.array_equal(before, after, equal_nan=True):
        return None
    moved = grid_displacement(before, after, tuple(img.shape[:d]))
    return (f"{name}: its pixdim {sizes} disagrees with the voxel sizes of its {wrong}: the {used}, which agrees, is "
            f"used in its place, as MONAI's LoadImage reads it (nibabel reads the {wrong}; voxel centres up to "
            f"{moved:.4g} mm apart): check the file's geometry")


def _nifti_affine(img: Any, name: str, warn: bool = True) -> np.ndarray:
    """The affine of a nibabel NIfTI image as :func:`read_volume` reads it (:func:`_correct_nifti_header`, in place).

    Float64; the correction's warning is given (``warn``).
    """
    message = _correct_nifti_header(img, name)
    if message is not None and warn:
        warnings.warn(message, UserWarning, stacklevel=4)
    return np.array(img.affine, dtype=np.float64)


def nifti_geometry(path: str | os.PathLike) -> tuple[tuple[int, ...], np.ndarray] | None:
    """The shape and affine of a NIfTI file from its header alone (no data read), as :func:`read_volume` reads them.

    The affine is :func:`read_volume`'s (MONAI's header correction, a file without a qform keeping its sform), so
    that a check made on headers before any work agrees with the one made when the case is read; the correction's
    warning is left to that read.

    Args:
        path: the file.

    Returns:
        ``(shape, affine)`` (the file's full shape, ``(4, 4)`` float64), or None for a file that is not ``.nii`` /
        ``.nii.gz``.

    Raises:
        Exception: nibabel's, for an unreadable header.

    Example:
        >>> import tempfile
        >>> from monai_unc.io.files import save_nifti
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = save_nifti(np.zeros((4, 5, 6)), np.diag([2.0, 2, 3, 1]), Path(d) / "a.nii")
        ...     shape, affine = nifti_geometry(path)
        >>> shape, affine[2, 2]
        ((4, 5, 6), np.float64(3.0))
    """
    name = str(path)
    if not name.lower().endswith((".nii", ".nii.gz")):
        return None

    img = load_nifti(os.path.expanduser(name))
    # the correction's warning is left to the read (review 68: not by silencing every UserWarning inside
    # catch_warnings, a process-wide filter)
    affine = _nifti_affine(img, name, warn=False)
    return tuple(int(n) for n in img.shape), affine


def _affine_spacing(affine: np.ndarray, r: int) -> np.ndarray:
    """MONAI's ``affine_to_spacing(affine, r)``: the norms of the first ``r`` columns of ``affine[:r, :r]`` (0 -> 1)."""
    a = np.ascontiguousarray(np.asarray(affine[:r, :r], dtype=np.float64))
    spacing = np.sqrt(np.sum(a * a, axis=0))
    spacing[spacing == 0] = 1.0
    return spacing


#: the volume formats that MONAI reads only with ``itk`` (``.mha``, ``.mhd``) or ``pynrrd`` (``.nrrd``) installed;
#: :func:`read_volume` falls back on SimpleITK for them
SIMPLEITK_EXTENSIONS = (".mha", ".mhd", ".nrrd")


def lps_image_affine(direction: Sequence[float], spacing: Sequence[float], origin: Sequence[float]) -> np.ndarray:
    """The RAS voxel -> world affine of an ITK image (LPS direction, spacing and origin), as MONAI's ITK reader gives.

    ITK's physical point of index ``i`` is ``origin + direction @ (spacing * i)`` in LPS; NIfTI (and MONAI's
    ``affine_lps_to_ras=True``) wants RAS, so the first two world axes are negated.

    Args:
        direction: the ``d * d`` direction cosines, row-major (``GetDirection()``).
        spacing: the ``d`` voxel sizes (mm).
        origin: the ``d`` coordinates of voxel 0 (mm, LPS).

    Returns:
        The ``(d + 1, d + 1)`` affine (``(4, 4)`` for a volume) in RAS.

    Example:
        >>> lps_image_affine([1, 0, 0, 0, 1, 0, 0, 0, 1], [2.0, 2.0, 3.0], [10.0, 20.0, 30.0]).tolist()[0]
        [-2.0, -0.0, -0.0, -10.0]
    """
    d = len(spacing)
    affine = np.eye(d + 1)
    affine[:d, :d] = np.asarray(direction, dtype=np.float64).reshape(d, d) * np.asarray(spacing, dtype=np.float64)
    affine[:d, d] = np.asarray(origin, dtype=np.float64)
    flip = np.ones(d + 1)
    flip[: min(d, 2)] = -1.0
    return flip[:, None] * affine


def _read_simpleitk(path: Path, error: BaseException) -> tuple[np.ndarray, np.ndarray]:
    """``read_volume`` of a MetaImage / NRRD file with SimpleITK: ``(C, x, y, z)`` and the RAS affine."""
    try:
        import SimpleITK as sitk
    except ImportError:
        raise CaseError(f"cannot read {path}: MONAI reads {path.suffix} files with itk (or pynrrd for .nrrd), and "
                        f"neither it nor SimpleITK is installed ({_reason(error)}); pip install SimpleITK or itk, "
                        "or convert the images to NIfTI") from None
    try:
        img = sitk.ReadImage(str(path))
        arr = sitk.GetArrayFromImage(img)  # (z, y, x) or (z, y, x, C): the index order reversed
    except Exception as e:
        raise CaseError(f"cannot read {path}: {_reason(e)} (a truncated or corrupt file?)") from None
    d = img.GetDimension()
    if img.GetNumberOfComponentsPerPixel() > 1:
        arr = np.moveaxis(arr, -1, 0)
    else:
        arr = arr[None]
    data = np.ascontiguousarray(np.transpose(arr, (0, *range(d, 0, -1))))  # (C, x, y, z)
    affine = lps_image_affine(img.GetDirection(), img.GetSpacing(), img.GetOrigin())
    if d < 3:  # a 2D image: the (4, 4) affine MONAI gives it
        full = np.eye(4)
        full[:d, :d], full[:d, 3] = affine[:d, :d], affine[:d, d]
        affine = full
    return data, affine


def is_seg_label(path: str | os.PathLike | None) -> bool:
    """Whether a reference label file is a binary DICOM SEG (``<case>.dcm``, the ending in any case; None: no label).

    The one test of the label folders (:func:`match_cases`), :func:`read_label` and the evaluation (segment label
    values, the series a SEG is read on).

    Args:
        path: the label file, or None.

    Returns:
        True for a ``.dcm`` file name.

    Example:
        >>> is_seg_label("labels/case1.DCM"), is_seg_label("labels/case1.nii.gz"), is_seg_label(None)
        (True, False, False)
    """
    return path is not None and Path(path).name.lower().endswith(".dcm")


def read_label(
    files: CaseFiles, seg_regions: Mapping[str, Sequence[int]] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Read a case's reference labels: a volume file (:func:`read_volume`) or a binary DICOM SEG ``<case>.dcm``.

    A SEG is read on the grid of the case's image, which must be its DICOM series folder (``files.image``, from
    ``--images``): :func:`monai_unc.io.dicom.read_segmentation_labels` (the ``dicom`` extra) checks that the SEG
    belongs to that series and that its segments do not overlap; segment ``s`` becomes label ``s``. With
    ``seg_regions`` a SEG's segments are the regions of that spec instead, matched by name and allowed to overlap
    (:func:`monai_unc.io.dicom.read_segmentation_regions`, ``evaluate --seg-regions``): ``(R, *spatial)`` 0/1 region
    masks in the spec's order, or for a spec of one region its mask as a label map of the region's smallest label
    (one channel is read as a label map).

    Args:
        files: the case's files.
        seg_regions: the region spec whose regions a SEG's segments are (None: a SEG of disjoint labels). Volume
            files are read as they are.

    Returns:
        ``(data, affine)`` as :func:`read_volume`: ``(1, *spatial)`` labels (``(R, *spatial)`` region masks of a SEG
        read with ``seg_regions`` of several regions) and the ``(4, 4)`` affine. A volume file
        is read in the type it stores where nibabel reads it (``read_volume(dtype=None)``): integer labels exactly
        (float32, ``LoadImage``'s type, holds integers only up to ``2**24``). A NIfTI file with ``scl_slope`` /
        ``scl_inter`` scaling reads as floats such as ``1.0000000149`` (slope 0.1 held as float32): values within
        the float rounding of that scaling of an integer, ``eps_h * (|v - inter| + |inter|) + eps_a * |v|`` (``eps_h``
        the machine epsilon of the header's scale fields, float32 in NIfTI-1; ``eps_a`` that of the array's type),
        are read as that integer, as nnU-Net and SimpleITK round them; a fraction such as 0.5 is left for
        :func:`check_label_map` to refuse.

    Raises:
        CaseError: a SEG without the case's series folder, or refused by the reader (one line naming the case).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from monai_unc.io.files import save_nifti
        >>> with tempfile.TemporaryDirectory() as d:
        ...     label = save_nifti(np.ones((4, 5, 6), np.uint8), np.eye(4), Path(d) / "a.nii.gz")
        ...     data, affine = read_label(CaseFiles("a", label))
        ...     data.shape
        (1, 4, 5, 6)
    """
    if not is_seg_label(files.label):
        # the stored integers (dtype=None): float32 holds integers only up to 2**24, and a label 16777217 read as
        # float32 was 16777216, another structure's label (found by hostile testing)
        return _read_label_volume(files.label)
    check_volume_entry(files.label)
    if files.image is None or not files.image.is_dir():
        raise CaseError(f"case {files.case_id!r}: label {files.label.name} is a DICOM SEG; its image must be the "
                        "case's DICOM series folder (--images)")
    from .dicom import read_segmentation_labels, read_segmentation_regions, read_series

    try:
        series = read_series(files.image, pixels=False)
        if seg_regions is None:
            return read_segmentation_labels(files.label, series)[None], series.affine
        masks = read_segmentation_regions(files.label, series, list(seg_regions))
    except ValueError as e:
        raise CaseError(f"case {files.case_id!r}: {e}") from None
    if masks.shape[0] > 1:
        return masks, series.affine
    # one channel is read as a label map (load_case): the mask's voxels get the region's smallest label, the rest 0
    (name, values), = seg_regions.items()
    if 0 in values:
        raise CaseError(f"case {files.case_id!r}: the region {name!r} holds the label 0, so the voxels outside its "
                        f"segment in {files.label.name} would be inside it")
    return np.where(masks[:1] > 0, min(values), 0).astype(np.int64), series.affine


#: label values whose rounding bound (:func:`_scaled_labels_rounded`) reaches this are left as nibabel scales them:
#: the precision of the file's scaling cannot tell their integer (labels beyond about 2 million with a float32 slope)
_SCALED_LABEL_MAX_TOL = 0.25


def _read_label_volume(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A label-map file (reference or segmentation), read in its stored type, with its scaled integers restored.

    :func:`read_volume` with ``dtype=None``, then :func:`_scaled_labels_rounded` for a NIfTI file's ``scl_slope`` /
    ``scl_inter`` scaling.
    """
    data, affine = read_volume(path, dtype=None)
    return _scaled_labels_rounded(data, path), affine


def _nifti_scaling(path: Path) -> tuple[float, float, float] | None:
    """``(slope, inter, eps)`` of a NIfTI file whose data nibabel scales; None for another file or unscaled data.

    ``eps`` is the machine epsilon of the header's scale fields (float32 in NIfTI-1, float64 in NIfTI-2).
    """
    if not str(path).lower().endswith((".nii", ".nii.gz")):
        return None
    img = load_nifti(str(path))
    slope, inter = getattr(img.dataobj, "slope", 1.0), getattr(img.dataobj, "inter", 0.0)
    if slope == 1.0 and inter == 0.0:
        return None
    header = img.header
    eps = max(float(np.finfo(header["scl_slope"].dtype).eps), float(np.finfo(header["scl_inter"].dtype).eps))
    return float(slope), float(inter), eps


def _scaled_labels_rounded(data: np.ndarray, path: Path) -> np.ndarray:
    """The float label values of a NIfTI file with ``scl_slope`` / ``scl_inter`` set to the integers they encode.

    An integer label ``n`` stored as ``r`` with slope ``s`` and intercept ``i`` reads as ``r * s + i``; the header
    holds ``s`` and ``i`` rounded to its float type (float32 in NIfTI-1: ``0.1`` is ``0.10000000149``), so label 1
    reads as ``1.0000000149``. Each rounding of ``s`` and ``i`` moves the value by at most half an epsilon ``eps_h``
    of the header's type times ``|r * s| = |v - i|`` and ``|i|``; the product and sum in the array's float type add
    at most half an epsilon ``eps_a`` of ``|v|``. A value within ``eps_h * (|v - i| + |i|) + eps_a * |v|`` (twice
    that bound) of an integer is that integer (nnU-Net and SimpleITK round such labels too); anything further away, a
    fraction such as 0.5, stays as read and :func:`check_label_map` refuses it. Values whose bound reaches
    :data:`_SCALED_LABEL_MAX_TOL` are left as read (the scaling cannot tell their integer). Unscaled files and
    integer arrays are returned as they are.
    """
    if data.dtype.kind != "f":
        return data
    scaling = _nifti_scaling(path)
    if scaling is None:
        return data
    _, inter, eps_h = scaling
    eps_a = float(np.finfo(data.dtype).eps)
    out = data if data.flags.writeable else data.copy(order="K")  # nibabel's scaled array is new: changed in place
    flat = out.ravel(order="K")  # a view of every voxel in memory order
    if not np.shares_memory(flat, out):
        out = out.copy(order="C")
        flat = out.reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN / inf stay as they are, for check_label_map
        for start in range(0, flat.size, 1 << 20):  # blocks of 1 Mi values: no temporaries of the whole volume
            v = flat[start:start + (1 << 20)]
            near = np.rint(v)
            tol = np.abs(v - inter)
            tol += abs(inter)
            tol *= eps_h
            tol += eps_a * np.abs(v)
            np.copyto(v, near, where=(np.abs(v - near) <= tol) & (tol < _SCALED_LABEL_MAX_TOL))
    return out


def segment_label_values(labels: np.ndarray, values: Sequence[int], case_id: str = "") -> np.ndarray:
    """The label values of the segments of a DICOM SEG: segment ``s`` becomes ``values[s - 1]``, 0 stays 0.

    DICOM numbers a SEG's segments 1, 2, 3, ... whatever label values they were made from; a label map with the
    values 1, 2, 4 (BraTS) reads back as 1, 2, 3 (:func:`read_label`). This gives the values back.

    Args:
        labels: the segment numbers (any shape, integers; 0 is background).
        values: the label value of each segment, in segment order.
        case_id: the case, for the message.

    Returns:
        The labels (int64, the shape of ``labels``).

    Raises:
        CaseError: a segment number without a value (one line naming the case).

    Example:
        >>> segment_label_values(np.array([0, 1, 2, 3]), [1, 2, 4]).tolist()
        [0, 1, 2, 4]
    """
    seg = np.asarray(labels).astype(np.int64)
    top = int(seg.max()) if seg.size else 0
    if top > len(values) or (seg.size and int(seg.min()) < 0):
        raise CaseError(f"case {case_id!r}: the DICOM SEG labels have segment {top}, but --seg-label-values gives "
                        f"{len(values)} value(s) {list(values)}")
    lut = np.array([0, *[int(v) for v in values]], dtype=np.int64)
    return lut[seg]


#: one construction of :func:`_image_loader`'s ``LoadImage`` at a time (its warning filter is process-wide)
_IMAGE_LOADER_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _image_loader() -> Any:
    """MONAI's ``LoadImage`` (channel first, image only), built once per process.

    Building it builds every reader MONAI has; with pydicom installed that includes MONAI's nvImageCodec DICOM reader,
    which warns (and logs) at construction when nvImageCodec is missing. That says nothing about the file being read,
    and an evaluation turns a case's warnings into errors, so it is silenced here, once per process.
    """
    import logging

    from monai.transforms import LoadImage

    plugin_log = logging.getLogger("monai.data.nvimgcodec_pydicom_plugin")  # logs the same at construction
    # load_case's reading threads can get here at once: warnings.catch_warnings and the log level are process-wide,
    # so one thread's exit would restore the filters under another's construction (its warning escapes, then the
    # other's exit leaves this filter in place); one construction at a time
    with _IMAGE_LOADER_LOCK:
        level = plugin_log.level
        plugin_log.setLevel(logging.ERROR)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="NvImgCodecPydicomReader", category=UserWarning)
                return LoadImage(image_only=True, ensure_channel_first=True)
        finally:
            plugin_log.setLevel(level)


def _reason(e: BaseException) -> str:
    """``"Type: first line of the message"`` of a reader's exception."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def read_probabilities(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray | None]:
    """Read probabilities ``(C, *spatial)`` and their affine.

    nnU-Net ``.npz`` files (key ``probabilities``) hold ``(C, z, y, x)``: the spatial axes are reversed here so
    that they line up with the NIfTI arrays of the same case. When the folder's ``plans.json`` / ``dataset.json``
    name a reorienting reader/writer (:data:`REORIENTING_NNUNET_READERS`), the ``.npz`` is in the RAS frame nnU-Net
    predicted in; it is then reoriented to the axes of the case's segmentation next to it, as that reader/writer
    reorients the segmentation it writes. Other files are read with :func:`read_volume`.

    Args:
        path: a 4D volume file ``(X, Y, Z, C)`` or an nnU-Net ``.npz`` file.

    Returns:
        ``(probs, affine)``: ``probs`` ``(C, *spatial)``, ``affine`` ``(4, 4)`` or ``None`` for ``.npz`` files.
        Values are not checked here (:func:`load_case` checks them).

    Raises:
        FileNotFoundError: the file does not exist.
        CaseError: the file cannot be read, an ``.npz`` lacks ``probabilities`` or holds fewer than 3 axes, or a
            reorienting reader's ``.npz`` has no readable segmentation next to it.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     np.savez(Path(d) / "a.npz", probabilities=np.zeros((3, 4, 5, 6), np.float32))  # (C, z, y, x)
        ...     probs, affine = read_probabilities(Path(d) / "a.npz")
        ...     probs.shape, affine
        ((3, 6, 5, 4), None)
    """
    path = Path(path)
    if path.name.lower().endswith(".npz"):
        check_volume_entry(path)
        if not path.is_file():
            raise FileNotFoundError(f"file not found: {path}")
        try:
            with np.load(path, allow_pickle=False) as f:
                if "probabilities" not in f.files:
                    raise CaseError(f"{path}: an .npz probability file must hold the key 'probabilities', has "
                                    f"{f.files}")
                arr = np.asarray(f["probabilities"])
        except CaseError:
            raise
        except Exception as e:  # BadZipFile, EOFError, zlib.error, pickled arrays (allow_pickle=False), ...
            raise CaseError(f"cannot read {path}: {_reason(e)} (a truncated or corrupt file?)") from None
        if arr.ndim < 3:
            raise CaseError(f"{path}: probabilities must be (C, *spatial), got shape {arr.shape}")
        axes = (0, *range(arr.ndim - 1, 0, -1))
        arr = arr.transpose(axes)
        if arr.ndim == 4:
            arr = _undo_nnunet_reorientation(path, arr)
        return np.ascontiguousarray(arr), None
    return read_volume(path)


#: nnU-Net reader/writers that reorient every image to RAS before prediction (their ``.npz`` is in that frame)
REORIENTING_NNUNET_READERS = ("NibabelIOWithReorient", "SimpleITKIOWithReorient")


def _nnunet_reader_writer(folder: Path) -> tuple[str | None, str | None]:
    """The image reader/writer and file ending nnU-Net used for the predictions of ``folder``.

    From the ``plans.json`` (``image_reader_writer``, what nnU-Net's prediction reads and writes with) and
    ``dataset.json`` (``file_ending``; ``overwrite_image_reader_writer`` when the plans name none) that
    ``nnUNetv2_predict`` and ``monai-unc nnunet-predict`` copy into their output folder; ``(None, None)`` without
    them.
    """
    dataset = read_json_or_none(folder / "dataset.json")
    plans = read_json_or_none(folder / "plans.json")
    dataset = dataset if isinstance(dataset, dict) else {}
    plans = plans if isinstance(plans, dict) else {}
    name = plans.get("image_reader_writer") or dataset.get("overwrite_image_reader_writer")
    ending = dataset.get("file_ending")
    return (name if isinstance(name, str) else None), (ending if isinstance(ending, str) else None)


def _undo_nnunet_reorientation(path: Path, probs: np.ndarray) -> np.ndarray:
    """Probabilities ``(C, x, y, z)`` of a reorienting nnU-Net reader put back into the voxel order of the files.

    ``NibabelIOWithReorient`` and ``SimpleITKIOWithReorient`` predict in the RAS frame (x towards Right, y Anterior,
    z Superior, the closest axes of an oblique image), so their ``.npz`` holds that frame, not the file's; their
    ``write_seg`` reorients the segmentation back to the image's own axes. This does the same for the
    probabilities, with the orientation of the case's segmentation ``<case><file_ending>`` next to the ``.npz``
    (which has the image's affine). Other readers (SimpleITKIO, NibabelIO, ...) keep the file's axes: unchanged.

    Raises:
        CaseError: a reorienting reader, but the segmentation next to the ``.npz`` is missing or unreadable.
    """
    reader, ending = _nnunet_reader_writer(path.parent)
    if reader not in REORIENTING_NNUNET_READERS:
        return probs
    import nibabel as nib
    from nibabel.orientations import apply_orientation, axcodes2ornt, io_orientation, ornt_transform

    case = path.name[: -len(".npz")]
    seg = path.parent / f"{case}{ending or '.nii.gz'}"
    try:
        affine = nib.load(str(seg)).affine if not str(seg).lower().endswith((".nii", ".nii.gz")) else None
        if affine is None:
            affine = nifti_geometry(seg)[1]  # type: ignore[index]
    except Exception as e:
        raise CaseError(f"{path}: written with {reader}, which predicts in the RAS frame; its segmentation {seg.name} "
                        f"is needed to put the probabilities back into the image's axes: {_reason(e)}") from None
    to_file = ornt_transform(axcodes2ornt("RAS"), io_orientation(affine))
    return np.stack([apply_orientation(c, to_file) for c in probs])


def spacing_from_affine(affine: np.ndarray) -> tuple[float, ...]:
    """Voxel size in mm per axis: the lengths of the affine's first three columns.

    Args:
        affine: ``(4, 4)`` voxel -> world matrix (mm).

    Returns:
        ``(sx, sy, sz)`` in mm.

    Example:
        >>> spacing_from_affine(np.diag([0.5, 1.0, 3.0, 1.0]))
        (0.5, 1.0, 3.0)
    """
    a = np.asarray(affine, dtype=np.float64)
    return tuple(float(s) for s in np.sqrt((a[:3, :3] ** 2).sum(axis=0)))


def axes_cosine(affine: np.ndarray, ndim: int = 3) -> tuple[float, tuple[int, int]]:
    """How far a grid's voxel axes are from orthogonal: the largest ``|cos|`` of the angle between two of them.

    The axes are the directions of the affine's first ``ndim`` columns (mm per voxel step); an orthogonal grid gives
    0, a sheared one (e.g. gantry-tilted CT kept unresampled: the slices stacked along the tilted axis) the cosine
    of its smallest angle between two axes (``sin`` of the angle from perpendicular). An axis of length 0 counts as
    orthogonal to the others.

    Args:
        affine: the ``(4, 4)`` voxel -> world matrix (mm).
        ndim: the number of spatial axes of the grid (at most 3).

    Returns:
        ``(|cos|, (i, j))``: the largest ``|cos|`` and the two axes that give it (``(0.0, (0, 1))`` for an orthogonal
        grid); the cosine is NaN for an affine holding NaN.

    Example:
        >>> a = np.eye(4); a[1:3, 2] = (0.5, 1.0)  # the slice axis tilted by 26.6 degrees towards the second axis
        >>> c, axes = axes_cosine(a)
        >>> round(c, 3), axes
        (0.447, (1, 2))
    """
    a = np.asarray(affine, dtype=np.float64)[:3, : min(ndim, 3)]
    norms = np.sqrt((a * a).sum(axis=0))
    best, pair = 0.0, (0, 1)
    for i in range(a.shape[1]):
        for j in range(i + 1, a.shape[1]):
            if norms[i] == 0 or norms[j] == 0:
                continue
            c = abs(float(a[:, i] @ a[:, j])) / float(norms[i] * norms[j])
            if not c <= best:  # NaN is kept
                best, pair = c, (i, j)
    return best, pair


#: what :func:`sheared_grid` says of a sheared case by default: the evaluation's NaN
_SHEARED_METRICS = ("its distance-based metrics (surface distances, HD95, BUC, BA-ECE, SPACE, lesion HD95, the masks' "
                    "band widths) are NaN")


def sheared_grid(case_id: str | None, affine: np.ndarray, ndim: int = 3,
                 consequence: str = _SHEARED_METRICS) -> str | None:
    """The warning for a case whose voxel axes are not orthogonal, or None when they are.

    Axes whose ``|cos|`` exceeds :data:`ORTHOGONALITY_ATOL` (:func:`axes_cosine`) make a sheared grid: the distances
    of the distance-based metrics (surface distances, HD95, ASSD, BUC, BA-ECE, SPACE, lesion-wise HD95, the margin
    family's and the band's mm) assume orthogonal axes scaled by the spacing, so an evaluation gives them NaN for
    such a case, with this warning; volumes stay right (:func:`~monai_unc._utils.affine_voxel_volume`, ``|det A|``).

    Args:
        case_id: the case, named in the warning (None: not named, for a message its caller prefixes with it).
        affine: its ``(4, 4)`` voxel -> world matrix (mm).
        ndim: the number of spatial axes of the grid.
        consequence: what follows for the case (default: its distance-based metrics are NaN).

    Returns:
        One line naming the case, the two axes and their angle from perpendicular, and how to resample it; None for
        an orthogonal grid.

    Example:
        >>> sheared_grid("a", np.diag([0.5, 0.5, 2.0, 1.0])) is None
        True
    """
    c, (i, j) = axes_cosine(affine, ndim)
    if c <= ORTHOGONALITY_ATOL:
        return None
    angle = float(np.degrees(np.arcsin(min(c, 1.0)))) if np.isfinite(c) else float("nan")
    who = "its" if case_id is None else f"case {case_id!r}: its"
    return (f"{who} voxel axes {i} and {j} are {angle:.3g} degrees from perpendicular (a sheared "
            f"grid, e.g. gantry-tilted CT; |cos| {c:.3g} > {ORTHOGONALITY_ATOL}): {consequence}; resample it onto "
            "an orthogonal grid (MONAI's Spacingd / Orientationd, SimpleITK's ResampleImageFilter)")


def grid_displacement(affine: np.ndarray, other: np.ndarray, shape: Sequence[int]) -> float:
    """The largest distance (mm) between the world positions two affines give one voxel centre of a grid.

    ``|(A1 - A2) [i, j, k, 1]|`` is a norm of an affine function of the voxel index, so its largest value over the
    grid ``shape`` is at one of the corner voxels (``0`` or ``n - 1`` along each axis): two affines whose entries
    differ by ``e`` mm per voxel step put the far corner ``(n - 1) e`` mm apart, which a comparison of the entries
    would let pass.

    Args:
        affine: the first ``(4, 4)`` voxel -> world matrix (mm).
        other: the second.
        shape: the spatial shape of the grid (axes beyond the third, e.g. a 5-D NIfTI's, do not move in space).

    Returns:
        The largest displacement in mm (NaN when an affine holds NaN).

    Example:
        >>> b = np.diag([0.5, 0.5, 3.0, 1.0]); b[0, 1] = 1e-3  # a 1e-3 mm entry: 0.511 mm at the far corner
        >>> round(grid_displacement(np.diag([0.5, 0.5, 3.0, 1.0]), b, (512, 512, 2)), 3)
        0.511
    """
    diff = np.asarray(affine, dtype=np.float64)[:3] - np.asarray(other, dtype=np.float64)[:3]
    d = min(len(shape), diff.shape[1] - 1)
    lines = [(0.0, float(max(int(n) - 1, 0))) for n in tuple(shape)[:d]]
    corners = np.array(np.meshgrid(*lines, indexing="ij")).reshape(d, -1) if d else np.zeros((0, 1))
    moved = diff[:, :d] @ corners + diff[:, -1:]
    return float(np.sqrt((moved * moved).sum(axis=0)).max())


def grid_mismatch(affine: np.ndarray, reference: np.ndarray, shape: Sequence[int], *,
                  atol: float = GEOMETRY_ATOL) -> str | None:
    """Whether two affines put the grid ``shape`` in the same space: None, or what is wrong (for an error message).

    The one same-space rule of the package: the volumes of a case (labels, predictions, maps, image channels,
    samples) and a NIfTI output against its DICOM source series
    (:func:`~monai_unc.io.dicom.to_series_grid`, with the floor ``atol`` of
    :data:`~monai_unc.io.dicom.DICOM_GEOMETRY_ATOL`). The largest displacement of a voxel centre
    (:func:`grid_displacement`, at a corner of the grid: it covers translation, rotation, scaling and shear, so the
    entries of the affines are not compared) may be at most ``atol`` mm or :data:`GEOMETRY_VOXEL_FRACTION` of the
    reference grid's smallest voxel size, whichever is larger.

    Args:
        affine: the ``(4, 4)`` voxel -> world matrix (mm) of the volume checked.
        reference: that of the reference volume (the label, channel 0, ...).
        shape: the spatial shape of the grid.
        atol: the absolute floor of the tolerance in mm, a finite number >= 0 (default :data:`GEOMETRY_ATOL`).

    Returns:
        None when they agree, else ``"voxel centres up to D mm apart, tolerance T mm"`` (also for an affine holding
        NaN).

    Raises:
        ValueError: ``atol`` is not a finite number >= 0.

    Example:
        >>> b = np.diag([0.5, 0.5, 3.0, 1.0]); b[0, 1] = 1e-3  # 0.511 mm at the far corner: a voxel
        >>> grid_mismatch(b, np.diag([0.5, 0.5, 3.0, 1.0]), (512, 512, 2))
        'voxel centres up to 0.511 mm apart, tolerance 0.05 mm'
        >>> grid_mismatch(np.diag([0.5, 0.5, 3.0, 1.0]), np.diag([0.5, 0.5, 3.0, 1.0]), (512, 512, 2)) is None
        True
    """
    if isinstance(atol, bool) or not isinstance(atol, (int, float, np.integer, np.floating)) or not (
            np.isfinite(atol) and atol >= 0):
        raise ValueError(f"atol must be a finite number of mm >= 0, got {atol!r}")
    moved = grid_displacement(affine, reference, shape)
    d = min(len(shape), 3, np.asarray(reference).shape[1] - 1)
    sizes = np.linalg.norm(np.asarray(reference, dtype=np.float64)[:3, :d], axis=0)
    smallest = float(sizes.min()) if d and np.all(np.isfinite(sizes)) else 0.0
    tolerance = max(float(atol), GEOMETRY_VOXEL_FRACTION * smallest)
    if moved <= tolerance:
        return None
    return f"voxel centres up to {moved:.4g} mm apart, tolerance {tolerance:.4g} mm"


#: the remedy of a volume holding a reference grid in another voxel order (:func:`reoriented_grid`); ``{what}``
#: names the reference
REORIENT_REMEDY = ("reorient it onto the axes of {what} (no resampling: nibabel's as_reoriented, MONAI's Orientationd "
                   "with the axcodes of {what})")


def _unoriented_nifti(path: Path) -> bool:
    """Whether ``path`` is a NIfTI file without orientation: ``sform_code`` and ``qform_code`` both 0 (its header)."""
    if not str(path).lower().endswith((".nii", ".nii.gz")):
        return False
    try:
        header = load_nifti(os.path.expanduser(str(path))).header
        return int(header["sform_code"]) == 0 and int(header["qform_code"]) == 0
    except Exception:  # noqa: BLE001 - only the reason of a refusal: the file was read
        return False


def _without_trailing_ones(shape: Sequence[int]) -> tuple[int, ...]:
    """``shape`` without its trailing axes of length 1 (at least one axis kept)."""
    out = [int(n) for n in shape]
    while len(out) > 1 and out[-1] == 1:
        out.pop()
    return tuple(out)


def _axis_codes(affine: np.ndarray, ndim: int) -> str:
    """``", axcodes 'RAS'"``: nibabel's axis codes of a 3-D grid's affine, for a message ("" for another grid)."""
    if ndim != 3:
        return ""
    try:
        import nibabel as nib

        return f", axcodes {''.join(nib.aff2axcodes(np.asarray(affine, dtype=np.float64)))!r}"
    except Exception:  # noqa: BLE001 - only a message's detail
        return ""


def reoriented_grid(affine: np.ndarray, shape: Sequence[int], reference: np.ndarray,
                    reference_shape: Sequence[int]) -> str | None:
    """Whether a volume holds a reference grid's voxels in another voxel order: what order, or None.

    Two files may hold the same voxel positions in another order: one axis stored reversed, or axes swapped, with
    the affine that says so (e.g. a label in LPS and a prediction in RAS order, same world geometry). Their arrays
    then differ voxel by voxel, and a metric computed on them compares different places (nnU-Net's evaluation reads
    both with SimpleITK and compares the arrays as they are). Such a volume is found here: the voxel axes of
    ``affine`` are those of ``reference`` up to a signed permutation, and, reoriented (each axis of the reference
    taken from the volume's axis it is, reversed where its sign is -1), the volume has the reference's shape and its
    voxel centres lie within :func:`grid_mismatch`'s tolerance of the reference's.

    Args:
        affine: the ``(4, 4)`` voxel -> world matrix (mm) of the volume.
        shape: its spatial shape.
        reference: the reference's affine (the label's).
        reference_shape: the reference's spatial shape.

    Returns:
        None when the volume is on the reference grid in the same order, or on no reorientation of it; else the
        order, e.g. ``"voxel axis 0 reversed"`` or ``"its voxel axes in the order (2, 1, 0)"`` (the volume's axis
        ``j`` is the reference's axis ``order[j]``), reversed axes named by the reference's axis numbers.

    Example:
        >>> a = np.diag([0.8, 1.0, 2.5, 1.0])
        >>> f = a.copy(); f[0, 0], f[0, 3] = -0.8, 0.8 * 5  # axis 0 of 6 voxels stored reversed
        >>> reoriented_grid(f, (6, 5, 4), a, (6, 5, 4))
        'voxel axis 0 reversed'
        >>> reoriented_grid(a, (6, 5, 4), a, (6, 5, 4)) is None
        True
    """
    d = len(reference_shape)
    if len(shape) != d or not 1 <= d <= 3:
        return None
    a = np.asarray(affine, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if a.shape != (4, 4) or r.shape != (4, 4) or not (np.all(np.isfinite(a)) and np.all(np.isfinite(r))):
        return None
    try:  # the volume's axes in the reference's: a signed permutation for a reordered grid
        m = np.linalg.lstsq(r[:3, :d], a[:3, :d], rcond=None)[0]
    except np.linalg.LinAlgError:
        return None
    signed = np.rint(m)
    if not (np.all(np.abs(signed).sum(axis=0) == 1) and np.all(np.abs(signed).sum(axis=1) == 1)
            and np.all(np.abs(m - signed) < 0.01)):
        return None
    source = [int(np.flatnonzero(signed[i])[0]) for i in range(d)]  # the reference's axis i is the volume's axis
    signs = [int(signed[i, source[i]]) for i in range(d)]
    if source == list(range(d)) and all(s == 1 for s in signs):
        return None  # the same order: grid_mismatch's and the shape's checks say the rest
    if [int(shape[source[i]]) for i in range(d)] != [int(n) for n in reference_shape]:
        return None
    moved = np.eye(4)  # the volume's affine, reoriented to the reference's voxel order
    moved[:3, 3] = a[:3, 3]
    for i in range(d):
        moved[:3, i] = signs[i] * a[:3, source[i]]
        if signs[i] < 0:
            moved[:3, 3] += a[:3, source[i]] * (int(shape[source[i]]) - 1)
    if grid_mismatch(moved, r, reference_shape) is not None:
        return None
    flipped = [i for i in range(d) if signs[i] < 0]
    reversed_ = (f"voxel ax{'is' if len(flipped) == 1 else 'es'} {' and '.join(map(str, flipped))} reversed"
                 if flipped else "")
    if source == list(range(d)):
        return reversed_
    order = tuple(source.index(j) for j in range(d))
    return f"its voxel axes in the order {order}" + (f" and {reversed_}" if reversed_ else "")


def check_label_map(data: np.ndarray, what: str, num_classes: int | None = None) -> np.ndarray:
    """Validate a label volume and return it as int64.

    Float files are accepted when every value is an integer; bool volumes become 0/1.

    Args:
        data: the label map (any shape).
        what: names the case and file in errors.
        num_classes: the number of classes ``C``; values must then lie in ``[0, C)`` (None: any non-negative
            integer).

    Returns:
        ``data`` as int64, same shape.

    Raises:
        CaseError: non-numeric, non-finite, non-integral, negative or too large (``>= num_classes``) values,
            listing a few offending values.

    Example:
        >>> check_label_map(np.array([0.0, 1.0, 2.0]), "case 'a'", num_classes=3)
        array([0, 1, 2])
        >>> check_label_map(np.array([0, 3]), "case 'a'", num_classes=3)
        Traceback (most recent call last):
            ...
        monai_unc.io.cases.CaseError: case 'a': label map holds values [3] outside classes 0..2
    """
    arr = np.asarray(data)
    if arr.dtype == bool:
        arr = arr.astype(np.int64)
    allowed = "non-negative classes" if num_classes is None else f"classes 0..{num_classes - 1}"
    ints = None
    if np.issubdtype(arr.dtype, np.floating):
        lo, hi = (arr.min(), arr.max()) if arr.size else (0.0, 0.0)  # NaN propagates: one pass each
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise CaseError(f"{what}: label map contains NaN or inf")
        if -(2.0**62) < lo and hi < 2.0**62:  # exact in int64: a value is integral when it converts back equal
            ints = arr.astype(np.int64)
            frac = ints != arr
        else:
            frac = arr != np.round(arr)
        if frac.any():
            raise CaseError(f"{what}: label map must hold integer classes, found values such as {arr[frac][:3]} (a "
                            "probability or uncertainty map? the labels and the predictions may be swapped)")
        if ints is None:  # integral values beyond int64's exact range: no class
            huge = np.unique(arr[np.abs(arr) >= 2.0**62])
            raise CaseError(f"{what}: label map holds values {huge[:6].tolist()} outside {allowed}")
    elif not np.issubdtype(arr.dtype, np.integer):
        raise CaseError(f"{what}: label map must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.int64) if ints is None else ints
    lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
    if lo >= 0 and (num_classes is None or hi < num_classes):
        return arr
    bad = (arr < 0) if num_classes is None else ((arr < 0) | (arr >= num_classes))
    raise CaseError(f"{what}: label map holds values {np.unique(arr[bad])[:6].tolist()} outside {allowed}")


@dataclass
class LoadedCase:
    """The arrays of one case, as :func:`load_case` reads and checks them.

    Class cases (softmax / binary): ``label`` and ``seg`` ``(*spatial)`` int64, ``probs`` ``(C, *spatial)``
    float32, ``maps`` ``{measure: (*spatial) float32}``, ``image`` ``(C_in, *spatial)``.

    Multi-label cases (``multilabel=True``, read by ``load_case(..., multilabel=True)``): ``probs`` ``(R,
    *spatial)`` per-region foreground probabilities (not summing to 1), ``maps`` ``{measure: (R, *spatial)}`` one map
    per region, ``seg`` either ``(R, *spatial)`` uint8 region masks or a ``(*spatial)`` int64 label map (a
    single-channel file; converted to regions by the caller's region spec), ``label`` a ``(*spatial)`` label map or
    ``(R, *spatial)`` uint8 reference region masks.

    Args:
        case_id: the case id.
        label: the reference (shapes above).
        seg: the predicted segmentation.
        probs: the probabilities, or None when only a segmentation was given.
        maps: the uncertainty maps by measure name.
        affine: ``(4, 4)`` voxel -> world matrix (mm) of the label map.
        spacing: voxel size per axis (mm).
        image: the input image, or None when not loaded.
        multilabel: whether the case is region-based (sigmoid).
        derived: the measures of ``maps`` that were derived from the probabilities instead of read from files.
        label_file: the label file ``affine`` was read from (:func:`load_case`), or None: the file whose sform /
            qform codes, qform and unit a map written on the case's grid copies (``like=`` of
            :func:`~monai_unc.io.save_nifti`).
        ignore: ``(*spatial)`` bool, True where the reference holds the ignore label (``load_case(...,
            ignore_label=N)``; those voxels read as 0 in ``label``), or None without an ignore label.
        image_unit: the unit of ``image``'s values (:func:`image_unit`: ``"HU"`` for a CT series, ``"real-world
            values"`` for another series, None for a volume file or without an image), from the image's one read, so
            that a page's viewer does not read a series' headers again.

    Example:
        >>> z = np.zeros((2, 2, 2), np.int64)
        >>> LoadedCase("a", z, z, None, {}, np.eye(4), (1.0, 1.0, 1.0)).multilabel
        False
    """

    case_id: str
    label: np.ndarray
    seg: np.ndarray
    probs: np.ndarray | None
    maps: dict[str, np.ndarray]
    affine: np.ndarray
    spacing: tuple[float, ...]
    image: np.ndarray | None = None
    multilabel: bool = False
    derived: tuple[str, ...] = ()
    label_file: Path | None = None
    ignore: np.ndarray | None = None
    image_unit: str | None = None

    @property
    def voxel_volume(self) -> float:
        """The volume of one voxel in mm^3 (the area of a 2-D case's): ``|det A|`` of the affine.

        :func:`~monai_unc._utils.affine_voxel_volume`: right also on a sheared grid.

        Returns:
            The voxel volume.
        """
        return affine_voxel_volume(self.affine, len(self.spacing))


def check_geometry(case: str, ref: tuple[Any, np.ndarray, Path | None], other: tuple[Any, Any, Path]) -> None:
    """Refuse a volume of a case that is not on the grid of its label map.

    Args:
        case: the case id, named in the error.
        ref: ``(spatial shape, affine, path)`` of the label (the path None: "the label").
        other: ``(spatial shape, affine, path)`` of the other volume (the affine None: not compared, e.g. an
            nnU-Net ``.npz``).

    Raises:
        CaseError: naming both files, for another spatial shape or for affines that do not put the grid in the
            same space (:func:`grid_mismatch`, the largest displacement stated).
    """
    ref_shape, ref_aff, ref_path = ref
    shape, aff, path = other
    label = "the label" if ref_path is None else f"the label {ref_path.name}"
    if aff is not None and tuple(shape) == tuple(ref_shape) and grid_mismatch(aff, ref_aff, ref_shape) is not None:
        unset = [p for p in (ref_path, path) if p is not None and _unoriented_nifti(p)]
        if unset:  # found by hostile review 64: refused as "not in the same space", the cause unsaid
            raise CaseError(
                f"case {case!r}: {unset[0].name} has no orientation (sform_code and qform_code 0, NIfTI's method 1), "
                f"so its affine is a reader's guess (nibabel's and MONAI's: pixdim, the origin at the volume's centre; "
                f"ITK's and nnU-Net's SimpleITK: origin 0): {path.name} and {label} are not read on one grid; give "
                f"{unset[0].name} the geometry of its image (nibabel: img.set_sform(image_affine, code=1)), or write "
                "the prediction with the label's header"
            )
    # the label's grid in another voxel order: said so, never compared voxel by voxel (found by hostile review 64)
    order = None if aff is None else reoriented_grid(aff, shape, ref_aff, ref_shape)
    if order is not None:
        codes = _axis_codes(ref_aff, len(ref_shape))
        raise CaseError(
            f"case {case!r}: {path.name} (spatial shape {tuple(shape)}) holds the label's grid with {order}, not in "
            f"the voxel order of {label} ({tuple(ref_shape)}{codes}), so its voxels cannot be compared one by one; "
            f"{REORIENT_REMEDY.format(what='the label')}"
        )
    if tuple(shape) != tuple(ref_shape):
        remedy = "resample the prediction onto the label's grid"
        if _without_trailing_ones(shape) == _without_trailing_ones(ref_shape):  # found by hostile review 64
            common = _without_trailing_ones(ref_shape)
            if aff is None or grid_mismatch(aff, ref_aff, common) is None:
                remedy = ("the same voxels with an axis of length 1 more or less (a 2-D file against a one-slice 3-D "
                          "one): save both with the same number of axes (nibabel: add or drop the axis of length 1)")
        raise CaseError(
            f"case {case!r}: {path.name} has spatial shape {tuple(shape)} but {label} has "
            f"{tuple(ref_shape)}; {remedy}"
        )
    if aff is not None:
        problem = grid_mismatch(aff, ref_aff, ref_shape)
        if problem is not None:
            assumed = _assumed_spacing(ref_path, path)
            raise CaseError(
                f"case {case!r}: {path.name} and {label} have different affines ({problem}): they are not in the same "
                f"space{f' ({assumed})' if assumed else ''}"
            )


def load_case(
    files: CaseFiles, num_classes: int | None = None, load_image: bool = False, multilabel: bool = False,
    seg_regions: Mapping[str, Sequence[int]] | None = None, ignore_label: int | None = None,
) -> LoadedCase:
    """Read and check every file of a case (see the module docstring for the checks).

    ``num_classes`` is taken from the probabilities when they exist (and must then agree); without
    probabilities it must be given. The segmentation defaults to the argmax of the probabilities. Uncertainty maps
    must be finite and non-negative.

    ``multilabel=True`` reads a region-based (sigmoid) prediction (:class:`LoadedCase` lists the shapes):
    ``num_classes`` is then the number of regions ``R`` (optional; every file with region channels must agree with
    it and with each other), probabilities are checked to lie in ``[0, 1]`` without the sum-to-1 constraint, a
    segmentation with several channels must hold binary region masks (0/1) and one with a single channel is read
    as a label map (except a one-region mask, a 4D NIfTI ``(X, Y, Z, 1)`` of 0/1 for ``num_classes=1``, as
    :func:`save_region_maps` writes it), the segmentation defaults to ``probs > 0.5`` per region
    (:func:`~monai_unc.activation.foreground_masks`, as ``infer`` writes it), and the label is a label map holding
    any non-negative labels (e.g. BraTS 0, 1, 2, 4) or ``R`` 0/1 region masks (for one region its 4D mask, by the
    segmentation's rule).

    Args:
        files: the case's files (:func:`match_cases`).
        num_classes: the number of classes ``C`` (regions ``R`` with ``multilabel=True``).
        load_image: also read the input image (for overlays).
        multilabel: read a region-based prediction.
        seg_regions: with ``multilabel``, the region spec whose regions the segments of a DICOM SEG label are
            (:func:`read_label`; None: its segments are disjoint labels).
        ignore_label: nnU-Net's ignore label, or None: a label map's voxels holding it are recorded in
            ``LoadedCase.ignore`` and read as 0 (it must lie above the classes ``0 .. C-1``; a reference given as
            region masks has no label to ignore).

    Returns:
        The case's arrays.

    Raises:
        FileNotFoundError: a file does not exist.
        CaseError: naming the case and the file for an unreadable file, a geometry (shape or affine) that differs
            from the label's, wrong values, or disagreeing class / region counts.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from monai_unc.io.files import save_nifti, save_probabilities
        >>> with tempfile.TemporaryDirectory() as d:
        ...     label = save_nifti(np.zeros((4, 4, 4), np.int64), np.eye(4), Path(d) / "a.nii.gz")
        ...     probs = save_probabilities(np.full((2, 4, 4, 4), 0.5), np.eye(4), Path(d) / "a_probs.nii.gz")
        ...     case = load_case(CaseFiles("a", label, probs=probs))
        ...     case.probs.shape, case.seg.dtype, case.spacing
        ((2, 4, 4, 4), dtype('int64'), (1.0, 1.0, 1.0))
    """
    if seg_regions is not None and not multilabel:
        raise ValueError("seg_regions needs multilabel=True (a region-based prediction)")
    with _CaseReads(files, load_image, seg_regions) as reads:
        if multilabel:
            return _load_multilabel_case(files, num_classes, load_image, reads, ignore_label)
        return _load_class_case(files, num_classes, load_image, reads, ignore_label)


def _split_ignore(data: np.ndarray, ignore_label: int | None, what: str, num_classes: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """A label map's ignore voxels: ``(data with them 0, mask)``; ``(data, None)`` without an ignore label."""
    if ignore_label is None:
        return data, None
    if num_classes is not None and ignore_label < num_classes:
        raise CaseError(f"{what}: the ignore label {ignore_label} is one of the classes 0..{num_classes - 1}")
    mask = np.asarray(data == ignore_label, dtype=bool)
    return (np.where(mask, 0, data) if mask.any() else data), mask


def without_time_axis(read: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A read ``(C, X, Y, Z, 1)`` of a 5-D NIfTI ``(X, Y, Z, 1, C)`` as ``(C, X, Y, Z)``; any other read as it is.

    The NIfTI layout of a vector image (ITK's, SimpleITK's; MONAI's ``LoadImage`` and :func:`read_volume` read it
    as ``(C, X, Y, Z, 1)``, the components as channels) keeps the components on the fifth axis and the time axis,
    length 1, on the fourth: no spatial axis, so the volume is on the 3-D grid of its affine, as the 4-D
    ``(X, Y, Z, C)`` file with the same voxels. A case's volumes (:func:`load_case`), ``infer``'s and ``triage``'s
    images are read through it (earlier versions refused such a file against a 3-D label as "spatial
    shape (X, Y, Z, 1)", and by a 3-D network as a 4-D image). A longer time axis stays (refused as another grid).

    Args:
        read: ``(data, affine)`` as :func:`read_volume` returns it.

    Returns:
        ``(data, affine)``, ``data`` without its last axis when it is ``(C, X, Y, Z, 1)`` (a view).

    Example:
        >>> data, affine = without_time_axis((np.zeros((2, 4, 5, 6, 1)), np.eye(4)))
        >>> data.shape
        (2, 4, 5, 6)
    """
    data, affine = read
    if getattr(data, "ndim", 0) == 5 and data.shape[4] == 1:
        return data[..., 0], affine
    return read


class _CaseReads:
    """The files of one case, read on several threads and taken in the checks' order (``reads(key)``).

    zlib and NumPy release the GIL while a NIfTI file is inflated and converted, so the label, probabilities,
    segmentation, maps and image of a case are read at once on up to ``torch.get_num_threads()`` threads (one: read
    when asked, as before). A read's exception is raised where its result is asked for, so the errors and their
    order are those of reading one file after the other; reads not asked for when a check fails are cancelled or
    waited for, their errors dropped.
    """

    def __init__(self, files: CaseFiles, load_image: bool,
                 seg_regions: Mapping[str, Sequence[int]] | None = None) -> None:
        calls: dict[Any, Any] = {"label": functools.partial(read_label, files, seg_regions)}
        if files.probs is not None:
            calls["probs"] = functools.partial(read_probabilities, files.probs)
        if files.seg is not None:  # a label map: its stored integers, as read_label reads the labels
            calls["seg"] = functools.partial(_read_label_volume, files.seg)
        for m, path in files.maps.items():  # a map written one file per region: each file (_region_files_map)
            calls[("map", m)] = (functools.partial(_read_volumes, path) if isinstance(path, tuple)
                                 else functools.partial(read_volume, path))
        if load_image and files.image is not None:  # with the unit of its values, from the same read
            calls["image"] = functools.partial(_read_image_volume, files.image)
        self._calls = calls
        threads = min(len(calls), num_threads())
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="read") if threads > 1 else None
        self._futures = {k: self._pool.submit(f) for k, f in calls.items()} if self._pool is not None else {}

    def __call__(self, key: Any) -> Any:
        read = self._calls[key]() if self._pool is None else self._futures[key].result()
        if key == "image":  # (read, unit): _read_image_volume
            return without_time_axis(read[0]), read[1]
        if isinstance(read, list):  # a map written one file per region
            return [without_time_axis(r) for r in read]
        return without_time_axis(read)

    def __enter__(self) -> _CaseReads:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _load_class_case(files: CaseFiles, num_classes: int | None, load_image: bool, reads: _CaseReads,
                     ignore_label: int | None = None) -> LoadedCase:
    """:func:`load_case` of a class (softmax) prediction, its files from ``reads``."""
    cid = files.case_id
    label_data, affine = reads("label")
    if label_data.shape[0] != 1:
        raise CaseError(f"case {cid!r}: label {files.label.name} must be a single-channel label map, "
                        f"got {label_data.shape[0]} channels")
    spatial = label_data.shape[1:]
    ref = (spatial, affine, files.label)
    probs = None
    if files.probs is not None:
        p, p_aff = reads("probs")
        check_geometry(cid, ref, (p.shape[1:], p_aff, files.probs))
        if num_classes is not None and p.shape[0] != num_classes:
            raise CaseError(f"case {cid!r}: {files.probs.name} has {p.shape[0]} classes, the cohort {num_classes}")
        # one C-contiguous float32 copy, checked and kept (a 4D NIfTI reads as a channel-first view, which every
        # metric would otherwise copy again)
        probs = np.ascontiguousarray(p, dtype=np.float32)
        try:
            check_probabilities(torch.from_numpy(probs)[None], "probabilities")
        except (ValueError, TypeError) as e:
            hint = ("; per-region probabilities of a region-based (sigmoid) network are read with multilabel=True "
                    "(evaluate --regions)" if "sum to 1" in str(e) else "")
            raise CaseError(f"case {cid!r}: {files.probs.name}: {e}{hint}") from None
        num_classes = p.shape[0]
    if num_classes is None:
        raise CaseError(f"case {cid!r}: the number of classes is unknown: give probabilities or num_classes")
    what = f"case {cid!r}: label {files.label.name}"
    label_map, ignore = _split_ignore(label_data[0], ignore_label, what, num_classes)
    label = check_label_map(label_map, what, num_classes)
    if files.seg is not None:
        s, s_aff = reads("seg")
        if s.shape[0] != 1:
            raise CaseError(f"case {cid!r}: segmentation {files.seg.name} must be a label map, got {s.shape[0]} "
                            "channels")
        check_geometry(cid, ref, (s.shape[1:], s_aff, files.seg))
        seg = check_label_map(s[0], f"case {cid!r}: segmentation {files.seg.name}", num_classes)
    else:
        assert probs is not None
        seg = probs.argmax(axis=0).astype(np.int64)
    maps = {}
    for m, path in files.maps.items():
        if isinstance(path, tuple):
            raise CaseError(f"case {cid!r}: the {m} map written one file per region ({_map_name(path)}) is a "
                            "region-based (sigmoid) prediction's: read it with multilabel=True (evaluate --regions)")
        u, u_aff = reads(("map", m))
        if u.shape[0] != 1:
            raise CaseError(f"case {cid!r}: uncertainty map {path.name} must have one channel, got {u.shape[0]}")
        check_geometry(cid, ref, (u.shape[1:], u_aff, path))
        maps[m] = _checked_map(cid, path, u[0])
    image, unit = _read_image(files, cid, ref, reads) if load_image else (None, None)
    return LoadedCase(cid, label, seg, probs, maps, affine, spacing_from_affine(affine)[: len(spatial)], image,
                      label_file=Path(files.label), ignore=ignore, image_unit=unit)


def _checked_map(cid: str, path: Path | tuple[Path, ...], u: np.ndarray) -> np.ndarray:
    """An uncertainty map as float32, refused when it holds NaN, inf or negative values."""
    u = u.astype(np.float32, copy=False)
    if not np.isfinite(u).all():
        raise CaseError(f"case {cid!r}: uncertainty map {_map_name(path)} contains NaN or inf")
    if u.min() < 0:
        raise CaseError(f"case {cid!r}: uncertainty map {_map_name(path)} has negative values (min {u.min():.4g})")
    return u


def _read_volumes(paths: Sequence[Path]) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`read_volume` of each file (a map written one file per region)."""
    return [read_volume(p) for p in paths]


def _region_files_map(cid: str, ref: tuple[Any, np.ndarray, Path], paths: tuple[Path, ...],
                      volumes: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """A map written one file per region (:func:`_read_volumes`), stacked ``(R, *spatial)`` in the files' order.

    Raises:
        CaseError: a file with several channels, or one not on the label's grid (so the files agree with each other).
    """
    for path, (u, u_aff) in zip(paths, volumes):
        if u.shape[0] != 1:
            raise CaseError(f"case {cid!r}: uncertainty map {path.name}, one region's map, must have one channel, got "
                            f"{u.shape[0]}")
        check_geometry(cid, ref, (u.shape[1:], u_aff, path))
    return np.concatenate([u for u, _ in volumes], axis=0)


def _read_image(files: CaseFiles, cid: str, ref: tuple[Any, np.ndarray, Path], reads: _CaseReads
                ) -> tuple[np.ndarray | None, str | None]:
    """The case's image ``(C_in, *spatial)`` float32 on the label's grid and the unit of its values, or two Nones.

    The unit is :func:`image_unit`'s, from the image's one read; ``(None, None)`` without an image file.
    """
    if files.image is None:
        return None, None
    (img, i_aff), unit = reads("image")
    check_geometry(cid, ref, (img.shape[1:], i_aff, files.image))
    return img.astype(np.float32, copy=False), unit


def _load_multilabel_case(files: CaseFiles, num_regions: int | None, load_image: bool, reads: _CaseReads,
                          ignore_label: int | None = None) -> LoadedCase:
    """:func:`load_case` with ``multilabel=True``, its files from ``reads``."""
    cid = files.case_id
    label_data, affine = reads("label")
    spatial = label_data.shape[1:]
    ref = (spatial, affine, files.label)
    sources: list[str] = [] if num_regions is None else ["the region spec"]

    def regions_of(n: int, what: str) -> None:  # every file with region channels agrees on R
        nonlocal num_regions
        if num_regions is not None and n != num_regions:
            raise CaseError(f"case {cid!r}: {what} has {n} region channel(s) but {sources[0]} has {num_regions}")
        if num_regions is None:
            num_regions = n
            sources.append(what)

    what = f"case {cid!r}: label {files.label.name}"
    if label_data.shape[0] == 1 and not _one_region_masks(files.label, label_data, num_regions):
        # a label map (e.g. BraTS 0, 1, 2, 4): regions come from the caller's spec; nnU-Net's ignore label is left
        # out of every region (its evaluate_predictions.compute_metrics)
        label_map, ignore = _split_ignore(label_data[0], ignore_label, what)
        label = check_label_map(label_map, what)
    else:  # one 0/1 reference mask per region: no label value to ignore
        label, ignore = _region_masks(label_data, what), None
        regions_of(label_data.shape[0], files.label.name)

    probs = None
    if files.probs is not None:
        p, p_aff = reads("probs")
        check_geometry(cid, ref, (p.shape[1:], p_aff, files.probs))
        probs = np.ascontiguousarray(p, dtype=np.float32)  # checked and kept (see load_case)
        try:
            check_unit_interval(torch.from_numpy(probs)[None], "probabilities")
        except (ValueError, TypeError) as e:
            raise CaseError(f"case {cid!r}: {files.probs.name}: {e}") from None
        regions_of(p.shape[0], files.probs.name)
    if files.seg is not None:
        s, s_aff = reads("seg")
        check_geometry(cid, ref, (s.shape[1:], s_aff, files.seg))
        what = f"case {cid!r}: segmentation {files.seg.name}"
        if s.shape[0] == 1 and not _one_region_masks(files.seg, s, num_regions):
            # a label map (nnU-Net converts regions back to labels): the regions come from the spec
            seg = check_label_map(s[0], what)
        else:
            seg = _region_masks(s, what)
            regions_of(s.shape[0], files.seg.name)
    elif probs is not None:
        seg = foreground_masks(probs).astype(np.uint8)
    else:
        raise CaseError(f"case {cid!r}: no segmentation and no probabilities")
    maps = {}
    for m, path in files.maps.items():
        if isinstance(path, tuple):  # one file per region, in the spec's order (match_cases)
            u = _region_files_map(cid, ref, path, reads(("map", m)))
        else:
            u, u_aff = reads(("map", m))
            check_geometry(cid, ref, (u.shape[1:], u_aff, path))
        regions_of(u.shape[0], _map_name(path))
        maps[m] = _checked_map(cid, path, u)
    image, unit = _read_image(files, cid, ref, reads) if load_image else (None, None)
    return LoadedCase(cid, label, seg, probs, maps, affine, spacing_from_affine(affine)[: len(spatial)], image,
                      multilabel=True, label_file=Path(files.label), ignore=ignore, image_unit=unit)


def _one_region_masks(path: Path, data: np.ndarray, num_regions: int | None) -> bool:
    """Whether a one-channel segmentation (or reference) of a one-region prediction is that region's 0/1 mask.

    Both read as one channel: ``monai-unc infer --activation sigmoid`` with one region writes its mask as a 4D NIfTI
    ``(X, Y, Z, 1)`` (:func:`~monai_unc.io.save_region_maps`), nnU-Net a label map as a 3D file. Found by hostile
    review: the mask of ``--regions '{"ET": [4]}'`` was read as a label map of label 1, so a perfect prediction had
    Dice 0 (and, once predicted label maps were checked, was refused for its "unclaimed label 1"). A reference written
    the same way (the region's mask as a 4D file) is read by the same rule.

    Args:
        path: the segmentation file.
        data: its channel-first data ``(1, *spatial)``.
        num_regions: the regions of the caller's spec (None: unknown).

    Returns:
        True for a one-region spec and a ``.nii`` / ``.nii.gz`` file of one more axis than the grid, of length 1,
        holding 0 and 1 only (a 5-D ``(X, Y, Z, 1, 1)`` file counts as the 4-D ``(X, Y, Z, 1)``).
    """
    if num_regions != 1:
        return False
    try:
        geometry = nifti_geometry(path)
    except Exception:  # noqa: BLE001 - the volume was read: its header is, too
        return False
    if geometry is None or geometry[0][-1] != 1:
        return False
    shape = geometry[0]
    if len(shape) == 5 and shape[3] == 1:  # (X, Y, Z, 1, 1): read without its time axis (without_time_axis)
        shape = shape[:3] + shape[4:]
    if len(shape) != data.ndim:
        return False
    return bool(np.isin(data, (0, 1)).all())


def _region_masks(data: np.ndarray, what: str) -> np.ndarray:
    """``(R, *spatial)`` region masks as uint8; ``CaseError`` naming ``what`` for values other than 0 and 1."""
    bad = ~np.isin(data, (0, 1))
    if bad.any():
        raise CaseError(f"{what}: region masks must hold 0 and 1 only, found values such as "
                        f"{np.unique(data[bad])[:3].tolist()}")
    return data.astype(np.uint8)


def nnunet_input_channels(dataset_json: Any) -> int:
    """The number of input channels of an nnU-Net model: the entries of its ``dataset.json`` ``channel_names``.

    ``modality`` in older files; 1 where neither is a non-empty object (no record, or an untrusted file beside the
    predictions that says nothing usable: a model's own ``dataset.json`` is checked when it loads).

    Args:
        dataset_json: the parsed ``dataset.json``, or None.

    Returns:
        The number of channels, at least 1.

    Example:
        >>> nnunet_input_channels({"channel_names": {"0": "T1", "1": "T2"}}), nnunet_input_channels(None)
        (2, 1)
    """
    if not isinstance(dataset_json, Mapping):
        return 1
    names = dataset_json.get("channel_names", dataset_json.get("modality"))
    return len(names) if isinstance(names, Mapping) and names else 1


def nnunet_dataset_regions(dataset_json: Any, source: str = "dataset.json") -> dict[str, list[int]]:
    """The regions of a region-based nnU-Net ``dataset.json`` in channel order.

    nnU-Net's ``LabelManager`` has regions when some entry of ``"labels"`` lists more than one label; its output
    channels are then the entries other than ``ignore`` and the background (an entry of label 0 only), in their order.
    This is the order of the sigmoid channels of a region-based model's probabilities (``<case>.npz``), which need not
    be that of a region spec such as ``brats`` (nnU-Net's BraTS datasets list whole tumour, tumour core, enhancing
    tumour; MONAI's order is TC, WT, ET).

    Args:
        dataset_json: the parsed ``dataset.json`` (untrusted: a file beside the predictions).
        source: the file's name in error messages.

    Returns:
        ``{name: [labels]}`` in channel order; ``{}`` for a label-based dataset (or one without ``"labels"``).

    Raises:
        ValueError: ``dataset_json`` is not an object, or its ``"labels"`` is not an object of integer labels or
            lists of integer labels (naming ``source``; a whole number written as a float, ``3.0``, is label 3, as
            nnU-Net reads it).

    Example:
        >>> nnunet_dataset_regions({"labels": {"background": 0, "whole": [1, 2, 3], "core": [2, 3], "enh": 3}})
        {'whole': [1, 2, 3], 'core': [2, 3], 'enh': [3]}
        >>> nnunet_dataset_regions({"labels": {"background": 0, "tumour": 1}})
        {}
    """
    if not isinstance(dataset_json, Mapping):
        raise ValueError(f"{source} must hold a JSON object, got {type(dataset_json).__name__}")
    labels = dataset_json.get("labels", {})
    if not isinstance(labels, Mapping):
        raise ValueError(f"{source}: 'labels' must be an object of label names, got {type(labels).__name__}")

    def integral(v: Any) -> bool:  # nnU-Net reads labels with int(): 3.0 is label 3 (found by hostile review)
        return not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))

    def values(name: str, value: Any) -> list[int]:
        vals = list(value) if isinstance(value, (list, tuple)) else [value]
        if not vals or not all(integral(v) for v in vals):
            raise ValueError(f"{source}: label {name!r} must be an integer or a non-empty list of integers, got "
                             f"{value!r}")
        return [int(v) for v in vals]

    parsed = {str(name): values(str(name), value) for name, value in labels.items()}
    if not any(len(v) > 1 for v in parsed.values()):
        return {}
    return {name: vals for name, vals in parsed.items() if name != "ignore" and set(vals) != {0}}


#: the (source, regions, order) of the contradicting ``regions_class_order`` already warned in this process
_WARNED_CLASS_ORDERS: set[tuple[Any, ...]] = set()
_WARNED_CLASS_ORDERS_LOCK = threading.Lock()


def check_regions_class_order(
    regions: Mapping[str, Sequence[int]], regions_class_order: Any, source: str = "dataset.json", warn: bool = True
) -> str | None:
    """Whether nnU-Net's ``regions_class_order`` writes every voxel of a region-based model with a label of its regions.

    nnU-Net turns region probabilities into a label map (``LabelManager.convert_probabilities_to_segmentation``)
    starting from 0 and writing each region's voxels with ``p > 0.5`` as that region's ``regions_class_order`` entry,
    the regions in channel order, later ones over earlier ones. The labels come out right only when the regions are
    listed from the outside in (each later region inside the earlier ones it overlaps, e.g. BraTS whole tumour, tumour
    core, enhancing tumour) and each entry is the label of the voxels in its region but in none listed after it. For
    every label of the spec this takes the voxel holding exactly that label's regions, the label nnU-Net writes there
    (the entry of the last of them) and compares the regions of the two labels; where they differ the label map nnU-Net
    writes (and monai-unc scores as written) has wrong labels, which a ``UserWarning`` says once per process for the
    same ``source``, regions and order. An order of another length or of non-integers is left to nnU-Net (it refuses
    it).

    Args:
        regions: the region spec ``{name: [labels]}`` in channel order (:func:`nnunet_dataset_regions`).
        regions_class_order: the ``regions_class_order`` read beside it (untrusted), one label per region.
        source: the file it was read from, named in the message.
        warn: warn (once) when the order writes wrong labels; False only returns the message.

    Returns:
        The message (naming ``source``, the order and the first label written wrongly), or None when every label is
        written with its own regions (or the order cannot be checked).

    Example:
        >>> regions = {"whole": [1, 2, 3], "core": [2, 3], "enhancing": [3]}
        >>> check_regions_class_order(regions, [1, 2, 3]) is None
        True
        >>> "written as label 1" in check_regions_class_order(dict(reversed(regions.items())), [3, 2, 1], warn=False)
        True
    """
    if not isinstance(regions_class_order, (list, tuple)) or len(regions_class_order) != len(regions) or not all(
        isinstance(c, int) and not isinstance(c, bool) for c in regions_class_order
    ):
        return None
    names = list(regions)
    order = [int(c) for c in regions_class_order]
    sets = {label: frozenset(i for i, n in enumerate(names) if label in regions[n])
            for values in regions.values() for label in values}
    wrong = []
    for label in sorted(sets):
        if label == 0 or not sets[label]:
            continue
        written = order[max(sets[label])]
        if sets.get(written, frozenset()) != sets[label]:
            wrong.append((label, written))
    if not wrong:
        return None

    def regs(label: int) -> str:
        held = sets.get(label, frozenset())
        return ", ".join(names[i] for i in sorted(held)) if held else "no region"

    label, written = wrong[0]
    more = f" ({len(wrong) - 1} more label(s) likewise)" if len(wrong) > 1 else ""
    message = (
        f"{source}: regions_class_order {order} does not list the regions {names} from the outside in: nnU-Net writes "
        f"each region's voxels with p > 0.5 as its regions_class_order entry, later regions over earlier ones, so a "
        f"voxel of label {label} (regions {regs(label)}) is written as label {written} ({regs(written)}){more}, and "
        "these labels are scored as written; list the regions from the outside in (each inside the ones before it, "
        "e.g. whole tumour, tumour core, enhancing tumour) with regions_class_order giving each region the label of "
        "its voxels in no region after it"
    )
    if warn:
        key = (source, tuple((n, tuple(v)) for n, v in regions.items()), tuple(order))
        with _WARNED_CLASS_ORDERS_LOCK:
            first = key not in _WARNED_CLASS_ORDERS
            _WARNED_CLASS_ORDERS.add(key)
        if first:
            warnings.warn(message, UserWarning, stacklevel=2)
    return message


def nnunet_dataset_ignore_label(dataset_json: Any, source: str = "dataset.json") -> int | None:
    """nnU-Net's ignore label of a ``dataset.json``: the ``"ignore"`` entry of its ``"labels"``, or None.

    nnU-Net requires it to be an integer above every other label; its evaluation leaves the reference voxels holding
    it out of TP / FP / FN (``nnunetv2.evaluation.evaluate_predictions.compute_metrics``).

    Args:
        dataset_json: the parsed ``dataset.json`` (untrusted: a file beside the predictions).
        source: the file's name in error messages.

    Returns:
        The ignore label, or None when ``"labels"`` has no ``"ignore"`` entry.

    Raises:
        ValueError: naming ``source``: ``dataset_json`` is not an object, its ``"labels"`` not an object, or the ignore
            label is no integer of at least 1 (a whole number written as a float, ``3.0``, is label 3, as nnU-Net
            reads it) or not above every other label.

    Example:
        >>> nnunet_dataset_ignore_label({"labels": {"background": 0, "tumour": 1, "ignore": 2}})
        2
        >>> nnunet_dataset_ignore_label({"labels": {"background": 0, "tumour": 1}}) is None
        True
    """
    if not isinstance(dataset_json, Mapping):
        raise ValueError(f"{source} must hold a JSON object, got {type(dataset_json).__name__}")
    labels = dataset_json.get("labels", {})
    if not isinstance(labels, Mapping):
        raise ValueError(f"{source}: 'labels' must be an object of label names, got {type(labels).__name__}")
    if "ignore" not in labels:
        return None
    value = labels["ignore"]
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())
                                       ) or value < 1:
        raise ValueError(f"{source}: the ignore label must be an integer of at least 1, got {value!r}")
    others = [v for k, val in labels.items() if k != "ignore"
              for v in (val if isinstance(val, (list, tuple)) else [val])]
    if any(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= value for v in others):
        raise ValueError(f"{source}: the ignore label {int(value)} must lie above every other label, as nnU-Net "
                         "requires")
    return int(value)


#: what :func:`read_prediction_regions` found in the case records of the last few folders whose ``infer.json`` does
#: not say: ``{file_version of the folder: (answer, ((record path, its file_version), ...))}``
_RECORD_REGIONS: dict[tuple[Any, ...], tuple[dict[str, Any] | None, tuple[tuple[str, tuple[Any, ...]], ...]]] = {}
_RECORD_REGIONS_KEPT = 8
_RECORD_REGIONS_LOCK = threading.Lock()


def _stat_or_none(path: str | os.PathLike) -> os.stat_result | None:
    """``os.stat(path)``, or None when it cannot be read."""
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def _version_or_none(path: str) -> tuple[Any, ...] | None:
    """:func:`~monai_unc.io.files.file_version` of ``path`` as it is now, or None when it cannot be read."""
    st = _stat_or_none(path)
    return None if st is None else file_version(path, st)


def read_prediction_regions(predictions: str | os.PathLike) -> dict[str, Any] | None:
    """How a ``monai-unc infer`` output folder encodes regions.

    Read from the top level of ``infer.json`` (written once a run finishes) or, for a run that has not finished,
    from the first case record ``<case>.json`` that carries ``multilabel``.

    The products call this for every case of a cohort (their fingerprint check): ``infer.json`` is parsed once per
    version of it (:func:`~monai_unc.io.read_json_cached`), and what the case records say is kept per version of the
    folder (inode, modification and change times: a record added, removed or renamed changes them) and of each record
    read (an edit in place changes its times), so a folder whose ``infer.json`` does not say (an unfinished run, or
    an earlier version's, whose records all lack ``multilabel``) has its records read once, not once per case. What
    changed in the last few seconds is read every time (coarse file-system timestamps).

    Args:
        predictions: the output folder of ``monai-unc infer``.

    Returns:
        ``None`` when it holds class (softmax / binary) predictions or no record, else ``{"multilabel": True,
        "regions": ...}`` with ``regions`` the spec given to ``infer --regions`` (``{name: [label, ...]}``, channel
        order) or, without one, the channel names ``["0", "1", ...]``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "infer.json").write_text('{"multilabel": true, "regions": {"WT": [1, 2, 4]}}')
        ...     read_prediction_regions(d)
        {'multilabel': True, 'regions': {'WT': [1, 2, 4]}}
    """
    folder = Path(predictions)
    # the run record first, once per version of it (a per-case loop reads it for every case); the case records only
    # when it does not say
    d = read_json_cached(folder / INFER_RECORD)
    if isinstance(d, dict) and "multilabel" in d:
        return {"multilabel": True, "regions": d.get("regions")} if d["multilabel"] else None
    return copy.deepcopy(_records_regions(folder))


def _records_regions(folder: Path) -> dict[str, Any] | None:
    """:func:`read_prediction_regions` from the case records of ``folder``.

    Kept while the folder and the records read are unchanged (in earlier versions a product's per-case check read
    every record of such a folder for every case).
    """
    where = os.path.abspath(folder)
    st = _stat_or_none(where)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return None  # no folder: no record (a glob of it lists nothing)
    key = file_version(where, st)
    with _RECORD_REGIONS_LOCK:
        kept = _RECORD_REGIONS.get(key)
    if kept is not None and all(_version_or_none(path) == v for path, v in kept[1]):
        return kept[0]
    now = time.time_ns()  # one clock reading for the whole scan (io.files.settled measures from it)
    keep = settled(st, now)
    found: dict[str, Any] | None = None
    read: list[tuple[str, tuple[Any, ...]]] = []
    for path in sorted(p for p in folder.glob("*.json") if p.name not in (INFER_RECORD, "failures.json")):
        name = os.path.join(where, path.name)
        before = _stat_or_none(name)
        d = read_json_or_none(path)
        if before is not None:
            version = file_version(name, before)
            keep = keep and version == _version_or_none(name) and settled(before, now)
            read.append((name, version))
        else:
            keep = False
        if isinstance(d, dict) and "multilabel" in d:
            found = {"multilabel": True, "regions": d.get("regions")} if d["multilabel"] else None
            break
    if keep and _version_or_none(where) == key:  # nothing added, removed or renamed during the scan
        with _RECORD_REGIONS_LOCK:
            while len(_RECORD_REGIONS) >= _RECORD_REGIONS_KEPT:
                _RECORD_REGIONS.pop(next(iter(_RECORD_REGIONS)))
            _RECORD_REGIONS[key] = (found, tuple(read))
    return found


def _same_setting(old: Any, new: Any) -> bool:
    """``old == new``, also for a NaN (equal to itself) and arrays (element by element), as canonical text.

    In earlier versions, with ``==`` alone, a NaN setting was a change, and an array in a rank's
    ``agree`` value raised "The truth value of an array ... is ambiguous" instead of naming the difference.
    """
    try:
        if bool(old == new):
            return True
    except (TypeError, ValueError):  # an array's elementwise comparison
        pass
    return canonical_text(old) == canonical_text(new)


def settings_changes(recorded: Any, current: Any, width: int = 80) -> list[str]:
    """What differs between the settings a case was made with and the current ones, one short text per setting.

    For a log line that says why a case is computed again.

    Args:
        recorded: the settings in the case's record (a dict; None or another type when the record has none).
        current: the current settings (a dict).
        width: the longest ``old -> new`` text; a longer change is shown as ``<key> changed``.

    Returns:
        ``["num_samples 8 -> 16", "weights changed", ...]`` in the order of ``current`` (then keys only recorded);
        ``["no settings recorded"]`` when ``recorded`` is not a dict; empty when nothing differs.

    Example:
        >>> settings_changes({"samples": 8, "tta": True}, {"samples": 16, "tta": True})
        ['samples 8 -> 16']
    """
    if not isinstance(recorded, dict):
        return ["no settings recorded (written by an earlier version)"]
    missing = object()
    out = []
    for key in [*current, *(k for k in recorded if k not in current)]:
        old, new = recorded.get(key, missing), current.get(key, missing)
        if old is not missing and new is not missing and _same_setting(old, new):
            continue
        text = " -> ".join("(none)" if v is missing else canonical_text(v) for v in (old, new))  # an array whole
        out.append(f"{key} {text}" if len(text) <= width else f"{key} changed")
    return out


#: the most data files a MetaImage header may name (``ElementDataFile`` as a list or a numbered pattern)
_MAX_METAIMAGE_FILES = 100_000


def _metaimage_data_files(header: Path) -> list[Path]:
    """The data files a MetaImage header (``.mhd``) names in ``ElementDataFile``; none for ``LOCAL`` (``.mha`` style).

    The value is one file name, ``LIST`` followed by one name per line, or a numbered pattern ``name%03d.raw first
    last [step]``; names are relative to the header's folder. A header that cannot be read or names no file gives
    none (reading the volume then fails with its reader's reason).
    """
    try:
        with header.open("rb") as f:
            lines = f.read(1 << 20).decode("latin-1").splitlines()
    except OSError:
        return []
    for i, line in enumerate(lines):
        key, sep, value = line.partition("=")
        if not sep or key.strip().lower() != "elementdatafile":
            continue
        value = value.strip()
        if not value or value.upper() == "LOCAL":
            return []
        if value.split()[0].upper() == "LIST":
            names = [n.strip() for n in lines[i + 1:] if n.strip()]
        elif "%" in value:
            pattern, *numbers = value.split()
            try:
                first, last = int(numbers[0]), int(numbers[1])
                step = int(numbers[2]) if len(numbers) > 2 else 1
                span = range(first, last + (1 if step > 0 else -1), step)
                if len(span) > _MAX_METAIMAGE_FILES:
                    return []
                names = [pattern % k for k in span]
            except (IndexError, ValueError, TypeError):
                return []
        else:
            names = [value]
        return [header.parent / n for n in names[:_MAX_METAIMAGE_FILES]]
    return []


def volume_files(path: str | os.PathLike) -> list[Path]:
    r"""The files a volume input is made of, whose content its voxels come from.

    A plain volume file is itself; a NIfTI pair's or Analyze header (``.hdr``) comes with its data file ``.img``; a
    MetaImage header (``.mhd``) with the data files its ``ElementDataFile`` names (``.raw``, ``.zraw``, a list or a
    numbered series of them); a DICOM series folder is its files (hidden files, such as a Finder's ``.DS_Store``, are
    no slice). A resume compares all of them: an edited data file beside an untouched header is an edited volume
    (found by hostile testing: ``evaluate`` kept the Dice of a label whose ``.raw`` was emptied, as its ``.mhd`` was
    unchanged).

    Args:
        path: the input (a file or a series folder).

    Returns:
        The files, the header (or the file itself) first; data files that do not exist are listed too.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "case.mhd").write_text("NDims = 3\nElementDataFile = case.raw\n")
        ...     [p.name for p in volume_files(Path(d) / "case.mhd")], [p.name for p in volume_files(Path(d) / "x.nii")]
        (['case.mhd', 'case.raw'], ['x.nii'])
    """
    path = Path(path)
    return _input_files(path) or [path]


def _input_files(path: Path) -> list[Path] | None:
    """The files of an input made of several (a series folder, a NIfTI pair, a MetaImage header and data), or None.

    A NIfTI pair is its ``.hdr`` and ``.img``; a MetaImage header its ``.mhd`` and the data files it names.

    A series folder's files are those :func:`~monai_unc.io.dicom.read_series` reads: hidden files (the ``.DS_Store``
    a Mac's Finder leaves in a folder it showed) are no slice, so one appearing after ``infer`` neither made
    ``dicom-export`` refuse the series as another one nor a resume predict the case again (found by the review of
    the series check).
    """
    if path.is_dir():
        return [f for f in sorted(path.iterdir()) if f.is_file() and not f.name.startswith(".")]
    if path.name.lower().endswith(PAIR_HEADER_EXTENSION):  # the data lie in the .img beside it (found by a review
        stem = path.name[: -len(PAIR_HEADER_EXTENSION)]  # of NIfTI pairs: an edited .img was not predicted again)
        return [path, *(f for f in (path.with_name(stem + e) for e in (".img", ".IMG")) if f.is_file())]
    if path.name.lower().endswith(".mhd"):  # found by hostile testing: an edited .raw beside its untouched header
        data = _metaimage_data_files(path)  # was taken for an unchanged input
        return [path, *data] if data else None
    return None


def _input_stat(path: Path) -> list[Any]:
    """What a resume compares first of an input (a file, a DICOM series folder, a NIfTI pair): size, mtime, ctime.

    The status-change time too (found by hostile testing): a scan edited in place with its size and modification time
    kept (an uncompressed NIfTI of the same shape always has the same size; ``touch -r``, ``os.utime`` and tools that
    keep times set the mtime back) passed as unchanged, and the resume kept the outputs of the earlier scan. Nothing
    sets the ctime back, so any write makes the sha256 decide.
    """
    files = _input_files(path)
    if files is not None:
        return [[f.name, *_size_times(f.stat())] for f in files]
    return _size_times(path.stat())


def _size_times(st: os.stat_result) -> list[int]:
    return [int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns)]


def _input_sha256(path: Path) -> str:
    """The sha256 of an input file, or of the file names and contents of a DICOM series folder or a NIfTI pair."""
    files = _input_files(path)
    if files is not None:
        inner = [[f.name, file_sha256(f)] for f in files]
        return hashlib.sha256(json.dumps(inner).encode()).hexdigest()
    return file_sha256(path)


def input_digests(channels: Sequence[str | os.PathLike]) -> list[dict[str, Any]]:
    """What a case record (``<case>.json``, ``input_digests``) holds of the inputs a case was predicted from.

    Per input channel (a file, a DICOM series folder, a NIfTI pair): its name, the names, sizes, modification and
    status-change times of its files, and its sha256 (of a folder or pair: of its files' names and contents).

    Args:
        channels: the case's input channels, in order.

    Returns:
        One ``{"file", "stat", "sha256"}`` per channel, for :func:`changed_inputs`.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     image = Path(d) / "case.nii.gz"
        ...     _ = image.write_bytes(b"voxels")
        ...     [sorted(entry) for entry in input_digests([image])]
        [['file', 'sha256', 'stat']]
    """
    return [{"file": Path(p).name, "stat": _input_stat(Path(p)), "sha256": _input_sha256(Path(p))} for p in channels]


def changed_inputs(channels: Sequence[str | os.PathLike], record: Mapping[str, Any]) -> list[str]:
    """The inputs of a case whose content differs from what its record says was predicted (:func:`input_digests`).

    An input whose files' names, sizes, modification and status-change times are the recorded ones is taken as
    unchanged; otherwise its sha256 decides, so a copy with the same content is unchanged (and so is the input of a
    record written before the status-change time was recorded). A record without ``input_digests`` (written
    before they existed) is not checked.

    Args:
        channels: the case's input channels, in order (one path each).
        record: the case record (its ``input_digests``).

    Returns:
        The name of each changed input, or a line on a different number of channels; empty when every input is the
        one predicted.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     image = Path(d) / "case.nii.gz"
        ...     _ = image.write_bytes(b"voxels")
        ...     record = {"input_digests": input_digests([image])}
        ...     before = changed_inputs([image], record)
        ...     _ = image.write_bytes(b"other voxels")
        ...     before, changed_inputs([image], record)
        ([], ['case.nii.gz'])
    """
    saved = record.get("input_digests")
    if not isinstance(saved, list):
        return []
    if len(saved) != len(channels):
        return [f"{len(channels)} input channel(s), predicted from {len(saved)}"]
    bad = []
    for p, want in zip(channels, saved):
        p = Path(p)
        if not isinstance(want, Mapping) or not p.exists():
            bad.append(p.name)
        elif json.loads(json.dumps(_input_stat(p))) != want.get("stat") and _input_sha256(p) != want.get("sha256"):
            bad.append(p.name)
    return bad


def output_digests(output: str | os.PathLike, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The size (bytes) and sha256 of each output file of a case, as its record keeps them (``file_digests``).

    Args:
        output: the output folder.
        names: the file names.

    Returns:
        ``{name: {"size": int, "sha256": hex}}``.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "a.nii.gz").write_bytes(b"abc")
        ...     output_digests(d, ["a.nii.gz"])["a.nii.gz"]["size"]
        3
    """
    output = Path(output)
    return {n: {"size": (output / n).stat().st_size, "sha256": file_sha256(output / n)} for n in names}


def changed_outputs(output: str | os.PathLike, record: Mapping[str, Any],
                    files: Sequence[Any] | None = None, digests_key: str = "file_digests") -> list[str]:
    """The files of a finished case's record that are missing or differ from what was written.

    A file differs when its size or sha256 is not the one the record keeps (``file_digests``; a record written before
    they were kept is checked for missing files only). The record is untrusted input (a user may edit it): a ``files``
    entry that is not a plain file name of the output folder (``../x``, ``sub/x``, an absolute path) and, in a record
    with ``file_digests``, a listed file without its digest entry count as changed, and so does every file of a record
    whose own digest (``record_digest``, :func:`record_digest`) no longer matches its text (its ``file_digests``
    edited, e.g. to match a replaced map) or is there but no digest (``null``, a number: edited; only a record
    without the field, written by an earlier version, is checked file by file). A plain file name is one
    :func:`~monai_unc.io.plain_file_name` accepts. ``monai-unc infer`` records list their files under ``files``;
    ``nnunet-predict`` records name their maps under ``maps`` and pass them as ``files``, and keep the digests of
    the segmentation and ``.npz`` of the folder above under ``prediction_file_digests`` (``digests_key``).

    Args:
        output: the output folder (the folder the names are in).
        record: the case's record (``<case>.json``).
        files: the names to check (None: the record's ``files``).
        digests_key: the record's field that holds the size and sha256 of the files (``{name: {"size", "sha256"}}``,
            as :func:`output_digests` gives them); a record without it is checked for missing files only.

    Returns:
        The names of the missing or changed files, with why (``"a.nii.gz (missing)"``).

    Raises:
        KeyError: ``files`` is None and the record has no ``files``.
        TypeError: the names checked are not a list, or the record holds a value that is not JSON data.
        ValueError: it holds NaN or an infinity (not strict JSON: its digest is undefined).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "a.nii.gz").write_bytes(b"abc")
        ...     record = {"files": ["a.nii.gz", "../b.nii.gz"], "file_digests": output_digests(d, ["a.nii.gz"])}
        ...     changed_outputs(d, record)
        ["files entry '../b.nii.gz' (not a file name of the output folder)"]
    """
    output = Path(output)
    if files is None:
        files = record["files"]
    if not isinstance(files, list):
        raise TypeError(f"the record's files must be a list, got {type(files).__name__}")
    if "record_digest" in record:  # a record written without it: an earlier version, checked file by file
        saved = record["record_digest"]
        # review 63: a digest set to null read as a record of an earlier version, so its edited file_digests were
        # trusted
        if not isinstance(saved, str):
            return [f"record (its record_digest is {json.dumps(saved, default=str)[:40]}, not a digest: edited)"]
        if saved != record_digest(record):
            return ["record (its text differs from the digest saved in it: edited)"]
    bad = []
    digests = record.get(digests_key)
    for name in files:
        # review 61: ``output / "/etc/passwd"`` is ``/etc/passwd`` and ``output / "../x"`` lies beside the folder; such
        # an entry was checked (and trusted) as a file of the case
        if not plain_file_name(name):
            bad.append(f"files entry {name!r} (not a file name of the output folder)")
            continue
        p = output / name
        if not p.is_file():
            bad.append(f"{name} (missing)")
            continue
        want = digests.get(name) if isinstance(digests, Mapping) else None
        if isinstance(digests, Mapping) and not isinstance(want, Mapping):  # review 61: an entry removed by hand
            bad.append(f"{name} (no digest recorded)")
        elif isinstance(want, Mapping):
            if p.stat().st_size != want.get("size"):
                bad.append(f"{name} (size {p.stat().st_size} bytes, written {want.get('size')})")
            elif file_sha256(p) != want.get("sha256"):
                bad.append(f"{name} (content changed)")
    return bad


def record_digest(record: Mapping[str, Any]) -> str:
    """The digest a case record (``<case>.json``) keeps of its own text, as ``record_digest``.

    The canonical JSON text of the record without that field (:func:`monai_unc._digest.content_digest`): a resume
    predicts a case again whose record was edited (e.g. its ``file_digests`` made to match a replaced map).

    Args:
        record: the case record.

    Returns:
        ``"sha256:"`` and 64 hex digits.

    Raises:
        ValueError: the record holds a value that is not JSON text (NaN, an infinity).
        TypeError: the record holds a value that is not JSON data.

    Example:
        >>> record = {"case": "c1", "files": ["c1_seg.nii.gz"]}
        >>> record_digest({**record, "record_digest": "x"}) == record_digest(record)
        True
    """
    return content_digest(record, ("record_digest",))
