"""Tests of monai_unc.transforms against brute-force numpy references, MONAI inversion and saving."""

from __future__ import annotations

import math
import re
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from monai.data import MetaTensor
from monai.transforms import Compose, Invertd, Orientationd, SaveImaged, Spacingd, SpatialPadd

import monai_unc.transforms as T
from monai_unc.transforms import (
    AggregateUncertainty,
    AggregateUncertaintyd,
    ErrorMap,
    ErrorMapd,
    SamplesToLabels,
    SamplesToLabelsd,
    UncertaintyMeasures,
    UncertaintyMeasuresd,
    UncertaintyToDiscrete,
    UncertaintyToDiscreted,
    error_map,
)


# ----------------------------------------------------------------------------------------------- references
def _entropy_loop(p: np.ndarray) -> float:
    """-sum_c p_c log p_c of one voxel, 0 log 0 = 0, by an explicit loop."""
    h = 0.0
    for v in p:
        if v > 0:
            h -= v * math.log(v)
    return h


def _reference_measures(samples: np.ndarray) -> dict[str, np.ndarray]:
    """PE, EE, MI, 1 - max p, variance of samples (S, C, *spatial) voxel by voxel in float64."""
    s = samples.astype(np.float64)
    n_s, n_c = s.shape[:2]
    spatial = s.shape[2:]
    names = ("predictive_entropy", "expected_entropy", "mutual_information", "one_minus_max_prob", "variance")
    out = {k: np.zeros((1, *spatial)) for k in names}
    out["pred"] = np.zeros((n_c, *spatial))
    for idx in np.ndindex(*spatial):
        vox = s[(slice(None), slice(None), *idx)]  # (S, C)
        mean = [sum(vox[j, c] for j in range(n_s)) / n_s for c in range(n_c)]
        pe = _entropy_loop(mean)
        ee = sum(_entropy_loop(vox[j]) for j in range(n_s)) / n_s
        var = sum(sum((vox[j, c] - mean[c]) ** 2 for j in range(n_s)) / n_s for c in range(n_c)) / n_c
        out["pred"][(slice(None), *idx)] = mean
        out["predictive_entropy"][(0, *idx)] = pe
        out["expected_entropy"][(0, *idx)] = ee
        out["mutual_information"][(0, *idx)] = max(pe - ee, 0.0)
        out["one_minus_max_prob"][(0, *idx)] = 1 - max(mean)
        out["variance"][(0, *idx)] = var
    return out


def _random_samples(shape: tuple[int, ...], n_samples: int = 5, n_classes: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n_samples, n_classes, *shape)) * 2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def _meta_tensor(x: np.ndarray, affine: np.ndarray | None = None, name: str = "case.nii.gz") -> MetaTensor:
    aff = np.diag([1.5, 1.0, 2.0, 1.0]) if affine is None else affine
    return MetaTensor(torch.from_numpy(x), meta={"affine": torch.as_tensor(aff), "filename_or_obj": name})


# ----------------------------------------------------------------------------------------------- measures
@pytest.mark.parametrize("spatial", [(5, 4), (4, 3, 3)])
def test_measures_from_samples_match_voxel_loop(spatial):
    samples = _random_samples(spatial, n_samples=5, n_classes=3)
    ref = _reference_measures(samples)
    out = UncertaintyMeasuresd("samples")({"samples": torch.from_numpy(samples)})
    for key, expected in ref.items():
        assert out[key].shape == expected.shape, key
        np.testing.assert_allclose(out[key].numpy(), expected, atol=2e-6, err_msg=key)
    assert out["samples"] is not None  # the source stays


def test_measures_normalize_and_numpy_in_numpy_out():
    samples = _random_samples((4, 4, 2), n_classes=4)
    raw = UncertaintyMeasuresd("s")({"s": samples})
    norm = UncertaintyMeasuresd("s", normalize=True)({"s": samples})
    assert isinstance(raw["predictive_entropy"], np.ndarray)
    for k in ("predictive_entropy", "expected_entropy", "mutual_information"):
        np.testing.assert_allclose(norm[k], raw[k] / math.log(4), rtol=1e-6)
    np.testing.assert_allclose(norm["one_minus_max_prob"], raw["one_minus_max_prob"])  # not an entropy: unchanged
    assert float(norm["predictive_entropy"].max()) <= 1.0 + 1e-6


