"""Hostile review 60 of the MONAI integration: engines, handlers, transforms."""

from __future__ import annotations

import warnings

import pytest
import torch
from monai.data import DataLoader, Dataset, MetaTensor
from monai.networks.nets import UNet
from monai.transforms import Activationsd, AsDiscreted, Compose, CopyItemsd, Lambdad

pytest.importorskip("ignite")

from monai_unc.engines import UncertaintyEvaluator, find_pred_activation  # noqa: E402
from monai_unc.inferers import MCDropoutInferer  # noqa: E402

CPU = torch.device("cpu")


def _items(n: int = 2) -> list[dict]:
    torch.manual_seed(0)
    return [{"image": MetaTensor(torch.rand(1, 16, 16, 16)),
             "label": MetaTensor((torch.rand(1, 16, 16, 16) > 0.5).long())} for _ in range(n)]


def _net() -> UNet:
    torch.manual_seed(0)
    return UNet(3, 1, 2, (4, 8), (2,), dropout=0.2)


# ------------------------------------------------------------------------------------- activation on a copy of pred
def test_find_pred_activation_follows_a_copy_of_pred():
    # a bundle that keeps pred for the label map and applies the softmax to a copy (CopyItemsd) expects logits in
    # pred as well: the activation on the copy is the one that reads them
    assert find_pred_activation(Compose([CopyItemsd("pred", names="prob"), Activationsd("prob", softmax=True),
                                         AsDiscreted("pred", argmax=True)])) == "softmax"
    assert find_pred_activation(Compose([CopyItemsd(["label", "pred"], names=["lab", "p"]),
                                         Activationsd("p", sigmoid=True)])) == "sigmoid"
    assert find_pred_activation(Compose([CopyItemsd("pred", times=2, names=["a", "b"]),
                                         Activationsd("b", softmax=True)])) == "softmax"
    # a copy of another key is no copy of pred
    assert find_pred_activation(Compose([CopyItemsd("label", names="prob"),
                                         Activationsd("prob", softmax=True)])) is None


def test_softmax_on_a_copy_of_pred_gives_the_mean_probabilities():
    # found by hostile review 60: pred_format="auto" stored the mean probabilities, and the softmax on the copy
    # flattened them (max 1.0 became 0.708 on this net), without a word
    post = Compose([CopyItemsd("pred", names="prob"), Activationsd("prob", softmax=True),
                    AsDiscreted("pred", argmax=True)])
    plain = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                                 network=_net(), inferer=MCDropoutInferer(4, seed=0), pred_format="probabilities")
    plain.run()
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                              network=_net(), inferer=MCDropoutInferer(4, seed=0), postprocessing=post)
    ev.run()
    assert ev.pred_format == "log_probabilities"
    for case, ref in zip(ev.state.output, plain.state.output):
        torch.testing.assert_close(case["prob"].as_tensor(), ref["pred"].as_tensor(), atol=1e-6, rtol=0)
        assert torch.equal(case["pred"].as_tensor(), ref["pred"].as_tensor().argmax(0, keepdim=True).float())


