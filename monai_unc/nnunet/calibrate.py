"""Temperature scaling of trained nnU-Net folds: fit on each fold's validation cases, fold into a copy of the model.

:func:`calibrate_model_folder` (CLI: ``monai-unc nnunet-calibrate``) predicts every fold's validation cases from
nnU-Net's preprocessed data with stock ``nnUNetPredictor`` (logits averaged over the mirrors), fits
:class:`monai_unc.temperature.TemperatureScaler` (Kock, Thielke, Chlebus, Meine, *Confidence Histograms for Model
Reliability Analysis and Temperature Calibration*, MIDL) on them, and divides the fold's segmentation layer by
the temperature in a copy of the model folder. Predicting from the copy needs nothing but ``-m COPY``.

This module uses absolute imports only: nnU-Net imports the modules of the ``nnUNet_extTrainer`` folder as
top-level modules.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor
from nnunetv2.training.dataloading.nnunet_dataset import infer_dataset_class
from nnunetv2.utilities.label_handling.label_handling import determine_num_input_channels
from torch import nn

from monai_unc._utils import check_bool, check_integer, plain_module
from monai_unc.io import (
    OUTPUT_LOCK_FILE,
    MappedArrays,
    atomic_copy,
    atomic_folder,
    atomic_torch_save,
    atomic_write_json,
    check_inputs_not_written,
    check_output_folder,
    scratch_folder,
    smallest_int_dtype,
)
from monai_unc.io.provenance import read_untrusted_json
from monai_unc.networks.dropout import align_fused_attention
from monai_unc.networks.ssn import find_ssn_heads
from monai_unc.nnunet.environment import ext_trainer_path
from monai_unc.nnunet.export import region_definitions
from monai_unc.nnunet.predictor import check_checkpoint_name, check_folds, check_model_files, read_model_json
from monai_unc.temperature import TemperatureScaler

__all__ = ["calibrate_model_folder", "segmentation_layer_name", "region_targets"]

#: ``written_by`` of the ``temperature.json`` of a calibrated copy: the mark of a folder an ``overwrite`` may replace
WRITTEN_BY = "monai-unc nnunet-calibrate"


def segmentation_layer_name(network: nn.Module) -> str | None:
    """Name of the full-resolution segmentation layer of an nnU-Net network (the last of ``decoder.seg_layers``).

    Args:
        network: an nnU-Net network (``PlainConvUNet``, ``ResidualEncoderUNet``, ...).

    Returns:
        ``"decoder.seg_layers.<last>"``, or ``None`` when the network has no such list.

    Example:
        >>> from dynamic_network_architectures.architectures.unet import PlainConvUNet
        >>> net = PlainConvUNet(input_channels=1, n_stages=2, features_per_stage=(4, 8), conv_op=nn.Conv3d,
        ...                     kernel_sizes=3, strides=(1, 2), n_conv_per_stage=1, num_classes=3,
        ...                     n_conv_per_stage_decoder=1, deep_supervision=True)
        >>> segmentation_layer_name(net), segmentation_layer_name(nn.Conv3d(1, 3, 1))
        ('decoder.seg_layers.0', None)
    """
    seg_layers = getattr(getattr(network, "decoder", None), "seg_layers", None)
    if isinstance(seg_layers, nn.ModuleList) and len(seg_layers):
        return f"decoder.seg_layers.{len(seg_layers) - 1}"
    return None


def _input_channels(predictor: nnUNetPredictor) -> int:
    """Number of input channels of the predictor's network (image channels, plus one-hot previous stage)."""
    return determine_num_input_channels(predictor.plans_manager, predictor.configuration_manager,
                                        predictor.dataset_json)


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
    overwrite: bool = False,
    *,
    command_line: bool = False,
    num_threads: int | None = None,
    **scaler_kwargs: Any,
) -> dict[str, dict]:
    """Fit a temperature per fold on that fold's nnU-Net validation cases and fold it into a copy of the model.

    For each fold, the validation cases of ``splits_final.json`` (the cases nnU-Net validates the fold on) are
    predicted from nnU-Net's preprocessed data with the fold's network (stock logit averaging over the mirrors),
    and :class:`monai_unc.temperature.TemperatureScaler` (Kock et al.: RMSprop from t = 2; ``mode``, ``loss`` and
    ``scaler_kwargs`` as there) is fitted on every voxel of them against the preprocessed reference
    (nnU-Net's label -1, voxels of the cropped box outside the non-zero mask, read as background as nnU-Net's
    trainer reads them; the ignore label is left out). The temperature is then
    folded into the fold's segmentation layer (weights and bias divided by t) in a copy of the model folder at
    ``output_dir`` (plans, dataset and fingerprint copied; each calibrated checkpoint carries its t as
    ``monai_unc_temperature``, which the predictor records; ``temperature.json`` records the checkpoint name, the
    folds, every fold's t and the validation NLL at t = 1 and after fitting). Predict from the copy as from the
    original (``-m output_dir``); stock nnU-Net loads it too. A scalar t keeps every segmentation; it changes the
    probabilities and thereby every uncertainty map.

    The copy is one whole: it is built in a staging folder beside ``output_dir`` and moved into place only when every
    fold is done (:func:`monai_unc.io.atomic_folder`), so a failed run leaves ``output_dir`` as it was. An existing
    non-empty ``output_dir`` is refused unless it is a copy written by this function (``temperature.json`` says so)
    and ``overwrite`` is set; it is then replaced whole, never mixed with the new folds. A folder holding anything
    else (another trained model, other files) is never replaced.

    Region-based models (sigmoid per region, ``regions_class_order`` in ``dataset.json``): the scaler runs with
    ``activation="sigmoid"`` on the region logits against the binary region masks of the reference
    (:func:`region_targets`); ``mode="vector"`` fits one temperature per region (in the model's region order,
    recorded as ``regions`` in ``temperature.json``), ``"scalar"`` one for all. Folding divides each region's
    output channel of the segmentation layer by its ``t_r``, i.e. the predictor applies ``sigmoid(z_r / t_r)``.
    Neither changes a region mask (the sign of each logit). Stochastic Segmentation Networks are refused: their
    diagonal variance has a fixed floor (``exp(log_var) + epsilon``), so no change of the weights divides the
    logit distribution by t exactly.

    Temperature scaling: Guo, Pleiss, Sun, Weinberger, *On Calibration of Modern Neural Networks*, ICML 2017; the
    fitting protocol: Kock, Thielke, Chlebus, Meine, *Confidence Histograms for Model Reliability Analysis and
    Temperature Calibration*, MIDL.

    Args:
        model_training_output_dir: the trained model folder (``plans.json``, ``dataset.json``, ``fold_<f>/``).
        output_dir: the folder of the calibrated copy; must differ from the model folder and the preprocessed
            dataset folder, lie outside them and not contain them.
        use_folds: the folds to calibrate (``"all"`` has no validation cases and is refused).
        checkpoint_name: the checkpoint file of each fold.
        preprocessed_dir: ``nnUNet_preprocessed`` (default: the environment variable).
        mode: ``"scalar"`` (one t) or ``"vector"`` (one t per class, per region for a region-based model).
        loss: the fitting objective, ``"nll"`` or ``"ece"``.
        use_mirroring: average the validation logits over nnU-Net's mirrors, as inference does.
        device: where the validation cases are predicted (a ``torch.device`` or its name).
        overwrite: replace an existing calibrated copy at ``output_dir`` (CLI: ``--overwrite``).
        command_line: how the refusal of an existing calibrated copy names the way to replace it: the command's
            option (``--overwrite``, set by ``monai-unc nnunet-calibrate``); False (a Python caller):
            ``overwrite=True``. Keyword only.
        num_threads: torch's CPU (intra-op) threads while the validation cases are predicted and the temperature is
            fitted, at most the CPUs this process may use (more: that many, with a warning); the caller's setting is
            restored afterwards. None: torch's current setting (nnU-Net caps the prediction at 8). On a CPU shared
            with other work, tiny cases run faster and far more steadily with 1 (CLI: ``--threads``). The threads
            change the logits only at float rounding. Keyword only.
        **scaler_kwargs: further arguments of :class:`~monai_unc.temperature.TemperatureScaler`.

    Returns:
        ``{fold: {"temperature": [...], "nll_t1": ..., "nll_fitted": ..., "num_cases": ..., "steps": ...,
        "converged": ..., "not_converged": ...}}`` (``not_converged``: why not, see
        :attr:`~monai_unc.temperature.TemperatureScaler.not_converged`; a per-region NLL fit of a region-based model
        adds ``"region_not_converged"``, one entry per region, see
        :attr:`~monai_unc.temperature.TemperatureScaler.region_not_converged`), also written to ``temperature.json``.
        The NLLs are per voxel; for a region-based model the sum over the regions of each region's mean binary NLL
        (as :class:`~monai_unc.temperature.TemperatureScaler` fits it), so two regions' values are about twice one
        region's.

    Raises:
        ValueError: ``output_dir`` is the model or preprocessed dataset folder, lies inside or contains one, is not
            empty and not a calibrated copy (e.g. another trained model), or is a calibrated copy and ``overwrite``
            is not set; no preprocessed folder is known; ``use_folds`` is empty or repeats a fold, a fold is
            ``"all"``, negative or not in the splits; ``splits_final.json``, ``plans.json``, ``dataset.json`` or a
            fold's checkpoint is damaged (named); a fold's split has no list of validation cases, repeats one, names
            one that is also a training case of the fold, or one the preprocessed folder lacks or cannot read
            (named); a checkpoint is already calibrated (``monai_unc_temperature``); ``checkpoint_name`` holds a
            folder; ``mode`` / ``loss`` / ``scaler_kwargs`` are refused by the scaler, or ``scaler_kwargs`` sets
            ``activation`` or ``ignore_index`` (the model's and -1); ``device`` names no device; the configuration is
            a cascade stage, or the model is a Stochastic Segmentation Network; ``num_threads`` is not a positive
            integer.
        TypeError: ``overwrite`` or ``use_mirroring`` is not a bool, or ``device`` is neither a ``torch.device`` nor a
            name.
        FileNotFoundError: ``plans.json``, ``splits_final.json`` or a fold's checkpoint is missing.
    """
    src, dst = Path(model_training_output_dir), Path(output_dir)
    # every argument checked before the first file is written (an error after the first fold's prediction left a
    # copy with plans but no checkpoint; no fold at all ended in an UnboundLocalError)
    folds = check_folds(use_folds)
    if "all" in folds:
        raise ValueError("fold 'all' has no held-out validation cases to fit a temperature on")
    # the calibrated checkpoint is written to output_dir/fold_<f>/<checkpoint_name>: a path would leave it
    check_checkpoint_name(checkpoint_name)
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be a bool, got {type(overwrite).__name__}")
    # found by hostile testing: use_mirroring="no" is truthy and fitted on mirrored logits (t 0.75 instead of 0.42 on a
    # test model); device="cpu" failed in nnU-Net's predictor with "'str' object has no attribute 'type'"
    use_mirroring = check_bool(use_mirroring, "use_mirroring")
    device = _check_device(device)
    threads = None if num_threads is None else _check_threads(num_threads, "--threads" if command_line else
                                                                "num_threads")
    chosen = sorted(k for k in ("activation", "ignore_index") if k in scaler_kwargs)
    if chosen:  # activation="sigmoid" was a TypeError ("multiple values") after the first fold's cases were predicted
        raise ValueError(f"scaler_kwargs must not set {' or '.join(chosen)}: the activation is the model's (softmax, "
                         "or sigmoid per region) and the left-out voxels (the ignore label) are -1")
    TemperatureScaler(mode=mode, loss=loss, ignore_index=-1, **scaler_kwargs)  # refuses a bad mode / loss / kwarg
    if src.resolve() == dst.resolve():
        raise ValueError("output_dir must differ from the model folder: the calibrated checkpoints are a copy")
    check_output_folder(dst, src)  # not inside the model folder (never written to), writable, not a file
    plans = read_model_json(src / "plans.json")
    if plans is None:
        raise FileNotFoundError(f"{src / 'plans.json'} not found: not a trained nnU-Net model folder")
    name = plans.get("dataset_name")
    if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name or "\\" in name:
        raise ValueError(f"{src / 'plans.json'}: dataset_name must be the name of the dataset's folder in "
                         f"nnUNet_preprocessed, got {name!r}")
    base = preprocessed_dir if preprocessed_dir is not None else os.environ.get("nnUNet_preprocessed")
    if base is None:
        # said as the command line's user can mend it (found by a probe: it began "preprocessed_dir is not given")
        raise ValueError("nnU-Net's environment variable nnUNet_preprocessed is not set (nor preprocessed_dir given): "
                         "set it as for nnUNetv2_plan_and_preprocess")
    pre_base = Path(base) / name
    # nor the preprocessed dataset it reads or inside it; and containing neither (the copy replaces the folder whole)
    check_output_folder(dst, pre_base, writable=False)
    check_inputs_not_written(dst, ["*"], src, pre_base)
    splits = _validation_splits(pre_base / "splits_final.json", folds)
    for fold_key in folds:  # every checkpoint readable, and none calibrated already, before the first prediction
        ckpt_file = src / f"fold_{fold_key}" / checkpoint_name
        if not ckpt_file.is_file():
            raise FileNotFoundError(f"{ckpt_file} not found: fold {fold_key} has no checkpoint {checkpoint_name}")
        if check_model_files(src, (fold_key,), checkpoint_name).get(str(fold_key)) is not None:
            raise ValueError(f"{ckpt_file} is calibrated already (monai_unc_temperature, written by "
                             "nnunet-calibrate): calibrate the original model folder")
    dataset_json = read_model_json(src / "dataset.json")
    if dst.is_dir():  # refused before the folder is locked (the lock writes a file into it); again under the lock
        _check_replaceable(dst, overwrite, command_line)
    with atomic_folder(dst, command="monai-unc nnunet-calibrate") as staging:
        _check_replaceable(dst, overwrite, command_line)
        # the folder atomic_folder replaces (a link followed): the validation logits wait beside it, as the staging
        # folder does, never inside the staging folder (which becomes the copy)
        final = Path(os.path.abspath(os.fspath(dst))).resolve()
        before = torch.get_num_threads()
        try:
            if threads is not None:
                torch.set_num_threads(threads)
            report, regions = _calibrate_folds(src, staging, final, splits, pre_base, folds, checkpoint_name, mode,
                                               loss, use_mirroring, device, scaler_kwargs)
        finally:  # the caller's setting (nnU-Net's CPU logits depend on it: a leaked one changes later predictions)
            torch.set_num_threads(before)
        doc: dict[str, Any] = {"written_by": WRITTEN_BY, "checkpoint_name": checkpoint_name,
                               "fold_ids": [str(f) for f in folds], "mode": mode, "loss": loss,
                               "activation": "sigmoid" if regions else "softmax"}
        if regions:  # one temperature per region in this order with mode="vector"
            doc["regions"] = region_definitions(dataset_json or {})
        atomic_write_json(staging / "temperature.json", {**doc, "folds": report})
    return report


