"""A margin rule past its grid is the trivial mask (every voxel / none): summary.json's conformal block and the report
say so beside ``lambda_hat`` (hostile review 33: the report called the whole image "the predicted mask dilated by
lambda_hat mm", lambda_hat 20.25 mm)."""

from __future__ import annotations

import warnings

import numpy as np

from monai_unc.evaluation.conformal import fit_conformal_rules
from monai_unc.metrics.conformal import conformal_case_state
from monai_unc.products import ConformalMasks

NVOX = 80


def _states(empty_every: int, side: str) -> dict[str, dict]:
    rng = np.random.default_rng(9)
    x = np.arange(NVOX)
    out = {}
    for i in range(12):
        c, w = rng.uniform(30, 50), rng.uniform(3, 8)
        y = np.abs(x - c) < w
        p = np.full(NVOX, 0.2) if i % empty_every == 0 else np.where(np.abs(x - c) < w, 0.8, 0.2)
        out[f"c{i:02d}"] = {side: conformal_case_state(p[None], y[None], activation="sigmoid", family="margin",
                                                       side=side, grid=(0.5, 0.5))}
    return out


def test_a_trivial_margin_rule_is_marked_in_the_summary_and_the_report():
    product = ConformalMasks({"outer": 0.2}, family="margin")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rules, block = fit_conformal_rules(_states(3, "outer"), product)
    task = block["sides"]["outer"]["per_task"]["0"]
    assert task["lambda_hat"] == 1.0 and task["trivial_mask"] == "every voxel"
    row = ConformalMasks.report_section(block).tables[0].rows[0]
    assert row[-1] == "1.000000 (trivial mask: every voxel)"


def test_a_rule_on_the_grid_is_not_marked():
    product = ConformalMasks({"outer": 0.2}, family="margin")
    rules, block = fit_conformal_rules(_states(100, "outer"), product)  # one empty prediction of 12: on the grid
    task = block["sides"]["outer"]["per_task"]["0"]
    assert "trivial_mask" not in task and "trivial" not in ConformalMasks.report_section(block).tables[0].rows[0][-1]
