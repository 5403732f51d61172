"""Option sweep of ``monai-unc calibrate`` (:func:`monai_unc.workflows.calibrate.run_calibrate`): every option is
checked before the model loads; one line naming it, exit 2, nothing written."""

from __future__ import annotations

import json

import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.workflows import calibrate as calibrate_module
from monai_unc.workflows.calibrate import run_calibrate
from tests._cases import TOY_NET


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from monai.networks.nets import UNet

    root = tmp_path_factory.mktemp("calib_sweep")
    paths = write_toy_cohort(root / "data", n_cases=2, shape=(16, 16, 16), predictions=False)
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), root / "net.pt")
    (root / "net.json").write_text(json.dumps(TOY_NET))
    return {"root": root, "images": paths["images"], "labels": paths["labels"]}


def _argv(toy, out, *extra):
    return ["calibrate", "-i", str(toy["images"]), "-l", str(toy["labels"]), "-o", str(out), "--network",
            str(toy["root"] / "net.json"), "--checkpoint", str(toy["root"] / "net.pt"), "--device", "cpu",
            "--max-steps", "5", "-q", *extra]


def _no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(calibrate_module, "load_network", refuse)


def test_overlap_without_roi_is_refused_before_the_model_loads(toy, tmp_path, capsys, monkeypatch):
    """Issue: ``calibrate --overlap 0.5`` without ``--roi`` ran the whole image through the network at once and
    wrote a checkpoint, the overlap ignored without a word."""
    _no_model(monkeypatch)
    out = tmp_path / "o" / "cal.pt"
    rc = cli.main(_argv(toy, out, "--overlap", "0.5"))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and "--overlap 0.5" in err[0] and "--roi" in err[0], (rc, err)
    assert not out.parent.exists()


@pytest.mark.parametrize("overlap", [1.5, float("nan"), -0.1, "0.5"])
def test_run_calibrate_refuses_an_overlap_out_of_range_before_the_model_loads(toy, tmp_path, monkeypatch, overlap):
    """Issue: ``run_calibrate(overlap=1.5, roi=16)`` failed in MONAI on the first case, after the model loaded, and
    ``overlap=nan`` was accepted."""
    _no_model(monkeypatch)
    out = tmp_path / "o" / "cal.pt"
    with pytest.raises(ValueError, match=r"--overlap must be a number in \[0, 1\)"):
        run_calibrate(toy["images"], toy["labels"], out, network=str(toy["root"] / "net.json"),
                      checkpoint=str(toy["root"] / "net.pt"), roi=16, overlap=overlap, progress=False)
    assert not out.parent.exists()


def test_overlap_with_roi_and_the_default_without_roi_still_run(toy, tmp_path):
    out, record = run_calibrate(toy["images"], toy["labels"], tmp_path / "cal.pt",
                                network=str(toy["root"] / "net.json"), checkpoint=str(toy["root"] / "net.pt"),
                                roi=16, overlap=0.5, max_steps=5, progress=False)
    assert out.is_file() and len(record["temperature"]) == 1
