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
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor
from nnunetv2.training.dataloading.nnunet_dataset import infer_dataset_class
from nnunetv2.utilities.label_handling.label_handling import determine_num_input_channels
from torch import nn

from monai_unc.io import atomic_copy, atomic_torch_save, atomic_write_json, check_output_folder
from monai_unc.networks.ssn import find_ssn_heads
from monai_unc.nnunet.environment import ext_trainer_path
from monai_unc.nnunet.export import region_definitions
from monai_unc.nnunet.predictor import check_folds
from monai_unc.temperature import TemperatureScaler

__all__ = ["calibrate_model_folder", "segmentation_layer_name", "region_targets"]


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
    **scaler_kwargs: Any,
) -> dict[str, dict]:
    """Fit a temperature per fold on that fold's nnU-Net validation cases and fold it into a copy of the model.

    For each fold, the validation cases of ``splits_final.json`` (the cases nnU-Net validates the fold on) are
    predicted from nnU-Net's preprocessed data with the fold's network (stock logit averaging over the mirrors),
    and :class:`monai_unc.temperature.TemperatureScaler` (Kock et al.: RMSprop from t = 2; ``mode``, ``loss`` and
    ``scaler_kwargs`` as there) is fitted on every voxel of them against the preprocessed reference
    (voxels outside nnU-Net's non-zero crop, label -1, and the ignore label are left out). The temperature is then
    folded into the fold's segmentation layer (weights and bias divided by t) in a copy of the model folder at
    ``output_dir`` (plans, dataset and fingerprint copied; ``temperature.json`` records every fold's t and the
    validation NLL at t = 1 and after fitting). Predict from the copy as from the original (``-m output_dir``).
    A scalar t keeps every segmentation; it changes the probabilities and thereby every uncertainty map.

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
        output_dir: the folder of the calibrated copy; must differ from the model folder and lie outside it.
        use_folds: the folds to calibrate (``"all"`` has no validation cases and is refused).
        checkpoint_name: the checkpoint file of each fold.
        preprocessed_dir: ``nnUNet_preprocessed`` (default: the environment variable).
        mode: ``"scalar"`` (one t) or ``"vector"`` (one t per class, per region for a region-based model).
        loss: the fitting objective, ``"nll"`` or ``"ece"``.
        use_mirroring: average the validation logits over nnU-Net's mirrors, as inference does.
        device: where the validation cases are predicted.
        **scaler_kwargs: further arguments of :class:`~monai_unc.temperature.TemperatureScaler`.

    Returns:
        ``{fold: {"temperature": [...], "nll_t1": ..., "nll_fitted": ..., "num_cases": ..., "steps": ...,
        "converged": ...}}``, also written to ``temperature.json``.

    Raises:
        ValueError: ``output_dir`` is the model folder or inside it, no preprocessed folder is known, ``use_folds`` is
            empty or repeats a fold, a fold is ``"all"``, negative or not in the splits (or its split has no list of
            validation cases), ``checkpoint_name`` holds a folder, ``mode`` / ``loss`` / ``scaler_kwargs`` are
            refused by the scaler, the configuration is a cascade stage, or the model is a Stochastic Segmentation
            Network.
        FileNotFoundError: ``splits_final.json`` is missing.
    """
    src, dst = Path(model_training_output_dir), Path(output_dir)
    # every argument checked before the first file is written (an error after the first fold's prediction left a
    # copy with plans but no checkpoint; no fold at all ended in an UnboundLocalError)
    folds = check_folds(use_folds)
    if "all" in folds:
        raise ValueError("fold 'all' has no held-out validation cases to fit a temperature on")
    if not isinstance(checkpoint_name, str) or checkpoint_name in ("", ".", "..") or \
            Path(checkpoint_name).name != checkpoint_name or "\\" in checkpoint_name:
        # the calibrated checkpoint is written to output_dir/fold_<f>/<checkpoint_name>: a path would leave it
        raise ValueError(f"checkpoint_name must be a file name without folders, got {checkpoint_name!r}")
    TemperatureScaler(mode=mode, loss=loss, ignore_index=-1, **scaler_kwargs)  # refuses a bad mode / loss / kwarg
    if src.resolve() == dst.resolve():
        raise ValueError("output_dir must differ from the model folder: the calibrated checkpoints are a copy")
    check_output_folder(dst, src)  # not inside the model folder (never written to), writable, not a file
    plans = json.loads((src / "plans.json").read_text())
    base = preprocessed_dir if preprocessed_dir is not None else os.environ.get("nnUNet_preprocessed")
    if base is None:
        raise ValueError("preprocessed_dir is not given and the environment variable nnUNet_preprocessed is not set")
    pre_base = Path(base) / plans["dataset_name"]
    splits_file = pre_base / "splits_final.json"
    if not splits_file.is_file():
        raise FileNotFoundError(f"{splits_file} not found: the validation split of the folds is needed")
    splits = json.loads(splits_file.read_text())
    if not isinstance(splits, list):
        raise ValueError(f"{splits_file} must hold a list of splits (one {{'train': [...], 'val': [...]}} per fold), "
                         f"got a {type(splits).__name__}")
    missing = [f for f in folds if f >= len(splits)]
    if missing:
        raise ValueError(f"folds {missing} are not in {splits_file} ({len(splits)} splits)")
    for f in folds:  # a file users edit for custom splits: its validation cases are read as they are
        val = splits[f].get("val") if isinstance(splits[f], dict) else None
        if not isinstance(val, list) or not val or not all(isinstance(k, str) for k in val):
            raise ValueError(f"{splits_file}: split {f} must have 'val', a non-empty list of case identifiers (the "
                             f"cases the temperature is fitted on), got {val!r}")
    report: dict[str, dict] = {}
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
            dst.mkdir(parents=True, exist_ok=True)
            for name in ("plans.json", "dataset.json", "dataset_fingerprint.json"):
                if (src / name).is_file():
                    atomic_copy(src / name, dst / name)
        lm = predictor.label_manager
        activation = "sigmoid" if lm.has_regions else "softmax"
        regions = [tuple(r) if isinstance(r, (tuple, list)) else (r,) for r in lm.foreground_regions] \
            if lm.has_regions else None
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
            if regions is not None:  # binary region masks (R, *spatial), -1 where the voxel is left out
                y = region_targets(y, regions)
            logits.append(z.to(torch.float16)[None])
            labels.append(y[None])
        scaler = TemperatureScaler(mode=mode, loss=loss, ignore_index=-1, activation=activation,
                                   **scaler_kwargs).fit(logits, labels)
        nll_t1 = TemperatureScaler(mode=mode, loss="nll", ignore_index=-1, init_temperature=1.0,
                                   num_classes=scaler.num_classes,
                                   activation=activation).loss_and_grad(logits, labels)[0]
        fitted = TemperatureScaler(mode=mode, loss="nll", ignore_index=-1, num_classes=scaler.num_classes,
                                   activation=activation)
        fitted.temperature = scaler.temperature.clone()
        nll_fit = fitted.loss_and_grad(logits, labels)[0]
        ckpt = torch.load(src / f"fold_{fold_key}" / checkpoint_name, map_location="cpu", weights_only=False)
        net = copy.deepcopy(predictor.network).cpu().eval()
        net.load_state_dict(ckpt["network_weights"])
        example = torch.randn(1, _input_channels(predictor), *predictor.configuration_manager.patch_size)
        scaler.fold_into(net, layer=segmentation_layer_name(net), example_input=example)
        folded = net.state_dict()
        ckpt["network_weights"] = {k: folded[k].clone() for k in ckpt["network_weights"]}
        ckpt["monai_unc_temperature"] = scaler.temperature.tolist()
        atomic_torch_save(dst / f"fold_{fold_key}" / checkpoint_name, ckpt)
        report[str(fold_key)] = {"temperature": scaler.temperature.tolist(), "nll_t1": nll_t1,
                                 "nll_fitted": nll_fit, "num_cases": len(keys), "steps": len(scaler.history),
                                 "converged": scaler.converged}
    doc: dict[str, Any] = {"mode": mode, "loss": loss, "activation": activation}
    if regions is not None:  # one temperature per region in this order with mode="vector"
        doc["regions"] = region_definitions(json.loads((src / "dataset.json").read_text()))
    atomic_write_json(dst / "temperature.json", {**doc, "folds": report})
    return report


def region_targets(labels: torch.Tensor, regions: Sequence[tuple[int, ...]]) -> torch.Tensor:
    """Binary region masks of a label map, the targets of a region-based temperature fit.

    Region ``r`` is ``isin(labels, regions[r])``; voxels labelled -1 (outside nnU-Net's crop, the ignore label) are
    -1 in every region (left out of the fit).

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
