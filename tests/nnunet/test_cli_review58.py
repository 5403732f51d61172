"""Hostile review 58 of ``monai-unc nnunet-predict``: a second ``-device cuda`` run in one process."""

from __future__ import annotations

import argparse

import pytest
import torch

pytest.importorskip("nnunetv2")

from monai_unc.nnunet import cli, predictor  # noqa: E402


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="monai-unc")
    cli.add_parser(parser.add_subparsers())
    return cli.run(parser.parse_args(argv))


def test_a_second_cuda_run_in_one_process_is_not_refused_by_torch(tmp_path, monkeypatch, capsys):
    """``run()`` is called in-process (``monai_unc.cli.main``): with ``-device cuda`` it set torch's inter-op threads
    as stock ``nnUNetv2_predict`` does, which torch allows once per process, so the second call failed with torch's
    ``RuntimeError: Error: cannot set number of interop threads ...`` (a traceback) before anything was predicted."""
    (tmp_path / "model").mkdir()
    (tmp_path / "in").mkdir()
    monkeypatch.setattr(cli, "check_device", lambda device: None)  # no GPU here: the run stops before using one
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)  # nnU-Net sets it

    def stop(self, *args, **kwargs):
        raise ValueError("stopped before the model is loaded")

    monkeypatch.setattr(predictor.UncertaintyPredictor, "initialize_from_trained_model_folder", stop)
    threads = torch.get_num_threads()
    argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-m", str(tmp_path / "model"),
            "-device", "cuda", "-f", "0"]
    assert _run(argv) == 2
    assert _run(argv) == 2
    assert capsys.readouterr().err.count("stopped before the model is loaded") == 2
    assert torch.get_num_threads() == threads
