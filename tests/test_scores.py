"""The one case-score definition (evaluation/scores.py): brute force, the evaluate row, the in-memory path that
nnunet-predict takes, the former ``_patch`` column name, and old evaluation folders read by the report."""

from __future__ import annotations

import json
import math
import shutil
import warnings

import nibabel as nib
import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import (
    CASE_SCORES,
    PATCH_SIZE,
    CohortState,
    EvaluationConfig,
    case_score_columns,
    case_scores,
    evaluate_case,
    load_evaluation,
    resolve_score_column,
    run_evaluate,
    summarize,
)
from monai_unc.evaluation.config import STATE_DIR
from monai_unc.io import match_cases
from monai_unc.report.html import build_report
from monai_unc.scores import upgrade_row


def bf_box_mean(u, size):
    """Largest mean over every stride-1 box (clipped to the image), by loops."""
    size = tuple(min(s, n) for s, n in zip(size, u.shape))
    best = -np.inf
    for start in np.ndindex(*[n - s + 1 for n, s in zip(u.shape, size)]):
        best = max(best, float(u[tuple(slice(a, a + s) for a, s in zip(start, size))].mean()))
    return best


@pytest.mark.parametrize("shape, size", [((9, 11), 4), ((6, 7, 5), 3), ((6, 7, 5), (2, 9, 1)), ((5, 4), 10)])
def test_case_scores_equal_brute_force(shape, size):
    rng = np.random.default_rng(len(shape))
    u = rng.random(shape).astype(np.float32)
    seg = (rng.random(shape) < 0.3).astype(np.int16) * rng.integers(1, 3, shape)
    got = case_scores(u, seg, patch_size=size)
    assert tuple(got) == CASE_SCORES
    assert got["mean"] == pytest.approx(u.astype(np.float64).mean(), rel=1e-12)
    assert got["fg_mean"] == pytest.approx(u.astype(np.float64)[seg > 0].mean(), rel=1e-12)
    box = size if isinstance(size, tuple) else (size,) * len(shape)
    assert got["patch_mean"] == pytest.approx(bf_box_mean(u.astype(np.float64), box), rel=1e-12)
    assert all(isinstance(v, float) for v in got.values())


def test_case_scores_empty_prediction_and_bad_input():
    u = np.linspace(0, 1, 64).reshape(8, 8)
    with pytest.warns(UserWarning, match="empty mask"):
        got = case_scores(u, np.zeros((8, 8), int))
    assert math.isnan(got["fg_mean"]) and got["mean"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="shape of uncertainty"):
        case_scores(u, np.zeros((8, 7)))
    with pytest.raises(ValueError, match="2D or 3D"):
        case_scores(u[None, None], np.zeros((1, 1, 8, 8)))
    cols = case_score_columns({"a": u, "b": 1 - u}, np.ones((8, 8), int), patch_size=2)
    assert list(cols) == ["a_mean", "a_fg_mean", "a_patch_mean", "b_mean", "b_fg_mean", "b_patch_mean"]
    assert PATCH_SIZE == 10


def test_patch_mean_is_one_score_in_the_columns_and_the_transform():
    """``<m>_patch_mean`` of the score columns and ``AggregateUncertaintyd(method="patch_mean")`` are the same box
    mean; the box sum has its own name, ``patch_sum``, and nothing writes a bare ``<m>_patch`` any more."""
    import torch

    from monai_unc.transforms import AggregateUncertaintyd

    u = np.random.default_rng(7).random((7, 6, 5)).astype(np.float32)
    seg = np.ones(u.shape, int)
    column = case_score_columns({"m": u}, seg, patch_size=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        d = AggregateUncertaintyd("m", method="patch_mean", patch_size=3)({"m": u[None]})
        d = AggregateUncertaintyd("m", method="patch_sum", patch_size=3)(d)
    assert float(d["m_patch_mean"]) == column["m_patch_mean"]
    assert float(d["m_patch_sum"]) == pytest.approx(27 * column["m_patch_mean"], rel=1e-12)
    assert isinstance(d["m_patch_sum"], torch.Tensor)
    assert not any(k.endswith("_patch") for k in [*column, *d])


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("cohort"), n_cases=4, shape=(16, 16, 16))


