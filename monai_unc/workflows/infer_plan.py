"""``monai-unc infer`` before its first case and as a whole: the plan of a run and the command in its session.

:func:`prepare_infer` loads the model, checks every option against it and builds the inferer and the settings
recorded in ``infer.json`` (an :class:`InferPlan`); :func:`monai_unc.workflows.infer.run_infer` then predicts the
cases. The command line only parses the flags and prints, so a Python caller gets the same refusals, each a
``ValueError`` (or a ``FileNotFoundError`` for a missing input) naming the option, before any case is predicted: a
method the network cannot serve (MC dropout without a dropout layer, ``ssn`` without an SSN head), measures a
deterministic pass does not give, a window size of another dimensionality, regions without
``activation="sigmoid"``, and so on. The keyword arguments are named like the flags (``--tta-noise`` is
``tta_noise``; the negated flags ``--no-probs`` and ``--no-bundle-preprocessing`` are ``write_probs=False`` and
``bundle_preprocessing=False``).

:func:`infer_command` is the whole command: the output check (:func:`~monai_unc.workflows.prepare.check_infer_output`),
:func:`prepare_infer` on every rank and :func:`~monai_unc.workflows.infer.run_infer`, inside the command's session
(process group and failed-cases step); :func:`infer_from_arguments` is the command on its parsed arguments.

This module loads the inference machinery (MONAI's inferers and transforms, the model loaders); the light checks
that the other commands share (:func:`~monai_unc.workflows.prepare.prepare_evaluate`, the readers of ``--regions``
and ``--calibration-cases``, ``--device``) are in :mod:`monai_unc.workflows.prepare`, which imports no MONAI and
still gives every name of this module (``monai_unc.workflows.prepare.prepare_infer``), loaded on first access.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._utils import check_integer, is_finite_real, main_rank_warnings, parameter_error
from ..engine import DistContext, read_dist_env, start_notice, sync_errors
from ..inferers import (
    RateInSource,
    add_dropout,
    default_channelwise,
    enable_mc_dropout,
    find_dropout_layers,
    resolve_dropout_sites,
)
from ..io import (
    CaseError,
    ImageCase,
    channel_name,
    check_case_ids,
    dicom_series_folders,
    input_folder,
    list_image_cases,
    refuse_dataset_root,
)
from ..keys import DEFAULT_OVERLAP, DEFAULT_RATEIN_TARGET, SAMPLES_TOKENS, check_dicom_options
from ..regions import RegionSpec, check_foreground_regions
from ..temperature import TemperatureScaled
from .apply import trust_from_arguments, unsigned_notice
from .arguments import EXPLICIT_OPTIONS
from .factory import build_inferer, check_method_network
from .infer import InferSettings, load_image_case, network_image_cases, run_infer
from .models import LoadedModel, check_model_activation, load_network, warn_bundle_window
from .options import INTENSITY_MODES, SHARED_PASS_TOKENS, check_roi, method_tokens, normalize_roi
from .prepare import (
    ACTIVATIONS,
    DICOM_FOLDER,
    check_dicom_input,
    check_infer_case_outputs,
    check_infer_output,
    checkpoint_list,
    infer_measures,
    infer_summary,
    read_region_spec,
    resolve_device,
)
from .reuse import RuleSettings, check_rule_model, merge_rule_settings, read_rule_settings, rule_samples
from .session import CommandResult, quiet_lines, run_command

__all__ = [
    "InferPlan",
    "check_region_channels",
    "check_window_options",
    "prepare_infer",
    "infer_command",
    "infer_from_arguments",
]


@dataclass
class InferPlan:
    """Everything :func:`~monai_unc.workflows.infer.run_infer` needs, built and checked by :func:`prepare_infer`.

    Args:
        cases: the image cases of the input folder, sorted by case id.
        model: the loaded network (eval mode, on its device; post-hoc dropout inserted when asked for).
        inferer: the :class:`~monai_unc.inferers.UncertaintyInferer` (or ``SoftmaxInferer``) of the method.
        settings: what determines the outputs, recorded in ``infer.json`` (a resumed run must match).
    """

    cases: list[ImageCase]
    model: LoadedModel
    inferer: Any
    settings: InferSettings


def check_region_channels(
    model: LoadedModel,
    regions: Mapping[str, Sequence[int]],
    case: ImageCase | None,
    roi: int | Sequence[int] | None = None,
    device: str | torch.device = "cpu",
) -> None:
    """Check that a region-based network outputs one sigmoid channel per region of ``regions``.

    The check runs once, before any case is predicted: one deterministic pass on a blank input of the first case's
    size (one window of ``roi`` when given). Skipped for a bundle with preprocessing (its output size is known only
    after the transforms) and when the blank pass itself fails (the case then reports it).

    Args:
        model: the loaded network.
        regions: the parsed ``--regions`` spec.
        case: the first image case (None: nothing to check).
        roi: the sliding-window size, if any.
        device: where the network runs.

    Raises:
        ValueError: naming ``--regions`` and both counts on a mismatch (regions need at least 2 channels).
    """
    if case is None or model.preprocessing is not None:
        return
    image, _ = load_image_case(case)
    size = list(image.shape[1:])
    if roi is not None:
        size = [roi] * len(size) if isinstance(roi, int) else list(roi)
    x = torch.zeros((1, image.shape[0], *size), dtype=torch.float32, device=device)
    try:
        with torch.no_grad():
            out = model.network(x)
    except Exception:  # a shape the network refuses: the cases report it with their ids
        return
    if isinstance(out, (tuple, list)) and out:
        out = out[0]
    if not isinstance(out, torch.Tensor) or out.ndim < 2:
        return
    channels = int(out.shape[1])
    if channels != len(regions) or channels < 2:
        raise ValueError(f"--regions names {len(regions)} region(s) ({', '.join(regions)}) but the network outputs "
                         f"{channels} channel(s): a region-based network needs one sigmoid channel per region (and at "
                         "least 2)")


def check_window_options(
    roi: int | Sequence[int] | None, overlap: Any, sw_batch_size: int = 1, rule: RuleSettings | None = None
) -> None:
    """Refuse ``--overlap`` (another than the default) and ``--sw-batch-size`` above 1 without ``--roi``.

    ``infer`` and ``calibrate`` check their sliding-window options with it before the model loads.

    Found by hostile testing: without ``--roi`` the whole image goes through the network at once, so both were
    ignored without a word, while ``infer.json`` recorded the overlap and a resume compared it (the same command
    without ``--overlap 0.5`` was refused as "different settings", or with ``--overwrite`` predicted every case again
    to identical maps); an overlap out of [0, 1) or of another type was recorded as well.

    A rule's own overlap (``--settings-from``) is accepted: an earlier version certified it without ``--roi``.

    Args:
        roi: the sliding-window size (None: the whole image in one pass).
        overlap: the sliding-window overlap fraction, in [0, 1).
        sw_batch_size: the sliding windows per network call.
        rule: the rule of ``--settings-from``, whose own overlap is accepted without ``--roi``.

    Raises:
        ValueError: naming the option.

    Example:
        >>> check_window_options(16, 0.5)
        >>> check_window_options(None, 0.5)
        Traceback (most recent call last):
            ...
        ValueError: --overlap 0.5 is the overlap of sliding windows, and without --roi the whole image goes through \
