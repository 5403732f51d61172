"""nnU-Net's ignore label in ``monai-unc evaluate``: ``--ignore-label``, or the ``dataset.json`` of ``--layout nnunet``.

Found by a hostile end-to-end run: a reference holding nnU-Net's ignore label (the ``"ignore"`` entry of
``dataset.json``'s ``labels``, above every class) was refused case by case ("values [3] outside classes 0..2"), the run
exited 1 and wrote no ``metrics.csv``. nnU-Net's own evaluation (``nnunetv2.evaluation.evaluate_predictions.
compute_metrics``) leaves those voxels out of TP / FP / FN. The references here: the same metrics of the arrays with
the ignore voxels removed (a ``(N, 1, 1)`` volume evaluated without an ignore label, and numpy by brute force), and
nnU-Net's ``compute_metrics`` on the same files.
"""

from __future__ import annotations

import csv
import json
import math
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.case import evaluate_case, kept_task
from monai_unc.evaluation.rows import derived_maps
from monai_unc.io import CaseFiles, LoadedCase, load_case, nnunet_dataset_ignore_label

SHAPE = (12, 11, 10)
C = 3
IGNORE = 3
DATASET = {"labels": {"background": 0, "a": 1, "b": 2, "ignore": IGNORE}, "file_ending": ".nii.gz",
           "channel_names": {"0": "CT"}, "numTraining": 3}
#: the voxel-wise columns of a class evaluation that leave the ignore voxels out
VOXEL_COLUMNS = ("dice", "dice_1", "dice_2", "ece", "classwise_ece", "all_label_ece", "ace", "mce", "uce", "nll",
                 "brier", "error_rate", "error_auroc", "error_auprc")


