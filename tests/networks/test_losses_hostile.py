"""Hostile input for the SSN loss: labels it cannot score, no samples, huge logits, references in numpy / scipy."""

import math

import numpy as np
import pytest
import torch
from scipy.special import log_softmax, logsumexp

from monai_unc.networks import SSNLoss, lowrank_distribution, ssn_log_likelihood


def _reference(samples: np.ndarray, target: np.ndarray, normalize: bool = True) -> np.ndarray:
    """(logsumexp_m sum_i log softmax(eta_m)_{i, y_i} - log M) [/ N], in float64 numpy."""
    m, b, c = samples.shape[:3]
    ls = log_softmax(samples.reshape(m, b, c, -1).astype(np.float64), axis=2)
    per = np.take_along_axis(ls, target.reshape(1, b, 1, -1), axis=2)[:, :, 0].sum(-1)
    ll = logsumexp(per, axis=0) - math.log(m)
    return ll / target[0].size if normalize else ll


@pytest.mark.parametrize("bad", [-100, -1])
def test_negative_labels_are_refused_not_ignored(bad):
    # -100 is cross_entropy's ignore_index: those voxels dropped out of the sum as if predicted with probability 1
    # (an all-ignored image scored a perfect log-likelihood 0)
    logits = torch.randn(2, 1, 3, 4, 4)
    target = torch.zeros(1, 4, 4, dtype=torch.long)
    target[0, 0, 0] = bad
    with pytest.raises(ValueError, match="target"):
        ssn_log_likelihood(logits, target)
    with pytest.raises(ValueError, match="target"):
        ssn_log_likelihood(logits, torch.full_like(target, bad))


def test_labels_beyond_the_classes_are_refused_by_name():
    # was an IndexError from cross_entropy
    with pytest.raises(ValueError, match="target holds class 3"):
        ssn_log_likelihood(torch.randn(2, 1, 3, 4, 4), torch.full((1, 4, 4), 3))


def test_no_samples_is_refused():
    # was a RuntimeError from torch.stack
    with pytest.raises(ValueError, match="no sample"):
        ssn_log_likelihood(torch.randn(0, 1, 3, 4, 4), torch.zeros(1, 4, 4, dtype=torch.long))


def test_non_tensor_target_is_a_type_error():
    with pytest.raises(TypeError, match="target"):
        ssn_log_likelihood(torch.randn(2, 1, 3, 4, 4), np.zeros((1, 4, 4), dtype=np.int64))


def test_integral_float_and_bool_labels_are_read_as_classes():
    torch.manual_seed(0)
    logits = torch.randn(3, 2, 2, 5, 5)
    y = torch.randint(0, 2, (2, 5, 5))
    ref = ssn_log_likelihood(logits, y)
    assert torch.equal(ssn_log_likelihood(logits, y.float()), ref)
    assert torch.equal(ssn_log_likelihood(logits, y.bool()), ref)


@pytest.mark.parametrize("scale", [1.0, 1e4, 1e6])
def test_matches_numpy_reference_also_for_huge_logits(scale):
    torch.manual_seed(0)
    logits = torch.randn(3, 2, 4, 5, 5, dtype=torch.float64) * scale
    y = torch.randint(0, 4, (2, 5, 5))
    got = ssn_log_likelihood(logits, y)
    ref = _reference(logits.numpy(), y.numpy())
    assert bool(torch.isfinite(got).all())
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)
    np.testing.assert_allclose(ssn_log_likelihood(logits, y, normalize=False).numpy(),
                               _reference(logits.numpy(), y.numpy(), normalize=False), rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_logits_are_scored_in_float32(dtype):
    torch.manual_seed(0)
    logits = torch.randn(2, 1, 3, 4, 4).to(dtype)
    y = torch.randint(0, 3, (1, 4, 4))
    got = ssn_log_likelihood(logits, y)
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), _reference(logits.float().numpy(), y.numpy()), rtol=1e-6)


@pytest.mark.parametrize("antithetic", [False, True])
def test_monte_carlo_loss_equals_the_direct_evaluation_of_its_draws(antithetic):
    torch.manual_seed(1)
    mean = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    diag = torch.rand(2, 3, 4, 4, dtype=torch.float64) + 0.1
    factor = torch.randn(2, 2, 3, 4, 4, dtype=torch.float64)
    d = lowrank_distribution(mean, diag, factor)
    y = torch.randint(0, 3, (2, 4, 4))
    torch.manual_seed(5)
    loss = SSNLoss(6, antithetic=antithetic)(d, y)
    torch.manual_seed(5)
    if antithetic:
        half = d.rsample((3,))
        s = torch.cat([half, 2 * d.mean - half])
    else:
        s = d.rsample((6,))
    ref = -_reference(s.reshape(6, 2, 3, 4, 4).numpy(), y.numpy()).mean()
    assert float(loss) == pytest.approx(ref, rel=1e-12)


def test_point_mass_loss_is_cross_entropy_and_refuses_out_of_range_labels():
    torch.manual_seed(0)
    logits, y = torch.randn(2, 3, 5, 5), torch.randint(0, 3, (2, 5, 5))
    assert float(SSNLoss(2)(logits, y)) == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)), rel=1e-6)
    with pytest.raises(ValueError, match="target holds class 3"):
        SSNLoss(2)(logits, y + 1)
    with pytest.raises(ValueError, match="non-negative"):
        SSNLoss(2)(logits, torch.full_like(y, -100))


def test_single_class_is_refused():
    with pytest.raises(ValueError, match="2 classes"):
        SSNLoss(2)(torch.randn(2, 1, 5, 5), torch.zeros(2, 5, 5, dtype=torch.long))


@pytest.mark.parametrize("name", ["normalize", "antithetic"])
@pytest.mark.parametrize("bad", ["no", "false", 0, 1, None])
def test_non_bool_flags_are_a_type_error_naming_them(name, bad):
    """``SSNLoss(normalize="no")`` was taken as True (a truthy string) without a word."""
    with pytest.raises(TypeError, match=rf"^{name} must be True or False"):
        SSNLoss(num_mc_samples=2, **{name: bad})
    if name == "normalize":
        with pytest.raises(TypeError, match=r"^normalize must be True or False"):
            ssn_log_likelihood(torch.zeros(1, 1, 2, 3), torch.zeros(1, 3, dtype=torch.long), normalize=bad)


def test_numpy_bool_flags_are_bools():
    loss = SSNLoss(num_mc_samples=2, normalize=np.bool_(False), antithetic=np.bool_(True))
    assert loss.normalize is False and loss.antithetic is True
