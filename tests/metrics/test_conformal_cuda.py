"""Conformal case states (both families and sides, softmax and sigmoid) from device tensors: exact counts.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. A state holds int64 histograms of grid
indices read once from the host copy of the case, so a device input gives the CPU's counts bit for bit, and the
fitted rule is the same.
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule

pytestmark = pytest.mark.cuda


def _softmax_case(seed):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(3 * torch.randn(3, 10, 9, 7, generator=g, dtype=torch.float64), 0)
    target = torch.randint(0, 3, (10, 9, 7), generator=g)
    return probs, target


@pytest.mark.parametrize("family,side", [("threshold", "outer"), ("threshold", "inner"), ("margin", "outer"),
                                         ("margin", "inner")])
def test_case_states_of_device_tensors_are_exact(cuda_device, family, side):
    states, ref_states = [], []
    for seed in range(4):
        probs, target = _softmax_case(seed)
        kw = {"family": family, "side": side, "spacing": (1.0, 1.5, 2.0)}
        ref = conformal_case_state(probs, target, **kw)
        got = conformal_case_state(probs.to(cuda_device), target.to(cuda_device), **kw)
        np.testing.assert_array_equal(got.true_counts, ref.true_counts)
        np.testing.assert_array_equal(got.false_counts, ref.false_counts)
        states.append(got)
        ref_states.append(ref)
    assert states == ref_states
    rule = fit_conformal_rule(ref_states, 0.2)
    assert fit_conformal_rule(states, 0.2).to_dict() == rule.to_dict()
    # the fitted rule applied to a device case gives the masks of the CPU case (a numpy array, as documented)
    probs, _ = _softmax_case(7)
    masks = rule.apply(probs.to(cuda_device), spacing=(1.0, 1.5, 2.0))
    np.testing.assert_array_equal(masks, rule.apply(probs, spacing=(1.0, 1.5, 2.0)))


def test_sigmoid_case_state_with_a_device_prediction(cuda_device):
    g = torch.Generator().manual_seed(9)
    probs = torch.rand(3, 9, 8, 6, generator=g)
    target = torch.rand(3, 9, 8, 6, generator=g) < probs
    pred = probs > 0.4
    kw = {"family": "margin", "side": "outer", "activation": "sigmoid", "names": ["WT", "TC", "ET"]}
    ref = conformal_case_state(probs, target, pred=pred, **kw)
    got = conformal_case_state(probs.to(cuda_device), target.to(cuda_device), pred=pred.to(cuda_device), **kw)
    assert got.names == ref.names
    np.testing.assert_array_equal(got.true_counts, ref.true_counts)
    np.testing.assert_array_equal(got.false_counts, ref.false_counts)
