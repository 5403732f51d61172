"""Review 64: ``nnunet-calibrate`` on a loaded CPU. With torch's two threads and three busy processes beside it, 10
tiny cases took 49-68 s, 29-46 s with one thread (OpenMP threads waiting for each other on shared cores;
benchmarks/README.md): ``num_threads`` / ``--threads`` sets the threads of the prediction and the fit, and restores
the caller's."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("nnunetv2")

from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor  # noqa: E402

import monai_unc.nnunet.calibrate as calibrate_module  # noqa: E402
from monai_unc.temperature import TemperatureScaler  # noqa: E402
from tests.nnunet.test_calibrate_hostile import write_preprocessed  # noqa: E402
from tests.nnunet.test_predictor_hostile import write_model_folder  # noqa: E402


@pytest.fixture
def setup(tmp_path):
    return {"model": write_model_folder(tmp_path / "model", folds=(0,)), "pre": write_preprocessed(tmp_path / "pre"),
            "out": tmp_path / "calibrated"}


def _calibrate(setup, out, **kw):
    return calibrate_module.calibrate_model_folder(setup["model"], out, use_folds=(0,), use_mirroring=False,
                                                   preprocessed_dir=setup["pre"], max_steps=5, **kw)


def test_threads_of_the_prediction_and_the_fit_and_the_caller_s_restored(setup, tmp_path, monkeypatch):
    seen: dict[str, list[int]] = {"predict": [], "fit": []}
    predict, fit = nnUNetPredictor.predict_logits_from_preprocessed_data, TemperatureScaler.fit

    def spy_predict(self, data):
        seen["predict"].append(torch.get_num_threads())
        return predict(self, data)

    def spy_fit(self, *args, **kwargs):
        seen["fit"].append(torch.get_num_threads())
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(nnUNetPredictor, "predict_logits_from_preprocessed_data", spy_predict)
    monkeypatch.setattr(TemperatureScaler, "fit", spy_fit)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _calibrate(setup, tmp_path / "one", num_threads=1)
        assert seen == {"predict": [1, 1], "fit": [1]}  # each case predicted once, one fit, on one thread
        assert torch.get_num_threads() == 2  # the caller's setting
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow  # two calibrations of the toy model (~4 s on two shared cores)
def test_one_thread_fits_the_same_temperature_to_float_rounding(setup, tmp_path):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        default = _calibrate(setup, tmp_path / "default")
        one = _calibrate(setup, tmp_path / "one", num_threads=1)
    finally:
        torch.set_num_threads(before)
    assert one["0"]["temperature"] == pytest.approx(default["0"]["temperature"], rel=1e-6)


@pytest.mark.parametrize("value", [0, 1.5, True, "2"])
def test_bad_threads_are_refused_by_name_before_anything_is_predicted(value, setup, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("predicted before the arguments were checked")

    monkeypatch.setattr(calibrate_module, "_calibrate_folds", never)
    with pytest.raises(ValueError, match="num_threads must be a positive integer"):
        _calibrate(setup, setup["out"], num_threads=value)
    assert not setup["out"].exists()


def test_more_threads_than_cpus_are_the_cpus_with_a_warning(setup, monkeypatch):
    monkeypatch.setattr(calibrate_module.os, "sched_getaffinity", lambda pid: {0}, raising=False)  # Linux only
    with pytest.warns(UserWarning, match="num_threads 64 is more than the 1 CPU"):
        assert calibrate_module._check_threads(64, "num_threads") == 1


def test_cli_passes_threads_and_refuses_a_bad_count_in_one_line(tmp_path, monkeypatch, capsys):
    from monai_unc import cli

    seen = {}

    def fake(model, out, **kwargs):
        seen.update(kwargs)
        return {"0": {"temperature": [1.5], "steps": 3, "converged": True}}

    monkeypatch.setattr(calibrate_module, "calibrate_model_folder", fake)
    argv = ["nnunet-calibrate", "-m", str(tmp_path), "-o", str(tmp_path / "out"), "-f", "0", "-device", "cpu"]
    assert cli.main(argv) == 0 and seen["num_threads"] is None
    assert cli.main([*argv, "--threads", "1"]) == 0 and seen["num_threads"] == 1
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--threads", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and "--threads" in err[-1]
