"""Tests of monai_unc.engines: UncertaintyEvaluator with Model-Zoo-style postprocessing, handlers, case scores."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.data import DataLoader, Dataset, MetaTensor
from monai.engines import SupervisedEvaluator
from monai.handlers import MeanDice, from_engine
from monai.inferers import SlidingWindowInferer
from monai.networks.nets import UNet
from monai.transforms import (
    Activationsd,
    AsDiscreted,
    Compose,
    CopyItemsd,
    EnsureChannelFirstd,
    EnsureTyped,
    Invertd,
    LoadImaged,
    Orientationd,
    SaveImaged,
    Spacingd,
)
from sklearn.metrics import roc_auc_score

from monai_unc.engines import CaseScoresHandler, UncertaintyEvaluator, find_pred_activation, format_pred
from monai_unc.handlers import (
    BoundaryUncertaintyConcentration,
    CalibrationHandler,
    GeneralizedEnergyDistance,
    NormalizedCrossCorrelation,
)
from monai_unc.inferers import MCDropoutInferer, TTAInferer
from monai_unc.metrics.ambiguity import ged
from monai_unc.metrics.calibration import ece, nll
from monai_unc.transforms import AggregateUncertaintyd, SamplesToLabelsd

CPU = torch.device("cpu")


def _net(out_channels: int = 3, dropout: float = 0.2) -> UNet:
    torch.manual_seed(0)
    return UNet(3, 1, out_channels, (4, 8), (2,), dropout=dropout)


def _write_cases(folder: Path, n: int = 2) -> list[dict]:
    rng = np.random.default_rng(0)
    items = []
    for i in range(n):
        aff = np.diag([1.2, 1.0, 2.5, 1.0])
        aff[:3, 3] = [5.0 * i, -3.0, 7.0]
        img = rng.random((18, 16, 8)).astype(np.float32)
        lab = (img > 0.5).astype(np.uint8)
        nib.save(nib.Nifti1Image(img, aff), folder / f"case{i}.nii.gz")
        nib.save(nib.Nifti1Image(lab, aff), folder / f"case{i}_seg.nii.gz")
        items.append({"image": str(folder / f"case{i}.nii.gz"), "label": str(folder / f"case{i}_seg.nii.gz"),
                      "affine": aff, "shape": img.shape})
    return items


def _preprocessing() -> Compose:
    keys = ["image", "label"]
    return Compose([
        LoadImaged(keys, image_only=True),
        EnsureChannelFirstd(keys),
        Orientationd(keys, axcodes="LPS"),
        Spacingd(keys, pixdim=(2.0, 2.0, 2.0), mode=("bilinear", "nearest")),
        EnsureTyped(keys),
    ])


# ---------------------------------------------------------------------------------------------- pred format
def test_format_pred_round_trips_through_activations():
    p = torch.softmax(torch.randn(2, 3, 4, 5, 6), dim=1)
    p[0, :, 0, 0, 0] = torch.tensor([1.0, 0.0, 0.0])  # exact zeros stay finite
    logp = format_pred(p, "log_probabilities")
    assert torch.isfinite(logp).all()
    torch.testing.assert_close(torch.softmax(logp, dim=1), p, rtol=0, atol=3e-7)  # float32 rounding
    p2 = torch.softmax(torch.randn(2, 2, 4, 4), dim=1)
    logit = format_pred(p2, "binary_logit")
    assert logit.shape == (2, 1, 4, 4)
    torch.testing.assert_close(torch.sigmoid(logit)[:, 0], p2[:, 1], rtol=0, atol=1e-6)
    assert format_pred(p, "probabilities") is p
    with pytest.raises(ValueError, match="two-class"):
        format_pred(p, "binary_logit")
    with pytest.raises(ValueError, match="pred_format"):
        format_pred(p, "logits")


def test_find_pred_activation():
    assert find_pred_activation(Compose([Activationsd("pred", softmax=True)])) == "softmax"
    assert find_pred_activation(Compose([Compose([Activationsd(["label", "pred"], sigmoid=[False, True])])])) == (
        "sigmoid"
    )
    assert find_pred_activation(Compose([Activationsd("other", softmax=True), AsDiscreted("pred")])) is None
    assert find_pred_activation(None) is None
    assert find_pred_activation(Compose([Activationsd("pred")])) is None


def test_find_pred_activation_passes_over_an_activation_that_applies_nothing():
    """Found by hostile review 55: a no-op ``Activationsd("pred")`` ended the search, so the softmax after it was
    missed, ``pred`` was stored as probabilities and that softmax flattened them (0.9 -> 0.69)."""
    chain = Compose([Activationsd("pred"), Activationsd("pred", softmax=True)])
    assert find_pred_activation(chain) == "softmax"
    assert find_pred_activation(Compose([Activationsd(["pred", "label"]), Activationsd("pred", sigmoid=True)])) == (
        "sigmoid"
    )
    # a custom activation is an activation: the search ends there, as before
    assert find_pred_activation(Compose([Activationsd("pred", other=torch.sigmoid), Activationsd("pred", softmax=True)
                                         ])) is None
    p = torch.tensor([[[0.9]], [[0.1]]])[None]
    stored = format_pred(p, {"softmax": "log_probabilities"}.get(find_pred_activation(chain), "probabilities"))
    assert torch.allclose(torch.softmax(stored, 1), p)


def test_evaluator_arguments_are_checked():
    with pytest.raises(ValueError, match="pred_format"):
        UncertaintyEvaluator(device=CPU, val_data_loader=[], network=_net(), pred_format="logits")
    with pytest.raises(ValueError, match="uncertainty_keys"):
        UncertaintyEvaluator(device=CPU, val_data_loader=[], network=_net(), uncertainty_keys=["label"])


# ---------------------------------------------------------------------------------------------- evaluator
def test_model_zoo_postprocessing_with_inversion_and_saving(tmp_path):
    """Spleen-style postprocessing (softmax, Invertd, AsDiscreted, SaveImaged) runs unchanged; the softmax gives
    back exactly the inferer's mean probabilities; maps are saved on the original grid with the input affine."""
    cases = _write_cases(tmp_path, n=2)
    pre = _preprocessing()
    maps = ["predictive_entropy", "mutual_information"]
    post = Compose([
        Activationsd("pred", softmax=True),
        CopyItemsd("pred", names="probs"),
        Invertd(["pred", *maps], transform=pre, orig_keys="image", nearest_interp=False, to_tensor=True),
        AsDiscreted("pred", argmax=True),
        SaveImaged("pred", output_dir=tmp_path / "out", output_postfix="seg", separate_folder=False, print_log=False),
        *[SaveImaged(m, output_dir=tmp_path / "out", output_postfix=m, separate_folder=False, print_log=False)
          for m in maps],
    ])
    net = _net()
    inferer = MCDropoutInferer(4, seed=3, base_inferer=SlidingWindowInferer((8, 8, 8), overlap=0.25))
    ds = Dataset([{"image": c["image"], "label": c["label"]} for c in cases], transform=pre)
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(ds, batch_size=2), network=net, inferer=inferer,
                              postprocessing=post)
    ev.run()
    assert ev.pred_format == "log_probabilities"
    assert ev.state.uncertainty["num_samples"] == 4 and ev.state.uncertainty["mi_meaning"] == "epistemic"
    # independent computation of the mean probabilities on the same preprocessed batch
    batch = next(iter(DataLoader(ds, batch_size=2)))
    net.eval()
    expected = inferer(batch["image"].as_tensor(), net)["pred"]
    for i, (item, case) in enumerate(zip(ev.state.output, cases)):
        torch.testing.assert_close(item["probs"].as_tensor(), expected[i], rtol=0, atol=2e-6)
        assert tuple(item["pred"].shape) == (1, *case["shape"])  # inverted to the original grid
        for m in maps:
            assert tuple(item[m].shape) == (1, *case["shape"])
            saved = nib.load(tmp_path / "out" / f"case{i}_{m}.nii.gz")
            np.testing.assert_allclose(saved.affine, case["affine"], atol=1e-5)
            np.testing.assert_allclose(np.asarray(saved.dataobj), item[m][0].numpy(), atol=1e-6)
        seg = nib.load(tmp_path / "out" / f"case{i}_seg.nii.gz")
        np.testing.assert_allclose(seg.affine, case["affine"], atol=1e-5)
    assert not net.training and not any(m.training for m in net.modules())  # dropout restored to eval


