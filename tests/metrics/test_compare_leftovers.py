"""Leftover defects of the paired tests (found by hostile testing)."""

import numpy as np
import pytest
from scipy import stats

from monai_unc.metrics import mcnemar_test


def _pairs(b: int, c: int, both: int = 3) -> tuple[list[int], list[int]]:
    x = [1] * b + [0] * c + [1] * both
    y = [0] * b + [1] * c + [1] * both
    return x, y


@pytest.mark.parametrize("b", [0, 1, 2, 5, 40])
@pytest.mark.parametrize("exact", [True, False])
def test_mcnemar_no_discordant_difference_gives_one(b, exact):
    x, y = _pairs(b, b)
    assert mcnemar_test(x, y, exact=exact) == 1.0


@pytest.mark.parametrize("b, c", [(3, 0), (7, 2), (1, 2), (10, 4)])
def test_mcnemar_chi_square_against_scipy(b, c):
    # reference: scipy's chi-square test of the 2 x 2 discordant table with Yates' correction, whose correction is
    # capped at |b - c| (the (b, c) table against the (m, m) expectation, m = (b + c) / 2)
    m = (b + c) / 2
    d = max(abs(b - m) - 0.5, 0.0)
    ref = stats.chi2.sf(2 * d**2 / m, 1)
    x, y = _pairs(b, c)
    np.testing.assert_allclose(mcnemar_test(x, y, exact=False), ref, rtol=1e-12)
