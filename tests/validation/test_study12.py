"""docs/validation/study12_placements.py: the smoke-test run (JSON structure, every metric finite or NaN with a
reason, the cohort metrics recomputed from the per-case records by brute force) and its helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.validation._studies import finite_number, load_study


def _aurc_brute(score: np.ndarray, risk: np.ndarray) -> float:
    """Trapezoid of the mean risk of the k least uncertain cases over coverage k / n, held flat down to coverage 0
    (distinct scores)."""
    assert np.unique(score).size == score.size
    order = np.argsort(score)
    n = score.size
    sel = np.array([risk[order[:k]].mean() for k in range(1, n + 1)])
    sel, cov = np.r_[sel[0], sel], np.r_[0.0, np.arange(1, n + 1) / n]
    return float(np.sum((sel[1:] + sel[:-1]) / 2 * np.diff(cov)))


def _auroc_pairs(neg: np.ndarray, pos: np.ndarray) -> float:
    return float(np.mean([(p > q) + 0.5 * (p == q) for p in pos for q in neg]))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    study = load_study("study12_placements")
    out = tmp_path_factory.mktemp("s12")
    return study, out, study.main(["--tiny", "--output", str(out)])


@pytest.mark.slow
def test_study12_tiny_structure(tiny):
    study, out, r = tiny
    assert (out / "study12.md").read_text().startswith("## Study 12")
    assert set(r["rows"]) == set(study.METHODS) and r["n_cases"] == len(r["cases"]) == 3
    for m, row in r["rows"].items():
        for k in (*study.METRICS, "t", "template_score_sd", "case_score_sd"):
            v = row[k]
            assert isinstance(v, float)
            assert math.isfinite(v) or k in r["nan_reasons"][m], (m, k)
        assert 0 <= row["dice"] <= 1 and row["cost"] > 0
    assert r["rows"]["deterministic"]["cost"] == pytest.approx(1.0)
    assert r["rows"]["deterministic"]["template_score_sd"] < 1e-6  # one deterministic pass: no sampling noise
    assert r["rows"]["mc_auto"]["template_score_sd"] > 0
    assert r["statements"] and all(isinstance(s, str) for s in r["statements"])
    # the JSON on disk holds NaN as null, and --render-only re-writes the same page
    again = study.main(["--render-only", "--output", str(out)])
    assert (out / "study12.md").read_text() == study.render_markdown(again)


@pytest.mark.slow
def test_study12_tiny_metrics_match_brute_force(tiny):
    study, _, r = tiny
    cases = r["cases"]
    shifted = np.array([c["shift"] != "none" for c in cases])
    det_cpu = sum(c["methods"]["deterministic"]["cpu_s"] for c in cases)
    for m, row in r["rows"].items():
        score = np.array([c["methods"][m]["score"] for c in cases])
        dice = np.array([c["methods"][m]["dice"] for c in cases])
        assert row["aurc"] == pytest.approx(_aurc_brute(score, 1 - dice), abs=1e-12)
        assert row["ood_auroc"] == pytest.approx(_auroc_pairs(score[~shifted], score[shifted]))
        assert row["dice"] == pytest.approx(dice.mean())
        assert row["cost"] == pytest.approx(sum(c["methods"][m]["cpu_s"] for c in cases) / det_cpu)
        assert finite_number(r["calibration"][m]["t"]) and r["calibration"][m]["t"] > 0


def test_summarise_nan_reasons_and_severity_split():
    study = load_study("study12_placements")

    def case(shift, sev, score, dice):
        return {"shift": shift, "severity": sev, "methods": {"x": {"score": score, "dice": dice, "cpu_s": 2.0}}}

    cases = [
        case("none", 0.0, 0.1, 0.9),
        case("blur", 4.0, 0.5, 0.6),
        case("noise", 1.5, 0.3, 0.8),
        case("crop", 3.5, 0.2, 0.7),
    ]
    row, why = study.summarise(cases, "x", det_cpu=4.0)
    assert not why and row["cost"] == pytest.approx(8.0 / 4.0)
    assert row["ood_auroc"] == 1.0  # every perturbed case above the template
    assert row["severe_auroc"] == pytest.approx(_auroc_pairs(np.array([0.3]), np.array([0.5, 0.2])))
    row, why = study.summarise(cases[:2], "x", det_cpu=4.0)  # no mild perturbed case
    assert math.isnan(row["severe_auroc"]) and "severe_auroc" in why and math.isfinite(row["ood_auroc"])
    row, why = study.summarise([case("blur", 2.0, 0.5, 0.6), case("crop", 4.0, 0.4, 0.5)], "x", det_cpu=0.0)
    assert math.isnan(row["ood_auroc"]) and math.isnan(row["cost"]) and {"ood_auroc", "cost"} <= set(why)


def test_losses_follow_the_numbers():
    study = load_study("study12_placements")
    base = {
        "cost": 10.0,
        "aurc": 0.05,
        "ood_auroc": 0.8,
        "severe_auroc": 0.7,
        "ece_ts": 0.01,
        "referral_area": 0.85,
        "dice": 0.86,
    }
    rows = {
        "mc_auto": dict(base),
        "mc_decoder": base | {"cost": 5.0, "aurc": 0.07},  # worse AURC only
        "mc_last": base | {"cost": 2.5, "ood_auroc": 0.9, "ece_ts": 0.02},  # better OoD, worse ECE
    }
    text = study.losses(rows)
    assert (
        "decoder only costs 5.0x one pass against 10.0x for every stage (50 % less); it is worse on AURC and" in text[0]
    )
    assert "it is worse on ECE after TS and" in text[1] and "(75 % less)" in text[1]
    assert "OoD AUROC MC dropout, last stage (0.9000)" in text[2]


def test_calibration_masks_reject_a_perturbed_case():
    study = load_study("study12_placements")
    with pytest.raises(ValueError, match="case"):
        study.calibration_masks({"shift": "blur"}, None, 1)
