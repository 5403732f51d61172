"""Signed rules (monai_unc.io.signing): a forged rule (a field edited and the digest recomputed, or re-signed with a
key that is not trusted) is refused; a genuine signed rule is accepted; ``--allow-unsigned`` is printed, recorded in
the outputs and shown on the triage page; the first certification creates the user's key pair in the configuration
folder (owner-only), never in an output folder."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import RULE_FILE
from monai_unc.io.provenance import check_signature, rule_digest, write_signed_json
from monai_unc.io.signing import Trust, config_dir, generate_key_pair, key_fingerprint, load_public_key


@pytest.fixture
def config(tmp_path, monkeypatch) -> Path:
    """A fresh configuration folder for the test."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "monai-unc"


def test_config_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("MONAI_UNC_CONFIG_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "x"))
    assert config_dir() == tmp_path / "x" / "monai-unc"
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "own"))
    assert config_dir() == tmp_path / "own"


def test_sign_and_verify_documents(config, tmp_path):
    doc = {"format": "f", "format_version": 1, "value": 0.5}
    doc["digest"] = rule_digest(doc)
    path = write_signed_json(tmp_path / "out" / "rule.json", doc)  # the first signature creates the user's key
    priv = config / "signing_key.pem"
    assert priv.is_file() and (config / "signing_key.pub").is_file()
    assert priv.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["rule.json"]  # no key in the output folder
    signed = json.loads(path.read_text())
    trust = Trust()
    assert check_signature(signed, trust, "r").startswith("signed by SHA256:")
    assert signed["signature"]["key"] == key_fingerprint(load_public_key(config / "signing_key.pub"))
    # an edit, with the digest recomputed: the signature no longer matches
    forged = {**signed, "value": 0.9}
    forged["digest"] = rule_digest(forged)
    with pytest.raises(ValueError, match=r"^r: its signature \(field 'signature'\) does not match"):
        check_signature(forged, trust, "r")
    with pytest.raises(ValueError, match=r"^r: its signature"):
        check_signature(forged, Trust(allow_unsigned=True), "r")  # a broken signature is never allowed
    # re-signed with another key: not trusted, unless its public key is
    other_priv, other_pub = generate_key_pair(tmp_path / "other")
    write_signed_json(tmp_path / "forged.json", forged, key=other_priv)
    resigned = json.loads((tmp_path / "forged.json").read_text())
    with pytest.raises(ValueError, match="not a trusted key"):
        check_signature(resigned, trust, "r")
    assert "trusted key" in check_signature(resigned, Trust(keys=(str(other_pub),)), "r")
    assert "trusted key" in check_signature(resigned, Trust(keys=(str(tmp_path / "other"),)), "r")  # a folder
    # unsigned: refused unless allowed, and then said so
    bare = {k: v for k, v in signed.items() if k != "signature"}
    with pytest.raises(ValueError, match="is not signed"):
        check_signature(bare, trust, "r")
    assert check_signature(bare, Trust(allow_unsigned=True), "r").startswith("UNSIGNED")


def test_trusted_keys_from_the_environment(config, tmp_path, monkeypatch):
    priv, pub = generate_key_pair(tmp_path / "dept")
    write_signed_json(tmp_path / "r.json", {"a": 1}, key=priv)
    doc = json.loads((tmp_path / "r.json").read_text())
    with pytest.raises(ValueError, match="not a trusted key"):
        check_signature(doc, Trust(), "r")
    monkeypatch.setenv("MONAI_UNC_TRUSTED_KEYS", str(pub))
    assert "trusted key" in check_signature(doc, Trust(), "r")
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS")
    (config / "trusted_keys").mkdir(parents=True)
    (config / "trusted_keys" / "dept.pub").write_bytes(pub.read_bytes())
    assert "trusted key" in check_signature(doc, Trust(), "r")
    with pytest.raises(ValueError, match="no such file"):
        check_signature(doc, Trust(keys=(str(tmp_path / "missing.pub"),)), "r")


def test_signing_key_from_the_environment(config, tmp_path, monkeypatch):
    priv, pub = generate_key_pair(tmp_path / "dept")
    monkeypatch.setenv("MONAI_UNC_SIGNING_KEY", str(priv))
    write_signed_json(tmp_path / "r.json", {"a": 1})
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["signature"]["key"] == key_fingerprint(load_public_key(pub))
    assert not (config / "signing_key.pem").exists()  # the department's key, no personal key created


