"""A binary DICOM SEG as the label map of its series (``read_segmentation_labels``) and as ``evaluate``'s labels.

The reader is checked against highdicom's own frame lookup (``get_pixels_by_source_instance``), on the test
geometries (oblique, reversed slice direction, shuffled files), with frames placed by their references and, with
the references removed, by their positions; the refusals are one line each; ``evaluate`` gives the same metrics
from SEG labels as from the NIfTI labels they were written from.
"""

from __future__ import annotations

import shutil
import warnings

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io import read_csv  # noqa: E402
from monai_unc.io.dicom import (  # noqa: E402
    AlgorithmInfo,
    DicomSegError,
    default_segment,
    read_segmentation_labels,
    read_series,
    save_dataset,
    write_fractional_segmentation,
    write_segmentation,
)
from tests.io.dicom._series import GEOMETRIES, make_series, mni_small  # noqa: E402

SEGMENTS = [default_segment(1, "Grey matter"), default_segment(2, "White matter")]


def _seg(tmp_path, geometry="oblique_mr", labels=None):
    make_series(tmp_path / "series", geometry)
    series = read_series(tmp_path / "series", pixels=False)
    labels = mni_small()[1].astype(np.uint8) if labels is None else labels
    path = write_segmentation(labels, series, tmp_path / "seg.dcm", SEGMENTS, AlgorithmInfo())
    return series, labels, path


@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
def test_labels_equal_the_written_label_map_and_highdicoms_lookup(tmp_path, geometry):
    labels = mni_small()[1].astype(np.uint8)
    labels[:, :, 0] = 0  # an empty slice: highdicom leaves its frames out, the reader gives background there
    series, labels, path = _seg(tmp_path, geometry, labels)
    got = read_segmentation_labels(path, series)
    np.testing.assert_array_equal(got, labels)
    uids = [str(ds.SOPInstanceUID) for ds in series.datasets]
    ref = hd.seg.segread(path).get_pixels_by_source_instance(uids, combine_segments=True,
                                                              ignore_spatial_locations=True)
    np.testing.assert_array_equal(np.transpose(got, (2, 1, 0)), ref)


def test_frames_without_references_are_placed_by_position(tmp_path):
    series, labels, path = _seg(tmp_path, "reversed_mr")
    ds = pydicom.dcmread(path)
    for item in ds.PerFrameFunctionalGroupsSequence:
        del item.DerivationImageSequence
    save_dataset(ds, tmp_path / "noref.dcm")
    np.testing.assert_array_equal(read_segmentation_labels(tmp_path / "noref.dcm", series), labels)
    ds.PerFrameFunctionalGroupsSequence[0].PlanePositionSequence[0].ImagePositionPatient[2] += 0.7
    save_dataset(ds, tmp_path / "off.dcm")
    with pytest.raises(DicomSegError, match="frame 1 at .* lies on no slice"):
        read_segmentation_labels(tmp_path / "off.dcm", series)


def _one_line(path, series, *words):
    with pytest.raises(DicomSegError) as info:
        read_segmentation_labels(path, series)
    text = str(info.value)
    assert len(text.splitlines()) == 1, text
    for w in words:
        assert w in text, text


def test_refusals_are_one_line(tmp_path):
    series, labels, path = _seg(tmp_path)
    # overlapping segments (region masks may overlap in a SEG; a label map may not)
    regions = np.stack([labels > 0, labels == 2]).astype(np.uint8)
    write_segmentation(regions, series, tmp_path / "overlap.dcm", SEGMENTS)
    _one_line(tmp_path / "overlap.dcm", series, "segments 1 and 2 overlap", "overlap.dcm")
    # a FRACTIONAL SEG holds probabilities
    probs = mni_small()[2]
    write_fractional_segmentation(probs, series, tmp_path / "probs.dcm", [default_segment(1), default_segment(2)])
    _one_line(tmp_path / "probs.dcm", series, "FRACTIONAL", "BINARY")
    # a DICOM 2024 label map segmentation: named as one (it was "not a DICOM SEG", naming its SOP class UID)
    ds = pydicom.dcmread(path)
    ds.SOPClassUID = ds.file_meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.66.7"
    ds.SegmentationType = "LABELMAP"
    save_dataset(ds, tmp_path / "labelmap.dcm")
    _one_line(tmp_path / "labelmap.dcm", series, "is a LABELMAP segmentation", "BINARY SEG")
    # another series: frame of reference and series differ
    make_series(tmp_path / "other", "oblique_mr")
    _one_line(path, read_series(tmp_path / "other", pixels=False), "frame of reference")
    # not a SEG, not DICOM
    _one_line(series.files[0], series, "is not a DICOM SEG", "MR Image Storage")
    (tmp_path / "notes.dcm").write_text("hello")
    _one_line(tmp_path / "notes.dcm", series, "not a readable DICOM file")


