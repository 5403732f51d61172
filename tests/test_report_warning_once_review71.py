"""A report says a warning of the evaluation's ``summary.json`` once (review 71).

Found by review 71: ``monai-unc report`` on an evaluation whose ``summary.json`` records an empty class name (written
by an earlier version) said the warning four times, six with ``--budget``: the command's checks, the page's reading
of the evaluation and the summary computed again each read the recorded options. ``run_report`` and
``build_report`` now hold the warnings of their call and say each once (``_utils.once_per_call``), and the command
line shows such a warning, attributed to the line that called ``main``, as its one line.
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


def test_build_report_says_it_once_at_the_users_line(evaluation, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_report(evaluation, tmp_path / "page", n_cases=0)
    said = [w for w in caught if WARNING in str(w.message)]
    assert [(w.category, w.filename) for w in said] == [(UserWarning, __file__)]


def test_the_command_line_shows_a_warning_at_its_entry_as_its_line(capsys, monkeypatch):
    shown = []  # what Python's showwarning is given (a warning the command does not make its line)
    monkeypatch.setattr(warnings, "showwarning", lambda message, category, filename, lineno, *rest: shown.append(
        (str(message), filename, lineno)))
    show = cli._one_line_warning("report", ("/somewhere/bin/monai-unc", 6))
    show(UserWarning("held and said once"), UserWarning, "/somewhere/bin/monai-unc", 6)
    assert capsys.readouterr().err == "monai-unc report: warning: held and said once\n" and not shown
    show(UserWarning("a user's own"), UserWarning, "/somewhere/bin/monai-unc", 7)  # another line: Python's
    assert capsys.readouterr().err == "" and shown == [("a user's own", "/somewhere/bin/monai-unc", 7)]
