"""Deployment triage (``monai_unc.evaluation.triage``, ``monai-unc triage``, ``referral_rule.json``).

Unit tests check each piece against an independent reference (numpy brute force, hand-worked cases); the end-to-end
tests certify a rule on a labelled toy cohort A (``evaluate --target-risk``), triage an unlabelled cohort B with it,
and only then read B's labels to check the decisions.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import json
import math
import re
import shutil
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import monai_unc.evaluation.triage.runner as triage_mod
from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, evaluate_case, run_evaluate
from monai_unc.evaluation.triage import (
    IMAGE_FEATURES,
    RULE_FILE,
    FingerprintMismatch,
    ImageReference,
    ReferralRule,
    case_score_columns,
    compare_fingerprints,
    image_statistics,
    parse_score_column,
    prediction_fingerprint,
    run_triage,
)
from monai_unc.io import LoadedCase
from monai_unc.workflows.infer import InferSettings, check_run_settings
from tests._argv import with_options
from tests._paths import ROOT
from tests._ranks import free_port
from tests._shared import once_per_session

SCORE = "predictive_entropy_fg_mean"


# ------------------------------------------------------------------------------------------------ case scores
def _box_means(u: np.ndarray, k: int) -> float:
    """Largest mean over all k-voxel boxes (clipped to the volume when it is smaller), by brute force."""
    ks = [min(k, n) for n in u.shape]
    best = -np.inf
    for start in np.ndindex(*[n - kk + 1 for n, kk in zip(u.shape, ks)]):
        sl = tuple(slice(s, s + kk) for s, kk in zip(start, ks))
        best = max(best, float(u[sl].mean()))
    return best


@pytest.mark.parametrize("shape", [(9, 8, 7), (11, 10)])
def test_case_score_columns_against_brute_force(shape):
    rng = np.random.default_rng(0)
    u = rng.random(shape).astype(np.float32)
    seg = (rng.random(shape) > 0.6).astype(np.int64) * rng.integers(1, 3, shape)
    cols = case_score_columns({"mutual_information": u}, seg, patch_size=4)
    assert cols["mutual_information_mean"] == pytest.approx(u.astype(np.float64).mean(), rel=1e-12)
    assert cols["mutual_information_fg_mean"] == pytest.approx(u[seg > 0].astype(np.float64).mean(), rel=1e-12)
    assert cols["mutual_information_patch_mean"] == pytest.approx(_box_means(u.astype(np.float64), 4), rel=1e-6)


def test_case_score_columns_empty_foreground_is_nan_with_warning():
    u = np.full((6, 6, 6), 0.3, dtype=np.float32)
    with pytest.warns(UserWarning):
        cols = case_score_columns({"predictive_entropy": u}, np.zeros((6, 6, 6), dtype=np.int64), 3)
    assert math.isnan(cols[SCORE]) and cols["predictive_entropy_mean"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="shape"):
        case_score_columns({"predictive_entropy": u}, np.zeros((6, 6, 5), dtype=np.int64), 3)


def test_case_score_columns_equal_evaluate_case_columns():
    """The triage score of a case is the column ``evaluate`` writes for the same maps, bit for bit."""
    rng = np.random.default_rng(1)
    shape = (12, 10, 9)
    probs = rng.dirichlet([1.0, 1.0, 1.0], size=shape).transpose(3, 0, 1, 2).astype(np.float32)
    seg = probs.argmax(0).astype(np.int64)
    maps = {"predictive_entropy": rng.random(shape).astype(np.float32),
            "one_minus_max_prob": rng.random(shape).astype(np.float32)}
    case = LoadedCase("c", seg.copy(), seg, probs, maps, np.eye(4), (1.0, 1.0, 1.0))
    row = evaluate_case(case, EvaluationConfig(spatial=False, patch_size=5)).row
    cols = case_score_columns(maps, seg, 5)
    assert cols == {k: row[k] for k in cols} and len(cols) == 6


def test_parse_score_column():
    assert parse_score_column("predictive_entropy_fg_mean") == ("predictive_entropy", "fg_mean")
    assert parse_score_column("mutual_information_mean") == ("mutual_information", "mean")
    assert parse_score_column("one_minus_max_prob_patch_mean") == ("one_minus_max_prob", "patch_mean")
    for bad in ("dice", "entropy_mean", "predictive_entropy_sum"):
        with pytest.raises(ValueError, match="score column"):
            parse_score_column(bad)


# ------------------------------------------------------------------------------------------------ image statistics
def test_image_statistics_against_numpy():
    rng = np.random.default_rng(2)
    img = np.zeros((2, 8, 9, 7), dtype=np.float32)
    img[0, 2:6, 1:8, 1:5] = rng.normal(3, 1, (4, 7, 4))
    img[1, 3:7, 2:6, 2:6] = rng.normal(-1, 2, (4, 4, 4))
    region = (img != 0).any(0)
    got = image_statistics(img)
    want = []
    for c in range(2):
        v = np.sort(img[c][region].astype(np.float64))
        # percentiles by hand: linear interpolation between order statistics (numpy's default definition)
        q = [v[int(np.floor(p * (v.size - 1)))] + (p * (v.size - 1) % 1) *
             (v[min(int(np.floor(p * (v.size - 1))) + 1, v.size - 1)] - v[int(np.floor(p * (v.size - 1)))])
             for p in (0.01, 0.5, 0.99)]
        want += [v.sum() / v.size, np.sqrt(((v - v.mean()) ** 2).mean()), *q]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert got.shape == (10,)
    # an all-zero image uses every voxel; NaN is refused
    np.testing.assert_array_equal(image_statistics(np.zeros((1, 3, 3, 3))), np.zeros(5))
    with pytest.raises(ValueError, match="NaN"):
        image_statistics(np.full((1, 2, 2, 2), np.nan))


def test_image_reference_median_mad_and_floor():
    rng = np.random.default_rng(3)
    stats = rng.normal(0, 1, (9, 5)) * np.array([1, 0.5, 0.1, 1, 2]) + np.array([10, 2, 1, 9, 20])
    ref = ImageReference.fit(stats, z_max=4.0)
    med = np.array([sorted(stats[:, j])[4] for j in range(5)])  # 9 cases: the 5th order statistic
    mad = np.array([sorted(np.abs(stats[:, j] - med[j]))[4] for j in range(5)])
    spread = sorted(stats[:, 4] - stats[:, 2])[4]
    np.testing.assert_allclose(ref.median, med)
    np.testing.assert_allclose(ref.scale, np.maximum(1.4826 * mad, 0.02 * spread))
    assert ref.features == IMAGE_FEATURES and ref.n_cases == 9 and ref.z_max == 4.0
    x = med + 3 * np.asarray(ref.scale) * np.array([1, -1, 0, 0, 2])
    np.testing.assert_allclose(ref.z_scores(x), [3, 3, 0, 0, 6])
    # identical calibration images: MAD 0, the floor (2 % of the p01-p99 range) keeps the z-scores finite
    same = ImageReference.fit(np.tile([0.5, 0.2, 0.0, 0.5, 1.0], (4, 1)))
    np.testing.assert_allclose(same.scale, 0.02)
    assert same.z_scores(np.array([0.5, 0.2, 0.0, 0.5, 1.0])).max() == 0
    with pytest.raises(ValueError, match="channels"):
        ref.z_scores(np.zeros(10))
    with pytest.raises(ValueError, match="stats must be"):
        ImageReference.fit(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="z_max"):
        ImageReference.fit(stats, z_max=0)
    two = ImageReference.fit(np.c_[stats, stats + 1])
    assert two.features[:2] == ("c0_mean", "c0_std") and two.features[5] == "c1_mean"


# ------------------------------------------------------------------------------------------------ the rule
def _rule(scores, threshold, feasible=True, ref=None, fingerprint=None, n_undefined=0, **kw) -> ReferralRule:
    scores = tuple(sorted(float(s) for s in scores))
    return ReferralRule(score=SCORE, threshold=threshold, feasible=feasible, target_risk=0.2, delta=0.1,
                        method="sgr", risk="failure", failure_dice=0.8, calibration_scores=scores,
                        calibration_cases=tuple(f"c{i}" for i in range(len(scores) + n_undefined)),
                        n_undefined=n_undefined, bound=0.15 if feasible else 0.4, coverage=0.5, observed_risk=0.05,
                        n_candidates=20, num_classes=2, image_reference=ref, fingerprint=fingerprint or {}, **kw)


def _reference_decision(rule: ReferralRule, s: float, z: np.ndarray | None) -> tuple[str, set[str]]:
    """The rule written out case by case, for comparison."""
    codes = set()
    if not rule.feasible:
        codes.add("not_certified")
    if s != s:
        codes.add("undefined_score")
    else:
        lo, hi = min(rule.calibration_scores), max(rule.calibration_scores)
        if s < lo or s > hi:
            codes.add("outside_range")
        if rule.feasible and s > rule.threshold:
            codes.add("above_threshold")
    if z is not None and not np.isnan(z).any() and max(z) > rule.image_reference.z_max:
        codes.add("image_statistics")
    return ("review" if codes else "accept"), codes


_ORDER = ["not_certified", "undefined_score", "outside_range", "image_statistics", "above_threshold"]


@settings(max_examples=80, deadline=None)
@given(cal=st.lists(st.floats(0, 1), min_size=1, max_size=12),
       new=st.lists(st.one_of(st.floats(-0.2, 1.2), st.just(float("nan"))), min_size=1, max_size=12),
       q=st.floats(0, 1), feasible=st.booleans(), accept_all=st.booleans(), images=st.booleans(),
       seed=st.integers(0, 1000))
def test_apply_equals_the_rule_written_out(cal, new, q, feasible, accept_all, images, seed):
    cal_sorted = sorted(cal)
    thr = (math.inf if accept_all else float(np.quantile(cal_sorted, q))) if feasible else -math.inf
    ref, stats = None, None
    if images:
        rng = np.random.default_rng(seed)
        ref = ImageReference.fit(rng.normal(1, 0.1, (5, 5)) + np.arange(5))
        stats = rng.normal(1, 0.3, (len(new), 5)) + np.arange(5)
        stats[0] = np.nan  # a case without statistics: no image check
    rule = _rule(cal, thr, feasible, ref)
    got = rule.apply(new, stats)
    z = ref.z_scores(stats) if images else [None] * len(new)
    assert len(got) == len(new)
    for d, s, zz in zip(got, new, z):
        want, codes = _reference_decision(rule, s, zz)
        assert d.decision == want and d.accepted == (want == "accept")
        assert d.code == (min(codes, key=_ORDER.index) if codes else "accepted")
        assert len(d.reason.split("; ")) == max(len(codes), 1)
        if d.accepted:  # never accepted outside the certified region
            assert math.isfinite(s) and s <= thr and cal_sorted[0] <= s <= cal_sorted[-1]


def test_apply_hand_worked_reasons():
    ref = ImageReference.fit(np.tile([1.0, 0.5, 0.0, 1.0, 2.0], (5, 1)) + np.linspace(0, 0.04, 5)[:, None])
    rule = _rule([0.1, 0.2, 0.3, 0.4], 0.25, ref=ref)
    ok = [1.02, 0.52, 0.02, 1.02, 2.02]
    far = [1.02, 0.52, 0.02, 3.0, 2.02]
    d = rule.apply([0.2, 0.05, 0.35, 0.5, float("nan"), 0.2], [ok, ok, ok, ok, ok, far])
    assert [x.decision for x in d] == ["accept", "review", "review", "review", "review", "review"]
    assert d[0].reason == "score 0.2 <= threshold 0.25, in the calibration range"
    assert d[1].code == "outside_range" and "0.05 below the calibration range [0.1, 0.4]" in d[1].reason
    assert d[2].code == "above_threshold" and d[2].reason == "score 0.35 > threshold 0.25"
    assert d[3].code == "outside_range" and "above the calibration range" in d[3].reason
    assert "> threshold" in d[3].reason
    assert d[4].code == "undefined_score"
    assert d[5].code == "image_statistics" and "p50 z=" in d[5].reason
    assert [x.decision for x in rule.apply([0.2])] == ["accept"]  # no statistics given: no image check
    # not certified: everything to review; accept_all: only the range guards refer
    assert all(x.code == "not_certified" for x in _rule([0.1, 0.2], -math.inf, feasible=False).apply([0.1, 0.15]))
    d = _rule([0.1, 0.2], math.inf).apply([0.15, 0.25])
    assert [x.decision for x in d] == ["accept", "review"] and d[0].reason == "score 0.15, in the calibration range"
    with pytest.raises(ValueError, match="rows"):
        rule.apply([0.2, 0.3], [ok])


@pytest.mark.parametrize("threshold, feasible", [(0.25, True), (math.inf, True), (-math.inf, False)])
def test_rule_save_load_round_trip_strict_json(tmp_path, threshold, feasible):
    ref = ImageReference.fit(np.array([[1.0, 0.5, 0.0, 1.0, 2.0], [1.1, 0.6, 0.0, 1.1, 2.2]]))
    # a rule without a calibration record that accepts every score and had an undefined calibration score counted it
    # as accepted: refused when read (tests/evaluation/test_risk_control_undefined.py)
    rule = _rule([0.3, 0.1, 0.2], threshold, feasible, ref, {"producer": "monai-unc infer", "num_samples": 8},
                 n_undefined=0 if threshold == math.inf else 1, class_names=("background", "fg"))
    path = rule.save(tmp_path / "r" / RULE_FILE)
    text = path.read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert not list(path.parent.glob(".*partial*"))
    back = ReferralRule.load(path)
    assert back == rule
    d = json.loads(text)
    assert d["format_version"] == 1 and d["calibration"]["score_range"] == [0.1, 0.3]
    assert d["score"] == {"column": SCORE, "measure": "predictive_entropy", "aggregation": "fg_mean", "region": None,
                          "patch_size": 10, "map_source": "file"}
    assert d["threshold"] == (None if not math.isfinite(threshold) else threshold)
    assert d["accept_all"] == (threshold == math.inf)


def _mutate(d, path, value):
    *head, last = path
    for k in head:
        d = d[k]
    if value is KeyError:
        del d[last]
    else:
        d[last] = value


@pytest.mark.parametrize("path, value, msg", [
    (("threshold",), "high", "'threshold'"),
    (("target_risk",), 1.5, "target_risk"),
    (("format",), "something", "not a referral rule"),
    (("format_version",), 99, "format_version 99"),
    (("feasible",), KeyError, "field 'feasible' is missing"),
    (("calibration", "scores"), [0.3, 0.1], "sorted"),
    (("calibration", "cases"), ["a"], "calibration_cases"),
    (("score", "column"), "dice", "score column"),
    (("method",), "bonferroni", "method"),
    (("image_reference",), {"features": ["mean"], "median": [1.0], "scale": [0.0], "n_cases": 2, "z_max": 5},
     "scale must be positive"),
    (("fingerprint",), [], "fingerprint"),
])
def test_rule_load_names_the_bad_field(tmp_path, path, value, msg):
    d = _rule([0.1, 0.2], 0.15).to_json()
    _mutate(d, path, value)
    p = tmp_path / "rule.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=re.escape(msg)) as e:
        ReferralRule.load(p)
    assert str(p) in str(e.value)


def test_rule_load_missing_and_corrupt_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="referral rule not found"):
        ReferralRule.load(tmp_path / "nope.json")
    p = tmp_path / "bad.json"
    p.write_text('{"format": "monai-unc referral rule", ')
    with pytest.raises(ValueError, match="not valid JSON"):
        ReferralRule.load(p)
    p.write_text(json.dumps(_rule([0.1, 0.2], 0.15).to_json()).replace("0.15", "NaN"))
    with pytest.raises(ValueError, match="not valid JSON"):
        ReferralRule.load(p)
    p.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match="is not readable JSON: it is not UTF-8 text"):
        ReferralRule.load(p)


def test_rule_validation():
    with pytest.raises(ValueError, match="disagree"):
        _rule([0.1], -math.inf, feasible=True)
    with pytest.raises(ValueError, match="disagree"):
        _rule([0.1], 0.1, feasible=False)
    with pytest.raises(ValueError, match="region"):
        _rule([0.1], 0.1, region="tumour core")
    rule = _rule([0.1, 0.4], 0.3)
    assert rule.measure == "predictive_entropy" and rule.aggregation == "fg_mean" and rule.score_range == (0.1, 0.4)
    assert "at most 0.2" in rule.guarantee() and "exchangeable" in rule.guarantee()
    assert "every case is referred" in _rule([0.1], -math.inf, feasible=False).guarantee()


# ------------------------------------------------------------------------------------------------ fingerprints
def test_compare_fingerprints():
    a = {"producer": "monai-unc infer", "method": "mcdropout", "num_samples": 8}
    assert compare_fingerprints(a, dict(a)) == ("match", [])
    status, diffs = compare_fingerprints(a, {**a, "num_samples": 4, "roi": [64]})
    assert status == "mismatch" and diffs == [("num_samples", 8, 4), ("roi", None, [64])]
    assert compare_fingerprints({}, {"producer": "unknown"}) == ("unverified", [])
    status, diffs = compare_fingerprints({"producer": "unknown"}, a)
    assert status == "mismatch" and diffs[0] == ("producer", "unknown", "monai-unc infer")
    e = FingerprintMismatch(diffs)
    assert "--allow-mismatch" in str(e) and "\n" not in str(e) and e.differences == diffs


def test_prediction_fingerprint_nnunet_records(tmp_path):
    pred = tmp_path / "pred"
    (pred / "uncertainty").mkdir(parents=True)
    cfg = {"uncertainty_sources": ["folds", "mirroring"], "num_samples": 10, "dropout_p": None, "rate_in": {},
           "posthoc_dropout_after": [], "measures": ["predictive_entropy"], "segmentation_from": "logits",
           "seed": 3, "folds": 5, "mirror_axes": [0, 1, 2], "trainer_name": "nnUNetTrainer", "tile_step_size": 0.5}
    (pred / "uncertainty_config.json").write_text(json.dumps(cfg))
    for c, n in (("a", 40), ("b", 40)):
        (pred / "uncertainty" / f"{c}.json").write_text(json.dumps({"case": c, "num_samples": n,
                                                                    "mi_meaning": "epistemic"}))
    fp = prediction_fingerprint(pred, "nnunet")
    assert fp == {"producer": "nnunet-predict", "trainer": "nnUNetTrainer", "folds": 5, "method": "folds+mirroring",
                  "num_samples": 40, "mi_meaning": "epistemic", "dropout_p": None, "rate_in": {},
                  "posthoc_dropout_after": [], "measures": ["predictive_entropy"], "tile_step_size": 0.5,
                  "mirror_axes": [0, 1, 2], "segmentation_from": "logits", "temperature": None,
                  "activation": "softmax"}  # a region model records "sigmoid" (review 64)
    cfg["seed"] = 4  # another seed: the same predictive distribution
    (pred / "uncertainty_config.json").write_text(json.dumps(cfg))
    assert prediction_fingerprint(pred, "nnunet") == fp
    (pred / "uncertainty" / "b.json").write_text(json.dumps({"case": "b", "num_samples": 20}))
    assert prediction_fingerprint(pred, "nnunet")["num_samples"] == [20, 40]
    assert prediction_fingerprint(pred, "nnunet", case_ids=["a"])["num_samples"] == 40
    assert prediction_fingerprint(tmp_path, "nnunet") == {"producer": "unknown"}
    assert prediction_fingerprint(tmp_path, "monai-unc") == {"producer": "unknown"}
    with pytest.raises(ValueError, match="layout"):
        prediction_fingerprint(pred, "other")


@pytest.mark.slow
def test_prediction_fingerprint_of_real_infer_runs(tmp_path):
    """The fingerprint reads what ``monai-unc infer`` writes; another number of samples or method is a mismatch,
    another seed is not."""
    data = write_toy_cohort(tmp_path / "d", n_cases=2, shape=(12, 12, 12), predictions=False)
    import torch
    from monai.networks.nets import UNet

    spec = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1, "out_channels": 2,
            "channels": [4, 8], "strides": [2], "num_res_units": 0, "dropout": 0.2}
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in spec.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")

    def infer(out, *extra):
        argv = ["infer", "-i", str(data["images"]), "-o", str(tmp_path / out), "--network", json.dumps(spec),
                "--checkpoint", str(tmp_path / "net.pt"), "--device", "cpu", "-q", *extra]
        assert cli.main(argv) == 0
        return prediction_fingerprint(tmp_path / out)

    fp = infer("a", "--samples", "3")
    assert fp["producer"] == "monai-unc infer" and fp["method"] == "mcdropout" and fp["num_samples"] == 3
    assert fp["model"] == "network: UNet" and fp["checkpoints"] == [str((tmp_path / "net.pt").resolve())]
    assert fp["activation"] == "softmax" and fp["roi"] is None and fp["temperature"] is None
    assert fp["mi_meaning"] == "epistemic" and "seed" not in fp
    assert compare_fingerprints(fp, infer("b", "--samples", "3", "--seed", "7"))[0] == "match"
    status, diffs = compare_fingerprints(fp, infer("c", "--samples", "2"))
    assert status == "mismatch" and [d[0] for d in diffs] == ["num_samples"]
    status, diffs = compare_fingerprints(fp, infer("d", "--method", "softmax"))
    assert {d[0] for d in diffs} >= {"method", "num_samples", "measures"}


@pytest.mark.slow
def test_prediction_fingerprint_reads_the_recorded_temperature(tmp_path):
    """``infer`` records the temperature of a calibrated checkpoint at full precision in ``infer.json``; the
    fingerprint reads it back exactly. An older record (no ``temperature`` field: the values only in the model's
    description, rounded to 4 digits) still gives its temperature, parsed from the description."""
    data = write_toy_cohort(tmp_path / "d", n_cases=1, shape=(12, 12, 12), predictions=False)
    import torch
    from monai.networks.nets import UNet

    spec = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1, "out_channels": 2,
            "channels": [4, 8], "strides": [2], "num_res_units": 0}
    torch.manual_seed(0)
    temperature = torch.tensor([1.23456789, 0.87654321], dtype=torch.float32)
    net = UNet(**{k: v for k, v in spec.items() if k != "_target_"})
    torch.save({"state_dict": net.state_dict(), "temperature": temperature}, tmp_path / "calibrated.pt")
    out = tmp_path / "pred"
    argv = ["infer", "-i", str(data["images"]), "-o", str(out), "--network", json.dumps(spec), "--checkpoint",
            str(tmp_path / "calibrated.pt"), "--method", "softmax", "--device", "cpu", "-q"]
    assert cli.main(argv) == 0
    exact = [float(v) for v in temperature]
    doc = json.loads((out / "infer.json").read_text())
    assert doc["settings"]["temperature"] == exact
    assert doc["settings"]["model"] == "network: UNet (temperature [1.2346, 0.8765])"
    fp = prediction_fingerprint(out)
    assert fp["temperature"] == exact and exact != [1.2346, 0.8765]

    del doc["settings"]["temperature"]  # as written before the field existed
    (out / "infer.json").write_text(json.dumps(doc))
    assert prediction_fingerprint(out)["temperature"] == [1.2346, 0.8765]
    assert cli.main(argv) == 0  # the older record resumes (its model description carries the temperature)
    assert json.loads((out / "infer.json").read_text())["settings"]["temperature"] == exact


# ------------------------------------------------------------------------------------------------ end to end
def _stamp_infer_records(pred: Path, method: str = "mcdropout", samples: int = 8) -> None:
    """Give the toy cohort's stand-in predictions the records ``monai-unc infer`` writes (``infer.json`` through
    its own writer, and ``<case>.json``), as if they came from one infer run."""
    settings_ = InferSettings(model="network: UNet", method=method, samples=samples, roi=[16], overlap=0.25,
                              intensity="none", measures=["predictive_entropy"], seed=0, activation="softmax",
                              checkpoints=["/models/net.pt"])
    (pred / "infer.json").unlink(missing_ok=True)
    check_run_settings(pred, settings_, overwrite=True)
    for p in sorted(pred.glob("*_seg.nii.gz")):
        cid = p.name[: -len("_seg.nii.gz")]
        files = [f"{cid}_seg.nii.gz", f"{cid}_probs.nii.gz", f"{cid}_predictive_entropy.nii.gz"]
        rec = {"case": cid, "inputs": [], "files": files, "method": method, "num_samples": samples,
               "mi_meaning": "epistemic", "seconds": 0.0, "shape": [16, 16, 16]}
        (pred / f"{cid}.json").write_text(json.dumps(rec))


def _hashes(*folders: Path) -> dict[str, str]:
    out = {}
    for folder in folders:
        for p in sorted(Path(folder).rglob("*")):
            if p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _write_cohorts(root: Path) -> dict:
    """Cohort A (30 cases, evaluated into ``evalA`` with a certified rule) and cohort B (12 cases, unevaluated),
    written in ``root``; the paths of :func:`write_toy_cohort`'s folders, relative to ``root`` (JSON for
    :func:`once_per_session`)."""
    a = write_toy_cohort(root / "A", n_cases=30, shape=(16, 16, 16), seed=1)
    b = write_toy_cohort(root / "B", n_cases=12, shape=(16, 16, 16), seed=2)
    for d in (a, b):
        _stamp_infer_records(d["predictions"])
    ev = root / "evalA"
    argv = ["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev), "--images",
            str(a["images"]), "--no-spatial", "--target-risk", "0.4", "--delta", "0.2", "-q"]
    # the rule is signed with the key of a configuration folder beside the cohorts, not with the key of the worker
    # that happens to write them (each pytest-xdist worker has its own configuration folder): the command lines of
    # every worker trust it with --trusted-keys (the fixture's "trust")
    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore", UserWarning)
        mp.setenv("MONAI_UNC_CONFIG_DIR", str(root / "config"))
        assert cli.main(argv) == 0
    return {k: {name: str(p.relative_to(root)) for name, p in d.items()} for k, d in (("A", a), ("B", b))}


_COHORTS: dict[str, tuple[Path, dict]] = {}  # without pytest-xdist: the one computation of this process's session


@pytest.fixture(scope="session")
def cohorts(tmp_path_factory):
    """The toy cohorts A and B and A's evaluation, written once per test session (tests/report/test_viewer.py and
    tests/report/test_viewer_geometry.py import this fixture too, and pytest-xdist may run their tests on both
    workers: :func:`tests._shared.once_per_session`). The tests only read its folders (a test that changes an input
    copies it first: checked at the end); a fresh dict of the paths for each module that uses it. Its rule is signed
    with the key of ``<root>/config``: ``trust`` holds the options that trust it (``--trusted-keys`` its public
    key)."""
    key = str(tmp_path_factory.getbasetemp())  # the session (a pytester session inside it has a basetemp of its own)
    if key not in _COHORTS:
        _COHORTS[key] = once_per_session(tmp_path_factory, "triage_cohorts", _write_cohorts)
    root, rel = _COHORTS[key]
    ev = root / "evalA"
    before = _hashes(root)
    yield {"root": root, **{k: {name: root / p for name, p in d.items()} for k, d in rel.items()}, "eval": ev,
           "rule": ev / RULE_FILE, "trust": ("--trusted-keys", str(root / "config" / "signing_key.pub"))}
    assert _hashes(root) == before, "a test changed the shared cohorts: copy what you change"


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _triage_cli(cohorts, out: Path, pred: Path | None = None, *extra: str) -> int:
    b = cohorts["B"]
    return cli.main(with_options(["triage", "-p", str(pred or b["predictions"]), "--rule", str(cohorts["rule"]),
                                  "-o", str(out), "--images", str(b["images"]), "--cases", "2", "-q",
                                  *cohorts["trust"]], *extra))


@pytest.mark.slow
def test_certify_on_A_triage_B_then_check_with_B_labels(cohorts, tmp_path):
    a, b = cohorts["A"], cohorts["B"]
    # step 1: the rule evaluate wrote is the risk_control block of its summary, plus what triage needs
    summary = json.loads((cohorts["eval"] / "summary.json").read_text())
    rc = summary["risk_control"]
    rule = ReferralRule.load(cohorts["rule"])
    assert rc["feasible"] and rule.feasible and rule.threshold == rc["threshold"]
    assert (rule.score, rule.target_risk, rule.delta, rule.method, rule.risk_definition) == (
        SCORE, 0.4, 0.2, "sgr", "dice < 0.8")
    assert rule.n_calibration == 30 and rule.bound == rc["bound"] and rule.coverage == rc["calibration"]["coverage"]
    rows_a = _read_csv(cohorts["eval"] / "metrics.csv")
    defined = sorted(float(r[SCORE]) for r in rows_a if r[SCORE] != "nan")
    assert rule.calibration_scores == tuple(defined) and rule.n_undefined == 30 - len(defined)
    assert rule.score_range == (defined[0], defined[-1])
    assert rule.fingerprint == prediction_fingerprint(a["predictions"])
    assert rule.fingerprint["producer"] == "monai-unc infer" and rule.fingerprint["num_samples"] == 8
    assert rule.image_reference is not None and rule.image_reference.n_cases == 30
    # the rule applied to A's own scores reproduces evaluate's accepted cases (the range is inclusive)
    acc_a = [r["case"] for r, d in zip(rows_a, rule.apply([float(r[SCORE] or "nan") for r in rows_a])) if d.accepted]
    assert acc_a == rc["accepted"]

    # step 2: triage B without labels
    before = _hashes(b["predictions"], b["images"], b["labels"], cohorts["eval"])
    out = tmp_path / "triage"
    assert _triage_cli(cohorts, out) == 0
    assert _hashes(b["predictions"], b["images"], b["labels"], cohorts["eval"]) == before  # inputs untouched
    rows = _read_csv(out / "triage.csv")
    assert list(rows[0])[:4] == ["case", "score", "decision", "reason"]
    assert [r["case"] for r in rows] == [f"toy{i:03d}" for i in range(12)]
    tri = json.loads((out / "triage.json").read_text())
    assert not list(out.glob(".*partial*"))

    # only now read B's labels: evaluate B (same maps) and compare
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state_b, _, _ = run_evaluate(b["labels"], b["predictions"], tmp_path / "evalB", EvaluationConfig(spatial=False))
    by_id = {r["case"]: r for r in state_b.sorted_rows()}
    for r in rows:  # the triage score is evaluate's column, bit for bit
        want = by_id[r["case"]][SCORE]
        assert (r["score"] == "nan" and math.isnan(want)) or float(r["score"]) == want
    stats = [image_statistics(nib.load(b["images"] / f"{r['case']}.nii.gz").get_fdata()[None]) for r in rows]
    want = rule.apply([by_id[r["case"]][SCORE] for r in rows], stats)
    assert [r["decision"] for r in rows] == [d.decision for d in want]
    assert [r["reason"] for r in rows] == [d.reason for d in want]
    accepted = [r["case"] for r in rows if r["decision"] == "accept"]
    assert tri["accepted"] == accepted and tri["n_review"] == 12 - len(accepted) and 0 < len(accepted) < 12
    # the risk of the accepted cases: what the triage reports (the certificate) and what B's labels say
    risk = tri["accepted_risk"]
    assert risk["definition"] == "dice < 0.8" and risk["target"] == 0.4 and risk["certified"] is True
    assert risk["calibration_bound"] == rule.bound and "exchangeable" in risk["statement"]
    observed = float(np.mean([by_id[c]["dice"] < 0.8 for c in accepted]))
    print(f"B: accepted {len(accepted)} of 12, observed failure rate among them {observed:.3f} (target 0.4)")
    assert observed <= 0.4  # one draw: not the guarantee itself, but the rule must not be way off on exchangeable cases
    assert tri["fingerprint"]["status"] == "match" and tri["image_check"] == "applied"
    # the page: one row per case with its decision, the score distribution, overlays
    page = (out / "triage.html").read_text()
    got = dict(re.findall(r'data-case="([^"]+)" data-decision="(\w+)"', page))
    assert got == {r["case"]: r["decision"] for r in rows}
    assert 'id="fig-scores"' in page and page.count('id="fig-case-') == 2 and 'id="mismatch"' not in page
    assert (out / "figures" / "scores.png").is_file()


@pytest.mark.slow
def test_fingerprint_mismatch_is_refused_unless_allowed(cohorts, tmp_path, capsys):
    pred = tmp_path / "pred"
    shutil.copytree(cohorts["B"]["predictions"], pred)
    _stamp_infer_records(pred, method="mcdropout", samples=4)  # another number of samples
    out = tmp_path / "t"
    assert _triage_cli(cohorts, out, pred, "--cases", "0") == 2  # no case figure: the page's header is checked
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "num_samples: 4 (rule: 8)" in err and "--allow-mismatch" in err
    assert not (out / "triage.csv").exists() and not (out / "state").exists()
    with pytest.raises(FingerprintMismatch):
        run_triage(pred, cohorts["rule"], out)
    assert _triage_cli(cohorts, out, pred, "--allow-mismatch", "--cases", "0") == 0
    tri = json.loads((out / "triage.json").read_text())
    assert tri["fingerprint"]["status"] == "mismatch" and tri["fingerprint"]["allowed_mismatch"] is True
    assert tri["fingerprint"]["differences"] == [{"field": "num_samples", "rule": 8, "predictions": 4}]
    header = re.search(r"<header>(.*?)</header>", (out / "triage.html").read_text(), re.S).group(1)
    assert 'id="mismatch"' in header and "num_samples" in header


@pytest.mark.slow
def test_out_of_range_cases_are_referred_with_their_reason(cohorts, tmp_path):
    b = cohorts["B"]
    pred, images = tmp_path / "pred", tmp_path / "images"
    shutil.copytree(b["predictions"], pred)
    shutil.copytree(b["images"], images)
    rule = ReferralRule.load(cohorts["rule"])
    lo, hi = rule.score_range

    def rewrite(path: Path, f) -> None:
        img = nib.load(path)
        nib.save(nib.Nifti1Image(f(np.asarray(img.dataobj, dtype=np.float32)), img.affine), path)

    pe = "{}_predictive_entropy.nii.gz"
    # cases with a predicted foreground (a defined fg_mean score)
    ids = [p.name[:6] for p in sorted(pred.glob("*_seg.nii.gz")) if np.asarray(nib.load(p).dataobj).any()]
    low, high, shifted = ids[:3]
    # low: uncertainty far below every calibration case (it would pass the threshold): referred, not accepted
    rewrite(pred / pe.format(low), lambda u: u * (0.5 * lo / max(float(u.max()), 1e-6)))
    rewrite(pred / pe.format(high), lambda u: np.full_like(u, 2 * hi))  # above the range
    rewrite(images / f"{shifted}.nii.gz", lambda x: x * 25 + 10)  # another scanner / protocol
    out = tmp_path / "t"
    res = run_triage(pred, rule, out, images=images)
    by = {c["case"]: c for c in res.summary["cases"]}
    assert by[low]["score"] < lo <= rule.threshold
    assert by[low]["decision"] == "review" and by[low]["code"] == "outside_range"
    assert "below the calibration range" in by[low]["reason"]
    assert by[high]["decision"] == "review" and "above the calibration range" in by[high]["reason"]
    assert by[shifted]["decision"] == "review" and "image far from the calibration images" in by[shifted]["reason"]
    assert by[shifted]["image_z_max"] > rule.image_reference.z_max
    assert res.summary["reasons"]["outside_range"] >= 2
    # without images the image check is skipped, and the summary says so
    res2 = run_triage(pred, rule, tmp_path / "t2")
    assert res2.summary["image_check"].startswith("skipped") and res2.summary["notes"]
    assert "image" not in {c["case"]: c for c in res2.summary["cases"]}[shifted]["reason"]


@pytest.mark.slow
def test_interrupted_triage_resumes_and_a_new_rule_reuses_the_cases(cohorts, tmp_path, monkeypatch):
    b = cohorts["B"]
    reference = run_triage(b["predictions"], cohorts["rule"], tmp_path / "ref", images=b["images"])
    out = tmp_path / "t"
    real = triage_mod.triage_case
    calls: list[str] = []

    def interrupted(files, rule, **kwargs):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(files.case_id)
        return real(files, rule, **kwargs)

    monkeypatch.setattr(triage_mod, "triage_case", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_triage(b["predictions"], cohorts["rule"], out, images=b["images"])
    assert len(list((out / "state" / "cases").glob("*.json"))) == 5 and not (out / "triage.csv").exists()
    calls.clear()
    monkeypatch.setattr(triage_mod, "triage_case", lambda f, r, **k: calls.append(f.case_id) or real(f, r, **k))
    res = run_triage(b["predictions"], cohorts["rule"], out, images=b["images"])
    assert calls == [f"toy{i:03d}" for i in range(5, 12)]  # only the unfinished cases
    assert (out / "triage.csv").read_bytes() == (tmp_path / "ref" / "triage.csv").read_bytes()
    assert res.decisions == reference.decisions
    # another rule (same score) re-applies the saved rows; a changed input file is triaged again
    stricter = ReferralRule.load(cohorts["rule"])
    stricter.threshold = stricter.calibration_scores[2]
    calls.clear()
    res2 = run_triage(b["predictions"], stricter, out, images=b["images"])
    assert calls == [] and sum(d == "accept" for d in res2.decisions.values()) <= len(reference.summary["accepted"])
    pred = tmp_path / "pred"
    shutil.copytree(b["predictions"], pred)
    run_triage(pred, cohorts["rule"], tmp_path / "t3", images=b["images"])
    calls.clear()
    (pred / "toy003_seg.nii.gz").write_bytes((pred / "toy003_seg.nii.gz").read_bytes())  # new mtime / ctime
    run_triage(pred, cohorts["rule"], tmp_path / "t3", images=b["images"])
    assert calls == ["toy003"]


@pytest.mark.slow
def test_failed_case_is_reported_and_the_rest_is_done(cohorts, tmp_path, capsys):
    pred = tmp_path / "pred"
    shutil.copytree(cohorts["B"]["predictions"], pred)
    good = (pred / "toy005_probs.nii.gz").read_bytes()
    (pred / "toy005_probs.nii.gz").write_bytes(b"not a NIfTI file")
    out = tmp_path / "t"
    assert _triage_cli(cohorts, out, pred, "--cases", "0") == 1  # no case figure: not what is checked
    err = capsys.readouterr().err
    assert "case 'toy005' failed" in err and "1 case(s) failed" in err
    assert json.loads((out / "failures.json").read_text())["failures"][0]["case"] == "toy005"
    assert not (out / "triage.csv").exists() and len(list((out / "state" / "cases").glob("*.json"))) == 11
    (pred / "toy005_probs.nii.gz").write_bytes(good)
    assert _triage_cli(cohorts, out, pred, "--cases", "0") == 0 and not (out / "failures.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("content, msg", [
    (None, "referral rule not found"),
    ("{not json", "is not valid JSON"),
    (json.dumps({"format": "monai-unc referral rule", "format_version": 1}), "field 'score' is missing"),
])
def test_cli_rule_file_errors_are_one_line(cohorts, tmp_path, capsys, content, msg):
    rule = tmp_path / "rule.json"
    if content is not None:
        rule.write_text(content)
    b = cohorts["B"]
    code = cli.main(["triage", "-p", str(b["predictions"]), "--rule", str(rule), "-o", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and msg in err and err.startswith("monai-unc triage:")
    assert not (tmp_path / "t" / "triage.csv").exists()


@pytest.mark.slow
def test_cli_output_inside_predictions_and_missing_folder_are_refused(cohorts, tmp_path, capsys):
    b = cohorts["B"]
    assert cli.main(["triage", "-p", str(b["predictions"]), "--rule", str(cohorts["rule"]), "-o",
                     str(b["predictions"] / "t"), *cohorts["trust"]]) == 2
    assert "inside the input folder" in capsys.readouterr().err
    assert cli.main(["triage", "-p", str(tmp_path / "none"), "--rule", str(cohorts["rule"]), "-o",
                     str(tmp_path / "t"), *cohorts["trust"]]) == 2
    assert "predictions folder not found" in capsys.readouterr().err


@pytest.mark.slow
def test_evaluate_rule_lifecycle(cohorts, tmp_path, capsys):
    """An infeasible target writes a rule that refers every case; evaluating again without a target removes the
    earlier rule; a failed evaluation leaves no rule."""
    a = cohorts["A"]
    ev = tmp_path / "ev"
    base = ["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev), "--no-spatial"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main([*base, "--target-risk", "0.01"]) == 0
    assert f"wrote {ev / RULE_FILE}" in capsys.readouterr().out
    rule = ReferralRule.load(ev / RULE_FILE)
    assert not rule.feasible and rule.threshold == -math.inf and rule.image_reference is None
    res = run_triage(cohorts["B"]["predictions"], ev / RULE_FILE, tmp_path / "t")
    assert res.summary["n_accepted"] == 0 and res.summary["reasons"]["not_certified"] == 12
    assert res.summary["image_check"].startswith("skipped")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main([*base, "-q"]) == 0
    assert not (ev / RULE_FILE).exists()


@pytest.mark.slow
def test_nnunet_layout(cohorts, tmp_path):
    """The same stand-in predictions in nnU-Net's layout (``<case>.nii.gz``, ``<case>.npz``,
    ``uncertainty/<case>_<measure>``) give the same scores as in monai-unc's."""
    src = cohorts["B"]["predictions"]
    pred = tmp_path / "nn"
    (pred / "uncertainty").mkdir(parents=True)
    for p in sorted(src.glob("*_seg.nii.gz")):
        cid = p.name[: -len("_seg.nii.gz")]
        shutil.copy(p, pred / f"{cid}.nii.gz")
        probs = np.asarray(nib.load(src / f"{cid}_probs.nii.gz").dataobj)  # (X, Y, Z, C)
        np.savez(pred / f"{cid}.npz", probabilities=np.moveaxis(probs, -1, 0).transpose(0, 3, 2, 1))
        shutil.copy(src / f"{cid}_predictive_entropy.nii.gz", pred / "uncertainty")
    rule = dataclasses.replace(ReferralRule.load(cohorts["rule"]), fingerprint={})
    a = run_triage(pred, rule, tmp_path / "a", layout="nnunet")
    b = run_triage(src, rule, tmp_path / "b", allow_mismatch=True)
    assert a.summary["fingerprint"]["status"] == "unverified" and a.summary["notes"]
    assert b.summary["fingerprint"]["status"] == "mismatch"
    assert [c["score"] for c in a.summary["cases"]] == [c["score"] for c in b.summary["cases"]]
    assert a.decisions == b.decisions
    with pytest.raises(FingerprintMismatch, match="producer"):
        run_triage(src, rule, tmp_path / "c")  # src has infer's records: a known producer against an unknown one


