"""all_reduce_sum never wraps an integer count: a uint64 value above the int64 range and an int64 sum that passes
2**63 - 1 across ranks raise (on every rank) instead of giving a negative count (2 gloo processes on loopback, forked
from the test process: :func:`tests._ranks.run_forked_ranks`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from monai_unc.engine import DistContext, all_reduce_sum, destroy_dist_context, get_dist_context
from tests._ranks import free_port, run_forked_ranks

BIG = 2**62 + 7


def _rank(rank: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    ctx = get_dist_context()
    res = {}
    try:
        for name, x in (("overflow", np.array([1, BIG], np.int64)), ("negative", np.array([-BIG, -BIG], np.int64)),
                        ("fits", np.array([3, BIG - 10], np.int64))):
            try:
                res[name] = [int(v) for v in all_reduce_sum(x, ctx)]
            except ValueError as e:
                res[name] = str(e)
    finally:
        destroy_dist_context(ctx)
    Path(out, f"rank{rank}.json").write_text(json.dumps(res))


def test_int64_sum_beyond_the_range_raises_on_every_rank(tmp_path):
    run_forked_ranks(_rank, (free_port(), str(tmp_path)), 2, wait_s=120)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for res in got:
        # 2 * (2**62 + 7) is above 2**63 - 1: before the fix [2, -9223372036854775794]
        assert "overflows when rank 1's counts are added" in res["overflow"]
        assert "overflows" in res["negative"]
        assert res["fits"] == [6, 2 * (BIG - 10)]  # exact right up to the top of the range


def test_uint64_count_above_int64_range_is_refused():
    with pytest.raises(ValueError, match=r"x\['n'\] holds 9223372036854775813, above the int64 range"):
        all_reduce_sum({"n": np.array([2**63 + 5, 1], np.uint64)}, DistContext())
    out = all_reduce_sum(np.array([2**63 - 1], np.uint64), DistContext())  # the largest that fits
    assert out.dtype == np.int64 and int(out[0]) == 2**63 - 1


def test_keys_of_the_same_text_are_refused_not_dropped():
    # before the fix {'1': array([5])}: the entry under the integer key was dropped without a word
    with pytest.raises(ValueError, match=r"x has keys that name one entry \(1, '1'\)"):
        all_reduce_sum({1: np.array([1]), "1": np.array([5])}, DistContext())
    out = all_reduce_sum({1: np.array([1]), "2": np.array([5])}, DistContext())
    assert {k: v.tolist() for k, v in out.items()} == {"1": [1], "2": [5]}
