"""Review 67: one check of distinct segment names serves the SEG writers and ``dicom_export``'s class names.

``dicom_export`` repeated the loop of the SEG writers (one name key per class, the first clash refused) over a dict,
with a wording of its own. Both now call :func:`monai_unc.io.dicom.check_distinct_segment_names`, whose message
starts with what holds the names (``segments``, ``class_names``, a file and its key).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import (  # noqa: E402
    check_distinct_segment_names,
    default_segment,
    read_series,
    write_segmentation,
    write_series,
)
from monai_unc.workflows.dicom import dicom_export  # noqa: E402

SAME = "have the same segment name (SegmentLabel), so a viewer could not tell their segments apart"


def test_the_first_clash_is_refused_naming_both_classes_and_where():
    assert check_distinct_segment_names([(1, "Tumour"), (2, "Oedema"), (3, "Necrosis")], "segments") is None
    pairs = ((c, n) for c, n in [(1, "Whole  Tumour"), (2, "oedema"), (4, " whole tumour "), (5, "OEDEMA")])
    with pytest.raises(ValueError) as refused:
        check_distinct_segment_names(pairs, "labels.json: labels", "; rename one")
    assert str(refused.value) == (f"labels.json: labels: class 1 ('Whole  Tumour') and class 4 (' whole tumour ') "
                                  f"{SAME}; rename one")


def test_the_seg_writer_and_dicom_export_refuse_in_one_wording(tmp_path):
    folder = tmp_path / "s"
    write_series(np.zeros((6, 6, 3)), np.eye(4), folder, modality="MR")
    series = read_series(folder, pixels=False)
    labels = np.zeros((6, 6, 3), np.uint8)
    labels[1, 1, 1], labels[3, 3, 2] = 1, 2
    with pytest.raises(ValueError) as writer:
        write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(1, "Tumour"),
                                                                   default_segment(2, "tumour")])
    assert str(writer.value).startswith(f"segments: class 1 ('Tumour') and class 2 ('tumour') {SAME}; give them "
                                        "distinct names"), writer.value
    assert not (tmp_path / "seg.dcm").exists()
    for name in ("pred", "series"):
        (tmp_path / name).mkdir()
    with pytest.raises(ValueError) as export:  # refused before any case is read or written
        dicom_export(tmp_path / "pred", tmp_path / "series", tmp_path / "out", class_names=["bg", "Tumour", " TUMOUR"])
    assert str(export.value) == f"class_names: class 1 ('Tumour') and class 2 (' TUMOUR') {SAME}", export.value
    assert not (tmp_path / "out").exists()
