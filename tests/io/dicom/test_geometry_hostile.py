"""Hostile geometry checks of the DICOM input and output, against references independent of the export's code.

Every expected position is computed here with numpy from the NIfTI affine (RAS) and each file's own header
(ImagePositionPatient, ImageOrientationPatient, PixelSpacing, per-frame PlanePositionSequence), or read back with
SimpleITK: sagittal and coronal stacks, left-handed (one flipped axis) and oblique affines, anisotropic voxels,
non-square slices (rows != columns, where a transposition shows), a single slice, NIfTI outputs stored in another
axis order (canonical RAS), a gantry-tilted stack (slices offset in-plane), NIfTI grids that drift off the series',
label values that no segment takes.
"""

from __future__ import annotations

import copy
import warnings

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io import CaseError, grid_mismatch  # noqa: E402
from monai_unc.io.dicom import (  # noqa: E402
    DICOM_GEOMETRY_ATOL,
    default_segment,
    read_segmentation_labels,
    read_series,
    to_series_grid,
    write_fractional_segmentation,
    write_parametric_map,
    write_segmentation,
    write_series,
)
from monai_unc.workflows.dicom import dicom_export  # noqa: E402
from tests.io.dicom._series import dciodvfy_errors, rotation  # noqa: E402
from tests.workflows.test_dicom_export import _nifti_at, _source_world, _sources, _sr_items  # noqa: E402


def _affine(matrix, origin) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3], out[:3, 3] = matrix, origin
    return out


#: name -> RAS affine of the NIfTI grid (voxel (i, j, k) -> mm)
AFFINES = {
    # columns go anterior, rows superior, slices right to left: a sagittal stack
    "sagittal": _affine([[0, 0, -2.0], [0.9, 0, 0], [0, 1.1, 0]], [40, -60, 20]),
    # columns left to right, rows inferior, slices posterior: a coronal stack with 0.6 x 0.5 x 3 mm voxels
    "coronal": _affine([[0.6, 0, 0], [0, 0, 3.0], [0, -0.5, 0]], [-30, 10, 50]),
    # 0.7 x 0.7 x 5 mm with the slice axis flipped (negative determinant)
    "left_handed": _affine(np.diag([0.7, 0.7, -5.0]), [0, 0, 40]),
    # oblique about three axes, one in-plane axis flipped
    "oblique_left": _affine(rotation(0, 25) @ rotation(1, -10) @ rotation(2, 33) @ np.diag([0.7, -0.9, 4.0]),
                            [5, 6, 7]),
}
#: (columns, rows, slices): rows != columns, and one slice
SHAPES = {"7x5x4": (7, 5, 4), "5x6x1": (5, 6, 1)}


def _world_of_frame(ds, i: int) -> np.ndarray:
    """RAS world coordinates (rows, columns, 3) of frame ``i`` of a multi-frame object, from its functional groups."""
    frame, shared = ds.PerFrameFunctionalGroupsSequence[i], ds.SharedFunctionalGroupsSequence[0]

    def item(name):
        return (frame if name in frame else shared)[name][0]

    o = np.asarray(item("PlaneOrientationSequence").ImageOrientationPatient, float)
    dr, dc = (float(v) for v in item("PixelMeasuresSequence").PixelSpacing)
    r, c = np.mgrid[: int(ds.Rows), : int(ds.Columns)]
    ipp = np.asarray(item("PlanePositionSequence").ImagePositionPatient, float)
    return (ipp + c[..., None] * dc * o[:3] + r[..., None] * dr * o[3:]) * [-1, -1, 1]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("name", sorted(AFFINES))