# ------------------------------------------------------------------------------------------- end to end: triage
@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    """A referral rule certified by ``evaluate --target-risk`` (signed by the tests' configuration key)."""
    root = tmp_path_factory.mktemp("signed")
    a = write_toy_cohort(root / "A", n_cases=12, shape=(12, 12, 12), seed=1)
    b = write_toy_cohort(root / "B", n_cases=2, shape=(12, 12, 12), seed=2)
    ev = root / "eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev),
                         "--no-spatial", "--target-risk", "0.4", "--delta", "0.2", "-q"]) == 0
    return {"rule": ev / RULE_FILE, "new": b["predictions"], "root": root}


def _triage(certified, rule: Path, out: Path, *extra: str) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return cli.main(["triage", "-p", str(certified["new"]), "--rule", str(rule), "-o", str(out), "-q", *extra])


@pytest.mark.slow
def test_genuine_rule_accepted_forged_refused(certified, tmp_path, capsys):
    assert "signature" in json.loads(certified["rule"].read_text())
    assert _triage(certified, certified["rule"], tmp_path / "ok") == 0
    summary = json.loads((tmp_path / "ok" / "triage.json").read_text())
    assert summary["rule_signature"].startswith("signed by SHA256:")
    # the forgery of the campaign: calibration record edited, certificate rebuilt, digest recomputed
    d = json.loads(certified["rule"].read_text())
    d["calibration"]["dice"] = [1.0] * len(d["calibration"]["dice"])
    d["threshold"] = max(d["calibration"]["scores"])
    d["feasible"], d["accept_all"] = True, False
    d["digest"] = rule_digest(d)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(d))
    capsys.readouterr()
    assert _triage(certified, forged, tmp_path / "f") == 2
    err = capsys.readouterr().err
    assert str(forged) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "f" / "triage.json").exists()


@pytest.mark.slow
def test_older_format_refused_unless_allowed(certified, tmp_path, capsys):
    d = json.loads(certified["rule"].read_text())
    d["format_version"] = 2
    for k in ("case_scores", "dice", "risks", "undefined_score", "max_candidates", "sequence"):
        d["calibration"].pop(k, None)
    d.pop("signature")
    d["digest"] = rule_digest(d)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(d))
    capsys.readouterr()
    assert _triage(certified, old, tmp_path / "o") == 2
    assert "format_version 2" in capsys.readouterr().err
    assert _triage(certified, old, tmp_path / "o", "--allow-unsigned") == 0
    err = capsys.readouterr().err
    assert "--allow-unsigned" in err  # printed
    summary = json.loads((tmp_path / "o" / "triage.json").read_text())
    assert any("records no calibration cases" in n for n in summary["notes"])


@pytest.mark.slow
def test_allow_unsigned_is_printed_recorded_and_on_the_page(certified, tmp_path, capsys):
    d = json.loads(certified["rule"].read_text())
    d.pop("signature")
    unsigned = tmp_path / "unsigned.json"
    unsigned.write_text(json.dumps(d))
    capsys.readouterr()
    assert _triage(certified, unsigned, tmp_path / "u") == 2
    assert "is not signed" in capsys.readouterr().err
    assert cli.main(["triage", "-p", str(certified["new"]), "--rule", str(unsigned), "-o", str(tmp_path / "u"),
                     "--allow-unsigned"]) == 0
    out = capsys.readouterr()
    assert "--allow-unsigned" in out.err and "UNSIGNED" in out.out
    summary = json.loads((tmp_path / "u" / "triage.json").read_text())
    assert summary["rule_signature"].startswith("UNSIGNED")
    assert any("UNSIGNED" in n for n in summary["notes"])
    assert "UNSIGNED" in (tmp_path / "u" / "triage.html").read_text()


def test_keys_command(config, tmp_path, capsys):
    assert cli.main(["keys"]) == 0
    assert "none yet" in capsys.readouterr().out
    assert cli.main(["keys", "--create"]) == 0
    out = capsys.readouterr().out
    assert (config / "signing_key.pem").stat().st_mode & 0o777 == 0o600
    fp = out.strip().splitlines()[-1].split()[-1]
    assert cli.main(["keys", "--show", str(config / "signing_key.pub")]) == 0
    assert fp in capsys.readouterr().out
    assert cli.main(["keys"]) == 0
    assert fp in capsys.readouterr().out
    assert cli.main(["keys", "--create"]) == 2  # an existing pair is never replaced
    assert "exists" in capsys.readouterr().err
    assert os.path.isfile(config / "signing_key.pub")