def _case(rng: np.random.Generator, ignore_fraction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reference with the ignore label, probabilities (C, *SHAPE), segmentation) of one noisy case."""
    zz, yy, xx = np.indices(SHAPE)
    d = np.sqrt((zz - 6) ** 2 + (yy - 5) ** 2 + (xx - 5) ** 2)
    lab = np.select([d < 2.5, d < 4.5], [2, 1], 0).astype(np.uint8)
    logits = rng.normal(0, 1.0, (C, *SHAPE)) + 2.0 * np.eye(C)[lab].transpose(3, 0, 1, 2)
    p = np.exp(logits) / np.exp(logits).sum(0, keepdims=True)
    # a slab and scattered voxels hold the ignore label (nnU-Net's scribble / sparse annotations)
    ign = (rng.uniform(size=SHAPE) < ignore_fraction) | (zz < 2)
    if ignore_fraction >= 1:
        ign[:] = True
    if ignore_fraction <= 0:
        ign[:] = False
    ref = np.where(ign, IGNORE, lab).astype(np.uint8)
    return ref, p.astype(np.float32), p.argmax(0).astype(np.uint8)


def _write(root: Path, fractions=(0.3, 0.2, 0.0), dataset: dict | None = DATASET):
    labels, pred = root / "labels", root / "pred"
    labels.mkdir(parents=True)
    pred.mkdir()
    if dataset is not None:
        (pred / "dataset.json").write_text(json.dumps(dataset))
    rng = np.random.default_rng(0)
    data = {}
    for i, f in enumerate(fractions):
        ref, p, seg = _case(rng, f)
        nib.save(nib.Nifti1Image(ref, np.eye(4)), str(labels / f"c{i}.nii.gz"))
        nib.save(nib.Nifti1Image(seg, np.eye(4)), str(pred / f"c{i}.nii.gz"))
        np.savez_compressed(pred / f"c{i}.npz", probabilities=p.transpose(0, 3, 2, 1))  # nnU-Net's (C, z, y, x)
        data[f"c{i}"] = (ref, p, seg)
    return labels, pred, data


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path) as f:
        return {r["case"]: r for r in csv.DictReader(f)}


def _removed_case(case_id: str, ref: np.ndarray, p: np.ndarray, seg: np.ndarray, maps: dict) -> LoadedCase:
    """The case with its ignore voxels removed: a (N, 1, 1) volume of the kept voxels, no ignore label."""
    keep = ref != IGNORE
    n = int(keep.sum())
    return LoadedCase(case_id, ref[keep].astype(np.int64).reshape(n, 1, 1), seg[keep].astype(np.int64).reshape(n, 1, 1),
                      np.ascontiguousarray(p[:, keep].reshape(C, n, 1, 1)),
                      {m: np.ascontiguousarray(v[keep].reshape(n, 1, 1)) for m, v in maps.items()}, np.eye(4),
                      (1.0, 1.0, 1.0))


def test_class_metrics_equal_those_of_the_arrays_without_the_ignore_voxels(tmp_path):
    labels, pred, data = _write(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(labels, pred, tmp_path / "eval", EvaluationConfig(ignore_label=IGNORE, spatial=False),
                     layout="nnunet")
    rows = _rows(tmp_path / "eval" / "metrics.csv")
    for cid, (ref, p, seg) in data.items():
        keep = ref != IGNORE
        full = load_case(CaseFiles(cid, labels / f"{cid}.nii.gz", pred / f"{cid}.nii.gz", pred / f"{cid}.npz"),
                         ignore_label=IGNORE)
        maps = derived_maps(full)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            expected = evaluate_case(_removed_case(cid, ref, p, seg, maps), EvaluationConfig(spatial=False)).row
        got = rows[cid]
        for col in VOXEL_COLUMNS:
            assert float(got[col]) == pytest.approx(expected[col], rel=1e-5, abs=1e-7, nan_ok=True), (cid, col)
        assert int(got["voxels"]) == int(keep.sum())
        # brute force in numpy on the kept voxels
        y, pk, s = ref[keep].astype(int), p[:, keep].astype(np.float64), seg[keep].astype(int)
        assert float(got["error_rate"]) == pytest.approx(np.mean(s != y), rel=1e-6)
        assert float(got["nll"]) == pytest.approx(-np.mean(np.log(pk[y, np.arange(y.size)])), rel=1e-4)
        assert float(got["brier"]) == pytest.approx(np.mean(((pk - np.eye(C)[y].T) ** 2).sum(0)), rel=1e-4)
        for c in (1, 2):
            tp, fp, fn = np.sum((s == c) & (y == c)), np.sum((s == c) & (y != c)), np.sum((s != c) & (y == c))
            assert float(got[f"dice_{c}"]) == pytest.approx(2 * tp / (2 * tp + fp + fn), rel=1e-6)
        # the case scores of the uncertainty maps read no label: those of every voxel
        entropy = float(np.mean(maps["predictive_entropy"]))
        assert float(got["predictive_entropy_mean"]) == pytest.approx(entropy, rel=1e-5)


def test_dice_equals_nnunet_compute_metrics(tmp_path):
    nnunet_eval = pytest.importorskip("nnunetv2.evaluation.evaluate_predictions")
    from nnunetv2.imageio.simpleitk_reader_writer import SimpleITKIO

    labels, pred, data = _write(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(labels, pred, tmp_path / "eval", EvaluationConfig(ignore_label=IGNORE, spatial=False),
                     layout="nnunet")
    rows = _rows(tmp_path / "eval" / "metrics.csv")
    for cid in data:
        ref = nnunet_eval.compute_metrics(str(labels / f"{cid}.nii.gz"), str(pred / f"{cid}.nii.gz"), SimpleITKIO(),
                                          [1, 2], ignore_label=IGNORE)
        for c in (1, 2):
            assert float(rows[cid][f"dice_{c}"]) == pytest.approx(ref["metrics"][c]["Dice"], rel=1e-6), (cid, c)


def test_all_ignore_case_is_nan_with_a_warning_and_the_others_are_scored(tmp_path):
    labels, pred, data = _write(tmp_path, fractions=(0.3, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, summary, _ = run_evaluate(labels, pred, tmp_path / "eval",
                                     EvaluationConfig(ignore_label=IGNORE, spatial=False), layout="nnunet")
    rows = _rows(tmp_path / "eval" / "metrics.csv")
    for col in VOXEL_COLUMNS[3:]:
        assert math.isnan(float(rows["c1"][col])), col
    # Dice keeps the convention of an empty reference and segmentation: the case-level analyses need a number
    assert [float(rows["c1"][k]) for k in ("dice", "dice_1", "dice_2")] == [1.0, 1.0, 1.0]
    assert not math.isnan(float(rows["c0"]["nll"]))
    assert int(rows["c1"]["voxels"]) == 0
    # the pooled calibration holds the voxels of c0 alone
    alone = tmp_path / "alone"
    (alone / "labels").mkdir(parents=True)
    (alone / "pred").mkdir()
    for name in ("labels/c0.nii.gz", "pred/c0.nii.gz", "pred/c0.npz", "pred/dataset.json"):
        (alone / name).write_bytes((tmp_path / name).read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, one, _ = run_evaluate(alone / "labels", alone / "pred", alone / "eval",
                                 EvaluationConfig(ignore_label=IGNORE, spatial=False), layout="nnunet")
    assert summary["calibration"]["nll"] == pytest.approx(one["calibration"]["nll"], rel=1e-9)
    assert summary["calibration"]["ece"] == pytest.approx(one["calibration"]["ece"], rel=1e-9)
    assert any(w.startswith("c1: every voxel of the reference holds the ignore label 3") for w in summary["warnings"])


def test_cases_without_ignore_voxels_keep_todays_numbers(tmp_path):
    labels, pred, _ = _write(tmp_path, fractions=(0.0, 0.0), dataset={**DATASET, "labels": {
        "background": 0, "a": 1, "b": 2}})
    for z in (0, 1):  # no slab either: no voxel holds the ignore label
        for name in (f"c{z}.nii.gz",):
            img = nib.load(str(labels / name))
            ref = np.asarray(img.dataobj)
            nib.save(nib.Nifti1Image(np.where(ref == IGNORE, 0, ref).astype(np.uint8), np.eye(4)), str(labels / name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(labels, pred, tmp_path / "today", EvaluationConfig(), layout="nnunet")
        run_evaluate(labels, pred, tmp_path / "ignore", EvaluationConfig(ignore_label=IGNORE), layout="nnunet")
    today, ignore = _rows(tmp_path / "today" / "metrics.csv"), _rows(tmp_path / "ignore" / "metrics.csv")
    assert today == ignore  # BUC, BA-ECE and SPACE included: the reference is whole
    assert not math.isnan(float(ignore["c0"]["ba_ece"]))


def test_spatial_metrics_are_nan_with_a_warning_for_a_case_holding_the_ignore_label(tmp_path):
    labels, pred, _ = _write(tmp_path, fractions=(0.3, 0.0))  # c1 without ignore voxels
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, summary, _ = run_evaluate(labels, pred, tmp_path / "eval", EvaluationConfig(ignore_label=IGNORE),
                                     layout="nnunet")
    assert any(w.startswith("c0: BUC, BA-ECE and SPACE are NaN: they need the whole reference")
               for w in summary["warnings"])
    rows = _rows(tmp_path / "eval" / "metrics.csv")
    assert all(math.isnan(float(rows["c0"][k])) for k in ("buc", "ba_ece", "space"))
    assert not any(math.isnan(float(rows["c1"][k])) for k in ("ba_ece", "space"))
    assert not any(w.startswith("c1: BUC, BA-ECE and SPACE are NaN") for w in summary["warnings"])


REGIONS = {"whole": [1, 2], "core": [2]}


def test_regions_leave_the_ignore_voxels_out_of_every_region_as_nnunet(tmp_path):
    nnunet_eval = pytest.importorskip("nnunetv2.evaluation.evaluate_predictions")
    from nnunetv2.imageio.simpleitk_reader_writer import SimpleITKIO

    labels, pred, data = _write(tmp_path, dataset={"labels": {"background": 0, **REGIONS, "ignore": IGNORE},
                                                   "regions_class_order": [1, 2], "file_ending": ".nii.gz"})
    rng = np.random.default_rng(1)
    sig = {}
    for cid, (ref, _, _) in data.items():  # region-based predictions: one sigmoid channel per region
        lab = np.where(ref == IGNORE, 0, ref)
        masks = np.stack([np.isin(lab, v) for v in REGIONS.values()])
        p = np.clip(np.where(masks, 0.8, 0.2) + rng.normal(0, 0.15, masks.shape), 0.01, 0.99).astype(np.float32)
        seg = np.zeros(SHAPE, np.uint8)
        for r, value in enumerate((1, 2)):
            seg[p[r] > 0.5] = value
        nib.save(nib.Nifti1Image(seg, np.eye(4)), str(pred / f"{cid}.nii.gz"))
        np.savez_compressed(pred / f"{cid}.npz", probabilities=p.transpose(0, 3, 2, 1))
        sig[cid] = (p, seg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(labels, pred, tmp_path / "eval",
                     EvaluationConfig(regions=REGIONS, ignore_label=IGNORE, spatial=False), layout="nnunet")
    rows = _rows(tmp_path / "eval" / "metrics.csv")
    for cid, (ref, _, _) in data.items():
        p, seg = sig[cid]
        got = rows[cid]
        ref_nn = nnunet_eval.compute_metrics(str(labels / f"{cid}.nii.gz"), str(pred / f"{cid}.nii.gz"),
                                             SimpleITKIO(), [(1, 2), (2,)], ignore_label=IGNORE)
        keep = ref != IGNORE
        for r, (name, values) in enumerate(REGIONS.items()):
            assert float(got[f"dice_{name}"]) == pytest.approx(ref_nn["metrics"][tuple(values)]["Dice"], rel=1e-6)
            y = np.isin(ref[keep], values).astype(float)
            q = p[r][keep].astype(np.float64)
            nll = -np.mean(np.log(np.where(y == 1, q, 1 - q)))
            assert float(got[f"nll_{name}"]) == pytest.approx(nll, rel=1e-4)
            err = np.isin(seg[keep], values) != (y == 1)
            assert float(got[f"error_rate_{name}"]) == pytest.approx(np.mean(err), rel=1e-6)
        assert int(got["voxels"]) == int(keep.sum())


def test_nnunet_dataset_ignore_label_is_taken_with_one_info_line(tmp_path, capsys):
    labels, pred, _ = _write(tmp_path)
    out = tmp_path / "eval"
    assert main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "--layout", "nnunet",
                 "--no-spatial"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum("ignore label 3 from" in ln and "dataset.json" in ln for ln in lines) == 1
    assert (out / "metrics.csv").exists()
    assert json.loads((out / "summary.json").read_text())["config"]["ignore_label"] == IGNORE


def test_without_an_ignore_label_the_reference_is_refused_as_before(tmp_path, capsys):
    labels, pred, _ = _write(tmp_path, dataset=None)
    assert main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(tmp_path / "eval"), "--layout", "nnunet",
                 "--no-spatial", "-q"]) == 1
    assert "outside classes 0..2" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--ignore-label", "4"], "--ignore-label 4: the predictions' "),
    (["--lesions"], "--ignore-label: the lesions product needs the whole reference"),
    (["--ignore-label", "0"], "--ignore-label must be a label of at least 1"),
])
def test_bad_ignore_options_are_one_line_exit_2(tmp_path, capsys, argv, message):
    labels, pred, _ = _write(tmp_path)
    out = tmp_path / "eval"
    assert main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "--layout", "nnunet", "-q",
                 *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (out / "metrics.csv").exists()


@pytest.mark.parametrize("labels_entry, message", [
    ({"background": 0, "a": 1, "ignore": "x"}, "the ignore label must be an integer"),
    ({"background": 0, "a": 4, "ignore": 3}, "must lie above every other label"),
    ({"background": 0, "a": 1, "ignore": True}, "the ignore label must be an integer"),
])
def test_dataset_json_ignore_label_is_untrusted(labels_entry, message):
    with pytest.raises(ValueError, match=message):
        nnunet_dataset_ignore_label({"labels": labels_entry})
    assert nnunet_dataset_ignore_label({"labels": {"background": 0, "a": 1, "ignore": 2.0}}) == 2


def test_kept_task_flattens_every_array():
    from monai_unc.activation import TaskView

    t = TaskView(None, np.array([[0, 1], [1, 2]]), np.array([[0, 1], [2, 2]]), 3,
                 probs=np.arange(12, dtype=np.float32).reshape(3, 2, 2), maps={"m": np.arange(4.0).reshape(2, 2)})
    k = kept_task(t, np.array([[True, False], [True, True]]))
    assert k.target.tolist() == [0, 2, 2] and k.pred.tolist() == [0, 1, 2]
    assert k.probs.shape == (3, 3) and k.maps["m"].tolist() == [0.0, 2.0, 3.0]


def test_products_that_need_the_whole_reference_say_so():
    from monai_unc.product import registered_products

    needs = {cls.name for cls in registered_products() if cls.needs_whole_reference}
    assert needs == {"lesions", "conformal"}


def test_report_draws_the_cases_of_an_ignore_label_evaluation(tmp_path):
    labels, pred, _ = _write(tmp_path)
    ev = tmp_path / "eval"
    assert main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(ev), "--layout", "nnunet", "--no-spatial",
                 "-q"]) == 0
    assert main(["report", "-e", str(ev), "-o", str(tmp_path / "r"), "--cases", "2"]) == 0
    page = "\n".join(p.read_text() for p in (tmp_path / "r").rglob("*.html"))
    assert "no figure and no viewer" not in page
    assert len(list((tmp_path / "r" / "figures").glob("case_*.png"))) == 3  # two flagged, one for contrast


def test_an_ignore_label_among_the_classes_fails_the_case_naming_it(tmp_path):
    labels, pred, _ = _write(tmp_path, dataset=None)
    failed = []
    with pytest.raises(Exception, match="failed"):
        run_evaluate(labels, pred, tmp_path / "eval", EvaluationConfig(ignore_label=2, spatial=False),
                     layout="nnunet", on_failure=failed.append)
    assert failed and all("the ignore label 2 is one of the classes 0..2" in f.error for f in failed)
    with pytest.raises(ValueError, match="ignore_label 2 is one of the classes 0 .. 2"):
        EvaluationConfig(ignore_label=2, num_classes=3).validate()
    with pytest.raises(TypeError, match="ignore_label must be an integer label"):
        EvaluationConfig(ignore_label=2.5).validate()


def test_the_ignore_label_is_part_of_the_case_fingerprint():
    from monai_unc.evaluation.resume import case_config_fingerprint

    assert "ignore_label" not in case_config_fingerprint(EvaluationConfig())
    assert case_config_fingerprint(EvaluationConfig(ignore_label=3))["ignore_label"] == 3
    assert "ignore_label" not in EvaluationConfig().to_json()


def test_region_qu_brats_leaves_the_ignore_voxels_out_of_the_brain_mask_too():
    rng = np.random.default_rng(3)
    ref, _, _ = _case(rng, 0.3)
    lab = np.where(ref == IGNORE, 0, ref).astype(np.int64)
    masks = np.stack([np.isin(lab, v) for v in REGIONS.values()])
    p = np.clip(np.where(masks, 0.8, 0.2) + rng.normal(0, 0.2, masks.shape), 0.01, 0.99).astype(np.float32)
    seg = (p > 0.5).astype(np.uint8)
    image = (rng.uniform(size=(1, *SHAPE)) > 0.2).astype(np.float32)  # a brain mask with holes
    ign = ref == IGNORE
    whole = LoadedCase("a", lab, seg, p, {}, np.eye(4), (1.0, 1.0, 1.0), image, multilabel=True, ignore=ign)
    config = EvaluationConfig(regions=REGIONS, ignore_label=IGNORE, spatial=False)
    whole.maps = derived_maps(whole)
    keep, n = ~ign, int((~ign).sum())
    removed = LoadedCase("a", lab[keep].reshape(n, 1, 1), seg[:, keep].reshape(2, n, 1, 1),
                         np.ascontiguousarray(p[:, keep].reshape(2, n, 1, 1)),
                         {m: np.ascontiguousarray(v[:, keep].reshape(2, n, 1, 1)) for m, v in whole.maps.items()},
                         np.eye(4), (1.0, 1.0, 1.0), image[:, keep].reshape(1, n, 1, 1), multilabel=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = evaluate_case(whole, config).row
        expected = evaluate_case(removed, EvaluationConfig(regions=REGIONS, spatial=False)).row
    cols = [k for k in expected if k.startswith(("qu_brats", "dice", "nll", "ece", "error_"))]
    assert any(k.startswith("qu_brats_score") for k in cols)
    for k in cols:
        assert got[k] == pytest.approx(expected[k], rel=1e-6, nan_ok=True), k
