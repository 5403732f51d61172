"""Hostile input for the example trainers (data/training.py, data/ssn_training.py): bad settings refused by name
before any data is loaded or any step is taken, and ``dice_per_class`` against a brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monai_unc.data.ssn_training import train_ssn
from monai_unc.data.training import dice_per_class, train_tissue_model


@pytest.mark.parametrize("kwargs, match", [
    ({"iterations": 0}, "iterations must be a positive integer"),
    ({"iterations": 2.5}, "iterations must be a positive integer"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"batch_size": True}, "batch_size must be a positive integer"),
    ({"lr": 0.0}, "lr must be a positive finite number"),
    ({"lr": float("nan")}, "lr must be a positive finite number"),
    ({"lr": float("inf")}, "lr must be a positive finite number"),
    ({"lr": "0.01"}, "lr must be a positive finite number"),
])
def test_train_tissue_model_refuses_bad_settings_at_once(kwargs, match):
    """Regression: ``iterations=0`` loaded the template and returned an untrained network with a record, as if
    trained; ``batch_size=0`` failed in ``torch.stack`` after loading; an infinite ``lr`` trained to NaN."""
    with pytest.raises(ValueError, match=match):
        train_tissue_model(progress=False, **kwargs)


@pytest.mark.parametrize("lr", [float("inf"), float("nan"), -1.0, 0, True])
def test_train_ssn_refuses_a_non_finite_or_non_positive_lr(lr):
    """Regression: ``lr=inf`` was accepted (it trains to NaN weights)."""
    with pytest.raises(ValueError, match="lr must be a positive finite number"):
        train_ssn(lr=lr, iterations=2, n_cases=1, progress=False)


def test_dice_per_class_brute_force_and_nan_for_absent_classes():
    rng = np.random.default_rng(0)
    pred, label = rng.integers(0, 3, 60), rng.integers(0, 3, 60)
    pred[pred == 2], label[label == 2] = 1, 1  # class 2 absent from both
    with pytest.warns(UserWarning, match="two empty masks"):
        got = dice_per_class(pred, label, 4)
    ref = []
    for c in range(1, 4):
        a, b = pred == c, label == c
        ref.append(math.nan if not a.any() and not b.any() else 2 * (a & b).sum() / (a.sum() + b.sum()))
    np.testing.assert_allclose(got, ref, equal_nan=True)
    mask = rng.uniform(size=60) < 0.5
    with pytest.warns(UserWarning):
        masked = dice_per_class(pred, label, 4, mask=mask)
    a, b = pred[mask] == 1, label[mask] == 1
    assert masked[0] == pytest.approx(2 * (a & b).sum() / (a.sum() + b.sum()))


@pytest.mark.parametrize("kwargs, match", [
    ({"noise_std": -1.0}, "noise_std must be a finite number >= 0"),
    ({"noise_std": float("nan")}, "noise_std must be a finite number >= 0"),
    ({"noise_std": float("inf")}, "noise_std must be a finite number >= 0"),
    ({"noise_std": "0.1"}, "noise_std must be a finite number >= 0"),
    ({"mean_only_iterations": True}, "mean_only_iterations must be a non-negative integer"),
    ({"mean_only_iterations": 1.5}, "mean_only_iterations must be a non-negative integer"),
])
def test_train_ssn_refuses_bad_noise_and_warm_up_at_once(kwargs, match):
    """Regression: a negative or NaN ``noise_std`` trained without noise and recorded the bad value, an infinite one
    trained to NaN losses; ``mean_only_iterations=True`` was taken as 1 and ``1.5`` failed after training."""
    with pytest.raises(ValueError, match=match):
        train_ssn(iterations=2, n_cases=1, progress=False, **kwargs)


@pytest.mark.parametrize("train", [train_ssn, train_tissue_model])
@pytest.mark.parametrize("name", ["model.json", "model.JSON"])
def test_trainers_refuse_a_weights_path_the_record_would_overwrite(tmp_path, monkeypatch, train, name):
    """Found by hostile testing: ``train_ssn("model.json")`` saved the weights to ``model.json`` and then the training
    record to ``model.json`` too (``path.with_suffix(".json")``): the weights were lost, the record kept the digest of a
    file that no longer existed. Now refused before any data is made or any step is taken."""
    from monai_unc.data import ssn_training, training

    def no_data(*args, **kwargs):
        raise AssertionError("data made before the output path was checked")

    monkeypatch.setattr(ssn_training, "make_toy_dataset", no_data)
    monkeypatch.setattr(training, "load_mni152_tissue", no_data)
    with pytest.raises(ValueError, match=r"out_path .* ends in \.json.*overwrite"):
        train(tmp_path / name, iterations=2, progress=False)
    with pytest.raises(ValueError, match="out_path .* is a folder"):
        train(tmp_path, iterations=2, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_save_trained_network_refuses_a_json_path(tmp_path):
    import torch

    from monai_unc.data.model import save_trained_network

    with pytest.raises(ValueError, match=r"path .*net\.json ends in \.json"):
        save_trained_network(torch.nn.Linear(2, 2), {"seed": 0}, tmp_path / "net.json")
    assert not (tmp_path / "net.json").exists()
    path = save_trained_network(torch.nn.Linear(2, 2), {"seed": 0}, tmp_path / "net.pt")
    assert torch.load(path, weights_only=True).keys() == torch.nn.Linear(2, 2).state_dict().keys()


@pytest.mark.parametrize("kwargs, error, match", [
    ({"shape": (8.9, 8)}, ValueError, "shape must be a sequence of integers"),
    ({"shape": "88"}, ValueError, "shape must be a sequence of integers"),
    ({"seed": True}, TypeError, "seed must be an integer"),
    ({"seed": 1.5}, TypeError, "seed must be an integer"),
    ({"seed": -1}, ValueError, "seed must be an integer in"),
    ({"seed": None}, TypeError, "seed must be an integer"),
    ({"progress": "no"}, TypeError, "progress must be True or False"),
    ({"num_mc_samples": 0}, ValueError, "num_mc_samples must be a positive integer"),
    ({"network": {"dropout": float("nan")}}, ValueError, "network must hold JSON values"),
    ({"network": {"rank": object()}}, ValueError, "network must hold JSON values"),
])
def test_train_ssn_refuses_bad_settings_before_any_data(monkeypatch, kwargs, error, match):
    """Found by hostile testing: ``shape=(8.9, 8)`` trained and recorded an (8, 8) task, ``seed=True`` trained with
    seed 1 and recorded ``true``, ``seed=-1`` failed in numpy without naming the argument, ``progress="no"`` showed the
    bar."""
    from monai_unc.data import ssn_training

    def no_data(*args, **kwargs):
        raise AssertionError("data made before the settings were checked")

    monkeypatch.setattr(ssn_training, "make_toy_dataset", no_data)
    with pytest.raises(error, match=match):
        train_ssn(iterations=2, n_cases=1, **{"progress": False, **kwargs})


def test_train_ssn_takes_numpy_settings_and_records_plain_json(tmp_path):
    """Found by hostile testing: ``noise_std=np.float32(0.05)`` or ``num_mc_samples=np.int64(2)`` trained, then
    failed to write the record ("Object of type float32 is not JSON serializable"), after the weights were written;
    ``iterations=np.int64(2)`` and ``lr=np.float32(...)`` were refused."""
    import json

    net, record = train_ssn(
        tmp_path / "m.pt", n_cases=np.int64(2), shape=(np.int64(8), 8), iterations=np.int64(2),
        batch_size=np.int32(2), lr=np.float32(1e-3), num_mc_samples=np.int64(2), noise_std=np.float32(0.05),
        seed=np.int64(3), progress=False,
        network={"channels": (4, np.int64(8)), "strides": (2,), "feature_channels": 4, "rank": np.int64(2)},
    )
    saved = json.loads((tmp_path / "m.json").read_text())
    assert saved["num_mc_samples"] == 2 and saved["noise_std"] == pytest.approx(0.05) and saved["seed"] == 3
    assert saved["network"]["channels"] == [4, 8] and saved["network"]["rank"] == 2
    assert record["network"] == saved["network"] and net.head.rank == 2


@pytest.mark.parametrize("kwargs, error, match", [
    ({"seed": True}, TypeError, "seed must be an integer"),
    ({"seed": 1.5}, TypeError, "seed must be an integer"),
    ({"seed": -1}, ValueError, "seed must be an integer in"),
    ({"seed": 2**32}, ValueError, r"seed must be an integer in \[0, 2\*\*32\)"),
    ({"progress": "no"}, TypeError, "progress must be True or False"),
    ({"iterations": np.float64(2.0)}, ValueError, "iterations must be a positive integer"),
    ({"lr": np.float32("nan")}, ValueError, "lr must be a positive finite number"),
])
def test_train_tissue_model_refuses_bad_seed_and_progress_before_any_data(monkeypatch, kwargs, error, match):
    """Found by hostile testing: ``seed=True`` trained with seed 1 and recorded ``true``, ``seed=1.5`` and
    ``seed=2**32`` failed in numpy without naming the argument, ``progress="no"`` showed the bar."""
    from monai_unc.data import training

    def no_data(*args, **kwargs):
        raise AssertionError("data loaded before the settings were checked")

    monkeypatch.setattr(training, "load_mni152_tissue", no_data)
    with pytest.raises(error, match=match):
        train_tissue_model(**{"iterations": 2, "progress": False, **kwargs})


def test_train_tissue_model_takes_numpy_settings_and_writes_the_record(tmp_path):
    """Found by hostile testing: ``iterations=np.int64(1)`` trained, wrote the weights and then failed to write the
    record ("Object of type int64 is not JSON serializable"): a ``.pt`` without its ``.json``; ``lr=np.float32(...)``
    was refused."""
    import json

    net, record = train_tissue_model(tmp_path / "m.pt", iterations=np.int64(1), batch_size=np.int32(1),
                                     lr=np.float32(1e-3), seed=np.int64(2), progress=False)
    saved = json.loads((tmp_path / "m.json").read_text())
    assert saved["iterations"] == 1 and saved["batch_size"] == 1 and saved["seed"] == 2
    assert saved["lr"] == pytest.approx(1e-3) and type(record["lr"]) is float and type(record["seed"]) is int
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.pt"]


def test_save_trained_network_writes_nothing_for_a_record_json_cannot_write(tmp_path):
    """Found by hostile testing: the weights were written first, so a record JSON could not write left the ``.pt``
    without its ``.json``; now refused, naming the record, before anything is written."""
    import torch

    from monai_unc.data.model import save_trained_network

    with pytest.raises(TypeError, match="record must hold JSON values"):
        save_trained_network(torch.nn.Linear(2, 2), {"seed": np.int64(0)}, tmp_path / "net.pt")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("n_raters", [True, 0, 1.0])
def test_train_ssn_refuses_a_non_integer_rater_count(monkeypatch, n_raters):
    """Found by hostile testing: ``n_raters=True`` trained with one rater and recorded "True raters"."""
    from monai_unc.data import ssn_training

    def no_data(*args, **kwargs):
        raise AssertionError("data made before the settings were checked")

    monkeypatch.setattr(ssn_training, "make_toy_dataset", no_data)
    with pytest.raises(ValueError, match="n_raters must be a positive integer"):
        train_ssn(iterations=2, n_cases=1, progress=False, n_raters=n_raters)
