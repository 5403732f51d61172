"""Review 61 (QC with guarantees): per-case conformal masks, the fingerprint cache, triage.json's digest and
signature, ACLs of key files, and the guarantees under repeated calibration / test splits."""

from __future__ import annotations

import builtins
import dataclasses
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import FingerprintMismatch, ReferralRule, find_prediction_cases
from monai_unc.products.risk_control import RiskControl

INFER = {"settings": {"model": "toy", "checkpoints": None, "method": "mcdropout", "samples": 8,
                      "measures": ["predictive_entropy"], "roi": None, "overlap": 0.25, "activation": "softmax"},
         "multilabel": False}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    data = write_toy_cohort(tmp_path_factory.mktemp("toy61") / "A", n_cases=4, shape=(14, 14, 14), seed=1)
    (data["predictions"] / "infer.json").write_text(json.dumps(INFER))
    for i in range(4):  # the case records of a finished run
        record = {"method": "mcdropout", "num_samples": 8, "mi_meaning": "epistemic", "multilabel": False,
                  "fingerprint": INFER["settings"]}
        (data["predictions"] / f"toy{i:03d}.json").write_text(json.dumps(record))
    return data


def _rule(**kw) -> ReferralRule:
    scores = tuple(float(v) for v in np.linspace(0.0, 0.9, 12))
    return ReferralRule("predictive_entropy_fg_mean", float("inf"), True, 0.5, 0.2, "sgr", "failure", 0.8, scores,
                        tuple(f"c{i}" for i in range(12)), num_classes=2, map_source="probabilities", **kw)


def _matching(data, **kw) -> ReferralRule:
    """:func:`_rule` with the fingerprint of the toy predictions."""
    from monai_unc.io.provenance import prediction_fingerprint

    fp = prediction_fingerprint(data["predictions"], "monai-unc", [f"toy{i:03d}" for i in range(4)])
    return dataclasses.replace(_rule(), fingerprint=fp, **kw)


