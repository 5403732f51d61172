"""Hostile content checks of the derived DICOM objects: what a PACS receives from odd sources and odd names.

Texts a DICOM string element cannot hold as one value (a backslash is the value separator), texts outside the source's
character set, sources that lack type 2 patient / study attributes or share a SOPInstanceUID between slices. Each
series is 8 x 8 x 4 voxels, headers only.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import (  # noqa: E402
    AlgorithmInfo,
    DicomSeriesError,
    declare_character_set,
    default_segment,
    read_segment_specs,
    read_series,
    write_fractional_segmentation,
    write_measurement_report,
    write_parametric_map,
    write_segmentation,
    write_series,
)
from monai_unc.workflows.dicom import algorithm_from_records  # noqa: E402
from tests.io.dicom._series import dciodvfy_errors  # noqa: E402

SHAPE = (8, 8, 4)


def _labels() -> np.ndarray:
    labels = np.zeros(SHAPE, np.uint8)
    labels[2:4, 2:4, 1], labels[5, 5, 2] = 1, 2
    return labels


def _series(folder, edit=None, **kwargs):
    """An 8 x 8 x 4 MR series; ``edit(dataset)`` changes every slice before it is read (headers only)."""
    files = write_series(np.zeros(SHAPE), np.eye(4), folder, modality="MR", **kwargs)
    if edit is not None:
        for f in files:
            ds = pydicom.dcmread(f)
            edit(ds)
            ds.save_as(f)
    return files


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile") / "s"
    _series(folder)
    return read_series(folder, pixels=False)


def _spec_file(tmp_path, entry):
    path = tmp_path / "segments.json"
    path.write_text(json.dumps({"1": entry}))
    return path


@pytest.mark.parametrize("make, message", [
    # a backslash splits a SegmentLabel in two values ("a", "b"): the PACS shows the segment as "a"
    (lambda t, s: read_segment_specs(_spec_file(t, {"name": "left\\right"}), [1]), "entry 1: name"),
    (lambda t, s: read_segment_specs(_spec_file(t, {"name": "tab\there"}), [1]), "entry 1: name"),
    (lambda t, s: read_segment_specs(_spec_file(t, {"category": ["SCT", "85756007", "Tis\\sue"]}), [1]),
     "entry 1: category"),
    (lambda t, s: read_segment_specs(_spec_file(t, {"type": ["LONGERTHAN16CHARS", "1", "x"]}), [1]), "entry 1: type"),
    (lambda t, s: default_segment(1, "W\\T"), "segment name of class 1"),  # a region name of a region spec
    # highdicom refused these mid-write, naming no argument
    (lambda t, s: AlgorithmInfo(name="C:\\models\\net"), "algorithm name"),
    (lambda t, s: write_parametric_map(np.zeros(SHAPE), s, t / "pm.dcm", "variance", region="W\\T"), "region"),
    # a float64 map beyond float32 was reported as holding NaN or infinite values
    (lambda t, s: write_parametric_map(np.full(SHAPE, 1e39), s, t / "pm.dcm", "variance"), "float32 range"),
], ids=["name_backslash", "name_tab", "meaning_backslash", "long_scheme", "default_segment", "algorithm", "region",
        "float64_map"])
def test_text_and_values_an_object_cannot_hold_are_refused_by_name(series, tmp_path, make, message):
    with pytest.raises(ValueError, match=message):
        make(tmp_path, series)
    assert not list(tmp_path.glob("*.dcm"))


def test_a_windows_bundle_path_recorded_as_the_model_is_written(series, tmp_path):
    (tmp_path / "infer.json").write_text(json.dumps({"settings": {"model": "bundle: C:\\models\\spleen"}}))
    algorithm = algorithm_from_records(tmp_path, "case", "monai-unc")
    path = write_segmentation(_labels(), series, tmp_path / "seg.dcm", [default_segment(1), default_segment(2)],
                              algorithm)
    seg = pydicom.dcmread(path)
    assert seg.SegmentSequence[0].SegmentationAlgorithmIdentificationSequence[0].AlgorithmName == \
        "bundle: C:/models/spleen"


def _raw_patient_name(path) -> bytes:
    return pydicom.dcmread(path, stop_before_pixels=True).get_item("PatientName").value


@pytest.mark.parametrize("charset, patient, name, declared", [
    (None, "Muller^Anna", "Ödem", "ISO_IR 192"),  # no character set declared: ASCII only (pydicom wrote Latin-1)
    ("ISO_IR 100", "Müller^Jörg", "李", "ISO_IR 192"),  # Latin-1 has no 李 (pydicom wrote "?")
    ("ISO_IR 100", "Müller^Jörg", "Ödem", "ISO_IR 100"),  # it fits: the source's character set is kept
    # a source with non-ASCII bytes and no declaration: its patient's name keeps its bytes when the object's own
    # texts are ASCII (a PACS matches the patient on them)
    (None, "Müller^Jörg", "Oedem", None),
])
def test_a_text_outside_the_source_character_set_is_written_in_utf8(tmp_path, charset, patient, name, declared):
    def edit(ds):
        del ds.SpecificCharacterSet
        if charset is not None:
            ds.SpecificCharacterSet = charset
        ds.PatientName = patient  # encoded in the new character set (none: Latin-1, as pydicom does)

    files = _series(tmp_path / "s", edit, patient_name=patient)
    series = read_series(tmp_path / "s", pixels=False)
    assert series.datasets[0].get("SpecificCharacterSet") == charset
    path = write_segmentation(_labels(), series, tmp_path / "seg.dcm", [default_segment(1, name), default_segment(2)])
    seg = pydicom.dcmread(path)
    assert seg.get("SpecificCharacterSet") == declared
    assert seg.SegmentSequence[0].SegmentLabel == name
    if declared is None:
        assert _raw_patient_name(path) == _raw_patient_name(files[0])
    else:
        assert dciodvfy_errors(path) == []
        assert str(seg.PatientName) == patient  # the same characters, re-encoded


@pytest.mark.parametrize("charset", ["ISO_IR 192", "ISO_IR 100", ["", "ISO 2022 IR 100"]])
def test_an_object_without_a_declaration_takes_the_source_s(charset):
    """highdicom before 0.28 (then allowed by the dicom extra) left the SEG's SpecificCharacterSet out: the patient's
    name copied from a UTF-8 source ("Ωmega^Anna") was written as "?mega^Anna", with only a pydicom log line. The
    object takes the source's declaration, so every copied text keeps its characters."""
    source, seg = pydicom.Dataset(), pydicom.Dataset()
    source.SpecificCharacterSet = charset
    source.PatientName = seg.PatientName = "Ωmega^Anna" if charset == "ISO_IR 192" else "Müller^Jörg"
    seg.SeriesDescription = "SEG by monai-unc"
    declared = declare_character_set(seg, source).get("SpecificCharacterSet")
    # an empty first value of a multi-valued set is ISO 2022 IR 6, written out (PS3.3 C.12.1.1.2)
    assert (list(declared) if isinstance(charset, list) else declared) == (
        ["ISO 2022 IR 6", *charset[1:]] if isinstance(charset, list) else charset)
    seg.file_meta = pydicom.dataset.FileMetaDataset()
    seg.file_meta.TransferSyntaxUID = pydicom.uid.ExplicitVRLittleEndian
    buffer = pydicom.filebase.DicomBytesIO()
    pydicom.dcmwrite(buffer, seg, enforce_file_format=False)
    assert str(pydicom.dcmread(pydicom.filebase.DicomBytesIO(buffer.getvalue()), force=True).PatientName) == str(
        source.PatientName)