def _check_threads(num_threads: Any, name: str) -> int:
    """``num_threads`` as an int, at most the CPUs this process may use (with a warning); ValueError naming it."""
    threads = check_integer(num_threads, name)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if threads > cpus:  # OpenMP fails to create very many threads; more than the CPUs only compete for them
        warnings.warn(f"{name} {threads} is more than the {cpus} CPU(s) this process may use: using {cpus}",
                      UserWarning, stacklevel=3)
        threads = cpus
    return threads


def _check_device(device: Any) -> torch.device:
    """``device`` as a ``torch.device`` (a name such as ``"cpu"`` too); ``TypeError`` naming it otherwise."""
    if isinstance(device, str):
        try:
            return torch.device(device)
        except RuntimeError:
            raise ValueError(f"device must be a torch device or its name ('cpu', 'cuda', 'mps'), got {device!r}") \
                from None
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a torch.device or its name, got {type(device).__name__} {device!r}")
    return device


def _validation_splits(splits_file: Path, folds: Sequence[int | str]) -> dict[int, list[str]]:
    """Each fold's validation cases from ``splits_final.json`` (a file users edit: every field checked)."""
    if not splits_file.is_file():
        raise FileNotFoundError(f"{splits_file} not found: the validation split of the folds is needed")
    splits = read_untrusted_json(splits_file, str(splits_file))[1]
    if not isinstance(splits, list):
        raise ValueError(f"{splits_file} must hold a list of splits (one {{'train': [...], 'val': [...]}} per fold), "
                         f"got a {type(splits).__name__}")
    missing = [f for f in folds if int(f) >= len(splits)]
    if missing:
        raise ValueError(f"folds {missing} are not in {splits_file} ({len(splits)} splits)")
    out: dict[int, list[str]] = {}
    for f in folds:
        split = splits[int(f)]
        val = split.get("val") if isinstance(split, dict) else None
        if not isinstance(val, list) or not val or not all(isinstance(k, str) for k in val):
            raise ValueError(f"{splits_file}: split {f} must have 'val', a non-empty list of case identifiers (the "
                             f"cases the temperature is fitted on), got {val!r}")
        train = split.get("train")
        if not isinstance(train, list) or not all(isinstance(k, str) for k in train):
            raise ValueError(f"{splits_file}: split {f} must have 'train', the list of case identifiers nnU-Net "
                             f"trained the fold on, got {train!r}")
        repeated = sorted({k for k in val if val.count(k) > 1})
        if repeated:  # a repeated case would count twice in the fit
            raise ValueError(f"{splits_file}: split {f} lists validation case(s) {', '.join(map(repr, repeated))} "
                             "more than once: each case counts once")
        leaked = sorted(set(val) & set(train))
        if leaked:  # the temperature would be fitted on cases the fold was trained on
            raise ValueError(f"{splits_file}: split {f} lists {', '.join(map(repr, leaked[:5]))}"
                             f"{f' and {len(leaked) - 5} more' if len(leaked) > 5 else ''} under both 'train' and "
                             "'val': the temperature must be fitted on held-out cases only")
        out[int(f)] = list(val)
    return out


