"""Review 63: ``--require-signature``, one way to demand a trusted signature on every command that reads a signed file.

``monitor record`` and ``dicom-export --triage`` demanded a signed ``triage.json`` only when given
``--trusted-keys PATH``, so a team that trusts its keys through ``MONAI_UNC_TRUSTED_KEYS`` or the configuration
folder (``trusted_keys/``) alone could not demand one. ``--require-signature`` does, with the keys configured (and any
``--trusted-keys``); the commands that apply a rule (``triage``, ``conformal``, ``infer --settings-from``), which
demand a signature unless given ``--allow-unsigned``, take it too, and refuse it beside ``--allow-unsigned``.

The refusals of ``verify_signature`` named the command line's ``--allow-unsigned`` / ``--trusted-keys`` to a Python
caller too (review 63, item 2): a Python caller is now told of ``Trust``'s fields, the command line of its options.
"""

from __future__ import annotations

import argparse
import json
import warnings

import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import RULE_FILE, ReferralRule
from monai_unc.evaluation.triage.rule import check_triage_summary
from monai_unc.io.signing import Trust, generate_key_pair, verify_signature
from monai_unc.workflows.apply import trust_from_arguments
from tests.products import test_review61_triage as r61
from tests.products import test_review62_triage_trust as r62
from tests.products.test_review62_triage_trust import REFUSED, WARNED, _export, _one_error_line, _record

# the fixtures of the review 61 and 62 tests, used here by name
toy, keys, triaged, dicom_triage = r61.toy, r62.keys, r62.triaged, r62.dicom_triage


def _configure(how: str, pub, tmp_path, monkeypatch) -> None:
    """Trust the public key ``pub`` only through ``MONAI_UNC_TRUSTED_KEYS`` or the configuration folder."""
    if how == "env":
        monkeypatch.setenv("MONAI_UNC_TRUSTED_KEYS", str(pub))
        return
    cfg = tmp_path / "cfg_team"
    (cfg / "trusted_keys").mkdir(parents=True, mode=0o700)
    cfg.chmod(0o700)
    (cfg / "trusted_keys" / "qc.pub").write_bytes(pub.read_bytes())
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(cfg))


@pytest.fixture(params=["env", "config folder"])
def configured(request, keys, tmp_path, monkeypatch):
    """Key A trusted only through ``MONAI_UNC_TRUSTED_KEYS`` or the configuration folder's ``trusted_keys/``."""
    _configure(request.param, keys["a"][1], tmp_path, monkeypatch)
    return request.param


# -- monitor record ---------------------------------------------------------------------------------------------------
def test_monitor_record_require_signature_takes_a_file_signed_by_a_configured_key(triaged, configured, tmp_path,
                                                                                   capsys):
    capsys.readouterr()
    assert _record(triaged["signed"], tmp_path / "m.db", "--require-signature") == 0
    assert (tmp_path / "m.db").is_file() and WARNED not in capsys.readouterr().err


@pytest.mark.parametrize("name", REFUSED)
def test_monitor_record_require_signature_refuses_a_file_not_signed_by_one(triaged, configured, tmp_path, capsys,
                                                                           name):
    capsys.readouterr()
    assert _record(triaged[name], tmp_path / "m.db", "--require-signature") == 2  # it was read: exit 0
    line = _one_error_line(capsys, triaged[name] / "triage.json")
    assert line.startswith("monai-unc monitor") and "--allow-unsigned" not in line, line
    assert not (tmp_path / "m.db").exists()  # nothing written: the store is not even created


def test_monitor_record_require_signature_without_a_configured_key_refuses_every_file(triaged, keys, tmp_path,
                                                                                      capsys):
    capsys.readouterr()
    assert _record(triaged["signed"], tmp_path / "m.db", "--require-signature") == 2
    line = _one_error_line(capsys, triaged["signed"] / "triage.json")
    assert "not a trusted key here" in line and "--trusted-keys" in line, line  # the command line's words
    assert not (tmp_path / "m.db").exists()


# -- dicom-export --triage --------------------------------------------------------------------------------------------
def test_dicom_export_require_signature_takes_a_file_signed_by_a_configured_key(dicom_triage, configured, tmp_path,
                                                                                capsys):
    pred, series, folders = dicom_triage
    capsys.readouterr()
    assert _export(pred, series, tmp_path / "out", folders["signed"], "--require-signature") == 0
    assert WARNED not in capsys.readouterr().err
    assert (tmp_path / "out" / "c0" / "sr.dcm").is_file()


@pytest.mark.parametrize("name", ["unsigned", "other key"])
def test_dicom_export_require_signature_refuses_a_file_not_signed_by_one(dicom_triage, configured, tmp_path, capsys,
                                                                         name):
    pred, series, folders = dicom_triage
    capsys.readouterr()
    assert _export(pred, series, tmp_path / "out", folders[name], "--require-signature") == 2
    line = _one_error_line(capsys, folders[name] / "triage.json")
    assert line.startswith("monai-unc dicom-export"), line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*")), "written"


def test_dicom_export_require_signature_without_triage_is_refused(dicom_triage, keys, tmp_path, capsys):
    pred, series, _ = dicom_triage
    capsys.readouterr()
    rc = main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "out"), "-q",
               "--require-signature"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--require-signature" in err[0] and "--triage" in err[0], err
    assert not (tmp_path / "out").exists()