@pytest.mark.parametrize("charset, patient, declared", [
    # Japanese and Korean sources: an empty first value stands for ISO 2022 IR 6 (PS3.3 C.12.1.1.2); highdicom
    # refused it ("'' is not a valid SpecificCharacterSetValues") and knows no ISO 2022 IR 149: no object was written
    (["", "ISO 2022 IR 87"], "Yamada^Tarou=山田^太郎=やまだ^たろう", ["ISO 2022 IR 6", "ISO 2022 IR 87"]),
    (["", "ISO 2022 IR 149"], "Hong^Gildong=洪^吉洞=홍^길동", ["ISO 2022 IR 6", "ISO 2022 IR 149"]),
    # the default repertoire stated as an empty value or ISO_IR 6 (seen in the wild): refused the same way
    ("", "Doe^John", None),
    ("ISO_IR 6", "Doe^John", None),
], ids=["japanese", "korean", "empty", "iso_ir_6"])
def test_a_source_in_an_iso_2022_or_the_default_character_set_is_exported(tmp_path, charset, patient, declared):
    def edit(ds):
        ds.SpecificCharacterSet = charset
        ds.PatientName = patient  # encoded in that character set

    _series(tmp_path / "s", edit, patient_name=patient)
    series = read_series(tmp_path / "s", pixels=False)
    specs = [default_segment(1), default_segment(2)]
    probs = np.stack([_labels() == c for c in range(3)]).astype(np.float32)
    seg = write_segmentation(_labels(), series, tmp_path / "seg.dcm", specs)
    paths = [seg, write_fractional_segmentation(probs, series, tmp_path / "p.dcm", specs),
             write_parametric_map(np.zeros(SHAPE), series, tmp_path / "pm.dcm", "variance")]
    paths.append(write_measurement_report(tmp_path / "sr.dcm", series, pydicom.dcmread(seg, stop_before_pixels=True),
                                          [], segment_volumes={1: {"volume": 1.0}}, numbers={}))
    for path in paths:
        ds = pydicom.dcmread(path)
        value = ds.get("SpecificCharacterSet")
        assert (list(value) if isinstance(value, pydicom.multival.MultiValue) else value) == declared, path.name
        assert str(ds.PatientName) == patient, path.name  # the same characters, PN groups and components
        assert dciodvfy_errors(path) == [], path.name