def test_measures_keep_meta_and_applied_operations():
    samples = _meta_tensor(_random_samples((4, 4, 4)))
    samples.applied_operations = [{"class": "Dummy", "id": 1}]
    out = UncertaintyMeasuresd("samples", measures=["mutual_information"])({"samples": samples})
    mi = out["mutual_information"]
    assert isinstance(mi, MetaTensor)
    assert mi.meta["filename_or_obj"] == "case.nii.gz"
    torch.testing.assert_close(mi.affine, samples.affine)
    assert mi.applied_operations == samples.applied_operations
    mi.meta["filename_or_obj"] = "changed"
    assert samples.meta["filename_or_obj"] == "case.nii.gz"  # a copy, not shared


def test_measures_from_probs_with_and_without_statistics():
    samples = _random_samples((3, 4, 5), n_samples=6)
    ref = _reference_measures(samples)
    mean = samples.astype(np.float64).mean(0)
    ee = ref["expected_entropy"]
    mean_sq = (samples.astype(np.float64) ** 2).mean(0)
    plain = UncertaintyMeasuresd("p", input_type="probs")({"p": torch.from_numpy(mean)})
    assert sorted(k for k in plain if k != "p") == ["one_minus_max_prob", "predictive_entropy"]
    np.testing.assert_allclose(plain["predictive_entropy"].numpy(), ref["predictive_entropy"], atol=1e-9)
    np.testing.assert_allclose(plain["one_minus_max_prob"].numpy(), ref["one_minus_max_prob"], atol=1e-9)
    full = UncertaintyMeasuresd("p", input_type="probs", expected_entropy_key="ee", mean_sq_key="sq")(
        {"p": torch.from_numpy(mean), "ee": torch.from_numpy(ee), "sq": torch.from_numpy(mean_sq)}
    )
    for k in ("expected_entropy", "mutual_information", "variance"):
        np.testing.assert_allclose(full[k].numpy(), ref[k], atol=1e-7, err_msg=k)


def test_measures_constant_samples_have_zero_mutual_information():
    one = _random_samples((4, 4), n_samples=1)
    samples = np.repeat(one, 7, axis=0)
    out = UncertaintyMeasuresd("s")({"s": samples})
    np.testing.assert_allclose(out["mutual_information"], 0.0, atol=1e-7)
    np.testing.assert_allclose(out["variance"], 0.0, atol=1e-7)
    np.testing.assert_allclose(out["predictive_entropy"], out["expected_entropy"], atol=1e-7)


def test_measures_certain_one_hot_samples_give_zero_entropy():
    samples = np.zeros((3, 2, 4, 4), dtype=np.float32)
    samples[:, 1] = 1.0
    out = UncertaintyMeasuresd("s")({"s": samples})
    for k in ("predictive_entropy", "expected_entropy", "mutual_information", "one_minus_max_prob", "variance"):
        np.testing.assert_array_equal(out[k], 0.0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_samples=st.integers(1, 6), n_classes=st.integers(2, 4))
def test_measures_properties(seed, n_samples, n_classes):
    """0 <= MI <= PE <= log C, EE <= PE, and sample order does not matter."""
    samples = _random_samples((3, 3), n_samples=n_samples, n_classes=n_classes, seed=seed)
    out = UncertaintyMeasuresd("s")({"s": samples})
    perm = np.random.default_rng(seed).permutation(n_samples)
    shuffled = UncertaintyMeasuresd("s")({"s": samples[perm]})
    assert (out["mutual_information"] >= 0).all()
    assert (out["mutual_information"] <= out["predictive_entropy"] + 1e-6).all()
    assert (out["predictive_entropy"] <= math.log(n_classes) + 1e-6).all()
    assert (out["expected_entropy"] <= out["predictive_entropy"] + 1e-6).all()
    for k in out:
        if k != "s":
            np.testing.assert_allclose(out[k], shuffled[k], atol=1e-6, err_msg=k)


