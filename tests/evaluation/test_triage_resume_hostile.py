"""Hostile rerun checks of ``monai-unc triage`` (review D): a run stopped while it writes its cohort files leaves
none of an earlier run's beside its own (``triage.json`` and the page of an earlier run would pass for this one's)."""

from __future__ import annotations

import csv
import json
import warnings

import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort


def _killed(*args, **kwargs):
    raise KeyboardInterrupt


def _triaged(tmp_path, figures: int = 0):
    """A toy cohort evaluated (with a referral rule) and triaged once: ``(the triage command line, its folder)``.

    The page shows the overlays of ``figures`` cases (``--cases``): drawing one takes ~0.5 s, and only the test of
    the figures an interrupted rerun leaves needs one."""
    c = write_toy_cohort(tmp_path / "c", n_cases=3, shape=(8, 8, 8))
    ev, out = tmp_path / "ev", tmp_path / "tri"
    argv = ["triage", "-p", str(c["predictions"]), "--rule", str(ev / "referral_rule.json"), "-o", str(out), "-q",
            "--cases", str(figures)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(c["labels"]), "-p", str(c["predictions"]), "-o", str(ev), "-q",
                     "--no-spatial", "--target-risk", "0.5"]) == 0
        assert main(argv) == 0
    return argv, out


@pytest.mark.slow
def test_a_rerun_killed_while_writing_leaves_no_earlier_triage_file(tmp_path, monkeypatch):
    from monai_unc.evaluation.triage import runner

    argv, out = _triaged(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert (out / "triage.json").is_file() and (out / "triage.html").is_file()
        monkeypatch.setattr(runner, "write_triage_summary", _killed)  # stopped after triage.csv
        assert main(argv) == 130
    assert (out / "triage.csv").is_file()
    assert not (out / "triage.json").exists() and not (out / "triage.html").exists()


@pytest.mark.slow
def test_a_rerun_interrupted_before_writing_leaves_no_earlier_triage_file(tmp_path, monkeypatch):
    """Ctrl-C (or a kill) while a rerun triages its cases: the earlier run's decisions are gone, not kept as if they
    were this run's (a rerun with another rule or more cases kept the old triage.csv, triage.json and page)."""
    from monai_unc.evaluation.triage import runner

    argv, out = _triaged(tmp_path, figures=1)  # one figure: the rerun must remove it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert {p.name for p in out.iterdir()} >= {"triage.csv", "triage.json", "triage.html"}
        assert list((out / "figures").glob("*.png"))
        d = write_toy_cohort(tmp_path / "d", n_cases=4, shape=(8, 8, 8), seed=3)  # the next day's cases
        argv[2] = str(d["predictions"])
        monkeypatch.setattr(runner, "triage_case", _killed)  # stopped on the first case of the rerun
        assert main(argv) == 130
        for name in ("triage.csv", "triage.json", "triage.html"):
            assert not (out / name).exists(), name
        assert not list((out / "figures").glob("*.png"))
        monkeypatch.undo()
        assert main(argv) == 0  # run again: the outputs are back, of the new cases
        assert json.loads((out / "triage.json").read_text())["n_cases"] == 4
        assert (out / "triage.html").is_file()


@pytest.mark.slow
def test_an_edited_state_row_is_computed_again(tmp_path):
    """A rerun reuses a case's saved row only as it was computed: a row edited by hand in ``state/cases/`` (a score
    lowered, found by hostile review: the case was then accepted on the edited score) is computed again."""
    argv, out = _triaged(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        first = {r["case"]: r["score"] for r in csv.DictReader(open(out / "triage.csv", newline=""))}
        column = json.loads((tmp_path / "ev" / "referral_rule.json").read_text())["score"]["column"]
        state = out / "state" / "cases" / "toy000.json"
        doc = json.loads(state.read_text())
        assert doc["row"][column] == float(first["toy000"])
        for edit in ({column: 0.0001}, {column: "abc"}, {"case": "toy001"}):
            state.write_text(json.dumps({**doc, "row": {**doc["row"], **edit}}))
            assert main(argv) == 0, edit  # was: the edited score used (0.0001), or exit 2
            again = {r["case"]: r["score"] for r in csv.DictReader(open(out / "triage.csv", newline=""))}
            assert again == first, edit
