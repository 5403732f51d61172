"""nnU-Net v2 trainers shipped by monai-unc, and a toy raw dataset for CPU smoke runs.

nnU-Net finds a trainer by class name: first in its own package, then in every folder listed in the
environment variable ``nnUNet_extTrainer``, whose modules it imports as *top-level* modules. This module
therefore uses absolute imports only. Point nnU-Net at it with::

    export nnUNet_extTrainer=$(python -c "import monai_unc.nnunet as m; print(m.trainer_dir())")
    nnUNetv2_train 990 3d_fullres 0 -tr nnUNetTrainerMCDropout

(:class:`~monai_unc.nnunet.predictor.UncertaintyPredictor` adds that folder by itself when it rebuilds a
network trained with one of these trainers.)

Trainers:

- :class:`nnUNetTrainerMCDropout`: the stock trainer with the network's ``dropout_op`` set, rate
  ``dropout_p = 0.2``, without a plans variant. ``dynamic_network_architectures`` places the dropout
  (``conv -> dropout -> norm -> nonlin``): in ``PlainConvUNet`` after every convolution of the encoder and
  decoder; in ``ResidualEncoderUNet`` (nnU-Net's ResEnc presets) after the stem's convolution, the first
  convolution of each residual block (never the second, nor the 1x1 skip) and every decoder convolution. The other
  route, a copied plans file with ``dropout_op`` set, needs no trainer at all (see
  :func:`monai_unc.nnunet.dropout.write_dropout_plans`).
- :class:`nnUNetTrainerSSN`: a Stochastic Segmentation Network (Monteiro et al., NeurIPS 2020): the
  full-resolution segmentation layer of the decoder is replaced by an :class:`~monai_unc.networks.SSNHead`
  (rank :attr:`~nnUNetTrainerSSN.ssn_rank` = 10) trained with :class:`~monai_unc.networks.SSNLoss`
  (:attr:`~nnUNetTrainerSSN.ssn_num_mc_samples` = 20 draws); the lower-resolution deep-supervision outputs keep
  nnU-Net's own Dice + cross-entropy with nnU-Net's weights. In eval mode the head returns its mean logits, so
  ``nnUNetv2_predict`` (and nnU-Net's validation) use the mean prediction unchanged.
- Calibration losses (docs/training.md): :class:`nnUNetTrainerSVLS` (Dice + cross-entropy against spatially
  varying smoothed labels), :class:`nnUNetTrainerMbLS` (Dice + CE + the logit-margin penalty),
  :class:`nnUNetTrainerL1ACE` / :class:`nnUNetTrainerSoftL1ACE` (Dice + CE + hard / soft L1 average calibration
  error) and :class:`nnUNetTrainerNACL` (Dice + MONAI's ``NACLLoss``); each applies its loss at every
  deep-supervision output with nnU-Net's weights (:class:`CalibrationLoss`; the spacing-aware SVLS kernel is each
  output's own, :class:`PerOutputDeepSupervision`), and each has an MC-dropout variant
  (``nnUNetTrainerMCDropoutSVLS``, ...: the dropout network of :class:`nnUNetTrainerMCDropout` trained with that
  loss). The SSN trainer has its own likelihood and combines with none of them.
- :class:`nnUNetTrainer_10iters` / :class:`nnUNetTrainerMCDropout_10iters` / :class:`nnUNetTrainerSSN_10iters`:
  one epoch of 10 training and 2 validation iterations, for tests and CPU smoke runs (a stock epoch is 250
  iterations, ~6 min on 2 CPU cores for a 32^3 toy task); ``<trainer>_2epochs`` (e.g. ``nnUNetTrainerSVLS_2epochs``,
  ``nnUNetTrainerMCDropoutNACL_2epochs``): two epochs of 5 training and 1 validation iterations, for each calibration
  trainer and its MC-dropout variant.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import torch
from monai.losses import NACLLoss
from nnunetv2.training.loss.deep_supervision import DeepSupervisionWrapper
from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer
from nnunetv2.utilities.get_network_from_plans import get_network_from_plans
from nnunetv2.utilities.plans_handling.plans_handler import ConfigurationManager, PlansManager
from torch import nn

from monai_unc._utils import (
    check_bool,
    check_integer,
    check_nonnegative,
    check_seed,
    is_finite_real,
    is_int,
    no_autocast,
)
from monai_unc.data.synthetic import make_toy_dataset
from monai_unc.io import atomic_write_text, save_nifti_image
from monai_unc.losses import L1ACELoss, SVLSLoss, mean_margin_penalty
from monai_unc.networks.losses import SSNLoss
from monai_unc.networks.ssn import SSNHead, find_ssn_heads
from monai_unc.nnunet.dropout import DEFAULT_TRAINING_DROPOUT, check_dropout_rate, dropout_arch_kwargs

__all__ = [
    "CalibrationLoss",
    "PerOutputDeepSupervision",
    "nnUNetTrainerSVLS",
    "nnUNetTrainerMbLS",
    "nnUNetTrainerL1ACE",
    "nnUNetTrainerSoftL1ACE",
    "nnUNetTrainerNACL",
    "nnUNetTrainerMCDropoutSVLS",
    "nnUNetTrainerMCDropoutMbLS",
    "nnUNetTrainerMCDropoutL1ACE",
    "nnUNetTrainerMCDropoutSoftL1ACE",
    "nnUNetTrainerMCDropoutNACL",
    "nnUNetTrainerMCDropout",
    "nnUNetTrainerSSN",
    "nnUNetTrainer_10iters",
    "nnUNetTrainerMCDropout_10iters",
    "nnUNetTrainerSSN_10iters",
    "SSNDeepSupervisionLoss",
    "attach_ssn_head",
    "write_toy_dataset",
]


class nnUNetTrainerMCDropout(nnUNetTrainer):
    """nnU-Net's default trainer with dropout (rate :attr:`dropout_p`) in the network's convolution blocks.

    The network is built from the plans with ``dropout_op`` (``Dropout2d``/``Dropout3d`` matching the
    convolutions) and ``dropout_op_kwargs={"p": dropout_p}``; ``dynamic_network_architectures`` decides where it
    goes. ``PlainConvUNet``: after every convolution of the encoder and decoder. ``ResidualEncoderUNet`` (nnU-Net's
    ResEnc presets): after the stem's convolution, the first convolution of each residual block (its second
    convolution and the 1x1 skip convolutions have none; a bottleneck block has it after its middle convolution
    only) and every decoder convolution. The dropout module sits between convolution and norm
    in each block's ``all_modules``, so the norms' ``state_dict`` keys are shifted by one (``all_modules.2`` instead
    of ``all_modules.1``): its checkpoints load only into this network, never into the stock one (nor stock
    checkpoints into it; post-hoc dropout, :func:`~monai_unc.nnunet.dropout.add_posthoc_dropout`, keeps the keys).
    Subclass and set ``dropout_p`` for another rate; the class name is stored in the checkpoint and used again at
    inference. Monte-Carlo dropout: Gal,
    Ghahramani, *Dropout as a Bayesian Approximation: Representing Model Uncertainty in Deep Learning*, ICML 2016.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).

    Example:
        >>> nnUNetTrainerMCDropout.dropout_p
        0.2
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
        """nnU-Net's network of the configuration, built with ``dropout_op`` (placed as the class docstring says).

        Args:
            plans_manager: the plans (unused; nnU-Net's signature).
            configuration_manager: the configuration whose ``network_arch_init_kwargs`` are extended by
                :func:`~monai_unc.nnunet.dropout.dropout_arch_kwargs` with rate :attr:`dropout_p`.
            num_input_channels: image channels (plus one-hot previous stage for a cascade).
            num_output_channels: output channels (classes, or regions of a region-based model).
            enable_deep_supervision: return the lower-resolution outputs too (training).

        Returns:
            The network (weights initialised by nnU-Net).
        """
        # found by hostile testing: a subclass's dropout_p = 1.5 was "p must be a dropout rate", naming no p it set
        rate = check_dropout_rate(cls.dropout_p, f"{cls.__name__}.dropout_p")
        planned = configuration_manager.network_arch_init_kwargs
        planned_kwargs = planned.get("dropout_op_kwargs")
        if planned.get("dropout_op") and planned_kwargs is not None and not isinstance(planned_kwargs, dict):
            # found by hostile testing: [0.5] or "0.5" was "'list' object has no attribute 'get'"
            raise ValueError(
                "the plans' configuration arch_kwargs.dropout_op_kwargs must be a JSON object such as "
                f'{{"p": 0.2}}, got {planned_kwargs!r}'
            )
        # torch's dropout layers default to p = 0.5: nnU-Net builds a dropout_op without a rate at 0.5
        planned_p = planned_kwargs.get("p", 0.5) if planned.get("dropout_op") and planned_kwargs is not None else None
        if planned_p is not None and planned_p != rate:
            # found by hostile review: a dropout plans variant (write_dropout_plans, p = 0.5) trained with this
            # trainer was trained at the trainer's rate (0.2) without a word
            warnings.warn(
                f"{cls.__name__}: the plans' configuration already has dropout (p = {planned_p!r}); the trainer "
                f"builds the network with its own rate dropout_p = {rate:g} instead. Train a dropout plans "
                "variant with nnU-Net's nnUNetTrainer, or subclass this trainer and set dropout_p",
                UserWarning,
                stacklevel=2,
            )
        kwargs = dropout_arch_kwargs(planned, rate)
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


