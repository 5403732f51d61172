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
    file that no longer existed. Now refused before any data is made or any step is taken; records are now named
    ``<weights>.json`` (``model.pt.json``), and a ``.json`` path would still be another file's record name."""
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
    saved = json.loads((tmp_path / "m.pt.json").read_text())
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
    saved = json.loads((tmp_path / "m.pt.json").read_text())
    assert saved["iterations"] == 1 and saved["batch_size"] == 1 and saved["seed"] == 2
    assert saved["lr"] == pytest.approx(1e-3) and type(record["lr"]) is float and type(record["seed"]) is int
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt", "m.pt.json"]


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


_SMALL_SSN = {"channels": (4, 8), "strides": (2,), "feature_channels": 4, "rank": 2}


@pytest.mark.parametrize("kwargs, error, match", [
    ({"noise_std": 1e300}, ValueError, r"noise_std must be finite in float32"),
    ({"noise_std": 4e38}, ValueError, r"noise_std must be finite in float32"),
    ({"network": {"dropout": True}}, TypeError, r"network\['dropout'\] must be a number in \[0, 1\)"),
    ({"network": {"dropout": 1.0}}, ValueError, r"network\['dropout'\] must be a number in \[0, 1\)"),
    ({"network": {"dropout": -0.1}}, ValueError, r"network\['dropout'\] must be a number in \[0, 1\)"),
    ({"network": {"dropout": "0.1"}}, TypeError, r"network\['dropout'\] must be a number"),
    ({"network": {"num_res_units": -1}}, ValueError, r"network\['num_res_units'\] must be an integer >= 0"),
    ({"network": {"num_res_units": True}}, TypeError, r"network\['num_res_units'\] must be an integer >= 0"),
    ({"network": {"rank": 2.0}}, TypeError, r"network\['rank'\] must be an integer >= 1"),
    ({"network": {"rank": 0}}, ValueError, r"network\['rank'\] must be an integer >= 1"),
    ({"network": {"feature_channels": False}}, TypeError, r"network\['feature_channels'\] must be an integer"),
    ({"network": {"num_classes": 1}}, ValueError, r"network\['num_classes'\] must be an integer >= 2"),
    ({"network": {"in_channels": 0}}, ValueError, r"network\['in_channels'\] must be an integer >= 1"),
    ({"network": {"channels": (4,), "strides": ()}}, ValueError, r"network\['channels'\] must have at least 2"),
    ({"network": {"channels": (4, 0), "strides": (2,)}}, ValueError, r"network\['channels'\]\[1\] must be an integer"),
    ({"network": {"channels": "48", "strides": (2,)}}, TypeError, r"network\['channels'\] must be a sequence"),
    ({"network": {"channels": (4, 8), "strides": (2, 2)}}, ValueError, r"network\['strides'\] must have one stride"),
    ({"network": {"channels": (4, 8), "strides": (True,)}}, TypeError, r"network\['strides'\]\[0\] must be an int"),
    ({"network": {"epsilon": 1e300}}, ValueError, r"network\['epsilon'\] must be a positive number"),
    ({"network": {"epsilon": True}}, TypeError, r"network\['epsilon'\] must be a positive number"),
    ({"network": {"init_variance": 0.0}}, ValueError, r"network\['init_variance'\] must be a positive number"),
    ({"network": {"mask": "yes"}}, TypeError, r"network\['mask'\] must be a dict"),
    ({"network": {"mask": {"smooth": 2}}}, ValueError, r"network\['mask'\]: smooth must be an odd integer"),
    ({"network": {"mask": {"channel": 1}}}, ValueError, r"network\['mask'\]\['channel'\] must be below in_channels"),
    ({"network": {"mask": {"radius": 1}}}, ValueError, r"network\['mask'\] has unknown settings \['radius'\]"),
    ({"network": {"drop_out": 0.1}}, ValueError, r"network has unknown settings \['drop_out'\]"),
    ({"network": [("rank", 2)]}, TypeError, "network must be a dict"),
    ({"shape": (30, 30)}, ValueError, r"shape must have every axis a multiple of 4 \(the product of the network's "
                                      r"strides \[2, 2\]"),
    ({"shape": (16, 16), "network": {"channels": (4, 8, 8, 8), "strides": (2, 2, 8)}}, ValueError,
     r"shape must have every axis a multiple of 32"),
    ({"shape": (8, 8, 8, 8)}, ValueError, "shape must be 2D or 3D"),
])
def test_train_ssn_refuses_bad_network_noise_and_shape_before_any_data(monkeypatch, kwargs, error, match):
    """Found by review: ``network={"dropout": True}`` trained a UNet whose dropout layers zeroed every input
    (``p = 1.0``; 1.0 itself was taken too) and ``num_res_units=-1`` was accepted; ``noise_std=1e300`` is finite but
    infinite in float32 and trained to NaN weights, which were saved; ``shape=(30, 30)`` made the data and then
    failed inside MONAI's UNet (the default strides (2, 2) need every axis a multiple of 4)."""
    from monai_unc.data import ssn_training

    def no_data(*args, **kwargs):
        raise AssertionError("data made before the settings were checked")

    monkeypatch.setattr(ssn_training, "make_toy_dataset", no_data)
    with pytest.raises(error, match=match):
        train_ssn(iterations=2, n_cases=1, progress=False, **kwargs)


def test_a_record_network_definition_is_checked_as_train_ssn_checks_it():
    """The ``network_def`` of a training record (``monai-unc infer --network``) is untrusted input: it goes through
    ``build_ssn_network``'s checks, which name the setting."""
    from monai_unc.data import build_ssn_network
    from monai_unc.workflows.models import _instantiate

    with pytest.raises(TypeError, match=r"^dropout must be a number in \[0, 1\), got True"):
        build_ssn_network(spatial_dims=2, dropout=True)
    with pytest.raises(ValueError, match=r"^num_res_units must be an integer >= 0, got -1"):
        build_ssn_network(spatial_dims=2, num_res_units=-1)
    record = {"network_def": {"_target_": "monai_unc.data.build_ssn_network", "spatial_dims": 2, **_SMALL_SSN,
                              "dropout": True}}
    with pytest.raises(ValueError, match=r"cannot build the network.*dropout must be a number in \[0, 1\)"):
        _instantiate(record, "--network")
    record["network_def"]["dropout"] = 0.2
    assert {m.p for m in _instantiate(record, "--network").modules() if isinstance(m, __import__("torch").nn.Dropout)
            } == {0.2}


def test_train_ssn_saves_no_diverged_network(tmp_path):
    """Found by review: a training whose loss went non-finite (NaN weights) ran to the end and saved the network and
    its record; now refused as ``train_tissue_model`` refuses a non-finite loss, and nothing is written."""
    with pytest.raises(ValueError, match="the training loss is not finite at iteration .* not saved"):
        train_ssn(tmp_path / "m.pt", shape=(8, 8), n_cases=1, iterations=6, batch_size=1, num_mc_samples=2,
                  mean_only_iterations=0, lr=1e30, progress=False, network=_SMALL_SSN)
    assert list(tmp_path.iterdir()) == []


def test_save_trained_network_refuses_non_finite_weights(tmp_path):
    """A network whose weights went non-finite (a diverged training) is refused before anything is written."""
    import torch

    from monai_unc.data.model import save_trained_network

    net = torch.nn.Linear(2, 2)
    with torch.no_grad():
        net.bias[1] = float("nan")
    with pytest.raises(ValueError, match=r"non-finite values in bias"):
        save_trained_network(net, {"seed": 0}, tmp_path / "net.pt")
    assert list(tmp_path.iterdir()) == []
