"""Hostile review 54 of :mod:`monai_unc.scores`."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from monai_unc.scores import case_scores


@pytest.mark.parametrize("shape", [(0, 4), (3, 0, 2)])
def test_an_empty_map_is_named_with_its_own_shape(shape):
    """The error named the internal (1, 1, *spatial) batch, e.g. "empty (shape (1, 1, 0, 4))" for a (0, 4) map."""
    with pytest.raises(ValueError, match=re.escape(f"uncertainty is empty (shape {tuple(shape)})")):
        case_scores(np.ones(shape), np.ones(shape, dtype=int))
    with pytest.raises(ValueError, match="uncertainty is empty"):
        case_scores(torch.ones(shape), torch.ones(shape))