def attach_ssn_head(network: nn.Module, rank: int = 10, epsilon: float = 1e-5) -> SSNHead:
    """Replace the full-resolution segmentation layer of an nnU-Net network by an SSN head.

    The layer is ``decoder.seg_layers[-1]``, a 1x1 convolution in ``PlainConvUNet`` / ``ResidualEncoderUNet``; the
    :class:`~monai_unc.networks.SSNHead` (Monteiro et al., *Stochastic Segmentation Networks: Modelling Spatially
    Correlated Aleatoric Uncertainty*, NeurIPS 2020) reads the same features (``input_activation=None``: nnU-Net's
    decoder stages end with their nonlinearity; ``train_output="raw"``: in training mode the layer returns the
    stacked raw outputs, a tensor that fits into nnU-Net's deep-supervision list). The ``state_dict`` keys of that
    layer become ``decoder.seg_layers.<last>.{mean_conv,log_cov_diag_conv,cov_factor_conv}.*``. A network that
    already has the head is returned unchanged.

    Args:
        network: an nnU-Net network with ``decoder.seg_layers``.
        rank: rank of the low-rank covariance factor.
        epsilon: floor added to the diagonal variance.

    Returns:
        The head (now ``decoder.seg_layers[-1]``).

    Raises:
        ValueError: the network has no ``decoder.seg_layers``, or its last entry is not a 1x1 convolution.

    Example:
        >>> from dynamic_network_architectures.architectures.unet import PlainConvUNet
        >>> net = PlainConvUNet(input_channels=1, n_stages=2, features_per_stage=(4, 8), conv_op=nn.Conv3d,
        ...                     kernel_sizes=3, strides=(1, 2), n_conv_per_stage=1, num_classes=3,
        ...                     n_conv_per_stage_decoder=1)
        >>> head = attach_ssn_head(net, rank=2)
        >>> net.decoder.seg_layers[-1] is head, head.raw_channels  # C * (2 + rank) raw channels
        (True, 12)
    """
    seg_layers = getattr(getattr(network, "decoder", None), "seg_layers", None)
    if not isinstance(seg_layers, nn.ModuleList) or not len(seg_layers):
        raise ValueError(f"{type(network).__name__} has no decoder.seg_layers to put an SSN head on")
    last = seg_layers[-1]
    if isinstance(last, SSNHead):
        return last
    if not isinstance(last, nn.modules.conv._ConvNd) or any(k != 1 for k in last.kernel_size):
        raise ValueError(f"decoder.seg_layers[-1] must be a 1x1 convolution, got {last!r}")
    head = SSNHead(
        last.in_channels,
        last.out_channels,
        rank=rank,
        spatial_dims=len(last.kernel_size),
        epsilon=epsilon,
        input_activation=None,
        train_output="raw",
    )
    # the layer's dtype and mode too (found by hostile testing): a float64 network got a float32 head, "Input type
    # (double) and bias type (float)" on its first call, and a network in eval mode a head in training mode, which
    # returned its C * (2 + rank) raw channels instead of the C mean logits
    seg_layers[-1] = head.to(device=last.weight.device, dtype=last.weight.dtype).train(last.training)
    return head


