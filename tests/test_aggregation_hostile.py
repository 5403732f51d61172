"""Hostile input to ``monai_unc.aggregation``: every bad argument is named in the error, an empty mask scores NaN
with a warning for every method, and box scores of maps with a huge dynamic range are the winning box's own sum."""

import warnings

import numpy as np
import pytest

from monai_unc.aggregation import aggregate


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
# an empty mask: NaN with a warning for every method
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "method, kwargs",
    [("mean", {}), ("sum", {}), ("threshold", {"threshold": 0.5}),
     ("threshold", {"threshold": 0.5, "empty_value": 0.0}), ("patch_sum", {"patch_size": 3}),
     ("patch_mean", {"patch_size": 3})],
)
@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_an_empty_mask_scores_nan_with_a_warning_for_every_method(method, kwargs, library):
    """Found by hostile testing: ``method="threshold"`` returned ``empty_value`` (0.0) and ``"sum"`` 0.0 for an empty
    mask without the empty-mask warning, while ``"mean"`` and the patch methods gave NaN with it: a case with an empty
    (e.g. predicted-foreground) mask ranked as the most certain of the cohort. Every method now gives NaN with the
    warning; the other case of the batch keeps its score."""
    import torch

    u = np.random.default_rng(0).random((2, 1, 8, 8, 8))
    mask = np.zeros((2, 8, 8, 8), bool)
    mask[1, 2:6, 2:6, 2:6] = True
    if library == "torch":
        u, mask = torch.from_numpy(u), torch.from_numpy(mask)
    with pytest.warns(UserWarning, match="1 case.* have an empty mask; their score is NaN"):
        out = aggregate(u, method, mask=mask, **kwargs)
    out = np.asarray(out)
    assert np.isnan(out[0]) and np.isfinite(out[1])


def test_threshold_keeps_empty_value_for_a_mask_without_voxels_above_t():
    """``empty_value`` is the score of a case whose (masked) voxels all lie below ``t`` (ValUES: 0.0), not of an empty
    mask."""
    u = np.full((1, 1, 4, 4), 0.2)
    mask = np.ones((1, 4, 4), bool)
    assert aggregate(u, "threshold", mask=mask, threshold=0.5).tolist() == [0.0]
    assert np.isnan(aggregate(u, "threshold", mask=mask, threshold=0.5, empty_value=float("nan"))).all()


# ---------------------------------------------------------------------------------------------------------------
# box sums of maps with a huge dynamic range
# ---------------------------------------------------------------------------------------------------------------
def test_patch_score_is_the_winning_box_summed_directly():
    """Found by hostile testing: box sums come from running sums (and cumulative-sum differences along a row), which
    lose small values next to huge ones: with one plane of -1e16, the best 3x3x3 box elsewhere (sum 8.1) was reported
    as 0.0, and along the last axis (window 11, the cumulative-sum path) 13.2 as 0.0. The winning box is summed again
    directly from the map."""
    from monai_unc.aggregation import max_patch

    u = np.full((1, 1, 12, 12, 12), 0.3)
    u[0, 0, 0] = -1e16
    res = max_patch(u, patch_size=3)
    s = res.start[0]
    assert res.score[0] == pytest.approx(8.1, rel=1e-12)
    assert res.score[0] == pytest.approx(u[0, 0, s[0]:s[0] + 3, s[1]:s[1] + 3, s[2]:s[2] + 3].sum(), rel=1e-15)
    assert aggregate(u, "patch_mean", patch_size=3)[0] == pytest.approx(0.3, rel=1e-12)
    u = np.full((1, 1, 4, 4, 30), 0.3)
    u[..., 0] = -1e16
    assert aggregate(u, "patch_sum", patch_size=(2, 2, 11))[0] == pytest.approx(0.3 * 2 * 2 * 11, rel=1e-12)
    # with a mask: the box mean over its mask voxels, from the map directly
    mask = np.ones(u.shape, bool)
    mask[..., 20:] = False
    assert aggregate(u, "patch_mean", patch_size=(2, 2, 11), mask=mask)[0] == pytest.approx(0.3, rel=1e-12)


