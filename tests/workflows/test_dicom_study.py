"""``--study-uid source|new``: the derived objects in the source series' study (default) or in a new one per case.

Both are dciodvfy-clean; in a new study every object of the case (SEG, FRACTIONAL SEG, Parametric Map, SR) shares the
one new StudyInstanceUID, the patient stays the source's, the order identification (StudyID, AccessionNumber) is
left empty, and the SR still references the source images in their own study.
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io.dicom import new_study, read_series  # noqa: E402
from tests._ranks import run_cli_forked  # noqa: E402
from tests.io.dicom._series import GEOMETRIES, dciodvfy_errors, make_series, mni_small  # noqa: E402


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    make_series(root / "series" / "c1", "anisotropic_ct", patient_name="Doe^Jane")
    _, label, probs = mni_small()
    affine = GEOMETRIES["anisotropic_ct"][1]
    pred = root / "pred"
    pred.mkdir()
    nib.save(nib.Nifti1Image(label.astype(np.uint8), affine), pred / "c1_seg.nii.gz")
    nib.save(nib.Nifti1Image(np.moveaxis(probs, 0, -1), affine), pred / "c1_probs.nii.gz")
    nib.save(nib.Nifti1Image(probs[0].astype(np.float32), affine), pred / "c1_variance.nii.gz")
    return root


def _headers(folder):
    return {p.name: pydicom.dcmread(p, stop_before_pixels=True) for p in sorted(folder.iterdir())}


def _evidence_studies(sr):
    out = {}
    for name in ("CurrentRequestedProcedureEvidenceSequence", "PertinentOtherEvidenceSequence"):
        for study in sr.get(name, []):
            out.setdefault(str(study.StudyInstanceUID), set()).update(
                str(s.SeriesInstanceUID) for s in study.ReferencedSeriesSequence)
    return out


@pytest.mark.parametrize("mode", ["source", "new"])
def test_study_uid_modes(source, mode):
    out = source / f"out_{mode}"
    assert main(["dicom-export", "-p", str(source / "pred"), "-s", str(source / "series"), "-o", str(out),
                 "--study-uid", mode, "-q"]) == 0
    series = read_series(source / "series" / "c1", pixels=False)
    src = series.datasets[0]
    headers = _headers(out / "c1")
    assert sorted(headers) == ["probabilities.dcm", "seg.dcm", "sr.dcm", "variance.dcm"]
    for name in headers:
        assert dciodvfy_errors(out / "c1" / name) == [], name
    studies = {str(ds.StudyInstanceUID) for ds in headers.values()}
    assert len(studies) == 1  # every object of the case in one study
    study = studies.pop()
    for ds in headers.values():
        assert (str(ds.PatientName), ds.PatientID, ds.PatientBirthDate) == (str(src.PatientName), src.PatientID,
                                                                            src.PatientBirthDate)
        if mode == "source":
            assert (ds.StudyID, ds.AccessionNumber) == (src.StudyID, src.AccessionNumber)
        else:
            assert (ds.StudyID, ds.AccessionNumber) == ("", "") and len(ds.StudyDate) == 8
    assert (study == str(src.StudyInstanceUID)) == (mode == "source")
    evidence = _evidence_studies(headers["sr.dcm"])
    assert series.series_uid in evidence[str(src.StudyInstanceUID)]  # the source images, in their own study
    assert str(headers["seg.dcm"].SeriesInstanceUID) in evidence[study]
    manifest = json.loads((out / "dicom_export.json").read_text())
    assert manifest["study_uid"] == mode and manifest["cases"]["c1"]["study_instance_uid"] == study
    assert {o["study_instance_uid"] for o in manifest["cases"]["c1"]["objects"]} == {study}


def test_new_study_checks_the_mode_and_gives_each_call_its_own_uid():
    with pytest.raises(ValueError, match="study_uid must be one of"):
        new_study("same")
    a, b = new_study("new", "1.2.3."), new_study("new", "1.2.3.")
    assert a["StudyInstanceUID"] != b["StudyInstanceUID"] and a["StudyInstanceUID"].startswith("1.2.3.")


@pytest.mark.skipif(not hasattr(__import__("time"), "tzset"), reason="TZ needs time.tzset")
def test_a_new_study_is_dated_as_its_source_study_in_any_local_zone(source, tmp_path):
    """The new study's StudyDate / StudyTime were the export's, written in UTC while the objects' ContentDate /
    ContentTime (highdicom) were local (found by hostile testing); since review 61 they are the source study's (a
    source with shifted dates gave a new study of today's date beside them), whatever the local zone."""
    import time

    out = tmp_path / "out"
    # another process (a copy of this one: no interpreter start-up) in another local zone, set before its run
    rc, err = run_cli_forked(["dicom-export", "-p", str(source / "pred"), "-s", str(source / "series"), "-o",
                              str(out), "--study-uid", "new", "-q"], env={"TZ": "Pacific/Chatham"}, before=time.tzset)
    assert rc == 0, err[-2000:]
    src = read_series(source / "series" / "c1", pixels=False).datasets[0]
    for name, ds in _headers(out / "c1").items():
        assert (ds.StudyDate, ds.StudyTime) == (src.StudyDate, src.StudyTime), name


def _referenced_series(ds):
    """``{study: {series}}`` of a SEG's or Parametric Map's Common Instance Reference (its own study: '')."""
    out = {"": {str(s.SeriesInstanceUID) for s in ds.get("ReferencedSeriesSequence", [])}}
    for study in ds.get("StudiesContainingOtherReferencedInstancesSequence", []):
        out.setdefault(str(study.StudyInstanceUID), set()).update(
            str(s.SeriesInstanceUID) for s in study.ReferencedSeriesSequence)
    return out


@pytest.mark.parametrize("mode", ["source", "new"])
def test_objects_reference_the_source_series_in_its_own_study(source, tmp_path, mode):
    """With ``new`` the SEG and Parametric Maps reference the source series, in another study, but named that study
    nowhere: StudiesContainingOtherReferencedInstancesSequence (PS3.3 C.12.2, type 1C when other studies are
    referenced) was absent, so a reader resolving the references looked for the source images in the new study
    (found by hostile testing). ReferencedSeriesSequence stays (OHIF drops a SEG without it). The SEG still reads
    back as the labels of its series (``evaluate --images``)."""
    from monai_unc.io.dicom import read_segmentation_labels

    out = tmp_path / "out"
    assert main(["dicom-export", "-p", str(source / "pred"), "-s", str(source / "series"), "-o", str(out),
                 "--study-uid", mode, "-q"]) == 0
    series = read_series(source / "series" / "c1", pixels=False)
    src_study = str(series.datasets[0].StudyInstanceUID)
    headers = _headers(out / "c1")
    expected = {"": {series.series_uid}} if mode == "source" else {"": {series.series_uid},
                                                                    src_study: {series.series_uid}}
    for name in ("seg.dcm", "probabilities.dcm", "variance.dcm"):
        assert _referenced_series(headers[name]) == expected, name
        assert dciodvfy_errors(out / "c1" / name) == [], name
    label = nib.load(source / "pred" / "c1_seg.nii.gz").get_fdata()
    assert np.array_equal(read_segmentation_labels(out / "c1" / "seg.dcm", series), label)
