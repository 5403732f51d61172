"""Review 63: complex (and object) masks, label maps, probabilities and maps are refused by the one shared dtype check
(``_utils.check_real_dtype``, called by ``to_numpy`` and ``to_tensor``), with a ``TypeError`` naming the argument.

A complex mask whose imaginary part is 0 (``1 + 0j``) passed every value check (0 / 1, integral, in [0, 1]): the
lesion metrics (``binary_mask``), the conformal losses, the case scores and others computed on its real part where
every other metric refuses complex input.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc._utils import check_real_dtype, to_numpy, to_tensor
from monai_unc.metrics.conformal import conformal_case_state
from monai_unc.metrics.lesions import (
    binary_mask,
    brats_lesion_metrics,
    lesion_detection,
    lesion_uncertainty,
    ndsc_retention_area,
    normalized_dice,
)
from monai_unc.scores import case_scores


def _mask() -> np.ndarray:
    m = np.zeros((6, 6, 6), np.int64)
    m[1:4, 1:4, 1:4] = 1
    return m


def _complex(a, lib):
    c = np.asarray(a) + 0j  # imaginary part 0: every value check passes
    return torch.as_tensor(c) if lib == "torch" else c


def _object(a, lib):
    return np.asarray(a).astype(object)


_PRED, _TRUTH = _mask(), _mask()
_PRED[0, 0, 0] = 1
_U = np.random.default_rng(0).random((6, 6, 6))
_P = np.stack([1 - _U, _U])

CALLS = [
    (lambda m: binary_mask(m, "pred"), "mask", "pred"),
    (lambda m: lesion_detection(m, _TRUTH), "mask", "pred"),
    (lambda m: lesion_detection(_PRED, m), "mask", "target"),
    (lambda m: brats_lesion_metrics(m, _TRUTH, (1.0, 1.0, 1.0)), "mask", "pred"),
    (lambda m: brats_lesion_metrics(_PRED, m, (1.0, 1.0, 1.0)), "mask", "target"),
    (lambda m: normalized_dice(m, _TRUTH), "mask", "pred"),
    (lambda m: ndsc_retention_area(_PRED, m, _U), "mask", "target"),
    (lambda m: lesion_uncertainty(m, {"u": _U}), "mask", "pred"),
    (lambda u: lesion_uncertainty(_PRED, {"u": u}), "map", "maps"),
    (lambda s: case_scores(_U, s), "mask", "seg"),
    (lambda u: case_scores(u, _PRED), "map", "uncertainty"),
    (lambda y: conformal_case_state(_P, y), "mask", "target"),
    (lambda p: conformal_case_state(p, _TRUTH), "probs", "probs"),
]


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("call, kind, name", CALLS)
def test_complex_inputs_refused_naming_the_argument(call, kind, name, lib):
    value = {"mask": _PRED if name not in ("target",) else _TRUTH, "map": _U, "probs": _P}[kind]
    with pytest.raises(TypeError, match=rf"{name}.* must hold real numbers, got dtype .*complex"):
        call(_complex(value, lib))


@pytest.mark.parametrize("call, kind, name", CALLS)
def test_object_inputs_refused_naming_the_argument(call, kind, name):
    value = {"mask": _PRED if name not in ("target",) else _TRUTH, "map": _U, "probs": _P}[kind]
    with pytest.raises(TypeError, match=rf"{name}.* must hold real numbers, got dtype object"):
        call(_object(value, "numpy"))


def test_the_shared_checks():
    for bad in (np.array([1 + 0j]), torch.ones(2, dtype=torch.complex64), np.array([1], dtype=object),
                np.array(["1"])):
        with pytest.raises(TypeError, match="^pred must hold real numbers"):
            check_real_dtype(bad, "pred")
        with pytest.raises(TypeError, match="^pred must hold real numbers"):
            to_tensor(bad, "pred")
        with pytest.raises(TypeError, match="^pred must hold real numbers"):
            to_numpy(bad, "pred")
    with pytest.raises(TypeError, match="^pred must hold real numbers"):
        to_tensor([1 + 0j, 0], "pred")
    # a list holding None for an undefined score: through for a caller that reads it itself
    assert to_numpy(np.array([0.5, None], dtype=object), "scores", objects=True).dtype == object
    # real dtypes of every kind pass, values unchanged
    for good in (np.array([True]), np.array([1], np.uint8), np.array([1], np.int64), np.array([0.5], np.float16),
                 torch.tensor([0.5], dtype=torch.bfloat16)):
        check_real_dtype(good, "pred")
        assert to_numpy(good, "pred").shape == (1,)
        assert to_tensor(good, "pred").shape == (1,)


def test_real_masks_still_work():
    assert binary_mask(np.array([0, 1, 1.0]), "pred").tolist() == [False, True, True]
    assert binary_mask(torch.tensor([0, 1]), "pred").tolist() == [False, True]
    assert lesion_detection(_PRED, _TRUTH).f1 == pytest.approx(2 / 3)  # one matched lesion, one false positive
