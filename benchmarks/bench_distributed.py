"""Distributed evaluation benchmark: ``monai-unc evaluate`` on 2 processes (torchrun, gloo) against 1 process.

    python benchmarks/bench_distributed.py                 # 20 cases of 128^3, 3 rounds, prints a table
    python benchmarks/bench_distributed.py --quick         # 6 cases of 48^3, 1 round (smoke test)

The cohort is :func:`monai_unc.data.cohorts.write_toy_cohort` (synthetic spheres/cubes with an ambiguous border,
probabilities, segmentation and predictive entropy per case, anisotropic spacing 1.5 x 1.0 x 2.0 mm), written once
to a temporary folder. Every run evaluates it from scratch into a fresh output folder (all metrics, spatial ones
included) with the CLI's own code path:

- ``1 process``: ``python bench_distributed.py --worker`` (no torchrun), ``OMP_NUM_THREADS=1``;
- ``1 process, 2 threads``: the same with ``OMP_NUM_THREADS=2`` and ``torch.set_num_threads(2)`` (the other way to
  use the second core);
- ``2 processes``: ``python -m torch.distributed.run --standalone --nproc_per_node 2 bench_distributed.py
  --worker``, ``OMP_NUM_THREADS=1`` per process (gloo on loopback).

Reported per contender, median over ``--rounds`` interleaved rounds: the wall clock of the whole command (process
start, imports, process-group rendezvous, evaluation, writing) and of the evaluation alone (from a barrier after
the imports to the end of ``cli.main``, the slowest rank), and the peak resident memory (``VmHWM``) of each
process next to its resident memory after the imports (torch + MONAI account for most of it). The 2-process
outputs are checked against the 1-process ones (``metrics.csv`` and ``summary.json`` byte for byte). The floor
(``benchmarks/_floor.py``) of the 2-process evaluation is perfect scaling, half the 1-process evaluation of the
same run; the script prints the ratio to it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _floor import floor_line


def _worker(args: argparse.Namespace) -> None:
    import torch

    from monai_unc import cli
    from monai_unc.engine import barrier, get_dist_context

    torch.set_num_threads(args.threads)
    ctx = get_dist_context()  # torchrun: gloo from RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
    barrier(ctx)
    with open("/proc/self/statm") as f:
        rss_before_mib = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    t0 = time.perf_counter()
    rc = cli.main(["evaluate", "-l", args.labels, "-p", args.predictions, "-o", args.output, "--shifts", args.shifts,
                   "-q"])
    seconds = time.perf_counter() - t0
    peak_mib = _vm_hwm_mib()
    Path(args.output, f".bench_rank{ctx.rank}.json").write_text(json.dumps(
        {"rank": ctx.rank, "rc": rc, "evaluate_s": seconds, "peak_mib": peak_mib, "before_mib": rss_before_mib}))


def _vm_hwm_mib() -> float:
    """Peak resident memory of this process's address space (``VmHWM``). Not ``ru_maxrss``: Linux carries the
    parent's peak over ``fork`` + ``exec`` into it, so a child of a big parent would report the parent's peak."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _run(kind: str, cohort: dict[str, str], out: Path) -> dict:
    threads = 2 if kind == "1 process, 2 threads" else 1
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(v, None)
    script = [str(Path(__file__).resolve()), "--worker", "--threads", str(threads), "--labels", cohort["labels"],
              "--predictions", cohort["predictions"], "--shifts", cohort["shifts"], "--output", str(out)]
    if kind == "2 processes":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *script]
    else:
        cmd = [sys.executable, *script]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob(".bench_rank*.json"))]
    return {"total_s": total, "evaluate_s": max(r["evaluate_s"] for r in ranks),
            "peak_mib": [round(r["peak_mib"], 1) for r in sorted(ranks, key=lambda r: r["rank"])],
            "before_mib": [round(r["before_mib"], 1) for r in sorted(ranks, key=lambda r: r["rank"])]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=20)
    p.add_argument("--size", type=int, default=128, help="cubic volume size in voxels (default 128)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="6 cases of 48^3, 1 round")
    p.add_argument("--no-threads-row", action="store_true", help="skip the 1 process / 2 threads contender")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    for k in ("labels", "predictions", "shifts", "output"):
        p.add_argument(f"--{k}", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        _worker(args)
        return
    if args.quick:
        args.cases, args.size, args.rounds = 6, 48, 1
    from monai_unc.data.cohorts import write_toy_cohort

    kinds = ["1 process", "2 processes"] + ([] if args.no_threads_row else ["1 process, 2 threads"])
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        paths = write_toy_cohort(Path(tmp) / "cohort", n_cases=args.cases, shape=(args.size,) * 3)
        cohort = {k: str(v) for k, v in paths.items()}
        print(f"cohort: {args.cases} cases of {args.size}^3 written in {time.perf_counter() - t0:.1f} s; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        results: dict[str, list[dict]] = {k: [] for k in kinds}
        for r in range(args.rounds):
            for kind in kinds:
                out = Path(tmp) / f"eval_{kind.replace(' ', '_').replace(',', '')}_{r}"
                res = _run(kind, cohort, out)
                results[kind].append(res)
                print(f"round {r + 1}: {kind:22s} total {res['total_s']:6.1f} s, evaluate {res['evaluate_s']:6.1f} s,"
                      f" peak RSS per process {res['peak_mib']} MiB (after imports {res['before_mib']})", flush=True)
        one = Path(tmp) / "eval_1_process_0"
        two = Path(tmp) / "eval_2_processes_0"
        same = all((one / f).read_bytes() == (two / f).read_bytes() for f in ("metrics.csv", "summary.json"))
        print(f"\n2-process metrics.csv and summary.json identical to 1 process: {same}")
        base = {k: statistics.median(x[k] for x in results["1 process"]) for k in ("total_s", "evaluate_s")}
        print(f"\n{args.cases} cases of {args.size}^3, median of {args.rounds} round(s), load average "
              f"{os.getloadavg()[0]:.1f}\n")
        print("| contender | total wall clock (s) | evaluation (s) | ratio 1 proc / this (total) | "
              "ratio (evaluation) | peak RSS per process (MiB) | RSS after imports (MiB) |")
        print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
        for kind in kinds:
            tot = statistics.median(x["total_s"] for x in results[kind])
            ev = statistics.median(x["evaluate_s"] for x in results[kind])
            peaks = [max(x["peak_mib"][i] for x in results[kind]) for i in range(len(results[kind][0]["peak_mib"]))]
            before = [max(x["before_mib"][i] for x in results[kind]) for i in range(len(peaks))]
            print(f"| {kind} | {tot:.1f} | {ev:.1f} | {base['total_s'] / tot:.2f}x | {base['evaluate_s'] / ev:.2f}x | "
                  f"{' / '.join(f'{m:.0f}' for m in peaks)} | {' / '.join(f'{m:.0f}' for m in before)} |")
        # the floor of a 2-process run: the 1-process evaluation divided by 2 (perfect scaling); the cases are
        # independent, so nothing but the imbalance of the shards and the collectives keeps it from being met
        two_ev = statistics.median(x["evaluate_s"] for x in results["2 processes"])
        print(floor_line("2 processes, evaluation", two_ev, base["evaluate_s"] / 2,
                         "perfect scaling (1-process evaluation / 2)"))
        if not same:
            sys.exit("the 2-process results differ from the 1-process results")


if __name__ == "__main__":
    main()
