"""The repository's top level holds only the project's own files (af21fb0b committed eleven SQLite databases named
``nan``, ``1e30``, ``-1`` ... that a hostile probe had written into the working directory; nothing looked at the
root). A new top-level file is added here on purpose, with the change that needs it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TOP_LEVEL = {
    ".ci", ".gitignore", "CHANGELOG.md", "LICENSE", "MANIFEST.in", "Makefile", "README.md", "benchmarks", "bundles",
    "docs", "mkdocs.yml", "monai_unc", "pyproject.toml", "scripts", "tests",
}


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def test_only_the_projects_files_are_tracked_at_the_top_level():
    top = {p.split("/", 1)[0] for p in _tracked()}
    assert top - TOP_LEVEL == set(), f"unexpected tracked top-level entries: {sorted(top - TOP_LEVEL)}"


def test_no_tracked_file_is_a_sqlite_database_outside_the_test_data():
    found = []
    for rel in _tracked():
        path = ROOT / rel
        if path.is_file() and path.stat().st_size >= 16:
            with path.open("rb") as f:
                if f.read(16) == b"SQLite format 3\0":
                    found.append(rel)
    assert found == [], f"SQLite databases are tracked: {found}"
