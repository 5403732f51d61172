"""Batch prediction with uncertainty: the engine behind ``monai-unc infer``.

The network comes from :func:`monai_unc.workflows.models.load_network` (the shipped example, a MONAI bundle, or a
network spec with checkpoints) and the inferer from :func:`monai_unc.workflows.factory.build_inferer` (``+``-joined
sample sources such as ``"mcdropout+tta"``).

Per case, :func:`predict_case` writes (atomically: temporary name, then rename) ``<case>_seg.nii.gz`` (argmax of
the mean probabilities), ``<case>_probs.nii.gz`` (4D ``(X, Y, Z, C)``), ``<case>_<measure>.nii.gz`` for each
uncertainty map, and last ``<case>.json`` (the record that marks the case finished; its ``fingerprint`` holds the
settings the case was made with, :func:`case_fingerprint`, and ``monai_unc_version``, the package version that made
it). A resume reuses a case only when its record names the current settings: a case made with others (an interrupted
``--overwrite`` run, a record of an earlier version) is predicted again, with a warning that names the difference. A
resume with another package version keeps the cases made with the same settings and says so in a warning (seeded
draws may differ between versions; ``--overwrite`` predicts every case with this one).

Region-based (multi-label sigmoid) networks, ``activation="sigmoid"`` with ``R >= 2`` output channels (e.g. the
BraTS regions TC, WT, ET): every file is 4D with one volume per region, ``(X, Y, Z, R)``: ``<case>_seg`` uint8
region masks ``mean p_r > 0.5`` (:func:`~monai_unc.activation.foreground_masks`), ``<case>_probs`` float32 per-region
mean probabilities (they need not sum to 1), ``<case>_<measure>`` float32 per-region maps (binary entropies,
bounded by ``log 2``). The case records and, once the run is done, ``infer.json`` carry ``"multilabel": true``
and ``"regions"``: the spec of ``--regions`` (``{name: [label, ...]}`` in channel order) or, without one, the
channel names ``["0", "1", ...]`` (:func:`monai_unc.io.read_prediction_regions` reads them). A single-channel
sigmoid network stays a binary two-class problem (3D files, ``"multilabel": false``). :func:`predict_cases` skips
finished cases, so an interrupted run resumes where it stopped; it takes an explicit list of cases so that
callers can shard a cohort. :func:`run_infer` is the whole ``monai-unc infer`` loop on one process or under
``torchrun``: rank 0 prepares the output folder, every rank predicts its shard (:func:`monai_unc.engine.shard`,
sorted case ids round-robin; outputs are per-case files, so no two ranks write the same file), a case that fails is
reported with its id and the others go on, and rank 0 writes ``failures.json``. See docs/distributed.md.

:data:`INTENSITY_MODES` and :data:`FAILURES_FILE` are defined in :mod:`monai_unc.workflows.options` (without MONAI)
and re-exported here.
"""

from __future__ import annotations

import json
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from monai.transforms import Invertd

from .. import __version__
from .._utils import argmax, foreground_masks, label_map_dtype
from ..engine import (
    CaseCache,
    CohortRun,
    error_line,
    get_dist_context,
    process_cases,
    run_cases,
    settings_changes,
)
from ..evaluation.lesions import SAMPLES_SUFFIX
from ..evaluation.products import command_output_markers
from ..inferers import MemoryEstimate, available_memory, estimate_memory
from ..io import (
    INFER_RECORD,
    LIBRARIES_KEY,
    REORIENT_REMEDY,
    VERSION_KEY,
    CaseError,
    ImageCase,
    atomic_write_json,
    case_files_digest,
    changed_inputs,
    changed_outputs,
    check_case_ids,
    check_finite_image,
    check_output_kind,
    check_volume_entry,
    grid_mismatch,
    input_digests,
    json_safe,
    library_versions,
    list_image_cases,
    output_digests,
    read_json_or_none,
    read_volume,
    record_digest,
    reoriented_grid,
    save_label_maps,
    save_nifti,
    save_probabilities,
    save_region_maps,
    scratch_folder,
    without_time_axis,
)
from ..io.provenance import settings_as_compared
from ..keys import DEFAULT_RATEIN_TARGET, MEASURES, draws_at_random
from ..keys import UncertaintyKeys as K
from ..regions import regions_to_labels
from ..transforms import invert_samples
from .models import LoadedModel
from .options import FAILURES_FILE, INTENSITY_MODES, SHARED_PASS_TOKENS, method_tokens

__all__ = [
    "INTENSITY_MODES",
    "VERSION_KEY",
    "LIBRARIES_KEY",
    "library_versions",
    "FAILURES_FILE",
    "InferSettings",
    "normalize_intensity",
    "case_outputs",
    "sample_label_maps",
    "is_finished",
    "case_fingerprint",
    "load_image_case",
    "check_case_dims",
    "check_finite_image",
    "memory_warning",
    "network_in_channels",
    "network_image_cases",
    "network_out_channels",
    "network_dtype",
    "is_multilabel",
    "region_names",
    "restore_uncovered",
    "predict_case",
    "predict_cases",
    "check_run_settings",
    "record_outputs",
    "output_digests",
    "changed_outputs",
    "record_digest",
    "complete_settings",
    "run_infer",
]


def normalize_intensity(image: np.ndarray, mode: str) -> np.ndarray:
    """Intensity normalisation of a ``(C, *spatial)`` image before the network.

    ``none``; ``max`` (negative values clipped to 0, divided by the maximum, as the example model was trained);
    ``minmax`` (to [0, 1]); ``zscore`` (zero mean, unit standard deviation per channel).

    Args:
        image: the image ``(C, *spatial)``; each channel is normalised on its own.
        mode: one of :data:`INTENSITY_MODES` (``"none"``, ``"max"``, ``"minmax"``, ``"zscore"``).

    Returns:
        A float32 copy of ``image``, same shape.

    Raises:
        ValueError: an unknown ``mode``.

    Example:
        >>> import numpy as np
        >>> normalize_intensity(np.array([[-1.0, 1.0, 3.0]]), "max").tolist()
        [[0.0, 0.3333333432674408, 1.0]]
        >>> normalize_intensity(np.array([[2.0, 4.0]]), "minmax").tolist()
        [[0.0, 1.0]]
    """
    if mode not in INTENSITY_MODES:
        raise ValueError(f"intensity must be one of {INTENSITY_MODES}, got {mode!r}")
    x = image.astype(np.float32, copy=True)
    for c in range(x.shape[0]):
        ch = x[c]
        if mode == "max":
            np.clip(ch, 0, None, out=ch)
            ch /= max(float(ch.max()), 1e-6)
        elif mode == "minmax":
            lo, hi = float(ch.min()), float(ch.max())
            ch -= lo
            ch /= max(hi - lo, 1e-6)
        elif mode == "zscore":
            ch -= float(ch.mean())
            ch /= max(float(ch.std()), 1e-6)
    return x


