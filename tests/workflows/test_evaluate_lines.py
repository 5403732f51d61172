"""What ``monai-unc evaluate`` prints about the run's warnings (issue 40 item 8): the first few, not only a count."""

from __future__ import annotations

from monai_unc.workflows.evaluate import SHOWN_WARNINGS, warning_lines
from monai_unc.workflows.session import quiet_lines


def test_no_warnings_no_lines():
    assert warning_lines([]) == []


def test_the_first_warnings_are_shown_then_counted():
    msgs = [f"case_{i}: the label is empty\n(details)" for i in range(5)]
    lines = warning_lines(msgs)
    assert lines[:SHOWN_WARNINGS] == [f"warning: case_{i}: the label is empty" for i in range(SHOWN_WARNINGS)]
    assert lines[-1] == f"warning: {5 - SHOWN_WARNINGS} more warning(s), see summary.json"
    assert len(lines) == SHOWN_WARNINGS + 1


def test_few_warnings_are_all_shown():
    assert warning_lines(["a", "b"]) == ["warning: a", "warning: b"]


def test_quiet_keeps_the_count_of_the_warnings_not_shown():
    """Found by hostile review (docs): ``evaluate --quiet`` keeps the warning lines alone and dropped the count line
    ("and 1 more warning(s)"), so a quiet run printed 3 of 4 warnings without a word about the fourth."""
    msgs = [f"case_{i}: BUC is undefined" for i in range(SHOWN_WARNINGS + 1)]
    quiet = quiet_lines(warning_lines(msgs))
    assert len(quiet) == SHOWN_WARNINGS + 1
    assert quiet[-1] == "warning: 1 more warning(s), see summary.json"