the network at once; add --roi, or drop --overlap
    """
    if not is_finite_real(overlap) or not 0 <= overlap < 1:
        raise ValueError(f"--overlap must be a number in [0, 1), got {overlap!r}")
    if roi is not None:
        return
    if overlap != DEFAULT_OVERLAP and not (rule is not None and rule.options.get("overlap") == overlap):
        raise ValueError(f"--overlap {overlap:g} is the overlap of sliding windows, and without --roi the whole image "
                         "goes through the network at once; add --roi, or drop --overlap")
    if sw_batch_size != 1:
        raise ValueError(f"--sw-batch-size {sw_batch_size} is the number of sliding windows per network call, and "
                         "without --roi the whole image goes through the network at once; add --roi, or drop "
                         "--sw-batch-size")


def _check_distinct_members(checkpoints: Sequence[str], digests: Sequence[Mapping[str, str]]) -> None:
    """Refuse ensemble members given twice: the same ``--checkpoint`` file, or two files holding the same bytes.

    Found by hostile testing: ``--checkpoint f0.pt f0.pt`` (or a copy of ``f0.pt``) ran as a two-member ensemble whose
    mutual information is 0 everywhere (one network has no disagreement with itself), recorded as two members.

    Args:
        checkpoints: the members' files, in order.
        digests: their sha256 digests (``LoadedModel.weights``), in the same order.

    Raises:
        ValueError: naming both files.
    """
    seen: dict[str, int] = {}
    for i, (path, entry) in enumerate(zip(checkpoints, digests)):
        j = seen.setdefault(entry["sha256"], i)
        if j != i:
            first = checkpoints[j]
            same = ("is given twice" if os.path.realpath(first) == os.path.realpath(path)
                    else f"and {path} hold the same weights (sha256 {entry['sha256'][:12]}...)")
            raise ValueError(f"--checkpoint: {first} {same}: an ensemble member counted twice adds no "
                             "disagreement (its mutual information with itself is 0); give each member once")


#: ``infer.json``'s ``dropout_masks`` where inserted dropout drops single elements at a site
ELEMENTWISE_DROPOUT_MASKS = "element-wise on token sites"


def inserted_dropout_masks(net: torch.nn.Module, inferer: Any) -> str | None:
    """The ``dropout_masks`` marker of a run: whether the dropout inserted into ``net`` drops elements anywhere.

    Dropout inserted without ``channelwise`` (``--dropout``: :func:`~monai_unc.inferers.add_dropout`;
    the layers a ``ratein`` source inserts into a network without dropout) takes its kind per site
    (:func:`~monai_unc.inferers.default_channelwise`): element-wise on the tokens of a transformer (``ViT`` / ``UNETR``
    / Swin blocks), where earlier versions drew channel-wise masks that erased whole tokens. The cases of such an
    earlier run are other samples, so the marker enters the run's settings (a resume predicts them again, a rule
    certified on them does not match); convolutional sites are channel-wise as before and give no marker, so their
    runs keep resuming. Layers converted from the network's own dropout keep their kind, as before.

    Args:
        net: the network, after ``--dropout`` was inserted.
        inferer: the run's inferer (its ``ratein`` source, if any, says where its layers come from).

    Returns:
        :data:`ELEMENTWISE_DROPOUT_MASKS`, or None where every inserted site is channel-wise (or nothing is inserted).

    Example:
        >>> import torch
        >>> from monai_unc.inferers import add_dropout
        >>> conv = torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3), torch.nn.ReLU(), torch.nn.Conv3d(4, 2, 1))
        >>> _ = add_dropout(conv, 0.1, after=["1"])
        >>> tokens = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
        >>> _ = add_dropout(tokens, 0.1, after=["1"])
        >>> inserted_dropout_masks(conv, None), inserted_dropout_masks(tokens, None)
        (None, 'element-wise on token sites')
    """
    if any(not hook.channelwise for hook in find_dropout_layers(net)[1]):
        return ELEMENTWISE_DROPOUT_MASKS
    for source in getattr(inferer, "sources", ()):
        if not isinstance(source, RateInSource) or source.layer_kwargs.get("channelwise") is not None:
            continue
        if source.resolved_placement(net) != "insert":  # the network's own or converted dropout: kinds as before
            continue
        try:
            sites = resolve_dropout_sites(net, source.after)
        except ValueError:  # an architecture without known stages: refused when the source runs, as before
            continue
        if any(not default_channelwise(net, site) for site in sites):
            return ELEMENTWISE_DROPOUT_MASKS
    return None


def prepare_infer(
    input: str | os.PathLike,
    *,
    model: str | None = None,
    bundle: str | os.PathLike | None = None,
    network: str | os.PathLike | dict | None = None,
    checkpoint: str | os.PathLike | Sequence[str | os.PathLike] | None = (),
    unsafe_load: bool = False,
    bundle_preprocessing: bool = True,
    allow_code: Sequence[str] = (),
    method: str = "mcdropout",
    samples: int | None = None,
    dropout: float | None = None,
    tta_noise: float = 0.0,
    ratein_target: float = DEFAULT_RATEIN_TARGET,
    measures: Sequence[str] | None = None,
    write_probs: bool = True,
    save_samples: bool = False,
    roi: int | Sequence[int] | None = None,
    overlap: float = DEFAULT_OVERLAP,
    sw_batch_size: int = 1,
    intensity: str = "auto",
    activation: str | None = "softmax",
    regions: RegionSpec | str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    seed: int | None = 0,
    rule: RuleSettings | None = None,
    share_passes: bool = True,
    sample_batch_size: int | str = "auto",
) -> InferPlan:
    """Load the model, check every option against it and build the inferer and the settings of an ``infer`` run.

    The run is ``monai-unc infer`` on the images of ``input`` (module docstring); nothing is written.

    Args:
        input: folder of images (``<case>.nii.gz``, or nnU-Net's ``<case>_0000.nii.gz`` channels).
        model: ``"example"``, the shipped MNI152 tissue UNet (exactly one of ``model``, ``bundle``, ``network``).
        bundle: a MONAI bundle folder (``configs/inference.json`` with ``network_def``, ``models/model.pt``).
        network: a network as a MONAI config: a dict, inline JSON or a ``.json``/``.yaml`` file with ``_target_``.
        checkpoint: weights (state dict); several files are the members of ``method="ensemble"`` (refused without
            ``ensemble`` in ``method``).
        unsafe_load: read checkpoints with ``torch.load(weights_only=False)`` (only for files you trust).
        allow_code: names a ``network`` spec may build besides the allowed networks (they run code: trusted specs
            only; :func:`~monai_unc.workflows.models.check_network_spec`).
        bundle_preprocessing: apply the bundle's ``preprocessing`` (and invert it on the outputs).
        method: ``+``-joined sources: ``mcdropout``, ``ratein``, ``tta``, ``ensemble``, ``ssn``, or ``softmax``.
        samples: MC dropout / Rate-In / SSN latent samples (None: 10, or with ``rule`` the rule's). Given under a
            method that draws none (``tta``, ``ensemble``, ``softmax``) it warns and ``infer.json`` records None.
        dropout: insert post-hoc dropout with this rate in (0, 1) after every encoder/decoder stage (only with a
            source that samples dropout: ``mcdropout`` or ``ratein`` in ``method``).
        tta_noise: std of the Gaussian noise of TTA (> 0 only with ``tta`` in ``method``).
        ratein_target: Rate-In information-loss target in [0, 1].
        measures: maps to write (default :data:`~monai_unc.keys.DEFAULT_MEASURES`; see :func:`infer_measures`).
        write_probs: write ``<case>_probs`` (``--no-probs``: False).
        save_samples: write ``<case>_samples``, one label map per sample (``--save-samples``; a sampling
            ``method``; with the bundle's preprocessing each sample is inverted onto the input grid).
        roi: sliding-window size (one size, or one per axis); None: the whole image at once.
        overlap: sliding-window overlap in [0, 1) (another than the default only with ``roi``).
        sw_batch_size: windows per forward pass (more than 1 only with ``roi``).
        intensity: ``"auto"`` (the model's default: ``max`` for the example), ``none``, ``max``, ``minmax``,
            ``zscore``.
        activation: ``"softmax"``, ``"sigmoid"`` (region-based with several output channels) or ``"none"`` / None.
        regions: names and labels of the sigmoid channels (see :func:`read_region_spec`; needs ``"sigmoid"``).
        device: where the network runs (``"auto"``: see :func:`resolve_device`).
        seed: random seed of the sampling.
        rule: the settings of a rule (``--settings-from``, :func:`~monai_unc.workflows.reuse.read_rule_settings`),
            already merged into the options: the model's files must be those the rule recorded
            (:func:`~monai_unc.workflows.reuse.check_rule_model`) and ``samples`` is derived from the rule's samples
            per case (:func:`~monai_unc.workflows.reuse.rule_samples`; a given ``samples`` must agree); a rule
            applied to probabilities (``needs_probabilities``) refuses ``write_probs=False``.
        share_passes: compute once per window what the MC dropout / Rate-In samples share (``--no-share-passes``:
            False, one full pass per sample).
        sample_batch_size: with shared passes, the samples run at once: ``"auto"`` or a positive integer.

    Returns:
        The :class:`InferPlan`. Every refusal is a ``ValueError`` naming the option (``FileNotFoundError`` for a
        missing ``input`` or regions file), raised before any case is predicted (with ``save_samples``, a region of
        ``regions`` holding label 0 before the model is loaded); with ``regions`` the network's
        channel count is checked by one blank pass (:func:`check_region_channels`).

    Example:
        >>> plan = prepare_infer("images", model="example", method="mcdropout+tta", samples=4)  # doctest: +SKIP
        >>> run_infer(plan.cases, plan.model, plan.inferer, plan.settings, "predictions")  # doctest: +SKIP
    """
    input_folder(input, "input", "--input folder")
    refuse_dataset_root(input, "input", "--input folder")  # an nnU-Net / MSD dataset's root: name imagesTs/
    if not isinstance(method, str):
        raise TypeError(f"--method must be a string such as 'mcdropout+tta', got {type(method).__name__}")
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"--activation must be one of {ACTIVATIONS}, got {activation!r}")
    activation = None if activation == "none" else activation
    if intensity != "auto" and intensity not in INTENSITY_MODES:
        raise ValueError(f"--intensity must be 'auto' or one of {INTENSITY_MODES}, got {intensity!r}")
    if dropout is not None and (isinstance(dropout, bool) or not isinstance(dropout, (int, float, np.floating))
                                or not 0.0 < dropout < 1.0):  # NaN fails the comparison
        raise ValueError(f"--dropout must be a rate in (0, 1), got {dropout!r}")
    if isinstance(sw_batch_size, bool) or not isinstance(sw_batch_size, (int, np.integer)) or sw_batch_size < 1:
        raise ValueError(f"--sw-batch-size must be a positive integer, got {sw_batch_size!r}")
    if not isinstance(save_samples, bool):
        raise TypeError(f"--save-samples must be True or False, got {save_samples!r}")
    if rule is not None and rule.needs_probabilities and not write_probs:
        raise ValueError(f"--no-probs: {rule.source} is applied to the probabilities of the new cases "
                         "(<case>_probs); leave out --no-probs")
    if regions is not None and activation != "sigmoid":
        raise ValueError("--regions describes the sigmoid channels of a region-based network: add --activation "
                         "sigmoid")
    spec = read_region_spec(regions)
    if save_samples and spec is not None:
        # found by review 67: the samples' label maps (regions_to_labels) refuse a region holding label 0, which
        # failed at the first case, after the model was loaded; refused here, with the other options
        try:
            check_foreground_regions(spec)
        except ValueError as e:
            raise parameter_error(ValueError(f"--{e}"), "regions") from None
    roi = normalize_roi(roi)
    check_window_options(roi, overlap, sw_batch_size, rule)
    names = infer_measures(method, measures)
    device = resolve_device(device)
    try:
        cases: list[ImageCase] | None = list_image_cases(input)
    except CaseError:
        if not dicom_series_folders(input):
            raise
        # found by hostile testing: series named by channel (<case>_0000/, <case>_0001/) beside NIfTI channel files
        # were refused as cases of one channel; a network of several reads them as one case (listed once it loads)
        cases = None
    if cases is not None:
        check_case_ids(cases)  # a case 'infer' or 'failures' would replace the run's own files: before the model loads
    # found by hostile review: accepted without a word, and infer.json recorded it while each case record held the
    # samples really drawn; warned once the plan is built (a refused command prints its one error line only)
    unused_samples = samples if samples is not None and not SAMPLES_TOKENS & set(method_tokens(method)) else None
    if dropout is not None and not SHARED_PASS_TOKENS & set(method_tokens(method)):  # found by hostile review (docs):
        # the dropout was inserted and recorded, but no source switched it on: the maps were those without it
        if rule is not None and rule.options.get("dropout") == dropout:  # the rule's own setting
            # certified by an earlier version, which accepted it: its maps were those without it, and its fingerprint
            # matches predictions made without it (normalize_fingerprint), so the rule stays usable without
            # recertifying (found by hostile review: it was refused, and predictions without it mismatched the rule)
            warnings.warn(f"{rule.source} was certified with --dropout {dropout:g} under --method {method!r}, which "
                          "samples no dropout (earlier versions accepted the option; the maps were those without it): "
                          "predicting without it", UserWarning, stacklevel=2)
            dropout = None
        else:
            raise ValueError(f"--dropout {dropout:g} inserts dropout layers that only the mcdropout and ratein sources "
                             f"sample; add mcdropout to --method {method!r}, or drop --dropout")
    files = checkpoint_list(checkpoint)
    if len(files) > 1 and "ensemble" not in method_tokens(method):  # found by hostile testing: all but the first
        # were dropped without a word (infer.json listed them all), the maps those of one network
        raise ValueError(f"--checkpoint: {len(files)} files are the members of an ensemble, but --method {method} "
                         f"uses one network; add ensemble (--method {method}+ensemble) or give one file")
    loaded = load_network(
        model=model, bundle=bundle, network=network, checkpoints=files,
        unsafe_load=unsafe_load, device=device, bundle_preprocessing=bundle_preprocessing, allow_code=allow_code,
    )  # fmt: skip
    check_model_activation(loaded, activation)  # a sigmoid bundle run with the default softmax: one error now
    if rule is None:  # a rule's settings are those it was certified with
        warn_bundle_window(loaded, roi)
    net = loaded.network.network if isinstance(loaded.network, TemperatureScaled) else loaded.network
    if cases is None or any(p.is_dir() for c in cases for p in c.channels):
        # DICOM input: one series folder per input channel of the network (<case>_0000/, ...) when it takes several
        try:
            cases = network_image_cases(input, net)
        except ValueError:
            if loaded.preprocessing is None or all(channel_name(p.name)
                                                   for p in dicom_series_folders(input)):
                raise  # series named by channel: one is missing (refused in one line, also for a bundle)
            # a bundle's preprocessing may make the network's channels from one image (RepeatChanneld, CT windows
            # concatenated): series not named by channel are one case each, as a NIfTI file is (found by hostile
            # testing: such a bundle refused every series folder, "the model takes 2 input channels")
            cases = list_image_cases(input)
        check_case_ids(cases)
    if "ensemble" in method_tokens(method):
        _check_distinct_members(loaded.checkpoints, loaded.weights[:len(loaded.checkpoints)])
    if rule is not None:  # the model the rule was certified with, and its samples per case
        check_rule_model(rule, loaded.weights, loaded.description)
        samples = rule_samples(rule, method, loaded.spatial_dims, len(loaded.checkpoints), samples)
    elif samples is None:
        samples = 10
    if loaded.spatial_dims not in (None, 3) and loaded.preprocessing is None:
        # found by hostile review 59: a 2D network predicted every case, and each failed when its maps were written
        # ("only 3D volumes are written as NIfTI"), exit 1 after the whole cohort's inference
        dims = loaded.spatial_dims
        raise ValueError(f"the network takes {dims}D images, but monai-unc infer writes 3D volumes only: every case "
                         f"would fail when its maps are written; use the Python API (monai_unc.inferers) for a {dims}D "
                         "network")
    check_roi(roi, loaded.spatial_dims)  # once, before any case
    if dropout is not None:
        add_dropout(net, p=dropout)
    if "mcdropout" in method_tokens(method):
        enable_mc_dropout(net).restore()  # no dropout layer: one error now, not one per case
    check_method_network(method, net)  # ssn: an SSN head, one error now
    if spec is not None:
        check_region_channels(loaded, spec, cases[0] if cases else None, roi, device)  # once, not once per case
    members = loaded.checkpoints if "ensemble" in method_tokens(method) else loaded.checkpoints[:1]
    inferer = build_inferer(
        method, samples=samples, roi=roi, overlap=overlap, sw_batch_size=sw_batch_size, checkpoints=members,
        unsafe_load=unsafe_load, seed=seed, tta_noise=tta_noise, ratein_target=ratein_target, activation=activation,
        measures=names, keep_samples=save_samples, share_passes=share_passes, sample_batch_size=sample_batch_size,
        checkpoint_key=loaded.checkpoint_key,
    )  # fmt: skip
    settings = InferSettings(
        model=loaded.description, method=method, samples=samples,
        roi=None if roi is None else ([roi] if isinstance(roi, int) else list(roi)), overlap=overlap,
        intensity=loaded.default_intensity if intensity == "auto" else intensity, measures=names, seed=seed,
        activation=activation, checkpoints=[str(Path(c).resolve()) for c in loaded.checkpoints],
        tta_noise=tta_noise, ratein_target=ratein_target, dropout=dropout, write_probs=write_probs,
        regions=None if spec is None else {k: list(v) for k, v in spec.items()}, save_samples=save_samples,
        share_passes=share_passes,
        sample_batch_size=sample_batch_size if sample_batch_size == "auto" else int(sample_batch_size),
        sw_batch_size=int(sw_batch_size), dropout_masks=inserted_dropout_masks(net, inferer),
    )  # fmt: skip
    if unused_samples is not None:
        warnings.warn(f"--samples {unused_samples} is not used by --method {method!r}, which draws no --samples (tta: "
                      "one sample per flip, ensemble: one per member, softmax: one pass); infer.json records samples: "
                      "null", UserWarning, stacklevel=2)
    spread = [n for n in ("mutual_information", "variance") if n in names]
    if samples == 1 and spread and set(method_tokens(method)) <= {"mcdropout", "ratein"}:
        # found by hostile review 55: one draw per case wrote these maps as 0 everywhere without a word, which reads
        # as "no model uncertainty" (the toy network: mutual information 0.0 with --samples 1, up to 0.256 with 4)
        warnings.warn(f"--samples 1 with --method {method!r} draws one sample per case: {' and '.join(spread)} "
                      "is 0 everywhere (no spread between samples); use --samples 2 or more", UserWarning,
                      stacklevel=2)
    return InferPlan(cases, loaded, inferer, settings)


def _set_threads(threads: int) -> None:
    """``torch.set_num_threads`` for ``--threads``, at most the CPUs this process may use (with a warning).

    Found by hostile testing: ``monai-unc infer --threads 100000`` crashed the process with a segmentation fault
    (OpenMP could not create the threads: "libgomp: Thread creation failed"); threads beyond the CPUs only compete
    for them.

    Raises:
        ValueError: ``threads`` is not a positive integer, naming ``--threads``.
    """
    threads = check_integer(threads, "--threads")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if threads > cpus:
        warnings.warn(f"--threads {threads} is more than the {cpus} CPU(s) this process may use: using {cpus}",
                      UserWarning, stacklevel=3)
        threads = cpus
    torch.set_num_threads(threads)


def infer_command(
    input: str | os.PathLike,
    output: str | os.PathLike,
    *,
    device: str | torch.device = "auto",
    threads: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    dist: DistContext | None = None,
    finish: Callable[[list[dict[str, Any]]], None] | None = None,
    **options: Any,
) -> CommandResult[list[dict[str, Any]]]:
    """The whole of ``monai-unc infer`` on one process or on every rank of a ``torchrun`` job.

    The output folder is checked first (:func:`check_infer_output`), the device chosen for this rank
    (:func:`resolve_device` with torchrun's local rank), then inside the command's session every rank builds the
    plan (:func:`prepare_infer`; a refusal on one rank raises on every rank) and predicts its shard
    (:func:`~monai_unc.workflows.infer.run_infer`).

    Args:
        input: folder of images.
        output: output folder (must not lie inside ``input``).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... (under torchrun ``"auto"`` takes the local
            rank's GPU).
        threads: torch CPU threads during the command (None: torch's default; at most the CPUs the process may use,
            with a warning); the caller's count is set again when it returns or raises.
        overwrite: recompute finished cases (and accept new settings).
        progress: a progress bar on rank 0.
        dist: a rank context the caller holds (its group is left alone), or None: join the process group or
            create one from torchrun's environment, and destroy one created here at the end.
        finish: ``finish(statuses)`` on rank 0 after the last case, while the output folder is still held
            (:func:`~monai_unc.workflows.infer.run_infer`).
        **options: the keyword arguments of :func:`prepare_infer` (``model``, ``bundle``, ``network``,
            ``checkpoint``, ``method``, ``samples``, ``roi``, ``regions``, ...).

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of the per-case statuses
        (:func:`~monai_unc.workflows.infer.run_infer`). Raises :class:`~monai_unc.workflows.session.CohortFailed`
        on every rank when cases failed (rank 0 has printed which).
    """
    out = check_infer_output(output, input, checkpoint=options.get("checkpoint"), network=options.get("network"),
                             bundle=options.get("bundle"), regions=options.get("regions"))
    before = torch.get_num_threads()
    if threads is not None:
        _set_threads(threads)
    try:
        return _infer_command(out, input, device, overwrite, progress, dist, finish, options)
    finally:  # the caller's thread count again (a notebook or a service goes on after the command)
        if threads is not None:
            torch.set_num_threads(before)


def _infer_command(out: Path, input: str | os.PathLike, device: str | torch.device, overwrite: bool, progress: bool,
                   dist: DistContext | None, finish: Callable[[list[dict[str, Any]]], None] | None,
                   options: dict[str, Any]) -> CommandResult[list[dict[str, Any]]]:
    """:func:`infer_command` after its output folder is checked and its threads set."""
    _, world, local_rank = read_dist_env()
    dev = resolve_device(device, world_size=world, local_rank=local_rank)

    def run(ctx: DistContext) -> list[dict[str, Any]]:
        err = plan = None
        try:  # a setup error on one rank must not leave the others waiting
            # every rank builds the same plan: its warnings (--samples unused by the method, ...) are the job's, said
            # once by rank 0 (found by review 66: one identical line per rank)
            with main_rank_warnings():
                plan = prepare_infer(input, device=dev, **options)
                # the cases as the network reads them (DICOM series of several channels: <case>_0000/, ... is <case>)
                check_infer_case_outputs(out, [c.case_id for c in plan.cases], **options)
        except Exception as e:
            err = e
        sync_errors(err, ctx)
        assert plan is not None
        return run_infer(plan.cases, plan.model, plan.inferer, plan.settings, out, device=dev, overwrite=overwrite,
                         progress=progress, dist=ctx, finish=finish)

    return run_command("infer", out, run, dist=dist, device=dev, summary=lambda results: infer_summary(results, out))


def infer_from_arguments(args: argparse.Namespace) -> CommandResult[list[dict[str, Any]]]:
    """``monai-unc infer`` on its parsed arguments (:func:`monai_unc.workflows.arguments.add_command_parsers`).

    With ``--settings-from RULE`` the options of the rule's prediction fingerprint
    (:data:`~monai_unc.workflows.reuse.RULE_OPTIONS` and the samples) are taken from the rule; one given on the
    command line must agree with it (:func:`~monai_unc.workflows.reuse.merge_rule_settings`).

    Args:
        args: the parsed arguments of ``monai-unc infer``.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of :func:`infer_command`; its ``lines`` (what the
        command prints on rank 0) are its warning lines alone
        with ``--quiet`` (:func:`~monai_unc.workflows.session.quiet_lines`). Raises as :func:`infer_command`.
    """
    # options that only act with another one were taken without a word (found by hostile review 59)
    if getattr(args, "settings_from", None) is None:
        for flag, value in (("--trusted-keys", getattr(args, "trusted_keys", None)),
                            ("--allow-unsigned", getattr(args, "allow_unsigned", False)),
                            ("--require-signature", getattr(args, "require_signature", False))):
            if value:
                raise ValueError(f"{flag} is about the signature of the rule of --settings-from, which is not given: "
                                 f"pass --settings-from RULE, or drop {flag}")
    if getattr(args, "no_bundle_preprocessing", False) and getattr(args, "bundle", None) is None:
        raise ValueError("--no-bundle-preprocessing is about the preprocessing of a --bundle, which is not given: "
                         "drop it")
    options: dict[str, Any] = {
        "method": args.method, "samples": args.samples, "dropout": args.dropout, "tta_noise": args.tta_noise,
        "ratein_target": args.ratein_target, "measures": args.measures, "roi": args.roi, "overlap": args.overlap,
        "intensity": args.intensity, "activation": args.activation, "regions": args.regions,
    }  # fmt: skip
    dicom = getattr(args, "output_format", "nifti") == "both"
    check_dicom_options(getattr(args, "output_format", "nifti"), getattr(args, "uid_root", None),
                        getattr(args, "segments", None), getattr(args, "study_uid", "source"))
    if dicom:  # before any work: the extra, the UID root and DICOM series as the input
        check_dicom_input(args.input, getattr(args, "uid_root", None))
    rule = None
    if getattr(args, "settings_from", None) is not None:  # the rule's settings where no option was given
        rule = read_rule_settings(args.settings_from, trust_from_arguments(args))  # the signature as triage checks it
        explicit = set(getattr(args, EXPLICIT_OPTIONS, ()))
        options = merge_rule_settings(rule, options, explicit)
    given = getattr(args, EXPLICIT_OPTIONS, None)
    if (rule is not None or given is not None) and "samples" not in (given or ()):
        # not given: from the rule once the model is known, else the default (10); a --samples given is warned about
        # under a method that draws none (prepare_infer)
        options["samples"] = None
    exported: list[Any] = []

    def export(statuses: list[dict[str, Any]]) -> None:
        """The DICOM objects of this run's cases, from their NIfTI outputs and source series.

        Not those of a case since removed from the input; under the output folder's lock, so that a second run into
        the folder cannot interleave with the writes.
        """
        from .dicom import dicom_export

        exported.append(dicom_export(args.output, args.input, Path(args.output) / DICOM_FOLDER,
                                     uid_root=args.uid_root, segments=args.segments, progress=not args.quiet,
                                     inside_predictions=True, study_uid=getattr(args, "study_uid", "source"),
                                     cases=[r["case"] for r in statuses]))

    with start_notice(unsigned_notice(args) if rule is not None else None):  # said once the run starts
        res = infer_command(
            args.input, args.output, device=args.device, threads=args.threads, overwrite=args.overwrite,
            progress=not args.quiet, model=args.model, bundle=args.bundle, network=args.network,
            checkpoint=args.checkpoint, unsafe_load=args.unsafe_load,
            bundle_preprocessing=not args.no_bundle_preprocessing, allow_code=getattr(args, "allow_code_target", ()),
            write_probs=not args.no_probs, sw_batch_size=args.sw_batch_size, seed=args.seed, rule=rule,
            save_samples=getattr(args, "save_samples", False),
            share_passes=not getattr(args, "no_share_passes", False),
            sample_batch_size=getattr(args, "sample_batch_size", "auto"), finish=export if dicom else None, **options,
        )  # fmt: skip
    if exported and res.is_main:
        done = exported[0]
        line = f"dicom: {done.n_objects} DICOM object(s) for {len(done.cases)} case(s) in {done.output}"
        res = dataclasses.replace(res, lines=(*res.lines, line))
    return dataclasses.replace(res, lines=quiet_lines(res.lines)) if args.quiet else res
