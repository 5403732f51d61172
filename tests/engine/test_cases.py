"""The cohort engine (``monai_unc.engine.run_cases``, ``process_cases``, ``CaseCache``) with toy per-case
functions: order, failures, resume, partial files, one process and two gloo ranks."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from monai_unc.engine import (
    CaseCache,
    CaseFailure,
    CasesFailed,
    CohortRun,
    DistContext,
    RankFailed,
    destroy_dist_context,
    get_dist_context,
    process_cases,
    run_cases,
    settings_changes,
    shard,
)
from monai_unc.io import atomic_save_npz
from tests._ranks import free_port


@dataclass(frozen=True)
class Item:
    case_id: str
    value: float
    bad: bool = False


def _square(item: Item) -> dict:
    if item.bad:
        raise ValueError(f"cannot square {item.case_id}\nsecond line")
    return {"case": item.case_id, "square": item.value**2}


ITEMS = [Item(f"c{i}", float(i) + 0.5) for i in (3, 0, 4, 1, 2)]


def _counting(calls: list[str]):
    """:func:`_square` that appends the id of every case it computes to ``calls``."""

    def square(item: Item) -> dict:
        calls.append(item.case_id)
        return _square(item)

    return square


def _cache(folder: Path, version: int = 1) -> CaseCache:
    def fingerprint(item: Item) -> dict:
        return {"value": item.value, "version": version}

    return CaseCache(folder, fingerprint)


def test_single_process_results_are_sorted_whatever_the_order_and_the_shards():
    expected = {it.case_id: it.value**2 for it in ITEMS}
    for order in (ITEMS, ITEMS[::-1]):
        run = run_cases(order, _square, command="toy", ctx=DistContext(),
                        summarize=lambda r: [res["square"] for res in r.results])
        assert run.cases == sorted(expected) and run.ranks == [0] * len(ITEMS)
        assert run.summary == [expected[c] for c in sorted(expected)]
    # the shards of any world size together are the cohort, each case once
    for world in (1, 2, 3, 7):
        done = [c for r in range(world) for c, _ in process_cases(shard(ITEMS, r, world, key=lambda i: i.case_id),
                                                                  _square)]
        assert sorted(done) == sorted(expected)


def test_default_context_is_a_single_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    run = run_cases(lambda: ITEMS[:2], _square, command="toy")
    assert run.cases == ["c0", "c3"] and not run.ctx.distributed and run.summary is None


def test_failures_are_collected_written_and_raised(tmp_path, capsys):
    items = [*ITEMS, Item("c9", 1.0, bad=True), Item("c5", 1.0, bad=True)]
    seen: list[CaseFailure] = []
    summarized, cleaned = [], []
    with pytest.raises(CasesFailed) as caught:
        run_cases(items, _square, command="monai-unc toy", ctx=DistContext(), failures_file=tmp_path / "failures.json",
                  summarize=summarized.append, on_failed=lambda r: cleaned.append(r.cases) or "stale removed")
    e = caught.value
    assert [f.case for f in e.failures] == ["c5", "c9"] and e.results == "stale removed"
    assert e.failures[0] == CaseFailure("c5", 0, "ValueError: cannot square c5")
    assert str(e).startswith("2 case(s) failed: 'c5', 'c9'; first error: ValueError: cannot square c5")
    assert not summarized and cleaned == [sorted(it.case_id for it in ITEMS)]  # every other case was processed
    doc = json.loads((tmp_path / "failures.json").read_text())
    assert doc["n_failed"] == 2 and [f["case"] for f in doc["failures"]] == ["c5", "c9"]
    assert "monai-unc toy again" in doc["resume"]
    err = capsys.readouterr().err.splitlines()
    assert "monai-unc toy: case 'c9' failed: ValueError: cannot square c9" in err
    assert "monai-unc toy: case 'c5' failed: ValueError: cannot square c5" in err
    # on_failure replaces the stderr line; a later clean run removes the stale failures.json
    with pytest.raises(CasesFailed):
        run_cases(items, _square, command="toy", ctx=DistContext(), on_failure=seen.append)
    assert sorted(f.case for f in seen) == ["c5", "c9"] and capsys.readouterr().err == ""
    run_cases(ITEMS, _square, command="toy", ctx=DistContext(), failures_file=tmp_path / "failures.json")
    assert not (tmp_path / "failures.json").exists()


def test_a_summary_step_may_reject_cases_found_bad_only_together(tmp_path, capsys):
    def summarize(run: CohortRun) -> None:
        raise CasesFailed([CaseFailure("c1", run.ctx.rank, "CaseError: another number of classes")])

    cleaned = []
    with pytest.raises(CasesFailed) as caught:
        run_cases(ITEMS, _square, command="toy", ctx=DistContext(), failures_file=tmp_path / "failures.json",
                  summarize=summarize, on_failed=lambda r: cleaned.append(len(r.failures)))
    assert [f.case for f in caught.value.failures] == ["c1"] and cleaned == [1]
    assert json.loads((tmp_path / "failures.json").read_text())["failures"][0]["case"] == "c1"
    assert "toy: case 'c1' failed: CaseError: another number of classes" in capsys.readouterr().err


def test_stop_on_error_raises_the_first_case_error_and_collects_nothing(tmp_path, capsys):
    """``stop_on_error``: the engine as a plain loop that raises the first error (``evaluate_cases``)."""
    calls: list[str] = []
    items = [Item("c0", 1.0), Item("c1", 2.0, bad=True), Item("c2", 3.0, bad=True)]
    with pytest.raises(ValueError, match="cannot square c1"):
        run_cases(items, _counting(calls), command="toy", ctx=DistContext(), stop_on_error=True,
                  failures_file=tmp_path / "failures.json", summarize=lambda r: pytest.fail("summarized"),
                  on_failed=lambda r: pytest.fail("cleaned up"))
    assert calls == ["c0", "c1"] and not (tmp_path / "failures.json").exists()
    assert capsys.readouterr().err == ""  # nothing reported: the caller gets the exception itself
    run = run_cases(ITEMS, _square, command="toy", ctx=DistContext(), stop_on_error=True,
                    summarize=lambda r: len(r.results))
    assert run.summary == len(ITEMS)


def test_errors_outside_the_cases_raise_at_once(tmp_path):
    def listing() -> list[Item]:
        raise FileNotFoundError("no such folder")

    with pytest.raises(FileNotFoundError, match="no such folder"):
        run_cases(listing, _square, command="toy", ctx=DistContext())
    with pytest.raises(ValueError, match="unique ids"):
        run_cases([ITEMS[0], ITEMS[0]], _square, command="toy", ctx=DistContext())
    with pytest.raises(KeyError):
        run_cases(ITEMS, _square, command="toy", ctx=DistContext(), summarize=lambda r: {}["missing"])
    with pytest.raises(ValueError, match="cannot square a"):  # without a failures list the first error stops it
        process_cases([Item("a", 1.0, bad=True), Item("b", 1.0)], _square)


@pytest.mark.parametrize("number", ["ENOSPC", "EDQUOT"])
def test_a_full_disk_stops_the_run_at_the_first_case_and_a_rerun_resumes(tmp_path, number):
    """Found by hostile testing: on a full output disk every remaining case was computed and then failed alike (one
    line each, exit 1); a full disk or quota is the environment's, like a missing package: the run stops."""
    import errno

    calls: list[str] = []
    square = _counting(calls)
    full = {"c2"}

    def write(item: Item) -> dict:
        if item.case_id in full:
            raise OSError(getattr(errno, number), os.strerror(getattr(errno, number)), f"/out/{item.case_id}.json")
        return square(item)

    with pytest.raises(OSError, match="c2.json"):
        process_cases(sorted(ITEMS, key=lambda i: i.case_id), write, failures=[])
    assert calls == ["c0", "c1"]  # c3 and c4 were not computed
    folder = tmp_path / "state"
    with pytest.raises(OSError) as info:
        run_cases(ITEMS, write, command="toy", ctx=DistContext(), cache=_cache(folder),
                  failures_file=tmp_path / "failures.json")
    assert info.value.errno == getattr(errno, number) and not (tmp_path / "failures.json").exists()
    full.clear()  # space freed: the cases done are not computed again
    calls.clear()
    run = run_cases(ITEMS, write, command="toy", ctx=DistContext(), cache=_cache(folder))
    assert run.cases == ["c0", "c1", "c2", "c3", "c4"] and calls == ["c2", "c3", "c4"]


