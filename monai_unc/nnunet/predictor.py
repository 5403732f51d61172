"""``UncertaintyPredictor``: nnU-Net v2's predictor with per-sample softmax statistics and uncertainty maps.

Stock ``nnUNetPredictor`` averages every forward pass in *logit* space: the 2^k mirrored passes are summed in
place inside ``_internal_maybe_mirror_and_predict``, the folds one after the other in
``predict_logits_from_preprocessed_data``, and the sliding windows are blended into an fp16 buffer with one
channel per class. Nothing of the individual samples survives. This subclass turns each forward pass of a chosen
*uncertainty source* into a probability sample:

- ``"folds"``: each fold's network is a sample (deep ensemble; MI(Y, theta), epistemic);
- ``"mirroring"``: each of the 2^k mirrored passes is a sample (TTA; MI(Y, T), ValUES Appendix E);
- ``"dropout"``: ``num_samples`` Monte-Carlo dropout passes, dropout switched on again after nnU-Net's
  ``network.eval()`` (trained dropout, or post-hoc dropout with ``dropout_p``; MI(Y, theta));
- ``"rate_in"``: ``num_samples`` dropout passes with Rate-In rates (Zeevi et al., CVPR 2025), searched once per
  window on the un-mirrored window by :class:`~monai_unc.inferers.rate_in.RateInSource` (the network's dropout is
  converted, or Rate-In is inserted after every encoder/decoder stage when it has none);
- ``"ssn"``: ``num_samples`` latent draws per window of a Stochastic Segmentation Network
  (:class:`~monai_unc.nnunet.trainers.nnUNetTrainerSSN`; the head is switched into sampling mode with
  :func:`~monai_unc.networks.ssn_sampling`, each forward pass one draw; MI(Y, Z), aleatoric, ValUES Appendix D).
  Combined with ``"dropout"`` each pass draws a dropout mask and a latent sample (MI mixed).

Sources multiply: folds x stochastic passes x mirrors forward passes per window. Axes that are *not* sources are
averaged in logit space first, as stock nnU-Net does (mirroring not a source: each sample is the softmax of the mean
logit over the mirrors, every mirror drawing its dropout masks / SSN latent noise from the same random state, so that
one sample is one network; folds not a source: each sample is the softmax of the mean logit over the folds, computed
per window with one copy of the network per fold on the device).

Per window, every sample's softmax streams into a :class:`~monai_unc.stats.SampleStats` (float32 within the
window); the window's moments, mean probabilities (C channels), mean entropy (1) and, for ``variance``, mean
squared probabilities (C; with ``window_disagreement="separate"`` the window's own variance, turned back into a
second moment after stitching, so the variance map is the blend of the windows' variances), are blended with
nnU-Net's Gaussian weights into float32 buffers. Blending is a
convex combination per voxel, so predictive entropy, mutual information and one_minus_max_prob derived after stitching
are exact functions of the blended moments (docs/design.md, "Streaming statistics"). Folds processed one after
the other (nnU-Net's memory-saving order) contribute equal numbers of samples per voxel, so their statistics
pool exactly as the mean of their stitched moments.

Window disagreement (``window_disagreement="separate"``, default): each window also returns its predictive entropy
``H(m_w)``, blended like the moments, and ``PE = EE + MI + WD`` with ``WD = H(pred) - blend_w H(m_w)`` computed by
:func:`~monai_unc.stats.window_disagreement_from_stitched` (the MONAI inferers' decomposition), so that
a deterministic model has MI = 0 exactly with overlapping windows. With the folds as a source, WD is the mean of
the folds' own window disagreements and their mutual disagreement stays in MI. ``"mutual_information"`` keeps
the former behaviour (MI = PE - EE, window disagreement included).

Region-based models (``label_manager.has_regions``: nnU-Net's ``regions_class_order``): every sample is a sigmoid
per region, each region an independent Bernoulli variable (``SampleStats(multilabel=True)``); the expected entropy
and every map have one channel per region. The segmentation and ``.npz`` are stock nnU-Net's (regions painted in
``regions_class_order``), the maps are written as 4D files (:mod:`monai_unc.nnunet.export`).

Segmentation: ``segmentation_from="logits"`` (default) also stitches the mean *logits* of every fold exactly as
stock nnU-Net does (the same fp16 buffers and order of operations, one buffer per fold when the folds run side by
side) and combines the folds as stock does (sum of the stitched fold logits in fp16, divided by their number), so
without dropout the segmentation equals stock nnU-Net's bit for bit for the same folds and mirrors, whichever of
them are sources, and with ``"ssn"`` the only stochastic source (one more pass per mirror with the SSN heads'
sampling off: the mean logits stock segments with). With ``"dropout"`` / ``"rate_in"`` the logits are the mean
over the stochastic passes too: the segmentation is that of the mean over the samples, not stock's.
``"probabilities"`` takes the argmax of the mean probabilities instead. Geometry and files:
:mod:`monai_unc.nnunet.export`.

Extension points. nnU-Net offers no hook for per-sample outputs, so four *private* methods of
``nnUNetPredictor`` are overridden (supported nnU-Net versions: :mod:`monai_unc.nnunet.environment`):

- ``_internal_maybe_mirror_and_predict``: the only place where the individual mirrored passes exist; returns
  the window's statistics (and per-fold mean logits) instead of the mean logit.
- ``_internal_predict_sliding_window_return_logits``: stock blends one fp16 tensor of C channels; the statistics
  need float32 buffers of their own next to the fp16 logits.
- ``_manage_input_and_output_lists``: ``--continue_prediction`` counts a case as done only when its
  uncertainty maps and record exist, not the segmentation alone
  (:func:`~monai_unc.nnunet.export.case_exported`).
- ``_internal_get_data_iterator_from_lists_of_filenames``: ``-npp 0`` preprocesses in the calling process
  (stock always spawns at least one worker).

The public methods ``predict_sliding_window_return_logits`` (a dict instead of a tensor; dropout switched on
after nnU-Net's ``network.eval()``), ``predict_logits_from_preprocessed_data`` (the folds' order),
``predict_from_data_iterator`` and ``predict_from_files_sequential`` (export through
:func:`~monai_unc.nnunet.export.export_uncertainty`) are overridden as well; initialisation and ``predict_from_files``
only add checks (folds, cascade inputs).

This module uses absolute imports only: nnU-Net imports the modules of the ``nnUNet_extTrainer`` folder as
top-level modules.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import json
import math
import multiprocessing
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from queue import Queue
from threading import Thread
from time import sleep
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from acvl_utils.cropping_and_padding.padding import pad_nd_image
from batchgenerators.dataloading.multi_threaded_augmenter import MultiThreadedAugmenter
from nnunetv2.configuration import default_num_processes
from nnunetv2.imageio.reader_writer_registry import determine_reader_writer_from_dataset_json
from nnunetv2.imageio.tif_reader_writer import Tiff3DIO
from nnunetv2.inference.data_iterators import PreprocessAdapterFromNpy
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor
from nnunetv2.inference.sliding_window_prediction import compute_gaussian
from nnunetv2.utilities.file_path_utilities import check_workers_alive_and_busy
from nnunetv2.utilities.helpers import dummy_context, empty_cache
from nnunetv2.utilities.label_handling.label_handling import convert_labelmap_to_one_hot
from nnunetv2.utilities.plans_handling.plans_handler import ConfigurationManager, PlansManager
from torch import nn
from tqdm import tqdm

from monai_unc._utils import (
    check_sample_batch_size,
    check_seed,
    compiled_draws_context,
    cuda_device_indices,
    is_int,
    is_real,
    network_devices,
    plain_module,
    seeded_rng,
    tensors_equal,
)
from monai_unc.io import (
    atomic_write_json,
    channel_name,
    check_case_ids_fit_folder,
    check_regions_class_order,
    colliding_case_ids,
    json_safe,
    read_json_or_none,
    weight_digests,
)
from monai_unc.io.cases import changed_inputs, check_finite_image, input_digests, settings_changes
from monai_unc.keys import MIMeaning, UncertaintyKeys, combine_mi_meanings, did_you_mean
from monai_unc.measures import entropy_map_t
from monai_unc.networks.dropout import align_fused_attention, enable_mc_dropout, find_dropout_layers
from monai_unc.networks.shared import SharedPasses, SharingUnavailable, sample_batch
from monai_unc.networks.ssn import find_ssn_heads, mirrored_ssn_noise, ssn_sampling
from monai_unc.nnunet.dropout import add_posthoc_dropout
from monai_unc.nnunet.environment import ext_trainer_path, trainer_dir
from monai_unc.nnunet.export import (
    DEFAULT_MEASURES,
    MEAN_SQ,
    UNCERTAINTY_FOLDER,
    WINDOW_ENTROPY,
    CaseUncertainty,
    case_exported,
    case_scores,
    check_region_file_names,
    convert_uncertainty_to_original_geometry,
    export_uncertainty,
    read_case_record,
    recorded_case_settings,
    region_definitions,
    sidecar_record_clashes,
    write_float_map,
    write_scores_table,
)
from monai_unc.nnunet.names import MAP_MEASURES, SOURCES, STOCHASTIC_SOURCES
from monai_unc.scores import region_suffixes
from monai_unc.stats import WINDOW_DISAGREEMENT_MODES, SampleStats, add_squares

if TYPE_CHECKING:
    from monai_unc.nnunet.calibrate import calibrate_model_folder

__all__ = [
    "SOURCES",
    "UncertaintyPredictor",
    "check_case_channels",
    "check_finite_inputs",
    "check_checkpoint_name",
    "check_npy_case",
    # defined in monai_unc.nnunet.export / .calibrate / .environment, importable from here as before
    "MAP_MEASURES",
    "DEFAULT_MEASURES",
    "CaseUncertainty",
    "convert_uncertainty_to_original_geometry",
    "export_uncertainty",
    "case_scores",
    "write_float_map",
    "write_scores_table",
    "trainer_dir",
    "calibrate_model_folder",
]

K = UncertaintyKeys


def __getattr__(name: str) -> Any:
    # calibrate_model_folder is importable from here as before; loaded on first use, since temperature scaling
    # brings the metrics (and MONAI) that prediction does not need
    if name == "calibrate_model_folder":
        from monai_unc.nnunet.calibrate import calibrate_model_folder

        return calibrate_model_folder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: entries of ``uncertainty_config.json`` that are not compared per case (see ``UncertaintyPredictor.case_settings``)
_NOT_CASE_SETTINGS = ("measures", "model_folder")


def _previous_stage_change(record: Any, prev: str | None) -> str | None:
    """How a case's previous-stage segmentation differs from the one its record says it was predicted from.

    The record's ``prev_stage_digests`` (:func:`~monai_unc.io.input_digests` of the file) against ``prev``
    (:func:`~monai_unc.io.changed_inputs`: a copy with the same content is the same). A cascade's record without
    them (written by an earlier version) counts as changed, as a record without ``settings`` does.

    Args:
        record: the case record ``uncertainty/<case>.json`` (anything else: no record).
        prev: the case's previous-stage segmentation now (None: no cascade).

    Returns:
        One line naming the difference, or None when the previous stage is the recorded one (or neither has one).
    """
    saved = record.get("prev_stage_digests") if isinstance(record, dict) else None
    if prev is None:
        return None if saved is None else "previous-stage segmentation recorded -> none"
    name = os.path.basename(prev)
    if not isinstance(saved, list):
        return f"previous-stage segmentation not recorded (an earlier version) -> {name}"
    if changed_inputs([prev], {"input_digests": saved}):
        return f"previous-stage segmentation {name} changed (-prev_stage_predictions)"
    return None


def _sequential_iterator(
    predictor: nnUNetPredictor,
    list_of_lists: Sequence[Sequence[str]],
    segs_prev: Sequence[str | None] | None,
    ofiles: Sequence[str | None] | None,
) -> Iterator[dict]:
    """nnU-Net's ``preprocess_fromfiles_save_to_queue`` in the calling process (no worker, no queue)."""
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


class _RandomState:
    """The torch random state of the CPU and of the CUDA ``devices`` at construction; :meth:`restore` goes back to it.

    The mirrored passes of one stochastic sample draw their dropout masks / SSN latent noise from the same state, so
    that the sample is one network seen through every mirror (the draws have the same shapes in every mirror). The
    devices are the input's and those of the networks' weights (:func:`~monai_unc._utils.network_devices`): a network
    spread over two GPUs draws on both, and a state kept for the input's GPU only gave the mirrors of one sample
    other masks on the second in earlier versions.
    """

    def __init__(self, *devices: torch.device) -> None:
        self.devices = [torch.device("cuda", i) for i in cuda_device_indices(devices)]
        self.cpu = torch.random.get_rng_state()
        self.gpu = [torch.cuda.get_rng_state(d) for d in self.devices]

    def restore(self) -> None:
        """Set the random state back to the one captured."""
        torch.random.set_rng_state(self.cpu)
        for d, state in zip(self.devices, self.gpu):
            torch.cuda.set_rng_state(state, d)


#: the JSON files nnU-Net and monai-unc keep in an output folder, by their case-folded names: a case's segmentation
#: spacing file (``Tiff3DIO``: ``<case>.json``) may not be one of them
_OUTPUT_FOLDER_JSON = {n.casefold(): n for n in ("dataset.json", "plans.json", "predict_from_raw_data_args.json",
                                                  "uncertainty_config.json")}


def _writes_spacing_files(reader_writer_class: Any) -> bool:
    """Whether nnU-Net's reader/writer class writes a ``<name>.json`` spacing file beside each image (``Tiff3DIO``)."""
    return isinstance(reader_writer_class, type) and issubclass(reader_writer_class, Tiff3DIO)


