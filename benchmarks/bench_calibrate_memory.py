"""Peak memory of ``monai-unc calibrate`` (:func:`~monai_unc.workflows.calibrate.run_calibrate`) by number of cases.

    python benchmarks/bench_calibrate_memory.py [--cases 1 4 8 16] [--classes 32] [--size 64] [--max-steps 20]

Each row runs ``run_calibrate`` in its own subprocess on ``N`` cases of ``S^3`` voxels (one image channel, random
intensities) with a ``1 x 1 x 1`` convolution to ``C`` classes (labels: its prediction on 60 % of the voxels, a random
class elsewhere), whole images (no ``--roi``), ``--intensity none``. Peak RSS is the subprocess's ``ru_maxrss`` (a
fresh process: its own peak), with its RSS just before the call (the imports) beside it. The temperature is printed
so that runs of two versions can be compared. Memory that grows with ``N`` is the cases kept in memory; the
constant part is the imports, the fit's float64 chunk of one case and the histogram kernels.
"""

from __future__ import annotations

import json
import resource
import tempfile
from pathlib import Path

from _memory_rows import memory_rows


def _child(n: int, classes: int, size: int, max_steps: int) -> None:
    import nibabel as nib
    import numpy as np
    import torch

    shape = (size,) * 3
    torch.manual_seed(0)
    net = torch.nn.Conv3d(1, classes, 1)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "img").mkdir()
        (d / "lab").mkdir()
        rng = np.random.default_rng(0)
        for k in range(n):
            x = rng.normal(size=shape).astype(np.float32)
            with torch.no_grad():
                pred = net(torch.from_numpy(x)[None, None])[0].argmax(0).numpy()
            lab = np.where(rng.random(shape) < 0.6, pred, rng.integers(0, classes, shape)).astype(np.uint8)
            nib.save(nib.Nifti1Image(x, np.eye(4)), d / "img" / f"c{k:03d}.nii.gz")
            nib.save(nib.Nifti1Image(lab, np.eye(4)), d / "lab" / f"c{k:03d}.nii.gz")
        torch.save(net.state_dict(), d / "w.pt")
        spec = {"_target_": "torch.nn.Conv3d", "in_channels": 1, "out_channels": classes, "kernel_size": 1}
        from monai_unc.workflows.calibrate import run_calibrate

        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        _, rec = run_calibrate(d / "img", d / "lab", d / "out" / "cal.pt", network=spec, checkpoint=d / "w.pt",
                               intensity="none", max_steps=max_steps, progress=False)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"cases": n, "peak_rss_mib": round(peak), "rss_before_mib": round(before),
                      "temperature": rec["temperature"], "steps": rec["steps"]}))


def main() -> None:
    """Run the rows and print the table."""
    memory_rows(__file__, __doc__.splitlines()[0], _child, size=64, max_steps=20, value_bytes=4,
                value_type="float32")


if __name__ == "__main__":
    main()
