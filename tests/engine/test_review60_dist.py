"""Hostile review 60 of the distributed cohort engine and the mergeable states it sends between ranks."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import monai_unc.engine.run as run_module
from monai_unc._utils import canonical_text as _canonical_text
from monai_unc.engine import CaseCache, DistContext, check_same, reduce_state, run_cases
from monai_unc.io.cases import settings_changes
from monai_unc.state import as_array, pack_states, unpack_states
from monai_unc.stats import SampleStats


def test_repeated_case_ids_are_refused_before_the_set_up_and_any_folder(tmp_path):
    """Regression: a list with a repeated id was refused only by the sharding, after rank 0 had taken the output
    folder, created the cache's folder and run ``setup`` (which may remove an earlier run's outputs)."""
    ran = []
    with pytest.raises(ValueError, match=r"unique ids, got duplicates \['a'\]"):
        run_cases(["a", "b", "a"], str.upper, command="toy", key=str, setup=lambda: ran.append("setup"),
                  cache=CaseCache(tmp_path / "state"), lock=tmp_path / "out")
    assert ran == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _bf16_stats() -> SampleStats:
    gen = torch.Generator().manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # half-precision sums warn
        stats = SampleStats(accum_dtype=torch.bfloat16)
    for _ in range(5):
        stats.update(torch.softmax(2 * torch.randn(1, 3, 500, generator=gen), dim=1))
    return stats


def test_bfloat16_sums_pack_and_reduce_exactly():
    """Regression: a SampleStats of bfloat16 sums (accepted, with a warning) could not be packed, saved or reduced
    over ranks: numpy has no bfloat16 and ``as_array`` ended in ``TypeError: Got unsupported ScalarType BFloat16``.
    They travel as float32, which holds every bfloat16 value exactly, and are read back as bfloat16 sums with
    bfloat16's tolerance (float32's 1e-3 refused these 5 samples, whose means' sums are off 1 by 6e-3)."""
    x = torch.tensor([1.5, -3.0e38, 2.0**-130], dtype=torch.bfloat16)
    got = as_array(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x.float().numpy())
    stats = _bf16_stats()
    assert float((stats.mean.double().sum(1) - 1).abs().max()) > 1e-3
    for back in (unpack_states(pack_states({"s": stats}))["s"], reduce_state(stats, DistContext())):
        assert back.count == stats.count == 5.0 and back.num_updates == 5 and back.accum_dtype == torch.bfloat16
        for name in ("sum_p", "sum_h", "sum_p2"):
            assert torch.equal(getattr(back, name), getattr(stats, name)), name  # bit for bit, in bfloat16
        m1, m2 = stats.measures(), back.measures()
        assert all(torch.equal(m1[k], m2[k]) for k in m1)


def test_a_state_without_accum_dtype_reads_its_sums_dtype_and_a_bad_one_is_refused():
    """States of earlier versions have no ``accum_dtype``: the sums' dtype; a name of no float dtype is refused."""
    stats = SampleStats().update(torch.tensor([[[0.25], [0.75]]], dtype=torch.float32))
    state = {k: v for k, v in stats.state_dict().items() if k != "accum_dtype"}
    assert SampleStats.from_state_dict(state).accum_dtype == torch.float64
    with pytest.raises(ValueError, match="accum_dtype must name a floating point torch dtype"):
        SampleStats.from_state_dict({**state, "accum_dtype": "int8"})


def test_check_same_takes_a_nan_for_itself_and_compares_arrays():
    """Regression: compared with ``==``, a NaN differed from itself (one process: "rank 0 differs from rank 0") and
    an array raised "The truth value of an array ... is ambiguous"."""
    for value in (float("nan"), {"t": [1.0, float("nan")]}, np.arange(3.0), torch.arange(3.0)):
        check_same(value, DistContext(), "a setting")


