"""The pieces of a per-case row (:mod:`monai_unc.evaluation.rows`): Dice against MONAI, the maps to score for softmax
and multi-label cases, the primary measure, the combined region score, the region score columns, the split of a
case into tasks, and the record of a :class:`CaseResult` (every state through the one state protocol)."""

from __future__ import annotations

import io
import json
import math
import warnings

import numpy as np
import pytest
import torch
from monai.metrics import compute_dice
from monai.networks.utils import one_hot

from monai_unc.activation import BERNOULLI, CATEGORICAL
from monai_unc.evaluation import EvaluationConfig
from monai_unc.evaluation.conformal import ConformalState
from monai_unc.evaluation.rows import (
    CaseResult,
    case_tasks,
    class_dice,
    combined_score,
    derived_maps,
    predicted_regions,
    primary_measure,
    region_score_columns,
    unclaimed_case_labels,
)
from monai_unc.io import CaseError, CaseFiles, LoadedCase
from monai_unc.metrics.calibration import ConfidenceHistogram
from monai_unc.metrics.conformal import conformal_case_state
from tests._cases import volume_state_type

SPACING = (1.0, 1.5, 2.0)


def _softmax_probs(rng: np.random.Generator, c: int, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.random((c, *shape)) + 0.05
    return (x / x.sum(0, keepdims=True)).astype(np.float32)


def _case(label, seg, probs=None, maps=None, multilabel=False, cid="c0") -> LoadedCase:
    return LoadedCase(cid, np.asarray(label), np.asarray(seg), probs, dict(maps or {}), np.eye(4), SPACING,
                      multilabel=multilabel)


def _np_dice(seg: np.ndarray, label: np.ndarray, c: int) -> float:
    p, t = seg == c, label == c
    if not p.any() and not t.any():
        return 1.0
    return 2.0 * np.logical_and(p, t).sum() / (p.sum() + t.sum())


# --- class_dice --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_class_dice_equals_monai_and_numpy(seed):
    rng = np.random.default_rng(seed)
    c = 4
    label = rng.integers(0, c - 1, (6, 5, 4))  # class 3 absent from the label
    seg = np.where(rng.random(label.shape) < 0.3, rng.integers(0, c, label.shape), label)
    if seed % 2:
        seg[seg == 3] = 0  # class 3 absent from both: Dice 1
    got = class_dice(seg, label, c)
    assert got.dtype == np.float32 and got.shape == (c - 1,)
    y_pred = one_hot(torch.from_numpy(seg)[None, None], c)
    y = one_hot(torch.from_numpy(label)[None, None], c)
    monai = compute_dice(y_pred, y, include_background=False, ignore_empty=False)[0].numpy()
    np.testing.assert_array_equal(got, monai.astype(np.float32))
    np.testing.assert_allclose(got, [_np_dice(seg, label, k) for k in range(1, c)], rtol=1e-6)


def test_class_dice_empty_masks():
    zeros = np.zeros((3, 3, 3), dtype=np.int64)
    ones = zeros.copy()
    ones[1, 1, 1] = 1
    assert class_dice(zeros, zeros, 2).tolist() == [1.0]  # absent from both
    assert class_dice(ones, zeros, 2).tolist() == [0.0]  # absent from the label only
    assert class_dice(zeros, ones, 2).tolist() == [0.0]  # absent from the prediction only
    assert class_dice(ones, ones, 2).tolist() == [1.0]
    y = one_hot(torch.from_numpy(zeros)[None, None], 2)
    assert compute_dice(y, y, include_background=False, ignore_empty=False).item() == 1.0


# --- derived maps, primary measure -------------------------------------------------------------------------------
def test_derived_maps_softmax_by_hand():
    rng = np.random.default_rng(0)
    p = _softmax_probs(rng, 3, (4, 3, 2))
    maps = derived_maps(_case(p.argmax(0), p.argmax(0), p))
    assert sorted(maps) == ["one_minus_max_prob", "predictive_entropy"]
    p64 = p.astype(np.float64)
    np.testing.assert_allclose(maps["predictive_entropy"], -(p64 * np.log(p64)).sum(0), rtol=1e-5)
    np.testing.assert_allclose(maps["one_minus_max_prob"], 1.0 - p64.max(0), rtol=1e-6, atol=1e-7)
    assert all(m.dtype == np.float32 and m.shape == (4, 3, 2) for m in maps.values())


def test_derived_maps_multilabel_by_hand():
    rng = np.random.default_rng(1)
    p = rng.uniform(0.01, 0.99, (2, 4, 3, 2)).astype(np.float32)
    maps = derived_maps(_case(np.zeros((4, 3, 2), int), p > 0.5, p, multilabel=True))
    p64 = p.astype(np.float64)
    np.testing.assert_allclose(maps["predictive_entropy"], -(p64 * np.log(p64) + (1 - p64) * np.log(1 - p64)),
                               rtol=1e-5)
    np.testing.assert_allclose(maps["one_minus_max_prob"], 1.0 - np.maximum(p64, 1 - p64), rtol=1e-6, atol=1e-7)
    assert all(m.shape == (2, 4, 3, 2) for m in maps.values())


def test_derived_maps_keeps_given_maps_and_needs_probabilities():
    given = {"variance": np.ones((2, 2, 2), np.float32)}
    case = _case(np.zeros((2, 2, 2), int), np.zeros((2, 2, 2), int), _softmax_probs(np.random.default_rng(0), 2,
                                                                                       (2, 2, 2)), given)
    assert derived_maps(case) is case.maps
    assert derived_maps(_case(np.zeros((2, 2, 2), int), np.zeros((2, 2, 2), int))) == {}


def test_primary_measure():
    maps = {"variance": 1, "predictive_entropy": 2, "mutual_information": 3}
    assert primary_measure(maps, None) == "predictive_entropy"
    assert primary_measure(maps, "mutual_information") == "mutual_information"
    assert primary_measure({"variance": 1, "mutual_information": 3}, None) == "variance"  # the first map
    assert primary_measure({}, None) is None
    with pytest.raises(ValueError, match="measure 'expected_entropy' has no map"):
        primary_measure(maps, "expected_entropy")
    with pytest.raises(ValueError, match="available: none"):
        primary_measure({}, "variance")


# --- region pieces -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values, expected", [
    ([0.2, 0.4], 0.3), ([1.0, math.nan, 3.0], 2.0), ([math.inf, 1.0], 1.0), ([math.nan, math.nan], math.nan),
    ([], math.nan), ([5.0], 5.0),
])
def test_combined_score(values, expected):
    got = combined_score(values)
    assert isinstance(got, float)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, rel=1e-15)