class UncertaintyPredictor(nnUNetPredictor):
    """nnU-Net v2 predictor that samples folds / mirrors / dropout passes and writes uncertainty maps.

    See the module docstring for what is sampled and how it is stitched. Use it like ``nnUNetPredictor``::

        predictor = UncertaintyPredictor(uncertainty_sources=("folds", "mirroring"), device=torch.device("cuda"))
        predictor.initialize_from_trained_model_folder(model_dir, use_folds=(0, 1, 2, 3, 4))
        predictor.predict_from_files(input_dir, output_dir, save_probabilities=False)

    Output folder: the segmentations (``<case><ending>``) as nnU-Net writes them, ``uncertainty/<case>_<measure>
    <ending>`` float32 maps, ``uncertainty/<case>.json`` case records, ``uncertainty_scores.csv`` (all cases) and
    ``uncertainty_config.json``. ``save_probabilities`` writes ``<case>.npz`` with the probabilities whose argmax
    is the segmentation (see :func:`~monai_unc.nnunet.export.convert_uncertainty_to_original_geometry`).

    Args:
        uncertainty_sources: any non-empty combination of ``"folds"``, ``"mirroring"`` and one of ``"dropout"`` /
            ``"rate_in"``, and ``"ssn"`` (not with ``"rate_in"``) for an SSN model.
        num_samples: stochastic passes per window (``"dropout"``, ``"rate_in"``, ``"ssn"``; Zeevi et al. uses 30
            dropout passes, ValUES 10 SSN draws); ignored without them.
        dropout_p: insert post-hoc dropout with this rate after every encoder/decoder stage of the trained network
            (no retraining; :func:`~monai_unc.nnunet.dropout.add_posthoc_dropout`). ``None`` samples the dropout the
            network was trained with (plans variant or ``nnUNetTrainerMCDropout``).
        measures: maps to write, distinct names from :data:`MAP_MEASURES` (``variance`` stitches C more channels;
            ``window_disagreement`` only with ``window_disagreement="separate"``).
        segmentation_from: ``"logits"`` (stock nnU-Net's segmentation, exactly, without dropout) or
            ``"probabilities"``.
        rate_in: keyword arguments of :class:`~monai_unc.inferers.rate_in.RateInSource` for ``"rate_in"``
            (``target_loss``, ``loss``, ``placement``, controller settings).
        seed: seed for the dropout masks and SSN draws of every case (``None``: the global RNG); the global RNG
            state is kept.
        window_disagreement: ``"separate"`` (default; MI excludes the disagreement between overlapping windows,
            which is the ``window_disagreement`` map) or ``"mutual_information"`` (counted in MI, as before).
        share_passes: with ``"dropout"`` / ``"rate_in"``, compute once per window, mirror and fold network what the
            stochastic passes share and run only the part downstream of the random draws for every pass, several at
            a time (:class:`~monai_unc.inferers.SharedPasses`; exact; on by default). ``False``: full passes.
        sample_batch_size: passes per chunk with ``share_passes``: ``"auto"`` (no more memory than the traced pass
            or a tenth of the case's stitched buffers, see :func:`~monai_unc.networks.shared.auto_sample_batch`) or an
            integer ``k``. A window's first chunk is its traced pass and ``k - 1`` passes replayed at once; every later
            chunk replays ``k - 1`` passes from the same trace (each replay batch holds ``k - 1`` samples).

    The remaining arguments are ``nnUNetPredictor``'s.

    Example:
        >>> predictor = UncertaintyPredictor(("folds", "dropout"), num_samples=8, dropout_p=0.1,
        ...                                  device=torch.device("cpu"))  # nnU-Net prints on a CPU:
        perform_everything_on_device=True is only supported for cuda devices! Setting this to False
        >>> predictor.uncertainty_sources, predictor.mi_meaning.value
        (('folds', 'dropout'), 'epistemic')
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
        window_disagreement: str = "separate",
        tile_step_size: float = 0.5,
        use_gaussian: bool = True,
        use_mirroring: bool = True,
        perform_everything_on_device: bool = True,
        device: torch.device = torch.device("cuda"),  # noqa: B008 (nnU-Net's signature)
        verbose: bool = False,
        verbose_preprocessing: bool = False,
        allow_tqdm: bool = True,
        share_passes: bool = True,
        sample_batch_size: int | str = "auto",
    ) -> None:
        if not isinstance(share_passes, bool):
            raise TypeError(f"share_passes must be True or False, got {share_passes!r}")
        sample_batch_size = check_sample_batch_size(sample_batch_size)
        if isinstance(uncertainty_sources, str):
            uncertainty_sources = (uncertainty_sources,)
        sources = tuple(uncertainty_sources)
        if not sources:
            raise ValueError(f"uncertainty_sources must name at least one of {SOURCES}")
        bad = [s for s in sources if s not in SOURCES]
        if bad or len(set(sources)) != len(sources):
            raise ValueError(f"uncertainty_sources must be distinct names from {SOURCES}, got {sources}")
        if "dropout" in sources and "rate_in" in sources:
            raise ValueError("uncertainty_sources may hold 'dropout' or 'rate_in', not both (two dropout schemes)")
        if "ssn" in sources and "rate_in" in sources:
            raise ValueError("uncertainty_sources may not combine 'ssn' with 'rate_in' (compose SSN with 'dropout')")
        if window_disagreement not in WINDOW_DISAGREEMENT_MODES:
            raise ValueError(
                f"window_disagreement must be one of {WINDOW_DISAGREEMENT_MODES}, got {window_disagreement!r}"
            )
        if rate_in is not None and "rate_in" not in sources:
            raise ValueError("rate_in options are only used with the 'rate_in' uncertainty source")
        if "mirroring" in sources and not use_mirroring:
            raise ValueError("uncertainty_sources contains 'mirroring' but use_mirroring=False")
        if not is_int(num_samples) or num_samples < 1:  # a numpy integer too (it was refused)
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
        num_samples = int(num_samples)
        if dropout_p is not None and "dropout" not in sources:
            raise ValueError("dropout_p is only used with the 'dropout' uncertainty source")
        if dropout_p is not None and not (0.0 < float(dropout_p) < 1.0):
            raise ValueError(f"dropout_p must be in (0, 1), got {dropout_p!r}")
        if isinstance(measures, str):
            measures = (measures,)
        try:
            measures = tuple(K(m).value for m in measures)
        except ValueError:
            measures = tuple(str(m) for m in measures)
        if not measures or any(m not in MAP_MEASURES for m in measures):
            unknown = next((m for m in measures if m not in MAP_MEASURES), "")
            raise ValueError(f"measures must be a non-empty subset of {list(MAP_MEASURES)}, got {measures}"
                             + did_you_mean(unknown, MAP_MEASURES))
        if len(set(measures)) != len(measures):
            # one map file per measure: a repeated one was recorded twice in uncertainty_config.json, and a later run
            # naming it once counted as other settings
            raise ValueError(f"measures names a measure more than once: {measures}")
        if segmentation_from not in ("logits", "probabilities"):
            raise ValueError(f"segmentation_from must be 'logits' or 'probabilities', got {segmentation_from!r}")
        if K.WINDOW_DISAGREEMENT.value in measures and window_disagreement != "separate":
            raise ValueError("measures asks for 'window_disagreement' but window_disagreement='mutual_information' "
                             "counts it in the mutual information")
        if not isinstance(device, torch.device):
            raise TypeError(f"device must be a torch.device, got {type(device).__name__}")
        # a float was truncated by int() (1.5 drew seed 1's masks while the record said 1.5), a string failed at the
        # first case; -1 drew the masks of 2**64 - 1 and 2**64 failed at the first case
        seed = check_seed(seed)
        if not any(s in STOCHASTIC_SOURCES for s in sources):
            # found by hostile review: with folds / mirroring alone nothing is drawn, yet --seed was accepted silently
            # and recorded, so another seed made --continue_prediction predict every case again for the same maps
            unused = [f"{n}={v!r}" for n, v, d in (("seed", seed, None), ("num_samples", num_samples, 10)) if v != d]
            if unused:
                warnings.warn(f"{', '.join(unused)} has no effect with uncertainty sources {', '.join(sources)}, which "
                              f"draw nothing (only {', '.join(STOCHASTIC_SOURCES)} do; nnunet-predict: --seed, "
                              "--num_samples): not recorded", UserWarning, stacklevel=2)
        if not is_real(tile_step_size) or not (0.0 < float(tile_step_size) <= 1.0):
            # stock nnU-Net asserts this only when the first case reaches the sliding window (np.float32(0.5) was
            # refused)
            raise ValueError(f"tile_step_size must be in (0, 1] (a fraction of the patch), got {tile_step_size!r}")
        if isinstance(tile_step_size, (np.integer, np.floating)):
            tile_step_size = tile_step_size.item()  # recorded in uncertainty_config.json as a plain number
        super().__init__(tile_step_size, use_gaussian, use_mirroring, perform_everything_on_device, device, verbose,
                         verbose_preprocessing, allow_tqdm)
        self.uncertainty_sources = sources
        self.num_samples = num_samples
        self.dropout_p = None if dropout_p is None else float(dropout_p)
        self.measures = measures
        self.segmentation_from = segmentation_from
        self.seed = seed
        self.window_disagreement = window_disagreement
        self._multilabel = False
        self._rate_in = None
        if "rate_in" in sources:
            # the Rate-In source is a MONAI inferer's sample source: MONAI is loaded only when Rate-In is asked for
            from monai_unc.inferers.rate_in import RateInSource

            self._rate_in = RateInSource(num_samples, **(rate_in or {}))
        self.rate_in_options = dict(rate_in or {})
        self._want_logits = segmentation_from == "logits"
        self._ensemble: list[nn.Module] | None = None
        self._posthoc_sites: list[str] = []
        self.share_passes = share_passes
        # whether the cases get <case>.npz / <case>.pkl: a setting of the call, recorded with the case (review 63)
        self._save_probabilities = False
        self.sample_batch_size = sample_batch_size
        self._case_voxels = 0
        self._share_note: str | None = None

    # ------------------------------------------------------------------ initialisation
    def initialize_from_trained_model_folder(
        self,
        model_training_output_dir: str,
        use_folds: tuple[int | str, ...] | None,
        checkpoint_name: str = "checkpoint_final.pth",
    ) -> None:
        """As nnU-Net's, with this package's trainers findable without setting ``nnUNet_extTrainer``.

        The model folder, checkpoint, folds, the digests of the files that make the predictions and (for a folder
        written by ``nnunet-calibrate``) the temperature each used fold's checkpoint carries are recorded in
        ``uncertainty_config.json``, the fingerprint ``monai-unc triage`` compares. Then the sources are checked
        against the network (see Raises).

        Args:
            model_training_output_dir: the trained model folder (``plans.json``, ``dataset.json``, ``fold_<f>/``).
            use_folds: the folds to load; None: every ``fold_<k>`` folder with the checkpoint but ``fold_all``, as
                nnU-Net picks them.
            checkpoint_name: the checkpoint file of each fold.

        Raises:
            ValueError: ``plans.json`` or ``dataset.json`` is no valid JSON object, ``dataset.json`` lacks
                ``labels``, ``file_ending`` or ``channel_names``, a checkpoint cannot be read or names a configuration
                that ``plans.json`` lacks (one line naming the file; nnU-Net failed with a traceback),
                ``checkpoint_name`` holds a folder (:func:`check_checkpoint_name`), ``use_folds``
                is empty or names a fold twice (a repeated fold would count as two ensemble
                members), a fold is neither ``"all"`` nor an integer >= 0, the folds' checkpoints disagree on the
                trainer, configuration, mirroring axes or plans they were trained with (nnU-Net would build every fold's
                network from the first fold's), ``"ssn"`` without an SSN head, ``"mirroring"`` for a model trained
                without mirroring, ``"dropout"`` without dropout in the network and no ``dropout_p``, or ``"rate_in"``
                with several folds but without ``"folds"``.
        """
        if use_folds is not None:
            use_folds = check_folds(use_folds)
        check_checkpoint_name(checkpoint_name)
        temperatures = check_model_files(model_training_output_dir, use_folds, checkpoint_name)
        with ext_trainer_path():
            super().initialize_from_trained_model_folder(model_training_output_dir, use_folds, checkpoint_name)
        self._model_identity = _model_identity(model_training_output_dir, use_folds, checkpoint_name, temperatures)
        self._after_initialization()

    def manual_initialization(self, network: nn.Module, plans_manager: PlansManager,
                              configuration_manager: ConfigurationManager, parameters: list[dict] | None,
                              dataset_json: dict, trainer_name: str,
                              inference_allowed_mirroring_axes: tuple[int, ...] | None) -> None:
        """As nnU-Net's (a network and its plans given directly), then the checks of the folder route.

        The checks are those of :meth:`initialize_from_trained_model_folder`.

        Args:
            network: the network.
            plans_manager: its plans.
            configuration_manager: its configuration.
            parameters: one state dict per fold (None: the network's own weights).
            dataset_json: the dataset's ``dataset.json``.
            trainer_name: the trainer class name it was trained with.
            inference_allowed_mirroring_axes: the axes mirroring may flip (None or empty: no mirroring).

        Raises:
            ValueError: as :meth:`initialize_from_trained_model_folder`.
        """
        super().manual_initialization(network, plans_manager, configuration_manager, parameters, dataset_json,
                                      trainer_name, inference_allowed_mirroring_axes)
        self._after_initialization()

    def _after_initialization(self) -> None:
        # region-based models: sigmoid per region, each region an independent Bernoulli variable
        self._multilabel = bool(self.label_manager.has_regions)
        if self._multilabel:  # the regions name the score columns (as in evaluate): refused here, not at the first case
            region_suffixes(region_definitions(self.dataset_json))
            # review 67: an order against the nesting of the regions makes nnU-Net's label maps wrong: warned once
            check_regions_class_order(region_definitions(self.dataset_json), self.label_manager.regions_class_order,
                                      "the model's dataset.json")
        if self._multilabel and self.dataset_json.get("file_ending") not in (".nii.gz", ".nii"):
            # one map file per region (no 4D image in this format): the names must be file-name parts, refused here
            # rather than after the first case's prediction
            check_region_file_names(region_definitions(self.dataset_json))
        if "ssn" in self.uncertainty_sources and not find_ssn_heads(self._net()):
            raise ValueError(
                "uncertainty source 'ssn' needs a Stochastic Segmentation Network: train with nnUNetTrainerSSN "
                "(monai_unc.nnunet.trainers)"
            )
        if "mirroring" in self.uncertainty_sources and not self.allowed_mirroring_axes:
            raise ValueError(
                "uncertainty source 'mirroring' needs mirroring axes, but this model was trained without mirroring "
                "(inference_allowed_mirroring_axes is empty)"
            )
        if "dropout" in self.uncertainty_sources:
            modules, hooks = find_dropout_layers(self._net())
            if self.dropout_p is not None and not hooks:  # a freshly built network: insert the post-hoc dropout
                # (on top of dropout layers it has already: add_dropout warns)
                # the network as held (a torch.compile wrapper under nnUNet_compile=1): its compiled code, or code an
                # earlier network of the class compiled, ran without the new hooks (dynamo does not guard on hooks;
                # found by hostile review 60: MC-dropout mutual information 5e-9 instead of 0.023), so it is dropped
                self._posthoc_sites = add_posthoc_dropout(self.network, self.dropout_p)
            modules, hooks = find_dropout_layers(self._net())
            if not modules and not hooks:
                raise ValueError(
                    "uncertainty source 'dropout' needs dropout in the network: train with a dropout plans variant "
                    "(monai_unc.nnunet.write_dropout_plans) or nnUNetTrainerMCDropout, or pass dropout_p=... "
                    "(nnunet-predict: --dropout_p) to insert post-hoc dropout"
                )
        folds = len(self.list_of_parameters or [])
        if folds > 1 and "folds" in self.uncertainty_sources:
            # hostile review 68: copies of one fold's checkpoint (fold_1/ a copy of fold_0/) are one network counted
            # twice: no disagreement between them, twice its weight in the mean; EnsembleSource warns of the same
            identity = getattr(self, "_model_identity", None) or {}
            names = identity.get("fold_ids") or []
            if len(names) != folds:  # manual_initialization, or folds nnU-Net picked: their positions
                names = [f"#{k}" for k in range(folds)]
            same = _identical_state_dicts(self.list_of_parameters)
            if same:
                pairs = "; ".join(f"fold {names[j]} holds the same weights as fold {names[i]}" for i, j in same)
                warnings.warn(
                    f"folds: {pairs}:"
                    " a fold given twice adds no disagreement (its mutual information with itself is 0) and counts "
                    "twice in the mean; check the model folder's checkpoints",
                    UserWarning,
                    stacklevel=3,
                )
        if self._rate_in is not None and folds > 1 and "folds" not in self.uncertainty_sources:
            raise ValueError(
                "'rate_in' with several folds needs 'folds' as an uncertainty source (Rate-In tunes one network)"
            )
        if self.uncertainty_sources == ("folds",) and folds < 2:
            warnings.warn("'folds' is the only uncertainty source but a single fold is used: every sample is the "
                          "same, mutual information is 0", UserWarning)
        elif self.samples_per_voxel() == 1:
            # found by hostile testing: --sources dropout --num_samples 1 (or folds dropout with one fold) drew one
            # sample per voxel without a word, as the single fold above did: MI and variance 0 everywhere
            one_fold = " and a single fold" if "folds" in self.uncertainty_sources else ""
            warnings.warn(f"uncertainty sources {', '.join(self.uncertainty_sources)} with num_samples=1{one_fold} "
                          "give one sample per voxel: mutual information and variance are 0 (raise num_samples, "
                          "nnunet-predict: --num_samples)", UserWarning)

    @property
    def _stochastic(self) -> bool:
        return any(s in self.uncertainty_sources for s in STOCHASTIC_SOURCES)

    def _net(self) -> nn.Module:
        return plain_module(self.network)

    @property
    def mi_meaning(self) -> MIMeaning:
        """What the mutual information of this predictor's samples measures.

        Folds, dropout and mirrors all sample model or transformation parameters: MI is epistemic (MI(Y, theta) for
        folds and dropout, MI(Y, T) for mirroring, ValUES Appendix E). SSN latent draws alone: MI is aleatoric
        (MI(Y, Z), ValUES Appendix D); SSN with any other source: mixed. (ValUES: Kahl, Lüth, Zenk, Maier-Hein, Jaeger,
        *ValUES: A Framework for Systematic Validation of Uncertainty Estimation in Semantic Segmentation*, ICLR 2024.)
        A source drawing a single sample does not vary and does not count (``num_samples=1``, one fold, mirroring
        off): the rule of :func:`~monai_unc.keys.combine_mi_meanings`, as for the inferers.
        """
        folds = len(self.list_of_parameters or [])
        counts = {
            "folds": folds if folds else 2,  # before the model is loaded: varying
            "mirroring": self._mirror_samples(),
        }
        return combine_mi_meanings(
            (MIMeaning.ALEATORIC if s == "ssn" else MIMeaning.EPISTEMIC,
             counts[s] if s in counts else self.num_samples)
            for s in self.uncertainty_sources
        )

    def _mirror_samples(self) -> int:
        """Mirror combinations per window when ``"mirroring"`` is a source (2, varying, before the model is loaded)."""
        if not self.use_mirroring:
            return 1
        if getattr(self, "configuration_manager", None) is None:
            return 2
        if not self.allowed_mirroring_axes:
            return 1
        return len(self._mirror_combinations(2 + len(self.configuration_manager.patch_size)))

    def _probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """nnU-Net's inference nonlinearity over the channels: softmax, or a sigmoid per region."""
        return torch.sigmoid(logits) if self._multilabel else torch.softmax(logits, 1)

    def _mirror_combinations(self, ndim: int) -> list[tuple[int, ...]]:
        """Flip axes of every mirrored pass in stock nnU-Net's order, the un-mirrored pass first."""
        axes = self.allowed_mirroring_axes if self.use_mirroring else None
        if not axes:
            return [()]
        if max(axes) > ndim - 3:
            raise ValueError(f"mirror axes {axes} do not match a {ndim}D input")
        axes = [a + 2 for a in axes]
        return [()] + [c for i in range(len(axes)) for c in itertools.combinations(axes, i + 1)]

    def _sampling_context(self) -> contextlib.AbstractContextManager:
        stack = contextlib.ExitStack()
        if self._stochastic:
            # inductor draws the random numbers of a compiled graph (dropout masks, Rate-In's search, SSN latents)
            # with its own generator, not torch's: seeded samples differed from the uncompiled network's (found by
            # review 61: on a toy case the mean probabilities by up to 0.996, Rate-In's mean searched rates by 0.045,
            # mean MI 0.162 instead of 0.205); torch's generator keeps one set of numbers for a seed, compiled or not
            # (the one context of every sampling inferer)
            stack.enter_context(compiled_draws_context(self.network, *(self._ensemble or [])))
        if "dropout" in self.uncertainty_sources:
            for net in self._ensemble if self._ensemble is not None else [self._net()]:
                stack.enter_context(enable_mc_dropout(net))
        if self._rate_in is not None:
            if self._ensemble is not None:
                raise ValueError(
                    "'rate_in' with several folds needs 'folds' as an uncertainty source (Rate-In tunes one network)"
                )
            # through nnU-Net's torch.compile wrapper (nnUNet_compile=1), which drops compiled code that predates the
            # layers (found by hostile review 60: code another predictor compiled ran without them, "none of the
            # Rate-In layers ran")
            # kept attached to a compiled network between cases: attached and removed per case, they dropped its
            # compiled code, and every case compiled it again (found by review 61)
            stack.enter_context(self._rate_in.activate(self.network, keep=True))
        if "ssn" in self.uncertainty_sources:  # every forward pass draws a new latent sample of the SSN head
            for net in self._ensemble if self._ensemble is not None else [self._net()]:
                stack.enter_context(ssn_sampling(net))
        # last, as in the inferers: MONAI's fused attention (use_flash_attention=True) drew attention dropout in eval
        # mode too (the mean logits nnunet-calibrate fits a temperature to were random), or none while sampled
        # (review 66)
        for net in self._ensemble if self._ensemble is not None else [self._net()]:
            stack.enter_context(align_fused_attention(net))
        return stack

    def _seed_context(self) -> contextlib.AbstractContextManager:
        seed = check_seed(self.seed)  # the attribute may have been set after construction
        if seed is None:
            return contextlib.nullcontext()
        # the generators of the predictor's device and of the devices of the network's weights (a network across GPUs
        # draws on each: found by review 66), seeded and restored: torch.manual_seed reseeded every GPU and left them
        # so (found by review 64); the fold copies are made on the predictor's device
        return seeded_rng(seed, [self.device, *network_devices(self.network)])

    def _share(self, nets: Sequence[nn.Module], passes: int) -> list[nn.Module] | None:
        """The fold networks whose passes share their deterministic part, or None (full passes)."""
        if not self.share_passes or passes < 2 or not self._shares_passes():
            return None
        plain = [plain_module(n) for n in nets]  # a compiled network: its Python module
        if any(not isinstance(n, nn.Module) or isinstance(n, torch.jit.ScriptModule) for n in plain):
            self._note_full_passes("the network is not a torch.nn.Module whose calls can be followed")
            return None
        try:  # a TorchScript or compiled submodule hides its operations (and random draws) from the trace
            for n in plain:
                SharedPasses(n)
        except SharingUnavailable as err:
            self._note_full_passes(str(err))
            return None
        return plain

    def _mirrors_share_draws(self) -> bool:
        """Whether the mirrored passes of each stochastic sample draw from one random state.

        True with mirroring on but not a source, and dropout, Rate-In or SSN passes.
        """
        return (self._stochastic and "mirroring" not in self.uncertainty_sources and self.use_mirroring
                and bool(self.allowed_mirroring_axes))

    def _shares_passes(self) -> bool:
        """Whether the sources have passes that ``share_passes`` concerns (dropout or Rate-In, several passes)."""
        return self.num_samples > 1 and any(s in self.uncertainty_sources for s in ("dropout", "rate_in"))

    def _note_full_passes(self, why: str) -> None:
        if self._share_note is None:
            self._share_note = why
            print(f"shared passes off, full passes instead: {why}")

    def _shared_chunk(self, traces: dict[Any, SharedPasses | None], key: Any, net: nn.Module, x: torch.Tensor,
                      remaining: int, k: int | None) -> tuple[Any, int]:
        """One chunk of ``k`` passes on one mirror and fold network of a window, from the window's one trace.

        ``traces`` holds the window's :class:`SharedPasses` per ``key`` (mirror, fold network): the first chunk
        traces (its first pass) and replays ``k - 1`` passes; every later chunk replays its ``k`` passes from the
        same trace (the window's shared activations are computed once; the caller makes later chunks ``k - 1``
        passes long, so that every replay batch has the size of the first chunk's). ``k`` None: the chunk's size is
        chosen after the trace (``sample_batch_size`` or the automatic size). Returns the outputs ``(k, C, *patch)`` and
        ``k``. A replay that cannot reproduce full passes falls back to them for the rest of the window (one
        printed line); ``traces[key]`` is then None.
        """
        if key in traces:
            passes = traces[key]
            first = None
        else:
            passes = traces[key] = SharedPasses(net)
            first = passes.trace(net, x)
            if k is None:
                k = sample_batch(passes, self.sample_batch_size, self._case_voxels, int(first.shape[1]), remaining)
                if self.sample_batch_size == "auto":
                    k = max(k, min(2, remaining))
            if k == 1:
                return first, 1
        if k is None:
            raise ValueError("the chunk size is chosen at a window's first trace")
        more = k if first is None else k - 1
        rest = None
        if passes is not None:
            try:
                rest = passes.replay(net, x, more)
            except SharingUnavailable as err:
                self._note_full_passes(str(err))
                traces[key] = None
        if rest is None:
            rest = torch.cat([net(x) for _ in range(more)], 0)
        return (rest if first is None else torch.cat([first, rest], 0)), k

    # ------------------------------------------------------------------ one window
    @torch.inference_mode()
    def _internal_maybe_mirror_and_predict(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """Window statistics instead of nnU-Net's mean logits.

        For a window ``x`` ``(1, C_in, *patch)`` runs ``num_samples`` stochastic passes (1 without dropout) over
        every mirror and every fold network held side by side (folds not a source; else the one network), streams
        each sample's softmax into a :class:`SampleStats` and returns its moments ``{"pred": (1, C, *patch),
        "expected_entropy": (1, 1, *patch)[, "mean_sq"]}`` (float32) and, when the segmentation comes from
        logits, ``"logits"`` ``(F, C, *patch)``: for each of the F fold networks the mean logit over its passes,
        summed in the order stock nnU-Net sums its mirrors (identical values without dropout). With ``"ssn"`` the
        only stochastic source, the logits come from one more pass per mirror with the SSN heads' sampling off: the
        mean logits stock nnU-Net segments an SSN model with (identical values).
        """
        combos = self._mirror_combinations(x.ndim)
        nets = self._ensemble if self._ensemble is not None else [self.network]
        mirror_samples = "mirroring" in self.uncertainty_sources
        passes = self.num_samples if self._stochastic else 1
        if self._rate_in is not None:
            # one search pass per window (the Rate-In rates of this input), on a compiled network's Python module
            self._rate_in.prepare(x, plain_module(self.network))
        stats = SampleStats(track_variance=K.VARIANCE.value in self.measures, accum_dtype=torch.float32,
                            validate=False, multilabel=self._multilabel)
        logit_sums: list[torch.Tensor | None] = [None] * len(nets)
        # SSN without dropout / Rate-In: stock's segmentation comes from the head's mean logits, one extra pass
        ssn_mean = self._want_logits and "ssn" in self.uncertainty_sources and not any(
            s in self.uncertainty_sources for s in ("dropout", "rate_in"))
        shared = self._share(nets, passes)
        shared_draws = self._mirrors_share_draws() and len(combos) > 1
        ssn = "ssn" in self.uncertainty_sources
        # every GPU a sample draws on, where the mirrors / folds replay its random state
        draw_devices = network_devices(*nets) if shared_draws or (ssn and len(nets) > 1) else ()
        # one trace per mirror and fold network, kept for every chunk of this window's passes, freed with the window
        traces: dict[tuple[int, int], SharedPasses | None] = {}
        chunk = None  # passes per chunk, chosen at the window's first trace
        done = 0
        # (min, max) of the logits of every sample: +-inf logits of a sigmoid and -inf of a softmax give probabilities
        # of exactly 0 / 1, which the stitched statistics' check cannot see (found by hostile testing: a float16
        # network whose logits overflowed gave confident maps without an error)
        extremes: list[torch.Tensor] = []
        while done < passes:
            group = None
            # later chunks: as many passes as the first chunk replayed, so every replay batch holds the same number
            # of samples and the peak memory does not grow with num_samples
            k = 1 if chunk is None else min(max(chunk - 1, 1), passes - done)
            # mirroring not a source: the mirrors of one stochastic sample are one network (one dropout mask, one
            # latent draw), so every mirror draws from the random state the first one started with
            rng = _RandomState(x.device, *draw_devices) if shared_draws else None
            for i, axes in enumerate(combos):
                if rng is not None and i:
                    rng.restore()
                # folds not a source, an SSN: the fold networks of one sample share its latent draw, every fold from
                # the random state the first one started with (found by review 66: each fold drew its own, and the
                # mean logit over 3 copies of one model kept less than half of its MI)
                fold_rng = _RandomState(x.device, *draw_devices) if ssn and len(nets) > 1 else None
                xx = torch.flip(x, axes) if axes else x
                outs = []
                for f, net in enumerate(nets):
                    if fold_rng is not None and f:
                        fold_rng.restore()
                    # one latent draw in every mirror: the SSN's per-logit noise mirrored with the input (found by
                    # hostile review: drawn in each mirror's own layout, the mean over 2^k mirrors kept about 1/2^k
                    # of the diagonal variance)
                    with mirrored_ssn_noise(net, axes) if rng is not None and ssn else contextlib.nullcontext():
                        if shared is None:
                            o = net(xx)
                        else:  # this chunk's k passes, replayed from the window's trace of this mirror and network
                            first = chunk is None and not (i or f)
                            o, k = self._shared_chunk(traces, (i, f), shared[f], xx, passes - done,
                                                      None if first else k)
                    outs.append(torch.flip(o, axes) if axes else o)
                # the samples of this chunk and mirror: the mean logit over the fold networks (folds not a source)
                out = outs[0].float() if len(outs) == 1 else sum(o.float() for o in outs) / len(outs)
                if mirror_samples:  # the k samples of the chunk at once: the sums read once for the k
                    extremes.append(torch.stack(torch.aminmax(out)))
                    stats.update_many(self._probabilities(out), num_samples=k)
                else:
                    group = out.clone() if group is None else group.add_(out)
                if self._want_logits and not ssn_mean:  # after the statistics: the sums reuse outs[f]'s memory
                    logit_dtype = outs[0].dtype
                    for f, o in enumerate(outs):
                        if passes > 1:
                            # the stochastic passes' logits are summed in float32 (found by hostile review: summed
                            # in the network's float16 under CUDA autocast, 30 passes x 8 mirrors of logits near 120
                            # were off by 0.68 and 100 passes overflowed to inf); one pass per mirror keeps stock's
                            # float16 sum, bit for bit
                            o = o.sum(0, keepdim=True, dtype=torch.float32) if k > 1 else o.float()
                        logit_sums[f] = o if logit_sums[f] is None else logit_sums[f].add_(o)
            if not mirror_samples:
                g = group / len(combos) if len(combos) > 1 else group
                extremes.append(torch.stack(torch.aminmax(g)))
                stats.update_many(self._probabilities(g), num_samples=k)
            if shared is not None and chunk is None:
                chunk = k
            done += k
        traces.clear()
        if ssn_mean:
            with _ssn_mean_logits(nets):
                for axes in combos:
                    xx = torch.flip(x, axes) if axes else x
                    for f, net in enumerate(nets):
                        o = net(xx)
                        o = torch.flip(o, axes) if axes else o
                        logit_sums[f] = o if logit_sums[f] is None else logit_sums[f].add_(o)
            passes = 1
        result = stats.moments()
        # an infinite logit makes this window's statistics NaN, so that the check of the stitched buffer refuses it
        # (no synchronisation per window)
        finite = torch.isfinite(torch.stack(extremes)).all().to(result[K.EXPECTED_ENTROPY.value].device)
        result[K.EXPECTED_ENTROPY.value] = result[K.EXPECTED_ENTROPY.value] + torch.where(finite, 0.0, math.nan)
        if self.window_disagreement == "separate":
            # H(m_w) in the precision of the samples (float32) and by the kernel that evaluated each sample's H(p_s)
            # in EE: a window of identical samples gives H(m_w) == EE_w bitwise, so a deterministic model has MI = 0
            # exactly after stitching
            result[WINDOW_ENTROPY] = stats.sample_entropy(result[K.PRED.value])
            if MEAN_SQ in result:
                # the window's own variance E_w[p^2] - m_w^2: stitched, the blend of the per-window variances (the
                # windows' disagreement stays out of the variance, as out of MI); the second moment is rebuilt
                # after stitching (_internal_predict_sliding_window_return_logits)
                result[MEAN_SQ] = add_squares(result[MEAN_SQ], result[K.PRED.value], -1.0).clamp_min_(0)
        if self._want_logits:
            n = passes * len(combos)
            sums = [s.div_(n) if n > 1 else s for s in logit_sums]
            if not ssn_mean and passes > 1:  # the mean of the float32 sums, in the network's output dtype
                sums = [s.to(logit_dtype) for s in sums]
            result["logits"] = sums[0] if len(sums) == 1 else torch.cat(sums, 0)
        return result

    # ------------------------------------------------------------------ stitching
    @torch.inference_mode()
    def _internal_predict_sliding_window_return_logits(  # type: ignore[override]
        self, data: torch.Tensor, slicers: list, do_on_device: bool = True
    ) -> dict[str, torch.Tensor]:
        """Blend the window statistics with nnU-Net's Gaussian weights into float32 buffers.

        Returns ``{"pred": (C, *shape), "expected_entropy": (E, *shape)[, "mean_sq"][, "window_entropy"][,
        "logits"]}`` (E = 1, or C for a region-based model); ``logits`` ``(F, C, *shape)`` holds one buffer per fold
        network, each blended exactly like stock nnU-Net's (fp16 buffer and fp16 weight sum), the statistics in
        float32. ``window_entropy`` (``window_disagreement="separate"``): the blend of every window's predictive
        entropy ``H(m_w)``, stitched like the means (:mod:`monai_unc.inferers.sampling`).
        """
        results_device = self.device if do_on_device else torch.device("cpu")
        n_classes = self.label_manager.num_segmentation_heads
        n_ee = n_classes if self._multilabel else 1
        layout = [(K.PRED.value, n_classes), (K.EXPECTED_ENTROPY.value, n_ee)]
        if K.VARIANCE.value in self.measures:
            layout.append((MEAN_SQ, n_classes))
        if self.window_disagreement == "separate":
            layout.append((WINDOW_ENTROPY, n_ee))
        n_stat = sum(n for _, n in layout)
        n_nets = len(self._ensemble) if self._ensemble is not None else 1
        stat_buf = weight = logit_buf = n_pred = None

        def producer(d: torch.Tensor, slh: list, q: Queue) -> None:
            for s in slh:
                q.put((torch.clone(d[s][None], memory_format=torch.contiguous_format).to(self.device), s))
            q.put("end")

        try:
            empty_cache(self.device)
            data = data.to(results_device)
            self._case_voxels = int(np.prod(data.shape[1:]))
            queue: Queue = Queue(maxsize=2)
            t = Thread(target=producer, args=(data, slicers, queue), daemon=True)
            t.start()
            shape = data.shape[1:]
            stat_buf = torch.zeros((n_stat, *shape), dtype=torch.float32, device=results_device)
            weight = torch.zeros(shape, dtype=torch.float32, device=results_device)
            if self._want_logits:
                logit_buf = torch.zeros((n_nets, n_classes, *shape), dtype=torch.half, device=results_device)
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
                    mom = torch.cat([window[k] for k, _ in layout], 1)[0].to(results_device)
                    if self.use_gaussian:
                        mom *= gaussian32
                    stat_buf[sl] += mom
                    weight[sl[1:]] += gaussian32
                    if self._want_logits:
                        prediction = window["logits"].to(results_device)
                        if self.use_gaussian:
                            prediction *= gaussian
                        logit_buf[(slice(None), *sl)] += prediction
                        n_pred[sl[1:]] += gaussian
                    queue.task_done()
                    pbar.update()
            queue.join()
            stat_buf /= weight
            out = {}
            start = 0
            for k, n in layout:
                out[k] = stat_buf[start:start + n]
                start += n
            if not torch.isfinite(stat_buf).all():
                raise RuntimeError("non-finite values in the stitched uncertainty statistics (NaN or inf logits?)")
            if self.window_disagreement == "separate" and MEAN_SQ in out:
                # blend_w Var_w + pred^2: a second moment whose variance is the blend of the windows' own (folds
                # pooled afterwards keep their disagreement in it, as in MI)
                add_squares(out[MEAN_SQ][None], out[K.PRED.value][None])  # (C, *spatial) buffers, in place
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
        """Sliding-window statistics of one preprocessed image for the current network.

        Dropout (when a source) is switched on after nnU-Net's ``network.eval()`` and restored afterwards. On a GPU
        that runs out of memory the result buffers move to the CPU, as in nnU-Net.

        Args:
            input_image: the preprocessed image ``(C_in, *spatial)``, a 4D tensor of real numbers (read as float32,
                the dtype nnU-Net's preprocessing gives).

        Returns:
            The dict of :meth:`_internal_predict_sliding_window_return_logits` with the padding removed:
            ``{"pred": (C, *spatial), "expected_entropy": (E, *spatial)[, "mean_sq"][, "window_entropy"][, "logits"]}``
            (E = 1, or C for a region-based model; ``logits`` ``(F, C, *spatial)`` one buffer per fold network).

        Raises:
            ValueError: ``input_image`` is not a 4D tensor of real numbers.
        """
        if not isinstance(input_image, torch.Tensor) or input_image.ndim != 4:
            raise ValueError(
                "input_image must be a 4D torch.Tensor (c, x, y, z), got "
                f"{type(input_image).__name__} {tuple(getattr(input_image, 'shape', ()))}"
            )
        if input_image.dtype == torch.bool or input_image.is_complex():
            raise ValueError(f"input_image must hold real numbers (a preprocessed image), got {input_image.dtype}")
        if input_image.dtype != torch.float32:
            # found by hostile review 58: a float64 (torch.from_numpy of a float64 array), float16 or integer image
            # failed in the first convolution ("Input type (double) and bias type (float) should be the same")
            input_image = input_image.float()
        self.network = self.network.to(self.device)
        self.network.eval()
        empty_cache(self.device)
        autocast = torch.autocast(self.device.type, enabled=True) if self.device.type == "cuda" else dummy_context()
        with autocast, self._sampling_context():
            data, slicer_revert_padding = pad_nd_image(input_image, self.configuration_manager.patch_size,
                                                       "constant", {"value": 0}, True, None)
            slicers = self._internal_get_sliding_window_slicers(data.shape[1:])
            if self.perform_everything_on_device and self.device.type != "cpu":
                out = self._predict_with_buffer_fallback(data, slicers)
            else:
                out = self._internal_predict_sliding_window_return_logits(data, slicers,
                                                                         self.perform_everything_on_device)
            empty_cache(self.device)
            revert = (Ellipsis, *slicer_revert_padding[1:])
            return {k: v[revert] for k, v in out.items()}

    def _predict_with_buffer_fallback(self, data: torch.Tensor, slicers: list) -> dict[str, torch.Tensor]:
        """The sliding window with the result buffers on the device, again with them on the CPU when it runs out.

        The retry draws what the first attempt drew (found by a review of the fallback: it went on from the random
        state the failed attempt left, so a seeded case's dropout masks, and its maps, depended on where the device
        ran out of memory, and the Rate-In rates of the windows done before counted twice in the case's mean rate):
        the random states and the Rate-In records are those before the first attempt.
        """
        devices = [self.device] if self.device.type == "cuda" else []
        cpu_state = torch.get_rng_state()
        device_states = [torch.cuda.get_rng_state(d) for d in devices]
        records = None if self._rate_in is None else self._rate_in.records_copy()
        try:
            return self._internal_predict_sliding_window_return_logits(data, slicers, True)
        except torch.OutOfMemoryError:
            print("Prediction on device ran out of memory. Moving the result buffers to the CPU")
            empty_cache(self.device)
            torch.set_rng_state(cpu_state)
            for d, state in zip(devices, device_states):
                torch.cuda.set_rng_state(state, d)
            if records is not None:
                self._rate_in.restore_records(records)
            return self._internal_predict_sliding_window_return_logits(data, slicers, False)

    # ------------------------------------------------------------------ one case, all folds
    @torch.inference_mode()
    def predict_uncertainty_from_preprocessed_data(self, data: torch.Tensor) -> CaseUncertainty:
        """Statistics over every sample (folds x dropout x mirrors) of one preprocessed case.

        With ``"folds"`` a source the folds run one after the other (nnU-Net's order; one set of weights on the
        device at a time) and their statistics merge; otherwise all folds' weights go to the device and are
        averaged in logit space inside every window. Either way the segmentation logits are combined over the folds
        as stock nnU-Net combines them. Results are on the CPU.

        Args:
            data: the preprocessed case ``(C_in, *spatial)``.

        Returns:
            The case's :class:`~monai_unc.nnunet.export.CaseUncertainty` at network resolution.
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
            fold_pe = None  # sum over the folds of H(pred_k): the folds' disagreement belongs to MI, not to WD
            for p in params:
                if p is not None:
                    self._net().load_state_dict(p)
                res = {k: v.to("cpu") for k, v in self.predict_sliding_window_return_logits(data).items()}
                fold_logits = res.pop("logits", None)
                if WINDOW_ENTROPY in res and len(params) > 1:
                    h = entropy_map_t(res[K.PRED.value][None], 1, False, self._multilabel)[0]
                    fold_pe = h if fold_pe is None else fold_pe.add_(h)
                if moments is None:
                    moments = res
                else:
                    for k, v in res.items():
                        moments[k].add_(v)
                if fold_logits is not None:  # stock nnU-Net's order: fp16 sum over the folds, then the division
                    logits = fold_logits[0] if logits is None else logits.add_(fold_logits[0])
            if len(params) > 1:
                for v in moments.values():
                    v.div_(len(params))
                if logits is not None:
                    logits /= len(params)
                if fold_pe is not None:
                    # WD = mean_k WD_k = mean_k [H(pred_k) - window_entropy_k]; stored as the window entropy whose
                    # difference to H(pred) it is: window_entropy = mean_k window_entropy_k + H(pred) - mean_k H(pred_k)
                    # (the sampling inferers' rule for ensembles: MI keeps the folds' disagreement)
                    h_mean = entropy_map_t(moments[K.PRED.value][None], 1, False, self._multilabel)[0]
                    moments[WINDOW_ENTROPY].add_(h_mean - fold_pe / len(params))
            n_samples = per_pass * (len(params) if "folds" in self.uncertainty_sources else 1)
            return CaseUncertainty(moments, logits, n_samples, self.uncertainty_sources, self._extras(),
                                   self._multilabel)
        self._ensemble = self._fold_networks(params)
        try:
            res = self.predict_sliding_window_return_logits(data)
        finally:
            self._ensemble = None
            empty_cache(self.device)
        res = {k: v.to("cpu") for k, v in res.items()}
        logits = res.pop("logits", None)
        if logits is not None:  # per-fold buffers combined in stock nnU-Net's order: fp16 sum, then the division
            logits = functools.reduce(torch.Tensor.add_, list(logits)) / len(logits)
        return CaseUncertainty(res, logits, per_pass, self.uncertainty_sources, self._extras(), self._multilabel)

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
        """Samples per voxel and fold pass for a window of ``ndim`` dims (``(1, C_in, *patch)``).

        Args:
            ndim: the number of dimensions of the window tensor, batch and channel axes included.

        Returns:
            ``num_samples`` (1 without a stochastic source) times the mirror combinations (when ``"mirroring"`` is a
            source).
        """
        n = self.num_samples if self._stochastic else 1
        if "mirroring" in self.uncertainty_sources:
            n *= len(self._mirror_combinations(ndim))
        return n

    def samples_per_voxel(self) -> int:
        """Probability samples per voxel of a case.

        Returns:
            Folds (when a source) x stochastic passes x mirrors (when a source).
        """
        n = self.samples_per_window_for(2 + len(self.configuration_manager.patch_size))
        if "folds" in self.uncertainty_sources:
            n *= max(len(self.list_of_parameters or []), 1)
        return n

    @torch.inference_mode()
    def predict_logits_from_preprocessed_data(self, data: torch.Tensor) -> torch.Tensor:
        """Stock contract: the mean logits (as nnU-Net computes them) of a preprocessed case.

        Args:
            data: the preprocessed case ``(C_in, *spatial)``.

        Returns:
            The mean logits ``(C, *spatial)`` (fp16, on the CPU).
        """
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
            "settings": self.case_settings(),
        }

    def rate_in_settings(self) -> dict[str, Any]:
        """Every Rate-In value this predictor applies.

        :meth:`~monai_unc.inferers.rate_in.RateInSource.applied_settings` on the network: target, loss, controller,
        initial rates, placement and layers, defaults included (Rate-In: Zeevi, Shwartz-Ziv, LeCun, Staib, Onofrey,
        *Rate-In: Information-Driven Adaptive Dropout Rates for Improved Inference-Time Uncertainty Estimation*, CVPR
        2025).

        Returns:
            The settings as plain JSON types; ``{}`` without the ``"rate_in"`` source.
        """
        return {} if self._rate_in is None else json_safe(self._rate_in.applied_settings(self._net()))

    def run_config(self) -> dict[str, Any]:
        """The content of ``uncertainty_config.json``: how the folder's files were made.

        Returns:
            Sources, samples, dropout and Rate-In values (and, with several dropout / Rate-In passes, ``share_passes``
            and ``sample_batch_size``; ``use_gaussian`` only when False), measures, segmentation, window
            disagreement, seed (None for sources that draw nothing), folds,
            mirror axes, trainer, step size, MI meaning, ``save_probabilities`` (of the last prediction call), model
            identity (folder, checkpoint, folds, weight digests,
            temperatures) and, for a region-based model, ``regions`` and ``regions_class_order``; as it reads back
            from the file (plain JSON types).
        """
        cfg = {
            "uncertainty_sources": list(self.uncertainty_sources),
            # dropout passes per window: only meaningful when dropout or Rate-In is a source
            "num_samples": self.num_samples if self._stochastic else None,
            "samples_per_voxel": self.samples_per_voxel(),
            "dropout_p": self.dropout_p,
            "rate_in": self.rate_in_settings(),
            "posthoc_dropout_after": self._posthoc_sites,
            "measures": list(self.measures),
            "segmentation_from": self.segmentation_from,
            "window_disagreement": self.window_disagreement,
            "seed": self.seed if self._stochastic else None,  # nothing is drawn otherwise (recorded as None)
            "folds": len(self.list_of_parameters or []),
            "mirror_axes": list(self.allowed_mirroring_axes or []) if self.use_mirroring else [],
            "trainer_name": self.trainer_name,
            "tile_step_size": self.tile_step_size,
            "mi_meaning": self.mi_meaning.value,
            # found by review 63: a case predicted again without --save_probabilities left a folder where one case
            # had no <case>.npz; a folder never mixes them (recorded_case_settings reads older records' from the file)
            "save_probabilities": self._save_probabilities,
            **getattr(self, "_model_identity", {}),
        }
        if not self.use_gaussian:
            # the windows blended uniformly, not with nnU-Net's Gaussian weights: other maps. Recorded only off the
            # default, so that folders of earlier versions (Gaussian, the CLI's only choice) still resume
            cfg["use_gaussian"] = False
        if self._mirrors_share_draws():
            # the mirrors of a stochastic sample draw from one random state (an earlier version drew per mirror: a
            # resume computes its cases again)
            cfg["mirror_draws"] = "shared"
            if "ssn" in self.uncertainty_sources:
                # the SSN's per-logit noise mirrored with the input (review 66): other draws than a folder of
                # "shared" (the noise in each mirror's own layout) holds, so a resume computes those cases again
                cfg["mirror_draws"] = "shared, ssn noise mirrored"
        if "ssn" in self.uncertainty_sources and "folds" not in self.uncertainty_sources and len(
            self.list_of_parameters or []
        ) > 1:
            # the folds of an SSN sample share its latent draw (review 66; earlier each fold drew its own: a resume
            # computes those cases again)
            cfg["fold_draws"] = "shared"
        if self._shares_passes():
            # how the dropout / Rate-In passes ran: the same distribution either way, but other seeded draws (a
            # resume compares them; other sources' folders record neither, as before)
            cfg["share_passes"] = self.share_passes
            cfg["sample_batch_size"] = self.sample_batch_size if self.share_passes else None
        if self._multilabel:
            # region-based model: the maps' fourth axis and the scores' suffixes follow this channel order
            cfg["regions"] = region_definitions(self.dataset_json)
            cfg["regions_class_order"] = [int(c) for c in self.label_manager.regions_class_order]
        return json.loads(json.dumps(json_safe(cfg)))  # as it reads back from the file (compared on resume)

    def case_settings(self) -> dict[str, Any]:
        """The settings recorded in every case record (``settings``) and compared by ``--continue_prediction``.

        Returns:
            :meth:`run_config` without the list of measures (each requested map is checked as a file) and without the
            model folder's path (its files are identified by their digests, ``weights``).
        """
        return {k: v for k, v in self.run_config().items() if k not in _NOT_CASE_SETTINGS}

    def _write_config(self, folder: str) -> None:
        atomic_write_json(os.path.join(folder, "uncertainty_config.json"), self.run_config())

    def _manage_input_and_output_lists(
        self,
        list_of_lists_or_source_folder: str | list[list[str]],
        output_folder_or_list_of_truncated_output_files: str | None | list[str],
        folder_with_segs_from_prev_stage: str | None = None,
        overwrite: bool = True,
        part_id: int = 0,
        num_parts: int = 1,
        save_probabilities: bool = False,
    ) -> tuple[list, list | None, list]:
        """Stock's lists, without the cases already done when ``overwrite=False``.

        With ``overwrite=False`` (``--continue_prediction``) a case counts as done only when
        :func:`~monai_unc.nnunet.export.case_exported` (segmentation, record and maps, the maps and the record as
        written; stock looks at the segmentation alone, so a folder of stock segmentations would get no maps) and its
        record's ``settings`` are :meth:`case_settings` (a case made with other sources, samples, Rate-In values,
        model, ... is predicted again, and the log line names the difference: a folder never mixes settings).
        """
        lists, outputs, prevs = super()._manage_input_and_output_lists(
            list_of_lists_or_source_folder, output_folder_or_list_of_truncated_output_files,
            folder_with_segs_from_prev_stage, True, part_id, num_parts, save_probabilities)
        missing = [os.path.basename(f) for f in prevs if f is not None and not os.path.isfile(f)]
        if missing:  # stock fails in a preprocessing worker, or in the reader after the cases before it
            raise ValueError(
                f"folder_with_segs_from_prev_stage {folder_with_segs_from_prev_stage} lacks the previous stage's "
                f"segmentation of {len(missing)} of {len(prevs)} cases ({', '.join(missing[:5])}"
                f"{', ...' if len(missing) > 5 else ''}): predict them with the previous stage first"
            )
        if overwrite or outputs is None:
            _check_previous_stage_shapes(lists, prevs, self.plans_manager.image_reader_writer_class)
            check_finite_inputs(lists, self.dataset_json, self.plans_manager.image_reader_writer_class)
            return lists, outputs, prevs
        ending = self.dataset_json["file_ending"]
        settings = self.case_settings()
        todo, changed = [], {}
        for i, o in enumerate(outputs):
            if case_exported(o, ending, self.measures, save_probabilities):
                recorded = recorded_case_settings(o)
                diff = settings_changes(recorded, settings) if recorded != settings else []
                prev_change = _previous_stage_change(read_case_record(o), prevs[i])
                if not diff and prev_change is None:
                    continue
                changed[os.path.basename(o)] = diff + ([prev_change] if prev_change else [])
            todo.append(i)
        print(f"overwrite was set to False: predicting the {len(todo)} of {len(outputs)} cases without complete "
              "uncertainty outputs (segmentation, maps and record) made with the current settings")
        if changed:
            first, diff = next(iter(changed.items()))
            print(f"{len(changed)} of them ({', '.join(list(changed)[:5])}{', ...' if len(changed) > 5 else ''}) "
                  "were predicted with other settings or previous-stage segmentations "
                  f"(e.g. {first}: {'; '.join(diff[:4])}"
                  f"{'; ...' if len(diff) > 4 else ''}): predicting them again with the current settings")
        lists, outputs, prevs = [lists[i] for i in todo], [outputs[i] for i in todo], [prevs[i] for i in todo]
        _check_previous_stage_shapes(lists, prevs, self.plans_manager.image_reader_writer_class)
        check_finite_inputs(lists, self.dataset_json, self.plans_manager.image_reader_writer_class)
        return lists, outputs, prevs

    def check_output_settings(self, list_of_lists_or_source_folder: str | Sequence[Sequence[str]],
                              output_folder_or_list_of_truncated_output_files: str | None | Sequence[str],
                              folder_with_segs_from_prev_stage: str | os.PathLike | None = None) -> None:
        """Refuse an output folder that would mix the cases of two runs, or take two cases under one file name.

        A case of the output folder whose record (``uncertainty/<case>.json``) names other settings than
        :meth:`case_settings` (or, written by an earlier version, none), or other maps than ``measures``, must be
        among the cases predicted now, which replace it; the cases of every ``-part_id`` count, so the parts of one
        run may share the folder. Otherwise the folder would mix two runs (and ``uncertainty_config.json``, rewritten
        by this run, would describe cases it did not make). Cases made with the current settings are kept, and
        ``uncertainty_scores.csv`` lists them with the new ones. Nothing is checked without an output folder. With
        ``folder_with_segs_from_prev_stage`` (a cascade stage) a case left is also one of another previous stage when
        that folder's segmentation of it differs from the one its record names (``prev_stage_digests``), or its
        record names none (an earlier version); a case without a segmentation there is not compared.

        Args:
            list_of_lists_or_source_folder: the input folder, or one list of channel files per case.
            output_folder_or_list_of_truncated_output_files: the output folder, or one output path without ending
                per case (None: nothing is written).
            folder_with_segs_from_prev_stage: the previous stage's segmentations of this run (a cascade stage).

        Raises:
            ValueError: one line naming the folder, the cases left with other settings and the first difference;
                or cases whose ids differ only in letter case or Unicode form when the folder's file system takes
                their files as one (:func:`~monai_unc.io.check_case_ids_fit_folder`; nnU-Net's export loop would
                write the second over the first).

        Example:
            >>> import tempfile
            >>> predictor = UncertaintyPredictor(("mirroring",), device=torch.device("cpu"))
            perform_everything_on_device=True is only supported for cuda devices! Setting this to False
            >>> with tempfile.TemporaryDirectory() as d:  # an empty folder: nothing to mix with
            ...     predictor.check_output_settings([], d)
        """
        outputs = output_folder_or_list_of_truncated_output_files
        if outputs is None:
            return
        ending = str(self.dataset_json["file_ending"]) if self.dataset_json else ""
        if isinstance(outputs, (str, os.PathLike)):
            if isinstance(list_of_lists_or_source_folder, (str, os.PathLike)):
                names = [e.name for e in os.scandir(list_of_lists_or_source_folder) if e.is_file()]
                cases = {n[:-len(ending) - 5] for n in names if n.endswith(ending) and len(n) > len(ending) + 5}
            else:
                cases = {os.path.basename(str(files[0]))[:-len(ending) - 5]
                         for files in list_of_lists_or_source_folder if len(files)}
            targets = {os.path.join(os.path.abspath(outputs), c) for c in cases}
            folders = {os.path.abspath(outputs)}
        else:
            targets = {os.path.abspath(str(o)) for o in outputs}
            folders = {os.path.dirname(t) for t in targets}
        for folder in sorted(folders):  # nnU-Net writes each case's files through its own loop: check the ids first
            ids = sorted(os.path.basename(t) for t in targets if os.path.dirname(t) == folder)
            if colliding_case_ids(ids):
                os.makedirs(folder, exist_ok=True)  # the probe needs the folder nnU-Net would create anyway
                check_case_ids_fit_folder(ids, folder, option="-o")
        if self.plans_manager is not None and _writes_spacing_files(self.plans_manager.image_reader_writer_class):
            for folder in sorted(folders):  # Tiff3DIO: a map's spacing file <case>_<measure>.json is another's record
                mine = sorted(os.path.basename(t) for t in targets if os.path.dirname(t) == folder)
                recorded = (read_json_or_none(p) for p in Path(folder, UNCERTAINTY_FOLDER).glob("*.json"))
                ids = {*mine, *(r["case"] for r in recorded if isinstance(r, dict) and isinstance(r.get("case"), str))}
                regions = list(region_definitions(self.dataset_json)) if self._multilabel else []
                if clashes := sidecar_record_clashes(ids, self.measures, regions):
                    case, other = clashes[0]
                    raise ValueError(
                        f"{folder}: case {case!r}'s maps would be written with their spacing in "
                        f"{UNCERTAINTY_FOLDER}/{other}.json, the record of case {other!r} (nnU-Net's Tiff3DIO names "
                        f"a .tif's spacing file after it); predict such cases into separate output folders (-o)"
                    )
                # found by the hostile review of review 63: the segmentation's own spacing file <case>.json of a case
                # called "dataset" or "uncertainty_config" overwrote the folder's dataset.json / run config
                for case in mine:
                    own = _OUTPUT_FOLDER_JSON.get(f"{case}.json".casefold())
                    if own is not None:
                        raise ValueError(
                            f"{folder}: case {case!r}: its segmentation's spacing file {case}.json would overwrite the "
                            f"output folder's {own} (nnU-Net's Tiff3DIO names a .tif's spacing file after it); rename "
                            "the case's input files"
                        )
        settings = None
        for folder in sorted(folders):
            left: dict[str, list[str]] = {}
            for path in sorted(Path(folder, UNCERTAINTY_FOLDER).glob("*.json")):
                rec = read_json_or_none(path)
                if not isinstance(rec, dict) or "scores" not in rec or not isinstance(rec.get("case"), str):
                    continue
                if os.path.join(folder, rec["case"]) in targets:
                    continue  # predicted again now
                settings = self.case_settings() if settings is None else settings
                # as --continue_prediction reads them (recorded_case_settings: the record at this path)
                diff = settings_changes(recorded_case_settings(Path(folder, path.stem)), settings)
                maps = sorted(rec["maps"]) if isinstance(rec.get("maps"), dict) else None
                if maps != sorted(self.measures):
                    diff.append(f"measures {json.dumps(maps)} -> {json.dumps(sorted(self.measures))}")
                if folder_with_segs_from_prev_stage is not None:
                    prev = os.path.join(folder_with_segs_from_prev_stage, rec["case"] + ending)
                    prev_change = _previous_stage_change(rec, prev) if os.path.isfile(prev) else None
                    if prev_change:
                        diff.append(prev_change)
                if diff:
                    left[rec["case"]] = diff
            if left:
                first, diff = next(iter(left.items()))
                shown = ", ".join(list(left)[:5]) + (", ..." if len(left) > 5 else "")
                raise ValueError(
                    f"{folder} holds {len(left)} case{'s' if len(left) != 1 else ''} ({shown}) made with other "
                    f"settings that this run does not predict again (e.g. {first}: {'; '.join(diff[:3])}"
                    f"{'; ...' if len(diff) > 3 else ''}): a folder never mixes settings, so choose another output "
                    "folder (-o), or predict those cases too"
                )

    def predict_from_files(
        self,
        list_of_lists_or_source_folder: str | list[list[str]],
        output_folder_or_list_of_truncated_output_files: str | None | list[str],
        save_probabilities: bool = False,
        overwrite: bool = True,
        num_processes_preprocessing: int = default_num_processes,
        num_processes_segmentation_export: int = default_num_processes,
        folder_with_segs_from_prev_stage: str | None = None,
        num_parts: int = 1,
        part_id: int = 0,
    ) -> list | None:
        """As nnU-Net's, after checking the previous stage against the configuration (before anything is written).

        Args:
            list_of_lists_or_source_folder: the input folder, or one list of channel files per case.
            output_folder_or_list_of_truncated_output_files: the output folder, or one output path without ending per
                case (None: return the results instead of writing them).
            save_probabilities: also write ``<case>.npz`` and ``<case>.pkl``.
            overwrite: False skips the cases already exported with the current settings (``--continue_prediction``).
            num_processes_preprocessing: preprocessing worker processes (0: in this process).
            num_processes_segmentation_export: export worker processes (0: in this process).
            folder_with_segs_from_prev_stage: the previous stage's segmentations (a cascade's second stage).
            num_parts: split the cases over this many calls.
            part_id: the part this call predicts, in ``[0, num_parts)``.

        Returns:
            One entry per predicted case, as :meth:`predict_from_data_iterator` (None when no case is left).

        Raises:
            ValueError: a case without one file per input channel of the model (:func:`check_case_channels`;
                stock failed in the network or in the normaliser after the cases before it were written), a cascade
                configuration without ``folder_with_segs_from_prev_stage`` (stock: an assertion),
                one given for a configuration that is no cascade stage (stock: the network fails on the extra one-hot
                channels), a previous-stage segmentation missing for a case, or ``part_id`` outside
                ``[0, num_parts)``; an output folder holding cases made with other settings that this call does not
                predict again (:meth:`check_output_settings`).
        """
        previous = self.configuration_manager.previous_stage_name
        if previous is not None and folder_with_segs_from_prev_stage is None:
            raise ValueError(f"this configuration is a cascade stage: it needs the segmentations of the previous stage "
                             f"({previous}) in folder_with_segs_from_prev_stage (-prev_stage_predictions)")
        if previous is None and folder_with_segs_from_prev_stage is not None:
            raise ValueError(f"folder_with_segs_from_prev_stage ({folder_with_segs_from_prev_stage}) is given, but "
                             "this configuration is no cascade stage (its plans name no previous_stage): leave it out")
        if not 0 <= part_id < num_parts:
            raise ValueError(f"part_id must be in [0, num_parts), got {part_id} with num_parts {num_parts}")
        check_case_channels(list_of_lists_or_source_folder, self.dataset_json,
                            self.plans_manager.image_reader_writer_class)
        self._save_probabilities = bool(save_probabilities)  # compared with the cases left in the folder
        self.check_output_settings(list_of_lists_or_source_folder, output_folder_or_list_of_truncated_output_files,
                                   folder_with_segs_from_prev_stage)
        return super().predict_from_files(
            list_of_lists_or_source_folder, output_folder_or_list_of_truncated_output_files,
            save_probabilities=save_probabilities, overwrite=overwrite,
            num_processes_preprocessing=num_processes_preprocessing,
            num_processes_segmentation_export=num_processes_segmentation_export,
            folder_with_segs_from_prev_stage=folder_with_segs_from_prev_stage, num_parts=num_parts, part_id=part_id)

    def predict_from_data_iterator(
        self,
        data_iterator: Iterable[dict],
        save_probabilities: bool = False,
        num_processes_segmentation_export: int = default_num_processes,
    ) -> list:
        """Predict every case of ``data_iterator`` (dicts with ``data``, ``ofile``, ``data_properties``).

        Cases with an ``ofile`` are written by :func:`export_uncertainty` (in a pool of
        ``num_processes_segmentation_export`` spawned workers; 0 exports in this process) and their records
        returned; cases without get the dict of :func:`convert_uncertainty_to_original_geometry`. With an output
        folder, ``uncertainty_config.json`` and ``uncertainty_scores.csv`` are written too.

        Args:
            data_iterator: nnU-Net's preprocessed cases.
            save_probabilities: also write ``<case>.npz`` and ``<case>.pkl``.
            num_processes_segmentation_export: export worker processes (0: in this process).

        Returns:
            One entry per case, in order (a record or a result dict, above).
        """
        folders: set[str] = set()
        self._save_probabilities = bool(save_probabilities)  # recorded in every case's settings
        export_kwargs = self._export_kwargs()  # the same for every case (case_settings attaches Rate-In once)
        # the previous-stage digests of this call's cases (_internal_get_data_iterator_from_lists_of_filenames)
        prev_digests, self._prev_stage_digests = getattr(self, "_prev_stage_digests", {}), {}
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
                kwargs = dict(export_kwargs)
                if ofile is not None:
                    kwargs["prev_stage_digests"] = prev_digests.get(ofile)
                    fn, args = export_uncertainty, (result, properties, self.configuration_manager,
                                                    self.plans_manager, self.dataset_json, ofile, save_probabilities)
                else:
                    fn, args = convert_uncertainty_to_original_geometry, (
                        result, self.plans_manager, self.configuration_manager, self.label_manager, properties)
                    kwargs.pop("mi_meaning")
                    kwargs.pop("settings")
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
        for folder in folders:  # every record of the folder made with these settings (earlier runs' too)
            write_scores_table(folder, export_kwargs["settings"])
        compute_gaussian.cache_clear()
        empty_cache(self.device)
        return results

    def _internal_get_data_iterator_from_lists_of_filenames(self, input_list_of_lists: list, seg_from_prev_stage_files,
                                                            output_filenames_truncated, num_processes: int):
        """Stock's preprocessing workers, or with ``num_processes == 0`` preprocessing in this process.

        Each case's previous-stage segmentation is digested first (before it is read: one edited meanwhile makes a
        resume predict the case again); :meth:`predict_from_data_iterator` records it with the case.
        """
        self._prev_stage_digests = {
            o: input_digests([p]) for o, p in zip(output_filenames_truncated or (), seg_from_prev_stage_files or ())
            if o is not None and p is not None
        }
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
        """Like ``predict_from_files`` without any worker process (preprocessing and export in this process).

        Args:
            list_of_lists_or_source_folder: the input folder, or one list of channel files per case.
            output_folder_or_list_of_truncated_output_files: the output folder, or one output path without ending per
                case (None: return the results instead of writing them).
            save_probabilities: also write ``<case>.npz`` and ``<case>.pkl``.
            overwrite: False skips the cases already exported with the current settings (``--continue_prediction``).
            folder_with_segs_from_prev_stage: the previous stage's segmentations (cascade).

        Returns:
            One entry per predicted case, as :meth:`predict_from_data_iterator`.
        """
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
        """Predict one image array read with the dataset's reader.

        Args:
            input_image: the image ``(C_in, *spatial)`` as the dataset's reader/writer returns it.
            image_properties: the properties the reader returned with it.
            segmentation_previous_stage: the previous stage's segmentation ``(1, x, y, z)`` as the reader's
                ``read_seg`` returns it (cascade), or None; an unsigned or bool label map is read as float32.
            output_file_truncated: write the files to this path without ending (None: return the arrays).
            save_probabilities: also write ``<case>.npz`` and ``<case>.pkl`` (with ``output_file_truncated``).

        Returns:
            The dict of :func:`convert_uncertainty_to_original_geometry` (segmentation, probabilities, mean
            probabilities, maps in the image's geometry), or, with ``output_file_truncated``, the case record.

        Raises:
            TypeError: ``input_image`` or ``segmentation_previous_stage`` is not a numpy array, or
                ``image_properties`` is not a dict.
            ValueError: ``input_image`` is not ``(C_in, x, y, z)`` with the model's input channels or holds NaN /
                inf, ``image_properties`` has no 3-entry ``spacing``, a cascade stage gets no
                ``segmentation_previous_stage`` or another configuration gets one, or it is not ``(1, x, y, z)``
                over the image's grid (:func:`check_npy_case`; stock failed in the normaliser, the network or the
                preprocessor with messages that named none of them); the folder of ``output_file_truncated`` holds
                cases made with other settings (:meth:`check_output_settings`).
        """
        check_npy_case(input_image, image_properties, segmentation_previous_stage, self.dataset_json,
                       self.configuration_manager.previous_stage_name)
        self._save_probabilities = bool(save_probabilities)
        if output_file_truncated is not None:
            # the folder's other cases must have been made with these settings (a folder never mixes settings; this
            # call rewrites its uncertainty_config.json and uncertainty_scores.csv)
            self.check_output_settings([], [os.fspath(output_file_truncated)])
        if segmentation_previous_stage is not None and segmentation_previous_stage.dtype.kind in "bu":
            # nnU-Net's cropping writes -1 outside the non-zero region into it: an unsigned label map (what a
            # segmentation usually is) failed with an OverflowError; float32, as the readers' read_seg returns
            segmentation_previous_stage = segmentation_previous_stage.astype(np.float32)
        ppa = PreprocessAdapterFromNpy([input_image], [segmentation_previous_stage], [image_properties],
                                       [output_file_truncated], self.plans_manager, self.dataset_json,
                                       self.configuration_manager, num_threads_in_multithreaded=1,
                                       verbose=self.verbose)
        return self.predict_from_data_iterator([next(ppa)], save_probabilities, 0)[0]


def check_npy_case(input_image: Any, image_properties: Any, segmentation_previous_stage: Any, dataset_json: dict,
                   previous_stage_name: str | None = None) -> None:
    """Refuse an image array that the model cannot read, before nnU-Net's preprocessing sees it.

    nnU-Net's readers return a case as ``(C_in, x, y, z)`` (a 2D image with a first spatial axis of 1) with the
    properties holding its 3-entry ``spacing``, and a cascade stage's previous segmentation as ``(1, x, y, z)``.
    Stock ``predict_single_npy_array`` takes anything: a 3D array without the channel axis failed in the transposition
    ("axes don't match array"), one with too many channels in the normaliser (an IndexError), a torch tensor in the
    preprocessor ("no attribute 'astype'"), a cascade stage without the previous stage in the network's first
    convolution, and a previous stage given to another configuration in the cropping (an OverflowError).

    Args:
        input_image: the image as the dataset's reader returns it.
        image_properties: the properties the reader returned with it.
        segmentation_previous_stage: the previous stage's segmentation, or None.
        dataset_json: the model's ``dataset.json`` (``channel_names``).
        previous_stage_name: the configuration's previous stage (a cascade stage), or None.

    Raises:
        TypeError: ``input_image`` / ``segmentation_previous_stage`` is not a numpy array, or ``image_properties``
            not a dict.
        ValueError: the shapes, channels, spacing, values or the previous stage do not fit (the message names the
            argument).

    Example:
        >>> ds = {"channel_names": {"0": "T1", "1": "T2"}, "file_ending": ".nii.gz"}
        >>> check_npy_case(np.zeros((2, 4, 5, 6), np.float32), {"spacing": (1.0, 1.0, 1.0)}, None, ds)
        >>> check_npy_case(np.zeros((4, 5, 6), np.float32), {"spacing": (1.0, 1.0, 1.0)}, None, ds)
        Traceback (most recent call last):
            ...
        ValueError: input_image must be (C_in, x, y, z), channels first as nnU-Net's readers return it (a 2D image: \
(C_in, 1, y, x)), got shape (4, 5, 6)
    """
    if not isinstance(input_image, np.ndarray):
        raise TypeError(f"input_image must be a numpy array (C_in, x, y, z) as the dataset's reader returns it, got "
                        f"{type(input_image).__name__}")
    if input_image.ndim != 4:
        raise ValueError("input_image must be (C_in, x, y, z), channels first as nnU-Net's readers return it (a 2D "
                         f"image: (C_in, 1, y, x)), got shape {tuple(input_image.shape)}")
    channels = dataset_json.get("channel_names", dataset_json.get("modality"))
    if isinstance(channels, dict) and channels and input_image.shape[0] != len(channels):
        raise ValueError(f"input_image holds {input_image.shape[0]} channels (shape {tuple(input_image.shape)}) but "
                         f"the model takes {len(channels)}: {', '.join(str(v) for v in channels.values())}")
    if not np.issubdtype(input_image.dtype, np.number) or np.issubdtype(input_image.dtype, np.complexfloating):
        raise ValueError(f"input_image must hold real numbers, got dtype {input_image.dtype}")
    if np.issubdtype(input_image.dtype, np.floating) and not np.isfinite(input_image).all():
        bad = int(input_image.size - np.isfinite(input_image).sum())
        raise ValueError(f"input_image holds {bad} non-finite voxel{'s' if bad != 1 else ''} (NaN or inf): nnU-Net's "
                         "normalisation and network turn them into NaN outputs")
    if not isinstance(image_properties, dict):
        raise TypeError(f"image_properties must be the dict the dataset's reader returned with the image, got "
                        f"{type(image_properties).__name__}")
    spacing = image_properties.get("spacing")
    try:
        spacing_ok = len(spacing) == 3 and all(
            not isinstance(v, bool) and math.isfinite(float(v)) and float(v) > 0 for v in spacing)
    except (TypeError, ValueError):
        spacing_ok = False
    if not spacing_ok:
        raise ValueError(f"image_properties['spacing'] must hold the 3 positive voxel sizes the reader returns (a 2D "
                         f"image: 999 first), got {spacing!r}")
    if previous_stage_name is not None and segmentation_previous_stage is None:
        raise ValueError(f"this configuration is a cascade stage: it needs the segmentation of the previous stage "
                         f"({previous_stage_name}) in segmentation_previous_stage")
    if previous_stage_name is None and segmentation_previous_stage is not None:
        raise ValueError("segmentation_previous_stage is given, but this configuration is no cascade stage (its plans "
                         "name no previous_stage): leave it out")
    if segmentation_previous_stage is not None:
        seg = segmentation_previous_stage
        if not isinstance(seg, np.ndarray):
            raise TypeError(f"segmentation_previous_stage must be a numpy array (1, x, y, z) as the reader's read_seg "
                            f"returns it, got {type(seg).__name__}")
        if seg.shape != (1, *input_image.shape[1:]):
            raise ValueError(f"segmentation_previous_stage must be (1, x, y, z) over the image's grid "
                             f"{tuple(input_image.shape[1:])}, got shape {tuple(seg.shape)}")


def check_case_channels(list_of_lists_or_source_folder: str | Sequence[Sequence[str]], dataset_json: dict,
                        reader_writer: Any = None) -> None:
    """Refuse input whose cases do not hold the input channels of the model, as nnU-Net reads them.

    nnU-Net lists a case's files by name (``create_lists_from_splitted_dataset_folder``: every
    ``<case>_<4 digits><ending>`` of the folder, in order) and stacks the channels its reader returns for them: one per
    file for a 2D or 3D image, several for a file that holds them (an RGB(A) image of ``NaturalImage2DIO``, as in
    nnU-Net's Dataset120_RoadSegmentation; a 4D image of ``SimpleITKIO``). So a case of an input folder must hold
    ``<case>_0000<ending>``, ``<case>_0001<ending>``, ... without a gap, no more files than the model's channels
    (``dataset.json``'s ``channel_names``, ``modality`` in older files), and, when it holds fewer files than
    channels, files that hold the channels together (read with the model's reader to count them; a case with one file
    per channel is not read). Checked for every case before any is predicted and before anything is written: nnU-Net
    stacks whatever files it finds, so a missing channel failed in the network's first convolution and a stray one in
    the normaliser, after the cases before it were written, naming neither the case nor the file; and an input
    folder without a file of the model's ending predicted nothing and succeeded. With nnU-Net's ``SimpleITKIO`` the
    channel files of a folder's case must also share one size and spacing (read from their headers).

    Args:
        list_of_lists_or_source_folder: the input folder, or one list of channel files per case.
        dataset_json: the model's ``dataset.json``.
        reader_writer: the model's nnU-Net reader/writer (class or instance, e.g.
            ``predictor.plans_manager.image_reader_writer_class``), which counts the channels of a case with fewer
            files than channels; None: the one nnU-Net picks for ``dataset_json`` and the case's first file.

    Raises:
        ValueError: one line naming the case and the missing or superfluous file, the case's files and the channels
            they hold (or, for lists, the case's number of files), a file of the folder not named
            ``<case>_<4-digit channel><ending>``, a file that the reader cannot read, channel files of one case with
            other sizes or spacings, or a folder without any file of the model's ending (naming the endings found).

    Example:
        >>> import tempfile
        >>> ds = {"channel_names": {"0": "T1", "1": "T2"}, "file_ending": ".nii.gz"}
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("a_0000.nii.gz", "a_0001.nii.gz", "b_0001.nii.gz"):
        ...         _ = (Path(d) / name).write_bytes(b"")
        ...     check_case_channels(d, ds)
        Traceback (most recent call last):
            ...
        ValueError: case b: missing b_0000.nii.gz (the model takes 2 channels: T1, T2)
    """
    channels = dataset_json.get("channel_names", dataset_json.get("modality"))
    if not isinstance(channels, dict) or not channels:
        return  # dataset.json itself is checked when the model loads
    n = len(channels)
    takes = f"the model takes {n} channel{'s' if n != 1 else ''}: {', '.join(str(v) for v in channels.values())}"
    ending = str(dataset_json.get("file_ending", ""))
    if not isinstance(list_of_lists_or_source_folder, (str, os.PathLike)):
        for files in list_of_lists_or_source_folder:
            name = os.path.basename(str(files[0])) if len(files) else "a case"
            held = _channels_held(files, n, dataset_json, reader_writer)
            if len(files) > n or (held is not None and held != n):
                holding = "" if held is None or held == len(files) else f" holding {held} channels"
                raise ValueError(f"{name}: the case has {len(files)} channel file{'s' if len(files) != 1 else ''}"
                                 f"{holding} ({takes})")
        return
    folder = Path(list_of_lists_or_source_folder)
    found: dict[str, set[int]] = {}
    other_endings: set[str] = set()
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not entry.is_file() or entry.name.startswith("."):
            continue
        if not entry.name.endswith(ending):
            other_endings.add(_file_ending(entry.name))
            continue
        named = channel_name(entry.name[:len(entry.name) - len(ending)])
        if named is None:
            raise ValueError(f"{folder / entry.name}: not named <case>_<4-digit channel>{ending} as nnU-Net's input "
                             "files are (e.g. case1_0000" + ending + ")")
        found.setdefault(named[0], set()).add(named[1])
    if not found:
        seen = ", ".join(sorted(other_endings)[:8]) + (", ..." if len(other_endings) > 8 else "")
        raise ValueError(f"input folder {folder} holds no file ending in {ending} (the model's file_ending in its "
                         f"dataset.json), so there is no case to predict; "
                         + (f"it holds files ending in {seen}: convert them to {ending}" if seen
                            else "it holds no file") + " (nnU-Net's input files are named <case>_0000" + ending + ")")
    for case, have in sorted(found.items()):
        k = len(have)
        missing = sorted(set(range(min(max(have) + 1, n))) - have)
        if missing:
            raise ValueError(f"case {case}: missing {case}_{missing[0]:04d}{ending} ({takes})")
        extra = sorted(have - set(range(n)))
        if extra:
            raise ValueError(f"case {case}: {folder / f'{case}_{extra[0]:04d}{ending}'} is no input channel of the "
                             f"model ({takes})")
        if k >= 2:
            _check_channel_grids(case, [str(folder / f"{case}_{i:04d}{ending}") for i in range(k)], reader_writer)
        if k < n:  # fewer files than channels: right only if the files hold several channels each (RGB, 4D)
            files = [str(folder / f"{case}_{i:04d}{ending}") for i in range(k)]
            held = _channels_held(files, n, dataset_json, reader_writer)
            if held == k:
                raise ValueError(f"case {case}: missing {case}_{k:04d}{ending} ({takes})")
            if held != n:
                names = ", ".join(Path(f).name for f in files)
                raise ValueError(f"case {case}: its {k} file{'s' if k != 1 else ''} ({names}) hold"
                                 f"{'s' if k == 1 else ''} {held} channel{'s' if held != 1 else ''} ({takes})")


#: nnU-Net's readers that return a file's voxels untransformed, its axes reversed (SimpleITK's order ``z, y, x``)
_REVERSED_AXES_READERS = ("SimpleITKIO", "NibabelIO")


def check_finite_inputs(list_of_lists: Sequence[Sequence[str]], dataset_json: dict, reader_writer: Any) -> None:
    """Refuse a case whose image holds NaN or infinite voxels, as nnU-Net's reader reads it, before any is predicted.

    nnU-Net takes them silently: ``SimpleITKIO``, the reader of ``.nii.gz`` datasets, reads a
    NIfTI file's NaN and infinite voxels as 0 (an intensity the image does not hold there), and other files' reach the
    normaliser, whose mean and standard deviation become NaN; earlier versions predicted and wrote the case without a
    word. ``monai-unc infer`` refuses such an image (:func:`monai_unc.io.check_finite_image`). Each channel file
    of each case is read before any case is predicted, as nnU-Net's route stops at a bad case (its other per-case
    checks too), so the cases are read once more than nnU-Net reads them: with the model's reader, except a NIfTI
    file under ``SimpleITKIO``, whose stored voxels are read with nibabel. The file is named, the channel counted
    within it, and the voxel given in the file's axis order (``i, j, k``) for NIfTI files and the readers that return
    a file's voxels with their axes reversed (``SimpleITKIO``, ``NibabelIO``), otherwise in the reader's order.

    Args:
        list_of_lists: one list of channel files per case to predict.
        dataset_json: the model's ``dataset.json`` (``file_ending``, to name the case).
        reader_writer: the model's nnU-Net reader/writer (class or instance, e.g.
            ``predictor.plans_manager.image_reader_writer_class``).

    Raises:
        monai_unc.io.CaseError: a ``ValueError`` naming the case, the file, the number of NaN and infinite voxels
            and the first of them.

    Example:
        >>> import tempfile
        >>> import SimpleITK as sitk
        >>> from nnunetv2.imageio.simpleitk_reader_writer import SimpleITKIO
        >>> with tempfile.TemporaryDirectory() as d:
        ...     image = np.zeros((2, 3, 4), np.float32)  # (z, y, x)
        ...     image[1, 2, 3] = np.nan
        ...     sitk.WriteImage(sitk.GetImageFromArray(image), f"{d}/c1_0000.nii.gz")
        ...     check_finite_inputs([[f"{d}/c1_0000.nii.gz"]], {"file_ending": ".nii.gz"}, SimpleITKIO)
        Traceback (most recent call last):
        ...
        monai_unc.io.cases.CaseError: case 'c1': its image c1_0000.nii.gz holds 1 NaN and 0 infinite voxel(s) of 24
        (the first at channel 0, voxel (3, 2, 1)): ...
    """
    rw = reader_writer() if isinstance(reader_writer, type) else reader_writer
    ending = str(dataset_json.get("file_ending", ""))
    reader = type(rw).__name__
    for files in list_of_lists:
        if not len(files):
            continue
        first = os.path.basename(str(files[0]))
        named = channel_name(first[:len(first) - len(ending)]) if ending and first.endswith(ending) else None
        for f in files:
            if reader == "SimpleITKIO" and str(f).lower().endswith((".nii", ".nii.gz")):
                import nibabel as nib

                stored = np.asanyarray(nib.load(str(f)).dataobj)  # (i, j, k[, channel]), NaN kept
                data = stored[None] if stored.ndim <= 3 else np.moveaxis(stored, -1, 0)
            else:
                data = np.asarray(rw.read_images([str(f)])[0])
                if reader in _REVERSED_AXES_READERS:  # the file's (i, j, k) order, as a viewer shows the voxel
                    data = data.transpose(0, *range(data.ndim - 1, 0, -1))
            check_finite_image(named[0] if named else first, data, os.path.basename(str(f)))


def _check_channel_grids(case: str, files: Sequence[str], reader_writer: Any) -> None:
    """Refuse a case whose channel files have other grids (size or spacing), read from the files' headers.

    nnU-Net's ``SimpleITKIO`` (the reader of ``.nii.gz`` / ``.nrrd`` / ``.mha`` datasets) refuses them with a bare
    ``RuntimeError()`` (the shapes or spacings printed on stdout) when the case is preprocessed, after the cases
    before it were written (found by hostile testing). The headers are read by SimpleITK without the voxels; other
    readers are left to their own errors.
    """
    rw = reader_writer() if isinstance(reader_writer, type) else reader_writer
    if type(rw).__name__ != "SimpleITKIO":
        return
    import SimpleITK as sitk

    grids = []
    for f in files:
        reader = sitk.ImageFileReader()
        reader.SetFileName(str(f))
        try:
            reader.ReadImageInformation()
        except RuntimeError as e:
            why = str(e).strip().splitlines()[-1] if str(e).strip() else ""
            raise ValueError(f"{f}: not readable by the model's reader SimpleITKIO ({why})") from None
        grids.append((tuple(reader.GetSize()), tuple(reader.GetSpacing())))
    for f, grid in zip(files[1:], grids[1:]):
        for what, i in (("size", 0), ("spacing", 1)):  # as SimpleITKIO compares them (np.allclose for spacings)
            same = grid[i] == grids[0][i] if i == 0 else (
                len(grid[i]) == len(grids[0][i]) and bool(np.allclose(grid[i], grids[0][i])))
            if not same:
                raise ValueError(f"case {case}: {Path(f).name} has {what} {grid[i]} but {Path(files[0]).name} has "
                                 f"{grids[0][i]}: the channels of a case must share one grid (resample them onto "
                                 f"{Path(files[0]).name}'s)")


def _check_previous_stage_shapes(list_of_lists: Sequence[Sequence[str]], segs_from_prev_stage: Sequence[str | None],
                                reader_writer: Any) -> None:
    """Refuse a previous-stage segmentation whose grid is not its case's image grid, before any case is predicted.

    A cascade stage stacks the previous stage's segmentation (one-hot) onto the image, so nnU-Net's preprocessing
    asserts that both have the same shape, case by case as it reaches them: a wrong segmentation in
    ``-prev_stage_predictions`` (another case's, or one at another resolution) failed with ``AssertionError: Shape
    mismatch between image and segmentation ... --verify_dataset_integrity`` (a flag of training) after the cases
    before it were written, or with ``Background workers died`` in a preprocessing worker (found by hostile testing).
    Both are read with the model's reader, as nnU-Net reads them (the image's first channel file).

    Args:
        list_of_lists: one list of channel files per case to predict.
        segs_from_prev_stage: the previous stage's segmentation file of each case (None: no cascade).
        reader_writer: the model's nnU-Net reader/writer (class or instance).

    Raises:
        ValueError: one line naming the case's segmentation and image files and both shapes, or a file the reader
            cannot read.
    """
    pairs = [(files, prev) for files, prev in zip(list_of_lists, segs_from_prev_stage) if prev is not None and files]
    if not pairs:
        return
    rw = reader_writer() if isinstance(reader_writer, type) else reader_writer

    def shape(read: Any, f: str) -> tuple[int, ...]:
        try:
            return tuple(int(n) for n in read(f)[0].shape[1:])
        except Exception as e:  # noqa: BLE001 - each reader fails its own way (RuntimeError, AssertionError, OSError)
            why = str(e).splitlines()[0] if str(e) else ""
            raise ValueError(f"{f}: not readable by the model's reader {type(rw).__name__} ({type(e).__name__}"
                             f"{': ' + why if why else ''})") from None

    for files, prev in pairs:
        image = shape(lambda f: rw.read_images([f]), str(files[0]))
        seg = shape(rw.read_seg, str(prev))
        if image != seg:
            raise ValueError(f"previous-stage segmentation {prev} has shape {seg} but its case's image {files[0]} has "
                             f"shape {image}: -prev_stage_predictions must hold the previous stage's predictions of "
                             "these images (nnU-Net writes them in each image's grid)")


def _file_ending(name: str) -> str:
    """A file's ending for a message: what follows ``_<4 digits>`` (nnU-Net's naming), else its last suffix."""
    stem, dot, rest = name.partition(".")
    if channel_name(stem) is not None:
        return dot + rest
    return Path(name).suffix or "(none)"


def _channels_held(files: Sequence[str], n: int, dataset_json: dict, reader_writer: Any) -> int | None:
    """How many input channels nnU-Net's reader returns for a case's files.

    None when not read: as many files as channels or more (every file holds at least one).
    """
    if not files or len(files) >= n:
        return None if files else 0
    rw = reader_writer
    if rw is None:
        rw = determine_reader_writer_from_dataset_json(dataset_json, str(files[0]), verbose=False)
    if isinstance(rw, type):
        rw = rw()
    held = 0
    for f in files:
        try:
            image, _ = rw.read_images([str(f)])
        except Exception as e:  # noqa: BLE001 - each reader fails its own way (RuntimeError, AssertionError, OSError)
            why = str(e).splitlines()[0] if str(e) else ""
            raise ValueError(f"{f}: not readable by the model's reader {type(rw).__name__} ({type(e).__name__}"
                             f"{': ' + why if why else ''})") from None
        held += int(image.shape[0])
    return held


def check_folds(use_folds: Any) -> tuple[int | str, ...]:
    """``use_folds`` as nnU-Net reads it (integers and ``"all"``), refused when empty, malformed or repeated."""
    if isinstance(use_folds, (str, int, np.integer)):
        folds = [use_folds]
    elif isinstance(use_folds, Iterable):
        folds = list(use_folds)
    else:  # np.int64(0) and 2.0 were a TypeError of list() that named nothing (hostile review 58)
        raise TypeError(f"use_folds must be a fold number, 'all' or a sequence of them, got {use_folds!r}")
    if not folds:
        raise ValueError("use_folds must name at least one fold")
    out: list[int | str] = []
    for f in folds:
        if f == "all":
            out.append("all")
            continue
        try:
            k = int(f) if not isinstance(f, (bool, np.bool_, float, np.floating)) else None
        except (TypeError, ValueError):
            k = None
        if k is None or k < 0:
            raise ValueError(f"use_folds must hold fold numbers >= 0 or 'all', got {f!r}")
        out.append(k)
    repeated = sorted({str(f) for f in out if out.count(f) > 1})
    if repeated:
        raise ValueError(f"use_folds names fold {', '.join(repeated)} more than once ({[str(f) for f in folds]}): a "
                         "repeated fold would count as several ensemble members")
    return tuple(out)


def _identical_state_dicts(parameters: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """``(first, copy)`` index pairs of state dicts that hold the same weights (folds given twice).

    Two state dicts are the same when they have the same keys and every tensor is equal (``torch.equal``: same shape,
    dtype and values; compared on the first one's device, one tensor at a time) and every other entry is equal. The
    comparison stops at the first tensor that differs, so distinct folds cost about one small tensor each; copies cost
    one pass over their weights. A tensor without values (``meta``) is never equal.

    Args:
        parameters: one state dict per fold (``nnUNetPredictor.list_of_parameters``).

    Returns:
        For each state dict equal to an earlier one, ``(index of the earliest such, its index)``.

    Example:
        >>> a = {"w": torch.ones(2)}
        >>> _identical_state_dicts([a, {"w": torch.zeros(2)}, {"w": torch.ones(2)}])
        [(0, 2)]
    """
    out = []
    for j in range(1, len(parameters)):
        for i in range(j):
            if _same_state_dict(parameters[i], parameters[j]):
                out.append((i, j))
                break
    return out


def _same_state_dict(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a is b:
        return True
    if list(a.keys()) != list(b.keys()):
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if not tensors_equal(x, y):  # meta and sparse tensors (never a fold of nnU-Net) are never equal
                return False
        elif not (type(x) is type(y) and isinstance(x, (int, float, str, bool, type(None))) and x == y):
            return False
    return True


def check_checkpoint_name(checkpoint_name: Any) -> str:
    """``checkpoint_name`` (``-chk``) as a file name of each ``fold_<f>/`` folder, refused when it holds a folder.

    Each fold's checkpoint is ``fold_<f>/<checkpoint_name>``: a name with a folder (``../fold_1/checkpoint_final.pth``)
    loaded the same file for every fold, which then counted as several ensemble members (as a repeated fold would),
    and ``nnunet-calibrate`` would write the calibrated checkpoint outside its copy.

    Args:
        checkpoint_name: the checkpoint file name, e.g. ``checkpoint_final.pth`` or ``checkpoint_best.pth``.

    Returns:
        The name.

    Raises:
        ValueError: not a non-empty file name without folders.

    Example:
        >>> check_checkpoint_name("checkpoint_best.pth")
        'checkpoint_best.pth'
    """
    if not isinstance(checkpoint_name, str) or checkpoint_name in ("", ".", "..") or \
            Path(checkpoint_name).name != checkpoint_name or "\\" in checkpoint_name:
        raise ValueError(f"checkpoint_name (-chk) must be a file name without folders (each fold's checkpoint is "
                         f"fold_<f>/<name>), got {checkpoint_name!r}")
    return checkpoint_name


def read_model_json(path: str | os.PathLike) -> dict | None:
    """A model folder's JSON file (``plans.json``, ``dataset.json``) as a dict, as nnU-Net reads it.

    Args:
        path: the file.

    Returns:
        The JSON object, or None when the file is missing (nnU-Net names a missing file itself).

    Raises:
        ValueError: one line naming the file: not valid JSON, or not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: not readable ({type(e).__name__}: {e.strerror or e})") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: deeply nested (hostile testing)
        raise ValueError(f"{path}: not valid JSON ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a JSON object (got {type(doc).__name__})")
    return doc


def _load_checkpoint(path: Path) -> Any:
    """``torch.load`` of a fold's checkpoint, memory-mapped where possible; ValueError naming an unreadable file."""
    try:
        try:  # nnU-Net loads the same file right after (weights_only=False, as here)
            return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        except RuntimeError:  # a checkpoint in torch's legacy format cannot be memory-mapped
            return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - UnpicklingError, EOFError, RuntimeError, BadZipFile, ...: a damaged file
        why = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"{path}: not a readable checkpoint ({type(e).__name__}{': ' + why if why else ''}); "
                         "copy it again from the training run") from None


