"""The Zeevi et al. comparison protocol: statistics against scipy / hand-worked values, and the map pipeline."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import ndimage, stats

from monai_unc.metrics.compare import (
    MetricSpec,
    cochrans_q,
    cohens_d,
    compare_metric_values,
    compare_uncertainty_maps,
    holm_correction,
    mcnemar_test,
    uncertainty_map_metrics,
)
from monai_unc.metrics.spatial import spatial_calibration_error

# ------------------------------------------------------------------------------------------------ statistics


def test_cohens_d_by_hand():
    a = np.array([2.0, 4.0, 6.0])  # mean 4, var 4
    b = np.array([1.0, 2.0, 3.0])  # mean 2, var 1
    assert cohens_d(a, b) == pytest.approx(2.0 / math.sqrt(2.5), abs=1e-15)
    with pytest.warns(UserWarning):
        assert math.isnan(cohens_d([1.0, 1.0], [1.0, 1.0]))
    with pytest.warns(UserWarning):
        assert math.isnan(cohens_d([1.0], [2.0]))


def test_mcnemar_exact_and_chi2():
    x = np.array([1, 1, 1, 1, 1, 1, 0, 0, 1, 0], bool)
    y = np.array([0, 0, 0, 0, 0, 1, 0, 1, 1, 0], bool)
    b, c = 5, 1  # x-only and y-only successes
    # exact two-sided binomial: 2 * P(X <= 1 | n=6, p=1/2) = 2 * 7/64
    assert mcnemar_test(x, y) == pytest.approx(14 / 64, abs=1e-15)
    assert mcnemar_test(x, y, exact=False) == pytest.approx(stats.chi2.sf((abs(b - c) - 1) ** 2 / (b + c), 1))
    assert mcnemar_test(x, x) == 1.0
    with pytest.raises(ValueError, match="shape"):
        mcnemar_test(x, y[:5])


def test_holm_by_definition():
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = rng.random(rng.integers(1, 9)) ** 2
        m = p.size
        order = np.argsort(p)
        ref = np.empty(m)
        running = 0.0
        for rank, idx in enumerate(order):  # step-down: max over the smaller ones, capped at 1
            running = max(running, min(1.0, (m - rank) * p[idx]))
            ref[idx] = running
        np.testing.assert_allclose(holm_correction(p), ref, atol=1e-15)
    np.testing.assert_allclose(holm_correction([0.01, np.nan, 0.04]), [0.02, np.nan, 0.04])


def test_cochrans_q_two_metrics_is_mcnemar_without_correction():
    rng = np.random.default_rng(1)
    x = rng.random((40, 2)) < [0.8, 0.4]
    q, p, df = cochrans_q(x)
    b = int(np.sum(x[:, 0] & ~x[:, 1]))
    c = int(np.sum(~x[:, 0] & x[:, 1]))
    assert df == 1
    assert q == pytest.approx((b - c) ** 2 / (b + c), abs=1e-12)
    assert p == pytest.approx(stats.chi2.sf(q, 1), abs=1e-15)


def test_cochrans_q_hand_worked():
    # 3 metrics x 4 cases: column totals (4, 2, 1), row totals (3, 2, 1, 1), N = 7
    x = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]])
    q_ref = 2 * (3 * (16 + 4 + 1) - 49) / (3 * 7 - (9 + 4 + 1 + 1))
    q, p, df = cochrans_q(x)
    assert q == pytest.approx(q_ref, abs=1e-15) and df == 2
    assert p == pytest.approx(stats.chi2.sf(q_ref, 2))
    with pytest.warns(UserWarning, match="same outcome"):
        assert math.isnan(cochrans_q(np.ones((5, 3)))[0])


def test_compare_metric_values_by_hand():
    va = {"up": np.array([3.0, 2.0, 5.0, 1.0]), "down": np.array([1.0, 1.0, 1.0, 4.0])}
    vb = {"up": np.array([1.0, 2.0, 4.0, 2.0]), "down": np.array([2.0, 2.0, 1.0, 2.0])}
    res = compare_metric_values(va, vb, {"up": True, "down": False})
    up, down = res.metrics["up"], res.metrics["down"]
    assert up.accuracy == 0.5 and up.n_ties == 1  # cases 0 and 2 prefer a, case 1 ties
    assert down.accuracy == 0.5 and down.n_ties == 1
    rel_up = np.mean([200.0, 0.0, 25.0, -50.0])
    assert up.mean_relative_difference == pytest.approx(rel_up)
    rel_down = np.mean([50.0, 50.0, 0.0, -100.0])  # signed so that smaller a is positive
    assert down.mean_relative_difference == pytest.approx(rel_down)
    assert up.cohens_d == pytest.approx(cohens_d(va["up"], vb["up"]))
    assert down.cohens_d == pytest.approx(-cohens_d(va["down"], vb["down"]))
    assert res.mcnemar_p[0, 1] == res.mcnemar_p[1, 0] == mcnemar_test(up.prefers_a, down.prefers_a)
    assert "| up |" in res.to_markdown() and "Cochran" in res.to_markdown()


@pytest.mark.filterwarnings("ignore:compare. metric .* is 0 for map b:UserWarning")
def test_compare_metric_values_nan_cases_are_left_out():
    va = {"m": np.array([1.0, np.nan, 3.0]), "k": np.array([1.0, 2.0, 3.0])}
    vb = {"m": np.array([0.0, 1.0, 4.0]), "k": np.array([0.0, 1.0, 2.0])}
    with pytest.warns(UserWarning, match="not finite"):
        res = compare_metric_values(va, vb, True)
    assert res.metrics["m"].n_cases == 2 and res.metrics["m"].accuracy == 0.5
    assert res.metrics["k"].accuracy == 1.0
    with pytest.raises(ValueError, match="same metrics"):
        compare_metric_values({"a": [1.0]}, {"b": [1.0]}, True)
    with pytest.raises(ValueError, match="higher_is_better"):
        compare_metric_values({"a": [1.0]}, {"a": [1.0]}, {})
    with pytest.raises(ValueError, match="same cases"):
        compare_metric_values({"a": [1.0], "b": [1.0, 2.0]}, {"a": [1.0], "b": [1.0, 2.0]}, True)


# ------------------------------------------------------------------------------------------------ on maps


def make_cases(n_cases=8, shape=(40, 40), seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.indices(shape)
    r = np.hypot(yy - shape[0] / 2, xx - shape[1] / 2)
    a, b, preds, targets = [], [], [], []
    for _ in range(n_cases):
        t = (r < 12).astype(int)
        noise = ndimage.gaussian_filter(rng.standard_normal(shape), 2) * 8
        p = (r + noise < 12).astype(int)
        clean = np.exp(-np.abs(r - 12) / 1.5) * 0.8 + 0.02 * rng.random(shape)
        noisy = rng.permutation(clean.ravel()).reshape(shape)
        a.append(clean)
        b.append(noisy)
        preds.append(p)
        targets.append(t)
    return a, b, preds, targets


def test_compare_uncertainty_maps_protocol():
    a, b, preds, targets = make_cases()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # UCE may be skipped while the calibration module is missing
        res = compare_uncertainty_maps(None, a, b, pred=preds, target=targets, spacing=(1.0, 1.0))
    assert res.metrics["SPACE"].accuracy == 1.0 and res.metrics["BUC"].accuracy == 1.0
    assert res.metrics["SPACE"].cohens_d > 0 and res.metrics["BUC"].mean_relative_difference > 0
    # the per-case values are those of the metric functions
    expected = [spatial_calibration_error(a[i], preds[i], targets[i])[0] for i in range(len(a))]  # (1,) per map
    np.testing.assert_allclose(res.metrics["SPACE"].values_a, expected, atol=0)
    k = len(res.names)
    assert res.mcnemar_p.shape == (k, k) and np.isnan(np.diag(res.mcnemar_p)).all()
    assert np.all(res.mcnemar_p_holm[~np.eye(k, dtype=bool)] >= res.mcnemar_p[~np.eye(k, dtype=bool)] - 1e-15)
    assert res.cochran_df == k - 1
    rows = res.table()
    assert rows[0]["accuracy_percent"] == 100.0
    assert {"SPACE", "BUC", "BA-ECE", "AUC-ROC", "PAvPU(w=5)", "AU-ARC"} <= set(res.names)


@pytest.mark.filterwarnings("ignore:cochrans_q. every case has the same outcome:UserWarning")
def test_compare_batch_arrays_names_and_custom_functions():
    a, b, preds, targets = make_cases(n_cases=5, seed=1)
    batch = compare_uncertainty_maps(
        ["BUC", "AUC-ROC"], np.stack(a)[:, None], np.stack(b)[:, None], pred=np.stack(preds),
        target=np.stack(targets),
    )  # fmt: skip
    listed = compare_uncertainty_maps(["BUC", "AUC-ROC"], a, b, pred=preds, target=targets)
    np.testing.assert_array_equal(batch.metrics["BUC"].values_a, listed.metrics["BUC"].values_a)

    def max_unc(u, pred, target, spacing=1.0):
        return float(np.max(u))

    def mean_near_boundary(u, pred, target, spacing=1.0):
        return float(np.mean(u[ndimage.binary_dilation(pred != target, iterations=2)]))

    # map b is a permutation of map a: the maximum ties on every case
    res = compare_uncertainty_maps({"max": max_unc}, a, b, higher_is_better=False, pred=preds, target=targets)
    assert res.metrics["max"].n_ties == 5 and res.metrics["max"].accuracy == 0.0
    res = compare_uncertainty_maps(
        {"near": MetricSpec(mean_near_boundary, higher_is_better=True)}, a, b, pred=preds, target=targets
    )
    assert res.metrics["near"].higher_is_better and res.metrics["near"].accuracy == 1.0
    with pytest.raises(ValueError, match="custom metric"):
        compare_uncertainty_maps({"max": max_unc}, a, b, pred=preds, target=targets)
    with pytest.raises(ValueError, match="unknown metric"):
        compare_uncertainty_maps(["nope"], a, b, pred=preds, target=targets)
    with pytest.raises(ValueError, match="same cases"):
        compare_uncertainty_maps(["BUC"], a, b[:2], pred=preds, target=targets)
    with pytest.raises(ValueError, match="spatial shape"):
        compare_uncertainty_maps(["BUC"], a, [x[:10] for x in b], pred=preds, target=targets)


def test_registry_and_uce_fallback():
    reg = uncertainty_map_metrics(include_uce=False)
    assert list(reg)[:3] == ["SPACE", "BUC", "BA-ECE"]
    assert not reg["SPACE"].higher_is_better and reg["BUC"].higher_is_better and reg["SPACE"].spatial
    try:
        from monai_unc.metrics.calibration import uce  # noqa: F401
    except ImportError:
        with pytest.warns(UserWarning, match="UCE is skipped"):
            assert "UCE" not in uncertainty_map_metrics()
    else:
        assert "UCE" in uncertainty_map_metrics()


# ------------------------------------------------------------------------------------------------ bad or empty input


def test_mcnemar_refuses_series_that_label_other_cases_or_another_order():
    """Two pandas ``Series`` indexed by case id are paired by position; when their indexes differ (a table sorted
    otherwise) the test paired case ``c00`` of x with another case of y: refused, as :func:`compare_metric_values`
    does."""
    pd = pytest.importorskip("pandas")
    ids = [f"c{i:02d}" for i in range(12)]
    x = pd.Series([1] * 9 + [0] * 3, index=ids)
    y = pd.Series([0] * 9 + [1] * 3, index=ids)
    expected = mcnemar_test(x.to_numpy(), y.to_numpy())  # b = 9, c = 3
    assert mcnemar_test(x, y) == expected  # one index: paired by position, as the numbers
    assert mcnemar_test(x, y.to_numpy()) == expected  # only one labelled: nothing to check it against
    with pytest.raises(ValueError, match=r"^y and x label different cases or list them in another order"):
        mcnemar_test(x, y.sort_values(ascending=False, kind="stable"))
    with pytest.raises(ValueError, match="row numbers"):  # rows of one long table: row numbers, not case ids
        mcnemar_test(x.reset_index(drop=True), y.reset_index(drop=True).iloc[::-1])


def test_mcnemar_of_no_case_is_undefined_and_of_no_sample_refused():
    """No case is no evidence either way: NaN with a warning (as Cochran's Q and the comparison say it), not p = 1
    ("no difference"); a 0-d value is no ``(n,)`` sample of outcomes."""
    for exact in (True, False):
        with pytest.warns(UserWarning, match="mcnemar_test: no case"):
            assert math.isnan(mcnemar_test([], [], exact=exact))
    with pytest.raises(ValueError, match=r"^x must be \(n,\) 0/1 outcomes"):
        mcnemar_test(1, 0)
    with pytest.raises(ValueError, match=r"^y must be \(n,\) 0/1 outcomes"):
        mcnemar_test([1, 0], [[1, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # cases without a discordant pair: no warning, p = 1 as before
        assert mcnemar_test([1, 0, 1], [1, 0, 1]) == 1.0


def test_cohens_d_refuses_text_and_names_the_sample():
    """Text was parsed (``["1.0", "2.0", "3.0"]`` against ``[0, 1, 2]`` gave d = 1); :func:`compare_metric_values`
    refuses the same data."""
    with pytest.raises(TypeError, match=r"^a must hold real numbers"):
        cohens_d(["1.0", "2.0", "3.0"], [0.0, 1.0, 2.0])
    with pytest.raises(TypeError, match=r"^b must hold real numbers"):
        cohens_d([1.0, 2.0, 3.0], np.array(["0", "1", "2"]))
    with pytest.raises(TypeError, match=r"^b must hold real numbers"):
        cohens_d([1.0, 2.0, 3.0], [0.0, "1", 2.0])
    with pytest.raises(ValueError, match="non-finite"):  # None in a list reads as NaN, as before
        cohens_d([1.0, None, 3.0], [0.0, 1.0, 2.0])


@pytest.mark.parametrize("p_values", [[False, False], np.array([True, False]), [0.01, True]])
def test_holm_refuses_flags_for_p_values(p_values):
    """``holm_correction([False, False])`` was ``[0, 0]``: every test "significant"."""
    with pytest.raises(TypeError, match=r"^p_values must hold p-values"):
        holm_correction(p_values)


def _cubes(n_cases: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    t = np.zeros((n_cases, 10, 10, 10), int)
    t[:, 3:7, 3:7, 3:7] = 1
    p = t.copy()
    p[:, 3:7, 7, 3:7] = 1
    e = p != t
    a = (0.4 * e + 0.6 * rng.random(e.shape))[:, None]
    b = (0.2 * e + 0.8 * rng.random(e.shape))[:, None]
    return a, b, p, t


def test_compare_uncertainty_maps_spacing_per_case_is_one_row_per_case():
    """A flat spacing is one value per spatial axis for every case, whatever the number of cases; a spacing per case
    is one row per case. One number per case was refused for 2 or 4 cases (for 4 naming the shapes, not ``spacing``)
    and, for exactly 3 cases of 3-D maps, silently read as the anisotropic spacing (1, 2, 3) of every case."""
    a, b, p, t = _cubes(3)

    def one(i, sp):
        return compare_uncertainty_maps(["BA-ECE"], a[i:i + 1], b[i:i + 1], pred=p[i:i + 1], target=t[i:i + 1],
                                        spacing=sp).metrics["BA-ECE"].values_a[0]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one case: Cohen's d and Cochran's Q are undefined
        rows = compare_uncertainty_maps(["BA-ECE"], a, b, pred=p, target=t, spacing=[(s,) * 3 for s in (1.0, 2.0, 3.0)])
        np.testing.assert_allclose(rows.metrics["BA-ECE"].values_a, [one(i, (s,) * 3) for i, s in enumerate((1, 2, 3))],
                                   rtol=0, atol=1e-15)
        flat = compare_uncertainty_maps(["BA-ECE"], a, b, pred=p, target=t, spacing=[1.0, 2.0, 3.0])
        np.testing.assert_allclose(flat.metrics["BA-ECE"].values_a, [one(i, (1.0, 2.0, 3.0)) for i in range(3)],
                                   rtol=0, atol=1e-15)
    for n in (2, 4):
        a, b, p, t = _cubes(n)
        with pytest.raises(ValueError, match=rf"^spacing has {n} values .* one row per case"):
            compare_uncertainty_maps(["BA-ECE"], a, b, pred=p, target=t, spacing=[1.0, 2.0, 3.0, 4.0][:n])


def test_series_with_the_same_index_holding_a_missing_case_id_are_paired():
    """Found by review: case labels were compared as Python lists, where NaN never equals NaN, so two Series with the
    same index holding a missing case id (one Series passed twice too) were refused as labelling different cases.
    pandas' ``Index.equals`` reads a missing label as matching a missing one; another order is still refused."""
    import pandas as pd

    from monai_unc.metrics.quality import conformal_quantile

    idx = [101.0, 102.0, np.nan, 104.0, 105.0, 106.0]
    df = pd.DataFrame({"a": [1, 0, 1, 1, 0, 1], "b": [0, 0, 1, 0, 0, 1],
                       "est": [.8, .7, .9, .6, .75, .8], "dice": [.78, .72, .85, .5, .7, .82]}, index=idx)
    assert mcnemar_test(df["a"], df["b"]) == mcnemar_test(df["a"].to_numpy(), df["b"].to_numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a small calibration set warns
        assert conformal_quantile(df["est"], df["dice"]) == conformal_quantile(df["est"].to_numpy(),
                                                                                df["dice"].to_numpy())
    with pytest.raises(ValueError, match="label different cases"):
        mcnemar_test(df["a"], df["b"].iloc[::-1])
