"""Signed rules and keys under hostile review 60 (monai_unc.io.signing, the rule readers that check signatures)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from monai_unc.io import signing

posix = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh configuration folder, nothing of the environment's keys."""
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "config"


# --------------------------------------------------------------------------------------------- the private group
def _groups(monkeypatch: pytest.MonkeyPatch, others_primary: bool) -> tuple[int, int]:
    """This user with a group named after them, no supplementary member; another user's primary group, or not."""
    import grp
    import pwd

    uid, gid = os.getuid(), os.getgid()
    name = pwd.getpwuid(uid).pw_name
    me = SimpleNamespace(pw_name=name, pw_uid=uid, pw_gid=gid)
    other = SimpleNamespace(pw_name="mallory-review60", pw_uid=uid + 4242, pw_gid=gid if others_primary else gid + 7)
    monkeypatch.setattr(grp, "getgrgid", lambda g: SimpleNamespace(gr_name=name, gr_gid=g, gr_mem=[]))
    monkeypatch.setattr(pwd, "getpwuid", lambda u: me if u == uid else other)
    monkeypatch.setattr(pwd, "getpwall", lambda: [me, other])
    return uid, gid


@posix
def test_a_group_that_is_another_users_primary_group_is_not_private(monkeypatch):
    """Another user whose primary group is the owner's group is in it without being listed in ``gr_mem``: a file that
    group can write is writable by that user (found by hostile review 60: such a group passed for private)."""
    uid, gid = _groups(monkeypatch, others_primary=True)
    assert not signing._private_group(gid, uid)


@posix
def test_a_group_named_after_its_only_user_is_private(monkeypatch):
    uid, gid = _groups(monkeypatch, others_primary=False)
    assert signing._private_group(gid, uid)


@posix
def test_trusted_keys_writable_by_another_users_primary_group_are_refused(config, tmp_path, monkeypatch):
    _, pub = signing.generate_key_pair(tmp_path / "dept")
    folder = config / signing.TRUSTED_KEYS_DIR
    folder.mkdir(parents=True, mode=0o700)
    (folder / "dept.pub").write_bytes(pub.read_bytes())
    os.chmod(folder, 0o770)
    _groups(monkeypatch, others_primary=True)
    with pytest.raises(ValueError, match="writable by other users"):
        signing.trusted_public_keys()


@posix
def test_a_private_key_readable_by_another_users_primary_group_does_not_sign(tmp_path, monkeypatch):
    priv, _ = signing.generate_key_pair(tmp_path / "keys")
    os.chmod(priv, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP)
    _groups(monkeypatch, others_primary=True)
    with pytest.raises(signing.UnprotectedKeyError, match="can be read or changed by other users"):
        signing.sign_digest("sha256:" + "0" * 64, priv)


# --------------------------------------------------------------------------------- fields a referral rule holds
def _rule():
    """A rule certified (as certify_rule does) on 12 calibration cases."""
    import warnings

    import numpy as np

    from monai_unc.evaluation.triage.rule import CalibrationRecord, ReferralRule
    from monai_unc.metrics.risk_control import risk_controlled_threshold

    rng = np.random.default_rng(1)
    scores = tuple(float(v) for v in rng.random(12))
    dice = tuple(0.5 if rng.random() < 0.5 * s else 0.9 for s in scores)
    risks = tuple(float(d < 0.8) for d in dice)
    rec = CalibrationRecord(scores, dice, risks, expected_dice_estimate="class_mean")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = risk_controlled_threshold(np.array(scores), np.array(risks), 0.6, 0.3, n_candidates=rec.n_candidates)
    return ReferralRule("predictive_entropy_fg_mean", res.threshold, res.feasible, 0.6, 0.3, "sgr", "failure", 0.8,
                        tuple(sorted(scores)), tuple(f"c{i}" for i in range(12)), bound=res.bound,
                        coverage=res.coverage, observed_risk=res.risk, n_candidates=res.n_candidates, num_classes=2,
                        record=rec)


