"""Hostile review 58 of the evaluation options, the resume state and the tables."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.resume import case_config_fingerprint


@pytest.mark.parametrize("field, value", [("n_bins", np.int64(10)), ("min_bin_count", np.int32(3)),
                                          ("patch_size", np.int64(5)), ("num_classes", np.int64(2)),
                                          ("spatial", np.bool_(False))])
def test_numpy_scalar_options_reach_the_fingerprint_as_python_values(field, value):
    # found by hostile review 58: validate() accepted a numpy integer (or numpy bool for spatial), and every
    # evaluation then failed with "Object of type int64 is not JSON serializable" from the resume fingerprint
    config = EvaluationConfig(**{field: value})
    config.validate()
    got = getattr(config, field)
    assert type(got) is (bool if field == "spatial" else int) and got == value
    assert json.loads(json.dumps(case_config_fingerprint(config)))[field] == got


def test_numpy_integer_seg_label_values_accepted():
    config = EvaluationConfig(seg_label_values=[np.int64(1), np.int64(2), np.int64(4)])
    config.validate()
    assert config.seg_label_values == [1, 2, 4] and all(type(v) is int for v in config.seg_label_values)


def test_evaluation_with_numpy_integer_options_runs(tmp_path):
    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, summary, _ = run_evaluate(data["labels"], data["predictions"], tmp_path / "eval",
                                     EvaluationConfig(n_bins=np.int64(10), spatial=np.bool_(False)))
    assert summary["calibration"]["n_bins"] == 10
