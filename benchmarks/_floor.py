"""The floor of a benchmark: the unavoidable work, timed in the same run, and the ratio of a contender to it.

Every CPU benchmark in this folder prints its time as a ratio to the work no implementation can skip, measured in
the same process or run as the contender, so that a regression shows as a ratio however loaded the machine is:

- a metric that reads arrays: one read of them (:func:`one_read`: one reduction over each array in its own dtype
  and layout, which streams every byte through the cores once: memory-bound);
- a metric that needs an ordering of scores: one sort of them (:func:`one_sort`);
- an inferer: the bare forward passes of the same number of samples (built by each benchmark with its network);
- a spatial metric: its distance transforms and Gaussian smoothing, called alone on the same masks.

It also holds the peak-memory probe the benchmarks share (:func:`reset_peak`, :func:`peak_mib`): the peak RSS
during the work minus the RSS just before it.

The benchmarks are run as scripts (``python benchmarks/bench_x.py``), so this module is imported as ``_floor``
(the script's folder is on ``sys.path``, also in the subprocess workers that re-run the script).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _read_one(a: Any) -> float:
    """Reduce ``a`` once in its own dtype (bool read as bytes); returns the sum as a float (a checksum)."""
    if isinstance(a, np.ndarray):
        if a.dtype == np.bool_:
            a = a.view(np.uint8)
        # a view in memory order for any contiguous layout (no copy); other strides are reduced as they are
        flat = a.ravel(order="K") if a.flags.c_contiguous or a.flags.f_contiguous else a
        return float(np.add.reduce(flat, axis=None, dtype=a.dtype))
    import torch

    if isinstance(a, torch.Tensor):
        if a.dtype == torch.bool:
            a = a.view(torch.uint8)
        return float(a.sum(dtype=a.dtype))
    raise TypeError(f"one_read: arrays must be numpy arrays or torch tensors, got {type(a).__name__}")


def one_read(*arrays: Any) -> Callable[[], float]:
    """The memory-bound floor of a metric over ``arrays``: every element read once.

    Args:
        *arrays: numpy arrays or torch tensors (any device), read in their own dtype and layout.

    Returns:
        A zero-argument callable that sums each array once (in its own dtype, so nothing is converted or
        copied) and returns the total of the sums (a checksum; the value is not meaningful).
    """
    if not arrays:
        raise ValueError("one_read: arrays must not be empty")

    def read() -> float:
        return sum(_read_one(a) for a in arrays)

    return read


def one_sort(*arrays: np.ndarray) -> Callable[[], float]:
    """The floor of a rank statistic over ``arrays``: one comparison sort of each (``O(n log n)`` for real scores).

    Args:
        *arrays: 1-D numpy arrays of scores.

    Returns:
        A zero-argument callable that sorts a copy of each array once and returns the sum of the first elements.
    """
    if not arrays:
        raise ValueError("one_sort: arrays must not be empty")

    def sort() -> float:
        return float(sum(np.sort(a, axis=None)[0] for a in arrays))

    return sort


def time_best(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Best wall and best process CPU time of ``repeat`` calls of ``fn`` (after none: warm up beforehand).

    Args:
        fn: the zero-argument work.
        repeat: the number of timed calls, at least 1.

    Returns:
        ``(wall_s, cpu_s)``, each the minimum over the calls.
    """
    if repeat < 1:
        raise ValueError(f"time_best: repeat must be >= 1, got {repeat}")
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def ratio(seconds: float, floor_seconds: float) -> str:
    """``seconds / floor_seconds`` formatted as ``"3.02x"`` (``"n/a"`` for a zero or missing floor).

    Args:
        seconds: the contender's time.
        floor_seconds: the time of the floor, measured in the same run.

    Returns:
        The ratio, two decimals and an ``x``.
    """
    if not floor_seconds or not np.isfinite(floor_seconds) or floor_seconds <= 0:
        return "n/a"
    return f"{seconds / floor_seconds:.2f}x"


def floor_line(what: str, seconds: float, floor_seconds: float, floor: str) -> str:
    """One printed line: ``ratio to the floor: <what> = <ratio> (<time> s / <floor> <floor time> s)``.

    Args:
        what: the contender measured.
        seconds: its time.
        floor_seconds: the floor's time, measured in the same run.
        floor: what the floor is (e.g. ``"one read of the probabilities"``).

    Returns:
        The line, without a trailing newline.
    """
    return (f"ratio to the floor: {what} = {ratio(seconds, floor_seconds)} "
            f"({seconds:.4g} s / {floor}: {floor_seconds:.4g} s)")


# ------------------------------------------------------------------------------------------------ peak memory
def rss_mib() -> float:
    """The resident set size of this process now, in MiB (``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def reset_peak() -> float:
    """Reset the kernel's peak-RSS counter (VmHWM) and return the RSS now, in MiB.

    ``ru_maxrss`` cannot be reset, and a transient peak while importing torch/MONAI (or file-backed pages that
    are later reclaimed on a loaded machine) would hide the peak of the work itself. Where
    ``/proc/self/clear_refs`` cannot be written the counter is left as it is.

    Returns:
        The RSS after the reset, in MiB: subtract it from :func:`peak_mib` for the working memory of what ran
        in between.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return rss_mib()


def peak_mib(maxrss_fallback: bool = False) -> float:
    """The peak RSS since the last :func:`reset_peak` (VmHWM), in MiB.

    Args:
        maxrss_fallback: where VmHWM cannot be read, return ``ru_maxrss`` (the peak of the whole process) instead
            of NaN.

    Returns:
        The peak RSS in MiB, or the fallback where ``/proc/self/status`` has no VmHWM.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1]) / 1024
    except OSError:
        pass
    if maxrss_fallback:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return float("nan")
