"""Cohort evaluation (``monai-unc evaluate``): case matching, loading checks, per-case rows and cohort summaries.

References are computed independently of the metric modules: Dice and top-label ECE by hand in numpy, OoD AUROC
by counting pairs, the retained Dice of the triage by sorting.
"""

from __future__ import annotations

import csv
import json
import math
import os
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import (
    CohortState,
    EvaluationConfig,
    evaluate_case,
    evaluate_cases,
    fill_undefined_scores,
    load_evaluation,
    read_shifts,
    run_evaluate,
    summarize,
    triage_order,
    unit_scale,
)
from monai_unc.io import (
    CaseError,
    CaseFiles,
    check_label_map,
    check_output_folder,
    list_image_cases,
    load_case,
    match_cases,
    read_probabilities,
    save_probabilities,
    spacing_from_affine,
)

AFFINE = np.diag([1.5, 1.0, 2.0, 1.0])


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> dict[str, Path]:
    return write_toy_cohort(tmp_path_factory.mktemp("cohort"), n_cases=6, shape=(16, 16, 16))


@pytest.fixture(scope="module")
def evaluated(cohort, tmp_path_factory):
    config = EvaluationConfig(shifts=read_shifts(cohort["shifts"]), budget=0.34)
    out = tmp_path_factory.mktemp("eval")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state, summary, paths = run_evaluate(cohort["labels"], cohort["predictions"], out, config,
                                             images=cohort["images"])
    return state, summary, paths, config


def _nii(path: Path, data: np.ndarray, affine: np.ndarray = AFFINE) -> None:
    nib.save(nib.Nifti1Image(data, affine), path)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _ref_dice(a: np.ndarray, b: np.ndarray) -> float:
    den = a.sum() + b.sum()
    return 1.0 if den == 0 else float(2 * np.logical_and(a, b).sum() / den)


def _ref_top_ece(probs: np.ndarray, label: np.ndarray, n_bins: int = 15) -> float:
    """Top-label ECE (Guo et al.) with a Python loop over equal-width bins; probs (C, N), label (N,)."""
    conf = probs.max(axis=0).astype(np.float64)
    correct = probs.argmax(axis=0) == label
    idx = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        sel = idx == b
        if sel.any():
            total += sel.sum() * abs(correct[sel].mean() - conf[sel].mean())
    return total / conf.size


# ------------------------------------------------------------------------------------------------ matching
def test_match_cases_pairs_every_role(cohort):
    cases = match_cases(cohort["labels"], cohort["predictions"], images=cohort["images"])
    assert [c.case_id for c in cases] == [f"toy{i:03d}" for i in range(6)]
    c = cases[0]
    assert c.seg.name == "toy000_seg.nii.gz" and c.probs.name == "toy000_probs.nii.gz"
    assert set(c.maps) == {"predictive_entropy"} and c.image.name == "toy000.nii.gz"
    assert CaseFiles.from_json(c.to_json()) == c


def test_missing_case_is_an_error_listing_it(cohort, tmp_path):
    pred = tmp_path / "pred"
    pred.mkdir()
    for f in cohort["predictions"].iterdir():
        if not f.name.startswith("toy003"):
            (pred / f.name).write_bytes(f.read_bytes())
    with pytest.raises(CaseError, match=r"1 of 6 case\(s\) lack files: 'toy003'.*--allow-missing"):
        match_cases(cohort["labels"], pred)
    with pytest.warns(UserWarning, match=r"1 of 6 labelled case\(s\) skipped .*'toy003'"):
        kept = match_cases(cohort["labels"], pred, allow_missing=True)
    assert [c.case_id for c in kept] == ["toy000", "toy001", "toy002", "toy004", "toy005"]
    # a missing uncertainty map of one case is named as such
    (pred / "toy001_predictive_entropy.nii.gz").unlink()
    with pytest.raises(CaseError, match="toy001.*predictive_entropy map"):
        match_cases(cohort["labels"], pred, allow_missing=False)


