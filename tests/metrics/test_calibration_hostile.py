"""Hostile and degenerate input to the calibration metrics (``monai_unc.metrics.calibration``): a metric over
NaN cases, ``ConfidenceHistogram.save`` killed mid-write, corrupt histogram files."""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from monai_unc.metrics.calibration import CalibrationMetric, ConfidenceHistogram
from tests._cases import softmax_case
from tests._paths import ROOT


def test_calibration_metric_with_every_case_nan_is_nan():
    """CalibrationMetric already returned NaN here (its own reductions); pinned so it stays that way."""
    _, p, y = softmax_case((2, 3, 4, 4))
    for reduction in ("mean", "pooled"):
        metric = CalibrationMetric(metrics=("ece", "nll"), min_bin_count=10**6, reduction=reduction)
        metric(p, y)  # no bin reaches the minimum count: every ECE is NaN
        with pytest.warns(UserWarning, match="NaN"):
            out = metric.aggregate()
        assert math.isnan(float(out["ece"])) and math.isfinite(float(out["nll"]))


# ---------------------------------------------------------------------------------------------------------------
# item 5 (and 11): ConfidenceHistogram.save is atomic; load of a corrupt file names the path
# ---------------------------------------------------------------------------------------------------------------
def test_histogram_save_killed_mid_write_leaves_the_old_file_intact(tmp_path):
    _, p, y = softmax_case()
    out_dir, src_dir = tmp_path / "out", tmp_path / "src"
    out_dir.mkdir()
    src_dir.mkdir()
    path = out_dir / "hist.npz"
    old = ConfidenceHistogram(3).update(p, y)
    old.save(path)
    # the histogram the child saves: computed here and loaded there, so that the child (which dies mid-write) only
    # imports and saves, and does not compile the kernels
    g = torch.Generator().manual_seed(1)
    p_new = torch.softmax(torch.randn(1, 3, 6, 6, generator=g), 1)
    src = ConfidenceHistogram(3).update(p_new, torch.zeros(1, 6, 6, dtype=torch.long)).save(src_dir / "new.npz")
    child = textwrap.dedent(
        f"""
        import io, os, sys
        import numpy as np
        from monai_unc.metrics.calibration import ConfidenceHistogram

        real = np.savez_compressed

        def killed_mid_write(file, **arrays):  # write half of a real file, then die like kill -9 (no cleanup)
            buf = io.BytesIO()
            real(buf, **arrays)
            data = buf.getvalue()
            with open(file, "wb") as f:
                f.write(data[: len(data) // 2])
                f.flush()
            os._exit(9)

        np.savez_compressed = killed_mid_write
        ConfidenceHistogram.load({str(src)!r}).save({str(path)!r})
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 9, res.stderr
    loaded = ConfidenceHistogram.load(path)  # the previous file, complete
    assert torch.equal(loaded.counts, old.counts) and torch.equal(loaded.sums, old.sums)
    assert sorted(q.name for q in out_dir.iterdir() if not q.name.startswith(".")) == ["hist.npz"]


def test_histogram_save_appends_npz_and_round_trips(tmp_path):
    _, p, y = softmax_case()
    hist = ConfidenceHistogram(3).update(p, y, case_ids=["a", "b"])
    written = hist.save(tmp_path / "h")
    assert written == tmp_path / "h.npz" and written.is_file()
    back = ConfidenceHistogram.load(written)
    assert back.case_ids == ["a", "b"] and torch.equal(back.counts, hist.counts)
    assert not list(tmp_path.glob(".*partial*"))


@pytest.mark.parametrize(
    "content",
    [b"", b"not a zip file at all", "truncated", "other_npz"],
)
def test_histogram_load_of_a_bad_file_raises_value_error_naming_the_path(tmp_path, content):
    path = tmp_path / "hist.npz"
    if content == "truncated":
        _, p, y = softmax_case()
        ConfidenceHistogram(3).update(p, y).save(path)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif content == "other_npz":
        np.savez(path, a=np.zeros(3))
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match="hist.npz"):
        ConfidenceHistogram.load(path)
