"""``monai-unc demo`` refuses a wrong option as every other command does (review 62).

``demo --device cuda`` was "monai-unc: error: unrecognized arguments: --device cuda": demo had no ``--device``, and
an option a command does not have was refused by the top parser, naming no command (``monai-unc: error: ...
(see monai-unc --help)``) for every command. The demo now takes ``--device`` (default cpu), checked as ``infer``
checks it before any work, and an unknown option names the command whose options it is not one of.
"""

from __future__ import annotations

from pathlib import Path

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


@pytest.mark.parametrize("cuda_version, why", [
    (None, "has no CUDA support"),
    ("12.1", "(CUDA 12.1) finds no CUDA GPU or driver"),
])
def test_demo_cuda_without_cuda_is_infers_line(cuda_version, why, tmp_path: Path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", cuda_version)
    out = tmp_path / "demo"
    err = _refused(["demo", "--output", str(out), "--quiet", "--device", "cuda"], capsys)
    assert err.startswith("monai-unc demo: error: --device cuda asked for, but CUDA is not available: this torch "
                          "build"), err
    assert why in err and "--device cpu works" in err and "Traceback" not in err
    assert not out.exists()  # refused before any work


@pytest.mark.parametrize("device, expected", [
    ("gpu", "--device: unknown device 'gpu'; did you mean 'cuda'?"),
    ("meta", "--device meta: monai-unc runs on cpu, cuda or cuda:<index>, not meta"),
])
def test_demo_refuses_other_devices_as_infer_does(device, expected, tmp_path, capsys):
    out = tmp_path / "demo"
    err = _refused(["demo", "--output", str(out), "--quiet", "--device", device], capsys)
    assert err.startswith("monai-unc demo: error: ") and expected in err, err
    assert not out.exists()


def test_run_demo_checks_its_device_before_any_work(tmp_path, monkeypatch):
    import torch

    from monai_unc.workflows.demo import run_demo

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="--device cuda asked for, but CUDA is not available"):
        run_demo(tmp_path / "demo", quiet=True, device="cuda")
    assert not (tmp_path / "demo").exists()


@pytest.mark.parametrize("argv, command", [
    (["demo", "--bogus"], "demo"),
    (["demo", "-x", "x"], "demo"),
    (["evaluate", "-l", "a", "-p", "b", "-o", "c", "--bogus"], "evaluate"),
    (["infer", "-i", "a", "-o", "b", "--bogus", "1"], "infer"),
    (["monitor", "status", "--db", "x", "--bogus"], "monitor status"),
])
def test_an_unknown_option_names_the_command(argv, command, capsys):
    err = _refused(argv, capsys)
    unknown = " ".join(argv[argv.index("--bogus"):]) if "--bogus" in argv else "-x x"
    assert err == (f"monai-unc {command}: error: unrecognized arguments: {unknown} "
                   f"(see monai-unc {command} --help)\n"), err


def test_demo_passes_its_device_to_run_demo(monkeypatch):
    from monai_unc.workflows import demo

    seen = {}

    def fake(output, **kwargs):
        seen.update(kwargs)
        return {}

    monkeypatch.setattr(demo, "run_demo", fake)
    parser, _ = cli.build_parser("demo")
    demo.demo_from_arguments(parser.parse_args(["demo", "--output", "x", "--device", "cpu"]))
    assert seen["device"] == "cpu"
    demo.demo_from_arguments(parser.parse_args(["demo", "--output", "x"]))
    assert seen["device"] == "cpu"  # the default: the documented numbers are the CPU's


def test_demo_takes_o_for_its_output_as_every_other_command(monkeypatch):
    """``-o`` is the output option of infer, evaluate, triage, dicom-export, ...; the demo's was ``--output`` only, so
    ``monai-unc demo -o out`` was refused as an unrecognized argument."""
    from monai_unc.workflows import demo

    seen = {}

    def fake(output, **kwargs):
        seen["output"] = output
        return {}

    monkeypatch.setattr(demo, "run_demo", fake)
    parser, _ = cli.build_parser("demo")
    demo.demo_from_arguments(parser.parse_args(["demo", "-o", "elsewhere"]))
    assert str(seen["output"]) == "elsewhere"
