"""Review 67 (late): ``infer`` refuses a ``--regions`` spec that ``--save-samples`` cannot use before any model is
loaded."""

from __future__ import annotations

import pytest

from monai_unc import cli
from monai_unc.io import CaseError
from monai_unc.workflows.prepare import prepare_infer

BACKGROUND_REGION = '{"all": [0, 1, 2], "core": [1]}'


def test_save_samples_refuses_a_region_holding_label_0_when_the_options_are_read(tmp_path, capsys):
    """regions_to_labels refuses label 0 in a region: infer failed at the first case, after the model was loaded.
    The checkpoint does not exist: an error about it would mean the model was loaded first."""
    images = tmp_path / "images"
    images.mkdir()
    missing = tmp_path / "no.pt"
    with pytest.raises(ValueError, match=r"^--regions\['all'\] holds label 0, the background") as info:
        prepare_infer(images, model="example", checkpoint=str(missing), activation="sigmoid", save_samples=True,
                      regions=BACKGROUND_REGION)
    assert info.value.parameter == "regions"
    argv = ["infer", "-i", str(images), "-o", str(tmp_path / "out"), "--model", "example", "--activation", "sigmoid",
            "--regions", BACKGROUND_REGION, "--save-samples", "--method", "mcdropout", "-q"]
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--regions['all'] holds label 0" in err[0], err
    assert not (tmp_path / "out").exists()


def test_without_save_samples_the_spec_is_not_refused_up_front(tmp_path):
    """No label maps of samples are made: the spec is left to the channel check (the network's, further on)."""
    images = tmp_path / "images"
    images.mkdir()
    (images / "c_0000.nii.gz").write_bytes(b"")
    with pytest.raises(CaseError, match="the file is empty"):  # the options passed: the case was read
        prepare_infer(images, model="example", activation="sigmoid", regions=BACKGROUND_REGION)
