"""MONAI's ``MetricsSaver`` writes the per-case details of our handlers with columns that are classes.

Found by review: ``CalibrationHandler`` kept its per-case values as one ``(n_cases, len(metrics))`` table under the
handler's name, so ``MetricsSaver(metric_details="*")`` wrote ``calib_raw.csv`` with the ECE, the NLL, ... labelled
``class0``, ``class1``, ... and a ``mean`` column averaging an ECE with an NLL. MONAI's convention is one details
entry per metric (the key of its value in ``engine.state.metrics``) whose columns are classes; each metric now has
its own, ``calib_ece_raw.csv`` and so on.
"""

from __future__ import annotations

import csv
import warnings

import pytest
import torch

pytest.importorskip("ignite")
from ignite.engine import Engine  # noqa: E402
from monai.handlers import MetricsSaver  # noqa: E402

from monai_unc.handlers import CalibrationHandler, QUBraTS  # noqa: E402
from monai_unc.metrics.calibration import ConfidenceHistogram, calibration_metrics  # noqa: E402

METRICS = ("ece", "nll", "classwise_ece")


def _cases(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.softmax(2 * torch.randn(1, 3, 5, 6, 4, generator=g), 1), torch.randint(0, 3, (1, 1, 5, 6, 4),
                                                                                       generator=g))
            for _ in range(n)]


def _saver(tmp_path, n):
    # MetricsSaver names the rows after the filename_or_obj of each case of a batch
    names = iter(f"case{i}" for i in range(n))
    return MetricsSaver(save_dir=str(tmp_path), metrics="*", metric_details="*",
                        batch_transform=lambda batch: [{"filename_or_obj": next(names)} for _ in batch[0]])


def _read(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_each_calibration_metric_has_its_own_table_of_per_case_values(tmp_path):
    cases = _cases()
    engine = Engine(lambda e, b: b)
    CalibrationHandler(metrics=METRICS).attach(engine, "calib")
    _saver(tmp_path, len(cases)).attach(engine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        engine.run(cases)
    assert not (tmp_path / "calib_raw.csv").exists()  # no table whose "classes" are metrics
    for metric in METRICS:
        rows = _read(tmp_path / f"calib_{metric}_raw.csv")
        assert rows[0] == ["filename", "class0", "mean"], metric
        # the reference: each case's own histogram, scored alone
        expected = [calibration_metrics(ConfidenceHistogram(3).update(p, y), (metric,))[metric] for p, y in cases]
        assert [r[0] for r in rows[1:]] == [f"case{i}" for i in range(len(cases))]
        assert [float(r[1]) for r in rows[1:]] == pytest.approx(expected, abs=1e-4), metric
        assert f"calib_{metric}" in engine.state.metrics  # the same key as the value's


def test_an_empty_epoch_leaves_none_of_a_previous_runs_details(tmp_path):
    engine = Engine(lambda e, b: b)
    CalibrationHandler(metrics=("ece", "nll")).attach(engine, "calib")
    engine.run(_cases(2))
    assert {"calib_ece", "calib_nll"} <= set(engine.state.metric_details)
    with pytest.warns(UserWarning, match="no case was evaluated"):
        engine.run([], max_epochs=1, epoch_length=1)
    assert not {"calib", "calib_ece", "calib_nll"} & set(engine.state.metric_details)


def test_without_details_nothing_is_stored():
    engine = Engine(lambda e, b: b)
    CalibrationHandler(metrics=("ece",), save_details=False).attach(engine, "calib")
    engine.run(_cases(1))
    assert not getattr(engine.state, "metric_details", {})


def test_per_region_details_keep_one_column_per_region(tmp_path):
    """QU-BraTS's details are ``(n_cases, regions)``: MONAI's convention (a column per class, by index)."""
    g = torch.Generator().manual_seed(1)
    pred = torch.rand(2, 3, 6, 6, 6, generator=g)
    label = (torch.rand(2, 3, 6, 6, 6, generator=g) > 0.5).float()
    unc = torch.rand(2, 3, 6, 6, 6, generator=g) * 100
    engine = Engine(lambda e, b: b)
    QUBraTS(output_transform=lambda o: o).attach(engine, "qu")
    _saver(tmp_path, 2).attach(engine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        engine.run([(unc, pred, label)])
    rows = _read(tmp_path / "qu_raw.csv")
    assert rows[0] == ["filename", "class0", "class1", "class2", "mean"]
