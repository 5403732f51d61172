"""The memory of an evaluation's confidence histograms (found by hostile testing), and that its outputs are unchanged.

``evaluate`` kept every case's dense confidence histogram (``24 (C + 2) F`` bytes) twice (the engine's results and the
cohort state) plus the dense sum each case's metrics cached, and ``report`` loaded and stacked the dense tables of
every case: memory grew by ~80-155 MiB per 105-class case. Now cases are packed, per-case metrics read a block of
cases at a time, and ``state/histogram.npz`` is written and read block by block. Every output is the same: the
evaluation through the dense tables at once (``PACKED_CASES = False``, one block of every case, no streamed file:
the previous code path) and through packed cases read one case at a time write the same files and figures.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import matplotlib
import nibabel as nib
import numpy as np
import pytest

from monai_unc import state as state_module
from monai_unc.evaluation import EvaluationConfig, load_evaluation, run_evaluate
from monai_unc.io import save_probabilities
from monai_unc.metrics.calibration import calibration_metrics, reliability_curve
from monai_unc.metrics.calibration import functional as functional_module
from monai_unc.metrics.calibration import histogram as hist_module
from monai_unc.report.html import build_report
from monai_unc.state import ArrayBlocks
from tests._cases import held_bytes

matplotlib.use("Agg")

C = 6


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> Path:
    """Seven 6-class cases of growing confidence, labels mostly the argmax."""
    root = tmp_path_factory.mktemp("multiclass")
    (root / "labels").mkdir()
    (root / "preds").mkdir()
    rng = np.random.default_rng(3)
    affine = np.diag([1.5, 1.0, 2.0, 1.0])
    for k in range(7):
        logits = rng.normal(size=(C, 12, 10, 8)).astype(np.float32) * (1 + k)
        p = np.exp(logits)
        p /= p.sum(0, keepdims=True)
        y = np.where(rng.random(p.shape[1:]) < 0.7, p.argmax(0), rng.integers(0, C, p.shape[1:])).astype(np.uint8)
        nib.save(nib.Nifti1Image(y, affine), root / "labels" / f"case{k:02d}.nii.gz")
        save_probabilities(p, affine, root / "preds" / f"case{k:02d}_probs.nii.gz")
    return root


def _dense(monkeypatch) -> None:
    """The previous code path: dense cases, per-case metrics over every case at once, files read whole."""
    monkeypatch.setattr(hist_module, "PACKED_CASES", False)
    monkeypatch.setattr(functional_module, "_CASE_BLOCK_BYTES", 1 << 40)
    monkeypatch.setattr(ArrayBlocks, "BLOCK_BYTES", 1 << 40)
    monkeypatch.setattr(state_module, "_STREAM_BYTES", 1 << 40)


def _one_case_at_a_time(monkeypatch) -> None:
    """Packed cases, and every block one case: the per-case metrics, the state file's writes and reads."""
    monkeypatch.setattr(hist_module, "PACKED_CASES", True)
    monkeypatch.setattr(functional_module, "_CASE_BLOCK_BYTES", 1)
    monkeypatch.setattr(ArrayBlocks, "BLOCK_BYTES", 1)
    monkeypatch.setattr(state_module, "_STREAM_BYTES", 1)
    monkeypatch.setattr(hist_module, "_LOAD_BLOCK_BYTES", 1)


def _outputs(root: Path, out: Path, n_bins: int, resume: bool) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(root / "labels", root / "preds", out, EvaluationConfig(n_bins=n_bins), resume=resume)
        # no case figures (n_cases=0): they draw each case's files, which neither path changes, and were 60 % of the
        # test's time; the reliability figure compared below is the cohort's, drawn from the saved histogram
        report = build_report(out, viewer=False, n_cases=0)
        state, summary = load_evaluation(out)
    res = {"metrics.csv": (out / "metrics.csv").read_text(),
           "summary.json": json.loads((out / "summary.json").read_text()), "summary": summary,
           "reliability.png": (report.parent / "figures" / "reliability.png").read_bytes()}
    with np.load(out / "state" / "histogram.npz") as z:
        res["histogram.npz"] = {k: z[k] for k in z.files}
    h = state.histogram
    for per_case in (False, True):  # the figure's bars (pooled) and boxes (per case), and every other reading
        for kind in ("all_label", "top", "classwise", "uncertainty"):
            c = reliability_curve(h, kind=kind, n_bins=n_bins, min_bin_count=3, per_case=per_case)
            res[f"curve.{kind}.{per_case}"] = (c.confidence, c.frequency, c.counts, c.weights, c.kept)
        res[f"metrics.{per_case}"] = calibration_metrics(h, n_bins=n_bins, min_bin_count=2, per_case=per_case)
    res["tables"] = (h.counts.numpy(), h.sums.numpy(), h.weighted_counts.numpy(), h.scalars.numpy())
    return res


def _same(a, b, what: str = "") -> None:
    if isinstance(a, dict):
        assert list(a) == list(b), what
        for k in a:
            _same(a[k], b[k], f"{what}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{what}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, what
        if a.dtype.kind == "f":
            a, b = a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)
        assert np.array_equal(a, b), what
    elif isinstance(a, float):
        assert a == b or (a != a and b != b), what
    else:
        assert a == b, what


@pytest.mark.parametrize("n_bins", [15, 7])
def test_packed_evaluation_writes_the_files_of_the_dense_one(cohort, tmp_path, monkeypatch, n_bins):
    """metrics.csv, summary.json, state/histogram.npz, the report's reliability figure and every curve and metric
    read from the saved state: the same bits through packed cases read one at a time (resumed cases too) as through
    the dense tables of every case."""
    _dense(monkeypatch)
    expected = _outputs(cohort, tmp_path / "dense", n_bins, resume=False)
    _one_case_at_a_time(monkeypatch)
    _same(_outputs(cohort, tmp_path / "packed", n_bins, resume=True), expected, "packed")
    _same(_outputs(cohort, tmp_path / "packed", n_bins, resume=True), expected, "resumed")  # cases from state/cases


def test_an_evaluated_case_keeps_its_non_empty_bins(cohort, tmp_path):
    """Found by hostile testing: the cohort state held each case's dense histogram (``24 (C + 2) F`` bytes; 39 MiB for
    105 classes and ``--n-bins 960``), as did the engine's per-case results, and each case's metrics cached a dense
    sum besides: ~80 MiB per 105-class case. With ``F = 15360`` a case of 960 voxels and 6 classes fills a few
    percent of its 8 x 15360 bins; the state holds those, not the dense tables."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state, _, _ = run_evaluate(cohort / "labels", cohort / "preds", tmp_path / "ev",
                                   EvaluationConfig(n_bins=960), resume=False)
        loaded, _ = load_evaluation(tmp_path / "ev")
    dense_case = 24 * (C + 2) * 960 * 16
    for s in (state, loaded):
        n = len(s.rows)
        assert held_bytes(s.histogram) < n * dense_case / 10
        reliability_curve(s.histogram, kind="all_label", n_bins=960, per_case=True)  # the report's boxes
        assert held_bytes(s.histogram) < n * dense_case / 10
