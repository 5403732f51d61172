"""Hostile review 60 of the DICOM objects (identity, de-identification, Parametric Map display): defects and their
regressions."""

from __future__ import annotations

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import read_series, write_series  # noqa: E402
from monai_unc.io.dicom.objects import (  # noqa: E402
    default_segment,
    new_study,
    write_fractional_segmentation,
    write_parametric_map,
    write_segmentation,
)
from monai_unc.io.dicom.sr import write_measurement_report  # noqa: E402
from tests.io.dicom._series import dciodvfy_errors  # noqa: E402

SHAPE = (6, 5, 4)


def _series(folder, **extra):
    """A small MR series with the attributes ``extra`` on every slice, read without pixels."""
    values = np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE)
    write_series(values, np.diag([0.8, 0.8, 2.0, 1.0]), folder, modality="MR", extra=extra or None)
    return read_series(folder, pixels=False)


def _all_objects(tmp_path, series, study=None):
    """The SEG, FRACTIONAL SEG, Parametric Map and SR of one case on ``series`` (read back, with pixels)."""
    rng = np.random.default_rng(0)
    probs = rng.random((2, *SHAPE)).astype(np.float32)
    probs /= probs.sum(0)
    labels = probs.argmax(0)
    seg = write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(1)], study=study)
    frac = write_fractional_segmentation(probs, series, tmp_path / "probs.dcm", [default_segment(1)], study=study)
    pm = write_parametric_map(probs[1], series, tmp_path / "pe.dcm", "predictive_entropy", study=study)
    headers = [pydicom.dcmread(p, stop_before_pixels=True) for p in (seg, frac, pm)]
    sr = write_measurement_report(tmp_path / "sr.dcm", series, headers[0], headers[1:],
                                  segment_volumes={1: {"volume": 1.0}}, numbers={"dice": 0.5}, study=study)
    return {p.name: pydicom.dcmread(p) for p in (seg, frac, pm, sr)}


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


@pytest.mark.parametrize("marker", ["MODIFIED", "REMOVED"])
@pytest.mark.parametrize("study_mode", ["source", "new"])
def test_longitudinal_temporal_marker_is_kept(tmp_path, marker, study_mode):
    """A source de-identified with shifted dates (PS3.15 E, Retain Longitudinal Temporal Information with Modified
    Dates: LongitudinalTemporalInformationModified ``MODIFIED``, SOP Common) gave derived objects that copy its
    shifted StudyDate and PatientBirthDate but not the marker, so a reader took the shifted dates for true ones.
    Every object (SEG, FRACTIONAL SEG, Parametric Map, SR) now keeps the source's value; the objects stay valid."""
    method = pydicom.Dataset()
    method.CodeValue, method.CodingSchemeDesignator = "113107", "DCM"
    method.CodeMeaning = "Retain Longitudinal Temporal Information Modified Dates Option"
    series = _series(tmp_path / "s", PatientIdentityRemoved="YES", DeidentificationMethod="shifted dates",
                     DeidentificationMethodCodeSequence=[method], IssuerOfPatientID="TRIAL-7",
                     LongitudinalTemporalInformationModified=marker)
    objects = _all_objects(tmp_path, series, new_study(study_mode, "1.2.3."))
    for name, ds in objects.items():
        assert ds.get("LongitudinalTemporalInformationModified") == marker, name
        assert ds.PatientIdentityRemoved == "YES" and ds.DeidentificationMethod == "shifted dates", name
        assert ds.DeidentificationMethodCodeSequence[0].CodeValue == "113107", name
        assert ds.IssuerOfPatientID == "TRIAL-7" and ds.PatientID == series.datasets[0].PatientID, name
    for name in objects:
        assert dciodvfy_errors(tmp_path / name) == [], name


def test_no_marker_is_invented(tmp_path):
    """A source without the marker gives objects without it (nothing is invented)."""
    objects = _all_objects(tmp_path, _series(tmp_path / "s"))
    assert not any("LongitudinalTemporalInformationModified" in ds for ds in objects.values())


def test_slices_of_two_issuers_are_refused(tmp_path):
    """A PatientID is unique only within its IssuerOfPatientID (PS3.3 C.7.1.1): slices with one PatientID, name,
    birth date and sex from two issuers (two sites of a de-identified trial, each numbering its subjects ``ANON01``)
    were read as one patient's series and the objects named the first slice's issuer. Refused as other patients are,
    naming the files, not the values."""
    from monai_unc.io.dicom import DicomSeriesError

    files = write_series(np.zeros(SHAPE), np.eye(4), tmp_path / "s", modality="MR", patient_name="ANON01",
                         patient_id="ANON01", extra={"IssuerOfPatientID": "SITE-A"})
    ds = pydicom.dcmread(files[2])
    ds.IssuerOfPatientID = "SITE-B"
    ds.save_as(files[2])
    with pytest.raises(DicomSeriesError, match=r"differ in IssuerOfPatientID \(2 values, e\.g\. ") as refused:
        read_series(tmp_path / "s", pixels=False)
    assert "SITE-" not in str(refused.value)


