"""Start a few gloo ranks in forked processes and wait for them with a deadline (the multi-process tests)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch


def free_port() -> int:
    """A TCP port of 127.0.0.1 free at the time of the call (the ranks' rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_forked_ranks(worker: Callable[..., Any], args: tuple, world: int, wait_s: float = 90.0) -> None:
    """Run ``worker(rank, *args)`` on ``world`` forked processes; fail the test when they are not done in ``wait_s``.

    A rank that waits for another forever (the defect most of these tests guard against) fails the test instead of
    hanging the suite; processes still alive at the end are killed.
    """
    ctx = torch.multiprocessing.start_processes(worker, args=args, nprocs=world, join=False, start_method="fork")
    deadline = time.monotonic() + wait_s
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(f"the {world} ranks did not finish within {wait_s} s (a rank waits for another)")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