def test_rank_agreement_compares_every_element_of_an_array(monkeypatch):
    """Regression: ``agree`` values were compared as JSON text with ``repr`` for the rest, and the repr of an array
    of 2000 values elides its middle: a rank whose array differed there was taken to agree."""
    ours = np.zeros(2000)
    theirs = ours.copy()
    theirs[1000] = 1.0
    ctx = DistContext(rank=0, world_size=2)
    monkeypatch.setattr(run_module, "all_gather_objects", lambda value, ctx: [{"w": ours}, {"w": theirs}])
    with pytest.raises(ValueError, match=r"rank 1 runs toy with other options .*\(rank 0 -> rank 1: w changed\)"):
        run_module._check_agreement({"w": ours}, ctx, "toy")
    monkeypatch.setattr(run_module, "all_gather_objects", lambda value, ctx: [{"w": ours}, {"w": ours.copy()}])
    run_module._check_agreement({"w": ours}, ctx, "toy")  # equal arrays agree
    assert settings_changes({"t": float("nan"), "w": ours}, {"t": float("nan"), "w": ours.copy()}) == []
    # a set's order follows the process's string hashing (PYTHONHASHSEED differs between torchrun's processes)
    assert _canonical_text({"b", "a"}) == _canonical_text(frozenset(["a", "b"]))
    assert json.loads(_canonical_text({"b", "a"})) == {"__set__": ['"a"', '"b"']}
    assert len({_canonical_text(v) for v in (1, 1.0, True, np.int64(1), np.float32(1))}) == 5  # told apart


def _three_ranks(rank: int, world: int, port: int, out: str) -> None:
    import datetime
    import os

    import torch.distributed as dist

    from monai_unc.engine import all_reduce_sum, reduce_histogram
    from monai_unc.metrics.calibration import ConfidenceHistogram

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    ctx = DistContext(rank=rank, world_size=world)
    try:
        probs, labels = _voxels()
        hist = ConfidenceHistogram(3, n_fine_bins=48)
        mine = [i for i in range(len(labels)) if rank < world - 1 and i % (world - 1) == rank]  # the last: none
        for i in mine:
            hist.update(probs[i][None], labels[i][None])
        pooled = reduce_histogram(hist, ctx)
        sums = all_reduce_sum({"n": np.array([len(mine), 2**40 * rank]), "x": np.array([0.1 * (rank + 1), 1e16])},
                              ctx)
        # counts of mixed signs: the partial sum 2**63 - 1 + 1 leaves the int64 range, the total does not (it raised)
        top = all_reduce_sum(np.array([[2**63 - 1, 1, -1][rank], -5]), ctx)
        np.savez(os.path.join(out, f"rank{rank}.npz"), counts=pooled.counts.numpy(), sums=pooled.sums.numpy(),
                 scalars=pooled.scalars.numpy(), n=sums["n"], x=sums["x"], top=top)
    finally:
        dist.destroy_process_group()


def _voxels() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(60)
    probs = rng.dirichlet([0.5, 0.5, 0.5], size=(5, 40)).transpose(0, 2, 1)  # 5 cases (C=3, 40 voxels)
    return probs, rng.integers(0, 3, size=(5, 40))


def test_three_ranks_one_without_cases_pool_as_one_process(tmp_path):
    """3 gloo ranks, the last without a case: the pooled histogram is that of every voxel in one process (counts
    exact, sums within float64 rounding), and all_reduce_sum adds in rank order on every rank (the same bits).

    Regression (review 60): an int64 sum whose partial sum in rank order left the range raised although the total of
    the mixed-sign counts (2**63 - 1, 1, -1) lies in it."""
    from monai_unc.metrics.calibration import ConfidenceHistogram
    from tests._ranks import free_port, run_forked_ranks

    run_forked_ranks(_three_ranks, (3, free_port(), str(tmp_path)), 3, 90)
    probs, labels = _voxels()
    one = ConfidenceHistogram(3, n_fine_bins=48)
    one.update(probs.transpose(1, 0, 2).reshape(1, 3, -1), labels.reshape(1, -1))
    got = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(3)]
    for g in got:
        np.testing.assert_array_equal(g["counts"], one.counts.numpy())
        np.testing.assert_allclose(g["sums"], one.sums.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g["scalars"], one.scalars.numpy(), rtol=1e-12)
        assert g["n"].tolist() == [5, 3 * 2**40]
        assert g["top"].dtype == np.int64 and g["top"].tolist() == [2**63 - 1, -15]
        assert g["x"].tolist() == [(0.1 + 0.2) + 0.30000000000000004, (1e16 + 1e16) + 1e16]  # rank order
        for k in g:
            np.testing.assert_array_equal(g[k], got[0][k])  # the same bits on every rank


def test_gather_and_broadcast_refuse_a_root_that_is_no_rank_on_one_process_too():
    """Regression: ``gather_objects(dst=3)`` / ``broadcast_object(src=3)`` returned on one process and failed on
    several (``ValueError``, or a gloo ``RuntimeError`` naming no argument for ``src``)."""
    from monai_unc.engine import broadcast_object, gather_objects

    for call, name in ((lambda r: gather_objects(7, DistContext(), dst=r), "dst"),
                       (lambda r: broadcast_object(7, DistContext(), src=r), "src")):
        for bad in (1, -1, True, 0.0):
            with pytest.raises(ValueError, match=rf"{name} must be a rank in \[0, 1\)"):
                call(bad)
        assert call(0) in ([7], 7)


