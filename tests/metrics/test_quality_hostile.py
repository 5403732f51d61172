"""Hostile review of the quality estimates and their conformal intervals: reduced precision against the loops,
coverage by simulation (small n, ties, clipping), degenerate and bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics.quality import (
    StreamingQuality,
    conformal_interval,
    conformal_quantile,
    dice_to_mean,
    expected_dice,
    pairwise_dice,
    quality_estimates,
    sample_iou,
    volume_cv,
)
from tests.metrics.test_quality import bf_all, bf_expected_dice, check, random_samples

# ---------------------------------------------------------------- reduced precision against the brute-force loops


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("spatial", [(9, 11), (5, 6, 4)], ids=["2d", "3d"])
def test_estimates_of_reduced_precision_samples_equal_the_loops_on_the_same_values(dtype, spatial):
    x = torch.from_numpy(random_samples(4, 1, 3, spatial, seed=9)).to(dtype)
    ref_in = x.double().numpy()  # the same (rounded) values, in float64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ref = bf_all(ref_in)
        check(pairwise_dice(x), ref["pairwise"])
        check(dice_to_mean(x), ref["to_mean"])
        check(sample_iou(x), ref["iou"])
        check(volume_cv(x), ref["cv"])
        check(volume_cv(x, soft=True), ref["cv_soft"], atol=1e-9)
        m = x.mean(0).double().numpy()
        want = bf_expected_dice(m)
        if dtype != torch.float32:
            # half precision: the foreground's probability is 1 - p_0 where p_0 < 0.5 and the classes' own sum
            # elsewhere (a float16 p_0 near 1 has lost the small probabilities they keep; hostile review 69)
            fg = m.copy()
            fg[:, 0] = np.where(m[:, 0] < 0.5, m[:, 0], 1 - m[:, 1:].sum(axis=1))
            want[:, -1] = bf_expected_dice(fg)[:, -1]
        check(expected_dice(x.mean(0)), want, atol=1e-9)


# ---------------------------------------------------------------- conformal intervals: coverage by simulation


@pytest.mark.parametrize("n,alpha", [(9, 0.1), (19, 0.05), (4, 0.2)])
def test_coverage_at_the_smallest_calibration_size_with_ties_and_clipping(n, alpha):
    """The smallest n with a finite quantile, Dice values on a coarse grid (many ties) near the bound 1: the
    marginal coverage over 4000 seeded splits is at least 1 - alpha (- 3 standard errors)."""
    rng = np.random.default_rng(12)
    reps, m = 4000, 5
    covered = np.empty(reps)
    for k in range(reps):
        est = np.round(rng.uniform(0.7, 1.0, n + m), 2)
        truth = np.clip(np.round(est + rng.normal(0.0, 0.08, n + m), 1), 0, 1)  # ties, many at 1.0
        iv = conformal_interval(est[n:], est[:n], truth[:n], alpha)
        assert math.isfinite(iv.quantile)
        covered[k] = np.mean((iv.low <= truth[n:]) & (truth[n:] <= iv.high))
    mean, se = covered.mean(), covered.std(ddof=1) / math.sqrt(reps)
    assert mean >= 1 - alpha - 3 * se, (mean, se)


def test_quantile_is_invariant_to_the_order_of_the_calibration_pairs():
    rng = np.random.default_rng(4)
    est, truth = rng.random(30), rng.random(30)
    perm = rng.permutation(30)
    assert conformal_quantile(est, truth) == conformal_quantile(est[perm], truth[perm])


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("bounds", [(1.0, 0.0), (0.5, 0.5), (float("nan"), 1.0), (0.0,), "01", (0.0, float("inf"))])
def test_conformal_interval_bounds_are_checked(bounds):
    with pytest.raises(ValueError, match="bounds"):
        conformal_interval([0.5], [0.5] * 20, [0.4] * 20, bounds=bounds)


@pytest.mark.parametrize("bad", [float("inf"), -float("inf")])
def test_an_infinite_estimate_is_refused_not_turned_into_a_point_interval(bad):
    """``inf`` clipped to the bounds gave the interval [1, 1]: a certain-looking answer for a broken estimate."""
    with pytest.raises(ValueError, match="estimate"):
        conformal_interval([0.5, bad], [0.5] * 20, [0.4] * 20)


@pytest.mark.parametrize("ddof", [-1, 0.5, True, "1", float("nan")])
def test_volume_cv_ddof_is_checked(ddof):
    x = random_samples(3, 1, 2, (4, 4), seed=2)
    with pytest.raises(ValueError, match="ddof"):
        volume_cv(x, ddof=ddof)
    acc = StreamingQuality()
    for p in x:
        acc.update(p)
    with pytest.raises(ValueError, match="ddof"):
        acc.volume_cv(ddof=ddof)


def test_nan_samples_are_refused_naming_the_argument():
    x = random_samples(3, 1, 2, (4, 4), seed=3)
    x[1, 0, :, 2, 2] = np.nan
    for fn in (pairwise_dice, dice_to_mean, sample_iou, volume_cv):
        with pytest.raises(ValueError, match="samples"):
            fn(x)
    with pytest.raises(ValueError, match="probs"):
        expected_dice(x[1])


@pytest.mark.parametrize("which", ["estimates", "truths"])
def test_an_infinite_calibration_value_is_refused_not_dropped(which):
    """NaN means undefined and is left out; inf is a broken value, and dropping it silently shrank n."""
    est, truth = [0.5] * 20, [0.4] * 20
    (est if which == "estimates" else truth)[3] = float("inf")
    with pytest.raises(ValueError, match=which):
        conformal_quantile(est, truth)


# ---------------------------------------------------------------- one sample


def test_one_sample_agreement_estimates_warn_that_they_carry_no_information():
    """One sample agrees with itself: Dice 1, IoU 1, CV 0 (the pinned values) -- "perfect" with no evidence, so a
    warning says so; against an external reference one sample is informative and gives none."""
    x = random_samples(1, 2, 3, (6, 5), seed=6)
    for fn in (dice_to_mean, sample_iou, volume_cv):
        with pytest.warns(UserWarning, match="single sample"):
            fn(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dice_to_mean(x, reference=np.zeros((2, 6, 5), np.int64))
    acc = StreamingQuality()
    acc.update(x[0])
    for method in (acc.sample_iou, acc.volume_cv):
        with pytest.warns(UserWarning, match="single sample"):
            method()


def test_quality_estimates_of_one_sample_leave_the_agreement_estimates_out():
    """A deterministic model with keep_samples: every case was reported as perfectly certain (Dice / IoU 1, CV 0)."""
    from monai_unc.metrics.quality import quality_estimates

    x = torch.from_numpy(random_samples(1, 2, 3, (6, 5), seed=7))
    with pytest.warns(UserWarning, match="single sample"):
        est = quality_estimates({"pred": x[0], "samples": x})
    assert set(est) == {"expected_dice"}


def test_a_numpy_alpha_is_a_number():
    est, truth = np.linspace(0.5, 1, 30), np.linspace(0.45, 0.95, 30)
    assert conformal_quantile(est, truth, np.float32(0.1)) == conformal_quantile(est, truth, 0.1)
    assert conformal_interval(0.8, est, truth, np.float64(0.2)).alpha == 0.2


# ---------------------------------------------------------------- flags and the inferer's output dict (hostile review)


@pytest.mark.parametrize("flag", ["no", 0, 1, None, "False"])
def test_a_flag_that_is_not_a_bool_is_refused_naming_it(flag):
    # found by hostile testing: include_background="no" is truthy and added the background column, soft="no" summed
    # probabilities, multilabel="no" scored classes as sigmoid regions
    samples = torch.from_numpy(random_samples(3, 1, 3, (4, 4), seed=0))
    calls = {
        "include_background": [lambda: pairwise_dice(samples, include_background=flag),
                               lambda: dice_to_mean(samples, include_background=flag),
                               lambda: sample_iou(samples, include_background=flag),
                               lambda: volume_cv(samples, include_background=flag),
                               lambda: expected_dice(samples[0], include_background=flag),
                               lambda: quality_estimates({"pred": samples[0]}, include_background=flag),
                               lambda: StreamingQuality(include_background=flag)],
        "soft": [lambda: volume_cv(samples, soft=flag),
                 lambda: StreamingQuality().update(samples[0]).volume_cv(soft=flag),
                 lambda: StreamingQuality().update(samples[0]).volumes(soft=flag)],
        "validate": [lambda: pairwise_dice(samples, validate=flag), lambda: expected_dice(samples[0], validate=flag),
                     lambda: StreamingQuality(validate=flag)],
        # multilabel=None (the default) takes the output's own attribute
        "multilabel": [] if flag is None else [lambda: quality_estimates({"pred": samples[0]}, multilabel=flag)],
    }
    for name, fs in calls.items():
        for f in fs:
            with pytest.raises(TypeError, match=f"{name} must be True or False"):
                f()


def test_quality_estimates_refuse_samples_of_another_shape_than_pred():
    # found by hostile testing: samples of one case beside a pred of two gave expected_dice (2,) and the agreement
    # estimates (1,), silently, and a list of samples raised AttributeError
    samples = torch.from_numpy(random_samples(3, 2, 3, (4, 4), seed=1))
    pred = samples.mean(0)
    with pytest.raises(ValueError, match=r"samples must have shape \(S, \*pred.shape\)"):
        quality_estimates({"pred": pred, "samples": samples[:, :1]})
    with pytest.raises(ValueError, match=r"samples must have shape \(S, \*pred.shape\)"):
        quality_estimates({"pred": pred[..., :2], "samples": samples})
    q = quality_estimates({"pred": pred, "samples": [s.tolist() for s in samples]})
    assert len(q) == 5 and all(isinstance(v.foreground, torch.Tensor) for v in q.values())  # pred's library
    ref = pairwise_dice(samples)
    torch.testing.assert_close(q["pairwise_dice"].foreground, ref.foreground)
    q = quality_estimates({"pred": pred, "samples": samples.numpy()})
    assert all(isinstance(v.per_class, torch.Tensor) for v in q.values())


def test_a_refused_reference_leaves_the_streaming_accumulator_empty():
    # found by hostile testing: after the first update refused a reference of the wrong shape, the next samples were
    # taken without the reference and dice_to_reference said none had been passed
    samples = random_samples(3, 2, 3, (4, 4), seed=2)
    acc = StreamingQuality(reference=np.zeros((2, 4, 5), dtype=np.int64))
    for _ in range(2):
        with pytest.raises(ValueError, match="reference must be a label map"):
            acc.update(samples[0])
    assert acc.num_samples == 0 and acc.num_classes is None
    acc = StreamingQuality(reference=np.zeros((2, 4, 4), dtype=np.int64))
    with pytest.raises(ValueError, match="reference must be a label map"):
        acc.update(samples[0][..., :3])  # a refused first sample does not fix the shape either
    for s in samples:
        acc.update(s)
    ref = dice_to_mean(samples, reference=np.zeros((2, 4, 4), dtype=np.int64))
    np.testing.assert_allclose(acc.dice_to_reference().foreground, ref.foreground)