@dataclass
class InferSettings:
    """Everything that determines the outputs of a run (stored in ``infer.json``; a resumed run must match).

    Attributes:
        model: the model's description (name, bundle or network spec; the temperature of a calibrated checkpoint).
        method: the ``+``-joined ``--method`` string (:func:`~monai_unc.workflows.factory.build_inferer`).
        samples: samples per sampling source (``infer.json`` records None under a method that draws no
            ``--samples``: :data:`~monai_unc.keys.SAMPLES_TOKENS`).
        roi: the sliding-window size per axis, or None (whole image).
        overlap: the sliding-window overlap fraction.
        intensity: the intensity normalisation (:func:`normalize_intensity`).
        measures: the uncertainty maps written.
        seed: the sampling seed (None: not seeded). ``infer.json`` and the case records hold None under a method
            that draws nothing at random (:func:`~monai_unc.keys.draws_at_random`: flips, ensemble members,
            ``softmax``), whose outputs are the same under every seed, so that a resume with another ``--seed``
            keeps them.
        activation: ``"softmax"``, ``"sigmoid"`` or None (the network outputs probabilities).
        checkpoints: the checkpoint files, for display (the identity is in ``weights``).
        tta_noise: the standard deviation of the TTA intensity noise (0: flips only).
        ratein_target: Rate-In's target information loss.
        dropout: the dropout rate set for MC dropout, or None (the network's own).
        write_probs: whether ``<case>_probs.nii.gz`` is written.
        regions: the region spec of a region-based sigmoid network ``{name: [label, ...]}`` in channel order.
        temperature: the temperature of a calibrated checkpoint at full precision (a float or one per class).
        weights: the sha256 digests of the model's files ``[{"file", "sha256"}]``.
        save_samples: whether ``<case>_samples.nii.gz`` (one label map per sample, :func:`sample_label_maps`) is
            written (``--save-samples``).
        share_passes: whether the samples shared what does not depend on a random draw (``--no-share-passes``:
            False). The maps follow the same distribution either way, but seeded draws differ, so a resume compares
            it (as it compares the seed); a rule's prediction fingerprint leaves it out, as it leaves out the seed.
        sample_batch_size: the samples of one shared-pass batch (``"auto"`` or an integer; it orders the draws).
        sw_batch_size: the sliding window's windows per network call (``--sw-batch-size``). A seeded run whose
            samples draw at random (MC dropout, Rate-In, SSN, TTA noise) under a sliding window draws other samples
            with another value (the draws are made per batch of windows), so a resume compares it; recorded only
            then and when it is not 1, so that the records of runs made before this field keep matching.
        dropout_masks: ``"element-wise on token sites"`` where the dropout the run inserts (``--dropout``, or the
            layers of a ``ratein`` source) drops single elements at a site (the tokens of a
            transformer; earlier versions erased whole tokens there), else None and not recorded, so that the records of
            convolutional networks (channel-wise, unchanged) keep matching
            (:func:`~monai_unc.workflows.infer_plan.inserted_dropout_masks`). A record of an earlier version lacks it:
            its cases are predicted again on resume.
    """

    model: str
    method: str
    samples: int
    roi: list[int] | None
    overlap: float
    intensity: str
    measures: list[str]
    seed: int | None
    activation: str | None
    checkpoints: list[str]
    tta_noise: float = 0.0
    ratein_target: float = DEFAULT_RATEIN_TARGET
    dropout: float | None = None
    write_probs: bool = True
    #: region spec of a region-based sigmoid network ``{name: [label, ...]}`` in channel order (``--regions``)
    regions: dict[str, list[int]] | None = None
    #: temperature of a calibrated checkpoint at full precision (:attr:`LoadedModel.temperature`: a float, or a list
    #: of floats, one per class); None without one. :func:`run_infer` fills it from the model when left None.
    #: Records written before this field hold the temperature only in ``model``, rounded to 4 digits.
    temperature: float | list[float] | None = None
    #: sha256 content digests of the model's files (:attr:`LoadedModel.weights`, ``[{"file", "sha256"}]``): the
    #: model's identity in a prediction fingerprint (the paths in ``checkpoints`` are for display). :func:`run_infer`
    #: fills it from the model when left None; records written before this field have none.
    weights: list[dict[str, str]] | None = None
    #: write ``<case>_samples.nii.gz`` (``--save-samples``); stored only when True, so that the records of runs made
    #: before this field existed (or without the option) keep matching
    save_samples: bool = False
    share_passes: bool = True
    sample_batch_size: int | str = "auto"
    sw_batch_size: int = 1
    dropout_masks: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The settings as ``infer.json`` stores them.

        Returns:
            A dict with one entry per field, as :func:`~monai_unc.io.provenance.settings_as_compared` compares it
            (``method`` as :func:`~monai_unc.keys.canonical_method` spells it, ``samples`` None under a method that
            draws no ``--samples``: ``tta``, ``ensemble``, ``softmax``; ``seed`` None under a method that draws nothing
            at random: :func:`~monai_unc.keys.draws_at_random`); ``save_samples`` only when True,
            ``share_passes`` and ``sample_batch_size`` only for a method with MC dropout or Rate-In samples
            (:data:`~monai_unc.workflows.factory.SHARED_PASS_TOKENS`): the records of runs made before these fields
            existed keep matching; ``sw_batch_size`` only where it changes seeded draws (:meth:`draws_per_window_batch`)
            and is not 1; ``dropout_masks`` only when set.
        """
        out = asdict(self)
        if not out["save_samples"]:
            del out["save_samples"]
        if not SHARED_PASS_TOKENS & set(method_tokens(self.method)):  # nothing to share: recorded as before
            del out["share_passes"], out["sample_batch_size"]
        # found by hostile testing: a seeded MC dropout run resumed with another --sw-batch-size mixed cases drawn
        # with other masks (MI up to 0.56 nats apart) without a word, as the value was not recorded
        if int(self.sw_batch_size) == 1 or not self.draws_per_window_batch():
            del out["sw_batch_size"]
        if self.dropout_masks is None:  # channel-wise (or no) inserted dropout: recorded as before review 67
            del out["dropout_masks"]
        # the method as canonical_method spells it and samples None under a method that draws no --samples: what
        # a resume compares (found by hostile review: --method tta --samples 7 recorded 7, its cases 8 flips)
        return settings_as_compared(out)

    def draws_per_window_batch(self) -> bool:
        """Whether ``sw_batch_size`` changes the outputs: a seeded run with random draws under a sliding window.

        MONAI runs ``sw_batch_size`` windows per network call and the random draws (dropout masks, Rate-In's
        search, SSN latents, TTA noise) are made per call, so the same seed gives other samples with another value.

        Returns:
            True for a seeded run with ``roi`` whose method draws at random (``mcdropout``, ``ratein``, ``ssn``, or
            ``tta`` with ``tta_noise > 0``).

        Example:
            >>> s = InferSettings(model="m", method="mcdropout", samples=4, roi=[64], overlap=0.25, intensity="none",
            ...                   measures=["mutual_information"], seed=0, activation="softmax", checkpoints=[])
            >>> s.draws_per_window_batch(), replace(s, seed=None).draws_per_window_batch()
            (True, False)
        """
        return self.roi is not None and self.seeded_draws()

    def seeded_draws(self) -> bool:
        """Whether the run draws random samples from its seed (which the versions of torch and MONAI may change).

        Returns:
            True for a seeded run whose method draws at random (``mcdropout``, ``ratein``, ``ssn``, or ``tta`` with
            ``tta_noise > 0``); False for an unseeded run or one whose samples are fixed (flips, ensemble members).

        Example:
            >>> s = InferSettings(model="m", method="tta", samples=4, roi=None, overlap=0.25, intensity="none",
            ...                   measures=["mutual_information"], seed=0, activation="softmax", checkpoints=[])
            >>> s.seeded_draws(), replace(s, tta_noise=0.1).seeded_draws()
            (False, True)
        """
        return self.seed is not None and draws_at_random(self.method, float(self.tta_noise))


def case_outputs(
    case_id: str, measures: Sequence[str], write_probs: bool = True, save_samples: bool = False
) -> list[str]:
    """File names :func:`predict_case` writes for a case (the record ``<case>.json`` comes last).

    Args:
        case_id: the case id.
        measures: the uncertainty maps written, in order.
        write_probs: whether the probabilities are written.
        save_samples: whether the samples' label maps are written (``<case>_samples.nii.gz``, last).

    Returns:
        The file names (in ``output``): segmentation, probabilities, one per measure, then the samples.

    Example:
        >>> case_outputs("c1", ["predictive_entropy"])
        ['c1_seg.nii.gz', 'c1_probs.nii.gz', 'c1_predictive_entropy.nii.gz']
    """
    names = [f"{case_id}_seg.nii.gz"]
    if write_probs:
        names.append(f"{case_id}_probs.nii.gz")
    names += [f"{case_id}_{m}.nii.gz" for m in measures]
    if save_samples:
        names.append(f"{case_id}{SAMPLES_SUFFIX}")
    return names


def sample_label_maps(
    samples: torch.Tensor, multilabel: bool = False, regions: Mapping[str, Sequence[int]] | None = None
) -> tuple[np.ndarray, int]:
    """The hard segmentation of each sample: what ``<case>_samples.nii.gz`` holds (``infer --save-samples``).

    Classes: the argmax of each sample's probabilities (as ``<case>_seg`` is the argmax of their mean). Regions
    (multi-label sigmoid outputs): each sample's region masks ``p_r > 0.5`` (as ``<case>_seg``) written as one label
    map by the region spec (:func:`monai_unc.regions.regions_to_labels`), so that
    :func:`~monai_unc.evaluation.lesions.read_lesion_samples` gives each region back with ``isin(labels,
    regions[r])``. One sample at a time: no second float copy of the samples.

    Args:
        samples: ``(S, C, *spatial)`` per-sample probabilities (an inferer's ``samples`` with ``keep_samples=True``,
            ``(S, B, C, *spatial)``, of one case ``[:, 0]``; under a sliding window each sample's probabilities are
            stitched before its argmax).
        multilabel: per-region probabilities.
        regions: the region spec ``{name: [label, ...]}`` in channel order (needed with ``multilabel``).

    Returns:
        ``((S, *spatial) labels, n_unrepresented)``: uint8 (uint16 above 255 classes or labels, int32 above 65535,
        from the largest label of the spec: no label is wrapped) and, for regions, the
        voxels (over all samples) whose set of regions no label of the spec has exactly (0 for classes).

    Raises:
        ValueError: ``multilabel`` without a region spec, or a spec with another number of regions.

    Example:
        >>> p = torch.tensor([[[0.9, 0.2]], [[0.1, 0.8]]]).permute(1, 0, 2)  # (S=1, C=2, 2 voxels)
        >>> labels, _ = sample_label_maps(p)
        >>> labels.tolist(), labels.dtype.name
        ([[0, 1]], 'uint8')
    """
    if multilabel and regions is None:
        raise ValueError("the samples of a region-based network need the region spec (--regions) to be label maps")
    if multilabel and len(regions) != int(samples.shape[1]):
        raise ValueError(f"the region spec names {len(regions)} regions but the samples have {samples.shape[1]}")
    top = max((v for vals in regions.values() for v in vals), default=0) if multilabel else int(samples.shape[1]) - 1
    out = np.empty((int(samples.shape[0]), *samples.shape[2:]), label_map_dtype(top, "the samples' label maps"))
    missed = 0
    for i in range(int(samples.shape[0])):
        if multilabel:
            labels, n = regions_to_labels(foreground_masks(samples[i]), regions)
            out[i] = labels.cpu().numpy()
            missed += n
        else:
            out[i] = argmax(samples[i], 0).cpu().numpy()
    return out, missed


def is_finished(case_id: str, output: Path, settings: InferSettings | None = None) -> bool:
    """Whether a case of ``output`` is finished (a resume skips it).

    A case is finished when its record exists, every file the record lists exists and, with ``settings``, the
    record names these settings (:func:`case_fingerprint`).

    Args:
        case_id: the case id.
        output: the output folder of the run.
        settings: the run's settings (None: any settings).

    Returns:
        True when finished.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     is_finished("c1", Path(folder))
        False
    """
    cache = _record_cache(Path(output), settings=settings)
    return cache.load(case_id, cache.fingerprint_of(case_id)) is not None


def case_fingerprint(settings: InferSettings) -> dict[str, Any]:
    """What a case's record holds as ``fingerprint`` and a resume compares.

    The run's settings as ``infer.json`` stores them (strict JSON).

    Args:
        settings: the run's settings.

    Returns:
        The settings as JSON data.
    """
    return json_safe(settings.to_json())


def _warn_stale(case_id: str, saved: Any, current: Any) -> None:
    changes = settings_changes(saved, current)
    warnings.warn(f"case {case_id!r} was predicted with other settings ({'; '.join(changes[:4])}"
                  f"{'; ...' if len(changes) > 4 else ''}): predicting it again", UserWarning, stacklevel=2)


def _restore_record(output: Path, record: dict[str, Any], case: ImageCase | None) -> dict[str, Any]:
    """The status of a finished case, from its record.

    ``FileNotFoundError`` when an input image changed since the case was predicted (``input_digests``, with a
    warning), or when a file it lists is missing or differs from what was written, or the record itself was edited
    (:func:`~monai_unc.io.changed_outputs`; the case is predicted again, with one warning unless files are only
    missing).
    """
    if case is not None:  # an input edited since the case was predicted: its outputs are stale
        edited = changed_inputs(case.channels, record)
        if edited:
            warnings.warn(f"case {case.case_id!r}: its input changed since it was predicted ({', '.join(edited[:3])}):"
                          " predicting it again", UserWarning, stacklevel=2)
            raise FileNotFoundError(f"the input of case {case.case_id!r} changed since it was predicted")
    bad = changed_outputs(output, record)
    if bad:
        if any(not b.endswith("(missing)") for b in bad):
            warnings.warn(f"case {record.get('case')!r}: its record or files differ from what was written "
                          f"({', '.join(bad[:3])}): predicting it again", UserWarning, stacklevel=2)
        raise FileNotFoundError(f"case {record.get('case')!r}: {bad[0]} is missing or changed")
    return {"case": case.case_id if case is not None else record.get("case"), "status": "skipped", "record": record}


def _record_cache(output: Path, overwrite: bool = False, settings: InferSettings | None = None) -> CaseCache:
    """Resume of ``infer``.

    A case is finished when ``<case>.json`` (its record, written last by :func:`predict_case`) and every file it lists
    exist and, with ``settings``, the record's ``fingerprint`` is :func:`case_fingerprint` of them (else it is predicted
    again, with a warning); ``overwrite`` predicts every case again.
    """
    current = None if settings is None else case_fingerprint(settings)  # the same settings for every case
    return CaseCache(output, None if current is None else (lambda item: current), restore=_restore_record,
                     store=False, reuse=not overwrite, on_stale=_warn_stale, saved_as=settings_as_compared)


def load_image_case(case: ImageCase) -> tuple[np.ndarray, np.ndarray]:
    """Read the image of a case.

    A case of several DICOM series folders (one per input channel: :func:`monai_unc.io.list_image_cases` with
    ``series_channels``) is read on the grid of its channel 0's series: a series of the same grid stored with its
    slices or rows the other way round is put in channel 0's voxel order, without interpolation
    (:func:`monai_unc.io.dicom.channel_on_series_grid`).

    Args:
        case: the case; its channel files must share one geometry.

    Returns:
        ``(image, affine)``: the channels stacked ``(C, *spatial)`` and the ``(4, 4)`` affine of the first one.

    Raises:
        ValueError: a channel whose shape or affine differs from channel 0's; a channel series of another patient
            or frame of reference than channel 0's.
    """
    if len(case.channels) > 1 and all(p.is_dir() for p in case.channels):
        return _load_channel_series(case)
    chans, affine = [], None
    for path in case.channels:
        data, aff = without_time_axis(read_volume(path))  # (X, Y, Z, 1, C): on its 3-D grid (review 64)
        if affine is None:
            affine = aff
        elif (order := reoriented_grid(aff, data.shape[1:], affine, chans[0].shape[1:])) is not None:
            raise ValueError(f"case {case.case_id!r}: channel {path.name} holds channel 0's grid with {order}: "
                             f"{REORIENT_REMEDY.format(what='channel 0')}")
        elif data.shape[1:] != chans[0].shape[1:]:
            raise ValueError(f"case {case.case_id!r}: channel {path.name} does not share the geometry of channel 0 "
                             f"(spatial shape {tuple(data.shape[1:])}, channel 0's {tuple(chans[0].shape[1:])})")
        elif (problem := grid_mismatch(aff, affine, data.shape[1:])) is not None:
            raise ValueError(f"case {case.case_id!r}: channel {path.name} does not share the geometry of channel 0 "
                             f"({problem})")
        chans.append(data)
    assert affine is not None
    return np.concatenate(chans, axis=0), affine


def _load_channel_series(case: ImageCase) -> tuple[np.ndarray, np.ndarray]:
    """The channels of a case given as DICOM series folders, on channel 0's grid (:func:`load_image_case`)."""
    from ..io.dicom import channel_on_series_grid, read_series

    grid = read_series(case.channels[0])
    assert grid.volume is not None
    volumes = [grid.volume]
    for path in case.channels[1:]:
        try:
            volumes.append(channel_on_series_grid(
                read_series(path), grid, f"series {path.name}",
                remedy=f"the channels of a case lie on one grid: resample it onto the grid of {case.channels[0].name}"))
        except ValueError as e:
            raise CaseError(f"case {case.case_id!r}: {e}") from None
    return np.stack(volumes), grid.affine


