"""nnU-Net v2 trainers shipped by monai-unc, and a toy raw dataset for CPU smoke runs.

nnU-Net finds a trainer by class name: first in its own package, then in every folder listed in the
environment variable ``nnUNet_extTrainer``, whose modules it imports as *top-level* modules. This module
therefore uses absolute imports only. Point nnU-Net at it with::

    export nnUNet_extTrainer=$(python -c "import monai_unc.nnunet as m; print(m.trainer_dir())")
    nnUNetv2_train 990 3d_fullres 0 -tr nnUNetTrainerMCDropout

(:class:`~monai_unc.nnunet.predictor.UncertaintyPredictor` adds that folder by itself when it rebuilds a
network trained with one of these trainers.)

Trainers:

- :class:`nnUNetTrainerMCDropout`: the stock trainer with dropout after every convolution of the encoder and
  decoder (``conv -> dropout -> norm -> nonlin`` in ``PlainConvUNet``), rate ``dropout_p = 0.2``, without a
  plans variant. The other route, a copied plans file with ``dropout_op`` set, needs no trainer at all (see
  :func:`monai_unc.nnunet.dropout.write_dropout_plans`).
- :class:`nnUNetTrainer_10iters` / :class:`nnUNetTrainerMCDropout_10iters`: one epoch of 10 training and
  2 validation iterations, for tests and CPU smoke runs (a stock epoch is 250 iterations, ~6 min on 2 CPU
  cores for a 32^3 toy task).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer
from nnunetv2.utilities.get_network_from_plans import get_network_from_plans
from nnunetv2.utilities.plans_handling.plans_handler import ConfigurationManager, PlansManager
from torch import nn

from monai_unc.nnunet.dropout import DEFAULT_TRAINING_DROPOUT, dropout_arch_kwargs

__all__ = [
    "nnUNetTrainerMCDropout",
    "nnUNetTrainer_10iters",
    "nnUNetTrainerMCDropout_10iters",
    "write_toy_dataset",
]


class nnUNetTrainerMCDropout(nnUNetTrainer):
    """nnU-Net's default trainer with dropout (rate :attr:`dropout_p`) after every encoder and decoder convolution.

    The network is built from the plans with ``dropout_op`` (``Dropout2d``/``Dropout3d`` matching the
    convolutions) and ``dropout_op_kwargs={"p": dropout_p}``. Dropout modules hold no parameters, so the
    checkpoint's ``state_dict`` keys equal those of the stock network. Subclass and set ``dropout_p`` for another
    rate; the class name is stored in the checkpoint and used again at inference.
    """

    dropout_p: float = DEFAULT_TRAINING_DROPOUT

    @classmethod
    def build_network_architecture(
        cls,
        plans_manager: PlansManager,
        configuration_manager: ConfigurationManager,
        num_input_channels: int,
        num_output_channels: int,
        enable_deep_supervision: bool = True,
    ) -> nn.Module:
        kwargs = dropout_arch_kwargs(configuration_manager.network_arch_init_kwargs, cls.dropout_p)
        requires_import = list(configuration_manager.network_arch_init_kwargs_req_import)
        if "dropout_op" not in requires_import:
            requires_import.append("dropout_op")
        return get_network_from_plans(
            configuration_manager.network_arch_class_name,
            kwargs,
            requires_import,
            num_input_channels,
            num_output_channels,
            allow_init=True,
            deep_supervision=enable_deep_supervision,
        )


def _shorten(trainer: nnUNetTrainer) -> None:
    trainer.num_epochs = 1
    trainer.num_iterations_per_epoch = 10
    trainer.num_val_iterations_per_epoch = 2


class nnUNetTrainer_10iters(nnUNetTrainer):
    """Stock trainer cut to one epoch of 10 training and 2 validation iterations (tests, CPU smoke runs)."""

    def __init__(
        self,
        plans: dict,
        configuration: str,
        fold: int,
        dataset_json: dict,
        device: torch.device = torch.device("cuda"),  # noqa: B008 (nnU-Net's signature)
    ) -> None:
        super().__init__(plans, configuration, fold, dataset_json, device)
        _shorten(self)


class nnUNetTrainerMCDropout_10iters(nnUNetTrainerMCDropout):
    """:class:`nnUNetTrainerMCDropout` cut to one epoch of 10 training and 2 validation iterations."""

    def __init__(
        self,
        plans: dict,
        configuration: str,
        fold: int,
        dataset_json: dict,
        device: torch.device = torch.device("cuda"),  # noqa: B008 (nnU-Net's signature)
    ) -> None:
        super().__init__(plans, configuration, fold, dataset_json, device)
        _shorten(self)


def write_toy_dataset(
    raw_dir: str | os.PathLike,
    dataset_id: int = 990,
    name: str = "UncToy",
    num_training: int = 6,
    num_test: int = 2,
    shape: tuple[int, int, int] = (32, 32, 32),
    spacing: tuple[float, float, float] = (1.0, 1.0, 1.5),
    empty_slices: int = 3,
    seed: int = 0,
) -> Path:
    """Write a 3-class toy task in nnU-Net's raw format (``imagesTr``, ``labelsTr``, ``imagesTs``, ``dataset.json``).

    Cases come from :func:`monai_unc.data.make_toy_dataset` (a blurred sphere on noise, ValUES Appendix B.1):
    label 1 is the consensus of the raters, label 2 the sharp core drawn by the innermost rater. Images are
    written as NIfTI with anisotropic ``spacing`` (mm, x y z) and an offset origin; the first ``empty_slices``
    slices along the last axis are set to 0 so that nnU-Net's crop to the non-zero region is exercised.

    Returns the dataset folder ``raw_dir/DatasetXXX_name``.
    """
    import nibabel as nib

    from monai_unc.data.synthetic import make_toy_dataset

    if not 1 <= int(dataset_id) <= 999:
        raise ValueError(f"dataset_id must be in 1..999, got {dataset_id}")
    if num_training < 2:
        raise ValueError(f"num_training must be >= 2, got {num_training}")
    if not 0 <= empty_slices < shape[-1] // 2:
        raise ValueError(f"empty_slices must be in [0, {shape[-1] // 2}), got {empty_slices}")
    folder = Path(raw_dir) / f"Dataset{int(dataset_id):03d}_{name}"
    for sub in ("imagesTr", "labelsTr", "imagesTs"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    affine = np.diag([*map(float, spacing), 1.0])
    affine[:3, 3] = (12.0, -7.5, 4.0)
    cases = make_toy_dataset(num_training + num_test, shape=shape, seed=seed)
    for i, case in enumerate(cases):
        image = case["image"][0].copy()
        label = (case["label"] + (case["raters"][0] > 0)).astype(np.uint8)
        if empty_slices:
            image[..., :empty_slices] = 0.0
            label[..., :empty_slices] = 0
        ident = f"toy_{i:03d}"
        images = "imagesTr" if i < num_training else "imagesTs"
        nib.save(nib.Nifti1Image(image.astype(np.float32), affine), str(folder / images / f"{ident}_0000.nii.gz"))
        if i < num_training:
            nib.save(nib.Nifti1Image(label, affine), str(folder / "labelsTr" / f"{ident}.nii.gz"))
    meta = {
        "channel_names": {"0": "MRI"},
        "labels": {"background": 0, "outer": 1, "core": 2},
        "numTraining": int(num_training),
        "file_ending": ".nii.gz",
    }
    (folder / "dataset.json").write_text(json.dumps(meta, indent=2))
    return folder
