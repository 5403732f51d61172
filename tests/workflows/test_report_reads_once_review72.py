"""``monai-unc report`` reads the evaluation once (review 72).

Found by review 72: :func:`~monai_unc.workflows.report.run_report` read and checked the evaluation folder four times
(its check, the folders of the case files, the summary computed again with ``--budget``, the page), each a read of
``rows.json``, ``histogram.npz`` and ``summary.json``; the checks and the page could see different contents when an
``evaluate`` resumed into the folder in between. It now reads it once: the checks, the case folders, the summary
computed again and the page all use that one reading.
"""

from __future__ import annotations

import json
import warnings

import pytest

import monai_unc.report.html as html
import monai_unc.workflows.report as workflow
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, load_evaluation, run_evaluate
from monai_unc.report.html import REPORT_SOURCE_RECORD, build_report


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    root = tmp_path_factory.mktemp("reads_once")
    data = write_toy_cohort(root / "data", n_cases=4, shape=(12, 12, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], root / "eval", EvaluationConfig(budget=0.25))
    return root / "eval"


@pytest.fixture
def reads(monkeypatch):
    """The folders ``load_evaluation`` is called on, wherever the report's modules look it up."""
    calls = []

    def counting(folder):
        calls.append(folder)
        return load_evaluation(folder)

    for module in (workflow, html):
        monkeypatch.setattr(module, "load_evaluation", counting, raising=False)  # where they look it up
    return calls


@pytest.mark.parametrize("options", [{}, {"budget": 0.5}], ids=["recorded", "budget"])
def test_run_report_reads_the_evaluation_once(evaluation, tmp_path, reads, options):
    page = workflow.run_report(evaluation, tmp_path / "page", cases=0, **options)
    assert len(reads) == 1, reads  # 4 in earlier versions
    text = page.read_text()
    assert ("50%" in text) == bool(options), "the page shows the summary computed again"
    record = json.loads((tmp_path / "page" / REPORT_SOURCE_RECORD).read_text())
    assert record["summary_sha256"] == html._summary_digest(evaluation)


def test_the_page_shows_what_the_checks_read(evaluation, tmp_path, monkeypatch):
    """The one reading is the page's: a summary changed on disk after the checks is not what the page shows."""
    loaded = workflow._checked_evaluation(evaluation)  # the checks' reading
    changed = {**loaded.summary, "triage": {**loaded.summary["triage"], "budget": 0.75}}
    monkeypatch.setattr(workflow, "_checked_evaluation", lambda folder: loaded)
    monkeypatch.setattr(html, "load_evaluation", lambda folder: (loaded.state, changed))  # a second read would see it
    page = workflow.run_report(evaluation, tmp_path / "page", cases=0)
    assert "75%" not in page.read_text()


def test_build_report_still_reads_it_itself(evaluation, tmp_path, reads):
    build_report(evaluation, tmp_path / "page", n_cases=0)
    assert len(reads) == 1
