"""Float64 probabilities are summed in float64 whatever the number of classes (review 61).

Above ``FLOAT64_MAX_CLASSES`` (16) classes ``accum_dtype=None`` chose float32 sums for every input, so a deterministic
float64 network of 17 or 40 classes had MI ~2.4e-7 nats instead of 0, and its maps differed from the float64 ones by
float32 rounding; ``estimate_memory`` counted 4-byte sums for it.
"""

from __future__ import annotations

import copy

import pytest
import torch
from monai.inferers import SimpleInferer, SlidingWindowInferer

from monai_unc.inferers import EnsembleInferer, MCDropoutInferer, estimate_memory
from monai_unc.stats import FLOAT64_MAX_CLASSES, SampleStats, auto_accum_dtype

KEYS = ["pred", "predictive_entropy", "expected_entropy", "mutual_information", "variance", "one_minus_max_prob"]


class _Float64Net(torch.nn.Module):
    """A deterministic float64 network whose dropout layer changes nothing (MC dropout draws identical samples)."""

    def __init__(self, out: int) -> None:
        super().__init__()
        self.conv, self.drop = torch.nn.Conv3d(1, out, 3, padding=1).double(), torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 4 * self.conv(x) + 0.0 * self.drop(torch.ones(1, dtype=x.dtype)).sum()


def _case(classes: int) -> tuple[torch.Tensor, _Float64Net]:
    x = torch.randn(1, 1, 9, 10, 11, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.manual_seed(classes)
    return x, _Float64Net(classes)


def _brute_force(x: torch.Tensor, net: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The maps of identical float64 samples, from one softmax in float64."""
    with torch.no_grad():
        p = torch.softmax(net(x), 1)
    h = -(p * torch.log(p)).sum(1, keepdim=True)
    return {"pred": p, "predictive_entropy": h, "expected_entropy": h, "mutual_information": torch.zeros_like(h),
            "variance": torch.zeros_like(h), "one_minus_max_prob": 1 - p.amax(1, keepdim=True)}


@pytest.mark.parametrize("classes", [17, 40])
@pytest.mark.parametrize("samples", [4, 3])
def test_a_deterministic_float64_network_of_many_classes_has_zero_mi(classes, samples):
    assert classes > FLOAT64_MAX_CLASSES
    x, net = _case(classes)
    res = MCDropoutInferer(samples, keys=KEYS)(x, net)
    mi = float(res["mutual_information"].abs().max())
    # four samples: float64 sums give the mean of identical samples back exactly (a power of two); three: rounding
    assert (mi == 0) if samples == 4 else (mi < 1e-12), mi
    ref = _brute_force(x, net)
    for k in KEYS:
        assert res[k].dtype == torch.float64, k
        err = float((res[k] - ref[k]).abs().max())
        assert err < 1e-12, (k, err)  # float32 sums: ~1e-7
    assert float(res["predictive_entropy"].max()) > 0.1


@pytest.mark.parametrize("classes", [17, 40])
def test_under_sliding_windows_and_in_an_ensemble_too(classes):
    x, net = _case(classes)
    windows = SlidingWindowInferer((8, 8, 8), sw_batch_size=2, overlap=0.5, mode="gaussian")
    res = MCDropoutInferer(4, keys=KEYS, base_inferer=windows)(x, net)
    assert float(res["mutual_information"].abs().max()) == 0
    assert float(res["variance"].abs().max()) == 0
    twin = copy.deepcopy(net).eval()
    res = EnsembleInferer([net.eval(), twin], keys=KEYS, base_inferer=SimpleInferer())(x)
    assert float(res["mutual_information"].abs().max()) == 0
    ref = _brute_force(x, net)
    assert float((res["pred"] - ref["pred"]).abs().max()) < 1e-15


def test_the_accumulation_dtype_follows_float64_samples():
    assert auto_accum_dtype(40) == torch.float32 and auto_accum_dtype(40, torch.float32) == torch.float32
    assert auto_accum_dtype(40, torch.float64) == torch.float64 and auto_accum_dtype(3, torch.float16) == torch.float64
    p = torch.softmax(torch.randn(1, 40, 4, 4, dtype=torch.float64), 1)
    assert SampleStats(accum_dtype=None).update(p).accum_dtype == torch.float64
    assert SampleStats(accum_dtype=None).update(p.float()).accum_dtype == torch.float32
    assert SampleStats(accum_dtype=torch.float32).update(p).accum_dtype == torch.float32  # a forced dtype stays
    with pytest.raises(TypeError, match="dtype"):
        auto_accum_dtype(40, "float64")


def test_estimate_memory_counts_float64_sums_for_a_float64_input():
    shape = (64, 64, 64)
    auto = estimate_memory(shape, 40, input_dtype=torch.float64)
    assert auto == estimate_memory(shape, 40, input_dtype=torch.float64, accum_dtype=torch.float64)
    assert auto.total > estimate_memory(shape, 40, input_dtype=torch.float64, accum_dtype=torch.float32).total
    # float32 inputs keep float32 sums above 16 classes
    assert estimate_memory(shape, 40) == estimate_memory(shape, 40, accum_dtype=torch.float32)
