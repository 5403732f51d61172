"""Hostile review 58 of the nnU-Net predictor: the mean logits of many stochastic passes under a float16 network."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("nnunetv2")

from tests.nnunet.test_nnunet import make_predictor  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _dropout_predictor(num_samples: int, half: bool):
    """One fold with post-hoc dropout, logits near +-120 (a confident network), 8 mirrors; ``half``: the network
    returns float16, as it does under nnU-Net's CUDA autocast."""
    pred = make_predictor(n_folds=1, uncertainty_sources=("dropout",), num_samples=num_samples, dropout_p=0.05,
                          seed=3)
    pred.list_of_parameters[0]["decoder.seg_layers.0.weight"] *= 8
    pred.network.load_state_dict(pred.list_of_parameters[0])
    if half:
        pred.network.register_forward_hook(lambda module, args, out: out.half())
    return pred


def _window_logits(pred, x):
    torch.manual_seed(11)
    with pred._sampling_context():
        return pred._internal_maybe_mirror_and_predict(x)["logits"]


@pytest.mark.parametrize("num_samples", [30, 100])
def test_mean_logits_of_float16_passes_are_summed_without_float16_rounding(num_samples):
    """The mean logit over 30 dropout passes x 8 mirrors of a float16 network was summed in float16: off by 0.68 at
    logits near 120 (an fp16 ulp there is 0.06), and 100 passes overflowed to inf. It must equal the mean of the same
    passes in float32 to the rounding of the float16 outputs."""
    torch.manual_seed(4)
    x = torch.randn(1, 1, 16, 16, 16)
    got = _window_logits(_dropout_predictor(num_samples, half=True), x)
    ref = _window_logits(_dropout_predictor(num_samples, half=False), x).double()
    assert got.dtype == torch.float16  # the network's output dtype, as stock's window logits
    assert float(ref.abs().max()) > 100
    assert torch.isfinite(got).all()
    err = (got.double() - ref).abs()
    assert (err <= torch.finfo(torch.float16).eps * ref.abs() + 1e-2).all(), float(err.max())


def test_many_float16_passes_segment_without_overflow():
    """100 passes x 8 mirrors of logits near 120: the case's stitched logits were inf (RuntimeError); now finite."""
    torch.manual_seed(4)
    res = _dropout_predictor(100, half=True).predict_uncertainty_from_preprocessed_data(torch.randn(1, 16, 16, 16))
    assert torch.isfinite(res.logits).all()
