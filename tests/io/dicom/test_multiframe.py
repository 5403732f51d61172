"""Enhanced multi-frame source images: read as the single-frame series they hold, refused when they are not one stack.

References: the same slices written as single-frame files and read by ``read_series`` (volume and affine equal),
and highdicom's own volume reader (``highdicom.imread(...).get_volume()``), which sorts the frames and builds the
geometry by its own code.
"""

from __future__ import annotations

import copy
import shutil

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import DicomSeriesError, read_series  # noqa: E402
from tests.io.dicom._multiframe import enhanced_image, legacy_multiframe  # noqa: E402
from tests.io.dicom._series import GEOMETRIES, make_series, mni_small, series_values  # noqa: E402

_LPS = np.diag([-1.0, -1.0, 1.0, 1.0])


def _same_as_highdicom(series, path):
    """The series' volume and affine against highdicom's volume of the file (its own sorting and geometry)."""
    v = hd.imread(str(path)).get_volume()
    # highdicom indexes (slice, row, column) in LPS: our voxel (c, r, k) must map to an integer voxel of it
    m = np.linalg.inv(v.affine) @ _LPS @ series.affine
    np.testing.assert_allclose(m, np.round(m), atol=1e-6)
    m = np.round(m).astype(int)
    c, r, k = np.meshgrid(*(np.arange(n) for n in series.shape), indexing="ij")
    index = np.einsum("ij,j...->i...", m[:3, :3], np.stack([c, r, k])) + m[:3, 3][:, None, None, None]
    np.testing.assert_array_equal(series.volume, v.array[index[0], index[1], index[2]])


def _frame_position(ds, frame):
    """ImagePositionPatient of a frame (1-based) from the file's own per-frame functional groups."""
    return np.asarray(ds.PerFrameFunctionalGroupsSequence[frame - 1].PlanePositionSequence[0].ImagePositionPatient,
                      float)


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_legacy_converted_reads_as_its_single_frame_series(tmp_path, name):
    _, _, files = make_series(tmp_path / "single", name)
    path = legacy_multiframe(files, tmp_path / "multi")
    single, multi = read_series(tmp_path / "single"), read_series(tmp_path / "multi")
    np.testing.assert_array_equal(multi.volume, single.volume)
    np.testing.assert_array_equal(multi.affine, single.affine)
    assert multi.shape == single.shape and multi.series_uid == single.series_uid and multi.modality == single.modality
    assert multi.multiframe and not single.multiframe and single.frames is None
    n = multi.shape[2]
    assert sorted(multi.frames) == list(range(1, n + 1))
    assert multi.files == [path] * n and all(ds is multi.datasets[0] for ds in multi.datasets)
    ds = pydicom.dcmread(path, stop_before_pixels=True)
    for k, frame in enumerate(multi.frames):  # slice k is that frame: at the single-frame slice k's position
        np.testing.assert_allclose(_frame_position(ds, frame), single.datasets[k].ImagePositionPatient, atol=1e-9)
        np.testing.assert_allclose(multi.positions[k], _frame_position(ds, frame))
    _same_as_highdicom(multi, path)
    headers = read_series(tmp_path / "multi", pixels=False)
    assert headers.volume is None and headers.frames == multi.frames


@pytest.mark.parametrize("per_frame_geometry", [False, True])
@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_hand_built_enhanced_image(tmp_path, name, per_frame_geometry):
    """Frames shuffled, per-frame rescale, oblique / anisotropic / reversed geometry, geometry shared or per frame."""
    modality, affine, _ = GEOMETRIES[name]
    values = series_values(mni_small()[0], modality)
    path, real = enhanced_image(values, affine, tmp_path / "e", modality, seed=3,
                                per_frame_geometry=per_frame_geometry)
    s = read_series(tmp_path / "e")
    assert s.frames != sorted(s.frames)  # the file's frame order is not the slice order
    flipped = np.linalg.det(affine[:3, :3]) * np.linalg.det(s.affine[:3, :3]) < 0
    np.testing.assert_array_equal(s.volume, (real[:, :, ::-1] if flipped else real).astype(np.float32))
    _same_as_highdicom(s, path)
    # the same grid as the single-frame series of the same affine (its positions written as 12-digit decimals)
    write = tmp_path / "single"
    from monai_unc.io.dicom import write_series

    write_series(np.zeros(values.shape), affine, write, modality=modality)
    np.testing.assert_allclose(s.affine, read_series(write, pixels=False).affine, atol=1e-6)
    ds = pydicom.dcmread(path, stop_before_pixels=True)
    along = [_frame_position(ds, f) @ np.cross(s.orientation[:3], s.orientation[3:]) for f in s.frames]
    assert np.all(np.diff(along) > 0)


def test_enhanced_mr_without_rescale_is_identity(tmp_path):
    values = series_values(mni_small()[0], "MR")
    _, real = enhanced_image(values, np.eye(4), tmp_path / "e", "MR", seed=1, rescale=False)
    s = read_series(tmp_path / "e")
    np.testing.assert_array_equal(s.volume, real.astype(np.float32))
    np.testing.assert_array_equal(real, values)


