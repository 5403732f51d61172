"""DICOM for a region-based (sigmoid) model: one Parametric Map per region, and SEG labels of a region evaluation.

``dicom-export`` writes a map with one channel per region (TC, WT, ET) as one Parametric Map per region; each frame
is checked against the NIfTI map's region channel at the source slice, found independently of the export's geometry
code (the test helpers of ``test_dicom_export``). ``evaluate --regions`` reads a SEG of the disjoint labels (the
labels are the segment numbers) and gives the ``metrics.csv`` of the NIfTI labels; a SEG of nested region masks
is refused in one line that says why.
"""

from __future__ import annotations

import json
import warnings

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io import read_csv, write_csv  # noqa: E402
from monai_unc.io.dicom import (  # noqa: E402
    default_segment,
    read_segmentation_regions,
    read_series,
    write_segmentation,
)
from tests.io.dicom._series import GEOMETRIES, dciodvfy_errors, make_series, mni_small  # noqa: E402
from tests.workflows.test_dicom_export import _nifti_at, _source_world, _sources, _sr_items  # noqa: E402

#: BraTS 2023 labels (1 necrosis, 2 oedema, 3 enhancing) and their regions, channel order TC, WT, ET
SPEC = {"TC": [1, 3], "WT": [1, 2, 3], "ET": [3]}
GEOMETRY = "oblique_mr"


def _brats_labels() -> np.ndarray:
    """The MNI152 box's tissue labels as tumour labels: grey matter oedema (2), white matter necrosis (1) or ET (3)."""
    tissue = mni_small()[1].astype(int)
    out = np.where(tissue == 1, 2, 0)
    white = tissue == 2
    out[white] = np.where(np.arange(white.sum()) % 3 == 0, 1, 3)
    return out.astype(np.uint8)


def _regions(labels: np.ndarray) -> np.ndarray:
    """``(R, X, Y, Z)`` region masks, brute force over the spec."""
    return np.stack([np.isin(labels, v) for v in SPEC.values()]).astype(np.uint8)


def _seg_cohort(tmp_path):
    """One case c0: its series (``images/c0``), its BraTS labels as NIfTI (``nifti/c0.nii.gz``) on the series' grid,
    empty ``segs`` and ``pred`` folders; returns the four folders, the labels and the series (headers)."""
    images, nifti, segs, pred = (tmp_path / n for n in ("images", "nifti", "segs", "pred"))
    for d in (nifti, segs, pred):
        d.mkdir()
    labels = _brats_labels()
    make_series(images / "c0", GEOMETRY)
    series = read_series(images / "c0", pixels=False)
    nib.save(nib.Nifti1Image(labels, series.affine), nifti / "c0.nii.gz")
    return images, nifti, segs, pred, labels, series


def _channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, 0, -1))


@pytest.mark.slow
def test_region_maps_are_one_parametric_map_per_region(tmp_path):
    affine = GEOMETRIES[GEOMETRY][1]
    pred, series, evaluation = tmp_path / "pred", tmp_path / "series", tmp_path / "evaluation"
    pred.mkdir()
    evaluation.mkdir()
    make_series(series / "c0", GEOMETRY)
    regions = _regions(_brats_labels())
    rng = np.random.default_rng(5)
    pe = (rng.random(regions.shape) * np.log(2)).astype(np.float32)
    pe[2] = 0.125  # a constant region map keeps its value
    nib.save(nib.Nifti1Image(_channels_last(regions), affine), pred / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(_channels_last(pe), affine), pred / "c0_predictive_entropy.nii.gz")
    (pred / "infer.json").write_text(json.dumps({"settings": {"model": "brats"}, "multilabel": True,
                                                 "regions": SPEC}))
    write_csv(evaluation / "metrics.csv", [{"case": "c0", "dice": 0.75}])
    out = tmp_path / "out"
    assert main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(out), "--evaluation",
                 str(evaluation), "-q"]) == 0
    names = [f"predictive_entropy_{r}.dcm" for r in SPEC]
    assert sorted(p.name for p in (out / "c0").iterdir()) == sorted([*names, "seg.dcm", "sr.dcm"])
    sources = _sources(series / "c0")
    numbers = set()
    for r, (region, name) in enumerate(zip(SPEC, names)):
        assert dciodvfy_errors(out / "c0" / name) == []
        ds = pydicom.dcmread(out / "c0" / name)
        pm = hd.pm.ParametricMap.from_dataset(ds)
        assert region in ds.SeriesDescription and region in ds.ContentDescription
        mapping = ds.SharedFunctionalGroupsSequence[0].RealWorldValueMappingSequence[0]
        assert mapping.LUTLabel == f"PE {region}" and mapping.LUTExplanation.startswith(f"{region}: ")
        numbers.add(int(ds.SeriesNumber))
        assert len(pm.PerFrameFunctionalGroupsSequence) == len(sources)
        for item, frame in zip(pm.PerFrameFunctionalGroupsSequence, pm.pixel_array):
            ref = str(item.DerivationImageSequence[0].SourceImageSequence[0].ReferencedSOPInstanceUID)
            np.testing.assert_array_equal(frame, _nifti_at(pe[r], affine, _source_world(sources[ref])))
            np.testing.assert_allclose(item.PlanePositionSequence[0].ImagePositionPatient,
                                       sources[ref].ImagePositionPatient, atol=1e-4)
    assert len(numbers) == len(SPEC)
    # the manifest lists each region map; the SR references each as a source image of the case scores
    objects = json.loads((out / "dicom_export.json").read_text())["cases"]["c0"]["objects"]
    maps = {o["kind"]: o for o in objects if o["kind"].startswith("map:")}
    assert sorted(maps) == sorted(f"map:predictive_entropy:{r}" for r in SPEC)
    assert [maps[f"map:predictive_entropy:{r}"]["file"] for r in SPEC] == [f"c0/{n}" for n in names]
    sr = pydicom.dcmread(out / "c0" / "sr.dcm")
    refs = {v for g, name, v in _sr_items(sr) if g == "case scores" and name == "ref"}
    assert refs == {o["sop_instance_uid"] for o in maps.values()}
    # the SEG of the region masks (one segment per region, overlapping) reads back as them (evaluate --seg-regions)
    source = read_series(series / "c0", pixels=False)
    assert np.abs(source.affine - affine).max() < 1e-6  # the NIfTI files are on the series' grid
    np.testing.assert_array_equal(read_segmentation_regions(out / "c0" / "seg.dcm", source, list(SPEC)), regions)