def test_cache_reuses_unchanged_cases_and_recomputes_stale_ones(tmp_path):
    calls: list[str] = []
    square = _counting(calls)
    folder = tmp_path / "state"
    first = run_cases(ITEMS, square, command="toy", ctx=DistContext(), cache=_cache(folder),
                      summarize=lambda r: r.results)
    assert sorted(calls) == sorted(it.case_id for it in ITEMS)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{it.case_id}.json" for it in ITEMS)
    calls.clear()
    again = run_cases(ITEMS, square, command="toy", ctx=DistContext(), cache=_cache(folder),
                      summarize=lambda r: r.results)
    assert calls == [] and again.summary == first.summary
    # one input changed, the options of the run changed, a state unreadable, no reuse
    changed = [Item(it.case_id, it.value + (1.0 if it.case_id == "c2" else 0.0)) for it in ITEMS]
    run_cases(changed, square, command="toy", ctx=DistContext(), cache=_cache(folder))
    assert calls == ["c2"]
    calls.clear()
    (folder / "c4.json").write_text("{not json")
    run_cases(changed, square, command="toy", ctx=DistContext(), cache=_cache(folder))
    assert calls == ["c4"]
    calls.clear()
    run_cases(changed, square, command="toy", ctx=DistContext(), cache=_cache(folder, version=2))
    assert sorted(calls) == sorted(it.case_id for it in ITEMS)
    calls.clear()
    run_cases(changed, square, command="toy", ctx=DistContext(), cache=CaseCache(folder, reuse=False))
    assert len(calls) == len(ITEMS)


