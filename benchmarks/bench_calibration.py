"""Calibration benchmark: exact, fast, constant-memory ECE family and streamed temperature scaling, in one run.

    python benchmarks/bench_calibration.py            # 256x256x128 volume, temperature on 10^8 voxels
    python benchmarks/bench_calibration.py --quick    # 64x64x32 volume, 10^6 voxels (smoke test)

Part 1, one 256x256x128 3-class volume (float32 probabilities, int64 labels, as a network writes them):

- ``monai_unc``: ``ConfidenceHistogram.update`` once, then ECE, classwise ECE, all-label ECE, ACE, MCE, NLL and
  Brier from it (``uncertainty=False``); and the same plus UCE (normalised-entropy row);
- netcal ``ECE(bins=15).measure`` (top label, exact, numpy);
- torchmetrics ``MulticlassCalibrationError(n_bins=15, norm="l1")`` (top label);
- MONAI ``CalibrationErrorMetric(num_bins=15)`` (one-vs-rest per class, averaged: the classwise ECE).

Every value is compared with the exact value computed here in float64 numpy (bins ``floor(v * 15)``, the last one
closed). The floor (``benchmarks/_floor.py``), timed as a contender of its own: one read of the probabilities
(a float32 sum over the same tensor), the memory-bound least any calibration metric must do; the script prints our
time as a ratio to it. "State for 10 volumes" is the memory a metric object holds after ten updates (our
``CalibrationMetric``: pooled histogram plus per-case values; torchmetrics: its list states; MONAI: its buffers).

Part 2, temperature scaling on 10^8 voxels with a planted temperature (labels drawn from ``softmax(z)``, logits
written as ``2.5 z`` in float16 on disk, 3 classes):

- ``monai_unc.temperature.TemperatureScaler`` (Kock et al. protocol: RMSprop, lr 0.05 from t = 2, gradient
  accumulation over chunks of 2^22 voxels, logits streamed from the files batch by batch);
- the usual recipe (Guo et al. 2017; torch-uncertainty's scaler): all logits in memory as float32, labels int64,
  ``torch.optim.LBFGS`` with a strong-Wolfe line search on ``cross_entropy(z / t, y)`` from t = 1.5.

Method: every contender runs in its own subprocess with ``torch.set_num_threads(--threads)`` (default 1: the
machine is shared and OpenMP spin-waits make 2-thread runs several times slower under load); time is the best of
``--repeat`` runs over ``--rounds`` interleaved rounds; peak memory is the peak RSS during the work minus the RSS
just before it: the kernel's peak counter (VmHWM) is reset through ``/proc/self/clear_refs`` after the imports
and the inputs are loaded (``ru_maxrss`` cannot be reset, and import-time peaks would hide the work's peak). It
is the memory the work needs on top of its inputs (for the temperature contenders on top of nothing, since
reading the logits is part of the work).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _floor import floor_line, one_read, peak_mib, reset_peak

N_BINS = 15
PLANTED_T = 2.5
TS_CHUNK = 1 << 22


# ------------------------------------------------------------------------------------------------ data (parent)
def phantom(shape: tuple[int, int, int]):
    """A 3-class phantom (background, organ, lesion inside it) and noisy, overconfident softmax outputs.

    Returns ``(1, 3, *shape)`` float32 probabilities and ``(1, *shape)`` int64 labels (also the volume of
    ``bench_histogram_kernel.py``).
    """
    import torch

    g = torch.Generator().manual_seed(0)
    idx = [torch.arange(s, dtype=torch.float32) / s for s in shape]
    zz, yy, xx = torch.meshgrid(*idx, indexing="ij")
    organ = ((zz - 0.5) / 0.35) ** 2 + ((yy - 0.5) / 0.3) ** 2 + ((xx - 0.45) / 0.4) ** 2 <= 1
    lesion = ((zz - 0.55) / 0.12) ** 2 + ((yy - 0.45) / 0.1) ** 2 + ((xx - 0.5) / 0.15) ** 2 <= 1
    labels = organ.long() + lesion.long()
    onehot = torch.nn.functional.one_hot(labels, 3).movedim(-1, 0).float()
    z = 2.0 * onehot + 1.2 * torch.randn(3, *shape, generator=g)
    probs = torch.softmax(2.5 * z, 0)[None]  # overconfident (a Dice-trained network needs t > 1, Kock et al.)
    return probs, labels[None]


def make_volume(shape: tuple[int, int, int], out: Path) -> None:
    """Write the :func:`phantom` of ``shape`` as ``probs.npy`` and ``labels.npy`` into ``out``."""
    probs, labels = phantom(shape)
    np.save(out / "probs.npy", probs.numpy())
    np.save(out / "labels.npy", labels.numpy().astype(np.int64))


def exact_reference(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The float64 values every contender is compared with."""
    n_cls = probs.shape[1]
    p = probs[0].reshape(n_cls, -1).astype(np.float64)
    y = labels.reshape(-1)
    n = y.size

    def gaps(values: np.ndarray, hits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b = np.minimum(np.floor(values * N_BINS).astype(np.int64), N_BINS - 1)
        cnt = np.bincount(b, minlength=N_BINS).astype(np.float64)
        diff = np.bincount(b, weights=values, minlength=N_BINS) - np.bincount(b, weights=hits, minlength=N_BINS)
        return np.abs(diff), cnt

    conf, pred = p.max(0), p.argmax(0)
    g, cnt = gaps(conf, (pred == y).astype(np.float64))
    ok = cnt > 0
    per_class = [gaps(p[c], (y == c).astype(np.float64))[0].sum() / n for c in range(n_cls)]
    g_all, _ = gaps(p.ravel(), (np.arange(n_cls)[:, None] == y[None, :]).ravel().astype(np.float64))
    p_true = p[y, np.arange(n)]
    h = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(0) / np.log(n_cls)
    g_u, _ = gaps(np.clip(h, 0, 1), (pred != y).astype(np.float64))
    return {
        "ece": float(g.sum() / n),
        "classwise_ece": float(np.mean(per_class)),
        "all_label_ece": float(g_all.sum() / (n * n_cls)),
        "ace": float(np.mean(g[ok] / cnt[ok])),
        "mce": float(np.max(g[ok] / cnt[ok])),
        "uce": float(g_u.sum() / n),
        "nll": float(-np.mean(np.log(np.maximum(p_true, 1e-15)))),
        "brier": float((np.sum(p * p) - 2 * p_true.sum() + n) / n),
    }


def make_temperature_data(n_vox: int, out: Path) -> int:
    """Planted data in chunks of ``TS_CHUNK`` voxels: ``(C, n)`` float16 logits and uint8 labels per chunk."""
    import torch

    g = torch.Generator().manual_seed(1)
    n_chunks = 0
    with open(out / "logits.f16", "wb") as fz, open(out / "labels.u8", "wb") as fy:
        for s in range(0, n_vox, TS_CHUNK):
            n = min(TS_CHUNK, n_vox - s)
            z = torch.randn(3, n, generator=g) * 2.0 + torch.tensor([[1.0], [0.0], [-1.0]])
            gumbel = -torch.log(-torch.log(torch.rand(3, n, generator=g).clamp_min(1e-12)))
            y = (z + gumbel).argmax(0).to(torch.uint8)  # y ~ softmax(z)
            fz.write((PLANTED_T * z).half().numpy().tobytes())
            fy.write(y.numpy().tobytes())
            n_chunks += 1
    return n_chunks


# ------------------------------------------------------------------------------------------------ workers
_CPU_BEST = [float("inf")]  # best single-thread CPU time of the last _time_best call


def _time_best(fn, repeat: int):
    best, result = float("inf"), None
    _CPU_BEST[0] = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        best = min(best, time.perf_counter() - t0)
        _CPU_BEST[0] = min(_CPU_BEST[0], time.process_time() - c0)
    return best, result


def worker_volume(name: str, data: Path, repeat: int) -> dict:
    import torch
    from monai.metrics import CalibrationErrorMetric
    from netcal.metrics import ECE
    from torchmetrics.classification import MulticlassCalibrationError

    from monai_unc.metrics.calibration import CalibrationMetric, ConfidenceHistogram, calibration_metrics

    probs_np = np.load(data / "probs.npy")
    labels_np = np.load(data / "labels.npy")
    probs, labels = torch.from_numpy(probs_np), torch.from_numpy(labels_np)
    if name in ("ours", "ours_uce"):
        # warm-up on a corner of the volume (same dtypes and layout): imports numba and loads the compiled kernel,
        # one-time costs that are not the update's working memory, before the peak counter is reset
        corner = (slice(None), slice(None), slice(0, 4), slice(0, 4), slice(0, 4))
        ConfidenceHistogram(3, per_case=False, uncertainty=name == "ours_uce").update(
            probs[corner].contiguous(), labels[corner[:1] + corner[2:]].contiguous()
        )
    rss0 = reset_peak()
    state_bytes = None
    if name in ("ours", "ours_uce"):
        metrics = ("ece", "classwise_ece", "all_label_ece", "ace", "mce", "nll", "brier")
        unc = name == "ours_uce"
        metrics = metrics + (("uce",) if unc else ())

        def run():
            hist = ConfidenceHistogram(3, per_case=False, uncertainty=unc)
            hist.update(probs, labels)
            return calibration_metrics(hist, metrics)

        best, values = _time_best(run, repeat)
        peak = peak_mib(maxrss_fallback=True) - rss0
        metric = CalibrationMetric(metrics=metrics)
        for _ in range(10):
            metric(probs, labels[:, None])
        buf = metric.get_buffer()
        state_bytes = metric._hist.nbytes + buf.numel() * buf.element_size()
        per_case = ConfidenceHistogram(3, uncertainty=unc)
        for _ in range(10):
            per_case.update(probs, labels)
        values["per_case_state_10_mib"] = per_case.nbytes / 2**20
    elif name == "floor":
        # the floor: one read of the probabilities (a float32 sum over the tensor as given, memory-bound); any
        # calibration metric must read every probability at least once, so nothing can beat it
        best, values = _time_best(one_read(probs), repeat)
        values, peak = {}, peak_mib(maxrss_fallback=True) - rss0
    elif name == "netcal":

        def run():
            flat = probs_np[0].reshape(3, -1).T  # netcal wants (N, C)
            return {"ece": float(ECE(bins=N_BINS).measure(flat, labels_np.reshape(-1)))}

        best, values = _time_best(run, repeat)
        peak = peak_mib(maxrss_fallback=True) - rss0
    elif name == "torchmetrics":

        def run():
            m = MulticlassCalibrationError(num_classes=3, n_bins=N_BINS, norm="l1")
            m.update(probs, labels)
            return {"ece": float(m.compute())}

        best, values = _time_best(run, repeat)
        peak = peak_mib(maxrss_fallback=True) - rss0
        m = MulticlassCalibrationError(num_classes=3, n_bins=N_BINS, norm="l1")
        for _ in range(10):
            m.update(probs, labels)
        state_bytes = sum(t.numel() * t.element_size() for t in m.confidences + m.accuracies)
    elif name == "monai":

        def run():
            m = CalibrationErrorMetric(num_bins=N_BINS, include_background=True, calibration_reduction="expected")
            onehot = torch.nn.functional.one_hot(labels, 3).movedim(-1, 1).float()
            m(probs, onehot)
            return {"classwise_ece": float(m.aggregate())}

        best, values = _time_best(run, repeat)
        peak = peak_mib(maxrss_fallback=True) - rss0
        m = CalibrationErrorMetric(num_bins=N_BINS)
        onehot = torch.nn.functional.one_hot(labels, 3).movedim(-1, 1).float()
        for _ in range(10):
            m(probs, onehot)
        buf = m.get_buffer()
        state_bytes = buf.numel() * buf.element_size()
    else:
        raise ValueError(name)
    return {"time": best, "cpu": _CPU_BEST[0], "peak_mib": peak, "values": values, "state_bytes": state_bytes}


def _ts_batches(data: Path, n_vox: int):
    """Zero-argument callables that stream (1, 3, n) logits and (1, n) labels from the files."""
    import torch

    def logits():
        with open(data / "logits.f16", "rb") as f:
            for s in range(0, n_vox, TS_CHUNK):
                n = min(TS_CHUNK, n_vox - s)
                z = np.fromfile(f, dtype=np.float16, count=3 * n).reshape(1, 3, n)
                yield torch.from_numpy(z)

    def labels():
        with open(data / "labels.u8", "rb") as f:
            for s in range(0, n_vox, TS_CHUNK):
                n = min(TS_CHUNK, n_vox - s)
                yield torch.from_numpy(np.fromfile(f, dtype=np.uint8, count=n).reshape(1, n))

    return logits, labels


def worker_temperature(name: str, data: Path, n_vox: int) -> dict:
    import torch

    from monai_unc.temperature import TemperatureScaler

    rss0 = reset_peak()
    t0 = time.perf_counter()
    if name == "ts_ours":
        logits, labels = _ts_batches(data, n_vox)
        scaler = TemperatureScaler(chunk_size=TS_CHUNK).fit(logits, labels)
        t, loss, steps = scaler.temperature.item(), min(h["loss"] for h in scaler.history), len(scaler.history)
    elif name == "ts_naive":
        logits, labels = _ts_batches(data, n_vox)
        z = torch.cat([b[0].float() for b in logits()], dim=1).T.contiguous()  # (N, C) float32 in memory
        y = torch.cat([b[0].long() for b in labels()])
        temp = torch.full((1,), 1.5, requires_grad=True)
        opt = torch.optim.LBFGS([temp], lr=1.0, max_iter=50, line_search_fn="strong_wolfe")
        evals = [0]

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(z / temp, y)
            loss.backward()
            evals[0] += 1
            return loss

        opt.step(closure)
        with torch.no_grad():
            loss = float(torch.nn.functional.cross_entropy(z / temp, y))
        t, steps = temp.item(), evals[0]
    else:
        raise ValueError(name)
    peak = peak_mib(maxrss_fallback=True) - rss0
    return {"time": time.perf_counter() - t0, "peak_mib": peak, "t": t, "loss": loss, "steps": steps}


# ------------------------------------------------------------------------------------------------ driver
def run_worker(args: argparse.Namespace, name: str, *extra: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--data", str(args.data), "--threads", str(args.threads)]
    cmd += ["--repeat", str(args.repeat), *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt_err(value: float, exact: float) -> str:
    rel = (value - exact) / exact * 100 if exact else float("nan")
    return f"{value - exact:+.1e} ({rel:+.1f} %)" if abs(value - exact) > 1e-9 else f"{value - exact:+.0e} (exact)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="64x64x32 volume, 10^6 voxels for the temperature")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-temperature", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--n-vox", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        if args.worker.startswith("ts_"):
            res = worker_temperature(args.worker, args.data, args.n_vox)
        else:
            res = worker_volume(args.worker, args.data, args.repeat)
        print(json.dumps(res))
        return

    shape = (64, 64, 32) if args.quick else (256, 256, 128)
    n_vox_ts = 10**6 if args.quick else 10**8
    with tempfile.TemporaryDirectory(prefix="bench_calib_") as tmp:
        args.data = Path(tmp)
        import torch

        print(f"# calibration benchmark: volume {shape} x 3 classes, threads={args.threads}, torch {torch.__version__}")
        print(f"# load average at start: {os.getloadavg()[0]:.1f}")
        make_volume(shape, args.data)
        exact = exact_reference(np.load(args.data / "probs.npy"), np.load(args.data / "labels.npy"))
        names = ["ours", "ours_uce", "netcal", "torchmetrics", "monai"]
        results: dict[str, dict] = {}
        for _ in range(args.rounds):
            for name in [*names, "floor"]:
                r = run_worker(args, name)
                if name not in results or r["time"] < results[name]["time"]:
                    peak = min(r["peak_mib"], results.get(name, r)["peak_mib"])
                    cpu = min(r["cpu"], results.get(name, r)["cpu"])
                    results[name] = {**r, "peak_mib": peak, "cpu": cpu}
                else:
                    results[name]["peak_mib"] = min(results[name]["peak_mib"], r["peak_mib"])
                    results[name]["cpu"] = min(results[name]["cpu"], r["cpu"])

        ours = results["ours"]
        print("\n## Part 1: metrics of one volume\n")
        print(
            "| Contender | Metric | Value | Error vs exact float64 | Time (s) | CPU (s) | Peak (MiB) "
            "| Ours faster (wall / CPU) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        label = {
            "ours": "monai_unc: 7 metrics from one update",
            "ours_uce": "monai_unc: 8 metrics incl. UCE",
            "netcal": "netcal `ECE`",
            "torchmetrics": "torchmetrics `MulticlassCalibrationError`",
            "monai": "MONAI `CalibrationErrorMetric`",
        }
        for name in names:
            r = results[name]
            speed = (
                "—" if name.startswith("ours") else (f"{r['time'] / ours['time']:.1f}x / {r['cpu'] / ours['cpu']:.1f}x")
            )
            first = True
            for metric, value in r["values"].items():
                if metric not in exact:
                    continue
                row_head = f"| {label[name]} " if first else "| "
                tail = f"| {r['time']:.3f} | {r['cpu']:.3f} | {r['peak_mib']:.1f} | {speed} |" if first else "| | | | |"
                print(f"{row_head}| {metric} | {value:.6f} | {fmt_err(value, exact[metric])} {tail}")
                first = False
        print("\n## State held after 10 volumes\n")
        print("| Metric object | State (MiB) |")
        print("|---|---|")
        rows = (
            ("monai_unc `CalibrationMetric` (pooled histogram + per-case values)", ours["state_bytes"] / 2**20),
            ("monai_unc `ConfidenceHistogram(per_case=True)`, no UCE row", ours["values"]["per_case_state_10_mib"]),
            ("torchmetrics `MulticlassCalibrationError`", results["torchmetrics"]["state_bytes"] / 2**20),
            ("MONAI `CalibrationErrorMetric` (per-image values only)", results["monai"]["state_bytes"] / 2**20),
        )
        for desc, mib in rows:
            print(f"| {desc} | {mib:.4g} |")
        print("\nTargets: >= 3x faster than netcal: "
              f"{results['netcal']['time'] / ours['time']:.1f}x wall, "
              f"{results['netcal']['cpu'] / ours['cpu']:.1f}x CPU; not slower than torchmetrics: "
              f"{results['torchmetrics']['time'] / ours['time']:.2f}x wall, "
              f"{results['torchmetrics']['cpu'] / ours['cpu']:.2f}x CPU; state for 10 volumes <= 10 MiB: "
              f"{ours['state_bytes'] / 2**20:.2f} MiB")  # fmt: skip
        fl = results["floor"]
        print(floor_line("7 metrics, wall", ours["time"], fl["time"], "one read of the probabilities"))
        print(floor_line("7 metrics, CPU", ours["cpu"], fl["cpu"], "one read of the probabilities"))
        print(
            floor_line(
                "8 metrics incl. UCE, CPU", results["ours_uce"]["cpu"], fl["cpu"], "one read of the probabilities"
            )
        )

        if args.skip_temperature:
            return
        t0 = time.perf_counter()
        make_temperature_data(n_vox_ts, args.data)
        print(f"\n## Part 2: temperature scaling on {n_vox_ts:.0e} voxels (planted t = {PLANTED_T})\n")
        print(f"(data written in {time.perf_counter() - t0:.1f} s: float16 logits, uint8 labels)\n")
        print("| Contender | Fitted t | Error vs planted | NLL at t | Steps / evals | Time (s) | Peak (MiB) |")
        print("|---|---|---|---|---|---|---|")
        for name, desc in (
            ("ts_ours", "monai_unc `TemperatureScaler` (streamed, RMSprop)"),
            ("ts_naive", "in-memory float32 + LBFGS (usual recipe)"),
        ):
            r = run_worker(args, name, "--n-vox", str(n_vox_ts))
            err = (r["t"] / PLANTED_T - 1) * 100
            print(f"| {desc} | {r['t']:.4f} | {err:+.2f} % | {r['loss']:.6f} | {r['steps']} | {r['time']:.1f} "
                  f"| {r['peak_mib']:.0f} |")  # fmt: skip
        print(f"\n# load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
