"""Hostile review 64: a 5-D NIfTI ``(X, Y, Z, 1, C)`` (a vector image's layout, read as ``(C, X, Y, Z, 1)``) is put on
its source series' grid as the 4-D ``(X, Y, Z, C)`` file is (``dicom-export`` refused it as "must be (C, X, Y, Z)"),
as ``evaluate``, ``infer`` and ``triage`` read it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pydicom")

from monai_unc.io.dicom import read_series, to_series_grid, write_series  # noqa: E402


def test_to_series_grid_drops_a_time_axis_of_length_1(tmp_path):
    write_series(np.zeros((2, 3, 4)), np.eye(4), tmp_path, modality="MR")
    s = read_series(tmp_path, pixels=False)
    data = np.arange(24.0).reshape(1, 2, 3, 4)
    np.testing.assert_array_equal(to_series_grid(data[..., None], s.affine, s, "map"),
                                  to_series_grid(data, s.affine, s, "map"))
    with pytest.raises(ValueError, match=r"map must be \(C, X, Y, Z\), got shape \(1, 2, 3, 4, 2\)"):
        to_series_grid(np.stack([data, data], -1), s.affine, s, "map")
