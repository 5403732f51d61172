"""Review 63 of the DICOM export: dates of a de-identified source, the SR's source series, hostile inputs.

- an object marked ``MODIFIED`` (LongitudinalTemporalInformationModified, PS3.15 E.3.6: its dates were shifted by
  the de-identification) gave its own ContentDate / InstanceCreationDate (and highdicom's ContributionDateTime) as
  the real time of writing beside the source's shifted dates: a reader took them for shifted dates, or learnt the
  shift by subtracting one from the other.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import read_series, write_series  # noqa: E402
from monai_unc.io.dicom.objects import (  # noqa: E402
    default_segment,
    write_fractional_segmentation,
    write_parametric_map,
    write_segmentation,
)
from monai_unc.io.dicom.sr import write_measurement_report  # noqa: E402
from tests.io.dicom._series import dciodvfy_errors  # noqa: E402

SHAPE = (6, 5, 4)
AFFINE = np.diag([0.8, 0.8, 2.0, 1.0])
#: a source de-identified with modified dates: every date shifted into 1999, said so
SHIFTED = {"LongitudinalTemporalInformationModified": "MODIFIED", "StudyDate": "19990203", "StudyTime": "101500",
           "SeriesDate": "19990203", "SeriesTime": "101700", "ContentDate": "19990203", "ContentTime": "101712",
           "PatientBirthDate": "19500611"}


def _series(folder, **extra):
    values = np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE)
    write_series(values, AFFINE, folder, modality="MR", extra={**SHIFTED, **extra})
    return read_series(folder, pixels=False)


def _objects(folder, series):
    """The SEG, FRACTIONAL SEG, Parametric Map and SR of one case on ``series``, read back (headers)."""
    rng = np.random.default_rng(0)
    probs = rng.random((2, *SHAPE)).astype(np.float32)
    probs /= probs.sum(0)
    seg = write_segmentation(probs.argmax(0), series, folder / "seg.dcm", [default_segment(1)])
    frac = write_fractional_segmentation(probs, series, folder / "probs.dcm", [default_segment(1)])
    pm = write_parametric_map(probs[1], series, folder / "pe.dcm", "predictive_entropy")
    headers = [pydicom.dcmread(p, stop_before_pixels=True) for p in (seg, frac, pm)]
    sr = write_measurement_report(folder / "sr.dcm", series, headers[0], headers[1:],
                                  segment_volumes={1: {"volume": 1.0}}, numbers={"dice": 0.5})
    return {p.name: pydicom.dcmread(p) for p in (seg, frac, pm, sr)}


def _dates(ds, out=None):
    """Every DA, DT and TM value of ``ds``, nested ones too: ``[(keyword, value)]``."""
    out = [] if out is None else out
    for elem in ds:
        if elem.VR in ("DA", "DT", "TM") and elem.value not in (None, ""):
            out.append((elem.keyword, str(elem.value)))
        elif elem.VR == "SQ":
            for item in elem.value:
                _dates(item, out)
    return out


def _today() -> set[str]:
    now = datetime.now(timezone.utc)
    return {(now + timedelta(hours=h)).strftime("%Y") for h in (-14, 0, 14)}


def test_objects_of_a_modified_source_hold_no_unshifted_date(tmp_path):
    """Before: ContentDate, InstanceCreationDate and the ContributionDateTime were today's (2026) beside the source's
    1999 in objects saying MODIFIED. Now every date of every object is on the source's shifted timeline: the
    content is dated at the source's latest content date and time, the creation dates (type 3) are left out."""
    series = _series(tmp_path / "s")
    objects = _objects(tmp_path, series)
    years = _today()
    for name, ds in objects.items():
        assert ds.LongitudinalTemporalInformationModified == "MODIFIED", name
        dates = _dates(ds)
        assert not [d for d in dates if d[1][:4] in years], (name, dates)
        assert (ds.ContentDate, str(ds.ContentTime)) == ("19990203", "101712"), name
        assert "InstanceCreationDate" not in ds and "InstanceCreationTime" not in ds, name
        assert dciodvfy_errors(tmp_path / name) == [], name


def test_a_modified_source_without_content_dates_dates_the_objects_at_its_series(tmp_path):
    series = _series(tmp_path / "s")
    for ds in series.datasets:
        del ds.ContentDate, ds.ContentTime
    objects = _objects(tmp_path, series)
    for name, ds in objects.items():
        assert (ds.ContentDate, str(ds.ContentTime)) == ("19990203", "101700"), name


