"""Paths of the repository, the same wherever a test module sits under ``tests/``."""

from pathlib import Path

#: the repository root: the folder that holds ``pyproject.toml``, ``monai_unc/``, ``docs/`` and ``tests/``
ROOT = Path(__file__).resolve().parents[1]