class SSNDeepSupervisionLoss(nn.Module):
    """The SSN loss on the full-resolution output, nnU-Net's loss on the deep-supervision outputs.

    ``stock`` is what ``nnUNetTrainer._build_loss`` returns: a ``DeepSupervisionWrapper`` (weights ``w_k``,
    normalised, the lowest resolution at 0) or, without deep supervision, the plain loss. In training mode the
    head returns its raw outputs (``C * (2 + R)`` channels): the loss is ``w_0 * SSNLoss(head's distribution,
    target_0) + sum_{k >= 1} w_k * stock_loss(output_k, target_k)``. In eval mode (nnU-Net's validation step) the
    head returns mean logits (``C`` channels) and the stock loss applies to every output as usual.

    Args:
        stock: nnU-Net's loss (``DeepSupervisionWrapper`` or the plain Dice + cross-entropy).
        head: the network's SSN head (kept as a reference, not a submodule).
        ssn_loss: the SSN likelihood (:class:`~monai_unc.networks.SSNLoss`).
    """

    def __init__(self, stock: nn.Module, head: SSNHead, ssn_loss: SSNLoss) -> None:
        super().__init__()
        self.stock = stock
        self.ssn_loss = ssn_loss
        self._head = (head,)  # not a submodule: the head belongs to the network

    def forward(self, output: Any, target: Any) -> torch.Tensor:
        """The loss of one training or validation step.

        Args:
            output: the network output: a list of ``(B, *, *spatial)`` tensors from full to low resolution (deep
                supervision) or one tensor; the first holds the head's raw outputs in training mode.
            target: the targets in the same structure, ``(B, 1, *spatial)`` label maps.

        Returns:
            The scalar loss.
        """
        outs = list(output) if isinstance(output, (list, tuple)) else [output]
        targets = list(target) if isinstance(target, (list, tuple)) else [target]
        head = self._head[0]
        if outs[0].shape[1] != head.raw_channels:  # mean logits (eval mode)
            return self.stock(output, target)
        l0 = self.ssn_loss(head.distribution_from_raw(outs[0]), targets[0])
        weights = getattr(self.stock, "weight_factors", None)
        if weights is None or len(outs) == 1:
            return l0
        base = self.stock.loss
        total = weights[0] * l0
        for w, o, t in zip(weights[1:], outs[1:], targets[1:]):
            if w != 0:
                total = total + w * base(o, t)
        return total


class nnUNetTrainerSSN(nnUNetTrainer):
    """nnU-Net's default trainer with a Stochastic Segmentation Network head on the full-resolution output.

    See :func:`attach_ssn_head` and :class:`SSNDeepSupervisionLoss` (Monteiro et al., *Stochastic Segmentation
    Networks: Modelling Spatially Correlated Aleatoric Uncertainty*, NeurIPS 2020). Subclass and set
    :attr:`ssn_rank`, :attr:`ssn_num_mc_samples` or :attr:`ssn_epsilon` for other settings; the class name is stored
    in the checkpoint and nnU-Net rebuilds the same network at inference. Region-based training and ignore labels are
    not supported (the SSN loss is a softmax likelihood over all voxels): building the loss raises a ``ValueError``.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).

    Example:
        >>> nnUNetTrainerSSN.ssn_rank, nnUNetTrainerSSN.ssn_num_mc_samples
        (10, 20)
    """

    ssn_rank: int = 10
    ssn_num_mc_samples: int = 20
    ssn_epsilon: float = 1e-5

    @classmethod
    def build_network_architecture(
        cls,
        plans_manager: PlansManager,
        configuration_manager: ConfigurationManager,
        num_input_channels: int,
        num_output_channels: int,
        enable_deep_supervision: bool = True,
    ) -> nn.Module:
        """nnU-Net's network of the configuration with its full-resolution segmentation layer replaced by an SSN head.

        Args:
            plans_manager: the plans (unused; nnU-Net's signature).
            configuration_manager: the configuration that describes the network.
            num_input_channels: image channels (plus one-hot previous stage for a cascade).
            num_output_channels: output classes.
            enable_deep_supervision: return the lower-resolution outputs too (training).

        Returns:
            The network, its head from :func:`attach_ssn_head` with rank :attr:`ssn_rank` and :attr:`ssn_epsilon`.
        """
        net = get_network_from_plans(
            configuration_manager.network_arch_class_name,
            configuration_manager.network_arch_init_kwargs,
            configuration_manager.network_arch_init_kwargs_req_import,
            num_input_channels,
            num_output_channels,
            allow_init=True,
            deep_supervision=enable_deep_supervision,
        )
        attach_ssn_head(net, rank=cls.ssn_rank, epsilon=cls.ssn_epsilon)
        return net

    def _build_loss(self) -> nn.Module:
        if self.label_manager.has_regions:
            raise ValueError("nnUNetTrainerSSN supports label (softmax) training only, not region-based training")
        if self.label_manager.has_ignore_label:
            raise ValueError("nnUNetTrainerSSN does not support an ignore label (the SSN likelihood covers all voxels)")
        heads = find_ssn_heads(self.network)
        if len(heads) != 1:
            raise ValueError(f"nnUNetTrainerSSN expects one SSN head in the network, found {len(heads)}")
        return SSNDeepSupervisionLoss(super()._build_loss(), heads[0], SSNLoss(self.ssn_num_mc_samples))


