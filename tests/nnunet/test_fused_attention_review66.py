"""The nnU-Net predictor's passes of a network with MONAI's fused attention (review 66).

MONAI's ``SABlock`` with ``use_flash_attention=True`` draws attention dropout in eval mode too (MONAI 1.6.1). The
predictor ran its networks without :func:`~monai_unc.inferers.align_fused_attention`: the mean logits that
``nnunet-calibrate`` fits a temperature to (``predict_logits_from_preprocessed_data``) and every deterministic pass
were random.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

pytest.importorskip("nnunetv2")

from nnunetv2.utilities.plans_handling.plans_handler import PlansManager  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from tests.nnunet.test_nnunet import DATASET_JSON, make_plans  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _FusedAttentionNet(nn.Module):
    """A 1x1 convolution, one MONAI transformer block with fused attention over the voxels, a 1x1 convolution."""

    def __init__(self) -> None:
        from monai.networks.blocks import TransformerBlock

        super().__init__()
        if "use_flash_attention" not in inspect.signature(TransformerBlock).parameters:
            pytest.skip("the installed MONAI has no use_flash_attention")
        self.block = TransformerBlock(16, 16, 2, 0.3, use_flash_attention=True)
        self.embed, self.head = nn.Conv3d(1, 16, 1), nn.Conv3d(16, 3, 1)  # the logit layer registered last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.embed(x)
        tokens = self.block(f.flatten(2).transpose(1, 2))  # (B, voxels, 16)
        return self.head(tokens.transpose(1, 2).reshape(f.shape))


def test_predictor_logits_are_deterministic():
    torch.manual_seed(0)
    net = _FusedAttentionNet().eval()
    x = torch.rand(1, 1, 8, 8, 8)
    with torch.no_grad():
        if torch.equal(net(x), net(x)):
            pytest.skip("the installed MONAI draws no attention dropout in eval mode")
    pm = PlansManager(make_plans(patch=(8, 8, 8)))
    cm = pm.get_configuration("cfg")
    pred = mun.UncertaintyPredictor(("mirroring",), device=torch.device("cpu"), allow_tqdm=False)
    pred.manual_initialization(net, pm, cm, [net.state_dict()], DATASET_JSON, "nnUNetTrainer", (0,))
    data = torch.randn(1, 8, 8, 8)
    a, b = (pred.predict_logits_from_preprocessed_data(data) for _ in range(2))
    assert torch.equal(a, b)  # before: two draws of attention dropout
    assert net.block.attn.dropout_rate == 0.3  # given back


class _Cases:
    """Preprocessed validation cases in memory, as nnU-Net's dataset classes give them (``load_case``)."""

    def __init__(self, cases: dict) -> None:
        self.cases = cases

    def load_case(self, key):
        data, seg = self.cases[key]
        return data, seg, None, None


def test_nnunet_calibrate_fits_to_deterministic_logits(tmp_path):
    # nnunet-calibrate predicts a fold's validation cases with stock nnUNetPredictor: it ran the network without
    # align_fused_attention, so the NLL at T = 1 (and the temperature) changed from one run to the next
    import numpy as np
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    from monai_unc.nnunet.calibrate import _fit_fold

    torch.manual_seed(0)
    net = _FusedAttentionNet().eval()
    pm = PlansManager(make_plans(patch=(8, 8, 8)))
    cm = pm.get_configuration("cfg")
    pred = nnUNetPredictor(use_mirroring=False, device=torch.device("cpu"), allow_tqdm=False,
                           perform_everything_on_device=False)
    pred.manual_initialization(net, pm, cm, [net.state_dict()], DATASET_JSON, "nnUNetTrainer", None)
    rng = np.random.default_rng(0)
    cases = _Cases({"a": (rng.standard_normal((1, 8, 8, 8)).astype(np.float32),
                          rng.integers(0, 3, (1, 8, 8, 8)).astype(np.int8))})
    nll = [_fit_fold(pred, cases, tmp_path, ["a"], tmp_path / "splits_final.json", None, tmp_path / f"s{i}",
                     "scalar", "nll", "softmax", {"max_steps": 2})[1] for i in range(2)]
    assert nll[0] == nll[1]  # before: two draws of attention dropout
    assert net.block.attn.dropout_rate == 0.3


def test_nnunet_calibrate_folds_into_a_network_with_fused_attention(tmp_path, monkeypatch):
    # the fold check compares the network's output before and after the fold: with random attention dropout in both,
    # nnunet-calibrate refused the exact fold ("does not divide the network's output by t") and failed
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    import monai_unc.nnunet.calibrate as calibrate
    from tests.nnunet.test_calibrate_hostile import write_preprocessed
    from tests.nnunet.test_predictor_hostile import write_model_folder

    torch.manual_seed(0)
    net = _FusedAttentionNet().eval()
    plans = make_plans(patch=(8, 8, 8))
    model = write_model_folder(tmp_path / "model", folds=(0,), plans=plans)
    ckpt = torch.load(model / "fold_0" / "checkpoint_final.pth", weights_only=False)
    ckpt["network_weights"] = net.state_dict()
    torch.save(ckpt, model / "fold_0" / "checkpoint_final.pth")

    class _Predictor(nnUNetPredictor):  # nnU-Net builds a PlainConvUNet from the plans: this network instead
        def initialize_from_trained_model_folder(self, *args, **kwargs):
            pm = PlansManager(plans)
            self.manual_initialization(net, pm, pm.get_configuration("cfg"), [net.state_dict()], DATASET_JSON,
                                       "nnUNetTrainer", None)

    monkeypatch.setattr(calibrate, "nnUNetPredictor", _Predictor)
    report = calibrate.calibrate_model_folder(model, tmp_path / "out", use_folds=(0,), use_mirroring=False,
                                              preprocessed_dir=write_preprocessed(tmp_path / "pre", cases=("a",)),
                                              max_steps=5)
    t = report["0"]["temperature"][0]
    folded = torch.load(tmp_path / "out" / "fold_0" / "checkpoint_final.pth", weights_only=False)["network_weights"]
    torch.testing.assert_close(folded["head.weight"], net.head.weight / t)
    assert net.block.attn.dropout_rate == 0.3
