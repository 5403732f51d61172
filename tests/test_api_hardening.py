"""Regression tests for hostile input on the calibration, spatial, boundary, aggregation and temperature APIs.

One test (or group) per problem found by trying the API as a hostile user would; each fails on the code before its
fix. Also: the package layout of ``monai_unc.metrics.calibration``, the renamed arguments and their deprecated
aliases, and per-case results that are ``(B,)`` whatever the input shape.
"""

import ast
import math
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import monai_unc.metrics.calibration as calibration
from monai_unc._deprecation import deprecated_arg_names
from monai_unc._utils import check_probabilities, probability_tolerance, reduce_case_values
from monai_unc.aggregation import aggregate, fit_threshold
from monai_unc.measures import entropy
from monai_unc.metrics.boundary import hd95
from monai_unc.metrics.calibration import CalibrationMetric, ConfidenceHistogram, ece
from monai_unc.metrics.spatial import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    SpatialCalibrationErrorMetric,
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    spatial_calibration_error,
)
from monai_unc.temperature import TemperatureScaler

ROOT = Path(__file__).resolve().parents[1]


def softmax_case(shape=(2, 3, 12, 10), seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(*shape, generator=g) * scale
    y = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=g)
    return z, torch.softmax(z, 1), y


def ref_top_label_ece(probs, labels, n_bins=15):
    """Top-label ECE by explicit loops over bins on the raw float64 voxels (first maximum on ties)."""
    p = np.moveaxis(np.asarray(probs, dtype=np.float64), 1, -1).reshape(-1, probs.shape[1])
    y = np.asarray(labels).reshape(-1)
    conf, pred = p.max(1), p.argmax(1)
    bins = np.minimum(np.floor(np.clip(conf, 0, 1) * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        sel = bins == b
        if sel.any():
            total += sel.sum() * abs((pred[sel] == y[sel]).mean() - conf[sel].mean())
    return total / conf.size


# ---------------------------------------------------------------------------------------------------------------
# item 3: MONAI wrappers returned 0.0 ("perfect") when every case is NaN
# ---------------------------------------------------------------------------------------------------------------
def _no_boundary_batch():
    u = torch.rand(2, 1, 8, 9, generator=torch.Generator().manual_seed(0))
    empty = torch.zeros(2, 1, 8, 9)
    some = empty.clone()
    some[:, :, 2:6, 3:7] = 1
    return u, empty, some


@pytest.mark.parametrize("get_not_nans", [False, True])
def test_buc_metric_with_every_case_nan_is_nan_not_zero(get_not_nans):
    u, empty, some = _no_boundary_batch()
    metric = BoundaryUncertaintyConcentrationMetric(get_not_nans=get_not_nans)
    with pytest.warns(UserWarning, match="no boundary"):
        metric(y_pred=empty, y=some, uncertainty=u)  # an empty prediction has no boundary: BUC is NaN per case
    with pytest.warns(UserWarning, match="no valid"):
        out = metric.aggregate()
    value, not_nans = out if get_not_nans else (out, None)
    assert math.isnan(float(value))
    if get_not_nans:
        assert int(not_nans) == 0
    per_case = metric.aggregate("none")
    assert torch.isnan(per_case[0] if get_not_nans else per_case).all()  # the per-case values stay NaN


def test_baece_metric_with_every_case_nan_is_nan_not_zero():
    u, empty, some = _no_boundary_batch()
    metric = BoundaryAwareECEMetric(get_not_nans=True)
    with pytest.warns(UserWarning, match="no boundary"):
        metric(y_pred=some, y=empty, uncertainty=u)  # an empty target has no boundary: BA-ECE is NaN
    with pytest.warns(UserWarning, match="no valid"):
        value, not_nans = metric.aggregate()
    assert math.isnan(float(value)) and int(not_nans) == 0
    with pytest.warns(UserWarning, match="no valid"):
        assert torch.isnan(metric.aggregate("sum")[0]).all()  # MONAI's sum over no valid value is 0 as well


def test_baece_metric_mixed_cases_average_the_valid_ones():
    u, empty, some = _no_boundary_batch()
    target = torch.stack([some[0], empty[1]])
    metric = BoundaryAwareECEMetric(get_not_nans=True)
    with pytest.warns(UserWarning):
        metric(y_pred=some, y=target, uncertainty=u)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one valid case: no warning, its value
        value, not_nans = metric.aggregate()
    expected = boundary_aware_ece(u[:1], some[:1], some[:1])
    assert float(value) == pytest.approx(float(expected[0]), rel=1e-6) and int(not_nans) == 1


def test_space_metric_is_never_nan_for_valid_input():
    """SPACE is defined for empty masks; its wrapper shares the NaN-aware reduction (tested above)."""
    u, empty, some = _no_boundary_batch()
    metric = SpatialCalibrationErrorMetric()
    metric(y_pred=empty, y=empty, uncertainty=u)
    assert np.isfinite(float(metric.aggregate()))


@pytest.mark.parametrize("reduction", ["mean", "sum", "mean_batch", "sum_batch", "mean_channel", "sum_channel"])
def test_reduce_case_values_is_nan_where_no_value_is_valid(reduction):
    data = torch.tensor([[float("nan"), 1.0], [float("nan"), 3.0]], dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f, not_nans = reduce_case_values(data, reduction, "M")
    from monai.metrics.utils import do_metric_reduction

    ref, ref_not_nans = do_metric_reduction(data.clone(), reduction)
    assert torch.equal(not_nans, ref_not_nans)
    f, ref, empty = (x.reshape(-1) for x in torch.broadcast_tensors(f, ref, ref_not_nans == 0))
    assert torch.equal(torch.isnan(f), empty)
    assert torch.equal(f[~empty], ref[~empty])
    assert bool(empty.any()) == any("no valid" in str(w.message) for w in caught)


def test_calibration_metric_with_every_case_nan_is_nan():
    """CalibrationMetric already returned NaN here (its own reductions); pinned so it stays that way."""
    _, p, y = softmax_case((2, 3, 4, 4))
    for reduction in ("mean", "pooled"):
        metric = CalibrationMetric(metrics=("ece", "nll"), min_bin_count=10**6, reduction=reduction)
        metric(p, y)  # no bin reaches the minimum count: every ECE is NaN
        with pytest.warns(UserWarning, match="NaN"):
            out = metric.aggregate()
        assert math.isnan(float(out["ece"])) and math.isfinite(float(out["nll"]))


# ---------------------------------------------------------------------------------------------------------------
# item 5 (and 11): ConfidenceHistogram.save is atomic; load of a corrupt file names the path
# ---------------------------------------------------------------------------------------------------------------
def test_histogram_save_killed_mid_write_leaves_the_old_file_intact(tmp_path):
    _, p, y = softmax_case()
    path = tmp_path / "hist.npz"
    old = ConfidenceHistogram(3).update(p, y)
    old.save(path)
    child = textwrap.dedent(
        f"""
        import io, os, sys
        import numpy as np
        import torch
        from monai_unc.metrics.calibration import ConfidenceHistogram

        real = np.savez_compressed

        def killed_mid_write(file, **arrays):  # write half of a real file, then die like kill -9 (no cleanup)
            buf = io.BytesIO()
            real(buf, **arrays)
            data = buf.getvalue()
            with open(file, "wb") as f:
                f.write(data[: len(data) // 2])
                f.flush()
            os._exit(9)

        np.savez_compressed = killed_mid_write
        g = torch.Generator().manual_seed(1)
        p = torch.softmax(torch.randn(1, 3, 6, 6, generator=g), 1)
        ConfidenceHistogram(3).update(p, torch.zeros(1, 6, 6, dtype=torch.long)).save({str(path)!r})
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 9, res.stderr
    loaded = ConfidenceHistogram.load(path)  # the previous file, complete
    assert torch.equal(loaded.counts, old.counts) and torch.equal(loaded.sums, old.sums)
    assert sorted(q.name for q in tmp_path.iterdir() if not q.name.startswith(".")) == ["hist.npz"]


def test_histogram_save_appends_npz_and_round_trips(tmp_path):
    _, p, y = softmax_case()
    hist = ConfidenceHistogram(3).update(p, y, case_ids=["a", "b"])
    written = hist.save(tmp_path / "h")
    assert written == tmp_path / "h.npz" and written.is_file()
    back = ConfidenceHistogram.load(written)
    assert back.case_ids == ["a", "b"] and torch.equal(back.counts, hist.counts)
    assert not list(tmp_path.glob(".*partial*"))


@pytest.mark.parametrize(
    "content",
    [b"", b"not a zip file at all", "truncated", "other_npz"],
)
def test_histogram_load_of_a_bad_file_raises_value_error_naming_the_path(tmp_path, content):
    path = tmp_path / "hist.npz"
    if content == "truncated":
        _, p, y = softmax_case()
        ConfidenceHistogram(3).update(p, y).save(path)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif content == "other_npz":
        np.savez(path, a=np.zeros(3))
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match="hist.npz"):
        ConfidenceHistogram.load(path)


# ---------------------------------------------------------------------------------------------------------------
# item 8: valid low-precision probabilities were rejected ("pass probabilities, not logits")
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("in_dtype", [False, True])
def test_low_precision_probabilities_are_accepted(dtype, in_dtype):
    z, p, y = softmax_case((2, 10, 16, 16), seed=3)
    q = torch.softmax(z.to(dtype), 1) if in_dtype else p.to(dtype)  # softmax in the dtype, or rounded after
    check_probabilities(q)
    value = ece(q, y)
    assert value == pytest.approx(ref_top_label_ece(q.double().numpy(), y.numpy()), abs=1e-12)
    e = entropy(q)
    assert torch.isfinite(e).all() and e.shape == (2, 1, 16, 16)
    # logits are still told apart from probabilities in the low precision
    with pytest.raises(ValueError, match="probs"):
        ece(z.to(dtype), y)


def test_probability_tolerance_scales_with_the_precision():
    assert probability_tolerance(torch.float64) == probability_tolerance(torch.float32) == 1e-3
    assert probability_tolerance(torch.float16) == pytest.approx(4 * 2**-10)
    assert probability_tolerance(torch.bfloat16) == pytest.approx(4 * 2**-7)
    p = torch.full((1, 2, 3, 3), 0.5)
    p[0, 0, 0, 0] = 0.504  # a sum off by 4e-3: too much for float32 ...
    with pytest.raises(ValueError, match="sum to 1"):
        check_probabilities(p)
    check_probabilities(p.to(torch.bfloat16))  # ... within bfloat16 rounding


# ---------------------------------------------------------------------------------------------------------------
# item 10: TemperatureScaler
# ---------------------------------------------------------------------------------------------------------------
def test_temperature_fit_refuses_probabilities():
    z, p, y = softmax_case()
    with pytest.raises(ValueError, match="logits look like probabilities"):
        TemperatureScaler(max_steps=5).fit(p, y)


def test_temperature_transform_before_fit_is_refused():
    z, _, y = softmax_case()
    scaler = TemperatureScaler()
    with pytest.raises(RuntimeError, match="before fit"):
        scaler.transform(z)
    with pytest.raises(RuntimeError, match="before fit"):
        scaler(z)
    with pytest.raises(RuntimeError, match="before fit"):
        scaler.fold_into(torch.nn.Conv2d(2, 3, 1))
    fitted = TemperatureScaler(max_steps=3).fit(z, y)
    assert fitted.fitted and fitted.transform(z).shape == z.shape
    restored = TemperatureScaler()
    restored.load_state_dict(fitted.state_dict())
    assert restored.fitted and torch.equal(restored.transform(z), fitted.transform(z))


def test_temperature_transform_refuses_nan_logits():
    z, _, y = softmax_case()
    scaler = TemperatureScaler(max_steps=3).fit(z, y)
    bad = z.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="logits"):
        scaler.transform(bad)


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan")])
def test_temperature_min_temperature_must_be_positive(value):
    with pytest.raises(ValueError, match="min_temperature"):
        TemperatureScaler(min_temperature=value)


def test_temperature_empty_batch_and_unequal_lists_name_the_argument():
    z, _, y = softmax_case()
    with pytest.raises(ValueError, match="logits"):
        TemperatureScaler(max_steps=3).fit(torch.empty(0, 3, 4, 4), torch.empty(0, 4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="logits and target"):
        TemperatureScaler(max_steps=3).fit([z, z], [y])
    with pytest.raises(ValueError, match="logits and target"):
        TemperatureScaler(max_steps=3).fit([z], [y, y])
    with pytest.raises(ValueError, match="logits and target"):  # generators: found while streaming
        TemperatureScaler(max_steps=3).fit(lambda: iter([z, z]), lambda: iter([y]))


# ---------------------------------------------------------------------------------------------------------------
# item 11: opaque messages
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "patch_sum", "patch_size": 2.5}, "patch_size"),
        ({"method": "patch_mean", "patch_size": (2, 2.5)}, "patch_size"),
        ({"method": "patch_sum", "patch_size": "3"}, "patch_size"),
        ({"method": "threshold", "threshold": "a"}, "threshold"),
        ({"method": "threshold", "threshold": 0.5, "empty_value": "zero"}, "empty_value"),
    ],
)
def test_aggregate_names_the_bad_argument(kwargs, match):
    u = np.random.default_rng(0).random((1, 1, 6, 6))
    with pytest.raises(ValueError, match=match):
        aggregate(u, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# issue 16: per-case results are (B,) whatever the input shape
# ---------------------------------------------------------------------------------------------------------------
def _blob_case(shape=(12, 14), seed=0):
    rng = np.random.default_rng(seed)
    t = np.zeros(shape, int)
    t[3:9, 4:10] = 1
    p = np.zeros(shape, int)
    p[4:10, 3:9] = 1
    return rng.random(shape), p, t


@pytest.mark.parametrize("fn", [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error])
def test_spatial_metrics_return_one_value_per_case_for_an_unbatched_map(fn):
    u, p, t = _blob_case()
    single = fn(u, p, t)
    batched = fn(u[None, None], p[None], t[None])
    assert isinstance(single, np.ndarray) and single.shape == (1,) and single.dtype == np.float64
    np.testing.assert_array_equal(single, batched)
    ts = fn(torch.from_numpy(u), torch.from_numpy(p), torch.from_numpy(t))
    assert isinstance(ts, torch.Tensor) and ts.shape == (1,)


def test_spatial_extras_follow_the_case_axis():
    u, p, t = _blob_case()
    _, bands = boundary_aware_ece(u, p, t, n_bands=4, return_bands=True)
    assert bands["uncertainty"].shape == (1, 4) and bands["edges"].shape == (1, 5)
    _, smoothed = spatial_calibration_error(u, p, t, return_map=True)
    assert smoothed.shape == (1, 1, *u.shape)


def test_hd95_returns_the_leading_shape_or_one_value():
    _, p, t = _blob_case()
    single = hd95(p, t)
    assert isinstance(single, np.ndarray) and single.shape == (1,)
    np.testing.assert_array_equal(single, hd95(p[None], t[None], spatial_dims=2))


# ---------------------------------------------------------------------------------------------------------------
# issue 16: renamed arguments with deprecated aliases; the calibration package layout
# ---------------------------------------------------------------------------------------------------------------
def test_deprecated_arg_names_decorator():
    @deprecated_arg_names({"old": "new"})
    def f(a, new=None):
        return a, new

    assert f(1, new=2) == (1, 2)
    with pytest.warns(DeprecationWarning, match="'old'.*'new'"):
        assert f(1, old=3) == (1, 3)
    with pytest.raises(TypeError, match="'old'.*'new'"):
        f(1, old=3, new=4)
    with pytest.raises(TypeError, match="'new'"):
        f(1, 4, old=3)
    with pytest.raises(TypeError, match="no parameter 'missing'"):
        deprecated_arg_names({"old": "missing"})(lambda a: a)


def test_renamed_arguments_keep_their_old_keywords():
    z, p, y = softmax_case()
    with pytest.warns(DeprecationWarning, match="deprecated") as caught:
        assert ece(x=p, labels=y) == ece(p, y) == ece(probs=p, target=y)
    assert {"'x'", "'labels'"} <= {m.group(1) for w in caught if (m := re.search(r"argument ('\w+')", str(w.message)))}
    with pytest.raises(TypeError):
        ece(p, labels=y, target=y)
    with pytest.warns(DeprecationWarning, match="labels"):
        hist = ConfidenceHistogram(3).update(p, labels=y)
    assert torch.equal(hist.counts, ConfidenceHistogram(3).update(p, target=y).counts)
    maps, preds = np.random.default_rng(0).random((2, 1, 5, 5)), np.zeros((2, 1, 5, 5), int)
    preds[:, :, 1:3, 1:3] = 1
    with pytest.warns(DeprecationWarning, match="deprecated"):  # both old names warn
        assert fit_threshold(val_uncertainty_maps=maps, val_predictions=preds) == fit_threshold(maps, preds)
    with pytest.warns(DeprecationWarning, match="labels"):
        a = TemperatureScaler(max_steps=3).fit(z, labels=y)
    assert a.temperature.item() == TemperatureScaler(max_steps=3).fit(z, target=y).temperature.item()


OLD_CALIBRATION_NAMES = [
    "DEFAULT_FINE_BINS", "NLL_EPS", "ConfidenceHistogram", "ReliabilityCurve", "ece", "classwise_ece", "all_label_ece",
    "ace", "mce", "uce", "nll", "brier", "reliability_curve", "calibration_metrics", "CalibrationMetric",
    "CALIBRATION_METRICS", "top_label",
]  # fmt: skip


def test_calibration_package_exports_every_public_name():
    assert set(OLD_CALIBRATION_NAMES) <= set(calibration.__all__)
    for name in calibration.__all__:
        assert getattr(calibration, name) is not None
    assert {m.split(".")[-1] for m in ("histogram", "functional", "metric")} <= {
        p.stem for p in (ROOT / "monai_unc" / "metrics" / "calibration").glob("*.py")
    }


OWNED = [
    "monai_unc/metrics/calibration/__init__.py",
    "monai_unc/metrics/calibration/histogram.py",
    "monai_unc/metrics/calibration/functional.py",
    "monai_unc/metrics/calibration/metric.py",
    "monai_unc/metrics/spatial.py",
    "monai_unc/metrics/boundary.py",
    "monai_unc/handlers/calibration.py",
    "monai_unc/handlers/spatial.py",
    "monai_unc/aggregation.py",
    "monai_unc/temperature.py",
]


@pytest.mark.parametrize("path", OWNED)
def test_no_private_name_is_imported_across_modules(path):
    tree = ast.parse((ROOT / path).read_text())
    bad = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("monai_unc"))
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert not bad, bad
