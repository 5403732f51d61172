"""Start a few gloo ranks in forked processes and wait for them with a deadline (the multi-process tests)."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from monai_unc import cli

#: the warning filters of a fresh interpreter started without ``-W`` (Python's defaults, first filter first)
FRESH_FILTERS = (("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, ""),
                 ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""),
                 ("ignore", ResourceWarning, ""))


#: the last port :func:`free_port` gave in this process (None: none yet)
_LAST_PORT: list[int | None] = [None]


def _ephemeral_ports() -> range:
    """The ports the kernel hands out to ``bind(("", 0))`` and ``connect()`` (Linux: ``ip_local_port_range``)."""
    try:
        lo, hi = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        lo, hi = (49152, 65535) if sys.platform == "darwin" else (32768, 60999)
    return range(lo, hi + 1)


def port_pool() -> list[int]:
    """The ports :func:`free_port` draws from in this process: those of 10000-65535 outside the kernel's ephemeral
    range, this pytest-xdist worker's share of them (every ``PYTEST_XDIST_WORKER_COUNT``-th, from its number)."""
    ephemeral = _ephemeral_ports()
    pool = [p for p in range(10000, 65536) if p not in ephemeral]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    return pool[index % workers::workers]


def free_port() -> int:
    """A TCP port of 127.0.0.1 free at the time of the call (the ranks' rendezvous).

    Not one the kernel picks (``bind`` to port 0): such a port, closed here and bound by rank 0 a moment later, could
    be handed meanwhile to another process's ``bind`` to port 0 or ``connect()`` (the other pytest-xdist worker's
    gloo ranks open several), and rank 0 failed with EADDRINUSE. The ports come from outside the kernel's ephemeral
    range, each xdist worker from its own share (:func:`port_pool`), the next free one after the last this process
    gave (starting at one that depends on the process id, so that two sessions on one machine start apart).
    """
    pool = port_pool()
    if len(pool) < 100:  # an ephemeral range that covers (almost) every port: the kernel's choice
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    last = _LAST_PORT[0]
    start = pool.index(last) + 1 if last in pool else os.getpid() % len(pool)
    for k in range(len(pool)):
        port = pool[(start + k) % len(pool)]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # bound, or still in TIME_WAIT from an earlier test
                continue
        _LAST_PORT[0] = port
        return port
    raise RuntimeError(f"no free port of 127.0.0.1 among {len(pool)} outside the ephemeral range")


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


def _cli_rank(rank: int, per_rank: Sequence[tuple[list[str], Path]], port: int, env: dict[str, str],
              logs: Path) -> None:
    """One forked rank of :func:`run_cli_ranks`: the scheduler's variables, its working folder, ``cli.main(argv)``
    with standard output discarded and standard error in ``logs/rank<rank>.err``; its exit status in
    ``logs/rank<rank>.rc``."""
    argv, cwd = per_rank[rank]
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(len(per_rank)), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1", **env)
    torch.set_num_threads(1)
    os.chdir(cwd)
    warnings.resetwarnings()  # not the test's (pytest records warnings, and shows deprecations): a fresh process's
    for action, category, module in reversed(FRESH_FILTERS):
        warnings.filterwarnings(action, category=category, module=module)
    with open(logs / f"rank{rank}.err", "w") as err, open(os.devnull, "w") as null:
        os.dup2(err.fileno(), 2)  # the descriptor: lines of torch's C++ code count as well
        os.dup2(null.fileno(), 1)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # the process's own until it exits
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    rc = cli.main(argv)
    sys.stderr.flush()
    (logs / f"rank{rank}.rc").write_text(str(rc))


def run_cli_ranks(per_rank: Sequence[tuple[list[str], Path]], env: dict[str, str] | None = None,
                  wait_s: float = 180.0) -> list[tuple[int, list[str]]]:
    """``monai-unc`` once per rank, as a scheduler starts a job's processes: ``(argv, working folder)`` of each rank;
    ``[(exit status, non-empty stderr lines)]`` in rank order.

    Each rank is forked from the test process (no interpreter start-up: torch and the package are imported already)
    with ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_*`` and ``env`` in its environment, runs
    ``cli.main(argv)`` in its working folder under a fresh interpreter's warning filters, with its standard error
    (file descriptor 2) in a file. A rank that does not finish within ``wait_s`` fails the test (a hang).
    """
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        run_forked_ranks(_cli_rank, (per_rank, free_port(), dict(env or {}), logs), len(per_rank), wait_s)
        return [(int((logs / f"rank{r}.rc").read_text()),
                 [ln for ln in (logs / f"rank{r}.err").read_text().splitlines() if ln.strip()])
                for r in range(len(per_rank))]


def run_cli_forked(argv: list[str], env: dict[str, str | None] | None = None,
                   before: Callable[[], None] | None = None, wait_s: float = 300.0) -> tuple[int, str]:
    """``monai-unc ARGV`` in one process forked from the test process: ``(exit status, standard error)``.

    The child takes ``env`` into its environment (``None``: the variable unset), runs ``before()`` (a resource
    limit, as ``preexec_fn`` would), then ``cli.main(argv)`` under a fresh interpreter's warning filters with its
    standard output discarded and its standard error (file descriptor 2) in a file. No interpreter start-up: torch
    and the package are imported already. A child that does not finish within ``wait_s`` is killed and fails the
    test.
    """
    with tempfile.TemporaryDirectory() as tmp:
        err_file = Path(tmp) / "stderr"
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 70
            try:
                for name, value in (env or {}).items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
                torch.set_num_threads(1)
                warnings.resetwarnings()
                for action, category, module in reversed(FRESH_FILTERS):
                    warnings.filterwarnings(action, category=category, module=module)
                with open(err_file, "w") as err, open(os.devnull, "w") as null:
                    os.dup2(err.fileno(), 2)
                    os.dup2(null.fileno(), 1)
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # the process's own until it exits
                sys.stderr = open(2, "w", buffering=1, closefd=False)
                if before is not None:
                    before()
                code = cli.main(argv)
            except BaseException:  # a traceback in its standard error, exit status 70
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        deadline = time.monotonic() + wait_s
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail(f"monai-unc {' '.join(argv[:1])} did not finish within {wait_s} s")
            time.sleep(0.01)
        return os.waitstatus_to_exitcode(done[1]), err_file.read_text()
