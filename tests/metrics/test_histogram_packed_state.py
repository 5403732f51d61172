"""The packed state layout of a per-case confidence histogram (records, the resume cache, the ``torchrun`` gather).

A per-case histogram keeps each case's non-empty bins, but its records (``pack_states``: the evaluation's per-case
resume files and the payload every rank of a ``torchrun`` evaluate sends to rank 0) held the dense tables, ``24 R F``
bytes per case (37.6 MiB for 105 classes): rank 0 held them all at once. Records now hold the packed bins
(``packed_state_dict``); ``from_state_dict`` reads both layouts, and a packed state gets the dense path's checks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.evaluation import CaseResult
from monai_unc.metrics.calibration import ConfidenceHistogram
from monai_unc.metrics.calibration import histogram as hist_module
from monai_unc.state import StateGroup, pack_states, unpack_states


def _probs(c: int, shape=(6, 5, 4), seed=0, scale=3.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(scale * torch.randn(1, c, *shape, generator=g, dtype=torch.float64), 1)
    return p, torch.randint(0, c, (1, *shape), generator=g)


def _hist(c: int = 3, n: int = 3, weighted_case: int | None = None, per_case: bool = True,
          n_fine_bins: int = 64) -> ConfidenceHistogram:
    h = ConfidenceHistogram(c, n_fine_bins=n_fine_bins, per_case=per_case)
    for k in range(n):
        p, y = _probs(c, seed=k, scale=1.0 + k)
        w = None
        if k == weighted_case:
            w = torch.rand(y.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
            w[..., 0] = 0.0  # zero-weight voxels are left out
        h.update(p, y, weights=w, case_ids=None if k == 1 else [f"case{k}"])  # case 1: an automatic number
    return h


def _same_states(a: ConfidenceHistogram, b: ConfidenceHistogram) -> None:
    """The same cases, ids and tables, bit for bit (the packed cases' arrays and dtypes too)."""
    assert a.case_ids == b.case_ids and a.per_case == b.per_case and a.uncertainty == b.uncertainty
    assert len(a._states) == len(b._states)
    for x, y in zip(a._states, b._states):
        assert type(x) is type(y)
        if isinstance(x, hist_module._PackedState):
            for k in ("index", "counts_nz", "sums_nz", "wcounts_nz", "scalars"):
                u, v = getattr(x, k), getattr(y, k)
                assert (u is None) == (v is None), k
                if u is not None:
                    assert u.dtype == v.dtype and torch.equal(u, v), k
    if len(a):
        da, db = a.state_dict(), b.state_dict()
        assert sorted(da) == sorted(db)
        for k in da:
            assert np.asarray(da[k]).tobytes() == np.asarray(db[k]).tobytes(), k


def test_a_many_class_record_holds_the_case_bins_not_its_dense_tables():
    """A 105-class case's record (``pack_states``, ``CaseResult.to_record``): about the histogram's packed bytes, not
    the 37.6 MiB of its dense tables (the record held the dense tables before)."""
    h = ConfidenceHistogram(105)
    p, y = _probs(105, shape=(8, 8, 8))
    h.update(p, y, case_ids=["a"])
    dense = 24 * h.num_rows * h.n_fine_bins
    record = pack_states({"histogram": h})
    got = sum(v.nbytes for v in record.values())
    assert "histogram/counts" not in record and "histogram/sums" not in record
    assert got < h.nbytes + 4096 < dense / 50, (got, h.nbytes, dense)
    regions = StateGroup({"WT": ConfidenceHistogram(2).update(*_probs(2, shape=(8, 8, 8)), case_ids=["a"])})
    _, arrays = CaseResult({"case": "a"}, h, region_histograms=dict(regions)).to_record()
    assert sum(v.nbytes for v in arrays.values()) < got + 64 * 1024
    assert not any(k.endswith("counts") and "bin_" not in k for k in arrays)


@pytest.mark.parametrize("weighted_case", [None, 2])
@pytest.mark.parametrize("packed_cases", [True, False])
def test_packed_round_trip_is_exact(monkeypatch, weighted_case, packed_cases):
    """packed_state_dict -> from_state_dict gives the same cases bit for bit, and so does a record; a dense state
    gives the same histogram as a packed one (the layouts read alike: in a weighted histogram every case comes back
    with its weights, an unweighted one's being its counts, as the dense layout always gave)."""
    monkeypatch.setattr(hist_module, "PACKED_CASES", packed_cases)
    h = _hist(weighted_case=weighted_case)
    packed = h.packed_state_dict()
    assert packed["bin_offsets"].dtype == np.int64 and packed["bin_offsets"][0] == 0
    assert packed["bin_index"].dtype == np.int32 and packed["bin_counts"].dtype == np.uint8
    assert ("bin_weighted_counts" in packed) == (weighted_case is not None)
    ref = h if weighted_case is None else ConfidenceHistogram.from_state_dict(h.state_dict())
    _same_states(ref, ConfidenceHistogram.from_state_dict(packed))
    _same_states(ref, unpack_states(pack_states({"h": h}))["h"])
    _same_states(ConfidenceHistogram.from_state_dict(h.state_dict()), ConfidenceHistogram.from_state_dict(packed))
    # and the metrics read the same numbers
    back = ConfidenceHistogram.from_state_dict(packed)
    for per_case in (False, True):
        for a, b in zip(h.views(per_case), back.views(per_case)):
            assert torch.equal(a, b)


def test_pooled_empty_and_group_round_trips():
    """A pooled histogram, an empty one and a StateGroup of region histograms go through the packed layout too."""
    pooled = _hist(per_case=False, weighted_case=0)
    back = ConfidenceHistogram.from_state_dict(pooled.packed_state_dict())
    assert not back.per_case and isinstance(back._states[0], hist_module._State)
    for a, b in zip(pooled.views(False), back.views(False)):
        assert torch.equal(a, b)
    empty = ConfidenceHistogram(4, n_fine_bins=16)
    e = ConfidenceHistogram.from_state_dict(empty.packed_state_dict())
    assert len(e) == 0 and e.num_classes == 4
    group = StateGroup({"WT": _hist(2), "TC": _hist(2, n=2)})
    arrays = group.packed_state_dict()
    assert "0.bin_index" in arrays and "0.counts" not in arrays
    got = StateGroup.from_state_dict(arrays)
    assert list(got) == ["WT", "TC"]
    for name in group:
        _same_states(group[name], got[name])
    from monai_unc.state import record_arrays  # what pack_states sends of a state

    assert set(record_arrays(group)) == set(arrays)


def test_old_dense_records_still_load(tmp_path):
    """A record of the dense layout (what pack_states wrote before, in resume caches of earlier runs) still loads,
    to the same histogram as the packed record; so does a file of either layout (ConfidenceHistogram.load)."""
    h = _hist(weighted_case=0)
    dense_record = {"histogram/__type__": np.array("confidence_histogram")}
    dense_record.update({f"histogram/{k}": np.asarray(v) for k, v in h.state_dict().items()})
    np.savez_compressed(tmp_path / "old.npz", **dense_record)
    with np.load(tmp_path / "old.npz") as z:
        old = unpack_states({k: z[k] for k in z.files})["histogram"]
    _same_states(old, ConfidenceHistogram.from_state_dict(h.packed_state_dict()))
    for a, b in zip(h.views(True), old.views(True)):
        assert torch.equal(a, b)
    np.savez(tmp_path / "packed.npz", **h.packed_state_dict())
    _same_states(old, ConfidenceHistogram.load(tmp_path / "packed.npz"))


def _edit(packed: dict, key: str, fn) -> dict:
    out = {k: np.array(v, copy=True) for k, v in packed.items()}
    out[key] = fn(out[key])
    return out


def _set(arr: np.ndarray, where, value) -> np.ndarray:
    arr = arr.astype(np.result_type(arr.dtype, np.asarray(value).dtype), copy=True)
    arr[where] = value
    return arr


HOSTILE = {
    "negative count": ("bin_counts", lambda a: _set(a.astype(np.int16), (0, 0), -1), "non-negative"),
    "non-finite sum": ("bin_sums", lambda a: _set(a, 3, np.nan), "non-finite"),
    "infinite scalar": ("scalars", lambda a: _set(a, (0, 1), np.inf), "non-finite"),
    "index out of range": ("bin_index", lambda a: _set(a, -1, 6 * 64), r"\[0, 384\)"),
    "negative index": ("bin_index", lambda a: _set(a, 0, -1), r"\[0, 384\)"),
    "unsorted index": ("bin_index", lambda a: _set(a, [0, 1], a[[1, 0]]), "strictly increasing"),
    "repeated index": ("bin_index", lambda a: _set(a, 1, a[0]), "strictly increasing"),
    "float index": ("bin_index", lambda a: a.astype(np.float64), "integers"),
    "float counts": ("bin_counts", lambda a: a.astype(np.float64) + 0.5, "integers"),
    "huge unsigned count": ("bin_counts", lambda a: _set(a.astype(np.uint64), (0, 0), 2**63 + 5), "beyond int64"),
    "offsets not from 0": ("bin_offsets", lambda a: a + 1, "rise from 0"),
    "offsets that fall": ("bin_offsets", lambda a: _set(a, 1, a[2] + 1), "rise from 0"),
    "offsets short of the bins": ("bin_offsets", lambda a: _set(a, -1, a[-1] - 1), "rise from 0"),
    "offsets as floats": ("bin_offsets", lambda a: a.astype(np.float64), "integers"),
    "offsets of another shape": ("bin_offsets", lambda a: a[None], r"\(N \+ 1,\)"),
    "counts of another shape": ("bin_counts", lambda a: a[:, :-1], "shape"),
    "a case too many": ("bin_offsets", lambda a: np.append(a, a[-1]), "shape"),
    "negative weight": ("bin_weighted_counts", lambda a: _set(a, (1, 0), -0.5), "non-negative"),
    "a count moved to another row": ("bin_counts", lambda a: _set(a, (0, 0), a[0, 0] + 1), "state counts"),
    "a sum outside its bin": ("bin_sums", lambda a: a * 3.0, "state sums"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_packed_states_are_refused(case):
    """A damaged or edited packed record: ValueError naming what is wrong, the histogram unchanged."""
    key, fn, match = HOSTILE[case]
    packed = _hist(4, weighted_case=0).packed_state_dict()
    bad = _edit(packed, key, fn)
    target = _hist(4, n=2, weighted_case=None)
    before = target.packed_state_dict()
    with pytest.raises(ValueError, match=match):
        target.load_state_dict(bad)
    with pytest.raises(ValueError, match=match):
        ConfidenceHistogram.from_state_dict(bad)
    after = target.packed_state_dict()
    assert sorted(before) == sorted(after)
    for k in before:
        assert np.array_equal(before[k], after[k]), k


def test_missing_or_mixed_layouts_are_refused():
    """A state with packed and dense tables, or packed ones without all their arrays, is a damaged state."""
    h = _hist()
    both = {**h.state_dict(), **h.packed_state_dict()}
    with pytest.raises(ValueError, match="both layouts"):
        ConfidenceHistogram.from_state_dict(both)
    partial = dict(h.packed_state_dict())
    del partial["bin_sums"]
    with pytest.raises(ValueError, match="lacks"):
        ConfidenceHistogram.from_state_dict(partial)
    ids = dict(h.packed_state_dict(), case_ids=np.array(["a"]))
    with pytest.raises(ValueError, match="case ids"):
        ConfidenceHistogram.from_state_dict(ids)


def test_merging_cases_asks_each_case_for_its_weights_a_bounded_number_of_times(monkeypatch):
    """A new case's slot asked ``weighted`` of the whole histogram, which asks every case so far: merging N cases
    (what ``evaluate`` does per case) asked N^2 / 2 times (0.59 ms a case at 8 000 cases; found by the benchmark
    review). The tables are unchanged."""
    rng = np.random.default_rng(0)
    cases = []
    for i in range(150):
        p = torch.from_numpy(rng.dirichlet([1, 1], size=(4, 4, 4)).astype(np.float32)).permute(3, 0, 1, 2)[None]
        y = torch.from_numpy(rng.integers(0, 2, size=(1, 1, 4, 4, 4)))
        h = ConfidenceHistogram(2, per_case=True)
        h.update(p.contiguous(), y, case_ids=[f"c{i:03d}"])
        cases.append(h)
    expected = ConfidenceHistogram(2, per_case=True)
    for h in cases:
        expected.merge(h)
    asked = []
    weighted = hist_module._PackedState.weighted

    def counted(self):
        asked.append(1)
        return weighted.fget(self)

    monkeypatch.setattr(hist_module._PackedState, "weighted", property(counted))
    merged = ConfidenceHistogram(2, per_case=True)
    for h in cases:
        merged.merge(h)
    assert len(asked) <= 3 * len(cases), f"{len(asked)} weight questions for {len(cases)} cases"
    assert merged.case_ids == expected.case_ids
    for a, b in zip(merged.state_dict().values(), expected.state_dict().values()):
        assert np.array_equal(np.asarray(a), np.asarray(b))
