"""Review 61 of the DICOM objects' dates, zones and references: defects and their regressions.

- the source's TimezoneOffsetFromUTC was not copied: the objects' dates (copied from the source) were read in the
  reader's zone, and their own ContentDate / InstanceCreationDate were the machine's local time;
- ``--study-uid new`` dated the new study today beside the source's (shifted) dates;
- a case of several input channels referenced only channel 0's series.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io.cases import input_digests  # noqa: E402
from monai_unc.io.dicom import new_study, read_series, write_series  # noqa: E402
from monai_unc.io.dicom.objects import (  # noqa: E402
    check_other_series,
    default_segment,
    source_zone,
    write_fractional_segmentation,
    write_parametric_map,
    write_segmentation,
)
from monai_unc.io.dicom.sr import write_measurement_report  # noqa: E402
from tests.io.dicom._series import dciodvfy_errors  # noqa: E402

SHAPE = (6, 5, 4)
AFFINE = np.diag([0.8, 0.8, 2.0, 1.0])
#: the same grid with its slices stored the other way round
FLIP = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, -1, SHAPE[2] - 1], [0, 0, 0, 1.0]])
STUDY, FRAME = "1.2.826.0.1.3680043.10.761.1", "1.2.826.0.1.3680043.10.761.2"
#: a de-identified source: dates shifted (to 1999), said so, in a zone far from UTC
SHIFTED = {"TimezoneOffsetFromUTC": "+0930", "LongitudinalTemporalInformationModified": "MODIFIED",
           "StudyDate": "19990203", "StudyTime": "101500", "SeriesDate": "19990203", "SeriesTime": "101500",
           "ContentDate": "19990203", "ContentTime": "101500", "FrameOfReferenceUID": FRAME}


def _write(folder, flip=False, study=STUDY, **extra):
    values = np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE)
    if flip:
        write_series(values[:, :, ::-1], AFFINE @ FLIP, folder, modality="MR", study_uid=study,
                     extra={**SHIFTED, **extra})
    else:
        write_series(values, AFFINE, folder, modality="MR", study_uid=study, extra={**SHIFTED, **extra})
    return read_series(folder, pixels=False)


def _objects(tmp_path, series, study=None, other_series=()):
    """The SEG, FRACTIONAL SEG, Parametric Map and SR of one case on ``series``, read back (headers)."""
    rng = np.random.default_rng(0)
    probs = rng.random((2, *SHAPE)).astype(np.float32)
    probs /= probs.sum(0)
    kw = {"study": study, "other_series": other_series}
    seg = write_segmentation(probs.argmax(0), series, tmp_path / "seg.dcm", [default_segment(1)], **kw)
    frac = write_fractional_segmentation(probs, series, tmp_path / "probs.dcm", [default_segment(1)], **kw)
    pm = write_parametric_map(probs[1], series, tmp_path / "pe.dcm", "predictive_entropy", **kw)
    headers = [pydicom.dcmread(p, stop_before_pixels=True) for p in (seg, frac, pm)]
    sr = write_measurement_report(tmp_path / "sr.dcm", series, headers[0], headers[1:],
                                  segment_volumes={1: {"volume": 1.0}}, numbers={"dice": 0.5}, **kw)
    return {p.name: pydicom.dcmread(p, stop_before_pixels=True) for p in (seg, frac, pm, sr)}


def _instant(date: str, time: str, zone: timezone) -> datetime:
    return datetime.strptime(date + time[:6], "%Y%m%d%H%M%S").replace(tzinfo=zone)


def test_the_objects_state_the_source_zone_and_their_own_times_in_it(tmp_path):
    """No object stated the source's TimezoneOffsetFromUTC (+0930): its copied StudyDate was read in the reader's
    zone, and its ContentDate / InstanceCreationDate were the machine's local time. Now the zone is copied and the
    object's own times are that instant in that zone (of a source whose dates are not shifted: an object of a
    MODIFIED one is dated on the source's timeline, test_review63_dicom)."""
    series = _write(tmp_path / "s", LongitudinalTemporalInformationModified="UNMODIFIED")
    before = datetime.now(timezone.utc) - timedelta(seconds=2)
    objects = _objects(tmp_path, series)
    after = datetime.now(timezone.utc) + timedelta(seconds=2)
    zone = timezone(timedelta(hours=9, minutes=30))
    for name, ds in objects.items():
        assert ds.get("TimezoneOffsetFromUTC") == "+0930", name
        for date, time in (("ContentDate", "ContentTime"), ("InstanceCreationDate", "InstanceCreationTime")):
            when = _instant(ds[date].value, str(ds[time].value), zone)
            assert before - timedelta(seconds=1) <= when <= after, (name, date, when)
        # highdicom's own contribution (the object's making), local time too: in the zone as well
        made = [e.ContributionDateTime for e in ds.ContributingEquipmentSequence
                if e.get("ManufacturerModelName") == "highdicom"]
        assert len(made) == 1, name
        when = datetime.strptime(str(made[0])[:14], "%Y%m%d%H%M%S").replace(tzinfo=zone)
        assert before - timedelta(seconds=1) <= when <= after, (name, made[0])
        assert dciodvfy_errors(tmp_path / name) == [], name