def test_measures_output_key_templates():
    d = {"a": _random_samples((3, 3)), "b": _random_samples((3, 3), seed=1)}
    out = UncertaintyMeasuresd(["a", "b"], measures=["mutual_information"], output_key="{key}_{measure}")(d)
    assert {"a_mutual_information", "b_mutual_information"} <= set(out)
    assert not np.allclose(out["a_mutual_information"], out["b_mutual_information"])
    with pytest.raises(ValueError, match="must contain '\\{key\\}'"):
        UncertaintyMeasuresd(["a", "b"])
    with pytest.raises(ValueError, match="must contain '\\{measure\\}'"):
        UncertaintyMeasuresd("a", output_key="u")
    single = UncertaintyMeasuresd("a", measures="one_minus_max_prob", output_key="u")(d)
    np.testing.assert_allclose(single["u"], _reference_measures(d["a"])["one_minus_max_prob"], atol=1e-6)


def test_measures_bad_input():
    good = _random_samples((3, 3))
    with pytest.raises(ValueError, match="input_type"):
        UncertaintyMeasuresd("s", input_type="logits")
    with pytest.raises(ValueError, match="measures must be among"):
        UncertaintyMeasuresd("s", measures=["entropy"])
    with pytest.raises(ValueError, match="expected_entropy_key"):
        UncertaintyMeasuresd("p", input_type="probs", measures=["mutual_information"])
    with pytest.raises(ValueError, match="mean_sq_key"):
        UncertaintyMeasuresd("p", input_type="probs", measures=["variance"])
    with pytest.raises(ValueError, match="only apply to input_type='probs'"):
        UncertaintyMeasuresd("s", expected_entropy_key="ee")
    with pytest.raises(ValueError, match="s must sum to 1"):
        UncertaintyMeasuresd("s")({"s": good * 0.5})
    with pytest.raises(ValueError, match=r"s must lie in \[0, 1\]"):
        UncertaintyMeasuresd("s")({"s": good * 3})  # logits-like values
    with pytest.raises(ValueError, match="p must sum to 1"):
        UncertaintyMeasuresd("p", input_type="probs")({"p": good[0] * 0.5})
    bad = good.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        UncertaintyMeasuresd("s")({"s": bad})
    with pytest.raises(ValueError, match="at least 2 classes"):
        UncertaintyMeasuresd("s")({"s": np.ones((2, 1, 3, 3), dtype=np.float32)})
    with pytest.raises(ValueError, match="samples \\(S, C, \\*spatial\\)"):
        UncertaintyMeasuresd("s")({"s": np.ones((2, 3), dtype=np.float32)})
    with pytest.raises(TypeError, match="floating point"):
        UncertaintyMeasuresd("s")({"s": np.ones((2, 2, 3, 3), dtype=np.int64)})
    p = good.mean(0)
    with pytest.raises(ValueError, match="must have shape"):
        UncertaintyMeasuresd("p", input_type="probs", expected_entropy_key="ee")({"p": p, "ee": np.zeros((2, 3, 3))})


def test_measures_missing_keys():
    with pytest.raises(KeyError):
        UncertaintyMeasuresd("samples")({"other": 1})
    d = {"other": 1}
    assert UncertaintyMeasuresd("samples", allow_missing_keys=True)(d) == d


# ----------------------------------------------------------------------------------------------- error map
def test_error_map_matches_loop_and_handles_ties_and_one_hot():
    rng = np.random.default_rng(3)
    probs = rng.dirichlet([1, 1, 1], size=(4, 5)).transpose(2, 0, 1).astype(np.float32)  # (3, 4, 5)
    probs[:, 0, 0] = [0.4, 0.4, 0.2]  # tie between classes 0 and 1: the first maximum (0) wins
    label = rng.integers(0, 3, size=(1, 4, 5))
    label[0, 0, 0] = 0
    expected = np.zeros((1, 4, 5), dtype=np.float32)
    for i, j in np.ndindex(4, 5):
        best = max(range(3), key=lambda c: (probs[c, i, j], -c))
        expected[0, i, j] = float(best != label[0, i, j])
    np.testing.assert_array_equal(error_map(probs, label), expected)
    assert expected[0, 0, 0] == 0.0
    one_hot = np.eye(3, dtype=np.float32)[label[0]].transpose(2, 0, 1)
    np.testing.assert_array_equal(error_map(torch.from_numpy(probs), one_hot).numpy(), expected)
    pred_labels = probs.argmax(0)[None]
    np.testing.assert_array_equal(error_map(pred_labels, label), expected)