def _reads_of(name: str, monkeypatch) -> list[str]:
    """Every open of a file called ``name`` (any mode), recorded."""
    seen: list[str] = []
    real_open = builtins.open

    def counting(file, *a, **k):
        if isinstance(file, (str, os.PathLike)) and Path(file).name == name:
            seen.append(str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", counting)
    monkeypatch.setattr("io.open", counting)
    return seen


# -- 2. RiskControl.apply reads the folder's fingerprint file once per version of it ------------------------------
def test_per_case_apply_reads_the_folders_infer_json_once_per_version(toy, tmp_path, monkeypatch):
    pred = tmp_path / "pred"
    shutil.copytree(toy["predictions"], pred)
    from monai_unc.io.provenance import prediction_fingerprint

    ids = [f"toy{i:03d}" for i in range(4)]
    rule = dataclasses.replace(_rule(), fingerprint=prediction_fingerprint(pred, "monai-unc", ids))
    files = find_prediction_cases(pred, rule)
    assert len(files) == 4
    seen = _reads_of("infer.json", monkeypatch)
    # the copy was just written: read_json_cached keeps no version changed in the last seconds (coarse timestamps);
    # here every version is kept at once (the time stamps of this file system are fine)
    monkeypatch.setattr("monai_unc.io.files.SETTLE_S", -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(3):
            for f in files:
                RiskControl().apply(f, rule)
    # before the fix: 3 reads per call (fingerprint, regions twice), 36 in all
    assert len(seen) <= 1, len(seen)
    # the file changes (same size, the modification time set back): the change is seen, never the stale value
    st = (pred / "infer.json").stat()
    other = json.dumps({**INFER, "settings": {**INFER["settings"], "model": "tox"}})
    assert len(other) == len(json.dumps(INFER))
    (pred / "infer.json").write_text(other)
    os.utime(pred / "infer.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(FingerprintMismatch, match="model"):
            RiskControl().apply(files[0], rule)


# -- 1. ConformalMasks.apply on one case checks the predictions' fingerprint --------------------------------------
def _conformal_doc(data, fingerprint):
    from monai_unc.evaluation.conformal import ConformalRuleFile
    from monai_unc.io import load_case, match_cases
    from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule

    cases = [load_case(c) for c in match_cases(data["labels"], data["predictions"])]
    rule = fit_conformal_rule([conformal_case_state(c.probs, c.label, activation="softmax", side="outer", grid=16)
                               for c in cases] * 3, 0.3)
    return ConformalRuleFile({"outer": rule}, {"outer": 0.3}, None, dict(fingerprint),
                             [f"c{i}" for i in range(3 * len(cases))])


def test_per_case_conformal_masks_check_the_fingerprint_as_the_folder_path_does(toy, tmp_path):
    from monai_unc.evaluation.conformal import run_conformal
    from monai_unc.io import load_case, read_volume
    from monai_unc.io.provenance import prediction_fingerprint
    from monai_unc.products import ConformalMasks

    ids = [f"toy{i:03d}" for i in range(4)]
    fp = prediction_fingerprint(toy["predictions"], "monai-unc", ids)
    good, other = _conformal_doc(toy, fp), _conformal_doc(toy, {**fp, "num_samples": 16})
    files = {f.case_id: f for f in find_prediction_cases(toy["predictions"], _rule())}
    loaded = load_case(files["toy000"], 2)
    product = ConformalMasks({"outer": 0.3})
    # a loaded case carries no paths: before review 61 its masks were made whatever model made it
    with pytest.raises(ValueError, match="predictions"):
        product.apply(loaded, other)
    with pytest.raises(FingerprintMismatch, match="num_samples"):
        product.apply(loaded, other, predictions=toy["predictions"])
    with pytest.raises(FingerprintMismatch, match="num_samples"):
        product.apply(loaded, other, fingerprint=fp)
    with pytest.raises(FingerprintMismatch, match="num_samples"):
        product.apply(files["toy000"], other)  # the case's files: the folder of its segmentation
    with pytest.raises(TypeError, match="allow_mismatch"):
        product.apply(files["toy000"], other, allow_mismatch="yes")
    with pytest.raises(ValueError, match="not both"):
        product.apply(loaded, good, predictions=toy["predictions"], fingerprint=fp)
    # the explicit opt-out: the masks, with a warning naming the case
    with pytest.warns(UserWarning, match="'toy000': no guarantee.*num_samples"):
        allowed = product.apply(files["toy000"], other, allow_mismatch=True)
    with pytest.warns(UserWarning, match="'toy000': no guarantee.*not checked"):
        product.apply(loaded, other, allow_mismatch=True)
    # matching predictions: silent, and the masks monai-unc conformal writes for the case
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        masks, _, names = product.apply(files["toy000"], good)
        same = product.apply(loaded, good, fingerprint=fp)[0]
    assert (masks["outer"] == allowed[0]["outer"]).all() and (same["outer"] == masks["outer"]).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_conformal(toy["predictions"], good, tmp_path / "masks")
    written, _ = read_volume(tmp_path / "masks" / "toy000_outer.nii.gz")
    assert names == ["1"] and (np.asarray(written).astype(bool).reshape(masks["outer"].shape) == masks["outer"]).all()


# -- 4. POSIX ACLs of the signing key and the trusted keys ---------------------------------------------------------
def _grant(path: Path, entry: str, perms: int) -> None:
    """Give another user (``u:nobody``) ``perms`` through the file's ACL: setfacl where installed, else the xattr."""
    import struct
    import subprocess

    if shutil.which("setfacl"):
        rwx = "".join(c if perms & b else "-" for c, b in (("r", 4), ("w", 2), ("x", 1)))
        subprocess.run(["setfacl", "-m", f"{entry}:{rwx}", str(path)], check=True)
        return
    import pwd

    if not hasattr(os, "setxattr"):
        pytest.skip("no setfacl and no extended attributes on this platform")
    uid = pwd.getpwnam(entry.split(":")[1]).pw_uid
    mode = path.stat().st_mode
    own, other = (mode >> 6) & 7, mode & 7
    entries = [(0x01, own, 0xFFFFFFFF), (0x02, perms, uid), (0x04, (mode >> 3) & 7, 0xFFFFFFFF),
               (0x10, perms | ((mode >> 3) & 7), 0xFFFFFFFF), (0x20, other, 0xFFFFFFFF)]
    try:
        os.setxattr(path, "system.posix_acl_access",
                    struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))
    except OSError as e:
        pytest.skip(f"no POSIX ACLs on this file system ({e})")


def _private_group_ok(path: Path) -> None:
    """Skip where the file's group is not its owner's private group: the mode check alone then refuses it."""
    from monai_unc.io import signing

    st = path.stat()
    if not signing._private_group(st.st_gid, st.st_uid):
        pytest.skip("the file's group is not its owner's private group here")


@pytest.mark.skipif(os.name != "posix" or not hasattr(os, "getxattr"), reason="POSIX ACLs are read on Linux")
def test_signing_key_readable_by_another_user_through_an_acl_is_refused(tmp_path, monkeypatch):
    from monai_unc.io.signing import UnprotectedKeyError, generate_key_pair, sign_digest

    priv, _ = generate_key_pair(tmp_path / "keys")
    sign_digest("0" * 64, priv)  # 0600, no ACL: signs
    _private_group_ok(priv)
    _grant(priv, "u:nobody", 4)
    assert oct(priv.stat().st_mode & 0o777) == "0o640"  # the mode shows the ACL's mask: the private group's
    # before review 61: signed, while nobody could read the key
    with pytest.raises(UnprotectedKeyError, match=r"through its ACL \(user nobody \(uid \d+\): read\).*setfacl -b"):
        sign_digest("0" * 64, priv)


@pytest.mark.skipif(os.name != "posix" or not hasattr(os, "getxattr"), reason="POSIX ACLs are read on Linux")
def test_trusted_key_writable_by_another_user_through_an_acl_is_refused(tmp_path, monkeypatch):
    from monai_unc.io.signing import TRUSTED_KEYS_DIR, generate_key_pair, trusted_public_keys

    cfg = tmp_path / "cfg"
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(cfg))
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    _, pub = generate_key_pair(cfg / TRUSTED_KEYS_DIR, "colleague")
    cfg.chmod(0o700)
    (cfg / TRUSTED_KEYS_DIR).chmod(0o700)
    assert len(trusted_public_keys()) == 1
    _private_group_ok(pub)
    _grant(pub, "u:nobody", 6)
    with pytest.raises(ValueError, match=r"writable by other users through its ACL \(user nobody.*write"):
        trusted_public_keys()


def test_acl_entries_are_read_under_the_mask_and_skip_the_owner(tmp_path, monkeypatch):
    # the ACL parser on given bytes (any platform): a named user's write under a read-only mask grants nothing
    import struct

    from monai_unc.io import signing

    path = tmp_path / "k.pub"
    path.write_text("x")
    uid = path.stat().st_uid

    def acl(*entries):
        return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)

    other, group = uid + 4242, 4242 + 77
    user_name, group_name = signing._id_name(True, other), signing._id_name(False, group)
    cases = [
        (acl((1, 6, 0xFFFFFFFF), (2, 6, other), (0x10, 4, 0xFFFFFFFF)), 6, [f"user {user_name}: read"]),
        (acl((1, 6, 0xFFFFFFFF), (2, 6, other), (0x10, 4, 0xFFFFFFFF), (0x20, 0, 0)), 2, []),  # write masked
        (acl((1, 6, 0xFFFFFFFF), (2, 6, uid), (0x10, 6, 0xFFFFFFFF)), 6, []),  # the owner's own entry
        (acl((1, 6, 0xFFFFFFFF), (8, 2, group), (0x10, 6, 0xFFFFFFFF)), 2, [f"group {group_name}: write"]),
        (b"\x01\x00", 6, ["an ACL this version cannot read (2 bytes): treat it as granting 6"]),
    ]
    for raw, perms, want in cases:
        monkeypatch.setattr(os, "getxattr", lambda p, name, raw=raw: raw, raising=False)
        assert signing.acl_grants(path, perms) == want, raw
    monkeypatch.setattr(os, "getxattr", lambda p, name: (_ for _ in ()).throw(OSError(95, "not supported")),
                        raising=False)
    assert signing.acl_grants(path, 6) == []  # a file system without extended attributes: skipped