def test_the_latest_slice_dates_the_objects(tmp_path):
    """The objects are not dated before any of their source slices: the latest content time of the series."""
    series = _series(tmp_path / "s")
    series.datasets[2].ContentTime = "101745.5"
    series.datasets[1].ContentTime = "1018"  # HHMM: 10:18:00, the latest
    objects = _objects(tmp_path, series)
    assert {(ds.ContentDate, str(ds.ContentTime)) for ds in objects.values()} == {("19990203", "1018")}


def test_a_modified_source_without_any_date_keeps_the_time_of_writing_with_a_warning(tmp_path):
    """The time of writing, in the zone the object states (the source's: the local time of the machine was written
    beside TimezoneOffsetFromUTC +0930)."""
    series = _series(tmp_path / "s", TimezoneOffsetFromUTC="+0930")
    before = datetime.now(timezone.utc) - timedelta(seconds=2)
    for ds in series.datasets:
        for key in ("ContentDate", "ContentTime", "SeriesDate", "SeriesTime", "StudyDate", "StudyTime"):
            if key in ds:
                delattr(ds, key)
    with pytest.warns(UserWarning, match="MODIFIED"):
        objects = _objects(tmp_path, series)
    zone = timezone(timedelta(hours=9, minutes=30))
    for name, ds in objects.items():
        assert ds.TimezoneOffsetFromUTC == "+0930", name
        when = datetime.strptime(ds.ContentDate + str(ds.ContentTime)[:6], "%Y%m%d%H%M%S").replace(tzinfo=zone)
        assert before - timedelta(seconds=1) <= when <= datetime.now(timezone.utc) + timedelta(seconds=2), name


@pytest.mark.parametrize("marker", [None, "UNMODIFIED"])  # REMOVED: test_review64_dicom
def test_other_sources_keep_the_time_of_writing(tmp_path, marker):
    series = _series(tmp_path / "s", LongitudinalTemporalInformationModified=marker or "UNMODIFIED")
    if marker is None:
        for ds in series.datasets:
            del ds.LongitudinalTemporalInformationModified
    objects = _objects(tmp_path, series)
    for name, ds in objects.items():
        assert ds.ContentDate[:4] in _today() and ds.InstanceCreationDate[:4] in _today(), name


def _two_channels(tmp_path):
    """A case of two input channels: two series of one patient and frame of reference (T2 stored reversed)."""
    values = np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE)
    flip = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, -1, SHAPE[2] - 1], [0, 0, 0, 1.0]])
    common = {"FrameOfReferenceUID": "1.2.826.0.1.3680043.10.763.2"}
    study = "1.2.826.0.1.3680043.10.763.1"
    write_series(values, AFFINE, tmp_path / "t1", modality="MR", study_uid=study, extra=common)
    write_series(values[:, :, ::-1], AFFINE @ flip, tmp_path / "t2", modality="MR", study_uid=study, extra=common)
    return read_series(tmp_path / "t1", pixels=False), read_series(tmp_path / "t2", pixels=False)


def _report(tmp_path, series, others):
    labels = np.zeros(SHAPE, np.uint8)
    labels[1:4, 1:3, :] = 1
    labels[0, 0, 1:3] = 2
    seg = write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(1), default_segment(2)],
                             other_series=others)
    header = pydicom.dcmread(seg, stop_before_pixels=True)
    return write_measurement_report(tmp_path / "sr.dcm", series, header, [],
                                    segment_volumes={1: {"volume": 0.1}, 2: {"volume": 0.2}}, numbers={},
                                    other_series=others)


def test_the_report_names_every_input_series_in_its_evidence(tmp_path):
    """Each segment's group (TID 1411) names the series the SEG lies on as its "Source series for segmentation" (a
    UIDREF of VM 1; review 63 listed every slice of every series there instead, segments x slices items, which review
    64 found out of proportion); the T2 is in the report's evidence, slice by slice, as in the SEG it references."""
    series, other = _two_channels(tmp_path)
    path = _report(tmp_path, series, [other])
    assert dciodvfy_errors(path) == []
    report = hd_sr().srread(path)
    groups = report.content.get_volumetric_roi_measurement_groups()
    assert len(groups) == 2
    for group in groups:
        assert str(group.referenced_segment.source_series_for_segmentation.value) == series.series_uid
    evidence = {str(i.ReferencedSOPInstanceUID) for s in report.CurrentRequestedProcedureEvidenceSequence
                for r in s.ReferencedSeriesSequence for i in r.ReferencedSOPSequence}
    assert {str(ds.SOPInstanceUID) for s in (series, other) for ds in s.datasets} <= evidence


def hd_sr():
    return pytest.importorskip("highdicom").sr