def test_plain_inferer_behaves_like_supervised_evaluator(tmp_path):
    cases = _write_cases(tmp_path, n=2)
    ds = Dataset([{"image": c["image"], "label": c["label"]} for c in cases], transform=_preprocessing())
    net = _net(dropout=0.0)
    outputs = []
    for cls in (SupervisedEvaluator, UncertaintyEvaluator):
        ev = cls(device=CPU, val_data_loader=DataLoader(ds, batch_size=2), network=net,
                 inferer=SlidingWindowInferer((8, 8, 8)), postprocessing=Activationsd("pred", softmax=True))
        ev.run()
        outputs.append(ev.state.output)
    for a, b in zip(*outputs):
        assert set(map(str, a)) == set(map(str, b))
        torch.testing.assert_close(a["pred"].as_tensor(), b["pred"].as_tensor())
        torch.testing.assert_close(a["pred"].affine, b["pred"].affine)
        assert a["pred"].meta["filename_or_obj"] == b["pred"].meta["filename_or_obj"]


def _memory_items(n: int = 3, size: int = 12, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    items = []
    for i in range(n):
        image = torch.rand(1, size, size, size, generator=g)
        label = (image > 0.5).long()
        raters = torch.stack([(image[0] > t).long() for t in (0.4, 0.5, 0.6)])
        meta = {"affine": torch.diag(torch.tensor([1.0 + i, 1.0, 2.0, 1.0])), "filename_or_obj": f"case{i}.nii.gz"}
        items.append({"image": MetaTensor(image, meta=dict(meta)), "label": MetaTensor(label, meta=dict(meta)),
                      "raters": raters, "shift": "none" if i % 2 == 0 else "noise"})
    return items


def test_samples_are_decollated_per_case_and_metadata_follows_each_case():
    items = _memory_items(3)
    ev = UncertaintyEvaluator(
        device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=3), network=_net(2),
        inferer=MCDropoutInferer(5, seed=0, keep_samples=True),
        uncertainty_keys=["samples", "mutual_information"],
    )
    ev.run()
    assert ev.pred_format == "probabilities"
    for i, item in enumerate(ev.state.output):
        assert set(map(str, item)) == {"image", "label", "pred", "samples", "mutual_information"}
        assert tuple(item["samples"].shape) == (5, 2, 12, 12, 12)
        torch.testing.assert_close(item["samples"].mean(0), item["pred"].as_tensor(), rtol=0, atol=1e-6)
        for k in ("pred", "samples", "mutual_information"):
            assert item[k].meta["filename_or_obj"] == f"case{i}.nii.gz", k
            assert float(item[k].affine[0, 0]) == 1.0 + i, k
        assert item["pred"].sum(0).sub(1).abs().max() < 1e-5


