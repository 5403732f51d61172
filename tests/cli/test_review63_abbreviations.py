"""Review 63: long options shortened to a prefix, and the stable interface (docs/cli.md).

``--trusted-keys`` made ``dicom-export --tr`` (``--triage``) and ``monitor record --t`` (``--time``) ambiguous. The
command line keeps argparse's abbreviations (as nnU-Net's argparse commands do; no working invocation stops working),
says an ambiguous prefix in one line naming every option it could mean, and docs/cli.md states that the full names
are the stable interface, as git does for its options.
"""

from __future__ import annotations

import pytest

from monai_unc.cli import main
from tests._paths import ROOT


@pytest.mark.parametrize(("argv", "options"), [
    (["dicom-export", "-p", "a", "-s", "b", "-o", "c", "--tr", "t"], ("--triage", "--trusted-keys")),
    (["monitor", "record", "t", "--t", "2026-01-01"], ("--time", "--trusted-keys")),
    (["triage", "-p", "a", "-o", "c", "--r", "rule.json"], ("--rule", "--require-signature")),
])
def test_an_ambiguous_prefix_is_one_line_naming_every_option_it_could_mean(argv, options, tmp_path, capsys,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "ambiguous option" in err[0], err
    assert all(o in err[0] for o in options), err
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_unique_prefix_still_works(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["monitor", "record", str(tmp_path / "missing"), "--tim", "2026-01-01", "--db", str(tmp_path / "m.db")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "ambiguous" not in err and "unrecognized" not in err and "TRIAGE folder not found" in err, err


def test_the_docs_say_that_full_option_names_are_the_stable_interface():
    text = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    assert "Spell options in full in scripts." in text
    assert "The full option names are the stable interface" in text
    assert "ambiguous option: --t could match --time, --trusted-keys" in text