def test_region_score_columns_by_hand():
    rng = np.random.default_rng(2)
    shape = (4, 4, 3)
    u = rng.random((2, *shape))
    pred = np.zeros((2, *shape), bool)
    pred[0, 1:3, 1:3, :] = True  # region B (channel 1) predicts nothing: fg_mean undefined
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        row = region_score_columns({"variance": u}, pred, ["A", "whole tumour"], patch_size=max(shape))
    assert any("fg_mean" in str(w.message) or "empty" in str(w.message).lower() for w in caught)
    assert list(row) == ["variance_mean", "variance_fg_mean", "variance_patch_mean",
                         "variance_mean_A", "variance_fg_mean_A", "variance_patch_mean_A",
                         "variance_mean_whole_tumour", "variance_fg_mean_whole_tumour",
                         "variance_patch_mean_whole_tumour"]
    assert row["variance_mean_A"] == pytest.approx(u[0].mean(), rel=1e-12)
    assert row["variance_mean_whole_tumour"] == pytest.approx(u[1].mean(), rel=1e-12)
    assert row["variance_fg_mean_A"] == pytest.approx(u[0][pred[0]].mean(), rel=1e-12)
    assert math.isnan(row["variance_fg_mean_whole_tumour"])
    assert row["variance_mean"] == pytest.approx((u[0].mean() + u[1].mean()) / 2, rel=1e-12)
    assert row["variance_fg_mean"] == pytest.approx(u[0][pred[0]].mean(), rel=1e-12)  # the defined region only
    assert row["variance_patch_mean"] == pytest.approx(
        (row["variance_patch_mean_A"] + row["variance_patch_mean_whole_tumour"]) / 2, rel=1e-12)


def test_region_score_columns_refuses_channel_mismatch():
    u = np.zeros((2, 3, 3))
    with pytest.raises(ValueError, match="pred has 2 region channel"):
        region_score_columns({"variance": u}, np.zeros((2, 3, 3), bool), ["A"])
    with pytest.raises(ValueError, match="the variance map has 2 region channel"):
        region_score_columns({"variance": u}, np.zeros((3, 3, 3), bool), ["A", "B", "C"])


