"""Our metrics against reference packages not used elsewhere in the suite: frozen values (review 65).

A seeded fuzz of 200 random inputs per metric (empty masks, single voxels, ties, one-hot and uniform probabilities,
all-one-class labels, anisotropic spacing, 2-D and 3-D) compared ``surface_hd95`` with DeepMind's
``surface-distance`` 0.1, ``ece`` / ``mce`` with torchmetrics 1.9.0, ``lesion_detection`` with panoptica 2.1.7,
``holm_correction`` / ``cochrans_q`` / ``mcnemar_test`` with statsmodels 0.15.0, and ``ece`` / ``ace`` / ``mce`` of two
classes with netcal 1.4.0. The values below were computed by those packages and are frozen here, so the test needs
none of them at run time. Where a
package defines a quantity differently (documented in docs/calibration.md, docs/lesions.md, docs/spatial_metrics.md)
the test pins our definition with a value worked out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.metrics import ace, cochrans_q, ece, holm_correction, lesion_detection, mce, mcnemar_test, surface_hd95

# (seed, shape, spacing, percentile, surface-distance 0.1: compute_robust_hausdorff(compute_surface_distances(t, p,
# spacing), percentile)); t = rng.random(shape) < 0.1, p = rng.random(shape) < 0.2 with rng = default_rng(seed)
SURFACE_DISTANCE_0_1 = [
    (0, (5, 6, 4), (0.7, 1.0, 3.0), 95.0, 2.0),
    (1, (6, 6, 6), (1.0, 1.0, 1.0), 100.0, 3.4641016151377544),
    (2, (6, 5, 6), (0.5, 1.5, 1.0), 95.0, 1.5),
    (3, (7, 5, 4), (3.0, 0.7, 0.5), 75.0, 0.7),
    (4, (8, 6, 5), (1.0, 0.5, 2.5), 95.0, 2.23606797749979),
]


@pytest.mark.parametrize("seed, shape, spacing, q, expected", SURFACE_DISTANCE_0_1)
def test_surface_hd95_equals_deepmind_surface_distance(seed, shape, spacing, q, expected):
    rng = np.random.default_rng(seed)
    target = rng.random(shape) < 0.1
    pred = rng.random(shape) < 0.2
    assert surface_hd95(target, pred, spacing, q) == pytest.approx(expected, rel=1e-12, abs=1e-12)


# (seed, classes, n_bins, torchmetrics 1.9.0 multiclass_calibration_error norm="l1", norm="max"), of the float64
# probabilities below; torchmetrics returns float32, hence the tolerance
TORCHMETRICS_1_9_0 = [
    (0, 3, 15, 0.46182113885879517, 0.7294154763221741),
    (1, 2, 10, 0.37628236413002014, 0.48758065700531006),
    (2, 4, 5, 0.36823803186416626, 0.5878384113311768),
]


@pytest.mark.parametrize("seed, classes, n_bins, ref_ece, ref_mce", TORCHMETRICS_1_9_0)
def test_ece_and_mce_equal_torchmetrics_away_from_bin_edges(seed, classes, n_bins, ref_ece, ref_mce):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(2 * torch.randn(1, classes, 4, 5, 3, generator=g, dtype=torch.float64), 1)
    target = torch.randint(0, classes, (1, 4, 5, 3), generator=g)
    assert ece(probs, target, n_bins=n_bins) == pytest.approx(ref_ece, abs=1e-6)
    assert mce(probs, target, n_bins=n_bins) == pytest.approx(ref_mce, abs=1e-6)


def test_confidence_one_is_in_the_last_bin_not_in_an_extra_one():
    """Bins ``[b/n, (b+1)/n)`` with the last one closed; torchmetrics 1.9.0 gives 0.28 / 0.5 (1.0 in a bin of its own).

    5 bins: {0.6 right, 0.6 wrong} in [0.6, 0.8): |0.5 - 0.6| * 2; {0.8 right, 1.0 right, 1.0 wrong} in [0.8, 1]:
    |2/3 - 2.8/3| * 3; ECE = (0.2 + 0.8) / 5, MCE = 0.8 / 3.
    """
    p = torch.tensor([[1.0, 1.0, 0.6, 0.6, 0.8], [0.0, 0.0, 0.4, 0.4, 0.2]], dtype=torch.float64)[None]
    y = torch.tensor([[0, 1, 0, 1, 0]])
    assert ece(p, y, n_bins=5) == pytest.approx(0.2, abs=1e-12)
    assert mce(p, y, n_bins=5) == pytest.approx(0.8 / 3, abs=1e-12)


# (iou_threshold, seed, panoptica 2.1.7 tp, fp, fn, rq) with SEMANTIC input, ConnectedComponentsInstanceApproximator
# (scipy backend) and NaiveThresholdMatching(matching_threshold=iou_threshold); the masks as in the test
PANOPTICA_2_1_7 = [
    (0.5, 0, 30, 40, 51, 0.3973509933774834),
    (0.5, 1, 36, 34, 31, 0.5255474452554745),
    (0.5, 2, 34, 26, 35, 0.5271317829457365),
    (0.5, 3, 26, 33, 41, 0.4126984126984127),
]


def _lesion_masks(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    target = rng.random((9, 9, 9)) < 0.2
    return target ^ (rng.random((9, 9, 9)) < 0.15), target


@pytest.mark.parametrize("threshold, seed, tp, fp, fn, rq", PANOPTICA_2_1_7)
def test_lesion_detection_at_iou_one_half_equals_panoptica(threshold, seed, tp, fp, fn, rq):
    r = lesion_detection(*_lesion_masks(seed), iou_threshold=threshold, connectivity="face")
    assert (r.tp, r.fp, r.fn) == (tp, fp, fn)
    assert r.f1 == pytest.approx(rq, rel=1e-12)


def test_lesion_detection_below_one_half_counts_as_shifts_not_one_to_one():
    """At 0.25 a ground-truth lesion split into two predicted lesions gives two true positives (Shifts' counting);
    panoptica 2.1.7's one-to-one matching gives (tp, fp, fn) = (44, 26, 37) on seed 0, F1 0.5827814569536424.
    """
    r = lesion_detection(*_lesion_masks(0), iou_threshold=0.25, connectivity="face")
    assert (r.tp, r.fp, r.fn) == (45, 25, 32)
    t = np.zeros((1, 7), bool)
    t[0, 0:5] = True
    p = np.zeros_like(t)
    p[0, [0, 1, 3, 4]] = True  # two lesions, each of IoU 2/5 with the one target lesion
    r = lesion_detection(p, t, iou_threshold=0.25)
    assert (r.tp, r.fp, r.fn, r.f1) == (2, 0, 0, 1.0)


def test_holm_cochran_and_exact_mcnemar_equal_statsmodels():
    # statsmodels: multipletests(p, method="holm")[1]
    p = [0.01, 0.04, 0.03, 0.2, 0.04, 0.5, 0.0]
    np.testing.assert_allclose(holm_correction(p), [0.06, 0.16, 0.15, 0.4, 0.16, 0.5, 0.0], rtol=1e-12, atol=0)
    # statsmodels: cochrans_q(out, return_object=True) -> statistic, pvalue, df
    out = (np.random.default_rng(5).random((15, 4)) < 0.5).astype(int)
    q, pval, df = cochrans_q(out)
    assert (q, df) == (pytest.approx(0.75, rel=1e-12), 3)
    assert pval == pytest.approx(0.8613850804045416, rel=1e-12)
    # statsmodels: mcnemar([[3, 9], [2, 4]], exact=True / exact=False, correction=True): b = 9, c = 2
    x = [1] * 3 + [1] * 9 + [0] * 2 + [0] * 4
    y = [1] * 3 + [0] * 9 + [1] * 2 + [0] * 4
    assert mcnemar_test(x, y) == pytest.approx(0.0654296875, rel=1e-12)
    assert mcnemar_test(x, y, exact=False) == pytest.approx(0.070440429272088, rel=1e-12)


def test_mcnemar_chi_square_of_a_balance_is_one_as_in_r():
    """b = c: statistic 0 and p = 1 (R's ``mcnemar.test``); statsmodels' mcnemar(correction=True) gives p 0.617 for
    b = c = 2, and p 0 without any discordant pair."""
    x = [1, 1, 0, 0, 1]
    y = [0, 0, 1, 1, 1]
    assert mcnemar_test(x, y, exact=False) == 1.0
    assert mcnemar_test([1, 0], [1, 0], exact=False) == 1.0


def test_two_class_calibration_is_top_label_not_netcal_positive_class():
    """With two columns netcal 1.4.0 calibrates p(class 1) against y = 1: ACE 0.325, MCE 0.7 (ECE 0.358333 by chance
    equal). Top label: bins [0.4, 0.6) {0.55 right}, [0.6, 0.8) {0.6, 0.7 wrong}, [0.8, 1] {0.8, 0.9, 0.9 right}.
    """
    p1 = torch.tensor([0.9, 0.2, 0.7, 0.4, 0.55, 0.1], dtype=torch.float64)
    probs = torch.stack([1 - p1, p1])[None]
    target = torch.tensor([[1, 0, 0, 1, 1, 0]])
    gaps = [0.45, 0.65, 1.0 - (0.8 + 0.9 + 0.9) / 3]
    assert ece(probs, target, n_bins=5) == pytest.approx((0.45 + 2 * 0.65 + 3 * gaps[2]) / 6, abs=1e-12)
    assert ace(probs, target, n_bins=5) == pytest.approx(sum(gaps) / 3, abs=1e-12)
    assert mce(probs, target, n_bins=5) == pytest.approx(0.65, abs=1e-12)
