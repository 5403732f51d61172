"""The confidence histogram, the ECE family, NLL, Brier and the MONAI calibration metric on a device.

Marked ``cuda``: they run on ``cuda_device`` (a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``) and compare
with the CPU run of the same numpy input. Fine-bin counts of probabilities are exact (the bin of a value is one
IEEE multiplication and floor, the same on every device); the entropy row and the float64 sums may differ in
the last bits (``log`` and summation order differ on a GPU), so they get ``rtol=1e-12``.
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics.calibration import (
    CalibrationMetric,
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
from tests.metrics.test_calibration import make_case

pytestmark = pytest.mark.cuda

FUNCTIONS = (ece, ace, mce, classwise_ece, all_label_ece, uce, nll, brier)


def _case(cuda_device, dtype=np.float64):
    probs, labels = make_case((3, 3, 10, 9, 6), seed=11, dtype=dtype)
    rng = np.random.default_rng(12)
    weights = rng.random(labels.shape)
    mask = rng.random(labels.shape) < 0.8
    cpu = (probs, labels, weights, mask)
    dev = tuple(torch.from_numpy(x).to(cuda_device) for x in cpu)
    return cpu, dev


def _assert_same_histogram(got: ConfidenceHistogram, ref: ConfidenceHistogram, n_cls: int) -> None:
    assert got.case_ids == ref.case_ids
    # probability rows (labels and top label): bit-identical integer counts
    np.testing.assert_array_equal(got.counts[:, : n_cls + 1].cpu().numpy(), ref.counts[:, : n_cls + 1].numpy())
    # entropy row: every voxel counted once per case, bins equal up to last-bit differences of log
    np.testing.assert_array_equal(got.counts[:, n_cls + 1].sum(-1).cpu().numpy(),
                                  ref.counts[:, n_cls + 1].sum(-1).numpy())
    np.testing.assert_allclose(got.sums.cpu().numpy(), ref.sums.numpy(), rtol=1e-12, atol=1e-12)
    # float64 sums of weights scattered in another order on a GPU: last-bit differences, and the r = 0 weights are
    # differences of two such sums (exactly 0 where a bin holds hits only)
    np.testing.assert_allclose(got.weighted_counts.cpu().numpy(), ref.weighted_counts.numpy(), rtol=1e-12,
                               atol=1e-12)
    assert float(got.weighted_counts.min()) >= 0
    np.testing.assert_allclose(got.scalars.cpu().numpy(), ref.scalars.numpy(), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_histogram_counts_are_exact_and_metrics_equal_cpu(cuda_device, dtype):
    (p, y, w, m), (pd, yd, wd, md) = _case(cuda_device, dtype)
    ids = ["a", "b", "c"]
    ref = ConfidenceHistogram(3).update(p, y, weights=w, mask=m, case_ids=ids)
    got = ConfidenceHistogram(3).update(pd, yd, weights=wd, mask=md, case_ids=ids)
    _assert_same_histogram(got, ref, 3)
    assert got.counts.device.type == "cpu"  # binned on the device, the small tables are kept on the CPU
    for per_case in (False, True):
        want = calibration_metrics(ref, per_case=per_case)
        have = calibration_metrics(got, per_case=per_case)
        for k in want:
            np.testing.assert_allclose(np.asarray(have[k], dtype=float), np.asarray(want[k], dtype=float),
                                       rtol=1e-10, atol=1e-12, err_msg=k)


def test_functional_metrics_follow_the_device(cuda_device):
    (p, y, w, m), (pd, yd, wd, md) = _case(cuda_device)
    for fn in FUNCTIONS:
        pooled = fn(pd, yd, weights=wd, mask=md)
        assert isinstance(pooled, float), fn.__name__
        assert pooled == pytest.approx(fn(p, y, weights=w, mask=m), rel=1e-10, abs=1e-12), fn.__name__
        per_case = fn(pd, yd, weights=wd, mask=md, per_case=True)
        assert isinstance(per_case, torch.Tensor) and per_case.device.type == cuda_device.type, fn.__name__
        np.testing.assert_allclose(per_case.cpu().numpy(), fn(p, y, weights=w, mask=m, per_case=True),
                                   rtol=1e-10, atol=1e-12, err_msg=fn.__name__)


def test_reliability_curve_and_merge_across_devices(cuda_device):
    (p, y, _, _), (pd, yd, _, _) = _case(cuda_device)
    for kind in ("top", "all_label"):
        got, ref = reliability_curve(pd, yd, kind=kind), reliability_curve(p, y, kind=kind)
        np.testing.assert_array_equal(got.counts, ref.counts)
        np.testing.assert_allclose(got.confidence, ref.confidence, rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(got.frequency, ref.frequency, rtol=1e-12, equal_nan=True)
    # a histogram filled on the device merges with one filled on the CPU, and survives a state-dict round trip
    dev = ConfidenceHistogram(3).update(pd[:2], yd[:2], case_ids=["a", "b"])
    host = ConfidenceHistogram(3).update(p[2:], y[2:], case_ids=["c"])
    both = ConfidenceHistogram(3).update(p, y, case_ids=["a", "b", "c"])
    merged = dev.merge(host)
    _assert_same_histogram(merged, both, 3)
    back = ConfidenceHistogram.from_state_dict(dev.state_dict())
    np.testing.assert_array_equal(back.counts.cpu().numpy(), dev.counts.cpu().numpy())


def test_uce_of_any_uncertainty_map(cuda_device):
    rng = np.random.default_rng(3)
    u = rng.random((2, 1, 9, 8, 7))
    err = rng.random((2, 1, 9, 8, 7)) < u  # errors more likely where the map is high
    ref = ConfidenceHistogram.from_uncertainty(u, err)
    ud, errd = torch.from_numpy(u).to(cuda_device), torch.from_numpy(err).to(cuda_device)
    got = ConfidenceHistogram.from_uncertainty(ud, errd)
    np.testing.assert_array_equal(got.counts.cpu().numpy(), ref.counts.numpy())  # the map is binned as given
    assert uce(got) == pytest.approx(uce(ref), rel=1e-12)
    np.testing.assert_allclose(uce(got, per_case=True), uce(ref, per_case=True), rtol=1e-12)


@pytest.mark.parametrize("reduction", ["pooled", "mean"])
def test_monai_calibration_metric_on_the_device(cuda_device, reduction):
    (p, y, _, _), (pd, yd, _, _) = _case(cuda_device)
    want, have = (CalibrationMetric(num_classes=3, reduction=reduction) for _ in range(2))
    for i in range(3):  # one case per iteration, labels (B, 1, *spatial)
        want(y_pred=torch.from_numpy(p[i : i + 1]), y=torch.from_numpy(y[i : i + 1, None]))
        have(y_pred=pd[i : i + 1], y=yd[i : i + 1, None])
    assert have.get_buffer().device.type == cuda_device.type
    np.testing.assert_allclose(have.get_buffer().cpu().numpy(), want.get_buffer().numpy(), rtol=1e-10, atol=1e-12)
    a, b = have.aggregate(), want.aggregate()
    for k in b:
        assert a[k].device.type == cuda_device.type, k  # torch in, torch out on the same device (both reductions)
        assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-10, abs=1e-12), k


def test_state_dict_of_device_tables_keeps_the_device(cuda_device):
    """``load_state_dict`` takes the all-gathered tables of ``CalibrationMetric`` as tensors on their device (a CUDA
    tensor cannot go through ``np.asarray``)."""
    (p, y, _, _), (pd, yd, _, _) = _case(cuda_device)
    dev = ConfidenceHistogram(3).update(pd, yd, case_ids=["a", "b", "c"])
    state = dict(dev.state_dict(), **{k: getattr(dev, k).to(cuda_device) for k in ("counts", "sums", "scalars")})
    back = ConfidenceHistogram(3).load_state_dict(state)
    assert back.counts.device.type == cuda_device.type
    _assert_same_histogram(back, ConfidenceHistogram(3).update(p, y, case_ids=["a", "b", "c"]), 3)


def test_default_chunks_bound_the_device_workspace(cuda_device):
    """A many-class case on a GPU is processed in chunks of at most 2 GiB of temporaries, equal to one chunk."""
    from monai_unc.metrics.calibration.histogram import _CUDA_WORKSPACE_BYTES, _default_chunk

    assert _default_chunk(torch.device("cpu"), 3) == 1 << 17
    for c in (2, 3, 14, 105):
        n = _default_chunk(torch.device("cuda"), c)
        assert n >= 1 << 20 and (n * 50 * (c + 2) <= _CUDA_WORKSPACE_BYTES or n == 1 << 20)
    probs, labels = make_case((1, 5, 16, 12, 10), seed=3, dtype=np.float32)
    pd, yd = (torch.from_numpy(x).to(cuda_device) for x in (probs, labels))
    whole = ConfidenceHistogram(5, chunk_size=10**9).update(pd, yd)
    chunked = ConfidenceHistogram(5, chunk_size=257).update(pd, yd)
    np.testing.assert_array_equal(chunked.counts.cpu().numpy(), whole.counts.cpu().numpy())
    np.testing.assert_allclose(chunked.sums.cpu().numpy(), whole.sums.cpu().numpy(), rtol=1e-12, atol=1e-12)
