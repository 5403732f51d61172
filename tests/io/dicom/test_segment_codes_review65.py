"""A segments file's code value over 16 bytes of UTF-8 but not over 16 characters is a LongCodeValue (review 65).

highdicom picks CodeValue (SH) or LongCodeValue (UC) by characters: ``Ödemäußerstschön`` (16 characters, 20 bytes)
was written as a CodeValue, which dciodvfy rejects ("Length invalid for this VR = 20, expected <= 16"); the export
counts SH's 16 in bytes, as validators and PACS do.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import read_series, write_series  # noqa: E402
from monai_unc.io.dicom.objects import (  # noqa: E402
    read_segment_specs,
    write_fractional_segmentation,
    write_segmentation,
)
from tests.io.dicom._series import dciodvfy_errors  # noqa: E402

SHAPE = (6, 5, 4)
LONG = "Ödemäußerstschön"  # 16 characters, 20 bytes
EXACT = "ÖÖÖÖÖÖÖÖ"  # 8 characters, 16 bytes: still a CodeValue


def test_code_value_over_16_bytes_is_a_long_code_value(tmp_path):
    assert (len(LONG), len(LONG.encode()), len(EXACT.encode())) == (16, 20, 16)
    write_series(np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE), np.diag([0.8, 0.8, 2.0, 1.0]),
                 tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    (tmp_path / "segments.json").write_text(json.dumps(
        {"1": {"name": "oedema", "category": ["99LOCAL", LONG, "Ödem"], "type": ["99LOCAL", EXACT, "Ödem"]}}))
    specs = read_segment_specs(tmp_path / "segments.json", [1])
    seg = write_segmentation(np.ones(SHAPE, np.uint8), series, tmp_path / "seg.dcm", specs)
    probs = write_fractional_segmentation(np.full((2, *SHAPE), 0.5, np.float32), series, tmp_path / "p.dcm", specs)
    assert dciodvfy_errors(seg) == []  # the FRACTIONAL SEG's descriptions are built by the same code
    for path in (seg, probs):
        segment = pydicom.dcmread(path, stop_before_pixels=True).SegmentSequence[0]
        category = segment.SegmentedPropertyCategoryCodeSequence[0]
        kind = segment.SegmentedPropertyTypeCodeSequence[0]
        assert "CodeValue" not in category and str(category.LongCodeValue) == LONG
        assert str(kind.CodeValue) == EXACT and "LongCodeValue" not in kind
