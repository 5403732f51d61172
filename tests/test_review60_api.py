"""Hostile review 60 of the core API (measures, aggregation, regions, scores, product formatting).

Each test pins a defect found by the review (it failed before its fix) or a behaviour checked against an independent
reference (brute-force numpy in float64).
"""

import math
from decimal import Decimal

import pytest

from monai_unc.product import format_estimate, format_interval, format_level


@pytest.mark.parametrize("alpha", [1e-30, 1e-100, 5e-324])
def test_format_level_never_above_the_level_of_a_tiny_alpha(alpha):
    # found by hostile review 60: 1 - alpha was computed in Decimal's default 28 digits, so alpha = 1e-30 rounded the
    # level to 1 and a guarantee at probability 1 - 1e-30 read "with probability 1" ("100%")
    for percent in (False, True):
        text = format_level(alpha, percent=percent)
        level = Decimal(text.rstrip("%")) / (100 if percent else 1)
        assert level < 1, text
        assert level <= 1 - Decimal(repr(alpha))


@pytest.mark.parametrize("high", [1e26, 1e30, 1e300])
def test_format_interval_of_large_ends(high):
    # found by hostile review 60: quantizing an end of more than 28 digits raised decimal.InvalidOperation
    text = format_interval(-high, high)
    low_text, high_text = text.strip("[]").split(", ")
    assert Decimal(low_text) <= Decimal(repr(-high)) and Decimal(high_text) >= Decimal(repr(high))
    assert format_estimate(high, 0.0, high).endswith(text.split(", ")[1])


def test_format_interval_of_many_decimals():
    # found by hostile review 60: decimals=40 (more than Decimal's default 28 digits) raised decimal.InvalidOperation
    low_text, high_text = format_interval(1 / 3, 2 / 3, decimals=40).strip("[]").split(", ")
    assert len(low_text.split(".")[1]) == 40
    assert Decimal(low_text) <= Decimal(repr(1 / 3)) and Decimal(high_text) >= Decimal(repr(2 / 3))
    assert math.isclose(float(low_text), 1 / 3)


@pytest.mark.parametrize("target", [0.1234564, 0.12345, 0.05004, 0.1])
def test_conformal_target_is_never_written_below_itself(target):
    # found by hostile review 60: the evaluate line wrote the target with "%g" (0.1234564 as 0.123456) and the
    # report's table with 4 decimals (0.05004 as 0.0500): a guarantee stronger than the rule's
    from monai_unc.products.conformal import ConformalMasks

    task = {"calibration_loss": 0.01, "lambda_hat": 0.2}
    side = {"loss": "fnr", "target": target, "method": "expectation", "guarantee": "g", "per_task": {"1": task}}
    line = ConformalMasks.summary_lines({"sides": {"outer": side}})[0]
    printed = float(line.split("target ")[1].split(",")[0])
    assert printed >= target, line
    cell = ConformalMasks.report_section({"family": "threshold", "n_calibration": 20,
                                          "sides": {"outer": side}}).tables[0].rows[0][1]
    assert float(cell) >= target, cell
    if target == 0.1:  # a target its decimals write exactly keeps them
        assert cell == "0.1000" and "target 0.1," in line


def test_maps_from_entropies_and_moments_keep_the_dtype_of_their_first_argument():
    # found by hostile review 60: the result took the promoted dtype (float64 from a float64 ee / mean_sq), where
    # the docstrings promise the dtype of pe (of mean)
    import numpy as np
    import torch

    from monai_unc.measures import mutual_information_from_entropies, variance_from_moments

    pe = np.array([[[0.6931, 0.3]]], dtype=np.float32)
    ee = np.array([[[0.3251, 0.3]]])
    for validate in (True, False):
        mi = mutual_information_from_entropies(pe, ee, validate=validate)
        assert isinstance(mi, np.ndarray) and mi.dtype == np.float32
        np.testing.assert_allclose(mi, [[[0.368, 0.0]]], atol=1e-6)
    wd = torch.tensor([[[0.1, 0.0]]], dtype=torch.float64)
    mi = mutual_information_from_entropies(torch.from_numpy(pe), torch.from_numpy(ee), wd)
    assert mi.dtype == torch.float32 and torch.allclose(mi, torch.tensor([[[0.268, 0.0]]]), atol=1e-6)
    mean = torch.tensor([[[0.5], [0.5]]], dtype=torch.float16)
    var = variance_from_moments(mean, torch.tensor([[[0.41], [0.41]]], dtype=torch.float64))
    assert var.dtype == torch.float16 and abs(float(var) - 0.16) < 1e-3
    # the library follows the first argument too
    var = variance_from_moments(np.array([[[0.5], [0.5]]], dtype=np.float32), np.array([[[0.41], [0.41]]]))
    assert isinstance(var, np.ndarray) and var.dtype == np.float32


