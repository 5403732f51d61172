"""The expected Dice of regions estimates the quantity of ``dice``: a region the segmentation does not hold.

A region's ``dice`` (:func:`~monai_unc.evaluation.rows.class_dice` of the region masks) scores a region absent from
the segmentation ``p > 0.5`` and the reference 1, and 0 when the reference holds some of it. Its expected Dice was the
soft Dice of ``p`` against that empty segmentation: 0 as soon as the model gave the region any probability, where
``dice`` is 1 for every case without the region (a glioma without enhancing tumour: ET). It is now the probability
that the reference holds no voxel of it, ``prod_x (1 - p(x))`` (each voxel drawn on its own, the model of the soft
Dice), as for a class (:func:`~monai_unc.evaluation.rows.case_expected_dice`, ``"region_mean"``); region rules
record it in ``format_version`` 5, and a region rule certified before keeps its estimate (``"region_mean_soft"``,
derived from the rule, never written) for new cases.
"""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.evaluation.rows import case_expected_dice, class_dice
from monai_unc.evaluation.triage import ReferralRule
from monai_unc.evaluation.triage.rule import CalibrationRecord
from monai_unc.io import json_safe
from monai_unc.io.provenance import rule_digest
from monai_unc.keys import EXPECTED_DICE_ESTIMATES, LEGACY_REGION_ESTIMATE
from monai_unc.metrics.risk_control import risk_controlled_threshold


def brute_force_region_mean(probs: np.ndarray) -> tuple[float, list[float]]:
    """Per region, voxel by voxel, with the segmentation ``p > 0.5``: the soft Dice of ``p`` against it when it holds
    some voxel, else the probability that the reference holds none of the region when each voxel is drawn on its own
    (``prod_x (1 - p(x))``, multiplied voxel by voxel); and their mean."""
    flat = probs.reshape(probs.shape[0], -1).astype(np.float64)
    out = []
    for r in range(flat.shape[0]):
        seg = [v > 0.5 for v in flat[r]]
        size = sum(seg)
        if size == 0:
            prob_none = 1.0
            for v in flat[r]:
                prob_none *= 1.0 - v
            out.append(prob_none)
        else:
            inter = sum(v for v, s in zip(flat[r], seg) if s)
            out.append(2 * inter / (sum(flat[r]) + size))
    return sum(out) / len(out), out


def brute_force_soft(probs: np.ndarray) -> list[float]:
    """The former estimate: the soft Dice of each region, 0 / 0 = 1 for a region without any probability."""
    flat = probs.reshape(probs.shape[0], -1).astype(np.float64)
    out = []
    for r in range(flat.shape[0]):
        size = sum(1 for v in flat[r] if v > 0.5)
        inter = sum(v for v in flat[r] if v > 0.5)
        den = sum(flat[r]) + size
        out.append(1.0 if den == 0 else 2 * inter / den)
    return out


def _sigmoid(rng, r, spatial, bias):
    z = 3.0 * rng.standard_normal((r, *spatial)) + np.asarray(bias, np.float64).reshape(-1, *[1] * len(spatial))
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


@pytest.mark.parametrize(("spatial", "seed"), [((7, 6, 5), 0), ((9, 8), 1), ((5, 6, 4), 2)])
def test_the_region_mean_against_a_voxel_loop(spatial, seed):
    rng = np.random.default_rng(seed)
    p = _sigmoid(rng, 4, spatial, [0.0, 1.0, -2.0, 0.0])
    p[2] = np.minimum(p[2], 0.45)  # region 2: never segmented, some probability
    p[3] = 0.0  # region 3: no probability at all
    want, per = brute_force_region_mean(p)
    q = case_expected_dice(p, True)
    np.testing.assert_allclose(q.per_class[0], per, rtol=1e-6)
    want_none = float(np.exp(np.log1p(-p[2].astype(np.float64)).sum()))
    assert q.per_class[0, 2] == pytest.approx(want_none, rel=1e-6) and q.per_class[0, 3] == 1.0
    assert q.foreground.shape == (1,) and q.foreground[0] == pytest.approx(want, rel=1e-6)
    # the former estimate: 0 for region 2, the rest unchanged
    old = case_expected_dice(p, True, LEGACY_REGION_ESTIMATE)
    np.testing.assert_allclose(old.per_class[0], brute_force_soft(p), rtol=1e-6, atol=1e-12)
    assert old.per_class[0, 2] == 0.0
    # the same quantity: the new estimate sums p_r itself, the former 1 - (1 - p_r) rounded to float32 (hostile review
    # 69: float16 lost whole voxels' worth of probability there)
    np.testing.assert_allclose(old.per_class[0, [0, 1, 3]], q.per_class[0, [0, 1, 3]], rtol=1e-7)


