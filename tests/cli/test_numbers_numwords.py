"""The command line's numbers: plain decimal syntax, integers bounded where numpy and torch take them, and refusals
in one line naming the option.

Found by a probe: ``evaluate --min-bin-count 99999999999999999999`` failed every case with ``OverflowError`` (exit
1); Python-only spellings were read as numbers (``--budget 0_1`` as 1.0, ``--n-bins ' 5'`` as 5, ``-step_size 0_5``
as 5.0, ``-f 1_0`` as fold 10, ``--conformal outer:fnr=0_1`` as 1.0); ``nnunet-predict --seed -1`` named the
predictor's parameter (``seed must be ...``), ``--num_samples 10**20`` passed every check; ``keys --show missing``
named no option; the ``--seg-label-values`` / ``--num-classes`` conflict named Python parameters; and
``--allow-unsigned`` printed its notice before the argument checks, so that a refused call printed two lines.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.keys import MAX_OPTION_INT, float_option, int_option, option_number, sample_batch_size_value

HUGE = "99999999999999999999"  # 10**20 - 1: beyond int64
NNUNET = pytest.mark.skipif(importlib.util.find_spec("nnunetv2") is None, reason="needs the nnunet extra")

_EVALUATE = ["evaluate", "-l", "labels", "-p", "pred", "-o", "out"]
_INFER = ["infer", "-i", "images", "-o", "out", "--model", "example"]
_CALIBRATE = ["calibrate", "-i", "images", "-l", "labels", "-o", "c.pt", "--model", "example"]
_PREDICT = ["nnunet-predict", "-i", "in", "-o", "out", "-m", "model"]


@pytest.mark.parametrize("argv, message", [
    # integers that reach numpy / torch: at most an int32
    ([*_EVALUATE, "--min-bin-count", HUGE],
     f"argument --min-bin-count: expected an integer of at most {MAX_OPTION_INT}"),
    ([*_EVALUATE, "--patch-size", str(2**31)], "argument --patch-size: expected a positive integer of at most"),
    ([*_EVALUATE, "--seg-label-values", f"1,{HUGE}"], "argument --seg-label-values: expected label values of at most"),
    ([*_EVALUATE, "--lesions", "--lesion-dilation", HUGE],
     "argument --lesion-dilation: expected an integer of at most"),
    ([*_EVALUATE, "--conformal", "outer:fnr=0.1", "--conformal-strata", HUGE],
     "argument --conformal-strata: expected an integer of at most"),
    ([*_INFER, "--threads", HUGE], "argument --threads: expected a positive integer of at most"),
    ([*_INFER, "--sample-batch-size", HUGE], "argument --sample-batch-size: expected 'auto' or a positive integer of"),
    ([*_CALIBRATE, "--max-steps", HUGE], "argument --max-steps: expected a positive integer of at most"),
    (["report", "-e", "ev", "--cases", HUGE], "argument --cases: expected a non-negative integer of at most"),
    (["triage", "-p", "pred", "-r", "rule.json", "-o", "out", "--cases", "-1"],
     "argument --cases: expected a non-negative integer, got -1"),
    # Python-only spellings of numbers
    ([*_EVALUATE, "--n-bins", "1_000"], "argument --n-bins: expected a positive integer, got '1_000'"),
    ([*_EVALUATE, "--seg-label-values", "1,2_0"], "argument --seg-label-values: expected distinct non-negative"),
    ([*_EVALUATE, "--n-bins", " 5"], "argument --n-bins: expected a positive integer, got ' 5'"),
    ([*_EVALUATE, "--n-bins", "0x10"], "argument --n-bins: expected a positive integer, got '0x10'"),
    ([*_EVALUATE, "--n-bins", "\u0661\u0662"], "argument --n-bins: expected a positive integer"),
    ([*_EVALUATE, "--n-bins", "9" * 5000], "(5000 characters)"),
    ([*_EVALUATE, "--budget", "0_1"], "argument --budget: expected a number in [0, 1), got '0_1'"),
    ([*_EVALUATE, "--budget", "\uff10.1"], "argument --budget: expected a number in [0, 1)"),
    ([*_EVALUATE, "--target-risk", "1e400"], "argument --target-risk: expected a number in (0, 1), got '1e400'"),
    ([*_EVALUATE, "--lesions", "--lesion-iou", "0_5"], "argument --lesion-iou: expected a number, got '0_5'"),
    ([*_EVALUATE, "--conformal", "outer:fnr=0.1", "--conformal-delta", "0_1"],
     "argument --conformal-delta: expected a number, got '0_1'"),
    ([*_INFER, "--samples", "1_0"], "argument --samples: expected a positive integer, got '1_0'"),
    ([*_INFER, "--seed", "+0x1"], "argument --seed: expected a non-negative integer, got '+0x1'"),
    ([*_INFER, "--roi", "64", " 64"], "argument --roi: expected a positive integer, got ' 64'"),
    ([*_INFER, "--tta-noise", "1_0"], "argument --tta-noise: expected a finite number >= 0, got '1_0'"),
    ([*_INFER, "--samples", "4.0"], "argument --samples: expected a positive integer, got '4.0'"),
    (["monitor", "status", "--alpha", "0_05"], "argument --alpha: expected a number in (0, 1), got '0_05'"),
    (["demo", "--samples", "0x10"], "argument --samples: expected a positive integer, got '0x10'"),
    pytest.param([*_PREDICT, "--num_samples", HUGE], "argument --num_samples: expected a positive integer of at most",
                 marks=NNUNET),
    pytest.param([*_PREDICT, "--num_samples", "0"], "argument --num_samples: expected a positive integer, got 0",
                 marks=NNUNET),
    pytest.param([*_PREDICT, "-num_parts", "0"], "argument -num_parts: expected a positive integer, got 0",
                 marks=NNUNET),
    pytest.param([*_PREDICT, "-npp", HUGE], "argument -npp: expected a non-negative integer of at most", marks=NNUNET),
    pytest.param([*_PREDICT, "--seed", "-1"], "argument --seed: expected a non-negative integer, got -1", marks=NNUNET),
    pytest.param([*_PREDICT, "-step_size", "0_5"], "argument -step_size: expected a number, got '0_5'", marks=NNUNET),
    pytest.param([*_PREDICT, "--sample_batch_size", " 2"], "argument --sample_batch_size: expected 'auto' or a",
                 marks=NNUNET),
    pytest.param(["nnunet-calibrate", "-o", "out", "-m", "model", "--max_steps", HUGE],
                 "argument --max_steps: expected a positive integer of at most", marks=NNUNET),
    pytest.param(["nnunet-dropout-plans", "-d", "1", "--rate", "0_2"], "argument --rate: expected a number, got '0_2'",
                 marks=NNUNET),
])
def test_a_bad_number_is_one_line_naming_the_option_at_parse_time(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith(f"monai-unc {argv[0]}"), err
    assert message in err, err
    assert "Traceback" not in err and "OverflowError" not in err


@pytest.mark.parametrize("argv, dest, value", [
    ([*_EVALUATE, "--budget", ".5e-1"], "budget", 0.05),
    ([*_EVALUATE, "--budget", "+0.25"], "budget", 0.25),
    ([*_EVALUATE, "--n-bins", "007"], "n_bins", 7),
    ([*_EVALUATE, "--min-bin-count", str(MAX_OPTION_INT)], "min_bin_count", MAX_OPTION_INT),
    ([*_EVALUATE, "--min-bin-count", "-1"], "min_bin_count", -1),  # refused by the evaluation's check, named
    ([*_EVALUATE, "--seg-label-values", "1,2,4"], "seg_label_values", [1, 2, 4]),
    ([*_EVALUATE, "--seg-label-values", "1, 2,4"], "seg_label_values", [1, 2, 4]),  # spaces around the commas
    ([*_EVALUATE, "--conformal-strata-edges", "0.1,0.2"], "conformal_strata_edges", "0.1,0.2"),
    ([*_INFER, "--seed", str(2**64 - 1)], "seed", 2**64 - 1),
    ([*_INFER, "--tta-noise", "1E-3"], "tta_noise", 0.001),
    ([*_INFER, "--roi", "64", "32", "16"], "roi", [64, 32, 16]),
    ([*_INFER, "--sample-batch-size", "auto"], "sample_batch_size", "auto"),
    ([*_INFER, "--sample-batch-size", "3"], "sample_batch_size", 3),
    (["report", "-e", "ev", "--cases", "0"], "cases", 0),
])
def test_plain_decimal_numbers_are_read(argv, dest, value):
    parser, _ = cli.build_parser(argv[0])
    assert getattr(parser.parse_args(argv), dest) == value


@pytest.mark.parametrize("text", ["0", "-3", "+7", "0.5", ".5", "5.", "1e-3", "-2.5E+2", "007", "1" * 100])
def test_option_number_reads_what_python_reads_for_plain_decimals(text):
    """The reference: Python's own readers, for the texts both accept (plain decimal syntax)."""
    assert option_number(text) == float(text)
    if text.lstrip("+-").isdigit():
        assert option_number(text, integer=True) == int(text)
        assert isinstance(option_number(text, integer=True), int)


