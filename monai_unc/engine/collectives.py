"""Rank context, deterministic sharding, exact reductions and faults of cohort-scale runs.

Re-exported by :mod:`monai_unc.engine`, whose docstring describes them.
"""

from __future__ import annotations

import atexit
import math
import os
import sys
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from .._utils import canonical_text, stderr_line
from ..io import CaseError, atomic_write_json
from ..metrics.calibration import ConfidenceHistogram
from ..state import MergeableState, as_array, record_arrays

T = TypeVar("T")

#: collective timeout of process groups created here (seconds; env ``MONAI_UNC_DIST_TIMEOUT`` overrides): ranks wait
#: for the slowest shard in the first collective after the per-case loop, so it must exceed the imbalance of shards
DEFAULT_TIMEOUT_S = 6 * 3600
_CUDA_BACKEND = "cpu:gloo,cuda:nccl"
_cpu_groups: dict[int, Any] = {}


class RankFailed(ValueError):
    """Raised on every rank when another rank failed in a step that all ranks run (see :func:`sync_errors`)."""


@dataclass(frozen=True)
class CaseFailure:
    """A case that raised while being processed: its id, the rank that processed it and the error message.

    Args:
        case: the case id.
        rank: the rank that processed the case.
        error: the error, one line (:func:`error_line`).

    Example:
        >>> CaseFailure("c1", 0, "ValueError: bad").to_json()
        {'case': 'c1', 'rank': 0, 'error': 'ValueError: bad'}
    """

    case: str
    rank: int
    error: str

    def to_json(self) -> dict[str, Any]:
        """The failure as a JSON-ready dict.

        Returns:
            ``{"case": ..., "rank": ..., "error": ...}``.
        """
        return asdict(self)


class CasesFailed(CaseError):
    """Some cases failed; every other case was processed and its outputs written (a rerun resumes).

    ``failures`` lists them (sorted by case id); ``results`` holds what the run returns otherwise (e.g. the
    per-case statuses of :func:`monai_unc.workflows.run_infer`), when it has something. A
    :class:`~monai_unc.io.CaseError` (``ValueError``), so code that handled the first failing case's ``CaseError``
    still catches it.

    Args:
        failures: the failed cases (any order; stored sorted by case id).
        what: what failed, for the message (``"case(s)"``).
        results: what the run returns otherwise, or None.

    Example:
        >>> e = CasesFailed([CaseFailure("b", 0, "ValueError: x"), CaseFailure("a", 1, "OSError: y")])
        >>> [f.case for f in e.failures], str(e)
        (['a', 'b'], "2 case(s) failed: 'a', 'b'; first error: OSError: y")
    """

    def __init__(self, failures: Sequence[CaseFailure], what: str = "case(s)", results: Any = None) -> None:
        self.failures = sorted(failures, key=lambda f: f.case)
        self.results = results
        ids = ", ".join(repr(f.case) for f in self.failures[:5]) + (" ..." if len(self.failures) > 5 else "")
        first = self.failures[0].error if self.failures else ""
        super().__init__(f"{len(self.failures)} {what} failed: {ids}; first error: {first}")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in a (possibly trivial) process group.

    Attributes:
        rank, world_size, local_rank: as ``torchrun`` sets them (``0, 1, 0`` for a single process).
        backend: the default group's backend, None when not distributed.
        owns_group: the group was initialised by :func:`get_dist_context` (:func:`destroy_dist_context` ends it).
        group: process group for CPU tensors and Python objects (None: the default group).

    Example:
        >>> ctx = DistContext()
        >>> ctx.distributed, ctx.is_main, ctx.describe()
        (False, True, '')
        >>> DistContext(rank=1, world_size=4).describe()
        'rank 1 of 4'
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    owns_group: bool = False
    group: Any = None

    @property
    def distributed(self) -> bool:
        """True when more than one rank takes part (``world_size > 1``)."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, which writes the cohort-level outputs."""
        return self.rank == 0

    def describe(self) -> str:
        """Where this rank stands, for messages.

        Returns:
            ``"rank r of W"``, or ``""`` for a single process.
        """
        return f"rank {self.rank} of {self.world_size}" if self.distributed else ""


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {text!r}") from None