# ------------------------------------------------------------------------------------------------ torchrun
def _worker(rank: int, world: int, port: int, spec: dict) -> None:
    import os

    import torch

    from monai_unc.engine import destroy_dist_context, get_dist_context

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    calls: list[str] = []
    real = triage_mod.triage_case
    triage_mod.triage_case = lambda f, r, **k: calls.append(f.case_id) or real(f, r, **k)
    out = Path(spec["out"])
    with open(out / f"rank{rank}.log", "w") as log, contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
        ctx = get_dist_context()
        try:
            rc = cli.main(spec["argv"])
        finally:
            destroy_dist_context(ctx)
    (out / f"rank{rank}.json").write_text(json.dumps({"rc": rc, "calls": calls}))


@pytest.mark.slow
def test_two_gloo_ranks_equal_one_process(cohorts, tmp_path):
    import torch

    b = cohorts["B"]
    single = tmp_path / "single"
    assert _triage_cli(cohorts, single, None, "--cases", "0") == 0  # the reference tables (the ranks draw figures)
    port = free_port()  # not a port the kernel hands out to other processes meanwhile (tests/_ranks.py)
    dist_out = tmp_path / "dist"
    argv = ["triage", "-p", str(b["predictions"]), "--rule", str(cohorts["rule"]), "-o", str(dist_out / "t"),
            "--images", str(b["images"]), "--cases", "2", "-q", *cohorts["trust"]]
    dist_out.mkdir()
    torch.multiprocessing.start_processes(_worker, args=(2, port, {"out": str(dist_out), "argv": argv}), nprocs=2,
                                          join=True, start_method="fork")
    r0, r1 = (json.loads((dist_out / f"rank{r}.json").read_text()) for r in range(2))
    ids = [f"toy{i:03d}" for i in range(12)]
    assert r0["rc"] == r1["rc"] == 0 and r0["calls"] == ids[0::2] and r1["calls"] == ids[1::2]
    assert (dist_out / "t" / "triage.csv").read_bytes() == (single / "triage.csv").read_bytes()
    a, c = (json.loads(p.read_text()) for p in (dist_out / "t" / "triage.json", single / "triage.json"))
    assert a["cases"] == c["cases"] and a["accepted"] == c["accepted"]


