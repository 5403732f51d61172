"""The one state protocol (:mod:`monai_unc.state`): packing every registered state type of the package, the registry's
refusals, :class:`StateGroup` and the merge properties of the states whose merge is order independent."""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monai_unc import state as state_mod
from monai_unc.metrics.calibration import ConfidenceHistogram
from monai_unc.metrics.conformal import ConformalCaseState, conformal_case_state
from monai_unc.state import (
    MergeableState,
    StateGroup,
    pack_states,
    register_state_type,
    state_type,
    state_type_name,
    unpack_states,
)
from monai_unc.stats import SampleStats

F = 32  # fine bins: small tables keep the tests fast


def _probs(rng: np.random.Generator, shape: tuple[int, ...], c: int) -> np.ndarray:
    x = rng.random((c, *shape)) + 0.05
    return x / x.sum(0, keepdims=True)


def _hist(seed: int = 0, per_case: bool = True, uncertainty: bool = True, ids=("a", "b"), c: int = 3
          ) -> ConfidenceHistogram:
    rng = np.random.default_rng(seed)
    h = ConfidenceHistogram(c, n_fine_bins=F, per_case=per_case, uncertainty=uncertainty)
    probs = np.stack([_probs(rng, (4, 3), c) for _ in ids])
    h.update(probs, rng.integers(0, c, (len(ids), 4, 3)), case_ids=list(ids))
    return h


def _conformal(seed: int = 0, side: str = "outer") -> ConformalCaseState:
    rng = np.random.default_rng(seed)
    return conformal_case_state(_probs(rng, (5, 4), 3), rng.integers(0, 3, (5, 4)), side=side, grid=8)


def _stats(seed: int = 0, track_variance: bool = True, multilabel: bool = False) -> SampleStats:
    rng = np.random.default_rng(seed)
    s = SampleStats(track_variance=track_variance, multilabel=multilabel)
    for _ in range(3):
        p = rng.random((1, 2, 3, 3)) if multilabel else _probs(rng, (3, 3), 2)[None]
        s.update(torch.from_numpy(p))
    return s


def _hist_arrays(h: ConfidenceHistogram) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in h.state_dict().items()}


def _assert_same_arrays(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype, k
        assert x.shape == y.shape, k
        assert x.tobytes() == y.tobytes(), k  # bit for bit, NaN included


def _through_npz(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


# --- the registry ------------------------------------------------------------------------------------------------
@pytest.fixture
def registry():
    """The registry as it was before the test (the test may register toy types)."""
    saved = dict(state_mod._REGISTRY)
    yield
    state_mod._REGISTRY.clear()
    state_mod._REGISTRY.update(saved)


class Count:
    def __init__(self, n: int = 0) -> None:
        self.n = n

    def merge(self, other: Count) -> Count:
        self.n += other.n
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"n": np.int64(self.n)}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, np.ndarray]) -> Count:
        return cls(int(state["n"]))


def test_the_package_registers_its_state_types():
    assert state_type("confidence_histogram") is ConfidenceHistogram
    assert state_type("conformal_case") is ConformalCaseState
    assert state_type("sample_stats") is SampleStats
    assert state_type("group") is StateGroup
    assert state_type_name(_hist()) == "confidence_histogram"
    assert state_type_name(_conformal()) == "conformal_case"
    assert state_type_name(_stats()) == "sample_stats"
    assert state_type_name(StateGroup()) == "group"


@pytest.mark.parametrize("make", [_hist, _conformal, _stats, StateGroup, lambda: ConfidenceHistogram(2)])
def test_every_state_is_a_mergeable_state(make):
    assert isinstance(make(), MergeableState)


def test_objects_without_the_protocol_are_not_mergeable_states():
    assert not isinstance(np.zeros(3), MergeableState)
    assert not isinstance({"a": 1}, MergeableState)


def test_an_unregistered_class_is_refused(registry):
    with pytest.raises(ValueError, match="not registered"):
        state_type_name(Count())
    with pytest.raises(ValueError, match="not registered"):
        pack_states({"c": Count(3)})


def test_a_subclass_of_a_registered_class_is_not_registered_by_it():
    class MyHistogram(ConfidenceHistogram):
        pass

    with pytest.raises(ValueError, match="not registered"):
        state_type_name(MyHistogram(2))


