"""Hostile review of the MONAI integration: UncertaintyEvaluator, CaseScoresHandler and the ignite metric handlers,
driven the way MONAI users drive them (decollated batches, plain-tensor labels, MeanDice-style output transforms,
inverted cases of different sizes). Every number is compared with the functional core called directly."""

from __future__ import annotations

import csv
import json
import math
import warnings

import numpy as np
import pytest
import torch
from ignite.engine import Events
from monai.data import DataLoader, Dataset, MetaTensor
from monai.engines.utils import default_prepare_batch
from monai.handlers import from_engine
from monai.networks.nets import UNet
from monai.transforms import Activationsd, Compose

from monai_unc.engines import CaseScoresHandler, UncertaintyEvaluator
from monai_unc.handlers import BoundaryAwareECE, BoundaryUncertaintyConcentration, QUBraTS, SpatialCalibrationError
from monai_unc.inferers import MCDropoutInferer
from monai_unc.metrics import BoundaryAwareECEMetric, QUBraTSMetric, qu_brats
from monai_unc.metrics.spatial import (
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    spatial_calibration_error,
)
from monai_unc.transforms import AggregateUncertaintyd

CPU = torch.device("cpu")
SPACING = (0.6, 1.7, 3.2)  # anisotropic, as CT and MR volumes are


def _net(out_channels: int = 3) -> UNet:
    torch.manual_seed(0)
    return UNet(3, 1, out_channels, (4, 8), (2,), dropout=0.3)


def _items(n: int = 2, plain_label: bool = True) -> list[dict]:
    """Cubes with an inner core (3 classes); the image carries an anisotropic affine, the label may be a plain
    tensor (a label built in memory, or ``EnsureTyped(track_meta=False)``)."""
    g = torch.Generator().manual_seed(0)
    affine = torch.diag(torch.tensor([*SPACING, 1.0]))
    items = []
    for i in range(n):
        lab = torch.zeros(1, 12, 12, 12)
        lab[:, 3:9, 3:9, 3:9] = 1
        lab[:, 5:7, 5:7, 5:7] = 2
        image = MetaTensor(lab + 0.3 * torch.rand(lab.shape, generator=g),
                           meta={"affine": affine, "filename_or_obj": f"case{i}.nii.gz"})
        label = lab.long() if plain_label else MetaTensor(lab.long(), meta={"affine": affine})
        items.append({"image": image, "label": label, "shift": "none" if i % 2 == 0 else "noise"})
    return items


def _run(handlers: dict, items: list[dict], postprocessing=None, batch_size: int = 2) -> tuple:
    outs: list = []
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=batch_size),
                              network=_net(), inferer=MCDropoutInferer(3, seed=0), postprocessing=postprocessing,
                              key_val_metric=handlers)
    ev.add_event_handler(Events.ITERATION_COMPLETED, lambda e: outs.extend(e.state.output))
    ev.run()
    return ev, outs


# ---------------------------------------------------------------------------------------------- spacing
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_spatial_handlers_read_the_spacing_of_the_maps_when_the_label_is_a_plain_tensor():
    """The maps carry the image affine (0.6 x 1.7 x 3.2 mm); a plain-tensor label has none. The metrics promise the
    affine of ``y`` or of ``y_pred``: the distances must be in mm of the maps' grid, not 1 mm voxels."""
    handlers = {"baece": BoundaryAwareECE(), "space": SpatialCalibrationError(sigma=3.0),
                "buc": BoundaryUncertaintyConcentration(width=3.5)}
    ev, outs = _run(handlers, _items(plain_label=True))
    u = torch.stack([o["predictive_entropy"].as_tensor() for o in outs])
    p = torch.stack([o["pred"].as_tensor() for o in outs])
    y = torch.stack([o["label"] for o in outs])
    assert not isinstance(outs[0]["label"], MetaTensor)
    ref = {
        "baece": boundary_aware_ece(u, p, y, spacing=SPACING),
        "space": spatial_calibration_error(u, p, y, spacing=SPACING, sigma=3.0),
        "buc": boundary_uncertainty_concentration(u, p, y, spacing=SPACING, width=3.5),
    }
    for name, values in ref.items():
        np.testing.assert_allclose(ev.state.metric_details[name].reshape(-1).numpy(), np.asarray(values),
                                   rtol=1e-6, err_msg=name)
    # the same numbers as with a MetaTensor label (the usual LoadImaged case)
    ev2, _ = _run({"baece": BoundaryAwareECE()}, _items(plain_label=False))
    torch.testing.assert_close(ev2.state.metric_details["baece"], ev.state.metric_details["baece"])


