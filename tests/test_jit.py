"""Compiled kernels cached on disk: the first call of each signature holds the cache folder's lock, across processes.

numba's cache index of one function is read, extended and written back by every process that saves a new
specialisation; two processes doing so at once can leave an index that names one process's argument types (or
closure) for the other's machine code (``monai_unc._jit``). The lock makes those first calls happen one at a time.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from monai_unc._jit import LOCK_FILE, cached_kernel, signature_key

_KIND = type(cached_kernel(lambda: 0))


def test_signature_key_tells_numba_types_apart():
    a = np.zeros((4, 5), np.float32)
    assert signature_key((a, 3, 2.0, None)) == signature_key((np.ones((2, 2), np.float32), 9, -1.0, None))
    assert signature_key((a,)) != signature_key((a.astype(np.float64),))  # dtype
    assert signature_key((a,)) != signature_key((a[None],))  # dimensions
    assert signature_key((a,)) != signature_key((a[:, ::2],))  # layout
    ro = a.copy()
    ro.flags.writeable = False
    assert signature_key((a,)) != signature_key((ro,))  # numba types a read-only array apart
    assert signature_key((a, None)) != signature_key((a, a))  # an optional argument given or not
    assert signature_key((1,)) != signature_key((1.0,))


def _slow(tag: str, log: str, seconds: float) -> int:
    with open(log, "a") as f:
        f.write(f"{tag} start {time.monotonic()}\n")
    time.sleep(seconds)
    with open(log, "a") as f:
        f.write(f"{tag} end {time.monotonic()}\n")
    return 1


def _first_call(folder: str, log: str, tag: str) -> None:
    kernel = cached_kernel(_slow, folder=folder)
    kernel(tag, log, 0.4)


def _intervals(log: Path) -> list[tuple[float, float]]:
    events: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines():
        tag, what, t = line.split()
        events.setdefault(tag, {})[what] = float(t)
    return sorted((e["start"], e["end"]) for e in events.values())


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_first_calls_of_several_processes_run_one_at_a_time(tmp_path):
    log = tmp_path / "log.txt"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_first_call, args=(str(tmp_path), str(log), f"p{i}")) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    spans = _intervals(log)
    assert len(spans) == 3
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(2)), spans  # no two first calls overlap
    assert (tmp_path / LOCK_FILE).exists()


@pytest.mark.skipif(sys.platform == "win32", reason="fcntl")
def test_only_first_calls_wait_for_the_lock(tmp_path):
    import fcntl

    calls = []
    kernel = cached_kernel(lambda *a: calls.append(a) or len(calls), folder=tmp_path)
    kernel(np.zeros(3), 1)  # the first call of this signature: takes the lock (free now)
    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)  # another process compiling now
        assert kernel(np.ones(5), 2) == 2  # a seen signature: does not wait
        ctx = mp.get_context("fork")
        p = ctx.Process(target=lambda: kernel(np.zeros(3, np.float32), 1))  # a new signature: waits
        p.start()
        p.join(1.0)
        assert p.is_alive()
    finally:
        os.close(fd)
    p.join(10)
    assert p.exitcode == 0


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_process_forked_during_a_first_call_does_not_keep_the_lock(tmp_path):
    """A DataLoader worker forked while a kernel compiles must not hold the lock after the compiling process let go
    (a flock would be shared with the child)."""
    ctx = mp.get_context("fork")
    children = []

    def fork_inside(*a):
        p = ctx.Process(target=time.sleep, args=(90,))  # a long-lived child forked while the lock is held
        p.start()
        children.append(p)
        return 1

    cached_kernel(fork_inside, folder=tmp_path)(1)
    try:
        t0 = time.monotonic()
        assert cached_kernel(lambda x: x, folder=tmp_path)(2) == 2  # a new first call: the lock is free
        assert time.monotonic() - t0 < 30  # a hang detector: a lock kept by the child blocks for its 90 s
    finally:
        for p in children:
            p.kill()
            p.join()


def test_unwritable_lock_folder_still_runs(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the folder would be: the lock file cannot be made
    assert cached_kernel(lambda x: x + 1, folder=blocked / "sub")(1) == 2


def test_the_package_kernels_are_wrapped():
    pytest.importorskip("numba")
    from monai_unc import _stats_kernels
    from monai_unc.losses import _cpu_kernel as losses_kernel
    from monai_unc.metrics.calibration import _cpu_kernel as calibration_kernel

    assert all(isinstance(k, _KIND) for k in _stats_kernels._cpu_kernels())
    assert all(isinstance(k, _KIND) for k in losses_kernel._kernels())
    # the calibration kernels: module-level functions bound to the class count (a tuple's length), cached on disk
    kernels = calibration_kernel._kernels()(3)
    assert isinstance(kernels.tables.func, _KIND) and isinstance(kernels.entropy.func, _KIND)
    assert isinstance(kernels.logs, _KIND)
    assert type(kernels.tables.func.dispatcher._cache).__name__ == "FunctionCache"


def test_a_numba_kernel_locks_in_its_cache_folder():
    pytest.importorskip("numba")
    import torch

    from monai_unc import _stats_kernels

    add_chunk, flags = _stats_kernels._cpu_kernels()
    folder = Path(flags.folder)
    assert folder.is_dir() and folder.resolve() != Path(os.path.realpath("/tmp"))  # numba's cache, not the fallback
    p = torch.softmax(torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(0)), 1)
    assert _stats_kernels.value_flags(p, classes=True)[0] == 0
    assert (folder / LOCK_FILE).exists()


def test_a_kernel_without_a_writable_cache_folder_is_compiled_in_the_process(monkeypatch, caplog):
    """Found by a review of read-only installations: with the package's folder and the user's cache folder not
    writable (a read-only container run under an arbitrary user id), ``numba.njit(cache=True)`` raised ``RuntimeError:
    cannot cache function ...: no locator available`` when the kernels' module was imported, and every command that
    updates a calibration histogram or sample statistics failed. ``njit`` compiles such a kernel in the process and
    says so once."""
    pytest.importorskip("numba")
    from numba.core import caching

    import monai_unc._jit as jit

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])  # numba finds no cache folder at all

    def twice(x):
        return 2 * x

    with pytest.raises(RuntimeError, match="no locator available"):  # what numba does alone
        __import__("numba").njit(cache=True)(twice)
    monkeypatch.setattr(jit, "_NO_CACHE_TOLD", False)
    with caplog.at_level("WARNING", logger="monai_unc._jit"):
        first, second = jit.njit(nogil=True)(twice), jit.njit()(lambda x: x + 1)
    assert first(21) == 42 and second(1) == 2
    told = [r.getMessage() for r in caplog.records if "NUMBA_CACHE_DIR" in r.getMessage()]
    assert len(told) == 1, told
    with pytest.raises(TypeError, match="cache"):
        jit.njit(cache=False)


def test_the_kernels_run_from_a_read_only_installation(tmp_path, request):
    """The same, for real: the package copied into a folder mounted read-only with a read-only home, in a private
    user and mount namespace (skipped where ``unshare`` cannot mount), updates a calibration histogram (equal to the
    reference path) and the fused sample statistics."""
    pytest.importorskip("numba")
    import shutil

    from tests._paths import ROOT

    unshare = shutil.which("unshare")
    if sys.platform != "linux" or unshare is None:
        pytest.skip("a read-only mount needs Linux's unshare")
    pkg, home = tmp_path / "pkg", tmp_path / "home"
    shutil.copytree(ROOT / "monai_unc", pkg / "monai_unc", ignore=shutil.ignore_patterns("__pycache__"))
    home.mkdir()
    script = tmp_path / "check.py"
    script.write_text(_READ_ONLY_CHECK + f"assert monai_unc.__file__.startswith({str(pkg)!r}), monai_unc.__file__\n")
    ns = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c"]
    probe = subprocess.run([*ns, f'mount --bind -o ro "{pkg}" "{pkg}"'], capture_output=True, text=True, timeout=60)
    if probe.returncode:
        pytest.skip(f"cannot mount read-only in a user namespace here: {probe.stderr.strip()[:200]}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(PYTHONPATH=str(pkg), HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), MONAI_UNC_TEST_DEVICE="cpu",
               MPLCONFIGDIR=str(tmp_path / "mpl"))
    cmd = f'mount --bind -o ro "{pkg}" "{pkg}" && mount --bind -o ro "{home}" "{home}" && exec "$0" "$1"'
    done = subprocess.run([*ns, cmd, sys.executable, str(script)], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    here = request.getfixturevalue("read_only_check_reference")  # after the skips: no reference for a skipped test
    assert here["returncode"] == 0, here["stderr"][-3000:]
    assert done.stdout == here["stdout"] and "fused" in here["stdout"]  # the same numbers as a cached kernel's
    assert "NUMBA_CACHE_DIR" in done.stderr and "NUMBA_CACHE_DIR" not in here["stderr"]


#: a histogram update and fused sample statistics; prints digests of their states
_READ_ONLY_CHECK = """
import hashlib
import numpy as np, torch
import monai_unc
from monai_unc.metrics.calibration import ConfidenceHistogram, _cpu_kernel
from monai_unc.stats import SampleStats
from monai_unc import _stats_kernels
assert _cpu_kernel.available() and _stats_kernels.available("cpu")
g = torch.Generator().manual_seed(0)
p = torch.softmax(torch.randn(1, 3, 6, 7, 8, generator=g), 1)
y = torch.randint(0, 3, (1, 1, 6, 7, 8), generator=g)
state = ConfidenceHistogram(num_classes=3).update(p, y).state_dict()
tables = b"".join(np.ascontiguousarray(state[k]).tobytes() for k in ("counts", "sums"))
print("fused", hashlib.sha256(tables).hexdigest())
stats = SampleStats()
for _ in range(3):
    stats.update(torch.softmax(torch.randn(1, 3, 5, 5, 5, generator=g), 1))
