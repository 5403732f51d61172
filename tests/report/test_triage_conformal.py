"""The triage page with conformal masks (``monai-unc triage --conformal-rule``): the masks are made by the code of
``monai-unc conformal``, the table gains their volumes and band width, the case figures their contours."""

from __future__ import annotations

import csv
import html as _html
import json
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.conformal import ConformalRuleFile
from monai_unc.evaluation.triage import RULE_FILE, FingerprintMismatch
from monai_unc.io import CaseFiles, load_case
from monai_unc.products import ConformalMasks
from monai_unc.report.html import format_value
from monai_unc.workflows.infer import InferSettings, check_run_settings
from monai_unc.workflows.report import triage_with_page
from tests._cases import write_infer_case_records

TRIAGE_CONFORMAL_DIR = "conformal"  # where triage --conformal-rule writes the masks: OUTPUT/<command>/

# a case id that would be markup if it were not escaped (no '/': it is a file name)
HOSTILE = "x\"'><img src=x id=pwn onerror=\"document.title='PWNED'\"><svg onload=alert(1)>"


def _stamp(pred: Path, model: str) -> None:
    """The ``infer.json`` and case records that ``monai-unc infer`` writes, with ``model`` as the model description."""
    (pred / "infer.json").unlink(missing_ok=True)
    check_run_settings(pred, InferSettings(model=model, method="mcdropout", samples=4, roi=[12], overlap=0.25,
                                           intensity="none", measures=["predictive_entropy"], seed=0,
                                           activation="softmax", checkpoints=[]), overwrite=True)
    write_infer_case_records(pred)  # and the case records, as of one finished run


