"""The series reader: geometry against each file's own header, values, and the one-line refusals."""

from __future__ import annotations

import io
import shutil

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import DicomSeriesError, read_series, series_affine, write_series  # noqa: E402
from tests.io.dicom._series import GEOMETRIES, make_series  # noqa: E402


def _world_of_file(ds, c, r):
    """LPS position of pixel (column c, row r) from one file's own header (PS3.3 C.7.6.2.1.1)."""
    o = np.asarray(ds.ImageOrientationPatient, float)
    dr, dc = (float(v) for v in ds.PixelSpacing)
    return np.asarray(ds.ImagePositionPatient, float) + c * dc * o[:3] + r * dr * o[3:]


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_geometry_and_values_match_every_file(tmp_path, name):
    values, affine, files = make_series(tmp_path / "s", name)
    s = read_series(tmp_path / "s")
    assert s.shape == values.shape
    tol = 0.25 if GEOMETRIES[name][0] == "CT" else 0.0  # CT stored with slope 0.5: half a step
    lps_to_ras = np.diag([-1.0, -1.0, 1.0])
    for k, path in enumerate(s.files):
        ds = pydicom.dcmread(path)
        # the slice's pixels are the file's own, through its Modality LUT
        expected = ds.pixel_array.T * float(ds.get("RescaleSlope", 1)) + float(ds.get("RescaleIntercept", 0))
        np.testing.assert_allclose(s.volume[:, :, k], expected, atol=1e-4)
        for c, r in ((0, 0), (s.shape[0] - 1, 3), (5, s.shape[1] - 1)):
            world = s.affine @ np.array([c, r, k, 1.0])
            np.testing.assert_allclose(world[:3], lps_to_ras @ _world_of_file(ds, c, r), atol=1e-4)
    # sorted along the normal: positions increase, whatever the file order
    normal = np.cross(*np.split(np.asarray(s.datasets[0].ImageOrientationPatient, float), 2))
    along = [np.asarray(ds.ImagePositionPatient, float) @ normal for ds in s.datasets]
    assert np.all(np.diff(along) > 0)
    # the volume is the written one, in the same voxel order or with the slice axis reversed
    flipped = np.linalg.det(affine[:3, :3]) * np.linalg.det(s.affine[:3, :3]) < 0
    written = values[:, :, ::-1] if flipped else values
    np.testing.assert_allclose(s.volume, written, atol=tol)
    np.testing.assert_allclose(np.sqrt((s.affine[:3, :3] ** 2).sum(0)), np.sqrt((affine[:3, :3] ** 2).sum(0)))
    assert s.modality == GEOMETRIES[name][0]


def test_shuffled_file_names_do_not_order_the_slices(tmp_path):
    _, _, files = make_series(tmp_path / "s", "anisotropic_ct")
    numbers = [int(pydicom.dcmread(f).InstanceNumber) for f in files]
    assert numbers != sorted(numbers)  # the file order is not the slice order
    s = read_series(tmp_path / "s")
    assert [p.name for p in s.files] != sorted(p.name for p in s.files)


def test_headers_only_and_single_slice(tmp_path):
    write_series(np.ones((4, 3, 1)), np.diag([1.0, 1.0, 4.0, 1.0]), tmp_path / "one", modality="MR")
    s = read_series(tmp_path / "one", pixels=False)
    assert s.volume is None and s.shape == (4, 3, 1) and "PixelData" not in s.datasets[0]
    assert s.spacing == pytest.approx((1.0, 1.0, 4.0))


def test_series_affine_reference():
    # a 30-degree in-plane rotation, by hand: column direction (cos, sin, 0), row direction (-sin, cos, 0)
    t = np.deg2rad(30)
    a = series_affine([np.cos(t), np.sin(t), 0, -np.sin(t), np.cos(t), 0], [2.0, 3.0], [1, 2, 3], [0, 0, 4])
    lps = np.array([[3 * np.cos(t), -2 * np.sin(t), 0, 1], [3 * np.sin(t), 2 * np.cos(t), 0, 2], [0, 0, 4, 3]])
    np.testing.assert_allclose(a[:3], np.diag([-1, -1, 1]) @ lps)


# ---------------------------------------------------------------------------------------------------------------
# refusals: one line naming the series and the problem
# ---------------------------------------------------------------------------------------------------------------
def _edit(path, **changes):
    ds = pydicom.dcmread(path)
    for k, v in changes.items():
        setattr(ds, k, v)
    ds.save_as(path)


def _refused(folder, pattern):
    with pytest.raises(DicomSeriesError, match=pattern) as e:
        read_series(folder)
    text = str(e.value)
    assert "\n" not in text and str(folder) in text
    return text