# --- case_tasks --------------------------------------------------------------------------------------------------
def test_case_tasks_for_classes():
    rng = np.random.default_rng(3)
    p = _softmax_probs(rng, 3, (4, 3, 2))
    label = rng.integers(0, 3, (4, 3, 2))
    seg = p.argmax(0)
    act, tasks, maps = case_tasks(_case(label, seg, p), EvaluationConfig())
    assert act is CATEGORICAL and len(tasks) == 1
    t = tasks[0]
    assert t.name is None and t.num_classes == 3
    np.testing.assert_array_equal(t.pred, seg)
    np.testing.assert_array_equal(t.target, label)
    np.testing.assert_array_equal(t.probs, p)
    assert sorted(maps) == sorted(t.maps) == ["one_minus_max_prob", "predictive_entropy"]
    with pytest.raises(ValueError, match="class_names has 2 names for 3 classes"):
        case_tasks(_case(label, seg, p), EvaluationConfig(class_names=["bg", "a"]))
    # without probabilities the number of classes comes from the config
    act, tasks, maps = case_tasks(_case(label, seg), EvaluationConfig(num_classes=3))
    assert tasks[0].num_classes == 3 and tasks[0].probs is None and maps == {}


def _region_case(probs_channels: int = 3, multilabel: bool = True) -> LoadedCase:
    lab = np.zeros((6, 5, 4), np.int64)
    lab[1:5, 1:4, 1:3] = 2
    lab[2:4, 2:3, 1:2] = 1
    lab[3, 2, 2] = 4
    seg = np.stack([np.isin(lab, v) for v in ([1, 2, 4], [1, 4], [4])]).astype(np.uint8)
    seg[0, 0, 0, 0] = 1  # one false positive of WT
    rng = np.random.default_rng(4)
    probs = rng.uniform(0.05, 0.95, (probs_channels, *lab.shape)).astype(np.float32)
    return _case(lab, seg, probs, multilabel=multilabel)


def test_case_tasks_for_regions():
    config = EvaluationConfig(regions={"WT": [1, 2, 4], "TC": [1, 4], "ET": [4]})
    config.validate()
    case = _region_case()
    act, tasks, maps = case_tasks(case, config)
    assert act is BERNOULLI and [t.name for t in tasks] == ["WT", "TC", "ET"]
    for k, (t, labels) in enumerate(zip(tasks, ([1, 2, 4], [1, 4], [4]))):
        assert t.num_classes == 2
        np.testing.assert_array_equal(t.target.astype(bool), np.isin(case.label, labels))
        np.testing.assert_array_equal(t.pred.astype(bool), case.seg[k].astype(bool))
        np.testing.assert_allclose(t.probs[1], case.probs[k])
        np.testing.assert_allclose(t.probs[0], 1 - case.probs[k], rtol=1e-6)
        np.testing.assert_array_equal(t.maps["predictive_entropy"], maps["predictive_entropy"][k])
    np.testing.assert_array_equal(predicted_regions(case, config.regions), case.seg.astype(bool))


def test_case_tasks_for_regions_refusals():
    config = EvaluationConfig(regions={"WT": [1, 2, 4], "TC": [1, 4], "ET": [4]})
    config.validate()
    with pytest.raises(CaseError, match="the probabilities has 2 region channel"):
        case_tasks(_region_case(probs_channels=2), config)
    with pytest.raises(ValueError, match="multilabel=True"):
        case_tasks(_region_case(multilabel=False), config)


def test_predicted_regions_of_a_label_map_and_unclaimed_labels():
    spec = {"WT": [1, 2], "ET": [4]}
    lab = np.array([[0, 1, 2], [4, 3, 0]])
    case = LoadedCase("c", lab, lab, None, {}, np.eye(3), (1.0, 1.0), multilabel=True)
    np.testing.assert_array_equal(predicted_regions(case, spec), np.stack([np.isin(lab, [1, 2]), lab == 4]))
    config = EvaluationConfig(regions=spec)
    config.validate()
    assert unclaimed_case_labels(case, config) == [3]
    assert unclaimed_case_labels(case, EvaluationConfig()) == []


# --- CaseResult records ------------------------------------------------------------------------------------------
@pytest.fixture
def product_state_type():
    with volume_state_type("test.rows_volume") as cls:
        yield cls


