"""Hostile review of interrupted and failing runs at the command line (Ctrl-C, a full disk): one stderr line and the
documented exit status (130 when interrupted, 2 for a write that failed), never a traceback, at every moment of a
command and for the nnU-Net sub-commands too.

Found by killing the commands at random moments: a Ctrl-C in the seconds after the arguments are parsed (while torch,
MONAI and the command's workflow are imported) escaped ``main`` (a traceback, death by SIGINT: exit -2), as did every
Ctrl-C of ``nnunet-predict``; a full disk under ``nnunet-predict`` printed ``OSError``'s traceback (exit 1).
"""

from __future__ import annotations

import errno

import pytest

from monai_unc import cli


def _main(argv: list[str]) -> int:
    """``cli.main(argv)``; a ``KeyboardInterrupt`` that escapes it fails the test (pytest would stop the session)."""
    try:
        return cli.main(argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped monai_unc.cli.main: a traceback and exit -2, not one line and 130")


@pytest.mark.parametrize("command, hint", [
    (["evaluate", "-l", "L", "-p", "P", "-o", "O"], "run the same command again to resume"),
    (["infer", "-i", "I", "-o", "O", "--model", "example"], "run the same command again to resume"),
    (["report", "-e", "E"], "nothing was written"),
    (["dicom-export", "-p", "P", "-s", "S", "-o", "O"], "run the same command again to complete the folder"),
])
def test_ctrl_c_while_the_command_is_imported_is_one_line_and_130(command, hint, monkeypatch, capsys):
    """Ctrl-C during the imports after parsing (seconds of torch / MONAI) is the line of any other Ctrl-C."""
    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_import_commands", interrupted)
    assert _main(command) == 130
    err = capsys.readouterr().err
    assert err == f"monai-unc {command[0]}: interrupted; {hint}\n"


def test_ctrl_c_while_the_parser_is_built_is_one_line_and_130(monkeypatch, capsys):
    """``nnunet-predict`` builds its parser by importing nnU-Net (seconds): a Ctrl-C there is one line too."""
    def interrupted(command, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert _main(["nnunet-predict", "-i", "I", "-o", "O", "-m", "M"]) == 130
    assert capsys.readouterr().err == ("monai-unc nnunet-predict: interrupted; run the same command again with "
                                       "--continue_prediction to resume\n")


@pytest.fixture
def nnunet_cli():
    pytest.importorskip("nnunetv2")
    from monai_unc.nnunet import cli as nnunet_cli

    return nnunet_cli


NNUNET_ARGV = ["nnunet-predict", "-i", "in", "-o", "out", "-m", "model", "-f", "0", "-device", "cpu"]


def test_ctrl_c_during_nnunet_predict_is_one_line_and_130(nnunet_cli, monkeypatch, capsys):
    """Every Ctrl-C of ``nnunet-predict`` printed nnU-Net's and our frames (a traceback, exit -2)."""
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(nnunet_cli, "_predict", interrupted)
    assert _main(NNUNET_ARGV) == 130
    assert capsys.readouterr().err == ("monai-unc nnunet-predict: interrupted; run the same command again with "
                                       "--continue_prediction to resume\n")


def test_a_full_disk_under_nnunet_predict_is_one_line_naming_the_file(nnunet_cli, monkeypatch, capsys):
    """``OSError: [Errno 28]`` with its traceback (exit 1); now the line of every other command (exit 2)."""
    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "out/uncertainty/case0_mutual_information.nii.gz")

    monkeypatch.setattr(nnunet_cli, "_predict", full)
    assert _main(NNUNET_ARGV) == 2
    assert capsys.readouterr().err == ("monai-unc nnunet-predict: error: No space left on device: "
                                       "out/uncertainty/case0_mutual_information.nii.gz\n")


def test_nnunet_predict_keeps_its_own_one_line_errors(nnunet_cli, monkeypatch, capsys):
    """The refusals nnunet-predict words itself are unchanged (its message as it is, exit 2)."""
    def missing(args):
        raise FileNotFoundError("trained model folder not found: model")

    monkeypatch.setattr(nnunet_cli, "_predict", missing)
    assert _main(NNUNET_ARGV) == 2
    assert capsys.readouterr().err == "monai-unc nnunet-predict: error: trained model folder not found: model\n"


def test_a_file_size_limit_is_a_full_disk():
    """``EFBIG`` (``ulimit -f`` of a job, the largest file of a file system) is the environment's, as ``ENOSPC``."""
    from monai_unc.io import is_disk_full

    assert is_disk_full(OSError(errno.EFBIG, "File too large"))
    assert not is_disk_full(OSError(errno.EIO, "Input/output error"))


def test_a_file_size_limit_stops_infer_at_the_first_case_in_one_line(tmp_path, monkeypatch):
    """Found by hostile testing under ``ulimit -f``: ``infer`` computed every case, failed each at its first large
    file (``[Errno 27] File too large``), blamed every case in ``failures.json`` and exited 1. It now stops at the
    first case in one line naming the file (exit 2), as on a full disk, and the same command resumes once the limit
    is lifted (the resumed run in this process: the limit is the first run's only)."""
    import json
    import resource

    import torch
    from monai.networks.nets import UNet

    from monai_unc.data.cohorts import write_toy_cohort
    from tests._cases import TOY_NET
    from tests._ranks import run_cli_forked

    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(16, 16, 16), predictions=False)
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    (tmp_path / "net.json").write_text(json.dumps(TOY_NET))
    out = tmp_path / "pred"
    argv = ["infer", "-i", str(data["images"]), "-o", str(out), "--network", str(tmp_path / "net.json"),
            "--checkpoint", str(tmp_path / "net.pt"), "--samples", "2", "--seed", "0", "--quiet"]

    def limit():  # 12 KiB: the records and label maps fit, the probabilities do not
        resource.setrlimit(resource.RLIMIT_FSIZE, (12 << 10, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    # the limited run in a forked process (the limit is that process's only; no interpreter start-up)
    code, stderr = run_cli_forked(argv, {"MONAI_UNC_TEST_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}, limit)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith("monai-unc infer: error: File too large: ") and f"{out}/toy000_" in lines[0], lines
    assert not (out / "failures.json").exists()
    monkeypatch.setenv("MONAI_UNC_TEST_DEVICE", "cpu")
    assert _main(argv) == 0  # the same command without the limit resumes
    assert sorted(p.name for p in out.glob("toy*.json")) == ["toy000.json", "toy001.json", "toy002.json"]
