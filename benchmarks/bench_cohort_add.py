"""What ``evaluate`` spends per case adding it to the cohort state, against the number of cases.

``CohortState.add`` of N cases (a row and a per-case confidence histogram of a 2-class 6^3 case each, made before the
clock starts), CPU time; the per-case cost must stay flat (a scan of every earlier case per added case made it grow
with N: 0.085 ms a case at 1 000 cases, 0.59 ms at 8 000). The fitted exponent of the total is about 1 when linear.

    python benchmarks/bench_cohort_add.py [--cases 1000 2000 4000 8000]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from monai_unc.evaluation import CaseResult  # noqa: E402
from monai_unc.evaluation.cohort import CohortState  # noqa: E402
from monai_unc.metrics.calibration import ConfidenceHistogram  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    p = torch.from_numpy(rng.dirichlet([1, 1], size=(6, 6, 6)).astype(np.float32)).permute(3, 0, 1, 2)[None]
    p = p.contiguous()
    y = torch.from_numpy(rng.integers(0, 2, size=(1, 1, 6, 6, 6)))
    print("| cases | add, all cases (s CPU) | per case (ms) |")
    print("| ---: | ---: | ---: |")
    totals = {}
    for n in args.cases:
        hists = []
        for i in range(n):
            h = ConfidenceHistogram(2, per_case=True)
            h.update(p, y, case_ids=[f"c{i:06d}"])
            hists.append(h)
        state = CohortState(2, hists[0].n_fine_bins)
        t = time.process_time()
        for i, h in enumerate(hists):
            state.add(CaseResult({"case": f"c{i:06d}", "dice": 0.5}, h))
        totals[n] = time.process_time() - t
        print(f"| {n} | {totals[n]:.3f} | {totals[n] / n * 1e3:.3f} |", flush=True)
    if len(totals) > 1:
        xs, ys = np.log(list(totals)), np.log([max(v, 1e-9) for v in totals.values()])
        print(f"fitted exponent of the total: {np.polyfit(xs, ys, 1)[0]:.2f} (1: linear, 2: quadratic)")
        lo, hi = min(totals), max(totals)
        print(f"per-case cost at {hi} cases / at {lo}: {totals[hi] / hi / (totals[lo] / lo):.2f}x"
              f" ({math.log2(hi / lo):.0f} doublings)")


if __name__ == "__main__":
    main()
