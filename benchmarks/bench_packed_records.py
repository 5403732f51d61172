"""Per-case records of a per-case confidence histogram: their bytes, and rank 0's peak memory under ``torchrun``.

    python benchmarks/bench_packed_records.py records                 # bytes of one 105-class 64^3 case's record
    python benchmarks/bench_packed_records.py torchrun [--root DIR]   # rank 0's VmHWM, 2-rank evaluate, 105 classes
    python benchmarks/bench_packed_records.py compare --old DIR       # every evaluate output: DIR's code vs this one

``records``: a 105-class case of 64^3 voxels (softmax of Gaussian logits x 3, labels uniform; and a confident one,
logits ``6 one-hot(label)`` plus Gaussian noise) is added to a per-case
:class:`~monai_unc.metrics.calibration.ConfidenceHistogram`; printed are the bytes of its record's arrays (what
:func:`monai_unc.state.pack_states` gives, what the resume cache writes and what every rank of a ``torchrun``
``evaluate`` sends to rank 0) in the dense layout (``state_dict()``: what ``pack_states`` sent before) and the
packed one (``packed_state_dict()``), and of the compressed ``.npz`` the resume cache writes of each.

``torchrun``: writes a cohort of ``--cases`` 105-class cases of 32 x 32 x 16 voxels (labels, probabilities) and runs
``monai-unc evaluate --n-bins N`` (default 960: ``F = 16 N = 15360`` fine bins, the grid of a default
``ConfidenceHistogram``, 37.6 MiB of dense tables per case; at the default 15 bins ``F = 240``, 0.6 MiB) on it
under ``python -m torch.distributed.run --standalone --nproc_per_node 2`` (gloo), with the package of ``--root``
(default: this checkout) on ``PYTHONPATH``; prints each rank's peak resident memory (``VmHWM``) and its resident
memory after the imports. Export an older commit (``git archive <commit> | tar -x -C
DIR``) and pass ``--root DIR`` for the before figure.

``compare``: runs ``evaluate`` with the package of ``--old`` and with this checkout's on a 2-class cohort (the toy
cohort of :func:`monai_unc.data.cohorts.write_toy_cohort`) and a 105-class one, on 1 process and on 2 (torchrun),
fresh and resumed (half of the cases' records removed and the command run again), and the new code resuming the old
code's records (the dense layout); every output file (``metrics.csv``, ``summary.json``, ``rows.json``, the arrays of
every ``.npz``, the maps, every other file but the run's own time stamps) must be the same bytes. Prints one line per
run and ``ALL IDENTICAL`` or the differing files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _vm_hwm_mib() -> float:
    """Peak resident memory of this process (``VmHWM``; not ``ru_maxrss``, which a child inherits over exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _worker(args: argparse.Namespace) -> None:
    from monai_unc import cli
    from monai_unc.engine import barrier, get_dist_context

    ctx = get_dist_context()
    barrier(ctx)
    with open("/proc/self/statm") as f:
        before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    t0 = time.perf_counter()
    rc = cli.main(["evaluate", "-l", args.labels, "-p", args.predictions, "-o", args.output, "--n-bins",
                   str(args.n_bins), "-q"])
    Path(args.output, f".bench_rank{ctx.rank}.json").write_text(json.dumps(
        {"rank": ctx.rank, "rc": rc, "seconds": time.perf_counter() - t0, "peak_mib": _vm_hwm_mib(),
         "before_mib": before}))


def _records(args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    from monai_unc.io import atomic_save_npz
    from monai_unc.metrics.calibration import ConfidenceHistogram
    from monai_unc.state import pack_states

    c, s = args.classes, args.size
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, c, (1, s, s, s), generator=g)
    logits = {
        "Gaussian logits x 3, labels uniform": torch.randn(1, c, s, s, s, generator=g) * 3,
        "confident: 6 one-hot(label) + Gaussian logits": torch.randn(1, c, s, s, s, generator=g)
        + 6 * torch.nn.functional.one_hot(y, c).permute(0, 4, 1, 2, 3),
    }
    for what, z in logits.items():
        h = ConfidenceHistogram(num_classes=c)
        h.update(torch.softmax(z, 1), y, case_ids=["a"])
        packed = pack_states({"histogram": h})
        dense = {f"histogram/{k}": np.asarray(v) for k, v in h.state_dict().items()}  # what pack_states gave before
        print(f"{c} classes, one case of {s}^3 voxels, F = {h.n_fine_bins}, {what}: {h.nbytes / 2**20:.2f} MiB held")
        with tempfile.TemporaryDirectory() as tmp:
            for name, arrays in (("dense", dense), ("packed", packed)):
                t0 = time.perf_counter()
                path = atomic_save_npz(Path(tmp) / f"{name}.npz", arrays, compressed=True)
                sec = time.perf_counter() - t0
                print(f"  {name:6s} record: {sum(v.nbytes for v in arrays.values()) / 2**20:8.2f} MiB of arrays, "
                      f"resume-cache .npz {path.stat().st_size / 2**20:7.2f} MiB (written in {sec:.2f} s)")


def _write_many_class_cohort(root: Path, n_cases: int, classes: int, shape: tuple[int, int, int]) -> dict[str, Path]:
    import nibabel as nib
    import numpy as np

    from monai_unc.io import save_probabilities

    (root / "labels").mkdir(parents=True)
    (root / "preds").mkdir()
    rng = np.random.default_rng(3)
    affine = np.diag([1.5, 1.0, 2.0, 1.0])
    for k in range(n_cases):
        logits = rng.normal(size=(classes, *shape)).astype(np.float32) * (1 + k % 4)
        p = np.exp(logits - logits.max(0, keepdims=True))
        p /= p.sum(0, keepdims=True)
        y = np.where(rng.random(shape) < 0.7, p.argmax(0), rng.integers(0, classes, shape)).astype(np.uint8)
        nib.save(nib.Nifti1Image(y, affine), root / "labels" / f"case{k:02d}.nii.gz")
        save_probabilities(p, affine, root / "preds" / f"case{k:02d}_probs.nii.gz")
    return {"labels": root / "labels", "predictions": root / "preds"}


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(v, None)
    return env


def _evaluate(root: Path, cohort: dict[str, Path], out: Path, ranks: int, n_bins: int) -> list[dict]:
    script = [str(Path(__file__).resolve()), "worker", "--labels", str(cohort["labels"]), "--predictions",
              str(cohort["predictions"]), "--output", str(out), "--n-bins", str(n_bins)]
    if ranks > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), *script]
    else:
        cmd = [sys.executable, *script]
    proc = subprocess.run(cmd, env=_env(root), cwd=str(root), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"evaluate failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    ranks_out = [json.loads(p.read_text()) for p in sorted(out.glob(".bench_rank*.json"))]
    for p in out.glob(".bench_rank*.json"):
        p.unlink()
    return sorted(ranks_out, key=lambda r: r["rank"])


def _torchrun(args: argparse.Namespace) -> None:
    root = Path(args.root).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        cohort = _write_many_class_cohort(Path(tmp) / "cohort", args.cases, 105, (32, 32, 16))
        for r in range(args.rounds):
            ranks = _evaluate(root, cohort, Path(tmp) / f"eval{r}", 2, args.n_bins)
            print(f"package {root}: {args.cases} cases of 105 classes, 32 x 32 x 16, --n-bins {args.n_bins} "
                  f"(F = {16 * args.n_bins}), torchrun 2 ranks: "
                  + ", ".join(f"rank {x['rank']} VmHWM {x['peak_mib']:.0f} MiB (after imports {x['before_mib']:.0f})"
                              f" {x['seconds']:.0f} s" for x in ranks), flush=True)


#: files whose content is the run's own (time stamps, durations, the package's path): not compared
_VOLATILE = ("run.json", "failures.json")


def _digest(path: Path, out: Path) -> str:
    if path.suffix == ".npz":
        import numpy as np

        with np.load(path, allow_pickle=False) as z:
            h = hashlib.sha256()
            for k in sorted(z.files):
                a = z[k]
                h.update(f"{k}|{a.dtype}|{a.shape}|".encode())
                h.update(np.ascontiguousarray(a).tobytes())
            return h.hexdigest()
    return hashlib.sha256(path.read_bytes().replace(str(out).encode(), b"<out>")).hexdigest()  # rows.json names maps


def _outputs(out: Path) -> dict[str, str]:
    """Digests of every output but the per-case records (compared through the outputs made from them)."""
    res = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if p.is_file() and not rel.startswith("state/cases/") and p.name not in _VOLATILE \
                and not p.name.startswith("."):
            res[rel] = _digest(p, out)
    return res


def _drop_half(out: Path) -> None:
    for p in sorted((out / "state" / "cases").glob("*.json"))[::2]:
        p.unlink()
        p.with_suffix(".npz").unlink(missing_ok=True)


def _compare(args: argparse.Namespace) -> None:
    from monai_unc.data.cohorts import write_toy_cohort

    old, new = Path(args.old).resolve(), ROOT
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        paths = write_toy_cohort(t / "two", n_cases=args.cases, shape=(24, 24, 24))
        cohorts = {"2-class": {"labels": paths["labels"], "predictions": paths["predictions"]},
                   "105-class": _write_many_class_cohort(t / "many", args.cases, 105, (16, 16, 8))}
        for cname, cohort in cohorts.items():
            for ranks in (1, 2):
                ref = None
                for code, root in (("old", old), ("new", new)):
                    out = t / f"{cname}_{ranks}_{code}"
                    _evaluate(root, cohort, out, ranks, args.n_bins)
                    fresh = _outputs(out)
                    _drop_half(out)
                    _evaluate(root, cohort, out, ranks, args.n_bins)
                    resumed = _outputs(out)
                    ref = fresh if ref is None else ref
                    for what, got in (("fresh", fresh), ("resumed", resumed)):
                        diff = sorted(k for k in set(ref) | set(got) if ref.get(k) != got.get(k))
                        print(f"{cname}, {ranks} process(es), {code} code, {what}: {len(got)} files, "
                              f"{'identical' if not diff else 'DIFFERENT: ' + ', '.join(diff[:8])}", flush=True)
                        failures += [f"{cname}/{ranks}/{code}/{what}: {d}" for d in diff]
                # the new code resuming the old code's records (dense layout): every one of them reused
                out = t / f"{cname}_{ranks}_old"
                shutil.rmtree(out / "state" / "cases")
                _evaluate(old, cohort, out, ranks, args.n_bins)
                _drop_half(out)  # half of them recomputed by the new code, half read from the old records
                _evaluate(new, cohort, out, ranks, args.n_bins)
                import numpy as np

                dense = 0
                for p in (out / "state" / "cases").glob("*.npz"):
                    with np.load(p) as z:
                        dense += any(k.endswith("/counts") or ".counts" in k for k in z.files)
                got = _outputs(out)
                diff = sorted(k for k in set(ref) | set(got) if ref.get(k) != got.get(k))
                print(f"{cname}, {ranks} process(es), new code resuming the old records ({dense} dense records "
                      f"read): {'identical' if not diff else 'DIFFERENT: ' + ', '.join(diff[:8])}", flush=True)
                if not dense:
                    failures.append(f"{cname}/{ranks}: no old dense record was reused")
                failures += [f"{cname}/{ranks}/cross-resume: {d}" for d in diff]
    print("ALL IDENTICAL" if not failures else "DIFFERENCES:\n" + "\n".join(failures))
    if failures:
        sys.exit(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["records", "torchrun", "compare", "worker"])
    p.add_argument("--classes", type=int, default=105, help="records: classes (default 105)")
    p.add_argument("--size", type=int, default=64, help="records: cubic case size (default 64)")
    p.add_argument("--root", default=str(ROOT), help="torchrun: the package's checkout (default this one)")
    p.add_argument("--cases", type=int, default=12, help="torchrun: cases (default 12); compare: 6 recommended")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--n-bins", type=int, default=960,
                   help="evaluate --n-bins (default 960: F = 15360, the fine grid of ConfidenceHistogram's default)")
    p.add_argument("--old", help="compare: a checkout (or export) of the code before")
    for k in ("labels", "predictions", "output"):
        p.add_argument(f"--{k}", help=argparse.SUPPRESS)
    args = p.parse_args()
    {"records": _records, "torchrun": _torchrun, "compare": _compare, "worker": _worker}[args.mode](args)


if __name__ == "__main__":
    main()
