"""Hostile review 54 of ``monai-unc triage``'s runner (monai_unc.evaluation.triage.runner)."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import ReferralRule, find_prediction_cases, run_triage


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("toy") / "A", n_cases=2, shape=(8, 8, 8), seed=1)


def _rule() -> ReferralRule:
    scores = tuple(float(v) for v in np.linspace(0.01, 0.9, 12))
    return ReferralRule("predictive_entropy_fg_mean", float("inf"), True, 0.5, 0.2, "sgr", "failure", 0.8, scores,
                        tuple(f"c{i}" for i in range(12)), num_classes=2, map_source="probabilities")


@pytest.mark.parametrize("cases", ["toy000", Path("toy000"), b"toy000"])
def test_one_case_id_alone_is_refused_naming_cases(cohort, tmp_path, cases):
    """``cases="toy000"`` was read one character at a time ("9 case(s) have no prediction ..., e.g. ['0', '_', 'b',
    ...]"; a one-letter id passed by chance) and a ``Path`` failed with ``'PosixPath' object is not iterable``."""
    with pytest.raises(TypeError, match="cases must be a list of case ids"):
        find_prediction_cases(cohort["predictions"], _rule(), cases=cases)
    with pytest.raises(TypeError, match="cases must be a list of case ids"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_triage(cohort["predictions"], _rule(), tmp_path / "out", cases=cases)
    assert [f.case_id for f in find_prediction_cases(cohort["predictions"], _rule(), cases=["toy000"])] == ["toy000"]
    assert [f.case_id for f in find_prediction_cases(cohort["predictions"], dataclasses.replace(_rule()),
                                                     cases=("toy001",))] == ["toy001"]


@pytest.mark.parametrize("flag", ["no", "false", 0.0, None])
def test_allow_mismatch_must_be_a_bool(cohort, tmp_path, flag):
    """``allow_mismatch="no"`` (any truthy value) triaged predictions made otherwise than the rule's calibration
    predictions, whose guarantee then does not hold for them."""
    rule = dataclasses.replace(_rule(), fingerprint={"producer": "monai-unc infer", "num_samples": 8})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(TypeError, match="allow_mismatch must be True or False"):
            run_triage(cohort["predictions"], rule, tmp_path / "out", allow_mismatch=flag)
        with pytest.raises(ValueError, match="not made like the rule"):  # the premise: these predictions are a mismatch
            run_triage(cohort["predictions"], rule, tmp_path / "out", allow_mismatch=False)
