"""Deployment triage of region-based (multi-label sigmoid, BraTS-style) predictions.

Fixtures are written by hand in the output contract of ``monai-unc infer --activation sigmoid --regions brats``
(``<case>_seg`` 4D region masks ``(X, Y, Z, R)``, ``<case>_probs`` per-region probabilities, ``<case>_<measure>`` one
map per region, ``infer.json`` with ``multilabel`` and ``regions``), with 4-channel images (4D NIfTI, four MR
sequences). The rule is certified by ``monai-unc evaluate --regions brats --target-risk`` on cohort A and applied by
``monai-unc triage`` to cohort B without its labels; the expected scores are computed here in numpy from the maps
(mean of each region's map, then the mean over the regions) and the expected decisions by hand from the rule's
threshold and calibration range.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import shutil
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.evaluation.triage import (
    RULE_FILE,
    FingerprintMismatch,
    ReferralRule,
    prediction_fingerprint,
    prediction_regions,
    region_differences,
    run_triage,
)
from tests._cases import write_infer_case_records

AFFINE = np.diag([1.0, 1.2, 2.0, 1.0])
SHAPE = (12, 12, 8)
BRATS = {"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]}
MEASURE = "predictive_entropy"


def _nii(path: Path, data: np.ndarray) -> None:
    nib.save(nib.Nifti1Image(data, AFFINE), str(path))


def _regions(lab: np.ndarray) -> np.ndarray:
    return np.stack([np.isin(lab, v) for v in BRATS.values()])


def _settings(regions: dict | None) -> dict:
    return {"model": "tiny region net", "checkpoints": ["model.pt"], "method": "mcdropout", "samples": 4,
            "measures": [MEASURE], "roi": [12, 12, 8], "overlap": 0.25, "activation": "sigmoid", "intensity": "none",
            "dropout": None, "tta_noise": None, "ratein_target": None, "regions": regions}


def _write_cohort(root: Path, n: int, seed: int, noise: np.ndarray, shift_channel: int | None = None,
                  labels: bool = True) -> dict[str, Path]:
    """``n`` cases in ``root``: labels (BraTS 0, 1, 2, 4), predictions of the infer layout, 4-channel images. Case
    ``i`` has ``noise[i]`` of its voxels relabelled (lower Dice) and a map that grows with it."""
    rng = np.random.default_rng(seed)
    out = {k: root / k for k in ("labels", "pred", "images")}
    for p in out.values():
        p.mkdir(parents=True, exist_ok=True)
    xx, yy, zz = np.meshgrid(*[np.arange(s) for s in SHAPE], indexing="ij")
    for i in range(n):
        cid = f"c{i:02d}"
        c = np.array(SHAPE) // 2 + rng.integers(-1, 2, 3)
        d = np.sqrt((xx - c[0]) ** 2 + (yy - c[1]) ** 2 + ((zz - c[2]) * 1.3) ** 2)
        lab = np.select([d < 1.8, d < 3.0, d < 4.5], [1, 4, 2], 0).astype(np.int16)
        pred = lab.copy()
        flip = rng.random(SHAPE) < noise[i]
        pred[flip] = rng.choice([0, 1, 2, 4], size=int(flip.sum()))
        masks = _regions(pred)
        p = np.where(masks, 0.75, 0.25) + rng.uniform(-0.2, 0.2, masks.shape)
        p = np.clip(p, 0.0, 1.0).astype(np.float32)
        u = (0.05 + noise[i] + 0.05 * rng.random(masks.shape)).astype(np.float32)
        if labels:
            _nii(out["labels"] / f"{cid}.nii.gz", lab)
        _nii(out["pred"] / f"{cid}_seg.nii.gz", np.moveaxis(masks.astype(np.uint8), 0, -1))
        _nii(out["pred"] / f"{cid}_probs.nii.gz", np.moveaxis(p, 0, -1))
        _nii(out["pred"] / f"{cid}_{MEASURE}.nii.gz", np.moveaxis(u, 0, -1))
        brain = (d < 5.5).astype(np.float32)
        img = np.stack([brain * (100 + 20 * ch + 30 * (lab > 0)) + rng.normal(0, 2, SHAPE) * brain
                        for ch in range(4)], axis=-1).astype(np.float32)
        if shift_channel is not None and i == 0:
            img[..., shift_channel] = img[..., shift_channel] * 6  # another protocol for one sequence
        _nii(out["images"] / f"{cid}.nii.gz", img)
    doc = {"format": 1, "settings": _settings(BRATS), "multilabel": True, "regions": BRATS}
    (out["pred"] / "infer.json").write_text(json.dumps(doc))
    write_infer_case_records(out["pred"])
    return out


def _maps(pred: Path, cid: str) -> tuple[np.ndarray, np.ndarray]:
    masks = np.moveaxis(np.asarray(nib.load(pred / f"{cid}_seg.nii.gz").dataobj), -1, 0) > 0
    u = np.moveaxis(np.asarray(nib.load(pred / f"{cid}_{MEASURE}.nii.gz").dataobj, dtype=np.float64), -1, 0)
    return masks, u


def _score_mean(pred: Path, cid: str) -> float:
    """The combined case score ``<m>_mean``, independently: the numpy mean of each region's map, then their mean."""
    _, u = _maps(pred, cid)
    return float(np.mean([u[r].mean() for r in range(u.shape[0])]))


