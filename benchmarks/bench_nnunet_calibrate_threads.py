"""Wall time of ``monai-unc nnunet-calibrate`` on tiny cases with busy processes beside it, by torch thread count.

    python benchmarks/bench_nnunet_calibrate_threads.py [--cases 10] [--busy 2] [--repeats 3] [--threads 1]

Builds the toy model of the nnU-Net tests (:func:`tests.nnunet.test_predictor_hostile.write_model_folder`: a
``PlainConvUNet`` with features 4, 8, patch 16^3, 3 classes, random weights) and ``N`` preprocessed 16^3 validation
cases (:func:`tests.nnunet.test_calibrate_hostile.write_preprocessed`), starts ``--busy`` processes that spin on the
CPU (the load of other jobs on a shared machine), and runs the command (``python -m monai_unc nnunet-calibrate
-device cpu``, mirrors on, imports included) alternately with torch's default threads and with ``--threads``,
``--repeats`` times each. Prints each run's wall time and fitted temperature.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10)
    ap.add_argument("--busy", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    from tests.nnunet.test_calibrate_hostile import write_preprocessed
    from tests.nnunet.test_predictor_hostile import write_model_folder

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        write_model_folder(root / "model", folds=(0,))
        write_preprocessed(root / "pre", cases=tuple(f"c{i}" for i in range(args.cases)))
        env = {**os.environ, "nnUNet_preprocessed": str(root / "pre"), "PYTHONPATH": str(ROOT)}
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        try:
            for r in range(args.repeats):
                for extra in ([], ["--threads", str(args.threads)]):
                    out = root / f"out_{r}_{len(extra)}"
                    t0 = time.perf_counter()
                    res = subprocess.run([sys.executable, "-m", "monai_unc", "nnunet-calibrate", "-m",
                                          str(root / "model"), "-f", "0", "-o", str(out), "-device", "cpu", *extra],
                                         env=env, capture_output=True, text=True, check=True)
                    wall = time.perf_counter() - t0
                    t = res.stdout.split('"temperature": [', 1)[1].split("]", 1)[0].strip()
                    print(f"run {r}  {' '.join(extra) or 'default threads':>12}  {wall:7.2f} s  t = {t}", flush=True)
        finally:
            for p in busy:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