def _evaluate(data: dict[str, Path], out: Path) -> Path:
    config = EvaluationConfig(budget=0.25, spatial=False, target_risk=0.5, delta=0.2,
                              products=[ConformalMasks({"outer": 0.3, "inner": 0.4})])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], out, config)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Cohort A (calibration, model "net A") evaluated with a referral and a conformal rule; the same cases stamped
    "net B" give a conformal rule of another model; cohort B (new cases of "net A", one with a hostile id) is
    triaged with the conformal rule of net A."""
    root = tmp_path_factory.mktemp("triage_conformal")
    a = write_toy_cohort(root / "A", n_cases=6, shape=(12, 12, 12), seed=1)
    _stamp(a["predictions"], "net A")
    ev = _evaluate(a, root / "evA")
    other = root / "A_other"
    shutil.copytree(a["predictions"], other / "predictions")
    _stamp(other / "predictions", "net B")
    ev_other = _evaluate({"labels": a["labels"], "predictions": other / "predictions"}, root / "evB")
    b = write_toy_cohort(root / "B", n_cases=3, shape=(12, 12, 12), seed=2)
    for p in b["predictions"].glob("toy001*"):
        p.rename(p.with_name(HOSTILE + p.name[len("toy001"):]))
    _stamp(b["predictions"], "net A")
    out = root / "triage"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result, page = triage_with_page(b["predictions"], ev / RULE_FILE, out, cases=3, progress=False,
                                        conformal_rule=ev / "conformal_rule.json")
    return {"root": root, "eval": ev, "eval_other": ev_other, "B": b, "out": out, "page": page, "result": result}


def _table(text: str) -> tuple[list[str], dict[str, list[str]]]:
    table = re.search(r'<table[^>]*id="triage-table"[^>]*>(.*?)</table>', text, re.S)
    assert table is not None
    head = [_html.unescape(h) for h in re.findall(r"<th[^>]*>(.*?)</th>", table.group(1), re.S)]
    rows = {}
    for attrs, body in re.findall(r"<tr ([^>]*)>(.*?)</tr>", table.group(1), re.S):
        a = dict(re.findall(r'([\w-]+)="([^"]*)"', attrs))
        # a cell's text: the case id's <bdi> (review 61) is markup around it, not text
        rows[_html.unescape(a["data-case"])] = [_html.unescape(re.sub(r"^<bdi>(.*)</bdi>$", r"\1", c, flags=re.S))
                                                for c in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]
    return head, rows


def test_masks_are_those_of_monai_unc_conformal(runs, tmp_path):
    masks = runs["out"] / TRIAGE_CONFORMAL_DIR
    ids = sorted(runs["result"].decisions)
    assert HOSTILE in ids
    for cid in ids:
        assert (masks / f"{cid}_outer.nii.gz").is_file() and (masks / f"{cid}_inner.nii.gz").is_file()
    alone = tmp_path / "alone"
    assert cli.main(["conformal", "-p", str(runs["B"]["predictions"]), "--rule",
                     str(runs["eval"] / "conformal_rule.json"), "-o", str(alone), "-q"]) == 0
    with open(masks / "conformal.csv") as f, open(alone / "conformal.csv") as g:
        assert list(csv.DictReader(f)) == list(csv.DictReader(g))


def test_table_has_the_volumes_and_band_width(runs):
    head, rows = _table(runs["page"].read_text())
    columns = ["inner ml", "predicted ml", "outer ml", "band p95 mm"]
    assert head[-5:] == columns + ["reason"]
    with open(runs["out"] / TRIAGE_CONFORMAL_DIR / "conformal.csv") as f:
        table = {r["case"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(table)
    for cid, cells in rows.items():
        r = table[cid]
        expected = [format_value(float(r[k]), 2) for k in ("inner_ml_1", "predicted_ml_1", "outer_ml_1")]
        band = float(r["band_p95_mm_1"]) if r["band_p95_mm_1"] not in ("", "nan") else float("nan")
        assert cells[-5:-1] == expected + [format_value(band, 1)]
        assert float(r["inner_ml_1"]) <= float(r["outer_ml_1"])


def test_case_figures_draw_the_rule_masks(runs, monkeypatch, tmp_path):
    import monai_unc.report.triage as page

    calls = []
    real = page.plot_case_overlay

    def spy(case_id, *args, **kwargs):
        calls.append((case_id, {o.label.split()[0]: o.mask for o in kwargs.get("overlays") or ()} or None))
        return real(case_id, *args, **kwargs)

    monkeypatch.setattr(page, "plot_case_overlay", spy)
    text = page.build_triage_page(runs["out"], tmp_path / "p", n_cases=3,
                                  conformal=runs["out"] / TRIAGE_CONFORMAL_DIR).read_text()
    assert len(calls) == 3 and "conformal outer (white dashed)" in text and 'id="conformal"' in text
    doc = ConformalRuleFile.load(runs["eval"] / "conformal_rule.json")
    files = json.loads((runs["out"] / "triage.json").read_text())["files"]
    for cid, masks in calls:
        assert masks is not None and set(masks) == {"outer", "inner"}
        case = load_case(CaseFiles.from_json(files[cid]), 2)
        for side, rule in doc.rules.items():  # the rule's apply on the case's probabilities, foreground union
            expected = rule.apply(case.probs, pred=case.seg, spacing=case.spacing)[1:].any(axis=0)
            assert np.array_equal(masks[side], expected)
        assert masks["outer"].any()
    calls.clear()
    text = page.build_triage_page(runs["out"], tmp_path / "q", n_cases=1).read_text()
    assert len(calls) == 1 and calls[0][1] is None
    assert 'id="conformal"' not in text and "outer ml" not in text


def test_hostile_case_id_stays_text(runs):
    text = runs["page"].read_text()
    assert "<svg" not in text and "<img src=x" not in text
    assert _html.escape(HOSTILE) in text
    _, rows = _table(text)
    assert rows[HOSTILE][1] == HOSTILE


def _one_line_exit_2(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_rule_of_another_fingerprint_is_refused_as_conformal_refuses_it(runs, tmp_path, capsys):
    pred = runs["B"]["predictions"]
    other = runs["eval_other"] / "conformal_rule.json"
    out = tmp_path / "t"
    with pytest.raises(FingerprintMismatch):
        triage_with_page(pred, runs["eval"] / RULE_FILE, out, conformal_rule=other, progress=False)
    assert not out.exists() or not any(out.iterdir())
    err_triage = _one_line_exit_2(capsys, ["triage", "-p", str(pred), "--rule", str(runs["eval"] / RULE_FILE),
                                           "-o", str(out), "--conformal-rule", str(other), "-q"])
    assert not out.exists() or not any(out.iterdir())  # nothing written: not even the triage
    err_conformal = _one_line_exit_2(capsys, ["conformal", "-p", str(pred), "--rule", str(other), "-o",
                                              str(tmp_path / "m"), "-q"])
    assert err_triage.removeprefix("monai-unc triage: ") == err_conformal.removeprefix("monai-unc conformal: ")
    assert "net B" in err_triage and "--allow-mismatch" in err_triage
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["triage", "-p", str(pred), "--rule", str(runs["eval"] / RULE_FILE), "-o", str(out),
                         "--conformal-rule", str(other), "--allow-mismatch", "--cases", "0", "-q"]) == 0
    text = (out / "triage.html").read_text()
    assert 'id="conformal-mismatch"' in text
    assert json.loads((out / TRIAGE_CONFORMAL_DIR / "conformal.json").read_text())["fingerprint"]["status"] == \
        "mismatch"


def test_region_model_masks_on_the_triage_page(tmp_path, monkeypatch):
    """Region (sigmoid) predictions: the table has the volumes per region, the figures the union over the regions of
    the rule's masks."""
    import monai_unc.report.triage as page
    from monai_unc.evaluation.region_case import predicted_regions
    from tests.evaluation.test_evaluate_regions import write_region_cohort

    dirs = write_region_cohort(tmp_path / "c", n_cases=5)
    config = EvaluationConfig(regions="brats", spatial=False, target_risk=0.5, delta=0.2,
                              products=[ConformalMasks({"outer": 0.3, "inner": 0.4})])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(dirs["labels"], dirs["pred"], tmp_path / "ev", config)
    calls = []
    real = page.plot_case_overlay

    def spy(case_id, *args, **kwargs):
        calls.append((case_id, {o.label.split()[0]: o.mask for o in kwargs.get("overlays") or ()} or None))
        return real(case_id, *args, **kwargs)

    monkeypatch.setattr(page, "plot_case_overlay", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, html_path = triage_with_page(dirs["pred"], tmp_path / "ev" / RULE_FILE, tmp_path / "t", cases=1,
                                        progress=False, conformal_rule=tmp_path / "ev" / "conformal_rule.json")
    head, rows = _table(html_path.read_text())
    for name in ("TC", "WT", "ET"):
        assert {f"inner ml {name}", f"predicted ml {name}", f"outer ml {name}", f"band p95 mm {name}"} <= set(head)
    assert len(rows) == 5
    doc = ConformalRuleFile.load(tmp_path / "ev" / "conformal_rule.json")
    (cid, masks), = calls
    files = json.loads((tmp_path / "t" / "triage.json").read_text())["files"]
    case = load_case(CaseFiles.from_json(files[cid]), 3, multilabel=True)
    pred = predicted_regions(case, doc.regions)  # the predicted region masks (R, *spatial)
    for side, rule in doc.rules.items():
        expected = rule.apply(case.probs, pred=pred, spacing=case.spacing).any(axis=0)
        assert np.array_equal(masks[side], expected)


def test_a_stratified_rule_shows_its_thresholds_per_stratum(tmp_path):
    """conformal.json of a stratified rule has one lambda_hat mapping per stratum (it crashed the page before)."""
    from monai_unc.report import triage as page

    masks = {"lambda_hat": {"outer": [{"1": 0.5}, {"1": 0.25}], "inner": {"1": 0.75}},
             "guarantee": {"outer": "FNR <= 0.3 within each stratum"}}
    (tmp_path / "conformal.json").write_text(json.dumps(masks))
    text = str(page.product_section(ConformalMasks.applied_section(tmp_path), "conformal"))
    assert "stratum 0: 1: 0.5; stratum 1: 1: 0.25" in text and "(lambda_hat 1: 0.75)" in text


def test_a_rerun_without_the_conformal_rule_removes_the_earlier_masks(runs, tmp_path):
    """Found by hostile testing: ``triage --conformal-rule`` then ``triage`` of the next day's cases into the same
    folder without it kept ``conformal/`` with the earlier cases' masks and ``conformal.csv`` beside the new
    ``triage.json`` (a mask of an earlier prediction of a case id passing for the new one's)."""
    out = tmp_path / "triage"
    shutil.copytree(runs["out"], out)
    assert (out / TRIAGE_CONFORMAL_DIR / "conformal.csv").is_file()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        triage_with_page(runs["B"]["predictions"], runs["eval"] / RULE_FILE, out, cases=0, progress=False)
    assert not (out / TRIAGE_CONFORMAL_DIR).exists()
    assert (out / "triage.json").is_file() and (out / "triage.html").is_file()
    # a folder holding an input of the run (here the images) is left alone
    images = out / TRIAGE_CONFORMAL_DIR
    shutil.copytree(runs["B"]["images"], images)
    for p in images.glob("toy001*"):  # named as the case's renamed predictions
        p.rename(p.with_name(HOSTILE + p.name[len("toy001"):]))
    names = sorted(p.name for p in images.iterdir())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        triage_with_page(runs["B"]["predictions"], runs["eval"] / RULE_FILE, out, images=images, cases=0,
                         progress=False)
    assert sorted(p.name for p in images.iterdir()) == names
