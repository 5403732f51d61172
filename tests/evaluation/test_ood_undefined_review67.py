"""``monai-unc evaluate --shifts`` says why the OoD AUROC is missing (review 67)."""

from __future__ import annotations

import pytest

from monai_unc.evaluation import CohortState, EvaluationConfig, summarize


def _summary(shifts):
    rows = [{"case": f"c{i}", "dice": d, "measure": "predictive_entropy", "predictive_entropy_fg_mean": s,
             "shift": sh} for i, (d, s, sh) in enumerate(zip([0.9, 0.4, 0.7, 0.8], [0.1, 0.5, 0.3, 0.2], shifts))]
    state = CohortState(num_classes=2, n_fine_bins=240, rows=rows)
    return summarize(state, EvaluationConfig(num_classes=2, shifts={r["case"]: r["shift"] for r in rows}))


@pytest.mark.parametrize(("shifts", "counts"), [(["0", "1", "2", "1"], (0, 4)), (["none", "clean", "", "iid"], (4, 0))])
def test_an_undefined_ood_auroc_warns(shifts, counts):
    """Found by review 67: severities 0, 1, 2 as shift labels ("0" is not in-distribution) left ``ood`` without an
    AUROC, and the report's "OoD AUROC –", without a word (the engine handler warns for the same input)."""
    summary = _summary(shifts)
    assert (summary["ood"]["n_iid"], summary["ood"]["n_ood"]) == counts and "auroc" not in summary["ood"]
    assert any(w.startswith(f"cohort: OoD AUROC undefined: {counts[0]} in-distribution and {counts[1]} shifted")
               for w in summary["warnings"]), summary["warnings"]


def test_a_defined_ood_auroc_does_not_warn():
    summary = _summary(["none", "noise", "", "blur"])
    assert summary["ood"]["auroc"] == 0.75
    assert not any("OoD AUROC" in w for w in summary["warnings"])