def test_no_matching_prediction_and_missing_folders(cohort, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    _nii(other / "zzz_seg.nii.gz", np.zeros((4, 4, 4), np.int16))
    with pytest.raises(CaseError, match="lack files"):
        match_cases(cohort["labels"], other)
    with pytest.raises(FileNotFoundError, match="folder not found"):
        match_cases(tmp_path / "nope", cohort["predictions"])
    with pytest.raises(ValueError, match="layout"):
        match_cases(cohort["labels"], cohort["predictions"], layout="nifti")
    with pytest.raises(CaseError, match="mutual_information"):
        match_cases(cohort["labels"], cohort["predictions"], measures=["mutual_information"])


def test_nnunet_channel_files_are_grouped(tmp_path):
    for cid in ("a", "b"):
        for ch in range(2):
            _nii(tmp_path / f"{cid}_{ch:04d}.nii.gz", np.zeros((4, 4, 4), np.float32))
    cases = list_image_cases(tmp_path)
    assert [(c.case_id, [p.name for p in c.channels]) for c in cases] == [
        ("a", ["a_0000.nii.gz", "a_0001.nii.gz"]), ("b", ["b_0000.nii.gz", "b_0001.nii.gz"])
    ]
    (tmp_path / "b_0001.nii.gz").unlink()
    with pytest.raises(CaseError, match="different numbers of channels"):
        list_image_cases(tmp_path)
    assert len(list_image_cases(tmp_path, channel_suffix="none")) == 3


# ------------------------------------------------------------------------------------------------ loading checks
def _one_case(tmp_path: Path, label: np.ndarray, probs: np.ndarray, prob_affine=AFFINE, seg=None) -> CaseFiles:
    _nii(tmp_path / "c_label.nii.gz", label)
    save_probabilities(probs, prob_affine, tmp_path / "c_probs.nii.gz")
    files = CaseFiles("c", tmp_path / "c_label.nii.gz", probs=tmp_path / "c_probs.nii.gz")
    if seg is not None:
        _nii(tmp_path / "c_seg.nii.gz", seg)
        files.seg = tmp_path / "c_seg.nii.gz"
    return files


def _probs(shape=(6, 5, 4), c=3, seed=0) -> np.ndarray:
    p = np.random.default_rng(seed).random((c, *shape)).astype(np.float32) + 0.05
    return p / p.sum(0, keepdims=True)


def test_geometry_mismatch_names_the_case_and_files(tmp_path):
    label = np.zeros((6, 5, 4), np.int16)
    shifted = AFFINE.copy()
    shifted[0, 3] = 3.0
    msg = r"case 'c': c_probs.nii.gz and the label c_label.nii.gz have different affines"
    with pytest.raises(CaseError, match=msg):
        load_case(_one_case(tmp_path, label, _probs(), prob_affine=shifted))
    with pytest.raises(CaseError, match=r"case 'c': c_probs.nii.gz has spatial shape \(6, 5, 3\)"):
        load_case(_one_case(tmp_path, label, _probs((6, 5, 3))))
    # an affine within the tolerance is accepted
    near = AFFINE.copy()
    near[0, 3] = 1e-4
    assert load_case(_one_case(tmp_path, label, _probs(), prob_affine=near)).probs.shape == (3, 6, 5, 4)


def test_wrong_label_values(tmp_path):
    label = np.zeros((6, 5, 4), np.int16)
    label[0, 0, 0] = 3
    msg = r"case 'c': label c_label.nii.gz: label map holds values \[3\] outside classes 0..2"
    with pytest.raises(CaseError, match=msg):
        load_case(_one_case(tmp_path, label, _probs()))
    frac = np.zeros((6, 5, 4), np.float32)
    frac[1, 1, 1] = 0.5
    with pytest.raises(CaseError, match="must hold integer classes"):
        load_case(_one_case(tmp_path, frac, _probs()))
    seg = np.zeros((6, 5, 4), np.int16)
    seg[2, 2, 2] = -1
    with pytest.raises(CaseError, match=r"segmentation c_seg.nii.gz: label map holds values \[-1\]"):
        load_case(_one_case(tmp_path, np.zeros((6, 5, 4), np.int16), _probs(), seg=seg))
    assert check_label_map(np.array([0.0, 2.0]), "x", 3).dtype == np.int64


def test_bad_probabilities_name_the_file(tmp_path):
    p = _probs()
    p[0] *= 0.5
    with pytest.raises(CaseError, match=r"case 'c': c_probs.nii.gz: probabilities must sum to 1"):
        load_case(_one_case(tmp_path, np.zeros((6, 5, 4), np.int16), p))
    files = _one_case(tmp_path, np.zeros((6, 5, 4), np.int16), _probs())
    with pytest.raises(CaseError, match="has 3 classes, the cohort 2"):
        load_case(files, num_classes=2)
    files.probs = None
    files.seg = files.label
    with pytest.raises(CaseError, match="number of classes is unknown"):
        load_case(files)


def test_nnunet_npz_axes_are_reversed(tmp_path):
    p = _probs((6, 5, 4))
    np.savez_compressed(tmp_path / "c.npz", probabilities=np.ascontiguousarray(p.transpose(0, 3, 2, 1)))
    back, affine = read_probabilities(tmp_path / "c.npz")
    assert affine is None
    np.testing.assert_array_equal(back, p)
    np.savez_compressed(tmp_path / "d.npz", probs=p)
    with pytest.raises(CaseError, match="'probabilities'"):
        read_probabilities(tmp_path / "d.npz")


def test_output_folder_inside_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="lies inside the input folder"):
        check_output_folder(tmp_path / "in" / "out", tmp_path / "in")
    with pytest.raises(ValueError, match="lies inside the input folder"):
        check_output_folder(tmp_path / "in", tmp_path / "in")
    assert check_output_folder(tmp_path / "out", tmp_path / "in", None) == (tmp_path / "out").resolve()