def test_a_failed_case_is_not_saved_and_a_rerun_computes_only_it(tmp_path):
    calls: list[str] = []
    square = _counting(calls)
    folder = tmp_path / "state"
    with pytest.raises(CasesFailed):
        run_cases([*ITEMS, Item("c7", 2.0, bad=True)], square, command="toy", ctx=DistContext(), cache=_cache(folder),
                  on_failure=lambda f: None)
    assert not (folder / "c7.json").exists()
    calls.clear()
    run = run_cases([*ITEMS, Item("c7", 2.0)], square, command="toy", ctx=DistContext(), cache=_cache(folder))
    assert calls == ["c7"] and "c7" in run.cases


def test_side_files_partial_files_and_a_missing_side_file(tmp_path):
    """A cache with side files (as evaluate's histograms): the JSON is written after them; a missing side file means
    the case is computed again; partial files of an interrupted write are removed before the loop."""
    folder = tmp_path / "state"

    def dump(where: Path, cid: str, result: dict) -> dict:
        atomic_save_npz(where / f"{cid}.npz", {"square": np.array([result["square"]])})
        return {"kind": "npz"}

    def restore(where: Path, doc: dict, item: Item | None) -> dict:
        with np.load(where / f"{doc['case']}.npz") as z:
            return {"case": doc["case"], "square": float(z["square"][0])}

    calls: list[str] = []
    square = _counting(calls)
    def cache() -> CaseCache:
        return CaseCache(folder, lambda it: [it.value], dump=dump, restore=restore)

    first = run_cases(ITEMS, square, command="toy", ctx=DistContext(), cache=cache(), summarize=lambda r: r.results)
    doc = json.loads((folder / "c0.json").read_text())
    assert {k: v for k, v in doc.items() if k != "digest"} == {"case": "c0", "fingerprint": [0.5], "kind": "npz"}
    assert doc["digest"].startswith("sha256:")  # of the text: an edited state is computed again
    partial = folder / ".c1.json.partial-123"
    partial.write_text("half")
    (folder / "c3.npz").unlink()
    calls.clear()
    again = run_cases(ITEMS, square, command="toy", ctx=DistContext(), cache=cache(), summarize=lambda r: r.results)
    assert calls == ["c3"] and again.summary == first.summary and not partial.exists()


def test_cache_checks_its_arguments(tmp_path):
    with pytest.raises(TypeError, match="fingerprint"):
        CaseCache(tmp_path, fingerprint="not callable")  # type: ignore[arg-type]
    cache = CaseCache(tmp_path, store=False)  # the per-case function writes <case>.json itself
    assert cache.save("a", {"x": 1}) is None and not (tmp_path / "a.json").exists()
    (tmp_path / "a.json").write_text(json.dumps({"result": 5}))
    assert cache.load("a") == 5 and CaseCache(tmp_path, store=False, reuse=False).load("a") is None


# ------------------------------------------------------------------------------------------------ two gloo ranks

