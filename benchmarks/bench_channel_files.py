"""What looking up each case's channel files costs a cohort, against its size (``image_channel_files``).

A triage reads each case's image channels (``image_channel_files``, three calls a case); N cases of nnU-Net's channel
naming (``CASE_0000.nii.gz``, ``CASE_0001.nii.gz``; empty files: only the names count) or NIfTI pairs
(``CASE_0000.hdr`` + ``.img``), one call per case, CPU time, against the floor of one listing of the folder
(``list_files`` / ``list_image_cases`` once). Listing the folder in every call made the total grow with N^2.

    python benchmarks/bench_channel_files.py [--cases 250 1000] [--pairs]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monai_unc.io import VOLUME_EXTENSIONS, image_channel_files, list_files, list_image_cases  # noqa: E402
from monai_unc.io.cases import _CHANNEL_LISTING_SETTLE_S  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, nargs="+", default=[250, 1000])
    ap.add_argument("--pairs", action="store_true", help="NIfTI pairs (.hdr + .img) instead of .nii.gz files")
    args = ap.parse_args()
    ext = ".hdr" if args.pairs else ".nii.gz"
    print(f"| cases ({ext}) | all lookups (s CPU) | per case (ms) | one listing (ms) | ratio |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in args.cases:
        with tempfile.TemporaryDirectory() as d:
            folder = Path(d)
            for i in range(n):
                for ch in range(2):
                    (folder / f"case{i:05d}_{ch:04d}{ext}").write_bytes(b"")
                    if args.pairs:
                        (folder / f"case{i:05d}_{ch:04d}.img").write_bytes(b"")
            # a folder changed in the last few seconds is listed in every call (coarse file-system timestamps):
            # the cohort's folder is measured as a triage finds it, written earlier
            time.sleep(_CHANNEL_LISTING_SETTLE_S + 0.1)
            t0 = time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                list_image_cases(folder) if args.pairs else list_files(folder, "", VOLUME_EXTENSIONS)
            floor = time.process_time() - t0
            t0 = time.process_time()
            for i in range(n):
                got = image_channel_files(folder / f"case{i:05d}_0000{ext}")
                assert len(got) == 2, got
            total = time.process_time() - t0
        print(f"| {n} | {total:.3f} | {1e3 * total / n:.3f} | {1e3 * floor:.1f} | {total / max(floor, 1e-9):.1f}x |",
              flush=True)


if __name__ == "__main__":
    main()
