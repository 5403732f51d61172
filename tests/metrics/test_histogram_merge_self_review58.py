"""Hostile review 58: a confidence histogram merged into itself."""

from __future__ import annotations

import copy
import signal

import numpy as np
import pytest
import torch

from monai_unc.metrics.calibration import ConfidenceHistogram
from monai_unc.state import StateGroup


def _hist(per_case: bool, named: bool, weighted: bool) -> ConfidenceHistogram:
    rng = np.random.default_rng(0)
    h = ConfidenceHistogram(3, n_fine_bins=20, per_case=per_case, uncertainty=True)
    for i in range(2):
        p = rng.dirichlet([1, 1, 1], size=(1, 30)).transpose(0, 2, 1)
        y = rng.integers(0, 3, (1, 30))
        h.update(p, y, weights=rng.random((1, 30)) if weighted else None, case_ids=[f"c{i}"] if named else None)
    return h


def _within(seconds: int):
    def stop(signum, frame):
        raise TimeoutError(f"did not return within {seconds} s")

    signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)


@pytest.mark.parametrize("per_case,named,weighted", [(True, False, False), (True, True, True), (False, False, True)])
def test_a_histogram_merged_into_itself_equals_merging_a_copy(per_case, named, weighted):
    """Found by hostile testing: ``h.merge(h)`` walked the list of cases it appended to and never returned (memory
    growing without end). Now it adds the cases ``h`` held, as merging a copy of ``h`` does."""
    h = _hist(per_case, named, weighted)
    ref = copy.deepcopy(h).merge(copy.deepcopy(h))
    _within(20)
    try:
        assert h.merge(h) is h
    finally:
        signal.alarm(0)
    assert h.case_ids == ref.case_ids
    for name in ("counts", "sums", "scalars"):
        assert torch.equal(getattr(h, name), getattr(ref, name)), name
    if weighted:
        assert torch.equal(h.weighted_counts, ref.weighted_counts)


def test_a_state_group_merged_into_itself_doubles_its_histograms():
    g = StateGroup({"WT": _hist(True, False, False)})
    _within(20)
    try:
        g.merge(g)
    finally:
        signal.alarm(0)
    assert len(g["WT"]) == 4 and int(g["WT"].scalars[:, 0].sum()) == 120
