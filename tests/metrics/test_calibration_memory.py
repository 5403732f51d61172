"""The memory of per-case confidence histograms (found by hostile testing), and that packing changes no number.

A per-case :class:`~monai_unc.metrics.calibration.ConfidenceHistogram` kept every case's dense tables (``24 (C + 2) F``
bytes: 39 MiB for 105 classes and ``F = 15360``) although a case fills few of its bins, the per-case metrics and the
report's per-case box plots stacked the dense tables of every case at once (plus a float64 copy of the counts), and
saving or loading a cohort's histogram built the dense arrays of all cases: ~80 MiB held and ~155 MiB at the
report's peak per 105-class case. Now each case keeps its non-empty bins (packed), per-case metrics read the cases
a block at a time, and the state file is written and read one block of cases at a time. Every number is the same
bits as with the dense tables (``PACKED_CASES = False`` and blocks of every case: the previous code path).
"""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import torch

from monai_unc import state as state_module
from monai_unc.io import save_state
from monai_unc.metrics.calibration import (
    CALIBRATION_METRICS,
    ConfidenceHistogram,
    calibration_metrics,
    reliability_curve,
)
from monai_unc.metrics.calibration import functional as functional_module
from monai_unc.metrics.calibration import histogram as hist_module
from monai_unc.state import ArrayBlocks, read_npz
from tests._cases import held_bytes

KINDS = ("top", "all_label", "classwise", "uncertainty")
#: the outputs include a binning that does not divide the fine grid (its own warning, tested elsewhere)
pytestmark = pytest.mark.filterwarnings("ignore:n_bins=7 does not divide:UserWarning")


def _case(c: int, shape=(6, 5, 4), seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(scale * torch.randn(1, c, *shape, generator=g, dtype=torch.float64), 1)
    target = torch.randint(0, c, (1, *shape), generator=g)
    return probs, target


def _cohort(c: int = 5, n_fine_bins: int = 240, weighted: bool = False) -> ConfidenceHistogram:
    """Cases added in a scrambled order, one case in two updates (patches of one volume), one from other shards."""
    hist = ConfidenceHistogram(c, n_fine_bins=n_fine_bins)
    for k in (3, 0, 5, 1):
        p, y = _case(c, seed=k, scale=1.0 + k)
        w = torch.rand(y.shape, generator=torch.Generator().manual_seed(k)) + 0.1 if weighted and k == 5 else None
        hist.update(p, y, weights=w, case_ids=[f"case{k}"])
    p, y = _case(c, seed=9)
    hist.update(p[..., :2], y[..., :2], case_ids=["case1"])  # a second patch of case1
    hist.update(p, y, case_ids=["case6"], mask=y > 0)  # a masked case
    shard = ConfidenceHistogram(c, n_fine_bins=n_fine_bins)
    for k in (4, 2):
        p, y = _case(c, seed=10 + k)
        shard.update(p, y, case_ids=[f"case{k}"])
    return hist.merge(shard)


def _same(a, b, what: str) -> None:
    """Equal bit for bit (NaN where NaN), arrays, tensors, floats or dicts of them."""
    if isinstance(a, dict):
        assert list(a) == list(b), what
        for k in a:
            _same(a[k], b[k], f"{what}.{k}")
        return
    x = a.cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    y = b.cpu().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert x.dtype == y.dtype and x.shape == y.shape, what
    if x.dtype.kind == "f":
        x, y = x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8)
    assert np.array_equal(x, y), what