def test_a_report_of_one_series_names_it_as_the_source_series(tmp_path):
    hd = pytest.importorskip("highdicom")
    series, _ = _two_channels(tmp_path)
    path = _report(tmp_path, series, [])
    assert dciodvfy_errors(path) == []
    for group in hd.sr.srread(path).content.get_volumetric_roi_measurement_groups():
        assert str(group.referenced_segment.source_series_for_segmentation.value) == series.series_uid
        assert group.referenced_segment.source_images_for_segmentation == []


def _numbers(items, out=None):
    """``{concept meaning: measured value item}`` of every NUM item of an SR content tree."""
    out = {} if out is None else out
    for item in items:
        if item.ValueType == "NUM":
            out[str(item.ConceptNameCodeSequence[0].CodeMeaning)] = item.MeasuredValueSequence[0]
        if "ContentSequence" in item:
            _numbers(item.ContentSequence, out)
    return out


def test_the_decimal_string_of_a_number_near_the_float64_limit_is_finite(tmp_path):
    """Before: a metrics.csv number of 1.7976931348623157e308 (the largest float64, a sentinel some tools write) was
    written as NumericValue '1.797693135e+308', rounded up past the largest float64: a reader of the decimal string
    (the value DICOM requires, the float64 being optional) got infinity. The decimal string is now cut toward zero
    where rounding would leave the float64 range; the FloatingPointValue stays exact."""
    series, _ = _two_channels(tmp_path)
    header = pydicom.dcmread(write_segmentation(np.ones(SHAPE, np.uint8), series, tmp_path / "seg.dcm",
                                                [default_segment(1)]), stop_before_pixels=True)
    numbers = {"largest": 1.7976931348623157e308, "most_negative": -1.7976931348623157e308, "third": 1 / 3,
               "tiny": 5e-324, "big": 123456789012345678.0}
    path = write_measurement_report(tmp_path / "sr.dcm", series, header, [], segment_volumes={1: {"volume": 0.5}},
                                    numbers=numbers, triage={"decision": "review", "score": -1.7976931348623157e308,
                                                             "score_name": "score"})
    assert dciodvfy_errors(path) == []
    items = _numbers(pydicom.dcmread(path).ContentSequence)
    for name, value in [*numbers.items(), ("score", -1.7976931348623157e308)]:
        text = str(items[name].NumericValue)
        assert len(text) <= 16 and np.isfinite(float(text)), (name, text)
        assert float(text) == pytest.approx(value, rel=1e-8, abs=1e-323), (name, text)
        assert float(items[name].FloatingPointValue) == value, name


def test_a_default_series_description_of_non_ascii_segment_names_fits_64_bytes(tmp_path):
    """Before: the SeriesDescription listing the segment names was cut to 64 characters, which names such as
    'Rückenmark' or 'Fégato' written in UTF-8 made 66 bytes: dciodvfy rejected the SEG and the FRACTIONAL SEG
    ('Length invalid for this VR = 66, expected <= 64'), and a PACS storing 64 bytes cut a character in two. The
    default description is now cut so that its UTF-8 encoding, the widest the objects write, fits 64 bytes."""
    series, _ = _two_channels(tmp_path)
    names = ["Rückenmark", "Fégato", "Milz", "Nière gauche", "Nière droite", "Pancréas", "Côlon"]
    segments = [default_segment(i + 1, n) for i, n in enumerate(names)]
    labels = (np.arange(np.prod(SHAPE)) % (len(names) + 1)).reshape(SHAPE).astype(np.uint8)
    probs = np.stack([labels == c for c in range(len(names) + 1)]).astype(np.float32)
    for path in (write_segmentation(labels, series, tmp_path / "seg.dcm", segments),
                 write_fractional_segmentation(probs, series, tmp_path / "probs.dcm", segments)):
        ds = pydicom.dcmread(path, stop_before_pixels=True)
        assert ds.SpecificCharacterSet == "ISO_IR 192"
        text = str(ds.SeriesDescription)
        assert len(text.encode("utf-8")) <= 64 and text.endswith("...") and "Rückenmark" in text, text
        assert dciodvfy_errors(path) == [], path.name


#: a region name of 64 characters, 74 bytes in UTF-8
LONG_REGION = "Ödem über äußerem Übergang größerer Läsionsgrenze älterer Öffnung"[:64]