def test_one_frame(tmp_path):
    path, real = enhanced_image(np.arange(12.0).reshape(4, 3, 1), np.diag([0.5, 0.5, 4.0, 1]), tmp_path / "e",
                                "MR", seed=None, rescale=False)
    s = read_series(tmp_path / "e")
    assert s.shape == (4, 3, 1) and s.frames == [1] and s.spacing == pytest.approx((0.5, 0.5, 4.0))
    np.testing.assert_array_equal(s.volume, real)


def _refused(folder, *parts):
    with pytest.raises(DicomSeriesError) as e:
        read_series(folder)
    text = str(e.value)
    assert "\n" not in text and str(folder) in text, text
    for part in parts:
        assert part in text, text
    return text


def _enhanced(tmp_path, frame_edit=None, **kwargs):
    values = series_values(mni_small()[0], "MR")
    path, _ = enhanced_image(values, np.eye(4), tmp_path / "e", "MR", seed=2, frame_edit=frame_edit, **kwargs)
    return path


@pytest.mark.parametrize("group, attribute, value, what", [
    ("FrameContentSequence", "StackID", "2", "several stacks"),
    ("FrameContentSequence", "TemporalPositionIndex", 2, "several temporal positions"),
    ("MREchoSequence", "EffectiveEchoTime", 20.0, "several echoes"),
    ("MRDiffusionSequence", "DiffusionBValue", 1000.0, "several b-values"),
    ("MRImageFrameTypeSequence", "ComplexImageComponent", "PHASE", "several complex components"),
])
def test_refuses_several_stacks_or_dimensions(tmp_path, group, attribute, value, what):
    def edit(i, g):
        if group not in g:
            setattr(g, group, [pydicom.Dataset()])
        first = {"StackID": "1", "TemporalPositionIndex": 1, "EffectiveEchoTime": 10.0, "DiffusionBValue": 0.0,
                 "ComplexImageComponent": "MAGNITUDE"}
        setattr(g[group].value[0], attribute, value if i % 2 else first[attribute])

    path = _enhanced(tmp_path, edit)
    uid = str(pydicom.dcmread(path, stop_before_pixels=True).SeriesInstanceUID)
    _refused(path.parent, uid, what, "enhanced.dcm", attribute)


def test_refuses_two_frames_at_one_position(tmp_path):
    def edit(i, g):
        if i == 4:
            g.PlanePositionSequence[0].ImagePositionPatient = [0, 0, 3.0]  # slice 3's position: frame i != slice 3

    _refused(_enhanced(tmp_path, edit).parent, "enhanced.dcm: frames", "lie at the same position")


@pytest.mark.parametrize("sequence, attribute", [("PlanePositionSequence", "ImagePositionPatient"),
                                                 ("PlaneOrientationSequence", "ImageOrientationPatient"),
                                                 ("PixelMeasuresSequence", "PixelSpacing")])
def test_refuses_a_frame_without_its_geometry(tmp_path, sequence, attribute):
    def edit(i, g):
        if i == 5:
            del g[sequence]

    _refused(_enhanced(tmp_path, edit, per_frame_geometry=True).parent, "enhanced.dcm frame 6 has no valid",
             attribute)


def test_refuses_mixed_orientations_spacings_and_gaps(tmp_path):
    def tilt(i, g):
        if i == 2:
            g.PlaneOrientationSequence[0].ImageOrientationPatient = [1, 0, 0, 0, 0.8, 0.6]

    _refused(_enhanced(tmp_path / "a", tilt, per_frame_geometry=True).parent, "mixed orientations",
             "differs between frames")

    def spacing(i, g):
        if i == 2:
            g.PixelMeasuresSequence[0].PixelSpacing = [1.5, 1.0]

    _refused(_enhanced(tmp_path / "b", spacing, per_frame_geometry=True).parent, "PixelSpacing differs between frames")

    def gap(i, g):  # the upper half one step further: one frame missing
        position = g.PlanePositionSequence[0].ImagePositionPatient
        if float(position[2]) >= 6:
            g.PlanePositionSequence[0].ImagePositionPatient = [0, 0, float(position[2]) + 1]

    _refused(_enhanced(tmp_path / "c", gap).parent, "1 missing frame(s)")

    def uneven(i, g):
        position = g.PlanePositionSequence[0].ImagePositionPatient
        if float(position[2]) == 6:
            g.PlanePositionSequence[0].ImagePositionPatient = [0, 0, 6.4]

    _refused(_enhanced(tmp_path / "d", uneven).parent, "uneven frame spacing")