def test_spacing_from_affine():
    a = np.eye(4)
    a[:3, :3] = np.array([[0, 2.0, 0], [1.5, 0, 0], [0, 0, -3.0]])
    assert spacing_from_affine(a) == (1.5, 2.0, 3.0)


# ------------------------------------------------------------------------------------------------ per-case rows
def test_rows_match_independent_references(evaluated, cohort):
    state, summary, paths, config = evaluated
    rows = {r["case"]: r for r in _read_csv(paths["metrics"])}
    assert len(rows) == 6
    for cid, row in rows.items():
        label = nib.load(cohort["labels"] / f"{cid}.nii.gz").get_fdata().astype(int)
        probs = np.moveaxis(nib.load(cohort["predictions"] / f"{cid}_probs.nii.gz").get_fdata(), -1, 0)
        seg = nib.load(cohort["predictions"] / f"{cid}_seg.nii.gz").get_fdata().astype(int)
        pe = nib.load(cohort["predictions"] / f"{cid}_predictive_entropy.nii.gz").get_fdata()
        assert float(row["dice"]) == pytest.approx(_ref_dice(seg == 1, label == 1), abs=1e-6)
        assert float(row["ece"]) == pytest.approx(_ref_top_ece(probs.reshape(2, -1), label.ravel()), abs=1e-6)
        assert float(row["error_rate"]) == pytest.approx(float((seg != label).mean()))
        assert float(row["predictive_entropy_mean"]) == pytest.approx(pe.mean(), rel=1e-5)
        assert float(row["predictive_entropy_fg_mean"]) == pytest.approx(pe[seg > 0].mean(), rel=1e-5)
        assert row["shift"] == ("none" if int(cid[3:]) % 4 < 2 else ("intensity" if int(cid[3:]) % 4 == 2 else "shape"))
        assert row["spacing"] == "1.5x1x2"
        assert float(row["score"] if "score" in row else row["predictive_entropy_fg_mean"]) >= 0