# -- 3. triage.json carries its digest and, with a signing key configured, its signature ----------------------------
def _flip_one_referral(doc: dict) -> dict:
    """An edit check_recorded_decisions cannot see: a referred case accepted, its score lowered to an accepted one's,
    the counts, lists, reasons and order made to agree."""
    from monai_unc.evaluation import triage_order

    doc = json.loads(json.dumps(doc))
    cases = doc["cases"]
    ok = next(c for c in cases if c["decision"] == "accept")
    bad = next(c for c in cases if c["code"] == "above_threshold")
    bad.update(score=ok["score"], decision="accept", code="accepted", reason=ok["reason"])
    doc["accepted"] = [c["case"] for c in cases if c["decision"] == "accept"]
    doc["review"] = [c["case"] for c in cases if c["decision"] == "review"]
    doc["n_accepted"], doc["n_review"] = len(doc["accepted"]), len(doc["review"])
    doc["reasons"] = {}
    for c in cases:
        doc["reasons"][c["code"]] = doc["reasons"].get(c["code"], 0) + 1
    ids = [c["case"] for c in cases]
    order = triage_order(ids, np.array([c["score"] for c in cases], dtype=float))
    doc["order"] = [ids[i] for i in order]
    for k, i in enumerate(order):
        cases[i]["rank"] = k + 1
    return doc


