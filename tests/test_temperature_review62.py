"""Hostile review 62: a temperature fit that the step limit stops far from the NLL minimum says so.

The optimiser (Kock et al.: RMSprop, lr 0.05 on ``t``, at most 1000 steps) moves ``t`` by about ``lr`` a step, so a
network that needs ``t`` near 200 (logits 100 times too large) stopped at ``t = 31.6``, whose NLL is 0.8 to 2.5 nats
above scipy's minimum, with only ``converged=False`` to tell: ``fit`` warned about every other fit that is no
minimum (no temperature defined, held at ``min_temperature``) but not this one, and ``calibrate_network`` and
``nnunet-calibrate`` print their own line.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from monai_unc.temperature import TemperatureScaler


def _overconfident_regions(scale: float) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Region logits ``scale`` times the calibrated ones, their masks and scipy's NLL-minimising temperature."""
    optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(13)
    x = rng.normal(size=(1, 400))
    y = (rng.random(x.shape) < 1 / (1 + np.exp(-2 * x))).astype(np.float64)
    z = 2 * x * scale

    def mean_nll(log_b: float) -> float:
        a = z * math.exp(log_b)
        return float(np.mean(np.logaddexp(0, a) - y * a))

    best = optimize.minimize_scalar(mean_nll, bounds=(-12, 6), method="bounded", options={"xatol": 1e-12})
    return torch.from_numpy(z).reshape(1, 1, -1), torch.from_numpy(y).reshape(1, 1, -1), math.exp(-best.x)


def test_a_fit_the_step_limit_stops_far_from_the_minimum_ends_at_the_minimum() -> None:
    # review 64: the NLL fit of one temperature (or one per region) now ends at the minimum (bisection on the sign of
    # its gradient, tests/test_temperature_review64.py); before, it warned and stopped at t = 31.6
    z, y, t_best = _overconfident_regions(100.0)
    assert t_best > 60  # the minimum RMSprop cannot reach in 200 (or 1000) steps from t = 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        scaler = TemperatureScaler(activation="sigmoid", max_steps=200).fit(z, y)
    assert scaler.converged and scaler.defined
    assert float(scaler.temperature) == pytest.approx(t_best, rel=2e-4)


def test_a_vector_fit_stopped_by_the_step_limit_warns() -> None:
    # one temperature per class: RMSprop alone (no bisection), so the step limit stops it with the warning
    z, y, _ = _overconfident_regions(100.0)
    logits = torch.cat([torch.zeros_like(z), z], 1)  # two classes whose logit difference is z
    with pytest.warns(UserWarning, match=r"did not converge in 1000 steps"):
        scaler = TemperatureScaler(mode="vector").fit(logits, y[:, 0].long())
    assert not scaler.converged and scaler.defined


def test_a_converged_fit_stays_silent() -> None:
    z, y, t_best = _overconfident_regions(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        scaler = TemperatureScaler(activation="sigmoid").fit(z, y)
    assert scaler.converged
    assert float(scaler.temperature) == pytest.approx(t_best, rel=1e-4)


def test_softmax_fit_with_a_small_step_limit_warns_and_names_it() -> None:
    g = torch.Generator().manual_seed(0)
    target = torch.randint(0, 3, (1, 64, 1), generator=g)
    noise = 3 * torch.randn(1, 3, 64, 1, generator=g)
    logits = 4.0 * torch.nn.functional.one_hot(target, 3).movedim(-1, 1).double() + noise
    # review 65: an NLL fit (vector ones too) now ends at the minimum after the step limit; the ECE loss does not
    with pytest.warns(UserWarning, match=r"did not converge in 5 steps.*max_steps"):
        scaler = TemperatureScaler(max_steps=5, mode="vector", loss="ece", min_bin_count=1).fit(logits, target)
    assert not scaler.converged and len(scaler.history) == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        scaler = TemperatureScaler(max_steps=5, mode="vector").fit(logits, target)
    assert scaler.converged and len(scaler.history) == 5