def _used_folds(model_folder: str | os.PathLike, use_folds: Any, checkpoint_name: str) -> list[str]:
    """The folds nnU-Net loads from a trained model folder, in its order: the one rule the checks and digests follow.

    ``use_folds`` as given; None: nnU-Net's ``auto_detect_available_folds``, every ``fold_<k>`` folder holding the
    checkpoint, sorted by name, except ``fold_all`` (nnU-Net never picks it by itself).

    Args:
        model_folder: the trained model folder.
        use_folds: the folds to load, or None.
        checkpoint_name: the checkpoint file of each fold.

    Returns:
        The folds as text (``["0", "1"]``, ``["all"]``).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for f in ("1", "0", "all"):
        ...         (Path(d) / f"fold_{f}").mkdir()
        ...         _ = (Path(d) / f"fold_{f}" / "checkpoint_final.pth").write_bytes(b"")
        ...     _used_folds(d, None, "checkpoint_final.pth"), _used_folds(d, ("all", 1), "checkpoint_final.pth")
        (['0', '1'], ['all', '1'])
    """
    if use_folds is not None:
        return [str(f) for f in use_folds]
    folder = Path(model_folder)
    if not folder.is_dir():
        return []
    names = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name.startswith("fold_"))
    return [n[len("fold_"):] for n in names if n != "fold_all" and (folder / n / checkpoint_name).is_file()]


