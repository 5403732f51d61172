"""The help texts of ``monai_unc.workflows.arguments`` say what the commands do (hostile review: docs).

``triage --site`` was "the site of the cases" although a case's JSON sidecar wins over it (docs/monitoring.md: a
``--sites`` row, then the sidecar, then ``--site``), and ``monitor <sub> --quiet`` promised to "print nothing" while
``--quiet`` keeps every command's warning lines (docs/cli.md, ``workflows.quiet_lines``).
"""

from __future__ import annotations

import argparse

from monai_unc.cli import build_parser
from tests._argv import command_parsers


def _sub(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def _option_help(parser: argparse.ArgumentParser, option: str) -> str:
    return next(a.help for a in parser._actions if option in a.option_strings)


def test_site_is_a_fallback_in_triage_as_in_monitor_record():
    root = build_parser()[0]
    triage = _option_help(_sub(root, "triage"), "--site")
    record = _option_help(_sub(_sub(root, "monitor"), "record"), "--site")
    for text in (triage, record):
        assert "not otherwise known" in text and "sidecar" in text, text
    assert triage.endswith(record)


def test_monitor_quiet_help_says_warnings_are_printed():
    monitor = _sub(build_parser()[0], "monitor")
    for name in ("record", "label", "status", "report", "verify"):
        text = _option_help(_sub(monitor, name), "--quiet")
        assert "print nothing" not in text and "warning" in text, (name, text)


def test_dicom_export_help_names_the_multiframe_series_it_reads():
    """dicom-export reads a series folder of one enhanced multi-frame image too (read_series); its help said single-
    frame slices only (hostile review 56)."""
    text = _sub(build_parser()[0], "dicom-export").description
    assert "multi-frame" in text and "single-frame CT or MR slices)" not in text, text


def test_every_command_with_quiet_also_takes_q():
    """``--quiet`` is spelled ``-q`` too wherever a command has it (``demo`` had only ``--quiet``: ``demo -q`` was
    refused as an unrecognised argument while ``infer -q`` worked)."""
    with_quiet = []
    for words, sub in command_parsers(build_parser()[0]):
        options = {s for a in sub._actions for s in a.option_strings}
        if "--quiet" in options:
            with_quiet.append(words)
            assert "-q" in options, words
    assert ("demo",) in with_quiet and ("infer",) in with_quiet and ("monitor", "record") in with_quiet
