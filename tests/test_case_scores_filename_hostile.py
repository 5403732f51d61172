"""``CaseScoresHandler``'s ``filename`` is refused where it would do nothing or write outside ``output_dir``
(hostile review of the API's promises: a filename without output_dir wrote no CSV, without a word)."""

from pathlib import Path

import pytest

from monai_unc.engines import CaseScoresHandler


def test_filename_without_output_dir_is_refused():
    with pytest.raises(ValueError, match="filename='my_scores.csv' needs output_dir"):
        CaseScoresHandler("pe_mean", filename="my_scores.csv")


@pytest.mark.parametrize("name", ["/tmp/elsewhere.csv", "../up.csv", "sub/../../up.csv", "", 3])
def test_filename_outside_output_dir_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match="filename must be a relative file name inside output_dir"):
        CaseScoresHandler("pe_mean", output_dir=tmp_path, filename=name)


def test_accepted_names(tmp_path):
    assert CaseScoresHandler("pe_mean").output_dir is None  # the default: no file, as documented
    h = CaseScoresHandler("pe_mean", output_dir=tmp_path, filename="sub/scores.csv")
    assert h.output_dir / h.filename == tmp_path / "sub" / "scores.csv"
    assert Path(CaseScoresHandler("pe_mean", output_dir=tmp_path).filename) == Path("case_scores.csv")


def test_a_path_object_filename_inside_output_dir_is_accepted(tmp_path):
    """Path("scores.csv") was accepted before the filename check and refused by it, as if it lay outside output_dir
    (hostile review 33); an absolute or escaping Path is still refused."""
    handler = CaseScoresHandler("pe_mean", output_dir=tmp_path, filename=Path("sub") / "scores.csv")
    assert handler.filename == str(Path("sub") / "scores.csv")
    for bad in (tmp_path / "x.csv", Path("..") / "x.csv"):
        with pytest.raises(ValueError, match="filename must be a relative file name inside output_dir"):
            CaseScoresHandler("pe_mean", output_dir=tmp_path, filename=bad)


def test_a_group_key_that_is_not_text_is_refused_before_the_run():
    """The group key is a CSV column: a non-string one was accepted and the table refused at the end of the run
    (``write_csv`` refuses non-text column names; found by the review of the session's change)."""
    with pytest.raises(TypeError, match="group_key must be a string"):
        CaseScoresHandler("pe_mean", group_key=1)