#: the calibration losses of the trainers, and whether each replaces nnU-Net's cross-entropy or adds to Dice + CE
CALIBRATION_KINDS = {"svls": "replace_ce", "nacl": "replace_ce", "mbls": "add", "l1ace": "add"}


class CalibrationLoss(nn.Module):
    """nnU-Net's Dice + cross-entropy of one output, with a calibration loss (docs/training.md).

    ``kind`` says how ``term`` enters (:data:`CALIBRATION_KINDS`): ``"replace_ce"`` (SVLS, NACL: the term is itself
    a cross-entropy, as the papers train it) gives ``weight_dice * Dice + weight_ce * term``; ``"add"`` (MbLS,
    L1-ACE) gives ``Dice + CE + weight * term``. ``stock`` is nnU-Net's ``DC_and_CE_loss`` (labels, softmax) or
    ``DC_and_BCE_loss`` (regions, sigmoid); nnU-Net's ``DeepSupervisionWrapper`` applies this module to every output
    with its own weights, so deep supervision is handled as nnU-Net does.

    Args:
        stock: nnU-Net's loss of one output (``dc``, ``weight_dice``, ``weight_ce`` are used).
        term: the calibration loss, ``term(logits, target)``; the target is nnU-Net's: a label map
            ``(B, 1, *spatial)`` (labels) or the region masks ``(B, R, *spatial)`` (regions).
        kind: ``"replace_ce"`` or ``"add"``.
        weight: the weight of the term when added, a finite number ``>= 0``; with ``"replace_ce"`` it must be 1
            (the term has the cross-entropy's weight ``stock.weight_ce``).

    Example:
        >>> from nnunetv2.training.loss.compound_losses import DC_and_CE_loss
        >>> stock = DC_and_CE_loss({"batch_dice": False, "smooth": 1e-5, "do_bg": False, "ddp": False}, {})
        >>> loss = CalibrationLoss(stock, L1ACELoss(to_onehot_y=True), "add")
        >>> z, y = torch.randn(2, 3, 8, 8), torch.randint(0, 3, (2, 1, 8, 8)).float()
        >>> bool(torch.isclose(loss(z, y), stock(z, y) + L1ACELoss(to_onehot_y=True)(z, y)))
        True
    """

    def __init__(self, stock: nn.Module, term: Any, kind: str, weight: float = 1.0) -> None:
        super().__init__()
        if kind not in ("replace_ce", "add"):
            raise ValueError(f"kind must be 'replace_ce' or 'add', got {kind!r}")
        self.stock = stock
        self.term = term
        self.kind = kind
        # found by hostile testing: a NaN weight trained on a NaN loss, a negative one rewarded miscalibration
        self.weight = check_nonnegative(weight, "weight")
        if kind == "replace_ce" and self.weight != 1.0:  # in earlier versions ignored, silently
            raise ValueError(f"weight does not apply to kind 'replace_ce' (the term replaces the cross-entropy and "
                             f"has its weight, stock.weight_ce): give 1, got {weight!r}")

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss of one output.

        Args:
            output: ``(B, C, *spatial)`` logits.
            target: nnU-Net's target of that output.

        Returns:
            The scalar loss.
        """
        if self.kind == "add":
            return self.stock(output, target) + self.weight * self.term(output, target)
        dice = self.stock.dc(output, target, loss_mask=None) if self.stock.weight_dice != 0 else 0.0
        return self.stock.weight_dice * dice + self.stock.weight_ce * self.term(output, target)


class _MarginPenalty(nn.Module):
    """``alpha * mean max(0, max_j z_j - z_c - margin)`` of one output (the target is not used).

    The outputs are float16 under nnU-Net's autocast: :func:`~monai_unc.losses.mean_margin_penalty` computes their
    penalty in float32 (summed in float64) and returns it in float32.
    """

    def __init__(self, margin: float, alpha: float) -> None:
        super().__init__()
        self.margin = float(margin)
        self.alpha = float(alpha)

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.alpha * mean_margin_penalty(output, self.margin)


class _NACLTerm(nn.Module):
    """MONAI's ``NACLLoss`` on nnU-Net's label map ``(B, 1, *spatial)`` (MONAI's wants ``(B, *spatial)``).

    In float32 outside autocast, as the losses of :mod:`monai_unc.losses` compute float16 / bfloat16 logits: under
    nnU-Net's autocast MONAI's loss smoothed the one-hot target by a float16 convolution and averaged the float16
    distances to it, the term 3e-5 (float16) to 2e-4 (bfloat16) off (found by hostile testing).
    """

    def __init__(self, classes: int, dim: int, kernel_size: int, alpha: float) -> None:
        super().__init__()
        self.nacl = NACLLoss(classes=classes, dim=dim, kernel_size=kernel_size, alpha=alpha)

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if output.dtype in (torch.float16, torch.bfloat16):
            output = output.float()
        with no_autocast(output.device):
            return self.nacl(output, target[:, 0].long())


class _CalibratedTrainer:
    """Mixin before an nnU-Net trainer class: nnU-Net's loss with a calibration term (:class:`CalibrationLoss`).

    Subclasses set :attr:`calibration` (a key of :data:`CALIBRATION_KINDS`) and implement :meth:`calibration_term`.
    Ignore labels are refused (the terms cover every voxel).
    """

    calibration: str = ""
    #: whether the method is defined for region-based (sigmoid) training
    supports_regions: bool = True

    def calibration_term(self) -> nn.Module:
        raise NotImplementedError

    def output_calibration_terms(self, scales: Sequence[Sequence[float]]) -> list[nn.Module] | None:
        """One term per deep-supervision output, for a term that depends on the output's resolution.

        Args:
            scales: nnU-Net's ``_get_deep_supervision_scales()``: per output, the size of its grid over the
                full-resolution one along each axis (1, 1/2, ...).

        Returns:
            The terms, in the order of the outputs; None (here): :meth:`calibration_term` at every output.
        """
        return None

    def _build_loss(self) -> nn.Module:
        name = type(self).__name__
        if self.label_manager.has_ignore_label:
            raise ValueError(f"{name} does not support an ignore label (the calibration loss covers all voxels)")
        if self.label_manager.has_regions and not self.supports_regions:
            raise ValueError(f"{name} supports label (softmax) training only, not region-based training")
        weight = check_nonnegative(getattr(self, "calibration_weight", 1.0), f"{name}.calibration_weight")
        kind = CALIBRATION_KINDS[self.calibration]
        if kind == "replace_ce" and weight != 1.0:  # in earlier versions ignored: the default loss, silently
            raise ValueError(
                f"{name}.calibration_weight = {weight:g} does not apply to {name}: its "
                f"{self.calibration.upper()} term replaces nnU-Net's cross-entropy (with the cross-entropy's weight) "
                "instead of being added to Dice + CE; leave calibration_weight at 1"
            )
        loss = super()._build_loss()  # nnU-Net's Dice + CE, wrapped for deep supervision with nnU-Net's weights
        if not isinstance(loss, DeepSupervisionWrapper):
            return CalibrationLoss(loss, self.calibration_term(), kind, weight)
        terms = self.output_calibration_terms(self._get_deep_supervision_scales())
        if terms is None:
            loss.loss = CalibrationLoss(loss.loss, self.calibration_term(), kind, weight)
            return loss
        return PerOutputDeepSupervision([CalibrationLoss(loss.loss, t, kind, weight) for t in terms],
                                        loss.weight_factors)


class PerOutputDeepSupervision(DeepSupervisionWrapper):
    """nnU-Net's ``DeepSupervisionWrapper`` with a loss of its own for each output (same weights, same sum).

    ``sum_k weight_factors[k] * losses[k](output_k, target_k)`` over the outputs whose weight is not 0, for losses
    that depend on the output's resolution (the spacing-aware SVLS kernel: output k's voxels are the full
    resolution's times the pooling strides). ``loss`` is the full-resolution output's, as in nnU-Net's wrapper.

    Args:
        losses: one loss per output, full resolution first.
        weight_factors: nnU-Net's weight of each output.

    Example:
        >>> loss = PerOutputDeepSupervision([nn.L1Loss(), nn.MSELoss()], (0.5, 0.5))
        >>> float(loss([torch.ones(2), torch.ones(2)], [torch.zeros(2), torch.full((2,), 3.0)]))
        2.5
    """

    def __init__(self, losses: Sequence[nn.Module], weight_factors: Sequence[float]) -> None:
        if len(losses) != len(weight_factors):
            raise ValueError(f"one loss per output: got {len(losses)} losses and {len(weight_factors)} weights")
        super().__init__(losses[0], weight_factors)
        self.losses = nn.ModuleList(losses)

    def forward(self, *args: Any) -> torch.Tensor:
        """The weighted sum of each output's loss.

        Args:
            *args: nnU-Net's lists, one entry per output (outputs, targets).

        Returns:
            The scalar loss.
        """
        if not all(isinstance(a, (tuple, list)) for a in args):
            raise TypeError(f"all args must be tuples or lists (one entry per output), got {[type(a) for a in args]}")
        return sum(w * loss(*inputs) for w, loss, inputs in zip(self.weight_factors, self.losses, zip(*args))
                   if w != 0.0)


class nnUNetTrainerSVLS(_CalibratedTrainer, nnUNetTrainer):
    """nnU-Net's trainer with spatially varying label smoothing: Dice + cross-entropy against smoothed labels.

    Islam, Glocker, *Spatially Varying Label Smoothing*, IPMI 2021: :class:`~monai_unc.losses.SVLSLoss` replaces
    nnU-Net's cross-entropy (binary cross-entropy per region for region-based training). :attr:`svls_sigma` (1) and
    :attr:`svls_kernel_size` (3) are in voxels of each output; with :attr:`svls_spacing_aware` the kernel of each
    deep-supervision output uses that output's voxel size (the configuration's spacing times the output's pooling
    strides) divided by its smallest entry (``sigma`` then in voxels of that output's finest axis), one
    :class:`CalibrationLoss` per output (:class:`PerOutputDeepSupervision`). Subclass and set them for other
    settings.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).

    Example:
        >>> nnUNetTrainerSVLS.svls_sigma, nnUNetTrainerSVLS.svls_kernel_size
        (1.0, 3)
    """

    calibration = "svls"
    svls_sigma: float = 1.0
    svls_kernel_size: int = 3
    svls_spacing_aware: bool = False

    def calibration_term(self, scale: Sequence[float] | None = None) -> nn.Module:
        """The SVLS cross-entropy for nnU-Net's targets.

        Args:
            scale: the output's grid over the full-resolution one per axis (an entry of nnU-Net's
                ``_get_deep_supervision_scales()``); None: full resolution. Used with :attr:`svls_spacing_aware`.

        Returns:
            The term.
        """
        regions = bool(self.label_manager.has_regions)
        spacing = None
        if _spacing_aware(self):
            sp = [float(s) for s in self.configuration_manager.spacing]
            if scale is not None:  # the output's voxels: the full resolution's times the pooling strides
                sp = [s / float(k) for s, k in zip(sp, scale)]
            spacing = [s / min(sp) for s in sp]
        return SVLSLoss(self.svls_kernel_size, self.svls_sigma, spacing, to_onehot_y=not regions, softmax=not regions,
                        sigmoid=regions)

    def output_calibration_terms(self, scales: Sequence[Sequence[float]]) -> list[nn.Module] | None:
        """With :attr:`svls_spacing_aware`, each output's term with its own voxel size; None otherwise.

        Args:
            scales: nnU-Net's ``_get_deep_supervision_scales()``.

        Returns:
            One term per output, or None (the kernel in voxels is the same at every output).
        """
        if not _spacing_aware(self):
            return None
        return [self.calibration_term(scale) for scale in scales]


def _spacing_aware(trainer: nnUNetTrainerSVLS) -> bool:
    """The trainer's :attr:`~nnUNetTrainerSVLS.svls_spacing_aware`, a bool: a string ``"no"`` is truthy."""
    return check_bool(trainer.svls_spacing_aware, f"{type(trainer).__name__}.svls_spacing_aware")