def check_case_dims(case: ImageCase, spatial_shape: Sequence[int], network_dims: int | None) -> None:
    """Check that a case's image has the network's dimensionality.

    A 2D image in a cohort of 3D volumes would otherwise fail deep inside the network.

    Args:
        case: the case, for the message.
        spatial_shape: the image's spatial shape.
        network_dims: the network's spatial dimensionality (None: not known, nothing checked).

    Raises:
        CaseError: naming the case and both shapes.
    """
    shape = tuple(int(n) for n in spatial_shape)
    if network_dims is not None and len(shape) != network_dims:
        raise CaseError(
            f"case {case.case_id!r}: image {case.channels[0].name} has spatial shape {shape} ({len(shape)}D) but the "
            f"network takes {network_dims}D images (shape (channels, {', '.join('NXYZ'[1:network_dims + 1])})); "
            f"every image of the cohort must be {network_dims}D"
        )


def network_in_channels(network: Any) -> int | None:
    """The input channels of ``network``.

    Its ``in_channels`` attribute (most MONAI networks), else those of its first convolution (``BasicUNet``,
    ``UNETR``, ``SwinUNETR``, ``VNet``...); None when neither exists.

    Args:
        network: the network, or a temperature-scaled wrapper with a ``network`` attribute.

    Returns:
        The number of input channels, or None.

    Example:
        >>> network_in_channels(torch.nn.Sequential(torch.nn.Conv3d(4, 8, 3), torch.nn.Conv3d(8, 2, 1)))
        4
    """
    return _network_channels(network, "in_channels")


def _network_channels(network: Any, attribute: str) -> int | None:
    """The network's ``attribute`` (``in_channels``, ``out_channels``), else its first (last) convolution's."""
    net = getattr(network, "network", network)  # a temperature-scaled wrapper
    n = getattr(net, attribute, None)
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    if isinstance(net, torch.nn.Module):
        convs = [m for m in net.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)]
        if convs:
            return int(getattr(convs[0] if attribute == "in_channels" else convs[-1], attribute))
    return None


def network_image_cases(folder: str | os.PathLike, network: Any) -> list[ImageCase]:
    """The input cases of an image folder for ``network``: DICOM input gives one series folder per input channel.

    :func:`monai_unc.io.list_image_cases` with the network's input channels (:func:`network_in_channels`): a network
    of one channel reads one series folder per case, named by case id; one of several reads one per channel, named
    ``<case>_0000/``, ``<case>_0001/``, ... as nnU-Net names its channel files (``nnunet-predict`` takes the same
    folders). Volume files are grouped by their names whatever the network.

    Args:
        folder: the image folder.
        network: the network (or a temperature-scaled wrapper).

    Returns:
        The cases, sorted by case id.

    Raises:
        ValueError: as :func:`monai_unc.io.list_image_cases` (a series folder not named by channel, a case without
            every channel).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> tmp = tempfile.TemporaryDirectory()
        >>> folder = Path(tmp.name)
        >>> for name in ("brain_0000", "brain_0001"):
        ...     (folder / name).mkdir()
        ...     _ = (folder / name / "IM0001").write_bytes(b"")
        >>> two, one = torch.nn.Conv3d(2, 3, 1), torch.nn.Conv3d(1, 3, 1)  # a network of 2 (1) input channels
        >>> [c.case_id for c in network_image_cases(folder, two)], [c.case_id for c in network_image_cases(folder, one)]
        (['brain'], ['brain_0000', 'brain_0001'])
        >>> tmp.cleanup()
    """
    channels = network_in_channels(network)
    return list_image_cases(folder, series_channels=channels if channels is not None and channels > 1 else 1)


