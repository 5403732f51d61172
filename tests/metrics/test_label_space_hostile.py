"""Labels outside the class space that class channels declare, and references of y_pred's shape that are not one-hot
(hostile review of the label spaces)."""

import pytest
import torch

from monai_unc.metrics import (
    CalibrationMetric,
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    ece,
    spatial_calibration_error,
)
from monai_unc.transforms import ErrorMapd, error_map


def _case(C=3):
    torch.manual_seed(0)
    lab = torch.zeros(1, 8, 8, 8, dtype=torch.long)
    lab[:, 2:6, 2:6, 2:6] = 1
    lab[:, 3:5, 3:5, 3:5] = 2
    onehot = torch.nn.functional.one_hot(lab, C).permute(0, 4, 1, 2, 3).float()
    probs = torch.softmax(torch.randn(1, C, 8, 8, 8) + 3 * onehot, 1)
    return lab, onehot, probs


@pytest.mark.parametrize("value", [3, 255])
def test_error_map_refuses_a_label_outside_the_probabilities_classes(value):
    """An ignore label 255 beside 3-class probabilities was 128 error voxels where the prediction was right."""
    lab, _, probs = _case()
    ref = lab.clone()
    ref[:, :, :, 6:] = value
    with pytest.raises(ValueError, match=f"label holds label {value} outside the classes 0..2"):
        error_map(probs[0], ref)
    with pytest.raises(ValueError, match="outside the classes 0..2"):
        ErrorMapd(pred_key="pred", label_key="label")({"pred": probs[0], "label": ref})
    with pytest.raises(ValueError, match="only 3 classes"):  # as the calibration metrics refuse it
        ece(probs, ref)


def test_error_map_in_the_classes_and_label_maps_unchanged():
    lab, onehot, probs = _case()
    e = error_map(probs[0], lab)
    assert torch.equal(e, (probs[0].argmax(0, keepdim=True) != lab).float())
    assert torch.equal(error_map(probs[0], onehot[0]), e)  # a one-hot reference of the same classes
    # two label maps declare no class space: any labels
    assert float(error_map(lab * 7, lab).sum()) > 0
    with pytest.raises(ValueError, match="3 class channels but label 4"):
        error_map(probs[0], torch.nn.functional.one_hot(lab, 4).permute(0, 4, 1, 2, 3)[0].float())


@pytest.mark.parametrize("fn", [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error])
def test_spatial_metrics_refuse_a_target_label_outside_the_classes_of_pred(fn):
    """BA-ECE moved 0.2020 -> 0.2061 with one voxel labelled 3 beside 3-class probabilities, without a word."""
    lab, _, probs = _case()
    u = torch.rand(1, 1, 8, 8, 8)
    ref = lab[:, None].clone()
    ref[0, 0, 0, 0, 0] = 3
    with pytest.raises(ValueError, match="target holds label 3 outside the classes 0..2"):
        fn(u, probs, ref)
    fn(u, probs, lab[:, None])  # in the classes: scored
    fn(u, probs.argmax(1, keepdim=True), ref)  # label maps on both sides declare no class space


def test_calibration_metric_refuses_a_y_of_y_pred_shape_that_is_not_one_hot():
    """Nested region masks (WT, TC, ET) were reduced by argmax: class 1 voxels scored as background, silently."""
    lab, onehot, probs = _case()
    regions = torch.stack([lab >= 1, lab >= 1, lab == 2], 1).float()
    with pytest.raises(ValueError, match="not one-hot"):
        CalibrationMetric(metrics=("ece",))(probs, regions)
    unlabelled = onehot.clone()
    unlabelled[..., 6:] = 0  # voxels of no class
    with pytest.raises(ValueError, match="no class or several"):
        CalibrationMetric(metrics=("ece",))(probs, unlabelled)
    with pytest.raises(ValueError, match="values other than 0 and 1"):
        CalibrationMetric(metrics=("ece",))(probs, onehot * 0.9 + 0.1 / 3)
    m = CalibrationMetric(metrics=("ece",))
    m(probs, onehot.bool())
    assert float(m.aggregate()["ece"]) == pytest.approx(ece(probs, lab))