def test_network_runs_in_eval_mode_without_grad():
    seen = []

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = _net(2)

        def forward(self, x):
            seen.append((torch.is_grad_enabled(), self.net.training))
            return self.net(x)

    probe = Probe().train()
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_memory_items(1)), batch_size=1),
                              network=probe, inferer=MCDropoutInferer(3, seed=0))
    ev.run()
    assert seen and all(g is False and t is False for g, t in seen)


def test_bad_inferer_outputs_raise():
    items = DataLoader(Dataset(_memory_items(1)), batch_size=1)

    def no_pred(x, net):
        return {"mutual_information": torch.zeros_like(x)}

    ev = UncertaintyEvaluator(device=CPU, val_data_loader=items, network=_net(2), inferer=no_pred)
    with pytest.raises(ValueError, match="without 'pred'"):
        ev.run()
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=items, network=_net(2),
                              inferer=MCDropoutInferer(2, keys=["pred", "predictive_entropy"]),
                              uncertainty_keys=["mutual_information"])
    with pytest.raises(ValueError, match="uncertainty_keys asks for"):
        ev.run()


def test_handlers_through_the_evaluator_match_functional_metrics():
    """Calibration, BUC, GED and NCC handlers read the spread outputs; values equal the functional core."""
    items = _memory_items(3)
    post = Compose([SamplesToLabelsd("samples", output_key="sample_labels"),
                    CopyItemsd("raters", names="rater_labels")])
    ev = UncertaintyEvaluator(
        device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=_net(2),
        inferer=MCDropoutInferer(4, seed=1, keep_samples=True), postprocessing=post,
        key_val_metric={"buc": BoundaryUncertaintyConcentration(uncertainty_key="predictive_entropy")},
        additional_metrics={
            "calib": CalibrationHandler(num_classes=2, output_transform=from_engine(["pred", "label"])),
            "ged": GeneralizedEnergyDistance(num_classes=2, output_transform=from_engine(["sample_labels",
                                                                                           "rater_labels"])),
            "ncc": NormalizedCrossCorrelation(y_is_raters=True,
                                              output_transform=from_engine(["expected_entropy", "rater_labels"])),
        },
    )
    outputs = []
    from ignite.engine import Events

    ev.add_event_handler(Events.ITERATION_COMPLETED, lambda e: outputs.extend(e.state.output))
    ev.run()
    probs = torch.stack([o["pred"].as_tensor() for o in outputs])
    labels = torch.stack([o["label"].as_tensor() for o in outputs])
    assert ev.state.metrics["calib_ece"] == pytest.approx(ece(probs, labels), abs=1e-9)
    assert ev.state.metrics["calib_nll"] == pytest.approx(nll(probs, labels), abs=1e-9)
    geds = [ged(o["rater_labels"], o["sample_labels"], num_classes=2).ged for o in outputs]
    assert ev.state.metrics["ged"] == pytest.approx(float(np.mean(geds)), rel=1e-5)
    assert len(ev.state.metric_details["ged"]) == 3
    buc, details = ev.state.metrics["buc"], ev.state.metric_details["buc"].reshape(-1)
    valid = details[~torch.isnan(details)]
    if len(valid):  # the mean of the cases where BUC is defined
        assert 0.0 <= buc <= 1.0 and buc == pytest.approx(float(valid.mean()), rel=1e-6)
    else:  # no case has a defined BUC (the band covers these small volumes): NaN, not MONAI's 0
        assert math.isnan(buc)
    assert -1.0 <= ev.state.metrics["ncc"] <= 1.0