# ------------------------------------------------------------------------------------------------ docs
@pytest.mark.slow
def test_docs_worked_example_prints_its_documented_output(tmp_path, monkeypatch, capsys):
    """The toy example of docs/triage.md runs as written and prints exactly the output shown there."""
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "triage.md").read_text()
    section = text.split("## Worked example", 1)[1].split("\n## ", 1)[0]
    code, output = re.search(r"```python\n(.*?)```\s*Output:\s*```\n(.*?)```", section, re.S).groups()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        exec(compile(code, "docs/triage.md", "exec"), {"__name__": "__docs__"})
    assert capsys.readouterr().out == output


# ------------------------------------------------------------------------------------------------ demo pieces
@pytest.mark.slow
def test_certify_and_triage_on_one_cohort(cohorts, tmp_path):
    """The demo's step: certify on part of an evaluated cohort, triage the rest from its files only."""
    from monai_unc.evaluation import CohortState
    from monai_unc.workflows.triage import certify_and_triage, format_triage

    a = cohorts["A"]
    state = CohortState.load(cohorts["eval"] / "state")
    ids = sorted(str(r["case"]) for r in state.rows)
    cal, new = ids[:24], ids[24:]
    rule, res, page = certify_and_triage(state, EvaluationConfig(spatial=False), a["predictions"], tmp_path / "t",
                                         cal, new, target_risk=0.4, delta=0.2, images=a["images"], n_overlays=1)
    assert rule.calibration_cases == tuple(cal) and sorted(res.decisions) == new and page.is_file()
    assert ReferralRule.load(tmp_path / "t" / RULE_FILE) == rule
    assert rule.fingerprint == prediction_fingerprint(a["predictions"], case_ids=cal)
    dice = {str(r["case"]): {"Dice": float(r["dice"])} for r in state.rows}
    lines = format_triage(rule, res, dice)
    assert lines[0].startswith("referral rule certified on 24 case(s): SGR, dice < 0.8 <= 0.4 w.p. 0.8; ")
    assert len(lines) == 3 + len(new) + 2 and lines[-2].startswith(f"triage of {len(new)} new case(s)")
    assert lines[-1].startswith("expected Dice interval (90%, conformal): estimate +/- ")
    table = {ln.split()[1]: ln for ln in lines[3:-2]}
    assert set(table) == set(new) and all(f"rule: {res.decisions[c]}" in table[c] for c in new)
    assert all(f"{dice[c]['Dice']:.3f}" in table[c] for c in new)
    with pytest.raises(ValueError, match="overlap"):
        certify_and_triage(state, EvaluationConfig(), a["predictions"], tmp_path / "u", cal, cal[:1], target_risk=0.4)
    # the conformal interval of the expected Dice: the calibration cases' estimates (metrics.csv) are recorded, the
    # quantile is the brute-force one, and every new case's interval is its estimate +/- that quantile
    rows = {str(r["case"]): r for r in state.rows}
    assert rule.record.expected_dice == tuple(rows[c]["expected_dice"] for c in cal)
    res_abs = sorted(abs(rows[c]["dice"] - rows[c]["expected_dice"]) for c in cal)
    q = res_abs[math.ceil(25 * 0.9) - 1]  # ceil((n + 1)(1 - alpha))-th smallest of n = 24
    assert rule.record.interval_quantile() == (q, 24)
    assert json.loads((tmp_path / "t" / RULE_FILE).read_text())["calibration"]["expected_dice_quantile"] == q
    for c in res.summary["cases"]:
        e = rows[c["case"]]["expected_dice"]
        assert c["expected_dice"] == pytest.approx(e)  # triage computes it as evaluate does
        assert (c["expected_dice_low"], c["expected_dice_high"]) == pytest.approx((max(e - q, 0), min(e + q, 1)))
    assert f"{q:.3f}" in lines[-1] and "a shifted case" in lines[-1]


