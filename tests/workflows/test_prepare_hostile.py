"""Hostile input to the shared argument readers of the workflows (``monai_unc.workflows.prepare``)."""

from __future__ import annotations

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.workflows.prepare import read_case_list


@pytest.mark.parametrize("text", ["a\nb\na\n", "case,x\na,1\nb,2\n a ,3\n", "# ids\na\na\nb\nb\n"])
def test_a_case_listed_twice_is_refused_naming_the_file_and_the_ids(tmp_path, text):
    """A duplicated id (a typo for another case) was accepted: the run fitted on fewer cases than the file lists
    and recorded the file's list with the id twice."""
    f = tmp_path / "cases.txt"
    f.write_text(text)
    with pytest.raises(ValueError, match=r"--calibration-cases: .*cases\.txt lists \d case\(s\) more than once: 'a'"):
        read_case_list(f)
    f.write_text("a\nb\nc\n")
    assert read_case_list(f) == ["a", "b", "c"]


def test_evaluate_refuses_a_calibration_case_list_with_a_duplicate_in_one_line(tmp_path, capsys):
    paths = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    cases = tmp_path / "cases.txt"
    cases.write_text("toy000\ntoy001\ntoy000\n")
    argv = ["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "-o", str(tmp_path / "ev"),
            "--target-risk", "0.4", "--calibration-cases", str(cases), "-q"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "more than once: 'toy000'" in err[0] and str(cases) in err[0], err
    assert not (tmp_path / "ev").exists()


def test_error_text_of_a_two_path_error_names_the_destination():
    """Found by hostile testing: ``report`` copying its viewer scripts onto a full disk printed ``No space left on
    device: .../monai_unc/report/assets/niivue.umd.js``, the source of the copy inside the package (shutil puts the
    destination in ``filename2``)."""
    import errno
    import os

    from monai_unc.workflows.prepare import error_text

    e = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/pkg/assets/niivue.umd.js", None, "/out/assets/niivue.umd.js")
    assert error_text(e) == "No space left on device: /out/assets/niivue.umd.js"
    assert error_text(FileNotFoundError(errno.ENOENT, "No such file or directory", "/in/x")) == \
        "No such file or directory: /in/x"
