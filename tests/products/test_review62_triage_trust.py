"""Review 62: the readers of ``triage.json`` can require a signature by a trusted key (``--trusted-keys``).

``monitor record`` and ``dicom-export --triage`` read ``triage.json`` (the triage page too, from Python), a file
anyone who can write its folder may edit: before review 62 they accepted an unsigned one, or one re-signed with a key
nobody trusts, with a warning at most, and only a Python caller of ``check_triage_summary`` could require a trusted
signature. Given ``--trusted-keys`` (the apply commands' option: the keys named, besides ``MONAI_UNC_TRUSTED_KEYS``
and the configuration folder's), a file that is unsigned, signed by another key, edited after it was signed or
without a digest is refused in one line naming it (exit 2), nothing written; without the option they read as before.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

from monai_unc.cli import main
from monai_unc.evaluation.triage.rule import check_triage_summary, write_triage_summary
from monai_unc.io.provenance import rule_digest
from monai_unc.io.signing import Trust, generate_key_pair
from monai_unc.report.triage import build_triage_page
from tests.products.test_review61_triage import _flip_one_referral, _matching, toy  # noqa: F401 (the fixture)

WARNED = "is read without a check of who wrote it"
#: the variants of a triage.json signed by key A that a reader trusting A refuses
REFUSED = ("unsigned", "other key", "edited", "no digest")


@pytest.fixture()
def keys(tmp_path, monkeypatch):
    """``{"a": (private, public), "b": (private, public)}``; this machine trusts neither by default."""
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "cfg_empty"))
    return {name: generate_key_pair(tmp_path / f"key_{name}") for name in ("a", "b")}


def _variant(doc: dict, name: str) -> dict | None:
    """``doc`` (signed by key A) as ``name`` to be written as is, or None: written again with a key or none
    (:func:`write_triage_summary`)."""
    if name == "edited":  # a referred case accepted, the digest recomputed; A's signature no longer matches
        edited = _flip_one_referral(doc)
        edited["digest"] = rule_digest({k: v for k, v in edited.items() if k not in ("digest", "signature")})
        return edited
    if name == "no digest":
        return {k: v for k, v in doc.items() if k not in ("digest", "signature")}
    return None


def _write_variant(folder, name: str, keys) -> None:
    path = folder / "triage.json"
    doc = json.loads(path.read_text())
    as_is = _variant(doc, name)
    if as_is is not None:
        path.write_text(json.dumps(as_is))
    else:
        write_triage_summary(path, doc, {"signed": keys["a"][0], "unsigned": None, "other key": keys["b"][0]}[name])


@pytest.fixture()
def triaged(toy, keys, tmp_path, monkeypatch):  # noqa: F811
    """``{variant: folder}``: a triage folder as ``monai-unc triage`` writes it with key A configured, and copies
    whose ``triage.json`` is unsigned, signed by key B, edited after signing, or without digest and signature."""
    from monai_unc.evaluation.triage import run_triage

    monkeypatch.setenv("MONAI_UNC_SIGNING_KEY", str(keys["a"][0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        scores = sorted(c["score"] for c in run_triage(toy["predictions"], _matching(toy), tmp_path / "t0")
                        .summary["cases"] if c["score"] is not None)
        rule = _matching(toy, threshold=(scores[0] + scores[1]) / 2)  # one case accepted, others referred
        run_triage(toy["predictions"], rule, tmp_path / "signed")
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY")
    out = {"signed": tmp_path / "signed"}
    for name in REFUSED:
        out[name] = tmp_path / name.replace(" ", "_")
        shutil.copytree(out["signed"], out[name])
        _write_variant(out[name], name, keys)
    return out


def _one_error_line(capsys, path) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(path) in err[0] and ": error: " in err[0], err
    return err[0]


# -- check_triage_summary ---------------------------------------------------------------------------------------------
def test_a_trusted_signature_required_refuses_each_variant_in_the_readers_words(triaged, keys):
    trust = Trust((str(keys["a"][1]),))
    doc = json.loads((triaged["signed"] / "triage.json").read_text())
    assert check_triage_summary(doc, "t", trust).startswith("signed by SHA256:")
    why = {"unsigned": "is not signed", "other key": "which is not a trusted key here",
           "edited": "does not match its content", "no digest": "carries no digest or signature"}
    for name in REFUSED:
        doc = json.loads((triaged[name] / "triage.json").read_text())
        with pytest.raises(ValueError, match=why[name]) as e:
            check_triage_summary(doc, "t", trust)
        # before review 62 the untrusted key's message said to pass --allow-unsigned, which no reader of triage.json
        # has (and which would not be needed: leaving --trusted-keys out reads the file)
        assert "--allow-unsigned" not in str(e.value) and str(e.value).startswith("t")
    with pytest.raises(ValueError, match="trusted_keys|no such file"):  # the keys are read first, whatever the file
        check_triage_summary(json.loads((triaged["unsigned"] / "triage.json").read_text()), "t",
                             Trust((str(keys["a"][1].parent / "missing.pub"),)))


# -- monitor record ---------------------------------------------------------------------------------------------------
def _record(folder, db, *options) -> int:
    return main(["monitor", "record", str(folder), "--db", str(db), "--site", "A", "-q", *options])


def test_monitor_record_with_trusted_keys_takes_a_file_signed_by_a_trusted_key(triaged, keys, tmp_path, capsys):
    assert _record(triaged["signed"], tmp_path / "m.db", "--trusted-keys", str(keys["a"][1])) == 0
    assert (tmp_path / "m.db").is_file() and WARNED not in capsys.readouterr().err
    # a folder of keys, or the key trusted by MONAI_UNC_TRUSTED_KEYS beside the one named: as the apply commands
    assert _record(triaged["signed"], tmp_path / "m2.db", "--trusted-keys", str(keys["a"][1].parent)) == 0


def test_monitor_record_trusts_the_default_keys_beside_those_named(triaged, keys, tmp_path, monkeypatch):
    monkeypatch.setenv("MONAI_UNC_TRUSTED_KEYS", str(keys["a"][1]))
    assert _record(triaged["signed"], tmp_path / "m.db", "--trusted-keys", str(keys["b"][1])) == 0


@pytest.mark.parametrize("name", REFUSED)
def test_monitor_record_with_trusted_keys_refuses_a_file_not_signed_by_one(triaged, keys, tmp_path, capsys, name):
    capsys.readouterr()
    assert _record(triaged[name], tmp_path / "m.db", "--trusted-keys", str(keys["a"][1])) == 2
    line = _one_error_line(capsys, triaged[name] / "triage.json")
    assert line.startswith("monai-unc monitor"), line
    assert not (tmp_path / "m.db").exists()  # nothing written: the store is not even created


def test_monitor_record_without_the_option_reads_as_before(triaged, keys, tmp_path, capsys):
    capsys.readouterr()
    assert _record(triaged["unsigned"], tmp_path / "m.db") == 0
    assert WARNED not in capsys.readouterr().err  # a digest that matches without a signing key: recorded
    assert _record(triaged["other key"], tmp_path / "m2.db") == 0
    err = [line for line in capsys.readouterr().err.splitlines() if WARNED in line]
    assert len(err) == 1 and "a key that is not trusted here" in err[0], err


def test_a_missing_trusted_key_is_said_by_its_option(triaged, keys, tmp_path, capsys):
    capsys.readouterr()
    assert _record(triaged["signed"], tmp_path / "m.db", "--trusted-keys", str(tmp_path / "nope.pub")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--trusted-keys" in err[0] and "nope.pub" in err[0], err
    assert not (tmp_path / "m.db").exists()


# -- the triage page (Python: no command reads a triage.json it did not write to build the page) --------------------
def test_the_page_with_trust_requires_a_trusted_signature(triaged, keys, tmp_path):
    trust = Trust((str(keys["a"][1]),))
    page = build_triage_page(triaged["signed"], tmp_path / "ok", n_cases=0, viewer=False, trust=trust)
    assert 'id="triage-check">triage.json: signed by SHA256:' in page.read_text()
    for name in REFUSED:
        with pytest.raises(ValueError) as e:
            build_triage_page(triaged[name], tmp_path / f"page_{name}", n_cases=0, viewer=False, trust=trust)
        assert str(e.value).startswith(str(triaged[name] / "triage.json")) and "\n" not in str(e.value), str(e.value)
        assert not (tmp_path / f"page_{name}").exists()  # nothing written
    with pytest.raises(TypeError, match="trust"):
        build_triage_page(triaged["signed"], tmp_path / "t", n_cases=0, viewer=False, trust=True)
    with warnings.catch_warnings(record=True) as caught:  # without trust: as before, warned about
        warnings.simplefilter("always")
        build_triage_page(triaged["other key"], tmp_path / "other", n_cases=0, viewer=False)
    assert [w for w in caught if "a key that is not trusted here" in str(w.message)]


# -- dicom-export --triage --------------------------------------------------------------------------------------------
@pytest.fixture()
def dicom_triage(keys, tmp_path):
    """``(predictions, series, {variant: triage folder})`` of two small cases, ``triage.json`` signed by key A."""
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    from tests.workflows.test_dicom_export import RULE, SCORE, _small_cases, write_triage
    from tests.workflows.test_dicom_triage_decisions import CASES

    pred, series = _small_cases(tmp_path / "cases")
    signed = write_triage(tmp_path / "signed", CASES, RULE, SCORE)
    path = signed / "triage.json"
    write_triage_summary(path, json.loads(path.read_text()), keys["a"][0])
    folders = {"signed": signed}
    for name in ("unsigned", "other key", "no digest"):  # two cases: no referral to flip as _flip_one_referral does
        folders[name] = tmp_path / name.replace(" ", "_")
        shutil.copytree(signed, folders[name])
        _write_variant(folders[name], name, keys)
    edited = tmp_path / "edited"  # a reason edited, the digest recomputed: key A's signature no longer matches
    shutil.copytree(signed, edited)
    doc = json.loads((edited / "triage.json").read_text())
    doc["cases"][1]["reason"] = "looked fine to me"
    doc["digest"] = rule_digest({k: v for k, v in doc.items() if k not in ("digest", "signature")})
    (edited / "triage.json").write_text(json.dumps(doc))
    folders["edited"] = edited
    return pred, series, folders


def _export(pred, series, out, triage, *options) -> int:
    return main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(out), "--triage", str(triage), "-q",
                 *options])


def test_dicom_export_with_trusted_keys_takes_a_file_signed_by_a_trusted_key(dicom_triage, keys, tmp_path, capsys):
    pred, series, folders = dicom_triage
    assert _export(pred, series, tmp_path / "out", folders["signed"], "--trusted-keys", str(keys["a"][1])) == 0
    assert WARNED not in capsys.readouterr().err
    assert (tmp_path / "out" / "c0" / "sr.dcm").is_file()


@pytest.mark.parametrize("name", REFUSED)
def test_dicom_export_with_trusted_keys_refuses_a_file_not_signed_by_one(dicom_triage, keys, tmp_path, capsys,
                                                                         name):
    pred, series, folders = dicom_triage
    capsys.readouterr()
    assert _export(pred, series, tmp_path / "out", folders[name], "--trusted-keys", str(keys["a"][1])) == 2
    line = _one_error_line(capsys, folders[name] / "triage.json")
    assert line.startswith("monai-unc dicom-export"), line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*")), "written"


def test_dicom_export_without_the_option_reads_as_before(dicom_triage, keys, tmp_path, capsys):
    pred, series, folders = dicom_triage
    capsys.readouterr()
    assert _export(pred, series, tmp_path / "o1", folders["unsigned"]) == 0
    assert WARNED not in capsys.readouterr().err
    assert _export(pred, series, tmp_path / "o2", folders["other key"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if WARNED in line]
    assert len(err) == 1 and "a key that is not trusted here" in err[0], err


def test_dicom_export_trusted_keys_without_triage_is_refused(dicom_triage, keys, tmp_path, capsys):
    pred, series, _ = dicom_triage
    capsys.readouterr()
    rc = main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "out"), "-q",
               "--trusted-keys", str(keys["a"][1])])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--trusted-keys" in err[0] and "--triage" in err[0], err
    assert not (tmp_path / "out").exists()


def test_dicom_export_in_python_refuses_a_trust_without_triage_or_of_another_type(dicom_triage, keys, tmp_path):
    from monai_unc.workflows.dicom import dicom_export

    pred, series, folders = dicom_triage
    with pytest.raises(ValueError, match="trust .*triage"):
        dicom_export(pred, series, tmp_path / "out", trust=Trust((str(keys["a"][1]),)), progress=False)
    with pytest.raises(TypeError, match="trust must be a Trust"):
        dicom_export(pred, series, tmp_path / "out", triage=folders["signed"], trust=True, progress=False)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="which is not a trusted key here"):  # the keyword the command passes
        dicom_export(pred, series, tmp_path / "out", triage=folders["other key"], trust=Trust((str(keys["a"][1]),)),
                     progress=False)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))