def test_link_page(tmp_path):
    from monai_unc.report.triage import link_page

    report = tmp_path / "report" / "report.html"
    report.parent.mkdir()
    report.write_text("<html><body><header><h1>QC</h1></header><main></main></body></html>")
    target = tmp_path / "triage" / "triage.html"
    link_page(report, target, "Triage of new cases")
    text = report.read_text()
    assert '<a href="../triage/triage.html"' in text and text.index("triage.html") < text.index("</header>")
    link_page(report, target, "Triage of new cases")
    assert report.read_text() == text  # once
    bare = tmp_path / "bare.html"
    bare.write_text("<html><body><p>x</p></body></html>")
    link_page(bare, target, "t")
    assert bare.read_text().startswith('<html><body><p class="link"')
    bad = tmp_path / "bad.html"
    bad.write_text("plain text")
    with pytest.raises(ValueError, match="<body>"):
        link_page(bad, target, "t")


def test_triage_refuses_a_rule_its_output_would_replace(cohorts, tmp_path, capsys):
    """``triage --rule OUT/triage.json -o OUT`` used to exit 0 and replace the rule with its own output."""
    out = tmp_path / "out"
    out.mkdir()
    b = cohorts["B"]
    for name in ("triage.json", "triage.csv", "state/cases/toy000.json"):
        rule = out / name
        rule.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cohorts["rule"], rule)
        before = hashlib.sha256(rule.read_bytes()).hexdigest()
        with pytest.raises(ValueError, match="never overwritten"):
            run_triage(b["predictions"], rule, out)
        capsys.readouterr()
        assert cli.main(["triage", "-p", str(b["predictions"]), "--rule", str(rule), "-o", str(out), "-q",
                         *cohorts["trust"]]) == 2
        assert "never overwritten" in capsys.readouterr().err
        assert hashlib.sha256(rule.read_bytes()).hexdigest() == before
        rule.unlink()
    assert not list(out.rglob("*.csv")) and not (out / "triage.html").exists()


