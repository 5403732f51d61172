"""Lines printed on stderr while a cohort's progress bar is drawn there start a line of their own.

Found by hostile testing: ``monai-unc infer`` printed a case's failure line right after the bar's text on the same
terminal line (``infer:   0%|  | 0/4 [..., bad]monai-unc infer: case 'bad' failed: ...``), and so did a case's
warning line; they now go through tqdm, which clears the bar, prints the line and draws the bar again.
"""

import re
import warnings

from monai_unc import cli
from monai_unc.engine import CaseFailure, get_dist_context, print_failure, process_cases


def _segments(err: str) -> list[str]:
    """The stderr text as a terminal shows its lines: each carriage return or newline starts a segment."""
    return [s for s in re.split(r"[\r\n]", err) if s.strip()]


def test_a_failure_line_is_not_glued_to_the_progress_bar(capsys):
    ctx = get_dist_context("cpu")

    def process(case_id):
        if case_id == "bad":
            raise ValueError("not a 3D image")
        return 1

    failures = []
    done = process_cases(["bad", "good"], process, key=str, failures=failures, progress=True, desc="infer",
                         on_failure=lambda cid, e: print_failure(CaseFailure(cid, 0, str(e)), ctx, "monai-unc infer"))
    assert [cid for cid, _ in done] == ["good"]
    err = capsys.readouterr().err
    assert "infer:" in err  # the bar was drawn
    lines = [s for s in _segments(err) if "failed" in s]
    assert lines == ["monai-unc infer: case 'bad' failed: not a 3D image"], err


def test_a_warning_of_a_case_is_not_glued_to_the_progress_bar(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = cli._one_line_warning("infer")  # restored by catch_warnings
        process_cases(["c01"], _warn_from_package, key=str, progress=True, desc="infer")
    err = capsys.readouterr().err
    lines = [s for s in _segments(err) if "warning" in s]
    assert lines == ["monai-unc infer: warning: case 'c01' was predicted with other settings"], err


def _warn_from_package(case_id):
    """A warning attributed to a module of the package (as a case's own warnings are): the CLI shows it in one line."""
    from monai_unc._utils import warn_nan

    warn_nan(f"case {case_id!r} was predicted with other settings", stacklevel=1)
    return 1
