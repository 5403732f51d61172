"""Hostile input to ``monai_unc.activation``: half-precision logits, temperatures that overflow the division,
temperatures too small for a float32 number, saturated logits; every result against ``scipy.special`` in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import special

from monai_unc.activation import BERNOULLI, CATEGORICAL


def _reference(act, z: torch.Tensor, t: float) -> np.ndarray:
    a = z.double().numpy() / t
    return special.softmax(a, axis=1) if act is CATEGORICAL else special.expit(a)


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI], ids=["softmax", "sigmoid"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_logits_divided_beyond_their_range_give_the_float64_probabilities(act, dtype):
    """float16 logits 100 at t = 1e-3: ``z / t`` = 1e5 overflowed float16 and the softmax was NaN (silently)."""
    z = torch.tensor([[[100.0, -3.0, 0.0], [0.0, 2.0, 0.5]]], dtype=dtype)  # (1, 2, 3)
    for t in (1e-3, 0.05, 2.0):
        p = act.probabilities(z, temperature=t)
        assert p.dtype == dtype and p.shape == z.shape
        assert bool(torch.isfinite(p).all())
        np.testing.assert_allclose(p.double().numpy(), _reference(act, z, t), atol=4e-3)


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI], ids=["softmax", "sigmoid"])
def test_vector_temperature_of_half_logits(act):
    z = torch.tensor([[[300.0, -2.0], [1.0, 200.0]]], dtype=torch.float16)
    t = torch.tensor([1e-3, 4.0])
    p = act.probabilities(z, temperature=t)
    a = z.double().numpy() / t.double().numpy()[None, :, None]
    ref = special.softmax(a, axis=1) if act is CATEGORICAL else special.expit(a)
    assert bool(torch.isfinite(p).all())
    np.testing.assert_allclose(p.double().numpy(), ref, atol=4e-3)


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI], ids=["softmax", "sigmoid"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_a_temperature_whose_division_overflows_gives_the_limit_not_nan(act, dtype):
    """t = 1e-39 (positive, finite): ``z / t`` overflowed (0 / 0 for float16) and the probabilities were NaN; the
    float64 reference is the hard limit (one-hot argmax, shared by tied classes; 0 / 1 / 0.5 per sigmoid)."""
    z = torch.tensor([[[1.0, -3.0, 2.0], [0.0, 2.0, 2.0], [0.5, -4.0, -1.0]]], dtype=dtype)  # a tie in voxel 2
    p = act.probabilities(z, temperature=1e-39)
    assert p.dtype == dtype and bool(torch.isfinite(p).all())
    np.testing.assert_allclose(p.double().numpy(), _reference(act, z, 1e-39), atol=1e-12)


def test_a_vector_temperature_that_overflows_float32_is_divided_in_float64():
    z = torch.tensor([[[3e38, -3.0], [1.0, 2.0]]], dtype=torch.float32)
    p = CATEGORICAL.probabilities(z, temperature=torch.tensor([0.5, 1.0]))
    assert p.dtype == torch.float32
    ref = special.softmax(z.double().numpy() / np.array([0.5, 1.0])[None, :, None], axis=1)  # 6e38 in float64
    assert ref[0, 0, 0] == 1.0 and ref[0, 1, 1] == pytest.approx(special.expit(8.0))
    np.testing.assert_allclose(p.double().numpy(), ref, rtol=1e-6, atol=1e-30)
    with pytest.raises(ValueError, match="temperature is too small"):
        big = torch.tensor([[[1e300], [1.0]]], dtype=torch.float64)
        CATEGORICAL.probabilities(big, temperature=torch.tensor([1e-30, 1.0], dtype=torch.float64))


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI], ids=["softmax", "sigmoid"])
def test_a_temperature_below_float32_is_refused_with_its_own_value(act):
    """t = 1e-50 was refused as 'must be positive and finite, got [0.0]': it is positive; it is too small."""
    z = torch.tensor([[[1.0, -3.0], [0.0, 2.0]]])
    with pytest.raises(ValueError, match="temperature") as err:
        act.probabilities(z, temperature=1e-50)
    assert "got [0.0]" not in str(err.value) and "1e-50" in str(err.value)


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI], ids=["softmax", "sigmoid"])
def test_float64_logits_keep_a_tiny_temperature(act):
    """float64 holds z / 1e-39 for small z: no refusal, the float64 reference."""
    z = torch.tensor([[[1e-300, -3e-300], [0.0, 2e-300]]], dtype=torch.float64)
    p = act.probabilities(z, temperature=1e-39)
    np.testing.assert_allclose(p.numpy(), _reference(act, z, 1e-39), rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_saturated_half_logits_without_temperature(dtype):
    """Large logits saturate to exact 0 / 1 but never NaN, and the classes still sum to 1."""
    z = torch.tensor([[[60000.0, -60000.0], [-60000.0, 60000.0], [0.0, 0.0]]]).to(dtype)
    p = CATEGORICAL.probabilities(z)
    assert bool(torch.isfinite(p).all())
    np.testing.assert_allclose(p.double().numpy(), _reference(CATEGORICAL, z, 1.0), atol=1e-3)
    q = BERNOULLI.probabilities(z)
    np.testing.assert_allclose(q.double().numpy(), _reference(BERNOULLI, z, 1.0), atol=1e-3)


def test_temperature_on_half_logits_stays_differentiable():
    z = torch.tensor([[[2.0, -1.0], [0.5, 1.0]]], dtype=torch.float16)
    t = torch.tensor(1.5, requires_grad=True)
    CATEGORICAL.probabilities(z, temperature=t)[:, 0].sum().backward()
    assert t.grad is not None and bool(torch.isfinite(t.grad))


def test_a_softmax_over_one_channel_is_refused():
    """A single-channel network read with softmax gave probability 1 everywhere (no uncertainty at all), silently;
    the inferers already refuse it. A sigmoid over one channel is the binary case and stays."""
    z = torch.tensor([[[2.0, -1.0, 0.0]]])
    with pytest.raises(ValueError, match="logits of a softmax need at least 2 classes.*use 'sigmoid'"):
        CATEGORICAL.probabilities(z)
    with pytest.raises(ValueError, match="logits of a softmax"):
        CATEGORICAL.probabilities(z, temperature=2.0)
    np.testing.assert_allclose(BERNOULLI.probabilities(z).numpy(), special.expit(z.double().numpy()), rtol=1e-6)


@pytest.mark.parametrize("name, value", [("pred", 0.7), ("pred", -1), ("pred", 2), ("target", 256), ("target", np.nan)])
def test_region_split_refuses_masks_that_are_not_binary(name, value):
    """Region masks became uint8 label maps unchecked: a target of 256 became 0, a pred of -1 became 255 and one of
    0.7 (a probability passed as the mask) became 0, each a wrong task silently."""
    pred, target = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 0.0], [1.0, 1.0]])
    arrays = {"pred": pred, "target": target}
    arrays[name] = arrays[name].copy()
    arrays[name][0, 1] = value
    with pytest.raises(ValueError, match=f"{name} must hold binary region masks"):
        BERNOULLI.split(arrays["pred"], arrays["target"])


def test_region_split_of_binary_masks_of_any_dtype():
    for dtype in (bool, np.uint8, np.int64, np.float32):
        views = BERNOULLI.split(np.array([[1, 0], [0, 1]], dtype), np.array([[1, 1], [0, 0]], dtype), names=["A", "B"])
        assert [v.pred.tolist() for v in views] == [[1, 0], [0, 1]]
        assert [v.target.tolist() for v in views] == [[1, 1], [0, 0]]


@pytest.mark.parametrize("t, scale", [(0.1, 1.0), (1e-50, 1e-52)])
def test_a_python_float_temperature_keeps_its_float64_value_on_float64_logits(t, scale):
    """A Python float was made a float32 tensor before the division: float64 logits were divided by float32(0.1)
    (a wrong number, 1e-8 relative) and t = 1e-50 (a float64 number) was refused as 'rounds to 0 in float64'."""
    z = torch.tensor([[[1.0, -3.0, 0.7], [0.3, 2.0, -0.2]]], dtype=torch.float64) * scale
    assert torch.equal(BERNOULLI.probabilities(z, temperature=t), torch.sigmoid(z / t))


def test_sigmoid_region_probabilities_given_as_class_probabilities_are_not_called_logits():
    """A region model ending in its own Sigmoid, run with activation=None: the refusal said "pass probabilities, not
    logits" to a user who had passed probabilities (every value in [0, 1]); it now names per-channel sigmoid
    probabilities and the multi-label path."""
    from monai_unc.inferers import UncertaintyInferer

    probs = torch.sigmoid(torch.randn(1, 3, 4, 4, 4, generator=torch.Generator().manual_seed(0)))

    class Net(torch.nn.Module):
        def forward(self, x):
            return probs

    with pytest.raises(ValueError, match=r"must sum to 1 .* lie in \[0, 1\] .*sigmoid probabilities .*multi-label"):
        UncertaintyInferer(activation=None)(torch.zeros(1, 1, 4, 4, 4), Net())
