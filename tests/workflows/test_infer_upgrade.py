"""Upgrade: ``monai-unc infer`` into an output folder of 0.1.0 (found by the upgrade review).

0.1.0 recorded neither ``share_passes`` nor ``sample_batch_size`` (nor ``weights``, ``temperature`` or the version)
in ``infer.json``, and its case records hold no ``fingerprint``. Every MC dropout run records both options now, so
the resume of a 0.1.0 MC dropout folder with the very same options was refused for "different settings
(sample_batch_size, share_passes)" that no option could make the same. It now resumes: the cases the old version
made are predicted again (their records name no settings), so the folder holds one run's outputs, and a setting
that really differs is still refused.
"""

from __future__ import annotations

import json

import pytest

from monai_unc.io.provenance import check_finished_predictions
from tests._cases import run_toy_infer, toy_infer_files

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: the settings keys of a 0.1.0 ``infer.json`` (``monai_unc/predict.py`` of that release)
_KEYS_010 = ("model", "method", "samples", "roi", "overlap", "intensity", "measures", "seed", "activation",
             "checkpoints", "tta_noise", "ratein_target", "dropout", "write_probs", "regions")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return toy_infer_files(tmp_path_factory.mktemp("upgrade"), n_cases=2)


def _as_written_by_010(out):
    """Rewrite ``out`` as 0.1.0 left it: its ``infer.json`` keys, no version, records without a fingerprint; the
    second case unfinished."""
    doc = json.loads((out / "infer.json").read_text())
    (out / "infer.json").write_text(json.dumps({"settings": {k: doc["settings"][k] for k in _KEYS_010},
                                                "multilabel": False}))
    rec = json.loads((out / "toy000.json").read_text())
    for key in ("fingerprint", "version"):
        rec.pop(key, None)
    (out / "toy000.json").write_text(json.dumps(rec))
    for p in out.glob("toy001*"):
        p.unlink()


def test_a_010_mc_dropout_folder_resumes_with_the_same_options(toy, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_toy_infer(toy, out, "--seed", "0") == 0
    _as_written_by_010(out)
    capsys.readouterr()
    assert run_toy_infer(toy, out, "--seed", "0", "--samples", "5") == 2  # a setting that differs: refused
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different settings (samples)" in err

    assert run_toy_infer(toy, out, "--seed", "0") == 0  # refused before: "(sample_batch_size, share_passes)"
    err = capsys.readouterr().err
    assert "case 'toy000' was predicted with other settings" in err  # made by 0.1.0: predicted again
    # the version's warning does not say they are kept (it did: "they are kept (the same settings)")
    assert "those whose records name these settings are kept" in err and "they are kept" not in err
    settings = json.loads((out / "infer.json").read_text())["settings"]
    assert settings["share_passes"] is True and settings["sample_batch_size"] == "auto"
    for cid in ("toy000", "toy001"):  # one run's outputs: every record names this run's settings
        assert json.loads((out / f"{cid}.json").read_text())["fingerprint"] == settings
    check_finished_predictions(out, "monai-unc", ["toy000", "toy001"])


def test_a_newer_versions_folder_is_refused_naming_the_version(toy, tmp_path, capsys):
    """A setting this version does not know (written by a newer one) was "different settings (...); resume with the
    same settings", which this version cannot do."""
    out = tmp_path / "out"
    assert run_toy_infer(toy, out) == 0
    doc = json.loads((out / "infer.json").read_text())
    doc["settings"]["tta_flips"] = [0, 1]
    doc["monai_unc_version"] = "9.0.0"
    (out / "infer.json").write_text(json.dumps(doc))
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert run_toy_infer(toy, out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "made by monai-unc 9.0.0 with settings this version" in err
    assert "(tta_flips)" in err and "resume it with that version" in err
    assert sorted(p.name for p in out.iterdir()) == before


def test_an_unknown_setting_in_a_record_of_this_version_is_named_as_an_edit(toy, tmp_path, capsys):
    """``infer.json`` of this very version with a setting it does not know (edited by hand): the refusal says so,
    not "made by monai-unc <this version> ... resume it with that version" (found by review36)."""
    from monai_unc import __version__

    out = tmp_path / "out"
    assert run_toy_infer(toy, out) == 0
    doc = json.loads((out / "infer.json").read_text())
    assert doc["monai_unc_version"] == __version__
    doc["settings"]["tta_flips"] = [0, 1]
    (out / "infer.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert run_toy_infer(toy, out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(tta_flips)" in err and "edited outside monai-unc" in err, err
    assert "resume it with that version" not in err
