"""A triage rerun reuses a case's saved row only as it was computed: a row edited by hand in ``state/cases/`` (a
score lowered, found by hostile review: the case was then accepted on the edited score) is computed again."""

from __future__ import annotations

import csv
import json
import warnings

import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort


@pytest.mark.slow
def test_an_edited_state_row_is_computed_again(tmp_path):
    c = write_toy_cohort(tmp_path / "c", n_cases=3, shape=(8, 8, 8))
    ev, out = tmp_path / "ev", tmp_path / "tri"
    argv = ["triage", "-p", str(c["predictions"]), "--rule", str(ev / "referral_rule.json"), "-o", str(out), "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(c["labels"]), "-p", str(c["predictions"]), "-o", str(ev), "-q",
                     "--no-spatial", "--target-risk", "0.5"]) == 0
        assert main(argv) == 0
        first = {r["case"]: r["score"] for r in csv.DictReader(open(out / "triage.csv", newline=""))}
        column = json.loads((ev / "referral_rule.json").read_text())["score"]["column"]
        state = out / "state" / "cases" / "toy000.json"
        doc = json.loads(state.read_text())
        assert doc["row"][column] == float(first["toy000"])
        for edit in ({column: 0.0001}, {column: "abc"}, {"case": "toy001"}):
            state.write_text(json.dumps({**doc, "row": {**doc["row"], **edit}}))
            assert main(argv) == 0, edit  # was: the edited score used (0.0001), or exit 2
            again = {r["case"]: r["score"] for r in csv.DictReader(open(out / "triage.csv", newline=""))}
            assert again == first, edit
