"""Review 61: uncertainty maps of a region-based model written one file per region (``<case>_<measure>_<region>``:
nnU-Net's export of a 2D NIfTI image, or of a format without 4D images) are not read by :func:`match_cases`, which
reads one ``<case>_<measure>`` file per measure. They were left out without a word (the cases evaluated without their
maps) or, with ``measures``, refused as "no uncertainty map" without saying why: now a warning (and the refusal) names
such a file and why it is not read."""
from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

import nibabel as nib  # noqa: E402
from nnunetv2.imageio.simpleitk_reader_writer import SimpleITKIO  # noqa: E402

from monai_unc.io import CaseError, CaseFiles, match_cases  # noqa: E402
from monai_unc.nnunet.export import write_region_maps  # noqa: E402

AFFINE = np.array([[0.7, 0.0, 0.0, 3.0], [0.0, 0.8, 0.0, -2.0], [0.0, 0.0, 2.5, 5.0], [0.0, 0.0, 0.0, 1.0]])
SHAPE = (17, 19)


def _nnunet_folders(tmp_path):
    """labels/, pred/ (nnU-Net layout) with case c1 of a 2D NIfTI image, its maps written by the real writer."""
    (tmp_path / "labels").mkdir()
    (tmp_path / "pred" / "uncertainty").mkdir(parents=True)
    image_file = tmp_path / "c1_0000.nii.gz"
    nib.save(nib.Nifti1Image(np.zeros(SHAPE, np.float32), AFFINE), str(image_file))
    _, props = SimpleITKIO().read_images([str(image_file)])
    maps = np.random.default_rng(0).uniform(0, 0.7, size=(2, 1, *SHAPE[::-1])).astype(np.float32)
    written = write_region_maps(SimpleITKIO(), maps, tmp_path / "pred" / "uncertainty" / "c1_mutual_information.nii.gz",
                                props, ["WT", "TC"])
    assert [p.name for p in written] == ["c1_mutual_information_WT.nii.gz", "c1_mutual_information_TC.nii.gz"]
    seg = np.zeros(SHAPE, np.uint8)
    seg[4:9, 5:11] = 1
    nib.save(nib.Nifti1Image(seg, AFFINE), str(tmp_path / "labels" / "c1.nii.gz"))
    nib.save(nib.Nifti1Image(seg, AFFINE), str(tmp_path / "pred" / "c1.nii.gz"))
    return tmp_path / "labels", tmp_path / "pred"


def test_per_region_map_files_are_not_left_out_without_a_word(tmp_path):
    labels, pred = _nnunet_folders(tmp_path)
    with pytest.warns(UserWarning, match=r"c1_mutual_information_TC\.nii\.gz .* is not read: .* one file per region"):
        cases = match_cases(labels, pred, layout="nnunet")
    assert [c.case_id for c in cases] == ["c1"] and cases[0].maps == {}


