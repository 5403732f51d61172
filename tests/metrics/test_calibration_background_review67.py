"""Review 67: ``include_background`` of the classwise ECE in ``CalibrationMetric`` and ``CalibrationHandler``.

MONAI's metrics and handlers (``DiceMetric``, the ``MeanDice`` handler) take ``include_background``; the calibration
metric and its handler had none, so the classwise ECE of an evaluator always averaged the background's ECE in. With
``include_background=False`` channel 0 is left out of the per-class values and their mean, checked against a
brute-force numpy computation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.handlers.calibration import CalibrationHandler
from monai_unc.metrics.calibration import CalibrationMetric, ConfidenceHistogram, calibration_metrics

#: a number of bins dividing the histogram's fine grid (2^14): each voxel's coarse bin is floor(p * N_BINS)
N_BINS = 8


def _batches(n_cls: int = 3, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(2):
        probs = torch.softmax(torch.randn(2, n_cls, 6, 7, generator=g) * 2, 1)
        out.append((probs, torch.randint(0, n_cls, (2, 1, 6, 7), generator=g)))
    return out


def _brute_classwise(probs: np.ndarray, labels: np.ndarray, classes: range) -> float:
    """The mean over ``classes`` of the ECE of ``p_c`` against ``[y == c]`` with N_BINS equal-width bins."""
    values = []
    for c in classes:
        p, r = probs[:, c].ravel().astype(np.float64), (labels.ravel() == c).astype(np.float64)
        b = np.minimum((p * N_BINS).astype(int), N_BINS - 1)
        values.append(sum(abs(r[b == k].mean() - p[b == k].mean()) * (b == k).sum()
                          for k in range(N_BINS) if (b == k).any()) / p.size)
    return float(np.mean(values))


def test_the_metric_leaves_the_background_out_of_the_classwise_ece():
    data = _batches()
    probs = torch.cat([p for p, _ in data]).numpy()
    labels = torch.cat([y for _, y in data])[:, 0].numpy()
    pooled = {}
    for include in (True, False):
        metric = CalibrationMetric(metrics=("classwise_ece", "ece"), n_bins=N_BINS, include_background=include)
        for p, y in data:
            metric(y_pred=p, y=y)
        pooled[include] = {k: float(v) for k, v in metric.aggregate().items()}
        expected = _brute_classwise(probs, labels, range(0 if include else 1, 3))
        assert pooled[include]["classwise_ece"] == pytest.approx(expected, abs=1e-9)
        per_case = metric.get_buffer()[:, 0].numpy()  # one value per case, the background left out the same way
        brute = [_brute_classwise(probs[i:i + 1], labels[i:i + 1], range(0 if include else 1, 3)) for i in range(4)]
        assert per_case == pytest.approx(brute, abs=1e-9)
        assert float(metric.aggregate("mean")["classwise_ece"]) == pytest.approx(np.mean(brute), abs=1e-9)
    assert pooled[True]["classwise_ece"] != pooled[False]["classwise_ece"]
    assert pooled[True]["ece"] == pooled[False]["ece"]  # the top-label ECE scores every voxel either way
    with pytest.raises(TypeError, match="include_background"):
        CalibrationMetric(include_background="False")


def test_the_handler_passes_include_background_on():
    from ignite.engine import Engine

    data = _batches(n_cls=3, seed=1)
    engine = Engine(lambda e, b: b)
    CalibrationHandler(metrics=("classwise_ece",), n_bins=N_BINS, include_background=False).attach(engine, "calib")
    engine.run(data)
    probs = torch.cat([p for p, _ in data])
    labels = torch.cat([y for _, y in data])
    expected = _brute_classwise(probs.numpy(), labels[:, 0].numpy(), range(1, 3))
    assert engine.state.metrics["calib_classwise_ece"] == pytest.approx(expected, abs=1e-9)
    hist = ConfidenceHistogram(3).update(probs, labels)
    assert engine.state.metrics["calib_classwise_ece"] == pytest.approx(
        calibration_metrics(hist, "classwise_ece", n_bins=N_BINS, include_background=False)["classwise_ece"],
        abs=1e-13)
