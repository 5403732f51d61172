"""``--overlap`` and ``--sw-batch-size`` without ``--roi``: refused before the model loads, naming the option.

Found by hostile testing: without ``--roi`` the whole image goes through the network at once, so both options were
ignored without a word; ``infer.json`` recorded the overlap and a resume compared it, so the same command without
``--overlap 0.5`` was refused as "a run with different settings (overlap)" (or, with ``--overwrite``, predicted every
case again to identical maps).
"""

import nibabel as nib
import numpy as np
import pytest

from monai_unc import cli
from monai_unc.workflows import prepare_infer


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    nib.save(nib.Nifti1Image(np.random.default_rng(0).random((16, 16, 16)).astype(np.float32), np.eye(4)),
             str(folder / "c1.nii.gz"))
    return folder


@pytest.mark.parametrize("option, value", [("--overlap", "0.5"), ("--overlap", "0"), ("--sw-batch-size", "4")])
def test_a_window_option_without_roi_is_refused_naming_it(images, tmp_path, capsys, option, value):
    out = tmp_path / "pred"
    assert cli.main(["infer", "-i", str(images), "-o", str(out), "--model", "example", "--method", "softmax",
                     option, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{option} {value}" in err[0] and "--roi" in err[0], err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("kw", [{"overlap": 0.5}, {"sw_batch_size": 2}, {"overlap": 1.5}, {"overlap": "0.5"},
                                {"overlap": float("nan")}, {"overlap": True}])
def test_prepare_infer_refuses_window_options_without_roi(images, kw):
    with pytest.raises(ValueError, match="--overlap|--sw-batch-size"):
        prepare_infer(images, model="example", method="softmax", **kw)


def test_an_overlap_out_of_range_is_refused_with_roi(images):
    with pytest.raises(ValueError, match="--overlap"):
        prepare_infer(images, model="example", method="softmax", roi=8, overlap="0.5")


def test_the_window_options_with_roi_and_the_defaults_without_it_are_accepted(images):
    plan = prepare_infer(images, model="example", method="softmax", roi=8, overlap=0.5, sw_batch_size=2)
    assert plan.settings.overlap == 0.5 and plan.settings.sw_batch_size == 2
    plan = prepare_infer(images, model="example", method="softmax")
    assert plan.settings.roi is None and plan.settings.overlap == 0.25
