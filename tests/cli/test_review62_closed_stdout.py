"""Review 62 (end-to-end run): ``monai-unc monitor status | head`` printed ``error: BrokenPipeError`` (exit 2) once
``head`` had read its lines. A command whose standard output's reader went away now stops quietly with 141 (128 +
SIGPIPE, what a shell reports for a program a closed pipe stopped); a broken pipe elsewhere stays an error."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monai_unc import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not hasattr(__import__("select"), "poll"), reason="needs poll (not on Windows)")
def test_a_closed_pipe_on_stdout_stops_quietly(tmp_path):
    r, w = os.pipe()
    os.close(r)  # the reader has gone before the command prints
    try:
        p = subprocess.run([sys.executable, "-m", "monai_unc", "keys"], stdout=w, stderr=subprocess.PIPE, text=True,
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT),
                                              "MONAI_UNC_CONFIG_DIR": str(tmp_path / "config")}, timeout=300)
    finally:
        os.close(w)
    assert p.returncode == 141, p.stderr
    assert p.stderr == "", p.stderr  # no "error: BrokenPipeError", no "Exception ignored" at the interpreter's exit


def test_a_broken_pipe_that_is_not_stdout_stays_an_error(monkeypatch, capsys):
    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")  # e.g. a database connection, with stdout fine

    monkeypatch.setattr(cli, "_run", broken)
    assert cli.main(["keys"]) == 2
    assert "monai-unc keys: error: BrokenPipeError" in capsys.readouterr().err
