"""Hostile review 55: the strata edges of ConformalMasks are numbers, as its conformal_delta is."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.products import ConformalMasks


@pytest.mark.parametrize("edges", [[True], [np.bool_(True)], ["0.5"], [0.2, "0.4"], "0.5"])
def test_strata_edges_refuse_bools_and_text(edges):
    # [True] was the edge 1.0 and ["0.5"] was parsed, where conformal_delta="0.1" is refused
    with pytest.raises(ValueError, match="conformal_strata_edges"):
        ConformalMasks(["outer:fnr=0.1"], strata_edges=edges)


def test_strata_edges_take_python_and_numpy_numbers():
    assert ConformalMasks(["outer:fnr=0.1"], strata_edges=[np.float32(0.5), 2]).strata_edges == [0.5, 2.0]
    assert ConformalMasks(["outer:fnr=0.1"], strata_edges=(0.1,)).num_strata == 2
