"""What the Comprehensive 3D SR of a case of several input series costs (``dicom-export`` of a multi-channel model).

    python benchmarks/bench_dicom_sr.py                       # 2 series x 150 slices, 10 segments
    python benchmarks/bench_dicom_sr.py --series 4 --slices 60
    python benchmarks/bench_dicom_sr.py --export              # the whole dicom-export of that case (SEG and SR)

Workload: ``--series`` synthetic single-frame MR series of one patient and frame of reference (16 x 16 x
``--slices``; ``write_series``, not timed), a label map of ``--segments`` classes written as a binary SEG on the first
series referencing the others (not timed), then the SR with one volume per segment (``write_measurement_report``
with ``other_series``), timed, best of ``--repeat``. With ``--export``, instead: the label map as an nnU-Net
prediction (``<case>.nii.gz`` beside a ``dataset.json`` of ``--series`` channels, the series as ``<case>_0000/``,
``<case>_0001/`` ...) and ``monai-unc dicom-export --layout nnunet`` of it, in-process, timed once. Printed: wall and
CPU seconds, the SR's bytes and its content items.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pydicom

from monai_unc.io.dicom import default_segment, read_series, write_measurement_report, write_segmentation, write_series


def _items(seq) -> int:
    return sum(1 + _items(item.get("ContentSequence", [])) for item in seq)


def _export(root: Path, labels: np.ndarray, affine: np.ndarray, args: argparse.Namespace) -> tuple[float, float, Path]:
    """The label map as an nnU-Net prediction of the case ``c0`` and its ``dicom-export``: (wall, CPU, the SR)."""
    import nibabel as nib

    from monai_unc.cli import main

    pred = root / "pred"
    pred.mkdir()
    (pred / "dataset.json").write_text(json.dumps({
        "channel_names": {str(k): f"ch{k}" for k in range(args.series)}, "file_ending": ".nii.gz",
        "labels": {"background": 0, **{f"class {c}": c for c in range(1, args.segments + 1)}}, "numTraining": 1}))
    nib.save(nib.Nifti1Image(labels.astype(np.uint8), affine), pred / "c0.nii.gz")
    start, cpu = time.perf_counter(), time.process_time()
    if main(["dicom-export", "-p", str(pred), "-s", str(root / "series"), "-o", str(root / "out"), "--layout",
             "nnunet", "-q"]) != 0:
        raise SystemExit("dicom-export failed")
    return time.perf_counter() - start, time.process_time() - cpu, root / "out" / "c0" / "sr.dcm"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=2)
    parser.add_argument("--slices", type=int, default=150)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--export", action="store_true", help="time the whole dicom-export of the case")
    args = parser.parse_args()
    shape = (16, 16, args.slices)
    affine = np.diag([1.0, 1.0, 2.0, 1.0])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        extra = {"FrameOfReferenceUID": "1.2.826.0.1.3680043.10.763.2"}
        series = []
        for k in range(args.series):
            folder = root / "series" / f"c0_{k:04d}"
            write_series(np.zeros(shape), affine, folder, modality="MR",
                         study_uid="1.2.826.0.1.3680043.10.763.1", extra=extra)
            series.append(read_series(folder, pixels=False))
        labels = (np.arange(np.prod(shape)).reshape(shape) % (args.segments + 1)).astype(np.uint16)
        if args.export:
            best, best_cpu, path = _export(root, labels, series[0].affine, args)
            what = "dicom-export (SEG and SR)"
        else:
            segments = [default_segment(c) for c in range(1, args.segments + 1)]
            seg = pydicom.dcmread(write_segmentation(labels, series[0], root / "seg.dcm", segments,
                                                     other_series=series[1:]), stop_before_pixels=True)
            volumes = {c: {"volume": 1.0} for c in range(1, args.segments + 1)}
            best, best_cpu = float("inf"), float("inf")
            for _ in range(args.repeat):
                start, cpu = time.perf_counter(), time.process_time()
                path = write_measurement_report(root / "sr.dcm", series[0], seg, [], segment_volumes=volumes,
                                                numbers={"dice": 0.5}, other_series=series[1:])
                best, best_cpu = min(best, time.perf_counter() - start), min(best_cpu, time.process_time() - cpu)
            what = "SR"
        sr = pydicom.dcmread(path)
        print(f"{args.series} series x {args.slices} slices, {args.segments} segments: {what} {best:.2f} s wall, "
              f"{best_cpu:.2f} s CPU; SR {path.stat().st_size / 1e6:.2f} MB, {_items(sr.ContentSequence)} content "
              "items")


if __name__ == "__main__":
    main()
