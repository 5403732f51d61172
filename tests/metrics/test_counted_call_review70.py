"""A metric call whose warning is made an error does not count its batch (review 70).

Found by review 70: the MONAI metric adapters held their warnings around MONAI's whole
``CumulativeIterationMetric.__call__``, which extends the buffer before it returns, so that under
``warnings.simplefilter("error")`` (or ``-W error::UserWarning``) a call on degenerate input raised with its batch
already buffered (and, for ``CalibrationMetric``, in the pooled histogram): a retry counted it twice. Earlier versions
raised inside the evaluation, before the buffer was touched; :func:`monai_unc.metrics.cumulative.counted_call` says
the warnings first and extends the buffer after.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from monai.metrics import CumulativeIterationMetric

from monai_unc.metrics import (
    BoundaryAwareECEMetric,
    CalibrationMetric,
    NCCMetric,
    QUBraTSMetric,
)
from monai_unc.metrics.cumulative import counted_call


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).random(shape))


def _calibration():
    probs = torch.softmax(torch.from_numpy(np.random.default_rng(1).normal(size=(2, 3, 4, 4, 4))).float(), dim=1)
    labels = probs.argmax(1, keepdim=True)
    one_hot = torch.nn.functional.one_hot(labels[:, 0], 3).permute(0, 4, 1, 2, 3).float()  # discretised: warns
    metric = CalibrationMetric(num_classes=3, metrics=("ece", "nll"), n_bins=5, n_fine_bins=100)
    return metric, {"y_pred": probs, "y": labels}, {"y_pred": one_hot, "y": labels}


def _ncc():
    good = {"y_pred": _rand(2, 1, 4, 4, 4), "y": _rand(2, 1, 4, 4, 4, seed=1)}
    return NCCMetric(), good, dict(good, y_pred=torch.ones(2, 1, 4, 4, 4))  # constant map: NCC undefined, warns


def _qu_brats():
    label = np.zeros((2, 1, 6, 6, 6), dtype=np.int64)
    label[..., 1:5, 1:5, 1:5] = 2
    label[..., 2:4, 2:4, 2:4] = 4
    y = torch.from_numpy(label)
    unit = _rand(2, 3, 6, 6, 6)  # on [0, 1]: ungraded on the challenge's [0, 100] scale, warns
    good = {"y_pred": y, "y": y, "uncertainty": 100 * unit}
    return QUBraTSMetric(regions="brats", reduction="mean"), good, dict(good, uncertainty=unit)


def _spatial(cls):
    def make():
        y = torch.zeros(2, 1, 6, 6, 6)
        y[..., 1:5, 1:5, 1:5] = 1
        good = {"y_pred": y, "y": y, "uncertainty": _rand(2, 1, 6, 6, 6)}
        return cls(), good, dict(good, uncertainty=5 * good["uncertainty"])  # above 1: warns

    return make


ADAPTERS = {
    "CalibrationMetric": _calibration,
    "NCCMetric": _ncc,
    "QUBraTSMetric": _qu_brats,
    "BoundaryAwareECEMetric": _spatial(BoundaryAwareECEMetric),
}


def _decollated(batch: dict[str, torch.Tensor]) -> dict[str, list[torch.Tensor]]:
    return {k: list(v) for k, v in batch.items()}


def _aggregate(metric) -> dict[str, torch.Tensor]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NaN cases of the degenerate input are not what is compared
        out = metric.aggregate()
    return out if isinstance(out, dict) else {"value": out}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].nan_to_num(-1.0), b[k].nan_to_num(-1.0)) for k in a)


@pytest.mark.parametrize("form", ["batch", "decollated"])
@pytest.mark.parametrize("name", list(ADAPTERS))
def test_a_call_whose_warning_is_an_error_counts_nothing(name, form):
    metric, good, bad = ADAPTERS[name]()
    if form == "decollated":
        good, bad = _decollated(good), _decollated(bad)
    metric(**good)
    rows, before = len(metric.get_buffer()), _aggregate(metric)
    assert rows == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a user who makes warnings errors (-W error::UserWarning)
        with pytest.raises(UserWarning):
            metric(**bad)
    assert len(metric.get_buffer()) == rows  # the refused batch is not buffered
    assert _same(_aggregate(metric), before)  # nor pooled (CalibrationMetric's histogram)
    metric(**good)  # the retry counts once
    assert len(metric.get_buffer()) == 2 * rows
    assert _same(_aggregate(metric), before)  # the same cases twice: the same values


def test_bad_call_still_counts_when_its_warning_is_only_said():
    metric, good, bad = _qu_brats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metric(**bad)
    assert len(caught) == 1 and len(metric.get_buffer()) == 2


def test_calibration_layout_mismatch_is_refused_before_the_warnings_and_counts_nothing():
    metric = CalibrationMetric(metrics=("ece", "nll"), n_bins=5, n_fine_bins=100)  # classes from the first batch
    probs = torch.softmax(torch.from_numpy(np.random.default_rng(0).normal(size=(1, 3, 4, 4, 4))).float(), dim=1)
    metric(y_pred=probs, y=probs.argmax(1, keepdim=True))
    before = _aggregate(metric)
    one_hot4 = torch.zeros(1, 4, 4, 4, 4)
    one_hot4[:, 0] = 1  # four classes, discretised: the layout error comes, not the warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="different layouts"):
            metric(y_pred=one_hot4, y=torch.zeros(1, 1, 4, 4, 4, dtype=torch.int64))
    assert caught == []
    assert len(metric.get_buffer()) == 1 and _same(_aggregate(metric), before)


def test_counted_call_buffers_as_monais_call():
    y_pred, y = _rand(2, 1, 4, 4, 4), _rand(2, 1, 4, 4, 4, seed=1)
    ours, monais = NCCMetric(get_not_nans=True), NCCMetric(get_not_nans=True)
    out = counted_call(ours, list(y_pred), list(y))
    ref = CumulativeIterationMetric.__call__(monais, y_pred=list(y_pred), y=list(y))
    assert torch.equal(out, ref) and torch.equal(ours.get_buffer(), monais.get_buffer())
    for a, b in zip(ours.aggregate(), monais.aggregate()):
        assert torch.equal(a, b)
    assert not torch.equal(out, torch.zeros_like(out))


def test_counted_call_refuses_bad_arguments():
    with pytest.raises(TypeError, match="metric"):
        counted_call(object(), torch.zeros(1, 1, 2, 2))
    with pytest.raises(TypeError, match="on_count"):
        counted_call(NCCMetric(), torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), on_count=3)
