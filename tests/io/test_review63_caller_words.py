"""Refusals in the words of their caller (review 63).

A Python caller is told of parameters (``overwrite=True``, ``trust=Trust(keys=[...])``), a command-line user of
options (``--overwrite``, ``--trusted-keys``); before, ``monai-unc keys --create`` on an existing pair said
"overwrite=True (monai-unc keys --overwrite --create ...)", and a Python caller of a signed-file reader whose trusted
key path was missing was told of ``--trusted-keys``.
"""

from __future__ import annotations

import json

import pytest

from monai_unc import cli
from monai_unc.io.provenance import check_signature, rule_digest, write_signed_json
from monai_unc.io.signing import Trust, generate_key_pair, trusted_public_keys


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MONAI_UNC_CONFIG_DIR", raising=False)
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    return tmp_path / "config" / "monai-unc"


def test_an_existing_key_pair_refused_in_python_names_the_parameter(tmp_path):
    generate_key_pair(tmp_path / "k")
    with pytest.raises(FileExistsError) as err:
        generate_key_pair(tmp_path / "k")
    assert "overwrite=True" in str(err.value) and "--overwrite" not in str(err.value)
    assert "monai-unc keys" not in str(err.value)


def test_an_existing_key_pair_refused_on_the_command_line_names_the_option(config, tmp_path, capsys):
    assert cli.main(["keys", "--create", str(tmp_path / "k")]) == 0
    capsys.readouterr()
    assert cli.main(["keys", "--create", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a key pair exists" in err, err
    assert "--overwrite" in err and "overwrite=True" not in err, err


def test_a_missing_trusted_key_path_in_python_names_no_option(config, tmp_path):
    missing = tmp_path / "k.pub"
    with pytest.raises(ValueError) as err:
        trusted_public_keys([missing])
    assert f"{missing}: no such file or folder" in str(err.value) and "--trusted-keys" not in str(err.value)
    assert err.value.parameter == "trusted_keys"  # the command line still names its option (review 60)
    doc = {"format": "f", "format_version": 1, "value": 0.5}
    doc["digest"] = rule_digest(doc)
    signed = json.loads(write_signed_json(tmp_path / "rule.json", doc).read_text())
    with pytest.raises(ValueError) as err:
        check_signature(signed, Trust(keys=(str(missing),)), "rule.json")
    assert "Trust(keys=" in str(err.value) and "--trusted-keys" not in str(err.value), str(err.value)
    with pytest.raises(ValueError, match=f"^--trusted-keys {missing}: no such file or folder$"):
        check_signature(signed, Trust(keys=(str(missing),), command_line=True), "rule.json")