def test_register_and_round_trip_a_toy_type(registry):
    cls = register_state_type("test.count")(Count)
    assert cls is Count and state_type("test.count") is Count and state_type_name(Count(1)) == "test.count"
    register_state_type("test.count")(Count)  # the same class again (a module reload) is allowed
    got = unpack_states(_through_npz(pack_states({"x": Count(7)})))
    assert type(got["x"]) is Count and got["x"].n == 7


def test_an_unknown_type_name_in_packed_arrays_is_refused():
    packed = pack_states({"h": _hist()})
    packed["h/__type__"] = np.array("no.such.type")
    with pytest.raises(ValueError, match="unknown state type 'no.such.type'"):
        unpack_states(packed)


def test_a_packed_state_without_its_type_is_refused():
    packed = pack_states({"h": _hist()})
    del packed["h/__type__"]
    with pytest.raises(ValueError, match="no '__type__'"):
        unpack_states(packed)


def test_unknown_member_type_of_a_group_is_refused():
    packed = pack_states({"g": StateGroup({"a": _hist()})})
    packed["g/0.__type__"] = np.array("os.system")
    with pytest.raises(ValueError, match="unknown state type 'os.system'"):
        unpack_states(packed)


@pytest.mark.parametrize("name", ["a/b", "", "/"])
def test_a_state_name_with_a_slash_or_empty_is_refused(name):
    with pytest.raises(ValueError, match="without '/'"):
        pack_states({name: _hist()})


def test_a_state_dict_with_the_reserved_type_key_is_refused(registry):
    @register_state_type("test.bad_key")
    class BadKey(Count):
        def state_dict(self):
            return {"__type__": np.array("x"), "n": np.int64(self.n)}

    with pytest.raises(ValueError, match="reserved"):
        pack_states({"b": BadKey(1)})


def test_another_class_under_a_taken_name_is_refused(registry):
    register_state_type("test.taken")(Count)

    class Other(Count):
        pass

    with pytest.raises(ValueError, match="registered by"):
        register_state_type("test.taken")(Other)
    with pytest.raises(ValueError, match="registered by"):
        register_state_type("confidence_histogram")(Other)
    assert state_type("test.taken") is Count and state_type("confidence_histogram") is ConfidenceHistogram


@pytest.mark.parametrize("missing", ["merge", "state_dict", "from_state_dict"])
def test_a_class_without_the_protocol_is_refused(registry, missing):
    attrs = {m: getattr(Count, m) for m in ("merge", "state_dict") if m != missing}
    if missing != "from_state_dict":
        attrs["from_state_dict"] = Count.__dict__["from_state_dict"]
    cls = type("Partial", (), attrs)
    with pytest.raises(TypeError, match=missing):
        register_state_type("test.partial")(cls)
    with pytest.raises(ValueError, match="unknown state type"):
        state_type("test.partial")


@pytest.mark.parametrize("name", ["", "a b", "a/b", "x;y", 3, None])
def test_a_malformed_type_name_is_refused(name):
    with pytest.raises(ValueError, match="name must be"):
        register_state_type(name)


def test_none_states_are_left_out_and_plain_keys_ignored():
    packed = pack_states({"h": _hist(), "none": None})
    assert not any(k.startswith("none/") for k in packed)
    packed["plain"] = np.arange(3)  # a key without '/' is not a state
    assert list(unpack_states(packed)) == ["h"]


# --- round trips -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("per_case", [True, False])
@pytest.mark.parametrize("uncertainty", [True, False])
def test_histogram_round_trip_bit_identical(per_case, uncertainty):
    h = _hist(per_case=per_case, uncertainty=uncertainty)
    packed = pack_states({"histogram": h})
    assert packed["histogram/__type__"] == "confidence_histogram"
    back = unpack_states(_through_npz(packed))["histogram"]
    assert type(back) is ConfidenceHistogram
    assert (back.per_case, back.uncertainty, back.num_classes, back.n_fine_bins) == (per_case, uncertainty, 3, F)
    assert back.case_ids == h.case_ids
    _assert_same_arrays(_hist_arrays(back), _hist_arrays(h))
    # repacking gives the very same arrays
    _assert_same_arrays(pack_states({"histogram": back}), packed)