def test_a_source_without_type2_patient_and_study_attributes(tmp_path):
    absent = ("PatientName", "PatientID", "PatientBirthDate", "PatientSex", "StudyDate", "StudyTime",
              "AccessionNumber", "StudyID")

    def edit(ds):
        for key in absent:
            delattr(ds, key)

    _series(tmp_path / "s", edit)
    series = read_series(tmp_path / "s", pixels=False)
    seg = write_segmentation(_labels(), series, tmp_path / "seg.dcm", [default_segment(1), default_segment(2)])
    pm = write_parametric_map(np.ones(SHAPE), series, tmp_path / "pm.dcm", "variance")
    sr = write_measurement_report(tmp_path / "sr.dcm", series, pydicom.dcmread(seg), [pydicom.dcmread(pm)],
                                  segment_volumes={1: {"volume": 0.004}}, numbers={"score": 0.5})
    for path in (seg, pm, sr):
        ds = pydicom.dcmread(path)
        assert all(key in ds and not str(ds[key].value or "") for key in absent), path.name  # empty: unknown
    assert dciodvfy_errors(seg) == []
    assert not any(key in series.datasets[0] for key in absent)  # the series' headers are left as read


@pytest.mark.parametrize("edit, message", [
    (lambda ds: delattr(ds, "StudyInstanceUID"), "no StudyInstanceUID"),
    (lambda ds: delattr(ds, "FrameOfReferenceUID"), "no FrameOfReferenceUID"),
], ids=["study", "frame_of_reference"])
def test_a_source_without_its_study_or_frame_of_reference_is_refused(tmp_path, edit, message):
    _series(tmp_path / "s", edit)
    series = read_series(tmp_path / "s", pixels=False)
    with pytest.raises(DicomSeriesError, match=message):
        write_segmentation(_labels(), series, tmp_path / "seg.dcm", [default_segment(1), default_segment(2)])
    assert not list(tmp_path.glob("*.dcm"))


@pytest.mark.parametrize("what, message", [("duplicate", "have the same SOPInstanceUID"),
                                           ("missing", "has no SOPInstanceUID")])
def test_slices_without_their_own_sop_instance_uid_are_refused(tmp_path, what, message):
    # two slices sharing a SOPInstanceUID (a copied file): a SEG frame of one slice would name the other
    files = _series(tmp_path / "s")
    first = str(pydicom.dcmread(files[0]).SOPInstanceUID)
    ds = pydicom.dcmread(files[1])
    if what == "duplicate":
        ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = first
    else:
        del ds.SOPInstanceUID
    ds.save_as(files[1], enforce_file_format=False)
    with pytest.raises(DicomSeriesError, match=message):
        read_series(tmp_path / "s", pixels=False)


