"""Reading triage folders, sites, sidecars and label tables (untrusted input: every field checked)."""

from __future__ import annotations

import json

import pytest

from monai_unc.monitoring import loss_of, model_digest, read_label_table, read_sites, read_triage_run, sidecar_site
from monai_unc.monitoring.store import UNKNOWN_SITE

from ._stream import make_rule, write_triage


def test_sites_come_from_the_table_then_sidecars_then_the_option(tmp_path):
    img = tmp_path / "img"
    img.mkdir()
    (img / "b.json").write_text(json.dumps({"InstitutionName": " General <Hospital> ", "Manufacturer": "ACME",
                                            "ManufacturerModelName": "Scan 3T"}))
    # c: no sidecar (a sidecar that is there but not strict JSON is an error: test_store_integrity_hostile); the
    # images are there (one that is not, without a sidecar, is an error: test_an_archived_image_...)
    for c in "abc":
        (img / f"{c}.nii.gz").write_bytes(b"")
    (tmp_path / "sites.csv").write_text("case,site,scanner\na,Table site,\n")
    rule = make_rule([0.1])
    folder = write_triage(tmp_path / "t", rule, [{"case": c, "score": 0.1} for c in "abcd"],
                          images={c: str(img / f"{c}.nii.gz") for c in "abc"})
    run = read_triage_run(folder, site="Option", sites=read_sites(tmp_path / "sites.csv"),
                          triaged_at="2026-01-02T03:04:05")
    got = {c.case_id: (c.site, c.scanner) for c in run.cases}
    assert got == {"a": ("Table site", None), "b": ("General <Hospital>", "ACME Scan 3T"), "c": ("Option", None),
                   "d": ("Option", None)}
    assert run.triaged_at == "2026-01-02T03:04:05+00:00" and run.rule["digest"] == rule["digest"]
    assert run.model_digest == model_digest(rule["fingerprint"]) is not None
    assert read_triage_run(folder).cases[3].site == UNKNOWN_SITE


