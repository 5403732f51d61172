"""``monai-unc infer --save-samples``: ``<case>_samples.nii.gz`` holds each sample's label map (the argmax of that
sample's stitched probabilities), is read by ``read_lesion_samples`` and feeds ``evaluate --lesions
--lesion-samples``; the option is a recorded setting (issue 38)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.networks.nets import UNet

from monai_unc import cli
from monai_unc.evaluation.lesions import read_lesion_samples
from monai_unc.inferers import estimate_memory
from monai_unc.io import save_label_maps
from monai_unc.regions import label_to_regions, parse_regions
from monai_unc.workflows.factory import build_inferer
from monai_unc.workflows.infer import InferSettings, check_run_settings, sample_label_maps

SHAPE = (12, 12, 10)
AFFINE = np.diag([1.5, 1.0, 2.0, 1.0])


def _spec(out_channels: int) -> dict:
    return {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1,
            "out_channels": out_channels, "channels": [4, 8], "strides": [2], "num_res_units": 0, "dropout": 0.5}


def _net(spec: dict) -> torch.nn.Module:
    return UNet(**{k: v for k, v in spec.items() if k != "_target_"})


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("samples")
    images, labels = root / "images", root / "labels"
    images.mkdir()
    labels.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        lab = np.zeros(SHAPE, np.int16)
        lab[2:5, 2:5, 2:5] = 1
        lab[7:10, 6 + i:9 + i, 5:8] = 2
        img = lab + rng.standard_normal(SHAPE)
        nib.save(nib.Nifti1Image(img.astype(np.float32), AFFINE), images / f"case{i}.nii.gz")
        nib.save(nib.Nifti1Image(lab, AFFINE), labels / f"case{i}.nii.gz")
    out: dict[str, Path] = {"root": root, "images": images, "labels": labels}
    for c in (3, 3 + 100):  # a softmax network of 3 classes; a sigmoid one of 3 regions (key 103)
        torch.manual_seed(c)
        net = _net(_spec(3))
        with torch.no_grad():  # larger logits: the samples disagree on some voxels, not on all
            net.model[-1].conv.weight.mul_(3.0)
        torch.save(net.state_dict(), root / f"net{c}.pt")
        out[f"ckpt{c}"] = root / f"net{c}.pt"
    (root / "net.json").write_text(json.dumps(_spec(3)))
    out["spec"] = root / "net.json"
    return out


def _infer(data, out, *extra, ckpt: int = 3) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return cli.main(["infer", "-i", str(data["images"]), "-o", str(out), "--network", str(data["spec"]),
                         "--checkpoint", str(data[f"ckpt{ckpt}"]), "--device", "cpu", "--quiet", *extra])


def _read(path: Path) -> np.ndarray:
    return np.asarray(nib.load(path).dataobj)


def _reference_samples(data, method: str, samples: int, roi, activation: str = "softmax", ckpt: int = 3):
    """Each case's per-sample probabilities ``(S, C, *spatial)`` from the inferer in Python, same seed."""
    net = _net(_spec(3))
    net.load_state_dict(torch.load(data[f"ckpt{ckpt}"], weights_only=True))
    net.eval()
    inferer = build_inferer(method, samples=samples, roi=roi, seed=0, activation=activation, keep_samples=True)
    out = {}
    for i in range(2):
        x = torch.from_numpy(_read(data["images"] / f"case{i}.nii.gz").astype(np.float32))[None, None]
        out[f"case{i}"] = inferer(x, net)["samples"][:, 0].numpy()
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("method", "n", "roi"), [("mcdropout", 3, ["8"]), ("mcdropout+tta", 2, None)])
def test_sample_files_are_the_argmax_of_each_sample(data, tmp_path, method, n, roi):
    """Sliding window (``--roi 8``: each sample's probabilities stitched, then its argmax) and MC dropout x flips."""
    out, plain = tmp_path / "pred", tmp_path / "plain"
    roi_args = ["--roi", *roi] if roi else []
    assert _infer(data, out, "--method", method, "--samples", str(n), "--save-samples", *roi_args) == 0
    assert _infer(data, plain, "--method", method, "--samples", str(n), *roi_args) == 0
    ref = _reference_samples(data, method, n, None if roi is None else int(roi[0]))
    n_total = n * (8 if "tta" in method else 1)
    for case, probs in ref.items():
        img = nib.load(out / f"{case}_samples.nii.gz")
        assert img.shape == (*SHAPE, n_total) and img.get_data_dtype() == np.uint8
        np.testing.assert_array_equal(img.affine, nib.load(out / f"{case}_seg.nii.gz").affine)
        labels = np.moveaxis(np.asarray(img.dataobj), -1, 0)
        np.testing.assert_array_equal(labels, np.argmax(probs, axis=1))  # numpy's argmax of the inferer's samples
        assert len({s.tobytes() for s in labels}) > 1  # the samples differ: the test can tell them apart
        np.testing.assert_array_equal(read_lesion_samples(out, case, SHAPE), labels)
        # keeping the samples changes no other output, and the record lists the file
        for name in ("seg", "probs", "predictive_entropy", "mutual_information"):
            np.testing.assert_array_equal(_read(out / f"{case}_{name}.nii.gz"), _read(plain / f"{case}_{name}.nii.gz"))
        record = json.loads((out / f"{case}.json").read_text())
        assert record["files"][-1] == f"{case}_samples.nii.gz" and record["num_samples"] == n_total
        assert f"{case}_samples.nii.gz" in record["file_digests"]
        assert not (plain / f"{case}_samples.nii.gz").exists()
    assert json.loads((out / "infer.json").read_text())["settings"]["save_samples"] is True
    assert "save_samples" not in json.loads((plain / "infer.json").read_text())["settings"]


