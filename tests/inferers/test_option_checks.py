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