def _edit_slice(folder, index, edit):
    """An 8 x 8 x 4 MR series (values 5) whose slice ``index`` is changed by ``edit(dataset)``; returns the folder."""
    files = write_series(np.full(SHAPE, 5.0), np.eye(4), folder, modality="MR")
    ds = pydicom.dcmread(files[index])
    edit(ds)
    ds.save_as(files[index])
    return folder


def _sr(t, s, numbers):
    (t / "in").mkdir(exist_ok=True)
    seg = pydicom.dcmread(write_segmentation(_labels(), s, t / "in" / "seg.dcm", [default_segment(1),
                                                                                   default_segment(2)]))
    return write_measurement_report(t / "sr.dcm", s, seg, [], segment_volumes={}, numbers=numbers)


#: two names of 100 characters that differ only in their middle (past the start and end a 64-character text keeps)
_MIDDLE = ["x" * 45 + c + "x" * 54 for c in "AB"]


@pytest.mark.parametrize("make, error, message", [
    # two segments with one name: a viewer lists segments by SegmentLabel and could not tell them apart
    (lambda t, s: write_segmentation(_labels(), s, t / "seg.dcm", [default_segment(1, "Tumour"),
                                                                     default_segment(2, "tumour")]),
     ValueError, "class 1 .'Tumour'. and class 2 .'tumour'. have the same segment name"),
    (lambda t, s: _sr(t, s, dict.fromkeys(_MIDDLE, 1.0)), ValueError, "would both be shown as"),
    (lambda t, s: write_segmentation(_labels(), s, t / "seg.dcm", [default_segment(1)], series_description="a\\b"),
     ValueError, "series_description"),
    # slices of one series that disagree on the patient: a mixed-up series (the files are named, not the values)
    (lambda t, s: read_series(_edit_slice(t / "s", 2, lambda ds: setattr(ds, "PatientName", "Other^Person")),
                              pixels=False), DicomSeriesError, r"differ in PatientName \(2 values, e.g. 00000.dcm and "
                                                               r"00002.dcm\)"),
    (lambda t, s: read_series(_edit_slice(t / "s", 1, lambda ds: setattr(ds, "PatientBirthDate", "19800101")),
                              pixels=False), DicomSeriesError, "differ in PatientBirthDate"),
    (lambda t, s: read_series(_edit_slice(t / "s", 3, lambda ds: setattr(ds, "PatientSex", "F")), pixels=False),
     DicomSeriesError, "differ in PatientSex"),
    # a RescaleSlope of 0 was read as 1: every value of the slice wrong
    (lambda t, s: read_series(_edit_slice(t / "s", 1, lambda ds: setattr(ds, "RescaleSlope", 0))),
     DicomSeriesError, "00001.dcm: RescaleSlope 0"),
], ids=["seg_same_name", "sr_same_meaning", "description", "patient_name", "birth_date", "sex", "slope_0"])
def test_ambiguous_objects_and_mixed_series_are_refused_by_name(series, tmp_path, make, error, message):
    with pytest.raises(error, match=message) as refused:
        make(tmp_path, series)
    # no patient data in logs; the full date, not "1980", which a random UID or the temporary path may hold
    text = str(refused.value).replace(str(tmp_path), "<tmp>")
    assert not any(v in text for v in ("Other", "19800101", "1980-01-01", "Synthetic"))
    assert not list(tmp_path.glob("*.dcm"))


def _units(path) -> dict[str, str]:
    out = {}

    def walk(ds):
        for item in ds.get("ContentSequence", []):
            if item.ValueType == "NUM":
                concept = item.ConceptNameCodeSequence[0]
                out[concept.get("LongCodeValue") or concept.CodeValue] = \
                    item.MeasuredValueSequence[0].MeasurementUnitsCodeSequence[0].CodeValue
            walk(item)

    walk(pydicom.dcmread(path))
    return out


