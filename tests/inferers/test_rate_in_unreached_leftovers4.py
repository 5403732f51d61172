"""Rate-In with a target no rate in [p_min, p_max] reaches: a warning naming the bound used, once per layer."""

from __future__ import annotations

import warnings

import pytest
import torch

from monai_unc.inferers import RateInDropout, search_dropout_rate


def _unreached(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if "not reached" in str(w.message)]


def test_search_warns_with_the_bound_and_the_loss_reached():
    torch.manual_seed(0)
    x = torch.randn(3, 16, 6, 6, 6)
    # channel-wise relative MSE equals the rate in expectation: 0.99 is out of reach with p_max = 0.9
    with pytest.warns(UserWarning, match=r"target_loss=0.99 not reached for 3 of 3 input\(s\).*p_max=0.9") as rec:
        res = search_dropout_rate(x, "mse", target_loss=0.99)
    assert torch.all(res.rates == 0.9) and not bool(res.converged.any())
    (msg,) = _unreached(rec.list)
    low, high = float(res.losses.min()), float(res.losses.max())
    assert f"{low:.4g} to {high:.4g}, below the target" in msg


def test_lower_bound_and_reachable_targets():
    torch.manual_seed(1)
    x = torch.randn(2, 16, 6, 6, 6)
    with pytest.warns(UserWarning, match=r"at p_min=0.3 .* above the target"):
        res = search_dropout_rate(x, "mse", target_loss=0.05, p_init=0.5, p_min=0.3)
    assert torch.all(res.rates == 0.3)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        res = search_dropout_rate(x, "mse", target_loss=0.2)
        search_dropout_rate(x, "mse", target_loss=0.2, max_iter=1, p_init=0.6)  # out of iterations, not pinned
    assert bool(((res.rates > 0.0) & (res.rates < 0.9)).all()) and _unreached(rec) == []


def test_layer_warns_once_not_on_every_forward():
    torch.manual_seed(2)
    layer = RateInDropout(p=0.5, target_loss=0.99, loss="mse").train()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for _ in range(4):
            layer(torch.randn(2, 8, 4, 4, 4))
    (msg,) = _unreached(rec)
    assert msg.startswith("RateInDropout (mse): target_loss=0.99 not reached") and "p_max=0.9" in msg
    assert torch.all(layer.rates == 0.9)
