"""Writing a case's ``.nii.gz`` outputs: the package's writers (gzip in blocks on several threads,
:class:`monai_unc.io.GzipBlockWriter`) against ``nib.save`` (one zlib stream on one thread), in the same run.

The package's writers deflate with ISA-L where python-isal is installed (the ``fast`` extra); ``zlib`` rows are the
same writers as without it.

The case is what ``monai-unc infer`` writes for a BraTS-sized volume by default: the segmentation (int16), the class
probabilities (4 channels, float32) and six uncertainty maps (float32), from a smooth synthetic probability field.
Each contender writes the whole case ``--repeat`` times in a child process that loads the arrays (wall time, best of
the repeats; peak RSS of the child minus its RSS once the arrays are loaded: what writing adds); ``ours`` (and
``zlib``) run at 1 thread and at ``--threads`` threads.

    python benchmarks/bench_writes.py --shape 240 240 155 --threads 2 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nibabel as nib
import numpy as np


def _case(shape: tuple[int, int, int], classes: int) -> dict[str, np.ndarray]:
    """seg, probs (C, *shape) and six maps of a smooth random probability field."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    logits = torch.randn((1, classes, *[max(1, s // 8) for s in shape]), generator=g) * 4
    logits = F.interpolate(logits, size=shape, mode="trilinear", align_corners=False)[0]
    probs = torch.softmax(logits, 0)
    ent = -(probs * probs.clamp_min(1e-12).log()).sum(0)
    maps = {"entropy": ent, "variance": probs.var(0), "top": probs.max(0).values, "margin": probs.topk(2, 0).values[0]
            - probs.topk(2, 0).values[1], "mi": ent * 0.1, "std": probs.std(0)}
    out = {"seg": probs.argmax(0).to(torch.int16).numpy(), "probs": probs.numpy()}
    out.update({k: v.numpy().astype(np.float32) for k, v in maps.items()})
    return out


def _status_kib(key: str) -> int:
    """A ``/proc/self/status`` memory figure (KiB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def _reset_peak() -> int:
    """Reset the peak RSS (``VmHWM``, Linux ``clear_refs`` 5) and return the RSS now (KiB)."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS")


def _time_case(kind: str, threads: int, case: dict[str, np.ndarray], repeat: int) -> dict[str, float]:
    """Write ``case`` ``repeat`` times with ``kind`` (``nib``, ``ours`` or ``zlib``: ours without ISA-L) on
    ``threads`` torch threads: the best wall time and the MiB written (and raw)."""
    import torch

    import monai_unc.io.files as files
    from monai_unc.io import save_nifti, save_probabilities

    before, isal = torch.get_num_threads(), files._isal_zlib
    torch.set_num_threads(threads)
    if kind == "zlib":  # the writers as they are without python-isal
        files._isal_zlib = None
    times = []
    try:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            for _ in range(repeat):
                t0 = time.perf_counter()
                for name, arr in case.items():
                    path = out / f"case_{name}.nii.gz"
                    if kind == "nib":
                        data = np.moveaxis(arr, 0, -1) if arr.ndim == 4 else arr
                        nib.save(nib.Nifti1Image(data, np.eye(4)), str(path))
                    elif arr.ndim == 4:
                        save_probabilities(arr, np.eye(4), path)
                    else:
                        save_nifti(arr, np.eye(4), path)
                times.append(time.perf_counter() - t0)
            size = sum(p.stat().st_size for p in out.iterdir())
    finally:
        torch.set_num_threads(before)
        files._isal_zlib = isal
    return {"s": min(times), "mib": size / 2**20, "raw_mib": sum(a.nbytes for a in case.values()) / 2**20}


def _child(kind: str, threads: int, arrays: str, repeat: int) -> None:
    import monai_unc.io  # noqa: F401 (imported before the peak is reset)

    case = {f.stem: np.load(f) for f in sorted(Path(arrays).glob("*.npy"))}  # read straight into each array
    base = _reset_peak()
    row = _time_case(kind, threads, case, repeat)
    print(json.dumps({**row, "peak_mib": (_status_kib("VmHWM") - base) / 1024}))


def measure(shape: tuple[int, int, int], classes: int, threads: int, repeat: int,
            isolate: bool = True) -> dict[str, dict]:
    """Time the contenders: ``{"nib_1", "zlib_1", "zlib_<threads>", "ours_1", "ours_<threads>"}`` -> ``{"s", "mib",
    "raw_mib"[, "peak_mib"]}`` (the ``zlib`` rows only where python-isal is installed, else they are ``ours``).
    ``isolate``: each in its own child process, with its peak RSS; else in this process (no peak)."""
    import monai_unc.io.files as files

    rows = {}
    kinds = ("zlib", "ours") if files._isal_zlib is not None else ("ours",)
    contenders = (("nib", 1), *((k, n) for k in kinds for n in dict.fromkeys((1, threads))))
    if not isolate:
        case = _case(tuple(shape), classes)
        return {f"{kind}_{n}": _time_case(kind, n, case, repeat) for kind, n in contenders}
    with tempfile.TemporaryDirectory() as d:
        for name, arr in _case(tuple(shape), classes).items():
            np.save(Path(d) / f"{name}.npy", arr)
        for kind, n in contenders:
            cmd = [sys.executable, __file__, "--repeat", str(repeat), "--child", kind, str(n), d]
            env = {**os.environ, "OMP_NUM_THREADS": str(n)}
            run = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
            rows[f"{kind}_{n}"] = json.loads(run.stdout.strip().splitlines()[-1])
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", nargs=3, type=int, default=[240, 240, 155])
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        _child(a.child[0], int(a.child[1]), a.child[2], a.repeat)
        return
    rows = measure(tuple(a.shape), a.classes, a.threads, a.repeat)
    ref = rows["nib_1"]
    print(f"case {tuple(a.shape)}: seg, {a.classes}-class probabilities, 6 maps; {ref['raw_mib']:.0f} MiB raw")
    print("| contender | wall (s) | ratio to nib.save | written (MiB) | peak (MiB) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for key, r in rows.items():
        kind, threads = key.split("_")
        name = {"nib": "nib.save, one zlib stream", "zlib": f"ours with zlib, {threads} thread(s)",
                "ours": f"ours, {threads} thread(s)"}[kind]
        print(f"| {name} | {r['s']:.3f} | {r['s'] / ref['s']:.2f}x | {r['mib']:.1f} | {r['peak_mib']:.0f} |")

if __name__ == "__main__":
    main()