@pytest.mark.slow
def test_evaluate_lesions_reads_the_infer_folder(data, tmp_path):
    out, ev = tmp_path / "pred", tmp_path / "ev"
    assert _infer(data, out, "--samples", "4", "--save-samples") == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(data["labels"]), "-p", str(out), "-o", str(ev), "--lesions",
                         "--no-spatial", "--num-classes", "3", "--lesion-samples", str(out), "--quiet"]) == 0
    block = json.loads((ev / "summary.json").read_text())["lesions"]
    assert block["samples"] == {"min": 4, "max": 4} and block["notes"] == []
    assert all(0 <= d["existence"] <= 1 for d in block["lesions"])


@pytest.mark.slow
def test_the_option_is_a_recorded_setting(data, tmp_path, capsys):
    out = tmp_path / "pred"
    assert _infer(data, out, "--samples", "2") == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("case*")}
    assert _infer(data, out, "--samples", "2") == 0  # a run without the field resumes without the option
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("case*")} == before  # every case skipped
    capsys.readouterr()
    assert _infer(data, out, "--samples", "2", "--save-samples") == 2  # other settings: refused
    assert "save_samples" in capsys.readouterr().err
    assert _infer(data, out, "--samples", "2", "--save-samples", "--overwrite") == 0
    assert (out / "case0_samples.nii.gz").is_file()
    assert _infer(data, out, "--samples", "2") == 2
    assert _infer(data, out, "--samples", "2", "--overwrite") == 0  # the samples of the earlier run are removed
    assert not (out / "case0_samples.nii.gz").exists() and not (out / "case1_samples.nii.gz").exists()


def test_old_records_without_the_field_still_match(tmp_path):
    """``infer.json`` written before the field existed (no ``save_samples``) resumes a run without the option."""
    s = InferSettings(model="m", method="mcdropout", samples=2, roi=None, overlap=0.25, intensity="none",
                      measures=["predictive_entropy"], seed=0, activation="softmax", checkpoints=[])
    assert "save_samples" not in s.to_json()
    (tmp_path / "infer.json").write_text(json.dumps({"settings": s.to_json()}))
    (tmp_path / "c.json").write_text("{}")  # a finished case: the settings are compared
    with pytest.warns(UserWarning, match="no version recorded"):  # resumed, with a word on the version
        check_run_settings(tmp_path, s)
    with pytest.raises(ValueError, match="save_samples"):
        check_run_settings(tmp_path, InferSettings(**{**s.__dict__, "save_samples": True}))


@pytest.mark.slow
def test_region_samples_are_label_maps_of_the_region_spec(data, tmp_path):
    out = tmp_path / "pred"
    args = ("--activation", "sigmoid", "--samples", "3", "--save-samples")
    assert _infer(data, out, *args, "--regions", "brats", ckpt=103) == 0
    ref = _reference_samples(data, "mcdropout", 3, None, activation="sigmoid", ckpt=103)
    for case, probs in ref.items():
        labels = read_lesion_samples(out, case, SHAPE)
        masks = probs > 0.5  # (S, R, *spatial): TC, WT, ET
        # a voxel's regions are representable when they are nested as the BraTS labels are: ET in TC in WT
        tc, wt, et = masks[:, 0], masks[:, 1], masks[:, 2]
        ok = (~et | tc) & (~tc | wt)
        back = np.stack([label_to_regions(s, "brats") for s in labels])
        np.testing.assert_array_equal(back.transpose(1, 0, 2, 3, 4)[:, ok], masks.transpose(1, 0, 2, 3, 4)[:, ok])
        assert set(np.unique(labels)) <= {0, 1, 2, 4}
        record = json.loads((out / f"{case}.json").read_text())
        assert record["samples_unrepresented_voxels"] == int((~ok).sum())
    # without --regions the labels are unknown: the cases fail, naming the option
    assert _infer(data, tmp_path / "noregions", *args, ckpt=103) != 0
    failures = json.loads((tmp_path / "noregions" / "failures.json").read_text())
    assert "--regions" in json.dumps(failures)