def test_a_referenced_image_missing_from_the_series_is_refused(tmp_path):
    labels = mni_small()[1].astype(np.uint8)
    labels[5:9, 5:9, -1] = 1  # the last slice has a frame
    series, labels, path = _seg(tmp_path, labels=labels)
    last = series.files[-1]  # the end slice: what is left is still one clean series
    shutil.move(last, tmp_path / last.name)
    short = read_series(tmp_path / "series", pixels=False)
    assert short.shape[2] == series.shape[2] - 1
    _one_line(path, short, "references 1 image(s)", "lacks", "missing slice")
    ds = pydicom.dcmread(path)  # without the series-level reference, the frame's own reference is refused
    uid = str(series.datasets[-1].SOPInstanceUID)
    refs = ds.ReferencedSeriesSequence[0].ReferencedInstanceSequence
    ds.ReferencedSeriesSequence[0].ReferencedInstanceSequence = [i for i in refs if i.ReferencedSOPInstanceUID != uid]
    save_dataset(ds, tmp_path / "frames.dcm")
    _one_line(tmp_path / "frames.dcm", short, f"references the image {uid}", "not in the series")


@pytest.mark.slow
def test_evaluate_with_seg_labels_equals_nifti_labels(tmp_path, capsys):
    """evaluate -l <folder of SEG objects> --images <series>: the metrics of the NIfTI labels, bit for bit."""
    _, label, probs = mni_small()
    rng = np.random.default_rng(3)
    images, nifti, segs, pred = (tmp_path / n for n in ("images", "nifti", "segs", "pred"))
    for d in (nifti, segs, pred):
        d.mkdir()
    for case, geometry in (("a", "oblique_mr"), ("b", "anisotropic_ct")):
        make_series(images / case, geometry)
        series = read_series(images / case, pixels=False)
        lab = label.astype(np.uint8)
        if case == "b":
            lab = np.where(rng.random(lab.shape) < 0.1, 0, lab).astype(np.uint8)  # labels differ from the prediction
        nib.save(nib.Nifti1Image(lab, series.affine), nifti / f"{case}.nii.gz")
        write_segmentation(lab, series, segs / f"{case}.dcm", SEGMENTS)
        p = np.clip(probs + rng.random(probs.shape) * 0.2, 0, None)
        p = (p / p.sum(0)).astype(np.float32)
        nib.save(nib.Nifti1Image(p.argmax(0).astype(np.uint8), series.affine), pred / f"{case}_seg.nii.gz")
        nib.save(nib.Nifti1Image(np.moveaxis(p, 0, -1), series.affine), pred / f"{case}_probs.nii.gz")
        pe = -(p * np.log(np.clip(p, 1e-12, 1))).sum(0).astype(np.float32)
        nib.save(nib.Nifti1Image(pe, series.affine), pred / f"{case}_predictive_entropy.nii.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for labels, out in ((nifti, "ev_nifti"), (segs, "ev_seg")):
            assert main(["evaluate", "-l", str(labels), "-p", str(pred), "--images", str(images), "-o",
                         str(tmp_path / out), "--no-spatial", "-q"]) == 0
    ref, got = read_csv(tmp_path / "ev_nifti" / "metrics.csv"), read_csv(tmp_path / "ev_seg" / "metrics.csv")
    assert ref == got and len(got) == 2 and float(got[1]["dice"]) < float(got[0]["dice"])
    # SEG labels without --images: refused before any work, in one line
    capsys.readouterr()
    assert main(["evaluate", "-l", str(segs), "-p", str(pred), "-o", str(tmp_path / "ev_no_images"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "DICOM SEG" in err and "--images" in err, err
    # a SEG of overlapping segments: the case is refused, its line names the file and the overlap
    series = read_series(images / "a", pixels=False)
    write_segmentation(np.stack([label > 0, label == 2]).astype(np.uint8), series, segs / "a.dcm", SEGMENTS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        status = main(["evaluate", "-l", str(segs), "-p", str(pred), "--images", str(images), "-o",
                       str(tmp_path / "ev_overlap"), "--no-spatial", "-q"])
    err = capsys.readouterr().err
    assert status != 0 and "segments 1 and 2 overlap" in err, err
    assert [line for line in err.splitlines() if "overlap" in line][0].count("overlap") >= 1
