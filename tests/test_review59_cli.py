"""Hostile review 59 of the command line: the monitoring store of ``triage --monitor`` stays out of the input folders,
and ``demo`` does not tell the user to pass an option it does not have."""

from __future__ import annotations

import json

import pytest

from monai_unc import cli


@pytest.mark.parametrize("inside", ["predictions", "images", "uncertainty"])
def test_triage_monitor_store_inside_an_input_folder_is_refused(tmp_path, capsys, inside):
    # found by hostile review 59: `triage -p PRED --monitor PRED/monitor.db` created the SQLite store (and its journal)
    # inside the predictions folder, an input of the command; so did a store in --images or --uncertainty
    folders = {name: tmp_path / name for name in ("predictions", "images", "uncertainty")}
    for folder in folders.values():
        folder.mkdir()
    db = folders[inside] / "monitor.db"
    (tmp_path / "rule.json").write_text("{}")  # never read: the store is refused before any work
    argv = ["triage", "-p", str(folders["predictions"]), "--rule", str(tmp_path / "rule.json"), "-o",
            str(tmp_path / "out"), "--images", str(folders["images"]), "--uncertainty", str(folders["uncertainty"]),
            "--monitor", str(db), "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--monitor" in err and "lies inside the input folder" in err, err
    assert not db.exists() and not (tmp_path / "out").exists()
    assert all(not any(f.iterdir()) for f in folders.values())


def test_triage_monitor_store_that_is_the_rule_file_is_refused(tmp_path, capsys):
    (tmp_path / "predictions").mkdir()
    rule = tmp_path / "rule.json"
    rule.write_text(json.dumps({"format": "monai-unc referral rule"}))
    before = rule.read_bytes()
    argv = ["triage", "-p", str(tmp_path / "predictions"), "--rule", str(rule), "-o", str(tmp_path / "out"),
            "--monitor", str(rule), "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--monitor" in err and "is the input file" in err, err
    assert rule.read_bytes() == before


def test_triage_monitor_store_outside_the_inputs_is_still_taken(tmp_path):
    # the check refuses inputs only: a store beside them, or in the triage's own -o, passes
    from monai_unc.workflows.monitor import check_store_outside_inputs

    pred = tmp_path / "predictions"
    pred.mkdir()
    check_store_outside_inputs(tmp_path / "monitor.db", pred, None)
    check_store_outside_inputs(tmp_path / "out" / "monitor.db", pred)
    check_store_outside_inputs("postgresql://user@host/db", pred)


def test_demo_refusal_of_other_settings_names_no_overwrite_option(tmp_path, monkeypatch, capsys):
    # found by hostile review 59: `demo --samples 2` into a demo folder predicted with 1 sample said "... or pass
    # --overwrite", an option demo does not have (`monai-unc demo --overwrite`: "unrecognized arguments")
    from monai_unc.workflows import demo

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    # no cohort and no inference: the settings check before the predictions is what is tested
    monkeypatch.setattr(demo, "make_demo_cohort", lambda folder, shifts: {"images": folder})
    monkeypatch.setattr(demo, "list_image_cases", lambda *args, **kwargs: [])
    monkeypatch.setattr(demo, "predict_cases", stop)
    out = tmp_path / "demo"
    with pytest.raises(Stop):
        demo.run_demo(out, samples=1, quiet=True, quick=True)
    pred = out / "predictions"
    settings = json.loads((pred / "infer.json").read_text())["settings"]
    (pred / "c1.json").write_text(json.dumps({"case": "c1", "fingerprint": settings}))  # a case made with 1 sample
    assert cli.main(["demo", "--quick", "--samples", "2", "--output", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different settings (samples)" in err, err
    assert "--overwrite" not in err and "choose another --output" in err, err
    with pytest.raises(SystemExit):  # the option the message must not name
        cli.main(["demo", "--overwrite"])
