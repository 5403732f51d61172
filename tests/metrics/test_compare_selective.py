"""Hostile tests of the method comparison (monai_unc.metrics.compare): the statistician's review."""

from __future__ import annotations

import warnings

import numpy as np

from monai_unc.metrics import compare_metric_values, mcnemar_test


def test_significantly_better_follows_the_tested_cases_not_the_accuracies():
    """Two metrics valid on different cases: on the 10 cases both are valid for, Y prefers map a in every case and X
    in none (McNemar p = 0.002 for Y over X), but X's accuracy over its own 55 valid cases (0.82) is above Y's (0.18).
    X was declared significantly better than Y."""
    nan = np.nan
    a_x, b_x, a_y, b_y = (np.full(100, nan) for _ in range(4))
    a_x[:10], b_x[:10], a_y[:10], b_y[:10] = 0.0, 1.0, 1.0, 0.0  # shared cases: only Y prefers a
    a_x[10:55], b_x[10:55] = 1.0, 0.0  # X alone: prefers a
    a_y[55:], b_y[55:] = 0.0, 1.0  # Y alone: does not
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = compare_metric_values({"X": a_x, "Y": a_y}, {"X": b_x, "Y": b_y}, True)
    assert res.metrics["X"].accuracy > res.metrics["Y"].accuracy
    both = res.metrics["X"].valid & res.metrics["Y"].valid
    assert mcnemar_test(res.metrics["X"].prefers_a[both], res.metrics["Y"].prefers_a[both]) < 0.05
    assert res.significantly_better("X") == []
    assert res.significantly_better("Y") == ["X"]
    rows = {r["metric"]: r for r in res.table()}
    assert rows["X"]["significantly_better_than"] == [] and rows["Y"]["significantly_better_than"] == ["X"]


def test_significantly_better_with_common_cases_is_the_higher_accuracy():
    rng = np.random.default_rng(3)
    b = rng.random(40)
    good = b + 0.1
    poor = b - np.where(rng.random(40) < 0.8, 0.1, -0.1)
    res = compare_metric_values({"g": good, "p": poor}, {"g": b, "p": b}, True)
    assert res.metrics["g"].accuracy > res.metrics["p"].accuracy
    assert res.significantly_better("g") == ["p"] and res.significantly_better("p") == []


def test_complex_values_are_refused_not_cast():
    """A float64 cast drops the imaginary part: cohens_d and aurc of complex input gave numpy's ComplexWarning."""
    import pytest

    from monai_unc.metrics import aurc, cohens_d

    with pytest.raises(TypeError, match="a must hold real numbers"):
        cohens_d(np.array([1 + 1j, 2, 3]), [0.0, 1.0, 2.0])
    with pytest.raises(TypeError, match="uncertainty must hold real numbers"):
        aurc(np.array([1 + 1j, 2]), [0.0, 1.0])
    with pytest.raises(TypeError, match="risk must hold real numbers"):
        aurc([0.1, 0.2], np.array([0, 1], dtype=np.complex64))
    assert cohens_d([1.0, 2.0, 3.0], [0.0, 1.0, 2.0]) == pytest.approx(1.0)


def test_compare_uncertainty_maps_refuses_a_direction_that_is_not_a_bool():
    """higher_is_better="False", 0 or [False] fell through to the registry's direction without a word."""
    import pytest

    from monai_unc.metrics import compare_uncertainty_maps

    rng = np.random.default_rng(0)
    t = np.zeros((4, 8, 8), int)
    t[:, 2:6, 2:6] = 1
    p = t.copy()
    p[:, 2:6, 6] = 1
    a, b = rng.random((4, 1, 8, 8)), rng.random((4, 1, 8, 8))
    for bad in ("False", 0, [False]):
        with pytest.raises(TypeError, match="higher_is_better"):
            compare_uncertainty_maps(["AUC-ROC"], a, b, higher_is_better=bad, pred=p, target=t)
    res = compare_uncertainty_maps(["AUC-ROC"], a, b, higher_is_better=False, pred=p, target=t)
    assert res.metrics["AUC-ROC"].higher_is_better is False
    res = compare_uncertainty_maps(["AUC-ROC"], a, b, pred=p, target=t)
    assert res.metrics["AUC-ROC"].higher_is_better is True


def test_exact_must_be_a_bool():
    """exact="False" (a string from a configuration file) is truthy: the exact test ran instead of the chi-square."""
    import pytest

    from monai_unc.metrics import compare_uncertainty_maps

    x, y = [1, 1, 1, 1, 1, 1, 0, 1], [0, 0, 0, 0, 0, 1, 0, 1]
    for bad in ("False", 0, None):
        with pytest.raises(TypeError, match="exact"):
            mcnemar_test(x, y, exact=bad)
        with pytest.raises(TypeError, match="exact"):
            compare_metric_values({"m": [0.1, 0.2]}, {"m": [0.2, 0.1]}, True, exact=bad)
        with pytest.raises(TypeError, match="exact"):
            compare_uncertainty_maps({"m": lambda u, p, t, spacing=1.0: 0.0}, np.zeros((2, 1, 4, 4)),
                                     np.zeros((2, 1, 4, 4)), True, pred=np.zeros((2, 4, 4)), target=np.zeros((2, 4, 4)),
                                     exact=bad)
    assert round(mcnemar_test(x, y, exact=np.bool_(False)), 4) == 0.0736


def test_include_uce_must_be_a_bool():
    """include_uce="no" is truthy: UCE was included."""
    import pytest

    from monai_unc.metrics import uncertainty_map_metrics

    for bad in ("no", 0, None):
        with pytest.raises(TypeError, match="include_uce"):
            uncertainty_map_metrics(include_uce=bad)
    assert "UCE" not in uncertainty_map_metrics(include_uce=False) and "UCE" in uncertainty_map_metrics()


def test_one_metric_name_as_a_string_is_refused_with_a_clear_message():
    """"BUC" was read character by character: "unknown metric name(s) ['B', 'U', 'C']"."""
    import pytest

    from monai_unc.metrics import compare_uncertainty_maps

    z, lab = np.zeros((2, 1, 4, 4)), np.zeros((2, 4, 4), int)
    with pytest.raises(TypeError, match=r"metric_fns .* pass \['BUC'\]"):
        compare_uncertainty_maps("BUC", z, z, pred=lab, target=lab)
