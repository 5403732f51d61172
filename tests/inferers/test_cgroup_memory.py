"""available_memory on the CPU inside a memory cgroup (a container's or a batch job's limit).

Found by hostile testing: ``available_memory("cpu")`` (and the free-memory check of a compressed NIfTI file) read only
the machine's ``MemAvailable``; in a container limited to 8 GiB on a 64 GiB machine it said 60 GiB, so
``monai-unc infer`` gave no warning before a case that needed 20 GiB and the kernel killed the run mid-case.
"""

from __future__ import annotations

import builtins

import pytest

from monai_unc import _utils
from monai_unc.inferers import available_memory

GIB = 2**30


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A fake ``/proc/meminfo`` (64 GiB available, 4 GiB swap free), ``/proc/self/cgroup`` and cgroup mount."""
    files = {"/proc/meminfo": tmp_path / "meminfo", "/proc/self/cgroup": tmp_path / "cgroup"}
    files["/proc/meminfo"].write_text(f"MemTotal: {80 * GIB // 1024} kB\nMemAvailable: {64 * GIB // 1024} kB\n"
                                      f"SwapFree: {4 * GIB // 1024} kB\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: real_open(files.get(f, f), *a, **k))
    root = tmp_path / "sys_fs_cgroup"
    root.mkdir()
    monkeypatch.setattr(_utils, "CGROUP_ROOT", str(root))
    return files["/proc/self/cgroup"], root


def _write(folder, values):
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        (folder / name).write_text(f"{value}\n")


def test_no_cgroup_limit_is_the_machines_memory(machine):
    cgroup, root = machine
    cgroup.write_text("0::/\n")
    _write(root, {"memory.max": "max", "memory.current": str(5 * GIB)})
    assert available_memory("cpu") == 64 * GIB
    assert _utils.host_memory_free(swap=True) == 68 * GIB
    cgroup.write_text("0::/\n")
    (root / "memory.max").unlink()  # no memory controller file at all
    assert available_memory("cpu") == 64 * GIB


def test_cgroup_v2_limit_caps_available_memory(machine):
    cgroup, root = machine
    # a container's namespace: its own cgroup is mounted at the root, /proc/self/cgroup says "/"
    cgroup.write_text("0::/\n")
    _write(root, {"memory.max": str(8 * GIB), "memory.current": str(3 * GIB)})
    (root / "memory.stat").write_text(f"anon {2 * GIB}\nfile {GIB}\ninactive_file {GIB}\nactive_file 0\n")
    # 8 GiB limit, 2 GiB in use beyond the reclaimable file cache
    assert available_memory("cpu") == 6 * GIB
    assert _utils.host_memory_free(swap=True) == 6 * GIB + 4 * GIB  # swap not limited by the cgroup
    _write(root, {"memory.swap.max": str(GIB), "memory.swap.current": "0"})
    assert _utils.host_memory_free(swap=True) == 7 * GIB
    _write(root, {"memory.current": str(9 * GIB)})  # over the limit (page cache aside): nothing left, not negative
    (root / "memory.stat").write_text("inactive_file 0\n")
    assert available_memory("cpu") == 0


def test_cgroup_v2_limit_of_a_parent_applies(machine):
    """A batch job's step in a child cgroup of the job's: the job's (parent's) limit is the tighter one."""
    cgroup, root = machine
    cgroup.write_text("0::/job_1/step_0\n")
    _write(root / "job_1", {"memory.max": str(4 * GIB), "memory.current": str(GIB)})
    _write(root / "job_1" / "step_0", {"memory.max": "max", "memory.current": str(GIB)})
    assert available_memory("cpu") == 3 * GIB


def test_cgroup_v1_limit_caps_available_memory(machine):
    cgroup, root = machine
    cgroup.write_text("5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n")
    mem = root / "memory"  # the container sees its own cgroup at the mount's root
    _write(mem, {"memory.limit_in_bytes": str(16 * GIB), "memory.usage_in_bytes": str(6 * GIB)})
    (mem / "memory.stat").write_text(f"cache {2 * GIB}\ntotal_inactive_file {2 * GIB}\n")
    assert available_memory("cpu") == 12 * GIB
    _write(mem, {"memory.memsw.limit_in_bytes": str(17 * GIB), "memory.memsw.usage_in_bytes": str(6 * GIB)})
    assert _utils.host_memory_free(swap=True) == 13 * GIB
    # no limit: the kernel's "unlimited" (2**63 rounded down to pages)
    unlimited = "9223372036854771712"
    _write(mem, {"memory.limit_in_bytes": unlimited, "memory.memsw.limit_in_bytes": unlimited})
    assert available_memory("cpu") == 64 * GIB


def test_cuda_available_memory_counts_the_allocators_cache(monkeypatch):
    """Found by hostile testing: on CUDA only the driver's free memory counted, not the blocks PyTorch's caching
    allocator keeps reserved after the previous case (free for this process's next tensors): after a 20 GiB case on
    a 24 GiB card the next case of the same size was told 4 GiB were available, and warned about."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (4 * GIB, 24 * GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 19 * GIB)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 1 * GIB)
    assert available_memory("cuda:0") == 4 * GIB + 18 * GIB
