"""Review 54 of ``calibrate_model_folder``: a truthy string is no ``use_mirroring``, a device name is a device, and
the scaler's activation and ignore index are refused in ``scaler_kwargs`` before anything is predicted."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("nnunetv2")

import monai_unc.nnunet.calibrate as calibrate_module  # noqa: E402
from tests.nnunet.test_calibrate_hostile import write_preprocessed  # noqa: E402
from tests.nnunet.test_predictor_hostile import write_model_folder  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def setup(tmp_path):
    return {"model": write_model_folder(tmp_path / "model", folds=(0,)), "pre": write_preprocessed(tmp_path / "pre"),
            "out": tmp_path / "calibrated"}


def _calibrate(setup, **kw):
    kw = {"use_folds": (0,), "use_mirroring": False, "preprocessed_dir": setup["pre"], "max_steps": 5, **kw}
    return calibrate_model_folder(setup["model"], setup["out"], **kw)


calibrate_model_folder = calibrate_module.calibrate_model_folder


@pytest.mark.parametrize("kw, error, match", [
    # "no" is truthy: the fit ran on mirrored logits (t 0.75 instead of 0.42 on this model)
    ({"use_mirroring": "no"}, TypeError, "use_mirroring must be True or False"),
    ({"use_mirroring": 0}, TypeError, "use_mirroring must be True or False"),
    ({"device": 0}, TypeError, "device must be a torch.device"),
    ({"device": "gpu0"}, ValueError, "device must be a torch device or its name"),
    # activation="sigmoid" was "got multiple values for keyword argument" after fold 0's cases were predicted
    ({"activation": "sigmoid"}, ValueError, "scaler_kwargs must not set activation"),
    ({"ignore_index": 3}, ValueError, "scaler_kwargs must not set ignore_index"),
])
def test_bad_settings_are_refused_by_name_before_anything_is_predicted(kw, error, match, setup, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("predicted before the arguments were checked")

    monkeypatch.setattr(calibrate_module, "_calibrate_folds", never)
    with pytest.raises(error, match=match):
        _calibrate(setup, **kw)
    assert not setup["out"].exists()


def test_a_device_name_is_a_device(setup):
    """``device="cpu"`` failed in nnU-Net's predictor with "'str' object has no attribute 'type'"."""
    by_name = _calibrate(setup, device="cpu")
    assert by_name["0"]["num_cases"] == 2 and setup["out"].is_dir()
    again = calibrate_model_folder(setup["model"], setup["out"], use_folds=(0,), use_mirroring=False,
                                   preprocessed_dir=setup["pre"], max_steps=5, device=torch.device("cpu"),
                                   overwrite=True)
    assert again["0"]["temperature"] == by_name["0"]["temperature"]
