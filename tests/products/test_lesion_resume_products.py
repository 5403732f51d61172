"""A rerun with another ``--lesion-failure-dice`` summarizes the saved lesion states again, it does not evaluate every
case again (``LesionMetrics.case_options``).

Found by hostile testing: ``failure_dice`` (read by the summary alone) was part of each case's resume fingerprint, so
changing it recomputed every case's lesion matching and HD95; the block of the rerun equals a fresh run's.
"""

from __future__ import annotations

import json
import warnings

import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.products import LesionMetrics

CALLS: list[str] = []


@pytest.fixture
def spy(monkeypatch):
    original = LesionMetrics.case_state

    def counting(self, case, tasks, config):
        CALLS.append(case.case_id)
        return original(self, case, tasks, config)

    monkeypatch.setattr(LesionMetrics, "case_state", counting)
    CALLS.clear()
    return CALLS


def _evaluate(cohort, out, *extra) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(out),
                     "--no-spatial", "--lesions", "--lesion-min-volume", "0", "-q", *extra]) == 0


def test_another_failure_dice_reuses_the_cases_and_equals_a_fresh_run(tmp_path, spy):
    cohort = write_toy_cohort(tmp_path / "cohort", n_cases=3, shape=(10, 10, 10))
    out, fresh = tmp_path / "ev", tmp_path / "fresh"
    _evaluate(cohort, out)
    assert len(spy) == 3
    spy.clear()
    _evaluate(cohort, out, "--lesion-failure-dice", "0.9")
    assert spy == []  # summarized again from the saved states
    _evaluate(cohort, fresh, "--lesion-failure-dice", "0.9")
    assert len(spy) == 3
    block = json.loads((out / "summary.json").read_text())["lesions"]
    assert block["options"]["failure_dice"] == 0.9
    assert block == json.loads((fresh / "summary.json").read_text())["lesions"]
    spy.clear()
    _evaluate(cohort, out, "--lesion-iou", "0.5")  # an option of the cases' states: every case again
    assert len(spy) == 3