def test_the_measure_asked_for_names_the_per_region_file(tmp_path):
    labels, pred = _nnunet_folders(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(CaseError, match=r"no uncertainty map .*mutual_information.*c1_mutual_information_TC\.nii"
                                            r"\.gz there is one region's map"):
            match_cases(labels, pred, layout="nnunet", measures=["mutual_information"])


def test_no_warning_for_files_that_are_read_or_belong_to_another_case(tmp_path):
    """A case 'c1_variance' beside 'c1' (monai-unc layout, maps beside the segmentations): its segmentation
    c1_variance_seg and its map c1_variance_variance are read, no region map of c1; nor is a map measured with
    no measure read (measures=[])."""
    for folder in ("labels", "pred"):
        (tmp_path / folder).mkdir()
    for cid in ("c1", "c1_variance"):
        for name in (f"labels/{cid}.nii.gz", f"pred/{cid}_seg.nii.gz"):
            nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.uint8), np.eye(4)), str(tmp_path / name))
        nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.float32), np.eye(4)),
                 str(tmp_path / "pred" / f"{cid}_variance.nii.gz"))
    with warnings.catch_warnings(record=True) as caught:  # (a case 'c1_variance' looks like a map to other checks)
        warnings.simplefilter("always")
        cases = match_cases(tmp_path / "labels", tmp_path / "pred")
    assert not [w for w in caught if "is not read" in str(w.message)]
    assert [sorted(c.maps) for c in cases] == [["variance"], ["variance"]]
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.float32), np.eye(4)),
             str(tmp_path / "pred" / "c1_variance_WT.nii.gz"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        match_cases(tmp_path / "labels", tmp_path / "pred", measures=[])
    assert not [w for w in caught if "is not read" in str(w.message)]
    with pytest.warns(UserWarning, match=r"c1_variance_WT\.nii\.gz"):
        match_cases(tmp_path / "labels", tmp_path / "pred")


# ------------------------------------------------------------------------------------------ reading them
MEASURES = ("mutual_information", "variance")
REGIONS = {"WT": [1, 2], "TC": [2]}


def _region_cohort(tmp_path, two_d: bool):
    """Cases c1, c2 of a region model in the nnU-Net layout. ``two_d``: 2D NIfTI images, the maps written one file
    per region by nnU-Net's export (:func:`write_region_maps`); else the same voxels as ``(X, Y, 1)`` volumes, each
    map one 4D NIfTI ``(X, Y, 1, R)`` holding the 2D files' values."""
    from monai_unc.io import save_region_maps

    root = tmp_path / ("two_d" if two_d else "three_d")
    src = tmp_path / "src"  # the real writer's files, written once
    labels, pred = root / "labels", root / "pred"
    (pred / "uncertainty").mkdir(parents=True)
    labels.mkdir()
    rng = np.random.default_rng(1)
    for cid in ("c1", "c2"):
        if not (src / f"{cid}_0000.nii.gz").exists():
            src.mkdir(exist_ok=True)
            nib.save(nib.Nifti1Image(np.zeros(SHAPE, np.float32), AFFINE), str(src / f"{cid}_0000.nii.gz"))
            _, props = SimpleITKIO().read_images([str(src / f"{cid}_0000.nii.gz")])
            for m in MEASURES:
                maps = rng.uniform(0, 0.24, size=(2, 1, *SHAPE[::-1])).astype(np.float32)
                write_region_maps(SimpleITKIO(), maps, src / f"{cid}_{m}.nii.gz", props, list(REGIONS))
        affine = nib.load(str(src / f"{cid}_{MEASURES[0]}_WT.nii.gz")).affine
        label = np.zeros(SHAPE, np.uint8)
        label[3:12, 4:15] = 1
        label[5:9, 6:11] = 2
        seg = np.roll(label, 1 if cid == "c1" else 2, axis=0)
        for folder, arr in ((labels, label), (pred, seg)):
            nib.save(nib.Nifti1Image(arr if two_d else arr[..., None], affine), str(folder / f"{cid}.nii.gz"))
        for m in MEASURES:
            files = [src / f"{cid}_{m}_{r}.nii.gz" for r in REGIONS]
            if two_d:
                for f in files:
                    shutil.copy(f, pred / "uncertainty" / f.name)
            else:
                stacked = np.stack([np.asarray(nib.load(str(f)).dataobj)[..., None] for f in files])
                save_region_maps(stacked, affine, pred / "uncertainty" / f"{cid}_{m}.nii.gz")
    return labels, pred


def test_per_region_files_are_read_stacked_in_the_spec_order(tmp_path):
    from monai_unc.io import load_case

    labels, pred = _region_cohort(tmp_path, two_d=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # every map file read: nothing to warn about
        cases = match_cases(labels, pred, layout="nnunet", regions=["TC", "WT"])
    assert cases[0].maps["variance"] == (pred / "uncertainty" / "c1_variance_TC.nii.gz",
                                         pred / "uncertainty" / "c1_variance_WT.nii.gz")
    assert CaseFiles.from_json(cases[0].to_json()) == cases[0]
    case = load_case(cases[0], 2, multilabel=True)
    for m in MEASURES:
        want = np.stack([np.asarray(nib.load(str(pred / "uncertainty" / f"c1_{m}_{r}.nii.gz")).dataobj)
                         for r in ("TC", "WT")])
        assert case.maps[m].shape == (2, *SHAPE)
        np.testing.assert_array_equal(case.maps[m], want)


def test_missing_region_file_ambiguous_4d_file_and_other_grid_are_refused_naming_the_case(tmp_path):
    from monai_unc.io import load_case

    labels, pred = _region_cohort(tmp_path, two_d=True)
    unc = pred / "uncertainty"
    (unc / "c2_variance_TC.nii.gz").unlink()
    with pytest.raises(CaseError, match=r"case 'c2': its variance maps written one file per region .* lack the "
                                        r"file\(s\) of region\(s\) \['TC'\]"):
        match_cases(labels, pred, layout="nnunet", regions=list(REGIONS))
    shutil.copy(unc / "c1_variance_TC.nii.gz", unc / "c2_variance_TC.nii.gz")
    shutil.copy(unc / "c1_variance_TC.nii.gz", unc / "c1_variance.nii.gz")
    with pytest.raises(CaseError, match=r"case 'c1': both c1_variance\.nii\.gz and per-region variance maps "
                                        r"\(c1_variance_WT\.nii\.gz\) .* ambiguous"):
        match_cases(labels, pred, layout="nnunet", regions=list(REGIONS))
    (unc / "c1_variance.nii.gz").unlink()
    img = nib.load(str(unc / "c1_variance_TC.nii.gz"))
    nib.save(nib.Nifti1Image(np.asarray(img.dataobj)[:-1], img.affine), str(unc / "c1_variance_TC.nii.gz"))
    cases = match_cases(labels, pred, layout="nnunet", regions=list(REGIONS))
    with pytest.raises(CaseError, match=r"case 'c1': c1_variance_TC\.nii\.gz has spatial shape"):
        load_case(cases[0], 2, multilabel=True)
    with pytest.raises(CaseError, match=r"case 'c2': the mutual_information map written one file per region "
                                        r".* multilabel"):
        load_case(cases[1], 3)


def test_prediction_listing_of_a_region_rule_reads_per_region_files(tmp_path):
    """triage / conformal list a region rule's predictions with its region names: the per-region files are read."""
    from monai_unc.io.provenance import list_prediction_cases

    _, pred = _region_cohort(tmp_path, two_d=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        found = list_prediction_cases(pred, "nnunet", measure="variance", regions=list(REGIONS))
    assert found[1].maps == {"variance": tuple((pred / "uncertainty" / f"c2_variance_{r}.nii.gz").resolve()
                                               for r in REGIONS)}


def test_evaluate_reads_per_region_files_as_the_same_maps_in_one_4d_file(tmp_path, capsys):
    """End to end: ``monai-unc evaluate --regions --layout nnunet`` of the per-region files of 2D images gives the
    map-based numbers of the same maps written as one 4D NIfTI of the same cases as ``(X, Y, 1)`` volumes."""
    import csv
    import json

    from monai_unc.cli import main

    spec = tmp_path / "regions.json"
    spec.write_text(json.dumps(REGIONS))
    rows, summaries = {}, {}
    for two_d in (True, False):
        labels, pred = _region_cohort(tmp_path, two_d)
        out = tmp_path / f"eval_{two_d}"
        code = main(["evaluate", "-l", str(labels), "-p", str(pred), "--layout", "nnunet", "-o", str(out),
                     "--regions", str(spec), "--no-spatial", "-q"])
        assert code == 0, capsys.readouterr().err
        with open(out / "metrics.csv", newline="") as f:
            rows[two_d] = list(csv.DictReader(f))
        summary = json.loads((out / "summary.json").read_text())
        summaries[two_d] = json.dumps({k: summary.get(k) for k in ("measure", "failure_detection", "referral")})
    columns = [c for c in rows[True][0] if any(m in c for m in MEASURES)]
    assert len(columns) >= 2 * len(MEASURES), list(rows[True][0])
    for got, want in zip(rows[True], rows[False]):
        assert got["case"] == want["case"]
        for c in columns:
            assert got[c] == want[c], (got["case"], c, got[c], want[c])
    assert summaries[True] == summaries[False]
    # the report reads the evaluation's files back, a map's per-region files a list of paths in its state
    assert main(["report", "-e", str(tmp_path / "eval_True"), "-o", str(tmp_path / "report")]) == 0, \
        capsys.readouterr().err
    assert json.loads(summaries[True])["measure"] in MEASURES


def test_run_evaluate_with_a_region_spec_string_reads_the_per_region_files(tmp_path):
    """The Python API: ``EvaluationConfig(regions=<JSON text>)`` is parsed before the cases are matched, so the
    region names (not the characters of the text) name the files."""
    import json

    from monai_unc.evaluation import EvaluationConfig
    from monai_unc.evaluation.runner import run_evaluate

    labels, pred = _region_cohort(tmp_path, two_d=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        _, summary, _ = run_evaluate(labels, pred, tmp_path / "ev", EvaluationConfig(regions=json.dumps(REGIONS),
                                                                                     spatial=False),
                                     layout="nnunet", progress=False)
    assert summary["measure"] in MEASURES
    with pytest.raises(TypeError, match="regions must be a list of region names"):
        match_cases(labels, pred, layout="nnunet", regions="WT")


def test_resume_recomputes_a_case_whose_region_file_changed(tmp_path):
    """The per-case state records the signature of each region's file: one region's file written again is read
    again (not the stale row)."""
    import csv
    import json

    from monai_unc.cli import main

    spec = tmp_path / "regions.json"
    spec.write_text(json.dumps(REGIONS))
    labels, pred = _region_cohort(tmp_path, two_d=True)
    out = tmp_path / "ev"
    args = ["evaluate", "-l", str(labels), "-p", str(pred), "--layout", "nnunet", "-o", str(out), "--regions",
            str(spec), "--no-spatial", "-q"]

    def variance_tc() -> dict[str, str]:
        assert main(args) == 0
        with open(out / "metrics.csv", newline="") as f:
            return {r["case"]: r["variance_mean_TC"] for r in csv.DictReader(f)}

    before = variance_tc()
    f = pred / "uncertainty" / "c1_variance_TC.nii.gz"
    img = nib.load(str(f))
    nib.save(nib.Nifti1Image(np.asarray(img.dataobj) * 0.5, img.affine), str(f))
    after = variance_tc()
    assert after["c2"] == before["c2"]
    assert float(after["c1"]) == pytest.approx(float(before["c1"]) / 2, rel=1e-5)