def test_channels_of_two_issuers_are_refused(tmp_path):
    """The channels of a case must be one patient's: a channel of another issuer's ``ANON01`` in the same frame of
    reference was taken as the case's own."""
    from monai_unc.io.dicom import channel_on_series_grid

    session = {"study_uid": "1.2.3.4", "patient_id": "ANON01", "patient_name": "ANON01"}
    write_series(np.zeros(SHAPE), np.eye(4), tmp_path / "t1", modality="MR", **session,
                 extra={"FrameOfReferenceUID": "1.2.3.5", "IssuerOfPatientID": "SITE-A"})
    write_series(np.ones(SHAPE), np.eye(4), tmp_path / "t2", modality="MR", **session,
                 extra={"FrameOfReferenceUID": "1.2.3.5", "IssuerOfPatientID": "SITE-B"})
    with pytest.raises(ValueError, match="differs from t1 in IssuerOfPatientID: the channels of a case"):
        channel_on_series_grid(read_series(tmp_path / "t2"), read_series(tmp_path / "t1", pixels=False), "t2")


def test_a_new_study_claims_no_reading_and_no_order_of_the_source(tmp_path):
    """``--study-uid new`` empties the AccessionNumber and StudyID (they identify the source study's order) but kept
    the accession number's issuer, the physicians who read the source study and the source's ReferencedStudySequence:
    a study of AI results nobody read was listed as read by the source's radiologist (a worklist of unread studies
    left it out), with an issuer of an accession number it does not have. They are left out of a new study; the
    source study keeps them (objects in it copy them), and the patient, referring physician and description stay."""
    issuer = pydicom.Dataset()
    issuer.LocalNamespaceEntityID = "RIS-A"
    order = pydicom.Dataset()
    order.ReferencedSOPClassUID, order.ReferencedSOPInstanceUID = "1.2.840.10008.3.1.2.3.1", "1.2.3.99"
    reader = pydicom.Dataset()
    reader.PersonIdentificationCodeSequence = []
    reader.InstitutionName = "Hospital"
    study = {"AccessionNumber": "A123", "IssuerOfAccessionNumberSequence": [issuer],
             "NameOfPhysiciansReadingStudy": "Reader^Rita", "PhysiciansReadingStudyIdentificationSequence": [reader],
             "ReferencedStudySequence": [order], "ReferringPhysicianName": "Referring^Ray",
             "StudyDescription": "MR brain"}
    series = _series(tmp_path / "s", **study)
    moved = _all_objects(tmp_path, series, new_study("new", "1.2.3."))
    for name, ds in moved.items():
        assert ds.AccessionNumber == "" and ds.StudyInstanceUID != series.datasets[0].StudyInstanceUID, name
        for key in ("IssuerOfAccessionNumberSequence", "NameOfPhysiciansReadingStudy",
                    "PhysiciansReadingStudyIdentificationSequence", "ReferencedStudySequence"):
            assert key not in ds, (name, key)
        assert ds.ReferringPhysicianName == "Referring^Ray" and ds.StudyDescription == "MR brain", name
        assert dciodvfy_errors(tmp_path / name) == [], name
    kept = _all_objects(tmp_path, series)
    for name, ds in kept.items():
        assert ds.AccessionNumber == "A123" and ds.NameOfPhysiciansReadingStudy == "Reader^Rita", name
        assert ds.IssuerOfAccessionNumberSequence[0].LocalNamespaceEntityID == "RIS-A", name
        assert ds.ReferencedStudySequence[0].ReferencedSOPInstanceUID == "1.2.3.99", name
    assert "NameOfPhysiciansReadingStudy" in series.datasets[0]  # the source's headers stay as read


