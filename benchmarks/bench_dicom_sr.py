"""What the Comprehensive 3D SR of a case of several input series costs (``dicom-export`` of a multi-channel model).

    python benchmarks/bench_dicom_sr.py                       # 2 series x 150 slices, 10 segments
    python benchmarks/bench_dicom_sr.py --series 4 --slices 60

Workload: ``--series`` synthetic single-frame MR series of one patient and frame of reference (16 x 16 x
``--slices``; ``write_series``, not timed), a label map of ``--segments`` classes written as a binary SEG on the first
series referencing the others (not timed), then the SR with one volume per segment (``write_measurement_report``
with ``other_series``), timed, best of ``--repeat``. Printed: wall and CPU seconds, the SR's bytes and its content
items.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pydicom

from monai_unc.io.dicom import default_segment, read_series, write_measurement_report, write_segmentation, write_series


def _items(seq) -> int:
    return sum(1 + _items(item.get("ContentSequence", [])) for item in seq)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=2)
    parser.add_argument("--slices", type=int, default=150)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    shape = (16, 16, args.slices)
    affine = np.diag([1.0, 1.0, 2.0, 1.0])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        extra = {"FrameOfReferenceUID": "1.2.826.0.1.3680043.10.763.2"}
        series = []
        for k in range(args.series):
            write_series(np.zeros(shape), affine, root / f"s{k}", modality="MR",
                         study_uid="1.2.826.0.1.3680043.10.763.1", extra=extra)
            series.append(read_series(root / f"s{k}", pixels=False))
        labels = (np.arange(np.prod(shape)).reshape(shape) % (args.segments + 1)).astype(np.uint16)
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
        sr = pydicom.dcmread(path)
        print(f"{args.series} series x {args.slices} slices, {args.segments} segments: SR {best:.2f} s wall, "
              f"{best_cpu:.2f} s CPU, {path.stat().st_size / 1e6:.2f} MB, {_items(sr.ContentSequence)} content items")


if __name__ == "__main__":
    main()