def check_model_files(model_folder: str | os.PathLike, use_folds: Sequence[int | str] | None,
                      checkpoint_name: str) -> dict[str, list[float] | None]:
    """Refuse a model folder whose files nnU-Net would fail on with a traceback, in one line naming the file.

    ``plans.json`` and ``dataset.json`` must be JSON objects, ``dataset.json`` must hold ``labels``, ``file_ending``
    and ``channel_names`` (or ``modality``), every used fold's checkpoint must load and name a configuration of
    ``plans.json``, and the folds must have been trained alike (trainer, configuration, mirror axes, plans). A used
    fold without its checkpoint is named with the folds and checkpoints the folder holds; other missing files are left
    to nnU-Net's own errors.

    Args:
        model_folder: the trained model folder.
        use_folds: the folds to load; None: every ``fold_<k>`` folder with the checkpoint but ``fold_all``, as nnU-Net
            picks them.
        checkpoint_name: the checkpoint file of each fold.

    Returns:
        ``{fold: t}``: the temperature each used fold's checkpoint carries (``monai_unc_temperature``, written by
        ``nnunet-calibrate`` into the checkpoints of its calibrated copy; the weights are already divided by it), or
        None for a checkpoint without one.

    Raises:
        ValueError: naming the file, as listed above, or a ``monai_unc_temperature`` that is not a list of positive
            finite numbers.
        FileNotFoundError: a used fold's checkpoint is missing (naming the fold, the checkpoint and what the folder
            holds).
    """
    folder = Path(model_folder)
    plans = read_model_json(folder / "plans.json")
    dataset = read_model_json(folder / "dataset.json")
    if dataset is not None:
        for key in ("labels", "file_ending", "channel_names"):
            value = dataset.get(key, dataset.get("modality") if key == "channel_names" else None)
            if not value or not isinstance(value, dict if key != "file_ending" else str):
                raise ValueError(f"{folder / 'dataset.json'}: no {key!r} (nnU-Net's dataset.json of the training "
                                 "data names the labels, the input channels and the file ending)")
    configurations = plans.get("configurations") if plans is not None else None
    if plans is not None and not isinstance(configurations, dict):
        raise ValueError(f"{folder / 'plans.json'}: no 'configurations' (nnU-Net's plans file of the model)")
    folds = _used_folds(folder, use_folds, checkpoint_name)
    trained: dict[Path, Any] = {}
    temperatures: dict[str, list[float] | None] = {}
    missing = [f for f in folds if not (folder / f"fold_{f}" / checkpoint_name).is_file()]
    if missing and folder.is_dir():
        # nnU-Net's own error was torch's "[Errno 2] No such file or directory: '.../fold_2/checkpoint_best.pth'",
        # naming neither the fold nor the checkpoint option, nor what the folder holds (found by hostile testing)
        held = [f"{d.name} ({', '.join(sorted(c.name for c in d.glob('*.pth'))) or 'no checkpoint'})"
                for d in sorted(folder.glob("fold_*")) if d.is_dir()]
        raise FileNotFoundError(
            f"{folder / f'fold_{missing[0]}' / checkpoint_name} not found: fold {missing[0]} (-f, use_folds) has no "
            f"checkpoint {checkpoint_name} (-chk, checkpoint_name); {folder} holds "
            f"{'; '.join(held) if held else 'no fold_<k> folder'}")
    for f in folds:
        path = folder / f"fold_{f}" / checkpoint_name
        ckpt = _load_checkpoint(path)
        init_args = ckpt.get("init_args") if isinstance(ckpt, dict) else None
        if not isinstance(init_args, dict) or "network_weights" not in ckpt:
            raise ValueError(f"{path}: not an nnU-Net checkpoint (no init_args / network_weights)")
        trained[path] = init_args.get("configuration")
        temperatures[str(f)] = _checkpoint_temperature(path, ckpt.get("monai_unc_temperature"))
        del ckpt
    _check_fold_checkpoints(folder, use_folds, checkpoint_name)  # folds that disagree: named as such first
    for path, configuration in trained.items():
        if configurations is not None and configuration not in configurations:
            raise ValueError(f"{folder / 'plans.json'}: no configuration {configuration!r}, which {path} was trained "
                             f"with (plans.json has {', '.join(map(repr, configurations)) or 'none'})")
    return temperatures


