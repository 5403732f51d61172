"""Review 61, the newcomer's path through ``monai-unc``: what a first user mistypes or mixes up gets one line that
says what to do instead (exit status 2)."""

from __future__ import annotations

import pytest

from monai_unc import cli


def _refused(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The one stderr line of a command refused with exit status 2 (by argparse or by the command)."""
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert err.count("\n") == 1 and err.startswith("monai-unc"), err
    return err


# ------------------------------------------------------------------------------- 1. "did you mean ...?" suggestions
@pytest.mark.parametrize("argv, suggestion", [
    (["infer", "-i", "x", "-o", "y", "--model", "exampl"], "did you mean 'example'?"),
    (["evaluate", "-l", "a", "-p", "b", "-o", "c", "--layout", "nnUnet"], "did you mean 'nnunet'?"),
    (["evaluate", "-l", "a", "-p", "b", "-o", "c", "--measures", "mutual_informaton"],
     "did you mean 'mutual_information'?"),
    (["evaluate", "-l", "a", "-p", "b", "-o", "c", "--risk", "1-dise"], "did you mean '1-dice'?"),
    (["evalute", "-l", "a"], "did you mean 'evaluate'?"),
    (["monitor", "stauts"], "did you mean 'status'?"),
    (["infer", "-i", "x", "-o", "y", "--activation", "sigmod"], "did you mean 'sigmoid'?"),
])
def test_a_mistyped_choice_is_answered_with_the_closest_one(argv, suggestion, capsys):
    err = _refused(argv, capsys)
    assert "invalid choice" in err and suggestion in err


def test_a_choice_far_from_every_other_gets_no_suggestion(capsys):
    err = _refused(["evaluate", "-l", "a", "-p", "b", "-o", "c", "--layout", "zzzz"], capsys)
    assert "invalid choice" in err and "did you mean" not in err


def test_a_mistyped_method_source_is_answered_with_the_closest_method(tmp_path, capsys):
    err = _refused(["demo", "--method", "mcdropot+tt", "--output", str(tmp_path / "d")], capsys)
    assert "--method must be '+'-joined names" in err and "did you mean 'mcdropout+tta'?" in err
    assert not (tmp_path / "d").exists()


def test_a_mistyped_measure_of_the_python_api_is_answered(capsys):
    from monai_unc.workflows.prepare import infer_measures

    with pytest.raises(ValueError, match=r"unknown measure\(s\) 'varaince'.*did you mean 'variance'\?"):
        infer_measures("mcdropout", ["varaince"])


def test_a_mistyped_nnunet_measure_is_answered(tmp_path, capsys):
    pytest.importorskip("nnunetv2")
    (tmp_path / "in").mkdir()
    err = _refused(["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "o"), "-m", str(tmp_path),
                    "-device", "cpu", "--measures", "one_minus_max_pro"], capsys)
    assert "did you mean 'one_minus_max_prob'?" in err
