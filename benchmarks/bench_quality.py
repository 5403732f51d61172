"""Label-free quality estimates: how well they rank cases by true Dice, and what they cost.

    python benchmarks/bench_quality.py                   # everything (about 10 minutes on 2 CPU cores)
    python benchmarks/bench_quality.py --part toy        # Spearman on the synthetic toy set (trains a small UNet)
    python benchmarks/bench_quality.py --part mni        # Spearman on MNI152 shifted copies (shipped example UNet)
    python benchmarks/bench_quality.py --part perf       # pairwise Dice and streaming vs the naive approach

Spearman part (``monai_unc.metrics.quality`` against the true per-case Dice; the CV is an uncertainty, so ``-CV`` is
correlated; mean predictive entropy / mutual information over the predicted foreground are voxel-map baselines):

- toy: a MONAI UNet (8-16-32, dropout 0.2) trained for ``--toy-iters`` steps on in-distribution toy cases
  (``make_toy_dataset``, 32^3, consensus label), evaluated with MC dropout (``--samples`` samples) on 40 new cases
  cycling the shifts none / intensity / shape / position; Dice of the foreground against the consensus label.
- mni: the shipped example UNet (trained on the left hemisphere, docs/data.md) with MC
  dropout on ``make_mni152_cohort`` cases: the template and perturbed copies (noise, bias field, contrast, blur,
  resolution; severity 1-5), cropped to a 32 x 64 x 48 block of the held-out right hemisphere (2 mm) to keep the
  CPU cost low; Dice of grey matter, white matter and the foreground (GM or WM).

Perf part: every contender runs in its own subprocess (single-threaded BLAS/OpenMP), best of ``--repeat`` runs;
peak = ``ru_maxrss`` after the work minus the RSS before it.
- mean pairwise Dice of 30 samples (Zeevi et al.'s MC dropout count), 3 classes, 96^3: ``pairwise_dice`` (one Gram
  matrix per class, float32 blocks) against numpy: argmax, then a loop over the 435 pairs with logical ops.
- CV of volumes + IoU of samples + Dice to a reference for 16 samples (3 classes, 128^3) produced one at a time:
  ``StreamingQuality`` (memory of one sample) against keeping all samples and calling the batch functions.
- the floors (``benchmarks/_floor.py``), timed like contenders, each contender printed as a ratio to its floor:
  one read of the 30 samples (pairwise Dice); generating the 16 samples and one read of each (streaming: the
  samples are generated inside the timed work of both contenders, as a network would produce them).
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
from _floor import floor_line, one_read

ESTIMATES = ("expected_dice", "pairwise_dice", "dice_to_mean", "sample_iou", "volume_cv")
MNI_ROI = (slice(49, 81), slice(32, 96), slice(16, 64))
N_PAIRWISE = 30


# ---------------------------------------------------------------------------------------------- Spearman


def _dice(pred: np.ndarray, ref: np.ndarray) -> float:
    den = pred.sum() + ref.sum()
    return 1.0 if den == 0 else float(2 * np.logical_and(pred, ref).sum() / den)


def _case_scores(out: dict, b: int) -> dict[str, float]:
    """Foreground quality estimates of case ``b`` (higher = better) plus voxel-map baselines."""
    from monai_unc.aggregation import aggregate
    from monai_unc.metrics.quality import quality_estimates

    q = quality_estimates({"pred": out["pred"][b : b + 1], "samples": out["samples"][:, b : b + 1]})
    scores = {k: float(v.foreground[0]) for k, v in q.items()}
    scores["volume_cv"] = -scores["volume_cv"]
    fg = out["pred"][b : b + 1].argmax(1) > 0
    for key in ("predictive_entropy", "mutual_information"):
        with np.errstate(all="ignore"):
            scores[key] = -float(aggregate(out[key][b : b + 1], "mean", mask=fg)[0]) if fg.any() else 0.0
    return scores


def _spearman_table(title: str, scores: list[dict], dice: dict[str, np.ndarray]) -> dict:
    from scipy.stats import spearmanr

    names = list(scores[0])
    print(f"\n== {title} ==")
    print("Spearman rho of each label-free score with the true per-case Dice (CV, PE, MI negated: higher = better)")
    print(f"{'score':22s}" + "".join(f"{k:>14s}" for k in dice))
    table = {}
    for n in names:
        v = np.array([s[n] for s in scores])
        rhos = [float(spearmanr(v, d).statistic) for d in dice.values()]
        table[n] = dict(zip(dice, rhos))
        print(f"{n:22s}" + "".join(f"{r:14.3f}" for r in rhos))
    for k, d in dice.items():
        print(f"true Dice ({k}): min {d.min():.3f}  median {np.median(d):.3f}  max {d.max():.3f}")
    return table


def spearman_toy(iters: int, samples: int, seed: int = 0) -> dict:
    import torch
    from monai.losses import DiceCELoss
    from monai.networks.nets import UNet

    from monai_unc.data import make_toy_dataset
    from monai_unc.inferers import MCDropoutInferer

    torch.manual_seed(seed)
    shape = (32, 32, 32)
    train = make_toy_dataset(64, shape=shape, seed=seed + 1)
    test = make_toy_dataset(40, shape=shape, shift=["none", "intensity", "shape", "position"], seed=seed + 2)
    net = UNet(3, 1, 2, channels=(8, 16, 32), strides=(2, 2), num_res_units=1, dropout=0.2)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    net.train()
    for _ in range(iters):
        idx = rng.choice(len(train), size=4, replace=False)
        x = torch.from_numpy(np.stack([train[i]["image"] for i in idx]))
        y = torch.from_numpy(np.stack([train[i]["label"][None] for i in idx]))
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
    net.eval()
    t_train = time.perf_counter() - t0
    inferer = MCDropoutInferer(num_samples=samples, keep_samples=True, seed=seed)
    scores, dice, shifts = [], [], []
    t0 = time.perf_counter()
    for start in range(0, len(test), 10):
        chunk = test[start : start + 10]
        out = inferer(torch.from_numpy(np.stack([c["image"] for c in chunk])), net)
        out = {k: v.numpy() for k, v in out.items()}
        for b, c in enumerate(chunk):
            scores.append(_case_scores(out, b))
            dice.append(_dice(out["pred"][b].argmax(0) > 0, c["label"] > 0))
            shifts.append(c["shift"])
    t_eval = time.perf_counter() - t0
    print(f"toy: trained {iters} steps in {t_train:.0f} s; {len(test)} cases x {samples} MC samples in {t_eval:.0f} s")
    dice_a = np.array(dice)
    for s in ("none", "intensity", "shape", "position"):
        sel = np.array(shifts) == s
        print(f"  shift {s:10s}: mean Dice {dice_a[sel].mean():.3f}")
    return _spearman_table(f"toy set: {len(test)} cases, 32^3, MC dropout x {samples}", scores, {"foreground": dice_a})


def spearman_mni(n_cases: int, samples: int, seed: int = 0) -> dict:
    import torch

    from monai_unc.data import load_example_model
    from monai_unc.data.perturbations import make_mni152_cohort
    from monai_unc.inferers import MCDropoutInferer

    cohort = make_mni152_cohort(n_cases, seed=seed, roi=MNI_ROI)
    net, _ = load_example_model()
    scores, gm, wm, fg = [], [], [], []
    t0 = time.perf_counter()
    for i, c in enumerate(cohort):
        out = MCDropoutInferer(num_samples=samples, keep_samples=True, seed=seed + i)(
            torch.from_numpy(c["image"][None]), net
        )
        out = {k: v.numpy() for k, v in out.items()}
        scores.append(_case_scores(out, 0))
        pred, lab = out["pred"][0].argmax(0), c["label"][0]
        gm.append(_dice(pred == 1, lab == 1))
        wm.append(_dice(pred == 2, lab == 2))
        fg.append(_dice(pred > 0, lab > 0))
        # per class: the mean of the GM and WM estimates against the mean of the two Dice values
        from monai_unc.metrics.quality import quality_estimates

        q = quality_estimates({"pred": out["pred"], "samples": out["samples"]})
        for k, v in q.items():
            scores[-1][k + " (GM+WM)/2"] = float(v.per_class[0].mean()) * (-1 if k == "volume_cv" else 1)
    t = time.perf_counter() - t0
    shifts = [f"{c['shift']}:{c['severity']:.1f}" for c in cohort]
    print(f"mni: {len(cohort)} cases x {samples} MC samples ({MNI_ROI} block) in {t:.0f} s: {', '.join(shifts)}")
    dice = {"GM": np.array(gm), "WM": np.array(wm), "foreground": np.array(fg), "(GM+WM)/2": (np.array(gm) + wm) / 2}
    return _spearman_table(
        f"MNI152 shifted copies: {len(cohort)} cases, right-hemisphere block, MC dropout x {samples}", scores, dice
    )


# ---------------------------------------------------------------------------------------------- perf


def _rss_kib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024


def _samples(s: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """``s`` smooth 3-class probability samples ``(S, 1, 3, *shape)`` float32 around two nested spheres."""
    rng = np.random.default_rng(seed)
    idx = np.indices(shape, sparse=True)
    d = np.sqrt(sum(((i - n / 2) ** 2).astype(np.float32) for i, n in zip(idx, shape)))
    out = np.empty((s, 1, 3, *shape), np.float32)
    for k in range(s):
        r1, r2 = np.float32(shape[0] * rng.uniform(0.15, 0.2)), np.float32(shape[0] * rng.uniform(0.3, 0.35))
        e = np.exp(np.stack([d - r2, np.minimum(r2 - d, d - r1), r1 - d]) / np.float32(2.0))
        out[k, 0] = e / e.sum(0)
    return out


def _worker(name: str, repeat: int) -> dict:
    import torch

    torch.set_num_threads(1)
    from monai_unc.metrics.quality import StreamingQuality, dice_to_mean, pairwise_dice, sample_iou, volume_cv

    if name.startswith("pairwise"):
        x = _samples(N_PAIRWISE, (96, 96, 96), 0)

        if name == "pairwise_floor":  # every estimate reads every sample: one read of the 30 probability maps

            def work():
                return [one_read(x)()]
        elif name == "pairwise_ours":

            def work():
                r = pairwise_dice(x, validate=False)
                return [*r.per_class[0].tolist(), float(r.foreground[0])]
        else:

            def work():
                seg = x.argmax(2)[:, 0]
                out = []
                for j in (1, 2, "fg"):
                    ms = [(s > 0) if j == "fg" else (s == j) for s in seg]
                    vals = [2 * np.logical_and(ms[a], ms[b]).sum() / (ms[a].sum() + ms[b].sum())
                            for a in range(N_PAIRWISE) for b in range(a + 1, N_PAIRWISE)]
                    out.append(float(np.mean(vals)))
                return out
    else:
        shape, n_s = (128, 128, 128), 16
        ref = _samples(1, shape, 99)[0].argmax(1)

        def sample(k):  # generated on demand, as a network would
            return _samples(1, shape, k)[0]

        if name == "stream_floor":  # the samples as the contenders get them (generated), each read once

            def work():
                return [sum(one_read(sample(k))() for k in range(n_s))]
        elif name == "stream_ours":

            def work():
                acc = StreamingQuality(reference=ref, validate=False)
                for k in range(n_s):
                    acc.update(sample(k))
                return [float(acc.volume_cv().foreground[0]), float(acc.sample_iou().foreground[0]),
                        float(acc.dice_to_reference().foreground[0])]
        else:

            def work():
                kept = np.stack([sample(k) for k in range(n_s)])
                return [float(volume_cv(kept, validate=False).foreground[0]),
                        float(sample_iou(kept, validate=False).foreground[0]),
                        float(dice_to_mean(kept, reference=ref, validate=False).foreground[0])]
    rss0 = _rss_kib()
    times, cpu, res = [], [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        res = work()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0, 0.0) / 1024
    return {"best_s": min(times), "cpu_s": min(cpu), "peak_mib": peak, "result": res}


def _spawn(name: str, repeat: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, __file__, "--worker", name, "--repeat", str(repeat)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def perf(repeat: int) -> None:
    print("\n== cost (single-threaded, subprocess per contender; peak = ru_maxrss after the work - RSS before) ==")
    rows = [
        ("pairwise_ours", "pairwise_dice (Gram, float32 blocks)"),
        ("pairwise_loop", "numpy argmax + loop over 435 pairs"),
        ("stream_ours", "StreamingQuality (one sample at a time)"),
        ("stream_kept", "keep 16 samples + batch functions"),
    ]
    res = {n: _spawn(n, repeat) for n in [*(n for n, _ in rows), "pairwise_floor", "stream_floor"]}
    print(f"{'contender':42s} {'values (GM, WM, fg) / (CV, IoU, Dice)':>44s} {'time s':>8s} {'peak MiB':>9s}")
    for n, label in rows:
        r = res[n]
        vals = ", ".join(f"{v:.6f}" for v in r["result"])
        print(f"{label:42s} {vals:>44s} {r['best_s']:8.2f} {r['peak_mib']:9.1f}")
    d1 = np.abs(np.subtract(res["pairwise_ours"]["result"], res["pairwise_loop"]["result"])).max()
    d2 = np.abs(np.subtract(res["stream_ours"]["result"], res["stream_kept"]["result"])).max()
    print(f"pairwise Dice, {N_PAIRWISE} samples, 96^3: max |diff| {d1:.1e}, speed-up "
          f"{res['pairwise_loop']['best_s'] / res['pairwise_ours']['best_s']:.1f}x")
    print(f"streaming, 16 samples, 128^3: max |diff| {d2:.1e}, memory "
          f"{res['stream_kept']['peak_mib'] / max(res['stream_ours']['peak_mib'], 1e-3):.1f}x lower, time ratio "
          f"{res['stream_kept']['best_s'] / res['stream_ours']['best_s']:.2f}")
    for n, floor in (("pairwise", "one read of the 30 samples"), ("stream", "generating the 16 samples + one read")):
        for m in ("ours", "loop" if n == "pairwise" else "kept"):
            print(floor_line(f"{n}_{m}, CPU", res[f"{n}_{m}"]["cpu_s"], res[f"{n}_floor"]["cpu_s"], floor))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["all", "toy", "mni", "perf"], default="all")
    ap.add_argument("--samples", type=int, default=8, help="MC dropout samples per case")
    ap.add_argument("--toy-iters", type=int, default=300)
    ap.add_argument("--mni-cases", type=int, default=21, help="template + perturbed copies")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.worker, args.repeat)))
        return
    import torch

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    print(f"torch {torch.__version__}, numpy {np.__version__}, {torch.get_num_threads()} threads")
    if args.part in ("all", "toy"):
        spearman_toy(args.toy_iters, args.samples)
    if args.part in ("all", "mni"):
        spearman_mni(args.mni_cases, args.samples)
    if args.part in ("all", "perf"):
        perf(args.repeat)


if __name__ == "__main__":
    main()