@pytest.mark.parametrize("extra", ["z_max", "threshold_override", "Threshold"])
def test_a_referral_rule_with_a_field_it_does_not_have_is_refused(config, tmp_path, extra):
    """A field no rule holds was ignored (``"z_max": 2`` beside the rule, read as if it applied; an unsigned rule
    with it was used under --allow-unsigned), where a conformal rule file refuses it (found by hostile review 60)."""
    import json

    from monai_unc.evaluation.triage.rule import ReferralRule
    from monai_unc.io.provenance import rule_digest, write_signed_json
    from monai_unc.io.signing import Trust

    doc = _rule().to_json()
    doc[extra] = 2
    doc["digest"] = rule_digest(doc)
    with pytest.raises(ValueError, match=rf"^rule: field '{extra}' is not a field of a referral rule"):
        ReferralRule.from_json(doc, "rule", check_digest=True)
    path = write_signed_json(tmp_path / "rule.json", doc)  # signed as it is: the signature is not what refuses it
    for trust in (None, Trust(), Trust(allow_unsigned=True)):
        with pytest.raises(ValueError, match=f"^referral rule {path}: field '{extra}' is not a field"):
            ReferralRule.load(path, trust)
    # the rule as written (with its digest and signature) is read
    path = write_signed_json(tmp_path / "genuine.json", _rule().to_json())
    assert "signature" in json.loads(path.read_text())
    assert ReferralRule.load(path, Trust()).signature.startswith("signed by")


def test_every_field_a_rule_writes_is_one_it_reads():
    import numpy as np

    from monai_unc.evaluation.triage.rule import _RULE_FIELDS, ImageReference

    stats = np.random.default_rng(0).normal(size=(12, 5)) + 100
    rule = _rule()
    rule.image_reference = ImageReference.fit(stats, 4.0)
    rule.regions, rule.class_names = None, ("background", "tumour")
    rule.geometry = {"spacing_min": [1.0, 1.0, 1.0], "spacing_max": [1.0, 1.0, 2.0], "voxels_min": 8,
                     "voxels_max": 27}  # recorded since review 62
    assert set(rule.to_json()) | {"signature"} == _RULE_FIELDS