def read_dist_env(env: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """The rank, world size and local rank of this process, as ``torchrun`` sets them.

    Read from the initialised default process group when there is one, else from the environment variables
    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (defaults ``0, 1, rank``; ``RANK`` is required when ``WORLD_SIZE > 1``).

    Args:
        env: the environment to read (default ``os.environ``).

    Returns:
        ``(rank, world_size, local_rank)``.

    Raises:
        ValueError: naming the variable, when one is not an integer or they are inconsistent
            (``RANK`` outside ``[0, WORLD_SIZE)`` or unset with ``WORLD_SIZE > 1``, ``WORLD_SIZE < 1``,
            ``LOCAL_RANK < 0``).

    Example:
        >>> read_dist_env({"RANK": "2", "WORLD_SIZE": "4"})
        (2, 4, 2)
        >>> read_dist_env({})
        (0, 1, 0)
    """
    if dist.is_available() and dist.is_initialized():
        env = os.environ if env is None else env
        rank = dist.get_rank()
        return rank, dist.get_world_size(), _env_int(env, "LOCAL_RANK", rank)
    env = os.environ if env is None else env
    world = _env_int(env, "WORLD_SIZE", 1)
    if world > 1 and (env.get("RANK") or "").strip() == "":
        # found by hostile testing: a job script exporting WORLD_SIZE and MASTER_ADDR / MASTER_PORT for its srun
        # tasks (which derive their rank themselves) ran one plain monai-unc command as rank 0, which waited for
        # ranks that never came, silently, for the whole collective timeout (6 hours)
        raise ValueError(f"environment variable WORLD_SIZE={world} is set but RANK is not: launch every process with "
                         "torchrun (python -m torch.distributed.run, which sets both), set RANK on each, or unset "
                         "WORLD_SIZE to run one process")
    rank = _env_int(env, "RANK", 0)
    local = _env_int(env, "LOCAL_RANK", rank)
    if world < 1:
        raise ValueError(f"environment variable WORLD_SIZE must be >= 1, got {world}")
    if not 0 <= rank < world:
        raise ValueError(f"environment variable RANK must be in [0, WORLD_SIZE={world}), got {rank}")
    if local < 0:
        raise ValueError(f"environment variable LOCAL_RANK must be >= 0, got {local}")
    return rank, world, local


def _cpu_group(timeout: timedelta | None = None) -> Any:
    """None when the default group handles CPU tensors, else a gloo group over all ranks (created once).

    Its collective timeout is ``timeout`` (that of a default group created here; in earlier versions a group made
    with ``timeout=60`` had a gloo group beside it that waited the 6-hour default), else that of our own groups
    (:func:`_collective_timeout`), not torch's 30-minute default.
    """
    backend = str(dist.get_backend())
    if "gloo" in backend or backend in ("mpi", "ucc"):
        return None
    key = id(dist.group.WORLD)
    if key not in _cpu_groups:
        _cpu_groups[key] = dist.new_group(backend="gloo", timeout=timeout or _collective_timeout())
    return _cpu_groups[key]


#: the longest collective timeout accepted (seconds, about 31 years): torch counts it in milliseconds
_MAX_TIMEOUT_S = 1e9


def _collective_timeout(timeout: timedelta | float | None = None) -> timedelta:
    """The collective timeout of a process group created here, checked.

    Args:
        timeout: a ``timedelta`` or seconds; None: the environment variable ``MONAI_UNC_DIST_TIMEOUT`` (seconds) when
            it is set and not empty, else :data:`DEFAULT_TIMEOUT_S`.

    Returns:
        The timeout.

    Raises:
        ValueError: naming ``timeout`` or the environment variable, when the value is not a number of seconds in
            ``(0, 1e9]`` (found by hostile testing: ``MONAI_UNC_DIST_TIMEOUT=inf``, meant as "never", ended
            every rank with an ``OverflowError`` traceback, and ``abc`` with a line that did not name the variable).

    Example:
        >>> _collective_timeout(90)
        datetime.timedelta(seconds=90)
        >>> _collective_timeout(timedelta(hours=1)).total_seconds()
        3600.0
    """
    name = "timeout"
    value: Any = timeout
    if timeout is None:
        text = os.environ.get("MONAI_UNC_DIST_TIMEOUT", "").strip()
        if not text:
            return timedelta(seconds=DEFAULT_TIMEOUT_S)
        name, value = "environment variable MONAI_UNC_DIST_TIMEOUT", text
    try:
        seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not (0 < seconds <= _MAX_TIMEOUT_S):  # NaN fails the comparison
        raise ValueError(f"{name} must be a number of seconds in (0, 1e9], got {value!r}")
    return timedelta(seconds=seconds)


def get_dist_context(
    device: str | torch.device | None = None,
    backend: str | None = None,
    timeout: timedelta | float | None = None,
) -> DistContext:
    """The rank context of this process; initialises the process group when needed.

    A group is created when the environment says ``WORLD_SIZE > 1`` and none exists (module docstring of
    :mod:`monai_unc.engine`). Call it on every rank at the same point (it may create
    a group, which is collective). Later calls join the same group; it stays initialised until
    :func:`destroy_dist_context` or the end of the process.

    Args:
        device: the compute device; a CUDA device selects ``cpu:gloo,cuda:nccl`` and is made current (``"cuda"``
            without an index: GPU ``LOCAL_RANK % device_count``).
        backend: override the backend of a group created here (``gloo``, ``nccl``, ``cpu:gloo,cuda:nccl``, ...).
        timeout: collective timeout of a group created here and of the gloo group beside an NCCL one (``timedelta`` or
            seconds; default :data:`DEFAULT_TIMEOUT_S` or env ``MONAI_UNC_DIST_TIMEOUT``).

    Returns:
        The :class:`DistContext`; ``DistContext(rank, 1, local_rank)`` for a single process (no group).

    Raises:
        ValueError: ``WORLD_SIZE > 1`` without ``torch.distributed``, ``MASTER_ADDR``/``MASTER_PORT`` unset, an
            invalid backend or a non-positive timeout.
    """
    if dist.is_available() and dist.is_initialized():
        rank, world, local = read_dist_env()
        return DistContext(rank, world, local, str(dist.get_backend()), False, _cpu_group() if world > 1 else None)
    rank, world, local = read_dist_env()
    if world == 1:
        return DistContext(rank, 1, local)
    if not dist.is_available():
        raise ValueError(f"WORLD_SIZE={world} but this torch build has no torch.distributed")
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
    if missing:
        raise ValueError(f"WORLD_SIZE={world} but {' and '.join(missing)} not set: launch with torchrun "
                         "(python -m torch.distributed.run), see docs/distributed.md")
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if backend is None:
        backend = _CUDA_BACKEND if dev.type == "cuda" else "gloo"
    if not isinstance(backend, str) or not backend:
        raise ValueError(f"backend must be a torch.distributed backend name, got {backend!r}")
    if dev.type == "cuda":
        if dev.index is None:
            # torch.cuda.set_device refuses a device without an index ("Expected a torch.device with a specified
            # index"): plain "cuda" (share_refusal's, or cohort_session(device="cuda")) is this rank's GPU, one per
            # local rank as resolve_device picks it
            dev = torch.device("cuda", local % max(torch.cuda.device_count(), 1))
        torch.cuda.set_device(dev)
    timeout = _collective_timeout(timeout)
    _join_group(backend, rank, world, timeout)
    _joined[0] = True
    atexit.register(_destroy_at_exit)
    return DistContext(rank, world, local, str(dist.get_backend()), True, _cpu_group(timeout))


#: whether this process created a process group (:func:`get_dist_context`) at some point
_joined = [False]

#: whether this process's rendezvous with the others failed (:func:`_join_group`)
_join_failed = [False]

#: seconds after which a process still waiting for the others to join says so on stderr (at most a quarter of the
#: timeout)
JOIN_NOTICE_S = 30.0


def _join_group(backend: str, rank: int, world: int, timeout: timedelta) -> None:
    """``init_process_group`` over ``env://``; says on stderr when the others are slow to join, in one line if never.

    Found by the review of torch.distributed cohorts: a job started with fewer processes than ``WORLD_SIZE`` (``srun
    -n 1`` under a hard-coded ``WORLD_SIZE=2``) waited in silence for the whole collective timeout (6 hours by
    default) and then ended with torch's ``DistStoreError`` traceback.

    Raises:
        ValueError: the other processes did not join (or this one could not reach ``MASTER_ADDR``) within
            ``timeout``, naming ``WORLD_SIZE``, the address and the remedy.
    """
    import threading

    where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"

    def notice() -> None:
        print(f"monai-unc: rank {rank} of {world} (WORLD_SIZE={world}) is waiting for the other processes of the job "
              f"to join at {where}; a job started with fewer processes waits until MONAI_UNC_DIST_TIMEOUT "
              f"({timeout.total_seconds():g} s)", file=sys.stderr, flush=True)

    timer = threading.Timer(min(JOIN_NOTICE_S, timeout.total_seconds() / 4), notice)
    timer.daemon = True
    timer.start()
    try:
        dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world, timeout=timeout)
    except getattr(dist, "DistError", RuntimeError) as e:  # the store's rendezvous timed out or failed
        _join_failed[0] = True  # share_early_error does not wait for the others a second time
        text = str(e).strip().splitlines()
        raise ValueError(f"rank {rank} of {world}: the processes of the job did not all join at {where} within "
                         f"{timeout.total_seconds():g} s ({text[0] if text else type(e).__name__}): start all "
                         f"WORLD_SIZE={world} processes (torchrun starts them), or raise MONAI_UNC_DIST_TIMEOUT") from e
    finally:
        timer.cancel()


