"""A rerun of ``monai-unc conformal`` into the same folder with another rule never mixes the outputs of the two rules:
after an outer-and-inner rule, an outer-only rule leaves no ``<case>_inner.nii.gz`` behind (issue 43 item 4)."""

from __future__ import annotations

import warnings

import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.conformal import ConformalRuleFile, run_conformal
from monai_unc.io import load_case, match_cases
from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule


@pytest.mark.slow
def test_rerun_with_another_rule_removes_the_earlier_masks(tmp_path):
    a = write_toy_cohort(tmp_path / "A", n_cases=10, shape=(12, 12, 12), seed=1)
    cases = [load_case(c) for c in match_cases(a["labels"], a["predictions"])]
    rules = {side: fit_conformal_rule([conformal_case_state(c.probs, c.label, activation="softmax", side=side,
                                                            grid=16) for c in cases], 0.3)
             for side in ("outer", "inner")}
    ids = [c.case_id for c in cases]
    both = ConformalRuleFile(rules, {"outer": 0.3, "inner": 0.3}, None, {}, ids)
    outer = ConformalRuleFile({"outer": rules["outer"]}, {"outer": 0.3}, None, {}, ids)
    out = tmp_path / "masks"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_conformal(a["predictions"], both, out)
        assert sorted(p.name for p in out.glob("*_inner.nii.gz")) == [f"{c}_inner.nii.gz" for c in sorted(ids)]
        run_conformal(a["predictions"], outer, out)
    assert not list(out.glob("*_inner.nii.gz"))
    assert sorted(p.name for p in out.glob("*_outer.nii.gz")) == [f"{c}_outer.nii.gz" for c in sorted(ids)]