@pytest.mark.parametrize("text", ["1_000", " 5", "5 ", "0x10", "0b1", "0o7", "\u0661", "\uff15", "", "+", "-", ".",
                                  "e3", "1e", "--1", "1,5", "1" * 101, "1e400", "-1e400", "in f", "nanx"])
def test_option_number_refuses_other_spellings(text):
    """Each of these that Python reads (``float('1_000')``, ``float(' 5')``, ``float('1e400')``) is refused."""
    with pytest.raises(ValueError, match="expected a number"):
        option_number(text)
    with pytest.raises(ValueError, match="expected a number"):
        option_number(text, integer=True)


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-Infinity", "+inf"])
def test_option_number_reads_nan_and_inf_for_the_checks_to_refuse(text):
    value, reference = option_number(text), float(text)
    assert (math.isnan(value) and math.isnan(reference)) or value == reference
    assert math.isnan(float_option(text)) if math.isnan(value) else float_option(text) == value
    with pytest.raises(ValueError):
        option_number(text, integer=True)


def test_int_option_bounds_are_inclusive():
    parse = int_option(2, 5, "an integer in [2, 5]")
    assert [parse(t) for t in ("2", "5", "+3")] == [2, 5, 3]
    for text, said in (("1", "got 1"), ("6", "of at most 5, got 6"), ("2.0", "got '2.0'")):
        with pytest.raises(argparse.ArgumentTypeError, match=said.replace("(", r"\(")):
            parse(text)
    assert int_option(0, None, "a count")(HUGE) == int(HUGE)  # no upper bound: the option's own check names it
    with pytest.raises(argparse.ArgumentTypeError, match="of at most 2147483647"):
        sample_batch_size_value(str(MAX_OPTION_INT + 1))
    assert sample_batch_size_value(str(MAX_OPTION_INT)) == MAX_OPTION_INT