def test_the_core_api_modules_run_their_docstring_examples_in_make_test():
    # found by hostile review 60: monai_unc/scores.py has docstring examples (region_suffix, region_suffixes,
    # resolve_score_column) but was not in the Makefile's DOCTEST_PATHS, so `make test` never ran them
    import re

    from tests._paths import ROOT

    text = (ROOT / "Makefile").read_text()
    block = re.search(r"^DOCTEST_PATHS :=(.*?)\n\n", text, flags=re.S | re.M).group(1)
    paths = set(block.replace("\\\n", " ").split())
    for module in ("measures", "aggregation", "activation", "regions", "scores", "product", "_lazy"):
        source = (ROOT / "monai_unc" / f"{module}.py").read_text()
        assert ">>> " in source, module
        assert f"monai_unc/{module}.py" in paths, f"monai_unc/{module}.py has examples but is not in DOCTEST_PATHS"
    assert "monai_unc/products" in paths


def test_identical_samples_mutual_information_as_the_module_docstring_states():
    # found by hostile review 60: the docstring said identical samples give MI = 0 exactly; that holds for float32
    # and half precision, while the float64 mean of identical float64 samples rounds (MI up to ~1e-15 nats), in
    # SampleStats as in the measures: the docstring now says so, and this pins both statements
    import torch

    from monai_unc.measures import expected_entropy, mutual_information, predictive_entropy
    from monai_unc.stats import SampleStats

    torch.manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for multilabel in (False, True):
            x = torch.randn(1, 3, 16, 16, dtype=torch.float64)
            p = (torch.sigmoid(x) if multilabel else torch.softmax(x, 1)).to(dtype)
            s = p.unsqueeze(0).expand(7, -1, -1, -1, -1)
            mi = mutual_information(s, multilabel=multilabel)
            stats = SampleStats(multilabel=multilabel)
            for sample in s:
                stats.update(sample)
            streamed = stats.measures(["mutual_information"])["mutual_information"]
            if dtype == torch.float64:
                assert float(mi.max()) < 1e-14 and float(streamed.max()) < 1e-14
            else:
                assert torch.equal(predictive_entropy(s, multilabel=multilabel),
                                   expected_entropy(s, multilabel=multilabel))
                assert float(mi.abs().max()) == 0.0 and float(streamed.abs().max()) == 0.0, dtype


def test_softmax_with_a_class_temperature_whose_scaled_logits_all_overflow_to_minus_inf():
    # found by hostile review 60: with one temperature per class, logits / t of every class of a voxel overflowing
    # to -inf in float32 gave NaN probabilities (the float64 retry only ran for +inf), though float64 holds them
    import torch

    from monai_unc.activation import CATEGORICAL

    cases = [
        (torch.tensor([-1e30, -2e30]), torch.tensor([1e-10, 2e-10])),  # -1e40 each in float64: equal
        (torch.tensor([-1e30, -1e30]), torch.tensor([1e-10, 1e-10])),
        (torch.tensor([-3e38, -3e38]), torch.tensor([0.5, 0.5])),
    ]
    for z, t in cases:
        logits = z.view(1, 2, 1)
        p = CATEGORICAL.probabilities(logits, t)
        assert torch.isfinite(p).all() and p.dtype == torch.float32, p
        # the reference: softmax of the exact scaled logits (float64 holds them)
        ref = torch.softmax(z.double() / t.double(), 0).float().view(1, 2, 1)
        assert torch.allclose(p, ref), (p, ref)
    # one class finite keeps the float32 path's exact zeros
    p = CATEGORICAL.probabilities(torch.tensor([[[-1e30], [-2e30], [5.0]]]), torch.tensor([1e-10, 1e-10, 1e-10]))
    assert p.flatten().tolist() == [0.0, 0.0, 1.0]
    # beyond float64 too: refused, as documented, not NaN
    with pytest.raises(ValueError, match="overflows float64"):
        CATEGORICAL.probabilities(torch.tensor([[[-1e300], [-1e300]]], dtype=torch.float64),
                                  torch.tensor([1e-10, 1e-10], dtype=torch.float64))


