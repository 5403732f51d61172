"""Library noise on the nnU-Net path (review 65).

nnU-Net's lookup of a trainer outside its own folder (this package's, through ``nnUNet_extTrainer``) imports all of
its trainer modules; its Primus trainers import timm, whose module body calls ``torch.jit.interface``, and recent
torch warns (``FutureWarning``, shown by Python's default filters) that it is deprecated. Every ``nnunet-predict`` /
``nnunet-calibrate`` of a model trained with this package's trainers printed it. ``ext_trainer_path`` (the block of
the lookup) ignores that one message, and nothing else.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from monai_unc.nnunet.environment import ext_trainer_path


def _timm_interface() -> None:
    """What timm's ``models/hrnet.py`` runs when it is imported."""

    @torch.jit.interface
    class ModuleInterface(torch.nn.Module):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            pass


def test_the_trainer_lookup_block_ignores_torchs_jit_interface_deprecation_only():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ext_trainer_path():
            _timm_interface()  # raised FutureWarning before review 65
            with pytest.raises(FutureWarning, match="another"):
                warnings.warn("another deprecation", FutureWarning)
            with pytest.raises(FutureWarning, match="interface"):  # the same words from elsewhere still warn
                warnings.warn("`torch.jit.interface` is deprecated", FutureWarning)