def test_a_region_map_with_another_channel_count_is_refused(tmp_path, capsys):
    affine = GEOMETRIES[GEOMETRY][1]
    pred = tmp_path / "pred"
    pred.mkdir()
    make_series(tmp_path / "series" / "c0", GEOMETRY)
    regions = _regions(_brats_labels())
    nib.save(nib.Nifti1Image(_channels_last(regions), affine), pred / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(_channels_last(np.zeros((2, *regions.shape[1:]), np.float32)), affine),
             pred / "c0_variance.nii.gz")
    assert main(["dicom-export", "-p", str(pred), "-s", str(tmp_path / "series"), "-o", str(tmp_path / "out"),
                 "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has 2 channels" in err and "one per region" in err, err


@pytest.mark.slow
def test_region_evaluation_with_seg_labels_equals_nifti_labels(tmp_path, capsys):
    """evaluate --regions -l <SEG folder>: the metrics.csv of the NIfTI labels; nested region masks are refused."""
    images, nifti, segs, pred, labels, series = _seg_cohort(tmp_path)
    write_segmentation(labels, series, segs / "c0.dcm", [default_segment(v, n) for v, n in
                                                          ((1, "Necrosis"), (2, "Edema"), (3, "Enhancing"))])
    rng = np.random.default_rng(7)
    probs = np.clip(_regions(labels) * 0.4 + rng.random((len(SPEC), *labels.shape)) * 0.6, 0, 1).astype(np.float32)
    nib.save(nib.Nifti1Image(_channels_last((probs >= 0.5).astype(np.uint8)), series.affine), pred / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(_channels_last(probs), series.affine), pred / "c0_probs.nii.gz")
    argv = ["-p", str(pred), "--images", str(images), "--regions", json.dumps(SPEC), "--no-spatial", "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for folder, out in ((nifti, "ev_nifti"), (segs, "ev_seg")):
            assert main(["evaluate", "-l", str(folder), "-o", str(tmp_path / out), *argv]) == 0
    ref, got = read_csv(tmp_path / "ev_nifti" / "metrics.csv"), read_csv(tmp_path / "ev_seg" / "metrics.csv")
    assert ref == got and {"dice_TC", "dice_WT", "dice_ET"} <= set(got[0])
    assert 0 < float(got[0]["dice_ET"]) < 1
    capsys.readouterr()
    # BraTS labels 1, 2, 4 in a SEG are the segments 1, 2, 3: a spec in label values is refused, saying so
    old = np.where(labels == 3, 4, labels).astype(np.uint8)
    write_segmentation(old, series, segs / "c0.dcm", [default_segment(v) for v in (1, 2, 4)])
    old_spec = json.dumps({"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]})
    argv[argv.index("--regions") + 1] = old_spec
    assert main(["evaluate", "-l", str(segs), "-o", str(tmp_path / "ev_old"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "label 3" in err and "segment numbers" in err, err
    # ... and --seg-label-values 1,2,4 gives the segments their label values: the metrics of the NIfTI labels 1, 2, 4
    nib.save(nib.Nifti1Image(old, series.affine), nifti / "c0.nii.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(nifti), "-o", str(tmp_path / "ev_old_nifti"), *argv]) == 0
        assert main(["evaluate", "-l", str(segs), "-o", str(tmp_path / "ev_old_seg"), *argv,
                     "--seg-label-values", "1,2,4"]) == 0
    assert read_csv(tmp_path / "ev_old_seg" / "metrics.csv") == read_csv(tmp_path / "ev_old_nifti" / "metrics.csv")
    summary = json.loads((tmp_path / "ev_old_seg" / "summary.json").read_text())
    assert summary["config"]["seg_label_values"] == [1, 2, 4]
    assert "seg_label_values" not in json.loads((tmp_path / "ev_old_nifti" / "summary.json").read_text())["config"]
    assert main(["evaluate", "-l", str(segs), "-o", str(tmp_path / "ev_short"), *argv, "--seg-label-values",
                 "1,2"]) == 1  # segment 3 has no value: the case fails, naming it
    assert "segment 3" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "-l", str(segs), "-o", str(tmp_path / "ev_bad"), *argv, "--seg-label-values", "1,1"])
    assert e.value.code == 2 and "distinct non-negative integers" in capsys.readouterr().err
    # a SEG of the nested region masks WT, TC, ET is no label map: refused in one line that says why
    write_segmentation(_regions(labels), series, segs / "c0.dcm", [default_segment(r + 1, n)
                                                                   for r, n in enumerate(SPEC)])
    argv[argv.index("--regions") + 1] = json.dumps(SPEC)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        status = main(["evaluate", "-l", str(segs), "-o", str(tmp_path / "ev_nested"), *argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if "overlap" in line]
    assert status != 0 and len(lines) == 1, lines
    assert "segments 1 and 2 overlap" in lines[0] and "nested region masks" in lines[0], lines


def test_region_names_of_the_map_files():
    from monai_unc.workflows.dicom import _file_part, _map_regions

    specs = [default_segment(r, f"region {r}") for r in (1, 2, 3)]
    assert _map_regions(["TC", "WT", "ET"], specs) == ["TC", "WT", "ET"]  # the prediction folder's record
    assert _map_regions(None, specs) == ["region 1", "region 2", "region 3"]  # no record: the segments' names
    assert _map_regions(["TC", "WT"], specs) == ["region 1", "region 2", "region 3"]  # a record of another count
    names = _map_regions(["a/b", "a b", "ET"], specs)  # names that would share a file get their channel number
    assert names == ["a/b", "a b 2", "ET"]
    assert [_file_part(n) for n in names] == ["a_b", "a_b_2", "ET"]
    assert _file_part("../../x") == "______x" and _file_part("  ") == "region"


#: the regions of a region-based nnU-Net BraTS dataset, its dataset.json's order (the model's channel order)
NNUNET_LABELS = {"background": 0, "whole tumor": [1, 2, 3], "tumor core": [1, 3], "enhancing tumor": 3}


@pytest.mark.slow
def test_a_region_based_nnunet_model_is_exported_as_its_regions(tmp_path, capsys):
    """nnU-Net turns the regions into one label map beside one probability and map channel per region: the SEG holds
    the regions (from the dataset.json nnU-Net writes beside the predictions), the FRACTIONAL SEG each region's
    probability, one Parametric Map per region."""
    series_dir, pred = tmp_path / "series", tmp_path / "pred"
    (pred / "uncertainty").mkdir(parents=True)
    make_series(series_dir / "c0", GEOMETRY)
    series = read_series(series_dir / "c0", pixels=False)
    labels = _brats_labels()
    spec = {k: (v if isinstance(v, list) else [v]) for k, v in NNUNET_LABELS.items() if k != "background"}
    regions = np.stack([np.isin(labels, v) for v in spec.values()]).astype(np.uint8)
    rng = np.random.default_rng(3)
    probs = np.clip(regions * 0.5 + rng.random(regions.shape) * 0.5, 0, 1).astype(np.float32)
    pe = (rng.random(regions.shape) * np.log(2)).astype(np.float32)
    nib.save(nib.Nifti1Image(labels, series.affine), pred / "c0.nii.gz")
    np.savez(pred / "c0.npz", probabilities=probs.transpose(0, 3, 2, 1))  # nnU-Net's (C, z, y, x)
    nib.save(nib.Nifti1Image(_channels_last(pe), series.affine), pred / "uncertainty" / "c0_predictive_entropy.nii.gz")
    # without the regions (no dataset.json) the label map beside three region channels is refused, as before
    argv = ["dicom-export", "-p", str(pred), "-s", str(series_dir), "--layout", "nnunet", "-q"]
    assert main([*argv, "-o", str(tmp_path / "refused")]) != 0
    assert "region-based model" in capsys.readouterr().err
    (pred / "dataset.json").write_text(json.dumps({"labels": NNUNET_LABELS, "regions_class_order": [2, 1, 3]}))
    out = tmp_path / "out"
    assert main([*argv, "-o", str(out)]) == 0
    names = list(spec)
    ds = pydicom.dcmread(out / "c0" / "seg.dcm")
    assert [str(s.SegmentLabel) for s in ds.SegmentSequence] == names
    assert dciodvfy_errors(out / "c0" / "seg.dcm") == []
    np.testing.assert_array_equal(read_segmentation_regions(out / "c0" / "seg.dcm", series, names), regions)
    fseg = hd.seg.segread(out / "c0" / "probabilities.dcm")
    assert [str(s.SegmentLabel) for s in fseg.SegmentSequence] == names
    sources = _sources(series_dir / "c0")
    uids = sorted(sources)
    fpix = fseg.get_pixels_by_source_instance(uids, rescale_fractional=True, ignore_spatial_locations=True,
                                              dtype=np.float32)
    for k, uid in enumerate(uids):
        expected = np.moveaxis(_nifti_at(probs, series.affine, _source_world(sources[uid])), 0, -1)
        assert np.abs(fpix[k] - expected).max() <= 0.5 / 255 + 1e-6
    maps = sorted(p.name for p in (out / "c0").glob("predictive_entropy_*.dcm"))
    assert len(maps) == len(names)
    # a label that no region holds would be in no segment: the case is refused, naming it
    bad = labels.copy()
    bad[0, 0, 0] = 5
    nib.save(nib.Nifti1Image(bad, series.affine), pred / "c0.nii.gz")
    capsys.readouterr()
    assert main([*argv, "-o", str(tmp_path / "stray")]) != 0
    err = capsys.readouterr().err
    assert "holds the label(s) 5, which no region of the model holds" in err, err
    # a record whose regions are malformed (an untrusted file) is refused in one line before any object
    (pred / "uncertainty_config.json").write_text(json.dumps({"regions": {"whole tumor": "x"}}))
    assert main([*argv, "-o", str(tmp_path / "malformed")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "recorded regions" in err and "'whole tumor'" in err, err


@pytest.mark.slow
def test_a_one_region_model_is_exported_as_its_region(tmp_path):
    """The one channel of a one-region model is its region mask: the segment named as the region, the FRACTIONAL SEG
    of its probability (refused before: the mask was read as the label map of class 1, beside one channel)."""
    series_dir, pred = tmp_path / "series", tmp_path / "pred"
    pred.mkdir()
    make_series(series_dir / "c0", GEOMETRY)
    series = read_series(series_dir / "c0", pixels=False)
    et = (_brats_labels() == 3).astype(np.uint8)[None]
    rng = np.random.default_rng(11)
    probs = np.clip(et * 0.5 + rng.random(et.shape) * 0.5, 0, 1).astype(np.float32)
    nib.save(nib.Nifti1Image(_channels_last(et), series.affine), pred / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(_channels_last(probs), series.affine), pred / "c0_probs.nii.gz")
    nib.save(nib.Nifti1Image(_channels_last(probs * 0.5), series.affine), pred / "c0_predictive_entropy.nii.gz")
    (pred / "infer.json").write_text(json.dumps({"settings": {"model": "et"}, "multilabel": True,
                                                 "regions": {"ET": [3]}}))
    out = tmp_path / "out"
    assert main(["dicom-export", "-p", str(pred), "-s", str(series_dir), "-o", str(out), "-q"]) == 0
    ds = pydicom.dcmread(out / "c0" / "seg.dcm")
    assert [str(s.SegmentLabel) for s in ds.SegmentSequence] == ["ET"]
    np.testing.assert_array_equal(read_segmentation_regions(out / "c0" / "seg.dcm", series, ["ET"]), et)
    fseg = hd.seg.segread(out / "c0" / "probabilities.dcm")
    assert [str(s.SegmentLabel) for s in fseg.SegmentSequence] == ["ET"]
    sources = _sources(series_dir / "c0")
    uids = sorted(sources)
    fpix = fseg.get_pixels_by_source_instance(uids, rescale_fractional=True, ignore_spatial_locations=True,
                                              dtype=np.float32)
    for k, uid in enumerate(uids):
        expected = _nifti_at(probs, series.affine, _source_world(sources[uid]))[0]
        assert np.abs(fpix[k][..., 0] - expected).max() <= 0.5 / 255 + 1e-6
    assert (out / "c0" / "predictive_entropy_ET.dcm").exists()
