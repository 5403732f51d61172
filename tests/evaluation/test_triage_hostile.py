"""Hostile use of the triage certificate: a hand-edited ``referral_rule.json``, a model retrained and saved over its
checkpoint, and fingerprints that differ only in how the same settings were spelt (``--roi 8`` vs ``--roi 8 8 8``,
the demo vs ``monai-unc infer --model example``)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from monai.networks.nets import UNet

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import (
    RULE_FILE,
    FingerprintMismatch,
    ReferralRule,
    compare_fingerprints,
    prediction_fingerprint,
    run_triage,
)

SPEC = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1, "out_channels": 2,
        "channels": [4, 8], "strides": [2], "num_res_units": 0, "dropout": 0.2}


# ------------------------------------------------------------------------------------ item 3: an edited certificate
@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    """A rule certified by ``evaluate --target-risk`` on a toy cohort (stand-in predictions)."""
    root = tmp_path_factory.mktemp("certified")
    a = write_toy_cohort(root / "A", n_cases=30, shape=(16, 16, 16), seed=1)
    ev = root / "eval"
    argv = ["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev), "--no-spatial",
            "--target-risk", "0.4", "--delta", "0.2", "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(argv) == 0
    return ev / RULE_FILE


def _edited(src: Path, dst: Path, edit) -> Path:
    d = json.loads(src.read_text())
    edit(d)
    dst.write_text(json.dumps(d, indent=2))
    return dst


def _inside(d):  # a threshold between two calibration scores, other than the certified one
    s = d["calibration"]["scores"]
    d["threshold"] = next((a + b) / 2 for a, b in zip(s, s[1:]) if a < b)
    assert s[0] < d["threshold"] < s[-1]


def _times_ten(d):
    d["threshold"] *= 10


def _negative(d):
    d["threshold"] = -abs(d["threshold"]) - 1.0


@pytest.mark.slow
@pytest.mark.parametrize("edit", [_inside, _times_ten, _negative], ids=["inside", "x10", "negative"])
def test_edited_threshold_is_refused_naming_the_field(certified, tmp_path, edit):
    rule = ReferralRule.load(certified)  # the certified rule loads
    assert rule.feasible and math.isfinite(rule.threshold)
    for drop_digest in (False, True):  # with the digest, and as a rule written before digests
        def both(d, drop=drop_digest):
            edit(d)
            if drop:
                d.pop("digest", None)
        p = _edited(certified, tmp_path / f"rule_{drop_digest}.json", both)
        with pytest.raises(ValueError, match=r"'threshold'.*edited or corrupted") as e:
            ReferralRule.load(p)
        assert str(p) in str(e.value)


@pytest.mark.slow
def test_edited_bound_coverage_and_scores_are_refused(certified, tmp_path):
    for path, field in ((("calibration", "bound"), "bound"), (("calibration", "coverage"), "coverage"),
                        (("calibration", "observed_risk"), "observed_risk")):
        def edit(d, path=path):
            d[path[0]][path[1]] = d[path[0]][path[1]] * 0.5
            d.pop("digest")
        with pytest.raises(ValueError, match=rf"'{field}'.*edited or corrupted"):
            ReferralRule.load(_edited(certified, tmp_path / f"{field}.json", edit))

    def flip_risk(d):  # one calibration case's risk changed: the recorded Dice no longer gives it
        d["calibration"]["risks"][0] = 1.0 - d["calibration"]["risks"][0]
        d.pop("digest")
    with pytest.raises(ValueError, match=r"'calibration.risks'.*edited or corrupted"):
        ReferralRule.load(_edited(certified, tmp_path / "risk.json", flip_risk))


@pytest.mark.slow
def test_rule_digest_catches_an_edit_the_recomputation_cannot(certified, tmp_path):
    d = json.loads(certified.read_text())
    # 5: a rule of classes, whose expected Dice is the mean over the classes (with undefined scores certified as
    # referred, which format_version 4 said)
    assert d["format_version"] == 5 and d["calibration"]["expected_dice_estimate"] == "class_mean"
    assert d["digest"].startswith("sha256:")

    def reword(d):
        d["guarantee"] = "every case is safe"
    with pytest.raises(ValueError, match=r"digest.*edited or corrupted"):
        ReferralRule.load(_edited(certified, tmp_path / "reworded.json", reword))
    # a rule without a digest (written before digests) still loads once the recomputation agrees
    back = ReferralRule.load(_edited(certified, tmp_path / "old.json", lambda d: d.pop("digest")))
    assert back == ReferralRule.load(certified)
    # a rule re-saved by this version round-trips with its digest
    again = ReferralRule.load(certified).save(tmp_path / "again.json")
    assert json.loads(again.read_text())["digest"] == d["digest"]


# ------------------------------------------------------------------------------- items 4 and 8: fingerprints of infer
@pytest.fixture(scope="module")
def toy_images(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    data = write_toy_cohort(root / "d", n_cases=2, shape=(12, 12, 12), predictions=False)
    return root, data["images"]


def _save_net(path: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    torch.save(UNet(**{k: v for k, v in SPEC.items() if k != "_target_"}).state_dict(), path)
    return path


def _infer(images: Path, out: Path, ckpt: Path, *extra: str) -> Path:
    argv = ["infer", "-i", str(images), "-o", str(out), "--network", json.dumps(SPEC), "--checkpoint", str(ckpt),
            "--device", "cpu", "--method", "softmax", "-q", *extra]
    assert cli.main(argv) == 0
    return out


def _rule_for(pred: Path) -> ReferralRule:
    fp = prediction_fingerprint(pred)
    return ReferralRule(score="predictive_entropy_fg_mean", threshold=math.inf, feasible=True, target_risk=0.2,
                        delta=0.1, method="sgr", risk="failure", failure_dice=0.8, calibration_scores=(0.0, 1.0),
                        calibration_cases=("c0", "c1"), bound=0.1, coverage=1.0, observed_risk=0.0, n_candidates=1,
                        num_classes=2, fingerprint=fp)


@pytest.mark.slow
def test_checkpoint_overwritten_in_place_is_refused_naming_the_file(toy_images, tmp_path):
    root, images = toy_images
    ckpt = _save_net(tmp_path / "net.pt", seed=0)
    rule = _rule_for(_infer(images, tmp_path / "a", ckpt))
    weights = rule.fingerprint["weights"]
    assert weights[0] == {"file": str(ckpt.resolve()), "sha256": hashlib.sha256(ckpt.read_bytes()).hexdigest()}
    assert [w["file"] for w in weights[1:]] == ["network spec (inline)"]
    run_triage(_infer(images, tmp_path / "same", ckpt), rule, tmp_path / "t_same")  # same weights: accepted
    _save_net(ckpt, seed=1)  # retrained, saved at the same path
    new = _infer(images, tmp_path / "b", ckpt)
    status, diffs = compare_fingerprints(rule.fingerprint, prediction_fingerprint(new))
    assert status == "mismatch" and [d[0] for d in diffs] == ["weights"]
    with pytest.raises(FingerprintMismatch, match=r"net\.pt"):
        run_triage(new, rule, tmp_path / "t")
    assert not (tmp_path / "t" / "triage.json").exists()


@pytest.mark.slow
def test_roi_spelt_once_or_per_axis_is_the_same_fingerprint(toy_images, tmp_path):
    root, images = toy_images
    ckpt = _save_net(tmp_path / "net.pt", seed=0)
    one = prediction_fingerprint(_infer(images, tmp_path / "one", ckpt, "--roi", "8"))
    three = prediction_fingerprint(_infer(images, tmp_path / "three", ckpt, "--roi", "8", "8", "8"))
    assert compare_fingerprints(one, three) == ("match", [])
    other = prediction_fingerprint(_infer(images, tmp_path / "other", ckpt, "--roi", "8", "8", "4"))
    status, diffs = compare_fingerprints(one, other)
    assert status == "mismatch" and [d[0] for d in diffs] == ["roi"]


@pytest.mark.slow
def test_older_records_without_digests_compare_paths_with_a_note(toy_images, tmp_path):
    root, images = toy_images
    ckpt = _save_net(tmp_path / "net.pt", seed=0)
    pred = _infer(images, tmp_path / "a", ckpt)
    rule = _rule_for(pred)
    rule.fingerprint.pop("weights")  # a rule certified before weight digests were recorded
    res = run_triage(pred, rule, tmp_path / "t")
    assert res.summary["fingerprint"]["status"] == "match"
    assert any("digests" in n and "unavailable" in n for n in res.summary["notes"])


# ------------------------------------------------------------------------------ item 8: the demo's rule on CLI output
@pytest.mark.slow
def test_demo_rule_applies_to_cli_predictions_of_the_same_model(tmp_path, quick_softmax_demo):
    out, _ = quick_softmax_demo  # `monai-unc demo --quick --method softmax --samples 1` on 4 cases (tests/conftest.py)
    rule = ReferralRule.load(out / "triage" / RULE_FILE)
    assert rule.fingerprint["model"] == "example: MNI152 tissue UNet" and rule.fingerprint["weights"]
    pred, images = tmp_path / "cli", tmp_path / "images"
    # one of the demo's cases: the fingerprint holds the model and the settings, not the cases (each case's inference
    # on the MNI152 network costs ~1 s)
    images.mkdir()
    shutil.copy(out / "data" / "images" / "right_clean.nii.gz", images)
    assert cli.main(["infer", "-i", str(images), "-o", str(pred), "--model", "example",
                     "--method", "softmax", "--samples", "1", "--roi", "64", "--overlap", "0", "--intensity", "none",
                     "--activation", "softmax", "--device", "cpu", "-q"]) == 0
    status, diffs = compare_fingerprints(rule.fingerprint, prediction_fingerprint(pred))
    assert (status, diffs) == ("match", [])
    # the demo's key (the fixture's configuration folder; the worker that ran the demo may not be this one)
    key = out.parent / "config" / "signing_key.pub"
    assert cli.main(["triage", "-p", str(pred), "--rule", str(out / "triage" / RULE_FILE), "-o", str(tmp_path / "t"),
                     "--trusted-keys", str(key), "-q", "--cases", "0"]) == 0  # no case figure: the page is not checked
    assert json.loads((tmp_path / "t" / "triage.json").read_text())["fingerprint"]["status"] == "match"


def test_file_sha256_reads_in_chunks(tmp_path):
    from monai_unc.io import file_sha256

    p = tmp_path / "w.bin"
    data = np.random.default_rng(0).bytes(3 * (1 << 20) + 17)
    p.write_bytes(data)
    assert file_sha256(p) == hashlib.sha256(data).hexdigest()
    with pytest.raises(ValueError, match="not found"):
        file_sha256(tmp_path / "missing.pt")


def test_nnunet_fold_checkpoint_retrained_in_place_is_a_mismatch_naming_the_file(tmp_path):
    """``nnunet-predict`` records the digests of the fold checkpoints, ``plans.json`` and ``dataset.json``."""
    pytest.importorskip("nnunetv2")
    from monai_unc.nnunet.predictor import _model_identity

    model = tmp_path / "model"
    for f in ("0", "1"):
        (model / f"fold_{f}").mkdir(parents=True)
        (model / f"fold_{f}" / "checkpoint_final.pth").write_bytes(f"weights {f}".encode())
    (model / "fold_9").mkdir()  # no checkpoint: not a fold nnU-Net would use
    (model / "plans.json").write_text("{}")
    (model / "dataset.json").write_text('{"labels": {"background": 0, "x": 1}}')

    def predictions(name: str) -> Path:
        pred = tmp_path / name
        pred.mkdir()
        cfg = {"trainer_name": "nnUNetTrainer", "folds": 2,
               **_model_identity(str(model), None, "checkpoint_final.pth", {})}
        (pred / "uncertainty_config.json").write_text(json.dumps(cfg))
        return pred

    before = prediction_fingerprint(predictions("a"), "nnunet")
    assert [w["file"] for w in before["weights"]] == ["plans.json", "dataset.json", "fold_0/checkpoint_final.pth",
                                                      "fold_1/checkpoint_final.pth"]
    assert compare_fingerprints(before, prediction_fingerprint(predictions("b"), "nnunet")) == ("match", [])
    (model / "fold_1" / "checkpoint_final.pth").write_bytes(b"retrained")
    status, diffs = compare_fingerprints(before, prediction_fingerprint(predictions("c"), "nnunet"))
    assert status == "mismatch" and len(diffs) == 1 and diffs[0][0] == "weights"
    assert diffs[0][1].startswith("fold_1/checkpoint_final.pth") and diffs[0][2].startswith("fold_1/checkpoint")
    with pytest.raises(FingerprintMismatch, match="fold_1/checkpoint_final.pth"):
        raise FingerprintMismatch(diffs)


@pytest.mark.parametrize("value", ["7", 2.9, True, -1, [3]])
def test_old_format_rule_n_candidates_must_be_an_integer(tmp_path, value):
    from tests.evaluation.test_triage import _rule

    d = _rule([0.1, 0.2], 0.15).to_json()  # no calibration record: format_version 1, read without recomputation
    assert d["format_version"] == 1
    d.pop("digest", None)
    d["calibration"]["n_candidates"] = value
    path = tmp_path / "rule.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=r"n_candidates.*must be a non-negative int"):
        ReferralRule.load(path)


def _printed(text: str, label: str) -> float:
    """The number printed after ``label`` in ``text``."""
    found = re.search(re.escape(label) + r" ([0-9][0-9.e+-]*[0-9])", text)
    assert found, (label, text)
    return float(found.group(1))


def test_the_guarantee_never_prints_a_bound_as_its_target():
    """Found by hostile testing: the guarantee wrote the bound with 6 significant digits, so a rule that certifies
    nothing (best bound 0.1000004 against a target 0.1) read "best bound 0.1", as if it met the target; a feasible
    rule's bound and observed risk just below the target read as the target too. They are now written on their side
    of the target (``monai_unc.product.format_cell``), also on the triage page, which shows the guarantee."""
    kw = dict(score="predictive_entropy_fg_mean", target_risk=0.1, delta=0.1, method="sgr", risk="failure",
              failure_dice=0.8, calibration_scores=(0.1, 0.2), calibration_cases=("a", "b"), coverage=0.5,
              n_candidates=20, num_classes=2)
    infeasible = ReferralRule(threshold=-math.inf, feasible=False, bound=0.1000004, observed_risk=0.05, **kw)
    assert _printed(infeasible.guarantee(), "best bound") > 0.1, infeasible.guarantee()
    feasible = ReferralRule(threshold=0.15, feasible=True, bound=0.09999996, observed_risk=0.099999996, **kw)
    text = feasible.guarantee()
    assert _printed(text, ", bound") < 0.1 and _printed(text, "observed risk") < 0.1, text
    exact = ReferralRule(threshold=0.15, feasible=True, bound=0.1, observed_risk=0.05, **kw)
    assert _printed(exact.guarantee(), ", bound") == 0.1
