"""Hostile review 58 of the cohort engine on gloo ranks: what a rank sends must not leave the others waiting.

Workers are forked (torch.multiprocessing) and join a gloo group on loopback with a collective timeout of 60 s; the
parent gives up after a wall-clock limit, so a hang fails the test instead of blocking the suite.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests._ranks import free_port, run_forked_ranks

WAIT_S = 90  # wall-clock limit of one multi-process run
TIMEOUT_S = 60  # the collective timeout of the workers' group: a rank that waits for it has hung


def _worker(rank: int, world: int, port: int, what: str, out: str) -> None:
    import torch.distributed as dist

    from monai_unc.engine import get_dist_context, run_cases

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    start = time.monotonic()
    hooks: dict[str, Any] = {}
    if what == "summary":
        hooks["summarize"] = lambda run: {"made": lambda: 1}  # only rank 0 summarises
    elif what == "agree":
        hooks["agree"] = lambda cases: {"n": len(cases), "f": (lambda: 1) if rank == 1 else None}

    cases = ["c", "a", "b", "e", "d"]
    key: Any = str
    if what == "other_cases" and rank == 1:
        cases = [*cases, "f"]  # this rank sees another cohort
    elif what == "setup_or_key":
        hooks["setup"] = lambda: Path(out, "setup_ran").write_text("rank 0 set up the run")
        if rank == 1:
            key = lambda c: {"a": "a"}[c]  # noqa: E731 - a key that fails on this rank only

    if what in ("other_cases", "setup_or_key"):
        hooks.setdefault("setup", lambda: Path(out, "setup_ran").write_text("rank 0 set up the run"))

    def process(case: str) -> Any:
        return (lambda: 1) if what == "result" and case == "b" else case.upper()  # "b": rank 1 of 2

    try:
        run = run_cases(cases, process, command="toy", key=key, ctx=get_dist_context(), **hooks)
        res: Any = {"cases": run.cases}
    except Exception as e:
        res = {"error": f"{type(e).__name__}: {e}"}
    res["seconds"] = time.monotonic() - start
    Path(out, f"rank{rank}.json").write_text(json.dumps(res))
    dist.destroy_process_group()


def _run(what: str, world: int, out: Path) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    run_forked_ranks(_worker, (world, free_port(), what, str(out)), world, WAIT_S)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.parametrize("what,failing", [("result", 1), ("summary", 0), ("agree", 1)])
def test_a_value_that_does_not_pickle_fails_every_rank_at_once(tmp_path, what, failing):
    """Found by hostile testing: a case result (rank 1), a summary (rank 0) or an ``agree`` value that does not
    pickle raised inside the gather / broadcast on the rank that sent it, and the other ranks waited in that collective
    for the whole collective timeout (6 hours by default) before a gloo traceback. Now the sending rank raises a
    TypeError naming what could not be sent, and the others RankFailed, at once."""
    results = _run(what, 3 if what == "result" else 2, tmp_path)
    for rank, res in enumerate(results):
        assert res["seconds"] < TIMEOUT_S / 3, (rank, res)
        if rank == failing:
            assert res["error"].startswith("TypeError: "), res
            assert "cannot be sent" in res["error"] and "pickle" in res["error"], res
        else:
            assert res["error"].startswith(f"RankFailed: rank {failing} failed: TypeError: "), (rank, res)
    if what == "result":
        assert "case 'b'" in results[1]["error"]


def test_picklable_results_still_gather_in_case_order(tmp_path):
    """The check does not change a run that sends plain data: 5 cases on 3 ranks, every case once, sorted."""
    results = _run("none", 3, tmp_path)
    assert results[0]["cases"] == ["a", "b", "c", "d", "e"]
    assert results[1]["cases"] == results[2]["cases"] == []


def test_ranks_that_list_other_cases_stop_before_rank_0_sets_up(tmp_path):
    """Found by hostile testing: the case lists were compared after rank 0's set-up (which creates the cache folder
    and removes an earlier run's outputs), so a rank that listed another cohort was found out only once the folder
    had been changed. Now every rank refuses before the set-up runs."""
    results = _run("other_cases", 2, tmp_path)
    for res in results:
        assert res["error"].startswith("ValueError: ranks disagree on the case list"), res
    assert not (tmp_path / "setup_ran").exists()


def test_a_case_key_that_fails_on_one_rank_stops_every_rank_before_the_set_up(tmp_path):
    """A ``key`` that raises on rank 1 only (its items differ) raised there outside the shared steps; rank 0 went on
    into its set-up and then waited. Now rank 1 raises its error and rank 0 RankFailed, before any set-up."""
    results = _run("setup_or_key", 2, tmp_path)
    assert results[1]["error"].startswith("KeyError: "), results[1]
    assert results[0]["error"].startswith("RankFailed: rank 1 failed: KeyError: "), results[0]
    assert all(res["seconds"] < TIMEOUT_S / 3 for res in results)
    assert not (tmp_path / "setup_ran").exists()
