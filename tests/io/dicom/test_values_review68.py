"""Value mappings of a DICOM series beyond RescaleSlope / RescaleIntercept (review 68).

What the reader gives is held to pydicom's ``apply_modality_lut`` (an independent reference) and to SimpleITK's
``ImageSeriesReader`` (GDCM, what nnU-Net's ``SimpleITKIO`` and MONAI's ``ITKReader`` read; skipped where not
installed): a Modality LUT table is left out as SimpleITK, dcm2niix and MONAI leave it (with a warning), pixel
padding values are kept as stored, a Philips private scale slope and a RealWorldValueMappingSequence are not
applied (the scale slope warned about: dcm2niix's default applies it).
"""

from __future__ import annotations

import warnings

import numpy as np
import pydicom
import pytest
from pydicom.dataset import Dataset
from pydicom.pixels import apply_modality_lut
from pydicom.sequence import Sequence

from monai_unc.io import image_unit
from monai_unc.io.dicom import read_series, write_series

#: a tiny volume (columns, rows, slices)
VALUES = np.arange(12.0).reshape(2, 3, 2) * 10


def _series(folder, modality: str, edit) -> list:
    """A 2 x 3 x 2 series of ``modality`` whose slices ``edit(ds)`` changes; the files in slice order."""
    values = VALUES - 1000 if modality == "CT" else VALUES
    files = write_series(values, np.eye(4), folder, modality=modality)
    for f in files:
        ds = pydicom.dcmread(f)
        edit(ds)
        ds.save_as(f, enforce_file_format=True)
    return files


def _pydicom_volume(files) -> np.ndarray:
    """``(columns, rows, slices)`` through pydicom's ``apply_modality_lut``, slice by slice."""
    planes = []
    for f in files:
        ds = pydicom.dcmread(f)
        planes.append(np.asarray(apply_modality_lut(ds.pixel_array, ds), dtype=float).T)
    return np.stack(planes, axis=-1)


def _stored_volume(files) -> np.ndarray:
    return np.stack([pydicom.dcmread(f).pixel_array.astype(float).T for f in files], axis=-1)


def _sitk_volume(files) -> np.ndarray:
    """``(columns, rows, slices)`` as SimpleITK's ``ImageSeriesReader`` reads the files (skips without SimpleITK)."""
    sitk = pytest.importorskip("SimpleITK")
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames([str(f) for f in files])
    return np.transpose(sitk.GetArrayFromImage(reader.Execute()).astype(float), (2, 1, 0))