def network_out_channels(network: Any) -> int | None:
    """The output channels of ``network``.

    Its ``out_channels`` attribute (MONAI networks), else those of its last convolution; None when neither exists.

    Args:
        network: the network, or a temperature-scaled wrapper with a ``network`` attribute.

    Returns:
        The number of output channels, or None.

    Example:
        >>> network_out_channels(torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3), torch.nn.Conv3d(8, 4, 1)))
        4
    """
    return _network_channels(network, "out_channels")


def network_dtype(network: Any) -> torch.dtype | None:
    """The floating point dtype that most of ``network``'s parameters have: the dtype it computes and returns in.

    A float64 network given a float32 input (one that casts its input to its own dtype) returns float64 logits, and
    its probabilities and running sums are float64 too (:func:`monai_unc.inferers.estimate_memory`'s
    ``network_dtype``). A temperature-scaled wrapper counts with its network: the dtype of the most parameter
    elements decides.

    Args:
        network: the network (a ``torch.nn.Module``; anything else has no parameters to read).

    Returns:
        The dtype, or None when the network has no floating point parameters (or is no module).

    Example:
        >>> network_dtype(torch.nn.Conv3d(1, 4, 3).double())
        torch.float64
        >>> network_dtype(torch.nn.ReLU()) is None
        True
    """
    if not isinstance(network, torch.nn.Module):
        return None
    counts: dict[torch.dtype, int] = {}
    for param in network.parameters():
        if param.is_floating_point():
            counts[param.dtype] = counts.get(param.dtype, 0) + param.numel()
    return max(counts, key=lambda d: counts[d]) if counts else None


def memory_warning(
    case_id: str, spatial_shape: Sequence[int], num_classes: int | None, settings: InferSettings,
    device: torch.device | str, available: int | None = None, kept_samples: int = 0, sw_batch_size: int = 1,
    ensemble_members: int = 1,
    input_dtype: torch.dtype = torch.float32,
    network_dtype: torch.dtype | None = None,
) -> str | None:
    """A one-line warning when the inference of a case will not fit in the memory of ``device``, else None.

    The need is :func:`monai_unc.inferers.estimate_memory` of the case (the network's own activations not counted,
    so it is a lower bound): ``sw_batch_size`` windows per network call (at most the case's windows at
    ``settings.overlap``), and with an ensemble the earlier members' statistics; the memory is ``available`` or
    :func:`monai_unc.inferers.available_memory`.

    Args:
        case_id: the case, for the message.
        spatial_shape: the image's spatial shape.
        num_classes: the network's output channels (None: no warning).
        settings: the run's settings (window size and overlap, measures).
        device: where the stitched outputs live.
        available: bytes available (default: measured now).
        kept_samples: the samples kept for ``--save-samples`` (0: none).
        sw_batch_size: the sliding window's windows per network call (``--sw-batch-size``; no effect without
            ``settings.roi``).
        ensemble_members: the members of ``--method ensemble`` (1: no ensemble).
        input_dtype: the dtype of the network's input.
        network_dtype: the dtype of the network's outputs (:func:`network_dtype` of the network; None: the input's).

    Returns:
        The warning, or None when the case fits or the memory is unknown.

    Example:
        >>> s = InferSettings(model="m", method="ensemble", samples=1, roi=[64], overlap=0.25, intensity="none",
        ...                   measures=["predictive_entropy"], seed=0, activation="softmax", checkpoints=[])
        >>> need = estimate_memory((128,) * 3, 105, roi_size=(64,) * 3, track_variance=False).total
        >>> memory_warning("c1", (128,) * 3, 105, s, "cpu", available=need) is None
        True
        >>> memory_warning("c1", (128,) * 3, 105, s, "cpu", available=need, ensemble_members=3)[:36]
        "case 'c1' (128x128x128, 105 classes)"
    """
    if num_classes is None or num_classes < 1:
        return None
    shape = tuple(int(n) for n in spatial_shape)
    roi = settings.roi
    if roi is not None:
        roi = list(roi) * len(shape) if len(roi) == 1 else list(roi)

    # window_disagreement: the mode, not the map: the run's inferers (window_disagreement="separate") stitch each
    # window's entropy whatever --measures asks, for MI without the windows' disagreement (found by hostile testing:
    # counted only with the map asked for, a 2-class case with the default measures needed 28 % more than the
    # warning's estimate)
    def estimate(kept: int) -> MemoryEstimate:
        return estimate_memory(shape, int(num_classes), roi_size=roi,
                               track_variance=K.VARIANCE.value in settings.measures, window_disagreement=True,
                               multilabel=settings.activation == "sigmoid" and num_classes > 1, kept_samples=kept,
                               sw_batch_size=sw_batch_size if roi is not None else 1,
                               overlap=settings.overlap if roi is not None else None,
                               ensemble_members=ensemble_members, device=device, input_dtype=input_dtype,
                               network_dtype=network_dtype)

    est = estimate(kept_samples)
    free = available if available is not None else available_memory(device)
    if free is None or est.total <= free:
        return None
    kept_bytes = est.total - estimate(0).total if kept_samples else 0
    return (f"case {case_id!r} ({'x'.join(map(str, shape))}, {num_classes} classes) needs about "
            f"{est.total / 2**30:.1f} GiB for its inference beyond the network (estimate_memory) but "
            f"{free / 2**30:.1f} GiB are available on {device}; it may run out of memory "
            f"({_memory_advice(est, kept_bytes, roi is not None, sw_batch_size, device)}; docs/inferers.md#memory)")


def _memory_advice(
    est: MemoryEstimate, kept_bytes: int, windows: bool, sw_batch_size: int, device: torch.device | str
) -> str:
    """What lowers the largest part of a memory estimate, for :func:`memory_warning`.

    ``kept_bytes``: what the kept samples of ``--save-samples`` add to it; ``windows``: the run has ``--roi``.

    Found by hostile testing: the warning always advised "a smaller --roi", which changes only one window's work; for
    a 105-class 512x512x400 case (45 GiB, 42 of them the stitched maps of the whole case) no window size helps.
    """
    if 2 * kept_bytes > est.total:
        return "without --save-samples, or with fewer --samples, the samples are not kept"
    if not windows:  # the network's activations over the whole image, not in the estimate, shrink to one window's
        return "--roi runs the network on windows instead of the whole image at once"
    if max(est.parts, key=lambda k: est.parts[k]) == "window":
        return "a smaller --roi" + (" or --sw-batch-size" if sw_batch_size > 1 else "") + " helps"
    other = " (--device cpu)" if torch.device(device).type != "cpu" else ""
    return ("most of it is the case's own maps over the whole image, which no window size changes: a device with "
            f"more memory{other} or a smaller image helps")


def _num_samples(inferer: Any, x: torch.Tensor) -> int:
    """The samples an inferer draws for the input ``x`` (the product of its sources' variants)."""
    n = 1
    for src in getattr(inferer, "sources", ()):
        n *= len(src) if src.level == "network" else src.num_variants(x)
    return n


