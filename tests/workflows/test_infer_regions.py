"""``monai-unc infer`` / ``calibrate`` on a region-based (multi-label sigmoid) network: 4D region files, records,
reading them back, per-region temperatures applied by infer; ``window_disagreement`` as a writable measure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.networks.nets import UNet
from scipy.optimize import minimize_scalar

from monai_unc import cli
from monai_unc.io import CaseError, CaseFiles, load_case, read_prediction_regions
from monai_unc.regions import BRATS_REGIONS, label_to_regions
from monai_unc.workflows.factory import build_inferer

SPEC = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1, "out_channels": 3,
        "channels": [4, 8], "strides": [2], "num_res_units": 0, "dropout": 0.2}
SHAPE = (16, 16, 12)
ALL = ["predictive_entropy", "expected_entropy", "mutual_information", "one_minus_max_prob", "variance",
       "window_disagreement"]


def _net(spec=SPEC) -> torch.nn.Module:
    return UNet(**{k: v for k, v in spec.items() if k != "_target_"})


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("regions")
    images, labels, masks = root / "images", root / "labels", root / "masks"
    for d in (images, labels, masks):
        d.mkdir()
    rng = np.random.default_rng(0)
    affine = np.diag([1.5, 1.0, 2.0, 1.0])
    for i in range(2):
        lab = np.zeros(SHAPE, np.int16)
        lab[3:13, 3:13, 2:10] = 2  # oedema
        lab[5:11, 5:11, 3:9] = 1  # core
        lab[7:10, 6 + i : 9 + i, 4:7] = 4  # enhancing
        img = (lab > 0) * 1.0 + 1.0 * rng.standard_normal(SHAPE)  # noisy: no region is separable
        nib.save(nib.Nifti1Image(img.astype(np.float32), affine), images / f"case{i}.nii.gz")
        nib.save(nib.Nifti1Image(lab, affine), labels / f"case{i}.nii.gz")
        reg = np.moveaxis(label_to_regions(lab, "brats"), 0, -1).astype(np.uint8)
        nib.save(nib.Nifti1Image(reg, affine), masks / f"case{i}.nii.gz")
    torch.manual_seed(0)
    net = _net()
    # a few training steps, so that the logits carry the regions; then overconfident: the last layer scaled up
    xs = torch.stack([torch.from_numpy(nib.load(images / f"case{i}.nii.gz").get_fdata().astype(np.float32))[None]
                      for i in range(2)])
    ys = torch.stack([torch.from_numpy(np.moveaxis(_read(masks / f"case{i}.nii.gz"), -1, 0).astype(np.float32))
                      for i in range(2)])
    opt = torch.optim.Adam(net.parameters(), lr=0.02)
    for _ in range(40):
        opt.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(net(xs), ys).backward()
        opt.step()
    with torch.no_grad():
        net.model[-1].conv.weight.mul_(4.0)
        net.model[-1].conv.bias.mul_(4.0)
    ckpt = root / "net.pt"
    torch.save(net.state_dict(), ckpt)
    spec = root / "net.json"
    spec.write_text(json.dumps(SPEC))
    return {"root": root, "images": images, "labels": labels, "masks": masks, "ckpt": ckpt, "spec": spec}


def _infer(data, out, *extra) -> int:
    return cli.main(["infer", "-i", str(data["images"]), "-o", str(out), "--network", str(data["spec"]),
                     "--checkpoint", str(data["ckpt"]), "--activation", "sigmoid", "--quiet", *extra])


def _read(path: Path) -> np.ndarray:
    img = nib.load(path)
    return np.asarray(img.dataobj)


def test_region_outputs_are_4d_and_equal_the_inferer(data, tmp_path):
    out = tmp_path / "pred"
    assert _infer(data, out, "--samples", "3", "--regions", "brats", "--measures", *ALL) == 0
    net = _net()
    net.load_state_dict(torch.load(data["ckpt"], weights_only=True))
    inferer = build_inferer("mcdropout", samples=3, seed=0, activation="sigmoid", measures=ALL)
    for i in range(2):
        seg_img = nib.load(out / f"case{i}_seg.nii.gz")
        assert seg_img.shape == (*SHAPE, 3) and seg_img.get_data_dtype() == np.uint8
        np.testing.assert_allclose(seg_img.affine, np.diag([1.5, 1.0, 2.0, 1.0]))
        probs = _read(out / f"case{i}_probs.nii.gz")
        assert probs.shape == (*SHAPE, 3) and probs.dtype == np.float32
        x = torch.from_numpy(nib.load(data["images"] / f"case{i}.nii.gz").get_fdata().astype(np.float32))
        ref = inferer(x[None, None], net)
        np.testing.assert_allclose(np.moveaxis(probs, -1, 0), ref["pred"][0].numpy(), atol=1e-6)
        np.testing.assert_array_equal(_read(out / f"case{i}_seg.nii.gz"), (probs > 0.5).astype(np.uint8))
        assert 0 <= probs.min() and probs.max() <= 1 and not np.allclose(probs.sum(-1), 1)
        for m in ALL:
            u = _read(out / f"case{i}_{m}.nii.gz")
            assert u.shape == (*SHAPE, 3) and u.dtype == np.float32, m
            np.testing.assert_allclose(np.moveaxis(u, -1, 0), ref[m][0].numpy(), atol=1e-6, err_msg=m)
            assert u.min() >= 0 and u.max() <= math.log(2) + 1e-6, m
        assert np.abs(_read(out / f"case{i}_window_disagreement.nii.gz")).max() == 0  # one window: no overlap
        rec = json.loads((out / f"case{i}.json").read_text())
        assert rec["multilabel"] is True and rec["regions"] == {k: list(v) for k, v in BRATS_REGIONS.items()}
        assert rec["shape"] == list(SHAPE)
    run = json.loads((out / "infer.json").read_text())
    assert run["multilabel"] is True and run["regions"] == {"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]}
    assert run["settings"]["regions"] == run["regions"] and run["settings"]["activation"] == "sigmoid"
    assert read_prediction_regions(out) == {"multilabel": True, "regions": run["regions"]}

    # read back: multilabel=True gives (R, *spatial) arrays; the class reader refuses with a hint
    files = CaseFiles("case0", data["labels"] / "case0.nii.gz", out / "case0_seg.nii.gz", out / "case0_probs.nii.gz",
                      {m: out / f"case0_{m}.nii.gz" for m in ALL})
    case = load_case(files, multilabel=True)
    assert case.multilabel and case.probs.shape == (3, *SHAPE) and case.seg.shape == (3, *SHAPE)
    np.testing.assert_array_equal(case.seg, (case.probs >= 0.5))
    assert set(np.unique(case.label)) == {0, 1, 2, 4} and all(v.shape == (3, *SHAPE) for v in case.maps.values())
    masks = load_case(CaseFiles("case0", data["masks"] / "case0.nii.gz", probs=out / "case0_probs.nii.gz"),
                      multilabel=True)
    np.testing.assert_array_equal(masks.label, label_to_regions(case.label, "brats"))
    np.testing.assert_array_equal(masks.seg, case.seg)
    with pytest.raises(CaseError, match="multilabel=True"):
        load_case(CaseFiles("case0", data["labels"] / "case0.nii.gz", probs=out / "case0_probs.nii.gz"))
    with pytest.raises(CaseError, match="region spec has 2"):
        load_case(files, num_classes=2, multilabel=True)


def test_window_disagreement_under_sliding_windows(data, tmp_path):
    """Non-overlapping windows: WD = 0 exactly; overlapping ones: WD >= 0, > 0 somewhere, and PE = EE + MI + WD."""
    no = tmp_path / "no_overlap"
    assert _infer(data, no, "--samples", "2", "--roi", "8", "8", "4", "--overlap", "0", "--measures",
                  "window_disagreement") == 0  # windows tile the 16 x 16 x 12 volume
    assert np.abs(_read(no / "case0_window_disagreement.nii.gz")).max() < 1e-6  # float32 rounding of H(m) - H(m)
    yes = tmp_path / "overlap"
    assert _infer(data, yes, "--samples", "2", "--roi", "8", "--overlap", "0.5", "--measures", "predictive_entropy",
                  "expected_entropy", "mutual_information", "window_disagreement") == 0
    pe, ee, mi, wd = (_read(yes / f"case1_{m}.nii.gz").astype(np.float64) for m in
                      ("predictive_entropy", "expected_entropy", "mutual_information", "window_disagreement"))
    assert wd.shape == (*SHAPE, 3) and wd.min() >= 0 and wd.max() > 1e-4
    np.testing.assert_allclose(pe, ee + mi + wd, atol=1e-5)
    assert read_prediction_regions(yes) == {"multilabel": True, "regions": ["0", "1", "2"]}


def test_softmax_window_disagreement_is_written_and_evaluated(data, tmp_path):
    spec = dict(SPEC, out_channels=3)
    out = tmp_path / "softmax"
    assert cli.main(["infer", "-i", str(data["images"]), "-o", str(out), "--network", json.dumps(spec),
                     "--checkpoint", str(data["ckpt"]), "--samples", "2", "--roi", "8", "--overlap", "0.5",
                     "--measures", "predictive_entropy", "window_disagreement", "--quiet"]) == 0
    wd = _read(out / "case0_window_disagreement.nii.gz")
    assert wd.shape == SHAPE and wd.min() >= 0 and wd.max() > 0
    assert read_prediction_regions(out) is None
    assert json.loads((out / "infer.json").read_text())["multilabel"] is False
    labels = tmp_path / "labels3"  # labels in [0, 3) for the 3-class softmax network
    labels.mkdir()
    for i in range(2):
        lab = nib.load(data["labels"] / f"case{i}.nii.gz")
        nib.save(nib.Nifti1Image(np.minimum(np.asarray(lab.dataobj), 2).astype(np.int16), lab.affine),
                 labels / f"case{i}.nii.gz")
    assert cli.main(["evaluate", "-l", str(labels), "-p", str(out), "-o", str(tmp_path / "eval"), "--quiet",
                     "--no-spatial", "--measure", "window_disagreement"]) == 0
    header = (tmp_path / "eval" / "metrics.csv").read_text().splitlines()[0]
    assert "window_disagreement_fg_mean" in header and "predictive_entropy_fg_mean" in header


def test_single_channel_sigmoid_and_bad_regions(data, tmp_path, capsys):
    spec = dict(SPEC, out_channels=1)
    torch.manual_seed(1)
    ckpt = tmp_path / "one.pt"
    torch.save(_net(spec).state_dict(), ckpt)
    out = tmp_path / "binary"
    assert cli.main(["infer", "-i", str(data["images"]), "-o", str(out), "--network", json.dumps(spec),
                     "--checkpoint", str(ckpt), "--activation", "sigmoid", "--samples", "2", "--quiet"]) == 0
    assert nib.load(out / "case0_seg.nii.gz").shape == SHAPE
    probs = _read(out / "case0_probs.nii.gz")
    assert probs.shape == (*SHAPE, 2)
    np.testing.assert_allclose(probs.sum(-1), 1, atol=1e-6)
    assert nib.load(out / "case0_predictive_entropy.nii.gz").shape == SHAPE
    assert json.loads((out / "case0.json").read_text())["multilabel"] is False
    assert read_prediction_regions(out) is None
    # --regions with a single-channel network: refused once, before any case is predicted
    assert cli.main(["infer", "-i", str(data["images"]), "-o", str(tmp_path / "bad"), "--network", json.dumps(spec),
                     "--checkpoint", str(ckpt), "--activation", "sigmoid", "--regions", "brats", "--quiet"]) == 2
    assert "names 3 region(s) (TC, WT, ET) but the network outputs 1 channel(s)" in capsys.readouterr().err
    # --regions naming 2 regions for a 3-channel network
    assert _infer(data, tmp_path / "bad2", "--regions", '{"A": [1], "B": [2]}') == 2
    assert "names 2 region(s) (A, B) but the network outputs 3 channel(s)" in capsys.readouterr().err
    assert not list(tmp_path.glob("bad*/*"))
    assert _infer(data, tmp_path / "bad3", "--regions", "nonsense") == 2
    assert "regions must be one of" in capsys.readouterr().err
    assert cli.main(["infer", "-i", str(data["images"]), "-o", str(tmp_path / "bad4"), "--network", str(data["spec"]),
                     "--checkpoint", str(data["ckpt"]), "--regions", "brats", "--quiet"]) == 2
    assert "add --activation sigmoid" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("labels_from", ["regions", "masks"])
def test_calibrate_per_region_and_infer_applies_it(data, tmp_path, labels_from, capsys):
    out = tmp_path / "cal" / "calibrated.pt"
    labels = data["labels"] if labels_from == "regions" else data["masks"]
    argv = ["calibrate", "-i", str(data["images"]), "-l", str(labels), "-o", str(out), "--network",
            str(data["spec"]), "--checkpoint", str(data["ckpt"]), "--activation", "sigmoid", "--mode", "vector",
            "--quiet"]
    if labels_from == "regions":
        argv += ["--regions", "brats"]
    assert cli.main(argv) == 0
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["activation"] == "sigmoid" and len(record["temperature"]) == 3 and record["folded_into_last_layer"]
    assert record["regions"] == ({"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]} if labels_from == "regions"
                                 else ["0", "1", "2"])
    assert record["after"]["nll"] < record["before"]["nll"]
    # the temperatures are each region's own binary-NLL minimum on the validation logits (reference: scipy)
    net = _net()
    net.load_state_dict(torch.load(data["ckpt"], weights_only=True))
    net.eval()
    xs = [torch.from_numpy(nib.load(data["images"] / f"case{i}.nii.gz").get_fdata().astype(np.float32))[None, None]
          for i in range(2)]
    with torch.no_grad():
        z = torch.cat([net(x) for x in xs]).double().numpy()
    y = np.stack([label_to_regions(_read(data["labels"] / f"case{i}.nii.gz"), "brats") for i in range(2)])
    for r in range(3):
        zr, yr = z[:, r].ravel(), y[:, r].ravel().astype(np.float64)
        t_ref = minimize_scalar(lambda t, zr=zr, yr=yr: np.mean(np.logaddexp(0, zr / t) - yr * zr / t),
                                bounds=(0.02, 50.0), method="bounded", options={"xatol": 1e-7}).x
        assert record["temperature"][r] == pytest.approx(t_ref, rel=1e-3), r
    # infer with the calibrated checkpoint: sigmoid(logits / t_r)
    pred = tmp_path / "pred"
    assert cli.main(["infer", "-i", str(data["images"]), "-o", str(pred), "--network", str(data["spec"]),
                     "--checkpoint", str(out), "--activation", "sigmoid", "--method", "softmax", "--quiet"]) == 0
    t = np.asarray(record["temperature"]).reshape(1, 3, 1, 1, 1)
    ref = 1 / (1 + np.exp(-z[:1] / t))
    np.testing.assert_allclose(np.moveaxis(_read(pred / "case0_probs.nii.gz"), -1, 0), ref[0], atol=1e-5)
    # a label map without --regions for a 3-channel network: a clear error
    if labels_from == "regions":
        bad = ["calibrate", "-i", str(data["images"]), "-l", str(data["labels"]), "-o", str(tmp_path / "b.pt"),
               "--network", str(data["spec"]), "--checkpoint", str(data["ckpt"]), "--activation", "sigmoid",
               "--quiet"]
        capsys.readouterr()
        assert cli.main(bad) == 2
        assert "give --regions" in capsys.readouterr().err


def test_is_multilabel_and_region_names():
    from monai_unc.workflows.infer import InferSettings, is_multilabel, region_names

    p = torch.rand(1, 1, 4, 4, 4)
    binary = {"pred": torch.cat([1 - p, p], 1)}
    regions2 = {"pred": torch.rand(1, 2, 4, 4, 4)}
    assert not is_multilabel(binary, "sigmoid") and is_multilabel(regions2, "sigmoid")  # no map: the sum decides
    assert not is_multilabel(regions2, "softmax") and is_multilabel({"pred": torch.rand(1, 3, 2, 2, 2)}, "sigmoid")
    assert is_multilabel({**binary, "variance": torch.rand(1, 2, 4, 4, 4)}, "sigmoid")  # per-region maps decide
    assert not is_multilabel({**regions2, "variance": torch.rand(1, 1, 4, 4, 4)}, "sigmoid")

    class Flagged(dict):  # an inferer output that says what it is (UncertaintyOutput.multilabel)
        multilabel = True

    assert is_multilabel(Flagged(binary), "sigmoid") and not is_multilabel(Flagged(binary), "softmax")
    settings = InferSettings(model="m", method="mcdropout", samples=2, roi=None, overlap=0.25, intensity="none",
                             measures=[], seed=0, activation="sigmoid", checkpoints=[])
    assert region_names(settings, 3) == ["0", "1", "2"]
    settings.regions = {"WT": [1, 2, 4], "ET": [4]}
    assert region_names(settings, 2) == {"WT": [1, 2, 4], "ET": [4]}
    with pytest.raises(ValueError, match="names 2 regions"):
        region_names(settings, 3)


def test_multilabel_read_errors(data, tmp_path):
    affine = np.diag([1.5, 1.0, 2.0, 1.0])
    lab = data["labels"] / "case0.nii.gz"

    def save(name, arr):
        nib.save(nib.Nifti1Image(arr, affine), tmp_path / name)
        return tmp_path / name

    probs = save("p.nii.gz", np.full((*SHAPE, 3), 0.7, np.float32))
    two = save("u2.nii.gz", np.zeros((*SHAPE, 2), np.float32))
    with pytest.raises(CaseError, match="has 2 region channel"):
        load_case(CaseFiles("c", lab, probs=probs, maps={"variance": two}), multilabel=True)
    bad_seg = save("s.nii.gz", np.full((*SHAPE, 3), 2, np.uint8))
    with pytest.raises(CaseError, match="0 and 1 only"):
        load_case(CaseFiles("c", lab, seg=bad_seg, probs=probs), multilabel=True)
    over = save("p2.nii.gz", np.full((*SHAPE, 3), 1.5, np.float32))
    with pytest.raises(CaseError, match=r"lie in \[0, 1\]"):
        load_case(CaseFiles("c", lab, probs=over), multilabel=True)
    case = load_case(CaseFiles("c", lab, probs=probs), multilabel=True)
    assert case.seg.shape == (3, *SHAPE) and case.seg.all()  # 0.7 >= 0.5 everywhere


def test_a_region_count_the_network_does_not_have_is_refused_before_any_case(data, tmp_path, capsys):
    """--regions '{"WT":[1,2,4]}' on a 3-channel network (or brats on a 2-channel one) ran the network on every case
    and failed each one; now one error up front, also under a sliding window."""
    from monai_unc.workflows.prepare import prepare_infer

    with pytest.raises(ValueError, match=r"--regions names 1 region\(s\) \(WT\) but the network outputs 3"):
        prepare_infer(data["images"], network=str(data["spec"]), checkpoint=data["ckpt"], activation="sigmoid",
                      regions='{"WT": [1, 2, 4]}')
    capsys.readouterr()
    assert _infer(data, tmp_path / "a", "--regions", '{"WT": [1, 2, 4]}', "--roi", "8") == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "case0" not in err and not (tmp_path / "a" / "case0.json").exists()
    two = dict(SPEC, out_channels=2)
    ckpt = tmp_path / "two.pt"
    torch.save(_net(two).state_dict(), ckpt)
    assert cli.main(["infer", "-i", str(data["images"]), "-o", str(tmp_path / "b"), "--network", json.dumps(two),
                     "--checkpoint", str(ckpt), "--activation", "sigmoid", "--regions", "brats", "-q"]) == 2
    assert "names 3 region(s) (TC, WT, ET) but the network outputs 2 channel(s)" in capsys.readouterr().err


def test_calibrate_refuses_labels_that_no_region_claims(data, tmp_path, capsys):
    """calibrate --activation sigmoid --regions brats2023 on labels 1, 2, 4 used to fit with label 4 as background."""
    out = tmp_path / "cal.pt"
    argv = ["calibrate", "-i", str(data["images"]), "-l", str(data["labels"]), "-o", str(out), "--network",
            str(data["spec"]), "--checkpoint", str(data["ckpt"]), "--activation", "sigmoid", "--regions",
            "brats2023", "--max-steps", "2", "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "label 4 in 2 case(s) (case0, case1)" in err and "did you mean brats?" in err
    assert "--ignore-unclaimed-labels" in err and not out.exists()
    assert cli.main([*argv, "--ignore-unclaimed-labels"]) == 0 and out.is_file()