def test_texts_made_from_a_long_non_ascii_region_name_fit_their_bytes(tmp_path):
    """Before: a Parametric Map of a region named with umlauts (64 characters, 74 bytes) had a ContentDescription
    and LUTExplanation of 64 characters but over 64 bytes and a LUTLabel (SH, 16) of 18 bytes, and the region's
    SEG segment a SegmentLabel of 74 bytes: dciodvfy rejected both objects. The texts the writers shorten
    (short_text, the LUT label) now fit their limit in bytes of UTF-8, the start and end of the name kept."""
    from monai_unc.io.dicom.objects import _lut_label, short_text

    series, _ = _two_channels(tmp_path)
    pm = write_parametric_map(np.ones(SHAPE), series, tmp_path / "pm.dcm", "predictive_entropy", region=LONG_REGION)
    with pytest.warns(UserWarning, match="SegmentLabel"):
        segment = default_segment(1, LONG_REGION)
    seg = write_segmentation(np.ones(SHAPE, np.uint8), series, tmp_path / "seg.dcm", [segment])
    for path in (pm, seg):
        assert dciodvfy_errors(path) == [], path.name
    rwv = pydicom.dcmread(pm).SharedFunctionalGroupsSequence[0].RealWorldValueMappingSequence[0]
    assert len(str(rwv.LUTLabel).encode()) <= 16 and str(rwv.LUTLabel).startswith("PE Ödem")
    assert str(rwv.LUTExplanation).startswith("Ödem über") and "Öffnung"[:3] in str(rwv.LUTExplanation)
    assert short_text(LONG_REGION, 64).endswith("Öffnun") and len(short_text(LONG_REGION, 64).encode()) <= 64
    assert short_text("a" * 70, 20) == "a" * 12 + "..." + "a" * 5  # ASCII as before: characters are bytes
    assert _lut_label("PE Ödem über äußerem") != _lut_label("PE Ödem über äußerer")


def test_a_short_non_ascii_measurement_name_over_16_bytes_is_a_long_code_value(tmp_path):
    """Before: a metrics.csv column of 15 characters but 18 bytes (``dice_Ödem_äußer``) became a CodeValue (SH, 16)
    of 18 bytes, which dciodvfy rejects; a name over 16 bytes of UTF-8 is now a LongCodeValue, as a longer one was."""
    series, _ = _two_channels(tmp_path)
    header = pydicom.dcmread(write_segmentation(np.ones(SHAPE, np.uint8), series, tmp_path / "seg.dcm",
                                                [default_segment(1)]), stop_before_pixels=True)
    numbers = {"dice_Ödem_äußer": 0.5, "dice_Ödem": 0.25, "dice_with_a_long_name": 0.125}
    path = write_measurement_report(tmp_path / "sr.dcm", series, header, [], segment_volumes={}, numbers=numbers)
    assert dciodvfy_errors(path) == []
    concepts = {}

    def walk(items):
        for item in items:
            if item.ValueType == "NUM":
                concept = item.ConceptNameCodeSequence[0]
                concepts[str(concept.CodeMeaning)] = concept
            walk(item.get("ContentSequence", []))

    walk(pydicom.dcmread(path).ContentSequence)
    assert str(concepts["dice_Ödem_äußer"].LongCodeValue) == "dice_Ödem_äußer"
    assert "CodeValue" not in concepts["dice_Ödem_äußer"]
    assert str(concepts["dice_Ödem"].CodeValue) == "dice_Ödem"
    assert str(concepts["dice_with_a_long_name"].LongCodeValue) == "dice_with_a_long_name"


def test_a_channel_not_marked_modified_does_not_date_the_objects(tmp_path):
    """Before: the objects of a case whose channel 0 was MODIFIED (1999) but whose channel 1 was not (its true date,
    2024) were dated 2024, the latest of every input slice: a true date beside the shifted ones. Only the slices that
    say MODIFIED date them."""
    values = np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE)
    common = {"FrameOfReferenceUID": "1.2.826.0.1.3680043.10.763.2"}
    study = "1.2.826.0.1.3680043.10.763.1"
    write_series(values, AFFINE, tmp_path / "t1", modality="MR", study_uid=study, extra={**SHIFTED, **common})
    write_series(values, AFFINE, tmp_path / "t2", modality="MR", study_uid=study,
                 extra={**common, "ContentDate": "20240101", "ContentTime": "120000", "PatientBirthDate": "19500611"})
    series, other = read_series(tmp_path / "t1", pixels=False), read_series(tmp_path / "t2", pixels=False)
    path = write_parametric_map(np.ones(SHAPE), series, tmp_path / "pm.dcm", "variance", other_series=[other])
    ds = pydicom.dcmread(path, stop_before_pixels=True)
    assert (ds.ContentDate, str(ds.ContentTime)) == ("19990203", "101712")