def test_refuses_a_multiframe_image_beside_other_files(tmp_path):
    _, _, files = make_series(tmp_path / "single", "axial_ct")
    path = legacy_multiframe(files, tmp_path / "multi")
    shutil.copy(files[0], tmp_path / "multi" / "slice.dcm")
    _refused(tmp_path / "multi", path.name,
             "is a Legacy Converted Enhanced CT multi-frame image beside 1 other file(s)")


def test_refuses_frame_groups_per_frame_rescale_and_what_single_frames_refuse(tmp_path):
    path = _enhanced(tmp_path / "a")
    ds = pydicom.dcmread(path)
    del ds.PerFrameFunctionalGroupsSequence[-1]
    ds.save_as(path)
    _refused(path.parent, "11 PerFrameFunctionalGroupsSequence item(s) for its 12 frames")

    def zero(i, g):
        if i == 7:
            g.PixelValueTransformationSequence[0].RescaleSlope = 0

    path = _enhanced(tmp_path / "b", zero)
    read_series(path.parent, pixels=False)  # the headers are fine
    _refused(path.parent, "enhanced.dcm frame 8: RescaleSlope 0")

    def two(i, g):
        if i == 3:
            g.PixelValueTransformationSequence[0].RescaleIntercept = [1, 2]

    _refused(_enhanced(tmp_path / "c", two).parent, "enhanced.dcm frame 4: RescaleIntercept has 2 values")
    path = _enhanced(tmp_path / "d")
    with pytest.raises(DicomSeriesError, match="over the limit"):
        read_series(path.parent, max_bytes=100)
    ds = pydicom.dcmread(path)
    del ds.SOPInstanceUID
    ds.save_as(path, enforce_file_format=False)
    _refused(path.parent, "enhanced.dcm has no SOPInstanceUID")


def test_a_second_multiframe_image_is_refused(tmp_path):
    path = _enhanced(tmp_path)
    other = copy.deepcopy(pydicom.dcmread(path))
    other.SOPInstanceUID = other.file_meta.MediaStorageSOPInstanceUID = pydicom.uid.generate_uid()
    other.save_as(path.parent / "second.dcm")
    _refused(path.parent, "Enhanced MR multi-frame image beside 1 other file(s)")


def test_the_input_digest_of_a_multiframe_folder_follows_its_one_file(tmp_path):
    """A resume and ``dicom-export`` compare the digest of the series folder: one multi-frame file edited in place
    (size kept) counts as changed; the same content does not."""
    import os

    from monai_unc.io import changed_inputs, input_digests

    path = _enhanced(tmp_path)
    assert read_series(path.parent, pixels=False).files[0] == path  # the folder is a series: its one file
    record = {"input_digests": input_digests([path.parent])}
    assert [f[0] for f in record["input_digests"][0]["stat"]] == ["enhanced.dcm"]
    assert changed_inputs([path.parent], record) == []
    data = bytearray(path.read_bytes())
    stat = path.stat()
    data[-1] ^= 1  # one pixel of the last frame
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # size and modification time kept
    assert changed_inputs([path.parent], record) == [path.parent.name]


def test_pixels_are_read_one_frame_at_a_time(tmp_path):
    """The memory model of single-frame series holds: the headers, the volume and one frame, never the file's whole
    pixel data (here a quarter of it is the margin: 16 frames)."""
    import tracemalloc

    values = np.random.default_rng(0).integers(0, 4000, (256, 256, 64)).astype(float)
    path, _ = enhanced_image(values, np.eye(4), tmp_path / "e", "MR", seed=1)
    stored, volume = 2 * values.size, 4 * values.size  # uint16 in the file, float32 read
    peaks = []
    for pixels in (False, True):
        tracemalloc.start()
        try:
            read_series(path.parent, pixels=pixels)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[1] < peaks[0] + volume + stored / 4, (peaks, volume, stored)


def test_refuses_pixel_data_short_of_its_frames(tmp_path):
    path = _enhanced(tmp_path)
    ds = pydicom.dcmread(path)
    ds.PixelData = ds.PixelData[: len(ds.PixelData) // 2]  # six of the twelve frames
    ds.save_as(path)
    assert read_series(path.parent, pixels=False).shape[2] == 12  # the headers are fine
    _refused(path.parent, "enhanced.dcm: pixel data of frame 7 unreadable")


def test_geometry_fields_of_a_single_frame_series_are_its_headers(tmp_path):
    """``positions``, ``orientation`` and ``pixel_spacing`` are what each slice's header says (slice 0's: the first
    along the normal, not the first file)."""
    make_series(tmp_path / "s", "oblique_mr")
    s = read_series(tmp_path / "s", pixels=False)
    for k, ds in enumerate(s.datasets):
        np.testing.assert_array_equal(s.positions[k], np.asarray(ds.ImagePositionPatient, float))
    np.testing.assert_array_equal(s.orientation, np.asarray(s.datasets[0].ImageOrientationPatient, float))
    np.testing.assert_array_equal(s.pixel_spacing, np.asarray(s.datasets[0].PixelSpacing, float))
    assert s.frames is None and not s.multiframe