@pytest.mark.parametrize("offset", [None, "+2500", "0930", ""])
def test_no_zone_or_an_invalid_one_is_not_copied(tmp_path, offset):
    extra = {"TimezoneOffsetFromUTC": offset} if offset is not None else {}
    # not shifted: an object of a MODIFIED source is dated on the source's timeline (test_review63_dicom)
    series = _write(tmp_path / "s", LongitudinalTemporalInformationModified="UNMODIFIED", **extra)
    if offset is None:
        for ds in series.datasets:
            del ds.TimezoneOffsetFromUTC
    assert source_zone(series.datasets[0]) is None
    before = datetime.now() - timedelta(seconds=2)
    objects = _objects(tmp_path, series)
    for name, ds in objects.items():
        assert "TimezoneOffsetFromUTC" not in ds, name
        when = datetime.strptime(ds.ContentDate + str(ds.ContentTime)[:6], "%Y%m%d%H%M%S")
        assert before - timedelta(seconds=1) <= when <= datetime.now() + timedelta(seconds=2), name  # local time


def test_a_new_study_of_a_shifted_source_is_dated_as_the_source_study(tmp_path):
    """``--study-uid new`` dated the new study today (20261206...) beside the source's shifted dates (1999) in
    objects that say MODIFIED: a reader took today's date for a shifted one, or learnt the shift."""
    series = _write(tmp_path / "s")
    today = {datetime.now().strftime("%Y%m%d"), datetime.now(timezone.utc).strftime("%Y%m%d"),
             datetime.now(timezone(timedelta(hours=9, minutes=30))).strftime("%Y%m%d")}
    study = new_study("new", "1.2.826.0.1.3680043.10.761.", source=series.datasets[0])
    objects = _objects(tmp_path, series, study)
    uids = {str(ds.StudyInstanceUID) for ds in objects.values()}
    assert uids == {study["StudyInstanceUID"]} and STUDY not in uids
    for name, ds in objects.items():
        assert (ds.StudyDate, ds.StudyTime) == ("19990203", "101500"), name
        assert ds.LongitudinalTemporalInformationModified == "MODIFIED"
        assert ds.StudyDate not in today
        assert dciodvfy_errors(tmp_path / name) == [], name


def test_new_study_takes_a_given_time_in_the_source_zone():
    series_first = pydicom.Dataset()
    series_first.TimezoneOffsetFromUTC = "-0500"
    when = datetime(2024, 5, 1, 3, 30, tzinfo=timezone.utc)
    study = new_study("new", "1.2.3.", when, source=series_first)
    assert (study["StudyDate"], study["StudyTime"]) == ("20240430", "223000")


