"""Options of the inferers and the memory model are checked, not coerced (issue 43 item 7): ``accum_dtype`` must be a
floating point dtype in :func:`estimate_memory` as in the inferer, a flag given as ``"yes"`` is a ``TypeError``,
half-precision sums warn with the error they cause; a conformal rule fitted on empty truths warns that it is
vacuous."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.inferers import MCDropoutInferer, estimate_memory
from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule


@pytest.mark.parametrize("dtype", [torch.int8, torch.int64, torch.bool, "float32"])
def test_estimate_memory_refuses_what_the_inferer_refuses(dtype):
    with pytest.raises(TypeError, match="accum_dtype"):
        estimate_memory((16, 16, 16), 3, accum_dtype=dtype)
    with pytest.raises(TypeError, match="accum_dtype"):
        MCDropoutInferer(2, accum_dtype=dtype)


@pytest.mark.parametrize("flag", ["class_variance", "track_variance"])
@pytest.mark.parametrize("value", ["yes", 1, None])
def test_flags_must_be_bools(flag, value):
    with pytest.raises(TypeError, match=flag):
        estimate_memory((16, 16, 16), 3, **{flag: value})
    with pytest.raises(TypeError, match=flag):
        MCDropoutInferer(2, **{flag: value})
    assert estimate_memory((16, 16, 16), 3, **{flag: np.bool_(True)}).total > 0  # numpy bools are bools


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_sums_warn(dtype):
    with pytest.warns(UserWarning, match="1e-3 nats"):
        MCDropoutInferer(2, accum_dtype=dtype)


def test_float32_sums_do_not_warn(recwarn):
    MCDropoutInferer(2, accum_dtype=torch.float32)
    assert not [w for w in recwarn if "accum_dtype" in str(w.message)]


@pytest.mark.parametrize("side", ["outer", "inner"])
def test_vacuous_conformal_rule_warns(side):
    rng = np.random.default_rng(0)
    states = []
    for _ in range(12):
        p1 = rng.random((1, 5, 5))
        states.append(conformal_case_state(np.concatenate([1 - p1, p1]), np.zeros((5, 5), int), activation="softmax",
                                           side=side, grid=8))
    with pytest.warns(UserWarning, match=r"'1': none of the 12 calibration cases has a true voxel"):
        fit_conformal_rule(states, 0.3)


def test_numpy_integer_sample_counts_and_batch_sizes_are_integers():
    """Found by hostile testing: ``MCDropoutInferer(num_samples=np.int64(3))``, ``UncertaintyInferer(...,
    sample_batch_size=np.int64(2))`` and the counts of ``NoiseSource`` / ``InvertibleTransformSource`` /
    ``TTAInferer`` were refused with "must be an integer >= 1, got np.int64(3)" (the command lines' settings accept
    numpy integers); a bool, a float or a string stays refused, naming the option."""
    from monai.transforms import Rotate90

    from monai_unc.inferers import InvertibleTransformSource, NoiseSource, TTAInferer, UncertaintyInferer
    from monai_unc.networks.shared import SharedPasses, sample_batch

    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.Dropout2d(0.5),
                              torch.nn.Conv2d(4, 2, 1)).eval()
    x = torch.rand(1, 1, 8, 8)
    inferer = MCDropoutInferer(num_samples=np.int64(3), sample_batch_size=np.int64(2), seed=0)
    assert type(inferer.sample_batch_size) is int and type(inferer.num_samples) is int
    reference = MCDropoutInferer(num_samples=3, sample_batch_size=2, seed=0)(x, net)
    out = inferer(x, net)
    assert out.num_samples == 3
    for key in reference:
        assert torch.equal(out[key], reference[key]), key
    assert NoiseSource(0.1, num_samples=np.int32(2)).num_samples == 2
    assert InvertibleTransformSource([Rotate90()], num_samples=np.int64(1)).num_samples == 1
    assert TTAInferer(noise_std=0.1, noise_samples=np.int64(2), seed=0)(x, net).num_samples == 8
    passes = SharedPasses(net)
    passes.trace(net, x)
    assert sample_batch(passes, np.int64(4), 64, 2, 29) == 4
    for bad in (True, 2.0, "2", 0):
        with pytest.raises(ValueError, match="sample_batch_size"):
            UncertaintyInferer(sample_batch_size=bad)
        with pytest.raises(ValueError, match="num_samples"):
            MCDropoutInferer(num_samples=bad)
