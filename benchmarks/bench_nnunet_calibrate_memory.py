"""Peak memory of ``monai-unc nnunet-calibrate`` (:func:`~monai_unc.nnunet.calibrate.calibrate_model_folder`) by
number of validation cases.

    python benchmarks/bench_nnunet_calibrate_memory.py [--cases 1 4 8 16] [--classes 32] [--size 96] [--max-steps 5]

Each row runs ``calibrate_model_folder`` in its own subprocess on one fold validated on ``N`` preprocessed cases of
``S^3`` voxels (nnU-Net's numpy layout) with the small ``PlainConvUNet`` of the nnU-Net tests (features 4, 8; patch
48^3; ``C`` classes; random weights: :func:`tests.nnunet.test_predictor_hostile.write_model_folder`), without the
mirrors, one torch thread. Peak RSS is the subprocess's ``ru_maxrss`` (a fresh process: its own peak), with its RSS
just before the call beside it. The temperature is printed so that runs of two versions can be compared. Memory that
grows with ``N`` is the cases kept in memory; the constant part is the imports, nnU-Net's prediction of one case and
the fit's float64 chunk.
"""

from __future__ import annotations

import json
import pickle
import resource
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _memory_rows import memory_rows  # noqa: E402


def _child(n: int, classes: int, size: int, max_steps: int) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    from monai_unc.nnunet.calibrate import calibrate_model_folder
    from tests.nnunet.test_nnunet import make_plans
    from tests.nnunet.test_predictor_hostile import write_model_folder

    dataset_json = {"channel_names": {"0": "MRI"}, "labels": {"background": 0, **{f"l{c}": c for c in
                                                                                     range(1, classes)}},
                    "numTraining": n, "file_ending": ".nii.gz"}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        model = write_model_folder(d / "model", folds=(0,), plans=make_plans(patch=(48, 48, 48)),
                                   dataset_json=dataset_json)
        folder = d / "pre" / "Dataset999_Unit" / "unit"
        folder.mkdir(parents=True)
        rng = np.random.default_rng(0)
        keys = [f"c{k:03d}" for k in range(n)]
        for key in keys:
            seg = rng.integers(0, classes, (1, size, size, size)).astype(np.int8)
            data = (seg / classes + rng.normal(scale=0.3, size=seg.shape)).astype(np.float32)
            np.savez(folder / f"{key}.npz", data=data, seg=seg)
            with open(folder / f"{key}.pkl", "wb") as f:
                pickle.dump({"spacing": [1.0, 1.0, 1.0]}, f)
        (d / "pre" / "Dataset999_Unit" / "splits_final.json").write_text(json.dumps([{"train": ["t"], "val": keys}]))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        report = calibrate_model_folder(model, d / "calibrated", use_folds=(0,), preprocessed_dir=d / "pre",
                                        use_mirroring=False, max_steps=max_steps)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"cases": n, "peak_rss_mib": round(peak), "rss_before_mib": round(before),
                      "temperature": report["0"]["temperature"], "steps": report["0"]["steps"]}))


def main() -> None:
    """Run the rows and print the table."""
    memory_rows(__file__, __doc__.splitlines()[0], _child, size=96, max_steps=5, value_bytes=2,
                value_type="float16")


if __name__ == "__main__":
    main()
