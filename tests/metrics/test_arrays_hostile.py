"""Metrics fed arrays as real tools produce them (hostile review of the ``arrays`` side).

Soft maps passed where a label map is due, atlas label maps with large sparse ids, half-precision maps of the
package's own measures, boolean one-hot references.
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics import (
    distance_to_boundary,
    foreground_edges,
    ged,
    hd95,
    label_boundary,
    rater_variance,
)
from monai_unc.metrics.boundary import distance_to_mask, hausdorff_distance


def _soft_case() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    target = np.zeros((24, 24, 24), np.int64)
    target[6:18, 7:17, 5:19] = 1
    prob = 1 / (1 + np.exp(-(np.where(target > 0, 3.0, -3.0) + rng.normal(size=target.shape))))
    return prob, target


@pytest.mark.parametrize("call", [
    lambda p, t: hd95(p, t),
    lambda p, t: hausdorff_distance(p, t),
    lambda p, t: label_boundary(p),
    lambda p, t: foreground_edges(p),
    lambda p, t: distance_to_boundary(p),
    lambda p, t: distance_to_mask(p),
    lambda p, t: hd95(torch.from_numpy(p), torch.from_numpy(t)),
])
def test_boundary_functions_refuse_a_probability_map(call):
    """A sigmoid probability map given as ``pred`` was read as ``p > 0``: every voxel foreground, an HD95 of about
    15.6 mm instead of 1.2 mm, without a word (boundary_aware_ece and check_labels refuse such a map)."""
    prob, target = _soft_case()
    with pytest.raises(ValueError, match="must hold integer labels"):
        call(prob, target)
    # the thresholded map and integral floats (label maps read from NIfTI) are label maps
    hard = hd95(prob > 0.5, target)
    np.testing.assert_array_equal(hd95((prob > 0.5).astype(np.float32), target.astype(np.float64)), hard)


@pytest.mark.parametrize("call", [
    lambda m, t: hd95(m, t),
    lambda m, t: hausdorff_distance(m, t),
    lambda m, t: label_boundary(m),
    lambda m, t: distance_to_mask(m),
])
def test_boundary_functions_refuse_negative_labels(call):
    """A foreground marked -1 was background for ``hd95`` (``> 0``: an infinite HD95) and foreground for
    ``distance_to_mask`` (``!= 0``)."""
    _, target = _soft_case()
    marked = -target
    with pytest.raises(ValueError, match="non-negative labels"):
        call(marked, target)
    with pytest.raises(ValueError, match="non-negative labels"):
        call(marked.astype(np.float32), target)


class _Deadline:
    """Raise ``TimeoutError`` in the main thread after ``seconds`` (a hang fails the test instead of stalling it)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        import signal

        def expire(signum, frame):
            raise TimeoutError(f"still running after {self.seconds} s")

        self._old = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc) -> None:
        import signal

        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old)


@pytest.mark.parametrize("top", [2**14, 2**40])
def test_rater_variance_and_ged_take_sparse_large_labels(top):
    """An atlas's label ids (FreeSurfer up to 12175, Allen CCF up to ~6e8) made rater_variance and the GED loop over
    every integer up to the largest label: labels {0, 16384} on 3 x 32^3 voxels took minutes, {0, 2**40} forever."""
    rng = np.random.default_rng(0)
    raters = rng.integers(0, 3, size=(3, 16, 16, 16))
    sparse = np.where(raters > 0, raters * top, 0)  # the same partition, labels 0, top, 2 top
    with _Deadline(20.0):
        np.testing.assert_array_equal(rater_variance(sparse), rater_variance(raters))
        assert ged(sparse[:2], sparse[1:]) == ged(raters[:2], raters[1:])
        assert ged(sparse[:2], sparse[1:], distance="dice") == ged(raters[:2], raters[1:], distance="dice")
    # classes no map holds add nothing, as before
    assert ged(raters[:2], raters[1:], num_classes=7) == ged(raters[:2], raters[1:])


@pytest.mark.parametrize("dtype", [np.float16, torch.float16, torch.bfloat16])
def test_to_qu_brats_range_takes_half_precision_maps_of_the_measures(dtype):
    """``binary_entropy`` of float16 probabilities is a float16 map holding log 2 as 0.69336 (2.9e-4 above it);
    ``to_qu_brats_range(max_value=log 2)`` refused it as out of range (its tolerance was float32's)."""
    from monai_unc.measures import binary_entropy
    from monai_unc.metrics import measure_max, to_qu_brats_range

    rng = np.random.default_rng(0)
    p = (0.5 + 0.004 * rng.standard_normal((1, 3, 8, 8, 8))).clip(0, 1)
    probs = p.astype(dtype) if isinstance(dtype, type) else torch.from_numpy(p).to(dtype)
    h = binary_entropy(probs)
    top = measure_max("predictive_entropy", multilabel=True)
    out = to_qu_brats_range(h, max_value=top)
    h64 = np.asarray(h.double() if isinstance(h, torch.Tensor) else h, dtype=np.float64)
    expected = np.clip(h64 / top * 100, 0, 100)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=0, atol=1e-12)
    # a value beyond the dtype's rounding is still refused
    with pytest.raises(ValueError, match="must lie in"):
        to_qu_brats_range(np.full(4, 0.71, np.float16), max_value=top)


