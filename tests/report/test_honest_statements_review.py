"""Hostile review of the numbers shown with a claim (side "honesty"): each test reproduces a statement that was false.

- the line of ``evaluate --target-risk`` rounded the certified threshold up, so the printed rule accepted the lowest
  calibration score the certified rule refers;
- the expected-Dice conformal interval was printed with its ends rounded to the nearest 0.01, narrower than the
  computed interval, and as printed covered less than its level;
- with ``--allow-mismatch`` the triage page's card still read "guaranteed mean risk of accepted <= target" under the
  banner saying that the guarantee does not cover these predictions;
- a stratified conformal rule's guarantee named stratum 0's count of calibration cases as every stratum's.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import warnings

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.metrics.quality import conformal_interval
from monai_unc.products.risk_control import risk_control_line
from monai_unc.report.triage import _expected_dice_text
from monai_unc.workflows.triage import _expected_dice_cell
from tests.evaluation.test_triage import _stamp_infer_records  # one stand-in infer run, shared


def _printed_rule(line: str):
    """``(operator, bound)`` of the rule a risk-control line prints."""
    m = re.search(r"accept score (<=|<) ([0-9.eE+-]+)", line)
    assert m, line
    return m.group(1), float(m.group(2))


def test_the_risk_control_line_prints_the_certified_rule_not_a_rounded_threshold():
    # the threshold is the float just below the lowest refused calibration score (risk_controlled_threshold)
    refused = 0.6231058567762375
    thr = math.nextafter(refused, -math.inf)
    rc = {"method": "sgr", "risk": "dice < 0.8", "target_risk": 0.4, "delta": 0.2, "feasible": True,
          "threshold": thr, "bound": 0.3488, "calibration": {"coverage": 0.533, "risk_accepted": 0.0625,
                                                             "n_undefined": 4},
          "accepted": ["a"], "referred": ["b"]}
    line = risk_control_line(rc)
    op, bound = _printed_rule(line)
    accepts = (lambda v: v <= bound) if op == "<=" else (lambda v: v < bound)
    # the printed rule is the certified one: the refused score and every score above it refused, the threshold kept
    assert not accepts(refused), line
    assert not accepts(0.623106) and accepts(thr) and accepts(0.6231), line
    assert "undefined score is referred" in line


def test_format_interval_rounds_outward():
    from monai_unc.product import format_interval

    assert format_interval(0.7851, 0.9149) == "[0.78, 0.92]"
    assert format_interval(0.78, 1.0) == "[0.78, 1.00]"  # exact decimals stay
    assert format_interval(0.29, 0.3) == "[0.29, 0.30]"  # 0.29 is 0.28999999999999998 as a float: not 0.28
    assert format_interval(-0.0, 0.5, 1) == "[0.0, 0.5]"
    assert format_interval(None, math.nan) == "[–, –]"
    with pytest.raises(ValueError, match="decimals"):
        format_interval(0.1, 0.2, -1)


def _shown(text: str) -> tuple[float, float]:
    lo, hi = text.split("[")[1].rstrip("]").split(",")
    return float(lo), float(hi)


def test_the_printed_expected_dice_interval_contains_the_computed_one_and_covers_its_level():
    c = {"expected_dice": 0.85, "expected_dice_low": 0.7851, "expected_dice_high": 0.9149}
    for text in (_expected_dice_text(c), _expected_dice_cell(c)):
        lo, hi = _shown(text)
        assert lo <= 0.7851 and hi >= 0.9149, text
    # simulation: 90 % intervals from 50 calibration cases with small residuals; as printed they must cover >= 90 %
    rng = np.random.default_rng(0)
    n, reps, covered = 50, 4000, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(reps):
            est = rng.uniform(0.6, 0.95, n + 1)
            dice = np.clip(est + rng.normal(0.0, 0.01, n + 1), 0.0, 1.0)
            iv = conformal_interval(est[n:], est[:n], dice[:n], alpha=0.1)
            row = {"expected_dice": float(est[n]), "expected_dice_low": float(iv.low[0]),
                   "expected_dice_high": float(iv.high[0])}
            lo, hi = _shown(_expected_dice_text(row))
            assert (lo, hi) == _shown(_expected_dice_cell(row))
            covered += lo <= dice[n] <= hi
    # the nearest-rounded ends covered 0.885 here (the computed interval 0.899); binomial sd at 0.9: 0.005
    assert covered / reps >= 0.9 - 3 * math.sqrt(0.09 / reps), covered / reps


def test_the_interval_statement_never_states_a_narrower_half_width_than_the_intervals_use():
    from monai_unc.evaluation.triage.rule import CalibrationRecord, ReferralRule

    def statement(expected):
        rec = CalibrationRecord((0.1, 0.2, 0.3), (0.9, 0.7, 0.8), (0.0, 1.0, 0.0), expected_dice=expected,
                                interval_alpha=0.5)
        rule = ReferralRule("predictive_entropy_fg_mean", 0.2, True, 0.5, 0.1, "sgr", "failure", 0.8,
                            (0.1, 0.2, 0.3), ("a", "b", "c"), record=rec)
        q = rec.interval_quantile()[0]
        return q, float(re.search(r"estimate \+/- ([0-9.]+)", rule.interval_statement()).group(1))

    q, said = statement((0.9844, 0.7844, 0.8844))  # every residual 0.0844: q = 0.0844
    assert said >= q and said == 0.085, (q, said)
    q, said = statement((0.984, 0.784, 0.884))  # q = 0.084 up to float rounding: stays 0.084
    assert said == 0.084, (q, said)


def _quiet(argv: list[str]) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return cli.main(argv)


@pytest.mark.slow
def test_the_triage_page_claims_no_guarantee_for_predictions_of_another_fingerprint(tmp_path):
    a = write_toy_cohort(tmp_path / "A", n_cases=30, shape=(16, 16, 16), seed=1)
    b = write_toy_cohort(tmp_path / "B", n_cases=6, shape=(16, 16, 16), seed=2)
    _stamp_infer_records(a["predictions"], "mcdropout", 8)
    ev = tmp_path / "ev"
    assert _quiet(["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev), "--no-spatial",
                   "--target-risk", "0.4", "--delta", "0.2", "-q"]) == 0
    assert json.loads((ev / "summary.json").read_text())["risk_control"]["feasible"]
    pred = tmp_path / "pred"
    shutil.copytree(b["predictions"], pred)

    def card(out) -> tuple[str, str]:
        page = (out / "triage.html").read_text()
        value = re.search(r'<div class="v">([^<]*)</div><div class="k">guaranteed mean risk', page).group(1)
        return value, page

    _stamp_infer_records(pred, "mcdropout", 8)  # the rule's settings: the card states the guarantee
    assert _quiet(["triage", "-p", str(pred), "--rule", str(ev / "referral_rule.json"), "-o", str(tmp_path / "same"),
                   "--cases", "0", "-q"]) == 0
    value, page = card(tmp_path / "same")
    assert value == "≤ 0.4" and "and carry its guarantee" in page and 'id="mismatch"' not in page
    # other settings, allowed: the banner says the guarantee does not cover them, so must the rest
    _stamp_infer_records(pred, "mcdropout", 4)
    assert _quiet(["triage", "-p", str(pred), "--rule", str(ev / "referral_rule.json"), "-o", str(tmp_path / "other"),
                   "--cases", "0", "-q", "--allow-mismatch"]) == 0
    value, page = card(tmp_path / "other")
    assert 'id="mismatch"' in page and "the guarantee does not cover them" in page
    assert not value.startswith("≤") and "mismatch" in value, value
    assert "and carry its guarantee" not in page and "so they do not carry its guarantee" in page


@pytest.mark.slow
def test_a_stratified_conformal_guarantee_names_every_strata_count(tmp_path):
    a = write_toy_cohort(tmp_path / "A", n_cases=10, shape=(12, 12, 12), seed=3)
    ev = tmp_path / "ev"
    assert _quiet(["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev), "--no-spatial",
                   "-q", "--conformal", "outer:fnr=0.3", "--conformal-strata", "3",
                   "--score", "predictive_entropy_mean"]) == 0
    side = json.loads((ev / "summary.json").read_text())["conformal"]["sides"]["outer"]
    counts = [p["n"] for p in side["per_stratum"]]
    assert len(set(counts)) > 1, counts  # ten cases in three strata: one of them holds a case more
    text = side["guarantee"]
    # no single count stated for every stratum; each stratum's count named
    assert not re.search(r"over the \d+ calibration cases", text), text
    assert f"({', '.join(map(str, counts))} in strata 0 to 2)" in text, text
    assert "within each stratum of predictive_entropy_mean" in text


def test_shares_are_printed_with_their_counts():
    """The report's held-out check read "coverage 0.2" and the demo's certificate "calibration: 53% accepted", shares
    without the counts they are of."""
    from monai_unc.evaluation.triage.rule import ReferralRule
    from monai_unc.report.html import _risk_control_note
    from monai_unc.workflows.triage import format_outcome

    rc = {"method": "sgr", "risk": "dice < 0.8", "target_risk": 0.2, "delta": 0.1, "feasible": True,
          "threshold": 0.5, "bound": 0.18, "calibration": {"cases": ["a"] * 20, "n_cases": 20, "coverage": 0.5,
                                                           "risk_accepted": 0.1},
          "accepted": ["a"] * 12, "referred": ["b"] * 18, "held_out": {"n_cases": 10, "coverage": 0.2,
                                                                        "risk_accepted": 0.0}}
    text = re.sub(r"<[^>]+>", "", str(_risk_control_note(rc, 30)))
    assert "Held-out cases: 10, accepted 20% (2 of 10)" in text, text
    rc["held_out"] = {"n_cases": 10, "coverage": 0.0, "risk_accepted": None}
    text = re.sub(r"<[^>]+>", "", str(_risk_control_note(rc, 30)))
    assert "accepted – (0 of 10)" in text or "accepted 0% (0 of 10)" in text, text
    assert "nothing to observe" in text, text
    rule = ReferralRule("predictive_entropy_fg_mean", 0.3, True, 0.2, 0.1, "sgr", "failure", 0.8,
                        tuple(np.linspace(0.1, 0.9, 30)), tuple(f"c{i}" for i in range(30)), coverage=16 / 30,
                        observed_risk=0.0625, bound=0.18)
    outcome = {"n_cases": 2, "n_accepted": 1, "n_referred": 1, "reasons": {"above_threshold": 1},
               "n_failed_accepted": 0, "risk_accepted": 0.0, "n_failed_referred": 1}
    line = format_outcome(rule, outcome)[0]
    assert "calibration: 53.3% (16 of 30) accepted" in line, line


@pytest.mark.parametrize("row,shown", [
    ({"expected_dice": 0.9312, "expected_dice_low": 0.7851, "expected_dice_high": 0.9999}, "0.93 [0.78, 1.00]"),
    ({"expected_dice": 0.9312}, "0.93"),
    ({"expected_dice": 0.9312, "expected_dice_low": None, "expected_dice_high": None}, "0.93"),
])
def test_the_cli_and_the_page_show_an_expected_dice_alike_in_the_interval_s_decimals(row, shown):
    """The CLI printed ``0.931 [0.78, 1.00]`` (a third decimal the interval denies), the page ``0.93 [...]``, and the
    page without an interval ``0.931``: one precision, one text."""
    assert _expected_dice_cell(row) == _expected_dice_text(row) == shown