def test_series_pixels_lie_where_the_nifti_affine_puts_them(tmp_path, name, shape):
    """Guard: each stored pixel and each voxel of the read volume sit at the world position of their source voxel."""
    sitk = pytest.importorskip("SimpleITK")
    affine, shape = AFFINES[name], SHAPES[shape]
    values = np.random.default_rng(0).integers(0, 1000, shape).astype(float)
    write_series(values, affine, tmp_path / "s", modality="MR", shuffle_seed=4)
    series = read_series(tmp_path / "s")
    for path in series.files:  # each file on its own header
        ds = pydicom.dcmread(path)
        np.testing.assert_array_equal(ds.pixel_array, _nifti_at(values, affine, _source_world(ds)))
    ijk = np.stack(np.meshgrid(*map(np.arange, series.shape), indexing="ij"), -1).reshape(-1, 3)
    world = np.c_[ijk, np.ones(len(ijk))] @ series.affine.T
    np.testing.assert_array_equal(series.volume.reshape(-1), _nifti_at(values, affine, world[None, :, :3]).ravel())
    if shape[2] > 1:  # SimpleITK (GDCM) on the same files: its own geometry code
        reader = sitk.ImageSeriesReader()
        reader.SetFileNames(reader.GetGDCMSeriesFileNames(str(tmp_path / "s")))
        image = reader.Execute()
        arr = sitk.GetArrayFromImage(image)  # (k, r, c)
        lps = np.array([image.TransformIndexToPhysicalPoint((int(c), int(r), int(k)))
                        for k, r, c in np.ndindex(arr.shape)])
        np.testing.assert_array_equal(arr.ravel(), _nifti_at(values, affine, (lps * [-1, -1, 1])[None]).ravel())


@pytest.mark.parametrize("name", ["sagittal", "oblique_left"])
def test_exported_frames_hold_each_voxel_at_its_patient_position(tmp_path, name):
    """Guard: the export of NIfTI outputs stored in canonical RAS order (not the series' order) of a non-square
    sagittal or left-handed oblique series puts every SEG, FRACTIONAL SEG and Parametric Map pixel at its voxel."""
    affine, shape = AFFINES[name], (7, 5, 4)
    rng = np.random.default_rng(3)
    write_series(rng.integers(0, 100, shape).astype(float), affine, tmp_path / "series" / "c0", modality="MR",
                 shuffle_seed=2)
    labels = rng.integers(0, 3, shape).astype(np.uint8)
    probs = rng.dirichlet(np.ones(3), size=shape).astype(np.float32)
    pe = rng.random(shape).astype(np.float32)
    pred = tmp_path / "pred"
    pred.mkdir()
    for arr, file in ((labels, "c0_seg.nii.gz"), (probs, "c0_probs.nii.gz"), (pe, "c0_predictive_entropy.nii.gz")):
        nib.save(nib.as_closest_canonical(nib.Nifti1Image(arr, affine)), pred / file)
    assert not np.allclose(nib.load(pred / "c0_seg.nii.gz").affine, affine)  # really stored in another order
    dicom_export(pred, tmp_path / "series", tmp_path / "out", progress=False)
    sources = _sources(tmp_path / "series" / "c0")
    for file in ("seg", "probabilities", "predictive_entropy"):
        ds = pydicom.dcmread(tmp_path / "out" / "c0" / f"{file}.dcm")
        pixels = ds.pixel_array.reshape(int(ds.NumberOfFrames), int(ds.Rows), int(ds.Columns))
        for i, frame in enumerate(ds.PerFrameFunctionalGroupsSequence):
            world = _world_of_frame(ds, i)
            ref = str(frame.DerivationImageSequence[0].SourceImageSequence[0].ReferencedSOPInstanceUID)
            np.testing.assert_allclose(_source_world(sources[ref]), world, atol=1e-4)  # the slice it lies on
            if file == "predictive_entropy":
                np.testing.assert_array_equal(pixels[i], _nifti_at(pe, affine, world))
                continue
            number = int(frame.SegmentIdentificationSequence[0].ReferencedSegmentNumber)
            if file == "seg":
                np.testing.assert_array_equal(pixels[i] > 0, _nifti_at(labels, affine, world) == number)
            else:
                p = _nifti_at(np.moveaxis(probs, -1, 0)[number], affine, world)
                assert np.abs(pixels[i] / 255 - p).max() <= 1 / 510 + 1e-6
    series = read_series(tmp_path / "series" / "c0", pixels=False)
    expected = to_series_grid(labels[None], affine, series, "labels")[0]
    np.testing.assert_array_equal(read_segmentation_labels(tmp_path / "out" / "c0" / "seg.dcm", series), expected)