def _check_replaceable(dst: Path, overwrite: bool, command_line: bool = False) -> None:
    """Refuse an output folder that is not empty, unless it is a calibrated copy and ``overwrite`` is set."""
    entries = sorted(p.name for p in dst.iterdir() if p.name != OUTPUT_LOCK_FILE)
    if not entries:
        return
    marker = dst / "temperature.json"
    why = f"no {marker.name}"
    if marker.is_file():
        try:
            doc = read_untrusted_json(marker, str(marker))[1]
            why = f"{marker} does not say written_by {WRITTEN_BY!r}"
            if isinstance(doc, dict) and doc.get("written_by") == WRITTEN_BY:
                why = ""
        except ValueError as e:
            why = str(e)
    if why:
        model = [n for n in entries if n == "plans.json" or n.startswith("fold_")]
        held = f"a trained model ({', '.join(model[:3])})" if model else f"other files ({', '.join(entries[:3])})"
        raise ValueError(f"output_dir {dst} holds {held}, not a calibrated copy written by {WRITTEN_BY} ({why}): it "
                         "is never replaced; choose a new or empty folder")
    if not overwrite:
        # in the caller's words (found by review 63: each was told of the other's name too)
        raise ValueError(f"output_dir {dst} holds the calibrated copy of an earlier run: pass "
                         f"{'--overwrite' if command_line else 'overwrite=True'} to replace it whole, or choose "
                         "another folder")