def _fg_means(pred: Path, cid: str) -> list[float]:
    masks, u = _maps(pred, cid)
    return [float(u[r][masks[r]].mean()) if masks[r].any() else math.nan for r in range(u.shape[0])]


def _csv(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {r["case"]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def cohorts(tmp_path_factory):
    root = tmp_path_factory.mktemp("triage_regions")
    a = _write_cohort(root / "A", 24, 0, np.linspace(0.0, 0.3, 24))
    # B: inside the calibration range, above it, and one case whose third sequence comes from another protocol
    b = _write_cohort(root / "B", 8, 1, np.array([0.05, 0.02, 0.1, 0.2, 0.28, 0.12, 0.6, 0.15]), shift_channel=2,
                      labels=False)
    ev = root / "eval"
    argv = ["evaluate", "-l", str(a["labels"]), "-p", str(a["pred"]), "-o", str(ev), "--regions", "brats",
            "--images", str(a["images"]), "--no-spatial", "--score", f"{MEASURE}_mean", "--risk", "failure",
            "--failure-dice", "0.75", "--target-risk", "0.35", "--delta", "0.2", "-q"]
    assert main(argv) == 0
    return {"A": a, "B": b, "eval": ev, "rule": ev / RULE_FILE, "root": root}


@pytest.mark.slow
def test_rule_of_a_region_evaluation_records_the_regions(cohorts):
    rule = ReferralRule.load(cohorts["rule"])
    doc = json.loads(cohorts["rule"].read_text())
    assert doc["format_version"] == 5 and doc["regions"] == BRATS and rule.regions == BRATS
    assert rule.expected_dice_estimate == "region_mean"  # the quantity of dice
    assert rule.score == f"{MEASURE}_mean" and rule.num_classes == 3 and rule.class_names is None
    assert rule.fingerprint["regions"] == BRATS and rule.risk_definition == "mean region dice < 0.75"
    # the calibration scores are the combined scores of cohort A, computed here from the maps
    ids = sorted(p.name[:3] for p in cohorts["A"]["labels"].glob("*.nii.gz"))
    assert rule.calibration_cases == tuple(ids)
    expected = sorted(_score_mean(cohorts["A"]["pred"], c) for c in ids)
    np.testing.assert_allclose(rule.calibration_scores, expected, rtol=1e-6)
    # the image reference holds the statistics of the four channels
    assert rule.image_reference is not None and len(rule.image_reference.features) == 20
    assert rule.image_reference.features[0] == "c0_mean" and rule.image_reference.n_cases == 24
    assert len(rule.image_reference.statistics) == 24  # each calibration image's, for the monitor's image alarm
    assert rule.feasible and math.isfinite(rule.threshold)  # the fixture certifies a threshold that refers cases


@pytest.mark.slow
def test_triage_of_new_region_cases_equals_the_rule_on_scores_from_the_maps(cohorts, tmp_path):
    b, rule = cohorts["B"], ReferralRule.load(cohorts["rule"])
    out = tmp_path / "t"
    assert main(["triage", "-p", str(b["pred"]), "-r", str(cohorts["rule"]), "-o", str(out), "--images",
                 str(b["images"]), "--cases", "2", "-q"]) == 0
    tri = json.loads((out / "triage.json").read_text())
    assert tri["fingerprint"]["status"] == "match" and tri["image_check"] == "applied"
    rows = _csv(out / "triage.csv")
    ids = sorted(rows)
    assert ids == [f"c{i:02d}" for i in range(8)]
    lo, hi = rule.score_range
    by = {c["case"]: c for c in tri["cases"]}
    for cid in ids:
        s = _score_mean(b["pred"], cid)
        assert float(rows[cid]["score"]) == pytest.approx(s, rel=1e-6)
        assert float(rows[cid][f"{MEASURE}_mean"]) == pytest.approx(s, rel=1e-6)
        # per-region columns: <m>_mean_<R> and <m>_fg_mean_<R> (mean inside the predicted region)
        _, u = _maps(b["pred"], cid)
        for r, name in enumerate(BRATS):
            assert float(rows[cid][f"{MEASURE}_mean_{name}"]) == pytest.approx(u[r].mean(), rel=1e-6)
            assert by[cid]["region_scores"][name] == pytest.approx(u[r].mean(), rel=1e-6)
        np.testing.assert_allclose([float(rows[cid][f"{MEASURE}_fg_mean_{n}"]) for n in BRATS],
                                   _fg_means(b["pred"], cid), rtol=1e-6)
        assert float(rows[cid][f"{MEASURE}_fg_mean"]) == pytest.approx(np.nanmean(_fg_means(b["pred"], cid)),
                                                                          rel=1e-6)
        assert {f"expected_dice_{n}" for n in BRATS} <= set(rows[cid])
        # the decision, by hand: certified, inside the calibration range, at most the threshold, image close
        far = cid == "c00"  # its third sequence was rescaled
        accept = rule.feasible and lo <= s <= hi and s <= rule.threshold and not far
        assert rows[cid]["decision"] == ("accept" if accept else "review"), (cid, s, rows[cid]["reason"])
    # the same as applying the rule to the scores computed here (and the image statistics of the triage)
    scores = [_score_mean(b["pred"], c) for c in ids]
    stats = [json.loads((out / "state" / "cases" / f"{c}.json").read_text())["row"]["image_stats"] for c in ids]
    assert [d.decision for d in rule.apply(scores, stats)] == [rows[c]["decision"] for c in ids]
    reason = rows["c00"]["reason"]
    assert reason.startswith("image far from the calibration images") and rows["c00"]["code"] == "image_statistics"
    far = reason.split("(", 1)[1].split(")", 1)[0].split(", ")
    assert far and all(f.startswith("c2_") for f in far)  # only the statistics of the rescaled sequence
    assert float(rows["c01"]["image_z_max"]) <= rule.image_reference.z_max
    codes = {rows[c]["code"] for c in ids}
    assert {"accepted", "outside_range", "image_statistics"} <= codes
    # the page shows the per-region scores as columns
    page = (out / "triage.html").read_text()
    for name in BRATS:
        assert f"<th class=\"\">mean {name}</th>" in page
    assert "mean region dice" in page and (out / "figures" / "case_c06.png").is_file()


@pytest.mark.slow
def _without_enhancing_tumour(src: Path, dst: Path) -> Path:
    """Cohort B's predictions with ET (the third region) below 0.5 everywhere and not segmented, as a case without
    enhancing tumour that the model gives some probability."""
    shutil.copytree(src, dst)
    for f in sorted(dst.glob("*_probs.nii.gz")):
        img = nib.load(f)
        p = np.asarray(img.dataobj, dtype=np.float32).copy()
        p[..., 2] *= 0.45
        nib.save(nib.Nifti1Image(p, img.affine), f)
        seg = dst / f.name.replace("_probs", "_seg")
        masks = np.asarray(nib.load(seg).dataobj).copy()
        masks[..., 2] = 0
        nib.save(nib.Nifti1Image(masks, img.affine), seg)
    return dst


@pytest.mark.slow
def test_triage_computes_the_estimate_of_the_rule_s_version(cohorts, tmp_path):
    """Triage of region cases computes the rule's estimate: ``region_mean`` (an unsegmented region scores
    ``prod (1 - p)``) for a rule of ``format_version`` 5, the former one (0) for a rule certified before, as their
    calibration cases' were."""
    from monai_unc.evaluation.rows import case_expected_dice
    from monai_unc.io import json_safe
    from monai_unc.io.provenance import rule_digest

    preds = _without_enhancing_tumour(cohorts["B"]["pred"], tmp_path / "noet")
    new = ReferralRule.load(cohorts["rule"])
    d = json_safe(new.to_json())
    del d["calibration"]["expected_dice_estimate"]
    d["format_version"] = 4
    d.pop("digest")
    d["digest"] = rule_digest(d)
    old = ReferralRule.from_json(d, check_digest=True)
    assert (new.expected_dice_estimate, old.expected_dice_estimate) == ("region_mean", "region_mean_soft")
    got = {}
    for name, rule in (("new", new), ("old", old)):
        res = run_triage(preds, rule, tmp_path / name, allow_mismatch=True)
        got[name] = _csv(res.paths["csv"])
        tri = json.loads((tmp_path / name / "triage.json").read_text())
        assert tri["expected_dice_interval"]["estimate"] == rule.expected_dice_estimate
    for cid, row in got["new"].items():
        p = np.moveaxis(np.asarray(nib.load(preds / f"{cid}_probs.nii.gz").dataobj, dtype=np.float32), -1, 0)
        want_none = float(np.exp(np.log1p(-p[2].astype(np.float64)).sum()))
        assert float(row["expected_dice_ET"]) == pytest.approx(want_none, rel=1e-6, abs=1e-300)
        assert float(got["old"][cid]["expected_dice_ET"]) == 0.0
        for est, which in (("region_mean", "new"), ("region_mean_soft", "old")):
            want = float(case_expected_dice(p, True, est).foreground[0])
            assert float(got[which][cid]["expected_dice"]) == pytest.approx(want, rel=1e-6)


def test_monitoring_a_region_rule_end_to_end(cohorts, tmp_path):
    """``triage --monitor`` then ``monitor label`` with the label maps: each audited Dice is the ``dice`` that
    ``evaluate`` wrote for the case (the mean over the regions, in the rule's channel order) and its loss the rule's
    failure; the image martingale ranks the cases against the rule's calibration images."""
    from monai_unc.monitoring import MonitorStore, monitor_status
    from monai_unc.monitoring.status import IMAGE_REFERENCE_MIN, image_reference_scores

    a, rule = cohorts["A"], ReferralRule.load(cohorts["rule"])
    db = str(tmp_path / "m.db")
    assert main(["triage", "-p", str(a["pred"]), "-r", str(cohorts["rule"]), "-o", str(tmp_path / "t"), "--images",
                 str(a["images"]), "--monitor", db, "--site", "A", "-q"]) == 0
    assert main(["monitor", "label", "--labels", str(a["labels"]), "--db", db, "-q"]) == 0
    with MonitorStore(db) as store:
        cases, rules = store.cases(), store.rules()
    metrics = _csv(cohorts["eval"] / "metrics.csv")
    assert len(cases) == 24 and {c["case_id"] for c in cases} == set(metrics)
    for c in cases:
        d = float(metrics[c["case_id"]]["dice"])
        assert c["dice"] == pytest.approx(d, abs=1e-6) and c["loss"] == float(d < rule.failure_dice)
    (g,) = monitor_status(cases, rules)
    # ranked against the calibration images; fewer than IMAGE_REFERENCE_MIN of them: a note on the alarm's level
    assert g.image_against_calibration and g.image_reference_size == rule.image_reference.n_cases
    assert (g.image_note is None) == (g.image_reference_size >= IMAGE_REFERENCE_MIN)
    (recorded,) = rules.values()
    np.testing.assert_allclose(image_reference_scores(recorded), rule.image_reference.leave_one_out_z_max())


@pytest.mark.slow
def test_triage_refuses_predictions_with_other_regions(cohorts, tmp_path, capsys):
    b = cohorts["B"]
    pred = tmp_path / "pred"
    shutil.copytree(b["pred"], pred)
    doc = json.loads((pred / "infer.json").read_text())
    other = {"TC": [1, 3], "WT": [1, 2, 3], "ET": [3]}  # brats2023
    doc["settings"]["regions"] = other
    doc["regions"] = other
    (pred / "infer.json").write_text(json.dumps(doc))
    for record in pred.glob("*.json"):  # the cases' records too: one finished run made with the other regions
        case = json.loads(record.read_text())
        if record.name != "infer.json" and isinstance(case.get("fingerprint"), dict):
            case["fingerprint"]["regions"] = other
            record.write_text(json.dumps(case))
    capsys.readouterr()
    assert main(["triage", "-p", str(pred), "-r", str(cohorts["rule"]), "-o", str(tmp_path / "t"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("monai-unc triage: error: the predictions were not made like")
    assert "regions" in err[0] and not (tmp_path / "t" / "triage.csv").exists()
    # the rule's own regions are checked too, not only the fingerprint: the same predictions, a rule with brats2023
    rule = ReferralRule.load(cohorts["rule"])
    rule2023 = copy.deepcopy(rule)
    rule2023.regions = other
    with pytest.raises(FingerprintMismatch, match="regions"):
        run_triage(b["pred"], rule2023, tmp_path / "u")
    # a class-based rule refuses region predictions
    d = rule.to_json()
    d.update(format_version=1, regions=None)
    d["fingerprint"] = {k: v for k, v in d["fingerprint"].items() if k != "regions"}
    d["fingerprint"]["activation"] = "softmax"
    d["risk"], d["num_classes"] = "failure", 4
    class_rule = ReferralRule.from_json(d)
    with pytest.raises(FingerprintMismatch, match="regions"):
        run_triage(b["pred"], class_rule, tmp_path / "v")


def test_region_differences():
    assert region_differences(BRATS, None) == []  # no record: nothing to compare
    assert region_differences(None, False) == []
    assert region_differences(BRATS, {"tc": [4, 1], "wt": [2, 1, 4], "et": [4]}) == []  # names only name columns
    assert region_differences(BRATS, ["0", "1", "2"]) == []  # infer without --regions: three channels
    assert region_differences(BRATS, ["0", "1"]) == [("regions", BRATS, ["0", "1"])]
    assert region_differences(BRATS, {"TC": [1, 3], "WT": [1, 2, 3], "ET": [3]})
    assert region_differences(BRATS, {"WT": [1, 2, 4], "TC": [1, 4], "ET": [4]})  # channel order matters
    assert region_differences(BRATS, False) == [("regions", BRATS, None)]
    assert region_differences(None, BRATS) == [("regions", None, BRATS)]
    assert region_differences(None, True) == [("regions", None, "region-based")]
    assert region_differences(BRATS, True) == []


def test_prediction_regions_reads_the_records(tmp_path):
    assert prediction_regions(tmp_path) is None
    (tmp_path / "infer.json").write_text(json.dumps({"settings": _settings(None)}))  # before region inference
    assert prediction_regions(tmp_path) is False
    (tmp_path / "infer.json").write_text(json.dumps({"settings": _settings(BRATS), "multilabel": True,
                                                     "regions": BRATS}))
    assert prediction_regions(tmp_path) == BRATS
    nn = tmp_path / "nn"
    nn.mkdir()
    assert prediction_regions(nn, "nnunet") is None
    (nn / "uncertainty_config.json").write_text(json.dumps({"trainer_name": "t"}))
    assert prediction_regions(nn, "nnunet") is False
    (nn / "uncertainty_config.json").write_text(json.dumps({"trainer_name": "t", "regions": {"whole": [1, 2]}}))
    assert prediction_regions(nn, "nnunet") == {"whole": [1, 2]}
    with pytest.raises(ValueError, match="layout"):
        prediction_regions(tmp_path, "other")


def _rule_doc(**kw) -> dict:
    d = {
        "format": "monai-unc referral rule", "format_version": 1, "created": "", "monai_unc_version": "0.1.0",
        "score": {"column": "predictive_entropy_fg_mean", "measure": "predictive_entropy", "aggregation": "fg_mean",
                  "region": None, "patch_size": 10, "map_source": "file"},
        "feasible": True, "threshold": 0.2, "accept_all": False, "target_risk": 0.3, "delta": 0.1,
        "method": "sgr", "risk": "failure", "failure_dice": 0.8,
        "calibration": {"n_cases": 3, "cases": ["a", "b", "c"], "scores": [0.1, 0.2, 0.3], "n_undefined": 0,
                        "coverage": 0.67, "observed_risk": 0.0, "bound": 0.25, "n_candidates": 3},
        "num_classes": 2, "class_names": None, "image_reference": None, "fingerprint": {},
    }
    d.update(kw)
    return d


def test_old_format_rule_still_loads_and_region_rules_round_trip():
    old = ReferralRule.from_json(_rule_doc())  # a version-1 file, written before rules had regions
    assert old.regions is None and old.threshold == 0.2 and old.risk_definition == "dice < 0.8"
    assert old.to_json()["format_version"] == 1 and old.to_json()["regions"] is None  # still readable by 0.1
    new = ReferralRule.from_json(_rule_doc(format_version=2, regions=BRATS, num_classes=3))
    assert new.regions == BRATS and new.region_names == ["TC", "WT", "ET"]
    assert new.risk_definition == "mean region dice < 0.8"
    back = new.to_json()
    assert back["format_version"] == 2 and back["regions"] == BRATS and ReferralRule.from_json(back) == new
    with pytest.raises(ValueError, match="format_version 2"):
        ReferralRule.from_json(_rule_doc(regions=BRATS, num_classes=3))
    from monai_unc.evaluation.triage.rule import RULE_VERSION

    with pytest.raises(ValueError, match=f"format_version {RULE_VERSION + 1} is not supported"):
        ReferralRule.from_json(_rule_doc(format_version=RULE_VERSION + 1))
    with pytest.raises(ValueError, match="num_classes"):
        ReferralRule.from_json(_rule_doc(format_version=2, regions=BRATS, num_classes=4))
    with pytest.raises(ValueError, match="class_names"):
        ReferralRule.from_json(_rule_doc(format_version=2, regions=BRATS, num_classes=3,
                                         class_names=["a", "b", "c"]))
    with pytest.raises(ValueError, match="integer labels"):
        ReferralRule.from_json(_rule_doc(format_version=2, regions={"WT": ["x"]}, num_classes=1))
    with pytest.raises(ValueError, match="regions"):
        ReferralRule.from_json(_rule_doc(format_version=2, regions=[1, 2], num_classes=2))


def _as_channel_files(src: Path, dst: Path) -> Path:
    """The 4D images of ``src`` as nnU-Net channel files ``<case>_0000.nii.gz`` ... ``<case>_0003.nii.gz``."""
    dst.mkdir(parents=True)
    for p in sorted(src.glob("*.nii.gz")):
        img = np.asarray(nib.load(p).dataobj)
        for ch in range(img.shape[-1]):
            _nii(dst / f"{p.name[:-7]}_{ch:04d}.nii.gz", np.ascontiguousarray(img[..., ch]))
    return dst


@pytest.mark.slow
def test_image_check_reads_every_channel_file(cohorts, tmp_path):
    """Images in nnU-Net's channel naming: the statistics cover every channel file, on both sides; a rule written
    before (no ``channel_files`` in its image reference) still reads only ``_0000``, as it was certified."""
    a, b = cohorts["A"], cohorts["B"]
    img_a = _as_channel_files(a["images"], tmp_path / "imgA")
    img_b = _as_channel_files(b["images"], tmp_path / "imgB")
    ev = tmp_path / "eval"
    assert main(["evaluate", "-l", str(a["labels"]), "-p", str(a["pred"]), "-o", str(ev), "--regions", "brats",
                 "--images", str(img_a), "--no-spatial", "--score", f"{MEASURE}_mean", "--risk", "failure",
                 "--failure-dice", "0.75", "--target-risk", "0.35", "--delta", "0.2", "-q"]) == 0
    rule = ReferralRule.load(ev / RULE_FILE)
    ref4 = ReferralRule.load(cohorts["rule"]).image_reference
    assert rule.image_reference.channel_files == "all" and rule.image_reference.features == ref4.features
    np.testing.assert_allclose(rule.image_reference.median, ref4.median, rtol=1e-6)  # = the 4D NIfTI images
    res = run_triage(b["pred"], rule, tmp_path / "t", images=img_b)
    by = {c["case"]: c for c in res.summary["cases"]}
    assert by["c00"]["code"] == "image_statistics" and "c2_" in by["c00"]["reason"]  # channel file _0002
    # a rule certified when only _0000 was read (no channel_files field): the triage reads _0000 only
    d = rule.to_json()
    first = _first_channel_reference(img_a, sorted(p.name[:3] for p in a["labels"].glob("*.nii.gz")))
    d["image_reference"] = {**first, "z_max": 5.0}
    old = ReferralRule.from_json(d)
    assert old.image_reference.channel_files == "first" and len(old.image_reference.features) == 5
    res = run_triage(b["pred"], old, tmp_path / "u", images=img_b)
    by = {c["case"]: c for c in res.summary["cases"]}
    assert by["c00"]["code"] != "image_statistics"  # the rescaled third sequence is not seen through _0000


def _first_channel_reference(folder: Path, ids: list[str]) -> dict:
    """An image reference of the ``_0000`` files only, as a rule file of an earlier version holds it."""
    from monai_unc.evaluation.triage import ImageReference, image_statistics

    stats = np.stack([image_statistics(np.asarray(nib.load(folder / f"{c}_0000.nii.gz").dataobj)[None])
                      for c in ids])
    d = ImageReference.fit(stats).to_json()
    d.pop("channel_files")
    return d


def test_image_channel_files(tmp_path):
    from monai_unc.io import CaseError, image_channel_files

    def folder(name, *files):
        (tmp_path / name).mkdir()
        for f in files:
            (tmp_path / name / f).write_bytes(b"x")
        return tmp_path / name

    # the grouping of list_image_cases: only when every volume name of the folder has the channel suffix
    d = folder("grouped", "a_0000.nii.gz", "a_0001.nii.gz", "a_0002.nii.gz", "ab_0000.nii.gz", "notes.txt")
    assert image_channel_files(d / "a_0000.nii.gz") == tuple(d / f"a_000{i}.nii.gz" for i in range(3))
    assert image_channel_files(d / "ab_0000.nii.gz") == (d / "ab_0000.nii.gz",)
    assert image_channel_files(d / "a_0001.nii.gz") == (d / "a_0001.nii.gz",)  # not a first channel
    d = folder("mixed", "a_0000.nii.gz", "a_0001.nii.gz", "b.nii.gz")  # b has no suffix: every file is a case
    assert image_channel_files(d / "a_0000.nii.gz") == (d / "a_0000.nii.gz",)
    assert image_channel_files(d / "b.nii.gz") == (d / "b.nii.gz",)
    d = folder("twice", "a_0000.nii.gz", "a_0000.nii", "a_0001.nii.gz")  # two files of one name: as list_files
    with pytest.raises(CaseError, match="two files"):
        image_channel_files(d / "a_0000.nii.gz")
    d = folder("gaps", "c_0000.nii.gz", "c_0002.nii.gz")
    with pytest.raises(CaseError, match="without gaps"):
        image_channel_files(d / "c_0000.nii.gz")


@pytest.mark.slow
def test_nnunet_label_map_predictions_score_like_region_masks(cohorts, tmp_path):
    """nnU-Net writes a region model's segmentation as a label map (``regions_class_order``) and one map channel
    per region under ``uncertainty/``: triage converts the labels with the rule's spec and gives the scores of the
    equivalent region masks."""
    b = cohorts["B"]
    nn = tmp_path / "nn"
    (nn / "uncertainty").mkdir(parents=True)
    for p in sorted(b["pred"].glob("*_seg.nii.gz")):
        cid = p.name[: -len("_seg.nii.gz")]
        tc, wt, et = np.moveaxis(np.asarray(nib.load(p).dataobj), -1, 0) > 0
        lab = np.where(wt, 2, 0)
        lab[tc] = 1
        lab[et] = 4
        _nii(nn / f"{cid}.nii.gz", lab.astype(np.uint8))
        shutil.copy(b["pred"] / f"{cid}_{MEASURE}.nii.gz", nn / "uncertainty" / f"{cid}_{MEASURE}.nii.gz")
    (nn / "uncertainty_config.json").write_text(json.dumps({"trainer_name": "nnUNetTrainer", "folds": [0],
                                                            "measures": [MEASURE], "regions": BRATS}))
    rule = ReferralRule.load(cohorts["rule"])
    with pytest.raises(FingerprintMismatch, match="producer"):  # made by another producer than the rule's
        run_triage(nn, rule, tmp_path / "t", layout="nnunet")
    res = run_triage(nn, rule, tmp_path / "t", layout="nnunet", allow_mismatch=True)
    run_triage(b["pred"], rule, tmp_path / "r")
    got, want = _csv(tmp_path / "t" / "triage.csv"), _csv(tmp_path / "r" / "triage.csv")
    cols = [f"{MEASURE}_{k}{s}" for k in ("mean", "fg_mean", "patch_mean") for s in ("", "_TC", "_WT", "_ET")]
    for cid in want:
        assert [got[cid][c] for c in cols] == [want[cid][c] for c in cols]
        assert got[cid]["decision"] == want[cid]["decision"]
    assert res.summary["fingerprint"]["status"] == "mismatch"
    # another region spec recorded by nnunet-predict is refused
    (nn / "uncertainty_config.json").write_text(json.dumps({"trainer_name": "nnUNetTrainer", "folds": [0],
                                                            "measures": [MEASURE], "regions": {"WT": [1, 2, 4]}}))
    d = rule.to_json()
    d["fingerprint"] = prediction_fingerprint(nn, "nnunet")  # the same fingerprint: the rule's regions differ
    with pytest.raises(FingerprintMismatch, match=r"regions: \{\"WT\""):
        run_triage(nn, ReferralRule.from_json(d), tmp_path / "u", layout="nnunet")


@pytest.mark.slow
def test_end_to_end_with_monai_unc_infer_regions(tmp_path):
    """``infer --activation sigmoid --regions brats`` on a tiny untrained 3-output network (4 sequences as channel
    files), ``evaluate --regions brats --target-risk`` on cohort A, ``triage`` of cohort B: the fingerprints of the
    two infer runs match, the scores are the means of the written region maps and the decisions are the rule's."""
    import torch
    from monai.networks.nets import UNet

    rng = np.random.default_rng(5)
    shape = (12, 12, 12)
    xx, yy, zz = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    for cohort, n in (("A", 6), ("B", 3)):
        (tmp_path / cohort / "images").mkdir(parents=True)
        (tmp_path / cohort / "labels").mkdir()
        for i in range(n):
            c = np.array(shape) // 2 + rng.integers(-2, 3, 3)
            d = np.sqrt((xx - c[0]) ** 2 + (yy - c[1]) ** 2 + (zz - c[2]) ** 2)
            lab = np.select([d < 1.5, d < 2.5, d < 4], [1, 4, 2], 0).astype(np.uint8)
            _nii(tmp_path / cohort / "labels" / f"k{i}.nii.gz", lab)
            for ch in range(4):
                img = (d < 5.5) * (1 + 0.3 * ch * (lab > 0)) + 0.1 * rng.random(shape)
                _nii(tmp_path / cohort / "images" / f"k{i}_{ch:04d}.nii.gz", img.astype(np.float32))
    spec = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 4, "out_channels": 3,
            "channels": [4, 8], "strides": [2], "num_res_units": 0, "dropout": 0.2}
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in spec.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    for cohort in ("A", "B"):
        assert main(["infer", "-i", str(tmp_path / cohort / "images"), "-o", str(tmp_path / cohort / "pred"),
                     "--network", json.dumps(spec), "--checkpoint", str(tmp_path / "net.pt"), "--device", "cpu",
                     "--activation", "sigmoid", "--regions", "brats", "--method", "mcdropout", "--samples", "2",
                     "--quiet"]) == 0
    ev = tmp_path / "eval"
    assert main(["evaluate", "-l", str(tmp_path / "A" / "labels"), "-p", str(tmp_path / "A" / "pred"), "-o",
                 str(ev), "--regions", "brats", "--images", str(tmp_path / "A" / "images"), "--no-spatial",
                 "--score", f"{MEASURE}_mean", "--target-risk", "0.5", "--risk", "1-dice", "-q"]) == 0
    rule = ReferralRule.load(ev / RULE_FILE)
    assert rule.regions == BRATS and rule.fingerprint["regions"] == BRATS
    assert len(rule.image_reference.features) == 20  # four channel files, five statistics each
    out = tmp_path / "t"
    assert main(["triage", "-p", str(tmp_path / "B" / "pred"), "-r", str(ev / RULE_FILE), "-o", str(out),
                 "--images", str(tmp_path / "B" / "images"), "--cases", "1", "-q"]) == 0
    tri = json.loads((out / "triage.json").read_text())
    assert tri["fingerprint"]["status"] == "match"
    rows = _csv(out / "triage.csv")
    ids = sorted(rows)
    scores = [_score_mean(tmp_path / "B" / "pred", c) for c in ids]
    np.testing.assert_allclose([float(rows[c]["score"]) for c in ids], scores, rtol=1e-6)
    stats = [json.loads((out / "state" / "cases" / f"{c}.json").read_text())["row"]["image_stats"] for c in ids]
    assert [d.decision for d in rule.apply(scores, stats)] == [rows[c]["decision"] for c in ids]


@pytest.mark.slow
def test_certify_warns_when_the_evaluation_regions_are_not_the_recorded_ones(cohorts):
    from monai_unc.evaluation import CohortState, EvaluationConfig
    from monai_unc.evaluation.triage import certify_referral_rule

    ev = cohorts["eval"]
    state = CohortState.load(ev / "state")
    summary = json.loads((ev / "summary.json").read_text())
    same = EvaluationConfig(regions="brats", target_risk=0.35, delta=0.2, risk="failure", failure_dice=0.75)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the recorded regions are the evaluation's: no warning
        rule = certify_referral_rule(state, summary, same, predictions=cohorts["A"]["pred"],
                                     image_z_max=5.0)
    saved = ReferralRule.load(cohorts["rule"])
    assert (rule.threshold, rule.calibration_scores, rule.regions) == (saved.threshold, saved.calibration_scores,
                                                                       saved.regions)
    other = EvaluationConfig(regions="brats2023", target_risk=0.35, delta=0.2, risk="failure", failure_dice=0.75)
    with pytest.warns(UserWarning, match="monai-unc triage will refuse"):
        rule = certify_referral_rule(state, summary, other, predictions=cohorts["A"]["pred"])
    assert rule.regions == {"TC": [1, 3], "WT": [1, 2, 3], "ET": [3]}
