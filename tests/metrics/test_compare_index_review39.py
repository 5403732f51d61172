"""Series of one long table carry row numbers: the refusal says so, and its advice pairs the cases (found by review).

``df[df.method == "a"]["dice"]`` and ``df[df.method == "b"]["dice"]`` are indexed 0..9 and 10..19. They are refused
(the indexes differ), and the message advised ``series.reindex(other.index)``, which turned every value of b into NaN
(no valid case). The message names row numbers and advises indexing by case id or ``to_numpy()``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from monai_unc.metrics import compare_metric_values


def test_row_numbers_are_named_and_the_advice_pairs_the_cases():
    pd = pytest.importorskip("pandas")
    ids = [f"c{i}" for i in range(10)]
    dice_a, dice_b = np.linspace(0.5, 0.9, 10), np.linspace(0.55, 0.95, 10)
    df = pd.DataFrame({"case_id": ids * 2, "method": ["a"] * 10 + ["b"] * 10, "dice": np.r_[dice_a, dice_b]})
    a, b = df[df.method == "a"]["dice"], df[df.method == "b"]["dice"]
    with pytest.raises(ValueError, match=r"row numbers, not case ids") as info:
        compare_metric_values({"dice": a}, {"dice": b}, True)
    assert "set_index('case_id')" in str(info.value) and "to_numpy()" in str(info.value)
    expected = compare_metric_values({"dice": dice_a}, {"dice": dice_b}, True).metrics["dice"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no valid case"
        by_id = compare_metric_values({"dice": df[df.method == "a"].set_index("case_id")["dice"]},
                                      {"dice": df[df.method == "b"].set_index("case_id")["dice"]}, True)
        by_row = compare_metric_values({"dice": a.to_numpy()}, {"dice": b.to_numpy()}, True)
    for got in (by_id.metrics["dice"], by_row.metrics["dice"]):
        assert got.accuracy == expected.accuracy == 0.0 and int(got.valid.sum()) == 10


def test_case_labels_keep_the_reindex_advice():
    pd = pytest.importorskip("pandas")
    a = pd.Series([1.0, 2.0, 3.0], index=["c1", "c2", "c3"])
    b = pd.Series([0.5, 1.5, 2.5], index=["c3", "c2", "c1"])
    with pytest.raises(ValueError, match=r"align them first, e.g. series.reindex\(other.index\)"):
        compare_metric_values({"m": a}, {"m": b}, True)