def _three_objects(series, shape, folder):
    """A SEG, a FRACTIONAL SEG and a Parametric Map of ``series`` (a mask in its first slice), in ``folder``."""
    labels = np.zeros(shape, np.uint8)
    labels[:3, 1:, 0] = 1
    return [
        write_segmentation(labels, series, folder / "seg.dcm", [default_segment(1)]),
        write_fractional_segmentation(np.stack([1 - labels, labels]).astype(np.float32), series,
                                      folder / "probs.dcm", [default_segment(1)]),
        write_parametric_map(np.full(shape, 0.25, np.float32), series, folder / "pm.dcm", "variance"),
    ]


def test_single_slice_objects_state_the_series_slice_spacing(tmp_path):
    """One 5 mm slice: the derived objects said SpacingBetweenSlices 1 mm (highdicom's default for one position)."""
    shape, affine = (6, 4, 1), _affine(np.diag([0.7, 0.8, 5.0]), [3, -4, 12])
    write_series(np.zeros(shape), affine, tmp_path / "s", modality="CT")
    series = read_series(tmp_path / "s", pixels=False)
    assert series.spacing == pytest.approx((0.7, 0.8, 5.0))
    written = _three_objects(series, shape, tmp_path)
    for path in written:
        ds = pydicom.dcmread(path)
        measures = ds.SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0]
        assert float(measures.SpacingBetweenSlices) == pytest.approx(5.0), path.name
        assert float(measures.SliceThickness) == pytest.approx(5.0), path.name
        assert dciodvfy_errors(path) == []
    volume = hd.seg.segread(written[0]).get_volume()  # highdicom's own volume reading of the SEG
    assert sorted(volume.spacing) == pytest.approx([0.7, 0.8, 5.0])


def _without_thickness(folder, shape, affine, thickness, spacing=None):
    """A CT series whose slices' SliceThickness is ``thickness`` (None: empty, ``"absent"``: deleted)."""
    files = write_series(np.zeros(shape), affine, folder, modality="CT")
    for f in files:
        ds = pydicom.dcmread(f)
        if thickness == "absent":
            del ds.SliceThickness
        else:
            ds.SliceThickness = thickness
        if spacing is not None:
            ds.SpacingBetweenSlices = spacing
        ds.save_as(f)
    return read_series(folder, pixels=False)


@pytest.mark.parametrize("thickness", [None, 0.0, "absent"], ids=["empty", "zero", "absent"])
@pytest.mark.parametrize("slices, spacing, expected", [
    (3, None, 2.5),  # the distance between the slice planes
    (1, 3.0, 3.0),  # one slice: its SpacingBetweenSlices
    (1, None, 1.0),  # one slice stating no spacing at all: read_series' 1 mm
], ids=["3_slices", "1_slice_spacing", "1_slice_nothing"])
def test_objects_of_a_series_without_a_slice_thickness_state_one(tmp_path, thickness, slices, spacing, expected):
    """SliceThickness is type 2 in the CT / MR image: an empty or zero one made SEGs that dciodvfy refused."""
    shape, affine = (6, 4, slices), _affine(rotation(0, 10) @ np.diag([0.7, 0.8, 2.5]), [3, -4, 12])
    if slices == 1 and spacing is None:  # the 1 mm is said (review 56)
        with pytest.warns(UserWarning, match="a single slice without SpacingBetweenSlices or SliceThickness"):
            series = _without_thickness(tmp_path / "s", shape, affine, thickness, spacing)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            series = _without_thickness(tmp_path / "s", shape, affine, thickness, spacing)
    written = _three_objects(series, shape, tmp_path)
    for path in written:
        measures = pydicom.dcmread(path).SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0]
        assert float(measures.SliceThickness) == pytest.approx(expected), path.name
        assert float(measures.SpacingBetweenSlices) == pytest.approx(expected), path.name
        assert dciodvfy_errors(path) == [], path.name


def test_a_source_slice_thickness_is_kept(tmp_path):
    """A source stating its thickness (2 mm slices 2.5 mm apart) keeps it: only a missing or zero one is filled."""
    shape, affine = (6, 4, 3), _affine(np.diag([0.7, 0.8, 2.5]), [0, 0, 0])
    series = _without_thickness(tmp_path / "s", shape, affine, 2.0)
    path = write_segmentation(np.ones(shape, np.uint8), series, tmp_path / "seg.dcm", [default_segment(1)])
    measures = pydicom.dcmread(path).SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0]
    assert (float(measures.SliceThickness), float(measures.SpacingBetweenSlices)) == pytest.approx((2.0, 2.5))