def test_calibration_metric_takes_a_bool_one_hot_reference():
    """``CalibrationMetric`` raised torch's "argmax(): does not support bool input" for a boolean one-hot ``y``."""
    from monai_unc.metrics import CalibrationMetric, ece

    torch.manual_seed(0)
    p = torch.softmax(torch.randn(2, 3, 6, 6, 6), 1)
    y = torch.randint(0, 3, (2, 1, 6, 6, 6))
    onehot = torch.nn.functional.one_hot(y[:, 0], 3).permute(0, 4, 1, 2, 3)
    metric = CalibrationMetric(metrics=("ece", "nll"))
    metric(y_pred=p, y=onehot.bool())
    values = metric.aggregate()
    assert float(values["ece"]) == pytest.approx(ece(p, y), abs=1e-12)


def test_conformal_case_state_takes_bfloat16_probabilities():
    """``conformal_case_state`` checked bfloat16 probabilities (autocast) with float32's tolerance 1e-3 after its
    float32 copy and refused them (sums off by 3e-3), where ``check_probabilities`` allows bfloat16's rounding."""
    from monai_unc._utils import check_probabilities
    from monai_unc.metrics import conformal_case_state

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 12, 12, 12)) * 2
    p = np.exp(logits) / np.exp(logits).sum(0)
    y = rng.integers(0, 3, (12, 12, 12))
    pb = torch.from_numpy(p).bfloat16()
    check_probabilities(pb[None])  # the package's rule for bfloat16
    assert float((pb.double().sum(0) - 1).abs().max()) > 1e-3  # beyond float32's tolerance
    from monai.data import MetaTensor

    arrays = conformal_case_state(pb, y).to_arrays()
    meta = conformal_case_state(MetaTensor(pb, affine=torch.diag(torch.tensor([2.0, 2, 2, 1]))), y).to_arrays()
    assert arrays.keys() == meta.keys()
    for key in arrays:
        np.testing.assert_array_equal(np.asarray(arrays[key]), np.asarray(meta[key]))
    with pytest.raises(ValueError, match="sum to 1|lie in"):
        conformal_case_state((pb.float() * 1.05).bfloat16(), y)


def test_dice_of_atlas_labels_needs_no_class_by_class_table():
    """``dice`` / ``overlap_counts`` built the ``C x C`` confusion table: uint16 atlas labels (65535) asked for 34 GB
    and raised torch's allocation RuntimeError, 12175 labels took 1.2 GB for 32^3 voxels."""
    from monai_unc.metrics import dice

    rng = np.random.default_rng(0)
    p = rng.integers(0, 2, size=(1, 32, 32, 32))
    t = rng.integers(0, 2, size=(1, 32, 32, 32))
    top = 65535
    d = dice((p * top).astype(np.uint16), (t * top).astype(np.uint16))
    assert d.shape == (1, top)
    np.testing.assert_array_equal(d[:, -1], dice(p, t)[:, 0])
    np.testing.assert_array_equal(d[:, :-1], 1.0)  # classes absent from both maps: empty_score


@pytest.mark.parametrize("foreground", [False, True])
def test_overlap_counts_without_the_table_equal_the_joint_counts(foreground):
    from monai_unc.metrics.overlap import _confusion, _separate_counts

    rng = np.random.default_rng(1)
    c = 5
    p = torch.from_numpy(rng.integers(0, c, size=(3, 1, 200)))
    t = torch.from_numpy(rng.integers(0, c, size=(1, 4, 200)))
    lead = torch.broadcast_shapes(p.shape[:-1], t.shape[:-1])
    conf = _confusion(p, t, c, lead)
    inter, size_p, size_t, fg = _separate_counts(p, t, c, lead, foreground)
    torch.testing.assert_close(inter, torch.diagonal(conf, dim1=-2, dim2=-1), rtol=0, atol=0)
    torch.testing.assert_close(size_p, conf.sum(dim=-1), rtol=0, atol=0)
    torch.testing.assert_close(size_t, conf.sum(dim=-2), rtol=0, atol=0)
    if foreground:
        torch.testing.assert_close(fg, conf[..., 1:, 1:].sum(dim=(-2, -1), keepdim=True)[..., 0], rtol=0, atol=0)
    else:
        assert fg is None