def test_tta_inferer_through_the_evaluator_with_dice():
    items = _memory_items(2)
    post = Compose([CopyItemsd(["pred", "label"], names=["seg", "label_onehot"]),
                    AsDiscreted(["seg", "label_onehot"], argmax=[True, False], to_onehot=2)])
    ev = UncertaintyEvaluator(
        device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=_net(2, dropout=0.0),
        inferer=TTAInferer(flip_axes=[0]), postprocessing=post,
        key_val_metric={"dice": MeanDice(include_background=False, output_transform=from_engine(["seg",
                                                                                                "label_onehot"]))},
    )
    ev.run()
    assert ev.state.uncertainty["num_samples"] == 2
    assert 0.0 <= ev.state.metrics["dice"] <= 1.0


# ---------------------------------------------------------------------------------------------- case scores
def test_case_scores_handler_csv_and_ood_auroc(tmp_path):
    items = _memory_items(6)
    handler = CaseScoresHandler(["mutual_information_mean", "predictive_entropy_mean"], output_dir=tmp_path)
    ev = UncertaintyEvaluator(
        device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=4), network=_net(2),
        inferer=MCDropoutInferer(3, seed=0),
        postprocessing=AggregateUncertaintyd(["mutual_information", "predictive_entropy"], method="mean"),
        val_handlers=[handler],
    )
    ev.run()
    with open(tmp_path / "case_scores.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["case"] for r in rows] == [f"case{i}.nii.gz" for i in range(6)]
    assert [r["shift"] for r in rows] == [it["shift"] for it in items]
    for key in ("mutual_information_mean", "predictive_entropy_mean"):
        scores = np.array([float(r[key]) for r in rows])
        ood = np.array([r["shift"] != "none" for r in rows])
        assert ev.state.metrics[f"ood_auroc_{key}"] == pytest.approx(roc_auc_score(ood, scores), abs=1e-4)


def test_case_scores_handler_degenerate_and_missing():
    items = [dict(it, shift="none") for it in _memory_items(2)]
    ev = UncertaintyEvaluator(
        device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=_net(2),
        inferer=MCDropoutInferer(2, seed=0), postprocessing=AggregateUncertaintyd("mutual_information"),
        val_handlers=[CaseScoresHandler("mutual_information_mean")],
    )
    with pytest.warns(UserWarning, match="needs cases inside and outside"):
        ev.run()
    assert math.isnan(ev.state.metrics["ood_auroc_mutual_information_mean"])
    ev = UncertaintyEvaluator(
        device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=_net(2),
        inferer=MCDropoutInferer(2, seed=0), val_handlers=[CaseScoresHandler("mutual_information_mean")],
    )
    with pytest.raises(KeyError, match="AggregateUncertaintyd"):
        ev.run()
    with pytest.raises(ValueError, match="at least one"):
        CaseScoresHandler([])
    for keys, group in ((["a", "a"], "shift"), (["shift"], "shift"), (["case"], "shift"), (["a"], "case")):
        with pytest.raises(ValueError, match="score_keys and group_key must be distinct"):
            CaseScoresHandler(keys, group_key=group)


# ---------------------------------------------------------------------------------------------- distributed
def _dist_worker(rank: int, world: int, port: int, results) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        items = _memory_items(4)[rank::world]
        ev = UncertaintyEvaluator(
            device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=1), network=_net(2),
            inferer=MCDropoutInferer(3, seed=0), postprocessing=AggregateUncertaintyd("mutual_information"),
            key_val_metric={"calib": CalibrationHandler(num_classes=2, output_transform=from_engine(["pred",
                                                                                                     "label"]))},
            val_handlers=[CaseScoresHandler("mutual_information_mean")],
        )
        ev.run()
        results[rank] = {k: v for k, v in ev.state.metrics.items() if isinstance(v, float)}
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_handlers_reduce_across_ranks():
    """Two gloo ranks, each evaluating half of the cases, agree with one process on all cases. The ranks are forked
    (as the other multi-process tests do): they start without importing torch and MONAI again."""
    import torch.multiprocessing as mp

    from tests._ranks import free_port, run_forked_ranks

    items = _memory_items(4)
    ev = UncertaintyEvaluator(
        device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=1), network=_net(2),
        inferer=MCDropoutInferer(3, seed=0), postprocessing=AggregateUncertaintyd("mutual_information"),
        key_val_metric={"calib": CalibrationHandler(num_classes=2, output_transform=from_engine(["pred", "label"]))},
        val_handlers=[CaseScoresHandler("mutual_information_mean")],
    )
    ev.run()
    with mp.Manager() as manager:
        shared = manager.dict()
        run_forked_ranks(_dist_worker, (2, free_port(), shared), world=2, wait_s=300)
        results = dict(shared)
    assert sorted(results) == [0, 1], results
    for rank in (0, 1):
        for key in ("calib_ece", "calib_nll", "calib_brier", "ood_auroc_mutual_information_mean"):
            assert results[rank][key] == pytest.approx(ev.state.metrics[key], abs=1e-6), (rank, key)


# ---------------------------------------------------------------------------------------------- docs
def test_docs_example_runs(capsys):
    text = (Path(__file__).resolve().parents[1] / "docs" / "monai_integration.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    blocks = [b for b in blocks if "UncertaintyEvaluator(" in b]
    assert len(blocks) == 1, "docs/monai_integration.md has no (or more than one) UncertaintyEvaluator example"
    exec(compile(blocks[0], "docs/monai_integration.md", "exec"), {"__name__": "__docs__"})
    out = capsys.readouterr().out
    assert "log_probabilities" in out and "pred sums to 1: True" in out and "True" in out.splitlines()[-1]
