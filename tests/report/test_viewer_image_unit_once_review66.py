"""A page reads a DICOM series' headers once per case (found by review 66).

The viewer's image colorbar names the unit of the values (review 65: ``HU`` for a CT series). The report and triage
pages took that unit from :func:`monai_unc.io.image_unit`, which reads every slice's header again after the case's
image was read: 0.17 s per viewer for a 300-slice series. The case read (:func:`monai_unc.io.load_case`) now carries
the unit (``LoadedCase.image_unit``), from its one read of the series.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.io import CaseFiles, load_case, read_volume

pytest.importorskip("highdicom", reason="DICOM series need the dicom extra")

from monai_unc.io.dicom import series as dicom_series  # noqa: E402 (after the check of the extra)
from monai_unc.io.dicom import write_series  # noqa: E402


@pytest.fixture
def header_reads(monkeypatch):
    """The number of times each DICOM file's header is read (``read_series`` reads every header through one call)."""
    reads: Counter[str] = Counter()
    read = dicom_series._read_header

    def counting(path, *args, **kwargs):
        reads[Path(path).name] += 1
        return read(path, *args, **kwargs)

    monkeypatch.setattr(dicom_series, "_read_header", counting)
    return reads


def _case_on_series(root: Path, modality: str) -> CaseFiles:
    """A case whose image is a 4-slice DICOM series, its label, segmentation and map NIfTI files on its grid."""
    shape = (6, 5, 4)
    write_series(np.full(shape, 40.0), np.diag([0.9, 0.8, 3.0, 1.0]), root / "series", modality=modality)
    _, affine = read_volume(root / "series")
    seg = np.zeros(shape, np.int16)
    seg[1:4, 1:4, 1:3] = 1
    for name, a in (("label", seg), ("seg", seg), ("u", np.linspace(0, 1, seg.size, dtype=np.float32).reshape(shape))):
        nib.save(nib.Nifti1Image(a, affine), root / f"{name}.nii.gz")
    return CaseFiles("c", root / "label.nii.gz", seg=root / "seg.nii.gz", maps={"u": root / "u.nii.gz"},
                     image=root / "series")


@pytest.mark.parametrize("modality, unit", [("CT", "HU"), ("MR", "real-world values")])
def test_the_case_read_carries_the_image_unit_and_reads_each_header_once(tmp_path, header_reads, modality, unit):
    files = _case_on_series(tmp_path, modality)
    header_reads.clear()
    case = load_case(files, 2, load_image=True)
    assert case.image_unit == unit
    assert len(header_reads) == 4 and set(header_reads.values()) == {1}, header_reads
    # a volume file gives its values as stored (no unit), and so does a case read without its image
    nib.save(nib.Nifti1Image(np.zeros((6, 5, 4), np.float32), case.affine), tmp_path / "image.nii.gz")
    files.image = tmp_path / "image.nii.gz"
    assert load_case(files, 2, load_image=True).image_unit is None
    assert load_case(files, 2).image_unit is None


@pytest.mark.slow  # end to end: evaluate a toy cohort, then the report page with its figures and viewer
def test_the_report_page_reads_the_series_headers_once(tmp_path, header_reads):
    from monai_unc.data.cohorts import write_toy_cohort
    from monai_unc.evaluation import EvaluationConfig, run_evaluate
    from monai_unc.report.html import build_report

    data = write_toy_cohort(tmp_path, n_cases=4, shape=(10, 10, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, summary, _ = run_evaluate(data["labels"], data["predictions"], tmp_path / "eval",
                                     EvaluationConfig(budget=0.25))
    top = summary["triage"]["order"][0]  # the one case with a viewer (n_cases=1): its image a CT series
    image, affine = read_volume(data["images"] / f"{top}.nii.gz")
    write_series(np.clip(image[0] * 100.0, -1000.0, 1000.0), affine, tmp_path / "dicom" / top, modality="CT")
    header_reads.clear()
    page = build_report(tmp_path / "eval", images=tmp_path / "dicom", n_cases=1).read_text()
    assert len(header_reads) == 10 and set(header_reads.values()) == {1}, header_reads  # read twice before
    assert re.findall(r'<span class="mu-cbar-title">(image intensity \([^)]*\))</span>', page) == [
        "image intensity (HU)"]
