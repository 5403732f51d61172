"""Review 64: numbers at clinical scale (cohorts of thousands of 512 x 512 x 600 CT volumes, 1e11-1e12 voxels pooled).

Pinned without allocating such volumes (these tests passed before review 64; they keep what it checked): a
confidence histogram's counts beyond ``2**31`` stay int64 through merging, the packed layout of records and gathers,
and ``io.save_state``, and every metric of the ECE family, the NLL and the Brier score read from counts and sums scaled
by a common factor equal those of the unscaled histogram (the metrics are ratios of sums); the voxel AUROC's
Mann-Whitney count is exact in int64; conformal histograms of counts beyond ``2**32`` round-trip exactly; the
streamed variance of 1e4 near-identical samples near 1 stays within its documented absolute bound of the two-pass
``math.fsum`` value; the monitoring p-values rank ``-0.0`` and ``0.0`` as one tied value.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from monai_unc import io
from monai_unc.metrics import ace, all_label_ece, brier, classwise_ece, ece, mce, nll, uce
from monai_unc.metrics.calibration import ConfidenceHistogram
from monai_unc.metrics.conformal import ConformalCaseState
from monai_unc.metrics.discrimination import auroc
from monai_unc.metrics.monitoring import conformal_pvalues
from monai_unc.stats import SampleStats, accumulation_error_bound

METRICS = (ece, classwise_ece, all_label_ece, ace, mce, uce, nll, brier)


def _small_histogram() -> ConfidenceHistogram:
    torch.manual_seed(0)
    p = torch.softmax(2 * torch.randn(2, 3, 6, 6, 5, dtype=torch.float64), 1)
    return ConfidenceHistogram(3, n_fine_bins=60, per_case=True).update(p, torch.randint(0, 3, (2, 6, 6, 5)))


def _scaled(state: dict, factor: int) -> ConfidenceHistogram:
    big = dict(state, counts=state["counts"] * factor, sums=state["sums"] * factor, scalars=state["scalars"] * factor)
    return ConfidenceHistogram.from_state_dict(big)


@pytest.mark.parametrize("factor", [2**31 + 1, 10**9 + 7])
def test_every_calibration_metric_is_invariant_to_a_common_scale_of_counts_beyond_int32(factor):
    h = _small_histogram()
    big = _scaled(h.state_dict(), factor)
    assert big.counts.dtype == torch.int64 and int(big.counts.max()) > 2**31
    for fn in METRICS:
        np.testing.assert_allclose(fn(big), fn(h), rtol=1e-14, atol=1e-15, err_msg=fn.__name__)
        np.testing.assert_allclose(fn(big, per_case=True), fn(h, per_case=True), rtol=1e-14, atol=1e-15,
                                   err_msg=fn.__name__)


def test_a_thousand_merged_partial_histograms_keep_exact_counts_and_their_metrics(tmp_path):
    """1000 partials of about 1e10 voxels each (1e13 pooled) against Python integers and the unscaled metrics."""
    h = _small_histogram()
    state = h.state_dict()
    factor = 10**8 + 3
    part = _scaled(state, factor).pooled()
    pooled = ConfidenceHistogram(3, n_fine_bins=60, per_case=False)
    for _ in range(1000):
        pooled.merge(part)
    exact = [int(v) * factor * 1000 for v in state["counts"].sum(axis=0).reshape(-1).tolist()]
    assert pooled.counts.reshape(-1).tolist() == exact and sum(exact) > 2**40
    small = h.pooled()
    for fn in METRICS:  # 1000 float64 additions of each sum: within 1000 * 2**-53 relative
        assert fn(pooled) == pytest.approx(fn(small), rel=1000 * 2**-52, abs=1e-15), fn.__name__
    io.save_state(tmp_path / "pooled.npz", pooled)
    again = ConfidenceHistogram.from_state_dict(dict(np.load(tmp_path / "pooled.npz")))
    assert torch.equal(again.counts, pooled.counts)
    packed = ConfidenceHistogram.from_state_dict(_scaled(state, 2**33 + 1).packed_state_dict())
    assert int(packed.counts.max()) > 2**33 and packed.counts.dtype == torch.int64


def test_the_voxel_auroc_count_is_exact_for_a_large_tied_case():
    """Two groups of 3e5 voxels, all tied: twice U is ``n_pos n_neg`` (9e10, beyond int32), 0.5 exactly."""
    pos, neg = np.zeros(300_000), np.zeros(300_000)
    with pytest.warns(UserWarning):
        assert auroc(pos, neg) == 0.5
    neg[::2] = -1.0  # half of the negatives strictly below every positive: 0.5 + 0.5 / 2
    assert auroc(pos, neg) == 0.75


def test_conformal_counts_beyond_uint32_round_trip_and_add_exactly():
    rng = np.random.default_rng(0)
    t, f = rng.integers(0, 50, (1, 18)), rng.integers(0, 500, (1, 18))
    small = ConformalCaseState("softmax", "threshold", "outer", 1 / 16, 16, ["1"], t, f)
    factor = 3 * 10**9 + 1
    big = ConformalCaseState("softmax", "threshold", "outer", 1 / 16, 16, ["1"], t * factor, f * factor)
    again = ConformalCaseState.from_arrays(big.to_arrays())
    assert again.true_counts.tolist() == (t * factor).tolist()
    total = big + big + big
    assert total.false_counts.tolist() == (f * factor * 3).tolist()
    assert np.array_equal(total.losses(), small.losses())
    assert math.isclose(float(total.mask_sizes().max()) / (3 * factor), float(small.mask_sizes().max()))


@pytest.mark.parametrize("accum", [torch.float64, torch.float32])
def test_the_streamed_variance_of_near_identical_samples_keeps_its_documented_bound(accum):
    """1e4 samples of ``p = 1 - 1e-6 + 1e-9 z``: the variance (about 1e-18) against a two-pass ``math.fsum`` one."""
    n, v = 10_000, 4
    rng = np.random.default_rng(0)
    p1 = 1 - 1e-6 + 1e-9 * rng.standard_normal((n, 1, 1, v))
    samples = torch.from_numpy(np.concatenate([p1, 1 - p1], axis=2))  # (N, B=1, C=2, V)
    stats = SampleStats(accum_dtype=accum)
    for i in range(0, n, 2500):
        stats.update_many(samples[i:i + 2500].reshape(-1, 2, v), num_samples=2500)
    got = stats.measures(["variance"])["variance"].double().reshape(-1).numpy()
    ref = []
    for k in range(v):
        col = samples[:, 0, 0, k].tolist()
        mean = math.fsum(col) / n
        ref.append(math.fsum((x - mean) ** 2 for x in col) / n)  # both classes have this variance
    bound = (3 * accumulation_error_bound(n + 1, accum) + 2 * accumulation_error_bound(3, accum)) / 2
    assert (got >= 0).all() and np.abs(got - np.array(ref)).max() <= bound


def test_monitoring_pvalues_rank_zeros_of_both_signs_as_one_tied_value():
    rng = np.random.default_rng(0)
    values = np.array([-0.0, 0.0, 0.25, 0.5])
    scores, reference = values[rng.integers(0, 4, 20_000)], values[rng.integers(0, 4, 500)]
    p = conformal_pvalues(scores, reference, seed=3)
    assert np.array_equal(p, conformal_pvalues(np.abs(scores), np.abs(reference), seed=3))
    counts = np.histogram(p, bins=10, range=(0, 1))[0]
    assert np.abs(counts / p.size - 0.1).max() < 0.01  # uniform, ties included (exchangeable stream)
