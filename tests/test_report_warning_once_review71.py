"""A report says a warning of the evaluation's ``summary.json`` once (review 71).

Found by review 71: ``monai-unc report`` on an evaluation whose ``summary.json`` records an empty class name (written
by an earlier version) said the warning four times, six with ``--budget``: the command's checks, the page's reading
of the evaluation and the summary computed again each read the recorded options. ``run_report`` and
``build_report`` now say it the first time only (``_utils.each_warning_once``), at once, holding nothing back; and
the command line shows a warning the package holds for one call and says once (attributed to the first line outside
the package that called ``main``) as its one line.
"""

from __future__ import annotations

import json
import warnings

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.report.html import build_report

WARNING = "summary.json records an empty class name (class_names[1])"


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    """A toy evaluation whose ``summary.json`` records the class names ``["background", ""]`` (an earlier version's)."""
    root = tmp_path_factory.mktemp("blank_name")
    data = write_toy_cohort(root / "data", n_cases=4, shape=(12, 12, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], root / "eval", EvaluationConfig(budget=0.25))
    summary = json.loads((root / "eval" / "summary.json").read_text())
    summary["config"]["class_names"] = ["background", ""]
    (root / "eval" / "summary.json").write_text(json.dumps(summary))
    return root / "eval"


@pytest.mark.parametrize("budget", [[], ["--budget", "0.3"]])
def test_the_command_says_it_once_in_its_line(evaluation, tmp_path, capsys, budget):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["report", "-e", str(evaluation), "-o", str(tmp_path / "page"), "--cases", "0", "-q",
                         *budget]) == 0
    err = capsys.readouterr().err
    assert err.count(WARNING) == 1, err
    assert f"monai-unc report: warning: {WARNING}" in err
    assert not [str(w.message) for w in caught if WARNING in str(w.message)]


def test_build_report_says_it_once(evaluation, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_report(evaluation, tmp_path / "page", n_cases=0)
    said = [w for w in caught if WARNING in str(w.message)]
    assert [w.category for w in said] == [UserWarning]


def test_the_report_holds_no_warning_back(evaluation, tmp_path, monkeypatch):
    """Found by the review of the first fix, which held every warning of the call to its end: the summary computed
    again inside run_report (--budget) recorded none of the package's warnings (its list on the page lost them), the
    deprecation of build_report(budget=...) named a line of the package, and warnings came after the page."""
    import monai_unc.workflows.report as workflow
    from monai_unc._utils import warn_nan

    def resummarize(state, saved, budget, **options):  # records the warnings of its metrics, as summarize does
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warn_nan("referral_curve: every case referred")
        return {**saved, "warnings": [str(w.message) for w in caught]}

    got = {}
    monkeypatch.setattr(workflow, "resummarize", resummarize)
    monkeypatch.setattr(workflow, "write_report", lambda *args, summary=None, **kwargs: got.setdefault("s", summary))
    workflow.run_report(evaluation, tmp_path / "page", budget=0.3, cases=0)
    assert got["s"]["warnings"] == ["referral_curve: every case referred"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_report(evaluation, tmp_path / "old", budget=0.3, n_cases=0)
    assert [w.filename for w in caught if issubclass(w.category, DeprecationWarning)] == [__file__]


def test_the_command_line_shows_a_warning_at_its_entry_as_its_line(capsys, monkeypatch):
    shown = []  # what Python's showwarning is given (a warning the command does not make its line)
    monkeypatch.setattr(warnings, "showwarning", lambda message, category, filename, lineno, *rest: shown.append(
        (str(message), filename, lineno)))
    show = cli._one_line_warning("report", ("/somewhere/bin/monai-unc", 6))
    show(UserWarning("held and said once"), UserWarning, "/somewhere/bin/monai-unc", 6)
    assert capsys.readouterr().err == "monai-unc report: warning: held and said once\n" and not shown
    show(UserWarning("a user's own"), UserWarning, "/somewhere/bin/monai-unc", 7)  # another line: Python's
    assert capsys.readouterr().err == "" and shown == [("a user's own", "/somewhere/bin/monai-unc", 7)]