print("stats", hashlib.sha256(stats.mean.numpy().tobytes()).hexdigest())
"""


@pytest.fixture(scope="session")
def read_only_check_reference(tmp_path_factory) -> dict[str, object]:
    """``_READ_ONLY_CHECK`` run once per test session (shared by the xdist workers) by a plain installation with its
    usual numba cache: its ``returncode``, ``stdout`` (the digests every test compares with) and ``stderr``.

    It runs in a process of its own: the pytest worker's thread count (xdist) splits the fused sums otherwise, and
    their last bits differ (found by CI)."""
    from tests._paths import ROOT
    from tests._shared import once_per_session

    def run(folder):
        here = subprocess.run([sys.executable, "-c", _READ_ONLY_CHECK], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "MONAI_UNC_TEST_DEVICE": "cpu"}, cwd=folder)
        return {"returncode": here.returncode, "stdout": here.stdout, "stderr": here.stderr}

    return once_per_session(tmp_path_factory, "jit_read_only_check_reference", run)[1]


def test_a_kernel_whose_disk_cache_cannot_be_written_runs(monkeypatch, caplog):
    """Found by hostile testing: numba saves a new kernel into its cache folder inside the first call; a full disk or
    an exhausted quota there (``ENOSPC`` / ``EDQUOT`` / ``EFBIG``) raised out of the call, and ``infer`` stopped
    before its first case (``No space left on device``, naming no file) while the output's disk had room. The
    kernel runs from memory, the save is skipped and one log line says so."""
    numba = pytest.importorskip("numba")
    import errno

    from numba.core import caching

    import monai_unc._jit as jit

    def full(self, sig, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(caching.Cache, "save_overload", full)
    monkeypatch.setattr(jit, "_NO_CACHE_TOLD", False)

    def triple(x):
        return 3 * x

    with pytest.raises(OSError, match="No space"):  # what numba does alone
        numba.njit(cache=True)(triple)(1)

    def inner(x):
        return x + 1

    inner_kernel = jit.njit()(inner)

    def outer(x):  # its first call compiles inner too, whose save fails inside outer's compilation
        return 2 * inner_kernel(x)

    kernel = jit.njit()(outer)
    with caplog.at_level("WARNING", logger="monai_unc._jit"):
        assert kernel(2) == 6 and kernel(2) == 6 and kernel(2.5) == 7.0 and jit.njit()(triple)(2) == 6
    told = [r.getMessage() for r in caplog.records if "could not keep compiled kernels" in r.getMessage()]
    assert len(told) == 1 and "No space left on device" in told[0], told


def test_the_kernels_run_with_their_cache_folder_on_a_full_disk(tmp_path, request):
    """The same, for real: ``NUMBA_CACHE_DIR`` on a full tmpfs (private user and mount namespace; skipped where it
    cannot be mounted): the histogram update and the fused sample statistics give the numbers of a cached kernel."""
    pytest.importorskip("numba")
    from tests._full_disk import run_on_a_full_disk

    done = run_on_a_full_disk(tmp_path, """
