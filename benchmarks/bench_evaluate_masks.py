"""What the masks with a guarantee cost ``monai-unc evaluate``: the per-case states and fit, and the case files.

    python benchmarks/bench_evaluate_masks.py            # 40 cases of 64^3, 3 classes
    python benchmarks/bench_evaluate_masks.py --small    # 12 cases of 32^3 (a quick run)

Workload: a toy cohort on disk (``monai_unc.data.cohorts.write_toy_cohort``: labels, segmentations, float32 softmax
probabilities and one uncertainty map per case, NIfTI), evaluated three ways in one run, each into a fresh folder
(no resume), spatial metrics off (``--spatial``: on, as ``evaluate`` runs by default):

- **plain**: ``run_evaluate`` without products (the baseline);
- **masks, no case files**: with ``ConformalMasks({"outer": 0.1, "inner": 0.1})`` whose ``write_case_files`` is
  switched off (per-case states, the fit and ``conformal_rule.json`` only);
- **masks**: the product as it ships: it also writes every case's masks to ``products/conformal/`` once the rules
  are fitted (a second read of each case's files on rank 0), which the report draws instead of computing them.

Printed: wall seconds of each (best of ``--repeat``), the ratios to **plain**, and the peak resident memory of the
process (``ru_maxrss``) after all runs. The cohort generation is not timed.
"""

from __future__ import annotations

import argparse
import platform
import resource
import shutil
import tempfile
import time
import warnings
from pathlib import Path

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.product import CohortProduct
from monai_unc.products import ConformalMasks


class _MasksWithoutCaseFiles(ConformalMasks):
    """The product with the case files switched off (the base class's no-op)."""

    write_case_files = CohortProduct.write_case_files


def _evaluate(data: dict, out: Path, products: list, spatial: bool) -> float:
    shutil.rmtree(out, ignore_errors=True)
    config = EvaluationConfig(spatial=spatial, products=products)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_evaluate(data["labels"], data["predictions"], out, config, resume=False)
    return time.perf_counter() - t0


def main() -> None:
    """Run the three evaluations and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="12 cases of 32^3")
    ap.add_argument("--cases", type=int, default=None)
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--spatial", action="store_true",
                    help="with the spatial metrics (BUC, BA-ECE, SPACE), as evaluate runs by default")
    args = ap.parse_args()
    n = args.cases or (12 if args.small else 40)
    size = args.size or (32 if args.small else 64)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = write_toy_cohort(root / "data", n_cases=n, shape=(size, size, size), seed=0)
        targets = {"outer": 0.1, "inner": 0.1}
        runs = {"plain": [], "masks, no case files": [], "masks": []}
        for _ in range(args.repeat):
            runs["plain"].append(_evaluate(data, root / "plain", [], args.spatial))
            runs["masks, no case files"].append(_evaluate(data, root / "states", [_MasksWithoutCaseFiles(targets)],
                                                          args.spatial))
            runs["masks"].append(_evaluate(data, root / "masks", [ConformalMasks(targets)], args.spatial))
        written = sorted((root / "masks" / "products" / "conformal").glob("*.nii.gz"))
        assert len(written) == 2 * n, f"expected {2 * n} mask files, got {len(written)}"
    best = {k: min(v) for k, v in runs.items()}
    print(f"{n} cases of {size}^3, 3 classes, spatial metrics {'on' if args.spatial else 'off'}; "
          f"{platform.processor() or platform.machine()}, best of {args.repeat}")
    print(f"{'evaluate':<24}{'seconds':>9}{'vs plain':>10}")
    for k, v in best.items():
        print(f"{k:<24}{v:9.2f}{v / best['plain']:9.2f}x")
    extra = best["masks"] - best["masks, no case files"]
    print(f"the case files add {extra:.2f} s ({extra / n * 1000:.0f} ms a case), "
          f"{extra / best['plain']:.0%} of a plain evaluation")
    print(f"peak resident memory of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