def test_statistics_rebuilt_from_a_state_check_the_samples_added_later():
    """Regression: ``SampleStats.from_state_dict`` (and so ``reduce_state``, ``unpack_states``) built statistics with
    ``validate=False``: a later sample (0.9, 0.9), refused by the statistics it came from, gave a mean of
    (0.55, 0.85), summing to 1.4, without a word."""
    stats = SampleStats().update(torch.tensor([[[0.2], [0.8]]], dtype=torch.float64))
    bad = torch.tensor([[[0.9], [0.9]]], dtype=torch.float64)
    for back in (SampleStats.from_state_dict(stats.state_dict()), reduce_state(stats, DistContext()),
                 unpack_states(pack_states({"s": stats}))["s"], stats):
        with pytest.raises(ValueError, match="probs must sum to 1 over the class dimension"):
            back.update(bad)
        assert back.count == 1.0


@pytest.mark.parametrize("seed", range(6))
def test_bfloat16_sums_save_and_load_whatever_their_rounding(tmp_path, seed):
    """Regression: ``io.save_state`` handed a SampleStats' tensors to numpy as they were (bfloat16: "Got unsupported
    ScalarType BFloat16"), and sums that travelled as float32 were checked with float32's rounding: about half of such
    states (1-4 samples) were refused as "mean_sq must lie between mean^2 and mean" by bfloat16's rounding."""
    from monai_unc.io import save_state

    gen = torch.Generator().manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        stats = SampleStats(accum_dtype=torch.bfloat16)
    for _ in range(1 + seed % 4):
        stats.update(torch.softmax(2 * torch.randn(1, 3, 8, 8, generator=gen), dim=1))
    with np.load(save_state(tmp_path / "s", stats)) as z:
        saved = dict(z)
    for back in (SampleStats.from_state_dict(saved), unpack_states(pack_states({"s": stats}))["s"]):
        assert back.accum_dtype == torch.bfloat16
        for name in ("sum_p", "sum_h", "sum_p2"):
            assert torch.equal(getattr(back, name), getattr(stats, name)), name


def test_statistics_load_from_read_npz_whose_large_arrays_are_streamed(tmp_path):
    """Regression: ``state.read_npz`` gives an array of 16 MiB or more as ``ArrayBlocks``, and
    ``SampleStats.from_state_dict`` refused it ("sum_p must be a numpy array or a torch tensor, got ArrayBlocks")."""
    from monai_unc.io import save_state
    from monai_unc.state import StateGroup, read_npz

    gen = torch.Generator().manual_seed(0)
    stats = SampleStats().update(torch.softmax(torch.randn(1, 3, 6, 7, generator=gen, dtype=torch.float64), dim=1))
    path = save_state(tmp_path / "s", StateGroup({"member": stats}))
    arrays = read_npz(path, stream_bytes=16)  # every array of 16 bytes or more streamed, as 16 MiB ones are
    assert any(type(v).__name__ == "ArrayBlocks" for v in arrays.values())
    back = StateGroup.from_state_dict(arrays)["member"]
    for name in ("sum_p", "sum_h", "sum_p2"):
        assert torch.equal(getattr(back, name), getattr(stats, name)), name


def test_dense_histogram_counts_given_as_floats_must_be_whole_numbers():
    """Regression: a dense state (an edited ``histogram.npz``, or tables gathered as floats) with counts 1.5 or NaN
    was read with the counts truncated to int64 without a word (2.5 read as 2); the packed layout refuses float
    counts outright. Whole numbers given as floats (counts summed as floats across ranks) are still read."""
    from monai_unc.metrics.calibration import ConfidenceHistogram

    rng = np.random.default_rng(0)
    probs, labels = rng.dirichlet([1, 1, 1], 200).T[None], rng.integers(0, 3, (1, 200))
    hist = ConfidenceHistogram(3, n_fine_bins=32).update(probs, labels)
    state = hist.state_dict()
    for counts in (state["counts"] + 0.5 * (state["counts"] > 0), np.where(state["counts"] > 0, np.nan, 0.0)):
        for given in (counts, torch.from_numpy(counts)):
            with pytest.raises(ValueError, match="state counts must hold whole numbers of voxels"):
                ConfidenceHistogram.from_state_dict({**state, "counts": given})
    back = ConfidenceHistogram.from_state_dict({**state, "counts": state["counts"].astype(np.float64)})
    assert torch.equal(back.counts, hist.counts)