def _outputs(hist: ConfidenceHistogram) -> dict:
    """Every table and number a histogram gives: stacked tables, state dict, pooled views, metrics, curves."""
    out = {"counts": hist.counts, "sums": hist.sums, "wcounts": hist.weighted_counts, "scalars": hist.scalars}
    out.update({f"state.{k}": v for k, v in hist.state_dict().items() if k != "case_ids"})
    out.update({f"pooled.{i}": t.clone() for i, t in enumerate(hist.views(per_case=False))})
    for per_case in (False, True) if hist.per_case else (False,):  # a pooled histogram has no per-case values
        for n_bins, min_count in ((15, 0), (7, 3)):
            cal = calibration_metrics(hist, CALIBRATION_METRICS, n_bins=n_bins, min_bin_count=min_count,
                                      per_case=per_case)
            out.update({f"metric.{per_case}.{n_bins}.{k}": v for k, v in cal.items()})
            for kind in KINDS:
                c = reliability_curve(hist, kind=kind, n_bins=n_bins, min_bin_count=min_count, per_case=per_case)
                for f in ("confidence", "frequency", "counts", "weights", "kept"):
                    out[f"curve.{per_case}.{n_bins}.{kind}.{f}"] = getattr(c, f)
    return out


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "reference"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_packed_cases_give_the_numbers_of_dense_cases(monkeypatch, weighted, fused):
    """Packed cases, per-case metrics read one case at a time: the same bits as dense cases read all at once."""
    monkeypatch.setattr(hist_module, "FUSED_KERNELS", fused)
    monkeypatch.setattr(hist_module, "PACKED_CASES", False)
    monkeypatch.setattr(functional_module, "_CASE_BLOCK_BYTES", 1 << 40)
    dense = _cohort(weighted=weighted)
    expected = _outputs(dense)
    monkeypatch.setattr(hist_module, "PACKED_CASES", True)
    for block in (1, 3 * 40 * 7 * 240):  # one case per block; three cases per block
        monkeypatch.setattr(functional_module, "_CASE_BLOCK_BYTES", block)
        packed = _cohort(weighted=weighted)
        assert packed.case_ids == dense.case_ids and packed.weighted == weighted
        assert packed.nbytes < dense.nbytes
        _same(_outputs(packed), expected, "packed")
        _same(_outputs(packed.pooled()), _outputs(dense.pooled()), "pooled()")


def test_state_file_is_written_and_read_a_block_of_cases_at_a_time(monkeypatch, tmp_path):
    """The state file holds the arrays of ``state_dict()``; it is written from :class:`ArrayBlocks` and read back
    block by block (file arrays streamed, a few cases per block), giving the same histogram."""
    hist = _cohort(weighted=True)
    blocks = hist.state_dict_blocks()
    assert isinstance(blocks["counts"], ArrayBlocks) and isinstance(blocks["weighted_counts"], ArrayBlocks)
    monkeypatch.setattr(ArrayBlocks, "BLOCK_BYTES", 40_000)  # blocks of a few cases, written into one buffer
    path = save_state(tmp_path / "h.npz", hist)
    with np.load(path) as z:
        _same({k: z[k] for k in z.files}, hist.state_dict(), "file")
    monkeypatch.setattr(state_module, "_STREAM_BYTES", 1)  # every array of the file streamed
    monkeypatch.setattr(hist_module, "_LOAD_BLOCK_BYTES", 2 * 40 * 7 * 240)  # two cases per block
    assert isinstance(read_npz(path)["counts"], ArrayBlocks)
    loaded = ConfidenceHistogram.load(path)
    assert loaded.case_ids == hist.case_ids
    _same(_outputs(loaded), _outputs(hist), "loaded")


