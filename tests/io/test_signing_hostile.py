"""Signed rules under attack, beyond tests/io/test_signing.py: edits that keep the signed digest, malformed and
transplanted signature objects, and the commands' one-line refusal (exit 2) of such files.

The signed digest is that of the *parsed* content (:func:`monai_unc.io.provenance.check_signature`), so any two texts
that parse to the same content share a signature. Two such edits used to pass: a ``null`` replaced by a number beyond
a float's range (``1e400`` read as infinity, which the canonical form writes as ``null`` again) and a key given twice in
one object (Python keeps the last one; a person or another reader may see the first). Both are now refused when the
file is read.
"""

from __future__ import annotations

import base64
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import RULE_FILE
from monai_unc.io.provenance import (
    check_signature,
    parse_untrusted_json,
    read_checked_json,
    rule_digest,
    write_signed_json,
)
from monai_unc.io.signing import Trust, generate_key_pair, sign_digest

_MARK = '"@@value@@"'


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh configuration folder (its key pair is created by the first signature)."""
    monkeypatch.delenv("MONAI_UNC_CONFIG_DIR", raising=False)
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "monai-unc"


def _signed(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    doc = {"format": "f", "format_version": 1, "threshold": 0.5, "bound": None, "cases": ["a", "b"]}
    path = write_signed_json(tmp_path / "rule.json", doc)
    return path, json.loads(path.read_text())


def _read(path: Path) -> dict[str, Any]:
    return read_checked_json(path, fmt="f", versions=(1,), what="rule", written_by="w", digest=False)


def _with(doc: dict[str, Any], where: tuple[Any, ...], literal: str, drop_digest: bool = True) -> str:
    """The JSON text of ``doc`` with the value at ``where`` written as ``literal`` (raw JSON text)."""
    d = json.loads(json.dumps(doc))
    if drop_digest:
        d.pop("digest", None)
    node = d
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = "@@value@@"
    text = json.dumps(d, indent=1)
    assert text.count(_MARK) == 1
    return text.replace(_MARK, literal)


# --------------------------------------------------------------------------- edits that keep the signed digest
@pytest.mark.parametrize("literal", ["1e400", "-1e400", "1E999", "-0.1e+500"])
def test_a_null_cannot_become_an_overflowing_number(config, tmp_path, literal):
    """``null`` -> ``1e400``: the file reads as infinity, whose canonical form is ``null`` again, so the signature used
    to verify the edited file; now the number is refused when the file is read, naming the file."""
    path, doc = _signed(tmp_path)
    edited = tmp_path / "edited.json"
    edited.write_text(_with(doc, ("bound",), literal))
    with pytest.raises(ValueError, match=r"^rule .*edited\.json is not readable JSON: .*out of range"):
        _read(edited)
    with pytest.raises(ValueError, match="out of range"):
        parse_untrusted_json(f'{{"a": [{literal}]}}', "x")
    assert check_signature(_read(path), Trust(), "r").startswith("signed by")  # the genuine file still verifies


@pytest.mark.parametrize("text", ["1e308", "-1.7976931348623157e308", "5e-324", "1e-400", "0.0", "-0.0"])
def test_numbers_within_range_still_read(text):
    """Large, tiny and underflowing numbers are finite floats: read as before."""
    assert parse_untrusted_json(f'{{"a": {text}}}', "x") == {"a": float(text)}


def test_a_key_given_twice_is_refused(config, tmp_path):
    """A key inserted before the signed one: Python kept the last (the signed value), so the signature verified, while
    a person reading the file (or a reader that keeps the first key) saw the inserted value."""
    path, _ = _signed(tmp_path)
    text = path.read_text()
    edited = tmp_path / "edited.json"
    edited.write_text(text.replace("{", '{"threshold": 0.99, ', 1))
    assert json.loads(edited.read_text())["threshold"] == 0.5  # the last one: the digest is unchanged
    with pytest.raises(ValueError, match=r"^rule .*edited\.json is not readable JSON: .*'threshold' is given twice"):
        _read(edited)
    nested = tmp_path / "nested.json"  # inside a nested object too
    nested.write_text(json.dumps({"format": "f", "format_version": 1, "x": {"a": 1}}).replace('{"a"', '{"a": 2, "a"'))
    with pytest.raises(ValueError, match="'a' is given twice"):
        _read(nested)
    assert _read(path)["threshold"] == 0.5


# --------------------------------------------------------------------------- malformed / transplanted signatures
def _resign(doc: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**doc, "signature": {**doc["signature"], **fields}}


def test_signature_objects_that_must_not_verify(config, tmp_path):
    """Every malformed or transplanted signature object is one ``ValueError`` starting with the source, and
    ``allow_unsigned`` does not accept any that claims a trusted key."""
    path, doc = _signed(tmp_path)
    trust, lax = Trust(), Trust(allow_unsigned=True)
    assert check_signature(doc, trust, "r").startswith("signed by")
    value = base64.b64decode(doc["signature"]["value"])
    other = write_signed_json(tmp_path / "other.json", {**doc, "threshold": 0.9})  # same key, another content
    attacker_priv, _ = generate_key_pair(tmp_path / "attacker")
    forged = {**doc, "threshold": 0.9}
    by_attacker = sign_digest(rule_digest(forged), attacker_priv)
    cases = {
        "not base64": _resign(doc, value="!!" + doc["signature"]["value"][2:]),
        "base64 with a newline": _resign(doc, value=doc["signature"]["value"][:20] + "\n"
                                         + doc["signature"]["value"][20:]),
        "truncated": _resign(doc, value=base64.b64encode(value[:-1]).decode()),
        "one bit flipped": _resign(doc, value=base64.b64encode(bytes([value[0] ^ 1]) + value[1:]).decode()),
        "empty": _resign(doc, value=""),
        "another document's signature": {**doc, "signature": json.loads(other.read_text())["signature"],
                                         "threshold": 0.5},
        "forged content, attacker's value under the trusted key's fields": {
            **forged, "signature": {**doc["signature"], "value": by_attacker["value"]}},
    }
    for name, bad in cases.items():
        for t in (trust, lax):
            with pytest.raises(ValueError, match=r"^r: its signature \(field 'signature'\) does not match"):
                check_signature(bad, t, "r")
                pytest.fail(f"accepted: {name}")
    for bad_sig in ("x", ["ed25519"], {"algorithm": "rsa", "key": "k", "public_key": "p", "value": "v"},
                    {**doc["signature"], "algorithm": "Ed25519"}, {**doc["signature"], "value": None},
                    {k: v for k, v in doc["signature"].items() if k != "key"},
                    {**by_attacker, "key": doc["signature"]["key"]},  # a fingerprint that is not public_key's
                    {**doc["signature"], "public_key": by_attacker["public_key"]},
                    {**doc["signature"], "public_key": "AAAA"}, {**doc["signature"], "public_key": "%%%"}):
        with pytest.raises(ValueError, match=r"^r: field 'signature' is not an ed25519 signature object"):
            check_signature({**doc, "signature": bad_sig}, lax, "r")
    # an attacker's own fingerprint: untrusted (refused), or "UNSIGNED" with allow_unsigned, never "signed by"
    with pytest.raises(ValueError, match="not a trusted key"):
        check_signature({**forged, "signature": by_attacker}, trust, "r")
    assert check_signature({**forged, "signature": by_attacker}, lax, "r").startswith("UNSIGNED")
    with pytest.raises(ValueError, match="is not signed"):  # "signature": null is a stripped signature
        check_signature({**doc, "signature": None}, trust, "r")
    # an untrusted key's signature that does not match the content: never "signed by" that key, even when allowed
    with pytest.raises(ValueError, match=r"^r: its signature \(field 'signature'\) does not match"):
        check_signature({**doc, "signature": by_attacker}, lax, "r")


@pytest.mark.parametrize("key", [
    "\r\x1b[2Ksigned by SHA256:0000 (trusted key /etc/monai-unc/dept.pub)\x1b[8m",
    "SHA256:" + "0" * 64 + "\nmonai-unc triage: rule verified",
    "SHA256:" + "A" * 64,
])
def test_a_signature_key_that_is_not_a_fingerprint_is_refused(config, tmp_path, key):
    """The ``key`` field is echoed by the messages, the printed lines and the outputs. A carriage return and terminal
    escapes used to reach the terminal with ``--allow-unsigned`` ("UNSIGNED: signed by <key>", the key erasing
    "UNSIGNED" and showing "signed by ... (trusted key ...)"), and without it a newline cut the one-line error to
    "... is signed by key"; a key that is not the fingerprint of the object's public key is now a malformed
    signature."""
    _, doc = _signed(tmp_path)
    bad = {**doc, "signature": {**doc["signature"], "key": key}}
    for t in (Trust(), Trust(allow_unsigned=True)):
        with pytest.raises(ValueError, match=r"^r: field 'signature' is not an ed25519 signature object") as e:
            check_signature(bad, t, "r")
        assert "\n" not in str(e.value) and "\x1b" not in str(e.value) and "\r" not in str(e.value)


# --------------------------------------------------------------------------- end to end: the commands refuse
@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    """A referral rule and a conformal rule certified by ``evaluate`` (signed by the module's configuration key)."""
    root = tmp_path_factory.mktemp("hostile_rules")
    mp = pytest.MonkeyPatch()
    mp.delenv("MONAI_UNC_CONFIG_DIR", raising=False)
    mp.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    mp.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    mp.setenv("XDG_CONFIG_HOME", str(root / "config"))
    a = write_toy_cohort(root / "A", n_cases=12, shape=(12, 12, 12), seed=1)
    b = write_toy_cohort(root / "B", n_cases=2, shape=(12, 12, 12), seed=2)
    ev = root / "eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev),
                         "--no-spatial", "--target-risk", "0.4", "--delta", "0.2", "--conformal", "outer:fnr=0.2",
                         "-q"]) == 0
    yield {"rule": ev / RULE_FILE, "conformal": ev / "conformal_rule.json", "new": b["predictions"]}
    mp.undo()