def _load_validation_case(dataset: Any, folder: Path, key: str, splits_file: Path) -> tuple[torch.Tensor, np.ndarray]:
    """A preprocessed case's image and reference; ValueError naming its files when they cannot be read."""
    try:
        data, seg, _, _ = dataset.load_case(key)
        return torch.from_numpy(np.asarray(data[:])), np.asarray(seg[:])
    except Exception as e:  # noqa: BLE001 - BadZipFile, EOFError, UnpicklingError, blosc2's errors: a damaged case
        files = [f"{key}{end}" for end in (".npz", ".npy", "_seg.npy", ".b2nd", "_seg.b2nd", ".pkl")
                 if (folder / f"{key}{end}").is_file()]
        why = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"preprocessed case {key!r} ({splits_file.name}) in {folder} cannot be read "
                         f"({', '.join(files) or 'no files'}: {type(e).__name__}{': ' + why if why else ''}); run "
                         "nnUNetv2_preprocess again") from None


def _calibrate_folds(src: Path, staging: Path, final: Path, splits: dict[int, list[str]], pre_base: Path,
                     folds: Sequence[int | str], checkpoint_name: str, mode: str, loss: str, use_mirroring: bool,
                     device: torch.device, scaler_kwargs: dict[str, Any]) -> tuple[dict[str, dict], bool]:
    """Fit and fold each fold's temperature into the copy in ``staging``; the report, and whether it has regions.

    A fold's validation logits (float16) and references (the smallest integer dtype) wait in a scratch folder beside
    ``final`` (:func:`monai_unc.io.scratch_folder`, ``.<name>.partial-logits-*.dir``, removed after the fold, also on
    an error) and are mapped back one case at a time at every step of the fit (:class:`monai_unc.io.MappedArrays`):
    memory holds one case, not the fold's.
    """
    report: dict[str, dict] = {}
    regions = None
    for fold_key in folds:
        predictor = nnUNetPredictor(use_mirroring=use_mirroring, device=device, allow_tqdm=False)
        with ext_trainer_path():
            predictor.initialize_from_trained_model_folder(str(src), (fold_key,), checkpoint_name)
        if find_ssn_heads(predictor.network):
            raise ValueError(
                "temperature scaling of a Stochastic Segmentation Network (nnUNetTrainerSSN) is not supported: "
                "dividing its logit distribution by t needs the covariance D + P P^T divided by t^2, but the "
                "diagonal D = exp(log_var) + epsilon has a fixed floor epsilon (a trainer setting, not a weight), "
                "so no change of the checkpoint's weights scales it exactly"
            )
        if predictor.configuration_manager.previous_stage_name is not None:
            # its network reads the previous stage's one-hot segmentation too, which the preprocessed cases lack
            raise ValueError(
                f"the model's configuration is a cascade stage (previous stage "
                f"{predictor.configuration_manager.previous_stage_name!r}): temperature scaling of cascades is not "
                "supported"
            )
        if not report:  # the first fold passed every check: the copy begins
            for name in ("plans.json", "dataset.json", "dataset_fingerprint.json"):
                if (src / name).is_file():
                    atomic_copy(src / name, staging / name)
        lm = predictor.label_manager
        activation = "sigmoid" if lm.has_regions else "softmax"
        regions = [tuple(r) if isinstance(r, (tuple, list)) else (r,) for r in lm.foreground_regions] \
            if lm.has_regions else None
        folder = pre_base / predictor.configuration_manager.data_identifier
        splits_file = pre_base / "splits_final.json"
        keys = splits[int(fold_key)]
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} not found: the preprocessed cases of the model's configuration are "
                                    "needed (run nnUNetv2_preprocess)")
        dataset_class = infer_dataset_class(str(folder))
        known = set(dataset_class.get_identifiers(str(folder)))
        absent = [k for k in keys if k not in known]
        if absent:
            raise ValueError(f"{splits_file}: split {fold_key} names validation case(s) "
                             f"{', '.join(map(repr, absent[:5]))} that {folder} lacks")
        dataset = dataset_class(str(folder), keys)
        with scratch_folder(final, "logits") as store:
            scaler, nll_t1, nll_fit = _fit_fold(predictor, dataset, folder, keys, splits_file, regions, store, mode,
                                                loss, activation, scaler_kwargs)
        ckpt = torch.load(src / f"fold_{fold_key}" / checkpoint_name, map_location="cpu", weights_only=False)
        # the module under nnU-Net's torch.compile wrapper (nnUNet_compile=1): the checkpoint's keys carry no
        # ``_orig_mod.`` (found by hostile review 60: a RuntimeError after every validation case was predicted)
        net = copy.deepcopy(plain_module(predictor.network)).cpu().eval()
        net.load_state_dict(ckpt["network_weights"])
        example = torch.randn(1, _input_channels(predictor), *predictor.configuration_manager.patch_size)
        with align_fused_attention(net):  # a check of two deterministic outputs (MONAI's fused attention: review 66)
            scaler.fold_into(net, layer=segmentation_layer_name(net), example_input=example)
        folded = net.state_dict()
        ckpt["network_weights"] = {k: folded[k].clone() for k in ckpt["network_weights"]}
        ckpt["monai_unc_temperature"] = scaler.temperature.tolist()  # what the predictor records for this fold
        atomic_torch_save(staging / f"fold_{fold_key}" / checkpoint_name, ckpt)
        report[str(fold_key)] = {"temperature": scaler.temperature.tolist(), "nll_t1": nll_t1,
                                 "nll_fitted": nll_fit, "num_cases": len(keys), "steps": len(scaler.history),
                                 "converged": scaler.converged, "not_converged": scaler.not_converged}
        if scaler.region_not_converged is not None:  # per region: None at its NLL minimum, else why not
            report[str(fold_key)]["region_not_converged"] = scaler.region_not_converged
    return report, regions is not None


