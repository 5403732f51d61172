"""Directions of compared metrics given as untrusted input: a key of ``higher_is_better`` that names no compared
metric (a typo) was ignored and the metric kept its default direction; ``MetricSpec(fn, "ture")`` was built."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.metrics.compare import MetricSpec, compare_metric_values, compare_uncertainty_maps


def _maps():
    rng = np.random.default_rng(0)
    p = (rng.random((3, 1, 6, 6, 6)) > 0.5).astype(np.int64)
    t = (rng.random((3, 1, 6, 6, 6)) > 0.5).astype(np.int64)
    return rng.random((3, 1, 6, 6, 6)), rng.random((3, 1, 6, 6, 6)), p, t


def test_a_typo_in_a_direction_key_is_refused():
    a, b, p, t = _maps()
    with pytest.raises(ValueError, match=r"higher_is_better names metric\(s\) not compared: \['AUCROC'\]"):
        compare_uncertainty_maps(["AUC-ROC"], a, b, {"AUCROC": False}, pred=p, target=t)
    res = compare_uncertainty_maps(["AUC-ROC"], a, b, {"AUC-ROC": False}, pred=p, target=t)
    assert res.metrics["AUC-ROC"].higher_is_better is False
    va, vb = {"m": np.array([0.1, 0.2, 0.3])}, {"m": np.array([0.2, 0.1, 0.4])}
    with pytest.raises(ValueError, match="not compared: \\['mm'\\]"):
        compare_metric_values(va, vb, {"m": True, "mm": False})
    assert compare_metric_values(va, vb, {"m": False}).metrics["m"].higher_is_better is False


@pytest.mark.parametrize("bad", ["ture", "False", "yes", 1, 0, None])
def test_a_metric_spec_direction_must_be_a_bool(bad):
    with pytest.raises(TypeError, match="higher_is_better must be a bool"):
        MetricSpec(lambda u, p, t, spacing=1.0: 0.0, bad)


def test_a_metric_spec_fn_and_spatial_are_checked():
    with pytest.raises(TypeError, match="fn must be callable"):
        MetricSpec("BUC", True)
    with pytest.raises(TypeError, match="spatial must be a bool"):
        MetricSpec(lambda u, p, t, spacing=1.0: 0.0, True, "yes")
    assert MetricSpec(lambda u, p, t, spacing=1.0: 0.0, np.bool_(False)).higher_is_better is False
