"""Numbers the pages quote from review 65's benchmarks, checked against the tables they cite (review 65 of the
documentation).

- docs/referral_threshold.md quoted the coverage of the setting "400 cases, target 0.1" of
  ``benchmarks/results/guarantees_review65.md`` as at ``delta = 0.1``; that row is at ``delta = 0.5``. It also said
  "with 10 to 50 calibration cases" of settings that run from 10 to 2000.
- docs/calibration.md said a per-class Newton finish costs "1 to 10 passes", citing a benchmark whose table
  (benchmarks/README.md) and the CHANGELOG give 1 to 8.
- CHANGELOG.md: a review-65 change corrected again within review 65 had two lines (the Parametric Maps' body part,
  the recurrent-dropout warning, the vector fit with no finite temperature).
"""

from __future__ import annotations

import re

from tests._paths import ROOT


def _text(path: str) -> str:
    return " ".join((ROOT / path).read_text(encoding="utf-8").split())


def _guarantee_rows() -> list[list[str]]:
    lines = (ROOT / "benchmarks/results/guarantees_review65.md").read_text(encoding="utf-8").splitlines()
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines if ln.startswith("| referral")]


def test_referral_coverage_sentence_states_the_delta_and_coverage_of_its_row():
    row = {m: r for r in _guarantee_rows() for m in ("sgr", "ltt")
           if r[1].startswith(f"{m}, n=400, continuous u") and "target 0.1" in r[1] and "c=0.6" in r[1]}
    delta = row["sgr"][2].removeprefix("<= ")
    cov = {m: re.search(r"cov ([\d.]+)/([\d.]+)", row[m][3]).groups() for m in row}
    text = _text("docs/referral_threshold.md")
    sentence = text[text.index("The price is coverage"):]
    sentence = sentence[:sentence.index("would be safe")]
    assert f"`delta = {delta}`" in sentence, sentence
    assert f"{round(float(cov['sgr'][0]) * 100)} % (SGR)" in sentence
    assert f"{round(float(cov['ltt'][0]) * 100)} % (LTT)" in sentence
    assert f"{round(float(cov['sgr'][1]) * 100)} %" in sentence


def test_referral_hard_cases_state_the_range_of_calibration_sizes():
    sizes = [int(re.search(r"n=(\d+)", r[1]).group(1)) for r in _guarantee_rows()]
    text = _text("docs/referral_threshold.md")
    assert f"With {min(sizes)} to {max(sizes)} calibration cases" in text


def test_newton_pass_count_matches_the_benchmark_table():
    bench = (ROOT / "benchmarks/README.md").read_text(encoding="utf-8")
    section = bench[bench.index("## Ending a per-class temperature fit"):]
    section = section[:section.index("\n## ", 1)]
    passes = [int(n) for n in re.findall(r"\| (\d+) pass(?:es)?, [\d.]+ s \| [\d.]+ % \|", section)]
    assert len(passes) >= 2
    claim = f"1 to {max(passes)} passes" if min(passes) == 1 else f"{min(passes)} to {max(passes)} passes"
    assert claim in _text("docs/calibration.md")
    assert f"Costs {claim.replace('passes', 'extra passes')}" in _text("CHANGELOG.md")


def test_review65_changelog_has_one_line_per_change():
    lines = [ln for ln in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").splitlines() if "(review 65)" in ln]
    for key in ("BodyPartExamined", "between-layer dropout", "no finite temperature minimises"):
        hits = [ln[:80] for ln in lines if key in ln]
        assert len(hits) == 1, (key, hits)