def test_spatial_metric_packed_batch_keeps_the_per_case_affine():
    """A batch MetaTensor uncertainty (decollate=False) with a plain label: one spacing row per case."""
    g = torch.Generator().manual_seed(1)
    y = torch.zeros(2, 1, 10, 10, 10, dtype=torch.long)
    y[:, :, 2:8, 3:7, 2:8] = 1
    p = torch.cat([1 - y, y], 1).float()
    p[:, :, 5] = torch.softmax(torch.randn(2, 2, 10, 10, generator=g), 1)
    u = torch.rand(2, 1, 10, 10, 10, generator=g)
    spacings = [(0.5, 1.0, 2.0), (1.5, 1.5, 0.8)]
    batch = MetaTensor(u, meta={"affine": torch.stack([torch.diag(torch.tensor([*s, 1.0], dtype=torch.float64))
                                                    for s in spacings])})
    batch.is_batch = True
    metric = BoundaryAwareECEMetric()
    got = metric(y_pred=p, y=y, uncertainty=batch).reshape(-1)
    for i, s in enumerate(spacings):
        assert float(got[i]) == pytest.approx(float(boundary_aware_ece(u[i:i + 1], p[i:i + 1], y[i:i + 1],
                                                                       spacing=s)[0]), rel=1e-12)


# ---------------------------------------------------------------------------------------------- (pred, label)
@pytest.mark.parametrize("handler", [BoundaryAwareECE, SpatialCalibrationError, BoundaryUncertaintyConcentration])
def test_spatial_handlers_refuse_plain_probabilities_as_a_packed_pair(handler):
    """``output_transform=from_engine(["pred", "label"])`` (the MeanDice / CalibrationHandler habit) hands the
    handler class probabilities, whose channel 0 would be read as the uncertainty map: refuse, do not score it."""
    h = handler(output_transform=from_engine(["pred", "label"]))
    with pytest.raises(ValueError, match="uncertainty"):
        _run({"m": h}, _items())


def test_spatial_handlers_still_take_a_packed_pair():
    """A genuinely packed ``(cat([u, pred]), label)`` keeps working and equals the functional core."""
    def packed(output):
        return ([torch.cat([o["predictive_entropy"], o["pred"]]) for o in output], [o["label"] for o in output])

    ev, outs = _run({"baece": BoundaryAwareECE(output_transform=packed)}, _items(plain_label=False))
    u = torch.stack([o["predictive_entropy"].as_tensor() for o in outs])
    p = torch.stack([o["pred"].as_tensor() for o in outs])
    y = torch.stack([o["label"].as_tensor() for o in outs])
    np.testing.assert_allclose(ev.state.metric_details["baece"].reshape(-1).numpy(),
                               np.asarray(boundary_aware_ece(u, p, y, spacing=SPACING)), rtol=1e-6)


# ---------------------------------------------------------------------------------------------- case scores
def test_case_scores_handler_refuses_a_map_as_a_case_score():
    """``CaseScoresHandler("mutual_information")`` (the map, not its ``_mean``) used to take the first voxel of each
    map as the case score and report an OoD AUROC of it."""
    items = _items(4)
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=_net(),
                              inferer=MCDropoutInferer(3, seed=0),
                              val_handlers=[CaseScoresHandler("mutual_information")])
    with pytest.raises(ValueError, match="mutual_information.*one number per case"):
        ev.run()


def test_case_scores_handler_accepts_one_element_scores():
    items = _items(4)
    post = AggregateUncertaintyd("mutual_information")
    handler = CaseScoresHandler("mutual_information_mean")
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=_net(),
                              inferer=MCDropoutInferer(3, seed=0), postprocessing=post, val_handlers=[handler])
    ev.run()
    assert 0.0 <= ev.state.metrics["ood_auroc_mutual_information_mean"] <= 1.0


