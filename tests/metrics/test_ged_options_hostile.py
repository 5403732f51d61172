"""``GEDMetric`` options that its variant does not use are refused, not ignored (hostile review of the API's
promises): ``variant="nonempty_iou", distance="dice"`` returned the IoU distance, and ``num_classes`` was accepted
and unused by ``variant="detection"``."""

import pytest
import torch

from monai_unc.metrics import GEDMetric, ged, ged_detection, ged_nonempty_iou


def _pair():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 2, (1, 4, 6, 6), generator=g), torch.randint(0, 2, (1, 3, 6, 6), generator=g)


@pytest.mark.parametrize("variant", ["nonempty_iou", "detection"])
def test_dice_distance_with_another_variant_is_refused(variant):
    with pytest.raises(ValueError, match="distance='dice' applies to variant='ged' only"):
        GEDMetric(variant=variant, distance="dice")


def test_num_classes_with_detection_is_refused():
    with pytest.raises(ValueError, match="num_classes does not apply to variant='detection'"):
        GEDMetric(variant="detection", num_classes=3)


def test_the_handler_refuses_them_too():
    pytest.importorskip("ignite")
    from monai_unc.handlers import GeneralizedEnergyDistance

    with pytest.raises(ValueError, match="applies to variant='ged' only"):
        GeneralizedEnergyDistance(variant="nonempty_iou", distance="dice")


def test_used_options_give_the_functions_values():
    samples, raters = _pair()
    assert GEDMetric(distance="dice")(y_pred=samples, y=raters).item() == pytest.approx(
        ged(raters[0], samples[0], distance="dice").ged)
    assert GEDMetric("nonempty_iou", num_classes=3)(y_pred=samples, y=raters).item() == pytest.approx(
        ged_nonempty_iou(raters[0], samples[0], num_classes=3).ged)
    assert GEDMetric("detection", distance="iou")(y_pred=samples, y=raters).item() == pytest.approx(
        ged_detection(raters[0], samples[0]).ged)
