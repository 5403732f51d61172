"""Hostile review of NCC, rater variance and the GED family against brute-force loops and numpy / scipy.

GED by a loop over every ordered pair of masks and every foreground class; D_Det by its closed form
``2 (p_A - p_Y)^2``; NCC against ``numpy.corrcoef``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics import GEDMetric, NCCMetric, ged, ged_detection, ged_nonempty_iou, ncc, rater_variance


def distance_loop(x, y, k, distance):
    per_class = []
    for c in range(1, k):
        a, b = x == c, y == c
        if not (a.any() or b.any()):
            continue
        inter = (a & b).sum()
        sim = inter / (a | b).sum() if distance == "iou" else 2 * inter / (a.sum() + b.sum())
        per_class.append(1.0 - sim)
    return float(np.mean(per_class)) if per_class else 0.0


def ged_loop(refs, samples, k, distance="iou"):
    def mean_d(xs, ys):
        return np.mean([distance_loop(x, y, k, distance) for x in xs for y in ys])

    cross, ref, smp = mean_d(refs, samples), mean_d(refs, refs), mean_d(samples, samples)
    return 2 * cross - ref - smp, cross, ref, smp


# ------------------------------------------------------------------------------------------------ NCC


@pytest.mark.parametrize("scale", [1.0, 3.7, 1e-3, 1e5, 1e-170, 1e170])
@pytest.mark.parametrize("offset", [0.0, 0.1, -2.0])
def test_ncc_of_a_linear_map_is_exactly_one_in_bounds(scale, offset):
    """r of ``s x + c`` against ``x`` is +-1 and never outside [-1, 1]; tiny and huge maps do not under/overflow."""
    x = np.random.default_rng(0).random(1000)
    assert ncc(x * scale + offset * scale, x) == pytest.approx(1.0, abs=1e-12)
    assert ncc(x * scale + offset * scale, -x) == pytest.approx(-1.0, abs=1e-12)
    assert -1.0 <= ncc(x * scale + offset * scale, x) <= 1.0
    assert -1.0 <= ncc(x * scale + offset * scale, -x) <= 1.0


def test_ncc_of_maps_near_the_largest_float_is_pearsons_r_not_nan():
    """Hostile testing: the mean of finite values near 1.8e308 overflowed to inf and the NCC came back NaN without a
    warning; Pearson's r does not change with the scale, so it is that of the maps divided by 1e308."""
    a = np.array([1.7e308, 1.7e308, 1.6e308, 1.0e308, -1.5e308])
    b = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    expected = float(np.corrcoef(a / 1e308, b)[0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a defined value, no warning
        assert ncc(a, b) == pytest.approx(expected, abs=1e-12)
        assert ncc(b, a) == pytest.approx(expected, abs=1e-12)
        assert ncc(torch.from_numpy(a), torch.from_numpy(b)) == pytest.approx(expected, abs=1e-12)


def test_ncc_bounds_property_and_corrcoef():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(2, 50))
        a = rng.random(n) if rng.random() < 0.5 else rng.integers(0, 3, n).astype(float)
        b = a * rng.normal() + rng.normal() * rng.random(n) * rng.random()
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            continue
        r = ncc(a, b)
        assert -1.0 <= r <= 1.0
        assert r == pytest.approx(float(np.corrcoef(a, b)[0, 1]), abs=1e-12)
        assert ncc(torch.from_numpy(a).float(), torch.from_numpy(b)) == pytest.approx(
            float(np.corrcoef(a.astype(np.float32).astype(np.float64), b)[0, 1]), abs=1e-12
        )


def test_ncc_bool_and_float16_maps():
    assert ncc(np.array([True, False, True, True]), np.array([1.0, 0.0, 1.0, 1.0])) == 1.0
    a16 = np.array([0.1, 0.2, 0.3, 0.7], dtype=np.float16)
    assert ncc(a16, np.arange(4.0)) == pytest.approx(float(np.corrcoef(a16.astype(np.float64), np.arange(4.0))[0, 1]))


def test_ncc_constant_and_single_voxel_nan():
    with pytest.warns(UserWarning, match="constant"):
        assert math.isnan(ncc(np.full(10, 0.1), np.arange(10.0)))
    with pytest.warns(UserWarning, match="constant"):
        assert math.isnan(ncc(np.ones(1), np.ones(1)))


# ------------------------------------------------------------------------------------------------ rater variance


def test_rater_variance_matches_loop():
    rng = np.random.default_rng(2)
    for _ in range(30):
        r, k = int(rng.integers(1, 6)), int(rng.integers(2, 5))
        raters = rng.integers(0, k, (r, 3, 4))
        expected = np.zeros((3, 4))
        for c in range(1, max(int(raters.max()) + 1, 2)):
            p = (raters == c).mean(axis=0)
            expected += p * (1 - p)
        np.testing.assert_allclose(rater_variance(raters), expected, atol=1e-15)
        if k == 2:  # binary: eq. 13 exactly, the population variance of the labels
            np.testing.assert_allclose(rater_variance(raters), raters.var(axis=0), atol=1e-15)


# ------------------------------------------------------------------------------------------------ GED


@pytest.mark.parametrize("distance", ["iou", "dice"])
def test_ged_matches_pair_loop(distance):
    rng = np.random.default_rng(3)
    for _ in range(60):
        k = int(rng.integers(2, 5))
        shape = tuple(int(v) for v in rng.integers(1, 5, int(rng.integers(1, 4))))
        dens = rng.random()
        refs = np.where(rng.random((int(rng.integers(1, 4)), *shape)) < dens, rng.integers(1, k, shape), 0)
        smp = np.where(rng.random((int(rng.integers(1, 5)), *shape)) < dens, rng.integers(1, k, shape), 0)
        got = ged(refs, smp, distance=distance, num_classes=k)
        np.testing.assert_allclose(got, ged_loop(refs, smp, k, distance), atol=1e-12)
        assert got.ged >= -1e-12  # 1 - IoU and 1 - Dice on masks: a non-negative energy here
        assert ged(smp, refs, distance=distance, num_classes=k).ged == pytest.approx(got.ged, abs=1e-12)
        np.testing.assert_allclose(
            GEDMetric(distance=distance, num_classes=k, return_terms=True)(
                y_pred=torch.from_numpy(smp)[None], y=torch.from_numpy(refs)[None]
            )[0].numpy(),
            ged_loop(refs, smp, k, distance),
            atol=1e-12,
        )
        nonempty = lambda xs: [x for x in xs if (x > 0).any()]  # noqa: E731
        if nonempty(refs) and nonempty(smp):
            np.testing.assert_allclose(
                ged_nonempty_iou(refs, smp, num_classes=k), ged_loop(nonempty(refs), nonempty(smp), k), atol=1e-12
            )
        pa, py = np.mean([not (x > 0).any() for x in refs]), np.mean([not (x > 0).any() for x in smp])
        assert ged_detection(refs, smp).ged == pytest.approx(2 * (pa - py) ** 2, abs=1e-12)


def test_ged_identical_sets_zero_and_empty_masks():
    m = np.zeros((2, 4, 4), int)
    m[0, 1:3, 1:3] = 1
    assert ged(m, m).ged == 0.0
    assert ged(np.zeros((3, 4, 4), int), np.zeros((2, 4, 4), int)) == (0.0, 0.0, 0.0, 0.0)
    with pytest.warns(UserWarning, match="empty"):
        assert all(math.isnan(v) for v in ged_nonempty_iou(np.zeros((2, 4, 4), int), m))


# ------------------------------------------------------------------------------------------------ metrics


def test_metrics_accumulate_reset_aggregate_twice():
    torch.manual_seed(4)
    u = torch.rand(3, 1, 4, 4)
    ref = u + 0.3 * torch.rand(3, 1, 4, 4)
    expected = np.mean([np.corrcoef(u[i].ravel().numpy(), ref[i].ravel().numpy())[0, 1] for i in range(3)])
    metric = NCCMetric()
    metric(y_pred=u[:2], y=ref[:2])
    metric(y_pred=u[2:], y=ref[2:])
    assert float(metric.aggregate()) == pytest.approx(expected, abs=1e-6)
    assert float(metric.aggregate()) == pytest.approx(expected, abs=1e-6)
    metric.reset()
    with pytest.warns(UserWarning, match="constant"):
        metric(y_pred=torch.ones(1, 1, 4, 4), y=ref[:1])  # constant: NaN, skipped, NaN overall with a warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert math.isnan(float(metric.aggregate()))
    assert any("NaN" in str(w.message) for w in caught)


@pytest.mark.parametrize("num_classes", [2.5, True, "3", 1])
def test_num_classes_must_be_an_integer_of_at_least_two(num_classes):
    refs = np.zeros((2, 4, 4), int)
    refs[0, 1, 1] = 1
    with pytest.raises(ValueError, match="num_classes"):
        ged(refs, refs, num_classes=num_classes)
    with pytest.raises(ValueError, match="num_classes"):
        ged_nonempty_iou(refs, refs, num_classes=num_classes)
    with pytest.raises(ValueError, match="num_classes"):
        GEDMetric(num_classes=num_classes)


def test_metric_flags_must_be_bools():
    """A truthy string must not switch an option on (``y_is_raters="no"`` read rater maps as reference maps)."""
    with pytest.raises(TypeError, match="y_is_raters"):
        NCCMetric(y_is_raters="no")
    with pytest.raises(TypeError, match="return_terms"):
        GEDMetric(return_terms="yes")


# ---------------------------------------------------------------- cases without data, the cohort


@pytest.mark.parametrize("make", [NCCMetric, GEDMetric, lambda **kw: GEDMetric(variant="nonempty_iou", **kw)])
@pytest.mark.parametrize("get_not_nans", [False, True])
def test_a_metric_without_any_case_is_nan_with_a_warning_as_qu_brats(make, get_not_nans):
    """NCCMetric / GEDMetric raised 'the data to aggregate must be a torch.Tensor, got NoneType' where QUBraTSMetric
    (and the project's convention for degenerate input) gives NaN with a warning."""
    from monai_unc.metrics import QUBraTSMetric

    for metric in (make(get_not_nans=get_not_nans), QUBraTSMetric(get_not_nans=get_not_nans)):
        with pytest.warns(UserWarning, match="no case was evaluated"):
            got = metric.aggregate()
        value, count = got if get_not_nans else (got, None)
        assert math.isnan(float(value)) and (count is None or float(count) == 0)


def test_undefined_cases_are_left_out_of_the_cohort_mean_and_counted():
    """The stated convention: NaN with a warning per undefined case, mean over the defined ones, their number."""
    g = torch.Generator().manual_seed(2)
    metric = NCCMetric(get_not_nans=True)
    u1, r1 = torch.rand(1, 1, 5, 5, generator=g), torch.rand(1, 1, 5, 5, generator=g)
    metric(y_pred=u1, y=r1)
    with pytest.warns(UserWarning, match="constant"):
        metric(y_pred=torch.rand(1, 1, 5, 5, generator=g), y=torch.zeros(1, 1, 5, 5))  # empty annotations
    value, count = metric.aggregate()
    assert float(count) == 1 and float(value) == pytest.approx(ncc(u1[0], r1[0]))
    empty, full = torch.zeros(1, 2, 4, 4, dtype=torch.long), torch.zeros(1, 2, 4, 4, dtype=torch.long)
    full[:, 0, 1:3, 1:3] = 1
    metric = GEDMetric(variant="nonempty_iou", get_not_nans=True)
    metric(y_pred=full, y=full)
    with pytest.warns(UserWarning, match="empty"):
        metric(y_pred=empty, y=empty)
    value, count = metric.aggregate()
    assert float(count) == 1 and float(value) == pytest.approx(float(ged_nonempty_iou(full[0], full[0]).ged))
    metric = GEDMetric(get_not_nans=True)  # GED of empty masks is defined (0) and counts
    metric(y_pred=empty, y=empty)
    assert [float(v) for v in metric.aggregate()] == [0.0, 1.0]


@pytest.mark.parametrize("decollated", [True, False])
def test_ncc_and_ged_metrics_refuse_y_with_another_number_of_cases(decollated):
    """MONAI's zip of decollated lists dropped the extra cases without a word (and NCCMetric cut a longer y batch or
    failed with an IndexError on a shorter one): the cohort value was that of part of the cohort."""
    g = torch.Generator().manual_seed(0)
    u, raters = torch.rand(3, 1, 6, 6, generator=g), torch.randint(0, 2, (2, 3, 6, 6), generator=g)
    samples = torch.randint(0, 2, (3, 4, 6, 6), generator=g)
    for y_pred, y, metric in ((u, raters, NCCMetric(y_is_raters=True)), (u[:1], u[:2], NCCMetric())):
        with pytest.raises(ValueError, match=f"y_pred has {len(y_pred)} items but y has {len(y)}"):
            metric(y_pred=list(y_pred) if decollated else y_pred, y=list(y) if decollated else y)
        assert metric.get_buffer() is None
    with pytest.raises(ValueError, match="y_pred has 3 items but y has 2"):
        GEDMetric()(y_pred=list(samples) if decollated else samples, y=list(raters) if decollated else raters)


def test_rater_variance_checks_rater_dim_and_keepdim():
    raters = np.zeros((3, 4, 5), np.int64)
    raters[0, 1, 1] = 1
    raters[1, 1, 1] = 1
    # every axis, negative ones included, against the loop over the raters on that axis
    for dim in range(-3, 3):
        moved = np.moveaxis(raters, 0, dim)
        out = rater_variance(moved, rater_dim=dim)
        p = moved.mean(axis=dim)
        np.testing.assert_array_equal(out, p * (1 - p))
        assert rater_variance(moved, rater_dim=dim, keepdim=True).shape == np.expand_dims(p, dim).shape
    # torch's IndexError / TypeError about select()'s "dim" escaped, and keepdim="no" was taken as True
    for bad in (3, -4, 5, True, 1.0, "0", None):
        with pytest.raises(ValueError, match="rater_dim must be an axis of raters"):
            rater_variance(raters, rater_dim=bad)
    for bad in ("no", 1, None):
        with pytest.raises(TypeError, match="keepdim must be True or False"):
            rater_variance(raters, keepdim=bad)


@pytest.mark.parametrize("make", [lambda: GEDMetric(), lambda: GEDMetric(variant="detection"), lambda: NCCMetric()])
def test_metrics_refuse_a_batch_without_cases_in_one_line(make):
    """An empty decollated list or a (0, ...) batch escaped as an IndexError (QUBraTSMetric refuses it by name)."""
    metric = make()
    with pytest.raises(ValueError, match="y_pred is an empty list: give at least one case"):
        metric(y_pred=[], y=[])
    with pytest.raises(ValueError, match=r"y_pred holds no case \(shape \(0, 2, 4, 4\)\)"):
        metric(y_pred=torch.zeros(0, 2, 4, 4, dtype=torch.long), y=torch.zeros(0, 3, 4, 4, dtype=torch.long))
    # one case still goes through
    y = torch.zeros(1, 2, 4, 4, dtype=torch.long)
    y[0, 0, 1, 1] = 1
    value = metric(y_pred=y.clone() if isinstance(metric, GEDMetric) else y[:, :1].double(),
                   y=y if isinstance(metric, GEDMetric) else y[:, 1:].double() + y[:, :1].double())
    assert value.shape == (1, 1)
