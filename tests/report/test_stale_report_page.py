"""A report page of an earlier evaluation does not survive ``evaluate`` run again into the same folder.

Found by hostile testing: ``monai-unc report`` into the default ``EVAL/report``, then ``monai-unc evaluate`` again into
``EVAL`` with ``--budget 0.5``: ``EVAL/report/report.html`` still said "budget 20%" beside a ``summary.json`` of 0.5.
The page records the ``summary.json`` it rendered (``.report_source.json``); ``evaluate`` removes a page whose
evaluation changed (or failed) and warns, and leaves alone a page that still matches, a page of another evaluation
folder and a file that is not a page of ours.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig
from monai_unc.report.html import REPORT_SOURCE_RECORD, build_report, remove_stale_report
from monai_unc.workflows.evaluate import evaluate_command


def _evaluate(data, out, budget):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        evaluate_command(data["labels"], data["predictions"], out, EvaluationConfig(budget=budget), progress=False)
    return [str(w.message) for w in caught if "earlier evaluation" in str(w.message)]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("stale")
    return write_toy_cohort(root / "data", n_cases=4, shape=(10, 10, 10))


def _report(out):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return build_report(out, n_cases=1, viewer=False)


def test_evaluate_again_with_other_settings_removes_the_earlier_page(cohort, tmp_path):
    out = tmp_path / "eval"
    assert _evaluate(cohort, out, 0.25) == []
    page = _report(out)
    figures = sorted(p.name for p in (out / "report" / "figures").glob("*.png"))
    assert page.is_file() and figures and (out / "report" / REPORT_SOURCE_RECORD).is_file()
    (out / "report" / "figures" / "mine.png").write_bytes(b"\x89PNG")  # a user's own file there
    assert _evaluate(cohort, out, 0.25) == []  # the same settings: the same summary, the page still shows it
    assert page.is_file()
    said = _evaluate(cohort, out, 0.5)
    assert not page.exists(), "a page of the earlier evaluation (budget 25%) survived the evaluation at 50%"
    assert len(said) == 1 and str(page) in said[0]
    left = sorted(p.name for p in (out / "report" / "figures").glob("*.png"))
    assert left == ["mine.png"]
    assert not (out / "report" / REPORT_SOURCE_RECORD).exists()
    assert _report(out).is_file()  # a new page again


def test_a_failed_evaluation_removes_the_page(cohort, tmp_path):
    out = tmp_path / "eval"
    _evaluate(cohort, out, 0.25)
    page = _report(out)
    (out / "summary.json").unlink()  # what a failed run leaves: no summary the page could show
    assert remove_stale_report(out) == page and not page.exists()


def test_pages_not_made_from_this_folder_are_left_alone(cohort, tmp_path):
    out = tmp_path / "eval"
    _evaluate(cohort, out, 0.25)
    other = tmp_path / "other"
    shutil.copytree(out, other)
    page = _report(other)
    moved = out / "report"  # a page of the other evaluation folder placed in this one's report folder
    shutil.copytree(other / "report", moved)
    (out / "summary.json").write_text((out / "summary.json").read_text() + " ")
    assert remove_stale_report(out) is None and (moved / "report.html").is_file() and page.is_file()
    record = moved / REPORT_SOURCE_RECORD
    record.unlink()  # no record: a user's file or a page of an earlier release
    assert remove_stale_report(out) is None and (moved / "report.html").is_file()
    record.write_text(json.dumps(["not", "a", "record"]))
    assert remove_stale_report(out) is None and (moved / "report.html").is_file()
