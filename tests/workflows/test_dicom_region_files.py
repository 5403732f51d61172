"""Review 62 of ``dicom-export``: maps written one file per region, and the manifest's input series.

- a region-based model's maps written one file per region (``<case>_<measure>_<region>.<ext>``, as nnU-Net writes
  them for formats without 4D images) were not exported (only ``<case>_<measure>`` files were read): now each is
  the Parametric Map of its region, as a 4D map's channel is, with the same checks of the grid and the values;
- ``dicom_export.json`` named channel 0's series only, while the objects reference every input channel's series.

The exported values are read back with highdicom at each source slice, found from the slices' own headers (the test
helpers of ``test_dicom_export``), and compared with the NIfTI files' values: float32 is stored as it is.
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io.dicom import read_series  # noqa: E402
from tests.io.dicom._series import dciodvfy_errors, make_series  # noqa: E402
from tests.workflows.test_dicom_export import _nifti_at, _source_world, _sources  # noqa: E402
from tests.workflows.test_dicom_regions import GEOMETRY, NNUNET_LABELS, SPEC, _brats_labels  # noqa: E402
from tests.workflows.test_review61_dicom import STUDY, _export_source  # noqa: E402

#: the regions of NNUNET_LABELS in its order (the model's channel order), as nnU-Net names their files
NNUNET_REGIONS = [k for k in NNUNET_LABELS if k != "background"]


def _region_files(tmp_path, layout: str):
    """One case c0 of a region-based model whose predictive entropy is written one file per region.

    ``nnunet``: nnU-Net's label map, ``uncertainty/c0_predictive_entropy_<region>.nii.gz`` and the case record listing
    them, the regions in the ``dataset.json`` beside the predictions; ``monai-unc``: the region masks and
    ``c0_predictive_entropy_<region>.nii.gz``, the regions in ``infer.json``. The last region's file stores the grid
    with its slices the other way round (reoriented, not refused). Returns the series folder, the predictions, the
    region names and the ``(R, X, Y, Z)`` maps on the series' grid.
    """
    series_dir, pred = tmp_path / "series", tmp_path / "pred"
    make_series(series_dir / "c0", GEOMETRY)
    series = read_series(series_dir / "c0", pixels=False)
    labels = _brats_labels()
    names = NNUNET_REGIONS if layout == "nnunet" else list(SPEC)
    maps_dir = pred / "uncertainty" if layout == "nnunet" else pred
    maps_dir.mkdir(parents=True)
    rng = np.random.default_rng(62)
    pe = (rng.random((len(names), *labels.shape)) * np.log(2)).astype(np.float32)
    pe[1] = 0.25  # a constant region map keeps its value
    files = []
    for r, name in enumerate(names):
        path = maps_dir / f"c0_predictive_entropy_{name}.nii.gz"
        if r == len(names) - 1:
            flip = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, -1, labels.shape[2] - 1], [0, 0, 0, 1.0]])
            nib.save(nib.Nifti1Image(pe[r][:, :, ::-1], series.affine @ flip), path)
        else:
            nib.save(nib.Nifti1Image(pe[r], series.affine), path)
        files.append(path.name)
    if layout == "nnunet":
        nib.save(nib.Nifti1Image(labels, series.affine), pred / "c0.nii.gz")
        (pred / "dataset.json").write_text(json.dumps({"labels": NNUNET_LABELS, "regions_class_order": [2, 1, 3],
                                                       "file_ending": ".nii.gz"}))
        (maps_dir / "c0.json").write_text(json.dumps({"case": "c0", "maps": {"predictive_entropy": files}}))
    else:
        masks = np.stack([np.isin(labels, v) for v in SPEC.values()]).astype(np.uint8)
        nib.save(nib.Nifti1Image(np.ascontiguousarray(np.moveaxis(masks, 0, -1)), series.affine),
                 pred / "c0_seg.nii.gz")
        (pred / "infer.json").write_text(json.dumps({"settings": {"model": "brats", "measures": ["predictive_entropy"]},
                                                     "multilabel": True, "regions": SPEC}))
    return series_dir, pred, names, pe


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["nnunet", "monai-unc"])
def test_maps_written_one_file_per_region_are_one_parametric_map_per_region(tmp_path, layout):
    """Each region's file is the Parametric Map of its region, named by it; its frames hold the file's values."""
    series_dir, pred, names, pe = _region_files(tmp_path, layout)
    out = tmp_path / "out"
    assert main(["dicom-export", "-p", str(pred), "-s", str(series_dir), "--layout", layout, "-o", str(out),
                 "--no-probabilities", "-q"]) == 0
    parts = [n.replace(" ", "_") for n in names]
    assert sorted(p.name for p in (out / "c0").iterdir()) == sorted(
        [*(f"predictive_entropy_{p}.dcm" for p in parts), "seg.dcm", "sr.dcm"])
    sources = _sources(series_dir / "c0")
    affine = read_series(series_dir / "c0", pixels=False).affine
    numbers = set()
    for r, (region, part) in enumerate(zip(names, parts)):
        path = out / "c0" / f"predictive_entropy_{part}.dcm"
        assert dciodvfy_errors(path) == [], path.name
        ds = pydicom.dcmread(path)
        assert region in ds.SeriesDescription and region in ds.ContentDescription
        mapping = ds.SharedFunctionalGroupsSequence[0].RealWorldValueMappingSequence[0]
        assert mapping.LUTExplanation.startswith(f"{region}: ")
        numbers.add(int(ds.SeriesNumber))
        pm = hd.pm.ParametricMap.from_dataset(ds)
        assert len(pm.PerFrameFunctionalGroupsSequence) == len(sources)
        assert pm.pixel_array.dtype == np.float32
        for item, frame in zip(pm.PerFrameFunctionalGroupsSequence, pm.pixel_array):
            ref = str(item.DerivationImageSequence[0].SourceImageSequence[0].ReferencedSOPInstanceUID)
            np.testing.assert_array_equal(frame, _nifti_at(pe[r], affine, _source_world(sources[ref])))
    assert len(numbers) == len(names)
    objects = json.loads((out / "dicom_export.json").read_text())["cases"]["c0"]["objects"]
    kinds = [o["kind"] for o in objects if o["kind"].startswith("map:")]
    assert kinds == [f"map:predictive_entropy:{n}" for n in names]


@pytest.mark.slow
def test_map_files_of_one_region_are_checked_as_maps(tmp_path, capsys):
    """A region's file off the series' grid, with a NaN, or missing, is refused in one line naming it."""
    series_dir, pred, names, pe = _region_files(tmp_path, "nnunet")
    argv = ["dicom-export", "-p", str(pred), "-s", str(series_dir), "--layout", "nnunet", "-q"]
    series = read_series(series_dir / "c0", pixels=False)
    path = pred / "uncertainty" / f"c0_predictive_entropy_{names[0]}.nii.gz"
    shifted = series.affine.copy()
    shifted[:3, 3] += 2.0
    nib.save(nib.Nifti1Image(pe[0], shifted), path)
    assert main([*argv, "-o", str(tmp_path / "grid")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and path.name in err and "not on the grid" in err, err
    assert not list((tmp_path / "grid").glob("c0/*.dcm"))
    bad = pe[0].copy()
    bad[1, 2, 3] = np.nan
    nib.save(nib.Nifti1Image(bad, series.affine), path)
    assert main([*argv, "-o", str(tmp_path / "nan")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and path.name in err and "NaN" in err, err
    nib.save(nib.Nifti1Image(np.stack([pe[0], pe[0]], axis=-1), series.affine), path)
    assert main([*argv, "-o", str(tmp_path / "channels")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and path.name in err and "has 2 channels; it must have one" in err, err
    nib.save(nib.Nifti1Image(pe[0], series.affine), path)
    # a case's map of one file beside its per-region files: which one holds the map is ambiguous
    whole = pred / "uncertainty" / "c0_predictive_entropy.nii.gz"
    nib.save(nib.Nifti1Image(np.ascontiguousarray(np.moveaxis(pe, 0, -1)), series.affine), whole)
    assert main([*argv, "-o", str(tmp_path / "both")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ambiguous" in err and whole.name in err, err
    whole.unlink()
    path.unlink()
    assert main([*argv, "-o", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and repr(names[0]) in err, err


@pytest.mark.slow
def test_map_files_of_unrecorded_regions_are_said_not_exported(tmp_path, capsys):
    """Without a record of the regions, the files cannot be told from a case's own map: a warning names one."""
    series_dir, pred, names, _ = _region_files(tmp_path, "nnunet")
    (pred / "dataset.json").unlink()
    (pred / "uncertainty" / "c0.json").unlink()
    assert main(["dicom-export", "-p", str(pred), "-s", str(series_dir), "--layout", "nnunet", "-o",
                 str(tmp_path / "out"), "--no-probabilities", "-q"]) == 0
    err = capsys.readouterr().err
    assert "c0_predictive_entropy_" in err and "not exported" in err, err
    assert not list((tmp_path / "out" / "c0").glob("predictive_entropy*.dcm"))