def _export_source(root, channels: int = 2, absent: bool = False):
    """A case of ``channels`` input channels (one series each, channel 1 stored the other way round), predicted as
    infer records it, for dicom-export."""
    names = [f"c1_{c:04d}" for c in range(channels)]
    for c, name in enumerate(names):
        _write(root / "series" / name, flip=c % 2 == 1)
    series = read_series(root / "series" / names[0], pixels=False)
    pred = root / "pred"
    pred.mkdir()
    rng = np.random.default_rng(1)
    probs = rng.random((3, *SHAPE)).astype(np.float32)
    probs /= probs.sum(0)
    nib.save(nib.Nifti1Image(probs.argmax(0).astype(np.uint8), series.affine), pred / "c1_seg.nii.gz")
    nib.save(nib.Nifti1Image(np.moveaxis(probs, 0, -1), series.affine), pred / "c1_probs.nii.gz")
    nib.save(nib.Nifti1Image(probs[0], series.affine), pred / "c1_variance.nii.gz")
    record = {"inputs": names, "input_digests": input_digests([root / "series" / n for n in names])}
    (pred / "c1.json").write_text(json.dumps(record))
    return [read_series(root / "series" / n, pixels=False) for n in names]


@pytest.mark.parametrize("mode", ["source", "new"])
def test_every_input_channel_series_is_referenced(tmp_path, mode):
    """A case predicted from two series (T1, T2) named only channel 0's in its objects' ReferencedSeriesSequence,
    frames' source images and the SR's evidence; the T2 was nowhere. Now every channel's series is referenced, each
    frame naming the slice of each series in its plane."""
    channels = _export_source(tmp_path)
    out = tmp_path / "out"
    assert main(["dicom-export", "-p", str(tmp_path / "pred"), "-s", str(tmp_path / "series"), "-o", str(out),
                 "--study-uid", mode, "-q"]) == 0
    uids = {s.series_uid for s in channels}
    position = {str(ds.SOPInstanceUID): tuple(round(float(v), 3) for v in ds.ImagePositionPatient)
                for s in channels for ds in s.datasets}
    for name in ("seg.dcm", "probabilities.dcm", "variance.dcm", "sr.dcm"):
        ds = pydicom.dcmread(out / "c1" / name)
        assert dciodvfy_errors(out / "c1" / name) == [], name
        if name == "sr.dcm":
            evidence = {str(s.SeriesInstanceUID) for study in ds.CurrentRequestedProcedureEvidenceSequence
                        for s in study.ReferencedSeriesSequence
                        if str(study.StudyInstanceUID) == STUDY}
            evidence |= {str(s.SeriesInstanceUID) for study in ds.get("PertinentOtherEvidenceSequence", [])
                         for s in study.ReferencedSeriesSequence if str(study.StudyInstanceUID) == STUDY}
            assert uids <= evidence
            continue
        assert {str(s.SeriesInstanceUID) for s in ds.ReferencedSeriesSequence} == uids, name
        for frame in ds.PerFrameFunctionalGroupsSequence:
            sources = frame.DerivationImageSequence[0].SourceImageSequence
            assert len(sources) == 2, name
            here = tuple(round(float(v), 3) for v in frame.PlanePositionSequence[0].ImagePositionPatient)
            assert {position[str(s.ReferencedSOPInstanceUID)] for s in sources} == {here}, name
        if mode == "new":
            other = {str(s.SeriesInstanceUID) for study in ds.StudiesContainingOtherReferencedInstancesSequence
                     if str(study.StudyInstanceUID) == STUDY for s in study.ReferencedSeriesSequence}
            assert other == uids, name


def test_a_channel_of_another_study_is_referenced_in_its_study(tmp_path):
    series = _write(tmp_path / "s0")
    other = _write(tmp_path / "s1", study="1.2.826.0.1.3680043.10.761.9")
    objects = _objects(tmp_path, series, other_series=[other, series, other])
    for name, ds in objects.items():
        assert dciodvfy_errors(tmp_path / name) == [], name
        if name == "sr.dcm":
            continue
        elsewhere = {str(study.StudyInstanceUID): {str(s.SeriesInstanceUID) for s in study.ReferencedSeriesSequence}
                     for study in ds.StudiesContainingOtherReferencedInstancesSequence}
        assert elsewhere == {"1.2.826.0.1.3680043.10.761.9": {other.series_uid}}, name
        refs = {str(r.ReferencedSOPInstanceUID) for r in ds.SourceImageSequence}
        assert {str(d.SOPInstanceUID) for d in other.datasets} <= refs, name


