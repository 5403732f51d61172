"""``monai-unc infer --method ssn`` / ``ssn+mcdropout`` on a tiny trained Stochastic Segmentation Network."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc import cli
from monai_unc.data import train_ssn
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.inferers import MCDropoutSource, SSNInferer, SSNSource, UncertaintyInferer
from monai_unc.io import list_image_cases
from monai_unc.networks import SSNNetwork
from monai_unc.workflows.factory import build_inferer
from monai_unc.workflows.infer import load_image_case
from monai_unc.workflows.models import load_network
from tests._paths import ROOT

ARCH = {"channels": [4, 8], "strides": [2], "num_res_units": 0, "feature_channels": 4, "rank": 3, "dropout": 0.2,
        "init_variance": 0.3, "mask": None}


@pytest.fixture(scope="module")
def ssn(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("ssn_cli")
    paths = write_toy_cohort(root / "data", n_cases=2, shape=(16, 16, 16), predictions=False)
    net, _ = train_ssn(root / "ssn.pt", n_cases=4, shape=(16, 16, 16), iterations=3, batch_size=2, num_mc_samples=4,
                       network=ARCH, seed=0)
    return {"images": paths["images"], "root": root, "net": net, "ckpt": root / "ssn.pt", "spec": root / "ssn.pt.json"}


def _infer(s: dict, out: Path, method: str, samples: int = 4) -> int:
    return cli.main(["infer", "-i", str(s["images"]), "-o", str(out), "--network", str(s["spec"]), "--checkpoint",
                     str(s["ckpt"]), "--method", method, "--samples", str(samples), "--quiet"])


def _direct(s: dict, inferer) -> list[tuple[str, dict]]:
    net = s["net"].eval()
    out = []
    for case in list_image_cases(s["images"]):
        image, _ = load_image_case(case)
        out.append((case.case_id, inferer(torch.from_numpy(image)[None].float(), net)))
    return out


def _map(folder: Path, case: str, key: str) -> np.ndarray:
    return np.asarray(nib.load(str(folder / f"{case}_{key}.nii.gz")).dataobj, dtype=np.float32)


@pytest.mark.slow
def test_infer_ssn_writes_aleatoric_maps_equal_to_ssn_inferer(ssn, tmp_path):
    out = tmp_path / "ssn"
    assert _infer(ssn, out, "ssn") == 0
    direct = _direct(ssn, SSNInferer(num_samples=4, seed=0))
    assert len(direct) == 2
    for case, ref in direct:
        record = json.loads((out / f"{case}.json").read_text())
        assert record["mi_meaning"] == "aleatoric" and record["num_samples"] == 4
        for f in record["files"]:
            assert (out / f).is_file()
        mi = _map(out, case, "mutual_information")
        assert mi.max() > 1e-3  # latent draws disagree
        for key in ("predictive_entropy", "expected_entropy", "mutual_information"):
            np.testing.assert_allclose(_map(out, case, key), ref[key][0, 0].numpy(), atol=1e-5)
        np.testing.assert_array_equal(_map(out, case, "seg"), ref["pred"][0].argmax(0).numpy())


@pytest.mark.slow
def test_infer_ssn_plus_mcdropout_is_epistemic(ssn, tmp_path):
    out = tmp_path / "both"
    assert _infer(ssn, out, "ssn+mcdropout", samples=3) == 0
    inferer = UncertaintyInferer([MCDropoutSource(3), SSNSource(3, marginalize=True)], seed=0)
    for case, ref in _direct(ssn, inferer):
        record = json.loads((out / f"{case}.json").read_text())
        assert record["mi_meaning"] == "epistemic" and record["num_samples"] == 3
        np.testing.assert_allclose(_map(out, case, "mutual_information"), ref["mutual_information"][0, 0].numpy(),
                                   atol=1e-5)
        assert _map(out, case, "mutual_information").max() > 0  # dropout masks disagree
    # the aleatoric part is in the expected entropy (of the latent-averaged predictions)
    assert _map(out, case, "expected_entropy").mean() > 0


def test_method_ssn_needs_an_ssn_network(tmp_path, capsys):
    paths = write_toy_cohort(tmp_path / "data", n_cases=1, shape=(16, 16, 16), predictions=False)
    spec = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1, "out_channels": 2,
            "channels": [4, 8], "strides": [2], "num_res_units": 0}
    from monai.networks.nets import UNet

    ckpt = tmp_path / "unet.pt"
    torch.save(UNet(**{k: v for k, v in spec.items() if k != "_target_"}).state_dict(), ckpt)
    code = cli.main(["infer", "-i", str(paths["images"]), "-o", str(tmp_path / "out"), "--network", json.dumps(spec),
                     "--checkpoint", str(ckpt), "--method", "ssn", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "--method ssn" in err and "not a Stochastic Segmentation Network" in err
    with pytest.raises(ValueError, match="softmax"):
        build_inferer("ssn+softmax")
    with pytest.raises(ValueError, match="twice"):
        build_inferer("ssn+ssn")
    assert isinstance(build_inferer("ssn", samples=5).sources[0], SSNSource)
    src = build_inferer("ssn+mcdropout", samples=5).sources
    assert [type(s) for s in src] == [SSNSource, MCDropoutSource] and src[0].marginalize and len(src[0]) == 1


def test_bundle_train_ssn_config_is_a_network_spec(tmp_path):
    from monai.bundle import ConfigParser

    config = ROOT / "bundles" / "toy_uncertainty" / "configs" / "train_ssn.json"
    parser = ConfigParser()
    parser.read_config(str(config))
    torch.manual_seed(0)
    ckpt = tmp_path / "model.pt"  # what the bundle's CheckpointSaver writes: the network's state dict
    torch.save(parser.get_parsed_content("network_def").state_dict(), ckpt)
    model = load_network(network=str(config), checkpoints=[str(ckpt)])
    assert isinstance(model.network, SSNNetwork) and model.network.head.rank == 5 and model.spatial_dims == 3
    with pytest.raises(ValueError, match="network_def"):
        load_network(network=json.dumps({"foo": 1}), checkpoints=[str(ckpt)])


def test_demo_refuses_ssn_before_any_work(tmp_path, capsys):
    assert cli.main(["demo", "--method", "ssn", "--output", str(tmp_path / "demo"), "--quiet"]) == 2
    assert "not a Stochastic Segmentation Network" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()
