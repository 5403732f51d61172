"""``UncertaintyPredictor``: nnU-Net v2's predictor with per-sample softmax statistics and uncertainty maps.

Stock ``nnUNetPredictor`` averages every forward pass in *logit* space: the 2^k mirrored
passes are summed in place inside ``_internal_maybe_mirror_and_predict``, the folds one after the other in
``predict_logits_from_preprocessed_data``, and the sliding windows are blended into an fp16 buffer with one
channel per class. Nothing of the individual samples survives. This subclass turns each forward pass of a chosen
*uncertainty source* into a probability sample:

- ``"folds"``: each fold's network is a sample (deep ensemble; MI(Y, theta), epistemic);
- ``"mirroring"``: each of the 2^k mirrored passes is a sample (TTA; MI(Y, T), ValUES Appendix E);
- ``"dropout"``: ``num_samples`` Monte-Carlo dropout passes, dropout switched on again after nnU-Net's
  ``network.eval()`` (trained dropout, or post-hoc dropout with ``dropout_p``; MI(Y, theta));
- ``"rate_in"``: ``num_samples`` dropout passes with Rate-In rates (Zeevi et al., CVPR 2025), searched once per
  window on the un-mirrored window by :class:`~monai_unc.inferers.rate_in.RateInSource` (the network's dropout is
  converted, or Rate-In is inserted after every encoder/decoder stage when it has none).

Sources multiply: folds x dropout x mirrors forward passes per window. Axes that are *not* sources are averaged
in logit space first, as stock nnU-Net does (mirroring off as a source: each sample is the softmax of the mean
logit over the mirrors; folds off as a source: the folds are averaged in logit space per window, with one copy
of the network per fold on the device).

Per window, every sample's softmax streams into a :class:`~monai_unc.stats.SampleStats` (float32 within the
window); the window's moments, mean probabilities (C channels), mean entropy (1) and, for ``variance``, mean
squared probabilities (C), are blended with nnU-Net's Gaussian weights into float32 buffers. Blending is a
convex combination per voxel, so predictive entropy, mutual information and max-softmax derived after stitching
are exact functions of the blended moments (docs/design.md, "Streaming statistics"). Folds processed one after
the other (nnU-Net's memory-saving order) contribute equal numbers of samples per voxel, so their statistics
pool exactly as the mean of their stitched moments.

Outputs are brought back to the original image geometry the way nnU-Net treats probabilities: the moments are
resampled with the configuration's ``resampling_fn_probabilities`` (linear by default: again a convex
combination, so MI >= 0 is preserved), the crop is reverted with background probability 1 (all uncertainty 0)
outside the non-zero bounding box, and the axes are transposed back. Maps are written with the dataset's
reader/writer, i.e. in the dataset's file format and with exactly the geometry of the segmentation.

Segmentation: ``segmentation_from="logits"`` (default) also stitches the mean *logits* exactly as stock nnU-Net
does (fp16 buffer, same order of operations) and takes their argmax, so the segmentation equals stock nnU-Net's
bit for bit when the same folds and mirrors are used. ``"probabilities"`` takes the argmax of the mean
probabilities instead, consistent with the uncertainty maps; averaging probabilities instead of logits changes
the label only where the ensemble members disagree (measured agreement with stock on the toy task: see
docs/nnunet.md).
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import itertools
import json
import multiprocessing
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from queue import Queue
from threading import Thread
from time import sleep
from typing import Any

import numpy as np
import torch
from acvl_utils.cropping_and_padding.bounding_boxes import insert_crop_into_image
from acvl_utils.cropping_and_padding.padding import pad_nd_image
from batchgenerators.dataloading.multi_threaded_augmenter import MultiThreadedAugmenter
from batchgenerators.utilities.file_and_folder_operations import save_pickle
from nnunetv2.configuration import default_num_processes
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor
from nnunetv2.inference.sliding_window_prediction import compute_gaussian
from nnunetv2.utilities.file_path_utilities import check_workers_alive_and_busy
from nnunetv2.utilities.helpers import dummy_context, empty_cache
from nnunetv2.utilities.label_handling.label_handling import LabelManager, convert_labelmap_to_one_hot
from nnunetv2.utilities.plans_handling.plans_handler import ConfigurationManager, PlansManager
from torch import nn
from tqdm import tqdm

from monai_unc.aggregation import aggregate
from monai_unc.inferers.dropout import enable_mc_dropout, find_dropout_layers
from monai_unc.inferers.rate_in import RateInSource
from monai_unc.io import atomic_write_text
from monai_unc.keys import MIMeaning, UncertaintyKeys
from monai_unc.nnunet.dropout import add_posthoc_dropout
from monai_unc.stats import SampleStats, derive_measures
from monai_unc.temperature import TemperatureScaler

__all__ = [
    "SOURCES",
    "MAP_MEASURES",
    "DEFAULT_MEASURES",
    "CaseUncertainty",
    "UncertaintyPredictor",
    "convert_uncertainty_to_original_geometry",
    "export_uncertainty",
    "case_scores",
    "write_float_map",
    "write_scores_table",
    "trainer_dir",
    "calibrate_model_folder",
]

K = UncertaintyKeys

#: uncertainty sources the predictor can sample from
SOURCES = ("folds", "mirroring", "dropout", "rate_in")
_STOCHASTIC = ("dropout", "rate_in")
#: voxel maps the predictor can write
MAP_MEASURES = (K.PREDICTIVE_ENTROPY, K.EXPECTED_ENTROPY, K.MUTUAL_INFORMATION, K.MAX_SOFTMAX, K.VARIANCE)
#: maps written by default
DEFAULT_MEASURES = (K.PREDICTIVE_ENTROPY, K.EXPECTED_ENTROPY, K.MUTUAL_INFORMATION, K.MAX_SOFTMAX)
#: folder (inside the output folder) that receives the maps and the per-case scores
UNCERTAINTY_FOLDER = "uncertainty"
#: per-case score table written next to the segmentations
SCORES_CSV = "uncertainty_scores.csv"
#: box size (voxels per axis) of the patch aggregation (ValUES, Sec. 4.3)
PATCH_SIZE = 10

_MEAN_SQ = "mean_sq"


def trainer_dir() -> str:
    """The folder to put into ``nnUNet_extTrainer`` so that nnU-Net finds the trainers of this package."""
    return str(Path(__file__).resolve().parent)


@dataclass
class CaseUncertainty:
    """Stitched statistics of one case at the resolution of the network (nnU-Net's preprocessed geometry).

    ``moments``: ``pred`` ``(C, *spatial)`` mean probabilities, ``expected_entropy`` ``(1, *spatial)`` mean entropy
    (nats) and, with ``variance`` requested, ``mean_sq`` ``(C, *spatial)``; float32. ``logits``: the mean logits as
    stock nnU-Net computes them (fp16) or ``None``. ``num_samples``: probability samples per voxel. ``extras``:
    side information (the mean searched Rate-In rate per layer).
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


# ------------------------------------------------------------------------------------------ geometry and export
def _resampled_moments(
    result: CaseUncertainty,
    plans_manager: PlansManager,
    configuration_manager: ConfigurationManager,
    properties: dict,
) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    spacing_transposed = [properties["spacing"][i] for i in plans_manager.transpose_forward]
    shape = properties["shape_after_cropping_and_before_resampling"]
    current_spacing = (
        configuration_manager.spacing
        if len(configuration_manager.spacing) == len(shape)
        else [spacing_transposed[0], *configuration_manager.spacing]
    )

    def resample(a: np.ndarray) -> np.ndarray:
        return np.asarray(configuration_manager.resampling_fn_probabilities(a, shape, current_spacing,
                                                                            spacing_transposed))

    mom = result.moments
    n_classes = mom[K.PRED.value].shape[0]
    parts = [mom[K.PRED.value], mom[K.EXPECTED_ENTROPY.value]] + ([mom[_MEAN_SQ]] if _MEAN_SQ in mom else [])
    stacked = resample(np.concatenate([np.asarray(p, dtype=np.float32) for p in parts], axis=0))
    # an interpolating (order > 1) resampling may overshoot: keep the moments valid
    pred = np.clip(stacked[:n_classes], 0.0, 1.0)
    pred /= np.maximum(pred.sum(0, keepdims=True), np.finfo(np.float32).tiny)
    out = {
        K.PRED.value: pred,
        K.EXPECTED_ENTROPY.value: np.clip(stacked[n_classes:n_classes + 1], 0.0, np.log(n_classes)),
    }
    if _MEAN_SQ in mom:
        out[_MEAN_SQ] = np.clip(stacked[n_classes + 1:], 0.0, 1.0)
    logits = None if result.logits is None else resample(np.asarray(result.logits))
    return out, logits


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
) -> dict[str, Any]:
    """Segmentation, mean probabilities and uncertainty maps in the original image geometry.

    Mirrors ``convert_predicted_logits_to_segmentation_with_correct_shape``: resample to the cropped original
    shape with ``resampling_fn_probabilities``, revert the crop (probabilities: background 1 outside; maps: 0),
    transpose back to the reader's axis order. The maps are derived *after* resampling from the resampled moments.

    Returns ``{"segmentation": (*shape) uint8/uint16, "probabilities": (C, *shape) float32,
    "maps": {measure: (*shape) float32}, "num_samples": int}``.
    """
    old_threads = torch.get_num_threads()
    torch.set_num_threads(num_threads_torch)
    try:
        moments, logits = _resampled_moments(result, plans_manager, configuration_manager, properties)
        if segmentation_from == "logits":
            if logits is None:
                raise ValueError("segmentation_from='logits' but the result holds no logits")
            seg = label_manager.convert_logits_to_segmentation(logits)
        elif segmentation_from == "probabilities":
            seg = moments[K.PRED.value].argmax(0)
        else:
            raise ValueError(f"segmentation_from must be 'logits' or 'probabilities', got {segmentation_from!r}")
        seg = np.asarray(seg.cpu().numpy() if isinstance(seg, torch.Tensor) else seg)
        seg_dtype = np.uint8 if len(label_manager.foreground_labels) < 255 else np.uint16
        maps_t = derive_measures({k: torch.from_numpy(v)[None] for k, v in moments.items()}, measures)
        axes = [0] + [i + 1 for i in plans_manager.transpose_backward]
        seg_full = _revert_crop(seg.astype(seg_dtype)[None], properties)[0].transpose(plans_manager.transpose_backward)
        probs = label_manager.revert_cropping_on_probabilities(
            moments[K.PRED.value], properties["bbox_used_for_cropping"], properties["shape_before_cropping"]
        )
        maps = {
            k: _revert_crop(v[0].numpy().astype(np.float32), properties).transpose(axes)[0]
            for k, v in maps_t.items()
        }
        return {
            "segmentation": seg_full,
            "probabilities": np.asarray(probs, dtype=np.float32).transpose(axes),
            "maps": maps,
            "num_samples": int(result.num_samples),
        }
    finally:
        torch.set_num_threads(old_threads)


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