class nnUNetTrainerMbLS(_CalibratedTrainer, nnUNetTrainer):
    """nnU-Net's trainer with margin-based label smoothing: Dice + CE + ``alpha`` times the logit-margin penalty.

    Murugesan et al., *Calibrating Segmentation Networks with Margin-based Label Smoothing*, Medical Image Analysis
    2023 (after Liu et al., CVPR 2022): :attr:`mbls_margin` = 10, :attr:`mbls_alpha` = 0.1. Softmax (label) training
    only.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).

    Example:
        >>> nnUNetTrainerMbLS.mbls_margin, nnUNetTrainerMbLS.mbls_alpha
        (10.0, 0.1)
    """

    calibration = "mbls"
    supports_regions = False
    mbls_margin: float = 10.0
    mbls_alpha: float = 0.1

    def calibration_term(self) -> nn.Module:
        """The weighted margin penalty."""
        # a negative alpha rewarded logit margins beyond the margin: the opposite of the method; a margin of True
        # or "10" passed float() (hostile review 56), a negative one failed only at the first step
        name = type(self).__name__
        return _MarginPenalty(check_nonnegative(self.mbls_margin, f"{name}.mbls_margin"),
                              check_nonnegative(self.mbls_alpha, f"{name}.mbls_alpha"))


