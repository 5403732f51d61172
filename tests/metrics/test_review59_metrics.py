"""Hostile review 59 of the less-reviewed metrics (ambiguity, spatial, boundary, overlap, compare, casewise, quality,
monitoring, lesions): the defects found, each against values computed another way."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.metrics import (
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    compare_uncertainty_maps,
    spatial_calibration_error,
)


def _thin_cases(n: int = 4) -> tuple[list, list, list, list]:
    """``n`` 3-D cases of one slice, ``(1, H, W)``: uncertainty maps a and b, predictions, references."""
    rng = np.random.default_rng(59)
    target = np.zeros((1, 32, 40), np.int64)
    target[0, 10:18, 12:24] = 1
    preds, maps_a, maps_b = [], [], []
    for i in range(n):
        pred = target.copy()
        pred[0, 18, 12:12 + i + 1] = 1  # a wrong row of i + 1 voxels below the object
        preds.append(pred)
        maps_a.append(rng.random((1, 32, 40)))
        maps_b.append(rng.random((1, 32, 40)))
    return maps_a, maps_b, preds, [target] * n


@pytest.mark.parametrize("spacing", [(3.0, 1.0, 0.5), [(3.0, 1.0, 0.5), (2.0, 0.7, 0.7), (1.0, 1.0, 2.0),
                                                           (5.0, 0.5, 1.5)]])
def test_compare_scores_one_slice_volumes_with_their_3d_spacing(spacing):
    """A list of 3-D cases of one slice, ``(*spatial)`` = ``(1, H, W)``, with one spacing value per axis.

    ``compare_uncertainty_maps`` took the slice axis for a channel and dropped it, so the three spacing values met a
    2-D map and the comparison was refused (``ValueError: spacing must have 2 values``); every value must be the
    metric's own on the 3-D case with that spacing.
    """
    maps_a, maps_b, preds, targets = _thin_cases()
    res = compare_uncertainty_maps(["SPACE", "BUC", "BA-ECE"], maps_a, maps_b, pred=preds, target=targets,
                                   spacing=spacing)
    rows = np.broadcast_to(np.asarray(spacing, float), (len(preds), 3))
    for name, fn in (("SPACE", spatial_calibration_error), ("BUC", boundary_uncertainty_concentration),
                     ("BA-ECE", boundary_aware_ece)):
        for values, maps in ((res.metrics[name].values_a, maps_a), (res.metrics[name].values_b, maps_b)):
            expected = [float(fn(u, p, t, spacing=tuple(sp))[0]) for u, p, t, sp in zip(maps, preds, targets, rows)]
            assert np.isfinite(values).all()
            np.testing.assert_allclose(values, expected, rtol=0, atol=1e-15)


def test_compare_still_drops_the_channel_of_2d_cases():
    """2-D cases with a channel axis, ``(1, H, W)``, and a spacing of two values are still read as 2-D."""
    maps_a, maps_b, preds, targets = _thin_cases()
    res = compare_uncertainty_maps(["SPACE", "BA-ECE"], maps_a, maps_b, pred=preds, target=targets,
                                   spacing=(1.0, 0.5))
    expected = [float(spatial_calibration_error(u[0], p[0], t[0], spacing=(1.0, 0.5))[0])
                for u, p, t in zip(maps_a, preds, targets)]
    np.testing.assert_allclose(res.metrics["SPACE"].values_a, expected, rtol=0, atol=1e-15)


def _boundary_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    target = np.zeros((1, 1, 16, 16), np.int64)
    target[..., 4:12, 4:12] = 1
    pred = target.copy()
    pred[..., 4:12, 12] = 1  # a wrong column
    uncertainty = np.zeros((1, 1, 16, 16))
    uncertainty[..., 3:13, 3:14] = 0.4  # uncertain around the object
    return uncertainty, pred, target


@pytest.mark.parametrize("fn", [boundary_aware_ece, spatial_calibration_error])
def test_ba_ece_and_space_warn_about_a_map_below_zero(fn):
    """BA-ECE and SPACE compare the map with error rates in [0, 1] and warn when it leaves that scale.

    They warned above 1 (an entropy in nats) but scored a map with negative values (a log-scale score, a centred map)
    without a word: the same map shifted by -0.5 gave a larger, meaningless value.
    """
    u, pred, target = _boundary_case()
    with pytest.warns(UserWarning, match="below 0"):
        shifted = fn(u - 0.5, pred, target)
    assert float(shifted[0]) > float(fn(u, pred, target)[0])


@pytest.mark.parametrize("fn", [boundary_aware_ece, spatial_calibration_error])
def test_ba_ece_and_space_take_rounding_below_zero_quietly(fn):
    """A map on [0, 1] whose rounding reaches slightly below 0 (mutual information of -1e-9) is no scale error."""
    import warnings

    u, pred, target = _boundary_case()
    u[..., 0, 0] = -1e-9
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn(u, pred, target)
    with warnings.catch_warnings():  # normalize=True rescales the map first: nothing to warn about
        warnings.simplefilter("error")
        boundary_aware_ece(u - 0.5, pred, target, normalize=True)


@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
@pytest.mark.parametrize("metric_name", ["BoundaryUncertaintyConcentrationMetric", "BoundaryAwareECEMetric",
                                         "SpatialCalibrationErrorMetric"])
def test_spatial_metric_classes_take_uint32_and_uint64_label_maps(dtype, metric_name):
    """The metric classes packed a uint32 / uint64 prediction with ``torch.aminmax``, which torch lacks for them.

    ``NotImplementedError: "aminmax_cpu" not implemented for 'UInt32'`` where the functions take such maps (a label
    NIfTI stored as uint32, loaded with ``LoadImage(dtype=None)``); the values must be the functions' own.
    """
    import torch

    import monai_unc.metrics as m

    u, pred, target = (torch.from_numpy(x) for x in _boundary_case())
    label = pred.to(getattr(torch, dtype))
    cls = getattr(m, metric_name)
    fn = {"BoundaryUncertaintyConcentrationMetric": boundary_uncertainty_concentration,
          "BoundaryAwareECEMetric": boundary_aware_ece, "SpatialCalibrationErrorMetric": spatial_calibration_error}
    got = cls()(y_pred=label, y=target, uncertainty=u)
    expected = fn[metric_name](u, pred, target)
    assert torch.equal(got.reshape(-1), expected.reshape(-1))


def test_spatial_metric_class_names_a_uint64_label_beyond_float64():
    """A uint64 label of 2**63 or more is refused naming its value, not read as the negative int64 of its bits."""
    import torch

    from monai_unc.metrics import BoundaryAwareECEMetric

    u, pred, target = (torch.from_numpy(x) for x in _boundary_case())
    label = pred.to(torch.uint64)
    label.view(torch.int64)[0, 0, 0, 0] = -1  # the bits of 2**64 - 1
    with pytest.raises(ValueError, match=str(2**64 - 1)):
        BoundaryAwareECEMetric()(y_pred=label, y=target, uncertainty=u)


def test_monitoring_takes_bfloat16_tensors():
    """The monitoring statistics read a bfloat16 tensor (autocast output) as the float32 values it holds.

    ``numpy.asarray`` refused it (``TypeError: scores must be a sequence of numbers: Got unsupported ScalarType
    BFloat16``), as it refuses a CUDA tensor, where every other metric of the package reads both (``to_numpy``).
    """
    import torch

    from monai_unc.metrics.monitoring import conformal_pvalues, risk_lower_bound, risk_test, score_martingale

    rng = np.random.default_rng(0)
    scores = torch.tensor(np.r_[rng.normal(0, 1, 60), rng.normal(2, 1, 60)], dtype=torch.bfloat16)
    reference = torch.tensor(rng.normal(0, 1, 80), dtype=torch.bfloat16)
    as_numpy = scores.float().numpy(), reference.float().numpy()
    np.testing.assert_array_equal(conformal_pvalues(scores, reference), conformal_pvalues(*as_numpy))
    got, want = score_martingale(scores, reference), score_martingale(*as_numpy)
    np.testing.assert_array_equal(got.log_martingale, want.log_martingale)
    assert got.alarm == want.alarm
    losses = torch.tensor((rng.uniform(size=200) < 0.3).astype(float), dtype=torch.bfloat16)
    plain = losses.float().numpy()
    np.testing.assert_array_equal(risk_test(losses, 0.1).log_eprocess, risk_test(plain, 0.1).log_eprocess)
    np.testing.assert_array_equal(risk_lower_bound(losses, 0.1, 0.05), risk_lower_bound(plain, 0.1, 0.05))
