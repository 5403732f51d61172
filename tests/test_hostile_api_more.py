"""The hostile-input sweep of ``tests/test_hostile_api.py`` over more of the public functional API: the measures,
selective prediction, case-wise detection, voxel-wise discrimination, ambiguity, overlap and QU-BraTS. Same
contract: only ``ValueError`` / ``TypeError`` that name an argument, and no finite number for NaN input without a
warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from monai_unc import measures as M
from monai_unc.metrics import augrc, aurc, dice, eaurc, error_auroc, ncc, ood_auroc, qu_brats
from tests.test_hostile_api import MUTATORS, ApiCase, _blobs, _probs, sweep

S = 3  # samples


def _samples(rng: np.random.Generator) -> np.ndarray:
    return np.stack([_probs(rng) for _ in range(S)])


def _cases(rng: np.random.Generator, n: int = 12) -> np.ndarray:
    return rng.random(n)


MORE: list[ApiCase] = [
    ApiCase("entropy", M.entropy, lambda rng: {"probs": _probs(rng)}, ("probs",)),
    ApiCase("one_minus_max_prob", M.one_minus_max_prob, lambda rng: {"probs": _probs(rng)}, ("probs",)),
    *[
        ApiCase(f.__name__, f, lambda rng: {"samples": _samples(rng)}, ("samples",))
        for f in (M.predictive_entropy, M.expected_entropy, M.mutual_information, M.variance)
    ],
    *[
        ApiCase(f.__name__, f, lambda rng: {"uncertainty": _cases(rng), "risk": (_cases(rng) > 0.5) * 1.0},
                ("uncertainty", "risk"))
        for f in (aurc, augrc, eaurc)
    ],
    ApiCase("ood_auroc", ood_auroc, lambda rng: {"uncertainty_iid": _cases(rng), "uncertainty_ood": _cases(rng)},
            ("uncertainty_iid", "uncertainty_ood")),
    ApiCase("error_auroc", error_auroc,
            lambda rng: {"uncertainty": rng.random((2, 1, 9, 8)), "error": rng.random((2, 1, 9, 8)) > 0.5,
                         "per_case": True},
            ("uncertainty", "error")),
    ApiCase("ncc", ncc, lambda rng: {"uncertainty": rng.random((9, 8)), "target": rng.random((9, 8))},
            ("uncertainty", "target")),
    ApiCase("dice", dice, lambda rng: {"pred": _blobs(rng), "target": _blobs(rng), "num_classes": 2},
            ("pred", "target")),
    ApiCase("qu_brats", qu_brats,
            lambda rng: {"uncertainty": rng.random((9, 8)) * 100, "pred": _blobs(rng)[0], "target": _blobs(rng)[0]},
            ("uncertainty", "pred", "target")),
]


@pytest.mark.parametrize("mutator", sorted(MUTATORS))
@pytest.mark.parametrize("case", MORE, ids=repr)
def test_hostile_input(case: ApiCase, mutator: str) -> None:
    sweep(case, mutator)


@pytest.mark.parametrize("case", MORE, ids=repr)
def test_valid_input_passes(case: ApiCase) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        case.fn(**case.make(np.random.default_rng(0)))
