"""The metrics on numpy 1.x, which the package declares (``numpy>=1.24``): numpy 2.0's ``numpy.trapezoid`` was
called directly and the QU-BraTS score and the nDSC retention area failed there with an ``AttributeError`` (found
by testing the declared lower bounds). numpy 1.x is emulated by removing ``numpy.trapezoid``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.metrics import ndsc_retention_area, qu_brats


def _inputs():
    g = torch.Generator().manual_seed(0)
    u = torch.rand(12, 12, 12, generator=g, dtype=torch.float64) * 100
    pred = torch.rand(12, 12, 12, generator=g) > 0.4
    target = torch.rand(12, 12, 12, generator=g) > 0.5
    return u, pred, target


def _scores():
    u, pred, target = _inputs()
    q = qu_brats(u, pred, target)
    return (q.score, q.dice_auc, q.ftp_auc, q.ftn_auc,
            ndsc_retention_area(pred.numpy(), target.numpy(), u.numpy() / 100, n_points=50))


def test_scores_without_numpy_trapezoid_are_the_numpy_2_scores(monkeypatch):
    expected = _scores()
    monkeypatch.delattr(np, "trapezoid", raising=False)  # numpy 1.24 - 1.26
    monkeypatch.delattr(np, "trapz", raising=False)
    assert _scores() == expected


@pytest.mark.skipif(not hasattr(np, "trapezoid"), reason="numpy < 2.0 has no trapezoid to compare with")
@pytest.mark.parametrize("n", [2, 3, 40, 201])
def test_trapezoid_gives_numpy_s_bits(n):
    from monai_unc._utils import trapezoid

    rng = np.random.default_rng(n)
    y = rng.random(n)
    for x in (np.sort(rng.random(n)), np.sort(rng.random(n))[::-1], np.linspace(0, 1, n, dtype=np.float32)):
        assert trapezoid(y, x) == float(np.trapezoid(y, x))