@pytest.mark.slow
def test_triage_records_into_the_monitoring_store(cohorts, tmp_path, capsys, monkeypatch):
    """``triage --monitor DB`` records the decisions; a store that cannot be opened is one line, exit status 2,
    before any work (found by hostile testing: it was found only once the whole cohort was triaged); a store lost
    between that check and the recording leaves the triage outputs written, and says so."""
    from monai_unc.monitoring import MonitorStore

    db = tmp_path / "monitor.db"
    capsys.readouterr()
    # no case figure (--cases 0): the store's records are checked, not the page
    assert _triage_cli(cohorts, tmp_path / "t1", None, "--monitor", str(db), "--site", "centre 1", "--cases", "0") == 0
    with MonitorStore(db, create=False) as store:
        rows = store.cases()
        assert len(rows) == 12 and {r["site"] for r in rows} == {"centre 1"} and store.verify().ok
        decisions = {r["case_id"]: r["decision"] for r in rows}
    summary = json.loads((tmp_path / "t1" / "triage.json").read_text())
    assert decisions == {c["case"]: c["decision"] for c in summary["cases"]}
    from monai_unc.monitoring import read_triage_run

    # each case's prediction digest: what tells a new scan reusing a case id from the same one
    digests = [c.prediction_sha256 for c in read_triage_run(tmp_path / "t1", site="centre 1").cases]
    assert all(d is not None and d.startswith("sha256:") for d in digests) and len(set(digests)) > 1
    for bad, named in (("postgresql://nobody@127.0.0.1:9/none", "cannot connect"), (str(tmp_path), "is a folder"),
                       (str(tmp_path / "missing" / "monitor.db"), "does not exist"),
                       (str(tmp_path / "t1" / "triage.csv"), "cannot open")):
        capsys.readouterr()
        rc = _triage_cli(cohorts, tmp_path / "t2", None, "--monitor", bad)
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and not (tmp_path / "t2" / "triage.csv").exists(), bad
        assert len(err) == 1 and "--monitor" in err[0] and named in err[0], (bad, err)
    import monai_unc.workflows.triage as triage_workflow

    monkeypatch.setattr(triage_workflow, "check_store", lambda db, output=None: None)  # the store lost after the check
    capsys.readouterr()
    rc = _triage_cli(cohorts, tmp_path / "t3", None, "--monitor", "postgresql://nobody@127.0.0.1:9/none", "--cases",
                     "0")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and (tmp_path / "t3" / "triage.csv").is_file() and (tmp_path / "t3" / "triage.json").is_file()
    assert len(err) == 1 and "the triage outputs are written to" in err[0] and "monitoring store" in err[0]


