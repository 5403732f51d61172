"""Review 64 of the DICOM export: the SR of several series, texts counted in bytes, sources without dates.

- the SR of a case of several input series listed every slice of every series in every segment's group (TID 1411
  "Source image for segmentation"): 2 series x 150 slices x 10 segments were 3000 items and 10 s of highdicom;
- a user's name of 64 characters but more bytes (``Ödem ...``) passed the check of 64 characters, and dciodvfy
  rejected the objects (an LO of over 64 bytes), where the defaults the export shortens were cut to 64 bytes;
- a source whose de-identification removed its dates (``REMOVED``, PS3.15 E.1.1) gave its derived objects the time
  of writing as their ContentDate and InstanceCreationDate.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")

from pydicom.dataset import Dataset  # noqa: E402

from monai_unc.io.dicom import read_series, write_series  # noqa: E402
from monai_unc.io.dicom.objects import (  # noqa: E402
    AlgorithmInfo,
    check_series_description,
    dates_removed,
    default_segment,
    read_segment_specs,
    write_fractional_segmentation,
    write_parametric_map,
    write_segmentation,
)
from monai_unc.io.dicom.sr import write_measurement_report  # noqa: E402
from tests.io.dicom._series import dciodvfy_errors  # noqa: E402

SHAPE = (5, 4, 3)
AFFINE = np.diag([0.8, 0.8, 2.0, 1.0])
FRAME = {"FrameOfReferenceUID": "1.2.826.0.1.3680043.10.763.2"}
STUDY = "1.2.826.0.1.3680043.10.763.1"


def _two_channels(tmp_path, slices=3):
    shape = (*SHAPE[:2], slices)
    values = np.arange(np.prod(shape), dtype=float).reshape(shape)
    for name in ("t1", "t2"):
        write_series(values, AFFINE, tmp_path / name, modality="MR", study_uid=STUDY, extra=FRAME)
    return read_series(tmp_path / "t1", pixels=False), read_series(tmp_path / "t2", pixels=False)


def _items(seq) -> int:
    return sum(1 + _items(item.get("ContentSequence", [])) for item in seq)


def _report(tmp_path, series, other, segments):
    labels = (np.arange(np.prod(series.shape)).reshape(series.shape) % (segments + 1)).astype(np.uint8)
    seg = write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(c) for c in range(1, segments + 1)],
                             other_series=[other])
    header = pydicom.dcmread(seg, stop_before_pixels=True)
    return write_measurement_report(tmp_path / "sr.dcm", series, header, [], numbers={},
                                    segment_volumes={c: {"volume": 0.1} for c in range(1, segments + 1)},
                                    other_series=[other])


def test_the_report_of_several_series_does_not_repeat_their_slices_per_segment(tmp_path):
    """Before: each segment's group listed every slice of both series (3 segments x 2 series x 5 slices: 30 items,
    growing as segments x slices). Now each names the series the SEG lies on ("Source series for segmentation",
    which TID 1411 takes once, instead of the images) and every slice of both series is in the evidence once."""
    series, other = _two_channels(tmp_path, slices=5)
    path = _report(tmp_path, series, other, segments=3)
    assert dciodvfy_errors(path) == []
    report = hd.sr.srread(path)
    groups = report.content.get_volumetric_roi_measurement_groups()
    assert len(groups) == 3
    for group in groups:
        ref = group.referenced_segment
        assert ref.source_images_for_segmentation == []
        assert str(ref.source_series_for_segmentation.value) == series.series_uid
    evidence = {str(i.ReferencedSOPInstanceUID): str(s.SeriesInstanceUID)
                for s in report.CurrentRequestedProcedureEvidenceSequence[0].ReferencedSeriesSequence
                for i in s.ReferencedSOPSequence}
    wanted = {str(ds.SOPInstanceUID): s.series_uid for s in (series, other) for ds in s.datasets}
    assert {k: v for k, v in evidence.items() if k in wanted} == wanted
    # the content grows with the segments, not with segments x slices
    small = _items(pydicom.dcmread(path).ContentSequence)
    assert small < 80, small


def test_a_user_text_over_64_bytes_is_refused_naming_its_bytes(tmp_path):
    """Before: 64 characters of 74 bytes passed (characters were counted) and the objects held an LO of 74 bytes,
    which dciodvfy rejects; the defaults were cut to 64 bytes. A user's text is now held to the same bytes."""
    text = "Ödem über äußerem Übergang größerer Läsionsgrenze älterer Öffnung"[:64]
    assert len(text) == 64 and len(text.encode()) == 74
    for make in (lambda: check_series_description(text, "x"), lambda: default_segment(1, "x").__class__(
            1, text, default_segment(1).category, default_segment(1).type)):
        with pytest.raises(ValueError, match=r"64 characters \(bytes of UTF-8.*\(74 bytes\)"):
            make()
    with pytest.raises(ValueError, match=r"algorithm name .*\(74 bytes\)"):
        AlgorithmInfo(name=text)
    (tmp_path / "s.json").write_text(json.dumps({"1": {"name": text}}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"entry 1: name .*\(74 bytes\)"):
        read_segment_specs(tmp_path / "s.json", [1])
    fits = text[:55]  # 64 bytes: written whole, valid
    assert len(fits.encode()) == 64
    series, _ = _two_channels(tmp_path)
    path = write_segmentation(np.ones(series.shape, np.uint8), series, tmp_path / "seg.dcm",
                              [default_segment(1, fits)], series_description=fits)
    ds = pydicom.dcmread(path, stop_before_pixels=True)
    assert ds.SeriesDescription == fits and ds.SegmentSequence[0].SegmentLabel == fits
    assert dciodvfy_errors(path) == []


#: a source de-identified with the Basic Profile, its dates removed (emptied)
REMOVED = {"LongitudinalTemporalInformationModified": "REMOVED", "PatientIdentityRemoved": "YES",
           "DeidentificationMethod": "Basic Application Confidentiality Profile",
           "StudyDate": "", "StudyTime": "", "SeriesDate": "", "SeriesTime": "", "ContentDate": "",
           "ContentTime": "", "PatientBirthDate": ""}


def _dates(ds, out=None):
    out = [] if out is None else out
    for elem in ds:
        if elem.VR in ("DA", "DT", "TM") and elem.value not in (None, ""):
            out.append((elem.keyword, str(elem.value)))
        elif elem.VR == "SQ":
            for item in elem.value:
                _dates(item, out)
    return out


def _objects(tmp_path, series):
    probs = np.stack([np.full(series.shape, 0.25), np.full(series.shape, 0.75)]).astype(np.float32)
    seg = write_segmentation(probs.argmax(0), series, tmp_path / "seg.dcm", [default_segment(1)])
    frac = write_fractional_segmentation(probs, series, tmp_path / "probs.dcm", [default_segment(1)])
    pm = write_parametric_map(probs[1], series, tmp_path / "pe.dcm", "predictive_entropy")
    headers = [pydicom.dcmread(p, stop_before_pixels=True) for p in (seg, frac, pm)]
    sr = write_measurement_report(tmp_path / "sr.dcm", series, headers[0], headers[1:],
                                  segment_volumes={1: {"volume": 1.0}}, numbers={"dice": 0.5})
    return {p.name: pydicom.dcmread(p) for p in (seg, frac, pm, sr)}


def _this_year() -> set[str]:
    now = datetime.now(timezone.utc)
    return {(now + timedelta(hours=h)).strftime("%Y") for h in (-14, 0, 14)}


def test_objects_of_a_source_without_dates_hold_no_time_of_writing(tmp_path):
    """Before: ContentDate, InstanceCreationDate and ContributionDateTime were the time of writing in objects that
    copy PatientIdentityRemoved YES and REMOVED from a source the de-identification left without dates. Now the
    dates of the objects' making are left out and their ContentDate / Time (type 1) are a dummy, with a warning."""
    write_series(np.zeros(SHAPE), AFFINE, tmp_path / "s", modality="MR", extra=REMOVED)
    series = read_series(tmp_path / "s", pixels=False)
    with pytest.warns(UserWarning, match="dates were removed"):
        objects = _objects(tmp_path, series)
    for name, ds in objects.items():
        assert ds.LongitudinalTemporalInformationModified == "REMOVED", name
        assert _dates(ds) == [("ContentDate", "19000101"), ("ContentTime", "000000")], (name, _dates(ds))
        assert dciodvfy_errors(tmp_path / name) == [], name


def test_a_source_with_dummy_dates_dates_the_objects_at_them(tmp_path):
    """The dummies a de-identification left (the Basic Profile's D action) date the objects, none of this year."""
    write_series(np.zeros(SHAPE), AFFINE, tmp_path / "s", modality="MR",
                 extra={**REMOVED, "StudyDate": "19000101", "StudyTime": "000000", "SeriesDate": "19000101",
                        "SeriesTime": "000100"})
    objects = _objects(tmp_path, read_series(tmp_path / "s", pixels=False))
    for name, ds in objects.items():
        assert (ds.ContentDate, str(ds.ContentTime)) == ("19000101", "000100"), name
        assert not [d for d in _dates(ds) if d[1][:4] in _this_year()], name


def _method(*codes):
    src = Dataset()
    src.PatientIdentityRemoved = "YES"
    items = []
    for code in codes:
        item = Dataset()
        item.CodeValue, item.CodingSchemeDesignator, item.CodeMeaning = code, "DCM", "x"
        items.append(item)
    src.DeidentificationMethodCodeSequence = items
    return src


def test_which_sources_had_their_dates_removed():
    """Without the marker, a PS3.15 profile without the Retain Longitudinal options removed the dates."""
    assert dates_removed(_method("113100"))
    assert dates_removed(_method("113100", "113108"))  # retain patient characteristics: still no dates
    assert not dates_removed(_method("113100", "113106")) and not dates_removed(_method("113100", "113107"))
    no_codes = _method()
    assert not dates_removed(no_codes)  # a de-identification the source does not describe in codes
    no_codes.PatientIdentityRemoved = "NO"
    assert not dates_removed(_method("113100").__class__())
    marked = _method("113100")
    marked.LongitudinalTemporalInformationModified = "MODIFIED"  # the marker decides
    assert not dates_removed(marked)
    marked.LongitudinalTemporalInformationModified = "REMOVED"
    assert dates_removed(marked)


def test_an_algorithm_name_over_64_bytes_is_one_line_on_the_command_line(tmp_path, capsys):
    """Before: ``--algorithm-name`` of 64 characters and 74 bytes was exported whole, an AlgorithmName and
    ManufacturerModelName of 74 bytes that dciodvfy rejects. It is now refused in one line naming the option and
    the bytes (exit status 2), before any object."""
    nib = pytest.importorskip("nibabel")
    from monai_unc.cli import main

    write_series(np.zeros((8, 7, 3)), np.diag([0.9, 1.1, 2.0, 1.0]), tmp_path / "series" / "c0", modality="CT")
    grid = read_series(tmp_path / "series" / "c0", pixels=False)
    (tmp_path / "pred").mkdir()
    label = np.zeros(grid.shape, np.uint8)
    label[2:5, 2:5, 1] = 1
    nib.save(nib.Nifti1Image(label, grid.affine), tmp_path / "pred" / "c0_seg.nii.gz")
    name = "Ödem über äußerem Übergang größerer Läsionsgrenze älterer Öffnung"[:64]
    rc = main(["dicom-export", "-p", str(tmp_path / "pred"), "-s", str(tmp_path / "series"), "-o",
               str(tmp_path / "out"), "--algorithm-name", name, "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--algorithm-name must" in err[0] and "(74 bytes)" in err[0], err
    assert not list(tmp_path.glob("out/**/*.dcm"))