def test_a_region_absent_from_both_maps_is_one_as_dice_scores_it():
    """A case without enhancing tumour: ``dice`` of the region is 1 (no voxel in the segmentation nor the reference).
    A model that rules the region out (1e-5 on each of the 600 voxels: an expected volume of 0.006 voxel) scores
    about 1 (the soft Dice said 0); one that gives it 0.04 on each of the 100 tumour voxels expects 4 voxels of it, so
    the reference holds none with probability ``0.96 ** 100`` = 0.017 under its own voxel probabilities: the estimate
    does not claim a region absent that the model gives several voxels' worth of probability."""
    seg = np.zeros((10, 10, 6), bool)
    seg[2:7, 2:7, 1:5] = True
    p = np.full((2, *seg.shape), 1e-5, np.float32)
    p[0][seg] = 0.97  # the whole tumour, segmented
    target = np.stack([seg, np.zeros_like(seg)])
    pred = p > 0.5
    assert class_dice(pred[1].astype(np.int64), target[1].astype(np.int64), 2)[0] == 1.0
    q = case_expected_dice(p, True)
    assert q.per_class[0, 1] == pytest.approx((1 - 1e-5) ** 600, rel=1e-5) and q.per_class[0, 1] > 0.99
    assert case_expected_dice(p, True, LEGACY_REGION_ESTIMATE).per_class[0, 1] == 0.0
    assert q.foreground[0] > 0.96 > 0.5 > case_expected_dice(p, True, LEGACY_REGION_ESTIMATE).foreground[0]
    p[1][seg] = 0.04  # enhancing tumour: 0.04 on the 100 tumour voxels, none segmented
    q = case_expected_dice(p, True)
    assert q.per_class[0, 1] == pytest.approx(0.96 ** 100 * (1 - 1e-5) ** 500, rel=1e-5)


def test_a_region_at_one_half_is_not_segmented():
    """The segmentation is ``p > 0.5`` (the product's, and the two-class argmax whose tie goes to the background):
    a region at exactly 0.5 is not segmented and scores ``0.5 ** 20`` (20 voxels at 0.5)."""
    p = np.full((2, 4, 5), 0.5, np.float32)
    p[1, :2] = 0.9
    q = case_expected_dice(p, True)
    assert q.per_class[0, 0] == pytest.approx(0.5 ** 20, rel=1e-9) == pytest.approx(brute_force_region_mean(p)[1][0])
    assert q.per_class[0, 1] == pytest.approx(brute_force_region_mean(p)[1][1], rel=1e-6)


def test_the_legacy_estimate_is_no_estimate_a_rule_records():
    assert LEGACY_REGION_ESTIMATE not in EXPECTED_DICE_ESTIMATES
    with pytest.raises(ValueError, match="expected_dice_estimate must be one of"):
        CalibrationRecord((0.1,), (0.9,), (0.0,), expected_dice_estimate=LEGACY_REGION_ESTIMATE)
    with pytest.raises(ValueError, match="estimate must be one of"):
        case_expected_dice(np.full((3, 4, 4), 1 / 3, np.float32), False, LEGACY_REGION_ESTIMATE)