def _sw_batch_size(inferer: Any) -> int:
    """The windows per network call of an inferer's sliding window (1 without one)."""
    n = getattr(getattr(inferer, "base_inferer", None), "sw_batch_size", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1


def _ensemble_members(inferer: Any) -> int:
    """The members of an inferer's ensemble (its network-level source; 1 without one)."""
    n = 1
    for src in getattr(inferer, "sources", ()):
        if src.level == "network":
            n *= len(src)
    return n


#: the inverted map of ones that says how much of each input voxel the preprocessed grid covered
_COVERAGE_KEY = "_monai_unc_coverage"


def restore_uncovered(
    maps: Mapping[str, torch.Tensor], coverage: torch.Tensor, multilabel: bool = False, eps: float = 0.0
) -> dict[str, torch.Tensor]:
    """Maps inverted onto the input grid, with the voxels that the network's grid did not cover filled in.

    ``Invertd`` undoes a crop (``CropForegroundd``, ``SpatialCropd``, ...) or a zero-padded resampling by padding
    with zeros, so the inverted probabilities of a voxel outside the crop sum to 0 (and, blended with that padding by
    a linear interpolation, to less than 1 near its edge): not probabilities, and ``monai-unc evaluate`` refuses them.
    ``coverage`` is a map of ones inverted the same way (the covered fraction ``w`` of each voxel). The result is
    what the covered part says: every map divided by ``w`` (class probabilities divided by their sum, which is ``w``
    up to rounding, so that they sum to 1); where nothing is covered (``w <= eps``, or class probabilities summing to
    at most ``eps``) the network saw nothing: class probabilities are background (class 0) with probability 1, as
    nnU-Net exports outside its crop, region probabilities 0 and every uncertainty map 0 (certain). Dividing by
    ``w > 0`` keeps the argmax, so with the default ``eps = 0`` the segmentation is the stock MONAI one (``Invertd``
    then ``AsDiscreted(argmax=True)``).

    Args:
        maps: ``{"pred": (C, *spatial), <measure>: (M, *spatial), ...}`` after ``Invertd``.
        coverage: the inverted map of ones ``(1, *spatial)``.
        multilabel: ``pred`` holds per-region sigmoid probabilities (no sum constraint).
        eps: the covered fraction at or below which a voxel counts as not covered.

    Returns:
        The maps, same keys, shapes and containers (a MetaTensor keeps its meta).

    Example:
        >>> pred = torch.tensor([[0.5, 0.0, 0.3], [0.5, 0.0, 0.1]])  # 2 classes, 3 voxels: covered, outside, edge
        >>> out = restore_uncovered({"pred": pred, "u": torch.tensor([[0.7, 0.0, 0.2]])}, torch.tensor([[1, 0, 0.4]]))
        >>> out["pred"].tolist(), [round(v, 4) for v in out["u"][0].tolist()]
        ([[0.5, 1.0, 0.75], [0.5, 0.0, 0.25]], [0.7, 0.0, 0.5])
    """
    from monai.data import MetaTensor

    def plain(t: torch.Tensor) -> torch.Tensor:
        return t.as_tensor() if isinstance(t, MetaTensor) else t

    w = plain(coverage).to(torch.float64)
    inside = w > eps
    out: dict[str, torch.Tensor] = {}
    for key, value in maps.items():
        m = plain(value)
        x = m.to(torch.float64)
        if key == K.PRED.value and not multilabel:
            total = x.sum(0, keepdim=True)
            inside_p = total > eps
            background = torch.zeros_like(x)
            background[0] = 1.0
            res = torch.where(inside_p, x / torch.where(inside_p, total, 1.0), background)
        else:
            res = torch.where(inside, x / torch.where(inside, w, 1.0), torch.zeros_like(x))
            if key == K.PRED.value:
                res = res.clamp(0.0, 1.0)
        res = res.to(m.dtype)
        if isinstance(value, MetaTensor):
            res = MetaTensor(res, meta=dict(value.meta), applied_operations=list(value.applied_operations))
        out[key] = res
    return out


def _infer_input(
    case: ImageCase, x: torch.Tensor, model: LoadedModel, inferer: Any, settings: InferSettings, device: torch.device
) -> Any:
    """The inferer's output for a case's network input ``x`` ``(1, C, *spatial)``, after the memory warning.

    Raises:
        CaseError: the inference failed (a shape error deep inside the network or the inferer), in one line.
    """
    kept = _num_samples(inferer, x) if settings.save_samples else 0
    warning = memory_warning(case.case_id, x.shape[2:], network_out_channels(model.network), settings, device,
                             kept_samples=kept, sw_batch_size=_sw_batch_size(inferer),
                             ensemble_members=_ensemble_members(inferer),
                             input_dtype=x.dtype if x.is_floating_point() else torch.float32,
                             network_dtype=network_dtype(model.network))
    if warning is not None:
        warnings.warn(warning, UserWarning, stacklevel=3)
    try:
        return inferer(x, model.network)
    except (RuntimeError, ValueError, IndexError) as e:  # shape errors deep inside the network / inferer
        hint = ""
        if settings.roi is None and "size" in str(e).lower():  # e.g. a U-Net's skip connection of another size
            hint = ("; without --roi the whole image goes through the network at once, and a U-Net needs every "
                    "size divisible by its downsampling factor: pass --roi with the window it was trained on"
                    + (" (64)" if settings.model.startswith("example") else ""))
        raise CaseError(f"case {case.case_id!r}: inference failed on the input of shape {tuple(x.shape)} "
                        f"(batch, channels, *spatial): {error_line(e)}{hint}") from e


def _run_with_preprocessing(
    case: ImageCase, model: LoadedModel, inferer: Any, device: torch.device, settings: InferSettings,
    output: Path | None = None,
) -> tuple[dict, Any]:
    """Bundle preprocessing: transform, infer and invert every map back onto the input grid.

    The voxels that the network's grid did not cover (outside a crop) are filled by :func:`restore_uncovered`. The
    preprocessed input gets the memory warning and the one-line error of a failed inference, as an input without
    preprocessing does (:func:`_infer_input`; found by the review of the last session: a bundle's preprocessed case
    had neither).

    A case of DICOM series is read as without preprocessing (:func:`load_image_case`: slices ordered by position,
    each channel on channel 0's voxel order) and given to the preprocessing as NIfTI files in a scratch folder in
    ``output`` (found by hostile testing: MONAI's ``LoadImaged`` read a series folder ordering its slices by
    ``InstanceNumber``, so a series numbered out of slice order was predicted scrambled, with another affine and exit
    status 0, and the channel series of a case stored the other way round were refused).
    """
    src = [str(p) for p in case.channels]
    if any(p.is_dir() for p in case.channels):
        image, affine = load_image_case(case)
        with scratch_folder(Path(output if output is not None else ".") / case.case_id, "series") as scratch:
            files = [str(save_nifti(image[c], affine, scratch / f"channel{c}.nii.gz")) for c in range(len(image))]
            return _preprocess_and_infer(case, files, src, model, inferer, device, settings)
    return _preprocess_and_infer(case, src, src, model, inferer, device, settings)


def _preprocess_and_infer(
    case: ImageCase, files: list[str], src: list[str], model: LoadedModel, inferer: Any, device: torch.device,
    settings: InferSettings
) -> tuple[dict, Any]:
    """:func:`_run_with_preprocessing` on the image ``files`` of the case (``src`` names its inputs in errors)."""
    key = model.input_key
    try:
        data = model.preprocessing({key: files[0] if len(files) == 1 else files})  # type: ignore[misc]
    except Exception as e:
        raise CaseError(_preprocessing_error(case.case_id, src, e)) from e
    image = data[key]
    # the preprocessed image: a NaN voxel of the file, or one a transform made, named as without a bundle
    check_finite_image(case.case_id, image.detach().cpu().numpy() if isinstance(image, torch.Tensor)
                       else np.asarray(image), f"{Path(src[0]).name} after the bundle's preprocessing")
    x = image[None].to(device) if isinstance(image, torch.Tensor) else torch.as_tensor(image)[None].to(device)
    out = _infer_input(case, x, model, inferer, settings, device)
    keys = [k for k in out if k != K.SAMPLES.value]
    d = {key: image, **{k: out[k][0].detach().cpu() for k in keys}}
    # a map of ones inverted with the others: how much of each input voxel the network's grid covered (the inverse of
    # a crop or of a zero-padded resampling pads with zeros)
    d[_COVERAGE_KEY] = torch.ones_like(d[K.PRED.value][:1], dtype=torch.float32)
    d = Invertd(keys=[*keys, _COVERAGE_KEY], transform=model.preprocessing, orig_keys=key, nearest_interp=False)(d)
    affine = np.asarray(d[keys[0]].affine, dtype=np.float64)
    multilabel = is_multilabel(out, settings.activation)
    maps = restore_uncovered({k: d[k] for k in keys}, d[_COVERAGE_KEY], multilabel=multilabel)
    samples = out.get(K.SAMPLES.value) if isinstance(out, Mapping) else None
    if isinstance(samples, torch.Tensor):  # kept for --save-samples: on the input grid like <case>_seg
        out[K.SAMPLES.value] = _invert_samples(samples, image, model.preprocessing, d[_COVERAGE_KEY], multilabel,
                                               key)
    return {k: maps[k][None] for k in keys}, (out, affine)


def _preprocessing_error(case_id: str, files: Sequence[str], error: BaseException) -> str:
    """The one line of a bundle preprocessing that failed on a case: the transform and the reason.

    MONAI wraps the error of a transform in ``RuntimeError: applying transform <monai...LoadImaged object at
    0x7f...>``, which names neither the reason nor the file. Found by hostile testing: a truncated input under a
    bundle's preprocessing was reported as exactly that (without a bundle: ``cannot read FILE: EOFError ...``).

    Args:
        case_id: the case.
        files: its image files.
        error: what the preprocessing raised.

    Returns:
        ``"case 'ID': the bundle's preprocessing (LoadImaged) failed on FILE: <innermost error>"``.

    Example:
        >>> try:
        ...     try:
        ...         raise EOFError("Compressed file ended")
        ...     except EOFError as e:
        ...         raise RuntimeError("applying transform <monai.transforms.LoadImaged object at 0x7f00>") from e
        ... except RuntimeError as e:
        ...     _preprocessing_error("c1", ["c1.nii.gz"], e)
        "case 'c1': the bundle's preprocessing (LoadImaged) failed on c1.nii.gz: EOFError: Compressed file ended"
    """
    names: list[str] = []
    inner: BaseException = error
    seen: set[int] = set()
    while True:
        found = re.search(r"applying transform <([\w.]+) object at 0x[0-9a-fA-F]+>", str(inner))
        if found:
            names.append(found.group(1).rsplit(".", 1)[-1])
        nxt = inner.__cause__ or inner.__context__
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(inner))
        inner = nxt
    where = f" ({names[-1]})" if names else ""
    return f"case {case_id!r}: the bundle's preprocessing{where} failed on {', '.join(files)}: {error_line(inner)}"


