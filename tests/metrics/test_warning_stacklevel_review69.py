"""Warnings of the calibration and quality metrics point at the user's call (review 69).

Found by review 69: ``calibration_metrics``' warning that ``n_bins`` does not divide the fine bins, its NaN warning
and ``quality_estimates``' NaN and single-sample warnings gave a ``stacklevel`` counted from one call path, so the
warning's file and line were inside the library (``functional.py``, ``quality.py``) for the public call (a filter on
the user's module, or ``-W error::UserWarning:mymodule``, then missed them).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from monai_unc.metrics import (
    ConfidenceHistogram,
    calibration_metrics,
    conformal_interval,
    conformal_quantile,
    ece,
    expected_dice,
    quality_estimates,
)


def _caught(call) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    assert caught, "no warning"
    return caught


def _hist(n_fine_bins: int = 100, empty: bool = False) -> ConfidenceHistogram:
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(1, 2, 4, 4, 4), dim=1)
    target = torch.randint(0, 2, (1, 4, 4, 4))
    mask = torch.zeros(1, 4, 4, 4, dtype=torch.bool) if empty else None
    return ConfidenceHistogram(num_classes=2, n_fine_bins=n_fine_bins).update(probs, target, mask=mask)


@pytest.mark.parametrize("call", [
    lambda: calibration_metrics(_hist(), n_bins=15),  # 15 does not divide 100: rounded edges
    lambda: calibration_metrics(_hist(empty=True), ["ece", "nll"]),  # no voxel: NaN
    lambda: ece(_hist(), n_bins=15),
    lambda: ece(_hist(empty=True)),
], ids=["calibration_metrics-rounded", "calibration_metrics-nan", "ece-rounded", "ece-nan"])
def test_calibration_warnings_point_at_the_caller(call):
    assert all(w.filename == __file__ for w in _caught(call)), [(w.filename, str(w.message)) for w in _caught(call)]


def _pred() -> torch.Tensor:
    """Three classes, class 2 never the argmax: its expected Dice is NaN with ``empty_score=nan``."""
    p = torch.empty(1, 3, 2, 2, 2)
    p[:, 0], p[:, 1], p[:, 2] = 0.6, 0.3, 0.1
    return p


def _nan_pred() -> torch.Tensor:
    p = _pred()
    p[0, :, 0, 0, 0] = float("nan")
    return p


@pytest.mark.parametrize("call", [
    lambda: quality_estimates({"pred": _pred()}, empty_score=float("nan")),  # NaN of a class not held
    lambda: quality_estimates({"pred": _pred()[:, 1:2]}, empty_score=float("nan"), multilabel=True),  # a region
    lambda: quality_estimates({"pred": _pred(), "samples": _pred()[None]}),  # one sample
    lambda: expected_dice(_nan_pred(), validate=False),  # NaN probabilities
    lambda: expected_dice(_pred(), empty_score=float("nan")),
], ids=["nan", "nan-region", "single-sample", "expected_dice-nan-input", "expected_dice-nan"])
def test_quality_warnings_point_at_the_caller(call):
    caught = _caught(call)
    assert all(w.filename == __file__ for w in caught), [(w.filename, str(w.message)) for w in caught]


@pytest.mark.parametrize("call", [
    lambda: conformal_interval([0.8, float("nan")], [0.9] * 40, [0.85] * 40),  # an undefined estimate
    lambda: conformal_interval([0.8], [0.9] * 3, [0.85] * 3),  # too few calibration cases
    lambda: conformal_quantile([0.9] * 3, [0.85] * 3),
], ids=["interval-nan", "interval-few", "quantile-few"])
def test_conformal_warnings_point_at_the_caller(call):
    caught = _caught(call)
    assert all(w.filename == __file__ for w in caught), [(w.filename, str(w.message)) for w in caught]


def test_package_frames_named_through_a_dotted_path_are_skipped():
    """A package imported through ``sys.path.insert(0, "tests/..")`` (a notebook's habit) names its frames
    ``.../tests/../monai_unc/...``: they were not recognised as the package's, and the warnings named a line inside it
    again. Here one frame of the package is named so (a function compiled with such a file name), between the user's
    call and the metric."""
    import os

    import monai_unc

    package = os.path.dirname(monai_unc.__file__)
    dotted = os.path.join(os.path.dirname(package), "tests", "..", os.path.basename(package), "_dotted_shim.py")
    scope: dict = {"ece": ece}
    exec(compile("def shim(h):\n    return ece(h, n_bins=15)\n", dotted, "exec"), scope)
    caught = _caught(lambda: scope["shim"](_hist()))
    assert [w.filename for w in caught] == [__file__], [w.filename for w in caught]