def test_a_lambdad_on_a_copy_of_pred_is_warned_about():
    post = Compose([CopyItemsd("pred", names="prob"), Lambdad("prob", lambda x: torch.softmax(x, 0))])
    with pytest.warns(UserWarning, match="Lambdad"):
        UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                             network=_net(), inferer=MCDropoutInferer(2, seed=0), postprocessing=post)
    # a copy of pred made after its argmax holds labels: nothing to warn about
    post = Compose([AsDiscreted("pred", argmax=True), CopyItemsd("pred", names="seg"), Lambdad("seg", lambda x: x)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                             network=_net(), inferer=MCDropoutInferer(2, seed=0), postprocessing=post)
    # a copy made before the argmax keeps the probabilities; one made after it holds the labels
    from monai_unc.engines import _opaque_pred_transform

    assert _opaque_pred_transform(Compose([CopyItemsd("pred", names="prob"), AsDiscreted("pred", argmax=True),
                                           CopyItemsd("pred", names="seg"), Lambdad("seg", lambda x: x)])) is None
    assert _opaque_pred_transform(Compose([CopyItemsd("pred", names="prob"), AsDiscreted("pred", argmax=True),
                                           Lambdad("prob", lambda x: x)])) == "Lambdad(keys=['prob'])"


# ------------------------------------------------------------------------------------- handlers vs numpy
def _numpy_calibration(cases: list[dict]) -> tuple[float, float, float]:
    """ECE (15 equal-width bins of the max probability), NLL and Brier of the pooled voxels, brute force."""
    import numpy as np

    p = np.concatenate([c["pred"].numpy().reshape(3, -1) for c in cases], 1).astype(np.float64)
    y = np.concatenate([c["label"].numpy().reshape(-1) for c in cases])
    conf, correct = p.max(0), p.argmax(0) == y
    bins = np.minimum((conf * 15).astype(int), 14)
    ece = sum(abs(correct[bins == b].mean() - conf[bins == b].mean()) * (bins == b).mean()
              for b in range(15) if (bins == b).any())
    nll = -np.log(p[y, np.arange(len(y))]).mean()
    brier = ((p - np.eye(3)[y].T) ** 2).sum(0).mean()
    return float(ece), float(nll), float(brier)


@pytest.mark.parametrize("reduction", ["pooled", "mean"])
def test_calibration_handler_over_batches_and_epochs_equals_numpy(reduction):
    # decollated cases (ignite unrolls them one by one), three batches, three epochs: each epoch scores the five
    # cases once, as a brute-force numpy ECE / NLL / Brier of the pooled voxels (or the mean of the per-case ones)
    import numpy as np
    from ignite.engine import Engine
    from monai.handlers import from_engine

    from monai_unc.handlers import CalibrationHandler

    torch.manual_seed(0)
    cases = []
    for _ in range(5):
        label = torch.randint(0, 3, (1, 10, 9, 7))
        logits = torch.randn(3, 10, 9, 7) * 2
        logits.scatter_add_(0, label, torch.full(label.shape, 1.5))
        cases.append({"pred": torch.softmax(logits, 0), "label": label})
    engine = Engine(lambda e, b: b)
    CalibrationHandler(metrics=("ece", "nll", "brier"), reduction=reduction,
                       output_transform=from_engine(["pred", "label"])).attach(engine, "c")
    engine.run([cases[:2], cases[2:4], cases[4:]], max_epochs=3)
    ref = _numpy_calibration(cases) if reduction == "pooled" else np.mean([_numpy_calibration([c]) for c in cases], 0)
    got = [engine.state.metrics[f"c_{m}"] for m in ("ece", "nll", "brier")]
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert engine.state.metric_details["c_nll"].shape == (5, 1)
    np.testing.assert_allclose(engine.state.metric_details["c_nll"].reshape(-1).numpy(),
                               [_numpy_calibration([c])[1] for c in cases], rtol=1e-12)


# ------------------------------------------------------------------------------------- additional_metrics alone
def test_additional_metrics_without_a_key_metric_are_computed_and_saved(tmp_path):
    # found by hostile review 60: MONAI attaches additional_metrics only beside a key_val_metric, so an evaluator given
    # additional_metrics={"calib": CalibrationHandler(...)} alone ended with engine.state.metrics == {} and a
    # MetricsSaver wrote no calib_ece, without a word
    import csv

    from monai.handlers import MetricsSaver, from_engine

    from monai_unc.handlers import CalibrationHandler

    saver = MetricsSaver(save_dir=str(tmp_path), metrics=["calib_ece"])
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                              network=_net(), inferer=MCDropoutInferer(2, seed=0), val_handlers=[saver],
                              additional_metrics={"calib": CalibrationHandler(
                                  num_classes=2, metrics=("ece",), output_transform=from_engine(["pred", "label"]))})
    ev.run()
    reference = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                                     network=_net(), inferer=MCDropoutInferer(2, seed=0),
                                     key_val_metric={"calib": CalibrationHandler(
                                         num_classes=2, metrics=("ece",), key_metric="ece",
                                         output_transform=from_engine(["pred", "label"]))})
    reference.run()
    assert ev.state.metrics["calib_ece"] == reference.state.metrics["calib_ece"]
    rows = dict(csv.reader((tmp_path / "metrics.csv").open()))
    assert float(rows["calib_ece"]) == pytest.approx(ev.state.metrics["calib_ece"], rel=1e-4)
    with pytest.raises(TypeError, match="additional_metrics"):
        UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                             network=_net(), inferer=MCDropoutInferer(2, seed=0), additional_metrics=[saver])


def test_infer_bundle_reads_a_sigmoid_applied_to_a_copy_of_pred(tmp_path):
    # the bundle keeps pred and thresholds the sigmoid of a copy: its network's outputs are sigmoid logits, and the
    # default softmax of monai-unc infer --bundle would renormalise its regions (bundle_activation was None)
    from monai_unc.workflows import load_network
    from tests.bundles.test_cli_bundles import _bundle

    def copy_then_sigmoid(cfg: dict) -> None:
        cfg["network_def"]["out_channels"] = 3
        cfg["postprocessing"]["transforms"][0:1] = [
            {"_target_": "CopyItemsd", "keys": "pred", "names": "prob"},
            {"_target_": "Activationsd", "keys": "prob", "sigmoid": True}]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_network(bundle=_bundle(tmp_path / "b", copy_then_sigmoid)).bundle_activation == "sigmoid"


@pytest.mark.parametrize("wrap", [False, True])
def test_a_plain_function_in_the_postprocessing_is_warned_about(wrap):
    # found by hostile review 60: a Lambda / Lambdad was warned about, the same function given as it is (MONAI runs
    # any callable as postprocessing or inside a Compose) was not, and its softmax flattened the stored probabilities
    def softmax_pred(d):
        return {**d, "pred": torch.softmax(d["pred"], 0)}

    post = Compose([softmax_pred]) if wrap else softmax_pred
    with pytest.warns(UserWarning, match="softmax_pred"):
        UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                             network=_net(), inferer=MCDropoutInferer(2, seed=0), postprocessing=post)