def test_format_estimate_keeps_the_estimate_inside_its_printed_interval_random():
    # checked in hostile review 60 against the exact values (no defect found): the printed interval contains the
    # computed one, the printed estimate lies inside the printed interval, and with a threshold the estimate never
    # reads on the other side of it (nor equal to it unless it is it)
    import random

    rng = random.Random(60)
    for _ in range(5000):
        scale = 10.0 ** rng.randint(-6, 2)
        value = rng.uniform(-1, 1) * scale
        low, high = value - rng.random() * scale, value + rng.random() * scale
        threshold = value * (1 + rng.uniform(-1e-3, 1e-3)) if rng.random() < 0.5 else None
        decimals = rng.randint(0, 4)
        text = format_estimate(value, low, high, decimals, threshold)
        estimate, interval = text.split(" [")
        lo, hi = (float(x) for x in interval.rstrip("]").split(", "))
        assert lo <= low and hi >= high, text
        assert lo <= float(estimate) <= hi, (value, low, high, text)
        if threshold is not None:
            shown = float(estimate)
            assert (shown > threshold) - (shown < threshold) == (value > threshold) - (value < threshold), text


def test_risk_control_line_never_writes_a_coverage_of_one_with_a_referred_calibration_case():
    # found by hostile review 60: the coverage was written with 3 decimals, so 2499 of 2500 calibration cases
    # accepted (0.9996) read "calibration coverage 1.000" beside "review 1 of 2500"
    from monai_unc.products.risk_control import risk_control_line

    block = {"method": "sgr", "risk": "dice < 0.8", "target_risk": 0.2, "delta": 0.1, "feasible": True,
             "threshold": 0.5, "bound": 0.15,
             "calibration": {"coverage": 2499 / 2500, "risk_accepted": 0.1, "n_undefined": 0},
             "accepted": [f"c{i}" for i in range(2499)], "referred": ["c2499"]}
    line = risk_control_line(block)
    assert "calibration coverage 0.9996," in line and "review 1 of 2500" in line, line
    assert "calibration coverage 0.810," in risk_control_line(
        {**block, "calibration": {**block["calibration"], "coverage": 0.81}})
    assert "calibration coverage 1.000," in risk_control_line(
        {**block, "calibration": {**block["calibration"], "coverage": 1.0}})


def test_lesion_summary_line_never_writes_a_non_zero_score_as_zero():
    # found by hostile review 60: the lesion-wise scores were written with fixed decimals, so a mean lesion-wise Dice
    # of 4e-05 (one lesion barely overlapped among many missed) read "0.0000"
    from monai_unc.products.lesions import LesionMetrics

    task = {"mean": {"lesion_dice": 4e-05, "lesion_hd95": 12.0, "lesion_f1": 0.0, "ndsc": float("nan")},
            "lesion_tp": 1, "lesion_fp": 2, "lesion_fn": 30}
    line = LesionMetrics.summary_lines({"per_task": {"WT": task}})[0]
    assert "lesion-wise Dice 4e-05," in line and "F1 0.0000," in line and "nDSC n/a;" in line, line
    assert "HD95 12.00 mm" in line
    cards = dict(LesionMetrics.report_section({"per_task": {"WT": task}, "lesions": []}).cards)
    assert cards["WT lesion-wise Dice"] == "4e-05"


def test_per_region_refuses_an_argument_given_per_region_and_as_a_keyword():
    # found by hostile review 60: per_region(fn, {"probs": p, "target": t}, target=other) called fn with the
    # per-region target and dropped the keyword without a word
    import numpy as np

    from monai_unc.regions import per_region

    probs = np.full((1, 2, 4), 0.7)
    target = np.ones((1, 2, 4), dtype=np.uint8)

    def count(probs, target):
        return int(target.sum())

    assert per_region(count, {"probs": probs, "target": target}) == {"0": 4, "1": 4}
    with pytest.raises(ValueError, match="target given both in region_args and as a keyword"):
        per_region(count, {"probs": probs, "target": target}, target=np.zeros((1, 1, 4)))