def test_error_mapd_all_correct_meta_and_errors():
    label = np.array([[[0, 1], [2, 1]]])
    pred = _meta_tensor(np.eye(3, dtype=np.float32)[label[0]].transpose(2, 0, 1))
    out = ErrorMapd()({"pred": pred, "label": torch.from_numpy(label)})
    assert isinstance(out["error"], MetaTensor)
    assert out["error"].shape == (1, 2, 2)
    assert float(out["error"].sum()) == 0.0
    with pytest.raises(ValueError, match="same spatial shape"):
        ErrorMapd()({"pred": pred, "label": np.zeros((1, 3, 2))})
    with pytest.raises(ValueError, match="integer class labels"):
        ErrorMapd()({"pred": pred, "label": np.full((1, 2, 2), 0.5)})
    with pytest.raises(KeyError):
        ErrorMapd()({"pred": pred})
    assert "error" not in ErrorMapd(allow_missing_keys=True)({"pred": pred})


# ----------------------------------------------------------------------------------------------- aggregation
def test_aggregate_mean_masked_patch_and_meta():
    rng = np.random.default_rng(5)
    u = rng.random((1, 12, 11, 10)).astype(np.float32)
    seg = np.zeros((2, 12, 11, 10), dtype=np.float32)
    seg[0] = 1
    seg[:, 2:6, 3:7, 1:4] = [[[[0]]], [[[1]]]]  # one-hot: foreground in a box
    mu = _meta_tensor(u)
    out = AggregateUncertaintyd("u", method="mean", mask_key="seg")({"u": mu, "seg": seg})
    assert out["u_mean"].dtype == torch.float64 and out["u_mean"].ndim == 0
    np.testing.assert_allclose(float(out["u_mean"]), u[0, 2:6, 3:7, 1:4].astype(np.float64).mean(), rtol=1e-6)
    assert mu.meta["u_mean"] == pytest.approx(float(out["u_mean"]))
    plain = AggregateUncertaintyd("u")({"u": u})
    np.testing.assert_allclose(float(plain["u_mean"]), u.astype(np.float64).mean(), rtol=1e-6)
    patch = AggregateUncertaintyd("u", method="patch_sum", patch_size=3)({"u": u})
    brute = max(
        u[0, i : i + 3, j : j + 3, k : k + 3].astype(np.float64).sum()
        for i in range(10)
        for j in range(9)
        for k in range(8)
    )
    np.testing.assert_allclose(float(patch["u_patch_sum"]), brute, rtol=1e-6)
    box_mean = AggregateUncertaintyd("u", method="patch_mean", patch_size=3)({"u": u})
    np.testing.assert_allclose(float(box_mean["u_patch_mean"]), brute / 27, rtol=1e-6)
    assert "u_patch" not in patch and "u_patch" not in box_mean


def test_aggregate_empty_mask_is_nan_with_warning_and_bad_input():
    u = np.random.default_rng(0).random((1, 4, 4)).astype(np.float32)
    with pytest.warns(UserWarning, match="empty mask"):
        out = AggregateUncertaintyd("u", mask_key="m")({"u": u, "m": np.zeros((1, 4, 4))})
    assert math.isnan(float(out["u_mean"]))
    with pytest.raises(ValueError, match="method"):
        AggregateUncertaintyd("u", method="median")
    with pytest.raises(ValueError, match="threshold"):
        AggregateUncertaintyd("u", method="threshold")
    with pytest.raises(ValueError, match="one-channel map"):
        AggregateUncertaintyd("u")({"u": np.zeros((2, 4, 4), dtype=np.float32)})
    with pytest.raises(KeyError, match="mask_key"):
        AggregateUncertaintyd("u", mask_key="m")({"u": u})
    with pytest.raises(ValueError, match="spatial shape"):
        AggregateUncertaintyd("u", mask_key="m")({"u": u, "m": np.ones((1, 3, 4))})
    thr = AggregateUncertaintyd("u", method="threshold", threshold=0.5)({"u": u})
    np.testing.assert_allclose(float(thr["u_threshold"]), u[u >= 0.5].astype(np.float64).mean(), rtol=1e-6)