class nnUNetTrainerL1ACE(_CalibratedTrainer, nnUNetTrainer):
    """nnU-Net's trainer with the hard-binned marginal L1 average calibration error added to Dice + CE.

    Barfoot et al., *Average Calibration Error: A Differentiable Loss for Improved Reliability in Image
    Segmentation*, MICCAI 2024: :attr:`ace_num_bins` = 20, background included, empty classes ignored; the authors
    weight ACE, Dice and CE equally, which with nnU-Net's weights 1 and 1 is :attr:`calibration_weight` = 1.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).

    Example:
        >>> nnUNetTrainerL1ACE.ace_binning, nnUNetTrainerL1ACE.ace_num_bins
        ('hard', 20)
    """

    calibration = "l1ace"
    ace_binning: str = "hard"
    ace_num_bins: int = 20
    ace_empty_weight: float = 0.01
    calibration_weight: float = 1.0

    def calibration_term(self) -> nn.Module:
        """The L1-ACE of nnU-Net's targets."""
        regions = bool(self.label_manager.has_regions)
        return L1ACELoss(self.ace_binning, self.ace_num_bins, self.ace_empty_weight, to_onehot_y=not regions,
                         softmax=not regions, sigmoid=regions)


class nnUNetTrainerSoftL1ACE(nnUNetTrainerL1ACE):
    """:class:`nnUNetTrainerL1ACE` with soft bins.

    Barfoot et al., *Average Calibration Losses for Reliable Uncertainty in Medical Image Segmentation*, 2025.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).

    Example:
        >>> nnUNetTrainerSoftL1ACE.ace_binning
        'soft'
    """

    ace_binning = "soft"


class nnUNetTrainerNACL(_CalibratedTrainer, nnUNetTrainer):
    """nnU-Net's trainer with MONAI's neighbour-aware calibration loss in place of its cross-entropy.

    Murugesan et al., *Trust your neighbours: Penalty-based constraints for model calibration*, MICCAI 2023, as
    MONAI implements it (:class:`monai.losses.NACLLoss`: cross-entropy + ``alpha`` times the L1 distance of the
    logits to the mean-filtered one-hot labels): :attr:`nacl_kernel_size` = 3, :attr:`nacl_alpha` = 0.1; plus
    nnU-Net's Dice. Softmax (label) training only.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).

    Example:
        >>> nnUNetTrainerNACL.nacl_kernel_size, nnUNetTrainerNACL.nacl_alpha
        (3, 0.1)
    """

    calibration = "nacl"
    supports_regions = False
    nacl_kernel_size: int = 3
    nacl_alpha: float = 0.1

    def calibration_term(self) -> nn.Module:
        """MONAI's ``NACLLoss`` for nnU-Net's label maps."""
        name = type(self).__name__
        # found by hostile testing: an even kernel shifted MONAI's mean-filtered target by half a voxel, True failed in
        # torch.ones, and a negative or NaN alpha trained on the opposite constraint or a NaN loss
        size = self.nacl_kernel_size
        if not is_int(size) or size < 1 or size % 2 == 0:
            raise ValueError(f"{name}.nacl_kernel_size must be an odd integer >= 1, got {size!r}")
        alpha = check_nonnegative(self.nacl_alpha, f"{name}.nacl_alpha")
        dim = len(self.configuration_manager.patch_size)
        return _NACLTerm(self.label_manager.num_segmentation_heads, dim, int(size), alpha)


class nnUNetTrainerMCDropoutSVLS(nnUNetTrainerSVLS, nnUNetTrainerMCDropout):
    """:class:`nnUNetTrainerMCDropout`'s network trained with :class:`nnUNetTrainerSVLS`'s loss.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).
    """


class nnUNetTrainerMCDropoutMbLS(nnUNetTrainerMbLS, nnUNetTrainerMCDropout):
    """:class:`nnUNetTrainerMCDropout`'s network trained with :class:`nnUNetTrainerMbLS`'s loss.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).
    """