# ------------------------------------------------------------------------------- messages naming the options
@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("numwords"), n_cases=2, shape=(8, 8, 8))


def _error(capsys, command: str) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith(f"monai-unc {command}: error: "), err
    return err[0][len(f"monai-unc {command}: error: "):]


@pytest.mark.parametrize("extra, expected", [
    (["--seg-label-values", "1,4", "--num-classes", "3"],
     "--seg-label-values [1, 4] holds label 4, outside the 3 classes 0 .. 2 of --num-classes"),
    (["--lesions", "--lesion-dilation", "101"], "--lesion-dilation must be in [0, 100], got 101"),
    (["--lesions", "--lesion-min-volume", "inf"], "--lesion-min-volume must be a finite number >= 0, got inf"),
    (["--lesions", "--lesion-iou", "0"], "--lesion-iou must be in (0, 1], got 0.0"),
    (["--conformal", "outer:fnr=0.1", "--conformal-strata", "3"], "--conformal: 2 calibration case(s) are too few for "
     "outer:fnr=0.1 (in expectation) in 3 strata: each stratum needs at least 9, so: at least 27 are needed"),
    (["--conformal", "outer:fnr=0.1", "--conformal", "inner:fp=0.2", "--conformal-delta", "0.1"],
     "--conformal: 2 calibration case(s) are too few for outer:fnr=0.1 and inner:fp=0.2 (with --conformal-delta 0.1): "
     "at least 9 are needed"),
    (["--conformal", "outer:fnr=0_1"], "--conformal: the target of 'outer' must be a number in (0, 1), got '0_1'"),
    (["--conformal", "outer:fnr=0.1", "--conformal-strata-edges", "1_0,2"],
     "--conformal-strata-edges must be comma-separated numbers such as 0.2,0.4, got '1_0,2'"),
])
def test_evaluate_names_every_option_of_a_refusal(cohort, tmp_path, capsys, extra, expected):
    out = tmp_path / "ev"
    argv = ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(out), "-q", *extra]
    assert cli.main(argv) == 2
    text = _error(capsys, "evaluate")
    assert text == expected, text
    assert "_" not in text.split(" ")[0] and not out.exists()


def test_keys_show_names_the_option(tmp_path, capsys):
    (tmp_path / "not_a_key.pub").write_text("hello\n")
    for path in (tmp_path / "missing.pub", tmp_path / "not_a_key.pub"):
        assert cli.main(["keys", "--show", str(path)]) == 2
        text = _error(capsys, "keys")
        assert text.startswith("--show: ") and str(path) in text, text