def _invert_samples(
    samples: torch.Tensor, image: Any, preprocessing: Callable, coverage: torch.Tensor, multilabel: bool,
    key: str = "image",
) -> torch.Tensor:
    """Each sample's probabilities ``(S, 1, C, *spatial)`` inverted onto the input grid as ``pred`` is.

    :func:`~monai_unc.transforms.invert_samples` (``Invertd`` of the stack), then :func:`restore_uncovered` of each
    sample; returns ``(S, 1, C, *input spatial)`` float32.
    """
    inverted = invert_samples(samples[:, 0].detach().cpu(), image, preprocessing, key=key, nearest_interp=False)
    back = [restore_uncovered({K.PRED.value: p}, coverage, multilabel=multilabel)[K.PRED.value].float()
            for p in inverted.as_tensor()]
    return torch.stack(back)[:, None]


def is_multilabel(maps: dict[str, Any], activation: str | None) -> bool:
    """Whether an inferer's output ``maps`` come from a region-based network.

    ``activation="sigmoid"`` and more than one output channel. The inferer's own ``multilabel`` attribute says so when
    ``maps`` carries one; otherwise: a single-channel sigmoid output is returned as the two classes ``(1 - p, p)`` with
    ``(B, 1, *spatial)`` maps, a multi-channel one as ``R`` per-region probabilities with ``(B, R, *spatial)`` maps, and
    with two channels and no map to tell, the probabilities decide (``(1 - p, p)`` sums to 1 up to rounding).

    Args:
        maps: the inferer's output: ``"pred"`` ``(B, C, *spatial)`` and the uncertainty maps.
        activation: the run's activation.

    Returns:
        True for region-based (multi-label) outputs.
    """
    if activation != "sigmoid":
        return False
    flag = getattr(maps, "multilabel", None)
    if isinstance(flag, bool):
        return flag
    pred = maps[K.PRED.value]
    if pred.shape[1] != 2:
        return pred.shape[1] > 2
    shapes = [v.shape[1] for k, v in maps.items() if k in MEASURES]
    if shapes:
        return max(shapes) > 1
    return bool((pred.double().sum(1) - 1).abs().max() > 1e-6)


def region_names(settings: InferSettings, num_regions: int) -> dict[str, list[int]] | list[str]:
    """The ``regions`` entry of the records.

    The ``--regions`` spec (checked against the network's ``num_regions`` output channels) or the channel names ``["0",
    "1", ...]``.

    Args:
        settings: the run's settings (``settings.regions``).
        num_regions: the network's output channels.

    Returns:
        The spec ``{name: [label, ...]}``, or the channel names.

    Raises:
        ValueError: the spec names another number of regions.
    """
    if settings.regions is None:
        return [str(r) for r in range(num_regions)]
    if len(settings.regions) != num_regions:
        raise ValueError(
            f"--regions names {len(settings.regions)} regions ({', '.join(settings.regions)}) but the network "
            f"outputs {num_regions} sigmoid channels"
        )
    return {k: [int(v) for v in vals] for k, vals in settings.regions.items()}


def predict_case(
    case: ImageCase, model: LoadedModel, inferer: Any, settings: InferSettings, output: Path, device: torch.device
) -> dict[str, Any]:
    """Predict one case and write its files (module docstring).

    Args:
        case: the case.
        model: the loaded network.
        inferer: the inferer (:func:`~monai_unc.workflows.factory.build_inferer`).
        settings: the run's settings.
        output: the output folder.
        device: where the network runs.

    Returns:
        The record written to ``<case>.json`` (files, method, number of samples, seconds, shape, fingerprint, ...).

    Raises:
        CaseError: an image of the wrong dimensionality, or an inference that fails on it.
        ValueError: unreadable channels, ``--regions`` without region-based outputs, or a non-3D output.
    """
    t0 = time.time()
    for path in case.channels:  # a link to nothing, a folder x.nii.gz: the reason, not a bare "No such file"
        check_volume_entry(path)
    inputs = input_digests(case.channels)  # before reading: an input edited meanwhile makes a resume redo it
    if model.preprocessing is not None:
        maps, (raw, affine) = _run_with_preprocessing(case, model, inferer, device, settings, output)
    else:
        image, affine = load_image_case(case)
        check_case_dims(case, image.shape[1:], model.spatial_dims)
        channels = network_in_channels(model.network)
        if channels is not None and image.shape[0] != channels:  # found by hostile review 59: torch's channel error
            # came with the hint that a U-Net needs sizes divisible by its downsampling factor (--roi)
            raise CaseError(f"case {case.case_id!r}: its image has {image.shape[0]} channel(s) (one per channel file "
                            f"{case.channels[0].name}, ..., or the 4th axis of a 4D file) but the network takes "
                            f"{channels} input channel(s)")
        if np.linalg.det(np.asarray(affine, dtype=np.float64)[:3, :3]) == 0:  # found by hostile review 59: predicted,
            # then failed when written ("HeaderDataError: Could not decompose affine:")
            raise CaseError(f"case {case.case_id!r}: the affine of {case.channels[0].name} is singular (a voxel axis "
                            "of length 0, or two axes along one line): its maps cannot be placed in space; fix the "
                            "file's geometry")
        check_finite_image(case.case_id, image, case.channels[0].name)
        image = normalize_intensity(image, settings.intensity)
        x = torch.from_numpy(image)[None].to(device)
        raw = _infer_input(case, x, model, inferer, settings, device)
        maps = raw
    pred = maps[K.PRED.value]
    multilabel = is_multilabel(raw if hasattr(raw, "multilabel") else maps, settings.activation)
    if settings.regions is not None and not multilabel:
        raise ValueError(f"--regions is given but the network's output ({pred.shape[1]} channel(s) under "
                         f"activation {settings.activation!r}) is not region-based: regions need --activation "
                         "sigmoid and at least 2 output channels")
    regions = region_names(settings, int(pred.shape[1])) if multilabel else None
    if settings.save_samples and multilabel and settings.regions is None:
        raise ValueError(f"case {case.case_id!r}: --save-samples of a region-based network needs --regions (the "
                         "labels that the samples' label maps hold)")
    if multilabel:  # region masks p > 0.5, the decision of the calibration metrics (foreground_masks)
        seg = foreground_masks(pred[0]).to(torch.uint8).cpu().numpy()
    else:
        seg = argmax(pred, 1)[0].to(torch.int16).cpu().numpy()
    spatial = seg.shape[1:] if multilabel else seg.shape
    if len(spatial) != 3:
        raise ValueError(f"case {case.case_id!r}: only 3D volumes are written as NIfTI, got spatial shape {spatial}")
    names = case_outputs(case.case_id, [m for m in settings.measures if m in maps], settings.write_probs,
                         settings.save_samples)
    # an earlier record (--overwrite) must not mark a case finished whose new files are only partly written
    (output / f"{case.case_id}.json").unlink(missing_ok=True)
    # an earlier run's files this one does not write (--overwrite with other measures, --no-probs, without
    # --save-samples): never mixed
    for stale in set(case_outputs(case.case_id, MEASURES, save_samples=True)) - set(names):
        (output / stale).unlink(missing_ok=True)
    # the header of the input the outputs belong to (its sform / qform codes, qform and unit, when they are on its
    # grid): ITK-based viewers then place every output where they place the input (an SPM-coregistered image's
    # qform, a file in microns)
    like = case.channels[0]
    if multilabel:
        save_region_maps(seg, affine, output / names[0], dtype="uint8", like=like)
    else:
        save_nifti(seg, affine, output / names[0], like=like)
    i = 1
    if settings.write_probs:  # (C, X, Y, Z) class or region probabilities, 4D either way
        save_probabilities(pred[0].float(), affine, output / names[1], like=like)
        i = 2
    for m in settings.measures:
        if m in maps:
            if multilabel:
                save_region_maps(maps[m][0].float(), affine, output / names[i], like=like)
            else:
                save_nifti(maps[m][0, 0].float(), affine, output / names[i], like=like)
            i += 1
    missed = None
    if settings.save_samples:  # one label map per sample, on the grid and affine of <case>_seg
        labels, missed = sample_label_maps(raw[K.SAMPLES.value][:, 0], multilabel, regions if multilabel else None)
        save_label_maps(labels, affine, output / names[-1], like=like)
        del labels
        if missed:
            warnings.warn(f"case {case.case_id!r}: {missed} sample voxel(s) hold a set of regions that no label of "
                          "--regions has; each got the label of the largest subset of them", UserWarning, stacklevel=2)
    record = {
        "case": case.case_id,
        "inputs": [str(p) for p in case.channels],
        "input_digests": inputs,  # a resume predicts the case again when an input's content changed
        "files": names,
        "method": settings.method,
        "num_samples": int(getattr(raw, "num_samples", 1)),
        "mi_meaning": str(getattr(raw, "mi_meaning", "none")),
        "seconds": round(time.time() - t0, 3),
        "shape": list(spatial),
        "multilabel": multilabel,
        "fingerprint": case_fingerprint(settings),  # the settings a resume compares (_record_cache)
        VERSION_KEY: __version__,  # provenance: seeded draws may differ between versions (check_run_settings)
        LIBRARIES_KEY: library_versions(),  # torch draws the dropout masks and noise of a seed (check_run_settings)
        "file_digests": output_digests(output, names),  # a resume redoes a case whose files changed since
    }
    if multilabel:
        record["regions"] = regions
    if missed is not None and multilabel:
        record["samples_unrepresented_voxels"] = missed
    extras = getattr(raw, "extras", {}) or {}
    rates = extras.get("rate_in_rates")
    if rates:
        record["rate_in_mean_rates"] = {k: float(v.float().mean()) for k, v in rates.items()}
    record = json_safe(record)  # as it reads back (NaN as null): the digest is that of the written text
    record["record_digest"] = record_digest(record)  # last: a resume predicts again a case whose record was edited
    atomic_write_json(output / f"{case.case_id}.json", record)  # strict JSON: no bare NaN
    return record