def _tilted(tmp_path, shape=(6, 4, 5)):
    """A gantry-tilted CT: each 5 mm slice 2 mm further posterior; its stack is sheared, voxels 0.7 x 0.8 x 5 mm."""
    affine = _affine([[0.7, 0, 0], [0, 0.8, -2.0], [0, 0, 5.0]], [0, 0, 0])
    write_series(np.zeros(shape), affine, tmp_path / "series" / "c0", modality="CT")
    return affine


def test_tilted_series_slice_thickness_and_voxel_volume(tmp_path):
    """A sheared stack's slices are 5 mm apart (not the 5.39 mm step between their positions)."""
    affine = _tilted(tmp_path)
    series = read_series(tmp_path / "series" / "c0", pixels=False)
    np.testing.assert_allclose(series.affine, affine, atol=1e-6)
    assert series.spacing[2] == pytest.approx(np.hypot(2.0, 5.0))  # the step between slice positions
    assert series.slice_spacing == pytest.approx(5.0)
    assert series.voxel_volume == pytest.approx(0.7 * 0.8 * 5.0)
    assert float(series.datasets[0].SliceThickness) == pytest.approx(5.0)


def test_tilted_series_sr_volumes_are_voxels_times_the_true_voxel_volume(tmp_path):
    """The SR's segment volume is the voxel count times |det| of the affine (it used the 5.39 mm step: +7.7 %)."""
    affine, shape = _tilted(tmp_path), (6, 4, 5)
    labels = np.zeros(shape, np.uint8)
    labels[1:5, 1:3, :] = 1
    pred = tmp_path / "pred"
    pred.mkdir()
    nib.save(nib.Nifti1Image(labels, affine), pred / "c0_seg.nii.gz")
    dicom_export(pred, tmp_path / "series", tmp_path / "out", progress=False)
    sr = hd.sr.Comprehensive3DSR.from_dataset(pydicom.dcmread(tmp_path / "out" / "c0" / "sr.dcm"))
    volume = [v for g, name, v in _sr_items(sr) if g == "segment 1" and name == "Volume"]
    expected = np.count_nonzero(labels) * abs(np.linalg.det(affine[:3, :3])) / 1000
    assert volume == [pytest.approx(expected, rel=1e-9)]


