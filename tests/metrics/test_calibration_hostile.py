"""Hostile and degenerate input to the calibration metrics (``monai_unc.metrics.calibration``): a metric over
NaN cases, ``ConfidenceHistogram.save`` killed mid-write, corrupt histogram files."""

import io
import math
import os
import warnings

import numpy as np
import pytest
import torch

from monai_unc.io import files as files_module
from monai_unc.io import save_state
from monai_unc.metrics.calibration import CalibrationMetric, ConfidenceHistogram
from tests._cases import softmax_case


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
# item 5 (and 11): save_state of a ConfidenceHistogram is atomic; load of a corrupt file names the path
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "fork"), reason="the child dies mid-write in a forked process (POSIX)")
def test_histogram_save_killed_mid_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    _, p, y = softmax_case()
    path = tmp_path / "hist.npz"
    old = ConfidenceHistogram(3).update(p, y)
    save_state(path, old)
    g = torch.Generator().manual_seed(1)
    new = ConfidenceHistogram(3).update(
        torch.softmax(torch.randn(1, 3, 6, 6, generator=g), 1), torch.zeros(1, 6, 6, dtype=torch.long)
    )
    real, real_blocks = np.savez_compressed, files_module._savez_blocks

    def killed_mid_write(file, **arrays):  # write half of a real file, then die like kill -9 (no cleanup)
        buf = io.BytesIO()
        real(buf, **arrays)
        die_after_half(file, buf.getvalue())

    def killed_mid_block_write(file, arrays, compressed):  # the writer of a per-case histogram (one case at a time)
        buf = io.BytesIO()
        real_blocks(buf, arrays, compressed)
        die_after_half(file, buf.getvalue())

    def die_after_half(file, data):
        with open(file, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
        os._exit(9)

    # a forked child (a process of its own, without a fresh interpreter's imports) saves and dies mid-write
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork of a multi-threaded process
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            # the parent's OpenMP pool does not survive fork: with 2+ threads the child's first parallel op (the
            # state's torch.stack) waited forever on a lock of the parent's pool (libgomp)
            torch.set_num_threads(1)
            monkeypatch.setattr(np, "savez_compressed", killed_mid_write)
            monkeypatch.setattr(files_module, "_savez_blocks", killed_mid_block_write)
            save_state(path, new)
        finally:
            os._exit(1)  # reached only if the save returned or raised
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 9
    loaded = ConfidenceHistogram.load(path)  # the previous file, complete
    assert torch.equal(loaded.counts, old.counts) and torch.equal(loaded.sums, old.sums)
    assert sorted(q.name for q in tmp_path.iterdir() if not q.name.startswith(".")) == ["hist.npz"]


def test_histogram_save_appends_npz_and_round_trips(tmp_path):
    _, p, y = softmax_case()
    hist = ConfidenceHistogram(3).update(p, y, case_ids=["a", "b"])
    written = save_state(tmp_path / "h", hist)
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
        save_state(path, ConfidenceHistogram(3).update(p, y))
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif content == "other_npz":
        np.savez(path, a=np.zeros(3))
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match="hist.npz"):
        ConfidenceHistogram.load(path)