def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    folder = Path(out)
    res: dict = {}
    calls: list[str] = []
    square = _counting(calls)
    with open(folder / f"rank{rank}.log", "w") as log, contextlib.redirect_stderr(log):
        ctx = get_dist_context()
        try:
            order = ITEMS if rank == 0 else ITEMS[::-1]  # every rank lists the cases in its own order
            run = run_cases(order, square, command="toy", ctx=ctx, cache=_cache(folder / "state"),
                            pack=lambda r: [r["case"], r["square"]], unpack=lambda d: {"case": d[0], "square": d[1]},
                            summarize=lambda r: [[c, k, res["square"]] for c, k, res in zip(r.cases, r.ranks,
                                                                                                r.results)])
            res["summary"], res["cases"], res["calls"] = run.summary, run.cases, sorted(calls)
            calls.clear()
            try:
                run_cases([*ITEMS, Item("c8", 1.0, bad=True)], square, command="toy", ctx=ctx,
                          cache=_cache(folder / "state"), failures_file=folder / "failures.json",
                          on_failed=lambda r: "cleaned")
            except CasesFailed as e:
                res["failed"] = [[f.case, f.rank, f.error] for f in e.failures] + [e.results]
            res["resume_calls"] = sorted(calls)
            try:
                run_cases(ITEMS, _square, command="toy", ctx=ctx, summarize=lambda r: 1 / 0)
            except (ZeroDivisionError, RankFailed) as e:
                res["summary_error"] = type(e).__name__
            try:
                run_cases(ITEMS[: 3 + rank], _square, command="toy", ctx=ctx)
            except ValueError as e:
                res["disagree"] = str(e)
        finally:
            destroy_dist_context(ctx)
    (folder / f"rank{rank}.json").write_text(json.dumps(res))


@pytest.mark.slow
def test_two_gloo_ranks_run_the_engine(tmp_path):
    torch.multiprocessing.start_processes(_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True,
                                          start_method="fork")
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    ids = sorted(it.case_id for it in ITEMS)
    value = {it.case_id: it.value for it in ITEMS}
    # the same summary on both ranks: every case once, in case-id order, processed by its round-robin rank
    expected = [[c, k % 2, value[c] ** 2] for k, c in enumerate(ids)]
    assert r0["summary"] == r1["summary"] == expected
    assert r0["cases"] == ids and r1["cases"] == []  # the results themselves stay on rank 0
    assert r0["calls"] == ids[0::2] and r1["calls"] == ids[1::2]
    # a failing case on rank 1: reported by its rank, the others resumed from the cache, raised on both ranks
    assert r0["failed"] == r1["failed"] == [["c8", 1, "ValueError: cannot square c8"], "cleaned"]
    assert r0["resume_calls"] == [] and r1["resume_calls"] == ["c8"]
    assert "toy: rank 1 of 2: case 'c8' failed: ValueError: cannot square c8" in (tmp_path / "rank1.log").read_text()
    assert json.loads((tmp_path / "failures.json").read_text())["failures"][0]["rank"] == 1
    # an error of the summary step on rank 0 raises there and on the other rank
    assert r0["summary_error"] == "ZeroDivisionError" and r1["summary_error"] == "RankFailed"
    assert "ranks disagree on the case list" in r0["disagree"] and "ranks disagree" in r1["disagree"]


def test_stale_state_is_reported_and_recomputed(tmp_path):
    """A saved state whose fingerprint differs is computed again, and ``on_stale`` says so with both fingerprints."""
    stale = []
    cache = CaseCache(tmp_path, lambda item: {"samples": 16, "sources": ["folds", "mirroring"]},
                      on_stale=lambda *a: stale.append(a))
    cache.save("a", 1, {"samples": 8, "sources": ["mirroring"]})
    cache.save("b", 2, cache.fingerprint_of("b"))
    got = process_cases(["a", "b"], lambda item: 10, key=str, cache=cache)
    assert got == [("a", 10), ("b", 2)]
    assert stale == [("a", {"samples": 8, "sources": ["mirroring"]},
                      {"samples": 16, "sources": ["folds", "mirroring"]})]
    assert cache.load("a", cache.fingerprint_of("a")) == 10  # saved with the current settings now


def test_settings_changes_name_each_difference():
    current = {"sources": ["folds", "mirroring"], "samples": 16, "weights": ["x" * 100], "seed": None}
    recorded = {"sources": ["mirroring"], "samples": 8, "weights": ["y" * 100], "seed": None, "old": 1}
    assert settings_changes(recorded, current) == [
        'sources ["mirroring"] -> ["folds", "mirroring"]', "samples 8 -> 16", "weights changed", "old 1 -> (none)"]
    assert settings_changes(current, current) == []
    assert settings_changes(None, current) == ["no settings recorded (written by an earlier version)"]