@pytest.fixture
def small(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "s"
    files = write_series(rng.normal(size=(6, 5, 7)) * 50, np.diag([1.0, 1.0, 2.0, 1.0]), folder, modality="CT")
    return folder, files, str(pydicom.dcmread(files[0]).SeriesInstanceUID)


def test_refuses_several_series(small, tmp_path):
    folder, _, _ = small
    write_series(np.zeros((6, 5, 2)), np.eye(4), tmp_path / "other", modality="CT")
    for p in (tmp_path / "other").iterdir():
        shutil.copy(p, folder / f"other_{p.name}")
    _refused(folder, "holds 2 series")


def test_refuses_missing_slices(small):
    folder, files, uid = small
    files[3].unlink()
    assert uid in _refused(folder, "1 missing slice")


def test_refuses_uneven_spacing(small):
    folder, files, uid = small
    ipp = list(pydicom.dcmread(files[3]).ImagePositionPatient)
    _edit(files[3], ImagePositionPatient=[ipp[0], ipp[1], ipp[2] + 0.7])
    assert uid in _refused(folder, "uneven slice spacing")


def test_refuses_duplicate_positions(small):
    folder, files, _ = small
    _edit(files[3], ImagePositionPatient=list(pydicom.dcmread(files[2]).ImagePositionPatient))
    _refused(folder, "same position")


def test_refuses_mixed_orientations(small):
    folder, files, uid = small
    _edit(files[2], ImageOrientationPatient=[1, 0, 0, 0, 0.9950042, 0.0998334])
    assert uid in _refused(folder, "mixed orientations")


def test_refuses_positions_off_a_line(small):
    folder, files, _ = small
    ipp = list(pydicom.dcmread(files[3]).ImagePositionPatient)
    _edit(files[3], ImagePositionPatient=[ipp[0] + 1.5, ipp[1], ipp[2]])
    _refused(folder, "not on one line")


def test_refuses_patient_id_differing_between_slices(small):
    folder, files, uid = small
    _edit(files[4], PatientID="SOMEONE_ELSE")
    assert uid in _refused(folder, "differ in PatientID")


def test_refuses_non_image_objects(small):
    folder, files, _ = small
    ds = pydicom.dcmread(files[0])
    ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.88.34"  # Comprehensive 3D SR
    ds.file_meta.MediaStorageSOPClassUID = ds.SOPClassUID
    ds.save_as(folder / "report.dcm")
    _refused(folder, "not a CT or MR image")


def test_refuses_enhanced_multiframe_and_non_dicom(small):
    folder, files, _ = small
    _edit(files[1], SOPClassUID="1.2.840.10008.5.1.4.1.1.4.1")
    _refused(folder, "Enhanced MR multi-frame")
    _edit(files[1], SOPClassUID="1.2.840.10008.5.1.4.1.1.2")
    (folder / "notes.txt").write_text("not dicom")
    _refused(folder, "notes.txt is not a readable DICOM file")


def test_refuses_empty_folder_and_memory_limit(small, tmp_path):
    (tmp_path / "empty").mkdir()
    _refused(tmp_path / "empty", "holds no file")
    folder, _, _ = small
    _refused_big = pytest.raises(DicomSeriesError, match="over the limit")
    with _refused_big:
        read_series(folder, max_bytes=100)
    assert read_series(folder, max_bytes=4 * 6 * 5 * 7).shape == (6, 5, 7)


def test_writer_refusals(tmp_path):
    with pytest.raises(ValueError, match="modality"):
        write_series(np.zeros((2, 2, 2)), np.eye(4), tmp_path / "a", modality="US")
    with pytest.raises(ValueError, match="finite 3D"):
        write_series(np.full((2, 2, 2), np.nan), np.eye(4), tmp_path / "a")
    skew = np.eye(4)
    skew[0, 1] = 0.5
    with pytest.raises(ValueError, match="orthogonal"):
        write_series(np.zeros((2, 2, 2)), skew, tmp_path / "a")


@pytest.mark.slow
def test_5000_slices_within_the_memory_model(tmp_path):
    """A 5000-slice series: headers first (no pixel data kept), refused over ``max_bytes`` before any pixel."""
    n = 5000
    template = write_series(np.zeros((4, 4, 1)), np.eye(4), tmp_path / "t", modality="MR")[0]
    ds = pydicom.dcmread(template)
    ds.ImagePositionPatient = ["0", "0", "9999.125"]
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = "1.2.3.4.999999999"
    buffer = io.BytesIO()
    ds.save_as(buffer)
    raw = buffer.getvalue()
    (tmp_path / "long").mkdir()
    for k in range(n):  # the same header with its position and UID patched: 5000 files in a second
        data = raw.replace(b"9999.125", f"{k * 0.5:08.3f}".encode()).replace(b"1.2.3.4.999999999",
                                                                           f"1.2.3.4.{100000000 + k}".encode())
        (tmp_path / "long" / f"{k:05d}.dcm").write_bytes(data)
    # the volume would take 4 * 4 * 4 * 5000 bytes: refused from the headers alone, before any pixel is read
    with pytest.raises(DicomSeriesError, match=r"4 x 4 x 5000\) takes 0\.3 MiB, over the limit"):
        read_series(tmp_path / "long", max_bytes=4 * 4 * 4 * n - 1)


def test_reading_nifti_stays_quiet_with_pydicom_installed(tmp_path, caplog):
    """MONAI's nvImageCodec notices (logged and warned when pydicom is installed) do not reach a command's stderr."""
    import logging
    import warnings

    import nibabel as nib

    from monai_unc.io import read_volume

    nib.save(nib.Nifti1Image(np.zeros((3, 3, 3), np.float32), np.eye(4)), tmp_path / "x.nii.gz")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG):
        warnings.simplefilter("always")
        assert read_volume(tmp_path / "x.nii.gz")[0].shape == (1, 3, 3, 3)
    assert not [w for w in caught if "nvImageCodec" in str(w.message) or "NvImgCodec" in str(w.message)]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "nvImageCodec" in r.getMessage()]
