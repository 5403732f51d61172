"""``--device`` other than the CPU or a CUDA GPU the machine has: refused in one line naming the option.

Found by hostile testing: ``monai-unc infer --device mps`` (a torch without MPS) ended in a ``RuntimeError``
traceback once the model was moved (exit 1), and ``--device meta`` failed every case, each with an error of the
sliding window that named no option; ``cuda:<index>`` beyond the machine's GPUs was accepted until CUDA failed.
"""

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc import cli
from monai_unc.workflows import resolve_device


@pytest.mark.parametrize("name", ["meta", "mps", "xpu"])
def test_a_device_the_package_does_not_run_on_is_refused(name):
    with pytest.raises(ValueError, match=f"--device {name}: monai-unc runs on cpu, cuda"):
        resolve_device(name)


def test_a_gpu_index_the_machine_does_not_have_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match=r"--device cuda:2: this machine has 2 CUDA device\(s\), cuda:0 to cuda:1"):
        resolve_device("cuda:2")


def test_the_cpu_is_accepted():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize("name", ["meta", "mps"])
def test_infer_refuses_the_device_in_one_line_before_any_case(tmp_path, capsys, name):
    images = tmp_path / "images"
    images.mkdir()
    nib.save(nib.Nifti1Image(np.zeros((16, 16, 16), np.float32), np.eye(4)), str(images / "c1.nii.gz"))
    out = tmp_path / "pred"
    assert cli.main(["infer", "-i", str(images), "-o", str(out), "--model", "example", "--roi", "16", "--method",
                     "softmax", "--device", name]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--device {name}" in err[0], err
    assert not out.exists() or not list(out.glob("*.nii.gz"))