import os, sys
os.makedirs(sys.argv[1] + "/numba")
fill(sys.argv[1])
os.environ["NUMBA_CACHE_DIR"] = sys.argv[1] + "/numba"
""" + _READ_ONLY_CHECK, size_kib=64)
    assert done.returncode == 0, done.stderr[-3000:]
    here = request.getfixturevalue("read_only_check_reference")  # after the skip: no reference for a skipped test
    assert here["returncode"] == 0, here["stderr"][-3000:]
    assert done.stdout == here["stdout"] and "fused" in done.stdout
    assert "could not keep compiled kernels" in done.stderr


def test_every_kernel_is_compiled_through_monai_unc_jit():
    """Found by hostile testing: the SVLS loss kernels called ``numba.njit(cache=True)`` themselves, so a cache folder
    on a full disk (or a read-only installation) stopped the training loss, which ``monai_unc._jit.njit`` handles."""
    import re

    from tests._paths import ROOT

    direct = re.compile(r"\bnumba\s*\.\s*(?:njit|jit|vectorize|guvectorize)\b"
                        r"|from\s+numba\s+import\s+[^\n]*\b(?:njit|jit)\b")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "monai_unc").rglob("*.py")) if p.name != "_jit.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if direct.search(line.split("#")[0])]  # code, not a comment that names numba's decorator
    assert not found, found
