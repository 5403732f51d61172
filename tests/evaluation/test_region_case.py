"""``monai_unc.evaluation.region_case``: one region-based case, the same row as ``evaluate_case``.

The module is the region entry of the case evaluation (its formulas live in ``evaluation.rows``); the row of a
region case is checked here against the class-free brute force of its region masks: the Dice of each region and the
combined case score (the mean over the regions where the region score is defined).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from monai_unc.evaluation import EvaluationConfig
from monai_unc.evaluation import region_case as module
from monai_unc.evaluation.case import evaluate_case
from monai_unc.evaluation.rows import predicted_regions
from monai_unc.io import load_case, match_cases
from monai_unc.regions import label_to_regions
from tests._cases import BRATS_REGIONS, write_brats_like_cohort


def _config() -> EvaluationConfig:
    config = EvaluationConfig(regions=BRATS_REGIONS, spatial=False)
    config.validate()
    return config


def test_a_region_case_is_the_case_evaluation_with_one_task_per_region(tmp_path):
    dirs = write_brats_like_cohort(tmp_path)
    config = _config()
    for files in match_cases(dirs["labels"], dirs["predictions"]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            ours, direct = module.evaluate_region_case(files, config), evaluate_case(files, config)
        assert ours.row.keys() == direct.row.keys()
        for key, value in ours.row.items():
            other = direct.row[key]
            assert value == other or (isinstance(value, float) and math.isnan(value) and math.isnan(other)), key
        case = load_case(files, 3, multilabel=True)
        pred = predicted_regions(case, config.regions)
        true = label_to_regions(case.label, config.regions)
        for r, name in enumerate(config.region_names):  # Dice of the region masks, 1 when both are empty
            p, t = pred[r].astype(bool), true[r].astype(bool)
            expected = 1.0 if not p.any() and not t.any() else 2 * (p & t).sum() / (p.sum() + t.sum())
            assert math.isclose(ours.row[f"dice_{name}"], expected, rel_tol=1e-6)  # float32 counts
        assert math.isclose(ours.row["dice"], float(np.mean([ours.row[f"dice_{n}"] for n in config.region_names])))


def test_the_combined_score_is_the_mean_over_the_defined_regions():
    rng = np.random.default_rng(0)
    for _ in range(20):  # brute force: the plain mean of the finite values
        values = rng.random(4).tolist()
        for i in rng.choice(4, size=int(rng.integers(0, 4)), replace=False):
            values[i] = float(rng.choice([np.nan, np.inf, -np.inf]))
        finite = [v for v in values if math.isfinite(v)]
        assert math.isclose(module.combined_score(values), sum(finite) / len(finite), rel_tol=1e-12)
    assert math.isnan(module.combined_score([float("nan"), float("inf")]))


def test_the_module_re_exports_the_region_pieces_of_the_rows():
    from monai_unc.evaluation import rows

    for name in ("QU_BRATS_COLUMNS", "combined_score", "predicted_regions", "region_score_columns"):
        assert getattr(module, name) is getattr(rows, name)
