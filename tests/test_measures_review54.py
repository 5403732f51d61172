"""Hostile review 54 of :mod:`monai_unc.measures`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.measures import mutual_information_from_entropies


def test_negative_window_disagreement_is_refused():
    """A negative WD gave an MI above PE - EE (pe 0.5, ee 0.2, WD -1: MI 1.3 nats, above PE itself)."""
    with pytest.raises(ValueError, match="window_disagreement must be non-negative"):
        mutual_information_from_entropies(torch.tensor([0.5]), torch.tensor([0.2]), torch.tensor([-1.0]))


def test_consistent_window_disagreement_still_gives_the_remainder():
    pe, ee, wd = np.array([0.5, 0.3, 0.7]), np.array([0.2, 0.1, 0.3]), np.array([0.1, 0.2, 0.0])
    out = mutual_information_from_entropies(pe, ee, wd)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, [0.2, 0.0, 0.4], atol=1e-15)
    # a zero WD is valid; validate=False keeps the unchecked path
    assert float(mutual_information_from_entropies(torch.tensor([0.5]), torch.tensor([0.2]), torch.tensor([0.0]))) \
        == pytest.approx(0.3)
    assert float(mutual_information_from_entropies(torch.tensor([0.5]), torch.tensor([0.2]), torch.tensor([-1.0]),
                                                   validate=False)) == pytest.approx(1.3)
