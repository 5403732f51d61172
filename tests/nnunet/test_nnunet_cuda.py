"""``UncertaintyPredictor`` with ``perform_everything_on_device=True`` on ``cuda_device`` against stock nnU-Net.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu`` (nnU-Net then turns
``perform_everything_on_device`` off, as stock does). No dropout: the toy folds of ``test_nnunet.make_predictor``
and mirroring are deterministic, so the stitched segmentation logits equal stock ``nnUNetPredictor``'s on the same
device bit for bit (cuDNN in deterministic mode, the same kernels for both). The device run's statistics equal the
CPU run's within the rounding of nnU-Net's fp16 autocast on CUDA (``atol=5e-3`` on probabilities and entropies;
exact on the CPU).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from tests.nnunet.test_nnunet import make_predictor  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("one_torch_thread")]

KW = {"uncertainty_sources": ("folds", "mirroring"), "measures": mun.MAP_MEASURES}


def test_predictor_on_the_device_equals_stock_and_the_cpu_run(cuda_device, deterministic_cudnn):
    torch.manual_seed(4)
    data = torch.randn(1, 20, 24, 12)
    ours = make_predictor(device=cuda_device, perform_everything_on_device=True, **KW)
    stock = make_predictor(cls=nnUNetPredictor, device=cuda_device, perform_everything_on_device=True)
    assert ours.perform_everything_on_device == stock.perform_everything_on_device == (cuda_device.type == "cuda")
    res = ours.predict_uncertainty_from_preprocessed_data(data)
    want = stock.predict_logits_from_preprocessed_data(data)
    assert res.logits.dtype == want.dtype == torch.float16
    assert torch.equal(res.logits.cpu(), want.cpu())
    assert torch.equal(ours.predict_logits_from_preprocessed_data(data).cpu(), want.cpu())
    # the statistics come back to the CPU (documented), equal to the CPU run up to fp16 autocast
    cpu = make_predictor(**KW).predict_uncertainty_from_preprocessed_data(data)
    assert res.num_samples == cpu.num_samples == 16
    assert set(res.moments) == set(cpu.moments)
    for k, v in res.moments.items():
        assert v.device.type == "cpu" and v.dtype == torch.float32, k
        np.testing.assert_allclose(v.numpy(), cpu.moments[k].numpy(), atol=5e-3, err_msg=k)
    for k, v in res.measures(mun.MAP_MEASURES).items():
        np.testing.assert_allclose(v.numpy(), cpu.measures(mun.MAP_MEASURES)[k].numpy(), atol=5e-3, err_msg=k)


def test_side_by_side_folds_on_the_device_equal_stock(cuda_device, deterministic_cudnn):
    """Folds not a source: every fold's weights go to the device at once and are averaged inside each window; the
    segmentation logits are still stock's."""
    torch.manual_seed(5)
    data = torch.randn(1, 18, 20, 16)
    ours = make_predictor(device=cuda_device, uncertainty_sources=("mirroring",))
    stock = make_predictor(cls=nnUNetPredictor, device=cuda_device)
    res = ours.predict_uncertainty_from_preprocessed_data(data)
    assert res.num_samples == 8
    assert torch.equal(res.logits.cpu(), stock.predict_logits_from_preprocessed_data(data).cpu())
    assert all(v.device.type == "cpu" for v in res.moments.values())
