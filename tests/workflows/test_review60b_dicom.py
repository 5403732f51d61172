"""Hostile review 60 of the DICOM objects (identity, de-identification, Parametric Map display): defects and their
regressions."""

from __future__ import annotations

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import read_series, write_series  # noqa: E402
from monai_unc.io.dicom.objects import (  # noqa: E402
    write_parametric_map,
)

SHAPE = (6, 5, 4)


def _series(folder, **extra):
    """A small MR series with the attributes ``extra`` on every slice, read without pixels."""
    values = np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE)
    write_series(values, np.diag([0.8, 0.8, 2.0, 1.0]), folder, modality="MR", extra=extra or None)
    return read_series(folder, pixels=False)


def test_parametric_map_window_explanation_is_one_value(tmp_path):
    """The Parametric Map's display window was explained as ten values, one per character of ``full range``
    (``f\\u\\l\\l\\\\r\\a\\n\\g\\e``: highdicom's ``list()`` of a text), beside one WindowCenter: a viewer listing its
    windows showed ``f``. One explanation per window now."""
    series = _series(tmp_path / "s")
    pm = pydicom.dcmread(write_parametric_map(np.linspace(0, 1, 120).reshape(SHAPE), series, tmp_path / "pe.dcm",
                                              "predictive_entropy"))
    voi = pm.SharedFunctionalGroupsSequence[0].FrameVOILUTSequence[0]
    assert voi["WindowCenter"].VM == voi["WindowWidth"].VM == 1
    assert voi["WindowCenterWidthExplanation"].VM == 1
    assert voi.WindowCenterWidthExplanation == "full range"
    assert float(voi.WindowCenter) == pytest.approx(0.5) and float(voi.WindowWidth) == pytest.approx(1.0)
