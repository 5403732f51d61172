"""``evaluate --regions --seg-regions``: a DICOM SEG whose segments are the (nested) regions, matched by name.

A hospital may store the reference of a BraTS case as the regions WT, TC and ET (overlapping segments) rather than
the disjoint labels. Read with ``--seg-regions``, it gives the ``metrics.csv`` of the NIfTI label map whose regions
are those masks, whatever the order and numbers of its segments; a segment named as no region, two segments of one
region, or the option where it cannot apply are refused.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io import CaseFiles, read_csv  # noqa: E402
from monai_unc.io.cases import CaseError, read_label  # noqa: E402
from monai_unc.io.dicom import (  # noqa: E402
    DicomSegError,
    default_segment,
    read_segmentation_regions,
    read_series,
    write_segmentation,
    write_series,
)
from tests.workflows.test_dicom_regions import SPEC, _channels_last, _regions, _seg_cohort  # noqa: E402


def _small_series(folder):
    """A 5 x 4 x 3 MR series with an identity geometry and its header-only reading."""
    write_series(np.zeros((5, 4, 3)), np.eye(4), folder, modality="MR")
    return read_series(folder, pixels=False)


def test_segments_are_matched_to_the_regions_by_name(tmp_path):
    series = _small_series(tmp_path / "s")
    rng = np.random.default_rng(0)
    wt = rng.random((5, 4, 3)) < 0.6
    tc = wt & (rng.random((5, 4, 3)) < 0.5)
    et = tc & (rng.random((5, 4, 3)) < 0.5)
    # written in the order ET, WT, TC (segments 1, 2, 3), one name in lower case; read in the spec's order
    write_segmentation(np.stack([et, wt, tc]).astype(np.uint8), series, tmp_path / "seg.dcm",
                       [default_segment(1, "et"), default_segment(2, "WT"), default_segment(3, "TC")])
    masks = read_segmentation_regions(tmp_path / "seg.dcm", series, ["TC", "WT", "ET"])
    assert masks.dtype == np.uint8 and masks.shape == (3, 5, 4, 3)
    np.testing.assert_array_equal(masks, np.stack([tc, wt, et]).astype(np.uint8))
    # a region without a segment is empty (a writer may leave out an empty segment)
    np.testing.assert_array_equal(read_segmentation_regions(tmp_path / "seg.dcm", series, ["ET", "WT", "TC", "NC"]),
                                  np.stack([et, wt, tc, np.zeros_like(et)]).astype(np.uint8))
    # a segment named as no region, or two segments of one region, are refused naming them
    with pytest.raises(DicomSegError, match=r"segment 2 is named 'WT', which is no region \('TC', 'ET'\)"):
        read_segmentation_regions(tmp_path / "seg.dcm", series, ["TC", "ET"])
    ds = pydicom.dcmread(tmp_path / "seg.dcm")  # another writer: two segments of one name
    ds.SegmentSequence[2].SegmentLabel = " wt"
    ds.save_as(tmp_path / "twice.dcm")
    with pytest.raises(DicomSegError, match="segments 2 and 3 are both named 'wt'"):
        read_segmentation_regions(tmp_path / "twice.dcm", series, ["WT", "TC", "ET"])
    with pytest.raises(DicomSegError, match="are the same as segment labels"):
        read_segmentation_regions(tmp_path / "seg.dcm", series, ["WT", "wt", "ET"])
    # a region name over the 64 characters of a SegmentLabel: written shortened (start ... end), read by its full name
    long = ["whole tumour as delineated by the second reader of the 2026 protocol (version 2)", "TC"]
    with pytest.warns(UserWarning, match="written as"):
        described = [default_segment(1, long[0]), default_segment(2, "TC")]
    write_segmentation(np.stack([wt, tc]).astype(np.uint8), series, tmp_path / "long.dcm", described)
    np.testing.assert_array_equal(read_segmentation_regions(tmp_path / "long.dcm", series, long),
                                  np.stack([wt, tc]).astype(np.uint8))
    # read as labels, the same SEG is refused for its overlap, with the option that reads it
    from monai_unc.io.dicom import read_segmentation_labels

    with pytest.raises(DicomSegError, match="overlap.*--seg-regions"):
        read_segmentation_labels(tmp_path / "seg.dcm", series)


def test_one_region_is_read_as_the_label_map_of_its_mask(tmp_path):
    series = _small_series(tmp_path / "images" / "c0")
    et = np.zeros((5, 4, 3), np.uint8)
    et[1:3, 1:3, 1] = 1
    write_segmentation(et[None], series, tmp_path / "c0.dcm", [default_segment(1, "ET")])
    files = CaseFiles("c0", tmp_path / "c0.dcm", image=tmp_path / "images" / "c0")
    data, affine = read_label(files, {"ET": [3]})
    assert data.shape == (1, 5, 4, 3)
    np.testing.assert_array_equal(data[0], et * 3)  # one channel is a label map: the region's label
    np.testing.assert_allclose(affine, series.affine)
    with pytest.raises(CaseError, match="holds the label 0"):
        read_label(files, {"ET": [0, 3]})


@pytest.mark.slow
def test_evaluate_with_seg_regions_equals_nifti_labels(tmp_path, capsys):
    images, nifti, segs, pred, labels, series = _seg_cohort(tmp_path)
    regions = _regions(labels)  # TC, WT, ET
    assert (regions[0] & regions[1]).any() and (regions[2] & regions[0]).any()  # nested: the segments overlap
    order = [1, 2, 0]  # written as WT, ET, TC
    write_segmentation(regions[order], series, segs / "c0.dcm",
                       [default_segment(k + 1, list(SPEC)[r]) for k, r in enumerate(order)])
    rng = np.random.default_rng(7)
    probs = np.clip(regions * 0.4 + rng.random(regions.shape) * 0.6, 0, 1).astype(np.float32)
    nib.save(nib.Nifti1Image(_channels_last((probs >= 0.5).astype(np.uint8)), series.affine), pred / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(_channels_last(probs), series.affine), pred / "c0_probs.nii.gz")
    argv = ["-p", str(pred), "--images", str(images), "--regions", json.dumps(SPEC), "--no-spatial", "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(nifti), "-o", str(tmp_path / "ev_nifti"), *argv]) == 0
        # with a cohort product that writes per-case files (conformal masks), which loads the cases again
        assert main(["evaluate", "-l", str(segs), "-o", str(tmp_path / "ev_seg"), *argv, "--seg-regions",
                     "--conformal", "outer:fnr=0.5"]) == 0
    ref, got = read_csv(tmp_path / "ev_nifti" / "metrics.csv"), read_csv(tmp_path / "ev_seg" / "metrics.csv")
    assert {k: v for k, v in ref[0].items() if k in got[0]} == {k: v for k, v in got[0].items() if k in ref[0]}
    assert 0 < float(got[0]["dice_ET"]) < 1
    assert sorted(p.name for p in (tmp_path / "ev_seg" / "products" / "conformal").glob("c0_*.nii.gz"))
    summary = json.loads((tmp_path / "ev_seg" / "summary.json").read_text())
    assert summary["config"]["seg_regions"] is True
    assert "seg_regions" not in json.loads((tmp_path / "ev_nifti" / "summary.json").read_text())["config"]
    # the report reads the SEG as evaluate read it: the case's figure and viewer, no line saying it cannot be read
    assert main(["report", "-e", str(tmp_path / "ev_seg"), "-o", str(tmp_path / "report"), "-q"]) == 0
    page = (tmp_path / "report" / "report.html").read_text()
    assert "no figure and no viewer" not in page and "c0" in page
    from monai_unc.evaluation import CohortState
    from monai_unc.evaluation.config import DERIVED_MAPS_DIR
    from monai_unc.report.html import load_figure_case

    state = CohortState.load(tmp_path / "ev_seg" / "state")
    files = CaseFiles.from_json(state.files["c0"])
    files.maps = {m: tmp_path / "ev_seg" / DERIVED_MAPS_DIR / Path(p).name for m, p in state.derived_maps["c0"].items()}
    case = load_figure_case(files, next(iter(files.maps)), None, False, True, seg_regions=SPEC)
    np.testing.assert_array_equal(np.asarray(case.label), regions)
    capsys.readouterr()
    # without the option the same SEG fails its case, the message naming the option
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(segs), "-o", str(tmp_path / "ev_labels"), *argv]) != 0
    assert "--seg-regions" in capsys.readouterr().err
    # the option needs --regions, and excludes --seg-label-values: one line, exit status 2, before any work
    for extra, words in ((["--seg-label-values", "1,2,3"], "--seg-label-values"), ([], "--regions")):
        args = [a for a in argv if a not in ("--regions", json.dumps(SPEC))] if not extra else argv
        status = main(["evaluate", "-l", str(segs), "-o", str(tmp_path / "ev_bad"), *args, "--seg-regions", *extra])
        err = capsys.readouterr().err.strip()
        assert status == 2 and len(err.splitlines()) == 1 and "--seg-regions" in err and words in err, err
    assert not (tmp_path / "ev_bad").exists()


def test_the_option_is_part_of_the_case_fingerprint():
    """A rerun with or without --seg-regions evaluates its cases again (resume compares this fingerprint)."""
    from monai_unc.evaluation import EvaluationConfig
    from monai_unc.evaluation.resume import case_config_fingerprint

    plain = case_config_fingerprint(EvaluationConfig(regions=SPEC))
    seg = case_config_fingerprint(EvaluationConfig(regions=SPEC, seg_regions=True))
    assert "seg_regions" not in plain and seg == {**plain, "seg_regions": True}
    assert "seg_regions" not in EvaluationConfig(regions=SPEC).to_json()
    with pytest.raises(TypeError, match="seg_regions must be True or False"):
        EvaluationConfig(regions=SPEC, seg_regions="yes").validate()


def test_report_figures_read_seg_labels_with_their_label_values(tmp_path):
    """The report's case figures read SEG labels as evaluate did: --seg-label-values gives the segments their values
    (the figures drew segment numbers as labels: the BraTS label 4 as 3)."""
    from monai_unc.report.html import load_figure_case

    series = _small_series(tmp_path / "images" / "c0")
    labels = np.zeros((5, 4, 3), np.uint8)
    labels[1, 1, 1], labels[2, 1, 1], labels[3, 2, 1] = 1, 2, 4
    write_segmentation(labels, series, tmp_path / "c0.dcm", [default_segment(v) for v in (1, 2, 4)])
    nib.save(nib.Nifti1Image(labels, series.affine), tmp_path / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(np.full(labels.shape, 0.1, np.float32), series.affine), tmp_path / "c0_pe.nii.gz")

    def files():
        return CaseFiles("c0", tmp_path / "c0.dcm", seg=tmp_path / "c0_seg.nii.gz", image=tmp_path / "images" / "c0",
                         maps={"predictive_entropy": tmp_path / "c0_pe.nii.gz"})

    plain = load_figure_case(files(), "predictive_entropy", 5, False, False)
    assert sorted(np.unique(plain.label).tolist()) == [0, 1, 2, 3]  # the segment numbers
    mapped = load_figure_case(files(), "predictive_entropy", 5, False, False, seg_label_values=[1, 2, 4])
    np.testing.assert_array_equal(np.asarray(mapped.label), labels)
