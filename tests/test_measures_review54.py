"""Hostile review 54 of :mod:`monai_unc.measures`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from monai_unc import measures
from monai_unc.measures import mutual_information_from_entropies
from monai_unc.stats import SampleStats


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


def _around_half(dtype: torch.dtype, steps: int = 3000) -> torch.Tensor:
    """0.5 and the ``steps`` representable values on either side of it, ``(1, 1, 2 * steps + 1)``."""
    half = torch.tensor(0.5, dtype=dtype)
    up, down, vals = half, half, [half]
    for _ in range(steps):
        up = torch.nextafter(up, torch.tensor(1.0, dtype=dtype))
        down = torch.nextafter(down, torch.tensor(0.0, dtype=dtype))
        vals += [up, down]
    return torch.stack(vals).reshape(1, 1, -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_binary_entropy_stays_within_its_documented_bound(dtype):
    """Found by hostile testing: float64 probabilities next to 0.5 (0.4999999999999997) gave a binary entropy an ulp
    above log 2 (0.6931471805599454 nats, normalised 1.0000000000000002, outside the documented [0, 1]) where the
    categorical entropy and the streamed statistics cap at the bound."""
    p = _around_half(dtype)
    bound = float(torch.tensor(math.log(2), dtype=dtype))
    assert float(measures.binary_entropy(p).max()) <= bound
    assert float(measures.binary_entropy(p, normalize=True).max()) <= 1.0
    samples = p[None]  # one sample
    assert float(measures.predictive_entropy(samples, multilabel=True).max()) <= bound
    assert float(measures.predictive_entropy(samples, normalize=True, multilabel=True).max()) <= 1.0
    # the same values as the streamed statistics (which cap at log 2), bit for bit in float64
    if dtype == torch.float64:
        streamed = SampleStats(multilabel=True).update(p).measures()["predictive_entropy"]
        assert torch.equal(measures.predictive_entropy(samples, multilabel=True), streamed)
    # values inside the bound are unchanged: the brute-force float64 binary entropy
    q = torch.tensor([[[0.1, 0.3, 0.5, 0.9, 1.0, 0.0]]], dtype=torch.float64)
    ref = [-(x * math.log(x) if x > 0 else 0.0) - ((1 - x) * math.log(1 - x) if x < 1 else 0.0) for x in q.ravel()]
    np.testing.assert_allclose(measures.binary_entropy(q).ravel().numpy(), ref, rtol=1e-15, atol=0)
