"""The warnings of the MONAI metric adapters are said once per call, at the user's line (review 70).

Found by review 70 (after the same fix of ``QUBraTSMetric``): ``CalibrationMetric`` said its warnings (a discretised
``y_pred``, ``n_bins`` not dividing the fine bins) at a line of MONAI's ``CumulativeIterationMetric`` (``metric.py``,
the discretised one once per item of a decollated list, at a line of this package); ``NCCMetric`` / ``GEDMetric`` and
the spatial metric classes said the warning of each undefined case once per case, at a line of this package
(``ambiguity_metric.py``, ``spatial.py``, ``spatial_metric.py``), so a filter on the user's module, or
``-W error::UserWarning:mymodule``, missed them, and a batch of 40 cases said the same text 40 times.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

from monai_unc._utils import said_once_per_call, say_warning
from monai_unc.metrics import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    CalibrationMetric,
    GEDMetric,
    NCCMetric,
    SpatialCalibrationErrorMetric,
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    ged_nonempty_iou,
    ncc,
    spatial_calibration_error,
)
from tests._warning_checks import caught_warnings, quietly, said_once_each_at

said_here = functools.partial(said_once_each_at, __file__)  # at this file's lines


def _labels(n: int, size: int = 8, boundary: bool = True) -> torch.Tensor:
    t = torch.zeros(n, 1, size, size, dtype=torch.long)
    if boundary:
        t[:, :, 2:6, 2:6] = 1
    return t


def _onehot() -> torch.Tensor:
    oh = torch.zeros(2, 3, 4, 4)
    oh[:, 0] = 1
    return oh


#: adapter -> (metric factory, a batch of 2 degenerate cases as keyword arguments, the beginnings of its warnings)
CASES: dict[str, tuple[Callable[[], Any], Callable[[], dict[str, torch.Tensor]], tuple[str, ...]]] = {
    "CalibrationMetric": (
        lambda: CalibrationMetric(num_classes=3, n_bins=7, n_fine_bins=100),  # a small grid: fast
        lambda: {"y_pred": _onehot(), "y": torch.zeros(2, 1, 4, 4, dtype=torch.long)},
        ("CalibrationMetric: y_pred holds only 0 and 1", "n_bins=7 does not divide"),
    ),
    "NCCMetric": (
        NCCMetric,
        lambda: {"y_pred": torch.zeros(2, 1, 4, 4, 4),
                 "y": torch.rand(2, 1, 4, 4, 4, generator=torch.Generator().manual_seed(0))},
        ("ncc: uncertainty is constant",),
    ),
    "GEDMetric": (
        lambda: GEDMetric(variant="nonempty_iou"),
        lambda: {"y_pred": torch.zeros(2, 3, 4, 4, dtype=torch.long), "y": torch.zeros(2, 3, 4, 4, dtype=torch.long)},
        ("ged_nonempty_iou: every mask in references is empty",),
    ),
    "BoundaryUncertaintyConcentrationMetric": (
        BoundaryUncertaintyConcentrationMetric,
        lambda: {"y_pred": _labels(2, boundary=False), "y": _labels(2, boundary=False),
                 "uncertainty": torch.full((2, 1, 8, 8), 0.5)},
        ("BUC: the predicted label map has no boundary",),
    ),
    "BoundaryAwareECEMetric": (
        BoundaryAwareECEMetric,
        lambda: {"y_pred": _labels(2, boundary=False), "y": _labels(2, boundary=False),
                 "uncertainty": torch.full((2, 1, 8, 8), 3.0)},
        ("BA-ECE: the uncertainty reaches 3, above 1", "BA-ECE: the target label map has no boundary"),
    ),
    "SpatialCalibrationErrorMetric": (
        SpatialCalibrationErrorMetric,
        lambda: {"y_pred": _labels(2), "y": _labels(2), "uncertainty": torch.full((2, 1, 8, 8), 3.0)},
        ("SPACE: the uncertainty reaches 3, above 1",),
    ),
}


def _decollated(batch: dict[str, torch.Tensor]) -> dict[str, list[torch.Tensor]]:
    return {k: list(v) for k, v in batch.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_one_call_on_two_cases_says_each_warning_once_at_the_callers_line(name):
    make, batch, starts = CASES[name]
    metric = make()
    said_here(caught_warnings(lambda: metric(**batch())), *starts)
    # a decollated list: MONAI evaluates the items one by one (n_bins is said once per metric object)
    starts = tuple(s for s in starts if not s.startswith("n_bins"))
    said_here(caught_warnings(lambda: metric(**_decollated(batch()))), *starts)
    assert metric.get_buffer().shape[0] == 4


def _refused(name: str, batch: dict[str, torch.Tensor]) -> dict[str, list[torch.Tensor]]:
    """The decollated cases, a bad one after them: the good ones are evaluated (and warn) before the refusal."""
    items = _decollated(batch)
    bad = {k: v[0] for k, v in items.items()}
    if name == "NCCMetric":  # two maps: NCCMetric takes one uncertainty map per case
        bad["y_pred"] = torch.zeros(2, 4, 4, 4)
    else:  # the reference on another grid
        bad["y"] = torch.zeros(bad["y"].shape[0], 3, 3, dtype=bad["y"].dtype)
    return {k: v + [bad[k]] for k, v in items.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_a_refused_call_leaves_nothing_pending_for_the_next(name):
    make, batch, starts = CASES[name]
    metric = make()
    refused = _refused(name, batch())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError):
            metric(**refused)
    assert caught == []  # the error is what the call says
    # the next call says its own warnings once, none of the refused call's with them (n_bins included: it was not
    # said by the refused call)
    said_here(caught_warnings(lambda: metric(**batch())), *starts)
    # a call without degenerate cases says nothing
    assert caught_warnings(lambda: metric(**_fine(name))) == []


def _fine(name: str) -> dict[str, torch.Tensor]:
    """Two cases that every adapter scores without a warning."""
    g = torch.Generator().manual_seed(1)
    if name == "CalibrationMetric":
        return {"y_pred": torch.softmax(torch.randn(2, 3, 4, 4, generator=g), dim=1),
                "y": torch.randint(0, 3, (2, 1, 4, 4), generator=g)}
    if name == "NCCMetric":
        return {"y_pred": torch.rand(2, 1, 4, 4, 4, generator=g), "y": torch.rand(2, 1, 4, 4, 4, generator=g)}
    if name == "GEDMetric":
        return {"y_pred": torch.randint(0, 2, (2, 3, 4, 4), generator=g) | 1,
                "y": torch.randint(0, 2, (2, 3, 4, 4), generator=g) | 1}
    return {"y_pred": _labels(2), "y": _labels(2), "uncertainty": torch.rand(2, 1, 8, 8, generator=g)}


def test_values_unchanged():
    """The metrics' values are the functions' (the warnings held, the numbers as before)."""
    g = torch.Generator().manual_seed(2)
    u = torch.rand(3, 1, 4, 4, 4, generator=g)
    u[0] = 0.25  # constant: NaN
    ref = torch.rand(3, 1, 4, 4, 4, generator=g)
    metric = NCCMetric(reduction="none")
    caught_warnings(lambda: metric(y_pred=u, y=ref))
    expected = [quietly(lambda i=i: ncc(u[i], ref[i])) for i in range(3)]
    torch.testing.assert_close(metric.aggregate()[:, 0], torch.tensor(expected, dtype=torch.float64), equal_nan=True)

    refs = torch.randint(0, 2, (2, 3, 4, 4), generator=g)
    refs[0] = 0  # every reference empty: NaN
    samples = torch.randint(0, 2, (2, 2, 4, 4), generator=g)
    metric = GEDMetric(variant="nonempty_iou", reduction="none")
    caught_warnings(lambda: metric(y_pred=samples, y=refs))
    expected = [quietly(lambda i=i: float(ged_nonempty_iou(refs[i], samples[i]).ged)) for i in range(2)]
    torch.testing.assert_close(metric.aggregate()[:, 0], torch.tensor(expected, dtype=torch.float64), equal_nan=True)

    target = _labels(2)
    target[0] = 0  # no boundary
    pred = _labels(2)
    pred[1, :, 2:6, 6] = 1
    unc = 1.5 * torch.rand(2, 1, 8, 8, generator=g)  # off the [0, 1] scale
    for cls, fn in ((BoundaryUncertaintyConcentrationMetric, boundary_uncertainty_concentration),
                    (BoundaryAwareECEMetric, boundary_aware_ece), (SpatialCalibrationErrorMetric,
                                                                   spatial_calibration_error)):
        metric = cls(reduction="none")
        caught_warnings(lambda m=metric: m(y_pred=pred, y=target, uncertainty=unc))
        expected = quietly(lambda f=fn: f(unc, pred, target))
        expected = getattr(expected, "value", expected)
        torch.testing.assert_close(metric.aggregate()[:, 0], torch.as_tensor(expected, dtype=torch.float64).reshape(-1),
                                   equal_nan=True)

    probs = torch.softmax(torch.randn(2, 3, 4, 4, generator=g), dim=1)
    labels = torch.randint(0, 3, (2, 1, 4, 4), generator=g)
    for reduction, ece in (("pooled", 0.2114623561501503), ("mean", 0.21228315308690074)):  # as before review 70
        metric = CalibrationMetric(num_classes=3, metrics=("ece", "nll"), n_bins=7, n_fine_bins=100,
                                   reduction=reduction)
        caught_warnings(lambda m=metric: m(y_pred=probs, y=labels))
        agg = quietly(metric.aggregate)
        assert (agg["ece"].item(), agg["nll"].item()) == pytest.approx((ece, 1.2098126417526036), rel=1e-12, abs=0)


def test_off_scale_names_the_most_extreme_case_of_the_call():
    """One warning for the call, naming the largest value of its cases (each item of a list is evaluated alone)."""
    u = torch.zeros(2, 1, 8, 8)
    u[0, 0, 0, 0], u[1, 0, 0, 0] = 2.0, 3.5
    for cls in (BoundaryAwareECEMetric, SpatialCalibrationErrorMetric):
        metric = cls()
        for call in (lambda m=metric: m(y_pred=_labels(2), y=_labels(2), uncertainty=u),
                     lambda m=metric: m(y_pred=list(_labels(2)), y=list(_labels(2)), uncertainty=list(u))):
            (text,) = said_here(caught_warnings(call), "BA-ECE" if cls is BoundaryAwareECEMetric else "SPACE")
            assert "reaches 3.5, above 1" in text, text


def test_held_warnings_join_an_outer_call_and_stay_in_their_thread():
    def inner() -> None:
        say_warning("degenerate", stacklevel=1)
        said_once_per_call(say_warning, "degenerate", stacklevel=1)

    said_here(caught_warnings(lambda: said_once_per_call(inner)), "degenerate")
    other: list[list[warnings.WarningMessage]] = []

    def in_another_thread() -> None:
        # a warning of another thread, said while this thread holds its call's: said at once, not held here
        thread = threading.Thread(target=lambda: say_warning("other thread", stacklevel=1))
        thread.start()
        thread.join()
        other.append(list(caught))  # while this thread's call still runs: said already, not held to its end

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        said_once_per_call(in_another_thread)
    assert [str(w.message) for w in other[0]] == ["other thread"]