def test_spatial_columns_call_the_metric_functions_on_unit_scale(cohort):
    from monai_unc.metrics.spatial import boundary_aware_ece, spatial_calibration_error

    files = match_cases(cohort["labels"], cohort["predictions"])[2]
    case = load_case(files)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        row = evaluate_case(case, EvaluationConfig()).row
    un = case.maps["predictive_entropy"] / math.log(2)
    assert row["ba_ece"] == pytest.approx(boundary_aware_ece(un, case.seg, case.label, (1.5, 1.0, 2.0)))
    assert row["space"] == pytest.approx(spatial_calibration_error(un, case.seg, case.label, (1.5, 1.0, 2.0)))
    assert 0.0 <= row["buc"] <= 1.0 and 0.5 <= row["error_auroc"] <= 1.0
    row2 = evaluate_case(case, EvaluationConfig(spatial=False)).row
    assert "buc" not in row2 and "error_auroc" in row2


def test_unit_scale():
    u = np.array([0.0, math.log(3)])
    np.testing.assert_allclose(unit_scale(u, "mutual_information", 3), [0.0, 1.0])
    np.testing.assert_array_equal(unit_scale(u, "one_minus_max_prob", 3), u)


def test_maps_are_derived_from_probabilities_when_absent(cohort, tmp_path):
    pred = tmp_path / "pred"
    pred.mkdir()
    for f in cohort["predictions"].glob("*_probs.nii.gz"):
        (pred / f.name).write_bytes(f.read_bytes())
    cases = match_cases(cohort["labels"], pred)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        row = evaluate_case(cases[0], EvaluationConfig()).row
    pe = nib.load(cohort["predictions"] / "toy000_predictive_entropy.nii.gz").get_fdata()
    assert row["measure"] == "predictive_entropy"
    assert row["predictive_entropy_mean"] == pytest.approx(pe.mean(), rel=1e-5)
    assert "one_minus_max_prob_patch_mean" in row


# ------------------------------------------------------------------------------------------------ cohort
def test_pooled_calibration_is_from_merged_histograms_not_a_mean(evaluated, cohort):
    state, summary, paths, config = evaluated
    probs, labels = [], []
    for r in state.sorted_rows():
        cid = r["case"]
        labels.append(nib.load(cohort["labels"] / f"{cid}.nii.gz").get_fdata().astype(int).ravel())
        probs.append(np.moveaxis(nib.load(cohort["predictions"] / f"{cid}_probs.nii.gz").get_fdata(), -1, 0)
                     .reshape(2, -1))
    pooled_ref = _ref_top_ece(np.concatenate(probs, axis=1), np.concatenate(labels))
    assert summary["calibration"]["ece"] == pytest.approx(pooled_ref, abs=1e-6)
    mean_of_cases = np.mean([float(r["ece"]) for r in _read_csv(paths["metrics"])])
    assert abs(summary["calibration"]["ece"] - mean_of_cases) > 1e-3  # the two differ on this cohort
    assert summary["calibration"]["voxels"] == 6 * 16**3


def test_summary_against_brute_force(evaluated):
    state, summary, paths, config = evaluated
    rows = _read_csv(paths["metrics"])
    ids = [r["case"] for r in rows]
    score = np.array([float(r["predictive_entropy_fg_mean"]) for r in rows])
    dice = np.array([float(r["dice"]) for r in rows])
    assert summary["score"]["column"] == "predictive_entropy_fg_mean"
    order = sorted(range(6), key=lambda i: -score[i])
    assert summary["triage"]["order"] == [ids[i] for i in order]
    n_ref = math.ceil(0.34 * 6)
    assert summary["triage"]["n_referred"] == n_ref == 3
    assert summary["triage"]["dice_retained"] == pytest.approx(dice[order[n_ref:]].mean())
    assert summary["referral"]["dice"][0] == pytest.approx(dice.mean())
    shifted = np.array([r["shift"] != "none" for r in rows])
    pairs = [(a, b) for a in score[shifted] for b in score[~shifted]]
    auroc = np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs])
    assert summary["ood"]["auroc"] == pytest.approx(auroc)
    assert set(summary["ood"]["per_shift"]) == {"intensity", "shape"}
    assert summary["failures"]["cases"] == [c for c, d in zip(ids, dice) if d < 0.8]
    # risk 1 - Dice: AURC lies between the oracle's and the worst ranking's
    assert summary["failure_detection"]["eaurc"] >= -1e-12
    assert summary["failure_detection"]["aurc"] == pytest.approx(
        summary["failure_detection"]["eaurc"] + _oracle_aurc(1 - dice))
    saved = json.loads(paths["summary"].read_text())
    assert saved["triage"] == summary["triage"] and saved["config"]["budget"] == 0.34