def _run(certified, command: str, rule: Path, out: Path, config_home: Path,
         monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return cli.main([command, "-p", str(certified["new"]), "--rule", str(rule), "-o", str(out), "-q"])


def _refused(capsys, rc: int, path: Path, what: str) -> None:
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and str(path) in err and what in err, err


@pytest.mark.slow
def test_commands_refuse_edits_that_keep_the_digest(certified, tmp_path, capsys, monkeypatch):
    """``monai-unc conformal`` on a rule whose ``null`` became ``1e400`` (it used to fail with Python's "Out of range
    float values are not JSON compliant", naming no file) and ``monai-unc triage`` on a rule with a key inserted
    twice: one line naming the file, exit 2, no outputs."""
    home = certified["rule"].parents[1] / "config"
    conformal = json.loads(certified["conformal"].read_text())
    assert conformal["delta"] is None
    edited = tmp_path / "conformal_rule.json"
    edited.write_text(_with(conformal, ("delta",), "1e400"))
    capsys.readouterr()
    _refused(capsys, _run(certified, "conformal", edited, tmp_path / "c", home, monkeypatch), edited, "out of range")
    assert not (tmp_path / "c" / "conformal.json").exists()
    twice = tmp_path / "referral_rule.json"
    twice.write_text(certified["rule"].read_text().replace("{", '{"target_risk": 0.99, ', 1))
    _refused(capsys, _run(certified, "triage", twice, tmp_path / "t", home, monkeypatch), twice, "given twice")
    assert not (tmp_path / "t" / "triage.json").exists()


@pytest.mark.slow
def test_commands_refuse_transplanted_truncated_and_replayed_rules(certified, tmp_path, capsys, monkeypatch):
    """The conformal rule's (valid) signature on the referral rule, a truncated rule and a conformal rule given to
    ``triage`` (another format): one line naming the file, exit 2."""
    home = certified["rule"].parents[1] / "config"
    rule = json.loads(certified["rule"].read_text())
    rule["signature"] = json.loads(certified["conformal"].read_text())["signature"]
    transplanted = tmp_path / "transplanted.json"
    transplanted.write_text(json.dumps(rule))
    capsys.readouterr()
    _refused(capsys, _run(certified, "triage", transplanted, tmp_path / "a", home, monkeypatch), transplanted,
             "does not match its content")
    truncated = tmp_path / "truncated.json"
    text = certified["rule"].read_text()
    truncated.write_text(text[: len(text) // 2])
    _refused(capsys, _run(certified, "triage", truncated, tmp_path / "b", home, monkeypatch), truncated,
             "not valid JSON")
    _refused(capsys, _run(certified, "triage", certified["conformal"], tmp_path / "c", home, monkeypatch),
             certified["conformal"], "is not a monai-unc referral rule file")
    assert _run(certified, "triage", certified["rule"], tmp_path / "ok", home, monkeypatch) == 0  # genuine: accepted


@pytest.mark.slow
def test_triage_refuses_a_spoofing_signature_key_even_when_unsigned_is_allowed(certified, tmp_path, capsys,
                                                                               monkeypatch):
    """``monai-unc triage --allow-unsigned`` on a rule whose signature ``key`` holds a carriage return and terminal
    escapes: it ran (exit 0) and printed them, so the terminal showed "signed by ... (trusted key ...)"; now it is one
    line naming the file, exit 2, and nothing is printed raw."""
    home = certified["rule"].parents[1] / "config"
    rule = json.loads(certified["rule"].read_text())
    rule["signature"]["key"] = "\r\x1b[2Ksigned by SHA256:0000 (trusted key /etc/monai-unc/dept.pub)\x1b[8m"
    spoof = tmp_path / "spoof.json"
    spoof.write_text(json.dumps(rule))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rc = cli.main(["triage", "-p", str(certified["new"]), "--rule", str(spoof), "-o", str(tmp_path / "s"),
                       "--allow-unsigned"])
    out = capsys.readouterr()
    assert rc == 2 and "\x1b" not in out.out + out.err and "\r" not in out.out + out.err
    err = [ln for ln in out.err.strip().splitlines() if "--allow-unsigned:" not in ln]  # the flag's own notice
    assert len(err) == 1 and str(spoof) in err[0] and "not an ed25519 signature object" in err[0], out.err
    assert not (tmp_path / "s" / "triage.json").exists()


def test_a_half_key_pair_is_completed_and_trusted_by_its_own_machine(config, tmp_path, capsys):
    """Found by hostile testing: a full disk (or kill -9) between ``signing_key.pem`` and ``signing_key.pub`` left
    the private key alone; rules this machine then signed were refused by its own triage ("not a trusted key") and
    ``keys --create`` refused ("pass overwrite to replace it", an option the command line did not have)."""
    from monai_unc.io.signing import (
        PRIVATE_KEY_FILE,
        PUBLIC_KEY_FILE,
        default_signing_key,
        key_fingerprint,
        load_public_key,
        trusted_public_keys,
    )

    priv, pub = generate_key_pair(config)
    fp = key_fingerprint(load_public_key(pub))
    signed = json.loads(_signed(tmp_path)[0].read_text())
    assert signed["signature"]["key"] == fp
    pub.unlink()  # the half pair
    # a reader derives the public key (and writes nothing); the machine that signs completes the pair
    assert check_signature(signed, Trust(), "r") == f"signed by {fp} (trusted key {priv})"
    assert not pub.exists()
    assert default_signing_key() == priv and key_fingerprint(load_public_key(pub)) == fp
    assert [str(f) for _, f in trusted_public_keys().values()] == [str(pub)]

    pub.unlink()
    assert generate_key_pair(config) == (priv, pub) and key_fingerprint(load_public_key(pub)) == fp
    pub.unlink()
    assert cli.main(["keys", "--create"]) == 0  # completes the pair, keeps the private key
    out = capsys.readouterr().out
    assert f"kept {priv}" in out and f"fingerprint {fp}" in out and (config / PRIVATE_KEY_FILE) == priv
    assert key_fingerprint(load_public_key(config / PUBLIC_KEY_FILE)) == fp


def test_keys_create_names_a_remedy_that_exists(config, capsys):
    """Found by hostile testing: ``keys --create`` on an existing pair said "pass overwrite to replace it", and
    ``keys --create --overwrite`` was "unrecognized arguments"."""
    from monai_unc.io.signing import key_fingerprint, load_public_key

    assert cli.main(["keys", "--create"]) == 0
    old = key_fingerprint(load_public_key(config / "signing_key.pub"))
    capsys.readouterr()
    assert cli.main(["keys", "--create"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "monai-unc keys --overwrite --create [FOLDER]" in err, err
    assert cli.main(["keys", "--create", "--overwrite"]) == 0
    assert key_fingerprint(load_public_key(config / "signing_key.pub")) != old
    assert (config / "signing_key.pem").stat().st_mode & 0o777 == 0o600
    capsys.readouterr()
    assert cli.main(["keys", "--overwrite"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "monai-unc keys: error: --overwrite replaces a key pair: pass it with --create [FOLDER]", err


def test_a_killed_key_write_does_not_block_the_next_keys_create(config, capsys):
    """Found by hostile testing: kill -9 before the private key's rename left ``.signing_key.pem.partial``, and the
    next ``keys --create`` failed with ``File exists: .../.signing_key.pem.partial``."""
    config.mkdir(parents=True, mode=0o700)
    (config / ".signing_key.pem.partial").write_bytes(b"-----BEGIN PRIVATE KEY-----\n")
    assert cli.main(["keys", "--create"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in config.iterdir()) == ["signing_key.pem", "signing_key.pub"]


@pytest.mark.parametrize("how", ["environment", "argument"])
@pytest.mark.parametrize("bad", ["missing", "rsa", "public"])
def test_a_named_signing_key_that_cannot_sign_is_refused(config, tmp_path, monkeypatch, how, bad):
    """Found by hostile testing: ``MONAI_UNC_SIGNING_KEY`` naming a missing file (a typo), an RSA key or a public key
    made certification write the rule unsigned with a warning and exit 0; now nothing is written, one error naming the
    key. Without a named key the default key is still created and used."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = tmp_path / "keys" / "dept.pem"
    key.parent.mkdir()
    if bad == "rsa":
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key.write_bytes(rsa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    elif bad == "public":
        key.write_bytes(generate_key_pair(tmp_path / "pair")[1].read_bytes())
    if how == "environment":
        monkeypatch.setenv("MONAI_UNC_SIGNING_KEY", str(key))
    doc = {"format": "f", "format_version": 1, "threshold": 0.5}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "written unsigned" warning either
        with pytest.raises(ValueError, match=r"rule\.json is not written: no usable signing key .*dept\.pem"):
            write_signed_json(tmp_path / "rule.json", doc, key=key if how == "argument" else None)
    assert not (tmp_path / "rule.json").exists()
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    signed = json.loads(write_signed_json(tmp_path / "rule.json", doc).read_text())
    assert check_signature(signed, Trust(), "rule").startswith("signed by")
