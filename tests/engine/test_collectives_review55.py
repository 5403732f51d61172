"""Hostile review 55: a refusal of one rank's own input in a reduction is raised on every rank, not left waiting.

``all_reduce_sum`` and ``reduce_state`` checked (and packed) a rank's input before their first collective; a rank
whose input was refused (a uint64 count above the int64 range, an empty ``SampleStats`` of a rank without samples)
raised alone while the other ranks waited in the gather for the whole collective timeout (6 hours by default).
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tests._ranks import free_port, run_forked_ranks

WAIT_S = 90


def _worker(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from monai_unc.engine.collectives import DistContext, all_reduce_sum, reduce_histogram, reduce_state
    from monai_unc.metrics.calibration import ConfidenceHistogram
    from monai_unc.stats import SampleStats

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    ctx = DistContext(rank=rank, world_size=world)
    res: dict[str, Any] = {}
    try:
        big = np.array([2**63 + 5], dtype=np.uint64) if rank == 1 else np.array([1], dtype=np.uint64)
        try:
            all_reduce_sum(big, ctx)
            res["sum"] = "no error"
        except ValueError as e:
            res["sum"] = f"{type(e).__name__}: {e}"
        stats = SampleStats()
        if rank == 0:  # rank 1 has no sample of its own
            stats.update(torch.tensor([[[0.2], [0.8]]], dtype=torch.float64))
        try:
            reduce_state(stats, ctx)
            res["state"] = "no error"
        except ValueError as e:
            res["state"] = f"{type(e).__name__}: {e}"
        # review 56: the type checks of reduce_state and reduce_histogram raised on the refused rank alone too
        hist = ConfidenceHistogram(2) if rank == 0 else None
        try:
            reduce_histogram(hist, ctx)
            res["hist"] = "no error"
        except ValueError as e:
            res["hist"] = f"{type(e).__name__}: {e}"
        try:
            reduce_state(stats if rank == 0 else {"n": 1}, ctx)
            res["type"] = "no error"
        except (TypeError, ValueError) as e:
            res["type"] = f"{type(e).__name__}: {e}"
        res["after"] = all_reduce_sum(np.array([rank + 1]), ctx).tolist()  # the group still works afterwards
    finally:
        dist.destroy_process_group()
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(res))


def test_a_refused_input_on_one_rank_raises_on_every_rank(tmp_path):
    run_forked_ranks(_worker, (2, free_port(), str(tmp_path)), 2, WAIT_S)
    res = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in range(2):
        assert "above the int64 range" in res[r]["sum"], (r, res[r])
        assert "SampleStats is empty" in res[r]["state"], (r, res[r])
        assert "hist must be a ConfidenceHistogram" in res[r]["hist"], (r, res[r])
        assert "state must be a mergeable state" in res[r]["type"], (r, res[r])
        assert res[r]["after"] == [3]
    assert res[1]["type"].startswith("TypeError") and res[0]["type"].startswith("RankFailed")
    assert "rank 1" in res[0]["sum"] and "rank 1" in res[0]["state"]  # the other rank names the one that failed