def test_summary_records_what_made_it(evaluated, cohort):
    import monai
    import torch

    import monai_unc

    saved = json.loads(evaluated[2]["summary"].read_text())
    assert saved["monai_unc_version"] == monai_unc.__version__
    assert saved["library_versions"] == {"monai": monai.__version__, "torch": torch.__version__}
    assert saved["inputs"] == {"labels": os.path.abspath(cohort["labels"]),
                               "predictions": os.path.abspath(cohort["predictions"]), "uncertainty": None,
                               "images": os.path.abspath(cohort["images"]), "layout": "monai-unc"}


def _oracle_aurc(risk: np.ndarray) -> float:
    """Trapezoid AURC of the ranking by ascending risk, every case its own point (brute force)."""
    r = np.sort(risk)
    n = r.size
    cov = [k / n for k in range(n, 0, -1)] + [0.0]
    sel = [r[:k].mean() for k in range(n, 0, -1)]
    sel.append(sel[-1])
    return float(sum((cov[i] - cov[i + 1]) * (sel[i] + sel[i + 1]) / 2 for i in range(n)))


def test_state_round_trip(evaluated, tmp_path):
    state, summary, paths, config = evaluated
    loaded, saved = load_evaluation(paths["summary"].parent)
    assert loaded.sorted_rows() == json.loads(json.dumps(state.sorted_rows()))
    assert loaded.histogram.case_ids == state.histogram.case_ids
    np.testing.assert_array_equal(loaded.histogram.counts.numpy(), state.histogram.counts.numpy())
    again = summarize(loaded, config)
    assert again["calibration"] == summary["calibration"] and again["triage"] == summary["triage"]
    with pytest.raises(FileNotFoundError, match="monai-unc evaluate"):
        load_evaluation(tmp_path)