# -- the commands that apply a rule -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    """A referral rule certified by ``evaluate --target-risk``, signed by a key of its own (``pub``), a copy without
    its signature (``unsigned``) and new predictions to triage (``new``)."""
    root = tmp_path_factory.mktemp("signed63")
    private, pub = generate_key_pair(root / "qc")
    a = write_toy_cohort(root / "A", n_cases=12, shape=(12, 12, 12), seed=1)
    b = write_toy_cohort(root / "B", n_cases=2, shape=(12, 12, 12), seed=2)
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        mp.setenv("MONAI_UNC_SIGNING_KEY", str(private))
        assert main(["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(root / "eval"),
                     "--no-spatial", "--target-risk", "0.4", "--delta", "0.2", "-q"]) == 0
    rule = root / "eval" / RULE_FILE
    doc = json.loads(rule.read_text())
    del doc["signature"]
    (root / "unsigned.json").write_text(json.dumps(doc))
    return {"rule": rule, "unsigned": root / "unsigned.json", "pub": pub, "new": b["predictions"]}


@pytest.fixture()
def nothing_trusted(tmp_path, monkeypatch):
    """A configuration folder without keys; no key trusted by the environment."""
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "cfg_empty"))


def _triage(certified, rule, out, *options) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return main(["triage", "-p", str(certified["new"]), "-r", str(rule), "-o", str(out), "-q", *options])


@pytest.mark.parametrize("how", ["env", "config folder"])
def test_triage_require_signature_takes_a_rule_signed_by_a_configured_key(certified, nothing_trusted, how, tmp_path,
                                                                          monkeypatch, capsys):
    _configure(how, certified["pub"], tmp_path, monkeypatch)
    assert _triage(certified, certified["rule"], tmp_path / "t", "--require-signature") == 0
    assert json.loads((tmp_path / "t" / "triage.json").read_text())["rule_signature"].startswith("signed by SHA256:")
    capsys.readouterr()
    assert _triage(certified, certified["unsigned"], tmp_path / "t2", "--require-signature") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not signed" in err[0], err
    assert not (tmp_path / "t2").exists()


@pytest.mark.parametrize("command", ["triage", "conformal", "infer"])
def test_require_signature_with_allow_unsigned_is_refused_in_one_line(command, tmp_path, capsys):
    capsys.readouterr()
    rule = ["--settings-from" if command == "infer" else "-r", str(tmp_path / "rule.json")]
    inputs = ["--input", str(tmp_path), "--model", "example"] if command == "infer" else ["-p", str(tmp_path)]
    with pytest.raises(SystemExit) as e:  # refused by the parser, before any file is read
        main([command, *inputs, *rule, "-o", str(tmp_path / "out"), "--require-signature", "--allow-unsigned"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert "--require-signature" in err[0] and "--allow-unsigned" in err[0], err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="--require-signature and --allow-unsigned"):  # arguments made by hand
        trust_from_arguments(argparse.Namespace(trusted_keys=[], allow_unsigned=True, require_signature=True))


def test_infer_require_signature_without_settings_from_is_refused(tmp_path, capsys):
    (tmp_path / "images").mkdir()
    capsys.readouterr()
    rc = main(["infer", "--input", str(tmp_path / "images"), "--model", "example", "-o", str(tmp_path / "out"),
               "--require-signature"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--require-signature" in err[0] and "--settings-from" in err[0], err
    assert not (tmp_path / "out").exists()


# -- item 2: the refusal in the caller's words ------------------------------------------------------------------------
def test_a_python_reader_is_told_of_trust_not_of_the_command_line_options(certified, nothing_trusted, tmp_path,
                                                                          capsys):
    with pytest.raises(ValueError, match="is not signed") as e:
        ReferralRule.load(certified["unsigned"], trust=Trust())
    assert "--allow-unsigned" not in str(e.value) and "trust=Trust(..., allow_unsigned=True)" in str(e.value)
    with pytest.raises(ValueError, match="not a trusted key") as e:  # signed by a key nothing trusts here
        ReferralRule.load(certified["rule"], trust=Trust())
    text = str(e.value)
    assert "--allow-unsigned" not in text and "--trusted-keys" not in text, text
    assert "trust=Trust(keys=[FILE_OR_FOLDER])" in text and "allow_unsigned=True" in text, text
    # allowed: the line the reader records says why in the caller's words too
    assert "allow_unsigned=True" in ReferralRule.load(certified["unsigned"], trust=Trust(allow_unsigned=True)).signature
    # the command line keeps its options' names
    capsys.readouterr()
    assert _triage(certified, certified["rule"], tmp_path / "t") == 2
    err = capsys.readouterr().err
    assert "--trusted-keys" in err and "--allow-unsigned" in err and "Trust(" not in err, err
    assert _triage(certified, certified["unsigned"], tmp_path / "t2", "--allow-unsigned") == 0
    assert "--allow-unsigned was given" in json.loads((tmp_path / "t2" / "triage.json").read_text())["rule_signature"]


def test_verify_signature_and_check_triage_summary_word_by_caller(triaged, keys):
    doc = json.loads((triaged["other key"] / "triage.json").read_text())  # signed by key B
    for trust, want, not_want in ((Trust((str(keys["a"][1]),)), "trust=Trust(keys=", "--trusted-keys"),
                                  (Trust((str(keys["a"][1]),), command_line=True), "--trusted-keys", "Trust(")):
        with pytest.raises(ValueError, match="not a trusted key") as e:
            check_triage_summary(doc, "t", trust)
        assert want in str(e.value) and not_want not in str(e.value), str(e.value)
        with pytest.raises(ValueError, match="not a trusted key") as e:
            verify_signature(doc, doc["digest"], trust, "t")
        assert want in str(e.value) and not_want not in str(e.value), str(e.value)
    assert Trust(command_line=True) == Trust() and repr(Trust(command_line=True)) == repr(Trust())
    with pytest.raises(TypeError, match="command_line"):
        Trust(command_line="yes")