# ----------------------------------------------------------------------------------------------- discretisation
def test_uncertainty_to_discrete_threshold_and_quantile():
    u = np.arange(100, dtype=np.float32).reshape(1, 10, 10) / 100
    fixed = UncertaintyToDiscreted("u", threshold=0.9, output_key="flag")({"u": u})
    # compared exactly: u[90] = float32(0.9) = 0.89999998 is below 0.9 (numpy's u >= 0.9 rounds 0.9 to float32)
    np.testing.assert_array_equal(fixed["flag"], (u.astype(np.float64) >= 0.9).astype(np.uint8))
    assert int(fixed["flag"].sum()) == 9
    assert fixed["u"] is u  # the map itself is kept with a separate output key
    q = UncertaintyToDiscreted("u", quantile=0.95)({"u": torch.from_numpy(u)})
    assert int(q["u"].sum()) == 5  # the 5 % most uncertain voxels
    const = UncertaintyToDiscreted("u", quantile=0.5)({"u": np.full((1, 3, 3), 0.2, dtype=np.float32)})
    np.testing.assert_array_equal(const["u"], 1)  # ties at the quantile are flagged
    with pytest.raises(ValueError, match="exactly one"):
        UncertaintyToDiscreted("u")
    with pytest.raises(ValueError, match="exactly one"):
        UncertaintyToDiscreted("u", threshold=0.1, quantile=0.5)
    with pytest.raises(ValueError, match="quantile"):
        UncertaintyToDiscreted("u", quantile=1.5)
    with pytest.raises(ValueError, match="non-finite"):
        UncertaintyToDiscreted("u", threshold=0.1)({"u": np.full((1, 2, 2), np.nan, dtype=np.float32)})


@pytest.mark.parametrize("container", [np.asarray, torch.from_numpy])
def test_uncertainty_to_discrete_compares_the_exact_values(container):
    """``u >= 0.7`` on the stored values: float32(0.7) is 0.69999999, below 0.7, so it is not flagged; rounding the
    threshold to float32 first (numpy's and torch's ``u >= 0.7``) flagged it."""
    f32 = np.float32(0.7)
    assert float(f32) < 0.7
    u = np.array([[[np.nextafter(f32, np.float32(0)), f32, np.nextafter(f32, np.float32(1)), 0.9]]], np.float32)
    got = UncertaintyToDiscrete(threshold=0.7)(container(u))
    np.testing.assert_array_equal(np.asarray(got), [[[0, 0, 1, 1]]])
    d = UncertaintyToDiscreted("u", threshold=0.7)({"u": container(u)})
    np.testing.assert_array_equal(np.asarray(d["u"]), [[[0, 0, 1, 1]]])


def test_samples_to_labels():
    samples = _random_samples((4, 3, 2), n_samples=4)
    out = SamplesToLabelsd("s", output_key="labels")({"s": _meta_tensor(samples)})
    expected = np.zeros((4, 4, 3, 2), dtype=np.int64)
    for s in range(4):
        for idx in np.ndindex(4, 3, 2):
            expected[(s, *idx)] = int(np.argmax(samples[(s, slice(None), *idx)]))
    np.testing.assert_array_equal(out["labels"].numpy(), expected)
    assert isinstance(out["labels"], MetaTensor)
    with pytest.raises(ValueError, match="C>=2"):
        SamplesToLabelsd("s")({"s": np.ones((2, 1, 3, 3), dtype=np.float32)})


