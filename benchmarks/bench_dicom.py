"""What writing the DICOM objects of a case costs against writing its NIfTI outputs.

    python benchmarks/bench_dicom.py            # a 256 x 256 x 200 CT series
    python benchmarks/bench_dicom.py --small    # 64 x 64 x 50 (a quick run)

Workload: one case on the grid of a synthetic single-frame CT series (``monai_unc.io.dicom.write_series``, not
timed): a label map with two classes and five float32 uncertainty maps (the five default measures of
``monai-unc infer``). Timed, best of ``--repeat``, each into a fresh folder:

- **NIfTI**: what ``infer`` writes for them: ``<case>_seg.nii.gz`` (uint8) and five ``<case>_<measure>.nii.gz``
  (float32) with ``monai_unc.io.save_nifti``;
- **DICOM**: what ``dicom-export`` writes for them: the binary SEG (two segments), five float Parametric Maps and
  the Comprehensive 3D SR (with the segment volumes), on the headers of the series (``read_series(pixels=False)``,
  timed separately as **read headers**).

Printed: seconds of each, the ratio DICOM / NIfTI, the bytes written, and the peak resident memory of the process
(``ru_maxrss``) after each phase (NIfTI first). Then reading the segmentation back as ``evaluate``'s labels: the
binary SEG on the series' grid (``read_segmentation_labels``, series headers included) against the NIfTI label map
(``read_volume``), best of ``--repeat``; both must give the label map written.
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

import numpy as np
import pydicom

from monai_unc.io import read_volume, save_nifti
from monai_unc.io.dicom import (
    AlgorithmInfo,
    default_segment,
    read_segmentation_labels,
    read_series,
    segment_volume_ml,
    write_measurement_report,
    write_parametric_map,
    write_segmentation,
    write_series,
)

MEASURES = ("predictive_entropy", "expected_entropy", "mutual_information", "one_minus_max_prob", "variance")


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _nifti(label: np.ndarray, maps: dict, affine: np.ndarray, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    save_nifti(label.astype(np.uint8), affine, out / "case_seg.nii.gz")
    for m, u in maps.items():
        save_nifti(u, affine, out / f"case_{m}.nii.gz")
    return time.perf_counter() - t0


def _dicom(label: np.ndarray, maps: dict, series_folder: Path, out: Path) -> tuple[float, float]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    series = read_series(series_folder, pixels=False)
    t1 = time.perf_counter()
    algorithm = AlgorithmInfo("bench", "1", "0" * 64, "mcdropout")
    specs = [default_segment(1, "grey matter"), default_segment(2, "white matter")]
    seg = write_segmentation(label, series, out / "seg.dcm", specs, algorithm)
    pms = [write_parametric_map(u, series, out / f"{m}.dcm", m, algorithm) for m, u in maps.items()]
    volumes = {i + 1: {"volume": segment_volume_ml(label == s.label, series.spacing)} for i, s in enumerate(specs)}
    write_measurement_report(out / "sr.dcm", series, pydicom.dcmread(seg, stop_before_pixels=True),
                             [pydicom.dcmread(p, stop_before_pixels=True) for p in pms], segment_volumes=volumes,
                             numbers={f"{m}_mean": float(u.mean()) for m, u in maps.items()}, algorithm=algorithm)
    return t1 - t0, time.perf_counter() - t1


def _read_labels(root: Path, label: np.ndarray) -> tuple[float, float]:
    """Seconds to read the NIfTI label map and the SEG (on the series' headers) back; both checked."""
    t0 = time.perf_counter()
    nifti, _ = read_volume(root / "nifti" / "case_seg.nii.gz")
    t1 = time.perf_counter()
    seg = read_segmentation_labels(root / "dicom" / "seg.dcm", read_series(root / "series", pixels=False))
    t2 = time.perf_counter()
    assert np.array_equal(nifti[0], label) and np.array_equal(seg, label)
    return t1 - t0, t2 - t1


def main() -> None:
    """Write the series, then time the NIfTI and the DICOM outputs and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="64 x 64 x 50")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    shape = (64, 64, 50) if args.small else (256, 256, 200)
    rng = np.random.default_rng(0)
    affine = np.diag([0.8, 0.8, 1.5, 1.0])
    zz, yy, xx = np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij")
    r = np.sqrt(zz**2 + yy**2 + xx**2)
    label = (r < 0.7).astype(np.uint8) + (r < 0.4)
    maps = {m: (rng.random(shape, dtype=np.float32) * (i + 1) / 5).astype(np.float32)
            for i, m in enumerate(MEASURES)}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        write_series(rng.normal(0, 100, shape), affine, root / "series", modality="CT")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t_nifti = min(_nifti(label, maps, affine, root / "nifti") for _ in range(args.repeat))
            rss_nifti = _rss_gib()
            runs = [_dicom(label, maps, root / "series", root / "dicom") for _ in range(args.repeat)]
        rss_dicom = _rss_gib()
        reads = [_read_labels(root, label) for _ in range(args.repeat)]
        rss_labels = _rss_gib()
        t_read = min(r[0] for r in runs)
        t_dicom = min(r[1] for r in runs)
        size_nifti, size_dicom = _size(root / "nifti"), _size(root / "dicom")
    print(f"{platform.machine()}, {shape[0]} x {shape[1]} x {shape[2]}, best of {args.repeat}")
    print("| outputs | seconds | vs NIfTI | MB written | peak RSS after (GiB) |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| NIfTI: seg + 5 maps (.nii.gz) | {t_nifti:.2f} | 1.00x | {size_nifti / 1e6:.1f} | {rss_nifti:.2f} |")
    print(f"| DICOM: SEG + 5 Parametric Maps + SR | {t_dicom:.2f} | {t_dicom / t_nifti:.2f}x | "
          f"{size_dicom / 1e6:.1f} | {rss_dicom:.2f} |")
    print(f"| read headers of the series ({shape[2]} slices) | {t_read:.2f} | {t_read / t_nifti:.2f}x | | |")
    nii_read, seg_read = min(r[0] for r in reads), min(r[1] for r in reads)
    print()
    print("| labels read back | seconds | vs NIfTI | peak RSS after (GiB) |")
    print("| --- | --- | --- | --- |")
    print(f"| NIfTI label map (read_volume) | {nii_read:.2f} | 1.00x | |")
    print(f"| binary SEG on the series (read_segmentation_labels) | {seg_read:.2f} | {seg_read / nii_read:.2f}x | "
          f"{rss_labels:.2f} |")


if __name__ == "__main__":
    main()