def test_histogram_without_uncertainty_row_keeps_it_empty():
    h = _hist(uncertainty=False)
    back = unpack_states(_through_npz(pack_states({"h": h})))["h"]
    assert int(back.counts[:, back.uncertainty_row].sum()) == 0
    assert int(back.counts[:, back.top_row].sum()) == 2 * 12  # two cases of 4 x 3 voxels
    with_u = _hist(uncertainty=True)
    assert int(with_u.counts[:, with_u.uncertainty_row].sum()) == 2 * 12


def test_weighted_and_empty_and_int_id_histograms_round_trip():
    rng = np.random.default_rng(3)
    h = ConfidenceHistogram(2, n_fine_bins=F)
    h.update(_probs(rng, (5,), 2)[None], rng.integers(0, 2, (1, 5)), weights=rng.random((1, 5)) + 0.1)
    h.update(_probs(rng, (5,), 2)[None], rng.integers(0, 2, (1, 5)))  # automatically numbered: int ids
    assert h.weighted and h.case_ids == [0, 1]
    back = unpack_states(_through_npz(pack_states({"h": h})))["h"]
    assert back.case_ids == [0, 1] and back.weighted
    _assert_same_arrays(_hist_arrays(back), _hist_arrays(h))
    empty = unpack_states(_through_npz(pack_states({"e": ConfidenceHistogram(4, n_fine_bins=F)})))["e"]
    assert len(empty) == 0 and empty.num_classes == 4


@pytest.mark.parametrize("side", ["outer", "inner"])
def test_conformal_state_round_trip(side):
    s = _conformal(side=side)
    back = unpack_states(_through_npz(pack_states({"c": s})))["c"]
    assert type(back) is ConformalCaseState and back == s
    assert back.true_counts.tobytes() == s.true_counts.tobytes()
    assert back.false_counts.tobytes() == s.false_counts.tobytes()
    np.testing.assert_array_equal(back.losses(), s.losses())
    # the counts are those of the voxels: every true and every false voxel of each class once
    assert int(s.true_counts.sum()) == 20 and int((s.true_counts + s.false_counts).sum()) == 3 * 20


@pytest.mark.parametrize("track_variance", [True, False])
@pytest.mark.parametrize("multilabel", [False, True])
def test_sample_stats_from_tensors_and_from_unpacked_arrays(track_variance, multilabel):
    s = _stats(track_variance=track_variance, multilabel=multilabel)
    fresh = _stats(track_variance=track_variance, multilabel=multilabel)
    expected = {k: v.clone() for k, v in fresh.measures().items()}
    sd = s.state_dict()
    assert isinstance(sd["sum_p"], torch.Tensor)  # the state dict holds torch tensors
    from_tensors = SampleStats.from_state_dict(sd)
    packed = _through_npz(pack_states({"s": s}))
    assert isinstance(packed["s/sum_p"], np.ndarray) and packed["s/sum_p"].dtype == np.float64
    from_arrays = unpack_states(packed)["s"]
    assert type(from_arrays) is SampleStats
    for got in (from_tensors, from_arrays):
        assert (got.num_updates, got.sum_w, got.track_variance, got.multilabel) == (3, 3.0, track_variance,
                                                                                    multilabel)
        assert got.sum_p.dtype == torch.float64
        m = got.measures()
        assert sorted(m) == sorted(expected)
        for k in expected:
            assert m[k].dtype == expected[k].dtype, k
            torch.testing.assert_close(m[k], expected[k], rtol=0, atol=0)
    np.testing.assert_array_equal(packed["s/sum_p"], sd["sum_p"].numpy())


def test_sample_stats_mean_by_hand():
    rng = np.random.default_rng(0)
    ps = [_probs(rng, (3, 3), 2)[None] for _ in range(3)]
    back = unpack_states(_through_npz(pack_states({"s": _stats()})))["s"]
    np.testing.assert_allclose(back.measures(["pred"])["pred"].numpy(), np.mean(ps, axis=0), rtol=1e-12)


