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
    data = write_toy_cohort(tmp_path_factory.mktemp("toy61") / "A", n_cases=4, shape=(8, 8, 8), seed=1)
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
