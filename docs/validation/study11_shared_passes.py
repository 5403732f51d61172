"""Validation study 11: shared passes draw the same distribution of maps as full passes, at a fraction of the cost.

Shared passes (``share_passes=True``, the default of the sampling inferers; docs/inferers.md) compute once per
window what the MC-dropout samples have in common and replay only the part downstream of the dropout. With the
same masks the maps equal those of full passes (``tests/inferers/test_shared.py`` injects masks for six networks);
with seeds only, the two paths draw their masks in another order, so their maps can only agree *in distribution*.
This study tests that on a small model and measures what it buys:

- model: MONAI ``BasicUNet`` (2D, features 16-16-32-64-128-16, 3 classes, random weights, seed 0: the test concerns
  the sampler, not the model) with post-hoc channel dropout ``add_dropout(p=0.1, after=placement)`` for the three
  placements ``auto`` (every stage), ``decoder``, ``last`` (the stage next to the output);
- input: one 96 x 96 image of ``make_toy_case`` (a blurred disc on noise), ``SlidingWindowInferer(48, overlap=0.25)``
  (9 windows);
- for each placement and path (shared, full) ``R`` seeded runs of ``MCDropoutInferer(num_samples=N)``, the shared
  path with all ``N - 1`` replayed samples in one batch (``sample_batch_size=N - 1``: with batches of one sample the
  masks are drawn in the order of full passes and the maps are identical, which would make the test empty); per run:
  the mean mutual information and predictive entropy over the image, the mean probability of class 1 at a voxel
  where windows overlap, and (pooled over runs) the ``N`` per-sample probabilities at that voxel;
- test: two-sample Kolmogorov-Smirnov per statistic, shared against full, Bonferroni over all statistics and
  placements; a **power control**: the same test between full passes at p = 0.1 and at p = 0.15 (a real but
  modest change of the sampler), which it must detect;
- cost: process CPU time of one run of each path against one stock MONAI pass (``softmax(SlidingWindowInferer(x,
  net))``, dropout off), best of the runs; one thread.

Run (from the repository root)::

    OMP_NUM_THREADS=1 python docs/validation/study11_shared_passes.py          # R = 60, N = 8: a few CPU minutes
    python docs/validation/study11_shared_passes.py --tiny --output /tmp/s11   # smoke test, seconds
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import _toy as T
import numpy as np
import torch
from monai.inferers import SlidingWindowInferer
from monai.networks.nets import BasicUNet
from scipy import stats

from monai_unc.data import make_toy_case
from monai_unc.inferers import MCDropoutInferer, add_dropout

PLACEMENTS = ("auto", "decoder", "last")
STATISTICS = ("mean MI", "mean PE", "p(class 1) at a voxel, run mean", "p(class 1) at a voxel, per sample")
#: the voxel of the per-voxel statistics: in the overlap of four windows
VOXEL = (42, 42)
SIZE, ROI = 96, 48


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output", type=Path, default=T.DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the network, the image and the runs (default 0)")
    p.add_argument("--runs", type=int, default=60, help="seeded runs per path and placement (default 60)")
    p.add_argument("--samples", type=int, default=8, help="MC-dropout samples per run (default 8)")
    p.add_argument("--tiny", action="store_true", help="2 runs of 3 samples, 1 timed stock pass: smoke test in seconds")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--render-only", action="store_true", help="re-write the .md from the JSON in --output")
    args = p.parse_args(argv)
    # --tiny checks the pipeline, not the statistics: 2 runs (a spread of each statistic) of 3 samples (the
    # fewest with a batch of replayed samples, N - 1 = 2), the stock pass timed once instead of best of 5
    args.stock_repeats = 5
    if args.tiny:
        args.runs, args.samples, args.stock_repeats = 2, 3, 1
    return args


def _network(seed: int, placement: str, p: float) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = BasicUNet(2, 1, 3, features=(16, 16, 32, 64, 128, 16)).eval()
    add_dropout(net, p=p, after=placement)
    return net


def _runs(net: torch.nn.Module, x: torch.Tensor, share: bool, args: argparse.Namespace) -> dict[str, Any]:
    """``args.runs`` seeded runs of one path: the statistics of each run and its best CPU time."""
    sw = SlidingWindowInferer((ROI, ROI), overlap=0.25)
    batch = {"share_passes": True, "sample_batch_size": max(args.samples - 1, 1)} if share else {"share_passes": False}
    out: dict[str, Any] = {s: [] for s in STATISTICS}
    best = float("inf")
    for r in range(args.runs):
        inferer = MCDropoutInferer(num_samples=args.samples, base_inferer=sw, seed=args.seed * 100_000 + r,
                                   keep_samples=True, **batch)
        c0 = time.process_time()
        maps = inferer(x, net)
        best = min(best, time.process_time() - c0)
        samples = maps["samples"][:, 0, 1][(slice(None), *VOXEL)]  # (N,): class 1 at the voxel
        out[STATISTICS[0]].append(float(maps["mutual_information"].mean()))
        out[STATISTICS[1]].append(float(maps["predictive_entropy"].mean()))
        out[STATISTICS[2]].append(float(maps["pred"][(0, 1, *VOXEL)]))
        out[STATISTICS[3]] += [float(v) for v in samples]
    out["cpu_s"] = best
    return out


def _compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    rows = {}
    for s in STATISTICS:
        test = stats.ks_2samp(a[s], b[s])
        rows[s] = {"ks": float(test.statistic), "p": float(test.pvalue), "mean_a": float(np.mean(a[s])),
                   "mean_b": float(np.mean(b[s])), "sd_a": float(np.std(a[s])), "sd_b": float(np.std(b[s])),
                   "n_a": len(a[s]), "n_b": len(b[s])}
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    T.set_threads(args.threads)
    t0 = time.perf_counter()
    case = make_toy_case((SIZE, SIZE), rng=args.seed)
    x = torch.as_tensor(np.asarray(case["image"], dtype=np.float32)).reshape(1, 1, SIZE, SIZE)
    result: dict[str, Any] = {"runs": args.runs, "samples": args.samples, "seed": args.seed, "threads": args.threads,
                              "placements": {}}
    sw = SlidingWindowInferer((ROI, ROI), overlap=0.25)
    for placement in PLACEMENTS:
        net = _network(args.seed, placement, 0.1)
        with torch.no_grad():
            torch.softmax(sw(x, net), 1)  # warm-up
            stock = float("inf")
            for _ in range(args.stock_repeats):
                c0 = time.process_time()
                torch.softmax(sw(x, net), 1)
                stock = min(stock, time.process_time() - c0)
        full = _runs(net, x, False, args)
        shared = _runs(net, x, True, args)
        result["placements"][placement] = {
            "tests": _compare(shared, full), "stock_cpu_s": stock, "shared_cpu_s": shared["cpu_s"],
            "full_cpu_s": full["cpu_s"], "shared_ratio": shared["cpu_s"] / stock, "full_ratio": full["cpu_s"] / stock,
        }
        if placement == "auto":  # the power control: full passes with another dropout rate
            other = _runs(_network(args.seed, placement, 0.15), x, False, args)
            result["control"] = _compare(other, full)
    n_tests = len(STATISTICS) * len(PLACEMENTS)
    result["bonferroni_alpha"] = 0.05 / n_tests
    result["runtime_s"] = time.perf_counter() - t0
    write_outputs(result, Path(args.output))
    print(f"wrote {Path(args.output) / 'study11.md'} and study11.json; total {result['runtime_s']:.0f} s")
    return result


def write_outputs(result: dict[str, Any], out: Path, json_too: bool = True) -> None:
    """``study11.json`` (unless ``json_too`` is false) and ``study11.md`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if json_too:
        T.atomic_write_json(out / "study11.json", result)
    T.atomic_write_text(out / "study11.md", render_markdown(result))


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 1e-3 else f"{p:.1e}"


def render_markdown(res: dict[str, Any]) -> str:
    """The results fragment of the page (tables and one verdict sentence per table)."""
    alpha = res["bonferroni_alpha"]
    lines = [f"## Study 11: shared passes against full passes ({res['runs']} seeded runs of {res['samples']} "
             f"samples per path and placement)", "",
             "### Same distribution? Two-sample Kolmogorov-Smirnov, shared against full", "",
             "| dropout | statistic | shared: mean (sd) | full: mean (sd) | KS | p |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    rejected = 0
    for placement, r in res["placements"].items():
        for s, t in r["tests"].items():
            rejected += t["p"] < alpha
            lines.append(f"| {placement} | {s} (n = {t['n_a']}) | {t['mean_a']:.4f} ({t['sd_a']:.4f}) | "
                         f"{t['mean_b']:.4f} ({t['sd_b']:.4f}) | {t['ks']:.3f} | {_p(t['p'])} |")
    n = sum(len(r["tests"]) for r in res["placements"].values())
    lines += ["", f"{rejected} of {n} tests reject equal distributions at the Bonferroni level {alpha:.4f} "
              f"(0.05 / {n}).", "",
              "### Power control: full passes at dropout p = 0.15 against p = 0.1 (every stage)", "",
              "| statistic | p = 0.15: mean (sd) | p = 0.1: mean (sd) | KS | p |",
              "| --- | ---: | ---: | ---: | ---: |"]
    detected = 0
    for s, t in res["control"].items():
        detected += t["p"] < alpha
        lines.append(f"| {s} | {t['mean_a']:.4f} ({t['sd_a']:.4f}) | {t['mean_b']:.4f} ({t['sd_b']:.4f}) | "
                     f"{t['ks']:.3f} | {_p(t['p'])} |")
    lines += ["", f"The same test detects the change of rate in {detected} of {len(res['control'])} statistics.", "",
              f"### Cost: process CPU time of one run of {res['samples']} samples over one stock MONAI pass", "",
              "| dropout | shared | full | stock pass (s) |", "| --- | ---: | ---: | ---: |"]
    for placement, r in res["placements"].items():
        lines.append(f"| {placement} | {r['shared_ratio']:.2f}x | {r['full_ratio']:.2f}x | {r['stock_cpu_s']:.4f} |")
    lines += ["", f"Best of {res['runs']} runs each, {res['threads']} thread(s); total runtime "
              f"{res['runtime_s']:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.render_only:
        result = T.load_json(Path(args.output) / "study11.json")
        write_outputs(result, Path(args.output), json_too=False)
        return result
    return run(args)


if __name__ == "__main__":
    main()