def test_nested_groups_round_trip():
    inner = StateGroup({"WT": _hist(1, ids=("c1",), c=2), "TC": _hist(2, ids=("c1",), c=2)})
    outer = StateGroup({"regions": inner, "outer": _conformal(3), "stats": _stats(4),
                        "empty": StateGroup()})
    packed = pack_states({"all": outer, "h": _hist(5)})
    back = unpack_states(_through_npz(packed))
    assert list(back) == ["all", "h"]
    g = back["all"]
    assert type(g) is StateGroup and list(g) == ["regions", "outer", "stats", "empty"]
    assert list(g["regions"]) == ["WT", "TC"] and len(g["empty"]) == 0
    for name in ("WT", "TC"):
        _assert_same_arrays(_hist_arrays(g["regions"][name]), _hist_arrays(inner[name]))
    assert g["outer"] == outer["outer"]
    torch.testing.assert_close(g["stats"].measures(), _stats(4).measures(), rtol=0, atol=0)
    _assert_same_arrays(pack_states({"all": g, "h": back["h"]}), packed)


def test_unpack_returns_states_in_name_order():
    packed = pack_states({"z": _conformal(0), "a": _conformal(1), "m": StateGroup()})
    assert list(unpack_states(packed)) == ["a", "m", "z"]


# --- StateGroup --------------------------------------------------------------------------------------------------
def test_group_merge_adds_missing_names_and_keeps_insertion_order():
    a = StateGroup({"WT": _conformal(0), "ET": _conformal(1)})
    b = StateGroup({"TC": _conformal(2), "WT": _conformal(3)})
    b_tc = b["TC"]
    expected_wt = _conformal(0).true_counts + _conformal(3).true_counts
    assert a.merge(b) is a
    assert list(a) == ["WT", "ET", "TC"]
    # a name only on the other side is taken as a copy (review 58: shared, a later merge into a changed b's state)
    assert a["TC"] == b_tc and a["TC"] is not b_tc
    np.testing.assert_array_equal(a["WT"].true_counts, expected_wt)
    assert a["ET"] == _conformal(1)
    c = StateGroup({"ET": _conformal(4)}).merge({"WT": _conformal(5)})  # a plain mapping is accepted
    assert list(c) == ["ET", "WT"]


def test_group_refuses_non_states_and_non_mappings():
    g = StateGroup()
    with pytest.raises(TypeError, match="mergeable state"):
        g["x"] = np.zeros(2)
    with pytest.raises(TypeError, match="mergeable state"):
        StateGroup({"x": 3})
    with pytest.raises(TypeError, match="StateGroup"):
        g.merge([_conformal()])


def test_group_equality_and_mapping_behaviour():
    a = StateGroup({"x": _conformal(0), "y": _conformal(1)})
    assert a == StateGroup({"x": _conformal(0), "y": _conformal(1)})
    assert a != StateGroup({"y": _conformal(1), "x": _conformal(0)})  # order matters (channel order)
    assert a != StateGroup({"x": _conformal(0), "y": _conformal(2)})
    del a["x"]
    assert list(a) == ["y"] and len(a) == 1
    with pytest.raises(TypeError):
        hash(a)


def test_conformal_merge_adds_counts():
    a, b = _conformal(0), _conformal(1)
    total = a.true_counts + b.true_counts, a.false_counts + b.false_counts
    assert a.merge(b) is a
    np.testing.assert_array_equal(a.true_counts, total[0])
    np.testing.assert_array_equal(a.false_counts, total[1])
    with pytest.raises(ValueError, match="same activation"):
        _conformal(0, "outer").merge(_conformal(0, "inner"))


# --- merge properties --------------------------------------------------------------------------------------------
_VOLS = np.random.default_rng(123)
N_CASES = 6
CASE_PROBS = [_probs(_VOLS, (3, 4), 3) for _ in range(N_CASES)]
CASE_LABELS = [_VOLS.integers(0, 3, (3, 4)) for _ in range(N_CASES)]
CASE_IDS = [f"c{i}" for i in range(N_CASES)]


def _hist_of(cases: list[int], per_case: bool) -> ConfidenceHistogram:
    h = ConfidenceHistogram(3, n_fine_bins=F, per_case=per_case)
    if cases:
        h.update(np.stack([CASE_PROBS[i] for i in cases]), np.stack([CASE_LABELS[i] for i in cases]),
                 case_ids=[CASE_IDS[i] for i in cases])
    return h


def _merge_tree(parts: list, tree: list[int]) -> object:
    """Merge ``parts`` in the grouping given by ``tree`` (a sequence of split points, consumed recursively)."""
    if len(parts) == 1:
        return parts[0]
    k = 1 + tree[0] % (len(parts) - 1) if tree else 1
    rest = tree[1:]
    return _merge_tree(parts[:k], rest).merge(_merge_tree(parts[k:], rest))


