"""Hostile review of the MONAI conventions of the metric classes (reductions, discretised inputs, channel layout).

Each test drives a metric class or ignite handler the way a MONAI user drives ``DiceMetric`` / ``MeanDice`` and
compares the aggregated number with a numpy computation over all the cases at once.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.metrics import GEDMetric


def _iou_distance(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return 0.0 if union == 0 else 1.0 - np.logical_and(a, b).sum() / union


def _ged_terms(raters: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """(ged, cross, reference diversity, sample diversity) of binary masks over every ordered pair."""
    cross = np.mean([_iou_distance(s, r) for s in samples for r in raters])
    div_ref = np.mean([_iou_distance(a, b) for a in raters for b in raters])
    div_smp = np.mean([_iou_distance(a, b) for a in samples for b in samples])
    return np.array([2 * cross - div_ref - div_smp, cross, div_ref, div_smp])


def test_ged_metric_with_terms_aggregates_each_term_not_their_mixture():
    """``GEDMetric(return_terms=True).aggregate()`` was MONAI's "mean" of each case's row (ged, cross and both
    diversities averaged together): 0.567 where the cohort's GED is 0.406. It now reduces per column by default and
    refuses the reductions across the channel axis."""
    rng = np.random.default_rng(0)
    raters = (rng.random((4, 3, 6, 6, 5)) > 0.6).astype(np.int64)
    samples = (rng.random((4, 5, 6, 6, 5)) > 0.6).astype(np.int64)
    expected = np.mean([_ged_terms(raters[i], samples[i]) for i in range(4)], axis=0)

    metric = GEDMetric(return_terms=True)
    metric(torch.from_numpy(samples[:3]), torch.from_numpy(raters[:3]))
    metric(torch.from_numpy(samples[3:]), torch.from_numpy(raters[3:]))
    np.testing.assert_allclose(metric.aggregate().numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(metric.aggregate("sum_batch").numpy(), 4 * expected, atol=1e-5)
    assert metric.aggregate("none").shape == (4, 4)
    for bad in ("mean", "sum", "mean_channel", "sum_channel"):
        with pytest.raises(ValueError, match=f"reduction='{bad}' .* return_terms=True"):
            metric.aggregate(bad)
        with pytest.raises(ValueError, match=f"reduction='{bad}' .* return_terms=True"):
            GEDMetric(return_terms=True, reduction=bad)
    # without the terms the default stays MONAI's "mean" of the one GED column
    plain = GEDMetric()
    plain(torch.from_numpy(samples), torch.from_numpy(raters))
    assert float(plain.aggregate()) == pytest.approx(expected[0], abs=1e-6)
    assert float(plain.aggregate("mean_channel")[0]) == pytest.approx(_ged_terms(raters[0], samples[0])[0], abs=1e-6)


def test_calibration_handler_warns_about_a_discretised_prediction_in_a_monai_evaluator():
    """A Model Zoo style postprocessing (softmax, then ``AsDiscreted(argmax=True, to_onehot=C)`` for ``MeanDice``)
    handed ``CalibrationHandler`` one-hot masks, which passed as probabilities: ECE 0.618 (the error rate) and NLL
    21.3 where the probabilities' ECE is 0.355, without a word. The value is still that of the masks (a hard
    prediction is a valid, if degenerate, forecast), now with a ``UserWarning``; probabilities stay silent."""
    import warnings

    from monai.data import DataLoader, Dataset
    from monai.engines import SupervisedEvaluator
    from monai.handlers import MeanDice, from_engine
    from monai.transforms import Activationsd, AsDiscreted, Compose, CopyItemsd

    from monai_unc.handlers import CalibrationHandler

    torch.manual_seed(0)
    c = 3
    items = [{"image": torch.randn(c, 6, 6, 5) * 2, "label": torch.randint(0, c, (1, 6, 6, 5))} for _ in range(4)]
    probs = np.concatenate([torch.softmax(it["image"], 0).numpy().reshape(c, -1) for it in items], 1).astype(float)
    labels = np.concatenate([it["label"].numpy().reshape(-1) for it in items])
    conf, correct = probs.max(0), probs.argmax(0) == labels
    bins = np.minimum((conf * 15).astype(int), 14)
    ece = sum(abs(correct[bins == k].mean() - conf[bins == k].mean()) * (bins == k).sum()
              for k in range(15) if (bins == k).any()) / len(labels)

    def run(post, key):
        evaluator = SupervisedEvaluator(
            device=torch.device("cpu"), val_data_loader=DataLoader(Dataset(items), batch_size=2),
            network=torch.nn.Identity(), postprocessing=post,
            key_val_metric={"dice": MeanDice(output_transform=from_engine(["seg", "label"]))},
            additional_metrics={"calib": CalibrationHandler(num_classes=c, metrics=("ece",),
                                                            output_transform=from_engine([key, "label"]))})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            evaluator.run()
        return evaluator.state.metrics["calib_ece"], [str(w.message) for w in caught if "discretised" in str(w.message)]

    onehot = AsDiscreted(["seg", "label"], argmax=[True, False], to_onehot=c)
    post = Compose([Activationsd("pred", softmax=True), CopyItemsd("pred", names="seg"), onehot])
    value, messages = run(post, "seg")
    assert value == pytest.approx(1 - correct.mean(), abs=1e-12)  # the masks' ECE: the error rate
    assert messages and "AsDiscreted(argmax=True" in messages[0]
    # the probabilities (copied before discretising, as the docs show): the numpy ECE, no warning
    value, messages = run(post, "pred")
    assert value == pytest.approx(ece, abs=1e-12)
    assert messages == []


def test_ncc_refuses_class_probabilities_given_as_the_uncertainty_map():
    """``NormalizedCrossCorrelation(output_transform=from_engine(["pred", "label"]))`` (the ``MeanDice`` habit) after
    ``AsDiscreted("label", to_onehot=2)`` correlated the class probabilities with the one-hot label, channels
    flattened together: "NCC" 0.966 without a word, where the docs want one uncertainty map ``(B, 1, *spatial)``."""
    from ignite.engine import Engine
    from monai.handlers import from_engine

    from monai_unc.handlers import NormalizedCrossCorrelation
    from monai_unc.metrics import NCCMetric

    torch.manual_seed(0)
    label = torch.randint(0, 2, (3, 6, 6, 5))
    onehot = torch.nn.functional.one_hot(label, 2).permute(0, 4, 1, 2, 3).float()
    probs = torch.softmax(3 * onehot + torch.randn(3, 2, 6, 6, 5), dim=1)
    outputs = [[{"pred": probs[i], "label": onehot[i]}] for i in range(3)]
    engine = Engine(lambda e, batch: batch)
    NormalizedCrossCorrelation(output_transform=from_engine(["pred", "label"])).attach(engine, "ncc")
    with pytest.raises(ValueError, match=r"y_pred must be one uncertainty map per case \(B, 1, \*spatial\), got shape "
                                         r"\(1, 2, 6, 6, 5\)"):
        engine.run(outputs)
    with pytest.raises(ValueError, match="one uncertainty map per case"):
        NCCMetric()(probs, onehot)
    # one map per case against a reference map: numpy's correlation of the two, as before
    unc = 1 - probs.amax(1, keepdim=True)
    ref = (probs[:, :1] - 0.5).abs()
    expected = np.mean([np.corrcoef(unc[i].ravel().numpy(), ref[i].ravel().numpy())[0, 1] for i in range(3)])
    metric = NCCMetric()
    metric(unc, ref)
    assert float(metric.aggregate()) == pytest.approx(expected, abs=1e-6)
