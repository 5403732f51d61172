"""The one Dice / Gram / AUROC implementation against what it replaced, in time and peak memory.

    python benchmarks/bench_overlap.py               # about 1-2 minutes on 2 CPU cores
    python benchmarks/bench_overlap.py --repeat 5

Every contender runs in its own subprocess (one torch / BLAS thread), best of ``--repeat`` runs; peak = ``ru_maxrss``
after the work minus the RSS before it (MiB). Each part checks that the contenders agree before timing them.

- dice: per-class Dice of one 3-class case of 160^3 voxels: ``metrics.overlap.dice`` (int64 bincounts) against
  MONAI's ``compute_dice(ignore_empty=False)``, which ``monai-unc evaluate`` called before.
- gram: pairwise intersections of 30 sampled label maps (3 classes, 96^3), one Gram matrix per class:
  ``metrics.overlap.label_gram`` (float32 products in 2^20-voxel blocks) against the former ``metrics.quality``
  code (float32 ``bmm`` in 2^23-voxel blocks) and numpy (a loop over the 435 pairs with ``logical_and``).
- auroc: AUROC of 10^6 scores against 10^6 (many ties): ``metrics.discrimination.auroc`` (two sorts, searchsorted)
  against the former ``ood_auroc`` (``scipy.stats.rankdata`` of the pooled scores).

Each part also times its floor (``FLOORS``, ``benchmarks/_floor.py``) in the same way and prints every contender's
time as a ratio to it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
from _floor import one_read, one_sort, ratio


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _data(part: str):
    rng = np.random.default_rng(0)
    if part == "dice":
        from scipy.ndimage import gaussian_filter

        def smooth_labels():
            return gaussian_filter(rng.normal(size=(3, 40, 40, 40)), (0, 2, 2, 2)).argmax(0).repeat(4, 0).repeat(
                4, 1).repeat(4, 2)

        return smooth_labels(), smooth_labels()
    if part == "gram":
        return rng.integers(0, 3, size=(1, 30, 96**3), dtype=np.uint8)
    pos = np.round(rng.random(10**6) + 0.1, 3)
    neg = np.round(rng.random(10**6), 3)
    return pos, neg


def _prepare(part: str, contender: str):
    """Imports and input data (not timed, not in the peak); returns the work as a callable."""
    import torch

    torch.set_num_threads(1)
    from monai.metrics import compute_dice
    from scipy.stats import rankdata

    from monai_unc.metrics.discrimination import auroc
    from monai_unc.metrics.overlap import dice, label_gram

    data = _data(part)
    if contender == "floor":  # see FLOORS
        return one_sort(*data) if part == "auroc" else one_read(*(data if part == "dice" else (data,)))
    if part == "dice":
        seg, label = data
        if contender == "overlap.dice":
            return lambda: dice(seg[None], label[None], num_classes=3)[0].astype(np.float32).tolist()
        p, y = torch.from_numpy(seg)[None, None], torch.from_numpy(label)[None, None]
        return lambda: compute_dice(p, y, include_background=False, ignore_empty=False, num_classes=3)[0].tolist()
    if part == "gram":
        seg = torch.from_numpy(data)
        if contender == "overlap.label_gram":
            return lambda: [float(label_gram(seg, c).sum()) for c in range(3)]
        if contender == "former bmm, 2^23 blocks":
            def former() -> list[float]:
                out = []
                for c in range(3):
                    g = torch.zeros((1, 30, 30), dtype=torch.float64)
                    for s in range(0, seg.shape[-1], 1 << 23):
                        m = (seg[..., s:s + (1 << 23)] == c).to(torch.float32)
                        g += torch.bmm(m, m.transpose(1, 2)).to(torch.float64)
                    out.append(float(g.sum()))
                return out

            return former

        def pairs() -> list[float]:
            out = []
            for c in range(3):
                masks = data[0] == c
                g = np.zeros((30, 30))
                for i in range(30):
                    for j in range(i, 30):
                        g[i, j] = g[j, i] = np.count_nonzero(masks[i] & masks[j])
                out.append(float(g.sum()))
            return out

        return pairs
    pos, neg = data
    if contender == "discrimination.auroc":
        return lambda: auroc(pos, neg)

    def ranks() -> float:
        r = rankdata(np.concatenate([neg, pos]))
        return float((r[neg.size:].sum() - pos.size * (pos.size + 1) / 2.0) / (neg.size * pos.size))

    return ranks


def _child(part: str, contender: str) -> None:
    work = _prepare(part, contender)
    before = _rss_mib()
    t, c = time.perf_counter(), time.process_time()
    out = work()
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    print(json.dumps({"seconds": dt, "cpu": cpu, "peak_mib": peak, "out": out}))


CONTENDERS = {
    "dice": ["overlap.dice", "MONAI compute_dice (former evaluate)"],
    "gram": ["overlap.label_gram", "former bmm, 2^23 blocks", "numpy pair loop"],
    "auroc": ["discrimination.auroc", "rankdata (former ood_auroc)"],
}


#: the floor of each part, timed like a contender: Dice and the Gram matrices must read every label once (one read
#: of the label maps, memory-bound); an AUROC of real-valued scores with ties needs their order (one sort of each set)
FLOORS = {"dice": "one read of both label maps", "gram": "one read of the 30 label maps",
          "auroc": "one sort of each score set"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--part", choices=(*CONTENDERS, "all"), default="all")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(*args.child)
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    for part in CONTENDERS if args.part == "all" else [args.part]:
        print(f"\n{part}:\n| contender | seconds (best of {args.repeat}) | ratio | peak MiB | CPU s "
              "| CPU ratio to the floor |\n|---|---:|---:|---:|---:|---:|")
        results = {}
        for name in [*CONTENDERS[part], "floor"]:
            runs = []
            for _ in range(args.repeat):
                res = subprocess.run([sys.executable, __file__, "--child", part, name], env=env, check=True,
                                     capture_output=True, text=True)
                runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
            results[name] = runs
        floor = min(r["cpu"] for r in results.pop("floor"))
        outs = [r[0]["out"] for r in results.values()]
        assert all(np.allclose(o, outs[0], rtol=1e-12, atol=0) for o in outs), f"{part}: contenders disagree: {outs}"
        base = min(r["seconds"] for r in results[CONTENDERS[part][0]])
        for name, runs in results.items():
            best = min(r["seconds"] for r in runs)
            peak = min(r["peak_mib"] for r in runs)
            cpu = min(r["cpu"] for r in runs)
            print(f"| {name} | {best:.4f} | {best / base:.2f} | {peak:.1f} | {cpu:.4f} | {ratio(cpu, floor)} |")
        print(f"floor ({FLOORS[part]}): {floor:.4f} s CPU")


if __name__ == "__main__":
    main()
