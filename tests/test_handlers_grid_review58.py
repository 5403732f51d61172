"""The metric handlers refuse a prediction and a label on different grids of one shape (hostile review 58).

Found by hostile review 58: ``Invertd(keys="pred")`` in the postprocessing brings the prediction back to the file's
grid (LPS) while the label stays on the ``Orientationd`` grid (RAS). Both have one shape, so every handler scored the
flipped volumes without a word: a perfect prediction with ``p = 0.95`` gave an NLL of 0.459 instead of 0.051 (9x) and
an ECE of 0.088 instead of 0.050, where :class:`~monai_unc.transforms.ErrorMapd` refuses the same pair.
"""

import warnings

import pytest
import torch

pytest.importorskip("ignite")
from ignite.engine import Engine  # noqa: E402
from monai.data import MetaTensor  # noqa: E402
from monai.data.utils import decollate_batch  # noqa: E402
from monai.transforms import Compose, Invertd, Orientationd  # noqa: E402

from monai_unc.handlers import (  # noqa: E402
    BoundaryAwareECE,
    CalibrationHandler,
    GeneralizedEnergyDistance,
    NormalizedCrossCorrelation,
    QUBraTS,
)

SHAPE = (16, 14, 10)
LPS = torch.diag(torch.tensor([-1.0, -1.0, 2.0, 1.0]))


def _case() -> dict:
    """A label on the RAS grid of ``Orientationd`` and a confident perfect prediction inverted to the file's grid."""
    label = torch.zeros(1, *SHAPE, dtype=torch.long)
    label[:, 2:9, 3:8, 2:7] = 1
    pre = Compose([Orientationd(["image", "label"], "RAS")])
    d = pre({"image": MetaTensor(label.float(), affine=LPS), "label": MetaTensor(label.clone(), affine=LPS)})
    p1 = d["label"].as_tensor().float() * 0.9 + 0.05
    d["pred"] = MetaTensor(torch.cat([1 - p1, p1]), meta=dict(d["image"].meta))
    d["pred"].applied_operations = list(d["image"].applied_operations)
    d["unc"] = MetaTensor(torch.full((1, *SHAPE), 0.1), meta=dict(d["image"].meta))
    d["inverted"] = Invertd("pred", transform=pre, orig_keys="image", nearest_interp=False)(dict(d))["pred"]
    d["inverted_unc"] = MetaTensor(d["unc"].as_tensor(), meta=dict(d["inverted"].meta))
    return d


def _run(handler, outputs) -> dict:
    engine = Engine(lambda e, b: b)
    handler.attach(engine, "m")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine.run(outputs, max_epochs=1)
    return engine.state.metrics


def _batch(*tensors):
    from monai.data import list_data_collate

    return list_data_collate([{"x": t} for t in tensors])["x"]


def test_the_case_is_on_two_grids_of_one_shape():
    d = _case()
    assert d["inverted"].shape[1:] == d["label"].shape[1:]
    assert not torch.allclose(d["inverted"].affine, d["label"].affine)


@pytest.mark.parametrize("layout", ["decollated", "batch"])
def test_calibration_handler_refuses_a_prediction_on_another_grid(layout):
    d = _case()
    handler = CalibrationHandler(num_classes=2, metrics=("ece", "nll"), output_transform=lambda o: (o["p"], o["y"]))
    ok = {"p": [d["pred"]], "y": [d["label"]]} if layout == "decollated" else {
        "p": _batch(d["pred"]), "y": _batch(d["label"])}
    metrics = _run(handler, [ok])
    assert metrics["m_nll"] == pytest.approx(-0.9 * torch.log(torch.tensor(0.95)).item()
                                             - 0.1 * torch.log(torch.tensor(0.95)).item(), rel=1e-5)
    bad = {"p": [d["inverted"]], "y": [d["label"]]} if layout == "decollated" else {
        "p": _batch(d["inverted"]), "y": _batch(d["label"])}
    with pytest.raises(ValueError, match="different affines"):
        _run(CalibrationHandler(num_classes=2, output_transform=lambda o: (o["p"], o["y"])), [bad])


def test_spatial_handler_refuses_a_prediction_on_another_grid():
    d = _case()
    ok = [{"predictive_entropy": d["unc"], "pred": d["pred"], "label": d["label"]}]
    _run(BoundaryAwareECE(n_bands=3), [ok])
    bad = [{"predictive_entropy": d["inverted_unc"], "pred": d["inverted"], "label": d["label"]}]
    with pytest.raises(ValueError, match="different affines"):
        _run(BoundaryAwareECE(n_bands=3), [bad])


def test_ambiguity_and_qu_brats_handlers_refuse_another_grid():
    d = _case()
    raters = MetaTensor(d["label"].as_tensor().repeat(3, 1, 1, 1), meta=dict(d["label"].meta))
    with pytest.raises(ValueError, match="different affines"):
        _run(NormalizedCrossCorrelation(y_is_raters=True, output_transform=lambda o: (o["u"], o["r"])),
             [{"u": [d["inverted_unc"]], "r": [raters]}])
    samples = MetaTensor(d["inverted"].as_tensor().argmax(0, keepdim=True).repeat(2, 1, 1, 1),
                         meta=dict(d["inverted"].meta))
    with pytest.raises(ValueError, match="different affines"):
        _run(GeneralizedEnergyDistance(output_transform=lambda o: (o["s"], o["r"])), [{"s": [samples], "r": [raters]}])
    region = MetaTensor(d["inverted"].as_tensor()[1:], meta=dict(d["inverted"].meta))
    with pytest.raises(ValueError, match="different affines"):
        _run(QUBraTS(uncertainty_key="u", pred_key="p", label_key="y"),
             [[{"u": d["inverted_unc"] * 100, "p": region, "y": d["label"]}]])


def test_a_metatensor_without_geometry_and_per_case_grids_pass():
    # MONAI's default identity affine says nothing about the grid; a batch whose cases lie on grids of their own
    # (another spacing per case) passes when prediction and label of each case agree
    d = _case()
    plain_label = MetaTensor(d["label"].as_tensor())
    _run(CalibrationHandler(num_classes=2, output_transform=lambda o: (o["p"], o["y"])),
         [{"p": [d["inverted"]], "y": [plain_label]}])
    other = torch.diag(torch.tensor([0.5, 3.0, 1.5, 1.0]))
    p2 = MetaTensor(d["pred"].as_tensor(), affine=other)
    y2 = MetaTensor(d["label"].as_tensor(), affine=other)
    batch = decollate_batch(_batch(d["pred"], p2)), decollate_batch(_batch(d["label"], y2))
    _run(CalibrationHandler(num_classes=2, output_transform=lambda o: (o["p"], o["y"])),
         [{"p": _batch(*batch[0]), "y": _batch(*batch[1])}])