def test_a_damaged_member_is_refused_when_it_is_streamed(monkeypatch, tmp_path):
    """A state file whose counts are damaged inside the compressed stream: the streamed read (past the header) raises
    the load's own error naming the file, as reading it whole does."""
    path = save_state(tmp_path / "h.npz", _cohort())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("counts.npy")
    data = bytearray(path.read_bytes())
    local = info.header_offset  # the member's data follow its local header (30 bytes, its name and extra field)
    start = local + 30 + int.from_bytes(data[local + 26 : local + 28], "little") + int.from_bytes(
        data[local + 28 : local + 30], "little")
    for i in range(start + info.compress_size // 2, start + info.compress_size // 2 + 64):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    for stream in (1, 1 << 40):
        monkeypatch.setattr(state_module, "_STREAM_BYTES", stream)
        with pytest.raises(ValueError, match="not a readable ConfidenceHistogram file"):
            ConfidenceHistogram.load(path)


def test_a_case_keeps_its_non_empty_bins_not_its_dense_tables():
    """Found by hostile testing: a 105-class case of 512 voxels kept 24 (C + 2) F = 39 MiB of dense tables in a
    per-case histogram (twice, with the dense sum its metrics cached, and again in every cohort it was merged into).
    It keeps its non-empty bins now: at most 32 bytes per non-empty bin, shared by the cohorts it is merged into."""
    c, f = 105, 15360
    cohort = ConfidenceHistogram(c, n_fine_bins=f)
    cases = []
    for k in range(3):
        probs, target = _case(c, shape=(8, 8, 8), seed=k)
        h = ConfidenceHistogram(c, n_fine_bins=f).update(probs, target, case_ids=[f"c{k}"])
        _ = calibration_metrics(h, ("ece", "all_label_ece"), n_bins=15)  # the metrics evaluate takes of each case
        cases.append(h)
        cohort.merge(h)
    dense_case = 24 * (c + 2) * f
    for h in cases:
        non_empty = int(((h.counts != 0).any(2) | (h.sums != 0)).sum())
        assert held_bytes(h) <= 32 * non_empty + 1024
        assert held_bytes(h) < dense_case / 20
    assert held_bytes([cohort, *cases]) == held_bytes(cases)  # the cohort shares the cases' packed tables
    _ = calibration_metrics(cohort, ("ece",), n_bins=15)  # the pooled sum is kept packed too
    pooled = cohort.pooled()
    pooled_non_empty = int(((pooled.counts != 0).any(2) | (pooled.sums != 0)).sum())
    assert held_bytes(cohort) <= held_bytes(cases) + 32 * pooled_non_empty + 1024


def test_per_case_metrics_never_stack_the_dense_tables_of_every_case(monkeypatch):
    """Found by hostile testing: the report's per-case box plots (``reliability_curve(..., per_case=True)``) stacked
    the dense counts, a float64 copy of them and the sums of every case at once (155 MiB per 105-class case at the
    report's peak). Per-case metrics read the cases a block at a time now, never the stacked tables of all."""
    hist = _cohort()
    stack = ConfidenceHistogram._stack

    def refused(self, attr):
        if attr != "scalars":  # (N, 3): what nll and brier read
            raise AssertionError(f"the dense {attr} of every case were stacked")
        return stack(self, attr)

    monkeypatch.setattr(ConfidenceHistogram, "_stack", refused)
    monkeypatch.setattr(functional_module, "_CASE_BLOCK_BYTES", 1)
    calibration_metrics(hist, CALIBRATION_METRICS, per_case=True)
    for kind in KINDS:
        reliability_curve(hist, kind=kind, per_case=True)
    views = list(hist.case_views(max_bytes=1))
    assert [v[0].shape[0] for v in views] == [1] * len(hist)
    assert views[0][0].data_ptr() == views[-1][0].data_ptr()  # one buffer for every block


def test_array_blocks_check_their_blocks():
    whole = np.arange(12).reshape(6, 2)
    good = ArrayBlocks(whole.shape, whole.dtype, lambda rows: (whole[i : i + rows] for i in range(0, 6, rows)))
    assert [b.shape[0] for b in good.blocks(4)] == [4, 2] and np.array_equal(np.asarray(good), whole)
    short = ArrayBlocks((7, 2), whole.dtype, lambda rows: (whole[i : i + rows] for i in range(0, 6, rows)))
    with pytest.raises(ValueError, match="where 3 rows of an array of int64 \\(7, 2\\) were due"):
        list(short.blocks(4))
    other = ArrayBlocks(whole.shape, np.float64, lambda rows: (whole[i : i + rows] for i in range(0, 6, rows)))
    with pytest.raises(ValueError, match="a block of int64"):
        list(other.blocks())
    with pytest.raises(ValueError, match="rows must be a positive integer"):
        list(good.blocks(0))
