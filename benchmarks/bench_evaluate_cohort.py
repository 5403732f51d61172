"""``monai-unc evaluate`` end to end on BraTS-sized synthetic cases (wall time per case, peak RSS of the command).

The cohort: ``--cases`` cases of ``--shape`` voxels and 4 classes, written as ``monai-unc infer`` writes them
(``<case>_seg``, ``<case>_probs``, ``<case>_predictive_entropy``, ``<case>_one_minus_max_prob``) from a smooth random
probability field, and reference labels that disagree with the segmentation along smooth boundaries (a second,
coarser random field added to the logits). The command runs with its defaults (every metric but lesion-wise and
conformal) in a child process; ``--pythonpath`` runs another checkout's code on the same files (a before/after
comparison in one run).

    python benchmarks/bench_evaluate_cohort.py --cases 3 --repeat 2 [--pythonpath OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def write_cohort(root: Path, cases: int, shape: tuple[int, int, int]) -> None:
    """The synthetic cohort under ``root/pred`` and ``root/labels``."""
    import torch
    import torch.nn.functional as F

    from monai_unc.io import save_nifti, save_probabilities

    (root / "pred").mkdir(parents=True, exist_ok=True)
    (root / "labels").mkdir(parents=True, exist_ok=True)
    coarse = tuple(max(2, s // 8) for s in shape)
    coarser = tuple(max(2, s // 16) for s in shape)
    for i in range(cases):
        g = torch.Generator().manual_seed(i)
        logits = F.interpolate(torch.randn((1, 4, *coarse), generator=g) * 4, size=shape, mode="trilinear")[0]
        probs = torch.softmax(logits, 0)
        noise = F.interpolate(torch.randn((1, 4, *coarser), generator=g), size=shape, mode="trilinear")[0]
        label = (logits + 1.5 * noise).argmax(0)
        ent = -(probs * probs.clamp_min(1e-12).log()).sum(0)
        c, eye = f"case{i:02d}", np.eye(4)
        save_nifti(probs.argmax(0).to(torch.int16).numpy(), eye, root / "pred" / f"{c}_seg.nii.gz")
        save_probabilities(probs.numpy(), eye, root / "pred" / f"{c}_probs.nii.gz")
        save_nifti(ent.numpy(), eye, root / "pred" / f"{c}_predictive_entropy.nii.gz")
        save_nifti((1 - probs.max(0).values).numpy(), eye, root / "pred" / f"{c}_one_minus_max_prob.nii.gz")
        save_nifti(label.to(torch.int16).numpy(), eye, root / "labels" / f"{c}.nii.gz")


def run_evaluate(root: Path, pythonpath: str | None, out: str) -> tuple[float, float]:
    """Wall time (s) and peak RSS (MiB) of one ``monai-unc evaluate`` child process."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, "-m", "monai_unc.cli", "evaluate", "-l", str(root / "labels"), "-p", str(root / "pred"),
           "-o", str(root / out), "--quiet"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, capture_output=True, cwd=root)  # not the checkout: -m puts the
    # working folder first on the path
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child so far (KiB)
    return seconds, max(peak, before) / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=3)
    p.add_argument("--shape", nargs=3, type=int, default=[240, 240, 155])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--pythonpath", help="another checkout to time on the same cohort (its monai_unc first)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        write_cohort(root, a.cases, tuple(a.shape))
        contenders = {"this checkout": os.environ.get("PYTHONPATH")}
        if a.pythonpath:
            contenders["--pythonpath"] = a.pythonpath
        times: dict[str, list[float]] = {k: [] for k in contenders}
        for r in range(a.repeat):  # interleaved: the machine's load falls on both
            for name, path in contenders.items():
                s, _ = run_evaluate(root, path, f"out_{len(times[name])}_{r}_{abs(hash(name))}")
                times[name].append(s)
        print(f"{a.cases} cases of {tuple(a.shape)}, 4 classes, 2 maps; best of {a.repeat}, wall time")
        print("| checkout | s per case (command / cases) |")
        print("| --- | ---: |")
        for name, t in times.items():
            print(f"| {name} | {min(t) / a.cases:.2f} |")


if __name__ == "__main__":
    main()