def write_float_map(reader_writer: Any, data: np.ndarray, output_fname: str | os.PathLike, properties: dict) -> Path:
    """Write a float map with the geometry ``reader_writer.write_seg`` gives segmentations (atomic rename).

    2D natural-image formats (png, bmp, ...) cannot hold floats: the map goes to ``<name>.npz`` (key ``map``)
    instead, and that path is returned.
    """
    out = Path(output_fname)
    out.parent.mkdir(parents=True, exist_ok=True)
    arr = np.ascontiguousarray(np.asarray(data, dtype=np.float32))
    if type(reader_writer).__name__ == "NaturalImage2DIO":
        out = out.with_name(out.name.split(".")[0] + ".npz")
        tmp = out.with_name(f".partial_{out.name}")
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, map=arr)
        os.replace(tmp, out)
        return out
    # keep the file ending last so that the writer recognises the format
    tmp = out.with_name(f".partial_{out.name}")
    reader_writer.write_seg(arr.view(_FloatMap), str(tmp), properties)
    os.replace(tmp, out)
    return out


def case_scores(maps: dict[str, np.ndarray], segmentation: np.ndarray, patch_size: int = PATCH_SIZE) -> dict:
    """Case-level scores of each map (ValUES Sec. 4.3), via :func:`monai_unc.aggregation.aggregate`.

    ``mean``: over the whole image; ``mean_foreground``: over the predicted foreground (label > 0; NaN with a
    warning when the prediction is empty); ``patch_max``: the largest sum over a box of ``patch_size`` voxels
    per axis.
    """
    fg = (np.asarray(segmentation) > 0)[None, None]
    out: dict[str, dict[str, float]] = {}
    for key, m in maps.items():
        u = np.asarray(m, dtype=np.float64)[None, None]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            mean_fg = float(aggregate(u, "mean", mask=fg)[0]) if fg.any() else float("nan")
        out[key] = {
            "mean": float(aggregate(u, "mean")[0]),
            "mean_foreground": mean_fg,
            "patch_max": float(aggregate(u, "patch", patch_size=patch_size)[0]),
        }
    return out


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not np.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    return x


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
) -> dict:
    """Write one case like ``export_prediction_from_logits`` plus the uncertainty maps and scores.

    Files: ``<case><ending>`` segmentation; with ``save_probabilities`` ``<case>.npz`` (key ``probabilities``: the
    *mean probabilities*, float32, ``(C, *shape)``) and ``<case>.pkl`` (properties) as nnU-Net writes them;
    ``uncertainty/<case>_<measure><ending>`` float32 maps; ``uncertainty/<case>.json`` scores. Returns the score
    record.
    """
    label_manager = plans_manager.get_label_manager(dataset_json)
    out = convert_uncertainty_to_original_geometry(
        result, plans_manager, configuration_manager, label_manager, properties, measures, segmentation_from,
        num_threads_torch,
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
        np.savez_compressed(str(base) + ".npz", probabilities=out["probabilities"])
        save_pickle(properties, str(base) + ".pkl")
    record = {
        "case": case,
        "sources": list(result.sources),
        "mi_meaning": mi_meaning,
        "num_samples": int(out["num_samples"]),
        "segmentation_from": segmentation_from,
        "foreground_voxels": int((out["segmentation"] > 0).sum()),
        "scores": case_scores(out["maps"], out["segmentation"]),
        "maps": files,
        **result.extras,
    }
    atomic_write_text(unc_dir / f"{case}.json", json.dumps(_json_safe(record), indent=2))
    # the segmentation last: nnU-Net's --continue_prediction treats its presence as "case done"
    tmp_seg = base.parent / f".partial_{case}{ending}"
    rw.write_seg(out["segmentation"], str(tmp_seg), properties)
    os.replace(tmp_seg, str(base) + ending)
    return record


def write_scores_table(output_folder: str | os.PathLike) -> Path | None:
    """Collect ``uncertainty/*.json`` of a folder into ``uncertainty_scores.csv`` (one row per case)."""
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


# ------------------------------------------------------------------------------------------ the predictor
@contextlib.contextmanager
def _ext_trainer_path(path: str) -> Iterator[None]:
    """Temporarily append ``path`` to ``nnUNet_extTrainer`` (nnU-Net reads the variable at lookup time)."""
    old = os.environ.get("nnUNet_extTrainer")
    parts = [p for p in (old or "").split(os.pathsep) if p]
    if path not in parts:
        os.environ["nnUNet_extTrainer"] = os.pathsep.join(parts + [path])
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("nnUNet_extTrainer", None)
        else:
            os.environ["nnUNet_extTrainer"] = old


def _sequential_iterator(
    predictor: nnUNetPredictor,
    list_of_lists: Sequence[Sequence[str]],
    segs_prev: Sequence[str | None] | None,
    ofiles: Sequence[str | None] | None,
) -> Iterator[dict]:
    label_manager = predictor.plans_manager.get_label_manager(predictor.dataset_json)
    preprocessor = predictor.configuration_manager.preprocessor_class(verbose=predictor.verbose_preprocessing)
    for i, files in enumerate(list_of_lists):
        prev = segs_prev[i] if segs_prev is not None else None
        data, seg, props = preprocessor.run_case(files, prev, predictor.plans_manager,
                                                 predictor.configuration_manager, predictor.dataset_json)
        if prev is not None:
            data = np.vstack((data, convert_labelmap_to_one_hot(seg[0], label_manager.foreground_labels, data.dtype)))
        yield {
            "data": torch.from_numpy(data).to(dtype=torch.float32, memory_format=torch.contiguous_format),
            "data_properties": props,
            "ofile": ofiles[i] if ofiles is not None else None,
        }


class UncertaintyPredictor(nnUNetPredictor):
    """nnU-Net v2 predictor that samples folds / mirrors / dropout passes and writes uncertainty maps.

    See the module docstring for what is sampled and how it is stitched. Use it like ``nnUNetPredictor``::

        predictor = UncertaintyPredictor(uncertainty_sources=("folds", "mirroring"), device=torch.device("cuda"))
        predictor.initialize_from_trained_model_folder(model_dir, use_folds=(0, 1, 2, 3, 4))
        predictor.predict_from_files(input_dir, output_dir, save_probabilities=False)

    Output folder: the segmentations (``<case><ending>``) as nnU-Net writes them, ``uncertainty/<case>_<measure>
    <ending>`` float32 maps, ``uncertainty/<case>.json`` case scores, ``uncertainty_scores.csv`` (all cases) and
    ``uncertainty_config.json``. ``--save_probabilities`` writes the mean probabilities as ``<case>.npz``.

    Args:
        uncertainty_sources: any non-empty combination of ``"folds"``, ``"mirroring"`` and one of ``"dropout"`` /
            ``"rate_in"``.
        num_samples: Monte-Carlo dropout passes per window (``"dropout"``, ``"rate_in"``; Zeevi et al. uses 30).
        dropout_p: insert post-hoc dropout with this rate after every encoder/decoder stage of the trained network
            (no retraining; :func:`~monai_unc.nnunet.dropout.add_posthoc_dropout`). ``None`` samples the dropout the
            network was trained with (plans variant or ``nnUNetTrainerMCDropout``).
        measures: maps to write, from :data:`MAP_MEASURES` (``variance`` stitches C more channels).
        segmentation_from: ``"logits"`` (stock nnU-Net's segmentation, exactly) or ``"probabilities"``.
        rate_in: keyword arguments of :class:`~monai_unc.inferers.rate_in.RateInSource` for ``"rate_in"``
            (``target_loss``, ``loss``, ``placement``, controller settings).
        seed: seed for the dropout masks of every case (``None``: the global RNG); the global RNG state is kept.
        The remaining arguments are ``nnUNetPredictor``'s.
    """

    def __init__(
        self,
        uncertainty_sources: Sequence[str] = ("folds", "mirroring"),
        num_samples: int = 10,
        dropout_p: float | None = None,
        measures: Sequence[str] = DEFAULT_MEASURES,
        segmentation_from: str = "logits",
        rate_in: dict[str, Any] | None = None,
        seed: int | None = None,
        tile_step_size: float = 0.5,
        use_gaussian: bool = True,
        use_mirroring: bool = True,
        perform_everything_on_device: bool = True,
        device: torch.device = torch.device("cuda"),  # noqa: B008 (nnU-Net's signature)
        verbose: bool = False,
        verbose_preprocessing: bool = False,
        allow_tqdm: bool = True,
    ) -> None:
        if isinstance(uncertainty_sources, str):
            uncertainty_sources = (uncertainty_sources,)
        sources = tuple(uncertainty_sources)
        if not sources:
            raise ValueError(f"uncertainty_sources must name at least one of {SOURCES}")
        bad = [s for s in sources if s not in SOURCES]
        if bad or len(set(sources)) != len(sources):
            raise ValueError(f"uncertainty_sources must be distinct names from {SOURCES}, got {sources}")
        if all(s in sources for s in _STOCHASTIC):
            raise ValueError("uncertainty_sources may hold 'dropout' or 'rate_in', not both (two dropout schemes)")
        if rate_in is not None and "rate_in" not in sources:
            raise ValueError("rate_in options are only used with the 'rate_in' uncertainty source")
        if "mirroring" in sources and not use_mirroring:
            raise ValueError("uncertainty_sources contains 'mirroring' but use_mirroring=False")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
        if dropout_p is not None and "dropout" not in sources:
            raise ValueError("dropout_p is only used with the 'dropout' uncertainty source")
        if dropout_p is not None and not (0.0 < float(dropout_p) < 1.0):
            raise ValueError(f"dropout_p must be in (0, 1), got {dropout_p!r}")
        measures = tuple(K(m).value for m in measures)
        allowed = {m.value for m in MAP_MEASURES}
        if not measures or any(m not in allowed for m in measures):
            raise ValueError(f"measures must be a non-empty subset of {sorted(allowed)}, got {measures}")
        if segmentation_from not in ("logits", "probabilities"):
            raise ValueError(f"segmentation_from must be 'logits' or 'probabilities', got {segmentation_from!r}")
        if not isinstance(device, torch.device):
            raise TypeError(f"device must be a torch.device, got {type(device).__name__}")
        super().__init__(tile_step_size, use_gaussian, use_mirroring, perform_everything_on_device, device, verbose,
                         verbose_preprocessing, allow_tqdm)
        self.uncertainty_sources = sources
        self.num_samples = num_samples
        self.dropout_p = None if dropout_p is None else float(dropout_p)
        self.measures = measures
        self.segmentation_from = segmentation_from
        self.seed = seed
        self._rate_in = None
        if "rate_in" in sources:
            self._rate_in = RateInSource(num_samples, **(rate_in or {}))
        self.rate_in_options = dict(rate_in or {})
        self._want_logits = segmentation_from == "logits"
        self._ensemble: list[nn.Module] | None = None
        self._posthoc_sites: list[str] = []

    # ------------------------------------------------------------------ initialisation
    def initialize_from_trained_model_folder(
        self,
        model_training_output_dir: str,
        use_folds: tuple[int | str, ...] | None,
        checkpoint_name: str = "checkpoint_final.pth",
    ) -> None:
        """As nnU-Net's, with this package's trainers findable without setting ``nnUNet_extTrainer``."""
        with _ext_trainer_path(trainer_dir()):
            super().initialize_from_trained_model_folder(model_training_output_dir, use_folds, checkpoint_name)
        self._after_initialization()

    def manual_initialization(self, network: nn.Module, plans_manager: PlansManager,
                              configuration_manager: ConfigurationManager, parameters: list[dict] | None,
                              dataset_json: dict, trainer_name: str,
                              inference_allowed_mirroring_axes: tuple[int, ...] | None) -> None:
        super().manual_initialization(network, plans_manager, configuration_manager, parameters, dataset_json,
                                      trainer_name, inference_allowed_mirroring_axes)
        self._after_initialization()

    def _after_initialization(self) -> None:
        if self.label_manager.has_regions:
            raise ValueError(
                "region-based nnU-Net models (sigmoid outputs per region) are not supported: the entropy "
                "decomposition needs softmax class probabilities"
            )
        if "mirroring" in self.uncertainty_sources and not self.allowed_mirroring_axes:
            raise ValueError(
                "uncertainty source 'mirroring' needs mirroring axes, but this model was trained without mirroring "
                "(inference_allowed_mirroring_axes is empty)"
            )
        if "dropout" in self.uncertainty_sources:
            modules, hooks = find_dropout_layers(self._net())
            if self.dropout_p is not None and not hooks:  # a freshly built network: insert the post-hoc dropout
                if modules:
                    warnings.warn(
                        f"the network already has {len(modules)} dropout layers; dropout_p={self.dropout_p} adds "
                        "post-hoc dropout on top of them", UserWarning,
                    )
                self._posthoc_sites = add_posthoc_dropout(self._net(), self.dropout_p)
            modules, hooks = find_dropout_layers(self._net())
            if not modules and not hooks:
                raise ValueError(
                    "uncertainty source 'dropout' needs dropout in the network: train with a dropout plans variant "
                    "(monai_unc.nnunet.write_dropout_plans) or nnUNetTrainerMCDropout, or pass dropout_p=... to "
                    "insert post-hoc dropout"
                )
        folds = len(self.list_of_parameters or [])
        if self._rate_in is not None and folds > 1 and "folds" not in self.uncertainty_sources:
            raise ValueError(
                "'rate_in' with several folds needs 'folds' as an uncertainty source (Rate-In tunes one network)"
            )
        if self.uncertainty_sources == ("folds",) and folds < 2:
            warnings.warn("'folds' is the only uncertainty source but a single fold is used: every sample is the "
                          "same, mutual information is 0", UserWarning)

    @property
    def _stochastic(self) -> bool:
        return any(s in self.uncertainty_sources for s in _STOCHASTIC)

    def _net(self) -> nn.Module:
        return getattr(self.network, "_orig_mod", self.network)

    @property
    def mi_meaning(self) -> MIMeaning:
        """Folds, dropout and mirrors all sample model or transformation parameters: MI is epistemic
        (MI(Y, theta) for folds and dropout, MI(Y, T) for mirroring, ValUES Appendix E)."""
        return MIMeaning.EPISTEMIC

    def _mirror_combinations(self, ndim: int) -> list[tuple[int, ...]]:
        axes = self.allowed_mirroring_axes if self.use_mirroring else None
        if not axes:
            return [()]
        if max(axes) > ndim - 3:
            raise ValueError(f"mirror axes {axes} do not match a {ndim}D input")
        axes = [a + 2 for a in axes]
        return [()] + [c for i in range(len(axes)) for c in itertools.combinations(axes, i + 1)]

    def _sampling_context(self) -> contextlib.AbstractContextManager:
        stack = contextlib.ExitStack()
        if "dropout" in self.uncertainty_sources:
            for net in self._ensemble if self._ensemble is not None else [self._net()]:
                stack.enter_context(enable_mc_dropout(net))
        if self._rate_in is not None:
            if self._ensemble is not None:
                raise ValueError(
                    "'rate_in' with several folds needs 'folds' as an uncertainty source (Rate-In tunes one network)"
                )
            stack.enter_context(self._rate_in.activate(self._net()))
        return stack

    def _seed_context(self) -> contextlib.AbstractContextManager:
        if self.seed is None:
            return contextlib.nullcontext()
        devices = [self.device] if self.device.type == "cuda" else []
        stack = contextlib.ExitStack()
        stack.enter_context(torch.random.fork_rng(devices=devices))
        torch.manual_seed(int(self.seed))
        return stack

    # ------------------------------------------------------------------ one window
    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        """One forward pass; with folds averaged in logit space (folds not a source) the mean over the folds."""
        if self._ensemble is None:
            return self.network(x)
        out = None
        for net in self._ensemble:
            o = net(x)
            out = o if out is None else out.add_(o)
        return out.div_(len(self._ensemble))

    @torch.inference_mode()
    def _internal_maybe_mirror_and_predict(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """Window statistics instead of nnU-Net's mean logits.

        For a window ``x`` ``(1, C_in, *patch)`` runs ``num_samples`` stochastic passes (1 without dropout) over
        every mirror, streams each sample's softmax into a :class:`SampleStats` and returns its moments
        ``{"pred": (1, C, *patch), "expected_entropy": (1, 1, *patch)[, "mean_sq"]}`` (float32) and, when the
        segmentation comes from logits, ``"logits"``: the mean logit over every pass, summed in the order stock
        nnU-Net sums its mirrors (identical values without dropout).
        """
        combos = self._mirror_combinations(x.ndim)
        mirror_samples = "mirroring" in self.uncertainty_sources
        passes = self.num_samples if self._stochastic else 1
        if self._rate_in is not None:
            self._rate_in.prepare(x, self._forward)  # one search pass per window: the Rate-In rates of this input
        stats = SampleStats(track_variance=K.VARIANCE.value in self.measures, accum_dtype=torch.float32,
                            validate=False)
        logit_sum = None
        for _ in range(passes):
            group = None
            for axes in combos:
                out = self._forward(torch.flip(x, axes) if axes else x)
                if axes:
                    out = torch.flip(out, axes)
                if mirror_samples:
                    stats.update(torch.softmax(out.float(), 1))
                elif len(combos) > 1:
                    group = out.float().clone() if group is None else group.add_(out.float())
                else:
                    group = out.float()
                if self._want_logits:
                    logit_sum = out if logit_sum is None else logit_sum.add_(out)
            if not mirror_samples:
                stats.update(torch.softmax(group / len(combos) if len(combos) > 1 else group, 1))
        result = stats.moments()
        if self._want_logits:
            result["logits"] = logit_sum.div_(passes * len(combos)) if passes * len(combos) > 1 else logit_sum
        return result

    # ------------------------------------------------------------------ stitching
    @torch.inference_mode()
    def _internal_predict_sliding_window_return_logits(  # type: ignore[override]
        self, data: torch.Tensor, slicers: list, do_on_device: bool = True
    ) -> dict[str, torch.Tensor]:
        """Blend the window statistics with nnU-Net's Gaussian weights into float32 buffers.

        Returns ``{"pred": (C, *shape), "expected_entropy": (1, *shape)[, "mean_sq"][, "logits"]}``; ``logits`` is
        blended exactly like stock nnU-Net (fp16 buffer and fp16 weight sum), the statistics in float32.
        """
        results_device = self.device if do_on_device else torch.device("cpu")
        n_classes = self.label_manager.num_segmentation_heads
        n_stat = 2 * n_classes + 1 if K.VARIANCE.value in self.measures else n_classes + 1
        stat_buf = weight = logit_buf = n_pred = None

        def producer(d: torch.Tensor, slh: list, q: Queue) -> None:
            for s in slh:
                q.put((torch.clone(d[s][None], memory_format=torch.contiguous_format).to(self.device), s))
            q.put("end")

        try:
            empty_cache(self.device)
            data = data.to(results_device)
            queue: Queue = Queue(maxsize=2)
            t = Thread(target=producer, args=(data, slicers, queue), daemon=True)
            t.start()
            shape = data.shape[1:]
            stat_buf = torch.zeros((n_stat, *shape), dtype=torch.float32, device=results_device)
            weight = torch.zeros(shape, dtype=torch.float32, device=results_device)
            if self._want_logits:
                logit_buf = torch.zeros((n_classes, *shape), dtype=torch.half, device=results_device)
                n_pred = torch.zeros(shape, dtype=torch.half, device=results_device)
            if self.use_gaussian:
                gaussian = compute_gaussian(tuple(self.configuration_manager.patch_size), sigma_scale=1.0 / 8,
                                            value_scaling_factor=10, device=results_device)
                gaussian32 = gaussian.float()
            else:
                gaussian = gaussian32 = 1
            with tqdm(desc=None, total=len(slicers), disable=not self.allow_tqdm) as pbar:
                while True:
                    item = queue.get()
                    if item == "end":
                        queue.task_done()
                        break
                    workon, sl = item
                    window = self._internal_maybe_mirror_and_predict(workon)
                    parts = [window[K.PRED.value], window[K.EXPECTED_ENTROPY.value]]
                    if n_stat > n_classes + 1:
                        parts.append(window[_MEAN_SQ])
                    mom = torch.cat(parts, 1)[0].to(results_device)
                    if self.use_gaussian:
                        mom *= gaussian32
                    stat_buf[sl] += mom
                    weight[sl[1:]] += gaussian32
                    if self._want_logits:
                        prediction = window["logits"][0].to(results_device)
                        if self.use_gaussian:
                            prediction *= gaussian
                        logit_buf[sl] += prediction
                        n_pred[sl[1:]] += gaussian
                    queue.task_done()
                    pbar.update()
            queue.join()
            stat_buf /= weight
            out = {K.PRED.value: stat_buf[:n_classes], K.EXPECTED_ENTROPY.value: stat_buf[n_classes:n_classes + 1]}
            if n_stat > n_classes + 1:
                out[_MEAN_SQ] = stat_buf[n_classes + 1:]
            if not torch.isfinite(stat_buf).all():
                raise RuntimeError("non-finite values in the stitched uncertainty statistics")
            if self._want_logits:
                torch.div(logit_buf, n_pred, out=logit_buf)
                if torch.any(torch.isinf(logit_buf)):
                    raise RuntimeError(
                        "Encountered inf in the stitched logits (fp16 overflow, as in stock nnU-Net); use "
                        "segmentation_from='probabilities'"
                    )
                out["logits"] = logit_buf
            return out
        except Exception:
            del stat_buf, weight, logit_buf, n_pred
            empty_cache(self.device)
            empty_cache(results_device)
            raise

    @torch.inference_mode()
    def predict_sliding_window_return_logits(self, input_image: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """Sliding-window statistics of one preprocessed image ``(C_in, *spatial)`` for the current network.

        Returns the dict of :meth:`_internal_predict_sliding_window_return_logits` with the padding removed.
        Dropout (when a source) is switched on after nnU-Net's ``network.eval()`` and restored afterwards.
        """
        if not isinstance(input_image, torch.Tensor) or input_image.ndim != 4:
            raise ValueError(
                "input_image must be a 4D torch.Tensor (c, x, y, z), got "
                f"{type(input_image).__name__} {tuple(getattr(input_image, 'shape', ()))}"
            )
        self.network = self.network.to(self.device)
        self.network.eval()
        empty_cache(self.device)
        autocast = torch.autocast(self.device.type, enabled=True) if self.device.type == "cuda" else dummy_context()
        with autocast, self._sampling_context():
            data, slicer_revert_padding = pad_nd_image(input_image, self.configuration_manager.patch_size,
                                                       "constant", {"value": 0}, True, None)
            slicers = self._internal_get_sliding_window_slicers(data.shape[1:])
            if self.perform_everything_on_device and self.device.type != "cpu":
                try:
                    out = self._internal_predict_sliding_window_return_logits(data, slicers, True)
                except torch.OutOfMemoryError:
                    print("Prediction on device ran out of memory. Moving the result buffers to the CPU")
                    empty_cache(self.device)
                    out = self._internal_predict_sliding_window_return_logits(data, slicers, False)
            else:
                out = self._internal_predict_sliding_window_return_logits(data, slicers,
                                                                         self.perform_everything_on_device)
            empty_cache(self.device)
            revert = (slice(None), *slicer_revert_padding[1:])
            return {k: v[revert] for k, v in out.items()}

    # ------------------------------------------------------------------ one case, all folds
    @torch.inference_mode()
    def predict_uncertainty_from_preprocessed_data(self, data: torch.Tensor) -> CaseUncertainty:
        """Statistics over every sample (folds x dropout x mirrors) of one preprocessed case ``(C_in, *spatial)``.

        With ``"folds"`` a source the folds run one after the other (nnU-Net's order; one set of weights on the
        device at a time) and their statistics merge; otherwise all folds' weights go to the device and are
        averaged in logit space inside every window. Results are on the CPU.
        """
        n_threads = torch.get_num_threads()
        torch.set_num_threads(default_num_processes if default_num_processes < n_threads else n_threads)
        try:
            with self._seed_context():
                return self._predict_case(data)
        finally:
            torch.set_num_threads(n_threads)

    def _predict_case(self, data: torch.Tensor) -> CaseUncertainty:
        params = list(self.list_of_parameters) if self.list_of_parameters else [None]
        per_pass = self.samples_per_window_for(2 + len(self.configuration_manager.patch_size))
        if self._rate_in is not None:
            self._rate_in.reset()
        if "folds" in self.uncertainty_sources or len(params) == 1:
            # every fold adds the same number of samples to every voxel, so the pooled statistics are the plain mean
            # of the folds' stitched moments (SampleStats.merge with equal counts), accumulated in place: one copy of
            # the statistics in memory instead of three
            moments: dict[str, torch.Tensor] | None = None
            logits = None
            for p in params:
                if p is not None:
                    self._net().load_state_dict(p)
                res = {k: v.to("cpu") for k, v in self.predict_sliding_window_return_logits(data).items()}
                fold_logits = res.pop("logits", None)
                if moments is None:
                    moments = res
                else:
                    for k, v in res.items():
                        moments[k].add_(v)
                if fold_logits is not None:
                    logits = fold_logits if logits is None else logits.add_(fold_logits)
            if len(params) > 1:
                for v in moments.values():
                    v.div_(len(params))
                if logits is not None:
                    logits /= len(params)
            n_samples = per_pass * (len(params) if "folds" in self.uncertainty_sources else 1)
            return CaseUncertainty(moments, logits, n_samples, self.uncertainty_sources, self._extras())
        self._ensemble = self._fold_networks(params)
        try:
            res = self.predict_sliding_window_return_logits(data)
        finally:
            self._ensemble = None
            empty_cache(self.device)
        res = {k: v.to("cpu") for k, v in res.items()}
        logits = res.pop("logits", None)
        return CaseUncertainty(res, logits, per_pass, self.uncertainty_sources, self._extras())

    def _extras(self) -> dict[str, Any]:
        """Per-case side information: the mean Rate-In rate of every layer over the windows (and folds)."""
        if self._rate_in is None:
            return {}
        rates = self._rate_in.extra_outputs().get("rate_in_rates", {})
        return {"rate_in_mean_rate": {k: float(v.float().mean()) for k, v in rates.items()}}

    def _fold_networks(self, params: list[dict]) -> list[nn.Module]:
        """One copy of the network per fold, on the device, in eval mode (post-hoc dropout hooks are copied too).

        Copies instead of ``torch.func.functional_call``: nnU-Net's blocks register some modules twice, and
        ``functional_call`` then leaves the swapped-in tensors in the network (torch 2.14).
        """
        nets = []
        for p in params:
            net = copy.deepcopy(self._net())
            net.load_state_dict(p)
            nets.append(net.to(self.device).eval())
        return nets

    def samples_per_window_for(self, ndim: int) -> int:
        """Samples per voxel and fold pass for a window of ``ndim`` dims (``(1, C_in, *patch)``)."""
        n = self.num_samples if self._stochastic else 1
        if "mirroring" in self.uncertainty_sources:
            n *= len(self._mirror_combinations(ndim))
        return n

    @torch.inference_mode()
    def predict_logits_from_preprocessed_data(self, data: torch.Tensor) -> torch.Tensor:
        """Stock contract: the mean logits (as nnU-Net computes them) of a preprocessed case."""
        want = self._want_logits
        self._want_logits = True
        try:
            return self.predict_uncertainty_from_preprocessed_data(data).logits
        finally:
            self._want_logits = want

    # ------------------------------------------------------------------ files and arrays
    def _export_kwargs(self) -> dict:
        return {
            "measures": self.measures,
            "segmentation_from": self.segmentation_from,
            "mi_meaning": self.mi_meaning.value,
        }

    def _write_config(self, folder: str) -> None:
        cfg = {
            "uncertainty_sources": list(self.uncertainty_sources),
            "num_samples": self.num_samples,
            "dropout_p": self.dropout_p,
            "rate_in": {k: (v if isinstance(v, (int, float, str, bool)) else repr(v))
                        for k, v in self.rate_in_options.items()},
            "posthoc_dropout_after": self._posthoc_sites,
            "measures": list(self.measures),
            "segmentation_from": self.segmentation_from,
            "seed": self.seed,
            "folds": len(self.list_of_parameters or []),
            "mirror_axes": list(self.allowed_mirroring_axes or []) if self.use_mirroring else [],
            "trainer_name": self.trainer_name,
            "tile_step_size": self.tile_step_size,
        }
        atomic_write_text(Path(folder) / "uncertainty_config.json", json.dumps(cfg, indent=2))

    def predict_from_data_iterator(
        self,
        data_iterator: Iterable[dict],
        save_probabilities: bool = False,
        num_processes_segmentation_export: int = default_num_processes,
    ) -> list:
        """Predict every case of ``data_iterator`` (dicts with ``data``, ``ofile``, ``data_properties``).

        Cases with an ``ofile`` are written by :func:`export_uncertainty` (in a pool of
        ``num_processes_segmentation_export`` spawned workers; 0 exports in this process) and their score
        records returned; cases without get the dict of :func:`convert_uncertainty_to_original_geometry`.
        """
        folders: set[str] = set()
        pool = None
        if num_processes_segmentation_export > 0:
            pool = multiprocessing.get_context("spawn").Pool(num_processes_segmentation_export)
        try:
            workers = list(pool._pool) if pool is not None else []
            pending: list = []
            for pre in data_iterator:
                data = pre["data"]
                if isinstance(data, str):
                    path = data
                    data = torch.from_numpy(np.load(path))
                    os.remove(path)
                ofile = pre["ofile"]
                properties = pre["data_properties"]
                if self.verbose:
                    print(f"\nPredicting {os.path.basename(ofile) if ofile else tuple(data.shape)}")
                if ofile is not None:
                    folder = os.path.dirname(ofile) or os.curdir
                    if folder not in folders:
                        os.makedirs(folder, exist_ok=True)
                        self._write_config(folder)
                        folders.add(folder)
                if pool is not None:
                    while check_workers_alive_and_busy(pool, workers, pending, allowed_num_queued=2):
                        sleep(0.1)
                result = self.predict_uncertainty_from_preprocessed_data(data).to_numpy()
                if ofile is not None:
                    fn, args = export_uncertainty, (result, properties, self.configuration_manager,
                                                    self.plans_manager, self.dataset_json, ofile, save_probabilities)
                else:
                    fn, args = convert_uncertainty_to_original_geometry, (
                        result, self.plans_manager, self.configuration_manager, self.label_manager, properties)
                kwargs = self._export_kwargs()
                if ofile is None:
                    kwargs.pop("mi_meaning")
                if pool is None:
                    pending.append(fn(*args, **kwargs))
                else:
                    pending.append(pool.apply_async(fn, args, kwargs))
            results = []
            for r in pending:
                if pool is None:
                    results.append(r)
                    continue
                while True:
                    if not all(w.is_alive() for w in workers):
                        raise RuntimeError("an export worker died (likely killed by the OS for lack of memory)")
                    try:
                        results.append(r.get(timeout=0.1))
                        break
                    except multiprocessing.TimeoutError:
                        pass
        finally:
            if pool is not None:
                pool.close()
                pool.join()
        if isinstance(data_iterator, MultiThreadedAugmenter):
            data_iterator._finish()
        for folder in folders:
            write_scores_table(folder)
        compute_gaussian.cache_clear()
        empty_cache(self.device)
        return results

    def _internal_get_data_iterator_from_lists_of_filenames(self, input_list_of_lists: list, seg_from_prev_stage_files,
                                                            output_filenames_truncated, num_processes: int):
        if num_processes == 0:
            return _sequential_iterator(self, input_list_of_lists, seg_from_prev_stage_files,
                                        output_filenames_truncated)
        return super()._internal_get_data_iterator_from_lists_of_filenames(
            input_list_of_lists, seg_from_prev_stage_files, output_filenames_truncated, num_processes)

    def predict_from_files_sequential(
        self,
        list_of_lists_or_source_folder: str | list[list[str]],
        output_folder_or_list_of_truncated_output_files: str | None | list[str],
        save_probabilities: bool = False,
        overwrite: bool = True,
        folder_with_segs_from_prev_stage: str | None = None,
    ) -> list:
        """Like ``predict_from_files`` without any worker process (preprocessing and export in this process)."""
        return self.predict_from_files(list_of_lists_or_source_folder, output_folder_or_list_of_truncated_output_files,
                                       save_probabilities=save_probabilities, overwrite=overwrite,
                                       num_processes_preprocessing=0, num_processes_segmentation_export=0,
                                       folder_with_segs_from_prev_stage=folder_with_segs_from_prev_stage)

    def predict_uncertainty_npy(
        self,
        input_image: np.ndarray,
        image_properties: dict,
        segmentation_previous_stage: np.ndarray | None = None,
        output_file_truncated: str | None = None,
        save_probabilities: bool = False,
    ) -> dict:
        """Predict one image array ``(C_in, *spatial)`` read with the dataset's reader (``properties`` from it).

        Returns the dict of :func:`convert_uncertainty_to_original_geometry` (segmentation, probabilities, maps in
        the image's geometry), or, with ``output_file_truncated``, writes the files and returns the score record.
        """
        from nnunetv2.inference.data_iterators import PreprocessAdapterFromNpy

        ppa = PreprocessAdapterFromNpy([input_image], [segmentation_previous_stage], [image_properties],
                                       [output_file_truncated], self.plans_manager, self.dataset_json,
                                       self.configuration_manager, num_threads_in_multithreaded=1,
                                       verbose=self.verbose)
        return self.predict_from_data_iterator([next(ppa)], save_probabilities, 0)[0]


# ------------------------------------------------------------------------------------------ temperature scaling
def _seg_layer_name(network: nn.Module) -> str | None:
    seg_layers = getattr(getattr(network, "decoder", None), "seg_layers", None)
    if isinstance(seg_layers, nn.ModuleList) and len(seg_layers):
        return f"decoder.seg_layers.{len(seg_layers) - 1}"
    return None


def calibrate_model_folder(
    model_training_output_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    use_folds: Sequence[int | str] = (0,),
    checkpoint_name: str = "checkpoint_final.pth",
    preprocessed_dir: str | os.PathLike | None = None,
    mode: str = "scalar",
    loss: str = "nll",
    use_mirroring: bool = True,
    device: torch.device = torch.device("cpu"),  # noqa: B008
    **scaler_kwargs: Any,
) -> dict[str, dict]:
    """Fit a temperature per fold on that fold's nnU-Net validation cases and fold it into a copy of the model.

    For each fold, the validation cases of ``splits_final.json`` (the cases nnU-Net validates the fold on) are
    predicted from nnU-Net's preprocessed data with the fold's network (stock logit averaging over the mirrors),
    and :class:`monai_unc.calibration.TemperatureScaler` (Kock et al.: RMSprop from t = 2; ``mode``, ``loss`` and
    ``scaler_kwargs`` as there) is fitted on every voxel of them against the preprocessed reference
    (voxels outside nnU-Net's non-zero crop, label -1, and the ignore label are left out). The temperature is then
    folded into the fold's segmentation layer (weights and bias divided by t) in a copy of the model folder at
    ``output_dir`` (plans, dataset and fingerprint copied; ``temperature.json`` records every fold's t and the
    validation NLL at t = 1 and after fitting). Predict from the copy as from the original (``-m output_dir``).
    A scalar t keeps every segmentation; it changes the probabilities and thereby every uncertainty map.

    Returns ``{fold: {"temperature": [...], "nll_t1": ..., "nll_fitted": ..., "num_cases": ...}}``.
    """
    import shutil

    from nnunetv2.training.dataloading.nnunet_dataset import infer_dataset_class

    src, dst = Path(model_training_output_dir), Path(output_dir)
    if src.resolve() == dst.resolve():
        raise ValueError("output_dir must differ from the model folder: the calibrated checkpoints are a copy")
    plans = json.loads((src / "plans.json").read_text())
    base = preprocessed_dir if preprocessed_dir is not None else os.environ.get("nnUNet_preprocessed")
    if base is None:
        raise ValueError("preprocessed_dir is not given and the environment variable nnUNet_preprocessed is not set")
    pre_base = Path(base) / plans["dataset_name"]
    splits_file = pre_base / "splits_final.json"
    if not splits_file.is_file():
        raise FileNotFoundError(f"{splits_file} not found: the validation split of the folds is needed")
    splits = json.loads(splits_file.read_text())
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("plans.json", "dataset.json", "dataset_fingerprint.json"):
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)
    report: dict[str, dict] = {}
    for fold in use_folds:
        fold_key = "all" if fold == "all" else int(fold)
        if fold_key == "all":
            raise ValueError("fold 'all' has no held-out validation cases to fit a temperature on")
        if fold_key >= len(splits):
            raise ValueError(f"fold {fold_key} is not in {splits_file} ({len(splits)} splits)")
        predictor = nnUNetPredictor(use_mirroring=use_mirroring, device=device, allow_tqdm=False)
        with _ext_trainer_path(trainer_dir()):
            predictor.initialize_from_trained_model_folder(str(src), (fold_key,), checkpoint_name)
        lm = predictor.label_manager
        if lm.has_regions:
            raise ValueError("temperature scaling of region-based (sigmoid) models is not supported")
        folder = pre_base / predictor.configuration_manager.data_identifier
        keys = splits[fold_key]["val"]
        dataset = infer_dataset_class(str(folder))(str(folder), keys)
        logits, labels = [], []
        for k in keys:
            data, seg, _, _ = dataset.load_case(k)
            z = predictor.predict_logits_from_preprocessed_data(torch.from_numpy(np.asarray(data[:])))
            y = torch.from_numpy(np.asarray(seg[:])[0].astype(np.int64))
            y[y < 0] = -1
            if lm.has_ignore_label:
                y[y == lm.ignore_label] = -1
            logits.append(z.to(torch.float16)[None])
            labels.append(y[None])
        scaler = TemperatureScaler(mode=mode, loss=loss, ignore_index=-1, **scaler_kwargs).fit(logits, labels)
        nll_t1 = TemperatureScaler(mode=mode, loss="nll", ignore_index=-1, init_temperature=1.0,
                                   num_classes=scaler.num_classes).loss_and_grad(logits, labels)[0]
        fitted = TemperatureScaler(mode=mode, loss="nll", ignore_index=-1, num_classes=scaler.num_classes)
        fitted.temperature = scaler.temperature.clone()
        nll_fit = fitted.loss_and_grad(logits, labels)[0]
        ckpt = torch.load(src / f"fold_{fold_key}" / checkpoint_name, map_location="cpu", weights_only=False)
        net = copy.deepcopy(predictor.network).cpu().eval()
        net.load_state_dict(ckpt["network_weights"])
        example = torch.randn(1, _input_channels(predictor), *predictor.configuration_manager.patch_size)
        scaler.fold_into(net, layer=_seg_layer_name(net), example_input=example)
        folded = net.state_dict()
        ckpt["network_weights"] = {k: folded[k].clone() for k in ckpt["network_weights"]}
        ckpt["monai_unc_temperature"] = scaler.temperature.tolist()
        (dst / f"fold_{fold_key}").mkdir(parents=True, exist_ok=True)
        tmp = dst / f"fold_{fold_key}" / f".partial_{checkpoint_name}"
        torch.save(ckpt, tmp)
        os.replace(tmp, dst / f"fold_{fold_key}" / checkpoint_name)
        report[str(fold_key)] = {"temperature": scaler.temperature.tolist(), "nll_t1": nll_t1,
                                 "nll_fitted": nll_fit, "num_cases": len(keys), "converged": scaler.converged}
    atomic_write_text(dst / "temperature.json", json.dumps({"mode": mode, "loss": loss, "folds": report}, indent=2))
    return report


def _input_channels(predictor: nnUNetPredictor) -> int:
    """Number of input channels of the predictor's network (image channels, plus one-hot previous stage)."""
    from nnunetv2.utilities.label_handling.label_handling import determine_num_input_channels

    return determine_num_input_channels(predictor.plans_manager, predictor.configuration_manager,
                                        predictor.dataset_json)
