"""``monai-unc nnunet-* --help`` without the ``nnunet`` extra (review 63).

The help of an nnU-Net sub-command is shown without nnU-Net v2, as ``dicom-export --help`` is without the ``dicom``
extra; running the command still says, in one line, what to install. The missing package is simulated as the other
tests of missing extras do: a ``None`` entry in ``sys.modules`` makes its import raise ``ImportError``.
"""

from __future__ import annotations

import sys

import pytest

from monai_unc import cli


@pytest.fixture
def no_nnunet(monkeypatch):
    """nnU-Net v2 not installed, and the package's nnU-Net modules not imported yet."""
    for name in [m for m in sys.modules if m == "nnunetv2" or m.startswith(("nnunetv2.", "monai_unc.nnunet"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "nnunetv2", None)
    monkeypatch.delattr("monai_unc.nnunet", raising=False)


@pytest.mark.parametrize("command, option", [("nnunet-predict", "--save_probabilities"),
                                             ("nnunet-dropout-plans", "--overwrite"),
                                             ("nnunet-calibrate", "--help")])
def test_help_of_an_nnunet_command_without_the_extra(command, option, no_nnunet, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    assert f"usage: monai-unc {command}" in out and option in out
    assert "pip install 'monai-unc[nnunet]'" in out  # the help says what the command needs
    assert "monai_unc.nnunet" not in sys.modules and "monai_unc.nnunet.names" not in sys.modules


def test_running_an_nnunet_command_without_the_extra_is_one_line(no_nnunet, capsys):
    assert cli.main(["nnunet-predict", "-i", "imgs", "-o", "out", "-m", "model", "-f", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'monai-unc[nnunet]'" in err, err

