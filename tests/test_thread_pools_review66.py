"""The CPU kernels' threads come from one shared pool per thread count, not from a new pool per call (review 66).

``accumulate`` (the fused update of ``SampleStats``), the calibration histogram's kernel, the SVLS stencil and the
threaded Gaussian filter each made a ``ThreadPoolExecutor`` per call (the full demo makes 756 calls of
``accumulate``): the threads were started and joined every time. They now run on :func:`monai_unc._utils.thread_map`,
whose pools are made once per thread count, lazily, and forgotten in a forked child (the parent's threads do not
exist there). Each test warms the pool with one call, then counts the executors the next calls make: none.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from scipy import ndimage

import monai_unc._stats_kernels as kernels
from monai_unc import _utils
from monai_unc.losses import _cpu_kernel as svls_kernel
from monai_unc.metrics import ConfidenceHistogram
from monai_unc.metrics.calibration import _cpu_kernel as histogram_kernel
from monai_unc.metrics.spatial import _gaussian_scipy
from monai_unc.stats import SampleStats

needs_numba = pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="numba is not installed")


@pytest.fixture
def pools_made(monkeypatch):
    """The thread counts of the ``ThreadPoolExecutor`` s made while the test runs, wherever they are made."""
    made: list[int] = []
    init = ThreadPoolExecutor.__init__

    def counting(self, max_workers=None, *args, **kwargs):
        made.append(max_workers)
        init(self, max_workers, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "__init__", counting)
    return made


@needs_numba
def test_repeated_fused_updates_reuse_one_pool_and_equal_one_thread(monkeypatch, pools_made):
    monkeypatch.setattr(kernels, "CPU_CHUNK_ELEMENTS", 1024)  # chunks of 512 voxels shared between two threads
    monkeypatch.setattr(kernels, "CPU_MIN_VOXELS_PER_THREAD", 512)
    gen = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(3, 3, 2431, generator=gen, dtype=torch.float64), 1)  # 3 samples, 3 classes
    opts = {"class_variance": True, "accum_dtype": torch.float64}
    threads = {"n": 1}
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads["n"])
    one = SampleStats(**opts).update_many(p[:, :, None, :], 3)
    threads["n"] = 2
    SampleStats(**opts).update_many(p[:, :, None, :], 3)  # the first threaded call may make the shared pool
    pools_made.clear()
    for _ in range(4):
        two = SampleStats(**opts).update_many(p[:, :, None, :], 3)
    assert pools_made == [], f"repeated calls made new pools of {pools_made} threads"
    for name in ("sum_p", "sum_h", "sum_p2"):  # every thread owns its voxels: the same sums bit for bit
        assert torch.equal(getattr(one, name), getattr(two, name)), name


@needs_numba
def test_repeated_histogram_updates_reuse_one_pool(monkeypatch, pools_made):
    monkeypatch.setattr(histogram_kernel, "MIN_VOXELS_PER_THREAD", 1024)
    gen = torch.Generator().manual_seed(4)
    probs = torch.softmax(torch.randn(1, 3, 16, 16, 12, generator=gen), 1)
    labels = torch.randint(0, 3, (1, 16, 16, 12), generator=gen)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    one = ConfidenceHistogram(3).update(probs, labels)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    ConfidenceHistogram(3).update(probs, labels)
    pools_made.clear()
    for _ in range(3):
        two = ConfidenceHistogram(3).update(probs, labels)
    assert pools_made == [], f"repeated calls made new pools of {pools_made} threads"
    assert torch.equal(one.counts, two.counts)


@needs_numba
def test_repeated_svls_stencils_reuse_one_pool(monkeypatch, pools_made):
    monkeypatch.setattr(svls_kernel, "MIN_ROWS_PER_THREAD", 2)
    x = np.random.default_rng(0).random((6, 9, 10, 12))
    weights = [np.array([0.25, 0.5, 0.25])] * 3
    one = svls_kernel.smooth_axes(x, weights, 0.5, n_threads=1)
    svls_kernel.smooth_axes(x, weights, 0.5, n_threads=3)
    pools_made.clear()
    for _ in range(3):
        three = svls_kernel.smooth_axes(x, weights, 0.5, n_threads=3)
    assert pools_made == [], f"repeated calls made new pools of {pools_made} threads"
    assert np.array_equal(one, three)


def test_repeated_threaded_gaussian_filters_reuse_one_pool(pools_made):
    x = np.random.default_rng(1).random((128, 64, 128), dtype=np.float32)  # 2**20 voxels: the threaded path
    ref = ndimage.gaussian_filter(x, (1.0, 0.0, 0.0), truncate=2.0, mode="reflect")
    _gaussian_scipy(x.copy(), (1.0, 0.0, 0.0), 2.0, threads=2)
    pools_made.clear()
    for _ in range(2):
        out = _gaussian_scipy(x.copy(), (1.0, 0.0, 0.0), 2.0, threads=2)
    assert pools_made == [], f"repeated calls made new pools of {pools_made} threads"
    assert np.array_equal(out, ref)


def test_thread_map_keeps_the_order_waits_for_every_task_and_raises_the_first_error():
    assert _utils.thread_map(lambda i: i * i, range(7), 3) == [i * i for i in range(7)]
    assert _utils.thread_map(lambda i: i, [], 3) == []
    done: list[int] = []

    def task(i: int) -> int:
        if i == 0:
            raise KeyError("first")
        time.sleep(0.05)
        done.append(i)
        return i

    with pytest.raises(KeyError, match="first"):
        _utils.thread_map(task, range(3), 3)
    assert sorted(done) == [1, 2], "thread_map returned while tasks were still running"
    with pytest.raises(ValueError, match="n_threads"):
        _utils.thread_map(task, range(3), 0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_fresh_pool():
    """The parent's pool threads do not exist in a forked child: a pool kept from the parent, whose threads were all
    started and idle, would count them as idle and never run a task (the child hung); the child makes its own."""
    both = threading.Barrier(2, timeout=10.0)  # both threads of the parent's pool started, then idle

    def started(i: int) -> int:
        both.wait()
        return i + 1

    assert _utils.thread_map(started, range(2), 2) == [1, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a multi-threaded process
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = 0 if _utils.thread_map(lambda i: i + 1, range(2), 2) == [1, 2] else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20.0
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's threaded call never returned (the parent's pool was used)")
        time.sleep(0.02)
    assert os.waitstatus_to_exitcode(status) == 0
