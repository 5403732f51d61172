"""Every sub-command of ``monai-unc --help`` is named in README.md and docs/cli.md (issue 40 item 7).

The nnU-Net sub-commands are registered (as stubs that name the ``nnunet`` extra) without nnunetv2, so the list
is the same with and without it.
"""

from __future__ import annotations

import argparse
import re

import pytest

from monai_unc import cli
from tests._paths import ROOT


def _commands() -> list[str]:
    parser, _ = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_the_command_list_is_complete():
    names = _commands()
    for expected in ("infer", "evaluate", "report", "calibrate", "demo", "triage", "conformal", "nnunet-predict",
                     "nnunet-dropout-plans", "nnunet-calibrate"):
        assert expected in names
    # the names parsed from the parser are the ones --help prints
    text = cli.build_parser()[0].format_help()
    for name in names:
        assert re.search(rf"^\s+{re.escape(name)}\b", text, re.M), name


@pytest.mark.parametrize("page", ["README.md", "docs/cli.md"])
def test_every_command_is_documented(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    # as `monai-unc NAME` or `NAME` (code), not as a part of another word (nnunet-predictor)
    missing = [name for name in _commands() if not re.search(rf"(monai-unc\s+|`){re.escape(name)}(?![\w-])", text)]
    assert not missing, f"{page} does not name: {missing}"


def test_readme_names_make_docs():
    assert "make docs" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_first_install_says_how_to_install_from_a_clone(page):
    """Found by the newcomer review: docs/index.md's first commands were ``pip install monai-unc``, which the package
    index does not serve for an unreleased version (``No matching distribution found``), with no word of the install
    from a clone that README gives. Every ``pip install monai-unc`` line of a first-install block names it."""
    text = (ROOT / page).read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if re.match(r"\s*pip install monai-unc(\s|$)", line)]
    assert lines
    for line in lines:
        assert re.search(r"from a clone: pip install (-e )?\.", line), line
