"""``monai-unc infer --samples 1`` with a sampling method: the spread maps are 0 everywhere, said with a warning
(hostile review 55: they were written without a word, reading as "no model uncertainty")."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.networks.nets import UNet

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from tests._cases import TOY_NET


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("one_sample")
    paths = write_toy_cohort(root / "data", n_cases=1, shape=(12, 12, 12))
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), root / "net.pt")
    (root / "net.json").write_text(json.dumps(TOY_NET))
    return root, paths["images"]


def _infer(root, images, out, samples: str) -> list[str]:
    return ["infer", "-i", str(images), "-o", str(out), "--network", str(root / "net.json"), "--checkpoint",
            str(root / "net.pt"), "--method", "mcdropout", "--samples", samples, "-q"]


def test_one_sample_warns_that_mutual_information_is_zero(toy, tmp_path, capsys):
    root, images = toy
    assert cli.main(_infer(root, images, tmp_path / "one", "1")) == 0
    err = capsys.readouterr().err.strip().splitlines()
    mi = np.asarray(nib.load(next((tmp_path / "one").glob("*_mutual_information.nii.gz"))).dataobj)
    assert mi.max() == 0.0  # the reason for the warning
    assert len(err) == 1 and err[0].startswith("monai-unc infer: warning: --samples 1 with --method 'mcdropout'"), err
    assert "mutual_information is 0 everywhere" in err[0]


def test_two_samples_do_not_warn(toy, tmp_path, capsys):
    root, images = toy
    assert cli.main(_infer(root, images, tmp_path / "two", "2")) == 0
    assert capsys.readouterr().err.strip() == ""