@pytest.mark.parametrize("method", ["patch_sum", "patch_mean", "mean"])
@pytest.mark.parametrize("flag", ["False", "no", 0, None])
def test_return_location_given_as_text_or_a_number_is_refused(method, flag):
    """Regression: ``return_location="False"`` (a value read from a text config) is truthy, so the patch methods
    returned a ``(scores, start)`` tuple where the scores were asked for; a ``TypeError`` naming the flag now, as for
    the package's other flags; real booleans (numpy's too) still work."""
    u = np.random.default_rng(0).random((2, 1, 6, 6))
    with pytest.raises(TypeError, match="return_location must be True or False"):
        aggregate(u, method, return_location=flag)
    scores = aggregate(u, method, return_location=np.bool_(False))
    assert isinstance(scores, np.ndarray) and scores.shape == (2,)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "threshold", "threshold": "0.5"}, "threshold"),
        ({"method": "threshold", "threshold": float("nan")}, "threshold must be finite"),
        ({"method": "threshold", "threshold": 0.5, "empty_value": "zero"}, "empty_value"),
        ({"method": "patch_sum", "patch_size": 0}, "patch_size must be positive"),
        ({"method": "patch_mean", "patch_size": 2.5}, "patch_size"),
        ({"method": "patch_sum", "patch_size": (2, 2, 2, 2)}, "patch_size"),
    ],
)
def test_transforms_refuse_bad_options_when_built(kwargs, match):
    """Found by review 67: AggregateUncertainty(d) accepted threshold="0.5" or NaN, a non-numeric empty_value and
    patch_size=0 / 2.5 / four values when built, and refused them at the first case, after the model had run on it
    (a non-zero empty_value with another method was already refused when built)."""
    from monai_unc.transforms import AggregateUncertainty, AggregateUncertaintyd

    with pytest.raises(ValueError, match=match):
        AggregateUncertainty(**kwargs)
    with pytest.raises(ValueError, match=match):
        AggregateUncertaintyd("u", **kwargs)


def test_aggregate_refuses_a_patch_size_of_four_values_for_any_map():
    u = np.random.default_rng(0).random((1, 1, 6, 6, 6))
    with pytest.raises(ValueError, match="patch_size"):
        aggregate(u, "patch_sum", patch_size=(2, 2, 2, 2))


def test_fit_threshold_refuses_a_boolean_map_as_aggregate_does():
    """Found by review 67: fit_threshold took a boolean map (a mask passed in the map's place) and fitted a
    threshold from it, which aggregate then applied to the real maps; aggregate refuses such a map (TypeError)."""
    from monai_unc.aggregation import fit_threshold

    u = np.random.default_rng(0).random((6, 7))
    with pytest.raises(TypeError, match=r"uncertainty\[0\]"):
        fit_threshold([u > 0.5], [u > 0.5])
    with pytest.raises(TypeError, match="uncertainty"):
        aggregate((u > 0.5)[None, None], "mean")
    assert fit_threshold([u], [u > 0.5]) == pytest.approx(float(np.quantile(u, 1 - np.mean(u > 0.5))))


def test_a_zero_dimensional_patch_size_array_is_refused_by_name():
    """Found by review 67: ``patch_size=np.array(3)`` raised numpy's "iteration over a 0-d array", naming no
    argument (a 0-d tensor was already refused with the patch_size message)."""
    u = np.random.default_rng(0).random((1, 1, 5, 5))
    with pytest.raises(ValueError, match="patch_size must be an integer number of voxels"):
        aggregate(u, "patch_sum", patch_size=np.array(3))


@pytest.mark.parametrize("method, kwargs", [("mean", {}), ("patch_mean", {"patch_size": 2}),
                                            ("threshold", {"threshold": 0.5})])
def test_a_probability_mask_is_refused_as_the_transforms_refuse_it(method, kwargs):
    """Found by review 67: ``aggregate(u, mask=probabilities)`` read every non-zero probability as inside, so a
    sigmoid output (non-zero almost everywhere) selected the whole image and "mean over the predicted foreground"
    silently became the whole-image mean; ``AggregateUncertainty`` already refused such a mask. Binary masks stored
    as floats are fine."""
    rng = np.random.default_rng(0)
    u = rng.random((1, 1, 6, 6))
    prob = rng.random((1, 1, 6, 6)) * 0.1
    prob[0, 0, :2, :2] = 0.9
    with pytest.raises(ValueError, match="mask"):
        aggregate(u, method, mask=prob, **kwargs)
    binary = (prob > 0.5).astype(np.float32)
    assert np.allclose(aggregate(u, method, mask=binary, **kwargs), aggregate(u, method, mask=binary > 0, **kwargs))


def test_fit_threshold_warns_when_no_validation_case_has_predicted_foreground():
    """Found by review 67: with no predicted foreground in any validation case, ``q = 1`` and ``t`` is the largest
    validation uncertainty (ValUES eqs. 21-22, kept), so ``aggregate(method="threshold")`` then scores almost every
    case ``empty_value`` (the most certain); this happened without a word."""
    from monai_unc.aggregation import fit_threshold

    u = np.random.default_rng(0).random((3, 5, 6))
    with pytest.warns(UserWarning, match="no predicted foreground"):
        t = fit_threshold(u, np.zeros(u.shape, np.int64))
    assert t == pytest.approx(u.max())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_threshold(u, u > 0.9)