def _setting_differs(name: str, old: Any, new: Any) -> bool:
    """``old != new`` for the recorded setting ``name``; for ``regions``, the order of the spec's entries counts too.

    The ``--regions`` spec names the network's channels in order (found by hostile review: ``{"TC", "WT", "ET"}``
    and ``{"ET", "WT", "TC"}`` compared equal, so a resume after correcting the order kept sample label maps made
    under the other channel-to-label mapping).
    """
    if name == "regions" and isinstance(old, dict) and isinstance(new, dict) and list(old) != list(new):
        return True
    return old != new


def check_run_settings(output: Path, settings: InferSettings, overwrite: bool = False,
                       overwrite_option: bool = True) -> None:
    """Write ``infer.json`` (the settings and the package version), refusing to resume a run made with other settings.

    A run whose settings differ is refused (unless ``overwrite``) once it has finished a case with other settings (a
    run that finished nothing, or whose every finished case was made with this run's settings, may be restarted);
    one that another version of the package made resumes with a warning (its finished cases are kept: seeded draws
    may differ between versions), and so does a seeded run made with other versions of torch or MONAI
    (:func:`library_versions`: they draw the samples of a seed, :meth:`InferSettings.seeded_draws`).

    Args:
        output: the output folder.
        settings: the run's settings.
        overwrite: replace the settings of an earlier run.
        overwrite_option: whether the command has ``--overwrite``, which the refusals and warnings then suggest (else
            another ``--output``; ``monai-unc demo`` has none: in earlier versions its refusal said "pass
            --overwrite").

    Raises:
        ValueError: naming the settings that differ, or an output folder holding another command's outputs
            (:func:`monai_unc.io.check_output_kind`).
    """
    check_output_kind(output, "infer", command_output_markers())  # not another command's folder
    path = output / INFER_RECORD
    new = json_safe(settings.to_json())  # as it reads back from the file (strict JSON)
    ways_out = ["choose another --output"] + (["pass --overwrite"] if overwrite_option else [])
    libraries = library_versions()
    records = [p for p in output.glob("*.json") if p.name not in ("infer.json", FAILURES_FILE)]
    if path.is_file() and records and not overwrite:
        try:
            doc = json.loads(path.read_text())
        except (ValueError, RecursionError):  # RecursionError: deeply nested (found by hostile testing)
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        old = settings_as_compared(doc.get("settings", {}))  # an earlier run's unused --dropout: as absent
        old = old if isinstance(old, dict) else {}
        made_by = doc.get(VERSION_KEY)
        # a record older than a field of _RECORDED_LATER lacks it: not compared here (each case made otherwise is
        # predicted again by its fingerprint, with a warning)
        diff = sorted(k for k in set(old) | set(new) if _setting_differs(k, old.get(k), new.get(k))
                      and not (k in _RECORDED_LATER and k not in old))
        # found by hostile testing of crash consistency: ``infer --overwrite`` with other settings, interrupted
        # (Ctrl-C, SIGKILL) before it finished a case, left the earlier run's cases, whole, under its own infer.json:
        # the resume with the earlier settings was refused ("different settings") and evaluate refused the folder, so
        # every case had to be predicted again. Settings (all known, of a readable record) that every finished case
        # was made with resume
        unknown = [k for k in diff if k not in InferSettings.__dataclass_fields__]
        readable = isinstance(doc.get("settings"), dict)  # an unreadable record stays refused (--overwrite)
        if diff and not unknown and readable and all(_made_with(p, new) for p in records):
            diff = []
        if unknown and made_by == __version__:  # found by review36: "made by <this version> ... resume it with that
            # version" of a hand-edited record
            raise ValueError(
                f"{path} names settings that this version ({__version__}), which wrote it, does not know "
                f"({', '.join(k[:60] for k in unknown[:5])}): the file was edited outside monai-unc; "
                f"{_either(ways_out)}"
            )
        if unknown:  # found by the upgrade review: a newer version's setting was "different", to resume "the same"
            who = f"monai-unc {made_by}"[:60] if isinstance(made_by, str) else "another monai-unc"
            raise ValueError(
                f"{output} holds a run made by {who} with settings this version ({__version__}) does not know "
                f"({', '.join(k[:60] for k in unknown[:5])}): {_either(['resume it with that version', *ways_out])}"
            )
        if diff:
            # "weights" digests every file of the model (checkpoints and a --network spec): name what it covers
            shown = [_SETTING_NAMES.get(k, k) for k in diff]
            raise ValueError(
                f"{output} holds a run with different settings ({', '.join(shown)}); "
                f"{_either(['resume with the same settings', *ways_out])}"
            )
        if made_by != __version__:  # the same settings: the finished cases are kept, and the user told
            who = f"monai-unc {made_by}" if isinstance(made_by, str) else "an earlier monai-unc (no version recorded)"
            warnings.warn(
                f"{output} holds cases made by {who}: those whose records name these settings are kept and this "
                f"run, monai-unc {__version__}, predicts the others (a record of 0.1.0 names none); seeded maps of "
                f"two versions may differ (each case record names its version); {ways_out[-1]} to predict every "
                f"case with this version",
                UserWarning,
                stacklevel=2,
            )
        made_with = doc.get(LIBRARIES_KEY)
        if settings.seeded_draws() and isinstance(made_with, dict) and made_with != libraries:
            # found by hostile testing: torch 2.4 and 2.14 draw other MC-dropout masks from the same seed, so a
            # seeded resume after an upgrade kept cases of one draw beside cases of another without a word
            was = ", ".join(f"{k} {v}" for k, v in sorted(made_with.items()) if isinstance(v, str))
            now = ", ".join(f"{k} {v}" for k, v in sorted(libraries.items()))
            warnings.warn(
                f"{output} holds seeded cases made with {was or 'unknown library versions'} (this run: {now}): "
                "they are kept, but the same --seed draws other samples (dropout masks, noise) with another torch "
                f"or MONAI, so the folder no longer holds one seed's draws; {ways_out[-1]} to predict every case "
                "with this run's libraries",
                UserWarning,
                stacklevel=2,
            )
    atomic_write_json(path, {"settings": new, VERSION_KEY: __version__, LIBRARIES_KEY: libraries})


def _either(ways: Sequence[str]) -> str:
    """``"a, b, or c"``: the ways out of a refusal of :func:`check_run_settings`."""
    return ways[0] if len(ways) == 1 else f"{', '.join(ways[:-1])}, or {ways[-1]}"


def _made_with(record: Path, settings: dict[str, Any]) -> bool:
    """Whether a case record's ``fingerprint`` is ``settings`` (as a resume compares them, :func:`_record_cache`)."""
    doc = read_json_or_none(record)
    if not isinstance(doc, dict) or "fingerprint" not in doc:
        return False
    compared = settings_as_compared(doc["fingerprint"])
    return json.dumps(compared, sort_keys=True) == json.dumps(json.loads(json.dumps(settings)), sort_keys=True)


#: settings that the records of earlier versions lack, which a resume does not compare with them: a record older than
#: the temperature field holds it in ``model`` only (compared there); one older than the weight digests has none (its
#: checkpoints are compared by path); one older than shared passes (0.1.0: every MC dropout or Rate-In sample was a
#: whole pass) has neither ``share_passes`` nor ``sample_batch_size``, which a run of such a method always records
#: now (in earlier versions the resume of a 0.1.0 MC dropout folder was refused for "different settings
#: (sample_batch_size, share_passes)" that no option could make the same); one of an earlier version has no
#: ``dropout_masks`` (its inserted dropout on tokens was channel-wise). The cases made otherwise are predicted
#: again (their fingerprints differ), so the folder never mixes them.
_RECORDED_LATER = ("temperature", "weights", "share_passes", "sample_batch_size", "dropout_masks")
#: how a resume's refusal names a setting whose key alone would mislead
_SETTING_NAMES = {"weights": "model files: the checkpoints' or the network spec's content"}


def record_outputs(output: Path, records: Sequence[dict[str, Any]]) -> None:
    """Add what the network's outputs turned out to be to ``infer.json``, next to its ``settings``.

    ``"multilabel"`` (region-based sigmoid outputs, one volume per region in every file) and, for those, ``"regions"``
    (the ``--regions`` spec or the channel names), from the case records. Nothing is added when no record says (no case
    finished).

    Args:
        output: the output folder (holding ``infer.json``).
        records: the case records (:func:`predict_case`).
    """
    found = [r for r in records if isinstance(r, dict) and "multilabel" in r]
    if not found:
        return
    path = output / INFER_RECORD
    doc = read_json_or_none(path)
    if not isinstance(doc, dict):
        return
    kinds = {json.dumps([bool(r["multilabel"]), r.get("regions")], sort_keys=True) for r in found}
    if len(kinds) > 1:
        raise ValueError(f"the cases of {output} disagree on their region outputs ({sorted(kinds)}): predict them "
                         "with one network (--overwrite)")
    doc["multilabel"] = bool(found[0]["multilabel"])
    doc.pop("regions", None)
    if doc["multilabel"]:
        doc["regions"] = found[0].get("regions")
    atomic_write_json(path, doc)