def test_the_manifest_lists_every_input_channel_series(tmp_path):
    """The objects reference the series of every input channel; the manifest now names them too."""
    channels = _export_source(tmp_path)
    out = tmp_path / "out"
    assert main(["dicom-export", "-p", str(tmp_path / "pred"), "-s", str(tmp_path / "series"), "-o", str(out),
                 "-q"]) == 0
    entry = json.loads((out / "dicom_export.json").read_text())["cases"]["c1"]
    assert entry["series"]["series_instance_uid"] == channels[0].series_uid
    assert entry["other_series"] == [{"channel": 1, "series_instance_uid": channels[1].series_uid,
                                      "study_instance_uid": STUDY,
                                      "folder": str((tmp_path / "series" / "c1_0001").resolve()),
                                      "slices": channels[1].shape[2]}]
    seg = pydicom.dcmread(out / "c1" / "seg.dcm", stop_before_pixels=True)
    listed = {entry["series"]["series_instance_uid"], *(s["series_instance_uid"] for s in entry["other_series"])}
    assert {str(s.SeriesInstanceUID) for s in seg.ReferencedSeriesSequence} == listed
    assert dciodvfy_errors(out / "c1" / "seg.dcm") == []


def test_a_case_of_one_series_lists_no_other_series(tmp_path):
    make_series(tmp_path / "series" / "c0", GEOMETRY)
    series = read_series(tmp_path / "series" / "c0", pixels=False)
    (tmp_path / "pred").mkdir()
    nib.save(nib.Nifti1Image(_brats_labels(), series.affine), tmp_path / "pred" / "c0_seg.nii.gz")
    out = tmp_path / "out"
    assert main(["dicom-export", "-p", str(tmp_path / "pred"), "-s", str(tmp_path / "series"), "-o", str(out),
                 "-q"]) == 0
    entry = json.loads((out / "dicom_export.json").read_text())["cases"]["c0"]
    assert entry["series"]["series_instance_uid"] == series.series_uid and entry["other_series"] == []