def share_early_error(error: BaseException, device: str | torch.device | None = None) -> None:
    """Make a refusal that came before this rank joined the process group every rank's (collective).

    Under ``torchrun`` a cohort command checks its options and folders on every rank before the ranks join the
    group. A check that fails on one rank only (its own output folder is a file, a folder on a disk the others do
    not see) would leave the other ranks waiting for it in their first collective, for the whole collective
    timeout. This joins the group as they do and takes part in their first :func:`sync_errors` with ``error``, so
    that every rank stops with one line (the others with :class:`RankFailed` naming this rank and its error). Does
    nothing for a single process, when this process already joined a group (its errors were synchronised there), or
    when its rendezvous with the others failed (waiting again would only double the wait).

    Args:
        error: the refusal (re-raised by the caller).
        device: the compute device the command's group would use (a CUDA device selects the same backends).

    Example:
        >>> share_early_error(ValueError("x"))  # one process: nothing to do
    """
    try:
        _, world, _ = read_dist_env()
    except ValueError:
        return
    if world <= 1 or _joined[0] or _join_failed[0] or (dist.is_available() and dist.is_initialized()):
        return
    ctx = get_dist_context(device)
    try:
        sync_errors(error, ctx)
    except BaseException:  # noqa: BLE001 - the caller raises its own error
        pass
    finally:
        destroy_dist_context(ctx)