# ---------------------------------------------------------------------------------------------- QU-BraTS
def test_qu_brats_handler_takes_decollated_cases_of_different_sizes():
    """After ``Invertd`` each decollated case has its own original shape; the handler must score each case, not
    stack them (which raised a RuntimeError)."""
    g = torch.Generator().manual_seed(0)
    shapes = [(8, 8, 8), (6, 9, 7)]
    cases = []
    for s in shapes:
        target = torch.rand(3, *s, generator=g) > 0.6
        probs = (target.float() * 0.7 + 0.3 * torch.rand(3, *s, generator=g)).clamp(0, 1)
        unc = 100 * torch.rand(3, *s, generator=g)
        cases.append({"predictive_entropy": unc, "pred": probs, "label": target.float()})
    metric = QUBraTSMetric(reduction="none")
    got = metric([c["pred"] for c in cases], [c["label"] for c in cases],
                 uncertainty=[c["predictive_entropy"] for c in cases])
    assert tuple(got.shape) == (2, 3)
    for i, c in enumerate(cases):
        for r in range(3):
            ref = qu_brats(c["predictive_entropy"][r], c["pred"][r] > 0.5, c["label"][r] > 0.5).score
            assert float(got[i, r]) == pytest.approx(ref, abs=1e-12)
    handler = QUBraTS()

    class _Engine:
        class state:  # noqa: N801 (an ignite-like state)
            output = cases

    handler.update(handler._output_transform(_Engine.state.output))
    assert tuple(handler.metric_fn.get_buffer().shape) == (2, 3)


# ---------------------------------------------------------------------------------------------- pred format
def test_pred_format_auto_sees_a_positional_postprocessing():
    """``SupervisedEvaluator``'s arguments may be given by position; the softmax in a positional postprocessing must
    still make ``pred`` ``log(mean p)``, or the softmax flattens the mean probabilities."""
    items = _items(2)
    post = Compose([Activationsd("pred", softmax=True)])
    loader = DataLoader(Dataset(items), batch_size=2)
    inferer = MCDropoutInferer(3, seed=0)
    ev = UncertaintyEvaluator(CPU, loader, _net(), None, False, default_prepare_batch,
                              None, inferer, post)
    assert ev.pred_format == "log_probabilities"
    outs: list = []
    ev.add_event_handler(Events.ITERATION_COMPLETED, lambda e: outs.extend(e.state.output))
    ev.run()
    net = _net()
    net.load_state_dict(ev.network.state_dict())
    expected = MCDropoutInferer(3, seed=0)(torch.stack([it["image"].as_tensor() for it in items]), net.eval())["pred"]
    for i, o in enumerate(outs):
        torch.testing.assert_close(o["pred"].as_tensor(), expected[i], rtol=0, atol=2e-6)
    assert math.isclose(float(outs[0]["pred"].sum(0).mean()), 1.0, abs_tol=1e-5)


