"""An empty path given to an option is refused while parsing, naming the option.

Found by hostile testing of every option: ``evaluate -o ''`` (an unset shell variable in ``-o "$OUT"``) wrote
``metrics.csv``, ``summary.json`` and ``state/`` into the current directory with exit status 0, and so did
``report -o ''`` and ``triage -o ''``; ``evaluate --labels ''`` said ``FileNotFoundError: [Errno 2] No such file or
directory: ''`` and ``--images ''`` looked for images in the current directory.
"""

from __future__ import annotations

import argparse

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort


def _path_options() -> list[tuple[list[str], argparse.Action, list[str]]]:
    """(command words, a path option, the other required options with a value) of every command."""
    parser, _ = cli.build_parser()
    found = []

    def walk(p: argparse.ArgumentParser, words: list[str]) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*words, name])
            elif getattr(action.type, "__name__", "") == "_path":
                required = [x for a in p._actions if a is not action and a.required and a.option_strings
                            for x in (a.option_strings[0], "x")]
                found.append((words, action, required))

    walk(parser, [])
    return found


PATH_OPTIONS = _path_options()


def test_every_command_with_path_options_is_covered():
    commands = {" ".join(words) for words, _, _ in PATH_OPTIONS}
    assert {"infer", "evaluate", "report", "calibrate", "demo", "triage", "dicom-export", "monitor record",
            "monitor label", "monitor status", "monitor report", "keys"} <= commands, commands
    assert {a.dest for w, a, _ in PATH_OPTIONS if w == ["evaluate"]} >= {"labels", "predictions", "output", "images",
                                                                          "shifts", "uncertainty"}


@pytest.mark.parametrize("words, action, required", PATH_OPTIONS,
                         ids=[f"{' '.join(w)} {a.option_strings[-1] if a.option_strings else a.dest}"
                              for w, a, _ in PATH_OPTIONS])
def test_an_empty_path_is_refused_naming_the_option(tmp_path, monkeypatch, capsys, words, action, required):
    monkeypatch.chdir(tmp_path)
    positional = [] if action.option_strings else [""]
    others = ["x"] if words == ["monitor", "record"] and action.option_strings else []  # record's TRIAGE folder
    argv = [*words, *others, *positional, *required, *([action.option_strings[0], ""] if action.option_strings else [])]
    if words == ["infer"] or words == ["calibrate"]:
        argv += ["--model", "example"]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"monai-unc {' '.join(words)}: error: argument "), err
    assert "expected a path, got an empty one ('')" in err[0], err
    name = "/".join(action.option_strings) if action.option_strings else (action.metavar or action.dest)
    assert name in err[0], err
    assert list(tmp_path.iterdir()) == []  # nothing written into the current directory


def test_evaluate_into_an_empty_output_writes_nothing_into_the_current_directory(tmp_path, monkeypatch, capsys):
    cohort = write_toy_cohort(tmp_path / "toy", n_cases=2, shape=(8, 8, 8))
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    with pytest.raises(SystemExit) as e:  # was: exit status 0, metrics.csv and summary.json in the current directory
        cli.main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", "", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [
        "monai-unc evaluate: error: argument --output/-o: expected a path, got an empty one ('') (see monai-unc "
        "evaluate --help)"], err
    assert list(here.iterdir()) == []