def test_triage_records_into_a_store_inside_its_new_output_folder(cohorts, tmp_path):
    """Found by hostile review: ``triage -o run --monitor run/monitor.db`` with ``run`` not created yet was refused
    before any work (the store's folder did not exist), though the triage creates it before recording, as it did."""
    from monai_unc.monitoring import MonitorStore

    out = tmp_path / "run"
    assert _triage_cli(cohorts, out, None, "--monitor", str(out / "monitor.db"), "--cases", "0") == 0
    with MonitorStore(out / "monitor.db", create=False) as store:
        assert len(store.cases()) == 12 and store.verify().ok


@pytest.mark.parametrize(("fields", "named"), [
    ({"risk": "1-dice"}, "method 'sgr' certifies the 0/1 risk"),  # the binomial bound of a continuous risk
    ({"n_candidates": -1}, "n_candidates"),
    ({"n_candidates": 2.5}, "n_candidates"),
    ({"n_candidates": True}, "n_candidates"),
])
def test_rule_fields_the_certificate_cannot_support_are_refused(fields, named):
    import dataclasses

    rule = _rule([0.1, 0.2, 0.3], 0.25)
    with pytest.raises(ValueError, match=named):
        dataclasses.replace(rule, **fields)
    assert dataclasses.replace(rule, risk="1-dice", method="ltt").risk == "1-dice"  # LTT bounds any risk in [0, 1]