def test_case_scores_handler_attached_twice_counts_each_case_once(tmp_path):
    """A handler in ``val_handlers`` and attached again by hand (as ignite metrics allow) wrote every case twice."""
    import csv

    items = _items(4)
    handler = CaseScoresHandler("mutual_information_mean", output_dir=tmp_path)
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=_net(),
                              inferer=MCDropoutInferer(3, seed=0),
                              postprocessing=AggregateUncertaintyd("mutual_information"), val_handlers=[handler])
    handler.attach(ev)
    ev.run()
    with open(tmp_path / "case_scores.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["case"] for r in rows] == [f"case{i}.nii.gz" for i in range(4)]


def test_bad_arguments_name_the_argument():
    with pytest.raises(TypeError, match="score_keys"):
        CaseScoresHandler(5)
    with pytest.raises(TypeError, match="iid_groups"):
        CaseScoresHandler("a", iid_groups=None)
    with pytest.raises(ValueError, match="iid_groups"):
        CaseScoresHandler("a", iid_groups=[])
    with pytest.raises(TypeError, match="uncertainty_keys"):
        UncertaintyEvaluator(device=CPU, val_data_loader=[], network=_net(), uncertainty_keys=5)
    assert CaseScoresHandler("a", iid_groups=[0, 1]).iid_groups == {"0", "1"}  # numeric labels of a datalist


def test_boundary_aware_ece_normalize_must_be_a_bool():
    """``"normalize": "false"`` (a string from a bundle override) min-max rescaled the uncertainty."""
    with pytest.raises(TypeError, match="normalize"):
        BoundaryAwareECE(normalize="false")
    y = torch.zeros(1, 1, 8, 8, 8, dtype=torch.long)
    y[:, :, 2:6, 2:6, 2:6] = 1
    p = torch.cat([1 - y, y], 1).float()
    with pytest.raises(TypeError, match="normalize"):
        boundary_aware_ece(torch.rand(1, 1, 8, 8, 8), p, y, normalize="false")


def test_pred_format_auto_sees_a_post_processing_handler():
    """MONAI's ``PostProcessing`` handler in ``val_handlers`` runs its transforms on ``engine.state.output`` like the
    ``postprocessing`` argument: its softmax flattened the stored mean probabilities (wrong ECE / NLL)."""
    from monai.handlers import PostProcessing

    from monai_unc.handlers import CalibrationHandler
    from monai_unc.metrics.calibration import nll

    items = _items(2)
    post = PostProcessing(Compose([Activationsd("pred", softmax=True)]))
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=_net(),
                              inferer=MCDropoutInferer(3, seed=0), val_handlers=[post],
                              key_val_metric={"calib": CalibrationHandler(num_classes=3, metrics=["nll"],
                                                                          output_transform=from_engine(["pred",
                                                                                                        "label"]))})
    assert ev.pred_format == "log_probabilities"
    ev.run()
    expected = MCDropoutInferer(3, seed=0)(torch.stack([it["image"].as_tensor() for it in items]), _net().eval())
    labels = torch.stack([it["label"] for it in items])
    assert ev.state.metrics["calib_nll"] == pytest.approx(float(nll(expected["pred"], labels)), rel=1e-5)


def _run_case_scores(handler: CaseScoresHandler, cases: list[tuple[str, str, float]], key: str) -> dict:
    """``handler`` on an ignite engine whose output and batch are the decollated cases ``(id, group, score)``."""
    from ignite.engine import Engine

    data = [[{"image": MetaTensor(torch.zeros(1, 2, 2, 2), meta={"filename_or_obj": cid}), "shift": group,
              key: torch.tensor(score)}] for cid, group, score in cases]
    engine = Engine(lambda e, b: b)
    handler.attach(engine)
    engine.run(data, max_epochs=1)
    return engine.state.metrics


