"""Review 61: the readers of ``triage.json`` say how it was checked.

``check_triage_summary`` returns one line (unverified / unsigned / signed by an untrusted key / signed by a trusted
key); the triage page, ``dicom-export --triage`` and ``monitor record`` discarded it, so a ``triage.json`` whose
digest and signature were both deleted was read as "unverified" without a word. Each now warns when who wrote the file
is not checked (no digest, a key not trusted here), not for a digest that matches without a signing key; the page
shows the line in its header.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

from monai_unc.monitoring.records import read_triage_run
from monai_unc.report.triage import build_triage_page
from tests.products.test_review61_triage import _matching, toy  # noqa: F401 (the fixture)

WARNED = "is read without a check of who wrote it"


def _dicom_entries(folder):
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    from monai_unc.workflows.dicom import _triage_entries

    return _triage_entries(folder)


def _readers(folder, page):
    """The three readers of ``triage.json``: the page, dicom-export's, monitor record's."""
    return {"page": lambda: build_triage_page(folder, page, n_cases=0, viewer=False),
            "dicom-export": lambda: _dicom_entries(folder),
            "monitor record": lambda: read_triage_run(folder, site="A")}


def _ours(caught) -> list[str]:
    return [str(w.message) for w in caught if WARNED in str(w.message)]


@pytest.fixture()
def triaged(toy, tmp_path, monkeypatch):  # noqa: F811
    """``{"unsigned": folder, "signed": folder}``: triage without and with a signing key (this machine's own,
    trusted here), as ``monai-unc triage`` writes them."""
    from monai_unc.evaluation.triage import run_triage
    from monai_unc.io.signing import generate_key_pair

    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    out = {}
    for name in ("unsigned", "signed"):
        cfg = tmp_path / f"cfg_{name}"
        if name == "signed":
            generate_key_pair(cfg)
        monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(cfg))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            run_triage(toy["predictions"], _matching(toy), tmp_path / name)
        out[name] = tmp_path / name
    assert "signature" in json.loads((out["signed"] / "triage.json").read_text())
    assert "signature" not in json.loads((out["unsigned"] / "triage.json").read_text())
    return out


def test_a_triage_json_without_digest_and_signature_is_warned_about_by_each_reader(triaged, tmp_path):
    folder = tmp_path / "stripped"
    shutil.copytree(triaged["signed"], folder)
    doc = json.loads((folder / "triage.json").read_text())
    del doc["digest"], doc["signature"]
    (folder / "triage.json").write_text(json.dumps(doc))
    for name, read in _readers(folder, tmp_path / "page").items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = read()
        ours = _ours(caught)
        assert len(ours) == 1, (name, [str(w.message) for w in caught])
        assert ours[0].startswith(f"{folder / 'triage.json'} {WARNED}: unverified: no digest"), (name, ours)
        assert "\n" not in ours[0]
        if name == "monitor record":
            assert result.triage_check.startswith("unverified: no digest")
    page = (tmp_path / "page" / "triage.html").read_text()
    assert 'id="triage-check">triage.json: unverified: no digest' in page


def test_the_command_lines_say_it_in_one_warning_line(triaged, tmp_path, capsys):
    from monai_unc.cli import main

    folder = tmp_path / "stripped"
    shutil.copytree(triaged["unsigned"], folder)
    doc = json.loads((folder / "triage.json").read_text())
    del doc["digest"]
    (folder / "triage.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["monitor", "record", str(folder), "--db", str(tmp_path / "m.db"), "--site", "A", "-q"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if WARNED in line]
    assert len(err) == 1 and err[0].startswith("monai-unc monitor"), err
    assert ": warning: " in err[0] and "unverified: no digest" in err[0], err


def test_a_digest_that_matches_without_a_signing_key_is_recorded_not_warned_about(triaged, tmp_path):
    folder = triaged["unsigned"]
    for name, read in _readers(folder, tmp_path / "page").items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = read()
        assert not _ours(caught), (name, _ours(caught))
        if name == "monitor record":
            assert result.triage_check.startswith("unsigned: its digest matches")
    page = (tmp_path / "page" / "triage.html").read_text()
    assert 'id="triage-check">triage.json: unsigned: its digest matches' in page


def test_a_signature_by_a_trusted_key_is_recorded_and_by_an_untrusted_one_warned_about(triaged, tmp_path,
                                                                                         monkeypatch):
    folder = triaged["signed"]
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "cfg_signed"))  # the key that signed it: trusted
    for name, read in _readers(folder, tmp_path / "page").items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            read()
        assert not _ours(caught), (name, _ours(caught))
    assert 'id="triage-check">triage.json: signed by SHA256:' in (tmp_path / "page" / "triage.html").read_text()
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "elsewhere"))  # another machine: not trusted
    for name, read in _readers(folder, tmp_path / "page2").items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            read()
        ours = _ours(caught)
        assert len(ours) == 1 and "a key that is not trusted here" in ours[0], (name, ours)
