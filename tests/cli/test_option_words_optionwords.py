"""A refused value is named by the option the user typed, found through the parser, not guessed from the message.

The command line used to rewrite every bare word of an error message that looked like one of the command's
destinations (``n_bins`` -> ``--n-bins``) with a regular expression: a word of a path, a file's field or an
explanation could be rewritten, and a parameter without an underscore (``labels``, ``output``) never was
(``evaluate -l missing`` said ``labels folder not found: missing``). Now a check marks its error with the parameter
it refuses (:func:`monai_unc._utils.parameter_error`) and the command line names that parameter's option.
"""

from __future__ import annotations

import argparse

import pytest

from monai_unc import cli
from monai_unc._utils import check_integer, check_text, parameter_error
from monai_unc.data.cohorts import write_toy_cohort


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("words"), n_cases=2, shape=(8, 8, 8))


def _evaluate(cohort, out, *extra: str, labels=None, predictions=None) -> list[str]:
    return ["evaluate", "-l", str(labels or cohort["labels"]), "-p", str(predictions or cohort["predictions"]),
            "-o", str(out), "-q", *extra]


def _error(capsys, command: str) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and ": warning:" not in ln]
    assert len(err) == 1 and err[0].startswith(f"monai-unc {command}: error: "), err
    return err[0][len(f"monai-unc {command}: error: "):]


@pytest.mark.parametrize("case, expected", [
    ("labels missing", "--labels folder not found: "),
    ("labels a file", "--labels folder "),
    ("predictions missing", "--predictions folder not found: "),
    ("predictions a file", "--predictions folder "),
    ("uncertainty missing", "--uncertainty folder not found: "),
    ("output inside labels", "--output folder "),
    ("shifts missing", "--shifts: shift table not found: "),
    ("shifts a folder", "--shifts: shift table "),
    ("n-bins huge", "--n-bins must be at most 4096"),
    ("num-classes 1", "--num-classes must be an integer >= 2, got 1"),
    ("conformal spec", "--conformal: 'abc' is not a spec"),
    ("conformal-delta nan", "--conformal-delta must be a number in (0, 1), got nan"),
])
def test_evaluate_names_the_option_of_a_refused_path_or_value(cohort, tmp_path, capsys, case, expected):
    out = tmp_path / "ev"
    missing, a_file = tmp_path / "missing", cohort["shifts"]
    argv = {
        "labels missing": _evaluate(cohort, out, labels=missing),
        "labels a file": _evaluate(cohort, out, labels=a_file),
        "predictions missing": _evaluate(cohort, out, predictions=missing),
        "predictions a file": _evaluate(cohort, out, predictions=a_file),
        "uncertainty missing": _evaluate(cohort, out, "--uncertainty", str(missing)),
        "output inside labels": _evaluate(cohort, cohort["labels"] / "out"),
        "shifts missing": _evaluate(cohort, out, "--shifts", str(missing)),
        "shifts a folder": _evaluate(cohort, out, "--shifts", str(cohort["labels"])),
        "n-bins huge": _evaluate(cohort, out, "--n-bins", "100000"),
        "num-classes 1": _evaluate(cohort, out, "--num-classes", "1"),
        "conformal spec": _evaluate(cohort, out, "--conformal", "abc"),
        "conformal-delta nan": _evaluate(cohort, out, "--conformal", "outer:fnr=0.1", "--conformal-delta", "nan"),
    }[case]
    before = sorted(p.name for p in cohort["labels"].iterdir())
    assert cli.main(argv) == 2
    text = _error(capsys, "evaluate")
    assert text.startswith(expected), text
    assert "Traceback" not in text and not out.exists()
    assert sorted(p.name for p in cohort["labels"].iterdir()) == before  # nothing written into an input folder
    if "is a file" in text or "is a folder" in text:
        assert ("is a file, not a folder" if "a file" in case else "is a folder, not a file") in text


def _parser_and_args(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser, _ = cli.build_parser()
    return parser, parser.parse_args(argv)


def test_only_a_marked_error_names_an_option():
    argv = ["evaluate", "-l", "L", "-p", "P", "-o", "O", "--n-bins", "5000"]
    parser, args = _parser_and_args(argv)
    text = "n_bins must be at most 4096 (16 * n_bins); field 'n_bins' of summary.json, config.n_bins, min_bin_count"
    marked = parameter_error(ValueError(text), "n_bins")
    assert cli._option_text(parser, args, argv, marked, text) == (
        "--n-bins must be at most 4096 (16 * n_bins); field 'n_bins' of summary.json, config.n_bins, min_bin_count")
    # an error that marks no parameter (a file's field, a recorded setting) keeps every word of its message
    unmarked = "the rule's n_bins (15) differs from min_bin_count: labels folder was another"
    assert cli._option_text(parser, args, argv, ValueError(unmarked), unmarked) == unmarked
    # a parameter that is no option of this command is left alone; one that the message does not begin with is
    # prefixed; a word that only begins with the parameter's name is not the parameter
    assert cli._option_text(parser, args, argv, parameter_error(ValueError("spatial x"), "spatial"),
                            "spatial x") == "spatial x"
    assert cli._option_text(parser, args, argv, parameter_error(FileNotFoundError("shift table not found: s"),
                                                                "shifts"), "shift table not found: s") == (
        "--shifts: shift table not found: s")
    assert cli._option_text(parser, args, argv, parameter_error(ValueError("labelset bad"), "labels"),
                            "labelset bad") == "--labels: labelset bad"
    assert cli._option_text(parser, args, argv, parameter_error(ValueError("--labels: x"), "labels"),
                            "--labels: x") == "--labels: x"  # a message that names the option already


def test_the_option_is_named_as_typed_and_found_in_sub_commands():
    argv = ["evaluate", "-l", "L", "-p", "P", "-o", "O"]
    parser, args = _parser_and_args(argv)
    e = parameter_error(FileNotFoundError("labels folder not found: L"), "labels")
    assert cli._option_text(parser, args, argv, e, str(e)) == "--labels folder not found: L"  # -l: the long name
    argv = ["monitor", "status", "--db", "x.db", "--alpha", "0.1"]
    parser, args = _parser_and_args(argv)
    e = parameter_error(ValueError("alpha must be in (0, 1), got 0.1"), "alpha")
    assert cli._option_text(parser, args, argv, e, str(e)) == "--alpha must be in (0, 1), got 0.1"


def test_the_checks_mark_their_parameter():
    with pytest.raises(ValueError, match="^n_bins must be a positive integer") as e:
        check_integer(0, "n_bins")
    assert e.value.parameter == "n_bins"
    with pytest.raises(ValueError, match=r"^class_names\[1\] must be text") as e:
        check_text("a\nb", "class_names[1]")
    assert e.value.parameter == "class_names"
    error = ValueError("x")
    assert parameter_error(error, "x") is error and str(error) == "x"


@pytest.mark.parametrize("which, expected", [("predictions", "--predictions folder not found: "),
                                             ("series", "--series folder not found: "),
                                             ("uid-root", "--uid-root")])
def test_dicom_export_names_the_option_of_a_refused_value(cohort, tmp_path, capsys, which, expected):
    pytest.importorskip("pydicom")
    missing = str(tmp_path / "missing")
    argv = ["dicom-export", "-p", missing if which == "predictions" else str(cohort["predictions"]),
            "-s", missing if which == "series" else str(cohort["images"]), "-o", str(tmp_path / "out")]
    if which == "uid-root":
        argv += ["--uid-root", "not a uid"]
    assert cli.main(argv) == 2
    assert _error(capsys, "dicom-export").startswith(expected)
    assert not (tmp_path / "out").exists()
