"""What the resume check of ``infer`` costs: the size and sha256 of every output file of a case
(:func:`monai_unc.workflows.infer.output_digests`), as a ratio to writing those files (:func:`monai_unc.io.save_nifti`,
``save_probabilities``), measured in the same run.

    python benchmarks/bench_output_digests.py --shape 128 128 128 --classes 4 --repeat 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from monai_unc.io import save_nifti, save_probabilities
from monai_unc.workflows.infer import output_digests


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", nargs=3, type=int, default=[128, 128, 128])
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    probs = torch.softmax(torch.from_numpy(rng.normal(size=(a.classes, *a.shape)).astype(np.float32)), 0)
    maps = [rng.random(a.shape).astype(np.float32) for _ in range(4)]
    seg = probs.argmax(0).to(torch.int16).numpy()
    affine = np.eye(4)
    write, digest = [], []
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        names = ["c_seg.nii.gz", "c_probs.nii.gz", *[f"c_m{i}.nii.gz" for i in range(4)]]
        for _ in range(a.repeat):
            t0 = time.process_time()
            save_nifti(seg, affine, out / names[0])
            save_probabilities(probs, affine, out / names[1])
            for i, m in enumerate(maps):
                save_nifti(m, affine, out / names[2 + i])
            write.append(time.process_time() - t0)
            t0 = time.process_time()
            output_digests(out, names)
            digest.append(time.process_time() - t0)
        size = sum((out / n).stat().st_size for n in names)
    w, h = min(write), min(digest)
    print(f"shape {tuple(a.shape)} x {a.classes} classes + 4 maps: {size / 2**20:.1f} MiB written per case")
    print(f"write the case's files: {w:.3f} s CPU; size + sha256 of them: {h:.3f} s CPU")
    print(f"ratio of the digests to the writing (the floor): {h / w:.3f}x")


if __name__ == "__main__":
    main()
