"""``monai-unc evaluate --regions``: region-based (multi-label sigmoid) predictions evaluated per region.

Fixtures are written by hand in the output contract of ``monai-unc infer --activation sigmoid`` (``<case>_seg``
4D region masks, ``<case>_probs`` 4D per-region probabilities, ``<case>_<measure>`` 4D maps) and of nnU-Net
(``<case>.nii.gz`` label map, ``<case>.npz`` probabilities ``(R, z, y, x)``, ``uncertainty/<case>_<measure>``).
References are computed here by brute force in numpy: Dice of the masks, the binary top-label ECE from a histogram
written in the test, NLL, Brier, the case scores, and QU-BraTS through :func:`monai_unc.metrics.qu_brats` on the
masked arrays.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.evaluation import (
    CohortState,
    EvaluationConfig,
    case_fingerprint,
    evaluate_case,
    evaluate_cases,
    load_evaluation,
    run_evaluate,
    summarize,
)
from monai_unc.io import CaseError, match_cases
from monai_unc.metrics import qu_brats
from monai_unc.report.html import build_report
from tests._cases import write_infer_case_records
from tests._paths import ROOT
from tests._ranks import run_cli_ranks

AFFINE = np.diag([1.0, 1.2, 2.0, 1.0])
SHAPE = (14, 12, 10)
BRATS = {"TC": (1, 4), "WT": (1, 2, 4), "ET": (4,)}
N_CASES = 4


def _nii(path: Path, data: np.ndarray) -> None:
    nib.save(nib.Nifti1Image(data, AFFINE), str(path))


def _regions(lab: np.ndarray) -> np.ndarray:
    return np.stack([np.isin(lab, v) for v in BRATS.values()])


def _tumour(rng: np.random.Generator, et: bool) -> np.ndarray:
    """A BraTS-style label map: oedema (2) around a core (1) with an enhancing rim (4) unless ``et`` is False."""
    lab = np.zeros(SHAPE, dtype=np.int16)
    c = np.array(SHAPE) // 2 + rng.integers(-1, 2, 3)
    xx, yy, zz = np.meshgrid(*[np.arange(s) for s in SHAPE], indexing="ij")
    d = np.sqrt(((xx - c[0]) / 1.0) ** 2 + ((yy - c[1]) / 1.1) ** 2 + ((zz - c[2]) / 0.8) ** 2)
    lab[d < 5.0] = 2
    lab[d < 3.2] = 1
    if et:
        lab[(d >= 2.0) & (d < 3.2)] = 4
    return lab


def _predicted(rng: np.random.Generator, lab: np.ndarray, et: bool) -> np.ndarray:
    """A prediction: the label map with some voxels changed (nested regions, so masks and label map agree)."""
    pred = lab.copy()
    flip = rng.random(SHAPE) < 0.08
    choices = np.array([0, 1, 2, 4] if et else [0, 1, 2])
    pred[flip] = rng.choice(choices, size=int(flip.sum()))
    if not et:
        pred[pred == 4] = 1
    return pred


def _binary_entropy(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-12, 1 - 1e-12)
    return (-(q * np.log(q) + (1 - q) * np.log(1 - q))).astype(np.float32)


def write_region_cohort(root: Path, n_cases: int = N_CASES, seed: int = 0) -> dict[str, Path]:
    """Labels, images and two prediction folders of the same predictions: ``monai-unc`` layout (4D masks) and
    ``nnunet`` layout (3D label map, ``.npz`` probabilities, maps under ``uncertainty/``). The last case has no
    enhancing tumour in label and prediction (an empty region)."""
    rng = np.random.default_rng(seed)
    dirs = {k: root / k for k in ("labels", "images", "pred", "pred_nnunet")}
    for d in dirs.values():
        d.mkdir(parents=True)
    (dirs["pred_nnunet"] / "uncertainty").mkdir()
    for i in range(n_cases):
        cid = f"case{i}"
        et = i != n_cases - 1
        lab = _tumour(rng, et)
        pred = _predicted(rng, lab, et)
        masks = _regions(pred)
        # probabilities on the right side of 0.5 for the predicted masks (never exactly 0.5)
        conf = rng.uniform(0.52, 0.999, size=masks.shape)
        probs = np.where(masks, conf, 1 - conf).astype(np.float32)
        pe = _binary_entropy(probs)
        image = rng.uniform(10, 100, SHAPE).astype(np.float32)
        image[:2] = 0  # background outside the brain
        image[:, :1] = 0
        _nii(dirs["labels"] / f"{cid}.nii.gz", lab)
        _nii(dirs["images"] / f"{cid}.nii.gz", image)
        _nii(dirs["pred"] / f"{cid}_seg.nii.gz", np.moveaxis(masks.astype(np.uint8), 0, -1))
        _nii(dirs["pred"] / f"{cid}_probs.nii.gz", np.moveaxis(probs, 0, -1))
        _nii(dirs["pred"] / f"{cid}_predictive_entropy.nii.gz", np.moveaxis(pe, 0, -1))
        _nii(dirs["pred_nnunet"] / f"{cid}.nii.gz", pred.astype(np.uint8))
        np.savez_compressed(dirs["pred_nnunet"] / f"{cid}.npz", probabilities=np.ascontiguousarray(
            probs.transpose(0, 3, 2, 1)))
        _nii(dirs["pred_nnunet"] / "uncertainty" / f"{cid}_predictive_entropy.nii.gz", np.moveaxis(pe, 0, -1))
    return dirs


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> dict[str, Path]:
    return write_region_cohort(tmp_path_factory.mktemp("regions"))


@pytest.fixture(scope="module")
def evaluated(cohort, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval_regions")
    config = EvaluationConfig(regions="brats", budget=0.25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state, summary, paths = run_evaluate(cohort["labels"], cohort["pred"], out, config, images=cohort["images"])
    return state, summary, paths, out


def _load(d: Path, cid: str, key: str) -> np.ndarray:
    return np.asarray(nib.load(str(d / f"{cid}{key}.nii.gz")).get_fdata(), dtype=np.float64)


def _ref_dice(a: np.ndarray, b: np.ndarray) -> float:
    den = a.sum() + b.sum()
    return 1.0 if den == 0 else float(2 * np.logical_and(a, b).sum() / den)


def _ref_ece(p: np.ndarray, t: np.ndarray, n_bins: int = 15) -> float:
    """Binary top-label ECE: confidence max(p, 1 - p), correct when (p > 0.5) == t, equal-width bins."""
    conf = np.maximum(p, 1 - p).ravel()
    correct = ((p > 0.5) == t).ravel().astype(np.float64)
    b = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for k in range(n_bins):
        sel = b == k
        if sel.any():
            total += sel.sum() * abs(correct[sel].mean() - conf[sel].mean())
    return total / conf.size


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as f:
        return {r["case"]: r for r in csv.DictReader(f)}


def test_per_region_metrics_equal_brute_force(cohort, evaluated):
    state, summary, paths, out = evaluated
    rows = _rows(paths["metrics"])
    assert sorted(rows) == [f"case{i}" for i in range(N_CASES)]
    log2 = math.log(2)
    for cid, row in rows.items():
        lab = _load(cohort["labels"], cid, "").astype(int)
        target = _regions(lab)
        masks = np.moveaxis(_load(cohort["pred"], cid, "_seg"), -1, 0) > 0.5
        probs = np.moveaxis(_load(cohort["pred"], cid, "_probs"), -1, 0)
        pe = np.moveaxis(_load(cohort["pred"], cid, "_predictive_entropy"), -1, 0)
        brain = _load(cohort["images"], cid, "") > 0
        dices, qb, fg = [], [], []
        for r, name in enumerate(BRATS):
            p, t, m = probs[r], target[r], masks[r]
            d = _ref_dice(m, t)
            dices.append(d)
            assert float(row[f"dice_{name}"]) == pytest.approx(d, abs=1e-6)
            assert float(row[f"ece_{name}"]) == pytest.approx(_ref_ece(p, t), abs=1e-7)
            nll = -np.mean(np.where(t, np.log(np.maximum(p, 1e-15)), np.log(np.maximum(1 - p, 1e-15))))
            assert float(row[f"nll_{name}"]) == pytest.approx(nll, rel=1e-6)
            assert float(row[f"brier_{name}"]) == pytest.approx(np.mean(2 * (p - t) ** 2), rel=1e-6)
            assert float(row[f"error_rate_{name}"]) == pytest.approx(np.mean(m != t))
            assert float(row[f"predictive_entropy_mean_{name}"]) == pytest.approx(pe[r].mean(), rel=1e-6)
            if m.any():
                fg.append(pe[r][m].mean())
                assert float(row[f"predictive_entropy_fg_mean_{name}"]) == pytest.approx(fg[-1], rel=1e-6)
            else:
                assert row[f"predictive_entropy_fg_mean_{name}"] == "nan"  # NaN: undefined for an empty prediction
            res = qu_brats(np.clip(pe[r] / log2 * 100, 0, 100), m, t, brain_mask=brain)
            qb.append(res.score)
            assert float(row[f"qu_brats_score_{name}"]) == pytest.approx(res.score, abs=1e-9)
            assert float(row[f"qu_brats_ftn_auc_{name}"]) == pytest.approx(res.ftn_auc, abs=1e-9)
            np.testing.assert_allclose(state.curves[cid]["regions"][name]["ftp"], res.ftp, atol=1e-12)
        assert float(row["dice"]) == pytest.approx(np.mean(dices), abs=1e-6)
        assert float(row["qu_brats_score"]) == pytest.approx(np.mean(qb), abs=1e-9)
        # the combined case score: the mean over the regions where it is defined
        assert float(row["predictive_entropy_fg_mean"]) == pytest.approx(np.mean(fg), rel=1e-6)
        assert row["measure"] == "predictive_entropy"
    # cohort: QU-BraTS mean over cases, mean curves, pooled ECE per region from merged histograms
    assert summary["qu_brats"]["score"] == pytest.approx(np.mean([float(r["qu_brats_score"]) for r in rows.values()]))
    assert summary["qu_brats"]["brain_mask"] == ["image > 0"]
    assert len(summary["qu_brats"]["curves"]["thresholds"]) == 40
    mean_ftp = np.mean([state.curves[c]["regions"]["WT"]["ftp"] for c in rows], axis=0)
    np.testing.assert_allclose(summary["qu_brats"]["curves"]["mean_over_cases"]["WT"]["ftp"], mean_ftp)
    for r, name in enumerate(BRATS):
        ps, ts = [], []
        for cid in rows:
            ps.append(np.moveaxis(_load(cohort["pred"], cid, "_probs"), -1, 0)[r].ravel())
            ts.append(_regions(_load(cohort["labels"], cid, "").astype(int))[r].ravel())
        pooled = summary["regions"]["per_region"][name]["calibration"]["ece"]
        assert pooled == pytest.approx(_ref_ece(np.concatenate(ps), np.concatenate(ts)), abs=1e-7)
    assert summary["score"]["column"] == "predictive_entropy_fg_mean"
    assert summary["dice"]["per_class"] == pytest.approx(
        {n: np.mean([float(r[f"dice_{n}"]) for r in rows.values()]) for n in BRATS})
    assert "calibration" not in summary  # no class-based calibration block for regions


def test_empty_region_in_target_and_prediction(evaluated):
    _, summary, paths, _ = evaluated
    row = _rows(paths["metrics"])[f"case{N_CASES - 1}"]
    assert float(row["dice_ET"]) == 1.0
    # no ET voxel anywhere: the filtered Dice is 1 at every threshold (area 0.975), nothing to filter
    assert float(row["qu_brats_dice_auc_ET"]) == pytest.approx(0.975)
    assert float(row["qu_brats_ftp_auc_ET"]) == 0.0
    assert any("predicted foreground is empty" in w or "empty" in w for w in summary["warnings"])


def test_label_map_prediction_equals_foreground_masks(cohort, evaluated, tmp_path):
    _, summary, paths, _ = evaluated
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, s2, p2 = run_evaluate(cohort["labels"], cohort["pred_nnunet"], tmp_path / "e", EvaluationConfig(
            regions="brats", budget=0.25), layout="nnunet", images=cohort["images"])
    a, b = _rows(paths["metrics"]), _rows(p2["metrics"])
    assert a == b
    assert s2["qu_brats"] == summary["qu_brats"]
    assert s2["regions"] == summary["regions"]


def test_region_mask_references_equal_label_maps(cohort, evaluated, tmp_path):
    """References given as 4D region masks (X, Y, Z, R) score exactly as the label maps they come from."""
    _, summary, paths, _ = evaluated
    masks_dir = tmp_path / "label_masks"
    masks_dir.mkdir()
    for path in sorted(cohort["labels"].glob("*.nii.gz")):
        lab = np.asarray(nib.load(str(path)).dataobj)
        img = nib.load(str(path))
        _nii(masks_dir / path.name, np.moveaxis(_regions(lab).astype(np.uint8), 0, -1))
        assert np.allclose(nib.load(str(masks_dir / path.name)).affine, img.affine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, s2, p2 = run_evaluate(masks_dir, cohort["pred"], tmp_path / "e", EvaluationConfig(
            regions="brats", budget=0.25), images=cohort["images"])
    assert _rows(paths["metrics"]) == _rows(p2["metrics"])
    assert s2["qu_brats"] == summary["qu_brats"] and s2["regions"] == summary["regions"]


def test_region_count_mismatch_is_a_clear_error(cohort, tmp_path):
    files = match_cases(cohort["labels"], cohort["pred"])[0]
    spec = {"WT": [1, 2, 4], "ET": [4]}
    with pytest.raises(CaseError, match=r"case0.*3 region channel\(s\) but the region spec has 2"):
        evaluate_case(files, EvaluationConfig(regions=spec))
    # a 3D label map needs no channel count; the probabilities still must match
    files = match_cases(cohort["labels"], cohort["pred_nnunet"], layout="nnunet")[0]
    with pytest.raises(CaseError, match="region channel"):
        evaluate_case(files, EvaluationConfig(regions=spec))


@pytest.mark.parametrize("spec", ["bratz", '{"WT": [1, 2', '{"WT": []}', '{"": [1]}'])
def test_bad_region_spec_exits_2_with_one_line(cohort, tmp_path, capsys, spec):
    code = main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["pred"]), "-o", str(tmp_path / "o"),
                 "--regions", spec, "-q"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and "--regions" in err, err
    assert not (tmp_path / "o" / "metrics.csv").exists()


def test_cli_regions_from_json_file_and_resume(cohort, tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"whole tumour": [1, 2, 4], "core": [1, 4], "enhancing": [4]}))
    out = tmp_path / "o"
    args = ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["pred_nnunet"]), "--layout", "nnunet",
            "-o", str(out), "--regions", str(spec), "--no-spatial"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "QU-BraTS score" in text and "whole tumour Dice" in text
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    for col in ("dice_whole_tumour", "dice_core", "qu_brats_score_enhancing", "qu_brats_score",
                "predictive_entropy_fg_mean", "predictive_entropy_fg_mean_core", "ece_enhancing"):
        assert col in header
    assert "buc_core" not in header
    first = (out / "metrics.csv").read_text()
    saved = sorted((out / "state" / "cases").glob("*.json"))
    mtimes = [p.stat().st_mtime_ns for p in saved]
    assert main(args) == 0  # resumed: every case from its saved state, same numbers
    assert [p.stat().st_mtime_ns for p in saved] == mtimes
    assert (out / "metrics.csv").read_text() == first
    capsys.readouterr()
    assert main(["report", "-e", str(out), "--cases", "1"]) == 0
    page = (out / "report" / "report.html").read_text()
    assert "dice_whole_tumour" in page and 'data-region="whole tumour"' in page
    assert (out / "report" / "figures" / "reliability-whole_tumour.png").is_file()


def test_fingerprint_includes_the_region_spec(cohort):
    files = match_cases(cohort["labels"], cohort["pred"], images=cohort["images"])[0]
    a = EvaluationConfig(regions="brats")
    b = EvaluationConfig(regions={"WT": [1, 2, 4], "TC": [1, 4], "ET": [4]})
    a.validate()
    b.validate()
    fa, fb = case_fingerprint(files, a), case_fingerprint(files, b)
    assert fa != fb
    assert fa["inputs"]["image"] is not None  # the brain mask depends on the image
    assert "image" not in case_fingerprint(files, EvaluationConfig(num_classes=5))["inputs"]


def test_shards_merge_to_the_whole_cohort_and_state_round_trips(cohort, evaluated, tmp_path):
    state, summary, _, out = evaluated
    config = EvaluationConfig(regions="brats", budget=0.25)
    cases = match_cases(cohort["labels"], cohort["pred"], images=cohort["images"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        a = evaluate_cases(cases[:2], config)
        b = evaluate_cases(cases[2:], config)
        merged = summarize(a.merge(b), config)
    for key in ("dice", "regions", "qu_brats", "failure_detection", "triage"):
        assert merged[key] == summary[key]
    loaded, saved = load_evaluation(out)
    assert loaded.regions == {k: list(v) for k, v in BRATS.items()}
    assert set(loaded.region_histograms) == set(BRATS)
    assert loaded.curves == state.curves
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        again = summarize(loaded, EvaluationConfig(regions="brats", budget=0.25))
    assert again["regions"] == summary["regions"]
    with pytest.raises(ValueError, match="regions"):
        CohortState(3, config.n_fine_bins).merge(b)


def test_without_images_the_brain_mask_is_every_voxel(cohort, evaluated, tmp_path):
    _, _, paths, _ = evaluated
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state, summary, p2 = run_evaluate(cohort["labels"], cohort["pred"], tmp_path / "e",
                                          EvaluationConfig(regions="brats", spatial=False))
    assert summary["qu_brats"]["brain_mask"] == ["all voxels"]
    row = _rows(p2["metrics"])["case0"]
    lab = _load(cohort["labels"], "case0", "").astype(int)
    t = _regions(lab)[1]
    m = np.moveaxis(_load(cohort["pred"], "case0", "_seg"), -1, 0)[1] > 0.5
    pe = np.moveaxis(_load(cohort["pred"], "case0", "_predictive_entropy"), -1, 0)[1]
    ref = qu_brats(np.clip(pe / math.log(2) * 100, 0, 100), m, t)
    assert float(row["qu_brats_score_WT"]) == pytest.approx(ref.score, abs=1e-9)
    # other numbers do not depend on the brain mask
    assert row["dice_WT"] == _rows(paths["metrics"])["case0"]["dice_WT"]


def test_probabilities_only_derive_binary_entropy_maps(cohort, tmp_path):
    pred = tmp_path / "pred"
    pred.mkdir()
    for f in cohort["pred"].glob("*_probs.nii.gz"):
        (pred / f.name).write_bytes(f.read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, _, paths = run_evaluate(cohort["labels"], pred, tmp_path / "e", EvaluationConfig(regions="brats",
                                                                                           spatial=False))
    row = _rows(paths["metrics"])["case1"]
    probs = np.moveaxis(_load(cohort["pred"], "case1", "_probs"), -1, 0)
    masks = np.moveaxis(_load(cohort["pred"], "case1", "_seg"), -1, 0) > 0.5
    assert np.array_equal(probs > 0.5, masks)  # the default segmentation: p > 0.5 per region (foreground_masks)
    t = _regions(_load(cohort["labels"], "case1", "").astype(int))
    assert float(row["dice_TC"]) == pytest.approx(_ref_dice(masks[0], t[0]), abs=1e-6)
    assert float(row["predictive_entropy_mean_ET"]) == pytest.approx(_binary_entropy(probs[2]).mean(), rel=1e-5)
    assert float(row["one_minus_max_prob_mean_ET"]) == pytest.approx(np.mean(1 - np.maximum(probs[2], 1 - probs[2])),
                                                                     rel=1e-5)


def test_stray_label_values_warn(cohort, tmp_path):
    files = match_cases(cohort["labels"], cohort["pred"])[0]
    res = evaluate_case(files, EvaluationConfig(regions="brats2023", spatial=False))
    assert any("no region" in w and "brats2023" in w for w in res.warnings)


def test_report_shows_regions_and_qu_brats_curves(evaluated, tmp_path):
    _, summary, _, out = evaluated
    page = build_report(out, tmp_path / "report", n_cases=1).read_text()
    assert 'id="fig-qu_brats"' in page
    assert (tmp_path / "report" / "figures" / "qu_brats.png").is_file()
    assert 'id="regions-table"' in page
    for name in BRATS:
        assert f"dice_{name}" in page and f"qu_brats_score_{name}" in page
    assert "QU-BraTS score" in page
    assert f"{summary['qu_brats']['score']:.3f}" in page


@pytest.mark.slow
def test_torchrun_region_evaluation_equals_single_process(cohort, evaluated, tmp_path):
    _, _, paths, _ = evaluated
    """``monai-unc evaluate --regions brats`` on two gloo ranks (forked from the test process with torchrun's
    variables, :func:`tests._ranks.run_cli_ranks`: no interpreter start-up per rank; the command under ``torchrun``
    itself is tests/engine/test_collectives.py's) writes the single process's ``metrics.csv`` and summary."""
    out = tmp_path / "eval"
    argv = ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["pred"]), "-o", str(out),
            "--images", str(cohort["images"]), "--regions", "brats", "--budget", "0.25", "-q"]
    results = run_cli_ranks([(argv, ROOT), (argv, ROOT)])
    assert [rc for rc, _ in results] == [0, 0], results
    assert (out / "metrics.csv").read_text() == paths["metrics"].read_text()
    a = json.loads((out / "summary.json").read_text())
    b = json.loads(paths["summary"].read_text())
    a.pop("config"), b.pop("config")
    assert a == b


def _one_case(tmp_path: Path, seg: np.ndarray | None = None, probs: np.ndarray | None = None,
              maps: dict[str, np.ndarray] | None = None) -> Path:
    """A case ``c`` in ``tmp_path/labels`` and ``tmp_path/pred`` (monai-unc layout, arrays channel first)."""
    (tmp_path / "labels").mkdir(parents=True, exist_ok=True)
    (tmp_path / "pred").mkdir(parents=True, exist_ok=True)
    lab = np.zeros(SHAPE, dtype=np.int16)
    lab[3:8, 3:8, 2:6] = 2
    lab[4:7, 4:7, 3:5] = 4
    _nii(tmp_path / "labels" / "c.nii.gz", lab)
    if seg is not None:
        _nii(tmp_path / "pred" / "c_seg.nii.gz", np.moveaxis(seg, 0, -1) if seg.ndim == 4 else seg)
    if probs is not None:
        _nii(tmp_path / "pred" / "c_probs.nii.gz", np.moveaxis(probs.astype(np.float32), 0, -1))
    for m, u in (maps or {}).items():
        _nii(tmp_path / "pred" / f"c_{m}.nii.gz", np.moveaxis(u.astype(np.float32), 0, -1))
    return tmp_path


def test_region_inputs_are_checked(tmp_path):
    config = EvaluationConfig(regions="brats", spatial=False)
    masks = np.zeros((3, *SHAPE), dtype=np.uint8)
    bad = masks.copy()
    bad[0, 0, 0, 0] = 2
    root = _one_case(tmp_path / "a", seg=bad)
    with pytest.raises(CaseError, match="region masks must hold 0 and 1"):
        evaluate_case(match_cases(root / "labels", root / "pred")[0], config)
    root = _one_case(tmp_path / "b", seg=masks, probs=np.full((3, *SHAPE), 1.5))
    with pytest.raises(CaseError, match=r"must lie in \[0, 1\]"):
        evaluate_case(match_cases(root / "labels", root / "pred")[0], config)
    root = _one_case(tmp_path / "c", seg=masks, maps={"predictive_entropy": np.zeros((2, *SHAPE))})
    with pytest.raises(CaseError, match="2 region channel"):
        evaluate_case(match_cases(root / "labels", root / "pred")[0], config)
    # probabilities need not sum to 1 over the regions (they are independent Bernoulli variables)
    root = _one_case(tmp_path / "d", probs=np.full((3, *SHAPE), 0.9))
    res = evaluate_case(match_cases(root / "labels", root / "pred")[0], config)
    assert res.row["dice_ET"] == pytest.approx(2 * 18 / (18 + np.prod(SHAPE)), abs=1e-6)


def test_error_auroc_per_region_counts_pairs(cohort, evaluated):
    """error_auroc_<R> against counting (error, correct) pairs by hand (ties 1/2)."""
    _, _, paths, _ = evaluated
    row = _rows(paths["metrics"])["case1"]
    t = _regions(_load(cohort["labels"], "case1", "").astype(int))
    m = np.moveaxis(_load(cohort["pred"], "case1", "_seg"), -1, 0) > 0.5
    pe = np.moveaxis(_load(cohort["pred"], "case1", "_predictive_entropy"), -1, 0)
    for r, name in enumerate(BRATS):
        err = (m[r] != t[r]).ravel()
        u = pe[r].ravel()
        ue, uo = np.sort(u[err]), np.sort(u[~err])
        less = np.searchsorted(uo, ue, side="left")
        ties = np.searchsorted(uo, ue, side="right") - less
        ref = (less + ties / 2).sum() / (err.sum() * (~err).sum())
        assert float(row[f"error_auroc_{name}"]) == pytest.approx(ref, abs=1e-9)


def test_risk_control_uses_the_combined_score(cohort, tmp_path):
    config = EvaluationConfig(regions="brats", spatial=False, target_risk=0.5, risk="1-dice")
    _, summary, paths = run_evaluate(cohort["labels"], cohort["pred"], tmp_path / "e", config)
    rows = _rows(paths["metrics"])
    rc = summary["risk_control"]
    assert rc["method"] == "ltt"
    thr = rc["threshold"]
    scores = {c: float(r["predictive_entropy_fg_mean"]) for c, r in rows.items()}
    if thr is not None:
        assert rc["accepted"] == sorted(c for c, s in scores.items() if s <= thr)
    # the rule for monai-unc triage records the regions and the combined score (tests/evaluation/test_triage_regions.py)
    rule = json.loads(paths["rule"].read_text())
    # format_version 5: the rule records its calibration cases (checked when it is loaded) and their estimates'
    # quantity, region_mean (a region the segmentation does not hold: 1 - max p)
    assert paths["rule"] == tmp_path / "e" / "referral_rule.json" and rule["format_version"] == 5
    assert rule["calibration"]["expected_dice_estimate"] == "region_mean"
    assert rule["regions"] == {k: list(v) for k, v in BRATS.items()}
    assert rule["score"]["column"] == "predictive_entropy_fg_mean"
    assert rule["calibration"]["scores"] == sorted(s for s in scores.values() if math.isfinite(s))


def _relabel(cohort, folder: Path, change) -> Path:
    """A copy of the cohort's labels with ``change(label map, case index)`` applied."""
    folder.mkdir()
    for i, p in enumerate(sorted(cohort["labels"].glob("*.nii.gz"))):
        lab = np.asarray(nib.load(p).dataobj).copy()
        change(lab, i)
        _nii(folder / p.name, lab)
    return folder


def _to_2023(lab: np.ndarray, i: int) -> None:
    lab[lab == 4] = 3  # the BraTS 2023 convention: enhancing tumour = 3


def test_labels_that_no_region_claims_are_refused(cohort, tmp_path, capsys):
    """BraTS 2023 labels (ET = 3) evaluated with 'brats' used to exit 0 with dice_ET = 0; a label 7 was background."""
    labels = _relabel(cohort, tmp_path / "labels23", _to_2023)
    with pytest.raises(ValueError, match=r"label 3 in 3 case\(s\) \(case0, case1, case2\).*did you mean brats2023\?"):
        run_evaluate(labels, cohort["pred"], tmp_path / "a", EvaluationConfig(regions="brats"))
    assert not (tmp_path / "a" / "metrics.csv").exists()
    with pytest.raises(ValueError, match="did you mean brats2023"):
        evaluate_cases(match_cases(labels, cohort["pred"]), EvaluationConfig(regions="brats"))
    out = tmp_path / "b"
    argv = ["evaluate", "-l", str(labels), "-p", str(cohort["pred"]), "-o", str(out), "--regions", "brats", "-q"]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "label 3 in 3 case(s)" in err and "did you mean brats2023?" in err and "--ignore-unclaimed-labels" in err
    assert not (out / "metrics.csv").exists() and not (out / "summary.json").exists()
    # asked for explicitly: label 3 counts as background, one warning; the per-case states of the refused run are
    # reused (the option does not change a case's numbers)
    assert main([*argv, "--ignore-unclaimed-labels"]) == 0
    assert "count as background" in capsys.readouterr().err
    rows = _rows(out / "metrics.csv")
    assert {float(rows[f"case{i}"]["dice_ET"]) for i in range(3)} == {0.0}
    # a label 7 in one case: no named spec claims it
    labels7 = _relabel(cohort, tmp_path / "labels7", lambda lab, i: lab.__setitem__((slice(0, 2),) * 3, 7)
                       if i == 1 else None)
    with pytest.raises(ValueError, match=r"label 7 in 1 case\(s\) \(case1\).*give a region spec that claims"):
        run_evaluate(labels7, cohort["pred"], tmp_path / "c", EvaluationConfig(regions="brats"))
    with pytest.raises(TypeError, match="ignore_unclaimed_labels"):
        EvaluationConfig(regions="brats", ignore_unclaimed_labels="yes").validate()


def test_regions_other_than_the_recorded_ones_are_refused(cohort, tmp_path, capsys):
    """Predictions of 'infer --regions brats' evaluated with 'brats2023' used to exit 0 with dice_ET = 0."""
    pred = tmp_path / "pred"
    shutil.copytree(cohort["pred"], pred)
    (pred / "infer.json").write_text(json.dumps({"settings": {"activation": "sigmoid"}, "multilabel": True,
                                                 "regions": {"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]}}))
    write_infer_case_records(pred)
    labels = _relabel(cohort, tmp_path / "labels23", _to_2023)
    with pytest.raises(ValueError, match=r"--regions: the predictions in .* were made with the regions"):
        run_evaluate(labels, pred, tmp_path / "a", EvaluationConfig(regions="brats2023"))
    capsys.readouterr()
    out = tmp_path / "b"
    assert main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "--regions", "brats2023",
                 "-q"]) == 2
    assert "were made with the regions" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
    with pytest.raises(ValueError, match="no region spec"):  # region-based predictions need the spec
        run_evaluate(cohort["labels"], pred, tmp_path / "c", EvaluationConfig(num_classes=3))
    # the recorded spec under other names (they only name the columns): evaluated
    spec = '{"tc": [1, 4], "wt": [1, 2, 4], "et": [4]}'
    assert main(["evaluate", "-l", str(cohort["labels"]), "-p", str(pred), "-o", str(tmp_path / "d"), "--regions",
                 spec, "--no-spatial", "-q"]) == 0