def _checkpoint_temperature(path: Path, value: Any) -> list[float] | None:
    """A checkpoint's ``monai_unc_temperature`` as a list of floats (None: none); ValueError naming the file."""
    if value is None:
        return None
    ok = isinstance(value, (list, tuple)) and len(value) > 0 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf for v in value)
    if not ok:
        raise ValueError(f"{path}: monai_unc_temperature must be a list of positive finite numbers (written by "
                         f"nnunet-calibrate), got {str(value)[:80]}")
    return [float(v) for v in value]


def _check_fold_checkpoints(model_folder: str | os.PathLike, use_folds: Sequence[int | str] | None,
                            checkpoint_name: str) -> None:
    """Refuse folds whose checkpoints were trained differently (trainer, configuration, mirror axes, plans).

    nnU-Net builds the network of every fold from the *first* fold's trainer, configuration and mirror axes and loads
    the other folds' weights into it: folds trained with another trainer, configuration or plans (e.g. a fold
    retrained after re-planning with another spacing or patch size) would be predicted with the wrong network or
    preprocessing, silently when their weights fit. The checkpoints are read memory-mapped (the weights are not
    copied); a missing checkpoint is left to nnU-Net's own error.
    """
    use_folds = _used_folds(model_folder, use_folds, checkpoint_name)
    if len(use_folds) < 2:
        return
    seen: dict[str, tuple[Any, str]] = {}
    for f in use_folds:
        path = Path(model_folder) / f"fold_{f}" / checkpoint_name
        if not path.is_file():
            return  # nnU-Net names the missing file
        ckpt = _load_checkpoint(path)
        init_args = ckpt.get("init_args", {}) if isinstance(ckpt, dict) else {}
        axes = ckpt.get("inference_allowed_mirroring_axes") if isinstance(ckpt, dict) else None
        fields = {
            "trainer_name": ckpt.get("trainer_name") if isinstance(ckpt, dict) else None,
            "configuration": init_args.get("configuration") if isinstance(init_args, dict) else None,
            "inference_allowed_mirroring_axes": None if axes is None else [int(a) for a in axes],
            "plans": json_safe(init_args.get("plans")) if isinstance(init_args, dict) else None,
        }
        del ckpt
        for key, value in fields.items():
            if key not in seen:
                seen[key] = (value, str(f))
            elif value != seen[key][0]:
                first, first_fold = seen[key]
                shown = f"{_first_difference(first, value)}" if key == "plans" else f"{first!r} vs {value!r}"
                raise ValueError(
                    f"the checkpoints of fold {first_fold} and fold {f} ({checkpoint_name}) were trained with "
                    f"different {key} ({shown}); nnU-Net would predict every fold with fold {use_folds[0]}'s: use "
                    "folds of one training run (use_folds / -f)"
                )