def _long_regions(t, s):
    names = [f"whole tumour: necrosis, enhancing tumour and oedema of the BraTS labels ({v})" for v in ("v1", "v2")]
    with pytest.warns(UserWarning, match="holds 64: written as"):
        specs = [default_segment(r, n) for r, n in enumerate(names, 1)]
    ds = pydicom.dcmread(write_segmentation(_labels(), s, t / "seg.dcm", specs))
    return [ds.SegmentSequence[i].SegmentLabel[-5:] for i in range(2)]


@pytest.mark.parametrize("make, expected", [
    # two region names sharing their first 64 characters were cut to one segment label
    (_long_regions, [" (v1)", " (v2)"]),
    # a PACS lists series by SeriesDescription: the SEGs and the SR had none
    (lambda t, s: [pydicom.dcmread(p).SeriesDescription for p in (
        write_segmentation(_labels(), s, t / "seg.dcm", [default_segment(1, "Tumour"), default_segment(2, "Oedema")]),
        write_fractional_segmentation(np.full((3, *SHAPE), 0.5), s, t / "p.dcm", [default_segment(1),
                                                                                   default_segment(2)]),
        write_parametric_map(np.ones(SHAPE), s, t / "pm.dcm", "variance", series_description="Unsicherheit"),
        _sr(t, s, {"dice": 0.5}))] + [dciodvfy_errors(p) for p in (t / "seg.dcm", t / "p.dcm", t / "pm.dcm")],
     ["segmentation by monai-unc: Tumour, Oedema", "probabilities by monai-unc: class 1, class 2", "Unsicherheit",
      "measurement report by monai-unc", [], [], []]),
    # every column but ml columns was written in unit 1: a Hausdorff distance in mm, entropies in nats; a name past
    # 64 characters was cut in the code value too
    (lambda t, s: _units(_sr(t, s, {"lesion_hd95_WT": 3.0, "predictive_entropy_mean": 0.2, "volume_mm3": 9.0,
                                    "dice": 0.5, "predicted_ml_1": 2.0, "band_p95_mm_1": 1.0, _MIDDLE[0]: 1.0})),
     {"lesion_hd95_WT": "mm", "predictive_entropy_mean": "{nat}", "volume_mm3": "mm3", "dice": "1",
      "predicted_ml_1": "ml", "band_p95_mm_1": "mm", _MIDDLE[0]: "1"}),
], ids=["long_region_names", "series_description", "sr_units"])
def test_objects_name_their_content_distinctly_and_in_their_units(series, tmp_path, make, expected):
    assert make(tmp_path, series) == expected


_F32 = float(np.finfo(np.float32).max)


@pytest.mark.parametrize("low, high", [
    (-3e38, 3e38),  # WindowWidth 6.0e+38 was written: dciodvfy refused it (read as a 64-bit integer, it wraps)
    (-_F32, _F32), (0.0, _F32), (-1e30, -1e29), (-1.2345678e-30, 3.3333333e20),
    (1.0, float(np.nextafter(np.float32(1), np.float32(2)))),  # one float32 step wide
    (0.0, 1e-45), (3e38, 3e38),  # subnormal; constant
], ids=["3e38", "float32_max", "zero_to_max", "negative_1e30", "mixed", "one_ulp", "subnormal", "constant"])
def test_parametric_map_of_extreme_values_is_valid_and_exact(series, tmp_path, low, high):
    from monai_unc.io.dicom import MAX_WINDOW_WIDTH

    values = np.linspace(low, high, int(np.prod(SHAPE))).astype(np.float32).reshape(SHAPE)
    path = write_parametric_map(values, series, tmp_path / "pm.dcm", "variance")
    assert dciodvfy_errors(path) == []
    ds = pydicom.dcmread(path)
    window = ds.SharedFunctionalGroupsSequence[0].FrameVOILUTSequence[0]
    lo, hi = float(values.min()), float(values.max())
    assert 0 < float(window.WindowWidth) <= MAX_WINDOW_WIDTH
    assert len(window.WindowWidth.original_string or str(window.WindowWidth)) <= 16
    assert float(window.WindowCenter) == pytest.approx((lo + hi) / 2, rel=1e-9, abs=1e-300)
    if hi - lo <= MAX_WINDOW_WIDTH and hi > lo:  # the window covers the map's range
        assert float(window.WindowWidth) == pytest.approx(hi - lo, rel=1e-9)
    slices = {str(d.SOPInstanceUID): k for k, d in enumerate(series.datasets)}
    for frame, group in zip(ds.pixel_array, ds.PerFrameFunctionalGroupsSequence):  # each frame: its slice's values
        uid = str(group.DerivationImageSequence[0].SourceImageSequence[0].ReferencedSOPInstanceUID)
        np.testing.assert_array_equal(frame, values[:, :, slices[uid]].T)  # float32, bit for bit


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e39])
def test_parametric_map_refuses_nan_inf_and_values_beyond_float32(series, tmp_path, bad):
    values = np.zeros(SHAPE)
    values[1, 2, 3] = bad
    with pytest.raises(ValueError, match="NaN or infinite|beyond the float32 range"):
        write_parametric_map(values, series, tmp_path / "pm.dcm", "variance")
    assert not list(tmp_path.iterdir())


