"""The rows of the calibration memory benchmarks (``bench_calibrate_memory.py``, ``bench_nnunet_calibrate_memory.py``).

Each row runs the benchmark script again as a subprocess (``--child N``), which prints one JSON line with its peak
RSS; this module parses the arguments and prints the table. The benchmarks are run as scripts, so it is imported as
``_memory_rows`` (the script's folder is on ``sys.path``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable


def memory_rows(script: str, description: str, child: Callable[[int, int, int, int], None], size: int,
                max_steps: int, value_bytes: int, value_type: str) -> None:
    """Parse the command line; in a child, run one row; else run every row in its own process and print the table.

    Args:
        script: the benchmark's file (``__file__``), run again for each row.
        description: the command's one-line description.
        child: runs one row: ``child(cases, classes, size, max_steps)`` prints its JSON line.
        size: the default edge of a case in voxels.
        max_steps: the default number of optimiser steps.
        value_bytes: bytes per stored logit (for the heading).
        value_type: the stored logits' type (for the heading).
    """
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--cases", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--classes", type=int, default=32)
    ap.add_argument("--size", type=int, default=size)
    ap.add_argument("--max-steps", type=int, default=max_steps)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child, args.classes, args.size, args.max_steps)
        return
    logits_mib = args.size**3 * args.classes * value_bytes / 2**20
    print(f"{args.classes} classes, {args.size}^3 voxels a case ({logits_mib:.1f} MiB of {value_type} logits)")
    print("| cases | peak RSS (MiB) | RSS before the call (MiB) | temperature |")
    print("|---|---|---|---|")
    for n in args.cases:
        out = subprocess.run([sys.executable, script, "--child", str(n), "--classes", str(args.classes), "--size",
                              str(args.size), "--max-steps", str(args.max_steps)], capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-1]
        row = json.loads(out)
        print(f"| {n} | {row['peak_rss_mib']} | {row['rss_before_mib']} | {row['temperature'][0]:.6f} |")
