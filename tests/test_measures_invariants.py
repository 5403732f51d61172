"""Invariants of the entropy measures that must hold to the last bit: ``H <= log C`` (``<= 1`` normalised) for
every path that returns an entropy (found by invariant testing: the entropy of a uniform float32 prediction over 6, 7,
12, ... classes came out an ulp above, normalised 1.0000002, and the package's own [0, 1] checks refused it)."""

from __future__ import annotations

import math

import pytest
import torch

from monai_unc.measures import entropy, expected_entropy, predictive_entropy
from monai_unc.stats import SampleStats

# class counts whose uniform float32 prediction rounded above log C before the fix
CLASSES = (6, 7, 12, 15, 21, 30)


def _cap(n: int, dtype: torch.dtype) -> float:
    return float(torch.tensor(math.log(n), dtype=dtype))


@pytest.mark.parametrize("n", CLASSES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_entropy_of_uniform_prediction_stays_within_log_c(n, dtype):
    q = torch.full((1, n, 2, 3), 1.0 / n, dtype=dtype)
    assert float(entropy(q, normalize=True).max()) <= 1.0
    assert float(entropy(q).max()) <= _cap(n, dtype)
    samples = q.unsqueeze(0).expand(3, -1, -1, -1, -1)
    for fn in (predictive_entropy, expected_entropy):
        assert float(fn(samples, normalize=True).max()) <= 1.0, fn.__name__
        assert float(fn(samples).max()) <= _cap(n, dtype), fn.__name__


@pytest.mark.parametrize("n", CLASSES)
def test_sample_stats_entropies_stay_within_log_c_and_mi_is_zero(n):
    q = torch.full((2, n, 2, 3), 1.0 / n)
    stats = SampleStats()
    for _ in range(3):
        stats.update(q)
    keys = ["predictive_entropy", "expected_entropy", "mutual_information"]
    normed = stats.measures(keys, normalize=True)
    assert float(normed["predictive_entropy"].max()) <= 1.0
    assert float(normed["expected_entropy"].max()) <= 1.0
    raw = stats.measures(keys)
    assert float(raw["predictive_entropy"].max()) <= _cap(n, torch.float32)
    assert float(raw["expected_entropy"].max()) <= _cap(n, torch.float32)
    # identical samples: PE equal to EE bit for bit, MI exactly 0
    assert torch.equal(raw["predictive_entropy"], raw["expected_entropy"])
    assert float(raw["mutual_information"].abs().max()) == 0.0
