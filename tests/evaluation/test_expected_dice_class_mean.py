"""The expected Dice of classes estimates the quantity of ``dice``: the mean over the foreground classes.

``metrics.csv``'s and triage's ``expected_dice`` of more than two classes was the expected Dice of the merged
foreground (``1 - p_0`` against ``R > 0``), while the ``dice`` it is compared with, and whose residuals calibrate the
conformal interval, is the mean over the foreground classes of each class's Dice. It is now the mean over the classes
(:func:`~monai_unc.evaluation.rows.case_expected_dice`, ``"class_mean"``), the rule records which estimate its
calibration cases hold (``calibration.expected_dice_estimate``, ``format_version`` 5), and a rule certified before
keeps its merged-foreground estimate for new cases, said in its interval statement.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from monai_unc.evaluation.rows import case_expected_dice, class_dice
from monai_unc.evaluation.triage import ReferralRule
from monai_unc.evaluation.triage.rule import RULE_VERSION, CalibrationRecord
from monai_unc.io import json_safe
from monai_unc.io.provenance import rule_digest
from monai_unc.metrics.risk_control import risk_controlled_threshold


def _softmax(rng, c, spatial, scale=3.0):
    z = scale * rng.standard_normal((c, *spatial))
    e = np.exp(z - z.max(axis=0))
    return (e / e.sum(axis=0)).astype(np.float32)


def brute_force_class_mean(probs: np.ndarray) -> tuple[float, list[float]]:
    """Per foreground class, voxel by voxel: the soft Dice of ``p_c`` against ``[R = c]`` for a class the segmentation
    holds, the probability that the reference holds none of it when each voxel's label is drawn on its own
    (``prod_x (1 - p_c(x))``, multiplied voxel by voxel) for one it does not; and their mean."""
    c = probs.shape[0]
    flat = probs.reshape(c, -1).astype(np.float64)
    seg = [int(np.argmax(flat[:, i])) for i in range(flat.shape[1])]  # first maximum: the lower class on a tie
    out = []
    for k in range(1, c):
        inter = sum(flat[k, i] for i in range(flat.shape[1]) if seg[i] == k)
        size = sum(1 for v in seg if v == k)
        if size == 0:
            prob_none = 1.0
            for i in range(flat.shape[1]):
                prob_none *= 1.0 - flat[k, i]
            out.append(prob_none)
        else:
            out.append(2 * inter / (flat[k].sum() + size))
    return sum(out) / len(out), out


@pytest.mark.parametrize(("c", "spatial", "seed"), [(3, (7, 6, 5), 0), (4, (9, 8), 1), (4, (5, 6, 4), 2),
                                                    (3, (11, 10), 3)])
def test_the_class_mean_against_a_voxel_loop(c, spatial, seed):
    rng = np.random.default_rng(seed)
    p = _softmax(rng, c, spatial)
    want, per = brute_force_class_mean(p)
    q = case_expected_dice(p, False)
    np.testing.assert_allclose(q.per_class[0], per, rtol=1e-6)
    assert q.foreground.shape == (1,) and q.foreground[0] == pytest.approx(want, rel=1e-6)
    assert q.foreground[0] == pytest.approx(float(np.mean(q.per_class[0])), abs=1e-15)  # the mean of the columns


@pytest.mark.parametrize("c", [3, 4])
def test_a_class_the_segmentation_does_not_hold(c):
    """Class ``c - 1`` is never the argmax: with some probability its estimate is ``prod (1 - p)`` (the loop above),
    with none at all it is 1, as ``class_dice`` scores a class absent from the segmentation and the reference."""
    rng = np.random.default_rng(c)
    p = _softmax(rng, c, (8, 9, 4)).astype(np.float64)
    p[-1] = np.minimum(p[-1], 0.2 * p[:-1].max(axis=0))  # never the largest
    p /= p.sum(axis=0, keepdims=True)
    p = p.astype(np.float32)
    seg = p.argmax(axis=0)
    assert not (seg == c - 1).any()
    want, per = brute_force_class_mean(p)
    q = case_expected_dice(p, False)
    want_none = float(np.exp(np.log1p(-p[-1].astype(np.float64)).sum()))
    assert q.per_class[0, -1] == pytest.approx(want_none, rel=1e-6) == pytest.approx(per[-1], rel=1e-6)
    assert q.foreground[0] == pytest.approx(want, rel=1e-6)
    # no probability anywhere: 1, what class_dice gives a class absent from prediction and target
    p[-1] = 0.0
    p /= p.sum(axis=0, keepdims=True)
    q = case_expected_dice(p, False)
    target = p.argmax(axis=0)  # a reference without the class
    assert class_dice(p.argmax(axis=0), target, c)[-1] == 1.0
    assert q.per_class[0, -1] == 1.0
    # the metric's soft Dice of an empty segmentation with some probability is 0: kept for merged_foreground
    p2 = _softmax(rng, c, (8, 9, 4))
    p2[-1] *= 0.01
    p2 /= p2.sum(axis=0, keepdims=True)
    if not (p2.argmax(axis=0) == c - 1).any():
        assert case_expected_dice(p2, False, "merged_foreground").per_class[0, -1] == 0.0
        want_none = float(np.exp(np.log1p(-p2[-1].astype(np.float64)).sum()))
        assert case_expected_dice(p2, False).per_class[0, -1] == pytest.approx(want_none, rel=1e-6) > 0.0


def test_a_class_only_tied_for_the_largest_probability_is_not_segmented():
    """On a tie the segmentation takes the lower class (as ``argmax``): class 2, tied with class 1 on some voxels and
    below it elsewhere, is not segmented and scores ``prod (1 - p_2)``; class 1 tied with the background likewise."""
    p = np.zeros((3, 6, 6), np.float32)
    p[:, :3] = np.array([0.2, 0.4, 0.4], np.float32)[:, None, None]  # class 1 and 2 tied: class 1
    p[:, 3:] = np.array([0.7, 0.2, 0.1], np.float32)[:, None, None]
    want, per = brute_force_class_mean(p)
    q = case_expected_dice(p, False)
    want_none = 0.6 ** 18 * 0.9 ** 18  # 18 voxels at 0.4, 18 at 0.1
    assert q.per_class[0, 1] == pytest.approx(want_none, rel=1e-5) and per[1] == pytest.approx(want_none, rel=1e-5)
    assert q.foreground[0] == pytest.approx(want, rel=1e-6)
    p = np.full((3, 5, 5), 0.0, np.float32)
    p[0], p[1] = 0.5, 0.5  # class 1 tied with the background everywhere: nothing segmented
    q = case_expected_dice(p, False)
    assert q.per_class[0].tolist() == [pytest.approx(0.5 ** 25), 1.0]  # class 2: no probability at all
    assert q.foreground[0] == pytest.approx((0.5 ** 25 + 1) / 2) == pytest.approx(brute_force_class_mean(p)[0])


def test_a_confident_model_that_segments_a_class_absent_from_the_case_scores_about_one():
    """The common case the mean over classes must not punish: a class missing from the case, which the model gives
    tiny float32 probabilities everywhere (the soft Dice of an empty mask would be 0: a perfect case at 2/3)."""
    seg = np.zeros((12, 12, 12), np.int64)
    seg[2:6, 2:6, 2:6] = 1
    seg[7:10, 7:10, 7:10] = 2
    p = np.full((4, *seg.shape), 1e-6, np.float32)
    for k in range(3):
        p[k][seg == k] = 1 - 3e-6
    q = case_expected_dice(p, False)
    dice = class_dice(seg, seg, 4)  # class 3 absent from both maps: 1
    assert dice.tolist() == [1.0, 1.0, 1.0]
    # class 3's expected volume is 1728 x 1e-6 = 0.0017 voxels: absent with probability (1 - 1e-6) ** 1728
    assert q.per_class[0, -1] == pytest.approx((1 - 1e-6) ** 1728, rel=1e-5) and q.per_class[0].min() > 0.998
    assert q.foreground[0] > 0.999


def test_a_structure_the_segmentation_missed_scores_near_zero():
    """The failure the estimate must show: the model gives a structure 0.3 on 40 voxels (an expected volume of 12
    voxels) but never segments it, the reference holds it and ``dice`` is 0. Its estimate is ``0.7 ** 40`` (about
    6e-7), not the 0.7 that treating the voxels as one region (``1 - max p``) would claim."""
    target = np.zeros((10, 10, 10), np.int64)
    target[2:4, 2:6, 2:7] = 1  # 40 voxels
    p = np.zeros((2, *target.shape), np.float32)
    p[1][target == 1] = 0.3
    p[0] = 1 - p[1]
    pred = p.argmax(axis=0)
    assert not pred.any() and class_dice(pred, target, 2).tolist() == [0.0]
    q = case_expected_dice(p, False)
    assert q.foreground[0] == pytest.approx(0.7 ** 40, rel=1e-5) and q.foreground[0] < 1e-6


def test_the_probability_of_no_voxel_over_chunks_and_at_the_edges():
    """``prod (1 - p)`` summed as logs over chunks equals the product multiplied voxel by voxel; a voxel of
    probability 1 (or above it by the tolerance of the checks) makes it 0, a volume of small probabilities does not
    underflow to 0 as a float32 product would."""
    import torch

    from monai_unc.metrics.quality import _probability_none as _of_torch

    def _probability_none(p, chunk=1 << 22):  # the one formula lives in metrics.quality (review 68), on tensors
        return _of_torch(torch.from_numpy(p), False, chunk)

    rng = np.random.default_rng(7)
    p = (0.05 * rng.random(1000)).astype(np.float32)
    want = 1.0
    for v in p.astype(np.float64):
        want *= 1.0 - v
    for chunk in (1, 7, 1000, 1 << 22):
        assert _probability_none(p, chunk) == pytest.approx(want, rel=1e-10)
    assert _probability_none(np.array([0.2, 1.0, 0.1], np.float32)) == 0.0
    assert _probability_none(np.array([0.2, 1.0004, 0.1], np.float32)) == 0.0
    assert _probability_none(np.zeros(5, np.float32)) == 1.0
    tiny = np.full(1 << 20, 1e-7, np.float32)  # expected volume 0.1 voxel
    assert np.prod(1 - tiny) < 0.91 and _probability_none(tiny, 1 << 16) == pytest.approx(np.exp(-0.1048576), rel=1e-4)


def test_two_classes_unchanged():
    """With two classes the mean over the one class is the merged foreground (up to the rounding of ``p_1`` against
    ``1 - p_0``) whenever the segmentation holds foreground."""
    rng = np.random.default_rng(5)
    for spatial in ((9, 8, 7), (16, 12)):
        p = _softmax(rng, 2, spatial)
        assert (p.argmax(axis=0) == 1).any()
        new = case_expected_dice(p, False)
        old = case_expected_dice(p, False, "merged_foreground")
        assert new.foreground[0] == pytest.approx(float(old.foreground[0]), rel=1e-6)
        np.testing.assert_allclose(new.per_class, old.per_class, rtol=1e-12)


def test_the_documented_example_of_two_classes_the_model_cannot_tell_apart():
    """docs/triage.md: ``p = 0.55 / 0.45`` on every foreground voxel, a reference whose foreground is class 1 but for
    one face of class 2: ``dice`` 0.48 (``dice_1`` 0.96, ``dice_2`` 0). The merged foreground said 0.96, centred on
    another quantity; the mean over the classes, 0.35, is nearer the case's ``dice``: class 2, never segmented, has
    0.45 on 1728 voxels, an expected volume of 778 voxels, so the reference holds it with probability near 1 and its
    expected Dice is about 0 (``0.55 ** 1728``), as its real ``dice_2``."""
    seg = np.zeros((20, 20, 20), np.int64)
    seg[4:16, 4:16, 4:16] = 1
    target = seg.copy()
    target[4:16, 4:16, 4] = 2  # one face of the cube: class 2
    p = np.zeros((3, *seg.shape), np.float32)
    p[0][seg == 0] = 0.98
    p[1][seg == 0], p[2][seg == 0] = 0.01, 0.01
    p[1][seg == 1], p[2][seg == 1] = 0.55, 0.45
    pred = p.argmax(axis=0)
    d = class_dice(pred, target, 3)
    dice = float(np.mean(d))
    assert d[0] == pytest.approx(0.96, abs=0.01) and d[1] == 0.0 and dice == pytest.approx(0.48, abs=0.01)
    merged = float(case_expected_dice(p, False, "merged_foreground").foreground[0])
    mean = float(case_expected_dice(p, False).foreground[0])
    assert merged == pytest.approx(0.96, abs=0.005)  # the former estimate: another quantity
    q = case_expected_dice(p, False).per_class[0]
    assert q[0] == pytest.approx(0.69, abs=0.005) and q[1] < 1e-300  # the numbers of the docs
    assert mean == pytest.approx(0.35, abs=0.005)
    assert abs(mean - dice) < 0.15 < 0.45 < abs(merged - dice)
    assert mean == pytest.approx(brute_force_class_mean(p)[0], rel=1e-6)


def test_the_estimate_must_fit_the_kind_of_probabilities():
    p = np.full((3, 4, 4), 1 / 3, np.float32)
    with pytest.raises(ValueError, match="estimate must be one of"):
        case_expected_dice(p, False, "region_mean")
    with pytest.raises(ValueError, match="estimate must be one of"):
        case_expected_dice(p, True, "class_mean")
    regions = np.full((2, 4, 4), 0.7, np.float32)
    np.testing.assert_array_equal(case_expected_dice(regions, True).foreground,
                                  case_expected_dice(regions, True, "region_mean").foreground)


# ------------------------------------------------------------------------------------------------ the referral rule
DICE = (0.9, 0.7, 0.85, 0.95, 0.6, 0.88, 0.92, 0.8, 0.75, 0.93)
EST = (0.92, 0.9, 0.86, 0.97, 0.9, 0.9, 0.93, 0.85, 0.8, 0.95)


def _rule(estimate="class_mean", num_classes=3, regions=None):
    scores = tuple(0.1 * (i + 1) for i in range(len(DICE)))
    risks = tuple(float(d < 0.8) for d in DICE)
    rec = CalibrationRecord(scores, DICE, risks, expected_dice=EST, expected_dice_estimate=estimate)
    res = risk_controlled_threshold(np.array(scores), np.array(risks), 0.9, 0.5, method="sgr",
                                    n_candidates=rec.n_candidates, sequence=rec.sequence)
    return ReferralRule("predictive_entropy_fg_mean", res.threshold, res.feasible, 0.9, 0.5, "sgr", "failure", 0.8,
                        scores, tuple(f"c{i}" for i in range(len(DICE))), bound=res.bound, coverage=res.coverage,
                        observed_risk=res.risk, n_candidates=res.n_candidates, num_classes=num_classes,
                        regions=regions, record=rec)


def _redigest(d):
    d = dict(d)
    d.pop("digest", None)
    d["digest"] = rule_digest(d)
    return d


def test_a_new_rule_records_its_estimate_in_format_version_5():
    assert RULE_VERSION >= 5  # 6: a rule certified with LTT's binomial p-value (review 66)
    rule = _rule()
    d = json_safe(rule.to_json())
    assert d["format_version"] == 5 and d["calibration"]["expected_dice_estimate"] == "class_mean"
    back = ReferralRule.from_json(d, check_digest=True)
    assert back == rule and back.expected_dice_estimate == "class_mean"
    assert "merged foreground" not in back.interval_statement()


def test_a_rule_without_the_field_holds_merged_foreground_estimates_and_says_so():
    """A rule certified before (``format_version`` 3 or 4, no field): its calibration estimates are of the merged
    foreground, and so are those triage computes for its new cases (the interval keeps its guarantee, the monitoring
    store keeps one quantity per rule); its interval statement says so once, for more than two classes."""
    d = json_safe(_rule().to_json())
    del d["calibration"]["expected_dice_estimate"]
    d["format_version"] = 3
    old = ReferralRule.from_json(_redigest(d), check_digest=True)
    assert old.record.expected_dice_estimate is None and old.expected_dice_estimate == "merged_foreground"
    assert old.format_version == 3 and json_safe(old.to_json()) == _redigest(d)  # written back as it was read
    text = old.interval_statement()
    assert text.count("merged foreground") == 1 and "certify the rule again" in text
    assert "merged foreground" in old.interval_statement(mismatch=["num_samples"])
    # two classes: the merged foreground is the class, nothing to say
    two = dataclasses.replace(old, num_classes=2)
    assert "merged foreground" not in two.interval_statement()
    # the estimate triage computes for a new case of such a rule is the merged foreground
    rng = np.random.default_rng(7)
    p = _softmax(rng, 3, (6, 7, 5))
    got = case_expected_dice(p, False, old.expected_dice_estimate)
    np.testing.assert_array_equal(got.foreground, case_expected_dice(p, False, "merged_foreground").foreground)
    assert got.foreground[0] != pytest.approx(float(case_expected_dice(p, False).foreground[0]), abs=1e-6)
    # a region rule without the field: the former mean over the regions (tests/evaluation/
    # test_expected_dice_region_mean.py)
    reg = _rule(estimate=None, num_classes=2, regions={"a": [1], "b": [2]})
    assert reg.expected_dice_estimate == "region_mean_soft" and reg.format_version in (3, 4)


@pytest.mark.parametrize(("edit", "match"), [
    (lambda d: d["calibration"].pop("expected_dice_estimate"), "expected_dice_estimate.*edited or corrupted"),
    (lambda d: d.__setitem__("format_version", 4), "expected_dice_estimate.*edited or corrupted"),
    (lambda d: d["calibration"].__setitem__("expected_dice_estimate", "merged_foreground"),
     "expected_dice_estimate.*edited or corrupted"),
    (lambda d: d["calibration"].__setitem__("expected_dice_estimate", "median"),
     "expected_dice_estimate' must be one of"),
    (lambda d: d["calibration"].__setitem__("expected_dice_estimate", ["class_mean"]),
     "expected_dice_estimate' must be str"),
    (lambda d: d["calibration"].__setitem__("expected_dice_estimate", "region_mean"),
     "expected_dice_estimate.*edited or corrupted|not an estimate of a class-based rule"),
])
def test_the_field_is_untrusted_input(edit, match):
    d = json_safe(_rule().to_json())
    edit(d)
    with pytest.raises(ValueError, match=match):
        ReferralRule.from_json(_redigest(d), check_digest=True)


def test_the_field_is_covered_by_the_digest():
    d = json_safe(_rule().to_json())
    d["calibration"]["expected_dice_estimate"] = "merged_foreground"
    d["format_version"] = 4  # consistent otherwise: only the digest tells the edit
    with pytest.raises(ValueError, match="digest"):
        ReferralRule.from_json(d, check_digest=True)
    ReferralRule.from_json(_redigest(d), check_digest=True)  # a digest recomputed by whoever edited it: another rule


def test_the_estimate_must_fit_the_rule():
    with pytest.raises(ValueError, match="not an estimate of a region-based rule"):
        _rule(estimate="class_mean", num_classes=2, regions={"a": [1], "b": [2]})
    with pytest.raises(ValueError, match="not an estimate of a class-based rule"):
        _rule(estimate="region_mean")
    with pytest.raises(ValueError, match="expected_dice_estimate must be one of"):
        CalibrationRecord((0.1,), (0.9,), (0.0,), expected_dice=(0.9,), expected_dice_estimate="mean")


def test_a_rule_without_estimates_records_what_triage_computes():
    """Without probabilities no calibration estimate is recorded, but triage computes new cases' estimates all the
    same (when they have probabilities): the rule says which, read back as written."""
    rule = dataclasses.replace(_rule(), record=dataclasses.replace(_rule().record, expected_dice=None))
    d = json_safe(rule.to_json())
    assert d["format_version"] == 5 and d["calibration"]["expected_dice_estimate"] == "class_mean"
    assert "expected_dice" not in d["calibration"]
    back = ReferralRule.from_json(d, check_digest=True)
    assert back.expected_dice_estimate == "class_mean" and back.expected_dice_interval([0.9]) is None


# ------------------------------------------------------------------------------ evaluate, certify, triage, triage again
def _three_class_predictions(src, dst):
    """The toy predictions with the foreground split into classes 1 and 2 (``0.7 p`` and ``0.3 p``: class 2 is never
    segmented; the labels hold none of it either), the segmentation and entropy maps kept."""
    import shutil

    import nibabel as nib

    shutil.copytree(src, dst)
    for f in sorted(dst.glob("*_probs.nii.gz")):
        img = nib.load(f)
        a = np.asarray(img.dataobj).astype(np.float64)
        b = np.concatenate([a[..., :1], 0.7 * a[..., 1:], 0.3 * a[..., 1:]], axis=-1)
        nib.save(nib.Nifti1Image(b.astype(np.float32), img.affine), f)
        seg = f.name.replace("_probs", "_seg")
        nib.save(nib.Nifti1Image(b.argmax(axis=-1).astype(np.uint8), img.affine), dst / seg)


@pytest.fixture(scope="module")
def three_classes(tmp_path_factory):
    import warnings

    from monai_unc import cli
    from monai_unc.data.cohorts import write_toy_cohort

    root = tmp_path_factory.mktemp("expdice")
    toy = write_toy_cohort(root / "toy", n_cases=10, shape=(10, 10, 10), seed=2)
    preds = root / "three"
    _three_class_predictions(toy["predictions"], preds)
    ev = root / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(["evaluate", "-l", str(toy["labels"]), "-p", str(preds), "-o", str(ev), "--no-spatial",
                         "--num-classes", "3", "--target-risk", "0.5", "--delta", "0.2", "-q"]) == 0
    return preds, ev


def _column(csv_path, column):
    import csv

    with open(csv_path, newline="") as f:
        return {r["case"]: float(r[column]) for r in csv.DictReader(f)}


def _estimates(preds, estimate):
    import nibabel as nib

    out = {}
    for f in sorted(preds.glob("*_probs.nii.gz")):
        p = np.moveaxis(np.asarray(nib.load(f).dataobj, dtype=np.float32), -1, 0)
        out[f.name[: -len("_probs.nii.gz")]] = float(case_expected_dice(p, False, estimate).foreground[0])
    return out


def test_evaluate_and_triage_compute_the_rule_s_estimate(three_classes, tmp_path):
    import warnings

    from monai_unc.evaluation.triage import run_triage

    preds, ev = three_classes
    mean, merged = _estimates(preds, "class_mean"), _estimates(preds, "merged_foreground")
    assert all(mean[c] != pytest.approx(merged[c], rel=1e-3, abs=1e-12) for c in mean)  # two quantities
    assert sum(abs(mean[c] - merged[c]) > 0.05 for c in mean) >= 2
    got = _column(ev / "metrics.csv", "expected_dice")
    assert got.keys() == mean.keys() and all(got[c] == pytest.approx(mean[c], rel=1e-9) for c in got)
    rule = ReferralRule.load(ev / "referral_rule.json")
    assert rule.format_version == 5 and rule.expected_dice_estimate == "class_mean"
    assert rule.record.expected_dice == tuple(got[c] for c in rule.calibration_cases)
    out = tmp_path / "triage"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_triage(preds, rule, out, allow_mismatch=True)
    tri = _column(res.paths["csv"], "expected_dice")
    assert all(tri[c] == pytest.approx(mean[c], rel=1e-9) for c in tri)
    import json

    assert json.loads((out / "triage.json").read_text())["expected_dice_interval"]["estimate"] == "class_mean"

    # the same rule as one certified before the field: merged-foreground estimates, computed for the new cases too;
    # triaged into the same folder, the rows of the other estimate are not resumed
    d = json_safe(rule.to_json())
    d.pop("signature", None)
    del d["calibration"]["expected_dice_estimate"]
    d["format_version"] = 4 if any(v is None for v in rule.record.scores) else 3
    old = ReferralRule.from_json(_redigest(d), check_digest=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_triage(preds, old, out, allow_mismatch=True)
    tri = _column(res.paths["csv"], "expected_dice")
    assert all(tri[c] == pytest.approx(merged[c], rel=1e-9) for c in tri)
    summary = json.loads((out / "triage.json").read_text())
    assert summary["expected_dice_interval"]["estimate"] == "merged_foreground"
    assert "merged foreground" in summary["expected_dice_interval"]["statement"]


def test_state_of_an_earlier_version_drops_its_expected_dice(tmp_path):
    """Found by review: rows.json of an earlier version holds merged-foreground estimates; a rule certified from it
    (certify_referral_rule / certify_and_triage on load_evaluation's state) recorded them as "class_mean"."""
    import json
    import warnings

    from monai_unc.evaluation.cohort import CohortState

    rows = [{"case": "a", "dice": 0.9, "expected_dice": 0.8}, {"case": "b", "dice": 0.7, "expected_dice": 0.6}]
    CohortState(3, 240, rows=[dict(r) for r in rows]).save(tmp_path)
    meta = json.loads((tmp_path / "rows.json").read_text())
    assert meta["expected_dice_estimate"] == "class_mean"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["expected_dice"] for r in CohortState.load(tmp_path).sorted_rows()] == [0.8, 0.6]
    del meta["expected_dice_estimate"]  # as the last release wrote it
    (tmp_path / "rows.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="expected_dice values are dropped"):
        old = CohortState.load(tmp_path)
    assert all("expected_dice" not in r for r in old.rows) and [r["dice"] for r in old.sorted_rows()] == [0.9, 0.7]
    meta["expected_dice_estimate"] = "region_mean"  # edited: not what an evaluation of classes computes
    (tmp_path / "rows.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="expected_dice_estimate"):
        CohortState.load(tmp_path)