def test_sidecar_keys():
    assert sidecar_site(None) == (None, None)
    with pytest.raises(ValueError, match="is not there"):  # neither the image nor a sidecar (moved, archived)
        sidecar_site("/nonexistent/x.nii.gz")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("rule"), "field 'rule'"),
    (lambda d: d["rule"].update(target_risk=2), "target_risk"),
    (lambda d: d["cases"][0].update(decision="maybe"), "decision"),
    (lambda d: d["cases"][0].update(score="high"), "score"),
    (lambda d: d["cases"][0].update(case=""), "case"),
    (lambda d: d["cases"].append(dict(d["cases"][0])), "appears twice"),
    (lambda d: d.update(cases={}), "'cases' must be a list"),
    # found by hostile review: a misspelt code, or an "accept" with a reason for review, was recorded as given
    (lambda d: d["cases"][0].update(code="acepted"), r"cases\[0\]\.code must be accepted .*got 'acepted'"),
    (lambda d: d["cases"][0].update(code="above_threshold"), r"cases\[0\]\.code must be accepted"),
    (lambda d: d["cases"][0].update(decision="review", code="accepted"), r"code must be a reason for review"),
    (lambda d: d["cases"][0].update(decision="review", code="above_treshold"), "above_treshold"),
    (lambda d: d["cases"][0].update(code=1), "code must be non-empty text"),
])
def test_a_wrong_field_is_named(tmp_path, edit, message):
    folder = write_triage(tmp_path / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}])
    doc = json.loads((folder / "triage.json").read_text())
    edit(doc)
    (folder / "triage.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message):
        read_triage_run(folder)


def test_not_a_triage_folder(tmp_path):
    with pytest.raises(ValueError, match="no triage.json"):
        read_triage_run(tmp_path)
    (tmp_path / "triage.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_triage_run(tmp_path)
    write_triage(tmp_path / "t", make_rule([0.1]), [])
    with pytest.raises(ValueError, match="ISO 8601"):
        read_triage_run(tmp_path / "t", triaged_at="yesterday")


def test_label_table(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("case,dice,failure\na,0.9,\nb,,1\nc,0.5,0\n")
    assert read_label_table(p) == [{"case": "a", "dice": 0.9, "failure": None},
                                   {"case": "b", "dice": None, "failure": 1},
                                   {"case": "c", "dice": 0.5, "failure": 0}]
    for text, message in [("case,x\na,1\n", "needs a 'case' column"), ("case,dice\na,1.5\n", r"in \[0, 1\]"),
                          ("case,failure\na,2\n", "0 or 1"), ("case,dice\na,\n", "neither"),
                          ("case,dice\na,0.1\na,0.2\n", "twice"), ("case,dice\na,x\n", "must be a number")]:
        p.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_label_table(p)


def test_sites_table_errors(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("case,centre\na,x\n")
    with pytest.raises(ValueError, match="'case' and 'site'"):
        read_sites(p)
    p.write_text("case,site\na,\n")
    with pytest.raises(ValueError, match="'site'"):
        read_sites(p)


def test_loss_follows_the_rule():
    assert loss_of(0.79, None, "failure", 0.8) == 1.0 and loss_of(0.8, None, "failure", 0.8) == 0.0
    assert loss_of(0.95, 0, "failure", 0.8) == 0.0 and loss_of(0.5, 1, "failure", 0.8) == 1.0  # agreeing columns
    # a Dice and a failure that disagree under the rule's failure Dice: refused (the failure column used to win
    # silently, redefining the risk the rule was certified on)
    with pytest.raises(ValueError, match="disagree under the rule's failure Dice 0.8"):
        loss_of(0.95, 1, "failure", 0.8)
    with pytest.raises(ValueError, match="disagree"):
        loss_of(0.5, 0, "failure", 0.8)
    assert loss_of(0.75, None, "1-dice", None) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="Dice"):
        loss_of(None, 1, "1-dice", None)
    with pytest.raises(ValueError, match="failure"):
        loss_of(None, None, "failure", 0.8)


def test_the_site_of_a_dicom_series_is_read_from_its_header(tmp_path):
    pytest.importorskip("highdicom", reason="DICOM series need the dicom extra")
    import numpy as np

    from monai_unc.io.dicom import write_series

    folder = tmp_path / "case1"
    write_series(np.zeros((4, 5, 3), dtype=np.float32), np.diag([1.0, 1.0, 2.0, 1.0]), folder, modality="MR",
                 extra={"InstitutionName": "Site <A>", "Manufacturer": "Acme", "ManufacturerModelName": "X1"})
    assert sidecar_site(str(folder)) == ("Site <A>", "Acme X1")
    write_series(np.zeros((4, 5, 3), dtype=np.float32), np.diag([1.0, 1.0, 2.0, 1.0]), tmp_path / "bare")
    assert sidecar_site(str(tmp_path / "bare"))[0] is None  # no institution or station recorded
    (tmp_path / "empty").mkdir()
    assert sidecar_site(str(tmp_path / "empty")) == (None, None)  # not a series: no site, no error


def test_dice_and_failure_agree_under_the_packages_failure_rule():
    """A Dice of 0.6999999999999999 at failure_dice 0.7 is not a failure under the rule evaluate certified on
    (dice_failed, float32): failure 0 beside it was refused and failure 1 accepted (float64 comparison), the
    opposite of the loss the Dice alone gives (hostile review 33)."""
    dice = 7 / 10 - 1e-16
    assert loss_of(dice, None, "failure", 0.7) == 0.0
    assert loss_of(dice, 0, "failure", 0.7) == 0.0
    with pytest.raises(ValueError, match="disagree"):
        loss_of(dice, 1, "failure", 0.7)


def test_the_longest_reason_triage_writes_is_recorded(tmp_path):
    """A case referred for every statistic of its twelve channels (images from a new scanner) is recorded: its reason
    was 1024 characters, beyond the store's ``MAX_TEXT``, and ``monitor record`` refused the whole run."""
    import dataclasses

    import numpy as np

    from monai_unc.evaluation.triage.images import image_feature_names
    from monai_unc.evaluation.triage.rule import ImageReference, ReferralRule
    from monai_unc.io.provenance import rule_digest
    from monai_unc.monitoring import MonitorStore

    rng = np.random.default_rng(0)
    channels = 64
    cal = 1e6 + rng.normal(size=(30, 5 * channels)) * 1e-9  # one scale: every z-score a long number
    ref = dataclasses.replace(ImageReference.fit(cal), features=image_feature_names(channels))
    rule_obj = ReferralRule("predictive_entropy_fg_mean", -float("inf"), False, 0.1, 0.1, "sgr", "failure", 0.8,
                            (0.1, 0.2, 0.3, 0.4), ("a", "b", "c", "d"), image_reference=ref)
    d = rule_obj.apply([0.4000000000000001], image_stats=cal[:1] * 3.0)[0]
    assert d.code == "not_certified" and "image far" in d.reason
    rule = make_rule([0.1, 0.2, 0.3, 0.4])
    folder = write_triage(tmp_path / "tri", rule, [{"case": "c0", "score": 0.4000000000000001, "decision": "review"}],
                          digest=True)
    doc = json.loads((folder / "triage.json").read_text())
    doc["cases"][0].update(code=d.code, reason=d.reason)
    doc["digest"] = rule_digest({k: v for k, v in doc.items() if k != "digest"})
    (folder / "triage.json").write_text(json.dumps(doc))
    run = read_triage_run(folder, site="A")
    assert run.cases[0].reason == d.reason
    with MonitorStore(str(tmp_path / "m.db")) as store:
        store.record_run(run.rule, run.cases, source_digest=run.source_digest, folder=str(folder),
                         triaged_at=run.triaged_at, model_digest=run.model_digest)
        assert [c["reason"] for c in store.cases()] == [d.reason]
