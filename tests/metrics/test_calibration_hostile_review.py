"""Defects of the calibration metrics found by hostile testing (``monai_unc.metrics.calibration``), one test each.

NaN probabilities with ``validate=False``, the normalised entropy a few ulps above 1 in ``uce``, label maps read
as one-hot by ``CalibrationMetric``, ignore labels outside the mask, ``uce`` of probabilities with one-hot labels,
tampered histogram files, big-endian arrays, and the one binning function the temperature scaler shares.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch

from monai_unc.io import save_state
from monai_unc.measures import entropy
from monai_unc.metrics.calibration import (
    CalibrationMetric,
    ConfidenceHistogram,
    all_label_ece,
    brier,
    confidence_bins,
    ece,
    nll,
    reliability_curve,
    uce,
)
from monai_unc.metrics.calibration import histogram as hist_module


def _case(shape=(1, 3, 8, 8, 8), seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(3.0 * torch.randn(*shape, generator=g, dtype=torch.float64), 1).to(dtype)
    target = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=g)
    return probs, target


@pytest.fixture(params=[True, False], ids=["fused", "reference"])
def path(request, monkeypatch):
    """Both update paths: the fused kernel (where numba is installed) and the torch reference."""
    monkeypatch.setattr(hist_module, "FUSED_KERNELS", request.param)
    return request.param


# ---------------------------------------------------------------------------------------------------------------
# finding 1: NaN with validate=False
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_nan_probability_without_validate_raises_value_error_naming_probs(path, dtype):
    """Found by hostile testing: ``update(..., validate=False)`` with one NaN probability crashed on both update
    paths with torch's internal "index -9223372036854775808 is out of bounds" (the bin ``int64(NaN * F)``). A NaN
    has no bin: ``ValueError`` naming ``probs``, and nothing is added (also when the NaN is in a later chunk)."""
    probs, target = _case(dtype=dtype)
    for where in ((0, slice(None), 0, 0, 0), (0, 1, 7, 7, 7)):  # a whole voxel; one class value of the last voxel
        hist = ConfidenceHistogram(3, chunk_size=64).update(probs, target)
        before = (hist.counts.clone(), hist.sums.clone(), hist.scalars.clone())
        broken = probs.clone()
        broken[where] = float("nan")
        with pytest.raises(ValueError, match=r"^probs contains NaN"):
            hist.update(broken, target, validate=False)
        assert torch.equal(hist.counts, before[0]) and torch.equal(hist.sums, before[1])
        assert torch.equal(hist.scalars, before[2])
    # never read: NaN outside the mask stays allowed
    masked = probs.clone()
    masked[0, :, 0] = float("nan")
    mask = torch.ones_like(target, dtype=torch.bool)
    mask[0, 0] = False
    got = ConfidenceHistogram(3).update(masked, target, mask=mask, validate=False)
    ref = ConfidenceHistogram(3).update(probs, target, mask=mask)
    assert torch.equal(got.counts, ref.counts)


# ---------------------------------------------------------------------------------------------------------------
# finding 2: uce of the normalised entropy, a few ulps above 1
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uce_accepts_a_map_rounded_just_above_one_and_clips_it(dtype):
    """Found by hostile testing: the documented ``uce(entropy(probs, normalize=True), errors)`` was refused for
    near-uniform probabilities, whose normalised entropy rounds to 1 + 1-2 ulp ("got values in [1, 1]"). Values
    within the probability tolerance of the dtype outside [0, 1] are clipped; a real overshoot is refused with a
    message that shows it."""
    g = torch.Generator().manual_seed(0)
    errors = torch.rand(2, 16, 16, generator=g) < 0.3
    ones = torch.ones(2, 1, 16, 16, dtype=dtype)
    above = torch.nextafter(torch.nextafter(ones, 2 * ones), 2 * ones)  # 1 + 2 ulp
    below = -torch.nextafter(torch.zeros_like(ones), ones)  # the largest negative subnormal
    u = torch.where(torch.rand(2, 1, 16, 16, generator=g) < 0.5, above, below)
    assert float(u.max()) > 1 and float(u.min()) < 0
    expected = uce(u.clamp(0, 1), errors)
    assert uce(u, errors) == expected
    np.testing.assert_array_equal(uce(u, errors, per_case=True).numpy(), uce(u.clamp(0, 1), errors, per_case=True))
    # the documented call (step 3 of docs/calibration.md) on near-uniform probabilities
    probs = torch.softmax(1e-9 * torch.randn(2, 12, 16, 16, generator=g, dtype=torch.float64), 1).to(dtype)
    target = torch.randint(0, 12, (2, 16, 16), generator=g)
    assert uce(entropy(probs, normalize=True), probs.argmax(1) != target) == pytest.approx(uce(probs, target))
    with pytest.raises(ValueError, match=r"uncertainty must lie in \[0, 1\].*largest 1\.01.*\(0\.01 above 1\)"):
        uce(torch.full_like(u, 1.01, dtype=torch.float64), errors)
    with pytest.raises(ValueError, match=r"smallest -0\.5 \(0\.5 below 0\)"):
        uce(torch.full_like(u, -0.5), errors)


# ---------------------------------------------------------------------------------------------------------------
# finding 3: CalibrationMetric reads a label map as one-hot when its first spatial size equals C
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_cls", [2, 3])
def test_calibration_metric_reads_label_maps_whose_first_spatial_size_is_c(n_cls):
    """Found by hostile testing: ``CalibrationMetric`` took any ``y`` with ``y.shape[1] == C`` for one-hot, also a
    documented ``(B, *spatial)`` label map of depth ``C``, and failed with a shape error naming a shape the caller
    never passed. Only a ``y`` of ``y_pred``'s shape is one-hot (MONAI's convention)."""
    probs, target = _case((2, n_cls, n_cls, 6, 5), seed=n_cls)  # depth == C
    expected = ece(probs, target)
    onehot = torch.nn.functional.one_hot(target, n_cls).movedim(-1, 1)
    for y in (target, target[:, None], onehot):
        metric = CalibrationMetric(metrics=("ece", "nll"))
        metric(y_pred=probs, y=y)
        out = metric.aggregate()
        assert float(out["ece"]) == pytest.approx(expected, abs=1e-12)
        assert float(out["nll"]) == pytest.approx(nll(probs, target), abs=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# finding 6: labels where they are never read
# ---------------------------------------------------------------------------------------------------------------
def test_ignore_labels_outside_the_mask_or_at_zero_weight_are_not_read(path):
    """Found by hostile testing: labels outside ``[0, C)`` were refused where ``mask`` is False or the weight is 0,
    although the docstring says those voxels are never read (the usual ``mask=target != 255``). They are checked
    where they are read only, with the same error text, on both update paths."""
    probs, target = _case((2, 3, 6, 6, 6), seed=3)
    ignored = target.clone()
    ignored[:, :2] = 255
    ignored[1, 5, 5, 5] = -1
    mask = (ignored != 255) & (ignored != -1)
    clean = ignored.where(mask, torch.zeros_like(ignored))
    expected = ece(probs, clean, mask=mask)
    assert ece(probs, ignored, mask=mask) == expected
    assert ece(probs, ignored, weights=mask.double()) == pytest.approx(expected, abs=1e-12)
    assert nll(probs, ignored.double(), mask=mask) == nll(probs, clean, mask=mask)  # float label maps too
    hist = ConfidenceHistogram(3, per_case=False).update(probs, ignored, mask=mask)
    assert torch.equal(hist.counts, ConfidenceHistogram(3, per_case=False).update(probs, clean, mask=mask).counts)
    # a label that is read is still checked, with the error text as before
    with pytest.raises(ValueError, match=r"^target holds class 255 but only 3 classes are present$"):
        ece(probs, ignored, mask=ignored != -1)
    with pytest.raises(ValueError, match=r"^target must be non-negative class indices, got minimum -1$"):
        ece(probs, ignored, weights=(ignored != 255).double())
    with pytest.raises(ValueError, match=r"^target holds class 255 but only 3 classes are present$"):
        ece(probs[:1], ignored[:1])  # no mask: every label is read (the fused kernel checks them)


# ---------------------------------------------------------------------------------------------------------------
# finding 7: uce(probs, one-hot)
# ---------------------------------------------------------------------------------------------------------------
def test_uce_refuses_probabilities_with_one_hot_labels_as_a_map_pair():
    """Found by hostile testing: ``uce(probs, one_hot_target)`` (equal shapes) was silently read as an uncertainty
    map and an error map (0.293 instead of 0.220). Such a pair is refused with a message naming both forms; the
    documented map forms (``(B, 1, *spatial)``, or any equal shapes that are no probabilities with one-hot labels)
    still work."""
    probs, target = _case((2, 3, 8, 8), seed=7)
    onehot = torch.nn.functional.one_hot(target, 3).movedim(-1, 1)
    for y in (onehot, onehot.bool(), onehot.double(), onehot.numpy()):
        with pytest.raises(ValueError, match=r"one-hot labels.*labels \(B, \*spatial\).*\(B, 1, \*spatial\)"):
            uce(probs, y)
    assert uce(probs, onehot.argmax(1)) == uce(probs, target)
    u = entropy(probs, normalize=True)
    err = probs.argmax(1) != target
    ref = uce(probs, target)
    assert uce(u, err) == pytest.approx(ref, abs=1e-12)
    assert uce(u[:, 0], err) == pytest.approx(ref, abs=1e-12)  # (B, H, W) with H >= 2: a map pair
    assert uce(u.expand(2, 3, 8, 8), err[:, None].expand(2, 3, 8, 8)) == pytest.approx(ref, abs=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# finding 8: tampered histogram files
# ---------------------------------------------------------------------------------------------------------------
def _states():
    """Legitimate histograms of every kind: they must keep loading."""
    probs, target = _case((2, 3, 10, 10, 10), seed=8, dtype=torch.float32)
    g = torch.Generator().manual_seed(9)
    weights = torch.rand(target.shape, generator=g, dtype=torch.float64) * 1e3
    weights[0, 0] = 0
    out = {
        "plain": ConfidenceHistogram(3).update(probs, target),
        "pooled": ConfidenceHistogram(3, per_case=False).update(probs, target),
        "weighted": ConfidenceHistogram(3).update(probs, target, weights=weights),
        "no_uncertainty": ConfidenceHistogram(3, uncertainty=False).update(probs, target),
        "clipped": ConfidenceHistogram(3).update(probs * 1.5 - 0.1, target, validate=False),
        "uncertainty_map": ConfidenceHistogram.from_uncertainty(torch.rand(2, 1, 5, 5, generator=g),
                                                                torch.rand(2, 5, 5, generator=g) < 0.4),
    }
    mixed = ConfidenceHistogram(2, per_case=False).update(*_case((1, 2, 6, 6), seed=10))
    mixed.merge(ConfidenceHistogram.from_uncertainty(torch.rand(1, 1, 4, 4, generator=g), torch.rand(1, 4, 4) < 0.5))
    out["mixed"] = mixed
    return out


def test_legitimate_histogram_states_still_load(tmp_path):
    """The consistency checks of :meth:`ConfidenceHistogram.load_state_dict` (below) accept every histogram the
    library writes: weighted, pooled, without the entropy row, clipped unchecked values, uncertainty maps, a merge
    of probabilities and an uncertainty map."""
    for name, hist in _states().items():
        path = save_state(tmp_path / f"{name}.npz", hist)
        back = ConfidenceHistogram.load(path)
        assert torch.equal(back.counts, hist.counts) and torch.equal(back.scalars, hist.scalars), name


def _tamper(state, what):
    s = {k: np.array(v, copy=True) for k, v in state.items()}
    if what == "negative count":
        s["counts"][0, 3, 0] *= -1
        s["counts"][0, 3, 0][s["counts"][0, 3, 0] == 0] = -1
    elif what == "extra count":
        s["counts"][0, 0, 1, 100] += 1
    elif what == "negative nll":
        s["scalars"][0, 1] = -5.0
    elif what == "huge nll":
        s["scalars"][0, 1] = 1e9
    elif what == "brier":
        s["scalars"][0, 2] = 4 * s["scalars"][0, 0]
    elif what == "weight":
        s["scalars"][0, 0] *= 1.5
    elif what == "nan sum":
        s["sums"][0, 0, 5] = np.nan
    elif what == "sum above the bin":
        i = int(np.flatnonzero(s["counts"][0, 1].sum(0))[0])
        s["sums"][0, 1, i] = s["counts"][0, 1, :, i].sum() * (i + 2) / s["sums"].shape[-1]
    elif what == "negative sum":
        s["sums"][0, 2, 0] = -1e-3
    elif what == "negative weight":
        s["weighted_counts"][0, 0, 0, -1] = -s["weighted_counts"][0, 0, 0, -1] - 1
    elif what == "weight without voxels":
        empty = np.argwhere(s["counts"][0] == 0)[0]
        s["weighted_counts"][(0, *empty)] = 1.0
    return s


TAMPERINGS = ["negative count", "extra count", "negative nll", "huge nll", "brier", "weight", "nan sum",
              "sum above the bin", "negative sum", "negative weight", "weight without voxels"]  # fmt: skip


@pytest.mark.parametrize("what", TAMPERINGS)
def test_tampered_histogram_files_are_refused_naming_the_path(tmp_path, what):
    """Found by hostile testing: a file with negated counts and a negative NLL sum loaded silently (ECE 4.675,
    NLL -0.078) although ``load`` promises a ``ValueError`` naming the path for inconsistent arrays. Counts and
    weights must be non-negative, sums finite and within their bins' bounds, label rows consistent with the
    top-label row, the total weight that of the tables, NLL in ``[0, -log(1e-15) W]`` and Brier in ``[0, C W]``."""
    hists = _states()
    state = (hists["weighted"] if "weight" in what and what != "weight" else hists["plain"]).state_dict()
    bad = _tamper(state, what)
    path = tmp_path / "bad.npz"
    np.savez(path, **bad)
    with pytest.raises(ValueError, match=r"^path: .*bad\.npz holds an inconsistent ConfidenceHistogram: state "):
        ConfidenceHistogram.load(path)
    with pytest.raises(ValueError, match=r"^state "):
        ConfidenceHistogram.from_state_dict(bad)
    target = ConfidenceHistogram(3).update(*_case())
    before = target.counts.clone()
    with pytest.raises(ValueError, match=r"^state "):
        target.load_state_dict(bad)
    assert torch.equal(target.counts, before)  # unchanged


def test_tampered_tables_on_torch_tensors_are_refused():
    """The same checks on tensor tables (``CalibrationMetric`` all-gathers them across ranks)."""
    state = {k: (torch.as_tensor(v) if k in ("counts", "sums", "scalars") else v)
             for k, v in _states()["plain"].state_dict().items()}
    ok = ConfidenceHistogram.from_state_dict(state)
    assert ok.counts.shape[0] == 2
    state["scalars"] = state["scalars"].clone()
    state["scalars"][1, 2] = -1.0
    with pytest.raises(ValueError, match="Brier"):
        ConfidenceHistogram.from_state_dict(state)


# ---------------------------------------------------------------------------------------------------------------
# finding 9: big-endian arrays
# ---------------------------------------------------------------------------------------------------------------
def test_big_endian_arrays_are_read(tmp_path):
    """Found by hostile testing: a big-endian numpy array (``'>f8'``, e.g. from a file written on another machine)
    gave torch's byte-order ``ValueError`` naming no argument. It is read in native byte order; so is a histogram
    file whose arrays are big-endian."""
    probs, target = _case((2, 3, 6, 6), seed=11)
    p, y = probs.numpy(), target.numpy()
    expected = ece(p, y)
    assert ece(p.astype(">f8"), y) == expected
    assert ece(p, y.astype(">i8")) == expected
    assert ece(p.astype(">f4"), y.astype(">i2")) == ece(p.astype("<f4"), y)
    u = entropy(probs, normalize=True).numpy().astype(">f8")
    assert uce(u, (probs.argmax(1) != target).numpy()) == pytest.approx(uce(p, y), abs=1e-12)
    state = ConfidenceHistogram(3).update(p, y).state_dict()
    swapped = {k: (v.astype(v.dtype.newbyteorder(">")) if isinstance(v, np.ndarray) and v.dtype.kind in "biuf"
                   else v) for k, v in state.items()}
    np.savez(tmp_path / "be.npz", **swapped)
    back = ConfidenceHistogram.load(tmp_path / "be.npz")
    assert ece(back) == expected and brier(back) == brier(p, y)


# ---------------------------------------------------------------------------------------------------------------
# the binning shared with the temperature scaler (finding 5)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_bins", [20, 15, 7, 1000])
def test_confidence_bins_is_where_the_metrics_count_a_value(n_bins):
    """``confidence_bins`` (the temperature scaler's ECE loss bins with it) puts every value in the coarse bin where
    the histogram-based metrics count it: values one ulp either side of every edge, float32 and float64."""
    edges = torch.arange(n_bins + 1, dtype=torch.float64) / n_bins
    vals = [torch.rand(500, dtype=torch.float64, generator=torch.Generator().manual_seed(n_bins)), edges]
    for dt in (torch.float32, torch.float64):
        e = edges.to(dt)
        vals += [torch.nextafter(e, torch.zeros_like(e)).double(), torch.nextafter(e, torch.ones_like(e)).double()]
    v = torch.cat(vals).clamp(0, 1)
    bins = confidence_bins(v, n_bins)
    assert bins.dtype == torch.int64 and int(bins.min()) >= 0 and int(bins.max()) < n_bins
    # a two-class histogram whose top-label row holds exactly these values: 1 - v and v with v >= 1/2
    top = torch.maximum(v, 1 - v)
    probs = torch.stack([1 - top, top])[None]  # (1, 2, n)
    target = torch.ones(1, v.numel(), dtype=torch.long)
    with pytest.warns(UserWarning, match="does not divide") if 15360 % n_bins else contextlib.nullcontext():
        curve = reliability_curve(probs, target, n_bins=n_bins)
    np.testing.assert_array_equal(curve.counts, np.bincount(confidence_bins(top, n_bins).numpy(), minlength=n_bins))


def test_all_label_ece_unchanged_by_the_shared_coarse_binning():
    """The re-binning of the metrics now calls ``coarse_bin_index``: the same values as the exact reference for a
    non-divisor (the warning path) and a divisor of the fine grid."""
    probs, target = _case((1, 3, 12, 12), seed=12)
    hist = ConfidenceHistogram(3, n_fine_bins=64).update(probs, target)
    with pytest.warns(UserWarning, match="does not divide"):
        got = all_label_ece(hist, n_bins=7)
    p = probs[0].reshape(3, -1).numpy()
    y = target.reshape(-1).numpy()
    fine = np.minimum((p * 64).astype(np.int64), 63)
    coarse = fine * 7 // 64
    num = den = 0.0
    for b in range(7):
        sel = coarse == b
        if sel.any():
            hits = (np.arange(3)[:, None] == y[None, :])[sel].sum()
            num += abs(hits - p[sel].sum())
            den += sel.sum()
    assert got == pytest.approx(num / den, abs=1e-12)
    assert math.isfinite(got)


def test_per_case_values_of_a_pooled_histogram_are_refused():
    """Found by hostile testing: ``ece(pooled_histogram, per_case=True)`` returned one value, the pooled one, as if
    it were the only case's."""
    from monai_unc.metrics import ece, nll
    from monai_unc.metrics.calibration import ConfidenceHistogram

    rng = np.random.default_rng(0)
    p = torch.from_numpy(rng.dirichlet([1, 1], size=(3, 6, 6)).astype(np.float32)).permute(0, 3, 1, 2)
    y = torch.from_numpy(rng.integers(0, 2, size=(3, 1, 6, 6)))
    pooled = ConfidenceHistogram(2, per_case=False).update(p, y)
    for metric in (ece, nll):
        with pytest.raises(ValueError, match=r"per_case=True needs a ConfidenceHistogram built with per_case=True"):
            metric(pooled, per_case=True)
    assert np.isfinite(nll(pooled))
    cases = ConfidenceHistogram(2, per_case=True).update(p, y)
    assert np.asarray(nll(cases, per_case=True)).shape == (3,)