def test_refusals(data, tmp_path, capsys):
    capsys.readouterr()
    assert _infer(data, tmp_path / "a", "--method", "softmax", "--save-samples") == 2
    assert "--save-samples needs a --method that samples" in capsys.readouterr().err
    with pytest.raises(ValueError, match="region spec"):
        sample_label_maps(torch.rand(2, 3, 4, 4, 4), multilabel=True)
    with pytest.raises(ValueError, match="names 3 regions"):
        sample_label_maps(torch.rand(2, 2, 4, 4, 4), multilabel=True, regions={"TC": [1, 4], "WT": [1, 2, 4],
                                                                              "ET": [4]})


def test_sample_label_maps_and_their_file():
    probs = torch.softmax(torch.randn(3, 300, 2, 2, 2, generator=torch.Generator().manual_seed(0)), dim=1)
    labels, missed = sample_label_maps(probs)
    assert labels.dtype == np.uint16 and missed == 0  # 300 classes: labels above 255
    np.testing.assert_array_equal(labels, probs.numpy().argmax(1))
    with pytest.raises(ValueError, match="integer"):
        save_label_maps(np.full((2, 2, 2, 2), 0.5), np.eye(4), Path("x.nii.gz"))
    with pytest.raises(ValueError, match="2147483647"):
        save_label_maps(np.full((2, 2, 2, 2), 2**31), np.eye(4), Path("x.nii.gz"))


@pytest.mark.parametrize("top, dtype", [(255, "uint8"), (300, "uint16"), (65535, "uint16"), (70000, "int32"),
                                        (2**24, "int32"), (2**31 - 1, "int32")])
def test_region_labels_above_the_uint16_range_are_written_as_they_are(top, dtype, tmp_path):
    """A region spec may use labels up to 2**31 - 1: the samples' label maps take the dtype of the largest label (a
    uint16 map wrapped 70000 to 4464, and evaluate --lesion-samples then found the region in no sample)."""
    spec = parse_regions({"A": [top], "B": [1]})
    p = torch.tensor([[[0.9, 0.1, 0.1], [0.1, 0.9, 0.1]]]).reshape(1, 2, 3, 1, 1)  # (S=1, R=2, 3 voxels)
    labels, missed = sample_label_maps(p, multilabel=True, regions=spec)
    assert labels.dtype == np.dtype(dtype) and missed == 0
    assert labels.ravel().tolist() == [top, 1, 0]
    path = save_label_maps(labels, np.eye(4), tmp_path / "c_samples.nii.gz")
    assert nib.load(path).get_data_dtype() == np.dtype(dtype)
    assert np.asarray(nib.load(path).dataobj).ravel().tolist() == [top, 1, 0]
    # read in the file's integer type: exact beyond float32's 2**24 too
    back = read_lesion_samples(tmp_path, "c", (3, 1, 1))
    assert back.ravel().tolist() == [top, 1, 0]
    assert np.isin(back, spec["A"]).ravel().tolist() == [True, False, False]


def test_memory_model_counts_the_kept_samples():
    """The kept samples add ``S C b`` bytes per voxel to the stitching buffers and twice that in the final phase (where
    the returned concatenation is made after the temporaries of the maps' chunks are freed: they share bytes)."""
    shape, c = (64, 64, 64), 3
    v = 64**3
    for roi in ((32, 32, 32), None):
        base = estimate_memory(shape, c, roi_size=roi)
        for s in (1, 10):
            est = estimate_memory(shape, c, roi_size=roi, kept_samples=s)
            assert est.total > base.total
            kept = est.parts.get("kept samples", 0)
            if est.phase == "final":
                assert kept + est.parts["chunk temporaries"] >= 2 * v * s * c * 4 and kept >= v * s * c * 4
            else:
                assert kept == v * s * c * 4
        grow = estimate_memory(shape, c, roi_size=roi, kept_samples=20).total - estimate_memory(
            shape, c, roi_size=roi, kept_samples=10).total
        assert grow >= 10 * c * 4 * v  # at least one float32 copy of the added samples
    with pytest.raises(ValueError, match="kept_samples"):
        estimate_memory(shape, c, kept_samples=-1)
