"""Confidence histograms and the ECE family against independent float64 references, netcal and scikit-learn."""

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from netcal.metrics import ACE as NetcalACE
from netcal.metrics import ECE as NetcalECE
from netcal.metrics import MCE as NetcalMCE
from sklearn.metrics import brier_score_loss, log_loss

from monai_unc.io import save_state
from monai_unc.measures import entropy
from monai_unc.metrics.calibration import (
    DEFAULT_FINE_BINS,
    ConfidenceHistogram,
    ace,
    all_label_ece,
    brier,
    calibration_metrics,
    classwise_ece,
    ece,
    mce,
    nll,
    reliability_curve,
    uce,
)


# ---------------------------------------------------------------------------------------------------------------
# independent float64 reference: explicit loops over bins on the raw voxels
# ---------------------------------------------------------------------------------------------------------------
def ref_binned(values, hits, n_bins, min_count=0, weights=None, reduction="expected"):
    """Calibration gap of ``values`` (in [0, 1]) against 0/1 ``hits`` with equal-width bins [b/n, (b+1)/n)."""
    values = np.clip(np.asarray(values, dtype=np.float64), 0.0, 1.0)
    hits = np.asarray(hits, dtype=np.float64)
    w = np.ones_like(values) if weights is None else np.asarray(weights, dtype=np.float64)
    bins = np.minimum(np.floor(values * n_bins).astype(np.int64), n_bins - 1)
    gaps, mass = [], []
    for b in range(n_bins):
        sel = bins == b
        if sel.sum() < max(1, min_count) or w[sel].sum() == 0:
            continue
        m = w[sel].sum()
        gaps.append(abs(np.sum(w[sel] * hits[sel]) / m - np.sum(w[sel] * values[sel]) / m))
        mass.append(m)
    if not gaps:
        return math.nan
    gaps, mass = np.array(gaps), np.array(mass)
    if reduction == "expected":
        return float((gaps * mass).sum() / mass.sum())
    if reduction == "average":
        return float(gaps.mean())
    return float(gaps.max())


def flat(probs, labels):
    """(N, C) probabilities and (N,) labels from (B, C, *spatial) and (B, *spatial)."""
    p = np.moveaxis(np.asarray(probs, dtype=np.float64), 1, -1).reshape(-1, probs.shape[1])
    return p, np.asarray(labels).reshape(-1)


def ref_metrics(probs, labels, n_bins=15, min_count=0, weights=None):
    p, y = flat(probs, labels)
    n_cls = p.shape[1]
    w = None if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    ww = np.ones(len(y)) if w is None else w
    conf, pred = p.max(1), p.argmax(1)
    correct = pred == y
    onehot = np.arange(n_cls)[None, :] == y[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0.0).sum(1) / np.log(n_cls)
    per_class = [ref_binned(p[:, c], onehot[:, c], n_bins, min_count, w) for c in range(n_cls)]
    return {
        "ece": ref_binned(conf, correct, n_bins, min_count, w),
        "ace": ref_binned(conf, correct, n_bins, min_count, w, "average"),
        "mce": ref_binned(conf, correct, n_bins, min_count, w, "maximum"),
        "classwise": float(np.mean(per_class)),
        "per_class": per_class,
        "all_label": ref_binned(
            p.ravel(), onehot.ravel(), n_bins, min_count, None if w is None else np.repeat(w, n_cls)
        ),
        "uce": ref_binned(ent, ~correct, n_bins, min_count, w),
        "nll": float(np.sum(ww * -np.log(np.maximum(p[np.arange(len(y)), y], 1e-15))) / ww.sum()),
        "brier": float(np.sum(ww * ((p - onehot) ** 2).sum(1)) / ww.sum()),
    }