@pytest.fixture()
def signed_triage(toy, tmp_path, monkeypatch):
    from monai_unc.evaluation.triage import run_triage
    from monai_unc.io.signing import generate_key_pair

    cfg = tmp_path / "cfg"
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(cfg))
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    generate_key_pair(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        first = run_triage(toy["predictions"], _matching(toy), tmp_path / "t0")
        scores = sorted(c["score"] for c in first.summary["cases"] if c["score"] is not None)
        assert len(scores) >= 2, first.summary["cases"]
        rule = _matching(toy, threshold=(scores[0] + scores[1]) / 2)
        result = run_triage(toy["predictions"], rule, tmp_path / "t1")
    codes = sorted(c["code"] for c in result.summary["cases"])
    assert "accepted" in codes and "above_threshold" in codes, codes
    return tmp_path / "t1", result


def test_triage_json_is_signed_and_an_edited_decision_is_detected(signed_triage, tmp_path):
    from monai_unc.evaluation import check_triage_summary
    from monai_unc.io.provenance import rule_digest
    from monai_unc.io.signing import Trust
    from monai_unc.monitoring.records import read_triage_run
    from monai_unc.report.triage import build_triage_page

    folder, result = signed_triage
    path = folder / "triage.json"
    doc = json.loads(path.read_text())
    assert doc == result.summary and doc["digest"] == rule_digest(doc) and doc["signature"]["algorithm"] == "ed25519"
    assert check_triage_summary(doc, "t").startswith("signed by SHA256:")
    assert check_triage_summary(doc, "t", Trust()).startswith("signed by")
    build_triage_page(folder, tmp_path / "page0", n_cases=0)  # the genuine file reads
    # a referred case accepted, with its score edited to agree: before review 61 every reader took it
    edited = _flip_one_referral(doc)
    path.write_text(json.dumps(edited))
    for read in (lambda: build_triage_page(folder, tmp_path / "page1", n_cases=0), lambda: read_triage_run(folder)):
        with pytest.raises(ValueError, match="does not match its digest"):
            read()
    # the digest recomputed by whoever edited it: the signature no longer matches
    edited["digest"] = rule_digest(edited)
    path.write_text(json.dumps(edited))
    with pytest.raises(ValueError, match="signature .* does not match its content"):
        build_triage_page(folder, tmp_path / "page2", n_cases=0)
    # the signature removed too: read as unsigned by default, refused where a trusted signature is required
    del edited["signature"]
    assert check_triage_summary(edited, "t").startswith("unsigned")
    with pytest.raises(ValueError, match="is not signed"):
        check_triage_summary(edited, "t", Trust())
    with pytest.raises(ValueError, match="without its field 'digest'"):
        check_triage_summary({**doc, "digest": None}, "t")
    with pytest.raises(TypeError, match="trust"):
        check_triage_summary(doc, "t", True)


def test_triage_json_without_a_signing_key_has_its_digest(toy, tmp_path, monkeypatch):
    from monai_unc.evaluation import check_triage_summary
    from monai_unc.evaluation.triage import run_triage

    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "empty"))
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = run_triage(toy["predictions"], _matching(toy), tmp_path / "t")
    doc = json.loads((tmp_path / "t" / "triage.json").read_text())
    assert "signature" not in doc and not (tmp_path / "empty").exists()  # no key is created for it
    assert check_triage_summary(doc, "t").startswith("unsigned") and doc == result.summary
    doc["cases"][0]["reason"] = "edited"
    with pytest.raises(ValueError, match="does not match its digest"):
        check_triage_summary(doc, "t")