def _read_quietly(folder):
    """Read the series, failing on any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return read_series(folder)


def _modality_lut(ds: Dataset) -> None:
    """Replace the rescale by a Modality LUT table: ``3 * stored + 7`` for stored values 0 .. 511."""
    for name in ("RescaleSlope", "RescaleIntercept", "RescaleType"):
        delattr(ds, name)
    item = Dataset()
    item.LUTDescriptor = [512, 0, 16]
    item.ModalityLUTType = "HU"
    item.add_new(0x00283006, "OW", (np.arange(512) * 3 + 7).astype("<u2").tobytes())
    ds.ModalityLUTSequence = Sequence([item])


def test_modality_lut_is_left_as_simpleitk_and_dcm2niix_leave_it_with_a_warning(tmp_path):
    files = _series(tmp_path, "CT", _modality_lut)
    with pytest.warns(UserWarning, match=r"00000\.dcm and 1 other file\(s\) state a ModalityLUTSequence, which is "
                                         r"not applied.*SimpleITK, dcm2niix and MONAI"):
        volume = read_series(tmp_path).volume
    stored = _stored_volume(files)
    np.testing.assert_array_equal(volume, stored)
    # pydicom's reference maps through the table: the values a model trained on converted images never saw
    np.testing.assert_array_equal(_pydicom_volume(files), stored * 3 + 7)
    np.testing.assert_array_equal(volume, _sitk_volume(files))


def test_pixel_padding_values_are_kept_as_stored_as_every_converter_keeps_them(tmp_path):
    def pad(ds):
        ds.add_new(0x00280120, "SS", int(ds.pixel_array.min()))  # PixelPaddingValue
        ds.add_new(0x00280121, "SS", int(ds.pixel_array.min()) + 40)  # PixelPaddingRangeLimit

    files = _series(tmp_path, "CT", pad)
    volume = _read_quietly(tmp_path).volume
    reference = _pydicom_volume(files)
    np.testing.assert_array_equal(volume, reference)
    assert volume.min() == -1000.0  # the padded voxel's Hounsfield units, not NaN nor left out
    np.testing.assert_array_equal(volume, _sitk_volume(files))


def _philips(slope: float, intercept: float, scale: float, manufacturer: str = "Philips Medical Systems"):
    def edit(ds):
        ds.Manufacturer = manufacturer
        ds.RescaleSlope, ds.RescaleIntercept, ds.RescaleType = slope, intercept, "normalized"
        ds.private_block(0x2005, "Philips MR Imaging DD 001", create=True).add_new(0x0E, "FL", scale)
    return edit


def test_philips_scale_slope_is_not_applied_and_warns_of_dcm2niix_precise_values(tmp_path):
    files = _series(tmp_path, "MR", _philips(2.0, 5.0, 0.25))
    with pytest.warns(UserWarning, match=r"00000\.dcm states a Philips private scale slope \(2005,xx0E\).*"
                                         r"dcm2niix's default \(-p y\) writes them x 2 .*z-score"):
        volume = read_series(tmp_path).volume
    np.testing.assert_array_equal(volume, VALUES * 2 + 5)  # displayed values: stored x 2 + 5
    np.testing.assert_array_equal(volume, _pydicom_volume(files))
    np.testing.assert_array_equal(volume, _sitk_volume(files))


def test_philips_scale_slope_that_changes_nothing_or_of_another_maker_is_no_warning(tmp_path):
    _series(tmp_path / "same", "MR", _philips(2.0, 5.0, 0.5))  # precise = displayed / (2 x 0.5): the same
    np.testing.assert_array_equal(_read_quietly(tmp_path / "same").volume, VALUES * 2 + 5)
    _series(tmp_path / "other", "MR", _philips(2.0, 5.0, 0.25, manufacturer="ACME"))  # dcm2niix: Philips only
    np.testing.assert_array_equal(_read_quietly(tmp_path / "other").volume, VALUES * 2 + 5)


def test_philips_scale_slope_stored_as_unknown_bytes_is_read_from_them(tmp_path, monkeypatch):
    files = _series(tmp_path, "MR", _philips(1.0, 0.0, 0.5))
    for f in files:  # VR UN, as a writer without the private dictionary stores it: the 4 bytes of the float
        ds = pydicom.dcmread(f)
        tag = ds.private_block(0x2005, "Philips MR Imaging DD 001").get_tag(0x0E)
        ds[tag] = pydicom.DataElement(tag, "UN", np.float32(0.5).tobytes())
        ds.save_as(f, enforce_file_format=True)
    monkeypatch.setattr(pydicom.config, "replace_un_with_known_vr", False)  # read as the bytes they are
    assert isinstance(pydicom.dcmread(files[0])[tag].value, bytes)
    with pytest.warns(UserWarning, match=r"writes them x 2 "):
        read_series(tmp_path)


def test_real_world_value_mapping_is_not_applied_as_simpleitk_and_pydicom_read(tmp_path):
    def rwv(ds):
        ds.Manufacturer = "Philips Medical Systems"
        item = Dataset()
        item.RealWorldValueSlope, item.RealWorldValueIntercept = 3.0, 7.0
        item.RealWorldValueFirstValueMapped, item.RealWorldValueLastValueMapped = 0, 4000
        item.LUTLabel, item.LUTExplanation = "T2", "relaxation"
        ds.RealWorldValueMappingSequence = Sequence([item])

    files = _series(tmp_path, "MR", rwv)
    volume = _read_quietly(tmp_path).volume
    np.testing.assert_array_equal(volume, VALUES)
    np.testing.assert_array_equal(volume, _pydicom_volume(files))
    np.testing.assert_array_equal(volume, _sitk_volume(files))


def test_headers_only_read_gives_no_value_warning(tmp_path):
    _series(tmp_path, "CT", _modality_lut)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_series(tmp_path, pixels=False).volume is None


def test_modality_lut_of_a_multiframe_image_is_warned_about_once(tmp_path):
    from ._multiframe import enhanced_image

    path, real = enhanced_image(VALUES, np.eye(4), tmp_path, seed=None)
    ds = pydicom.dcmread(path)
    item = Dataset()
    item.LUTDescriptor = [512, 0, 16]
    item.add_new(0x00283006, "OW", np.arange(512, dtype="<u2").tobytes())
    ds.ModalityLUTSequence = Sequence([item])
    ds.save_as(path, enforce_file_format=True)
    with pytest.warns(UserWarning) as caught:
        volume = read_series(tmp_path).volume
    assert [str(w.message).count("ModalityLUTSequence, which is not applied") for w in caught] == [1]
    assert f"{path.name} states a ModalityLUTSequence" in str(caught[0].message)
    np.testing.assert_allclose(volume, real)  # its frames' rescale, as before


def test_a_series_with_a_modality_lut_table_is_not_labelled_hu(tmp_path):
    """Review 68: the reader leaves a ModalityLUTSequence out (stored values), but ``image_unit`` said "HU" for any CT
    series, so the viewer's legend claimed Hounsfield units for stored values."""
    plain, table = tmp_path / "plain", tmp_path / "table"
    _series(plain, "CT", lambda ds: None)
    _series(table, "CT", _modality_lut)
    assert image_unit(plain) == "HU"
    assert image_unit(table) == "stored values"
