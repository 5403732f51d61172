"""The fused CPU histogram kernels are kept in numba's disk cache and loaded by later processes.

Each test gives its subprocesses a fresh ``NUMBA_CACHE_DIR``. The first process that updates a histogram of ``C``
classes compiles the kernels for ``C`` and saves them; a later process loads them (numba's own counters: the
dispatcher's ``stats.cache_hits`` and ``stats.cache_misses``, per signature), and its tables equal the first's and an
in-process reference bit for bit. Two processes that start on an empty cache at the same time with different class
counts (the case that once left a cache a later process ran with "double free or corruption") compile one after the
other (``monai_unc._jit.cached_kernel``'s lock), and each then loads the other's.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from monai_unc.metrics.calibration import ConfidenceHistogram, _cpu_kernel
from tests._paths import ROOT

pytestmark = [
    pytest.mark.skipif(not _cpu_kernel.available(), reason="numba is not installed (the 'fast' extra)"),
    pytest.mark.slow,
]

#: one histogram update of C classes (argv: C, the folder of the start signal or ""), then one JSON line: the
#: digest of its state and numba's cache counters of the tables and entropy kernels
CHILD = r"""
import hashlib, json, sys, time
from pathlib import Path
import numpy as np, torch
from monai_unc.metrics.calibration import ConfidenceHistogram
from monai_unc.metrics.calibration import _numba_histogram as nh