def test_segment_volumes_hold_one_mask_at_a_time(tmp_path, monkeypatch):
    """The SR's segment volumes were computed from a list of every class's mask, made at once: a byte per voxel and
    class (a 104-class CT segmentation of 1000 slices of 512 x 512: 27 GB beside the label map). One mask is made at
    a time now; the volumes are the same (voxels times the voxel volume)."""
    import weakref

    import nibabel as nib

    import monai_unc.workflows.dicom as workflow
    from monai_unc.workflows.dicom import dicom_export

    write_series(np.zeros(SHAPE), np.diag([0.8, 0.9, 2.5, 1.0]), tmp_path / "series" / "c0", modality="CT")
    grid = read_series(tmp_path / "series" / "c0", pixels=False)
    (tmp_path / "pred").mkdir()
    labels = (np.arange(np.prod(SHAPE)) % 9).reshape(SHAPE).astype(np.uint8)  # classes 0 .. 8
    nib.save(nib.Nifti1Image(labels, grid.affine), tmp_path / "pred" / "c0_seg.nii.gz")
    alive, volume_ml = [], workflow.segment_volume_ml

    def counting(mask, spacing):
        alive.append(sum(ref() is not None for ref in refs))
        refs.append(weakref.ref(mask))
        return volume_ml(mask, spacing)

    refs: list = []
    monkeypatch.setattr(workflow, "segment_volume_ml", counting)
    dicom_export(tmp_path / "pred", tmp_path / "series", tmp_path / "out", progress=False)
    assert len(alive) == 8 and max(alive) == 0, alive  # no earlier mask alive when the next one is measured
    sr = pydicom.dcmread(tmp_path / "out" / "c0" / "sr.dcm")
    got = sorted(float(item.MeasuredValueSequence[0].NumericValue)
                 for group in sr.ContentSequence if group.ConceptNameCodeSequence[0].CodeValue == "126010"
                 for sub in group.ContentSequence if sub.ValueType == "CONTAINER"
                 for item in sub.ContentSequence if item.ValueType == "NUM")
    voxel_ml = 0.8 * 0.9 * 2.5 / 1000
    assert got == pytest.approx(sorted(np.count_nonzero(labels == c) * voxel_ml for c in range(1, 9)))


@pytest.mark.parametrize("source, written", [("YES", "YES"), ("NO", "NO"), (None, "NO")])
def test_recognizable_visual_features_of_the_source_are_not_denied(tmp_path, source, written):
    """A head MR stating RecognizableVisualFeatures ``YES`` (a face can be rendered from it, PS3.15 E) gave a
    Parametric Map stating ``NO``, and SEGs stating nothing, though they lie voxel for voxel on its grid (a whole-head
    segmentation or its uncertainty outlines the face): a de-identification step trusting the attribute passed them
    unchanged. The image objects keep the source's ``YES``; a source stating ``NO`` or nothing gives the map's
    ``NO`` as before (the SR holds no image)."""
    series = _series(tmp_path / "s", **({"RecognizableVisualFeatures": source} if source else {}))
    objects = _all_objects(tmp_path, series)
    assert objects["pe.dcm"].RecognizableVisualFeatures == written
    for name in ("seg.dcm", "probs.dcm"):
        assert objects[name].get("RecognizableVisualFeatures") == ("YES" if source == "YES" else None), name
    assert "RecognizableVisualFeatures" not in objects["sr.dcm"]
    for name in objects:
        assert dciodvfy_errors(tmp_path / name) == [], name


def _device_uid(path):
    """The Device Observer UID (DCM 121012) of an SR's observation context."""
    sr = pydicom.dcmread(path)
    return next(str(item.UID) for item in sr.ContentSequence
                if item.ConceptNameCodeSequence[0].CodeValue == "121012")


def test_the_device_observer_uid_names_the_device_not_the_report(tmp_path):
    """The SR's observer is the device (the model) that made the results (TID 1004), but every report got a new
    Device Observer UID: reports of one model could not be told to come from one device (an archive grouping AI
    results by their device listed each report as another device). It is the same for one algorithm (name, version,
    weights), another for another, under ``uid_root``."""
    from monai_unc.io.dicom.objects import AlgorithmInfo

    series = _series(tmp_path / "s")
    seg = pydicom.dcmread(write_segmentation(np.ones(SHAPE, int), series, tmp_path / "seg.dcm", [default_segment(1)]))

    def report(name, algorithm, root="1.2.826.0.1.3680043.10.543."):
        return _device_uid(write_measurement_report(tmp_path / name, series, seg, [], segment_volumes={},
                                                    numbers={"dice": 0.5}, algorithm=algorithm, uid_root=root))

    model = AlgorithmInfo(name="brats-net", version="1.0", weights="ab" * 32)
    first, again = report("a.dcm", model), report("b.dcm", AlgorithmInfo(name="brats-net", version="1.0",
                                                                          weights="ab" * 32))
    assert first == again and first.startswith("1.2.826.0.1.3680043.10.543.")
    assert report("c.dcm", AlgorithmInfo(name="brats-net", version="1.0", weights="cd" * 32)) != first
    assert report("d.dcm", AlgorithmInfo(name="brats-net", version="1.1", weights="ab" * 32)) != first
    assert report("e.dcm", model, root=None) != first  # another root, another UID