# ------------------------------------------------------------------------------------------ infer --settings-from
def test_a_huge_settings_from_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """``--settings-from`` read the whole file to find its format before any size check (found by hostile review 60:
    a multi-gigabyte file given by mistake was loaded into memory, twice, text and bytes), where every other reader of
    an untrusted JSON file checks its size first."""
    import tracemalloc

    from monai_unc.io import provenance
    from monai_unc.workflows.reuse import read_rule_settings

    monkeypatch.setattr(provenance, "MAX_DOCUMENT_BYTES", 1 << 20)
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(32 << 20)  # sparse: 32 MiB that take no disk
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=rf"^--settings-from {path} is not readable JSON: it has {32 << 20} bytes"):
            read_rule_settings(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20


def test_a_settings_from_file_that_is_not_utf8_is_one_line(tmp_path):
    from monai_unc.workflows.reuse import read_rule_settings

    path = tmp_path / "latin1.json"
    path.write_bytes('{"format": "monai-unc referral rule", "x": "é"}'.encode("latin-1"))
    with pytest.raises(ValueError, match=rf"^--settings-from {path} is not readable JSON: it is not UTF-8 text"):
        read_rule_settings(path)


# ------------------------------------------------------------------------------------------------ half key pairs
def _planted(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``folder/signing_key.pem`` alone, a private key another user owns (readable by a group: ``0640``)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    folder.mkdir(parents=True, exist_ok=True)
    priv = folder / signing.PRIVATE_KEY_FILE
    priv.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    os.chmod(priv, 0o640)
    if os.getuid() == 0:
        os.chown(priv, 4242, 4243)
    else:  # the file is then another user's
        uid = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: uid + 4242)
    return priv


@posix
def test_keys_create_does_not_adopt_a_private_key_another_user_planted(tmp_path, monkeypatch):
    """``keys --create FOLDER`` completed any ``signing_key.pem`` alone in FOLDER with its public key, and said it
    kept it as the user's: in a folder others can write (a department's shared keys folder), one of them could plant
    a private key of their own, group-readable, and then forge every rule signed with it (found by hostile review
    60). A half pair is what this user's killed write left: its private key is the user's own."""
    folder = tmp_path / "shared"
    priv = _planted(folder, monkeypatch)
    with pytest.raises(signing.UnprotectedKeyError, match=f"{priv} belongs to another user"):
        signing.generate_key_pair(folder)
    assert not (folder / signing.PUBLIC_KEY_FILE).exists()


@posix
def test_a_planted_half_pair_in_the_configuration_folder_signs_nothing(config, tmp_path, monkeypatch):
    from monai_unc.io.provenance import write_signed_json

    _planted(config, monkeypatch)
    with pytest.raises(signing.UnprotectedKeyError, match="belongs to another user"):
        write_signed_json(tmp_path / "rule.json", {"a": 1})
    assert not (tmp_path / "rule.json").exists()


@posix
def test_a_half_pair_of_ones_own_is_still_completed(tmp_path):
    priv, pub = signing.generate_key_pair(tmp_path / "keys")
    fingerprint = signing.key_fingerprint(signing.load_public_key(pub))
    pub.unlink()
    assert signing.generate_key_pair(tmp_path / "keys") == (priv, pub)
    assert signing.key_fingerprint(signing.load_public_key(pub)) == fingerprint


# ------------------------------------------------------------------------------------------- product artifacts
def test_a_products_artifact_is_read_with_its_signature_checked(config, tmp_path):
    """``read_artifact`` (the reader of a product's own artifact, :mod:`monai_unc.evaluation.products`) checked the
    unkeyed digest only, and had no way to check the signature ``write_artifact`` writes: a product's command, given
    ``trust`` by ``apply_cases``, applied an artifact edited with its digest recomputed (found by hostile review 60)."""
    import json

    from monai_unc.evaluation.products import read_artifact, write_artifact
    from monai_unc.io.provenance import rule_digest, write_signed_json
    from monai_unc.io.signing import Trust
    from monai_unc.product import CohortProduct

    class Bias(CohortProduct):
        name, title = "bias_review60", "Bias"

    path = write_artifact(tmp_path / "bias.json", Bias(), {"bias": 1.5}, ["a", "b"])
    assert read_artifact(path, "bias_review60", trust=Trust())["artifact"] == {"bias": 1.5}
    assert read_artifact(path, "bias_review60")["artifact"] == {"bias": 1.5}  # None: not checked, as before
    forged = json.loads(path.read_text())
    forged["artifact"]["bias"] = -40.0
    forged["digest"] = rule_digest(forged)
    path.write_text(json.dumps(forged))
    assert read_artifact(path, "bias_review60")["artifact"] == {"bias": -40.0}  # the digest alone cannot tell
    for trust in (Trust(), Trust(allow_unsigned=True)):
        with pytest.raises(ValueError, match="does not match its content"):
            read_artifact(path, "bias_review60", trust=trust)
    other_private, _ = signing.generate_key_pair(tmp_path / "other")
    write_signed_json(path, forged, key=other_private)  # re-signed by a key not trusted here
    with pytest.raises(ValueError, match="not a trusted key"):
        read_artifact(path, "bias_review60", trust=Trust())
    forged.pop("signature")
    path.write_text(json.dumps(forged))
    with pytest.raises(ValueError, match="is not signed"):
        read_artifact(path, "bias_review60", trust=Trust())
    doc = read_artifact(path, "bias_review60", trust=Trust(allow_unsigned=True))
    assert doc["signature_check"].startswith("UNSIGNED") and doc["artifact"] == {"bias": -40.0}
    # a field no artifact file holds (one that would pass for the check's line included) is refused
    for extra in ("signature_check", "threshold"):
        edited = {**forged, extra: "signed by SHA256:" + "0" * 64}
        edited["digest"] = rule_digest(edited)
        write_signed_json(path, edited)
        with pytest.raises(ValueError, match=f"field '{extra}' is not a field of an artifact file"):
            read_artifact(path, "bias_review60")


# ---------------------------------------------------------------------------------------------- --trusted-keys ""
def test_an_empty_trusted_keys_path_does_not_trust_the_current_folder(config, tmp_path, monkeypatch):
    """``Trust(keys=[""])`` (``[os.environ.get("KEYS", "")]`` with the variable unset) read ``Path("")``, the current
    folder: every ``*.pub`` there was trusted, e.g. one planted in a shared folder a triage runs from (found by hostile
    review 60; the command line refuses an empty ``--trusted-keys`` and ``MONAI_UNC_TRUSTED_KEYS`` skips its empty
    entries)."""
    import json

    from monai_unc._utils import PARAMETER_ATTRIBUTE
    from monai_unc.io.provenance import check_signature, write_signed_json
    from monai_unc.io.signing import Trust

    monkeypatch.chdir(tmp_path)
    planted, _ = signing.generate_key_pair(tmp_path, name="planted")
    doc = json.loads(write_signed_json(tmp_path / "rule.json", {"a": 1}, key=planted).read_text())
    for keys in ([""], ("  ",), ["", str(tmp_path / "nothing-here")]):
        # a Python caller is told the Trust field (review 63); the command line says --trusted-keys
        with pytest.raises(ValueError, match=r"trust=Trust\(keys=\[\.\.\.\]\)\): an empty path") as err:
            check_signature(doc, Trust(keys=keys), "rule")
        assert getattr(err.value, PARAMETER_ATTRIBUTE) == "trusted_keys"
    assert "trusted key" in check_signature(doc, Trust(keys=(".",)), "rule")  # the current folder, named so
    monkeypatch.setenv("MONAI_UNC_TRUSTED_KEYS", os.pathsep)  # empty entries of the variable: skipped, as before
    with pytest.raises(ValueError, match="not a trusted key"):
        check_signature(doc, Trust(), "rule")


# ------------------------------------------------------------------------- what the signature covers (checked correct)
def test_the_signature_covers_the_parsed_content_not_its_spelling(config, tmp_path):
    """The signed digest is that of the parsed content: the same content spelled otherwise (key order, spaces, a
    number written ``5e-1``, an escaped letter) keeps the signature; a string that only looks the same (NFD ``é``,
    decomposed, for the signed NFC one; nothing is normalised) or a number of another type (``1`` for ``1.0``) does
    not."""
    import json
    import unicodedata

    from monai_unc.io.provenance import check_signature, read_checked_json, write_signed_json
    from monai_unc.io.signing import Trust

    path = write_signed_json(tmp_path / "rule.json", {"format": "f", "format_version": 1, "names": ["Gehirné"],
                                                      "threshold": 0.5, "level": 1.0})
    signed = json.loads(path.read_text())

    def verify(text: str) -> str:
        edited = tmp_path / "edited.json"
        edited.write_text(text, encoding="utf-8")
        doc = read_checked_json(edited, fmt="f", versions=(1,), what="rule", written_by="w", digest=False)
        return check_signature(doc, Trust(), "rule")

    respelled = json.dumps(dict(reversed(list(signed.items()))), indent=3).replace("0.5", "5e-1").replace(
        "Gehirn", "\\u0047ehirn")
    assert verify(respelled).startswith("signed by")
    nfd = json.dumps(signed, ensure_ascii=False).replace("é", unicodedata.normalize("NFD", "é"))
    assert nfd != json.dumps(signed, ensure_ascii=False)
    for edited in (nfd, json.dumps(signed).replace('"level": 1.0', '"level": 1')):
        with pytest.raises(ValueError, match="does not match its content"):
            verify(edited)


# ------------------------------------------------------------------------------------------ the configuration folder
@pytest.mark.parametrize("xdg", ["relative/config", ".", "./cfg"])
def test_a_relative_xdg_config_home_is_ignored(tmp_path, monkeypatch, xdg):
    """A relative ``XDG_CONFIG_HOME`` made the configuration folder (the signing key, the keys trusted without being
    named) depend on the current folder: a certification run from an output folder wrote its key pair there, and a
    triage run from a shared folder trusted the keys of its ``monai-unc/trusted_keys/`` (found by hostile review 60).
    The XDG specification says such a path is invalid and must be ignored."""
    monkeypatch.delenv("MONAI_UNC_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", xdg)
    assert signing.config_dir() == tmp_path / "home" / ".config" / "monai-unc"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # an absolute one is taken
    assert signing.config_dir() == tmp_path / "xdg" / "monai-unc"


# --------------------------------------------------------------------------------------------- trust's own type
@pytest.mark.parametrize("trust", [True, False, "trusted", ["k.pub"], 0])
def test_a_trust_that_is_no_trust_is_a_type_error_naming_it(config, tmp_path, trust):
    """``ReferralRule.load(path, True)`` (and ``check_signature``, ``read_artifact``, ``run_triage(trust=...)``)
    failed with ``AttributeError: 'bool' object has no attribute 'keys'`` (found by hostile review 60)."""
    import json

    from monai_unc.evaluation.products import read_artifact, write_artifact
    from monai_unc.evaluation.triage.rule import ReferralRule
    from monai_unc.io.provenance import check_signature, write_signed_json
    from monai_unc.product import CohortProduct

    rule_path = write_signed_json(tmp_path / "rule.json", _rule().to_json())
    with pytest.raises(TypeError, match="^trust must be a Trust"):
        ReferralRule.load(rule_path, trust)
    with pytest.raises(TypeError, match="^trust must be a Trust"):
        check_signature(json.loads(rule_path.read_text()), trust, "rule")

    class Bias(CohortProduct):
        name, title = "bias_review60", "Bias"

    artifact = write_artifact(tmp_path / "bias.json", Bias(), {"bias": 1.5}, ["a"])
    with pytest.raises(TypeError, match="^trust must be a Trust"):
        read_artifact(artifact, "bias_review60", trust=trust)


# ------------------------------------------------------------------------------------- what a refusal echoes
_HUGE = "x" * 100_000


@pytest.mark.parametrize("edit", [
    lambda d: d.update(format=_HUGE),
    lambda d: d.update(format_version=list(range(20_000))),
    lambda d: d.update(feasible=_HUGE),
    lambda d: d.update(target_risk=[_HUGE]),
    lambda d: d.update(threshold={"a": _HUGE}),
    lambda d: d["calibration"].update(scores=[_HUGE]),
    lambda d: d["calibration"].update(case_scores=[_HUGE] * 12),
    lambda d: d["calibration"].update(max_candidates=_HUGE),
    lambda d: d["score"].update(column=_HUGE),
])
def test_a_refused_rule_field_is_echoed_short(tmp_path, edit):
    """A refusal of a rule file's field echoed the whole value: a hostile or corrupted file (a 100 000-character
    text, a list of 20 000 numbers) made the one-line error of ``triage --rule`` hundreds of kilobytes long (found by
    hostile review 60)."""
    import json

    from monai_unc.evaluation.triage.rule import ReferralRule
    from monai_unc.io.provenance import rule_digest

    doc = _rule().to_json()
    edit(doc)
    doc["digest"] = rule_digest(doc)
    path = tmp_path / "rule.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as err:
        ReferralRule.load(path)
    assert str(err.value).startswith(f"referral rule {path}") and len(str(err.value)) <= 1000, str(err.value)[:300]


def test_a_key_given_twice_is_echoed_short(tmp_path):
    from monai_unc.io.provenance import parse_untrusted_json

    text = f'{{"{_HUGE}": 1, "{_HUGE}": 2}}'
    with pytest.raises(ValueError, match="given twice") as err:
        parse_untrusted_json(text, "rule")
    assert len(str(err.value)) < 400 < len(text)


# -------------------------------------------------------------------- a product's reader of --settings-from
def test_a_product_reader_whose_second_parameter_is_not_trust_is_not_given_it(tmp_path):
    """``infer --settings-from`` passed ``trust`` as the second positional argument of any product's
    ``artifact_fingerprint`` with two parameters: a reader ``(path, strict=False)`` took the trusted keys for
    ``strict``, checked no signature, and nothing said so (found by hostile review 60). ``trust`` is passed by name, to
    a reader that has it (or ``**kwargs``); another is read as one written before ``trust``, with its warning."""
    import json

    from monai_unc.io.signing import Trust
    from monai_unc.product import CohortProduct, register_product, unregister_product
    from monai_unc.workflows.reuse import read_rule_settings

    calls: list[dict] = []

    class Acme(CohortProduct):
        name = "acme_review60"
        title = "Acme rule"
        artifact_format = "acme rule review60"

        @classmethod
        def artifact_fingerprint(cls, path, strict=False):
            calls.append({"strict": strict})
            return f"acme rule {path}", {}

    class Named(Acme):
        @classmethod
        def artifact_fingerprint(cls, path, **options):
            calls.append(options)
            return f"acme rule {path}", {}

    path = tmp_path / "acme.json"
    path.write_text(json.dumps({"format": "acme rule review60"}))
    trust = Trust()
    try:
        register_product(Acme)
        with pytest.warns(UserWarning, match="artifact_fingerprint takes no 'trust'"), \
                pytest.raises(ValueError, match="records no settings of monai-unc infer"):
            read_rule_settings(path, trust)
        assert calls == [{"strict": False}]
        unregister_product("acme_review60")
        register_product(Named)
        with pytest.raises(ValueError, match="records no settings of monai-unc infer"):
            read_rule_settings(path, trust)
        assert calls[-1] == {"trust": trust}
    finally:
        unregister_product("acme_review60")


# ---------------------------------------------------------------------- this machine's key, trusted without a name
@posix
@pytest.mark.parametrize("half", [False, True])
def test_this_machines_key_is_not_trusted_while_others_can_read_its_private_key(config, tmp_path, half):
    """The configuration folder's own public key (or, of a half pair, its private key's) was trusted while
    ``signing_key.pem`` beside it was readable by every user: signing refused the key (whoever copied it can certify
    rules as its owner) but this machine went on accepting what any copy signed (found by hostile review 60)."""
    import json

    from monai_unc._utils import PARAMETER_ATTRIBUTE
    from monai_unc.io.provenance import check_signature, write_signed_json
    from monai_unc.io.signing import Trust

    doc = json.loads(write_signed_json(tmp_path / "rule.json", {"a": 1}).read_text())  # the configuration's new pair
    assert check_signature(doc, Trust(), "rule").startswith("signed by")
    if half:
        (config / signing.PUBLIC_KEY_FILE).unlink()
    os.chmod(config / signing.PRIVATE_KEY_FILE, 0o644)
    with pytest.raises(signing.UnprotectedKeyError, match="can be read or changed by other users") as err:
        check_signature(doc, Trust(), "rule")
    assert getattr(err.value, PARAMETER_ATTRIBUTE) == "trusted_keys"
    os.chmod(config / signing.PRIVATE_KEY_FILE, 0o600)
    assert check_signature(doc, Trust(), "rule").startswith("signed by")
