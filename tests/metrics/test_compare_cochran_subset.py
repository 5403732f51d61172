"""Cochran's Q of :func:`compare_metric_values` when a metric has no valid case, or there is one metric."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from monai_unc.metrics import compare_metric_values


def _cochran_reference(outcomes: np.ndarray) -> tuple[float, float]:
    """Cochran's Q by its textbook formula (rows: cases, columns: metrics), with scipy's chi-square tail."""
    k = outcomes.shape[1]
    col, row, total = outcomes.sum(0), outcomes.sum(1), outcomes.sum()
    q = (k - 1) * (k * (col**2).sum() - total**2) / (k * total - (row**2).sum())
    return float(q), float(stats.chi2.sf(q, k - 1))


def test_a_metric_without_valid_cases_is_left_out_of_cochrans_q():
    """A metric NaN on every case (PAvPU with windows larger than small maps) made Cochran's Q NaN for every metric;
    it is computed over the others now, with a warning naming the one left out."""
    rng = np.random.default_rng(5)
    a = {"m1": rng.random(30), "m2": rng.random(30), "m3": rng.random(30), "pavpu": np.full(30, np.nan)}
    b = {k: (rng.random(30) if k != "pavpu" else np.full(30, np.nan)) for k in a}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = compare_metric_values(a, b, higher_is_better=True)
    assert any("left out, without any: ['pavpu']" in str(w.message) for w in caught)
    outcomes = np.stack([(a[n] > b[n]).astype(float) for n in ("m1", "m2", "m3")], axis=1)
    q, p = _cochran_reference(outcomes)
    assert res.cochran_df == 2
    assert res.cochran_q == pytest.approx(q, rel=1e-12) and res.cochran_p == pytest.approx(p, rel=1e-9)


def test_one_metric_with_valid_cases_warns_one_metric_at_all_does_not():
    a = {"m1": np.arange(1.0, 6.0), "pavpu": np.full(5, np.nan)}
    b = {"m1": np.arange(1.0, 6.0)[::-1].copy(), "pavpu": np.full(5, np.nan)}
    with pytest.warns(UserWarning, match="1 of the 2 metrics have a valid case"):
        res = compare_metric_values(a, b, higher_is_better=True)
    assert math.isnan(res.cochran_q) and res.cochran_df == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one metric: Q does not apply, no warning
        res = compare_metric_values({"m1": a["m1"]}, {"m1": b["m1"]}, higher_is_better=True)
    assert math.isnan(res.cochran_q) and math.isnan(res.cochran_p) and res.cochran_df == 0