# ----------------------------------------------------------------------------------------------- array versions
def _same(a, b):
    """Same container, dtype, values, and (for MetaTensors) the same meta and applied operations."""
    assert type(a) is type(b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
        return
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(torch.as_tensor(a).as_subclass(torch.Tensor), torch.as_tensor(b).as_subclass(torch.Tensor))
    if isinstance(a, MetaTensor):
        assert a.meta.keys() == b.meta.keys()
        for k in a.meta:
            if isinstance(a.meta[k], torch.Tensor):
                assert torch.equal(a.meta[k], b.meta[k]), k
            else:
                assert a.meta[k] == b.meta[k], k
        assert a.applied_operations == b.applied_operations


def _containers(x: np.ndarray):
    """The same array as numpy, plain tensor and MetaTensor with meta and one applied operation."""
    meta = _meta_tensor(x.copy())
    meta.applied_operations = [{"class": "Dummy", "id": 7}]
    return {"numpy": x, "tensor": torch.from_numpy(x.copy()), "meta": meta}


@pytest.mark.parametrize("container", ["numpy", "tensor", "meta"])
def test_array_measures_equal_dict_measures_and_reference(container):
    samples = _containers(_random_samples((4, 3, 3), n_samples=4))[container]
    array = UncertaintyMeasures(normalize=True)(samples)
    d = UncertaintyMeasuresd("s", normalize=True)({"s": samples})
    assert sorted(array) == sorted(T._MEASURES)
    for k, v in array.items():
        _same(v, d[k])
    ref = _reference_measures(np.asarray(torch.as_tensor(samples).as_subclass(torch.Tensor)))
    np.testing.assert_allclose(np.asarray(array["one_minus_max_prob"]), ref["one_minus_max_prob"], atol=2e-6)
    np.testing.assert_allclose(np.asarray(array["mutual_information"]), ref["mutual_information"] / math.log(3),
                               atol=2e-6)
    if container == "meta":
        array["pred"].meta["filename_or_obj"] = "changed"
        assert samples.meta["filename_or_obj"] == "case.nii.gz"  # a copy, not shared


def test_array_measures_from_probs_and_statistics_equal_dict():
    samples = _random_samples((3, 4, 5), n_samples=6).astype(np.float64)
    mean, mean_sq = samples.mean(0), (samples**2).mean(0)
    ee = _reference_measures(samples)["expected_entropy"]
    probs = _meta_tensor(mean)
    array = UncertaintyMeasures(input_type="probs")(probs, expected_entropy=ee, mean_sq=mean_sq)
    d = UncertaintyMeasuresd("p", input_type="probs", expected_entropy_key="ee", mean_sq_key="sq")(
        {"p": probs, "ee": ee, "sq": mean_sq}
    )
    assert sorted(array) == sorted(T._MEASURES[1:])  # everything but pred, which is the input
    for k, v in array.items():
        _same(v, d[k])
    plain = UncertaintyMeasures(input_type="probs")(mean)
    assert sorted(plain) == ["one_minus_max_prob", "predictive_entropy"]
    with pytest.raises(ValueError, match="without expected_entropy"):
        UncertaintyMeasures(measures="mutual_information", input_type="probs")(mean)
    with pytest.raises(ValueError, match="without mean_sq"):
        UncertaintyMeasures(measures="variance", input_type="probs")(mean, expected_entropy=ee)
    with pytest.raises(ValueError, match="only apply to input_type='probs'"):
        UncertaintyMeasures()(samples, expected_entropy=ee)
    with pytest.raises(ValueError, match="img must sum to 1"):
        UncertaintyMeasures(input_type="probs")(mean * 0.5)
    with pytest.raises(ValueError, match="measures must be among"):
        UncertaintyMeasures(measures="entropy")
    with pytest.raises(ValueError, match="selects nothing"):
        UncertaintyMeasures(measures=[])


def test_deprecated_measure_name_max_softmax_still_works():
    samples = _random_samples((3, 3))
    ref = _reference_measures(samples)["one_minus_max_prob"]
    with pytest.warns(DeprecationWarning, match="'max_softmax' is deprecated"):
        d = UncertaintyMeasuresd("s", measures=["max_softmax"])({"s": samples})
    np.testing.assert_allclose(d["one_minus_max_prob"], ref, atol=1e-6)
    with pytest.warns(DeprecationWarning, match="'max_softmax' is deprecated"):
        a = UncertaintyMeasures(measures="max_softmax")(samples)
    assert list(a) == ["one_minus_max_prob"]
    np.testing.assert_array_equal(a["one_minus_max_prob"], d["one_minus_max_prob"])


@pytest.mark.parametrize("container", ["numpy", "tensor", "meta"])
def test_array_error_map_equals_dict(container):
    rng = np.random.default_rng(4)
    probs = _containers(rng.dirichlet([1, 1, 1], size=(4, 5)).transpose(2, 0, 1).astype(np.float32))[container]
    label = rng.integers(0, 3, size=(1, 4, 5))
    array = ErrorMap()(probs, label)
    _same(array, ErrorMapd()({"pred": probs, "label": label})["error"])
    np.testing.assert_array_equal(np.asarray(torch.as_tensor(array).as_subclass(torch.Tensor)),
                                  error_map(np.asarray(torch.as_tensor(probs).as_subclass(torch.Tensor)), label))


@pytest.mark.parametrize("container", ["numpy", "tensor", "meta"])
@pytest.mark.filterwarnings("ignore:aggregate\\(method=.sum.\\):UserWarning")
@pytest.mark.parametrize("method", ["mean", "sum", "patch_sum", "patch_mean", "threshold"])
def test_array_aggregate_equals_dict(container, method):
    rng = np.random.default_rng(6)
    u = _containers(rng.random((1, 9, 8, 7)).astype(np.float32))[container]
    mask = np.zeros((1, 9, 8, 7), dtype=np.uint8)
    mask[:, 2:7, 1:6, 1:5] = 1
    kw = {"patch_size": 3, "threshold": 0.5 if method == "threshold" else None}  # other methods refuse a threshold
    array = AggregateUncertainty(method, **kw)(u, mask=mask)
    d = AggregateUncertaintyd("u", method=method, mask_key="m", **kw)({"u": u, "m": mask})
    assert array.dtype == torch.float64 and array.ndim == 0
    assert torch.equal(array, d[f"u_{method}"])
    if container == "meta":  # the dictionary version also records the score in the map's meta, the array one does not
        assert u.meta[f"u_{method}"] == float(array)
        v = _meta_tensor(np.asarray(u.as_tensor()))
        AggregateUncertainty(method, **kw)(v)
        assert f"u_{method}" not in v.meta
    vals = np.asarray(torch.as_tensor(u).as_subclass(torch.Tensor), dtype=np.float64)[mask.astype(bool)]
    if method == "mean":
        np.testing.assert_allclose(float(array), vals.mean(), rtol=1e-9)
    elif method == "sum":
        np.testing.assert_allclose(float(array), vals.sum(), rtol=1e-9)
    elif method == "threshold":
        np.testing.assert_allclose(float(array), vals[vals >= 0.5].mean(), rtol=1e-9)
    with pytest.raises(ValueError, match="img must be a one-channel map"):
        AggregateUncertainty(method, **kw)(np.zeros((2, 4, 4), dtype=np.float32))


@pytest.mark.parametrize("container", ["numpy", "tensor", "meta"])
def test_array_discrete_and_samples_to_labels_equal_dict(container):
    u = _containers((np.arange(60, dtype=np.float32).reshape(1, 3, 4, 5) % 7) / 7)[container]
    for kw in ({"threshold": 0.5}, {"quantile": 0.8}):
        array = UncertaintyToDiscrete(**kw)(u)
        _same(array, UncertaintyToDiscreted("u", output_key="flag", **kw)({"u": u})["flag"])
        plain = np.asarray(torch.as_tensor(u).as_subclass(torch.Tensor))
        t = kw.get("threshold", np.quantile(plain.astype(np.float64), kw.get("quantile", 0.0)))
        np.testing.assert_array_equal(np.asarray(torch.as_tensor(array).as_subclass(torch.Tensor)), plain >= t)
    samples = _containers(_random_samples((4, 3, 2), n_samples=3))[container]
    labels = SamplesToLabels()(samples)
    _same(labels, SamplesToLabelsd("s", output_key="l")({"s": samples})["l"])
    assert tuple(labels.shape) == (3, 4, 3, 2)
    with pytest.raises(ValueError, match="exactly one"):
        UncertaintyToDiscrete()
    with pytest.raises(ValueError, match="img must be samples"):
        SamplesToLabels()(np.ones((2, 1, 3), dtype=np.float32))


def test_dict_transforms_call_their_array_version():
    pairs = {
        UncertaintyMeasuresd("s"): UncertaintyMeasures,
        ErrorMapd(): ErrorMap,
        AggregateUncertaintyd("u"): AggregateUncertainty,
        UncertaintyToDiscreted("u", threshold=0.5): UncertaintyToDiscrete,
        SamplesToLabelsd("s"): SamplesToLabels,
    }
    for dict_version, array_class in pairs.items():
        assert isinstance(dict_version.transform, array_class)
        assert type(dict_version).__name__ == array_class.__name__ + "d"
        assert array_class.__name__ in T.__all__ and type(dict_version).__name__ in T.__all__


def test_docs_transforms_example_runs(capsys):
    """The transforms example of docs/monai_integration.md runs as written and prints what it says."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "monai_integration.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "UncertaintyMeasures(" in b]
    assert len(blocks) == 1, "docs/monai_integration.md needs one example of the array transforms"
    exec(compile(blocks[0], "docs/monai_integration.md", "exec"), {"__name__": "__docs__"})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "(1, 16, 16, 16) case0.nii.gz True"
    n_flagged = int(out[2].split()[2])
    assert 0.05 * 4096 <= n_flagged <= 0.05 * 4096 + 1  # quantile ties aside, the 5 % most uncertain voxels


# ----------------------------------------------------------------------------------------------- inversion
def _preprocessed(samples_orig: np.ndarray, transform: Compose, affine: np.ndarray):
    """Apply ``transform`` to an image and to the samples (as channels of one image) the same way."""
    n_s, n_c = samples_orig.shape[:2]
    image = _meta_tensor(samples_orig[0, :1].copy(), affine)
    stacked = _meta_tensor(samples_orig.reshape(n_s * n_c, *samples_orig.shape[2:]).copy(), affine)
    img_pre = transform({"image": image})["image"]
    stk_pre = transform({"image": stacked})["image"]
    samples_pre = MetaTensor(stk_pre.as_tensor().reshape(n_s, n_c, *stk_pre.shape[1:]), meta=dict(img_pre.meta))
    return img_pre, samples_pre


def test_maps_invert_exactly_through_orientation_and_padding(tmp_path):
    """Maps computed after an exactly invertible preprocessing and inverted with Invertd equal the maps
    computed on the original grid; SaveImaged writes them with the original affine."""
    affine = np.array([[1.5, 0, 0, -10], [0, 1.0, 0, 4], [0, 0, 2.0, 7], [0, 0, 0, 1]], dtype=np.float64)
    samples = _random_samples((6, 5, 4), n_samples=4, seed=11)
    pad = SpatialPadd("image", spatial_size=(8, 8, 8), mode="replicate")  # padded samples stay probabilities
    pre = Compose([Orientationd("image", axcodes="LPI"), pad])
    img_pre, samples_pre = _preprocessed(samples, pre, affine)
    assert tuple(img_pre.shape[1:]) == (8, 8, 8)
    maps = ["predictive_entropy", "mutual_information", "one_minus_max_prob"]
    data = UncertaintyMeasuresd("samples", measures=maps)({"image": img_pre, "samples": samples_pre})
    inv = Invertd(maps, transform=pre, orig_keys="image", nearest_interp=False)(data)
    direct = UncertaintyMeasuresd("samples", measures=maps)({"samples": samples})
    for k in maps:
        assert tuple(inv[k].shape) == (1, 6, 5, 4), k
        np.testing.assert_allclose(inv[k].numpy(), direct[k], atol=1e-6, err_msg=k)
        np.testing.assert_allclose(inv[k].affine.numpy(), affine)
    inv["mutual_information"].meta["filename_or_obj"] = str(tmp_path / "case.nii.gz")
    SaveImaged("mutual_information", output_dir=tmp_path / "out", output_postfix="mi", separate_folder=False,
               print_log=False)(inv)
    saved = nib.load(tmp_path / "out" / "case_mi.nii.gz")
    np.testing.assert_allclose(saved.affine, affine)
    np.testing.assert_allclose(np.asarray(saved.dataobj)[None], direct["mutual_information"], atol=1e-6)


def test_maps_invert_through_resampling_geometry():
    affine = np.diag([1.0, 1.0, 3.0, 1.0])
    samples = _random_samples((8, 8, 4), n_samples=3, seed=2)
    pre = Compose([Spacingd("image", pixdim=(2.0, 2.0, 1.5), mode="bilinear")])
    img_pre, samples_pre = _preprocessed(samples, pre, affine)
    data = UncertaintyMeasuresd("samples", measures="predictive_entropy")({"image": img_pre, "samples": samples_pre})
    assert tuple(data["predictive_entropy"].shape[1:]) == tuple(img_pre.shape[1:]) != (8, 8, 4)
    inv = Invertd("predictive_entropy", transform=pre, orig_keys="image")(data)
    assert tuple(inv["predictive_entropy"].shape) == (1, 8, 8, 4)
    np.testing.assert_allclose(inv["predictive_entropy"].affine.numpy(), affine, atol=1e-6)
    assert float(inv["predictive_entropy"].min()) >= -1e-6