def _map_names(path) -> tuple[str, str, str, str]:
    ds = pydicom.dcmread(path)
    rwv = ds.SharedFunctionalGroupsSequence[0].RealWorldValueMappingSequence[0]
    return str(rwv.LUTLabel), str(rwv.LUTExplanation), str(ds.SeriesDescription), str(ds.ContentDescription)


@pytest.mark.parametrize("regions", [
    # "PE necrotic tumour core" and "PE necrotic tumour rim" were both labelled "PE necrotic tumo"
    ["necrotic tumour core", "necrotic tumour rim"],
    # 64-character names that differ at their end (as short_text keeps them): every text of the two maps was the same
    [f"whole tumour: necrosis, enhancing tumour and oedema of the ({v})" for v in ("v1", "v2")],
], ids=["shared_16", "shared_60"])
@pytest.mark.parametrize("measure", ["predictive_entropy", "variance", "a_measure_of_another_tool_with_a_long_name"])
def test_region_maps_whose_names_share_their_start_are_named_apart(series, tmp_path, regions, measure):
    names = [_map_names(write_parametric_map(np.ones(SHAPE), series, tmp_path / f"pm{i}.dcm", measure, region=r))
             for i, r in enumerate(regions)]
    for field in range(4):  # LUTLabel, LUTExplanation, SeriesDescription, ContentDescription: all distinct
        assert names[0][field] != names[1][field], names
    assert all(len(n[0]) <= 16 and max(len(t) for t in n[1:]) <= 64 for n in names)
    again = _map_names(write_parametric_map(np.ones(SHAPE), series, tmp_path / "again.dcm", measure,
                                            region=regions[0]))
    assert again == names[0]  # deterministic
    assert dciodvfy_errors(tmp_path / "pm0.dcm") == []


def test_whole_case_map_labels_are_unchanged():
    """The six measures' own labels (no region) are distinct in 16 characters and keep their plain start."""
    from monai_unc.io.dicom import MAP_UNITS

    assert len({m[:16] for m in MAP_UNITS}) == len(MAP_UNITS)


def _four_writers(t, s, **kwargs):
    """The SEG, FRACTIONAL SEG, Parametric Map and SR writers of one series, called with ``kwargs``."""
    specs = [default_segment(1), default_segment(2)]
    return [
        lambda: write_segmentation(_labels(), s, t / "seg.dcm", specs, **kwargs),
        lambda: write_fractional_segmentation(np.full((3, *SHAPE), 0.5), s, t / "p.dcm", specs, **kwargs),
        lambda: write_parametric_map(np.ones(SHAPE), s, t / "pm.dcm", "variance", **kwargs),
        lambda: write_measurement_report(t / "sr.dcm", s, None, [], segment_volumes={}, numbers={"dice": 0.5},
                                         **kwargs),
    ]