def test_a_nifti_grid_drifting_off_the_series_is_refused(tmp_path):
    """0.709 mm columns against 0.7 mm: each affine entry is within 0.01 mm, the far column 5.4 mm off."""
    affine = np.diag([0.7, 0.7, 3.0, 1.0])
    write_series(np.zeros((600, 2, 2)), affine, tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    drifted = affine.copy()
    drifted[0, 0] = 0.709
    with pytest.raises(ValueError, match=r"map is not on the grid of the series .* \(voxel centres up to 5\.391 mm "
                                         r"apart, tolerance 0\.07 mm\); it must come from that series"):
        to_series_grid(np.zeros((1, 600, 2, 2)), drifted, series, "map")
    to_series_grid(np.zeros((1, 600, 2, 2)), affine.astype(np.float32), series, "map")  # float32 NIfTI: same grid


def test_a_nifti_grid_is_compared_by_its_voxel_centres_not_by_affine_entries(tmp_path):
    """The DICOM check is the package's one same-space rule (grid_mismatch): harmless differences of entries pass.

    The entry-wise pre-check refused a NIfTI shifted by 0.03 mm on 0.7 mm voxels (a twentieth of a voxel, within the
    tenth the volumes of a case allow) and a one-slice NIfTI stating another slice thickness (its voxel centres are
    the series'); what moves a voxel centre beyond the tolerance stays refused.
    """
    affine = np.diag([0.7, 0.7, 3.0, 1.0])
    write_series(np.zeros((600, 2, 2)), affine, tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    shifted = series.affine.copy()
    shifted[:3, 3] += [0.03, -0.02, 0.01]  # 0.037 mm: under 0.07 mm, two entries over 0.01 mm
    data = np.arange(2400.0).reshape(1, 600, 2, 2)
    np.testing.assert_array_equal(to_series_grid(data, shifted, series, "map"), data)
    assert grid_mismatch(shifted, series.affine, series.shape) is None  # the rule of the volumes of a case agrees
    far = series.affine.copy()
    far[:3, 3] += [0.08, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"map is not on the grid .* up to 0\.08 mm apart, tolerance 0\.07 mm"):
        to_series_grid(data, far, series, "map")
    turn = np.eye(4)
    turn[:3, :3] = rotation(2, 0.05)
    tilted = series.affine @ turn  # entries within 0.001 mm, the far column 0.37 mm off
    assert np.abs(tilted - series.affine).max() < 1e-3
    with pytest.raises(ValueError, match=r"map is not on the grid .* up to 0\.3659 mm apart"):
        to_series_grid(data, tilted, series, "map")

    one = tmp_path / "one"
    write_series(np.zeros((4, 3, 1)), np.diag([0.8, 0.8, 5.0, 1.0]), one, modality="MR")
    single = read_series(one, pixels=False)
    thin = single.affine.copy()
    thin[:3, 2] *= 1.0 / 5.0  # the same voxel centres, a 1 mm slice stated (another converter's thickness)
    plane = np.arange(12.0).reshape(1, 4, 3, 1)
    np.testing.assert_array_equal(to_series_grid(plane, thin, single, "map"), plane)


def test_the_dicom_floor_of_the_grid_check_is_kept_for_fine_voxels(tmp_path):
    """0.05 mm voxels: the fraction gives 0.005 mm, the DICOM floor 0.01 mm (the series' own grid is read to 0.01 mm);
    the volumes of a case keep 1e-3 mm."""
    write_series(np.zeros((8, 8, 3)), np.diag([0.05, 0.05, 0.05, 1.0]), tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    moved = series.affine.copy()
    moved[0, 3] += 0.008
    to_series_grid(np.zeros((1, 8, 8, 3)), moved, series, "map")
    assert grid_mismatch(moved, series.affine, series.shape) == "voxel centres up to 0.008 mm apart, tolerance 0.005 mm"
    assert grid_mismatch(moved, series.affine, series.shape, atol=DICOM_GEOMETRY_ATOL) is None
    moved[0, 3] += 0.004
    with pytest.raises(ValueError, match=r"map is not on the grid .* up to 0\.012 mm apart, tolerance 0\.01 mm"):
        to_series_grid(np.zeros((1, 8, 8, 3)), moved, series, "map")


@pytest.mark.parametrize("atol", [-1e-3, float("nan"), float("inf"), "0.01", True, None])
def test_grid_mismatch_refuses_a_bad_floor(atol):
    with pytest.raises(ValueError, match="atol must be a finite number of mm >= 0"):
        grid_mismatch(np.eye(4), np.eye(4), (2, 2, 2), atol=atol)


def test_an_affine_holding_nan_is_not_on_the_series_grid(tmp_path):
    """The entry-wise and corner checks both compared NaN as passing (a NaN origin was accepted); it is refused, as
    an affine that is not finite, before the grids are compared."""
    write_series(np.zeros((4, 3, 2)), np.diag([0.8, 0.8, 2.0, 1.0]), tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    broken = series.affine.copy()
    broken[0, 3] = np.nan
    with pytest.raises(ValueError, match=r"map has no valid affine \(not finite, or axes of no volume\): not on "
                                         r"the grid of the series"):
        to_series_grid(np.zeros((1, 4, 3, 2)), broken, series, "map")


def test_labels_that_no_segment_takes_are_refused(tmp_path):
    """A label map with labels 1..3 and 3-channel region probabilities (nnU-Net regions) silently lost label 3."""
    shape, affine = (4, 3, 2), np.diag([1.0, 1.0, 2.0, 1.0])
    write_series(np.zeros(shape), affine, tmp_path / "series" / "c0", modality="MR")
    pred = tmp_path / "pred"
    pred.mkdir()
    labels = np.zeros(shape, np.int16)
    labels[0], labels[1], labels[2] = 1, 2, 3
    nib.save(nib.Nifti1Image(labels, affine), pred / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(np.full((*shape, 3), 0.5, np.float32), affine), pred / "c0_probs.nii.gz")
    with pytest.raises(CaseError, match=r"case c0: segmentation c0_seg.nii.gz holds the label\(s\) 3, but the "
                                        r"probabilities c0_probs.nii.gz have 3 channels"):
        dicom_export(pred, tmp_path / "series", tmp_path / "out", progress=False)
    # without the probabilities every label is a segment (segment s = label s)
    dicom_export(pred, tmp_path / "series", tmp_path / "out", progress=False, probabilities=False)
    series = read_series(tmp_path / "series" / "c0", pixels=False)
    np.testing.assert_array_equal(read_segmentation_labels(tmp_path / "out" / "c0" / "seg.dcm", series), labels)
    labels[3, 0, 0] = -1
    nib.save(nib.Nifti1Image(labels, affine), pred / "c0_seg.nii.gz")
    with pytest.raises(CaseError, match=r"holds the label\(s\) -1: class values must be 0 \(background\) or positive"):
        dicom_export(pred, tmp_path / "series", tmp_path / "out2", progress=False, probabilities=False)


def test_sparse_label_values_keep_segment_number_equal_to_label(tmp_path):
    """Guard: labels {0, 2, 5} give segments 1..5 (1, 3, 4 empty), and reading the SEG gives the labels back."""
    shape, affine = (5, 3, 3), np.diag([1.0, 1.0, 2.0, 1.0])
    write_series(np.zeros(shape), affine, tmp_path / "series" / "c0", modality="CT")
    pred = tmp_path / "pred"
    pred.mkdir()
    labels = np.zeros(shape, np.uint8)
    labels[1, 1, 1], labels[3, :, 2] = 5, 2
    nib.save(nib.Nifti1Image(labels, affine), pred / "c0_seg.nii.gz")
    dicom_export(pred, tmp_path / "series", tmp_path / "out", progress=False)
    path = tmp_path / "out" / "c0" / "seg.dcm"
    ds = pydicom.dcmread(path)
    assert [int(s.SegmentNumber) for s in ds.SegmentSequence] == [1, 2, 3, 4, 5]
    assert [str(s.SegmentLabel) for s in ds.SegmentSequence] == [f"class {c}" for c in range(1, 6)]
    series = read_series(tmp_path / "series" / "c0", pixels=False)
    np.testing.assert_array_equal(read_segmentation_labels(path, series), labels)
    assert dciodvfy_errors(path) == []


def test_a_seg_frame_oriented_otherwise_than_the_series_is_refused(tmp_path):
    """Orientation and pixel spacing per frame: only frame 1's were checked, so a later frame with rows and columns
    swapped (its pixels transposed on a square grid) was read onto its slice as if it were the series'."""
    from monai_unc.io.dicom import DicomSegError

    shape = (4, 4, 3)
    write_series(np.zeros(shape), np.diag([0.8, 0.8, 2.0, 1.0]), tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    labels = np.zeros(shape, np.uint8)
    labels[0, 1:, :] = 1  # a column of every slice: transposed it is a row
    ds = pydicom.dcmread(write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(1)]))
    shared = ds.SharedFunctionalGroupsSequence[0]
    for key in ("PlaneOrientationSequence", "PixelMeasuresSequence"):
        for frame in ds.PerFrameFunctionalGroupsSequence:  # per frame, as other writers may put them
            frame[key] = pydicom.dataset.DataElement(shared[key].tag, "SQ", [copy.deepcopy(shared[key][0])])
        del shared[key]
    ds.save_as(tmp_path / "per_frame.dcm")
    np.testing.assert_array_equal(read_segmentation_labels(tmp_path / "per_frame.dcm", series), labels)
    swapped = ds.PerFrameFunctionalGroupsSequence[1].PlaneOrientationSequence[0]
    swapped.ImageOrientationPatient = [*swapped.ImageOrientationPatient[3:], *swapped.ImageOrientationPatient[:3]]
    ds.save_as(tmp_path / "swapped.dcm")
    with pytest.raises(DicomSegError, match=r"its frames are not oriented as the series' slices \(frame 2\)"):
        read_segmentation_labels(tmp_path / "swapped.dcm", series)
    ds.PerFrameFunctionalGroupsSequence[1].PlaneOrientationSequence[0].ImageOrientationPatient = \
        ds.PerFrameFunctionalGroupsSequence[0].PlaneOrientationSequence[0].ImageOrientationPatient
    ds.PerFrameFunctionalGroupsSequence[2].PixelMeasuresSequence[0].PixelSpacing = [0.8, 1.6]
    ds.save_as(tmp_path / "spacing.dcm")
    with pytest.raises(DicomSegError, match=r"its pixel spacing is not the series' \(.* mm; frame 3\)"):
        read_segmentation_labels(tmp_path / "spacing.dcm", series)


def test_a_slice_whose_pixel_spacing_drifts_is_refused(tmp_path):
    """PixelSpacing 0.709 against 0.7 mm passed the 0.01 mm check: that slice's far column lay 5.4 mm off the grid."""
    from monai_unc.io.dicom import DicomSeriesError

    files = write_series(np.zeros((600, 2, 3)), np.diag([0.7, 0.7, 3.0, 1.0]), tmp_path / "s", modality="MR")
    ds = pydicom.dcmread(files[1])
    ds.PixelSpacing = [0.7, 0.709]  # (rows, columns): the column spacing
    ds.save_as(files[1])
    with pytest.raises(DicomSeriesError, match=r"PixelSpacing differs between slices \(by 0\.009 mm: the far pixel "
                                               r"of a slice lies 5\.39 mm off the first slice's grid\)"):
        read_series(tmp_path / "s", pixels=False)
    ds.PixelSpacing = [0.7, 0.70001]  # decimal rounding of a header: 6 micrometres at the far column
    ds.save_as(files[1])
    assert read_series(tmp_path / "s", pixels=False).shape == (600, 2, 3)


def test_ct_values_are_kept_to_half_a_hounsfield_unit_or_refused(tmp_path):
    """int16 with slope 0.5 holds -17408 .. 15359.5 HU: values beyond were silently clipped (20000 HU read 15359.5)."""
    values = np.array([-17408.0, -1000.3, 0.0, 0.24, 15359.5, 3071.76]).reshape(3, 2, 1)
    write_series(values, np.eye(4), tmp_path / "ok", modality="CT")
    assert np.abs(read_series(tmp_path / "ok").volume - values).max() <= 0.25
    with pytest.raises(ValueError, match=r"volume: CT values must lie in \(-17408\.0, 15359\.5\) HU .* got -1000 \.\. "
                                         r"20000"):
        write_series(np.array([-1000.0, 20000.0]).reshape(2, 1, 1), np.eye(4), tmp_path / "over", modality="CT")


def test_the_export_reads_the_series_headers_only(tmp_path, monkeypatch):
    """dicom-export needs the geometry, not the source pixels (docs/dicom.md); it read every slice's pixels."""
    import monai_unc.io.dicom.series as series_module

    shape, affine = (4, 3, 2), np.diag([1.0, 1.0, 2.0, 1.0])
    write_series(np.zeros(shape), affine, tmp_path / "series" / "c0", modality="MR")
    pred = tmp_path / "pred"
    pred.mkdir()
    nib.save(nib.Nifti1Image(np.ones(shape, np.uint8), affine), pred / "c0_seg.nii.gz")

    def no_pixels(series):
        raise AssertionError(f"the pixels of {series.folder} were read")

    monkeypatch.setattr(series_module, "_read_pixels", no_pixels)
    assert dicom_export(pred, tmp_path / "series", tmp_path / "out", progress=False).n_objects == 2


@pytest.mark.parametrize("attribute", ["SliceThickness", "SpacingBetweenSlices"])
def test_a_single_slice_with_a_negative_thickness_keeps_the_orientation_normal(tmp_path, attribute):
    """One slice whose thickness is written negative: the affine's slice axis was flipped (hostile review 58)."""
    shape, affine = (6, 4, 1), _affine(rotation(0, 10) @ np.diag([0.7, 0.8, 2.5]), [3, -4, 12])
    files = write_series(np.zeros(shape), affine, tmp_path / "s", modality="CT")
    reference = read_series(tmp_path / "s", pixels=False).affine
    for f in files:
        ds = pydicom.dcmread(f)
        setattr(ds, attribute, -2.5)
        if attribute == "SpacingBetweenSlices":
            ds.SliceThickness = ""
        ds.save_as(f)
    series = read_series(tmp_path / "s", pixels=False)
    assert np.allclose(series.affine, reference)
    assert np.linalg.det(series.affine[:3, :3]) * np.linalg.det(affine[:3, :3]) > 0
