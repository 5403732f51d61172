"""Hostile review 58: pooling states into an empty group must not change the states pooled."""

from __future__ import annotations

import numpy as np

from monai_unc.evaluation.conformal import ConformalState
from monai_unc.metrics.calibration import ConfidenceHistogram
from monai_unc.metrics.conformal import conformal_case_state
from monai_unc.state import StateGroup


def _hist(p: float) -> ConfidenceHistogram:
    return ConfidenceHistogram(2).update(np.array([[[1 - p], [p]]]), np.array([[1]]))


def test_pooling_into_an_empty_group_leaves_the_first_case_as_it_was():
    """Found by hostile testing: a name only in ``other`` was added as the same object, so the next merge into the
    pool added the second case's voxels into the first case's histogram (1 voxel became 2)."""
    a, b = StateGroup({"WT": _hist(0.9)}), StateGroup({"WT": _hist(0.6), "TC": _hist(0.7)})
    pool = StateGroup().merge(a).merge(b)
    assert int(a["WT"].scalars[:, 0].sum()) == 1 and int(b["WT"].scalars[:, 0].sum()) == 1
    assert int(pool["WT"].scalars[:, 0].sum()) == 2 and list(pool) == ["WT", "TC"]
    pool.merge(StateGroup({"TC": _hist(0.2)}))
    assert int(b["TC"].scalars[:, 0].sum()) == 1 and int(pool["TC"].scalars[:, 0].sum()) == 2


def test_pooling_conformal_case_states_leaves_each_case_as_it_was():
    """The masks product's per-case state pooled into an empty one: the first case's true voxels doubled (16 -> 32)."""
    probs = np.stack([np.full((4, 4), 0.3), np.full((4, 4), 0.7)])
    a, b = (ConformalState({"outer": conformal_case_state(probs, np.ones((4, 4), int), side="outer")})
            for _ in range(2))
    pool = ConformalState({}).merge(a).merge(b)
    assert int(a.sides["outer"].n_true.sum()) == 16 and int(b.sides["outer"].n_true.sum()) == 16
    assert int(pool.sides["outer"].n_true.sum()) == 32
