"""What ``evaluate`` / ``triage`` add by checking the digests of an ``infer`` folder's files before reading them.

:func:`monai_unc.io.provenance.check_finished_predictions` verifies each case record's ``file_digests`` (size, then
sha256, as :func:`monai_unc.io.changed_outputs` does on resume). The script writes a cohort as ``infer`` does
(segmentation, 2-class probabilities and four maps per case, ``<case>.json`` records with their digests), then times
the check with the digests and with the same records stripped of them (an earlier version's: settings compared only),
and, as the floor, one read of every file the way ``evaluate`` loads them (nibabel, full voxel arrays). Page cache
warm (the files were just written), as right after ``infer``.

    python benchmarks/bench_finished_digests.py --cases 20 --shape 64 64 64 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import torch

from monai_unc.io import output_digests, record_digest, save_nifti, save_probabilities
from monai_unc.io.provenance import check_finished_predictions

MEASURES = ("predictive_entropy", "expected_entropy", "mutual_information", "one_minus_max_prob")


def _write_cohort(out: Path, n: int, shape: tuple[int, ...], digests: bool) -> list[str]:
    rng = np.random.default_rng(0)
    settings = {"method": "mcdropout", "samples": 8, "measures": list(MEASURES)}
    (out / "infer.json").write_text(json.dumps({"settings": settings}))
    ids = []
    for i in range(n):
        cid = f"case{i:03d}"
        probs = torch.softmax(torch.from_numpy(rng.normal(size=(2, *shape)).astype(np.float32)), 0)
        names = [f"{cid}_seg.nii.gz", f"{cid}_probs.nii.gz", *(f"{cid}_{m}.nii.gz" for m in MEASURES)]
        save_nifti(probs.argmax(0).to(torch.uint8).numpy(), np.eye(4), out / names[0])
        save_probabilities(probs, np.eye(4), out / names[1])
        for name in names[2:]:
            save_nifti(rng.random(shape).astype(np.float32), np.eye(4), out / name)
        record = {"case": cid, "files": names, "method": "mcdropout", "num_samples": 8, "mi_meaning": "epistemic",
                  "fingerprint": settings}
        if digests:
            record["file_digests"] = output_digests(out, names)
            record["record_digest"] = record_digest(record)
        (out / f"{cid}.json").write_text(json.dumps(record))
        ids.append(cid)
    return ids


def _best(f, repeat: int) -> tuple[float, float]:
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=20)
    p.add_argument("--shape", nargs=3, type=int, default=[64, 64, 64])
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        with_d, without = Path(d, "with"), Path(d, "without")
        with_d.mkdir()
        without.mkdir()
        ids = _write_cohort(with_d, a.cases, tuple(a.shape), digests=True)
        _write_cohort(without, a.cases, tuple(a.shape), digests=False)
        size = sum(f.stat().st_size for f in with_d.glob("*.nii.gz"))
        checked = _best(lambda: check_finished_predictions(with_d, "monai-unc", ids), a.repeat)
        bare = _best(lambda: check_finished_predictions(without, "monai-unc", ids), a.repeat)
        floor = _best(lambda: [np.asarray(nib.load(f).dataobj) for f in sorted(with_d.glob("*.nii.gz"))], a.repeat)
    added = (checked[0] - bare[0], checked[1] - bare[1])
    print(f"{a.cases} cases of {tuple(a.shape)}: segmentation, 2-class probabilities, 4 maps; "
          f"{size / 2**20:.1f} MiB of files")
    print(f"check with digests: {checked[0]:.3f} s wall ({checked[1]:.3f} s CPU); without: {bare[0]:.3f} s wall "
          f"({bare[1]:.3f} s CPU); added: {added[0]:.3f} s wall ({added[1]:.3f} s CPU)")
    print(f"one read of the files (the floor): {floor[0]:.3f} s wall ({floor[1]:.3f} s CPU); "
          f"ratio of the added check to the floor: {added[1] / floor[1]:.3f}x CPU")


if __name__ == "__main__":
    main()