def test_other_parameters_are_named_only_where_the_check_declares_them():
    """``others`` of :func:`parameter_error`: those words alone, as whole words, and only options of the command."""
    from monai_unc._utils import parameter_error

    parser, _ = cli.build_parser("evaluate")
    argv = [*_EVALUATE, "--num-classes", "3"]
    args = parser.parse_args(argv)
    error = parameter_error(ValueError("seg_label_values [4] is beyond num_classes (see num_classes_x, n_bins)"),
                            "seg_label_values", others=("num_classes", "no_such_option"))
    text = cli._option_text(parser, args, argv, error, str(error))
    assert text == "--seg-label-values [4] is beyond --num-classes (see num_classes_x, n_bins)"
    undeclared = parameter_error(ValueError("seg_label_values [4] is beyond num_classes"), "seg_label_values")
    assert cli._option_text(parser, args, argv, undeclared, str(undeclared)).endswith("beyond num_classes")


# ----------------------------------------------------------------------------------------- --allow-unsigned
NOTICE = "monai-unc: --allow-unsigned:"


@pytest.fixture(scope="module")
def unsigned_rule(cohort, tmp_path_factory):
    root = tmp_path_factory.mktemp("unsigned")
    ev = root / "ev"
    # two calibration cases certify nothing (a warning line): every case is referred, which is all the tests need
    assert cli.main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(ev), "-q",
                     "--target-risk", "0.5"]) == 0
    doc = json.loads((ev / "referral_rule.json").read_text())
    del doc["signature"]
    rule = root / "unsigned_rule.json"
    rule.write_text(json.dumps(doc))
    return rule


def _triage(cohort, rule, out, *extra):
    return ["triage", "-p", str(cohort["predictions"]), "-r", str(rule), "-o", str(out), "-q", *extra]


@pytest.mark.parametrize("case", ["output inside predictions", "rule missing", "output of evaluate"])
def test_a_refused_call_with_allow_unsigned_is_one_line(cohort, unsigned_rule, tmp_path, capsys, case):
    out = {"output inside predictions": cohort["predictions"] / "t", "output of evaluate": unsigned_rule.parent / "ev"}
    rule = tmp_path / "missing.json" if case == "rule missing" else unsigned_rule
    assert cli.main(_triage(cohort, rule, out.get(case, tmp_path / "t"), "--allow-unsigned")) == 2
    text = _error(capsys, "triage")
    assert NOTICE not in text


def test_the_notice_is_said_once_when_the_run_starts(cohort, unsigned_rule, tmp_path, capsys):
    assert cli.main(_triage(cohort, unsigned_rule, tmp_path / "t")) == 2  # without the option: refused, no notice
    err = capsys.readouterr().err
    assert NOTICE not in err and "--allow-unsigned" in err
    assert cli.main(_triage(cohort, unsigned_rule, tmp_path / "t", "--allow-unsigned")) == 0
    err = capsys.readouterr().err
    assert err.count(NOTICE) == 1, err


def test_start_notice_is_said_once_after_the_checks(capsys):
    from monai_unc.engine import run_cases, start_notice

    def refused() -> list[str]:
        raise ValueError("refused")

    with start_notice("toy: notice"):
        with pytest.raises(ValueError, match="refused"):
            run_cases(refused, str.upper, command="toy", key=str)
        assert "toy: notice" not in capsys.readouterr().err  # a listing refused: no run, no notice
        assert run_cases(["a"], str.upper, command="toy", key=str).results == ["A"]
        assert run_cases(["b"], str.upper, command="toy", key=str).results == ["B"]
    assert capsys.readouterr().err.count("toy: notice") == 1
    assert run_cases(["c"], str.upper, command="toy", key=str).results == ["C"]  # outside: nothing said
    assert "toy: notice" not in capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    ([*_INFER, "--output-format", "both", "--uid-root", "1.2.x"], "--uid-root must be digits and dots"),
    pytest.param([*_PREDICT, "--output-format", "both", "--uid-root", "1.2.x"], "--uid-root must be digits and dots",
                 marks=NNUNET),
    pytest.param(["nnunet-dropout-plans", "-d", "1"], "nnU-Net's environment variable nnUNet_preprocessed is not set",
                 marks=NNUNET),
])
def test_infer_and_nnunet_refusals_name_the_flag(argv, expected, capsys, monkeypatch):
    monkeypatch.delenv("nnUNet_preprocessed", raising=False)
    assert cli.main(argv) == 2
    text = _error(capsys, argv[0])
    assert text.startswith(expected) and "uid_root" not in text and "preprocessed_dir is" not in text, text
