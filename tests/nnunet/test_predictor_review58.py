"""Hostile review 58 of the nnU-Net predictor: the mean logits of many stochastic passes under a float16 network."""

from __future__ import annotations

import numpy as np
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
    # a 12^3 window (the patch is 16^3; the logits still pass 100): the sums are per voxel, so their rounding and
    # overflow do not depend on the window's size (the patch ran 2.4x the convolutions for the same check)
    x = torch.randn(1, 1, 12, 12, 12)
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


def test_numpy_scalars_are_accepted_where_python_numbers_are():
    """``num_samples=np.int64(4)`` and ``tile_step_size=np.float32(0.5)`` were refused as "must be an integer >= 1" /
    "must be in (0, 1]"; the project accepts numpy scalars where Python numbers are (as ``seed`` and
    ``sample_batch_size`` already were)."""
    import numpy as np

    import monai_unc.nnunet as mun

    pred = mun.UncertaintyPredictor(("dropout",), num_samples=np.int64(4), tile_step_size=np.float32(0.5),
                                    device=torch.device("cpu"))
    assert pred.num_samples == 4 and type(pred.num_samples) is int
    assert pred.tile_step_size == 0.5 and type(pred.tile_step_size) is float
    for bad in (True, np.bool_(True), 2.0):
        with pytest.raises(ValueError, match="num_samples"):
            mun.UncertaintyPredictor(("dropout",), num_samples=bad, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="tile_step_size"):
        mun.UncertaintyPredictor(("mirroring",), tile_step_size=True, device=torch.device("cpu"))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int16])
def test_a_preprocessed_image_of_another_dtype_is_read_as_float32(dtype):
    """A float64 image (``torch.from_numpy`` of a float64 array), float16 or integer one failed in the first
    convolution with torch's "Input type (double) and bias type (float) should be the same"; it is the float32 image
    nnU-Net's preprocessing gives, with the same statistics and logits."""
    pred = make_predictor(uncertainty_sources=("folds", "mirroring"))
    torch.manual_seed(4)
    data = (torch.randn(1, 18, 16, 16) * 4).to(dtype)
    got = pred.predict_uncertainty_from_preprocessed_data(data)
    ref = pred.predict_uncertainty_from_preprocessed_data(data.float())
    assert torch.equal(got.logits, ref.logits)
    for key, value in ref.moments.items():
        assert torch.equal(got.moments[key], value), key


def test_a_boolean_or_complex_image_is_refused_by_name():
    pred = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    for data in (torch.zeros(1, 16, 16, 16, dtype=torch.bool), torch.zeros(1, 16, 16, 16, dtype=torch.complex64)):
        with pytest.raises(ValueError, match="input_image must hold real numbers"):
            pred.predict_uncertainty_from_preprocessed_data(data)


@pytest.mark.parametrize("folds, expected", [
    (np.int64(2), (2,)), ([np.int64(0), np.int32(1)], (0, 1)), ("all", ("all",)), (("0", 3), (0, 3)),
])
def test_check_folds_accepts_numpy_integers(folds, expected):
    from monai_unc.nnunet.predictor import check_folds

    assert check_folds(folds) == expected


@pytest.mark.parametrize("folds, error", [
    (2.0, TypeError), (None, TypeError), ([np.float64(1.0)], ValueError), ([np.True_], ValueError),
    ([0, 0], ValueError),
])
def test_check_folds_refusals_name_use_folds(folds, error):
    """np.int64(2) and 2.0 were a TypeError of list() that named nothing (hostile review 58)."""
    from monai_unc.nnunet.predictor import check_folds

    with pytest.raises(error, match="use_folds"):
        check_folds(folds)
