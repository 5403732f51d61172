"""Hostile review 66 of torch.distributed cohorts: the engine's process groups."""

from __future__ import annotations

from datetime import timedelta

from monai_unc.engine import collectives, get_dist_context


def test_the_cpu_group_beside_an_nccl_group_made_here_waits_as_long_as_the_timeout_given(monkeypatch):
    """Found by review 66: ``get_dist_context(backend="nccl", timeout=60)`` made the NCCL group with 60 s but the gloo
    group beside it, where every collective of the engine runs (failures, results, agreement), with the 6-hour default:
    a rank left waiting for a dead one waited 6 hours, not the minute asked for. The rendezvous and the group
    creation are stubbed (no GPU here); what is checked is the timeout each group is made with."""
    made: list[tuple[str, str, timedelta]] = []
    monkeypatch.setattr(collectives, "_join_group", lambda backend, rank, world, timeout: made.append(
        ("default", backend, timeout)))
    monkeypatch.setattr(collectives.dist, "get_backend", lambda *a, **k: "nccl")
    monkeypatch.setattr(collectives.dist, "new_group", lambda backend, timeout: made.append(("cpu", backend, timeout))
                        or "the gloo group")
    monkeypatch.setattr(collectives, "_cpu_groups", {})
    monkeypatch.setattr(collectives, "_joined", [False])
    monkeypatch.setattr(collectives.atexit, "register", lambda fn: fn)
    monkeypatch.delenv("MONAI_UNC_DIST_TIMEOUT", raising=False)
    for name, value in (("WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", "29500")):
        monkeypatch.setenv(name, value)
    ctx = get_dist_context(backend="nccl", timeout=60)
    minute = timedelta(seconds=60)
    assert made == [("default", "nccl", minute), ("cpu", "gloo", minute)]
    assert ctx.group == "the gloo group" and ctx.owns_group and ctx.world_size == 2
