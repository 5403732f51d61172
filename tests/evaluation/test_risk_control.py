"""The risk-controlled referral threshold in ``monai-unc evaluate`` / ``report`` (--target-risk, --delta, ...)."""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, case_risk, fill_undefined_scores, run_evaluate, summarize
from monai_unc.metrics.selective import risk_controlled_threshold


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("rc")
    data = write_toy_cohort(root / "data", n_cases=16, shape=(16, 16, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state, summary, _ = run_evaluate(data["labels"], data["predictions"], root / "eval",
                                         EvaluationConfig(spatial=False))
    rows = state.sorted_rows()
    ids = [str(r["case"]) for r in rows]
    scores = np.array([float(r[summary["score"]["column"]]) for r in rows])  # NaN: undefined (the cohort has some)
    assert np.isnan(scores).any() and np.isfinite(scores).any()
    dice = np.array([float(r["dice"]) for r in rows])
    return {"root": root, "data": data, "state": state, "ids": ids, "scores": scores, "dice": dice,
            "filled": fill_undefined_scores(scores)}


def _summary(state, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return summarize(state, EvaluationConfig(spatial=False, **kw))


def test_no_block_without_a_target(cohort):
    assert "risk_control" not in _summary(cohort["state"])


@pytest.mark.parametrize("risk, method, target, delta, feasible", [
    ("failure", "sgr", 0.5, 0.2, True), ("1-dice", "ltt", 0.5, 0.5, True), ("failure", "ltt", 0.5, 0.2, True),
    ("1-dice", "ltt", 0.3, 0.2, False), ("failure", "sgr", 0.05, 0.2, False),
])
def test_block_equals_the_metric_function_on_every_case(cohort, risk, method, target, delta, feasible):
    s = _summary(cohort["state"], target_risk=target, delta=delta, risk=risk,
                 risk_method=None if method != "ltt" or risk != "failure" else "ltt")
    rc = s["risk_control"]
    dice, scores, ids = cohort["dice"], cohort["scores"], cohort["ids"]
    loss = (dice < 0.8).astype(float) if risk == "failure" else 1.0 - dice
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ref = risk_controlled_threshold(scores, loss, target, delta, method=method, undefined="refer")
    assert rc["method"] == method and rc["feasible"] == ref.feasible == feasible
    assert rc["calibration"]["coverage"] == ref.coverage and rc["calibration"]["n_cases"] == 16
    assert rc["bound"] == pytest.approx(ref.bound, abs=0, rel=0)
    # an undefined score is referred (as the rule refers it), whatever the threshold
    accepted = [c for c, u in zip(ids, scores) if np.isfinite(u) and u <= ref.threshold]
    assert rc["accepted"] == accepted and set(rc["referred"]) == set(ids) - set(accepted)
    assert rc["referral_fraction"] == pytest.approx(1 - len(accepted) / 16)
    if ref.feasible:
        assert rc["calibration"]["risk_accepted"] == pytest.approx(loss[np.isfinite(scores)
                                                                        & (scores <= ref.threshold)].mean())
    assert "held_out" not in rc


def test_calibration_subset_and_held_out_check(cohort):
    ids, scores, dice = cohort["ids"], cohort["scores"], cohort["dice"]
    cal = ids[:12]
    s = _summary(cohort["state"], target_risk=0.5, delta=0.3, calibration_cases=cal)
    rc = s["risk_control"]
    is_cal = np.array([c in cal for c in ids])
    ref = risk_controlled_threshold(scores[is_cal], (dice[is_cal] < 0.8).astype(float), 0.5, 0.3, method="sgr",
                                    undefined="refer")
    assert ref.feasible and rc["feasible"]
    assert rc["calibration"]["cases"] == cal and rc["calibration"]["coverage"] == ref.coverage
    acc = np.isfinite(scores) & (scores <= ref.threshold) & ~is_cal
    held = rc["held_out"]
    assert acc.any() and held["n_cases"] == 4 and held["coverage"] == acc.sum() / 4
    assert held["risk_accepted"] == pytest.approx((dice[acc] < 0.8).mean())
    with pytest.raises(ValueError, match="calibration_cases.*not in the evaluation"):
        _summary(cohort["state"], target_risk=0.4, calibration_cases=["nope"])


def test_infeasible_target_refers_everything(cohort):
    s = _summary(cohort["state"], target_risk=0.01, delta=0.05)
    rc = s["risk_control"]
    assert rc["feasible"] is False and rc["threshold"] is None  # -inf in JSON
    assert rc["accepted"] == [] and len(rc["referred"]) == 16 and rc["referral_fraction"] == 1.0
    assert any("no threshold certifies" in w for w in s["warnings"])


def test_case_risk():
    d = np.array([0.9, 0.8, 0.79, 1.0])
    assert case_risk(d, EvaluationConfig()).tolist() == [0, 0, 1, 0]
    assert case_risk(d, EvaluationConfig(risk="1-dice")) == pytest.approx([0.1, 0.2, 0.21, 0.0])


@pytest.mark.parametrize("kw, msg", [
    ({"target_risk": 1.5}, "target_risk"), ({"target_risk": 0.1, "delta": 0.0}, "delta"),
    ({"risk": "dice"}, "risk must be"), ({"risk": "1-dice", "risk_method": "sgr"}, "needs the 0/1 risk"),
    ({"risk_method": "cp"}, "risk_method"), ({"calibration_cases": []}, "calibration_cases"),
])
def test_config_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        EvaluationConfig(**kw).validate()


def test_cli_evaluate_and_report(cohort, tmp_path, capsys):
    data = cohort["data"]
    ev = tmp_path / "eval"
    argv = ["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o", str(ev), "--no-spatial",
            "--target-risk", "0.5", "--delta", "0.2", "-q"]
    assert cli.main(argv) == 0
    summary = json.loads((ev / "summary.json").read_text())
    rc = summary["risk_control"]
    assert summary["config"]["target_risk"] == 0.5 and rc["method"] == "sgr" and rc["risk"] == "dice < 0.8"
    assert cli.main(argv[:-1]) == 0
    out = capsys.readouterr().out
    assert re.search(r"risk control \(sgr, dice < 0\.8 <= 0\.5 w\.p\. 0\.8\): ", out)

    # the report shows the threshold in the triage table, the note and the referral curve
    assert cli.main(["report", "-e", str(ev), "-o", str(tmp_path / "r"), "--cases", "0"]) == 0
    text = (tmp_path / "r" / "report.html").read_text()
    table = re.search(r'<table id="triage-table">(.*?)</table>', text, re.S).group(1)
    assert "<th class=\"l\">rule (risk-controlled)</th>" in table
    cells = re.findall(r'<tr class="[^"]*" data-case="([^"]+)">.*?<td class="l rc"><span class="tag (\w)">', table,
                       re.S)
    assert {c for c, t in cells if t == "r"} == set(rc["referred"]) and len(cells) == 16
    assert "Risk-controlled threshold" in text

    # report-time override: a new target re-runs the summary on the saved state
    lst = tmp_path / "cal.txt"
    lst.write_text("# calibration cases\n" + "\n".join(cohort["ids"][:10]) + "\n")
    assert cli.main(["report", "-e", str(ev), "-o", str(tmp_path / "r2"), "--cases", "0", "--target-risk", "0.01",
                     "--calibration-cases", str(lst)]) == 0
    text2 = (tmp_path / "r2" / "report.html").read_text()
    assert "No threshold satisfies the target" in text2 and "fitted on 10 calibration case(s)" in text2
    csv = tmp_path / "cal.csv"
    csv.write_text("case,split\n" + "".join(f"{c},cal\n" for c in cohort["ids"][:10]))
    assert cli._read_case_list(str(csv)) == cohort["ids"][:10]


def test_undefined_scores_are_referred_in_the_summary_and_an_older_summary_is_refused(cohort, tmp_path, capsys):
    # every defined score accepted (threshold null): the cases without a defined score are still referred, in the
    # summary as by the rule; a summary of an earlier version listing them as accepted is refused by the report
    data, ev = cohort["data"], tmp_path / "eval"
    assert cli.main(["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o", str(ev),
                     "--no-spatial", "--target-risk", "0.9", "--delta", "0.5"]) == 0
    out = capsys.readouterr().out
    summary = json.loads((ev / "summary.json").read_text())
    rc = summary["risk_control"]
    undefined = [c for c, u in zip(cohort["ids"], cohort["scores"]) if not np.isfinite(u)]
    assert rc["feasible"] and rc["threshold"] is None and sorted(rc["referred"]) == undefined
    assert rc["calibration"]["n_undefined"] == len(undefined)
    assert rc["calibration"]["coverage"] == pytest.approx(1 - len(undefined) / 16)
    assert "accept every case with a defined score; " in out and f"review {len(undefined)} of 16" in out
    from monai_unc.evaluation.triage import ReferralRule

    rule = ReferralRule.load(ev / "referral_rule.json")
    assert [d.code for d in rule.apply([math.nan])] == ["undefined_score"] and rule.coverage == pytest.approx(
        rc["calibration"]["coverage"])
    summary["risk_control"] = {**rc, "accepted": cohort["ids"], "referred": [], "referral_fraction": 0.0}
    (ev / "summary.json").write_text(json.dumps(summary))
    assert cli.main(["report", "-e", str(ev), "-o", str(tmp_path / "r"), "--cases", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "earlier monai-unc that counted the" in err and "run monai-unc evaluate --target-risk again" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("extra, msg", [
    (["--target-risk", "1.5"], "expected a number in (0, 1)"),
    (["--target-risk", "0.2", "--risk", "1-dice", "--risk-method", "sgr"], "needs the 0/1 risk"),
    (["--target-risk", "0.2", "--calibration-cases", "MISSING.txt"], "file not found"),
])
def test_cli_errors_are_one_line(cohort, tmp_path, capsys, extra, msg):
    data = cohort["data"]
    argv = ["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o", str(tmp_path / "e"),
            "--no-spatial", "-q", *extra]
    if extra[-1] == "MISSING.txt":
        argv[-1] = str(tmp_path / "MISSING.txt")
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse type errors
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_referral_plot_marks_the_threshold(cohort):
    from monai_unc.report.plots import plot_referral_curve

    s = _summary(cohort["state"], target_risk=0.5, delta=0.2)
    fig = plot_referral_curve(cohort["filled"], cohort["dice"], 0.2, "u", risk_control=s["risk_control"])
    ax = fig.axes[0]
    xs = [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "-."]
    assert xs == [pytest.approx(s["risk_control"]["referral_fraction"])]
    assert math.isfinite(xs[0])


def test_read_case_list_variants(tmp_path):
    one = tmp_path / "ids.csv"
    one.write_text("# calibration\ncase\ntoy000\ntoy001\n")  # one-column CSV (a .csv name): the header is no case
    assert cli._read_case_list(str(one)) == ["toy000", "toy001"]
    f = tmp_path / "ids.txt"
    f.write_text("# calibration\ncase\ntoy000\ntoy001\n")  # a plain list (found by hostile testing): 'case' is one
    assert cli._read_case_list(str(f)) == ["case", "toy000", "toy001"]
    f.write_text("# exported 2026-11-22\ncase,site\ntoy000,a\ntoy002,b\n")  # a comment before the CSV header
    assert cli._read_case_list(str(f)) == ["toy000", "toy002"]
    f.write_text("toy005\n\n toy006 \n")
    assert cli._read_case_list(str(f)) == ["toy005", "toy006"]
    f.write_text("id,site\ntoy000,a\n")
    with pytest.raises(ValueError, match="without a 'case' column"):
        cli._read_case_list(str(f))
    # a column pasted twice (found by a review of edited tables): the csv module kept the last one's cells, so the
    # fit took toy008 and toy009 where the first column lists toy000 and toy001
    f.write_text("case,site,case\ntoy000,a,toy008\ntoy001,b,toy009\n")
    with pytest.raises(ValueError, match="the column 'case' is given twice in the header"):
        cli._read_case_list(str(f))


def test_unknown_calibration_cases_stop_before_any_work(cohort, tmp_path, monkeypatch):
    import monai_unc.evaluation.runner as cohort_mod

    calls = []
    monkeypatch.setattr(cohort_mod, "evaluate_case", lambda *a, **k: calls.append(1))
    data = cohort["data"]
    cfg = EvaluationConfig(spatial=False, target_risk=0.2, calibration_cases=["toy000", "nope"])
    with pytest.raises(ValueError, match="calibration_cases: 1 case"):
        run_evaluate(data["labels"], data["predictions"], tmp_path / "e", cfg)
    assert calls == []


def test_failed_rerun_leaves_no_stale_cohort_numbers(cohort, tmp_path, capsys):
    import shutil

    data = cohort["data"]
    pred = tmp_path / "pred"
    shutil.copytree(data["predictions"], pred)
    ev = tmp_path / "eval"
    argv = ["evaluate", "-l", str(data["labels"]), "-p", str(pred), "-o", str(ev), "--no-spatial", "-q"]
    assert cli.main(argv) == 0 and (ev / "summary.json").is_file()
    (pred / "toy003_probs.nii.gz").write_bytes(b"not a nifti file")
    assert cli.main(argv) == 1
    assert "toy003" in capsys.readouterr().err
    assert (ev / "failures.json").is_file()
    assert not (ev / "summary.json").exists() and not (ev / "metrics.csv").exists()
    assert not (ev / "state" / "rows.json").exists()
    assert cli.main(["report", "-e", str(ev)]) == 2
    assert "failed cases" in capsys.readouterr().err
    # fixed: the rerun evaluates the case again and the report works
    shutil.copy(data["predictions"] / "toy003_probs.nii.gz", pred / "toy003_probs.nii.gz")
    assert cli.main(argv) == 0 and not (ev / "failures.json").exists()
    assert cli.main(["report", "-e", str(ev), "--cases", "0"]) == 0