def _fit_fold(predictor: nnUNetPredictor, dataset: Any, folder: Path, keys: Sequence[str], splits_file: Path,
              regions: list[tuple[int, ...]] | None, store: Path, mode: str, loss: str, activation: str,
              scaler_kwargs: dict[str, Any]) -> tuple[TemperatureScaler, float, float]:
    """Predict a fold's validation cases into ``store`` one at a time, fit the scaler on them; it, NLL at 1 and at t.

    Each case's logits (float16, ``2 C`` bytes per voxel) and reference (-1 where left out; the smallest integer
    dtype that holds its values, int8 up to 128 classes) are written to ``store`` as soon as the case is predicted
    and read back one case at a time by the fit and the two NLL passes.
    """
    lm = predictor.label_manager
    logits, labels = MappedArrays(store / "logits"), MappedArrays(store / "labels")
    for k in keys:
        data, seg = _load_validation_case(dataset, folder, k, splits_file)
        # MONAI's fused attention (use_flash_attention=True) drew attention dropout in eval mode too: the temperature
        # was fitted to randomly dropped attention (review 66)
        with align_fused_attention(predictor.network):
            z = predictor.predict_logits_from_preprocessed_data(data)
        del data
        y = torch.from_numpy(seg[0].astype(np.int64))
        del seg
        # -1 marks nnU-Net's voxels outside the non-zero mask, inside the cropped box: predicted and written like the
        # others, and background to nnU-Net's training and validation (RemoveLabelTansform(-1, 0)); found by hostile
        # review 60: they were left out of the fit
        y[y == -1] = 0
        y[y < 0] = -1
        if lm.has_ignore_label:
            y[y == lm.ignore_label] = -1
        if regions is not None:  # binary region masks (R, *spatial), -1 where the voxel is left out
            y = region_targets(y, regions)
        logits.append(z.to(torch.float16)[None])
        del z
        # the labels the network has (-1 .. C - 1), or a damaged reference's values, which the fit names: never
        # wrapped by the cast
        low, high = (int(y.min()), int(y.max())) if y.numel() else (0, 0)
        labels.append(y[None], dtype=smallest_int_dtype(min(low, -1), max(high, lm.num_segmentation_heads - 1)))
        del y
    scaler = TemperatureScaler(mode=mode, loss=loss, ignore_index=-1, activation=activation,
                               **scaler_kwargs).fit(logits, labels)
    nll_t1 = TemperatureScaler(mode=mode, loss="nll", ignore_index=-1, init_temperature=1.0,
                               num_classes=scaler.num_classes,
                               activation=activation).loss_and_grad(logits, labels)[0]
    fitted = TemperatureScaler(mode=mode, loss="nll", ignore_index=-1, num_classes=scaler.num_classes,
                               activation=activation)
    fitted.temperature = scaler.temperature.clone()
    nll_fit = fitted.loss_and_grad(logits, labels)[0]
    return scaler, nll_t1, nll_fit


def region_targets(labels: torch.Tensor, regions: Sequence[tuple[int, ...]]) -> torch.Tensor:
    """Binary region masks of a label map, the targets of a region-based temperature fit.

    Region ``r`` is ``isin(labels, regions[r])``; voxels labelled -1 (the ignore label, set to -1 by the fit) are -1
    in every region (left out of the fit).

    Args:
        labels: the label map ``(*spatial)``, integer, -1 where a voxel is left out.
        regions: the labels of each region, in the model's channel order.

    Returns:
        ``(R, *spatial)`` int64 masks with values 0, 1 and -1.

    Example:
        >>> region_targets(torch.tensor([0, 1, 2, -1]), [(1, 2), (2,)]).tolist()
        [[0, 1, 1, -1], [0, 0, 1, -1]]
    """
    masks = torch.stack([torch.isin(labels, torch.tensor(list(r), dtype=labels.dtype)) for r in regions]).long()
    masks[:, labels < 0] = -1
    return masks
