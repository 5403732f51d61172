"""``monai-unc demo``: the full demo certifies a rule on its calibration cohort and triages new cases; the realised
risk of the accepted new cases is printed beside the guarantee (:mod:`monai_unc.workflows.demo`)."""

import csv
import json
from types import SimpleNamespace

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import DEMO_CALIBRATION_SHIFTS, DEMO_NEW_SHIFTS
from monai_unc.evaluation.triage import RULE_FILE, ReferralRule, TriageResult
from monai_unc.workflows.demo import DELTA, FAILURE_DICE, TARGET_RISK
from monai_unc.workflows.triage import format_outcome, triage_outcome


def _rule(feasible=True, risk="failure"):
    return SimpleNamespace(feasible=feasible, risk=risk, failure_dice=0.8, target_risk=0.2, delta=0.1, method="sgr",
                           risk_definition="dice < 0.8" if risk == "failure" else "1 - dice", n_calibration=42,
                           coverage=0.6, observed_risk=0.04, bound=0.19)


def _result(decisions):
    codes = {"accept": "accepted", "far": "image_statistics", "high": "above_threshold"}
    return TriageResult({"cases": [{"case": c, "decision": "accept" if d == "accept" else "review",
                                    "code": codes[d]} for c, d in decisions.items()]}, {})


def test_triage_outcome_counts_the_realised_risk_of_accepted_cases_and_the_reasons_of_referred_ones():
    res = _result({"a": "accept", "b": "accept", "c": "accept", "d": "high", "e": "high", "f": "far"})
    dice = {"a": 0.85, "b": 0.79, "c": 0.83, "d": 0.7, "e": 0.82, "f": 0.6}
    out = triage_outcome(_rule(), res, dice)
    assert (out["n_cases"], out["n_accepted"], out["n_referred"]) == (6, 3, 3)
    assert out["n_failed_accepted"] == 1 and out["risk_accepted"] == pytest.approx(1 / 3)
    assert out["n_failed_referred"] == 2 and out["reasons"] == {"above_threshold": 2, "image_statistics": 1}
    lines = format_outcome(_rule(), out)
    assert lines[0].startswith("guaranteed: at most 0.2 of the new cases the threshold accepts fail (dice < 0.8)")
    assert "3 accepted, 3 referred (2 score above the threshold, 1 image far from the calibration images)" in lines[1]
    assert "1 of 3 accepted new case(s) failed (dice < 0.8): risk 0.333 vs the target 0.2" in lines[2]
    # a continuous risk: the mean 1 - Dice of the accepted cases; failures still counted at the failure Dice
    soft = triage_outcome(_rule(risk="1-dice"), res, dice)
    assert soft["risk_accepted"] == pytest.approx((0.15 + 0.21 + 0.17) / 3) and soft["n_failed_accepted"] == 1
    # nothing accepted: no realised risk, and the guarantee says nothing was certified
    none = triage_outcome(_rule(False), _result({"a": "high"}), dice)
    assert none["risk_accepted"] is None
    lines = format_outcome(_rule(False), none)
    assert lines[0].startswith("guaranteed: nothing") and "no new case accepted" in lines[2]
    with pytest.raises(ValueError, match=r"dice has no value for the triaged case\(s\) \['f'\]"):
        triage_outcome(_rule(), res, {k: v for k, v in dice.items() if k != "f"})


@pytest.mark.parametrize("quick", [False, True])
def test_demo_refuses_a_folder_holding_the_other_cohort_before_any_work(tmp_path, quick):
    """Every step lists the whole folder, so a full demo resumed in a ``--quick`` folder (or the reverse, or a folder
    of an earlier version's 11-case demo) would mix the cohorts: refused before any work, naming ``--output``."""
    from monai_unc.data.cohorts import DEMO_SHIFTS
    from monai_unc.workflows.demo import run_demo

    other = DEMO_CALIBRATION_SHIFTS if quick else DEMO_SHIFTS
    data = tmp_path / "demo" / "data"
    data.mkdir(parents=True)
    (data / "shifts.csv").write_text("case,shift,perturbation,parameter\n"
                                     + "".join(f"{c},{s},{k},{v}\n" for c, s, k, v in other))
    with pytest.raises(ValueError, match=r"--output .*demo holds .* cohort; the demo resumes only its own"):
        run_demo(tmp_path / "demo", quick=quick, quiet=True)
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["data"]



@pytest.mark.parametrize("quick", [False, True])
def test_demo_refuses_the_other_cohort_interrupted_before_its_shift_table(tmp_path, quick):
    """Regression: ``shifts.csv`` is written once the cohort is complete, so a full demo interrupted while making
    its cohort, then run again with ``--quick`` into the same ``--output`` (or the reverse), was accepted and its
    images were predicted, evaluated and triaged with the other cohort's."""
    from monai_unc.data.cohorts import DEMO_RECORD, DEMO_SHIFTS
    from monai_unc.workflows.demo import run_demo

    other = DEMO_CALIBRATION_SHIFTS if quick else DEMO_SHIFTS
    data = tmp_path / "demo" / "data"
    (data / "images").mkdir(parents=True)
    (data / DEMO_RECORD).write_text(json.dumps({other[1][0]: [0, other[1][2], other[1][3], 1]}))
    with pytest.raises(ValueError, match=r"--output .*demo holds .* cohort; the demo resumes only its own"):
        run_demo(tmp_path / "demo", quick=quick, quiet=True)
    (data / DEMO_RECORD).unlink()  # no record (an earlier version's folder): the images made so far tell
    (data / "images" / f"{other[2][0]}.nii.gz").write_bytes(b"")
    with pytest.raises(ValueError, match=r"--output .*demo holds .* cohort; the demo resumes only its own"):
        run_demo(tmp_path / "demo", quick=quick, quiet=True)
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["data"]