def _hist(c: int, seed: int, cid: str = "c0") -> ConfidenceHistogram:
    rng = np.random.default_rng(seed)
    h = ConfidenceHistogram(c, n_fine_bins=32, per_case=True)
    h.update(_softmax_probs(rng, c, (3, 3))[None], rng.integers(0, c, (1, 3, 3)), case_ids=[cid])
    return h


def _through_npz(arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _same_hist(a: ConfidenceHistogram, b: ConfidenceHistogram) -> None:
    assert a.case_ids == b.case_ids and a.num_classes == b.num_classes
    for x, y in zip(a.state_dict().values(), b.state_dict().values()):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def test_case_result_record_round_trip(product_state_type, tmp_path):
    rng = np.random.default_rng(5)
    probs = _softmax_probs(rng, 3, (4, 3))
    label = rng.integers(0, 3, (4, 3))
    conformal = ConformalState({side: conformal_case_state(probs, label, side=side, grid=8)
                                for side in ("outer", "inner")}, ["variance"])
    files = CaseFiles("c0", tmp_path / "c0.nii.gz", seg=tmp_path / "c0_seg.nii.gz",
                      maps={"variance": tmp_path / "c0_variance.nii.gz"})
    result = CaseResult({"case": "c0", "dice": 0.75, "ece": math.nan, "measure": "variance"}, _hist(3, 0),
                        ["c0: a warning"], region_histograms={"WT": _hist(2, 1), "ET": _hist(2, 2)},
                        curves={"thresholds": [0.0, 50.0]}, unclaimed_labels=[np.int64(3)],
                        states={"volume": product_state_type([4, 5]), "conformal": conformal}, files=files,
                        num_classes=3)
    doc, arrays = result.to_record()
    text = json.dumps(doc)  # JSON data (NaN as Python's literal, as the resume cache writes it)
    assert doc["products"] == ["volume", "conformal"] and doc["num_classes"] == 3 and doc["unclaimed_labels"] == [3]
    assert {k.split("/")[0] for k in arrays} == {"histogram", "region_histograms", "product.conformal",
                                                 "product.volume"}
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in arrays.values())
    back = CaseResult.from_record(json.loads(text), _through_npz(arrays))
    assert back.row["case"] == "c0" and back.row["dice"] == 0.75 and math.isnan(back.row["ece"])
    assert back.warnings == ["c0: a warning"] and back.curves == {"thresholds": [0.0, 50.0]}
    assert back.unclaimed_labels == [3] and back.num_classes == 3 and back.files == files
    _same_hist(back.histogram, result.histogram)
    assert list(back.region_histograms) == ["WT", "ET"]
    for k in ("WT", "ET"):
        _same_hist(back.region_histograms[k], result.region_histograms[k])
    assert list(back.states["conformal"].sides) == ["outer", "inner"] and back.states["conformal"] == conformal
    assert list(back.states) == ["volume", "conformal"] and type(back.states["volume"]) is product_state_type
    assert back.states["volume"].voxels.tolist() == [4, 5]
    # once more: the record of the restored result is the same arrays
    doc2, arrays2 = back.to_record()
    assert sorted(arrays2) == sorted(arrays)
    for k in arrays:
        assert np.asarray(arrays2[k]).tobytes() == np.asarray(arrays[k]).tobytes(), k


def test_case_result_record_without_states():
    result = CaseResult({"case": "c1", "dice": 1.0}, None)
    doc, arrays = result.to_record()
    assert arrays == {} and doc["files"] is None and doc["num_classes"] is None and doc["products"] == []
    back = CaseResult.from_record(doc, {})
    assert back.histogram is None and back.region_histograms is None
    assert back.states == {} and back.files is None and back.num_classes is None and back.row == result.row


def test_case_result_record_refuses_a_missing_product_state(product_state_type):
    result = CaseResult({"case": "c1"}, None, states={"volume": product_state_type([1])})
    doc, arrays = result.to_record()
    doc["products"] = ["volume", "gone"]
    with pytest.raises(KeyError):
        CaseResult.from_record(doc, arrays)
    arrays = dict(arrays)
    arrays["product.volume/__type__"] = np.array("no.such.state")
    with pytest.raises(ValueError, match="unknown state type"):
        CaseResult.from_record({**doc, "products": ["volume"]}, arrays)


def test_all_states_names():
    result = CaseResult({"case": "c"}, _hist(2, 0), region_histograms={"A": _hist(2, 1)}, states={})
    states = result.all_states()
    assert list(states) == ["histogram", "region_histograms"]
    assert list(states["region_histograms"]) == ["A"]
