"""The conformal fit's warning on a class or region without true voxels says what each side's rule then is."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule


def _states(side: str) -> list:
    rng = np.random.default_rng(0)
    return [conformal_case_state(rng.random((1, 50)), np.zeros((1, 50), int), activation="sigmoid", side=side,
                                 grid=64) for _ in range(20)]


def test_no_true_voxel_inner_rule_is_the_empty_mask_not_vacuous():
    # the warning said "vacuous (its loss does not depend on lambda)" for the inner side too, whose loss is 1 for every
    # non-empty mask: the rule is the empty mask
    with pytest.warns(UserWarning, match="inner rule keeps \\(nearly\\) no voxel") as record:
        rule = fit_conformal_rule(_states("inner"), 0.1)
    assert not any("does not depend on lambda" in str(w.message) for w in record)
    assert rule.lambda_hat("0") == 1.0 and not rule.apply(np.random.default_rng(1).random((1, 50))).any()


def test_no_true_voxel_outer_rule_is_vacuous():
    with pytest.warns(UserWarning, match="outer rule is vacuous \\(its missed share is 0 whatever lambda\\)"):
        rule = fit_conformal_rule(_states("outer"), 0.1)
    assert rule.lambda_hat("0") == 0.0