class nnUNetTrainerMCDropoutL1ACE(nnUNetTrainerL1ACE, nnUNetTrainerMCDropout):
    """:class:`nnUNetTrainerMCDropout`'s network trained with :class:`nnUNetTrainerL1ACE`'s loss.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).
    """


class nnUNetTrainerMCDropoutSoftL1ACE(nnUNetTrainerSoftL1ACE, nnUNetTrainerMCDropout):
    """:class:`nnUNetTrainerMCDropout`'s network trained with :class:`nnUNetTrainerSoftL1ACE`'s loss.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).
    """


class nnUNetTrainerMCDropoutNACL(nnUNetTrainerNACL, nnUNetTrainerMCDropout):
    """:class:`nnUNetTrainerMCDropout`'s network trained with :class:`nnUNetTrainerNACL`'s loss.

    The constructor takes nnU-Net's trainer arguments (``plans, configuration, fold, dataset_json, device``).
    """


class _TenIterations:
    """Mixin before an nnU-Net trainer class: one epoch of 10 training and 2 validation iterations.

    Its ``__init__`` has nnU-Net's trainer signature (nnU-Net records the constructor's arguments by name in the
    checkpoint) and shortens the schedule after the trainer's own ``__init__``.
    """

    def __init__(
        self,
        plans: dict,
        configuration: str,
        fold: int,
        dataset_json: dict,
        device: torch.device = torch.device("cuda"),  # noqa: B008 (nnU-Net's signature)
    ) -> None:
        super().__init__(plans, configuration, fold, dataset_json, device)  # type: ignore[call-arg]
        self.num_epochs = 1
        self.num_iterations_per_epoch = 10
        self.num_val_iterations_per_epoch = 2


class _TwoShortEpochs(_TenIterations):
    """Mixin before an nnU-Net trainer class: two epochs of 5 training and 1 validation iterations."""

    def __init__(
        self,
        plans: dict,
        configuration: str,
        fold: int,
        dataset_json: dict,
        device: torch.device = torch.device("cuda"),  # noqa: B008 (nnU-Net's signature)
    ) -> None:
        super().__init__(plans, configuration, fold, dataset_json, device)
        self.num_epochs = 2
        self.num_iterations_per_epoch = 5
        self.num_val_iterations_per_epoch = 1


class nnUNetTrainerSVLS_2epochs(_TwoShortEpochs, nnUNetTrainerSVLS):
    """:class:`nnUNetTrainerSVLS` cut to two epochs of 5 training and 1 validation iterations (tests, smoke runs)."""


class nnUNetTrainerMbLS_2epochs(_TwoShortEpochs, nnUNetTrainerMbLS):
    """:class:`nnUNetTrainerMbLS` cut to two epochs of 5 training and 1 validation iterations (tests, smoke runs)."""


class nnUNetTrainerL1ACE_2epochs(_TwoShortEpochs, nnUNetTrainerL1ACE):
    """:class:`nnUNetTrainerL1ACE` cut to two epochs of 5 training and 1 validation iterations (tests, smoke runs)."""


class nnUNetTrainerSoftL1ACE_2epochs(_TwoShortEpochs, nnUNetTrainerSoftL1ACE):
    """:class:`nnUNetTrainerSoftL1ACE` cut to two epochs of 5 training and 1 validation iterations (tests)."""


class nnUNetTrainerNACL_2epochs(_TwoShortEpochs, nnUNetTrainerNACL):
    """:class:`nnUNetTrainerNACL` cut to two epochs of 5 training and 1 validation iterations (tests, smoke runs)."""


class nnUNetTrainerMCDropoutSVLS_2epochs(_TwoShortEpochs, nnUNetTrainerMCDropoutSVLS):
    """:class:`nnUNetTrainerMCDropoutSVLS` cut to two epochs of 5 training and 1 validation iterations (tests)."""


class nnUNetTrainerMCDropoutMbLS_2epochs(_TwoShortEpochs, nnUNetTrainerMCDropoutMbLS):
    """:class:`nnUNetTrainerMCDropoutMbLS` cut to two epochs of 5 training and 1 validation iterations (tests)."""


class nnUNetTrainerMCDropoutL1ACE_2epochs(_TwoShortEpochs, nnUNetTrainerMCDropoutL1ACE):
    """:class:`nnUNetTrainerMCDropoutL1ACE` cut to two epochs of 5 training and 1 validation iterations (tests)."""


class nnUNetTrainerMCDropoutSoftL1ACE_2epochs(_TwoShortEpochs, nnUNetTrainerMCDropoutSoftL1ACE):
    """:class:`nnUNetTrainerMCDropoutSoftL1ACE` cut to two epochs of 5 training and 1 validation iterations."""


class nnUNetTrainerMCDropoutNACL_2epochs(_TwoShortEpochs, nnUNetTrainerMCDropoutNACL):
    """:class:`nnUNetTrainerMCDropoutNACL` cut to two epochs of 5 training and 1 validation iterations (tests)."""


class nnUNetTrainer_10iters(_TenIterations, nnUNetTrainer):
    """Stock trainer cut to one epoch of 10 training and 2 validation iterations (tests, CPU smoke runs).

    Args:
        plans: the plans dict (``nnUNetPlans.json``).
        configuration: the configuration to train, e.g. ``"3d_fullres"``.
        fold: the cross-validation fold (or ``"all"``).
        dataset_json: the dataset's ``dataset.json``.
        device: the training device.
    """


class nnUNetTrainerMCDropout_10iters(_TenIterations, nnUNetTrainerMCDropout):
    """:class:`nnUNetTrainerMCDropout` cut to one epoch of 10 training and 2 validation iterations.

    Args:
        plans: the plans dict (``nnUNetPlans.json``).
        configuration: the configuration to train, e.g. ``"3d_fullres"``.
        fold: the cross-validation fold (or ``"all"``).
        dataset_json: the dataset's ``dataset.json``.
        device: the training device.
    """