def predict_cases(
    cases: Sequence[ImageCase],
    model: LoadedModel,
    inferer: Any,
    settings: InferSettings,
    output: str | os.PathLike,
    device: str | torch.device = "cpu",
    overwrite: bool = False,
    progress: bool = True,
    desc: str = "infer",
    on_error: str = "raise",
    on_failure: Callable[[str, BaseException], None] | None = None,
) -> list[dict[str, Any]]:
    """Predict ``cases`` into ``output``, skipping finished ones (unless ``overwrite``).

    Returns one dict per case: ``{"case", "status": "written" | "skipped", "record"}``, or with
    ``on_error="continue"`` also ``{"case", "status": "failed", "error"}`` for a case whose prediction raised (the
    loop goes on; its files are not marked finished, so a rerun redoes it; ``on_failure(case_id, exception)`` is
    called at once). ``on_error="raise"`` re-raises the first error. The caller checks the output folder
    (:func:`monai_unc.io.check_output_folder`) and the settings (:func:`check_run_settings`). This is the per-case
    loop of one process or one shard: a thin call of the engine's :func:`monai_unc.engine.process_cases` with
    :func:`predict_case` and the case records as the resume cache, the loop that :func:`run_infer` runs on every
    rank.

    Args:
        cases: the cases of this process or shard.
        model: the loaded network.
        inferer: the inferer (:func:`~monai_unc.workflows.factory.build_inferer`).
        settings: the run's settings.
        output: the output folder.
        device: where the network runs.
        overwrite: predict finished cases again.
        progress: a progress bar on stderr.
        desc: the label of the progress bar.
        on_error: ``"raise"`` or ``"continue"``.
        on_failure: ``on_failure(case_id, exception)`` for a failed case (``"continue"`` only).

    Returns:
        One status dict per case, in the order of ``cases``.
    """
    if on_error not in ("raise", "continue"):
        raise ValueError(f"on_error must be 'raise' or 'continue', got {on_error!r}")
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    failed: list[tuple[str, BaseException]] = []
    done = dict(process_cases(cases, _predictor(model, inferer, settings, output, device),
                              cache=_record_cache(output, overwrite, settings),
                              failures=None if on_error == "raise" else failed, on_failure=on_failure,
                              progress=progress, desc=desc))
    errors = dict(failed)
    return [done[c.case_id] if c.case_id in done
            else {"case": c.case_id, "status": "failed", "error": error_line(errors[c.case_id])} for c in cases]


def _predictor(
    model: LoadedModel, inferer: Any, settings: InferSettings, output: Path, device: str | torch.device
) -> Callable[[ImageCase], dict[str, Any]]:
    """The per-case step of ``infer``: :func:`predict_case`, as ``{"case", "status": "written", "record"}``."""
    dev = torch.device(device)

    def predict(case: ImageCase) -> dict[str, Any]:
        return {"case": case.case_id, "status": "written",
                "record": predict_case(case, model, inferer, settings, output, dev)}

    return predict


def run_infer(
    cases: Sequence[ImageCase],
    model: LoadedModel,
    inferer: Any,
    settings: InferSettings,
    output: str | os.PathLike,
    device: str | torch.device = "cpu",
    overwrite: bool = False,
    progress: bool = True,
    dist: Any = None,
    on_failure: Callable[[Any], None] | None = None,
    finish: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """The ``monai-unc infer`` loop on one process or on every rank of a process group.

    Rank 0 removes partial files of an interrupted run and checks / writes ``infer.json``
    (:func:`check_run_settings`); every rank then predicts its shard of ``cases``
    (:func:`monai_unc.engine.shard`: sorted case ids, round-robin) with :func:`predict_cases`, continuing past a
    failing case (``on_failure(CaseFailure)`` is called at once; default: one stderr line with the case id and the
    rank). The per-case statuses are exchanged, rank 0 writes ``failures.json`` (or removes a stale one) and every
    rank returns the statuses of all cases ``{"case", "status", "rank", ["error"]}`` sorted by case id (each case
    exactly once), or raises :class:`~monai_unc.engine.CasesFailed` on every rank when a case failed. Every
    collective is reached by every rank, so a failure never leaves a rank waiting. The loop is
    :func:`monai_unc.engine.run_cases` with :func:`predict_case` as the per-case step. The temperature of a
    calibrated checkpoint (``model.temperature``) is recorded, at full precision, as ``settings.temperature`` when
    the settings leave it None.

    The statuses, the summary and ``infer.json`` name this run's cases only: the outputs of a case since removed from
    the input (an earlier run's, into the same folder) are left in the folder, as nnU-Net's predictor leaves them,
    but are neither counted nor listed (nor exported by ``finish``, which gets this run's statuses).

    Args:
        cases: all cases of the cohort (the same list on every rank).
        model: the loaded network.
        inferer: the inferer (:func:`~monai_unc.workflows.factory.build_inferer`).
        settings: the run's settings (completed from the model: :func:`complete_settings`).
        output: the output folder.
        device: where the network runs.
        overwrite: predict finished cases again.
        progress: a progress bar on rank 0.
        dist: a :class:`~monai_unc.engine.DistContext` (default :func:`~monai_unc.engine.get_dist_context`,
            which joins or initialises the process group described by torchrun's environment variables).
        on_failure: called with the :class:`~monai_unc.engine.CaseFailure` of a failed case, on its rank.
        finish: ``finish(statuses)`` on rank 0 when no case failed, the last work of the run, while the output folder
            is still held (:func:`monai_unc.io.output_lock`): e.g. the DICOM objects of ``--output-format both``,
            which a second run into the folder could otherwise interleave with; an error it raises is raised on
            every rank.

    Returns:
        The statuses of all cases ``{"case", "status", "rank", ["error"]}``, sorted by case id, on every rank.

    Raises:
        CasesFailed: on every rank when a case failed (the others were predicted).
        CaseError: a case id whose record ``<case>.json`` would be one of the folder's own files
            (:func:`monai_unc.io.check_case_ids`: ``infer``, ``failures``, ...), before any work.
    """
    check_case_ids(cases)  # a case whose record would replace infer.json or failures.json: before any work
    ctx = dist if dist is not None else get_dist_context(device)
    settings = complete_settings(settings, model)
    return _run_infer(ctx, cases, model, inferer, settings, Path(output), device, overwrite, progress, on_failure,
                      finish)


def complete_settings(settings: InferSettings, model: LoadedModel) -> InferSettings:
    """``settings`` with what only the loaded model knows, where the settings leave it None.

    The temperature of a calibrated checkpoint at full precision and the sha256 digests of the model's files
    (``weights``).

    Args:
        settings: the run's settings.
        model: the loaded model (:func:`~monai_unc.workflows.models.load_network`).

    Returns:
        The completed settings (a copy; ``settings`` is not changed).
    """
    if settings.temperature is None and model.temperature is not None:  # recorded at full precision in infer.json
        settings = replace(settings, temperature=model.temperature)
    if settings.weights is None and model.weights:
        settings = replace(settings, weights=[dict(w) for w in model.weights])
    return settings


def _run_infer(
    ctx: Any,
    cases: Sequence[ImageCase],
    model: LoadedModel,
    inferer: Any,
    settings: InferSettings,
    output: Path,
    device: str | torch.device,
    overwrite: bool,
    progress: bool,
    on_failure: Callable[[Any], None] | None,
    finish: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    def statuses(run: CohortRun) -> list[dict[str, Any]]:
        """The summary step of the run (rank 0).

        Every case's status (sorted by case id); what the finished cases' records say goes to ``infer.json``.
        """
        every = [{"case": c, "status": r["status"], "rank": k} for c, r, k in zip(run.cases, run.results, run.ranks)]
        every += [{"case": f.case, "status": "failed", "rank": f.rank, "error": f.error} for f in run.failures]
        every.sort(key=lambda r: r["case"])
        records = [read_json_or_none(output / f"{r['case']}.json") for r in every if r["status"] != "failed"]
        record_outputs(output, [r for r in records if isinstance(r, dict)])
        return every

    def summary(run: CohortRun) -> list[dict[str, Any]]:
        """:func:`statuses`, then ``finish`` (no case failed), both before the folder's lock is released."""
        every = statuses(run)
        if finish is not None:
            finish(every)
        return every

    run = run_cases(list(cases), _predictor(model, inferer, settings, output, device), command="monai-unc infer",
                    ctx=ctx, cache=_record_cache(output, overwrite, settings),
                    setup=lambda: check_run_settings(output, settings, overwrite=overwrite), summarize=summary,
                    on_failed=statuses, failures_file=output / FAILURES_FILE,
                    pack=lambda r: {"case": r["case"], "status": r["status"]}, progress=progress, desc="infer",
                    on_failure=on_failure, lock=output, agree=lambda listed: _rank_agreement(settings, listed))
    return run.summary


def _rank_agreement(settings: InferSettings, cases: Sequence[ImageCase]) -> dict[str, Any]:
    """What every rank of ``infer`` must have in common besides the case ids (``run_cases``' ``agree``).

    The settings a case's record holds (:func:`case_fingerprint`) and the names of each case's channel files
    (:func:`~monai_unc.io.case_files_digest`).
    """
    return {**case_fingerprint(settings), "input files": case_files_digest(cases)}