# ------------------------------------------------------------------------------------------------ the referral rule
DICE = (0.9, 0.7, 0.85, 0.95, 0.6, 0.88, 0.92, 0.8, 0.75, 0.93)
EST = (0.92, 0.9, 0.86, 0.97, 0.9, 0.9, 0.93, 0.85, 0.8, 0.95)
REGIONS = {"WT": [1, 2, 3], "ET": [3]}


def _rule(estimate="region_mean"):
    scores = tuple(0.1 * (i + 1) for i in range(len(DICE)))
    risks = tuple(float(d < 0.8) for d in DICE)
    rec = CalibrationRecord(scores, DICE, risks, expected_dice=EST, expected_dice_estimate=estimate)
    res = risk_controlled_threshold(
        np.array(scores), np.array(risks), 0.9, 0.5, method="sgr", n_candidates=rec.n_candidates, sequence=rec.sequence
    )
    return ReferralRule(
        "predictive_entropy_mean",
        res.threshold,
        res.feasible,
        0.9,
        0.5,
        "sgr",
        "failure",
        0.8,
        scores,
        tuple(f"c{i}" for i in range(len(DICE))),
        bound=res.bound,
        coverage=res.coverage,
        observed_risk=res.risk,
        n_candidates=res.n_candidates,
        num_classes=2,
        regions=REGIONS,
        record=rec,
    )


def _redigest(d):
    d = dict(d)
    d.pop("digest", None)
    d["digest"] = rule_digest(d)
    return d


def test_a_new_region_rule_records_region_mean_in_format_version_5():
    rule = _rule()
    d = json_safe(rule.to_json())
    assert d["format_version"] == 5 and d["calibration"]["expected_dice_estimate"] == "region_mean"
    back = ReferralRule.from_json(d, check_digest=True)
    assert back == rule and back.expected_dice_estimate == "region_mean"
    assert "scores such a region 0" not in back.interval_statement()


@pytest.mark.parametrize("version", [3, 4])
def test_a_region_rule_certified_before_keeps_its_estimate_for_new_cases(version):
    """A region rule of ``format_version`` 3 or 4 (no field) holds the former estimates: triage computes those for
    its new cases (``expected_dice_estimate`` ``"region_mean_soft"``, derived, not written back), and its interval
    statement says so."""
    d = json_safe(_rule().to_json())
    del d["calibration"]["expected_dice_estimate"]
    d["format_version"] = version
    old = ReferralRule.from_json(_redigest(d), check_digest=True)
    assert old.record.expected_dice_estimate is None and old.expected_dice_estimate == LEGACY_REGION_ESTIMATE
    assert old.format_version == 3 and "expected_dice_estimate" not in json_safe(old.to_json())["calibration"]
    text = old.interval_statement()
    assert text.count("scores such a region 0") == 1 and "certify the rule again" in text
    rng = np.random.default_rng(3)
    p = _sigmoid(rng, 2, (6, 7, 5), [1.0, -3.0])
    p[1] = np.minimum(p[1], 0.3) * 1e-4  # not segmented, an expected volume far below one voxel
    got = case_expected_dice(p, True, old.expected_dice_estimate)
    assert got.per_class[0, 1] == 0.0 and case_expected_dice(p, True).per_class[0, 1] > 0.99


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        # an older version recording region_mean: no release wrote it; it would be read as the new estimate
        (lambda d: d.__setitem__("format_version", 4), "expected_dice_estimate.*edited or corrupted"),
        (lambda d: d["calibration"].pop("expected_dice_estimate"), "expected_dice_estimate.*edited or corrupted"),
        (
            lambda d: d["calibration"].__setitem__("expected_dice_estimate", LEGACY_REGION_ESTIMATE),
            "expected_dice_estimate' must be one of",
        ),
        (
            lambda d: d["calibration"].__setitem__("expected_dice_estimate", "class_mean"),
            "expected_dice_estimate.*edited or corrupted|not an estimate of a region-based rule",
        ),
    ],
)
def test_the_field_of_a_region_rule_is_untrusted_input(edit, match):
    d = json_safe(_rule().to_json())
    edit(d)
    with pytest.raises(ValueError, match=match):
        ReferralRule.from_json(_redigest(d), check_digest=True)