def _first_difference(a: Any, b: Any, path: str = "plans") -> str:
    """Where two JSON-like values first differ, e.g. ``plans.configurations.3d_fullres.spacing: [1, 1, 1] vs ...``."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if a.get(k, ...) != b.get(k, ...):
                if k in a and k in b:
                    return _first_difference(a[k], b[k], f"{path}.{k}")
                return f"{path}.{k} only in one of them"
    return f"{path}: {a!r} vs {b!r}"[:300]


@contextlib.contextmanager
def _ssn_mean_logits(nets: Sequence[nn.Module]) -> Iterator[None]:
    """Within the block every SSN head of ``nets`` returns its mean logits (sampling off); restored afterwards."""
    heads = [h for net in nets for h in find_ssn_heads(net)]
    old = [h.sampling for h in heads]
    for h in heads:
        h.sampling = False
    try:
        yield
    finally:
        for h, v in zip(heads, old):
            h.sampling = v


def _model_identity(model_folder: str, use_folds: Any, checkpoint_name: str,
                    temperatures: Mapping[str, list[float] | None]) -> dict[str, Any]:
    """The identity of a trained nnU-Net model folder, as ``uncertainty_config.json`` records it.

    ``model_folder`` (resolved), ``checkpoint``, ``fold_ids``, ``temperature`` (``{fold: t}`` of the used folds, from
    their checkpoints' ``monai_unc_temperature``, the t their weights are divided by: :func:`check_model_files`;
    None for a fold without one, and None in all for an uncalibrated model) and ``weights``
    (:func:`model_weight_digests`).
    """
    folder = Path(model_folder).resolve()
    temperature = dict(temperatures) if any(t is not None for t in temperatures.values()) else None
    return {
        "model_folder": str(folder),
        "checkpoint": checkpoint_name,
        "fold_ids": None if use_folds is None else [str(f) for f in use_folds],
        "temperature": temperature,
        "weights": model_weight_digests(folder, use_folds, checkpoint_name),
    }


def model_weight_digests(model_folder: str | os.PathLike, use_folds: Any, checkpoint_name: str
                         ) -> list[dict[str, str]]:
    """The sha256 digests of the files of a trained nnU-Net model folder that make its predictions.

    ``plans.json``, ``dataset.json`` and each used fold's checkpoint (``fold_<f>/<checkpoint_name>``, the folds of
    :func:`_used_folds`: with ``use_folds`` None those nnU-Net detects, without ``fold_all``), named relative to the
    folder.

    Args:
        model_folder: the trained model folder.
        use_folds: the folds used, or None.
        checkpoint_name: e.g. ``checkpoint_final.pth``.

    Returns:
        ``[{"file", "sha256"}]`` (:func:`monai_unc.io.weight_digests`), for the files that exist.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / "fold_0").mkdir()
        ...     for name in ("plans.json", "dataset.json", "fold_0/checkpoint_final.pth"):
        ...         _ = (Path(d) / name).write_bytes(b"")
        ...     [e["file"] for e in model_weight_digests(d, (0,), "checkpoint_final.pth")]
        ['plans.json', 'dataset.json', 'fold_0/checkpoint_final.pth']
    """
    folder = Path(model_folder)
    names = ["plans.json", "dataset.json",
             *(f"fold_{f}/{checkpoint_name}" for f in _used_folds(folder, use_folds, checkpoint_name))]
    names = [n for n in names if (folder / n).is_file()]
    return weight_digests([folder / n for n in names], names)
