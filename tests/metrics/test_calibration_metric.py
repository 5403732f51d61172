"""CalibrationMetric (MONAI), its ignite handler across ranks, reliability diagrams, and the docs example."""

import math
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from monai_unc.handlers.calibration import CalibrationHandler
from monai_unc.metrics.calibration import (
    CALIBRATION_METRICS,
    CalibrationMetric,
    ConfidenceHistogram,
    calibration_metrics,
    reliability_curve,
)
from monai_unc.report.reliability import plot_reliability_diagram
from tests._paths import ROOT
from tests._ranks import free_port

DOCS = ROOT / "docs"


def batches(n_batches=3, batch=2, n_cls=3, side=(10, 12), seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        z = torch.randn(batch, n_cls, *side, generator=g) * 3
        y = torch.randint(0, n_cls, (batch, 1, *side), generator=g)
        out.append((torch.softmax(z, 1), y))
    return out


def test_metric_pooled_and_mean_equal_the_functions():
    data = batches()
    metric = CalibrationMetric(min_bin_count=5)
    for p, y in data:
        metric(p, y)
    probs = torch.cat([p for p, _ in data])
    labels = torch.cat([y for _, y in data])
    hist = ConfidenceHistogram(3).update(probs, labels)
    pooled = metric.aggregate()
    expected = calibration_metrics(hist, min_bin_count=5)
    assert set(pooled) == set(CALIBRATION_METRICS)
    for k, v in expected.items():
        assert pooled[k].item() == pytest.approx(v, abs=1e-13), k
    per_case = calibration_metrics(hist, min_bin_count=5, per_case=True)
    buf = metric.get_buffer()
    assert buf.shape == (6, len(CALIBRATION_METRICS))
    for j, k in enumerate(metric.metrics):
        np.testing.assert_allclose(buf[:, j].numpy(), per_case[k], atol=1e-13)
    mean = metric.aggregate(reduction="mean")
    for k in metric.metrics:
        assert mean[k].item() == pytest.approx(float(np.nanmean(per_case[k])), abs=1e-13)
    assert torch.equal(metric.histogram.counts[0], hist.counts.sum(0))
    metric.reset()
    for reduction in ("pooled", "mean"):  # no case (an empty epoch): NaN with a warning, as the other metrics
        with pytest.warns(UserWarning, match="no case was evaluated"):
            empty = metric.aggregate(reduction=reduction)
        assert list(empty) == list(metric.metrics) and all(math.isnan(float(v)) for v in empty.values())


def test_metric_accepts_onehot_and_lists():
    (p, y), *_ = batches(1)
    onehot = torch.nn.functional.one_hot(y[:, 0], 3).movedim(-1, 1).float()
    a, b, c = CalibrationMetric(metrics="ece"), CalibrationMetric(metrics="ece"), CalibrationMetric(metrics="ece")
    a(p, y)
    b(p, onehot)
    c([p[0], p[1]], [y[0], y[1]])  # decollated channel-first items
    assert a.aggregate()["ece"] == b.aggregate()["ece"] == c.aggregate()["ece"]
    assert CalibrationMetric(metrics=["nll", "brier"]).metrics == ("nll", "brier")
    with pytest.raises(ValueError, match="metrics"):
        CalibrationMetric(metrics=["ece", "auroc"])
    with pytest.raises(ValueError, match="reduction"):
        CalibrationMetric(reduction="median")


def test_handler_records_every_metric():
    from ignite.engine import Engine

    data = batches(n_batches=2)
    engine = Engine(lambda e, b: b)
    CalibrationHandler(metrics=("ece", "nll")).attach(engine, "calib")
    engine.run(data)
    probs = torch.cat([p for p, _ in data])
    labels = torch.cat([y for _, y in data])
    ref = calibration_metrics(ConfidenceHistogram(3).update(probs, labels), ("ece", "nll"))
    assert engine.state.metrics["calib_ece"] == pytest.approx(ref["ece"], abs=1e-13)
    assert engine.state.metrics["calib_nll"] == pytest.approx(ref["nll"], abs=1e-13)
    assert engine.state.metric_details["calib_ece"].shape == engine.state.metric_details["calib_nll"].shape == (4, 1)
    assert "calib" not in engine.state.metric_details


def _rank_worker(rank, world, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        data = batches(n_batches=4, seed=11)
        metric = CalibrationMetric(min_bin_count=3)
        for p, y in data[rank::world]:  # each rank sees half of the batches
            metric(p, y)
        pooled = {k: v.item() for k, v in metric.aggregate().items()}
        per_case = metric.get_buffer()
        if rank == 0:
            torch.save({"pooled": pooled, "per_case": per_case}, Path(out_dir) / "result.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_metric_reduces_across_ranks(tmp_path):
    # fork: the children reuse the imported modules (spawn would re-import torch and MONAI in each)
    torch.multiprocessing.start_processes(
        _rank_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True, start_method="fork"
    )
    result = torch.load(tmp_path / "result.pt")
    data = batches(n_batches=4, seed=11)
    hist = ConfidenceHistogram(3).update(torch.cat([p for p, _ in data]), torch.cat([y for _, y in data]))
    expected = calibration_metrics(hist, min_bin_count=3)
    for k, v in expected.items():
        assert result["pooled"][k] == pytest.approx(v, abs=1e-13), k
    assert result["per_case"].shape == (8, len(CALIBRATION_METRICS))


@pytest.mark.parametrize("kind", ["top", "all_label", "uncertainty", "classwise"])
def test_reliability_diagram(kind, tmp_path):
    probs = torch.cat([p for p, _ in batches()])
    labels = torch.cat([y for _, y in batches()])
    hist = ConfidenceHistogram(3).update(probs, labels)
    boxes = kind != "classwise"
    fig = plot_reliability_diagram(
        hist, kind=kind, n_bins=10, min_bin_count=5, per_case_boxes=boxes, path=tmp_path / "rel.png"
    )
    assert isinstance(fig, Figure) and (tmp_path / "rel.png").stat().st_size > 5000
    ax = fig.axes[0]
    curve = reliability_curve(hist, kind=kind, n_bins=10, min_bin_count=5)
    if kind != "classwise":
        # the first 10 bars are the observed frequencies of the kept bins
        heights = np.array([p.get_height() for p in ax.patches[:10]])
        np.testing.assert_allclose(heights, np.where(curve.kept, curve.frequency, 0.0))
        assert len(fig.axes) == 2  # reliability + counts panel
    else:
        assert len(ax.get_lines()) == 1 + 3  # diagonal + one curve per label
    # probabilities and labels directly; on a given axis
    fig2 = plot_reliability_diagram(probs.numpy(), labels.numpy(), ax=Figure().add_subplot(1, 1, 1))
    assert isinstance(fig2, Figure)
    with pytest.raises(ValueError, match="per_case"):
        plot_reliability_diagram(ConfidenceHistogram(3, per_case=False).update(probs, labels), per_case_boxes=True)


def test_docs_example_runs(tmp_path, monkeypatch):
    text = (DOCS / "calibration.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "docs/calibration.md has no python example"
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        with warnings.catch_warnings():  # found by hostile testing: the example called a deprecated method
            warnings.simplefilter("error", DeprecationWarning)
            exec(compile(code, "docs/calibration.md", "exec"), {"__name__": "__docs__"})


def test_calibration_metric_refuses_decollated_lists_of_different_lengths():
    """MONAI's zip of decollated lists dropped the extra cases without a word: the pooled ECE was that of two of the
    three cases."""
    g = torch.Generator().manual_seed(0)
    probs = list(torch.softmax(torch.randn(3, 2, 6, 6, generator=g), dim=1))
    labels = list(torch.randint(0, 2, (3, 1, 6, 6), generator=g))
    metric = CalibrationMetric(num_classes=2)
    with pytest.raises(ValueError, match="y_pred has 3 items but y has 2"):
        metric(y_pred=probs, y=labels[:2])
    metric(y_pred=probs, y=labels)  # the same lists, of equal lengths
    assert metric.get_buffer().shape[0] == 3


@pytest.mark.parametrize(("backend", "want"), [("nccl", "cuda:0"), ("cpu:gloo,cuda:nccl", "cuda:0"), ("gloo", "cpu")])
def test_a_rank_without_data_puts_its_tables_on_the_gpu_under_any_nccl_group(monkeypatch, backend, want):
    """Found by the review of the GPU paths: only a backend named exactly ``"nccl"`` put a rank's empty tables on the
    GPU; under ``cpu:gloo,cuda:nccl`` (torch's default on a GPU machine, and the package's own) they stayed on the
    CPU while the other ranks gathered CUDA tables, one gather on two backends."""
    import torch.distributed as dist

    from monai_unc.metrics.calibration import CalibrationMetric

    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert CalibrationMetric()._table_device() == torch.device(want)
