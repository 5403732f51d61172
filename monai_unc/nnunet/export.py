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
  record with the case scores (:func:`case_scores`); :func:`write_scores_table` collects the records into
  ``uncertainty_scores.csv``. Every file is written under a temporary name and renamed; the segmentation last.
- **Done or not** (:func:`case_exported`): a case is done when its segmentation, its record and every map
  the record names exist (what ``--continue_prediction`` skips).

This module uses absolute imports only: nnU-Net imports the modules of the ``nnUNet_extTrainer`` folder as
top-level modules.
"""

from __future__ import annotations

import csv
import io
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from acvl_utils.cropping_and_padding.bounding_boxes import insert_crop_into_image
from batchgenerators.utilities.file_and_folder_operations import save_pickle
from nnunetv2.configuration import default_num_processes
from nnunetv2.inference.export_prediction import convert_predicted_logits_to_segmentation_with_correct_shape
from nnunetv2.utilities.label_handling.label_handling import LabelManager
from nnunetv2.utilities.plans_handling.plans_handler import ConfigurationManager, PlansManager

from monai_unc.io import atomic_path, atomic_save_npz, atomic_write_json, atomic_write_text
from monai_unc.keys import DEFAULT_MEASURES, MEASURES, MIMeaning, UncertaintyKeys
from monai_unc.scores import PATCH_SIZE
from monai_unc.scores import case_scores as map_case_scores
from monai_unc.stats import derive_measures

__all__ = [
    "MAP_MEASURES",
    "DEFAULT_MEASURES",
    "MEAN_SQ",
    "UNCERTAINTY_FOLDER",
    "SCORES_CSV",
    "PATCH_SIZE",
    "CaseUncertainty",
    "convert_uncertainty_to_original_geometry",
    "write_float_map",
    "case_scores",
    "export_uncertainty",
    "case_exported",
    "write_scores_table",
]

K = UncertaintyKeys

#: voxel maps the predictor can write (the package's list of measures but ``window_disagreement``: nnU-Net's
#: predictor stitches its tiles itself, so the disagreement between tiles stays in the mutual information)
MAP_MEASURES: tuple[str, ...] = tuple(m for m in MEASURES if m != UncertaintyKeys.WINDOW_DISAGREEMENT.value)
#: key of the mean squared probabilities in the moments (stitched only when ``variance`` is requested)
MEAN_SQ = "mean_sq"
#: folder (inside the output folder) that receives the maps and the case records
UNCERTAINTY_FOLDER = "uncertainty"
#: per-case score table written next to the segmentations
SCORES_CSV = "uncertainty_scores.csv"


@dataclass
class CaseUncertainty:
    """Stitched statistics of one case at the resolution of the network (nnU-Net's preprocessed geometry).

    ``moments``: ``pred`` ``(C, *spatial)`` mean probabilities, ``expected_entropy`` ``(1, *spatial)`` mean entropy
    (nats) and, with ``variance`` requested, ``mean_sq`` ``(C, *spatial)``; float32. ``logits``: the mean logits
    ``(C, *spatial)`` as stock nnU-Net computes them (fp16) or ``None``. ``num_samples``: probability samples per
    voxel. ``extras``: side information (the mean searched Rate-In rate per layer).
    """

    moments: dict[str, Any]
    logits: Any | None
    num_samples: int
    sources: tuple[str, ...] = field(default_factory=tuple)
    extras: dict[str, Any] = field(default_factory=dict)

    def to_numpy(self) -> CaseUncertainty:
        """CPU numpy copy (what crosses process boundaries; nnU-Net does the same with its logits)."""

        def np_(x: Any) -> Any:
            return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x

        return CaseUncertainty({k: np_(v) for k, v in self.moments.items()}, np_(self.logits), self.num_samples,
                               self.sources, dict(self.extras))

    def measures(self, keys: Iterable[str] = DEFAULT_MEASURES, normalize: bool = False) -> dict[str, torch.Tensor]:
        """Maps ``(1, *spatial)`` derived from the moments at network resolution (no resampling)."""
        mom = {k: torch.as_tensor(v)[None] for k, v in self.moments.items()}
        return {k: v[0] for k, v in derive_measures(mom, keys, normalize=normalize).items()}


# ------------------------------------------------------------------------------------------ geometry
def _resampled_moments(
    result: CaseUncertainty,
    plans_manager: PlansManager,
    configuration_manager: ConfigurationManager,
    properties: dict,
) -> dict[str, np.ndarray]:
    """The moments resampled to the cropped original shape (network axis order), the way nnU-Net resamples
    probabilities (``export_prediction.convert_predicted_logits_to_segmentation_with_correct_shape``)."""
    spacing_transposed = [properties["spacing"][i] for i in plans_manager.transpose_forward]
    shape = properties["shape_after_cropping_and_before_resampling"]
    current_spacing = (
        configuration_manager.spacing
        if len(configuration_manager.spacing) == len(shape)
        else [spacing_transposed[0], *configuration_manager.spacing]
    )
    mom = result.moments
    n_classes = mom[K.PRED.value].shape[0]
    parts = [mom[K.PRED.value], mom[K.EXPECTED_ENTROPY.value]] + ([mom[MEAN_SQ]] if MEAN_SQ in mom else [])
    stacked = np.asarray(configuration_manager.resampling_fn_probabilities(
        np.concatenate([np.asarray(p, dtype=np.float32) for p in parts], axis=0), shape, current_spacing,
        spacing_transposed))
    # an interpolating (order > 1) resampling may overshoot: keep the moments valid
    pred = np.clip(stacked[:n_classes], 0.0, 1.0)
    pred /= np.maximum(pred.sum(0, keepdims=True), np.finfo(np.float32).tiny)
    out = {
        K.PRED.value: pred,
        K.EXPECTED_ENTROPY.value: np.clip(stacked[n_classes:n_classes + 1], 0.0, np.log(n_classes)),
    }
    if MEAN_SQ in mom:
        out[MEAN_SQ] = np.clip(stacked[n_classes + 1:], 0.0, 1.0)
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

    Returns ``{"segmentation": (*shape) uint8/uint16, "maps": {measure: (*shape) float32}, "num_samples": int}``
    plus, with ``return_probabilities``, ``"probabilities"`` and ``"mean_probabilities"``.
    """
    if segmentation_from not in ("logits", "probabilities"):
        raise ValueError(f"segmentation_from must be 'logits' or 'probabilities', got {segmentation_from!r}")
    if segmentation_from == "logits" and result.logits is None:
        raise ValueError("segmentation_from='logits' but the result holds no logits")
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
        maps_t = derive_measures({k: torch.from_numpy(v)[None] for k, v in moments.items()}, measures)
        out["maps"] = {
            k: _revert_crop(v[0].numpy().astype(np.float32), properties).transpose(axes)[0]
            for k, v in maps_t.items()
        }
        if segmentation_from == "probabilities":
            seg = moments[K.PRED.value].argmax(0)
            seg_dtype = np.uint8 if len(label_manager.foreground_labels) < 255 else np.uint16
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


def write_float_map(reader_writer: Any, data: np.ndarray, output_fname: str | os.PathLike, properties: dict) -> Path:
    """Write a float map with the geometry ``reader_writer.write_seg`` gives segmentations (atomic rename).

    2D natural-image formats (png, bmp, ...) cannot hold floats: the map goes to ``<name>.npz`` (key ``map``)
    instead, and that path is returned.
    """
    out = Path(output_fname)
    arr = np.ascontiguousarray(np.asarray(data, dtype=np.float32))
    if type(reader_writer).__name__ == "NaturalImage2DIO":
        return atomic_save_npz(out.with_name(out.name.split(".")[0] + ".npz"), {"map": arr}, compressed=True)
    with atomic_path(out, _ending(out.name)) as tmp:
        reader_writer.write_seg(arr.view(_FloatMap), str(tmp), properties)
    return out


def case_scores(maps: dict[str, np.ndarray], segmentation: np.ndarray, patch_size: int = PATCH_SIZE) -> dict:
    """Case-level scores of each map (ValUES Sec. 4.3), the definitions ``monai-unc evaluate`` uses.

    The one definition of :func:`monai_unc.scores.case_scores`: ``mean`` over the whole image; ``fg_mean`` over the
    predicted foreground (label > 0; NaN when the prediction is empty); ``patch_mean`` the largest *mean* over a
    box of ``patch_size`` voxels per axis (stride-1 boxes, clipped to the image). Returns
    ``{measure: {"mean", "fg_mean", "patch_mean"}}``, flattened to ``<measure>_<score>`` columns in the table.
    """
    out: dict[str, dict[str, float]] = {}
    for key, m in maps.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # empty prediction: fg_mean NaN, recorded as null
            out[key] = map_case_scores(m, segmentation, patch_size)
    return out


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
) -> dict:
    """Write one case like ``export_prediction_from_logits`` plus the uncertainty maps and the case record.

    Files: ``<case><ending>`` segmentation; with ``save_probabilities`` ``<case>.npz`` (key ``probabilities``,
    float32 ``(C, *shape)``: the probabilities whose argmax is the segmentation, see
    :func:`convert_uncertainty_to_original_geometry`) and ``<case>.pkl`` (properties) as nnU-Net writes them;
    ``uncertainty/<case>_<measure><ending>`` float32 maps; ``uncertainty/<case>.json`` the record. The
    segmentation is written last. Returns the record.
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
    files = {}
    for key, m in out["maps"].items():
        files[key] = write_float_map(rw, m, unc_dir / f"{case}_{key}{ending}", properties).name
    if save_probabilities:
        atomic_save_npz(base.with_name(f"{case}.npz"), {"probabilities": out["probabilities"]}, compressed=True)
        with atomic_path(base.with_name(f"{case}.pkl"), ".pkl") as tmp:
            save_pickle(properties, str(tmp))
    record = {
        "case": case,
        "sources": list(result.sources),
        "mi_meaning": mi_meaning,
        "num_samples": int(out["num_samples"]),
        "segmentation_from": segmentation_from,
        "foreground_voxels": int((out["segmentation"] > 0).sum()),
        "patch_size": int(patch_size),
        "scores": case_scores(out["maps"], out["segmentation"], patch_size),
        "maps": files,
        **result.extras,
    }
    atomic_write_json(_record_path(base), record)
    # the segmentation last: a case is done (case_exported) when it, its record and its maps exist
    with atomic_path(base.with_name(f"{case}{ending}"), ending) as tmp:
        rw.write_seg(out["segmentation"], str(tmp), properties)
    return record


def case_exported(
    output_file_truncated: str | os.PathLike,
    file_ending: str,
    measures: Sequence[str] = DEFAULT_MEASURES,
    save_probabilities: bool = False,
) -> bool:
    """Whether a case has been written completely by :func:`export_uncertainty`: its segmentation
    ``<case><ending>``, its record ``uncertainty/<case>.json`` naming a map for each of ``measures``, those map
    files, and with ``save_probabilities`` ``<case>.npz``. A stock nnU-Net segmentation alone is not enough."""
    base = Path(output_file_truncated)
    if not base.with_name(f"{base.name}{file_ending}").is_file():
        return False
    if save_probabilities and not base.with_name(f"{base.name}.npz").is_file():
        return False
    try:
        record = json.loads(_record_path(base).read_text())
    except (OSError, ValueError):
        return False
    maps = record.get("maps") if isinstance(record, dict) else None
    if not isinstance(maps, dict):
        return False
    unc_dir = base.parent / UNCERTAINTY_FOLDER
    return all(isinstance(maps.get(K(m).value), str) and (unc_dir / maps[K(m).value]).is_file() for m in measures)


def write_scores_table(output_folder: str | os.PathLike) -> Path | None:
    """Collect ``uncertainty/*.json`` of a folder into ``uncertainty_scores.csv`` (one row per case; columns
    ``case, num_samples, foreground_voxels, <measure>_<score>``)."""
    folder = Path(output_folder)
    records = []
    for f in sorted((folder / UNCERTAINTY_FOLDER).glob("*.json")):
        rec = json.loads(f.read_text())
        if isinstance(rec, dict) and "scores" in rec and "case" in rec:
            records.append(rec)
    if not records:
        return None
    measures = list(records[0]["scores"])
    stats = list(next(iter(records[0]["scores"].values())))
    header = ["case", "num_samples", "foreground_voxels"] + [f"{m}_{s}" for m in measures for s in stats]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for r in records:
        row = [r["case"], r["num_samples"], r["foreground_voxels"]]
        for m in measures:
            for s in stats:
                v = r["scores"].get(m, {}).get(s)
                row.append("nan" if v is None else repr(float(v)))
        writer.writerow(row)
    return atomic_write_text(folder / SCORES_CSV, buf.getvalue())