class nnUNetTrainerSSN_10iters(_TenIterations, nnUNetTrainerSSN):
    """:class:`nnUNetTrainerSSN` cut to one epoch of 10 training and 2 validation iterations.

    Args:
        plans: the plans dict (``nnUNetPlans.json``).
        configuration: the configuration to train, e.g. ``"3d_fullres"``.
        fold: the cross-validation fold (or ``"all"``).
        dataset_json: the dataset's ``dataset.json``.
        device: the training device.
    """


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

    Args:
        raw_dir: ``nnUNet_raw``; the dataset folder is created in it.
        dataset_id: the dataset id, 1-999.
        name: the dataset name (``DatasetXXX_<name>``).
        num_training: training cases (``imagesTr`` / ``labelsTr``), at least 2.
        num_test: test cases (``imagesTs``, no labels).
        shape: voxels per axis.
        spacing: voxel size in mm (x, y, z).
        empty_slices: leading slices along the last axis set to 0, in ``[0, shape[-1] // 2)``.
        seed: seed of the cases, an integer in ``[0, 2**64)``.

    Returns:
        The dataset folder ``raw_dir/DatasetXXX_name``.

    Raises:
        ValueError: ``dataset_id``, ``num_training``, ``num_test`` or ``empty_slices`` not an integer in range,
            ``shape`` not 3 integers, ``spacing`` not 3 positive finite numbers, ``name`` holds a path separator,
            ``raw_dir`` holds another dataset of that id, or the dataset folder holds files this dataset does not
            (one written with other counts: the cases would mix), or ``seed`` negative or above ``2**64 - 1``. All
            before anything is written.
        TypeError: ``seed`` is not an integer (a float, a bool, None), before anything is written.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     folder = write_toy_dataset(d, num_training=2, num_test=1, shape=(16, 16, 16), empty_slices=2)
        ...     folder.name, sorted(p.name for p in (folder / "imagesTr").iterdir())
        ('Dataset990_UncToy', ['toy_000_0000.nii.gz', 'toy_001_0000.nii.gz'])
    """
    # found by hostile testing: dataset_id=12.7 or True wrote Dataset012 / Dataset001, empty_slices=True blanked one
    # slice, shape=(8, 8, 8.5) wrote a dataset, numpy integer counts were refused naming "n_cases", a 2-entry spacing
    # failed with an IndexError and a zero or NaN spacing in nibabel
    if not is_int(dataset_id) or not 1 <= dataset_id <= 999:
        raise ValueError(f"dataset_id must be an integer in 1..999, got {dataset_id!r}")
    dataset_id = int(dataset_id)
    num_training = check_integer(num_training, "num_training", minimum=2)
    # a negative num_test wrote fewer training cases than dataset.json's numTraining
    if not is_int(num_test) or num_test < 0:
        raise ValueError(f"num_test must be an integer >= 0, got {num_test!r}")
    num_test = int(num_test)
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or len(shape) != 3 \
            or not all(is_int(v) for v in shape):
        raise ValueError(f"shape must be 3 integers (voxels per axis), got {shape!r}")
    shape = tuple(int(v) for v in shape)
    if isinstance(spacing, (str, bytes)) or not isinstance(spacing, Sequence) or len(spacing) != 3 \
            or not all(is_finite_real(v) and v > 0 for v in spacing):
        raise ValueError(f"spacing must be 3 positive finite numbers (mm, x y z), got {spacing!r}")
    if not is_int(empty_slices) or not 0 <= empty_slices < shape[-1] // 2:
        raise ValueError(f"empty_slices must be an integer in [0, {shape[-1] // 2}), got {empty_slices!r}")
    empty_slices = int(empty_slices)
    # seed=-1 failed inside numpy ("expected non-negative integer") without naming seed, after the dataset's folders
    # were made (found by hostile testing)
    seed = check_seed(seed, optional=False)
    if not isinstance(name, str) or not name or Path(name).name != name or "\\" in name:
        raise ValueError(f"name must be a folder name part without path separators, got {name!r}")
    prefix = f"Dataset{int(dataset_id):03d}_"
    folder = Path(raw_dir) / f"{prefix}{name}"
    if Path(raw_dir).is_dir():
        # nnU-Net resolves a dataset id to exactly one DatasetXXX_ folder: a second one made the id unusable
        others = sorted(p.name for p in Path(raw_dir).iterdir() if p.name.startswith(prefix) and p != folder)
        if others:
            raise ValueError(f"{raw_dir} already holds dataset id {int(dataset_id)} as {others[0]}: nnU-Net could not "
                             "tell the two apart; choose another dataset_id")
    expected = {("imagesTr" if i < num_training else "imagesTs", f"toy_{i:03d}_0000.nii.gz")
                for i in range(num_training + num_test)} | {("labelsTr", f"toy_{i:03d}.nii.gz")
                                                            for i in range(num_training)}
    stale = sorted(f"{sub}/{p.name}" for sub in ("imagesTr", "labelsTr", "imagesTs") if (folder / sub).is_dir()
                   for p in (folder / sub).iterdir() if (sub, p.name) not in expected)
    if stale:
        # a rerun with other counts left the earlier cases beside the new ones (numTraining then wrong, a case in
        # both imagesTr and imagesTs)
        raise ValueError(f"{folder} holds {len(stale)} file(s) that this toy dataset does not (e.g. {stale[0]}): a "
                         "dataset written with other settings; choose another raw_dir or dataset_id")
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
        save_nifti_image(nib.Nifti1Image(image.astype(np.float32), affine), folder / images / f"{ident}_0000.nii.gz")
        if i < num_training:
            save_nifti_image(nib.Nifti1Image(label, affine), folder / "labelsTr" / f"{ident}.nii.gz")
    meta = {
        "channel_names": {"0": "MRI"},
        "labels": {"background": 0, "outer": 1, "core": 2},
        "numTraining": int(num_training),
        "file_ending": ".nii.gz",
    }
    atomic_write_text(folder / "dataset.json", json.dumps(meta, indent=2))
    return folder