def test_evaluate_row_equals_the_in_memory_scores(cohort):
    """The same maps give the same scores through ``evaluate`` (maps read from files) and through the in-memory
    call that nnunet-predict makes on the arrays it writes (``case_scores(map, segmentation)``)."""
    config = EvaluationConfig(patch_size=5)
    for files in match_cases(cohort["labels"], cohort["predictions"]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            row = evaluate_case(files, config).row
        seg = np.asarray(nib.load(files.seg).dataobj)
        pe = np.asarray(nib.load(files.maps["predictive_entropy"]).dataobj)
        direct = case_scores(pe, seg, patch_size=5)
        for k, v in direct.items():
            assert row[f"predictive_entropy_{k}"] == v  # bit for bit
        assert "predictive_entropy_patch" not in row


def test_former_patch_column_name(cohort, tmp_path):
    rows = [{"case": "a", "m_mean": 1.0, "m_fg_mean": 2.0, "m_patch": 3.0, "dice_skin_patch": 0.5}]
    up = upgrade_row(rows[0])
    assert list(up) == ["case", "m_mean", "m_fg_mean", "m_patch_mean", "dice_skin_patch"]  # a class name stays
    assert upgrade_row(up) == up
    with pytest.warns(DeprecationWarning, match="'m_patch' is deprecated, use 'm_patch_mean'"):
        assert resolve_score_column("m_patch", up) == "m_patch_mean"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_score_column("m_patch_mean", up) == "m_patch_mean"
        assert resolve_score_column("nope", up) == "nope"
    # evaluate with the former name as the triage score: same triage as the new name, with a DeprecationWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.warns(DeprecationWarning, match="predictive_entropy_patch"):
            state, old_summary, _ = run_evaluate(cohort["labels"], cohort["predictions"], tmp_path / "old",
                                                 EvaluationConfig(score="predictive_entropy_patch"))
        new_summary = summarize(state, EvaluationConfig(score="predictive_entropy_patch_mean"))
    assert old_summary["score"]["column"] == "predictive_entropy_patch_mean"
    assert old_summary["triage"] == new_summary["triage"]
    with pytest.raises(ValueError, match="score column 'nope_patch' not found"):
        summarize(state, EvaluationConfig(score="nope_patch"))


@pytest.mark.slow
def test_report_reads_an_evaluation_written_with_the_former_names(cohort, tmp_path):
    """An evaluation folder from version 0.1.0 (``<m>_patch`` in the state and the summary's config) still loads
    and reports: the rows get the current names, the triage the same order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(cohort["labels"], cohort["predictions"], tmp_path / "ev",
                     EvaluationConfig(score="predictive_entropy_patch_mean"))
    old = tmp_path / "old"
    shutil.copytree(tmp_path / "ev", old)
    rows_path = old / STATE_DIR / "rows.json"
    meta = json.loads(rows_path.read_text())
    meta["rows"] = [{k.replace("_patch_mean", "_patch"): v for k, v in r.items()} for r in meta["rows"]]
    rows_path.write_text(json.dumps(meta))
    summary_path = old / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["config"]["score"] = "predictive_entropy_patch"
    summary["score"]["column"] = "predictive_entropy_patch"
    summary_path.write_text(json.dumps(summary))
    state, _ = load_evaluation(old)
    assert isinstance(state, CohortState)
    assert all("predictive_entropy_patch_mean" in r and "predictive_entropy_patch" not in r for r in state.rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.warns(DeprecationWarning):
            page = build_report(old, n_cases=0).read_text()
        new_page = build_report(tmp_path / "ev", n_cases=0).read_text()
    assert "predictive_entropy_patch_mean" in page
    order = json.loads((tmp_path / "ev" / "summary.json").read_text())["triage"]["order"]
    assert [page.index(f">{c}<") for c in order] == sorted(page.index(f">{c}<") for c in order)
    assert page.count("<tr") == new_page.count("<tr")
    assert page.count(">–<") == new_page.count(">–<")  # the old folder's scores are shown, not missing
