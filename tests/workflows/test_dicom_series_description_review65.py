"""``dicom-export --series-description``: the segmentation's SeriesDescription from the command line (review 65).

The writers took ``series_description`` but neither ``dicom_export`` nor its command did, so every exported SEG was
listed in a PACS as ``segmentation by monai-unc: ...``. A value a DICOM LO cannot hold is one line, exit 2, before any
object is written.
"""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from tests.io.dicom._series import GEOMETRIES, dciodvfy_errors, make_series, mni_small  # noqa: E402


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("description")
    make_series(root / "series" / "c1", "anisotropic_ct")
    _, label, _ = mni_small()
    (root / "pred").mkdir()
    nib.save(nib.Nifti1Image(label.astype(np.uint8), GEOMETRIES["anisotropic_ct"][1]), root / "pred" / "c1_seg.nii.gz")
    return root


def _argv(source, out, *extra):
    return ["dicom-export", "-p", str(source / "pred"), "-s", str(source / "series"), "-o", str(out),
            "-q", *extra]


def test_series_description_names_the_segmentation(source):
    out = source / "out"
    text = "Hirnsegmentierung Übersicht"  # non-ASCII: the objects declare UTF-8
    assert main(_argv(source, out, "--series-description", text)) == 0
    seg = pydicom.dcmread(out / "c1" / "seg.dcm", stop_before_pixels=True)
    assert seg.SeriesDescription == text
    sr = pydicom.dcmread(out / "c1" / "sr.dcm", stop_before_pixels=True)
    assert sr.SeriesDescription != text  # the report keeps its own
    assert dciodvfy_errors(out / "c1" / "seg.dcm") == []


@pytest.mark.parametrize("bad", ["a\\b", "Ü" * 33, "", "line\nbreak"])  # 33 characters are 66 bytes of UTF-8
def test_bad_series_description_is_one_line_exit_2(tmp_path, capsys, bad):
    for name in ("pred", "series"):
        (tmp_path / name).mkdir()
    out = tmp_path / "out"
    assert main(_argv(tmp_path, out, "--series-description", bad)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: --series-description must be 1 to 64" in err, err
    assert not out.exists()  # refused before any work