def test_other_series_is_checked(tmp_path):
    series = _write(tmp_path / "s0")
    stranger = _write(tmp_path / "s1", FrameOfReferenceUID="1.2.826.0.1.3680043.10.761.77")
    with pytest.raises(ValueError, match="other_series: .*FrameOfReferenceUID"):
        check_other_series([stranger], series)
    with pytest.raises(TypeError, match="other_series"):
        check_other_series(series, series)
    with pytest.raises(TypeError, match="other_series"):
        write_parametric_map(np.zeros(SHAPE), series, tmp_path / "pe.dcm", "variance", other_series=["s1"])
    assert not (tmp_path / "pe.dcm").exists()


def test_a_seg_referencing_every_channel_reads_back_on_each_series(tmp_path):
    """The SEG reader took a frame's reference to the T2's slice for a missing slice of the T1 series and refused
    the SEG of a two-channel case; the references it lists under another series are passed over, one it lists
    nowhere is still refused."""
    from monai_unc.io.dicom import DicomSegError, read_segmentation_labels

    series, other = _write(tmp_path / "s0"), _write(tmp_path / "s1", flip=True)
    labels = np.zeros(SHAPE, np.uint8)
    labels[1:4, 1:3, :] = 1
    labels[0, 0, 1:3] = 2
    path = write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(1), default_segment(2)],
                              other_series=[other])
    np.testing.assert_array_equal(read_segmentation_labels(path, series), labels)
    ds = pydicom.dcmread(path)
    ds.ReferencedSeriesSequence = [r for r in ds.ReferencedSeriesSequence if r.SeriesInstanceUID != other.series_uid]
    ds.save_as(tmp_path / "unlisted.dcm")
    with pytest.raises(DicomSegError, match="not in the series"):
        read_segmentation_labels(tmp_path / "unlisted.dcm", series)


def test_nnunet_layout_references_every_channel_and_warns_of_a_missing_one(tmp_path, capsys):
    """``--layout nnunet`` of a model of two channels (its dataset.json): ``<case>_0001/`` is referenced beside
    ``<case>_0000/``; without it the objects reference channel 0's and a warning says so."""
    channels = _export_source(tmp_path)
    pred = tmp_path / "pred"
    (pred / "c1.json").unlink()
    (pred / "c1_seg.nii.gz").rename(pred / "c1.nii.gz")
    (pred / "c1_probs.nii.gz").unlink()
    (pred / "c1_variance.nii.gz").unlink()
    (pred / "dataset.json").write_text(json.dumps({"channel_names": {"0": "T1", "1": "T2"},
                                                   "labels": {"background": 0, "a": 1, "b": 2},
                                                   "file_ending": ".nii.gz"}))
    out = tmp_path / "out"
    assert main(["dicom-export", "--layout", "nnunet", "-p", str(pred), "-s", str(tmp_path / "series"), "-o",
                 str(out), "-q"]) == 0
    seg = pydicom.dcmread(out / "c1" / "seg.dcm", stop_before_pixels=True)
    assert {str(s.SeriesInstanceUID) for s in seg.ReferencedSeriesSequence} == {s.series_uid for s in channels}
    import shutil

    shutil.rmtree(tmp_path / "series" / "c1_0001")
    capsys.readouterr()
    assert main(["dicom-export", "--layout", "nnunet", "-p", str(pred), "-s", str(tmp_path / "series"), "-o",
                 str(tmp_path / "out2"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "no series folder" in err and "c1_0001 of input channel 1" in err, err
    seg = pydicom.dcmread(tmp_path / "out2" / "c1" / "seg.dcm", stop_before_pixels=True)
    assert [str(s.SeriesInstanceUID) for s in seg.ReferencedSeriesSequence] == [channels[0].series_uid]
