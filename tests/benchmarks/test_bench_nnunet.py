"""The end-to-end nnU-Net benchmark runs in CI on one tiny case: stock ``nnUNetv2_predict`` and ``monai-unc
nnunet-predict`` through their own entry points, the split printed, and the script's check that both wrote the
same segmentation passes (it raises otherwise)."""

import os
import re
import subprocess
import sys

import pytest

from tests._paths import ROOT

pytest.importorskip("nnunetv2")


@pytest.mark.slow
def test_end_to_end_mode_runs_and_finds_the_segmentations_identical():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_nnunet.py"), "--end-to-end", "--e2e-config", "tiny",
         "--e2e-cases", "1", "--repeats", "1", "--e2e-workers", "1"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "segmentations identical to stock's" in proc.stdout
    rows = {m.group(1): [float(x) for x in m.group(2).split(" | ")[:6]]
            for m in re.finditer(r"^\| (stock|ours) \| ([^\n]*) \|", proc.stdout, re.MULTILINE)}
    assert set(rows) == {"stock", "ours"}, proc.stdout
    for total, _, startup, predict, _, rest in rows.values():
        assert total > 0 and startup > 0 and predict > 0
        assert abs(startup + predict + rest - total) < 1e-6 * total + 0.02  # the split adds up to the total