# -- hostile: the guarantees over repeated calibration / test splits ------------------------------------------------
# Each test draws many calibration sets, fits the rule on each and measures the true quantity the rule certifies;
# a binomial (or one-sided normal) test then asks whether the failures exceed the stated probability. The level of
# each test is 1e-3, so a rule that holds its guarantee fails it about once in a thousand seeds of the whole test.
P_FAIL = 1e-3


def _binomial_p_above(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) >= k): the one-sided p-value of ``k`` failures under the stated probability ``p``."""
    from scipy import stats

    return float(stats.binomtest(k, n, p, alternative="greater").pvalue)


@pytest.mark.parametrize("method, undefined", [("sgr", 0.0), ("sgr", 0.2), ("ltt", 0.0)])
def test_risk_controlled_threshold_holds_its_guarantee_over_calibration_draws(method, undefined):
    from monai_unc.metrics.risk_control import risk_controlled_threshold

    # scores U(0, 1), failure probability 0.4 s^2: the accepted cases' true risk E[0.4 s^2 | s <= t] = 0.4 t^2 / 3
    # exceeds the target 0.1 exactly when t > sqrt(0.75); with probability at least 1 - delta it must not.
    # undefined: that share of easy cases (risk 0) has no score; referred, they must not lend the rest their ease
    target, delta, n, draws = 0.1, 0.1, 300, 200 if method == "sgr" else 120
    violations = feasible = 0
    for seed in range(draws):
        rng = np.random.default_rng(61_000 + seed)
        s = rng.random(n)
        p = 0.4 * s**2
        risk = (rng.random(n) < p).astype(float) if method == "sgr" else np.minimum(1.0, 2 * p * rng.random(n))
        if undefined:
            gone = rng.random(n) < undefined
            s, risk = np.where(gone, np.nan, s), np.where(gone, 0.0, risk)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # an infeasible draw refers every case (risk 0)
            res = risk_controlled_threshold(s, risk, target, delta, method=method, n_candidates=20,
                                            undefined="refer" if undefined else "error")
        if res.feasible:
            feasible += 1
            t = min(float(res.threshold), 1.0)
            violations += bool(0.4 * t**2 / 3 > target)
    assert feasible >= draws // 10, feasible  # the test has power: most draws certify a threshold
    assert _binomial_p_above(violations, draws, delta) > P_FAIL, (violations, draws)


def _toy_cases(n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Cases of 144 voxels with a case-wise miscalibrated probability (temperature in [0.4, 2.5])."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        z = rng.normal(0.0, 2.5, (12, 12)) + rng.normal(-1.0, 1.0)
        y = (rng.random(z.shape) < 1 / (1 + np.exp(-z))).astype(int)
        p = 1 / (1 + np.exp(-rng.uniform(0.4, 2.5) * z))
        if y.any():
            out.append((np.stack([1 - p, p]).astype(np.float32), y))
    return out


def _mask_loss(mask: np.ndarray, y: np.ndarray, side: str) -> float:
    """The loss of a mask, from the mask and the truth alone: FNR (outer), false-positive share (inner)."""
    if side == "outer":
        return 1.0 - float((mask & (y == 1)).sum()) / float((y == 1).sum())
    return 0.0 if not mask.any() else float((mask & (y == 0)).sum()) / float(mask.sum())


@pytest.mark.parametrize("side", ["outer", "inner"])
def test_conformal_masks_hold_their_guarantees_over_calibration_draws(side):
    from scipy import stats

    from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule

    pool = _toy_cases(1200, 61)
    states = [conformal_case_state(p, y, activation="softmax", side=side, grid=64) for p, y in pool]
    alpha, tol, n_cal, n_test, draws = 0.1, 0.2, 40, 10, 150
    mean_loss, above, first_above = [], [], 0
    for seed in range(draws):
        idx = np.random.default_rng(62_000 + seed).permutation(len(pool))
        cal, test = idx[:n_cal], idx[n_cal:n_cal + n_test]
        crc = fit_conformal_rule([states[i] for i in cal], alpha)  # E[loss] <= alpha
        hp = fit_conformal_rule([states[i] for i in cal], alpha, tol=tol)  # P(loss > tol) <= alpha
        mean_loss.append(np.mean([_mask_loss(crc.apply(pool[i][0])[1], pool[i][1], side) for i in test]))
        hp_losses = [_mask_loss(hp.apply(pool[i][0])[1], pool[i][1], side) for i in test]
        above.append(np.mean([v > tol for v in hp_losses]))
        first_above += hp_losses[0] > tol  # one new case per draw: exactly Bernoulli(<= alpha)
    # expectation control: the mean over draws of the new cases' loss, one-sided against alpha
    m, se = float(np.mean(mean_loss)), float(np.std(mean_loss, ddof=1) / np.sqrt(draws))
    assert stats.norm.sf((m - alpha) / se) > P_FAIL, (m, se)
    # the high-probability rule: a binomial test on one new case per draw, and the mean share above tol
    assert _binomial_p_above(first_above, draws, alpha) > P_FAIL, first_above
    m, se = float(np.mean(above)), float(np.std(above, ddof=1) / np.sqrt(draws))
    assert stats.norm.sf((m - alpha) / se) > P_FAIL, (m, se)


# -- 1b. a new case resampled otherwise than the conformal rule's calibration cases --------------------------------
def test_conformal_rule_records_the_calibration_geometry_and_warns_on_another(tmp_path):
    from monai_unc.evaluation import EvaluationConfig, run_evaluate
    from monai_unc.evaluation.conformal import ConformalRuleFile, run_conformal
    from monai_unc.io.provenance import rule_digest
    from monai_unc.products import ConformalMasks

    cal = write_toy_cohort(tmp_path / "cal", n_cases=6, shape=(12, 12, 12), spacing=(1.5, 1.0, 2.0), seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(cal["labels"], cal["predictions"], tmp_path / "eval",
                     EvaluationConfig(spatial=False, products=[ConformalMasks({"outer": 0.3})]))
    path = tmp_path / "eval" / "conformal_rule.json"
    doc = ConformalRuleFile.load(path)
    # before review 61 the rule recorded nothing of its calibration cases' resampling
    assert doc.geometry == {"spacing_min": [1.5, 1.0, 2.0], "spacing_max": [1.5, 1.0, 2.0], "voxels_min": 12**3,
                            "voxels_max": 12**3}
    same = write_toy_cohort(tmp_path / "same", n_cases=2, shape=(12, 12, 12), spacing=(1.5, 1.0, 2.0), seed=4)
    other = write_toy_cohort(tmp_path / "other", n_cases=2, shape=(16, 12, 12), spacing=(1.0, 1.0, 1.0), seed=4)
    product = ConformalMasks({"outer": 0.3})
    files = {f.case_id: f for f in find_prediction_cases(other["predictions"], _rule())}
    with pytest.warns(UserWarning, match=r"case 'toy000': voxel spacing 1x1x1 mm \(calibration cases: 1.5x1x2\) and "
                                         r"2304 voxels \(calibration cases: 1728\): resampled"):
        product.apply(files["toy000"], path)
    with pytest.warns(UserWarning, match="case 'toy001': voxel spacing"):
        run_conformal(other["predictions"], path, tmp_path / "masks_other")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_conformal(same["predictions"], path, tmp_path / "masks_same")
    assert not [w for w in caught if "resampled" in str(w.message)]
    # the field is untrusted input: checked when read, and covered by the digest
    raw = json.loads(path.read_text())
    for bad, why in (({**raw["geometry"], "voxels_min": -1}, "voxels_min"),
                     ({**raw["geometry"], "spacing_max": [1.0, 1.0, 2.0]}, "at most"),
                     ({**raw["geometry"], "extra": 1}, "must be an object")):
        edited = {**raw, "geometry": bad}
        with pytest.raises(ValueError, match=why):
            ConformalRuleFile.from_json({**edited, "digest": rule_digest(edited)})