def _by_case(h: ConfidenceHistogram) -> dict[str, dict[str, np.ndarray]]:
    c, s, sc = h.counts.numpy(), h.sums.numpy(), h.scalars.numpy()
    return {str(cid): {"counts": c[i], "sums": s[i], "scalars": sc[i]} for i, cid in enumerate(h.case_ids)}


shards = st.lists(st.integers(0, 3), min_size=N_CASES, max_size=N_CASES)  # the shard of each case
orders = st.permutations(list(range(4)))
trees = st.lists(st.integers(0, 10), min_size=0, max_size=6)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(shard_of=shards, order=orders, tree=trees)
def test_histogram_shards_merged_in_any_grouping_equal_one_pass(shard_of, order, tree):
    one_pass = _hist_of(list(range(N_CASES)), per_case=True)
    parts = [_hist_of([i for i in range(N_CASES) if shard_of[i] == s], per_case=True) for s in order]
    merged = _merge_tree(parts, tree)
    # per case: exactly the histogram of the one pass (each case is in one shard), whatever the order
    got, want = _by_case(merged), _by_case(one_pass)
    assert sorted(got) == sorted(want)
    for cid in want:
        _assert_same_arrays(got[cid], want[cid])
    # pooled: integer counts exactly, float sums to rounding
    gc, _, gs, gsc = merged.views(per_case=False)
    wc, _, ws, wsc = one_pass.views(per_case=False)
    assert torch.equal(gc, wc)
    torch.testing.assert_close(gs, ws, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gsc, wsc, rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(shard_of=shards, order=orders, tree=trees)
def test_pooled_histogram_shards_merge_to_the_pooled_counts(shard_of, order, tree):
    one_pass = _hist_of(list(range(N_CASES)), per_case=False)
    parts = [_hist_of([i for i in range(N_CASES) if shard_of[i] == s], per_case=False) for s in order]
    merged = _merge_tree(parts, tree)
    assert len(merged) == 1
    assert torch.equal(merged.counts, one_pass.counts)
    # the number of voxels by hand: every voxel of every case once in the top-label row
    assert int(merged.counts[0, merged.top_row].sum()) == N_CASES * 12
    torch.testing.assert_close(merged.sums, one_pass.sums, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(merged.scalars, one_pass.scalars, rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(seeds=st.lists(st.integers(0, 1000), min_size=2, max_size=5), order=st.randoms(use_true_random=False),
       tree=trees)
def test_conformal_merge_is_associative_and_commutative(seeds, order, tree):
    parts = [_conformal(s) for s in seeds]
    expected_true = sum(p.true_counts for p in parts)
    expected_false = sum(p.false_counts for p in parts)
    shuffled = [_conformal(s) for s in seeds]
    order.shuffle(shuffled)
    merged = _merge_tree(shuffled, tree)
    np.testing.assert_array_equal(merged.true_counts, expected_true)
    np.testing.assert_array_equal(merged.false_counts, expected_false)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(order=st.permutations(["WT", "TC", "ET", "NC"]), split=st.integers(1, 3))
def test_groups_merge_name_by_name_in_any_order(order, split):
    # group i holds the states of the names order[i:] (so each side misses some names)
    groups = [StateGroup({n: _conformal(10 * i + k) for k, n in enumerate(order) if k >= i}) for i in range(3)]
    merged = StateGroup().merge(groups[0]).merge(groups[1]).merge(groups[2]) if split == 1 else \
        StateGroup().merge(groups[2]).merge(StateGroup().merge(groups[1]).merge(groups[0]))
    for k, n in enumerate(order):
        want = sum(_conformal(10 * i + k).true_counts for i in range(3) if k >= i)
        np.testing.assert_array_equal(merged[n].true_counts, want)
    assert sorted(merged) == sorted(order)


def test_a_group_of_many_members_round_trips():
    # members 1 and 10 .. 12 share a leading digit: each must read only its own arrays
    g = StateGroup({f"r{i}": _conformal(i) for i in range(13)})
    back = unpack_states(_through_npz(pack_states({"g": g})))["g"]
    assert list(back) == [f"r{i}" for i in range(13)]
    for i in range(13):
        assert back[f"r{i}"] == _conformal(i), i
