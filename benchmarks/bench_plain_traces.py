"""MC dropout on a network that shares little: the trace of each call against remembered verdicts and full passes.

    python benchmarks/bench_plain_traces.py [--sizes 16 32] [--samples 30] [--repeats 7] [--threads 1]

The example UNet (MONAI UNet 16-32-64-128 with dropout after every stage, 3 classes) on a whole ``S^3`` volume:
``MCDropoutInferer(num_samples=N)`` with its defaults (shared passes on), where the trace finds 2.8 % of the work to
share and the automatic sample batch is one sample, so every sample after the trace is a full pass. Contenders, each
as the overhead over ``N`` bare forward passes with dropout on (the floor) measured in the same run, CPU time of this
process (best of ``--repeats`` rounds after a warm-up, each round running every contender once):

- ``remembered``: the defaults with the network's plain verdict remembered (``PLAIN_TRACES``: every call after the
  first in a process);
- ``traced``: the defaults with the verdicts forgotten before each call (the first call: a trace, then full passes);
- ``full passes``: ``share_passes=False``;

and, as the mechanisms, one trace (``SharedPasses.trace``) over one forward pass, and the module walks a remembered
call makes (``enable_mc_dropout``, ``hidden_submodule``, the verdict's key) over one forward pass.

The three give the same maps for one seed (checked). On a GPU the trace's Python time is what a small network
exposes (``make gpu-check``'s ``mc_unet`` part times the same contenders on the card).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monai.inferers import SimpleInferer  # noqa: E402

from monai_unc.data.model import build_example_network  # noqa: E402
from monai_unc.inferers import MCDropoutInferer, enable_mc_dropout  # noqa: E402
from monai_unc.networks import shared  # noqa: E402


def _cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def measure(size: int, samples: int, repeats: int) -> dict:
    """CPU seconds of the floor and the three contenders at ``size^3``, and whether their maps are equal."""
    torch.manual_seed(0)
    net = build_example_network().eval()
    x = torch.randn(1, 1, size, size, size, generator=torch.Generator().manual_seed(0))

    def bare():
        with torch.no_grad(), enable_mc_dropout(net):
            for _ in range(samples):
                SimpleInferer()(x, net)

    def run(share: bool = True):
        return MCDropoutInferer(num_samples=samples, seed=0, share_passes=share)(x, net)

    def traced():
        shared.PLAIN_TRACES.clear()
        return run()

    def one_pass():
        with torch.no_grad(), enable_mc_dropout(net):
            net(x)

    def trace():
        with torch.no_grad(), enable_mc_dropout(net):
            shared.SharedPasses(net).trace(net, x)

    def walks():  # the per-call module walks of the remembered path: dropout switched on and off, the window's
        # check that the trace can follow every submodule, the remembered verdict's key
        with enable_mc_dropout(net):
            shared.hidden_submodule(net)
            shared.PLAIN_TRACES._key(net, x)

    contenders = {"bare": bare, "remembered": run, "traced": traced, "full passes": lambda: run(False),
                  "one pass": one_pass, "trace": trace, "walks": walks}
    for fn in contenders.values():  # warm-up
        fn()
    times = {name: float("inf") for name in contenders}
    for _ in range(repeats):  # interleaved rounds: load that comes and goes reaches every contender alike
        for name, fn in contenders.items():
            times[name] = min(times[name], _cpu(fn))
    shared.PLAIN_TRACES.clear()
    maps = [traced(), run(), run(False)]
    equal = all(torch.equal(maps[0][k], m[k]) for m in maps[1:] for k in ("pred", "mutual_information"))
    return {"size": size, "seconds": times, "equal_maps": equal,
            "trace_over_one_pass": times["trace"] / times["one pass"],
            "walks_over_one_pass": times["walks"] / times["one pass"],
            "overhead": {k: times[k] / times["bare"] - 1 for k in ("remembered", "traced", "full passes")}}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if min(args.sizes) < 16 or args.samples < 2 or args.repeats < 1:
        ap.error("--sizes must be >= 16 (the UNet halves the volume three times and normalises each stage per "
                 "instance), --samples >= 2, --repeats >= 1")
    torch.set_num_threads(args.threads)
    rows = [measure(s, args.samples, args.repeats) for s in args.sizes]
    print(f"example UNet, {args.samples} samples, whole volume, CPU time, {args.threads} thread(s); overhead over "
          f"{args.samples} bare passes")
    print(f"{'size':>6} {'bare s':>8} {'remembered':>11} {'traced':>8} {'full passes':>12}  {'trace / pass':>12}  "
          f"{'walks ms':>8}  {'walks / pass':>12}  equal maps")
    for r in rows:
        o = r["overhead"]
        print(f"{r['size']:>5}^3 {r['seconds']['bare']:8.3f} {100 * o['remembered']:10.1f}% {100 * o['traced']:7.1f}% "
              f"{100 * o['full passes']:11.1f}%  {r['trace_over_one_pass']:11.2f}x  "
              f"{1e3 * r['seconds']['walks']:8.3f}  {r['walks_over_one_pass']:11.3f}x  {r['equal_maps']}")
    return rows


if __name__ == "__main__":
    main()