C, sync = int(sys.argv[1]), sys.argv[2]
g = torch.Generator().manual_seed(C)
p = torch.softmax(3.0 * torch.randn(1, C, 24, 24, 24, generator=g), 1)
y = torch.randint(0, C, (1, 1, 24, 24, 24), generator=g)
if sync:  # wait until every process is ready, so that they compile at the same time
    Path(sync, f"ready-{C}").touch()
    deadline = time.monotonic() + 120
    while not Path(sync, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
state = ConfidenceHistogram(num_classes=C).update(p, y).state_dict()
digest = hashlib.sha256(b"".join(np.ascontiguousarray(state[k]).tobytes() for k in ("counts", "sums", "scalars")))
stats = {name: {"hits": sum(getattr(nh, name).stats.cache_hits.values()),
                "misses": sum(getattr(nh, name).stats.cache_misses.values())}
         for name in ("tables", "entropy_voxels")}
print(json.dumps({"digest": digest.hexdigest(), "stats": stats}))
"""


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["NUMBA_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _start(n_cls: int, cache: Path, sync: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(n_cls), "" if sync is None else str(sync)],
        env=_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _run_together(classes: tuple[int, ...], cache: Path, sync: Path) -> list[dict]:
    """One process per class count, released at the same moment once all have imported."""
    sync.mkdir()
    procs = [_start(c, cache, sync) for c in classes]
    try:
        while not all((sync / f"ready-{c}").exists() for c in classes):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
            time.sleep(0.01)
        (sync / "go").touch()
        return [_result(p) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def _reference_digest(n_cls: int) -> str:
    """The child's digest computed in this process."""
    g = torch.Generator().manual_seed(n_cls)
    p = torch.softmax(3.0 * torch.randn(1, n_cls, 24, 24, 24, generator=g), 1)
    y = torch.randint(0, n_cls, (1, 1, 24, 24, 24), generator=g)
    state = ConfidenceHistogram(num_classes=n_cls).update(p, y).state_dict()
    return hashlib.sha256(
        b"".join(np.ascontiguousarray(state[k]).tobytes() for k in ("counts", "sums", "scalars"))
    ).hexdigest()


def compiled(result: dict) -> bool:
    return all(s["misses"] >= 1 and s["hits"] == 0 for s in result["stats"].values())


def loaded(result: dict) -> bool:
    return all(s["hits"] >= 1 and s["misses"] == 0 for s in result["stats"].values())


def test_processes_compiling_different_class_counts_at_once_share_one_cache(tmp_path):
    """Two processes on an empty cache compile (C = 3 and C = 5 at once) and save; two later processes load what the
    other saved (at once again). One test for both: each subprocess compiles for seconds."""
    cache = tmp_path / "numba_cache"
    a, b = _run_together((3, 5), cache, tmp_path / "sync1")
    assert compiled(a) and compiled(b), (a, b)
    assert any(cache.rglob("*_numba_histogram.tables-*.nbi"))
    assert (a["digest"], b["digest"]) == (_reference_digest(3), _reference_digest(5))
    # each class count now loads what the other process saved, both at once again
    b2, a2 = _run_together((5, 3), cache, tmp_path / "sync2")
    assert loaded(a2) and loaded(b2), (a2, b2)
    assert (a2["digest"], b2["digest"]) == (a["digest"], b["digest"])


def test_the_class_count_is_the_length_of_the_kernels_tuple():
    # the entry points are cached and locked (monai_unc._jit); one specialisation per class count up to
    # MAX_UNROLLED_CLASSES, None in place of the tuple above (one kernel for every larger count)
    from monai_unc._jit import signature_key

    kernels = _cpu_kernel._kernels()(4)
    assert kernels.tables.args == ((0, 1, 2, 3),)
    assert type(kernels.tables.func.dispatcher._cache).__name__ == "FunctionCache"
    assert signature_key(((0, 1, 2, 3),)) != signature_key(((0, 1, 2),))
    assert _cpu_kernel._kernels()(_cpu_kernel.MAX_UNROLLED_CLASSES + 1).tables.args == (None,)


def _many_class_case(n_cls: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Probabilities of ``n_cls`` classes (two cases, 2 x 5 x 7 x 6 voxels), labels and weights with zeros."""
    g = torch.Generator().manual_seed(n_cls)
    p = torch.softmax(4.0 * torch.randn(2, n_cls, 5, 7, 6, generator=g, dtype=torch.float64), 1).to(dtype)
    y = torch.randint(0, n_cls, (2, 1, 5, 7, 6), generator=g)
    w = torch.rand(2, 1, 5, 7, 6, generator=g, dtype=torch.float64) * (torch.rand(2, 1, 5, 7, 6, generator=g) > 0.1)
    return p, y, w


@pytest.mark.parametrize("n_cls", [9, 23])
def test_updates_of_more_than_the_unrolled_classes_equal_the_reference(n_cls):
    """C = 9 and C = 23 (the class-by-class kernel shared by every count above MAX_UNROLLED_CLASSES): the fused update
    of float32 and float64 probabilities, with and without weights, gives the reference path's counts exactly and
    its sums within the stated bounds (``assert_equal_histograms``)."""
    from tests.metrics.test_calibration_kernels import assert_equal_histograms
    from tests.metrics.test_calibration_kernels_fuzz import fused_off

    for dtype, weighted in ((torch.float32, False), (torch.float64, True)):
        p, y, w = _many_class_case(n_cls, dtype)
        kw = {"weights": w} if weighted else {}
        fused = ConfidenceHistogram(n_cls, n_fine_bins=150, uncertainty=True).update(p, y, **kw)
        with fused_off():
            ref = ConfidenceHistogram(n_cls, n_fine_bins=150, uncertainty=True).update(p, y, **kw)
        assert fused.counts.sum() > 0
        assert_equal_histograms(fused, ref, y.numel())


def test_one_compiled_kernel_serves_every_class_count_above_the_unrolled_ones():
    """After an update of 9 classes, updates of 13 and 23 classes (same dtypes and weights) compile and load nothing:
    numba's dispatchers of the table and entropy kernels keep their overloads and cache counters (earlier versions
    compiled every class count, about 10 s each on an empty cache)."""
    from monai_unc.metrics.calibration import _numba_histogram as nh

    def update(n_cls: int) -> None:
        for dtype, weighted in ((torch.float32, False), (torch.float64, True)):
            p, y, w = _many_class_case(n_cls, dtype)
            kw = {"weights": w} if weighted else {}
            ConfidenceHistogram(n_cls, n_fine_bins=150, uncertainty=True).update(p, y, **kw)

    def state() -> list:
        return [(len(k.overloads), dict(k.stats.cache_hits), dict(k.stats.cache_misses))
                for k in (nh.tables, nh.entropy_classes)]

    update(9)  # compiled or loaded here, whichever the cache holds
    before = state()
    assert all(n >= 2 for n, _, _ in before)  # float32 unweighted and float64 weighted
    update(13)
    update(23)
    assert state() == before
