"""Region maps through the metric API: every region a binary task (binary_probabilities, per_region) and the
multi-label quality estimates, against brute-force numpy written here from the definitions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from monai_unc.aggregation import aggregate
from monai_unc.inferers import MCDropoutInferer
from monai_unc.metrics import ece, nll
from monai_unc.metrics.quality import quality_estimates
from monai_unc.regions import (
    binary_probabilities,
    label_to_regions,
    parse_regions,
    per_region,
    unclaimed_labels,
    unclaimed_labels_message,
)


def _region_case(seed: int = 0, shape=(2, 3, 9, 8)):
    rng = np.random.default_rng(seed)
    probs = rng.uniform(0.01, 0.99, size=shape)
    probs[np.isclose(probs, 0.5, atol=1e-3)] = 0.6  # no ties at the threshold
    target = (rng.uniform(size=shape) < probs).astype(np.uint8)
    return probs, target


def _binary_ece(p: np.ndarray, y: np.ndarray, n_bins: int) -> float:
    """Top-label ECE of one binary task, written out: confidence max(p, 1-p), correct = [(p > 0.5) == y]."""
    p, y = p.ravel(), y.ravel()
    conf = np.maximum(p, 1 - p)
    correct = ((p > 0.5).astype(int) == y).astype(float)
    idx = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        m = idx == b
        if m.any():
            total += m.sum() * abs(correct[m].mean() - conf[m].mean())
    return total / p.size


def test_binary_probabilities_and_errors():
    p = np.array([[[0.0, 0.3, 1.0]]])  # (1, 1, 3)
    out = binary_probabilities(p)
    np.testing.assert_allclose(out, [[[1.0, 0.7, 0.0], [0.0, 0.3, 1.0]]])
    assert isinstance(out, np.ndarray)
    t = binary_probabilities(torch.tensor(p).permute(1, 0, 2), channel_dim=0)
    assert isinstance(t, torch.Tensor) and t.shape == (2, 1, 3)
    with pytest.raises(ValueError, match="one region"):
        binary_probabilities(np.zeros((1, 2, 3)))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        binary_probabilities(np.full((1, 1, 3), 1.5))
    with pytest.raises(ValueError, match="channel_dim"):
        binary_probabilities(np.zeros((1, 1, 3)), channel_dim=5)


def test_per_region_ece_and_nll_equal_each_region_by_hand():
    probs, target = _region_case()
    names = list(parse_regions("brats"))
    res = per_region(ece, {"probs": probs, "target": target}, names=names, n_bins=10)
    assert list(res) == names
    for r, name in enumerate(names):
        assert res[name] == pytest.approx(_binary_ece(probs[:, r], target[:, r], 10), abs=1e-9)
    res = per_region(nll, {"probs": probs, "target": target.astype(bool)})  # boolean masks are labels too
    for r in range(3):
        p, y = probs[:, r], target[:, r]
        ref = -np.mean(np.where(y == 1, np.log(p), np.log(1 - p)))
        assert res[str(r)] == pytest.approx(ref, rel=1e-9)


def test_per_region_aggregation_from_a_label_map_3d():
    rng = np.random.default_rng(1)
    labels = rng.choice([0, 1, 2, 4], size=(2, 1, 6, 5, 4))
    masks = label_to_regions(labels, "brats", channel_dim=1)  # (2, 3, 6, 5, 4)
    u = rng.uniform(0, np.log(2), size=masks.shape)
    res = per_region(aggregate, {"uncertainty": u, "mask": masks}, names=["TC", "WT", "ET"], method="mean")
    for r, name in enumerate(["TC", "WT", "ET"]):
        ref = [u[b, r][masks[b, r]].mean() if masks[b, r].any() else np.nan for b in range(2)]
        np.testing.assert_allclose(res[name], ref)


def test_per_region_errors():
    probs, target = _region_case()
    with pytest.raises(ValueError, match="same number of regions"):
        per_region(ece, {"probs": probs, "target": target[:, :2]})
    with pytest.raises(ValueError, match="names has 2"):
        per_region(ece, {"probs": probs, "target": target}, names=["a", "b"])
    with pytest.raises(ValueError, match="unique"):
        per_region(ece, {"probs": probs, "target": target}, names=["a", "a", "b"])
    with pytest.raises(ValueError, match="non-empty"):
        per_region(ece, {})
    with pytest.raises(TypeError, match="callable"):
        per_region("ece", {"probs": probs})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        per_region(ece, {"probs": probs + 1, "target": target})


def _dice(a: np.ndarray, b: np.ndarray) -> float:
    s = a.sum() + b.sum()
    return 1.0 if s == 0 else 2 * (a & b).sum() / s


def test_quality_estimates_per_region_equal_brute_force():
    rng = np.random.default_rng(2)
    samples = rng.uniform(0.01, 0.99, size=(4, 2, 3, 7, 6))  # S=4, B=2, R=3, 2D
    samples[:, 1, 2] = 0.1  # region 2 of case 1 is empty in every sample
    pred = samples.mean(0)
    out = quality_estimates({"pred": pred, "samples": samples}, multilabel=True)
    for b, r in itertools.product(range(2), range(3)):
        p = pred[b, r]
        seg = p > 0.5
        # a region the segmentation does not hold: the chance that the reference holds none of it (as evaluate)
        ed = 2 * p[seg].sum() / (p.sum() + seg.sum()) if seg.any() else float(np.prod(1.0 - p))
        assert out["expected_dice"].per_class[b, r] == pytest.approx(ed, rel=1e-9)
        masks = samples[:, b, r] > 0.5
        pw = np.mean([_dice(masks[i], masks[j]) for i, j in itertools.combinations(range(4), 2)])
        assert out["pairwise_dice"].per_class[b, r] == pytest.approx(pw, rel=1e-9)
        inter, union = np.logical_and.reduce(masks).sum(), np.logical_or.reduce(masks).sum()
        assert out["sample_iou"].per_class[b, r] == pytest.approx(1.0 if union == 0 else inter / union, rel=1e-9)
    np.testing.assert_allclose(out["expected_dice"].foreground, out["expected_dice"].per_class.mean(1))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        quality_estimates({"pred": pred + 1}, multilabel=True)


def test_quality_estimates_read_the_inferer_multilabel_flag():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3, padding=1), torch.nn.Dropout(0.3))
    out = MCDropoutInferer(num_samples=3, activation="sigmoid", keep_samples=True)(torch.randn(2, 1, 8, 8), net)
    assert out.multilabel and out["pred"].shape == (2, 3, 8, 8)
    q = quality_estimates(out)  # no flag: taken from the output
    assert q["expected_dice"].per_class.shape == (2, 3)
    ref = quality_estimates(out, multilabel=True)
    torch.testing.assert_close(q["pairwise_dice"].per_class, ref["pairwise_dice"].per_class)


def test_parse_regions_refuses_duplicate_names_and_labels_no_map_can_hold():
    """'{"WT":[1],"WT":[2]}' kept only the last WT; {"WT": [2**70]} was accepted and failed later (OverflowError)."""
    with pytest.raises(ValueError, match="the region 'WT' is given twice"):
        parse_regions('{"WT": [1], "WT": [2]}')
    for spec in ({"WT": [2**70]}, '{"WT": [1180591620717411303424]}', {"WT": [1, 2**31]}):
        with pytest.raises(ValueError, match="larger than any label map can hold"):
            parse_regions(spec)
    assert parse_regions({"WT": [2**31 - 1]}) == {"WT": (2**31 - 1,)}
    assert parse_regions('{"WT": [1, 2], "ET": [2]}') == {"WT": (1, 2), "ET": (2,)}


def test_unclaimed_labels_and_the_likely_spec():
    lab = np.array([[0, 1, 2], [3, 7, 3]], dtype=np.int16)
    assert unclaimed_labels(lab, "brats") == [3, 7]
    assert unclaimed_labels(torch.from_numpy(lab), {"A": [1, 2, 3, 7]}) == []
    text = unclaimed_labels_message({3: ["a", "b", "c", "d"]}, "brats")
    assert text.startswith("label 3 in 4 case(s) (a, b, c, ...) is in no region") and "did you mean brats2023?" in text
    assert "did you mean brats?" in unclaimed_labels_message({4: ["a"]}, "brats2023")
    text = unclaimed_labels_message({3: ["a"], 7: ["b"]}, "brats", option="ignore=True")
    assert "label 3 in 1 case(s) (a); label 7 in 1 case(s) (b) are" in text and "claims every label" in text
    assert "ignore=True" in text