@pytest.mark.parametrize("number, error", [
    # an IS holds -(2**31 - 1) .. 2**31 - 1: 10**12 was written (dciodvfy: "Range invalid for this VR")
    (10**12, ValueError), (2**31, ValueError),
    # highdicom refused these, naming its own argument ("should be a positive integer")
    (0, ValueError), (-3, ValueError),
    # a float or text was turned into a number (901.7 -> 901)
    (901.7, TypeError), ("901", TypeError), (True, TypeError),
], ids=["1e12", "2**31", "zero", "negative", "float", "text", "bool"])
def test_series_numbers_outside_1_to_2_31_are_refused_by_name(series, tmp_path, number, error):
    for write in _four_writers(tmp_path, series, series_number=number):
        with pytest.raises(error, match="series_number"):
            write()
    assert not list(tmp_path.glob("*.dcm"))


def test_the_largest_series_number_is_written(series, tmp_path):
    for write in _four_writers(tmp_path, series, series_number=np.int64(2**31 - 1)):
        path = write()
        assert pydicom.dcmread(path, stop_before_pixels=True).SeriesNumber == 2**31 - 1
        assert dciodvfy_errors(path) == [], path.name


@pytest.mark.parametrize("measure, message", [
    ("", "1 to 64 characters"),  # was written with an empty LUTLabel and LUTExplanation (type 1)
    ("   ", "1 to 64 characters"),
    ("pe\\x", "backslash"),  # refused by highdicom, naming LO, not the argument
    ("pe\tx", "control characters"),
    ("m" * 65, "1 to 64 characters"),  # its LUTExplanation was cut to 64 characters
    (5, "1 to 64 characters"),
], ids=["empty", "blank", "backslash", "tab", "65_chars", "int"])
def test_a_measure_a_dicom_text_cannot_hold_is_refused_by_name(series, tmp_path, measure, message):
    with pytest.raises(ValueError, match=f"measure .*{message}"):
        write_parametric_map(np.ones(SHAPE), series, tmp_path / "pm.dcm", measure)
    assert not list(tmp_path.glob("*.dcm"))


@pytest.mark.parametrize("measure, label", [
    # highdicom refused these ContentLabels ("Code string must not end with a space or underscore")
    ("pe_", "PE"), ("entropy (nats)", "ENTROPY _NATS"), ("entropía_ü", "ENTROP_A"),
    ("entropy_of_mean_x", "ENTROPY_OF_MEAN"), ("m" * 64, "M" * 16), ("__", "MAP"), ("李", "MAP"),
    ("predictive_entropy", "PREDICTIVE_ENTRO"),
])
def test_any_measure_name_gets_a_valid_content_label(series, tmp_path, measure, label):
    path = write_parametric_map(np.ones(SHAPE), series, tmp_path / "pm.dcm", measure)
    ds = pydicom.dcmread(path)
    from monai_unc.io.dicom import MAP_UNITS

    assert ds.ContentLabel == label
    explanation = MAP_UNITS[measure][1] if measure in MAP_UNITS else measure  # the whole name, not cut
    assert ds.SharedFunctionalGroupsSequence[0].RealWorldValueMappingSequence[0].LUTExplanation == explanation
    assert dciodvfy_errors(path) == []


@pytest.mark.parametrize("numbers, message", [
    # a tab was written into the CodeValue (SH) and CodeMeaning (LO): invalid; a backslash failed with pydicom's
    # TypeError "can only concatenate str (not "MultiValue") to str"
    ({"dice\tleft": 0.5}, "'dice\\\\tleft'"), ({"dice\\left": 0.5}, "'dice\\\\\\\\left'"),
    ({"dice": 0.5, "a\x7fb": 1.0}, "'a\\\\x7fb'"),
], ids=["tab", "backslash", "delete"])
def test_measurement_names_a_dicom_text_cannot_hold_are_refused_by_name(series, tmp_path, numbers, message):
    with pytest.raises(ValueError, match=f"numbers: the measurement name {message}"):
        write_measurement_report(tmp_path / "sr.dcm", series, None, [], segment_volumes={}, numbers=numbers)
    with pytest.raises(ValueError, match=f"extra_groups\\['masks'\\]: the measurement name {message}"):
        write_measurement_report(tmp_path / "sr.dcm", series, None, [], segment_volumes={}, numbers={},
                                 extra_groups={"masks": numbers})
    with pytest.raises(ValueError, match=f"triage score_name: the measurement name {message}"):
        write_measurement_report(tmp_path / "sr.dcm", series, None, [], segment_volumes={}, numbers={},
                                 triage={"decision": "accept", "score": 0.5, "score_name": list(numbers)[-1]})
    assert not list(tmp_path.glob("*.dcm"))