def test_case_scores_handler_and_evaluate_give_one_ood_auroc(tmp_path):
    """Found by hostile testing: for the same scores and shift labels ``monai-unc evaluate --shifts`` gave an OoD
    AUROC of 0.25 and ``CaseScoresHandler`` 1.0: evaluate read ``""``, ``none``, ``iid``, ``id``, ``clean`` and
    ``in-distribution`` as in-distribution, case-insensitively, the handler ``"none"`` alone, exactly; and a case
    without a defined score (``fg_mean`` of an empty predicted foreground) ranked most uncertain in evaluate but was
    left out by the handler. Both now use ``IID_SHIFTS`` / ``is_in_distribution`` and ``ood_auroc_by_shift``."""
    from monai_unc.evaluation import IID_SHIFTS  # the evaluation's constant (the one of monai_unc.metrics)
    from monai_unc.metrics import ood_auroc
    from tests.report._hostile_cohorts import ball, binary_probs, evaluate, write_cases

    lab = ball(4)
    confidence = {"c0": 0.95, "c1": 0.7, "c2": 0.9, "c3": 0.8, "c4": 0.85, "c5": None, "c6": 0.75}
    cases = {cid: (binary_probs(np.where(lab == 1, 0.3 if p is None else p, 0.05)), lab)  # c5: nothing predicted
             for cid, p in confidence.items()}
    labels = {"c0": "none", "c1": "noise", "c2": "Clean", "c3": "blur", "c4": " None ", "c5": "", "c6": "noise"}
    data = write_cases(tmp_path / "data", cases, shifts=labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        evaluate(data, tmp_path / "eval", "--no-spatial")
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    key = summary["score"]["column"]
    rows = list(csv.DictReader(open(tmp_path / "eval" / "metrics.csv", encoding="utf-8")))
    scores = {r["case"]: float(r[key]) for r in rows}
    assert math.isnan(scores["c5"]) and summary["score"]["undefined"] == ["c5"]  # the undefined score of the defect
    assert summary["ood"]["n_iid"] == 4 and summary["ood"]["n_ood"] == 3
    with pytest.warns(UserWarning, match="ranked as the most uncertain"):
        metrics = _run_case_scores(CaseScoresHandler(key), [(c, labels[c], scores[c]) for c in labels], key)
    assert metrics[f"ood_auroc_{key}"] == pytest.approx(summary["ood"]["auroc"])
    assert CaseScoresHandler(key).iid_groups == set(IID_SHIFTS)
    # an explicit iid_groups is still the set of in-distribution labels (compared the same way)
    with pytest.warns(UserWarning, match="ranked as the most uncertain"):
        metrics = _run_case_scores(CaseScoresHandler(key, iid_groups=["NONE"]), [(c, labels[c], scores[c])
                                                                               for c in labels], key)
    iid = [scores[c] for c in ("c0", "c4")]
    ood = [scores[c] for c in ("c1", "c2", "c3", "c6")] + [max(v for v in scores.values() if v == v) + 1.0]
    assert metrics[f"ood_auroc_{key}"] == pytest.approx(ood_auroc(iid, ood))


def test_case_scores_handler_reads_a_nan_group_label_as_an_empty_one():
    """A datalist built by pandas has NaN where the shift table's cell is empty: the handler read it as the shift
    ``"nan"`` (found by hostile testing), ``monai-unc evaluate`` reads the cell as ``""``, in-distribution."""
    cases = [("a", float("nan"), 0.9), ("b", float("nan"), 0.8), ("c", "none", 0.1), ("d", "noise", 0.5),
             ("e", "noise", 0.6)]
    metrics = _run_case_scores(CaseScoresHandler("s"), cases, "s")
    assert metrics["ood_auroc_s"] == pytest.approx(1 / 3)  # a, b, c in-distribution (1.0 with a, b shifted)


def test_case_scores_handler_numeric_group_labels_without_decollation(tmp_path):
    """A number of the datalist as the group label (collated into a tensor with ``decollate=False``) is the same label
    as after decollation: the CSV says 0 / 1 (not ``tensor(0)``) and the AUROC is that of the decollated run."""
    items = [{"image": MetaTensor(torch.rand(1, 8, 8, 8, generator=torch.Generator().manual_seed(i)) * (1 + i),
                                  meta={"filename_or_obj": f"c{i}"}),
              "label": torch.zeros(1, 8, 8, 8, dtype=torch.long), "shift": i % 2} for i in range(6)]
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(0.3), torch.nn.Conv3d(4, 3, 1))
    found = {}
    for decollate in (True, False):
        out = tmp_path / str(decollate)
        if decollate:
            post = AggregateUncertaintyd("mutual_information", "mean")
        else:
            def post(d):  # the per-case mean of a batch, as AggregateUncertaintyd computes it per case
                return {**d, "mutual_information_mean": d["mutual_information"].as_tensor().double().mean((1, 2, 3, 4))}
        evaluator = UncertaintyEvaluator(
            device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=net,
            inferer=MCDropoutInferer(num_samples=4, seed=0), postprocessing=post, decollate=decollate,
            val_handlers=[CaseScoresHandler("mutual_information_mean", iid_groups=[0], output_dir=out)],
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*needs cases inside and outside", category=UserWarning)
            evaluator.run()
        with open(out / "case_scores.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert [r["shift"] for r in rows] == ["0", "1"] * 3
        found[decollate] = evaluator.state.metrics["ood_auroc_mutual_information_mean"]
    assert not math.isnan(found[True])
    assert found[False] == pytest.approx(found[True], abs=1e-12)


@pytest.mark.parametrize("key_metric", [None, "nll"])
def test_calibration_handler_as_a_key_metric_selects_and_saves_the_best_checkpoint(tmp_path, key_metric):
    """Found by a review of a MONAI user's scripts: ``CalibrationHandler`` as a workflow's ``key_val_metric`` stored a
    dict under its name, so MONAI skipped it ("Key metric is not a scalar value"), never set a best metric, and
    ``CheckpointSaver(save_key_metric=True)`` saved the network as ``net_key_metric=-1.pt`` (MONAI's initial best).
    With ``key_metric`` the named metric's float is there."""
    from monai.handlers import CheckpointSaver

    from monai_unc.handlers import CalibrationHandler
    from monai_unc.metrics.calibration import nll

    items = _items(2)
    net = _net()
    handler = CalibrationHandler(num_classes=3, metrics=["ece", "nll"], key_metric=key_metric,
                                 output_transform=from_engine(["pred", "label"]))
    saver = CheckpointSaver(save_dir=str(tmp_path), save_dict={"net": net}, save_key_metric=True)
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=net,
                              inferer=MCDropoutInferer(3, seed=0), val_handlers=[saver],
                              key_val_metric={"calib": handler},
                              metric_cmp_fn=lambda current, prev: prev < 0 or current < prev)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ev.run()
    not_scalar = [w for w in caught if "Key metric is not a scalar" in str(w.message)]
    expected = MCDropoutInferer(3, seed=0)(torch.stack([it["image"].as_tensor() for it in items]), _net().eval())
    want = float(nll(expected["pred"], torch.stack([it["label"] for it in items])))
    assert ev.state.metrics["calib_nll"] == pytest.approx(want, rel=1e-5)  # the flat keys either way
    if key_metric is None:  # the documented dict under the name: MONAI cannot compare it
        assert isinstance(ev.state.metrics["calib"], dict) and not_scalar
        assert [p.name for p in tmp_path.glob("*.pt")] == ["net_key_metric=-1.pt"]
    else:
        assert ev.state.metrics["calib"] == ev.state.metrics["calib_nll"] and not not_scalar
        assert ev.state.best_metric == pytest.approx(want, rel=1e-5)
        assert [p.name for p in tmp_path.glob("*.pt")] == [f"net_key_metric={ev.state.best_metric:.4f}.pt"]


@pytest.mark.parametrize("bad", ["mce", 3, ""])
def test_calibration_handler_key_metric_must_be_one_of_its_metrics(bad):
    from monai_unc.handlers import CalibrationHandler

    with pytest.raises(ValueError, match="key_metric must be one of the handler's metrics"):
        CalibrationHandler(num_classes=3, metrics=["ece", "nll"], key_metric=bad)


def test_calibration_key_metric_checkpoint_recipe_keeps_the_best_epoch(tmp_path):
    """Found by hostile testing of the handlers: the documented recipe (``key_metric`` and the workflow's
    ``metric_cmp_fn``) set ``best_metric_epoch`` right, but ``CheckpointSaver(save_key_metric=True)`` ranks
    checkpoints by its own score, the highest first, and kept the epoch of the worst ECE. The recipe now names
    ``key_metric_negative_sign=True``; over several epochs the one checkpoint kept is the best epoch's."""
    from monai.handlers import CheckpointSaver

    from monai_unc.handlers import CalibrationHandler
    from monai_unc.handlers.calibration import CalibrationHandler as documented

    doc = " ".join((documented.__doc__ or "").split())
    assert "key_metric_negative_sign=True" in doc
    assert "metric_cmp_fn=lambda current, prev: prev < 0 or current < prev" in doc
    items = _items(2)
    net = _net()
    handler = CalibrationHandler(num_classes=3, metrics=["ece"], key_metric="ece",
                                 output_transform=from_engine(["pred", "label"]))
    saver = CheckpointSaver(save_dir=str(tmp_path), save_dict={"net": net}, save_key_metric=True,
                            key_metric_negative_sign=True)
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(items), batch_size=2), network=net,
                              inferer=MCDropoutInferer(3, seed=0), val_handlers=[saver],
                              key_val_metric={"calib": handler},
                              metric_cmp_fn=lambda current, prev: prev < 0 or current < prev)
    seen = {}
    ev.add_event_handler(Events.EPOCH_COMPLETED, lambda e: seen.__setitem__(e.state.epoch, e.state.metrics["calib"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for epoch, scale in enumerate((1.0, 0.0, 3.0), start=1):  # three networks, three different ECEs
            with torch.no_grad():
                for p, p0 in zip(net.parameters(), _net().parameters()):
                    p.copy_(p0 * scale if p.ndim > 1 else p0)
            ev.run(global_epoch=epoch)
    best_epoch = min(seen, key=seen.get)
    assert len(set(seen.values())) == 3 and best_epoch != max(seen, key=seen.get)
    assert ev.state.best_metric_epoch == best_epoch and ev.state.best_metric == seen[best_epoch]
    assert [p.name for p in tmp_path.glob("*.pt")] == [f"net_key_metric={-seen[best_epoch]:.4f}.pt"]


@pytest.mark.parametrize("extra", ["per_case_list", "nested_dict"])
def test_case_scores_of_an_undecollated_batch_with_other_datalist_entries(tmp_path, extra):
    """Found by hostile testing: with ``decollate=False`` the batch size was read from the batch's first entry and every
    entry indexed by case. A per-case list in the datalist (collated as one list per position: length 1 here, batch
    size 2) silently dropped the second case of every batch from the CSV and the AUROC (NaN: no OoD case left); a
    nested dict (a meta dict) raised a bare ``KeyError: 0``."""
    from ignite.engine import Engine

    names = ["a", "b", "c", "d"]
    items = []
    for name, shift in zip(names, ["none", "blur", "none", "blur"]):
        item = {"image": MetaTensor(torch.zeros(1, 2, 2, 2), meta={"filename_or_obj": f"{name}.nii.gz"}),
                "shift": shift}
        item = {"raters": [f"{name}_r1.nii.gz"], **item} if extra == "per_case_list" else {"site": {"id": name}, **item}
        items.append(item)

    def step(engine, batch):
        return {"mi_mean": torch.tensor([0.1, 0.9])[: len(batch["shift"])], "image": batch["image"]}

    engine = Engine(step)
    CaseScoresHandler("mi_mean", output_dir=tmp_path).attach(engine)
    engine.run(DataLoader(Dataset(items), batch_size=2))
    with open(tmp_path / "case_scores.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["case"] for r in rows] == [f"{n}.nii.gz" for n in names]
    assert [r["shift"] for r in rows] == ["none", "blur"] * 2
    assert [float(r["mi_mean"]) for r in rows] == pytest.approx([0.1, 0.9] * 2)
    assert engine.state.metrics["ood_auroc_mi_mean"] == 1.0


def test_case_scores_refuse_an_output_and_a_batch_of_different_sizes():
    from ignite.engine import Engine

    batch = {"image": torch.zeros(2, 1, 2, 2, 2), "shift": ["none", "blur"]}
    engine = Engine(lambda e, b: {"mi_mean": torch.tensor([0.1, 0.9, 0.5])})
    CaseScoresHandler("mi_mean").attach(engine)
    with pytest.raises(ValueError, match="the output holds 3 case"):
        engine.run([batch])


@pytest.mark.parametrize("score", [np.array([[0.1], [0.9]]), np.array([0.1, 0.9]), torch.tensor([[0.1], [0.9]]),
                                   [0.1, 0.9]])
def test_case_scores_of_an_undecollated_output_of_any_array_type(score):
    """Each row of an undecollated score (numpy, torch, list; ``(B,)`` or ``(B, 1)``) is one case, beside a batch
    entry that is no batch row (MONAI's ``decollate_batch`` reads a ``(B, 1)`` numpy array as one case)."""
    from ignite.engine import Engine

    batch = {"meta": {"site": "x"}, "image": torch.zeros(2, 1, 2, 2, 2), "shift": ["none", "blur"]}
    engine = Engine(lambda e, b: {"mi_mean": score})
    CaseScoresHandler("mi_mean").attach(engine)
    engine.run([batch])
    assert engine.state.metrics["ood_auroc_mi_mean"] == 1.0


def test_case_scores_of_an_undecollated_output_without_the_score_name_the_missing_key():
    """``decollate=False`` and no score key in the output (AggregateUncertaintyd forgotten, a misspelt key): the
    ``KeyError`` names the key, as for a decollated output (found by review36: a batch of two cases was refused as
    "the output holds 1 case(s) but the batch 2")."""
    from ignite.engine import Engine

    batch = {"image": torch.zeros(2, 1, 2, 2, 2), "shift": ["none", "blur"]}
    engine = Engine(lambda e, b: {"pred": torch.zeros(2, 2, 2, 2, 2), "mutual_information": torch.zeros(2, 1, 2, 2, 2)})
    CaseScoresHandler("mutual_information_mean").attach(engine)
    with pytest.raises(KeyError, match=r"has no \['mutual_information_mean'\] \(add AggregateUncertaintyd\)"):
        engine.run([batch])