@pytest.fixture(scope="module")
def case_results(cohort):
    cases = match_cases(cohort["labels"], cohort["predictions"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return [(evaluate_case(c, EvaluationConfig()), c) for c in cases]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(assignment=st.lists(st.integers(0, 2), min_size=6, max_size=6))
def test_merged_shards_equal_the_whole_cohort(case_results, assignment):
    """Property: evaluating shards separately and merging gives the summary of the whole cohort."""
    config = EvaluationConfig()
    whole = CohortState(2, config.n_fine_bins)
    for res, files in case_results:
        whole.add(res, files)
    shards = [CohortState(2, config.n_fine_bins) for _ in range(3)]
    for (res, files), k in zip(case_results, assignment):
        shards[k].add(res, files)
    merged = CohortState(2, config.n_fine_bins)
    for s in shards:
        merged.merge(s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        a, b = summarize(whole, config), summarize(merged, config)
    for key in ("calibration", "triage", "referral", "failure_detection", "dice", "reliability"):
        _assert_close(a[key], b[key])  # float64 sums in another case order: equal up to rounding


def _assert_close(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_close(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_close(x, y)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15)
    else:
        assert a == b


def test_merge_refuses_overlaps_and_layouts(case_results):
    res, files = case_results[0]
    s1 = CohortState(2, 240).add(res, files)
    s2 = CohortState(2, 240).add(res, files)
    with pytest.raises(ValueError, match="shards must be disjoint"):
        s1.merge(s2)
    with pytest.raises(ValueError, match="already in the cohort state"):
        s1.add(res, files)
    with pytest.raises(ValueError, match="cannot merge"):
        s1.merge(CohortState(3, 240))


def test_undefined_scores_are_referred_first(tmp_path):
    """A case with an empty predicted foreground has no fg_mean score: it is ranked as most uncertain."""
    paths = write_toy_cohort(tmp_path / "c", n_cases=3, shape=(12, 12, 12), predictions=True)
    pred = paths["predictions"]
    p = np.zeros((12, 12, 12, 2), np.float32)
    p[..., 0] = 1.0
    save_probabilities(np.moveaxis(p, -1, 0), AFFINE, pred / "toy001_probs.nii.gz")
    _nii(pred / "toy001_seg.nii.gz", np.zeros((12, 12, 12), np.int16))
    _nii(pred / "toy001_predictive_entropy.nii.gz", np.zeros((12, 12, 12), np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # per-case warnings are collected, not raised
        state, summary, _ = run_evaluate(paths["labels"], pred, tmp_path / "e", EvaluationConfig(budget=0.3))
    assert summary["score"]["undefined"] == ["toy001"]
    assert summary["triage"]["referred"] == ["toy001"]
    assert any(w.startswith("toy001: aggregate(method='mean')") and "empty mask" in w for w in summary["warnings"])
    np.testing.assert_array_equal(fill_undefined_scores(np.array([0.2, np.nan, 0.5])), [0.2, 1.5, 0.5])
    assert triage_order(["b", "a", "c"], np.array([0.1, 0.1, np.nan])) == [2, 1, 0]


def test_config_and_shift_table_errors(cohort, tmp_path):
    with pytest.raises(ValueError, match="budget"):
        EvaluationConfig(budget=1.0).validate()
    with pytest.raises(ValueError, match="measure"):
        EvaluationConfig(measure="entropy").validate()
    bad = tmp_path / "s.csv"
    bad.write_text("id,label\na,none\n")
    with pytest.raises(ValueError, match="columns 'case' and 'shift'"):
        read_shifts(bad)
    with pytest.raises(CaseError, match="no row for case"):
        run_evaluate(cohort["labels"], cohort["predictions"], tmp_path / "e", EvaluationConfig(shifts={"toy000": "x"}))
    with pytest.raises(ValueError, match="score column 'nope' not found"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            state = evaluate_cases(match_cases(cohort["labels"], cohort["predictions"])[:2], EvaluationConfig())
            summarize(state, EvaluationConfig(score="nope"))


def test_nnunet_layout_gives_the_same_rows(cohort, tmp_path):
    """nnU-Net writes <case>.nii.gz, <case>.npz (C, z, y, x) and uncertainty/<case>_<measure>.nii.gz."""
    pred = tmp_path / "nnunet"
    (pred / "uncertainty").mkdir(parents=True)
    for cid in ("toy000", "toy001"):
        src = cohort["predictions"]
        (pred / f"{cid}.nii.gz").write_bytes((src / f"{cid}_seg.nii.gz").read_bytes())
        p = np.moveaxis(nib.load(src / f"{cid}_probs.nii.gz").get_fdata(), -1, 0).astype(np.float32)
        np.savez_compressed(pred / f"{cid}.npz", probabilities=np.ascontiguousarray(p.transpose(0, 3, 2, 1)))
        (pred / "uncertainty" / f"{cid}_predictive_entropy.nii.gz").write_bytes(
            (src / f"{cid}_predictive_entropy.nii.gz").read_bytes())
    (pred / "plans.json").write_text("{}")
    labels = tmp_path / "labels"
    labels.mkdir()
    for cid in ("toy000", "toy001"):
        (labels / f"{cid}.nii.gz").write_bytes((cohort["labels"] / f"{cid}.nii.gz").read_bytes())
    config = EvaluationConfig()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        a = evaluate_cases(match_cases(labels, pred, layout="nnunet"), config).sorted_rows()
        b = evaluate_cases(match_cases(labels, cohort["predictions"], allow_missing_labels=True), config).sorted_rows()
    for ra, rb in zip(a, b):
        for k in ("dice", "ece", "nll", "buc", "predictive_entropy_fg_mean"):
            assert ra[k] == pytest.approx(rb[k], rel=1e-6), k