@pytest.mark.parametrize("field", ["name", "version"])
def test_an_algorithm_name_or_version_over_64_characters_is_refused(field):
    """They were cut to their first 64 characters (AlgorithmName, AlgorithmVersion, ManufacturerModelName: LO)."""
    with pytest.raises(ValueError, match=f"algorithm {field} .*at most 64 characters"):
        AlgorithmInfo(**{field: "x" * 65})
    assert getattr(AlgorithmInfo(**{field: "x" * 64}), field) == "x" * 64


@pytest.mark.parametrize("make, error, message", [
    # AttributeError: 'str' object has no attribute 'shape'
    (lambda t, s: write_segmentation(_labels(), str(s.folder), t / "seg.dcm", [default_segment(1)]), TypeError,
     "series must be a DicomSeries"),
    (lambda t, s: write_parametric_map(np.ones(SHAPE), str(s.folder), t / "pm.dcm", "variance"), TypeError,
     "series must be a DicomSeries"),
    (lambda t, s: write_fractional_segmentation(np.full((3, *SHAPE), 0.5), s.folder, t / "p.dcm",
                                                [default_segment(1)]), TypeError, "series must be a DicomSeries"),
    (lambda t, s: write_measurement_report(t / "sr.dcm", str(s.folder), None, [], segment_volumes={}, numbers={}),
     TypeError, "series must be a DicomSeries"),
    # AttributeError: 'int' object has no attribute 'label'
    (lambda t, s: write_segmentation(_labels(), s, t / "seg.dcm", [1, 2]), TypeError, "segments must hold SegmentSpec"),
    (lambda t, s: write_fractional_segmentation(np.full((3, *SHAPE), 0.5), s, t / "p.dcm", [1]), TypeError,
     "segments must hold SegmentSpec"),
    (lambda t, s: write_segmentation(_labels(), s, t / "seg.dcm", default_segment(1)), TypeError,
     "segments must be a sequence"),
    # highdicom's TypeError about real_world_value_mappings
    (lambda t, s: write_parametric_map(np.ones((*SHAPE, 2)), s, t / "pm.dcm", "variance"), ValueError,
     r"values must be \(columns, rows, slices\)"),
    (lambda t, s: write_parametric_map(np.ones(SHAPE[:2]), s, t / "pm.dcm", "variance"), ValueError,
     r"values must be \(columns, rows, slices\)"),
    (lambda t, s: write_parametric_map(np.array([[["a"]]]), s, t / "pm.dcm", "variance"), TypeError,
     "values .*must hold real numbers"),
    (lambda t, s: write_segmentation(np.ones((*SHAPE, 1, 1), np.uint8), s, t / "seg.dcm", [default_segment(1)]),
     ValueError, "labels must be"),
], ids=["seg_series_str", "pm_series_str", "probs_series_path", "sr_series_str", "segments_ints", "probs_segments_ints",
        "segments_one_spec", "map_4d", "map_2d", "map_text", "labels_5d"])
def test_arguments_of_the_wrong_type_are_refused_by_name(series, tmp_path, make, error, message):
    with pytest.raises(error, match=message):
        make(tmp_path, series)
    assert not list(tmp_path.glob("*.dcm"))


def test_a_segments_file_with_a_key_given_twice_is_refused(tmp_path):
    """json kept the last of two entries "1": the SEG named class 1 'Edema' where a reader of the file sees 'Tumor
    core' (found by hostile testing); a byte-order mark (Notepad) was refused as not JSON."""
    path = tmp_path / "segments.json"
    path.write_text('{"1": {"name": "Tumor core"}, "2": {"name": "Whole tumor"}, "1": {"name": "Edema"}}',
                    encoding="utf-8")
    with pytest.raises(ValueError, match=r"segments file .* is not readable JSON: .*the key '1' is given twice"):
        read_segment_specs(path, [1, 2])
    path.write_text('\ufeff{"1": {"name": "Ödem"}}', encoding="utf-8")
    assert [s.name for s in read_segment_specs(path, [1])] == ["Ödem"]
