"""Fixtures of the workflow tests shared by several modules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> Path:
    """Three small CT series, one folder per case (``ct01``, ``ct02``, ``ct03``; the ``dicom`` extra)."""
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    from monai_unc.io.dicom import write_series

    root = tmp_path_factory.mktemp("series") / "images"
    rng = np.random.default_rng(0)
    for case in ("ct01", "ct02", "ct03"):
        write_series(np.round(rng.uniform(-1000, 1000, (8, 7, 4))), np.diag([1.0, 1.0, 2.0, 1.0]), root / case,
                     modality="CT")
    return root