def make_case(shape=(2, 3, 12, 10), seed=0, temperature=2.0, dtype=np.float64):
    """Overconfident softmax outputs with labels drawn from the calibrated distribution."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=shape) * 2.0
    ez = np.exp(z - z.max(1, keepdims=True))
    p_true = ez / ez.sum(1, keepdims=True)
    cum = np.cumsum(np.moveaxis(p_true, 1, -1), -1)
    labels = (rng.random(cum.shape[:-1])[..., None] > cum).sum(-1).clip(max=shape[1] - 1)
    zs = z * temperature
    ez = np.exp(zs - zs.max(1, keepdims=True))
    return (ez / ez.sum(1, keepdims=True)).astype(dtype), labels.astype(np.int64)


def all_values(probs, labels, **kw):
    return {
        "ece": ece(probs, labels, **kw),
        "ace": ace(probs, labels, **kw),
        "mce": mce(probs, labels, **kw),
        "classwise": classwise_ece(probs, labels, **kw),
        "all_label": all_label_ece(probs, labels, **kw),
        "uce": uce(probs, labels, **kw),
    }


# ---------------------------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 3, 12, 10), (1, 4, 6, 5, 7), (3, 2, 9, 9)], ids=["2d-3cls", "3d-4cls", "2d-bin"])
@pytest.mark.parametrize("n_bins, min_count", [(15, 0), (10, 0), (4, 0), (15, 20)])
def test_against_float64_reference(shape, n_bins, min_count):
    probs, labels = make_case(shape, seed=sum(shape) + n_bins)
    ref = ref_metrics(probs, labels, n_bins, min_count)
    got = all_values(probs, labels, n_bins=n_bins, min_bin_count=min_count)
    for k, v in got.items():
        assert v == pytest.approx(ref[k], abs=1e-12, nan_ok=True), k
    per_class = classwise_ece(probs, labels, n_bins=n_bins, min_bin_count=min_count, per_class=True)
    np.testing.assert_allclose(per_class, ref["per_class"], atol=1e-12)
    assert nll(probs, labels) == pytest.approx(ref["nll"], abs=1e-12)
    assert brier(probs, labels) == pytest.approx(ref["brier"], abs=1e-12)


def test_against_netcal_and_sklearn():
    probs, labels = make_case((2, 3, 30, 20), seed=3)
    p, y = flat(probs, labels)
    assert ece(probs, labels) == pytest.approx(NetcalECE(bins=15).measure(p, y), abs=1e-12)
    assert ace(probs, labels) == pytest.approx(NetcalACE(bins=15).measure(p, y), abs=1e-12)
    assert mce(probs, labels) == pytest.approx(NetcalMCE(bins=15).measure(p, y), abs=1e-12)
    assert ece(probs, labels, n_bins=10) == pytest.approx(NetcalECE(bins=10).measure(p, y), abs=1e-12)
    assert nll(probs, labels) == pytest.approx(log_loss(y, p, labels=[0, 1, 2]), abs=1e-12)
    assert brier(probs, labels) == pytest.approx(brier_score_loss(y, p, labels=[0, 1, 2]), abs=1e-12)
    pb, yb = make_case((2, 2, 20, 20), seed=4)
    p2, y2 = flat(pb, yb)
    # binary: the sum over both classes is twice scikit-learn's (p_1 - y)^2
    assert brier(pb, yb) == pytest.approx(2 * brier_score_loss(y2, p2[:, 1]), abs=1e-12)


@pytest.mark.slow
def test_exact_on_a_256x256x128_volume():
    """|error| <= 1e-9 against float64 on 8.4 M voxels (MONAI and torchmetrics are off by 8-18 % here)."""
    g = torch.Generator().manual_seed(7)
    z = torch.randn(1, 3, 256, 256, 128, generator=g) * 3
    probs = torch.softmax(z, 1)  # float32, as a network writes it
    labels = torch.randint(0, 3, (1, 256, 256, 128), generator=g)
    hist = ConfidenceHistogram(3).update(probs, labels)
    got = calibration_metrics(hist, ("ece", "all_label_ece", "ace", "mce", "nll", "brier"))
    p = probs[0].reshape(3, -1).double().numpy()
    y = labels.reshape(-1).numpy()
    conf, pred = p.max(0), p.argmax(0)
    b = np.minimum(np.floor(conf * 15).astype(np.int64), 14)
    n = np.bincount(b, minlength=15).astype(np.float64)
    s_conf = np.bincount(b, weights=conf, minlength=15)
    s_acc = np.bincount(b, weights=(pred == y).astype(np.float64), minlength=15)
    gap = np.abs(s_conf - s_acc)
    ok = n > 0
    assert abs(got["ece"] - gap.sum() / n.sum()) <= 1e-9
    assert abs(got["ace"] - np.mean(gap[ok] / n[ok])) <= 1e-9
    assert abs(got["mce"] - np.max(gap[ok] / n[ok])) <= 1e-9
    pa = p.ravel()
    ba = np.minimum(np.floor(pa * 15).astype(np.int64), 14)
    hit = (np.arange(3)[:, None] == y[None, :]).ravel().astype(np.float64)
    gap_all = np.abs(np.bincount(ba, weights=pa, minlength=15) - np.bincount(ba, weights=hit, minlength=15))
    assert abs(got["all_label_ece"] - gap_all.sum() / pa.size) <= 1e-9
    p_true = p[y, np.arange(y.size)]
    assert abs(got["nll"] + np.mean(np.log(p_true))) <= 1e-9
    assert abs(got["brier"] - (np.sum(p * p) - 2 * p_true.sum() + y.size) / y.size) <= 1e-9


def test_torch_numpy_and_dtypes():
    probs, labels = make_case((2, 3, 10, 10), seed=5)
    ref = ece(probs, labels)
    t = ece(torch.from_numpy(probs), torch.from_numpy(labels))
    assert isinstance(t, float) and t == pytest.approx(ref, abs=1e-15)
    pc_np = ece(probs, labels, per_case=True)
    pc_t = ece(torch.from_numpy(probs), torch.from_numpy(labels), per_case=True)
    assert isinstance(pc_np, np.ndarray) and isinstance(pc_t, torch.Tensor) and pc_t.dtype == torch.float64
    np.testing.assert_allclose(pc_t.numpy(), pc_np)
    # float32 input: the reference sees the same float32 values promoted to float64
    p32 = probs.astype(np.float32)
    assert ece(p32, labels) == pytest.approx(ref_metrics(p32, labels)["ece"], abs=1e-12)
    # labels as (B, 1, *spatial), float label maps with integral values
    assert ece(probs, labels[:, None].astype(np.float32)) == pytest.approx(ref, abs=1e-15)
    # float16 probabilities are accepted (bfloat16 sums deviate from 1 by more than the 1e-3 tolerance)
    ph = torch.from_numpy(probs).half()
    ref16 = ref_metrics(ph.double().numpy(), labels)["ece"]
    assert ece(ph, torch.from_numpy(labels)) == pytest.approx(ref16, abs=1e-12)


@pytest.mark.cuda
def test_cuda_matches_cpu(cuda_device):
    probs, labels = make_case((2, 3, 16, 16), seed=6)
    cpu = calibration_metrics(ConfidenceHistogram(3).update(probs, labels))
    pc, yc = torch.from_numpy(probs).to(cuda_device), torch.from_numpy(labels).to(cuda_device)
    gpu = calibration_metrics(ConfidenceHistogram(3).update(pc, yc))
    for k in cpu:
        assert gpu[k] == pytest.approx(cpu[k], abs=1e-12)
    assert ece(pc, yc, per_case=True).device.type == cuda_device.type


# ---------------------------------------------------------------------------------------------------------------
# edge cases
# ---------------------------------------------------------------------------------------------------------------
def test_ties_at_bin_edges_and_confidence_one():
    """Hand-worked binary case, 4 bins [0, .25), [.25, .5), [.5, .75), [.75, 1]."""
    p1 = np.array([1.0, 0.75, 0.5, 0.25, 0.0, 0.5])
    probs = np.stack([1 - p1, p1])[None, :, :, None]  # (1, 2, 6, 1)
    labels = np.array([1, 1, 1, 0, 0, 0])[None, :, None]
    # top label: conf (1, .75, .5 -> class 0 (first max), .75, 1, .5); correct (1, 1, 0, 1, 1, 1)
    curve = reliability_curve(probs, labels, n_bins=4)
    np.testing.assert_array_equal(curve.counts, [0, 0, 2, 4])
    np.testing.assert_allclose(curve.frequency[2:], [0.5, 1.0])
    np.testing.assert_allclose(curve.confidence[2:], [0.5, 3.5 / 4])
    assert ece(probs, labels, n_bins=4) == pytest.approx((2 * 0.0 + 4 * (1 - 3.5 / 4)) / 6)
    # all labels: values 0, .25, .25, .5, .5, .5, .5, .75, .75, 1, 1, 0 -> bins [2, 2, 4, 4]
    all_curve = reliability_curve(probs, labels, kind="all_label", n_bins=4)
    np.testing.assert_array_equal(all_curve.counts, [2, 2, 4, 4])
    # hits: value 0 (label 0 of voxel 0: y=1 -> 0; label 1 of voxel 4: y=0 -> 0) -> freq 0
    np.testing.assert_allclose(all_curve.frequency, [0.0, 0.0, 0.5, 1.0])
    # 1.0 lands in the last fine bin too
    hist = ConfidenceHistogram(2).update(probs, labels)
    assert int(hist.counts[0, hist.top_row, :, DEFAULT_FINE_BINS - 1].sum()) == 2


def test_all_correct_and_constant_maps():
    probs, _ = make_case((2, 3, 8, 8), seed=8)
    labels = probs.argmax(1)
    conf = probs.max(1)
    assert ece(probs, labels) == pytest.approx(np.mean(1 - conf), abs=1e-12)
    assert mce(probs, labels) <= 1.0
    assert np.all(reliability_curve(probs, labels).frequency[reliability_curve(probs, labels).kept] == 1.0)
    assert uce(probs, labels) == pytest.approx(ref_metrics(probs, labels)["uce"], abs=1e-12)
    # constant maps: every voxel (1/3, 1/3, 1/3) -> argmax 0, one bin
    const = np.full((1, 3, 5, 5), 1 / 3)
    lab = np.arange(25).reshape(1, 5, 5) % 3
    acc = np.mean(lab == 0)
    assert ece(const, lab) == pytest.approx(abs(acc - 1 / 3), abs=1e-12)
    assert ace(const, lab) == pytest.approx(ece(const, lab)) and mce(const, lab) == pytest.approx(ece(const, lab))
    assert uce(const, lab) == pytest.approx(abs((1 - acc) - 1.0), abs=1e-12)  # normalised entropy 1


def test_single_class_present():
    probs, _ = make_case((2, 3, 8, 8), seed=9)
    labels = np.zeros((2, 8, 8), dtype=np.int64)
    ref = ref_metrics(probs, labels)
    got = all_values(probs, labels)
    for k, v in got.items():
        assert v == pytest.approx(ref[k], abs=1e-12), k
    curve = reliability_curve(probs, labels, kind="classwise")
    assert np.all(curve.frequency[1:][curve.kept[1:]] == 0.0)
    assert classwise_ece(probs, labels, include_background=False) == pytest.approx(np.mean(ref["per_class"][1:]))


def test_weights_equal_duplicated_voxels_and_mask():
    probs, labels = make_case((1, 3, 10, 10), seed=10)
    rng = np.random.default_rng(0)
    w = rng.integers(0, 4, size=labels.shape).astype(np.float64)
    # duplicate every voxel w times
    p, y = flat(probs, labels)
    rep = w.reshape(-1).astype(int)
    p_dup = np.repeat(p, rep, axis=0).T[None, :, :, None]
    y_dup = np.repeat(y, rep)[None, :, None]
    for fn in (ece, ace, mce, classwise_ece, all_label_ece, uce, nll, brier):
        assert fn(probs, labels, weights=w) == pytest.approx(fn(p_dup, y_dup), abs=1e-12), fn.__name__
    ref = ref_metrics(probs, labels, weights=w)
    assert ece(probs, labels, weights=w) == pytest.approx(ref["ece"], abs=1e-12)
    # a mask equals computing on the selected voxels
    m = rng.random(labels.shape) > 0.4
    sel_p = p[m.reshape(-1)].T[None, :, :, None]
    sel_y = y[m.reshape(-1)][None, :, None]
    assert ece(probs, labels, mask=m) == pytest.approx(ece(sel_p, sel_y), abs=1e-15)
    assert nll(probs, labels, mask=m[:, None]) == pytest.approx(nll(sel_p, sel_y), abs=1e-15)


def test_degenerate_inputs_give_nan_with_warning():
    probs, labels = make_case((2, 3, 6, 6), seed=11)
    with pytest.warns(UserWarning, match="NaN"):
        assert math.isnan(ece(probs, labels, mask=np.zeros(labels.shape, dtype=bool)))
    with pytest.warns(UserWarning, match="NaN"):
        assert math.isnan(nll(probs, labels, mask=np.zeros(labels.shape, dtype=bool)))
    with pytest.warns(UserWarning, match="min_bin_count"):
        assert math.isnan(ece(probs, labels, min_bin_count=10_000))
    mask = np.ones(labels.shape, dtype=bool)
    mask[1] = False
    with pytest.warns(UserWarning, match="1 of 2"):
        v = ece(probs, labels, mask=mask, per_case=True)
    assert np.isfinite(v[0]) and np.isnan(v[1])


@pytest.mark.parametrize(
    "probs, labels, match",
    [
        (np.full((1, 3, 4, 4), np.nan), np.zeros((1, 4, 4), int), "probs"),
        (np.full((1, 3, 4, 4), 0.5), np.zeros((1, 4, 4), int), "sum to 1"),
        (np.random.default_rng(0).normal(size=(1, 3, 4, 4)), np.zeros((1, 4, 4), int), "probs"),
        (np.full((1, 3, 4, 4), 1 / 3), np.full((1, 4, 4), 3), "target"),
        (np.full((1, 3, 4, 4), 1 / 3), np.full((1, 4, 4), -1), "target"),
        (np.full((1, 3, 4, 4), 1 / 3), np.zeros((1, 4, 5), int), "target"),
        (np.full((1, 3, 4, 4), 1 / 3), np.full((1, 4, 4), 0.5), "target"),
        (np.ones((1, 1, 4, 4)), np.zeros((1, 4, 4), int), "classes|2"),
        (np.ones((3, 4)), np.zeros(3, int), "shape"),
    ],
)
def test_bad_input_raises(probs, labels, match):
    with pytest.raises(ValueError, match=match):
        ece(probs, labels)


def test_bad_arguments_raise():
    probs, labels = make_case((1, 3, 4, 4))
    with pytest.raises(ValueError, match="n_bins"):
        ece(probs, labels, n_bins=0)
    with pytest.raises(ValueError, match="min_bin_count"):
        ece(probs, labels, min_bin_count=-1)
    with pytest.raises(ValueError, match="kind"):
        ece(probs, labels, kind="best")
    with pytest.raises(ValueError, match="weights"):
        ece(probs, labels, weights=-np.ones(labels.shape))
    with pytest.raises(ValueError, match="mask"):
        ece(probs, labels, mask=np.full(labels.shape, 2))
    with pytest.raises(ValueError, match="target .*is required"):
        ece(probs)
    hist = ConfidenceHistogram(3).update(probs, labels)
    with pytest.raises(ValueError, match="must be None"):
        ece(hist, labels)
    with pytest.raises(ValueError, match="classes"):
        hist.update(np.full((1, 4, 4, 4), 0.25), labels)
    with pytest.raises(ValueError, match="num_classes"):
        ConfidenceHistogram(1)
    with pytest.raises(TypeError, match="case_ids"):
        ConfidenceHistogram(3).update(probs, labels, case_ids=[3])
    with pytest.raises(ValueError, match="empty"):
        ece(ConfidenceHistogram(3))


def test_update_is_atomic():
    probs, labels = make_case((2, 3, 6, 6), seed=12)
    hist = ConfidenceHistogram(3).update(probs, labels)
    before = hist.state_dict()
    bad = probs.copy()
    bad[1, :, 5, 5] = [0.9, 0.9, 0.9]
    with pytest.raises(ValueError):
        hist.update(bad, labels)
    after = hist.state_dict()
    assert len(hist) == 2
    np.testing.assert_array_equal(before["counts"], after["counts"])
    np.testing.assert_array_equal(before["sums"], after["sums"])


def test_non_dividing_n_bins_warns_and_rounds_edges():
    probs, labels = make_case((2, 3, 20, 20), seed=13)
    with pytest.warns(UserWarning, match="does not divide"):
        v = ece(probs, labels, n_bins=7)
    assert v == pytest.approx(ref_metrics(probs, labels, n_bins=7)["ece"], abs=2e-3)
    # the paper's 2**14 grid is exact for powers of two
    assert ece(probs, labels, n_bins=16, n_fine_bins=2**14) == pytest.approx(
        ref_metrics(probs, labels, n_bins=16)["ece"], abs=1e-12
    )


# ---------------------------------------------------------------------------------------------------------------
# uce: the three call forms
# ---------------------------------------------------------------------------------------------------------------
def test_uce_call_forms_agree():
    probs, labels = make_case((3, 3, 9, 8), seed=14)
    u = entropy(probs, normalize=True)  # (B, 1, *spatial)
    err = probs.argmax(1) != labels  # (B, *spatial)
    ref = ref_metrics(probs, labels)["uce"]
    assert uce(probs, labels) == pytest.approx(ref, abs=1e-12)
    assert uce(u, err) == pytest.approx(ref, abs=1e-12)
    assert uce(u, err[:, None]) == pytest.approx(ref, abs=1e-12)
    assert uce(u[:, 0], err) == pytest.approx(ref, abs=1e-12)  # any matching shape: pooled
    assert uce(ConfidenceHistogram(3).update(probs, labels)) == pytest.approx(ref, abs=1e-12)
    pc = uce(torch.from_numpy(u), torch.from_numpy(err), per_case=True)
    assert isinstance(pc, torch.Tensor) and pc.shape == (3,)
    np.testing.assert_allclose(pc.numpy(), uce(probs, labels, per_case=True), atol=1e-12)
    for b in range(3):
        assert pc[b].item() == pytest.approx(ref_binned(u[b].ravel(), err[b].ravel(), 15), abs=1e-12)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        uce(u * 3, err)
    with pytest.raises(ValueError, match="cannot pair"):
        uce(u[0, 0], err[0, :, :4])
    with pytest.raises(ValueError, match="per_case"):
        uce(u[:, 0], err, per_case=True)
    with pytest.raises(ValueError, match="uncertainty=False"):
        uce(ConfidenceHistogram(3, uncertainty=False).update(probs, labels))


# ---------------------------------------------------------------------------------------------------------------
# histogram algebra: merge, per case, persistence
# ---------------------------------------------------------------------------------------------------------------
def test_per_case_values_and_merge_equal_pooled(tmp_path):
    probs, labels = make_case((4, 3, 10, 9), seed=15)
    hist = ConfidenceHistogram(3).update(probs[:2], labels[:2]).update(probs[2:], labels[2:])
    assert hist.case_ids == [0, 1, 2, 3]
    pooled = ConfidenceHistogram(3, per_case=False).update(probs, labels)
    for name, v in calibration_metrics(hist).items():
        assert v == pytest.approx(calibration_metrics(pooled)[name], abs=1e-13), name
    per_case = calibration_metrics(hist, per_case=True)
    for b in range(4):
        single = calibration_metrics(ConfidenceHistogram(3).update(probs[b : b + 1], labels[b : b + 1]))
        for name, v in single.items():
            assert per_case[name][b] == pytest.approx(v, abs=1e-13), name
    # merging separately built histograms (auto ids are renumbered, string ids are summed)
    a = ConfidenceHistogram(3).update(probs[:2], labels[:2])
    b = ConfidenceHistogram(3).update(probs[2:], labels[2:])
    merged = a.merge(b)
    assert merged.case_ids == [0, 1, 2, 3]
    assert torch.equal(merged.counts, hist.counts)
    x = ConfidenceHistogram(3).update(probs[:1, :, :5], labels[:1, :5], case_ids=["vol"])
    y = ConfidenceHistogram(3).update(probs[:1, :, 5:], labels[:1, 5:], case_ids=["vol"])
    x += y
    assert x.case_ids == ["vol"] and ece(x) == pytest.approx(ece(probs[:1], labels[:1]), abs=1e-13)
    # persistence
    save_state(tmp_path / "h.npz", hist)  # the deprecated hist.save warns (tests/test_deprecations.py)
    loaded = ConfidenceHistogram.load(tmp_path / "h.npz")
    assert loaded.case_ids == hist.case_ids and torch.equal(loaded.counts, hist.counts)
    assert calibration_metrics(loaded, per_case=True)["ece"] == pytest.approx(per_case["ece"])
    fresh = ConfidenceHistogram(3).load_state_dict(x.state_dict())
    assert fresh.case_ids == ["vol"] and ece(fresh) == ece(x)
    with pytest.raises(ValueError, match="layouts"):
        hist.merge(ConfidenceHistogram(4))
    assert hist.pooled().counts.shape == (1, 5, 2, DEFAULT_FINE_BINS)
    # a per-case histogram keeps each case's non-empty bins (the dense tables of a case: 24 R F bytes), a pooled one
    # the dense tables once
    assert hist.pooled().nbytes == 24 * 5 * DEFAULT_FINE_BINS + 3 * 8
    assert hist.nbytes < 4 * 24 * 5 * DEFAULT_FINE_BINS / 50


def test_weighted_and_unweighted_histograms_merge():
    probs, labels = make_case((2, 3, 8, 8), seed=16)
    w = np.random.default_rng(1).random(labels.shape) + 0.5
    a = ConfidenceHistogram(3, per_case=False).update(probs[:1], labels[:1])
    a.update(probs[1:], labels[1:], weights=w[1:])
    both_w = np.concatenate([np.ones_like(w[:1]), w[1:]])
    assert a.weighted
    assert ece(a) == pytest.approx(ece(probs, labels, weights=both_w), abs=1e-13)
    assert nll(a) == pytest.approx(ref_metrics(probs, labels, weights=both_w)["nll"], abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n_cases=st.integers(1, 4),
    n_cls=st.integers(2, 4),
    side=st.integers(1, 7),
    n_bins=st.sampled_from([5, 10, 15, 20]),
    split=st.integers(0, 3),
)
def test_properties(seed, n_cases, n_cls, side, n_bins, split):
    probs, labels = make_case((n_cases, n_cls, side, side + 1), seed=seed, temperature=1 + seed % 4)
    hist = ConfidenceHistogram(n_cls).update(probs, labels)
    vals = calibration_metrics(hist, n_bins=n_bins)
    for k in ("ece", "ace", "mce", "classwise_ece", "all_label_ece", "uce"):
        assert 0.0 <= vals[k] <= 1.0 + 1e-12, k
    assert vals["ece"] <= vals["mce"] + 1e-12 and vals["ace"] <= vals["mce"] + 1e-12
    assert 0.0 <= vals["brier"] <= 2.0 and vals["nll"] >= 0.0
    # voxel order does not matter: histograms are exactly equal
    perm = np.random.default_rng(seed).permutation(side * (side + 1))
    pp = probs.reshape(n_cases, n_cls, -1)[:, :, perm]
    yy = labels.reshape(n_cases, -1)[:, perm]
    shuffled = ConfidenceHistogram(n_cls).update(pp, yy)
    assert torch.equal(shuffled.counts, hist.counts)
    assert ece(shuffled, n_bins=n_bins) == pytest.approx(vals["ece"], abs=1e-13)
    # merge of per-case histograms == pooled
    k = min(split, n_cases)
    parts = ConfidenceHistogram(n_cls, per_case=False)
    if k:
        parts.merge(ConfidenceHistogram(n_cls).update(probs[:k], labels[:k]))
    if k < n_cases:
        parts.merge(ConfidenceHistogram(n_cls).update(probs[k:], labels[k:]))
    assert torch.equal(parts.counts[0], hist.counts.sum(0))
    assert ece(parts, n_bins=n_bins) == pytest.approx(vals["ece"], abs=1e-13)
    # the all-label reliability curve of a binary task is symmetric about 1/2
    if n_cls == 2 and n_bins % 2 == 0:
        c = reliability_curve(hist, kind="all_label", n_bins=n_bins)
        np.testing.assert_array_equal(c.counts, c.counts[::-1])


def test_warning_free_on_regular_input():
    probs, labels = make_case((2, 3, 8, 8), seed=17)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        calibration_metrics(ConfidenceHistogram(3).update(probs, labels), per_case=True)
