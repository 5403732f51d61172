"""A single-valued option given twice is refused, naming it (review 61).

``monai-unc evaluate -o a -o b`` or ``infer --samples 2 --samples 3`` silently kept the last value (argparse); every
command's single-valued option now refuses a second occurrence in any spelling (the same option twice, a short and a
long alias, ``--opt=value``, ``-ovalue``, an abbreviation) with one line and exit status 2. List, ``append`` and
``count`` options and flags are parsed as before: a flag given twice says the same thing twice.
"""

from __future__ import annotations

import argparse

import pytest

from monai_unc import cli

EVALUATE = ["evaluate", "-l", "labels", "-p", "pred"]
INFER = ["infer", "-i", "imgs", "--model", "example"]


@pytest.mark.parametrize("argv, option", [
    ([*EVALUATE, "-o", "a", "-o", "b"], "--output/-o"),  # the same option twice
    ([*EVALUATE, "--output", "a", "--output", "b"], "--output/-o"),
    ([*EVALUATE, "-o", "a", "--output", "b"], "--output/-o"),  # a short and a long alias of one option
    ([*EVALUATE, "--output", "a", "-ob"], "--output/-o"),  # -ovalue
    ([*EVALUATE, "--output=a", "--output", "b"], "--output/-o"),  # --opt=value
    ([*EVALUATE, "-o", "a", "--outp", "b"], "--output/-o"),  # an abbreviation
    ([*EVALUATE, "-o", "a", "--budget", "0.1", "--budget=0.1"], "--budget"),  # the same value twice too
    ([*INFER, "-o", "a", "--samples", "2", "--samples", "3"], "--samples"),
    (["report", "--evaluation", "ev", "--evaluation", "ev2"], "--evaluation/-e"),
    (["monitor", "status", "--db", "a.db", "--db", "b.db"], "--db"),  # a sub-sub-command's option
])
def test_a_single_valued_option_given_twice_is_one_line_naming_it(argv, option, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"monai-unc {' '.join(argv[:2]) if argv[0] == 'monitor' else argv[0]}: error: "
                          f"argument {option}: given more than once")


def test_the_error_names_the_two_spellings_given(capsys):
    with pytest.raises(SystemExit):
        cli.main([*EVALUATE, "-o", "a", "--output", "b"])
    assert "(as -o and as --output): give it once" in capsys.readouterr().err


def _parse(argv: list[str]):
    parser, _ = cli.build_parser(argv[0])
    return parser.parse_args(argv)


def test_an_append_option_given_twice_keeps_both():
    args = _parse([*INFER, "-o", "a", "--allow-code-target", "mypkg.", "--allow-code-target", "other."])
    assert args.allow_code_target == ["mypkg.", "other."]


def test_a_list_option_given_twice_is_as_argparse_has_it():
    assert _parse([*INFER, "-o", "a", "--roi", "64", "--roi", "32", "32", "32"]).roi == [32, 32, 32]


@pytest.mark.parametrize("flags", [["-q", "-q"], ["--quiet", "-q"], ["--quiet", "--quiet"]])
def test_a_flag_given_twice_is_accepted(flags):
    assert _parse([*EVALUATE, "-o", "a", *flags]).quiet is True


def test_a_parser_parses_again_with_its_options_given_once():
    """The options given are counted per parse: a second parse with the same parser is not refused."""
    parser, _ = cli.build_parser("infer")
    for samples in ("2", "3"):
        assert parser.parse_args([*INFER, "-o", "a", "--samples", samples]).samples == int(samples)


def test_every_single_valued_option_of_every_command_refuses_a_repeat(capsys):
    """No command is left out: each single-valued option of each sub-parser, given twice, is refused."""
    parser, _ = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    checked = 0
    for name, sub in commands.items():
        for action in sub._actions:
            if not cli._single_valued(action) or action.choices is not None or action.type is not None:
                continue
            option = action.option_strings[-1]
            with pytest.raises(SystemExit) as e:
                sub.parse_args([option, "x", option, "y"])
            assert e.value.code == 2
            err = capsys.readouterr().err
            assert f"monai-unc {name}: error: argument " in err and "given more than once" in err, (name, option, err)
            checked += 1
    assert checked > 20