def _destroy_at_exit() -> None:
    if dist.is_available() and dist.is_initialized():
        _cpu_groups.clear()
        dist.destroy_process_group()


def destroy_dist_context(ctx: DistContext) -> None:
    """End the process group if :func:`get_dist_context` created it (groups made by others are left alone).

    Call it once, when the process is done with collectives: re-initialising a group in the same process after
    destroying it is unreliable with gloo (stale rendezvous keys). A group created here is also destroyed at exit.

    Args:
        ctx: the context :func:`get_dist_context` returned.
    """
    if ctx.owns_group and dist.is_available() and dist.is_initialized():
        _cpu_groups.clear()
        dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------------------------
# sharding
# ----------------------------------------------------------------------------------------------------------------
def shard(
    items: Sequence[T], rank: int, world_size: int, key: Callable[[T], Hashable] | None = None
) -> list[T]:
    """The items of ``rank`` out of ``world_size``, deterministically.

    Items are sorted by ``str(key(item))`` (the item itself without ``key``), then dealt round-robin (positions
    ``rank, rank + world_size, ...``). Every item lands in exactly one shard; the result does not depend on the order
    of ``items``.

    Args:
        items: the items (e.g. case ids or case records).
        rank: this rank, in ``[0, world_size)``.
        world_size: the number of ranks (>= 1).
        key: the id of an item (default: the item itself).

    Returns:
        The items of this rank, in sorted-id order.

    Raises:
        ValueError: duplicate ids, or ``rank``/``world_size`` not integers in range.

    Example:
        >>> shard(["c", "a", "d", "b", "e"], 0, 2)
        ['a', 'c', 'e']
        >>> shard(["c", "a", "d", "b", "e"], 1, 2)
        ['b', 'd']
    """
    for name, v in (("rank", rank), ("world_size", world_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name} must be an integer, got {v!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    ids = [str(key(x) if key is not None else x) for x in items]
    check_unique_ids(ids)
    order = sorted(range(len(ids)), key=ids.__getitem__)
    return [items[i] for i in order[rank::world_size]]


def check_unique_ids(ids: Sequence[str]) -> None:
    """``ValueError`` naming the repeated case ids (each case must be listed once; :func:`shard` and ``run_cases``).

    Example:
        >>> check_unique_ids(["a", "b", "a"])
        Traceback (most recent call last):
        ...
        ValueError: items must have unique ids, got duplicates ['a']
    """
    counts = Counter(ids)
    if len(counts) != len(ids):
        dup = sorted(i for i, n in counts.items() if n > 1)
        raise ValueError(f"items must have unique ids, got duplicates {dup[:5]}")


# ----------------------------------------------------------------------------------------------------------------
# collectives (identity for a single process)
# ----------------------------------------------------------------------------------------------------------------
def all_gather_objects(obj: Any, ctx: DistContext) -> list[Any]:
    """Every rank's (picklable) ``obj``, in rank order, on every rank (collective).

    Args:
        obj: this rank's object (picklable).
        ctx: the rank context.

    Returns:
        A list of ``world_size`` objects, index = rank; ``[obj]`` for a single process.

    Example:
        >>> all_gather_objects({"n": 3}, DistContext())
        [{'n': 3}]
    """
    if not ctx.distributed:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj, group=ctx.group)
    return out


def _check_rank(rank: Any, name: str, ctx: DistContext) -> None:
    """``ValueError`` naming ``name`` unless ``rank`` is an integer rank of ``ctx`` (``[0, world_size)``)."""
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < ctx.world_size:
        raise ValueError(f"{name} must be a rank in [0, {ctx.world_size}), got {rank!r}")


def gather_objects(obj: Any, ctx: DistContext, dst: int = 0) -> list[Any] | None:
    """Every rank's ``obj`` in rank order on rank ``dst`` (collective).

    Args:
        obj: this rank's object (picklable).
        ctx: the rank context.
        dst: the receiving rank.

    Returns:
        On rank ``dst`` a list of ``world_size`` objects (index = rank); None on the other ranks. ``[obj]`` for a
        single process.

    Raises:
        ValueError: ``dst`` is not a rank (for a single process too: in earlier versions a call that
            passed on one process failed on several).

    Example:
        >>> gather_objects(7, DistContext())
        [7]
    """
    _check_rank(dst, "dst", ctx)
    if not ctx.distributed:
        return [obj]
    out: list[Any] | None = [None] * ctx.world_size if ctx.rank == dst else None
    dist.gather_object(obj, out, dst=dst, group=ctx.group)
    return out


def broadcast_object(obj: Any, ctx: DistContext, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (collective).

    Args:
        obj: the object on rank ``src`` (picklable; ignored on the other ranks).
        ctx: the rank context.
        src: the sending rank.

    Returns:
        Rank ``src``'s object; ``obj`` itself for a single process.

    Raises:
        ValueError: ``src`` is not a rank (earlier versions raised a gloo ``RuntimeError`` on several
            processes, none on one).

    Example:
        >>> broadcast_object("plan", DistContext())
        'plan'
    """
    _check_rank(src, "src", ctx)
    if not ctx.distributed:
        return obj
    box = [obj if ctx.rank == src else None]
    dist.broadcast_object_list(box, src=src, group=ctx.group)
    return box[0]


def barrier(ctx: DistContext) -> None:
    """Wait for every rank (collective; a no-op for a single process).

    Args:
        ctx: the rank context.
    """
    if ctx.distributed:
        dist.barrier(group=ctx.group)


_INT64_MAX = np.iinfo(np.int64).max


def _as_array(x: Any, name: str) -> np.ndarray:
    a = np.asarray(x)  # np.array(..., order="C"), not ascontiguousarray: a 0-d array keeps its shape
    if a.dtype == bool or np.issubdtype(a.dtype, np.integer):
        # found by hostile testing: a uint64 count above 2**63 - 1 wrapped to a negative int64 without a word
        if a.dtype == np.uint64 and a.size and int(a.max()) > _INT64_MAX:
            raise ValueError(f"{name} holds {int(a.max())}, above the int64 range in which counts are summed")
        return np.array(a, dtype=np.int64, order="C")
    if np.issubdtype(a.dtype, np.floating):
        return np.array(a, dtype=np.float64, order="C")
    raise ValueError(f"{name} must be an integer, boolean or floating array, got dtype {a.dtype}")


def _exact_int64_sum(parts: Sequence[torch.Tensor], first: int) -> torch.Tensor:
    """The sum of int64 ``parts`` in exact integers, as int64; ``ValueError`` where it leaves the int64 range.

    In earlier versions a partial sum in rank order that left the range raised although the total
    (counts of mixed signs, e.g. ``2**63 - 1``, ``1`` and ``-1``) lies in it.
    """
    exact = parts[0].numpy().astype(object)
    for p in parts[1:]:
        exact = exact + p.numpy().astype(object)
    flat = exact.reshape(-1)
    if flat.size and (max(flat) > _INT64_MAX or min(flat) < -_INT64_MAX - 1):
        raise ValueError(f"all_reduce_sum: the int64 sum overflows when rank {first}'s counts are added (the total "
                         f"passes {_INT64_MAX})")
    return torch.from_numpy(np.array(flat.tolist(), dtype=np.int64).reshape(exact.shape))


def all_reduce_sum(x: np.ndarray | Mapping[str, np.ndarray], ctx: DistContext) -> Any:
    """Sum of ``x`` over all ranks, on every rank.

    ``x`` is an array or a dict of arrays; integers (and booleans) are summed as int64 (exact up to 2**63 - 1: a sum
    beyond it raises, it never wraps), floats as float64. The parts are all-gathered and added in rank order (module
    docstring), so the result is bitwise the same on every rank and independent of the backend. Shapes and keys must
    agree across ranks (``ValueError`` on every rank otherwise).

    Args:
        x: this rank's array, or a dict of arrays (integer, boolean or floating).
        ctx: the rank context.

    Returns:
        The same structure (numpy arrays, int64 or float64) holding the sums; a copy for a single process.

    Raises:
        ValueError: a non-numeric dtype, a uint64 value above the int64 range, keys of the same text (``1`` and
            ``"1"``), keys/shapes/dtypes that differ across ranks, or an int64 sum that overflows (on every rank:
            an array refused on one rank raises there, :class:`RankFailed` on the others).

    Example:
        >>> all_reduce_sum({"n": np.array([1, 2]), "s": np.array([0.5])}, DistContext())
        {'n': array([1, 2]), 's': array([0.5])}
    """
    single = not isinstance(x, Mapping)
    error: BaseException | None = None
    try:  # found by hostile testing (review 55): a refusal of one rank's own array (a uint64 count above the int64
        # range) raised on that rank alone, and the other ranks waited in the gather for the collective timeout
        arrays = {"": _as_array(x, "x")} if single else {str(k): _as_array(v, f"x[{k!r}]") for k, v in x.items()}
        if not single and len(arrays) != len(x):  # found by hostile testing: {1: a, "1": b} summed b alone
            seen: dict[str, list[Any]] = {}
            for k in x:
                seen.setdefault(str(k), []).append(k)
            clash = next(ks for ks in seen.values() if len(ks) > 1)
            raise ValueError(f"x has keys that name one entry ({', '.join(repr(k) for k in clash)}): the sums are "
                             "keyed by the keys' text")
    except (TypeError, ValueError) as e:
        error = e
    sync_errors(error, ctx)  # on every rank: the failing rank's own error, RankFailed (a ValueError) on the others
    if not ctx.distributed:
        out = {k: a.copy() for k, a in arrays.items()}
        return out[""] if single else out
    layout = sorted((k, a.shape, a.dtype.str) for k, a in arrays.items())
    layouts = all_gather_objects(layout, ctx)
    if any(lay != layouts[0] for lay in layouts):
        bad = next(r for r, lay in enumerate(layouts) if lay != layouts[0])
        raise ValueError(f"all_reduce_sum: rank {bad} has keys/shapes/dtypes {layouts[bad]}, rank 0 {layouts[0]}")
    out = {}
    for dtype in (np.int64, np.float64):
        keys = [k for k, _, d in layout if np.dtype(d) == dtype]
        if not keys:
            continue
        flat = torch.from_numpy(np.concatenate([arrays[k].reshape(-1) for k in keys]))
        parts = [torch.empty_like(flat) for _ in range(ctx.world_size)]
        dist.all_gather(parts, flat, group=ctx.group)
        total = parts[0].clone()
        for r, p in enumerate(parts[1:], 1):
            before = total.clone() if dtype is np.int64 else None
            total += p
            # found by hostile testing: int64 counts whose sum passes 2**63 - 1 wrapped to a negative count without
            # a word; the sum overflowed where both addends have the sign the sum lacks (every rank sees the same)
            if before is not None and bool((((before ^ total) & (p ^ total)) < 0).any()):
                total = _exact_int64_sum(parts, r)  # a partial sum left the range: the total may not (mixed signs)
                break
        total_np, start = total.numpy(), 0
        for k in keys:
            n = arrays[k].size
            out[k] = total_np[start : start + n].reshape(arrays[k].shape).copy()
            start += n
    return out[""] if single else out


def reduce_histogram(hist: Any, ctx: DistContext) -> Any:
    """The pooled :class:`~monai_unc.metrics.calibration.ConfidenceHistogram` of all ranks (every rank gets it).

    Each rank passes its own histogram (per-case or pooled; may be empty); counts add exactly (int64), sums and
    scalars in rank order (:func:`all_reduce_sum`). Equal to pooling every rank's voxels in one process up to the
    order of float64 additions (for one case per rank: the same additions in the same order as merging the cases in
    rank order). Layouts (classes, fine bins, uncertainty row) must agree across ranks.

    Args:
        hist: this rank's histogram.
        ctx: the rank context.

    Returns:
        The pooled histogram (a new :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`).

    Raises:
        ValueError: ``hist`` is not a histogram, or the layouts differ across ranks.
    """
    # a refusal on one rank only is shared (found in review 56: the other ranks waited in the gather for the
    # collective timeout)
    sync_errors(None if isinstance(hist, ConfidenceHistogram) else
                ValueError(f"hist must be a ConfidenceHistogram, got {type(hist).__name__}"), ctx)
    flags = all_gather_objects((hist.num_classes, hist.n_fine_bins, hist.uncertainty if len(hist) else None), ctx)
    if len({fl[:2] for fl in flags}) > 1 or len({fl[2] for fl in flags if fl[2] is not None}) > 1:
        raise ValueError(f"reduce_histogram: ranks have different layouts (num_classes, n_fine_bins, uncertainty): "
                         f"{flags}")
    out = reduce_state(hist.pooled(), ctx)
    out.uncertainty = next((fl[2] for fl in flags if fl[2] is not None), hist.uncertainty)
    return out


def reduce_state(state: Any, ctx: DistContext) -> Any:
    """The merge of every rank's mergeable state, on every rank: one reduction for any state of the package.

    Each rank passes its own :class:`~monai_unc.state.MergeableState` (a confidence histogram, a mask state,
    :class:`~monai_unc.stats.SampleStats`, a product's state, ...). The states travel as their arrays of
    :func:`~monai_unc.state.record_arrays` (``state_dict()``, or the compact ``packed_state_dict()`` where a state has
    one: a histogram's non-empty bins) and are merged in rank order ``0, 1, ..., W - 1`` on every rank, so integer
    counts are exact and float sums are the same bits on every rank and equal to merging the ranks' states in that
    order in one process (the idea of torchmetrics' ``dist_reduce_fx``, with the merge of the state itself). One
    process: a copy of ``state``.

    Args:
        state: this rank's state.
        ctx: the rank context.

    Returns:
        A new state of the same class. A merge that fails (incompatible states) raises the same error on every rank;
        a state refused on one rank (e.g. an empty :class:`~monai_unc.stats.SampleStats`) raises there and
        :class:`RankFailed` on the others.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics.calibration import ConfidenceHistogram
        >>> h = ConfidenceHistogram(2)
        >>> _ = h.update(np.array([[[0.3], [0.7]]]), np.array([[1]]))
        >>> int(reduce_state(h, DistContext()).scalars[:, 0].sum())
        1
    """
    cls = type(state)
    error: BaseException | None = None
    arrays: dict[str, Any] = {}
    try:  # found by hostile testing (review 55): a state refused on one rank only (an empty SampleStats of a rank
        # without samples) raised there alone, and the other ranks waited in the gather for the collective timeout;
        # the type check likewise (review 56)
        if not isinstance(state, MergeableState):
            raise TypeError(f"state must be a mergeable state (merge, state_dict, from_state_dict), got "
                            f"{type(state).__name__}")
        arrays = {k: as_array(v, f"state key {k!r}") for k, v in record_arrays(state).items()}
    except (TypeError, ValueError) as e:
        error = e
    sync_errors(error, ctx)  # on every rank: the failing rank's own error, RankFailed (a ValueError) on the others
    parts = all_gather_objects(arrays, ctx)
    out = cls.from_state_dict(parts[0])
    for part in parts[1:]:
        out.merge(cls.from_state_dict(part))
    return out


# ----------------------------------------------------------------------------------------------------------------
# faults
# ----------------------------------------------------------------------------------------------------------------
def sync_errors(error: BaseException | None, ctx: DistContext) -> None:
    """Make a failure of one rank a failure of all ranks (collective).

    Every rank passes the exception it caught in a step (or None). If any rank failed, every rank raises: the
    failing rank its own exception, the others :class:`RankFailed` with the lowest failing rank's message. A no-op
    check for a single process (re-raises ``error`` if given).

    Args:
        error: the exception this rank caught, or None.
        ctx: the rank context.

    Raises:
        BaseException: ``error`` itself on the rank that caught it.
        RankFailed: on the other ranks, when any rank failed.

    Example:
        >>> sync_errors(None, DistContext())
    """
    msg = None if error is None else (f"{type(error).__name__}: {error}".splitlines() or [""])[0]
    msgs = all_gather_objects(msg, ctx)
    if error is not None:
        raise error
    failed = [(r, m) for r, m in enumerate(msgs) if m is not None]
    if failed:
        r, m = failed[0]
        raise RankFailed(f"rank {r} failed: {m}")


def check_same(value: Any, ctx: DistContext, what: str) -> None:
    """Check that every rank passes an equal ``value`` (collective), e.g. the case list.

    Args:
        value: this rank's value (picklable), compared as canonical JSON text: a NaN equals itself, ``True``, ``1``
            and ``1.0`` differ, arrays are compared element by element (earlier versions compared
            with ``==``: a NaN differed from itself, "rank 0 differs from rank 0" on one process, and an array raised
            "truth value ... is ambiguous").
        ctx: the rank context.
        what: what ``value`` is, for the message.

    Raises:
        ValueError: on every rank, when a rank's value differs from rank 0's.
    """
    values = [canonical_text(v) for v in all_gather_objects(value, ctx)]
    bad = [r for r, v in enumerate(values) if v != values[0]]
    if bad:
        raise ValueError(f"ranks disagree on {what}: rank {bad[0]} differs from rank 0 (every rank must see the same "
                         "inputs: use a shared file system or identical copies)")


def check_same_cases(case_ids: Sequence[str], ctx: DistContext) -> None:
    """Check that every rank sees the same cases (collective): their count and a hash of the sorted ids.

    Args:
        case_ids: the case ids this rank found.
        ctx: the rank context.

    Raises:
        ValueError: on every rank, when the case lists differ.
    """
    import hashlib
    import json

    ids = sorted(case_ids)
    # the ids JSON-encoded, not joined with "\n": a case id may hold a line break, and ["a\nb", "c"] and ["a", "b\nc"]
    # joined the same way
    digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
    check_same((len(ids), digest), ctx, "the case list")


def check_each_case_once(done: Sequence[str], case_ids: Sequence[str]) -> None:
    """Check that the cases with a result (or a failure) are exactly ``case_ids``, each once.

    Args:
        done: the ids of the cases with a result or a failure, gathered over all ranks.
        case_ids: the ids of all cases of the run.

    Raises:
        RuntimeError: sharding lost or repeated a case.

    Example:
        >>> check_each_case_once(["b", "a"], ["a", "b"])
    """
    if sorted(done) != sorted(case_ids):
        raise RuntimeError(f"sharding lost or repeated cases: {len(done)} results for {len(case_ids)} cases")


def failure_reporter(
    ctx: DistContext, command: str, on_failure: Callable[[CaseFailure], None] | None = None
) -> Callable[[str, BaseException], None]:
    """A callback that reports a case that failed on this rank.

    Args:
        ctx: the rank context (the rank recorded in each :class:`CaseFailure`).
        command: the command name, the prefix of the default stderr line.
        on_failure: receives each :class:`CaseFailure` (default: :func:`print_failure`).

    Returns:
        ``report(case_id, exception)``: builds the :class:`CaseFailure` and passes it to ``on_failure``.

    Example:
        >>> seen = []
        >>> failure_reporter(DistContext(), "infer", seen.append)("c1", ValueError("bad"))
        >>> seen
        [CaseFailure(case='c1', rank=0, error='ValueError: bad')]
    """

    def report(case_id: str, e: BaseException) -> None:
        f = CaseFailure(case_id, ctx.rank, error_line(e))
        (on_failure or (lambda x: print_failure(x, ctx, command)))(f)

    return report


def error_line(e: BaseException) -> str:
    """An exception in one line, for failure reports.

    Args:
        e: the exception.

    Returns:
        ``"Type: first line of the message"``, or just the type name for an empty message.

    Example:
        >>> error_line(ValueError("bad shape")), error_line(KeyError())
        ('ValueError: bad shape', 'KeyError')
    """
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def write_failures(path: str | os.PathLike, failures: Sequence[CaseFailure], command: str = "") -> Path:
    """Write ``failures.json`` atomically; with no failure remove a stale file instead.

    Args:
        path: the file to write.
        failures: the failed cases (written sorted by case id).
        command: the command, for the ``resume`` hint.

    Returns:
        ``path`` (a :class:`~pathlib.Path`). The file holds ``n_failed``, ``failures`` (case, rank, error) and
        ``resume``.

    Example:
        >>> import json, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = write_failures(Path(d) / "failures.json", [CaseFailure("c1", 0, "OSError: x")], "infer")
        ...     json.loads(p.read_text())["n_failed"], write_failures(p, []).exists()
        (1, False)
    """
    path = Path(path)
    if not failures:
        path.unlink(missing_ok=True)
        return path
    doc = {
        "n_failed": len(failures),
        "failures": [f.to_json() for f in sorted(failures, key=lambda f: f.case)],
        "resume": f"fix the listed cases and run the same {command or 'command'} again: finished cases are skipped",
    }
    return atomic_write_json(path, doc)


def print_failure(failure: CaseFailure, ctx: DistContext, prefix: str = "monai-unc") -> None:
    """Print one stderr line for a failed case: ``<prefix>: [rank r of W: ]case 'id' failed: <error>``.

    ``r`` is the rank that processed the case (``failure.rank``), also where another rank prints the line (rank 0, for
    a case found bad only when the cohort is put together; in earlier versions the line named the printing rank).

    Args:
        failure: the failed case.
        ctx: the rank context (``W``; the rank is named when distributed).
        prefix: the line's prefix (the program or command).
    """
    where = f"rank {failure.rank} of {ctx.world_size}: " if ctx.distributed else ""
    stderr_line(f"{prefix}: {where}case {failure.case!r} failed: {failure.error}")  # above the progress bar
