"""Writing nnU-Net predictions with uncertainty: geometry, maps, case scores, next to nnU-Net's own outputs.

:class:`CaseUncertainty` is what :class:`~monai_unc.nnunet.predictor.UncertaintyPredictor` computes for one case
at network resolution (the stitched moments and the mean logits). This module brings it back to the geometry of
the input image and writes it, the way nnU-Net's ``export_prediction_from_logits`` writes a segmentation:

- **Geometry** (:func:`convert_uncertainty_to_original_geometry`): the moments are resampled with the
  configuration's ``resampling_fn_probabilities`` (linear by default: a convex combination, so MI >= 0 still
  holds), the crop is reverted (background probability 1 and every map 0 outside nnU-Net's non-zero bounding
  box) and the axes are transposed back; the maps are derived *after* resampling, from the resampled moments.
  The segmentation from the mean logits and its probabilities come from nnU-Net's own
  ``convert_predicted_logits_to_segmentation_with_correct_shape``, so they are stock nnU-Net's, exactly.
- **Files** (:func:`export_uncertainty`): ``<case><ending>`` segmentation and, with ``save_probabilities``,
  ``<case>.npz`` / ``<case>.pkl`` in nnU-Net's layout; ``uncertainty/<case>_<measure><ending>`` float32 maps in
  the dataset's own file format and geometry (:func:`write_float_map`); ``uncertainty/<case>.json`` the case
  record with the case scores (:func:`record_case_scores`); :func:`write_scores_table` collects the records into
  ``uncertainty_scores.csv``. Every file is written under a temporary name and renamed; the segmentation last.
- **Done or not** (:func:`case_exported`): a case is done when its segmentation, its record and every map
  the record names exist, and the maps, the segmentation, the ``.npz``, the files a reader/writer wrote beside them
  (``Tiff3DIO``'s spacing) and the record are as written (their digests; what ``--continue_prediction`` skips).

This module uses absolute imports only: nnU-Net imports the modules of the ``nnUNet_extTrainer`` folder as
top-level modules.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import torch
from acvl_utils.cropping_and_padding.bounding_boxes import insert_crop_into_image
from batchgenerators.utilities.file_and_folder_operations import save_pickle
from nnunetv2.configuration import default_num_processes
from nnunetv2.inference.export_prediction import convert_predicted_logits_to_segmentation_with_correct_shape
from nnunetv2.utilities.label_handling.label_handling import LabelManager
from nnunetv2.utilities.plans_handling.plans_handler import ConfigurationManager, PlansManager

from monai_unc import __version__
from monai_unc._deprecation import REMOVAL
from monai_unc._utils import argmax, label_map_dtype
from monai_unc.io import (
    LIBRARIES_KEY,
    VERSION_KEY,
    atomic_gzip,
    atomic_path,
    atomic_save_npz,
    atomic_write_files,
    atomic_write_json,
    changed_outputs,
    json_safe,
    library_versions,
    nnunet_dataset_regions,
    output_digests,
    output_lock,
    plain_file_name,
    private_folder,
    read_json_or_none,
    record_digest,
    save_nifti_image,
    write_csv,
)
from monai_unc.keys import DEFAULT_MEASURES, MIMeaning, UncertaintyKeys
from monai_unc.nnunet.names import MAP_MEASURES, STOCHASTIC_SOURCES
from monai_unc.scores import PATCH_SIZE, case_scores_core, region_suffixes
from monai_unc.stats import derive_measures, window_disagreement_from_stitched

__all__ = [
    "MAP_MEASURES",
    "DEFAULT_MEASURES",
    "MEAN_SQ",
    "WINDOW_ENTROPY",
    "UNCERTAINTY_FOLDER",
    "SCORES_CSV",
    "PATCH_SIZE",
    "CaseUncertainty",
    "region_definitions",
    "convert_uncertainty_to_original_geometry",
    "write_float_map",
    "write_region_maps",
    "record_case_scores",
    "case_scores",
    "region_case_scores",
    "export_uncertainty",
    "case_exported",
    "recorded_case_settings",
    "read_case_record",
    "remove_case_outputs",
    "sidecar_record_clashes",
    "write_scores_table",
]

K = UncertaintyKeys

#: zlib level of the float ``.nii.gz`` maps (:func:`write_float_map`; nibabel, which writes the 4D region maps,
#: uses 1 too)
MAP_COMPRESSLEVEL = 1
#: key of the mean squared probabilities in the moments (stitched only when ``variance`` is requested)
MEAN_SQ = "mean_sq"
#: key of the stitched per-window predictive entropies ``blend_w H(m_w)`` in the moments (with
#: ``window_disagreement="separate"``); the window disagreement is ``H(pred) - window_entropy``
WINDOW_ENTROPY = "window_entropy"
#: folder (inside the output folder) that receives the maps and the case records
UNCERTAINTY_FOLDER = "uncertainty"
#: per-case score table written next to the segmentations
SCORES_CSV = "uncertainty_scores.csv"


@dataclass
class CaseUncertainty:
    """Stitched statistics of one case at the resolution of the network (nnU-Net's preprocessed geometry).

    The window disagreement ``WD = H(pred) - window_entropy`` is derived from the stitched per-window predictive
    entropies (:mod:`monai_unc.inferers.sampling`); every map follows from the moments
    (:func:`monai_unc.stats.derive_measures`).

    Args:
        moments: float32 arrays or tensors: ``pred`` ``(C, *spatial)`` mean probabilities, ``expected_entropy`` mean
            entropy (nats; ``(1, *spatial)``, or ``(R, *spatial)`` per-region binary entropies for a region-based
            model), with ``variance`` requested ``mean_sq`` ``(C, *spatial)``, and with
            ``window_disagreement="separate"`` ``window_entropy`` (shape of ``expected_entropy``).
        logits: the mean logits ``(C, *spatial)`` as stock nnU-Net computes them (fp16), or ``None``.
        num_samples: probability samples per voxel.
        sources: the uncertainty sources that were sampled.
        extras: side information (the mean searched Rate-In rate per layer).
        multilabel: region-based model (sigmoid per region, ``C = R`` regions, every measure per region).

    Example:
        >>> pred = torch.full((2, 2, 2, 2), 0.5)
        >>> result = CaseUncertainty({"pred": pred, "expected_entropy": torch.full((1, 2, 2, 2), 0.5)}, None, 4)
        >>> maps = result.measures(["predictive_entropy", "mutual_information"])
        >>> round(float(maps["predictive_entropy"].max()), 4), round(float(maps["mutual_information"].max()), 4)
        (0.6931, 0.1931)
    """

    moments: dict[str, Any]
    logits: Any | None
    num_samples: int
    sources: tuple[str, ...] = field(default_factory=tuple)
    extras: dict[str, Any] = field(default_factory=dict)
    multilabel: bool = False

    def to_numpy(self) -> CaseUncertainty:
        """CPU NumPy copy (what crosses process boundaries; nnU-Net does the same with its logits).

        Returns:
            A new :class:`CaseUncertainty` whose tensors are NumPy arrays (other values as they are).
        """

        def np_(x: Any) -> Any:
            return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x

        return CaseUncertainty({k: np_(v) for k, v in self.moments.items()}, np_(self.logits), self.num_samples,
                               self.sources, dict(self.extras), self.multilabel)

    def measures(self, keys: Iterable[str] = DEFAULT_MEASURES, normalize: bool = False) -> dict[str, torch.Tensor]:
        """Maps derived from the moments at network resolution (no resampling).

        Args:
            keys: the measures to derive (names of :data:`~monai_unc.nnunet.names.MAP_MEASURES`).
            normalize: divide the entropies by ``log C`` (``log 2`` per region).

        Returns:
            ``{measure: map}``, each ``(1, *spatial)``, or ``(R, *spatial)`` for a region-based model.

        Raises:
            ValueError: ``window_disagreement`` asked for without ``window_entropy`` in the moments.
        """
        mom = {k: torch.as_tensor(v)[None] for k, v in self.moments.items()}
        return {k: v[0] for k, v in _derive(mom, keys, self.multilabel, normalize).items()}


def _derive(moments: dict[str, torch.Tensor], keys: Iterable[str], multilabel: bool,
            normalize: bool = False) -> dict[str, torch.Tensor]:
    """:func:`~monai_unc.stats.derive_measures` of batched moments ``(1, k, *spatial)``.

    ``window_entropy`` (when present) becomes the window disagreement ``H(pred) - window_entropy``
    (:func:`~monai_unc.stats.window_disagreement_from_stitched`), so that MI = PE - EE - WD.
    """
    mom = dict(moments)
    keys = [K(k).value for k in keys]
    we = mom.pop(WINDOW_ENTROPY, None)
    if we is not None:
        mom[K.WINDOW_DISAGREEMENT.value] = window_disagreement_from_stitched(mom[K.PRED.value], we, multilabel)
    elif K.WINDOW_DISAGREEMENT.value in keys:
        raise ValueError("window_disagreement is only available with window_disagreement='separate'")
    return derive_measures(mom, keys, normalize=normalize, multilabel=multilabel)


def region_definitions(dataset_json: dict) -> dict[str, list[int]]:
    """The regions of a region-based nnU-Net ``dataset.json`` in channel order.

    The entries of ``"labels"`` other than background and ``ignore``, in their order, as nnU-Net's
    ``LabelManager`` orders its output channels (:func:`monai_unc.io.nnunet_dataset_regions`, which also reads the
    ``dataset.json`` beside stock nnU-Net predictions).

    Args:
        dataset_json: the dataset's ``dataset.json`` as a dict.

    Returns:
        ``{name: [labels]}``; ``{}`` for a label-based dataset.

    Example:
        >>> region_definitions({"labels": {"background": 0, "whole": [1, 2, 3], "core": [2, 3], "enhancing": 3}})
        {'whole': [1, 2, 3], 'core': [2, 3], 'enhancing': [3]}
        >>> region_definitions({"labels": {"background": 0, "tumour": 1}})
        {}
    """
    return nnunet_dataset_regions(dataset_json)


# ------------------------------------------------------------------------------------------ geometry
def _resampled_moments(
    result: CaseUncertainty,
    plans_manager: PlansManager,
    configuration_manager: ConfigurationManager,
    properties: dict,
) -> dict[str, np.ndarray]:
    """The moments resampled to the cropped original shape (network axis order), as nnU-Net resamples probabilities.

    The same resampling as ``export_prediction.convert_predicted_logits_to_segmentation_with_correct_shape``.
    """
    spacing_transposed = [properties["spacing"][i] for i in plans_manager.transpose_forward]
    shape = properties["shape_after_cropping_and_before_resampling"]
    current_spacing = (
        configuration_manager.spacing
        if len(configuration_manager.spacing) == len(shape)
        else [spacing_transposed[0], *configuration_manager.spacing]
    )
    mom = result.moments
    multilabel = bool(result.multilabel)
    n_classes = mom[K.PRED.value].shape[0]
    n_ee = mom[K.EXPECTED_ENTROPY.value].shape[0]
    keys = [K.PRED.value, K.EXPECTED_ENTROPY.value] + [k for k in (MEAN_SQ, WINDOW_ENTROPY) if k in mom]
    stacked = np.asarray(configuration_manager.resampling_fn_probabilities(
        np.concatenate([np.asarray(mom[k], dtype=np.float32) for k in keys], axis=0), shape, current_spacing,
        spacing_transposed))
    # an interpolating (order > 1) resampling may overshoot: keep the moments valid
    h_max = np.log(2.0 if multilabel else n_classes)
    out: dict[str, np.ndarray] = {}
    start = 0
    for k in keys:
        n = n_classes if k in (K.PRED.value, MEAN_SQ) else n_ee
        part = stacked[start:start + n]
        start += n
        if k == K.PRED.value:
            part = np.clip(part, 0.0, 1.0)
            if not multilabel:
                part /= np.maximum(part.sum(0, keepdims=True), np.finfo(np.float32).tiny)
        else:
            part = np.clip(part, 0.0, 1.0 if k == MEAN_SQ else h_max)
        out[k] = part
    return out


def _revert_crop(arr: np.ndarray, properties: dict, fill: float = 0.0) -> np.ndarray:
    """Put ``(k, *cropped)`` back into ``(k, *shape_before_cropping)`` filled with ``fill`` outside the bbox."""
    full = np.full((arr.shape[0], *properties["shape_before_cropping"]), fill, dtype=arr.dtype)
    return insert_crop_into_image(full, arr, properties["bbox_used_for_cropping"])


def convert_uncertainty_to_original_geometry(
    result: CaseUncertainty,
    plans_manager: PlansManager,
    configuration_manager: ConfigurationManager,
    label_manager: LabelManager,
    properties: dict,
    measures: Sequence[str] = DEFAULT_MEASURES,
    segmentation_from: str = "logits",
    num_threads_torch: int = default_num_processes,
    return_probabilities: bool = True,
) -> dict[str, Any]:
    """Segmentation, probabilities and uncertainty maps in the original image geometry.

    Segmentation and probabilities:

    - ``segmentation_from="logits"``: stock nnU-Net's, from the mean logits through nnU-Net's
      ``convert_predicted_logits_to_segmentation_with_correct_shape`` (resample the logits, softmax, argmax; with
      ``return_probabilities=False`` the argmax of the logits, nnU-Net's path without probabilities).
      ``probabilities`` is the softmax of the resampled mean logits: what ``nnUNetv2_predict
      --save_probabilities`` writes, and its argmax is the segmentation.
    - ``segmentation_from="probabilities"``: the argmax of the mean probabilities, and ``probabilities`` are
      those mean probabilities.

    ``mean_probabilities`` is always the mean over the samples (the predictive distribution the maps are
    derived from). Probabilities are ``(C, *shape)`` float32 with background 1 outside the crop.

    Region-based models (``result.multilabel``; nnU-Net's ``LabelManager.has_regions``): the probabilities are the
    per-region sigmoid probabilities ``(R, *shape)`` (0 outside the crop), exactly what stock ``--save_probabilities``
    writes for such a model; the segmentation is built from them as stock nnU-Net builds it (each region's voxels
    with probability > 0.5 get that region's entry of ``regions_class_order``, in order), so its "argmax" is that
    conversion, not an argmax; every map is per region, ``(R, *shape)``.

    Args:
        result: the case's statistics at network resolution.
        plans_manager: the model's plans (axis order).
        configuration_manager: the configuration (spacing, resampling functions).
        label_manager: the model's labels (regions or classes).
        properties: the case's properties from nnU-Net's preprocessing (crop box, shapes, spacing).
        measures: the maps to derive.
        segmentation_from: ``"logits"`` or ``"probabilities"`` (above).
        num_threads_torch: torch threads during resampling.
        return_probabilities: also return the probabilities (above).

    Returns:
        ``{"segmentation": (*shape) uint8/uint16, "maps": {measure: (*shape) float32}, "num_samples": int}``
        (maps ``(R, *shape)`` for a region-based model) plus, with ``return_probabilities``, ``"probabilities"`` and
        ``"mean_probabilities"``.
    """
    if segmentation_from not in ("logits", "probabilities"):
        raise ValueError(f"segmentation_from must be 'logits' or 'probabilities', got {segmentation_from!r}")
    if segmentation_from == "logits" and result.logits is None:
        raise ValueError("segmentation_from='logits' but the result holds no logits")
    if bool(result.multilabel) != bool(label_manager.has_regions):
        raise ValueError(f"result.multilabel={result.multilabel} but the label manager's has_regions="
                         f"{label_manager.has_regions}: the statistics do not belong to this model")
    multilabel = bool(result.multilabel)
    axes = [0] + [i + 1 for i in plans_manager.transpose_backward]
    out: dict[str, Any] = {"num_samples": int(result.num_samples)}
    if segmentation_from == "logits":
        stock = convert_predicted_logits_to_segmentation_with_correct_shape(
            result.logits, plans_manager, configuration_manager, label_manager, properties,
            return_probabilities=return_probabilities, num_threads_torch=num_threads_torch)
        if return_probabilities:
            out["segmentation"], out["probabilities"] = stock[0], np.asarray(stock[1], dtype=np.float32)
        else:
            out["segmentation"] = stock
    old_threads = torch.get_num_threads()
    torch.set_num_threads(num_threads_torch)
    try:
        moments = _resampled_moments(result, plans_manager, configuration_manager, properties)
        maps_t = _derive({k: torch.from_numpy(v)[None] for k, v in moments.items()}, measures, multilabel)
        maps = {k: _revert_crop(v[0].numpy().astype(np.float32), properties).transpose(axes)
                for k, v in maps_t.items()}
        out["maps"] = maps if multilabel else {k: v[0] for k, v in maps.items()}
        if segmentation_from == "probabilities":
            if multilabel:
                seg = np.asarray(label_manager.convert_probabilities_to_segmentation(moments[K.PRED.value]))
            else:
                seg = argmax(moments[K.PRED.value], 0)
            # nnU-Net's writers store uint8 or uint16: a larger label is refused, not wrapped
            seg_dtype = label_map_dtype(int(seg.max()) if seg.size else 0, "the segmentation", widest=np.uint16)
            out["segmentation"] = _revert_crop(seg.astype(seg_dtype)[None], properties)[0].transpose(
                plans_manager.transpose_backward)
        if return_probabilities:
            mean_p = label_manager.revert_cropping_on_probabilities(
                moments[K.PRED.value], properties["bbox_used_for_cropping"], properties["shape_before_cropping"])
            out["mean_probabilities"] = np.asarray(mean_p, dtype=np.float32).transpose(axes)
            if segmentation_from == "probabilities":
                out["probabilities"] = out["mean_probabilities"]
        return out
    finally:
        torch.set_num_threads(old_threads)


# ------------------------------------------------------------------------------------------ files
class _FloatMap(np.ndarray):
    """ndarray whose ``astype`` to an integer dtype keeps float32.

    nnU-Net's reader/writers implement the geometry of every supported format in ``write_seg`` (spacing, origin,
    direction, reorientation for the ``WithReorient`` variants) and cast to uint8/uint16 on the way. Passing a map
    as this subclass reuses that geometry code unchanged for float maps instead of re-implementing five writers.
    """

    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> np.ndarray:  # type: ignore[override]
        if np.issubdtype(np.dtype(dtype), np.integer):
            dtype = np.float32
        return np.asarray(self).astype(dtype, *args, **kwargs)


def _ending(name: str) -> str:
    """The file ending nnU-Net would use for ``name`` (``.nii.gz`` or the last suffix)."""
    for ending in (".nii.gz", ".seg.nrrd"):
        if name.endswith(ending):
            return ending
    return Path(name).suffix


def _write_with_reader_writer(reader_writer: Any, data: np.ndarray, out: Path, properties: dict,
                              sidecars: list[str] | None = None, then: Callable[[Path], Any] | None = None) -> Path:
    """``reader_writer.write_seg(data, out, properties)`` under the final file name, sidecars included.

    Tiff3DIO writes the spacing into a ``<name>.json`` sidecar next to the ``.tif``; written under a temporary name,
    that sidecar kept the temporary name (the image then read back with spacing 1).
    :func:`~monai_unc.io.atomic_write_files` writes under the final name in a private folder and renames the
    sidecars, then the image, into place.

    Args:
        reader_writer: the dataset's nnU-Net image reader/writer.
        data: the array ``write_seg`` receives.
        out: the file to write.
        properties: the image properties the reader/writer returned for the case.
        sidecars: when given, the names of the files the reader/writer wrote beside ``out`` are appended to it.
        then: called with the file written in the private folder (its sidecars beside it, under their final names)
            before anything is renamed into place: :func:`export_uncertainty` records the segmentation's digests in
            the case record there, and the segmentation still comes last.

    Returns:
        ``out``.
    """
    def write(tmp: Path) -> None:
        reader_writer.write_seg(data, str(tmp), properties)
        if sidecars is not None:
            sidecars.extend(sorted(f.name for f in tmp.parent.iterdir() if f.name != tmp.name))
        if then is not None:
            then(tmp)

    return atomic_write_files(out, write)


def write_float_map(reader_writer: Any, data: np.ndarray, output_fname: str | os.PathLike, properties: dict, *,
                    sidecars: list[str] | None = None) -> Path:
    """Write a float map with the geometry ``reader_writer.write_seg`` gives segmentations (atomic rename).

    2D natural-image formats (png, bmp, ...) cannot hold floats: the map goes to ``<name>.npz`` (key ``map``)
    instead, and that path is returned. ``.nii.gz`` maps are gzipped at a fast level (float maps shrink little),
    from the ``.nii`` the reader/writer writes in a private folder beside the map (``.<name>.nii.partial.dir``,
    :func:`monai_unc.io.private_folder`: removed by the next write of the map when a killed run left it).

    Args:
        reader_writer: the dataset's nnU-Net image reader/writer (e.g. ``SimpleITKIO``, ``NibabelIO``).
        data: the map ``(*shape)`` in nnU-Net's array axis order of the original image; written as float32.
        output_fname: the file to write, with the dataset's file ending.
        properties: the image properties the reader/writer returned for the case.
        sidecars: when given, the names of the files the reader/writer wrote beside the map are appended to it
            (``Tiff3DIO``: ``<name>.json``, the spacing), for the case record's digests.

    Returns:
        The path written.

    Example:
        >>> import tempfile
        >>> from nnunetv2.imageio.nibabel_reader_writer import NibabelIO
        >>> from monai_unc.io import save_nifti
        >>> with tempfile.TemporaryDirectory() as d:
        ...     image = save_nifti(np.zeros((4, 5, 6)), np.diag([2.0, 2.0, 2.0, 1.0]), Path(d) / "case_0000.nii.gz")
        ...     _, properties = NibabelIO().read_images([str(image)])
        ...     out = write_float_map(NibabelIO(), np.full((6, 5, 4), 0.25), Path(d) / "case_pe.nii.gz", properties)
        ...     nib.load(out).shape, float(nib.load(out).get_fdata().max())
        ((4, 5, 6), 0.25)
    """
    out = Path(output_fname)
    arr = np.ascontiguousarray(np.asarray(data, dtype=np.float32))
    if type(reader_writer).__name__ == "NaturalImage2DIO":
        # only the file ending goes: case identifiers may hold dots (``case.v1``)
        stem = out.name[: -len(_ending(out.name))] if _ending(out.name) else out.name
        return atomic_save_npz(out.with_name(stem + ".npz"), {"map": arr}, compressed=True)
    if _ending(out.name) == ".nii.gz":
        # the reader/writer writes the uncompressed .nii (the same header and voxels it would compress), gzipped at
        # MAP_COMPRESSLEVEL: a float map shrinks by under 20 % at any level, and SimpleITK's default level made the
        # write ~15 % slower (docs/nnunet.md, "What each map costs"). The .nii goes to a private folder beside the
        # map (.<name>.nii.partial.dir, its name fixed per map: no listing of a folder of thousands of maps), which
        # the next write of the map removes when a killed run left it (found by review 75: a killed export's hidden
        # .map_* folders of uncompressed maps stayed in -o for good)
        out.parent.mkdir(parents=True, exist_ok=True)
        with private_folder(out.with_name(out.name + ".nii")) as tmpdir:
            nii = tmpdir / f"{out.name[: -len('.gz')]}"
            reader_writer.write_seg(arr.view(_FloatMap), str(nii), properties)
            return atomic_gzip(nii, out, compresslevel=MAP_COMPRESSLEVEL)
    return _write_with_reader_writer(reader_writer, arr.view(_FloatMap), out, properties, sidecars)


def check_region_file_names(region_names: Iterable[str]) -> None:
    """Refuse region names that cannot be part of a file name (formats without 4D images write one file per region).

    The names come from ``dataset.json`` (``labels``), a file users edit; each becomes part of the map file
    ``<case>_<measure>_<region><ending>``. A name holding a path separator failed only at the first case's export,
    after its prediction, with pathlib's ``Invalid name`` that names neither the region nor ``dataset.json``.

    Args:
        region_names: the region names (the keys of :func:`region_definitions`).

    Raises:
        ValueError: a name holds a path separator (a slash or a backslash) or a NUL character.

    Example:
        >>> check_region_file_names(["whole tumor", "TC", "ET"])
        >>> check_region_file_names(["TC/ET"])
        Traceback (most recent call last):
            ...
        ValueError: dataset.json labels: region name 'TC/ET' cannot be part of a file name ...
    """
    for name in region_names:
        text = str(name)
        if any(c in text for c in ("/", "\\", "\0")):
            raise ValueError(f"dataset.json labels: region name {text!r} cannot be part of a file name (it names the "
                             "region's map files in formats without 4D images); rename the region")


def write_region_maps(reader_writer: Any, data: np.ndarray, output_fname: str | os.PathLike, properties: dict,
                      region_names: Sequence[str], *, sidecars: list[str] | None = None) -> list[Path]:
    """Write per-region maps ``(R, *shape)`` of one measure with the geometry of :func:`write_float_map`.

    NIfTI (``.nii.gz`` / ``.nii``): one 4D file ``(X, Y, Z, R)``, the regions along the fourth axis in the model's
    channel order. Each region is first written by the dataset's ``reader_writer`` (its geometry code, any
    reorientation included) to a temporary 3D file and read back with nibabel, so the 4D file has exactly the
    voxel order, affine and header of the 3D maps (with spacing 1 along the region axis: ``pixdim[4] = 1``); the 3D
    files lie in a private folder beside the map (``.<name>.regions.partial.dir``,
    :func:`monai_unc.io.private_folder`), which the next write of the map removes when a killed run left it. Other
    formats hold no 4D image, and the regions of a 2D image (a 2D NIfTI, which its reader/writer writes as a 2D
    file) would become its z axis: one file per region, ``<case>_<measure>_<region><ending>``, each with the
    image's own shape and geometry.

    Args:
        reader_writer: the dataset's nnU-Net image reader/writer.
        data: ``(R, *shape)``, one map per region in channel order; written as float32.
        output_fname: the (4D) file to write, with the dataset's file ending.
        properties: the image properties the reader/writer returned for the case.
        region_names: the ``R`` region names, in channel order.
        sidecars: when given, the names of the files the reader/writer wrote beside the maps are appended to it
            (:func:`write_float_map`).

    Returns:
        The paths written (one 4D NIfTI, or one file per region).

    Raises:
        ValueError: ``data`` is not ``(R, *shape)`` with ``R = len(region_names)``, or (one file per region) a region
            name holds a path separator (:func:`check_region_file_names`).

    Example:
        >>> import tempfile
        >>> from nnunetv2.imageio.nibabel_reader_writer import NibabelIO
        >>> from monai_unc.io import save_nifti
        >>> with tempfile.TemporaryDirectory() as d:
        ...     image = save_nifti(np.zeros((4, 5, 6)), np.eye(4), Path(d) / "case_0000.nii.gz")
        ...     _, properties = NibabelIO().read_images([str(image)])
        ...     out = write_region_maps(NibabelIO(), np.zeros((3, 6, 5, 4)), Path(d) / "case_entropy.nii.gz",
        ...                             properties, ["WT", "TC", "ET"])
        ...     [nib.load(p).shape for p in out]
        [(4, 5, 6, 3)]
    """
    arr = np.asarray(data, dtype=np.float32)
    if arr.ndim < 3 or arr.shape[0] != len(region_names):
        raise ValueError(f"data must be (R, *shape) with R = {len(region_names)} regions, got shape {arr.shape}")
    out = Path(output_fname)
    ending = _ending(out.name)
    stem = out.name[: -len(ending)] if ending else out.name
    if ending not in (".nii.gz", ".nii") or arr.ndim != 4:
        check_region_file_names(region_names)
        return [write_float_map(reader_writer, arr[r], out.with_name(f"{stem}_{name}{ending}"), properties,
                                sidecars=sidecars) for r, name in enumerate(region_names)]
    out.parent.mkdir(parents=True, exist_ok=True)
    # the 3D files in a private folder beside the map (.<name>.regions.partial.dir), which the next write of the map
    # removes when a killed run left it (review 75)
    with private_folder(out.with_name(out.name + ".regions")) as tmpdir:
        volumes, ref = [], None
        for r in range(arr.shape[0]):
            f = tmpdir / f"r{r}.nii"
            reader_writer.write_seg(np.ascontiguousarray(arr[r]).view(_FloatMap), str(f), properties)
            img = nib.load(str(f))
            if img.ndim != 3:
                break
            volumes.append(np.asarray(img.get_fdata(dtype=np.float32)))
            ref = img if ref is None else ref
        if ref is not None and len(volumes) == arr.shape[0]:
            header = ref.header.copy()
            header.set_data_dtype(np.float32)
            img4 = nib.Nifti1Image(np.stack(volumes, axis=-1), ref.affine, header)
            img4.header.set_sform(ref.header.get_sform(), int(ref.header["sform_code"]))
            img4.header.set_qform(ref.header.get_qform(), int(ref.header["qform_code"]))
            # the region axis is no physical axis: spacing 1 (pixdim[4]), as nnU-Net's SimpleITK reader assumes; the
            # 3D header would leave the 0 that SimpleITK writes there
            img4.header.set_zooms((*ref.header.get_zooms()[:3], 1.0))
            save_nifti_image(img4, out)
            return [out]
    # a 2D image: the reader/writer writes its maps as 2D files (SimpleITK, for a 2D NIfTI input), which stacked
    # along the last axis made the regions the z axis of one 3D volume (found by review 61: the (X, Y) maps of 2
    # regions were written as one (X, Y, 2) volume of spacing 1 along z). One file per region instead, each with
    # the image's own shape and geometry, as formats without 4D images
    check_region_file_names(region_names)
    return [write_float_map(reader_writer, arr[r], out.with_name(f"{stem}_{name}{ending}"), properties,
                            sidecars=sidecars) for r, name in enumerate(region_names)]


def record_case_scores(maps: dict[str, np.ndarray], segmentation: np.ndarray, patch_size: int = PATCH_SIZE,
                       regions: dict[str, Sequence[int]] | None = None) -> dict:
    """The case scores of a case record (ValUES Sec. 4.3), for a class model and for a region-based one.

    Every score is :func:`monai_unc.scores.case_scores`, the definitions ``monai-unc evaluate`` uses: ``mean`` over
    the whole image, ``fg_mean`` over the predicted foreground (NaN when it is empty, recorded as null without a
    warning: :func:`monai_unc.scores.case_scores_core`), ``patch_mean`` the largest *mean* over a box of
    ``patch_size`` voxels per axis. The foreground of a class model
    is ``segmentation > 0``; a region-based model has one binary task per region (:mod:`monai_unc.activation`): the
    map's channel ``r`` scored with that region's predicted mask ``isin(segmentation, labels of the region)`` (the
    region as it is evaluated from a label map).

    Args:
        maps: ``{measure: map}``, a map ``(*shape)`` (classes) or ``(R, *shape)`` (one channel per region).
        segmentation: the predicted label map ``(*shape)``.
        patch_size: box size in voxels of ``patch_mean``.
        regions: ``{region: [labels]}`` of a region-based model in channel order, or None.

    Returns:
        ``{measure: {"<score>": v}}`` (classes) or ``{measure: {"<score>_<R>": v}}`` (regions, ``R`` the region's
        column suffix :func:`monai_unc.scores.region_suffix`, as in ``metrics.csv`` of ``monai-unc evaluate``: ``whole
        tumor`` -> ``whole_tumor``), flattened to ``<measure>_<score>[_<R>]`` columns in the table.

    Raises:
        ValueError: a region name without a letter or digit, or two region names with the same suffix.

    Example:
        >>> seg = np.zeros((4, 4, 4), np.int64); seg[:2] = 1
        >>> pe = np.where(seg > 0, 0.5, 0.0).astype(np.float32)
        >>> record_case_scores({"predictive_entropy": pe}, seg, patch_size=2)
        {'predictive_entropy': {'mean': 0.25, 'fg_mean': 0.5, 'patch_mean': 0.5}}
        >>> scores = record_case_scores({"predictive_entropy": np.stack([pe, 0 * pe])}, seg, patch_size=2,
        ...                             regions={"WT": [1], "TC": [2]})
        >>> scores["predictive_entropy"]["fg_mean_WT"], scores["predictive_entropy"]["fg_mean_TC"]  # TC is empty
        (0.5, nan)
    """
    seg = np.asarray(segmentation)
    if regions:
        # the region's column suffix as in evaluate's metrics.csv (found by hostile testing: nnU-Net's BraTS region
        # "whole tumor" gave the column "<m>_fg_mean_whole tumor" here but "<m>_fg_mean_whole_tumor" there)
        tasks = [(f"_{suffix}", r, np.isin(seg, list(labels)).astype(np.uint8))
                 for r, (suffix, labels) in enumerate(zip(region_suffixes(regions), regions.values()))]
    else:
        tasks = [("", None, segmentation)]
    out: dict[str, dict[str, float]] = {}
    for key, m in maps.items():
        out[key] = {}
        for suffix, r, foreground in tasks:
            # an empty prediction: fg_mean NaN, recorded as null without a word, by the scores' core (in earlier
            # versions every UserWarning was ignored here inside warnings.catch_warnings(), a process-wide filter)
            scores = case_scores_core(m if r is None else m[r], foreground, patch_size)
            out[key].update({f"{k}{suffix}": v for k, v in scores.items()})
    return out


def case_scores(maps: dict[str, np.ndarray], segmentation: np.ndarray, patch_size: int = PATCH_SIZE) -> dict:
    """Deprecated alias of :func:`record_case_scores` for a class model (removed in the next release).

    Args:
        maps: ``{measure: map (*shape)}``.
        segmentation: the predicted label map ``(*shape)``.
        patch_size: box size in voxels of ``patch_mean``.

    Returns:
        ``{measure: {"mean", "fg_mean", "patch_mean"}}``.
    """
    _warn_renamed("case_scores", "record_case_scores(maps, segmentation, patch_size)")
    return record_case_scores(maps, segmentation, patch_size)


def region_case_scores(maps: dict[str, np.ndarray], segmentation: np.ndarray, regions: dict[str, Sequence[int]],
                       patch_size: int = PATCH_SIZE) -> dict:
    """Deprecated alias of :func:`record_case_scores` with ``regions`` (removed in the next release).

    Args:
        maps: ``{measure: map (R, *shape)}``.
        segmentation: the predicted label map ``(*shape)``.
        regions: ``{region: [labels]}`` in channel order.
        patch_size: box size in voxels of ``patch_mean``.

    Returns:
        ``{measure: {"<score>_<region>": v}}``.
    """
    _warn_renamed("region_case_scores", "record_case_scores(maps, segmentation, patch_size, regions=regions)")
    return record_case_scores(maps, segmentation, patch_size, regions=regions)


def _warn_renamed(old: str, new: str) -> None:
    warnings.warn(f"monai_unc.nnunet.{old} is deprecated, use {new} (the old name will be removed in {REMOVAL})",
                  DeprecationWarning, stacklevel=3)


def _map_names(maps: dict[str, Any]) -> list[str]:
    """The file names of a record's ``maps`` (a name, or a list of names per measure), in order, each once."""
    names = (n for e in maps.values() for n in ([e] if isinstance(e, str) else e if isinstance(e, list) else []))
    return list(dict.fromkeys(n for n in names if isinstance(n, str)))


def _sidecar_names(record: dict) -> list[str]:
    """The files of a record's ``file_digests`` that are not its maps: those the reader/writer wrote beside them."""
    digests, maps = record.get("file_digests"), record.get("maps")
    if not isinstance(digests, dict):
        return []
    names = set(_map_names(maps)) if isinstance(maps, dict) else set()
    return [n for n in digests if n not in names]


def _prediction_names(record: dict, case: str, file_ending: str, save_probabilities: bool) -> list[str]:
    """The files of the output folder a resume checks for a record with ``prediction_file_digests``.

    The segmentation and the files its reader/writer wrote beside it (the record's other entries), and with
    ``save_probabilities`` ``<case>.npz`` and ``<case>.pkl``; the ``.npz`` and ``.pkl`` of a run without it are not
    read.
    """
    digests = record.get("prediction_file_digests")
    own = [f"{case}{file_ending}", *([f"{case}.npz", f"{case}.pkl"] if save_probabilities else [])]
    probabilities = (f"{case}.npz", f"{case}.pkl")
    others = [n for n in digests if n not in own and n not in probabilities] if isinstance(digests, dict) else []
    return own + others


def sidecar_record_clashes(case_ids: Iterable[str], measures: Iterable[str],
                           region_names: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Pairs of cases whose map's spacing file would be the other case's record (nnU-Net's ``Tiff3DIO``).

    ``Tiff3DIO`` writes each map ``uncertainty/<case>_<measure>.tif`` with its spacing in
    ``uncertainty/<case>_<measure>.json``, the very name of the record of a case called ``<case>_<measure>``
    (``uncertainty/<case>.json``): predicting both in one folder overwrites one with the other.

    Args:
        case_ids: the cases of one output folder (this run's and those recorded there).
        measures: the map measures written.
        region_names: a region-based model's region names (maps written ``<case>_<measure>_<region>``).

    Returns:
        ``(case, other)`` for each case whose map's spacing file is ``other``'s record, sorted.

    Example:
        >>> sidecar_record_clashes(["a", "a_entropy", "b"], ["entropy", "variance"])
        [('a', 'a_entropy')]
    """
    ids = {str(c) for c in case_ids}
    stems = [str(m) for m in measures]
    stems += [f"{m}_{r}" for m in list(stems) for r in region_names]
    return sorted((c, f"{c}_{s}") for c in ids for s in stems if f"{c}_{s}" in ids)


def _record_path(output_file_truncated: str | os.PathLike) -> Path:
    base = Path(output_file_truncated)
    return base.parent / UNCERTAINTY_FOLDER / f"{base.name}.json"


def export_uncertainty(
    result: CaseUncertainty,
    properties: dict,
    configuration_manager: ConfigurationManager,
    plans_manager: PlansManager,
    dataset_json: dict,
    output_file_truncated: str,
    save_probabilities: bool = False,
    measures: Sequence[str] = DEFAULT_MEASURES,
    segmentation_from: str = "logits",
    mi_meaning: str = MIMeaning.EPISTEMIC.value,
    num_threads_torch: int = default_num_processes,
    patch_size: int = PATCH_SIZE,
    settings: dict | None = None,
    prev_stage_digests: list | None = None,
) -> dict:
    """Write one case like ``export_prediction_from_logits`` plus the uncertainty maps and the case record.

    Files: ``<case><ending>`` segmentation; with ``save_probabilities`` ``<case>.npz`` (key ``probabilities``,
    float32 ``(C, *shape)``: the probabilities whose argmax is the segmentation, see
    :func:`convert_uncertainty_to_original_geometry`) and ``<case>.pkl`` (properties) as nnU-Net writes them;
    ``uncertainty/<case>_<measure><ending>`` float32 maps (region-based models: 4D ``(X, Y, Z, R)``, see
    :func:`write_region_maps`; the record then holds ``regions`` and per-region scores, :func:`record_case_scores`);
    ``uncertainty/<case>.json`` the record, with the size and sha256 of each map and of the files its reader/writer
    wrote beside it (``file_digests``: ``Tiff3DIO``'s ``<name>.json`` spacing), of the segmentation (and its
    sidecars), ``<case>.npz`` and ``<case>.pkl`` (``prediction_file_digests``, names in the output folder) and the
    digest of its own text (``record_digest``), what :func:`case_exported` checks on resume. The segmentation is
    written last: the record is written while the segmentation is complete under its final name in a private
    folder (:func:`~monai_unc.io.atomic_write_files`), before it is renamed into place.
    Before anything is written, the case's outputs of an earlier run into the same folder are removed
    (:func:`remove_case_outputs`), so that none this run does not write (the map of a measure not asked for now, an
    ``.npz`` without ``save_probabilities``) survives.

    Args:
        result: the case's statistics at network resolution.
        properties: the case's properties from nnU-Net's preprocessing.
        configuration_manager: the model's configuration.
        plans_manager: the model's plans.
        dataset_json: the model's ``dataset.json`` (file ending, labels, regions).
        output_file_truncated: the output path without ending (``<folder>/<case>``).
        save_probabilities: also write ``<case>.npz`` and ``<case>.pkl``.
        measures: the maps to write.
        segmentation_from: ``"logits"`` or ``"probabilities"`` (:func:`convert_uncertainty_to_original_geometry`).
        mi_meaning: what the mutual information measures, recorded (``"epistemic"``, ``"aleatoric"``, ``"mixed"``).
        num_threads_torch: torch threads during resampling.
        patch_size: box size in voxels of the ``patch_mean`` score.
        settings: the predictor's
            :meth:`~monai_unc.nnunet.predictor.UncertaintyPredictor.case_settings`, recorded under ``settings``.
        prev_stage_digests: a cascade stage's previous-stage segmentation of the case
            (:func:`~monai_unc.io.input_digests` of it), recorded under ``prev_stage_digests`` (None: no cascade, not
            recorded).

    Returns:
        The case record (as written to ``uncertainty/<case>.json``).
    """
    label_manager = plans_manager.get_label_manager(dataset_json)
    out = convert_uncertainty_to_original_geometry(
        result, plans_manager, configuration_manager, label_manager, properties, measures, segmentation_from,
        num_threads_torch, return_probabilities=save_probabilities,
    )
    ending = dataset_json["file_ending"]
    base = Path(output_file_truncated)
    case = base.name
    unc_dir = base.parent / UNCERTAINTY_FOLDER
    rw = plans_manager.image_reader_writer_class()
    regions = region_definitions(dataset_json) if label_manager.has_regions else {}
    remove_case_outputs(base, ending, list(regions))
    files: dict[str, Any] = {}
    sidecars: list[str] = []  # Tiff3DIO's spacing files beside the maps: digested with them (review 63)
    for key, m in out["maps"].items():
        if regions:
            paths = write_region_maps(rw, m, unc_dir / f"{case}_{key}{ending}", properties, list(regions),
                                      sidecars=sidecars)
            files[key] = paths[0].name if len(paths) == 1 else [q.name for q in paths]
        else:
            files[key] = write_float_map(rw, m, unc_dir / f"{case}_{key}{ending}", properties, sidecars=sidecars).name
    if save_probabilities:
        atomic_save_npz(base.with_name(f"{case}.npz"), {"probabilities": out["probabilities"]}, compressed=True)
        with atomic_path(base.with_name(f"{case}.pkl"), ".pkl") as tmp:
            save_pickle(properties, str(tmp))
    scores = record_case_scores(out["maps"], out["segmentation"], patch_size, regions=regions or None)
    record = {
        "case": case,
        "sources": list(result.sources),
        "mi_meaning": mi_meaning,
        "num_samples": int(out["num_samples"]),
        "segmentation_from": segmentation_from,
        "foreground_voxels": int((out["segmentation"] > 0).sum()),
        "patch_size": int(patch_size),
        "scores": scores,
        "maps": files,
        **({"regions": regions} if regions else {}),
        **result.extras,
        **({"settings": json_safe(settings)} if settings is not None else {}),
        # a cascade's previous stage is an input of the case: a resume predicts the case again when it changed
        **({"prev_stage_digests": json_safe(prev_stage_digests)} if prev_stage_digests is not None else {}),
        VERSION_KEY: __version__,  # provenance: seeded draws may differ between versions
        LIBRARIES_KEY: library_versions(),  # and between torch / MONAI versions
        # a resume (--continue_prediction) predicts again a case whose maps changed since (case_exported), as infer's
        "file_digests": output_digests(unc_dir, list(dict.fromkeys(_map_names(files) + sidecars))),
    }
    written = [f"{case}.npz", f"{case}.pkl"] if save_probabilities else []

    def write_record(segmentation: Path) -> None:
        # review 63: a segmentation or .npz replaced since (same name) was kept by a resume, which checked their
        # presence alone. Their digests: the segmentation and its sidecars as written in the private folder, under
        # their final names, before they are renamed into place
        here = sorted(f.name for f in segmentation.parent.iterdir())
        record["prediction_file_digests"] = {**output_digests(segmentation.parent, here),
                                             **output_digests(base.parent, written)}
        # last, of the text as it is written and read back (json_safe: NaN as null): a resume predicts again a case
        # whose record was edited (its file_digests made to match a replaced map)
        record["record_digest"] = record_digest(json_safe(record))
        atomic_write_json(_record_path(base), record)

    # the segmentation last: a case is done (case_exported) when it, its record and its maps exist
    _write_with_reader_writer(rw, out["segmentation"], base.with_name(f"{case}{ending}"), properties,
                              then=write_record)
    return record


def remove_case_outputs(output_file_truncated: str | os.PathLike, file_ending: str,
                        region_names: Sequence[str] = ()) -> list[Path]:
    """Remove what :func:`export_uncertainty` wrote for one case, before the case is written again.

    The record ``uncertainty/<case>.json`` goes first, so that an interrupted removal or rewrite leaves a case that
    :func:`case_exported` counts as not done (``--continue_prediction`` predicts it again); then the segmentation,
    ``<case>.npz``, ``<case>.pkl`` and the maps: every file the old record names (plain names of the case's maps
    only) and ``uncertainty/<case>_<measure><ending>`` (``..._<measure>_<region><ending>`` with ``region_names``) for
    every measure of :data:`~monai_unc.nnunet.names.MAP_MEASURES`. A rerun into the same folder with other settings
    (fewer measures, no ``--save_probabilities``) would otherwise keep files that contradict its
    ``uncertainty_config.json``, e.g. an ``.npz`` whose argmax is not the new segmentation. The files beside the maps
    that the old record digests (``Tiff3DIO``'s ``<case>_<measure>.json`` spacing files) go with them.

    Args:
        output_file_truncated: the case's output path without ending (``<folder>/<case>``).
        file_ending: the dataset's file ending (e.g. ``".nii.gz"``).
        region_names: the model's region names (region-based models written one file per region).

    Returns:
        The files removed.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / "uncertainty").mkdir()
        ...     for name in ("case.nii.gz", "case.npz", "uncertainty/case_variance.nii.gz", "uncertainty/case.json",
        ...                  "other.npz"):
        ...         _ = (Path(d) / name).write_bytes(b"")
        ...     [p.name for p in remove_case_outputs(Path(d) / "case", ".nii.gz")]
        ...     sorted(p.name for p in Path(d).rglob("*.*"))
        ['case.json', 'case.nii.gz', 'case.npz', 'case_variance.nii.gz']
        ['other.npz']
    """
    base = Path(output_file_truncated)
    case = base.name
    unc_dir = base.parent / UNCERTAINTY_FOLDER
    record_path = _record_path(base)
    record = read_json_or_none(record_path)
    maps = record.get("maps") if isinstance(record, dict) else None
    names: list[str] = []
    for entry in (maps.values() if isinstance(maps, dict) else ()):
        for name in [entry] if isinstance(entry, str) else entry if isinstance(entry, list) else ():
            if isinstance(name, str) and name.startswith(f"{case}_") and Path(name).name == name:
                names.append(name)
    digests = record.get("file_digests") if isinstance(record, dict) else None
    for name in (digests if isinstance(digests, dict) else ()):  # the maps' spacing files (Tiff3DIO; review 63)
        if isinstance(name, str) and name.startswith(f"{case}_") and plain_file_name(name):
            names.append(name)
    for m in MAP_MEASURES:
        names.append(f"{case}_{m}{file_ending}")
        names.extend(f"{case}_{m}_{r}{file_ending}" for r in region_names)
    paths = [record_path, base.with_name(f"{case}{file_ending}"), base.with_name(f"{case}.npz"),
             base.with_name(f"{case}.pkl"), *(unc_dir / n for n in dict.fromkeys(names))]
    removed = []
    for path in paths:
        try:
            path.unlink()
        except (FileNotFoundError, IsADirectoryError):
            continue
        removed.append(path)
    return removed


def read_case_record(output_file_truncated: str | os.PathLike) -> dict | None:
    """The case record ``uncertainty/<case>.json`` written by :func:`export_uncertainty`.

    Args:
        output_file_truncated: the case's output path without ending (``<folder>/<case>``).

    Returns:
        The record, or None when it is missing, unreadable or no JSON object.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / "uncertainty").mkdir()
        ...     _ = (Path(d) / "uncertainty" / "case.json").write_text(json.dumps({"case": "case"}))
        ...     read_case_record(Path(d) / "case"), read_case_record(Path(d) / "other")
        ({'case': 'case'}, None)
    """
    record = read_json_or_none(_record_path(output_file_truncated))
    return record if isinstance(record, dict) else None


def recorded_case_settings(output_file_truncated: str | os.PathLike) -> dict | None:
    """The ``settings`` of a case record ``uncertainty/<case>.json``.

    What ``--continue_prediction`` compares with the current ones; None when the record is missing, unreadable
    or holds none (an earlier version). A ``seed`` recorded for sources that draw nothing (folds, mirroring: an
    earlier version recorded ``--seed`` there too) reads as None, as this version records it: the maps do not depend
    on it, so such a folder resumes instead of predicting every case again. A record without ``save_probabilities``
    (a record of an earlier version) reads as whether the case's ``<case>.npz`` exists, as it was made.

    Args:
        output_file_truncated: the case's output path without ending (``<folder>/<case>``).

    Returns:
        The recorded settings, or None.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / "uncertainty").mkdir()
        ...     _ = (Path(d) / "uncertainty" / "case.json").write_text(json.dumps({"settings": {"num_samples": 8}}))
        ...     recorded_case_settings(Path(d) / "case"), recorded_case_settings(Path(d) / "other")
        ({'num_samples': 8, 'save_probabilities': False}, None)
    """
    record = read_case_record(output_file_truncated)
    return _case_settings(record.get("settings") if record is not None else None, output_file_truncated)


def _case_settings(settings: Any, output_file_truncated: str | os.PathLike) -> dict | None:
    """A record's ``settings`` as :func:`recorded_case_settings` reads them (earlier versions' made comparable)."""
    if not isinstance(settings, dict):
        return None
    if "save_probabilities" not in settings:  # recorded since review 63: an earlier record's is whether its .npz exists
        settings = {**settings, "save_probabilities": os.path.isfile(f"{os.fspath(output_file_truncated)}.npz")}
    sources = settings.get("uncertainty_sources")
    if (settings.get("seed") is not None and isinstance(sources, list)
            and not any(s in STOCHASTIC_SOURCES for s in sources)):
        settings = {**settings, "seed": None}  # drew nothing: the seed had no effect (recorded None since)
    return settings


def case_exported(
    output_file_truncated: str | os.PathLike,
    file_ending: str,
    measures: Sequence[str] = DEFAULT_MEASURES,
    save_probabilities: bool = False,
    settings: dict | None = None,
) -> bool:
    """Whether a case has been written completely by :func:`export_uncertainty`.

    That is: its segmentation ``<case><ending>``, its record ``uncertainty/<case>.json`` naming a map for each of
    ``measures``, those map files, with ``save_probabilities`` ``<case>.npz``, and with ``settings`` a record whose
    ``settings`` equal them (:meth:`~monai_unc.nnunet.predictor.UncertaintyPredictor.case_settings`). A stock nnU-Net
    segmentation alone is not enough. The record is untrusted input: a map file, or a file its reader/writer wrote
    beside it (``Tiff3DIO``'s ``<name>.json`` spacing), whose size or sha256 is not the one recorded
    (``file_digests``); the segmentation (and its sidecars) and, with ``save_probabilities``, ``<case>.npz`` and
    ``<case>.pkl``, likewise (``prediction_file_digests``); or a record whose text no longer matches its own digest
    (``record_digest``, e.g. its ``file_digests`` edited to match a replaced map), makes the case not done, with one
    warning (:func:`monai_unc.io.changed_outputs`, as ``monai-unc infer`` checks its records). A record written by an
    earlier version is checked as that version did: without ``prediction_file_digests`` (written before they were
    kept) the segmentation and ``.npz`` for presence only, without ``file_digests`` the maps too.

    Args:
        output_file_truncated: the case's output path without ending (``<folder>/<case>``).
        file_ending: the dataset's file ending (e.g. ``".nii.gz"``).
        measures: the maps that must exist.
        save_probabilities: ``<case>.npz`` must exist too.
        settings: the settings the record must hold (None: not compared).

    Returns:
        True when every file is there (and the settings match).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "case.nii.gz").write_bytes(b"")  # a stock segmentation only
        ...     before = case_exported(Path(d) / "case", ".nii.gz", ["predictive_entropy"])
        ...     (Path(d) / "uncertainty").mkdir()
        ...     _ = (Path(d) / "uncertainty" / "case_predictive_entropy.nii.gz").write_bytes(b"")
        ...     _ = (Path(d) / "uncertainty" / "case.json").write_text(
        ...         json.dumps({"maps": {"predictive_entropy": "case_predictive_entropy.nii.gz"}}))
        ...     before, case_exported(Path(d) / "case", ".nii.gz", ["predictive_entropy"])
        (False, True)
    """
    if settings is not None and recorded_case_settings(output_file_truncated) != json.loads(
            json.dumps(json_safe(settings))):
        return False
    base = Path(output_file_truncated)
    if not base.with_name(f"{base.name}{file_ending}").is_file():
        return False
    if save_probabilities and not base.with_name(f"{base.name}.npz").is_file():
        return False
    record = read_json_or_none(_record_path(base))
    maps = record.get("maps") if isinstance(record, dict) else None
    if not isinstance(maps, dict):
        return False
    unc_dir = base.parent / UNCERTAINTY_FOLDER

    def written(entry: Any) -> bool:
        names = [entry] if isinstance(entry, str) else entry
        return (isinstance(names, list) and bool(names)
                and all(isinstance(n, str) and (unc_dir / n).is_file() for n in names))

    # review 61: the record is untrusted input, and ``unc_dir / "/etc/passwd"`` is ``/etc/passwd``: a map entry that is
    # not a plain file name of ``uncertainty/`` (``../x``, an absolute path) made the case count as exported
    entries = [maps.get(K(m).value) for m in measures]
    outside = [n for e in entries for n in ([e] if isinstance(e, str) else e if isinstance(e, list) else [])
               if isinstance(n, str) and not plain_file_name(n)]
    if outside:
        warnings.warn(f"case {base.name!r}: its record {_record_path(base).name} names map files outside "
                      f"{UNCERTAINTY_FOLDER}/ ({', '.join(repr(n) for n in outside[:3])}): predicting it again",
                      UserWarning, stacklevel=2)
        return False
    if not all(written(e) for e in entries):
        return False
    # review 62: the maps as written (file_digests) and the record's own text (record_digest), as infer checks its
    # case records; a record of an earlier version, without them, is checked for the files' presence only (above)
    try:
        changed = changed_outputs(unc_dir, record, _map_names({m: e for m, e in zip(measures, entries)})
                                  + _sidecar_names(record))
        if not changed and "prediction_file_digests" in record:  # review 63: the segmentation and .npz too
            changed = changed_outputs(base.parent, record, _prediction_names(record, base.name, file_ending,
                                                                             save_probabilities),
                                      digests_key="prediction_file_digests")
    except (TypeError, ValueError) as e:  # a value that is no JSON data, NaN: the record was not written so
        changed = [f"record ({e})"]
    if changed:
        warnings.warn(f"case {base.name!r}: its record {_record_path(base).name} or its maps differ from what was "
                      f"written ({', '.join(changed[:3])}): predicting it again", UserWarning, stacklevel=2)
        return False
    return True


def write_scores_table(output_folder: str | os.PathLike, settings: dict | None = None) -> Path | None:
    """Collect ``uncertainty/*.json`` of a folder into ``uncertainty_scores.csv``.

    One row per case; columns ``case, num_samples, foreground_voxels, <measure>_<score>``, written by
    :func:`monai_unc.io.write_csv` as ``metrics.csv`` is: an undefined score (null in the record) is ``nan``, the
    others at full precision. Files without ``case`` and ``scores`` are skipped, and with ``settings`` the records
    made with other settings (a part of the same folder still being predicted again by another ``-part_id``).

    Args:
        output_folder: the prediction folder (holding ``uncertainty/``).
        settings: the settings the records must hold
            (:meth:`~monai_unc.nnunet.predictor.UncertaintyPredictor.case_settings`; None: every record).

    Returns:
        The path of ``uncertainty_scores.csv``, or None when there is no case record.

    Raises:
        ValueError: another part held the records folder (``uncertainty/``, :func:`monai_unc.io.output_lock`) for
            more than 10 minutes.

    Example:
        >>> import tempfile
        >>> record = {"case": "case1", "num_samples": 8, "foreground_voxels": 0,
        ...           "scores": {"predictive_entropy": {"mean": 0.25, "fg_mean": None}}}
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / "uncertainty").mkdir()
        ...     _ = (Path(d) / "uncertainty" / "case1.json").write_text(json.dumps(record))
        ...     print(write_scores_table(d).read_text(), end="")
        case,num_samples,foreground_voxels,predictive_entropy_mean,predictive_entropy_fg_mean
        case1,8,0,0.25,nan
    """
    folder = Path(output_folder)
    wanted = None if settings is None else json.loads(json.dumps(json_safe(settings)))  # as records read back
    if not (folder / UNCERTAINTY_FOLDER).is_dir():
        return None
    # the -part_id runs sharing a folder write the table one at a time, each listing the records under the lock:
    # the last table lists every part's records (found by the hostile review of concurrency: two parts ending
    # together, the later write was of a listing made before the other part's last record, a case lost)
    with output_lock(folder / UNCERTAINTY_FOLDER, "monai-unc nnunet-predict (uncertainty_scores.csv)",
                     wait=_SCORES_TABLE_WAIT):
        return _write_scores_table(folder, settings, wanted)


#: seconds a part waits for another part's write of ``uncertainty_scores.csv`` (reading the records takes seconds)
_SCORES_TABLE_WAIT = 600.0


def _settings_match(recorded: Any, output_file_truncated: Path, wanted: dict) -> bool:
    """Whether a record's ``settings``, read as :func:`recorded_case_settings` reads them, are ``wanted``.

    ``save_probabilities`` is compared only when ``wanted`` names it (a caller's settings of an earlier version).
    """
    settings = _case_settings(recorded, output_file_truncated)
    if settings is not None and "save_probabilities" not in wanted:
        settings = {k: v for k, v in settings.items() if k != "save_probabilities"}
    return settings == wanted


def _write_scores_table(folder: Path, settings: dict | None, wanted: Any) -> Path | None:
    """:func:`write_scores_table`'s listing and write, the records folder held."""
    records = []
    for f in sorted((folder / UNCERTAINTY_FOLDER).glob("*.json")):
        # None: removed since the listing (its case is being predicted again by another part), or no case record (a
        # file that is no JSON, or a FIFO, in the records folder: a JSONDecodeError traceback, or a read that never
        # ended, after every case was predicted; found by hostile review 58), skipped as check_output_settings does
        rec = read_json_or_none(f)
        if isinstance(rec, dict) and isinstance(rec.get("scores"), dict) and "case" in rec and (
                settings is None or _settings_match(rec.get("settings"), folder / f.stem, wanted)):
            records.append(rec)
    if not records:
        return None
    measures = list(records[0]["scores"])
    stats = list(next(iter(records[0]["scores"].values())))
    header = ["case", "num_samples", "foreground_voxels"] + [f"{m}_{s}" for m in measures for s in stats]
    rows = []
    for r in records:
        row = {"case": r["case"], "num_samples": r["num_samples"], "foreground_voxels": r["foreground_voxels"]}
        for m in measures:
            for s in stats:
                v = r["scores"].get(m, {}).get(s)  # null in the strict-JSON record: an undefined score (NaN)
                row[f"{m}_{s}"] = float("nan") if v is None else float(v)
        rows.append(row)
    return write_csv(folder / SCORES_CSV, rows, header)