#: the new cases of the full-demo test: 5 of the 12 of :data:`DEMO_NEW_SHIFTS`, each 1/54 of the demo's inference and
#: evaluation. A demo case is the same in any subset (its image's noise is seeded by the case, its MC dropout draws by
#: the inferer's seed at every case) and its triage decision depends on it and the calibration cases only (the rule,
#: the calibration score range and image statistics), so the decisions below are the full demo's: 3 accepted (the
#: accepted scores farthest from the threshold), 2 referred with a Dice failure (one score above the threshold, one
#: image far from the calibration images). The rule is certified on all 42 calibration cases, as ``make demo`` does.
FULL_DEMO_NEW_CASES = ("new_gn115", "new_bias080", "new_blur080", "new_gamma050", "new_noise013")


@pytest.mark.slow
def test_full_demo_certifies_a_rule_and_accepts_and_refers_new_cases(tmp_path, capsys, monkeypatch):
    """``monai-unc demo`` as ``make demo`` runs it (MC dropout, 4 samples) on the 42 calibration cases and
    :data:`FULL_DEMO_NEW_CASES`: the rule certified on the calibration cases is feasible, at least one new case is
    accepted and one referred, and the printed realised risk of the accepted new cases is the one their labels give.
    A few CPU minutes."""
    pytest.importorskip("nilearn")
    import monai_unc.workflows.demo as demo

    new_shifts = tuple(c for c in DEMO_NEW_SHIFTS if c[0] in FULL_DEMO_NEW_CASES)
    assert len(new_shifts) == len(FULL_DEMO_NEW_CASES)
    monkeypatch.setattr(demo, "DEMO_NEW_SHIFTS", new_shifts)
    out = tmp_path / "demo"
    assert cli.main(["demo", "--output", str(out)]) == 0
    check_full_demo(out, capsys.readouterr().out, new_shifts)
    check_demo_rule_reuse(out, tmp_path, new_shifts[0][0])


def check_demo_rule_reuse(out, tmp_path, case):
    """Issue #40: a demo image (new case ``case``) predicted with ``infer --model example --settings-from`` the demo's
    rule is triaged by that rule (accepted or referred on its score), not refused for its settings."""
    import shutil

    images = tmp_path / "more_images"
    images.mkdir()
    src = next((out / "data" / "images").glob(f"{case}.*"))
    shutil.copy(src, images / src.name)
    rule = out / "triage" / RULE_FILE
    assert cli.main(["infer", "-i", str(images), "-o", str(tmp_path / "more_pred"), "--model", "example",
                     "--settings-from", str(rule), "--device", "cpu", "-q"]) == 0
    assert cli.main(["triage", "-p", str(tmp_path / "more_pred"), "--rule", str(rule), "-o",
                     str(tmp_path / "more_triage"), "-q"]) == 0
    triage = json.loads((tmp_path / "more_triage" / "triage.json").read_text())
    assert triage["fingerprint"]["status"] == "match" and triage["n_cases"] == 1


def check_full_demo(out, printed, new_shifts=DEMO_NEW_SHIFTS):
    """What the full demo must show, from its output folder ``out`` and what it printed (``new_shifts``: its new
    cases)."""
    rule = ReferralRule.load(out / "triage" / RULE_FILE)
    assert rule.feasible and rule.bound <= rule.target_risk == TARGET_RISK and rule.delta == DELTA
    assert rule.risk_definition == f"dice < {FAILURE_DICE:g}" and rule.method == "sgr"
    assert sorted(rule.calibration_cases) == sorted(c[0] for c in DEMO_CALIBRATION_SHIFTS)
    demo = json.loads((out / "demo_summary.json").read_text())["demo"]
    new = demo["new_cases"]
    assert new["n_cases"] == len(new_shifts) and new["n_accepted"] >= 1 and new["n_referred"] >= 1
    with open(out / "evaluation" / "metrics.csv") as f:
        dice = {r["case"]: float(r["dice"]) for r in csv.DictReader(f)}
    failed = [c for c in new["accepted"] if dice[c] < FAILURE_DICE]
    assert new["n_failed_accepted"] == len(failed)
    assert new["risk_accepted"] == pytest.approx(len(failed) / new["n_accepted"])
    triage = json.loads((out / "triage" / "triage.json").read_text())
    assert sorted(triage["accepted"]) == sorted(new["accepted"])
    assert "guaranteed: at most 0.2 of the new cases the threshold accepts fail (dice < 0.8)" in printed
    assert (f"{new['n_accepted']} accepted, {new['n_referred']} referred (" in printed
            and f"{len(failed)} of {new['n_accepted']} accepted new case(s) failed (dice < 0.8): risk "
            f"{new['risk_accepted']:.3f} vs the target 0.2" in printed)
    assert demo["cohort"] == "full" and demo["samples"] == 4 and demo["cpu_seconds"] > 0
    # the budget's mark and the rule's decision are named apart (issue #40)
    assert "budget: flagged" in printed and "rule: accept" in printed and "rule decision" in printed
    assert "--settings-from" in printed
