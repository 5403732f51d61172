"""``monai-unc infer --threads`` above the CPUs the process may use: cut to them, with a warning line.

Found by hostile testing: ``--threads 100000`` crashed the process with a segmentation fault (OpenMP could not create
the threads).
"""

import os

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc import cli
from monai_unc.workflows import infer_command


def _cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    nib.save(nib.Nifti1Image(np.zeros((16, 16, 16), np.float32), np.eye(4)), str(folder / "c1.nii.gz"))
    return folder


def test_more_threads_than_cpus_are_cut_with_a_warning(images, tmp_path, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    assert cli.main(["infer", "-i", str(images), "-o", str(tmp_path / "p"), "--model", "example", "--roi", "16",
                     "--method", "softmax", "--quiet", "--threads", "100000"]) == 0
    assert calls and calls[0] == _cpus()
    err = capsys.readouterr().err
    assert f"warning: --threads 100000 is more than the {_cpus()} CPU(s)" in err


def test_threads_within_the_cpus_are_kept(images, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    infer_command(images, tmp_path / "p", device="cpu", threads=1, progress=False, model="example", roi=16,
                  method="softmax")
    assert calls[:1] == [1]


@pytest.mark.parametrize("threads", [0, -2, 2.5, True])
def test_threads_that_are_not_a_positive_integer_are_refused(images, tmp_path, threads):
    with pytest.raises(ValueError, match="--threads"):
        infer_command(images, tmp_path / "p", device="cpu", threads=threads, progress=False, model="example",
                      roi=16, method="softmax")


def test_the_callers_thread_count_is_restored(images, tmp_path, monkeypatch):
    """``infer_command(threads=1)`` from Python left torch on one thread for the rest of the process (the CLI's
    process ends with the command; a notebook's or service's does not), as nnU-Net's calibration already restores."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    seen = []
    try:
        infer_command(images, tmp_path / "p", device="cpu", threads=1, progress=False, model="example", roi=16,
                      method="softmax", finish=lambda statuses: seen.append(torch.get_num_threads()))
        assert seen == [1] and torch.get_num_threads() == 2
        monkeypatch.setattr("monai_unc.workflows.infer_plan.run_command", lambda *a, **k: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            infer_command(images, tmp_path / "q", device="cpu", threads=1, progress=False, model="example")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
