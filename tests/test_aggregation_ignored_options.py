"""``threshold`` and ``empty_value`` apply to ``method="threshold"`` only: other methods refuse them instead of
returning their own score as if the option had been used (hostile review of the API's promises)."""

import numpy as np
import pytest
import torch

from monai_unc.aggregation import aggregate
from monai_unc.transforms import AggregateUncertainty, AggregateUncertaintyd


def _map() -> np.ndarray:
    u = np.zeros((1, 1, 4, 4))
    u[0, 0, :2, :2] = 0.8
    return u


@pytest.mark.parametrize("method", ["mean", "sum", "patch_sum", "patch_mean"])
def test_threshold_with_another_method_is_refused(method):
    # aggregate(u, "mean", threshold=0.5) returned the plain mean 0.2 where the threshold score is 0.8
    with pytest.raises(ValueError, match=f"threshold applies to method='threshold' only, got method='{method}'"):
        aggregate(_map(), method, patch_size=2, threshold=0.5)
    with pytest.raises(ValueError, match="empty_value applies to method='threshold' only"):
        aggregate(_map(), method, patch_size=2, empty_value=float("nan"))


def test_threshold_method_and_defaults_unchanged():
    u = _map()
    assert aggregate(u, "threshold", threshold=0.5).tolist() == [pytest.approx(0.8)]
    assert np.isnan(aggregate(np.zeros_like(u), "threshold", threshold=0.5, empty_value=float("nan"))).all()
    assert aggregate(u, "mean", empty_value=0.0).tolist() == [pytest.approx(0.2)]  # the default, spelled out
    assert aggregate(torch.from_numpy(u), "mean", threshold=None).tolist() == [pytest.approx(0.2)]


def test_transforms_refuse_threshold_with_another_method_when_built():
    with pytest.raises(ValueError, match="threshold applies to method='threshold' only"):
        AggregateUncertainty("mean", threshold=0.5)
    with pytest.raises(ValueError, match="threshold applies to method='threshold' only"):
        AggregateUncertaintyd("u", method="patch_mean", threshold=0.5)
    assert float(AggregateUncertainty("threshold", threshold=0.5)(torch.from_numpy(_map()[0]))) == pytest.approx(0.8)


@pytest.mark.parametrize("build", [lambda: AggregateUncertainty(method="mean", empty_value=float("nan")),
                                   lambda: AggregateUncertaintyd("u", method="patch_sum", empty_value=1.0)])
def test_transforms_refuse_empty_value_when_built(build):
    """A non-zero empty_value with another method than 'threshold' was accepted when built and refused at the first
    case, mid-pipeline (threshold was refused when built) (hostile review 33)."""
    with pytest.raises(ValueError, match="empty_value applies to method='threshold' only"):
        build()
